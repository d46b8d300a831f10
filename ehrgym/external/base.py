"""The one registry of external benchmark adapters (``ehrgym external build NAME``).

An adapter turns a benchmark's published question set into kit tasks (question, expected answer
or expected abstention, split, metadata) plus a database episodes run on, written as a benchmark
directory that ``ehrgym eval run`` runs like a gym benchmark. Other packages add adapters through
the entry-point group ``ehrgym.external_benchmarks``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ehrgym.errors import EhrGymError
from ehrgym.registry import Registry


class ExternalDataError(EhrGymError):
    """A benchmark's question files, database or server are missing or are not what the adapter expects."""


@dataclass(frozen=True)
class BuildResult:
    out_dir: Path
    tasks: int
    by_split: dict[str, int]
    seconds: float
    files: dict[str, str] = field(default_factory=dict)   # role -> path (episode db, official db …)
    checks: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExternalAdapter:
    """One benchmark: where its data lives by default, what it needs from the user, how it is scored."""

    name: str
    title: str
    official_metric: str
    data_folder: str                       # folder under the external data directory
    needs: tuple[str, ...]                 # user-supplied resources: () | ("db",) | ("fhir_url",)
    build: Callable[..., BuildResult]      # build(data_dir, out_dir, **resources) -> BuildResult


ADAPTERS: Registry[ExternalAdapter] = Registry(
    "external benchmark", group="ehrgym.external_benchmarks",
    builtin_modules={"ehrsql-2024": "ehrgym.external.ehrsql2024",
                     "ehrsql-2022-mimic-iii": "ehrgym.external.ehrsql2022",
                     "ehrsql-2022-eicu": "ehrgym.external.ehrsql2022",
                     "mimicsql": "ehrgym.external.mimicsql",
                     "medagentbench-v2": "ehrgym.external.medagentbench"})


def register_adapter(adapter: ExternalAdapter) -> ExternalAdapter:
    return ADAPTERS.add(adapter.name, adapter)


def default_external_dir() -> Path:
    """``$EHRGYM_EXTERNAL_DIR``, else ``shared/external`` next to the kit's checkout (or the working directory)."""
    env = os.environ.get("EHRGYM_EXTERNAL_DIR")
    if env:
        return Path(env)
    candidates = [Path(__file__).resolve().parents[2].parent / "shared" / "external",
                  Path.cwd().parent / "shared" / "external", Path.cwd() / "shared" / "external"]
    return next((c for c in candidates if c.is_dir()), candidates[0])


def data_dir_for(adapter: ExternalAdapter, data: str | Path | None) -> Path:
    path = Path(data) if data is not None else default_external_dir() / adapter.data_folder
    if not path.is_dir():
        raise ExternalDataError(f"{adapter.title} data not found at {path}; pass --data DIR (the folder holding "
                                f"the benchmark's question files) or set EHRGYM_EXTERNAL_DIR")
    return path


def build_external(name: str, out_dir: str | Path, data: str | Path | None = None, **resources: Any) -> BuildResult:
    adapter = ADAPTERS.get(name)
    missing = [r for r in adapter.needs if not resources.get(r)]
    if missing:
        flags = ", ".join("--" + r.replace("_", "-") for r in missing)
        raise ExternalDataError(f"{adapter.title} runs on a database or server you supply: pass {flags}")
    return adapter.build(data_dir_for(adapter, data), Path(out_dir), **resources)
