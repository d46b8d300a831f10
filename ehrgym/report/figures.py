"""Report figures: one registered function per figure, saved as PNG (200 dpi) and PDF.

Figures use matplotlib's object-oriented API on an Agg canvas (no pyplot, no global backend
switch, so notebooks keep their own), a colour-blind-safe palette (seaborn ``colorblind``,
``viridis`` for heatmaps), rates in %, 95% CIs as error bars and legends outside the data.
Saving strips timestamps and software tags so the bytes are deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ehrgym.eval.metrics import FAILURE_MODES
from ehrgym.report.data import ReportData, vocab_sort
from ehrgym.report.tables import PASS_K_MAX, pass_k_frame
from ehrgym.vocab import INTENTS, LEVELS, NOISE_SUBTYPES
from ehrgym.registry import Registry

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType, RcKeyType

DPI = 200
STYLE: dict[RcKeyType, Any] = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "legend.fontsize": 8, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "axes.grid.axis": "y", "grid.alpha": 0.3, "svg.hashsalt": "ehrgym", "pdf.compression": 6,
}


def palette(n: int) -> list[tuple[float, float, float]]:
    import seaborn as sns

    return list(sns.color_palette("colorblind", n_colors=max(n, 1)))


def distinct_palette(n: int) -> list[tuple[float, float, float]]:
    """``n`` clearly different colours: colour-blind safe up to 8, then a 20-colour qualitative map."""
    if n <= 8:
        return palette(n)
    cmap = matplotlib.colormaps["tab20"]
    order = list(range(0, 20, 2)) + list(range(1, 20, 2))  # saturated hues first, their light twins after
    return [cmap(i)[:3] for i in order[:n]]


VARIANT_COLORS = dict(zip(("clean", "noise", "pair"), palette(3)))
VARIANT_LABELS = {"clean": "Clean", "noise": "Noise", "pair": "Both (pair)"}


@dataclass(frozen=True)
class ReportFigure:
    name: str
    title: str
    build: Callable[[ReportData], Figure | None]


# other packages add figures through the entry-point group "ehrgym.report_figures"
REPORT_FIGURES: Registry[ReportFigure] = Registry("report figure", group="ehrgym.report_figures")


def report_figure(name: str, title: str) -> Callable:
    """Register a figure builder under ``name`` (the file stem)."""
    def deco(fn: Callable[[ReportData], Figure | None]) -> Callable[[ReportData], Figure | None]:
        REPORT_FIGURES.add(name, ReportFigure(name, title, fn))
        return fn
    return deco


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write ``name.png`` (200 dpi) and ``name.pdf`` with deterministic bytes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{name}.png", out_dir / f"{name}.pdf"
    with matplotlib.rc_context(STYLE):
        fig.savefig(png, dpi=DPI, metadata={"Software": None})
        fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None})
    return [png, pdf]


def _legend(fig: Figure, n_entries: int, max_cols: int = 4, **kwargs) -> None:
    """Legend below the axes (outside the data; a top legend would collide with the suptitle)."""
    fig.legend(loc="outside lower center", ncols=min(max(n_entries, 1), max_cols), frameon=False, **kwargs)


def _pct(x: float) -> float:
    return math.nan if x is None or (isinstance(x, float) and math.isnan(x)) else 100.0 * float(x)


def _err(df: pd.DataFrame, col: str) -> np.ndarray:
    """Asymmetric error bars (2, n) in % from ``col``/``col_ci_low``/``col_ci_high`` (0 where undefined)."""
    est = df[col].astype(float).to_numpy() * 100
    lo = df[f"{col}_ci_low"].astype(float).to_numpy() * 100
    hi = df[f"{col}_ci_high"].astype(float).to_numpy() * 100
    err = np.vstack([est - lo, hi - est])
    return np.nan_to_num(np.clip(err, 0, None), nan=0.0)


def _bar_labels(ax, bars, values: Iterable[float], tops: Iterable[float]) -> None:
    for bar, v, top in zip(bars, values, tops):
        x = bar.get_x() + bar.get_width() / 2
        if math.isnan(v):
            ax.text(x, 1.5, "n/a", ha="center", va="bottom", fontsize=6.5, color="0.35")
        else:
            ax.text(x, (top if not math.isnan(top) else v) + 1.5, f"{v:.0f}", ha="center", va="bottom", fontsize=6.5)


def _percent_axis(ax, label: str = "Success (%)") -> None:
    ax.set_ylim(0, 112)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel(label)


# ============================================================================================
# Figures
# ============================================================================================

@report_figure("clean_vs_noise", "Success on Clean vs Noise questions per agent, 95% CI")
def _clean_vs_noise(d: ReportData) -> Figure | None:
    cvn = d.summary["clean_vs_noise"]
    if cvn.empty:
        return None
    variants = ("clean", "noise", "pair")
    n = len(cvn)
    with matplotlib.rc_context(STYLE):
        fig = new_figure(max(4.2, 1.25 * n + 2.6), 3.4)
        ax = fig.add_subplot()
        x = np.arange(n)
        width = 0.26
        for i, v in enumerate(variants):
            vals = cvn[v].astype(float).to_numpy() * 100
            err = _err(cvn, v)
            bars = ax.bar(x + (i - 1) * width, np.nan_to_num(vals), width, yerr=err, capsize=2.5,
                          color=VARIANT_COLORS[v], label=VARIANT_LABELS[v], error_kw={"elinewidth": 0.9})
            _bar_labels(ax, bars, vals, vals + err[1])
        ticks = []
        for _, r in cvn.iterrows():
            drop = _pct(r["drop_abs"])
            ticks.append(f"{r['system']}\nΔ n/a" if math.isnan(drop) else
                         f"{r['system']}\nΔ = {drop:+.1f} pts".replace("-", "−"))
        ax.set_xticks(x, ticks)
        _percent_axis(ax)
        fig.suptitle("Success on Clean vs Noise questions (95% CI; Δ = Clean − Noise)")
        _legend(fig, len(variants))
    return fig


@report_figure("subtype_heatmap", "Noise success per agent and noise subtype")
def _subtype_heatmap(d: ReportData) -> Figure | None:
    sub = d.summary["by_subtype"]
    if sub.empty:
        return None
    subtypes = [s for s in NOISE_SUBTYPES if s in set(sub["noise_subtype"])]
    systems = sorted(sub["system"].unique())
    mat = sub.pivot_table(index="system", columns="noise_subtype", values="noise", aggfunc="first")
    mat = mat.reindex(index=systems, columns=subtypes).to_numpy(float) * 100
    drop = sub.pivot_table(index="system", columns="noise_subtype", values="drop_abs", aggfunc="first")
    drop = drop.reindex(index=systems, columns=subtypes).to_numpy(float) * 100
    with matplotlib.rc_context(STYLE):
        fig = new_figure(max(5.0, 0.62 * len(subtypes) + 3.0), max(2.6, 0.55 * len(systems) + 2.3))
        ax = fig.add_subplot()
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")
        im = ax.imshow(np.ma.masked_invalid(mat), cmap=cmap, vmin=0, vmax=100, aspect="auto")
        for i in range(len(systems)):
            for j in range(len(subtypes)):
                v = mat[i, j]
                if math.isnan(v):
                    ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.3")
                    continue
                color = "white" if v < 55 else "black"
                sub_line = "" if math.isnan(drop[i, j]) else f"\nΔ {drop[i, j]:+.0f}".replace("-", "−")
                ax.text(j, i, f"{v:.0f}{sub_line}", ha="center", va="center", fontsize=7, color=color)
        ax.set_xticks(range(len(subtypes)), [s.replace("_", " ") for s in subtypes], rotation=35, ha="right",
                      rotation_mode="anchor")
        ax.set_yticks(range(len(systems)), systems)
        ax.grid(False)
        levels = [NOISE_SUBTYPES[s] for s in subtypes]
        for j in range(1, len(levels)):
            if levels[j] != levels[j - 1]:
                ax.axvline(j - 0.5, color="white", linewidth=2.5)
        top = ax.secondary_xaxis("top")
        centers, names = [], []
        for lvl in dict.fromkeys(levels):
            idx = [j for j, l_ in enumerate(levels) if l_ == lvl]
            centers.append((idx[0] + idx[-1]) / 2)
            names.append(f"{lvl} level")
        top.set_xticks(centers, names)
        top.tick_params(length=0)
        cbar = fig.colorbar(im, ax=ax, shrink=0.9)
        cbar.set_label("Noise success (%)")
        fig.suptitle("Noise success (%) by agent and noise subtype\nΔ = drop from the Clean twins (percentage points)")
    return fig


def _factor_bars(d: ReportData, table: str, factor: str, order: Sequence[str], title: str) -> Figure | None:
    df = d.summary[table]
    if df.empty:
        return None
    values = [v for v in order if v in set(df[factor])]
    systems = sorted(df["system"].unique())
    colors = dict(zip(systems, palette(len(systems))))
    width = 0.8 / len(systems)
    with matplotlib.rc_context(STYLE):
        fig = new_figure(max(6.0, 2 * (0.3 * len(values) * max(1.0, 0.6 * len(systems)) + 0.8) + 1.0), 3.4)
        axes = fig.subplots(1, 2, sharey=True)
        for ax, variant in zip(axes, ("clean", "noise")):
            x = np.arange(len(values))
            for i, s in enumerate(systems):
                g = df[df["system"] == s].set_index(factor).reindex(values)
                vals = g[variant].astype(float).to_numpy() * 100
                err = _err(g, variant)
                bars = ax.bar(x + (i - (len(systems) - 1) / 2) * width, np.nan_to_num(vals), width, yerr=err,
                              capsize=2, color=colors[s], label=s if variant == "clean" else None,
                              error_kw={"elinewidth": 0.8})
                if len(systems) * len(values) <= 16:
                    _bar_labels(ax, bars, vals, vals + err[1])
            ax.set_xticks(x, [v.replace("_", " ") for v in values], rotation=25 if len(values) > 3 else 0,
                          ha="right" if len(values) > 3 else "center", rotation_mode="anchor")
            _percent_axis(ax)
            ax.set_title(f"{VARIANT_LABELS[variant]} questions")
        axes[1].set_ylabel("")
        fig.suptitle(title)
        _legend(fig, len(systems))
    return fig


@report_figure("by_intent", "Clean and Noise success per clinical intent")
def _by_intent(d: ReportData) -> Figure | None:
    return _factor_bars(d, "by_intent", "intent", INTENTS, "Success (%) per clinical intent, 95% CI")


@report_figure("by_level", "Clean and Noise success per question level")
def _by_level(d: ReportData) -> Figure | None:
    return _factor_bars(d, "by_level", "level", LEVELS, "Success (%) per question level, 95% CI")


@report_figure("pass_k", "pass^k curves, k = 1..4")
def _pass_k(d: ReportData) -> Figure | None:
    pk = pass_k_frame(d)
    if pk.empty:
        return None
    systems = sorted(pk["system"].unique())
    colors = dict(zip(systems, palette(len(systems))))
    styles: dict[str, tuple[LineStyleType, str]] = {"clean": ("-", "o"), "noise": ("--", "s")}
    with matplotlib.rc_context(STYLE):
        fig = new_figure(5.6, 3.4)
        ax = fig.add_subplot()
        ks = np.arange(1, PASS_K_MAX + 1)
        for i, s in enumerate(systems):
            dodge = (i - (len(systems) - 1) / 2) * 0.04  # identical curves stay visible side by side
            for variant, (ls, marker) in styles.items():
                g = pk[(pk["system"] == s) & (pk["variant"] == variant)].set_index("k").reindex(ks)
                ax.plot(ks + dodge, g["pass_hat_k"].astype(float).to_numpy() * 100, linestyle=ls, marker=marker,
                        color=colors[s], markersize=4, linewidth=1.4, clip_on=False)
        ax.set_xticks(ks)
        ax.set_xlabel("k (trials that must all succeed)")
        ax.set_xlim(0.7, PASS_K_MAX + 0.3)
        ax.set_ylim(-2, 102)
        ax.set_yticks(range(0, 101, 20))
        ax.set_ylabel("pass^k (%)")
        fig.suptitle("pass^k: probability that k trials all succeed")
        handles = [Line2D([], [], color=colors[s], linewidth=2, label=s) for s in systems]
        handles += [Line2D([], [], color="0.3", linestyle=ls, marker=m, label=VARIANT_LABELS[v])
                    for v, (ls, m) in styles.items()]
        _legend(fig, len(handles), handles=handles)
        undefined = pk[(pk["variant"] != "all") & pk["pass_hat_k"].isna()]
        if not undefined.empty:
            ax.text(0.99, 0.02, "missing points: undefined (fewer than k trials)", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=6.5, color="0.35")
    return fig


@report_figure("abstention", "Abstention precision, recall and over-abstention on Clean")
def _abstention(d: ReportData) -> Figure | None:
    ab = d.summary["abstention"]
    if ab.empty:
        return None
    systems = sorted(ab["system"].unique())
    metrics = [("precision", "all", "Precision"), ("recall", "all", "Recall"),
               ("over_abstention", "clean", "Over-abstention on Clean")]
    colors = [palette(10)[i] for i in (9, 4, 3)]
    with matplotlib.rc_context(STYLE):
        fig = new_figure(max(5.6, 1.2 * len(systems) + 2.8), 3.3)
        ax = fig.add_subplot()
        x = np.arange(len(systems))
        width = 0.26
        for i, (col, scope, label) in enumerate(metrics):
            g = ab[ab["variant"] == scope].set_index("system").reindex(systems)
            vals = g[col].astype(float).to_numpy() * 100
            bars = ax.bar(x + (i - 1) * width, np.nan_to_num(vals), width, color=colors[i], label=label)
            _bar_labels(ax, bars, vals, vals)
        ax.set_xticks(x, systems)
        _percent_axis(ax, "Rate (%)")
        fig.suptitle("Abstention: precision and recall of abstain decisions,\nover-abstention on answerable Clean questions")
        _legend(fig, len(metrics))
    return fig


@report_figure("failure_modes", "Failure modes of failed episodes per agent (share of each agent's failures)")
def _failure_modes(d: ReportData) -> Figure | None:
    fm = d.summary["failure_modes"]
    fm = fm[fm["variant"].isin(["clean", "noise"])]
    if fm.empty or fm["count"].sum() == 0:
        return None
    modes = [m for m in list(FAILURE_MODES) + ["other"] if m in set(fm["mode"])]
    labels = dict(zip(fm["mode"], fm["label"]))
    colors = dict(zip(modes, distinct_palette(len(modes))))
    rows = vocab_sort(fm[["system", "variant"]].drop_duplicates(), ["system", "variant"])
    counts = {m: np.array([int(fm[(fm["system"] == r.system) & (fm["variant"] == r.variant)
                                  & (fm["mode"] == m)]["count"].sum()) for r in rows.itertuples()])
              for m in modes}
    totals = np.sum([counts[m] for m in modes], axis=0)
    with matplotlib.rc_context(STYLE):
        fig = new_figure(6.4, max(2.4, 0.38 * len(rows) + 1.6))
        ax = fig.add_subplot()
        y = np.arange(len(rows))[::-1]
        left = np.zeros(len(rows))
        # normalised per agent and variant: an agent with thousands of failures would otherwise
        # reduce every other agent to a sliver
        share = lambda c: np.divide(100.0 * c, totals, out=np.zeros(len(rows)), where=totals > 0)  # noqa: E731
        for m in modes:
            part = share(counts[m])
            ax.barh(y, part, left=left, color=colors[m], label=labels.get(m, m), height=0.7,
                    edgecolor="white", linewidth=0.4)
            left += part
        ax.set_yticks(y, [f"{r.system} · {VARIANT_LABELS[r.variant]}" for r in rows.itertuples()])
        ax.set_xlabel("Share of the failed episodes (%)")
        ax.set_xlim(0, 112)
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.grid(axis="x", alpha=0.3)
        ax.grid(axis="y", visible=False)
        for yy, total in zip(y, totals):
            ax.text(101, yy, f" n={int(total)}", va="center", fontsize=7)
        fig.suptitle("Failure modes of failed episodes\n(share per agent and question type; infrastructure errors "
                     "excluded)")
        _legend(fig, len(modes), max_cols=3)
    return fig


@report_figure("dataset_composition", "Benchmark composition by noise subtype and intent")
def _dataset_composition(d: ReportData) -> Figure | None:
    ds = d.dataset
    noisy = ds[ds["variant"] == "noise"]
    if noisy.empty:
        return None
    rows = [s for s in NOISE_SUBTYPES if s in set(noisy["noise_subtype"])]
    intents = [i for i in INTENTS if i in set(ds["intent"])]
    colors = dict(zip(intents, palette(len(intents))))
    with matplotlib.rc_context(STYLE):
        fig = new_figure(6.8, max(2.6, 0.3 * len(rows) + 1.6))
        ax = fig.add_subplot()
        y = np.arange(len(rows))[::-1]
        left = np.zeros(len(rows))
        for intent in intents:
            counts = np.array([int(((noisy["noise_subtype"] == r) & (noisy["intent"] == intent)).sum()) for r in rows])
            ax.barh(y, counts, left=left, color=colors[intent], label=intent, height=0.7)
            left += counts
        ax.set_yticks(y, [f"{NOISE_SUBTYPES[r]} · {r.replace('_', ' ')}" for r in rows])
        for yy, total in zip(y, left):
            ax.text(total, yy, f" {int(total)}", va="center", fontsize=7)
        ax.set_xlim(0, max(left.max() * 1.12, 1))
        ax.set_xlabel("Noise questions (count)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(axis="x", alpha=0.3)
        ax.grid(axis="y", visible=False)
        source = "whole benchmark" if d.dataset_source == "benchmark" else "questions seen in the runs"
        n_clean = int((ds["variant"] == "clean").sum())
        fig.suptitle(f"Benchmark composition: {len(noisy)} Noise and {n_clean} Clean questions\n"
                     f"Noise questions per level · subtype, by intent ({source})")
        _legend(fig, len(intents), max_cols=3)
    return fig


@report_figure("transfer", "Answer accuracy and RS(0) per system on the gym and external benchmarks")
def _transfer(d: ReportData) -> Figure | None:
    from ehrgym.external.metrics import transfer_frame

    frame = transfer_frame(d.episodes)
    if frame.empty:
        return None
    benchmarks = list(dict.fromkeys(frame["benchmark"]))
    systems = sorted(frame["system"].unique())
    panels = (("answer_accuracy", "Answer accuracy (%)"), ("RS(0)", "RS(0) (%)"))
    with matplotlib.rc_context(STYLE):
        fig = new_figure(max(5.0, 1.6 * len(benchmarks) * len(panels) + 1.5), 3.4)
        axes = fig.subplots(1, len(panels))
        width = 0.8 / max(1, len(systems))
        x = np.arange(len(benchmarks))
        for ax, (col, label) in zip(axes, panels):
            for i, system in enumerate(systems):
                sub = frame[frame["system"] == system].set_index("benchmark")
                vals = np.array([100 * float(sub[col].get(b, np.nan)) for b in benchmarks])
                bars = ax.bar(x + (i - (len(systems) - 1) / 2) * width, np.nan_to_num(vals), width,
                              color=f"C{i % 10}", label=system if ax is axes[0] else "_nolegend_")
                _bar_labels(ax, bars, vals, np.nan_to_num(vals))
            ax.set_xticks(x, benchmarks)
            _percent_axis(ax, label)
        fig.suptitle("Transfer: the same systems on the gym and external benchmarks")
        _legend(fig, len(systems))
    return fig
