"""What ``notebooks/06_transfer.ipynb`` calls: build the available external benchmarks, run agents, report.

Benchmarks that need a database or server you supply are built only when it is given
(``resources={"ehrsql-2022-mimic-iii": {"db": "..."}, "medagentbench-v2": {"fhir_url": "..."}}``); the
others are listed as skipped with the reason. Without an LLM (no ``model`` and no ``EHRGYM_MODEL``) only the scripted baselines that
make sense on these benchmarks run: ``external-oracle`` (the ceiling) and ``external-abstain``
(the floor: RS(c) equals the share of unanswerable questions).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ehrgym.external.base import ADAPTERS, ExternalDataError, build_external

SCRIPTED_BASELINES: tuple[str, ...] = ("external-oracle", "external-abstain")


def llm_configured(model: str | None = None) -> bool:
    return bool(model or os.environ.get("EHRGYM_MODEL"))


def agents_to_run(agents: Sequence[str] | None, model: str | None = None) -> tuple[list[str], str]:
    """The agents of this run and a sentence saying why (LLM agents need a model)."""
    wanted = list(agents) if agents else list(SCRIPTED_BASELINES) + ["chat"]
    if llm_configured(model):
        return wanted, "an LLM is configured: running " + ", ".join(wanted)
    kept = [a for a in wanted if a in SCRIPTED_BASELINES]
    return kept or list(SCRIPTED_BASELINES), ("no LLM configured (set `model` or EHRGYM_MODEL): running the scripted "
                                              "baselines " + ", ".join(kept or SCRIPTED_BASELINES) + " only")


@dataclass
class TransferRun:
    built: dict[str, Path] = field(default_factory=dict)        # benchmark -> build directory
    skipped: dict[str, str] = field(default_factory=dict)       # benchmark -> why
    run_dirs: list[Path] = field(default_factory=list)


def build_and_run(benchmarks: Sequence[str], agents: Sequence[str], out_dir: str | Path, *,
                  data: str | Path | None = None, resources: dict[str, dict[str, Any]] | None = None,
                  split: str | None = "dev", limit: int | None = None, k: int = 1, workers: int = 1,
                  model: str | None = None, base_url: str | None = None, progress: bool = True) -> TransferRun:
    """Build (or reuse) each benchmark under ``out_dir/bench/NAME`` and run every agent on it."""
    from ehrgym.eval.runner import run_evaluation

    out = Path(out_dir)
    result = TransferRun()
    for name in benchmarks:
        adapter = ADAPTERS.get(name)
        bench_dir = out / "bench" / name
        given = dict((resources or {}).get(name, {}))
        if not (bench_dir / "manifest.json").exists():
            try:
                folder = Path(data) / adapter.data_folder if data else None
                build_external(name, bench_dir, folder, **given)
            except ExternalDataError as exc:
                result.skipped[name] = str(exc)
                continue
        result.built[name] = bench_dir
        manifest = json.loads((bench_dir / "manifest.json").read_text(encoding="utf-8"))
        db = manifest["db_path"]
        # a benchmark without that split (MedAgentBench has only test) runs whole
        splits = (manifest.get("task_counts") or {}).get("by_split") or {}
        selection = {"split": split} if split and split in splits else None
        for agent in agents:
            kwargs = {key: v for key, v in {"model": model, "base_url": base_url}.items() if v} \
                if agent not in SCRIPTED_BASELINES else {}
            if agent == "chat":   # schema-neutral: the first observation names the tables (or FHIR functions)
                kwargs["prompt"] = "fhir" if "fhir_url" in adapter.needs else "external"
            run_dir = out / "runs" / name / (agent + (f"-{model}" if kwargs.get("model") else ""))
            run_evaluation(bench_dir, db, agent, run_dir, k=k, workers=workers, agent_kwargs=kwargs,
                           tasks=selection, limit_pairs=limit, progress=progress)
            result.run_dirs.append(run_dir)
    return result


def transfer_report(run_dirs: Sequence[str | Path], out_dir: str | Path, gym_runs: Sequence[str | Path] = ()) -> Any:
    """Write the transfer table and figure for these runs (plus gym runs to compare); returns the table."""
    import pandas as pd

    from ehrgym.report.build import build_report

    out = Path(out_dir)
    build_report(list(run_dirs) + list(gym_runs), None, out / "tables", out / "figures", n_boot=100, seed=0,
                 tables=["transfer", "transfer_by_task_type"], figures=["transfer"], progress=False)
    return pd.read_csv(out / "tables" / "transfer.csv")
