"""Transfer metrics of evaluation runs on external benchmarks (one row per run).

A run directory of ``ehrgym eval run`` on an external benchmark holds one episode per (task,
trial). Its metrics are computed per trial with :func:`ehrgym.external.scoring.transfer_metrics`
(RS(c), answer accuracy, abstention precision/recall) and averaged over the trials.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from ehrgym.eval.store import EpisodeStore, read_run_config
from ehrgym.external.scoring import outcome_from_record, transfer_metrics

METRIC_COLUMNS: tuple[str, ...] = ("RS(0)", "RS(5)", "RS(10)", "RS(N)", "answer_accuracy",
                                   "abstention_precision", "abstention_recall", "success_rate")


def run_benchmark(run_dir: str | Path) -> dict[str, Any] | None:
    """The manifest of the benchmark a run used, when it is an external one (None otherwise)."""
    config = read_run_config(run_dir) or {}
    bench = config.get("bench_dir")
    if not bench or not (Path(bench) / "manifest.json").exists():
        return None
    manifest = json.loads((Path(bench) / "manifest.json").read_text(encoding="utf-8"))
    return manifest if manifest.get("kind") == "external" else None


def run_transfer_row(run_dir: str | Path) -> dict[str, Any] | None:
    """Per-trial-averaged transfer metrics of an external-benchmark run (None for a gym run)."""
    manifest = run_benchmark(run_dir)
    if manifest is None:
        return None
    config = read_run_config(run_dir) or {}
    by_trial: dict[int, list[Any]] = defaultdict(list)
    for rec in EpisodeStore(Path(run_dir)).records():
        if rec.success_strict is None:   # infrastructure errors are excluded, as in the gym metrics
            continue
        by_trial[rec.trial].append(outcome_from_record(rec))
    per_trial = [transfer_metrics(outcomes) for _, outcomes in sorted(by_trial.items())]
    row: dict[str, Any] = {"benchmark": manifest.get("benchmark"), "system": _system(config),
                           "run_dir": str(run_dir), "trials": len(per_trial),
                           "questions": per_trial[0]["questions"] if per_trial else 0}
    for col in METRIC_COLUMNS:
        values = [m[col] for m in per_trial if not math.isnan(m[col])]
        row[col] = sum(values) / len(values) if values else float("nan")
    return row


def _system(config: dict[str, Any]) -> str:
    agent = str(config.get("agent", "?"))
    model = config.get("model")
    return f"{agent}/{model}" if model else agent


def transfer_rows(run_dirs: list[str | Path]) -> list[dict[str, Any]]:
    rows = [run_transfer_row(d) for d in run_dirs]
    return sorted((r for r in rows if r is not None), key=lambda r: (r["benchmark"], r["system"]))


def transfer_frame(episodes: Any) -> Any:
    """One row per (benchmark, system) from a report's episodes (``ehrgym.eval.metrics.load_episodes``).

    Gym runs appear as benchmark ``ehr-robustgym``; external runs under their benchmark's name.
    Each row: RS(0/5/10/N), answer accuracy, abstention precision/recall (%, mean over trials)."""
    import pandas as pd

    from ehrgym.external.scoring import Outcome

    columns = ["benchmark", "system", "trials", "questions", *METRIC_COLUMNS]
    if episodes is None or len(episodes) == 0:
        return pd.DataFrame(columns=columns)
    rows = []
    for (rundir, system), eps in episodes.groupby(["rundir", "system"], sort=True):
        manifest = run_benchmark(rundir)
        benchmark = manifest.get("benchmark", "external") if manifest else "ehr-robustgym"
        eps = eps[eps["success_strict"].notna()]
        per_trial = []
        for _, trial in eps.groupby("trial", sort=True):
            outcomes = [Outcome(kind == "answer", term == "answered", bool(term == "answered" and kind == "answer"
                                                                          and ok))
                        for kind, term, ok in zip(trial["expected_kind"], trial["termination"],
                                                  trial["success_strict"])]
            per_trial.append(transfer_metrics(outcomes))
        row: dict[str, Any] = {"benchmark": benchmark, "system": system, "trials": len(per_trial),
                               "questions": per_trial[0]["questions"] if per_trial else 0}
        for col in METRIC_COLUMNS:
            values = [m[col] for m in per_trial if not math.isnan(m[col])]
            row[col] = sum(values) / len(values) / 100.0 if values else float("nan")   # fractions, like the gym
        rows.append(row)
    frame = pd.DataFrame(rows, columns=columns)
    gym_first = frame["benchmark"].map(lambda b: (b != "ehr-robustgym", b))
    return frame.assign(_k=gym_first).sort_values(["_k", "system"], kind="mergesort").drop(columns="_k") \
        .reset_index(drop=True)


def task_type_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """Success rate (%) overall and per task type of a MedAgentBench run (its official metric); [] otherwise."""
    from ehrgym.external.medagentbench import NAME, success_by_type

    manifest = run_benchmark(run_dir)
    if manifest is None or manifest.get("benchmark") != NAME:
        return []
    system = _system(read_run_config(run_dir) or {})
    records = list(EpisodeStore(Path(run_dir)).records())
    return [{"benchmark": NAME, "system": system, "task_type": kind, "success_rate": rate}
            for kind, rate in success_by_type(records).items()]


def task_type_frame(episodes: Any) -> Any:
    """Success rate per (benchmark, system, task type), a fraction and the mean over trials: every run has an
    ``overall`` row (strict success of all its tasks; the gym as ``ehr-robustgym``), MedAgentBench runs one per
    task type too (task1 … task10: its official metric)."""
    import pandas as pd

    from ehrgym.external.medagentbench import NAME, success_by_type

    columns = ["benchmark", "system", "task_type", "trials", "tasks", "success_rate"]
    if episodes is None or len(episodes) == 0:
        return pd.DataFrame(columns=columns)
    rows = []
    for (rundir, system), eps in episodes.groupby(["rundir", "system"], sort=True):
        manifest = run_benchmark(rundir)
        benchmark = manifest.get("benchmark", "external") if manifest else "ehr-robustgym"
        by_type = benchmark == NAME
        kinds = eps["template_id"] if by_type else ["overall"] * len(eps)
        records = [_Rec(*r) for r in zip(kinds, eps["trial"], eps["success_strict"])]
        scored = eps[eps["success_strict"].notna()]
        for kind, rate in success_by_type(records).items():
            part = scored if kind == "overall" else scored[scored["template_id"] == kind]
            rows.append({"benchmark": benchmark, "system": system, "task_type": kind,
                         "trials": int(part["trial"].nunique()), "tasks": int(part["task_id"].nunique()),
                         "success_rate": rate / 100.0})
    frame = pd.DataFrame(rows, columns=columns)
    gym_first = frame["benchmark"].map(lambda b: (b != "ehr-robustgym", b))
    return frame.assign(_k=gym_first).sort_values(["_k", "system"], kind="mergesort").drop(columns="_k") \
        .reset_index(drop=True)


class _Rec:
    """The three fields :func:`ehrgym.external.medagentbench.success_by_type` reads from an episode record."""

    def __init__(self, template_id: Any, trial: Any, success_strict: Any) -> None:
        self.template_id = template_id
        self.trial = int(trial)
        self.success_strict = None if success_strict is None or success_strict != success_strict \
            else bool(success_strict)
