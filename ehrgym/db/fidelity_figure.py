"""The fidelity figure (``ehrgym db fidelity DB --figure OUT.png``, notebook 00).

Three panels, this database and (when given) the other side by side: (a) rows per admission / ICU
stay as a ratio to full MIMIC-IV v3.1 on a log axis with the ±30 % band shaded, (b) vocabulary
sizes on a log axis, (c) everyday-messiness rates in %. Same style and palette as the report
figures; saving strips timestamps so the bytes are deterministic.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypeGuard

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ehrgym.db.fidelity import TOLERANCE, FidelityReport
from ehrgym.report.figures import DPI, STYLE, new_figure, palette

RATIO_LIMITS = (1 / 16, 16.0)  # ratios beyond are drawn at the edge
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def _finite(x: object) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not math.isnan(float(x))


def _bars(ax, labels: list[str], series: list[tuple[str, list[float | None], tuple]], *, log: bool,
          base: float = 0.0, annotate: bool = True) -> None:
    """Horizontal grouped bars, one group per label (top to bottom); missing values marked 'empty'."""
    y = np.arange(len(labels))[::-1].astype(float)
    height = 0.8 / max(len(series), 1)
    for i, (name, values, color) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * height
        left = base if log else 0.0
        plotted = [float(v) if _finite(v) and (not log or float(v) > 0) else None for v in values]
        finite = [p is not None for p in plotted]
        ax.barh(y[finite] - offset, [p - left for p in plotted if p is not None], left=left,
                height=height * 0.95, color=color, label=name)
        for yy, v, p in zip(y, values, plotted):
            if p is None:
                text = " 0" if _finite(v) else " empty"  # a zero has no bar on a log axis
            else:
                text = (f" {p:,.0f}" if log else f" {p:.1f}") if annotate else ""
            if text:
                ax.text(p if p is not None else left, yy - offset, text, va="center", fontsize=5.5, color="0.3")
    ax.set_yticks(y, labels)
    if log:
        ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3)
    ax.grid(axis="y", visible=False)


def fidelity_figure(report: FidelityReport) -> Figure:
    """The three-panel fidelity figure of ``report``."""
    stats = report.statistics()
    names = [report.this.label] + ([report.other.label] if report.other is not None else [])
    colors = palette(len(names))
    keys = ["this"] + (["other"] if report.other is not None else [])
    volume = stats[(stats["section"] == "volume") & stats["full_mimic_iv"].notna()]
    vocabulary = stats[stats["section"] == "vocabulary"]
    messiness = stats[stats["section"] == "messiness"]
    lo, hi = RATIO_LIMITS

    def ratios(column: str) -> list[float | None]:
        out: list[float | None] = []
        for v, full in zip(volume[column], volume["full_mimic_iv"]):
            out.append(min(max(float(v) / float(full), lo), hi) if _finite(v) and _finite(full) and full else None)
        return out

    with matplotlib.rc_context(STYLE):
        fig = new_figure(10.0, max(6.5, 0.2 * len(volume) + 2.0))
        grid = fig.add_gridspec(2, 2, height_ratios=(len(vocabulary), len(messiness)))
        ax_vol = fig.add_subplot(grid[:, 0])
        ax_voc, ax_mess = fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, 1])

        _bars(ax_vol, [s.replace(" rows", "") for s in volume["statistic"]],
              [(n, ratios(k), c) for n, k, c in zip(names, keys, colors)], log=True, base=1.0, annotate=False)
        ax_vol.axvspan(1 - TOLERANCE, 1 + TOLERANCE, color="0.85", zorder=0, label=f"±{TOLERANCE:.0%}")
        ax_vol.axvline(1.0, color="0.3", linewidth=0.8)
        ax_vol.set_xlim(lo, hi)
        ticks = [1 / 16, 1 / 4, 1, 4, 16]
        ax_vol.set_xticks(ticks, [f"×{t:g}" if t >= 1 else f"×1/{1 / t:g}" for t in ticks])
        ax_vol.minorticks_off()
        ax_vol.set_xlabel("ratio to full MIMIC-IV v3.1 (log)")
        ax_vol.set_title("(a) rows per admission / ICU stay")

        _bars(ax_voc, list(vocabulary["statistic"].str.replace("distinct ", "")),
              [(n, list(vocabulary[k]), c) for n, k, c in zip(names, keys, colors)], log=True, base=1.0)
        ax_voc.set_xlabel("distinct values in use (log)")
        ax_voc.set_title("(b) vocabulary sizes")

        _bars(ax_mess, list(messiness["statistic"]),
              [(n, list(messiness[k]), c) for n, k, c in zip(names, keys, colors)], log=False)
        ax_mess.set_xlim(0, 110)
        ax_mess.set_xlabel("% of rows (of patients for readmission)")
        ax_mess.set_title("(c) everyday messiness")

        handles, labels = ax_vol.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
        fig.suptitle("Fidelity to MIMIC-IV: " + " vs ".join(names))
    return fig


def save_fidelity_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG (200 dpi), PDF or SVG by the suffix of ``path``, with deterministic bytes."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FIGURE_SUFFIXES:
        raise ValueError(f"figure {path}: use one of {', '.join(FIGURE_SUFFIXES)}")
    metadata = {".png": {"Software": None},
                ".pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
                ".svg": {"Date": None, "Creator": None}}[suffix]
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(STYLE):
        fig.savefig(path, dpi=DPI, metadata=metadata)
    return path
