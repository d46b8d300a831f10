"""``build_report``: every registered table and figure from run directories (CLI and notebook)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tqdm import tqdm  # text bars: they also stream through papermill

from ehrgym.errors import EhrGymError
from ehrgym.eval.metrics import load_episodes, summarize
from ehrgym.report.data import ReportData, dataset_from_benchmark, dataset_from_episodes
from ehrgym.report.figures import REPORT_FIGURES, save_figure
from ehrgym.report.tables import REPORT_TABLES, write_table


@dataclass
class ReportManifest:
    """What :func:`build_report` wrote: ``{name: [paths]}`` for tables and figures, and what it skipped."""

    tables: dict[str, list[Path]] = field(default_factory=dict)
    figures: dict[str, list[Path]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)   # "table:NAME" / "figure:NAME" -> reason
    dataset_source: str = "episodes"

    @property
    def paths(self) -> list[Path]:
        return [p for group in (self.tables, self.figures) for ps in group.values() for p in ps]

    def to_dict(self) -> dict[str, Any]:
        return {"tables": {k: [str(p) for p in v] for k, v in self.tables.items()},
                "figures": {k: [str(p) for p in v] for k, v in self.figures.items()},
                "skipped": dict(self.skipped), "dataset_source": self.dataset_source}


def _select(names: Sequence[str] | None, registry: Mapping[str, Any], kind: str) -> list[str]:
    if names is None:
        return list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise EhrGymError(f"unknown report {kind}s {unknown}; known: {list(registry)}")
    return list(names)


def report_data(rundirs: str | Path | Iterable[str | Path], bench_dir: str | Path | None = None, *,
                strict: bool = True, n_boot: int = 1000, seed: int = 0) -> ReportData:
    """Load runs, summarize them and describe the dataset (from ``bench_dir`` when given)."""
    episodes = load_episodes(rundirs)
    summary = summarize(episodes, strict=strict, n_boot=n_boot, seed=seed)
    if bench_dir is not None:
        dataset, source = dataset_from_benchmark(bench_dir), "benchmark"
    else:
        dataset, source = dataset_from_episodes(episodes), "episodes"
    return ReportData(episodes, summary, dataset, source, strict)


def build_report(rundirs: str | Path | Iterable[str | Path], bench_dir: str | Path | None = None,
                 tables_out: str | Path = "tables", figures_out: str | Path = "figures", *,
                 strict: bool = True, n_boot: int = 1000, seed: int = 0,
                 tables: Sequence[str] | None = None, figures: Sequence[str] | None = None,
                 progress: bool = True) -> ReportManifest:
    """Write every registered table (CSV, Markdown, LaTeX) into ``tables_out`` and every figure
    (PNG 200 dpi, PDF) into ``figures_out``. Same inputs → byte-identical files.

    ``tables``/``figures`` restrict to the named items (``[]`` for none).
    """
    table_names = _select(tables, REPORT_TABLES, "table")
    figure_names = _select(figures, REPORT_FIGURES, "figure")
    data = report_data(rundirs, bench_dir, strict=strict, n_boot=n_boot, seed=seed)
    manifest = ReportManifest(dataset_source=data.dataset_source)
    jobs = [("table", n) for n in table_names] + [("figure", n) for n in figure_names]
    for kind, name in tqdm(jobs, desc="report", unit="item", disable=not progress):
        if kind == "table":
            spec = REPORT_TABLES[name]
            df = spec.build(data)
            if df is None:
                manifest.skipped[f"table:{name}"] = "no data for this table"
                continue
            manifest.tables[name] = write_table(df, spec, tables_out)
        else:
            fig = REPORT_FIGURES[name].build(data)
            if fig is None:
                manifest.skipped[f"figure:{name}"] = "no data for this figure"
                continue
            manifest.figures[name] = save_figure(fig, figures_out, name)
    return manifest
