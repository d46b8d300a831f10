"""report: tables (CSV/Markdown/LaTeX) and figures (PNG/PDF) regenerated from run directories.

``build_report(rundirs, bench_dir=None, tables_out='tables', figures_out='figures')`` is what the
``ehrgym report`` command and the analysis notebook both call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_report", "report_data", "ReportManifest"]


def __getattr__(name: str) -> Any:  # lazy: importing ehrgym.report does not import matplotlib
    if name in __all__:
        from ehrgym.report import build

        return getattr(build, name)
    raise AttributeError(name)
