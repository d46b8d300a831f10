"""Report tables: one registered function per table, each written as CSV, Markdown and LaTeX.

A builder takes :class:`ReportData` and returns a numeric DataFrame (rates as fractions) or
``None`` when it does not apply. :func:`write_table` writes

* ``NAME.csv``: numbers; rate columns in percent (2 decimals) named ``<col>_pct``;
* ``NAME.md`` and ``NAME.tex``: display strings (rates in % with ``[95% CI]`` merged in).

Bytes are deterministic for the same inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from ehrgym.eval.metrics import FAILURE_MODES, RS_PENALTIES, format_table
from ehrgym.report.data import ReportData, vocab_sort
from ehrgym.vocab import INTENTS, LEVELS
from ehrgym.registry import Registry

PASS_K_MAX = 4


@dataclass(frozen=True)
class ReportTable:
    name: str
    title: str
    build: Callable[[ReportData], pd.DataFrame | None]
    percent: tuple[str, ...] = ()


# other packages add tables through the entry-point group "ehrgym.report_tables"
REPORT_TABLES: Registry[ReportTable] = Registry("report table", group="ehrgym.report_tables")


def report_table(name: str, title: str, percent: Sequence[str] = ()) -> Callable:
    """Register a report table builder under ``name`` (the file stem)."""
    def deco(fn: Callable[[ReportData], pd.DataFrame | None]) -> Callable[[ReportData], pd.DataFrame | None]:
        REPORT_TABLES.add(name, ReportTable(name, title, fn, tuple(percent)))
        return fn
    return deco


# ============================================================================================
# Writers
# ============================================================================================

def _csv_frame(df: pd.DataFrame, percent: Sequence[str]) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    pct_cols = {c: p for p in percent for c in (p, f"{p}_ci_low", f"{p}_ci_high") if c in df.columns}
    for col in df.columns:
        if col in pct_cols:
            out[f"{col}_pct"] = (df[col].astype(float) * 100).round(2)
        elif pd.api.types.is_float_dtype(df[col]):
            out[col] = df[col].astype(float).map(lambda v: v if math.isnan(v) else float(f"{v:.6g}"))
        else:
            out[col] = df[col]
    return out


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "–": "--", "—": "---", "→": r"$\rightarrow$", "²": r"$^2$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(shown: pd.DataFrame, title: str, label: str) -> str:
    """A booktabs ``table`` environment (needs ``\\usepackage{booktabs}``)."""
    numeric = [all(_looks_numeric(v) for v in shown[c]) for c in shown.columns]
    spec = "".join("r" if n else "l" for n in numeric)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{latex_escape(title)}}}",
             f"\\label{{tab:{label}}}", f"\\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in shown.columns) + r" \\", r"\midrule"]
    for _, row in shown.iterrows():
        lines.append(" & ".join(latex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _looks_numeric(value: str) -> bool:
    head = str(value).split(" [")[0].replace(",", "").replace("-", "", 1)
    return head in ("undefined", "–") or head.replace(".", "", 1).isdigit()


def to_markdown(shown: pd.DataFrame, title: str) -> str:
    from tabulate import tabulate

    body = tabulate(shown, headers="keys", tablefmt="pipe", showindex=False, disable_numparse=True) \
        if len(shown) else "(no rows)"
    return f"**{title}**\n\n{body}\n"


def write_table(df: pd.DataFrame, spec: ReportTable, out_dir: str | Path) -> list[Path]:
    """Write ``spec.name`` as .csv, .md and .tex into ``out_dir``; returns the three paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shown = format_table(df, spec.percent)
    paths = [out_dir / f"{spec.name}.{ext}" for ext in ("csv", "md", "tex")]
    _csv_frame(df, spec.percent).to_csv(paths[0], index=False, lineterminator="\n", na_rep="")
    paths[1].write_text(to_markdown(shown, spec.title), encoding="utf-8", newline="\n")
    paths[2].write_text(to_latex(shown, spec.title, spec.name), encoding="utf-8", newline="\n")
    return paths


# ============================================================================================
# Tables
# ============================================================================================

_RATES = ("clean", "noise", "pair", "drop_abs", "drop_rel")


def _with_ci(df: pd.DataFrame, keys: Sequence[str], rates: Sequence[str] = _RATES) -> pd.DataFrame:
    cols = list(keys) + ["n_pairs"] + [c for r in rates for c in (r, f"{r}_ci_low", f"{r}_ci_high")]
    return df[[c for c in cols if c in df.columns]]


@report_table("overview", "Runs: episodes, tasks, trials and infrastructure errors (excluded from denominators)",
              percent=("infra_error_rate",))
def _overview(d: ReportData) -> pd.DataFrame:
    return d.summary["overview"].drop(columns=["scoring"])


@report_table("clean_vs_noise", "Success on Clean and Noise questions, both-correct pairs and the Clean→Noise "
              "drop (%, 95% pair-bootstrap CI), with McNemar's exact p", percent=("clean", "noise", "pair",
                                                                                 "drop_abs", "drop_rel"))
def _clean_vs_noise(d: ReportData) -> pd.DataFrame:
    cvn = _with_ci(d.summary["clean_vs_noise"], ["system"], ("clean", "noise", "pair", "drop_abs"))
    cvn = cvn.assign(drop_rel=d.summary["clean_vs_noise"]["drop_rel"])
    mc = d.summary["mcnemar"][["system", "p_exact"]].rename(columns={"p_exact": "mcnemar_p"})
    return cvn.merge(mc, on="system", how="left")


@report_table("by_subtype", "Success per noise subtype: Clean twins vs Noise questions and the drop (%, 95% CI)",
              percent=("clean", "noise", "drop_abs"))
def _by_subtype(d: ReportData) -> pd.DataFrame:
    df = d.summary["by_subtype"].copy()
    from ehrgym.vocab import NOISE_SUBTYPES
    df.insert(1, "noise_level", df["noise_subtype"].map(NOISE_SUBTYPES))
    return vocab_sort(_with_ci(df, ["system", "noise_level", "noise_subtype"], ("clean", "noise", "drop_abs")),
                      ["system", "noise_level", "noise_subtype"])


@report_table("by_noise_level", "Success per noise level (record / value / query) (%, 95% CI)",
              percent=("clean", "noise", "drop_abs"))
def _by_noise_level(d: ReportData) -> pd.DataFrame:
    return vocab_sort(_with_ci(d.summary["by_noise_level"], ["system", "noise_level"], ("clean", "noise", "drop_abs")),
                      ["system", "noise_level"])


@report_table("by_intent", "Success per clinical intent (%, 95% CI)", percent=("clean", "noise", "drop_abs"))
def _by_intent(d: ReportData) -> pd.DataFrame:
    return vocab_sort(_with_ci(d.summary["by_intent"], ["system", "intent"], ("clean", "noise", "drop_abs")),
                      ["system", "intent"])


@report_table("by_level", "Success per question level, patient vs population (%, 95% CI)",
              percent=("clean", "noise", "drop_abs"))
def _by_level(d: ReportData) -> pd.DataFrame:
    return vocab_sort(_with_ci(d.summary["by_level"], ["system", "level"], ("clean", "noise", "drop_abs")),
                      ["system", "level"])


def pass_k_frame(d: ReportData, k_max: int = PASS_K_MAX) -> pd.DataFrame:
    """pass@k and pass^k for k = 1..k_max; k beyond the trials run are rows with undefined values."""
    pk = d.summary["pass_k"]
    rows = []
    for system in sorted(pk["system"].unique()):
        for variant in ("clean", "noise", "all"):
            g = pk[(pk["system"] == system) & (pk["variant"] == variant)].set_index("k")
            n_tasks = int(g["n_tasks"].iloc[0]) if len(g) else 0
            for k in range(1, k_max + 1):
                if k in g.index:
                    r = g.loc[k]
                    rows.append({"system": system, "variant": variant, "k": k, "n_tasks": n_tasks,
                                 "n_undefined": int(r["n_undefined"]), "pass_at_k": float(r["pass_at_k"]),
                                 "pass_hat_k": float(r["pass_hat_k"])})
                else:
                    rows.append({"system": system, "variant": variant, "k": k, "n_tasks": n_tasks,
                                 "n_undefined": n_tasks, "pass_at_k": math.nan, "pass_hat_k": math.nan})
    return pd.DataFrame(rows, columns=["system", "variant", "k", "n_tasks", "n_undefined", "pass_at_k", "pass_hat_k"])


@report_table("pass_k", "pass@k and pass^k for k = 1..4 (%; undefined where tasks have fewer than k valid trials)",
              percent=("pass_at_k", "pass_hat_k"))
def _pass_k(d: ReportData) -> pd.DataFrame:
    return pass_k_frame(d)


@report_table("abstention", "Abstention: precision and recall of abstain decisions vs abstain-expected tasks, "
              "correct reasons, and over-abstention on answerable tasks (%)",
              percent=("precision", "recall", "f1", "reason_accuracy", "over_abstention"))
def _abstention(d: ReportData) -> pd.DataFrame:
    return d.summary["abstention"].drop(columns=["answerable"])


@report_table("mcnemar", "McNemar's test on Clean/Noise pairs (majority outcome over trials per pair)")
def _mcnemar(d: ReportData) -> pd.DataFrame:
    return d.summary["mcnemar"]


@report_table("failure_modes", "Failure modes of failed episodes (counts; infrastructure errors excluded)")
def _failure_modes(d: ReportData) -> pd.DataFrame:
    fm = d.summary["failure_modes"]
    labels = {r["mode"]: r["label"] for _, r in fm[["mode", "label"]].drop_duplicates().iterrows()}
    wide = fm.pivot_table(index=["system", "variant"], columns="mode", values="count", aggfunc="sum", fill_value=0)
    modes = [m for m in list(FAILURE_MODES) + ["other"] if m in wide.columns]
    wide = wide[modes].rename(columns=labels).reset_index()
    wide.columns.name = None
    wide["failed"] = wide[[labels[m] for m in modes]].sum(axis=1)
    return vocab_sort(wide, ["system", "variant"])


@report_table("reliability", "Reliability score RS(c) of EHRSQL-2024 (%; +1 success, 0 abstention, −c wrong "
              "answer; N = number of tasks)", percent=tuple(f"RS({c})" for c in RS_PENALTIES))
def _reliability(d: ReportData) -> pd.DataFrame:
    rs = d.summary["reliability"]
    wide = rs.pivot_table(index=["system", "variant"], columns="c", values="rs", aggfunc="first")
    wide = wide[[c for c in RS_PENALTIES if c in wide.columns]]
    wide.columns = [f"RS({c})" for c in wide.columns]
    n = rs.groupby(["system", "variant"])["n_tasks"].first()
    out = wide.join(n).reset_index()
    return vocab_sort(out[["system", "variant", "n_tasks"] + list(wide.columns)], ["system", "variant"])


@report_table("strict_vs_lenient", "Strict (abstention reason checked) vs lenient scoring (%)",
              percent=("strict", "lenient", "lenient_minus_strict"))
def _strict_vs_lenient(d: ReportData) -> pd.DataFrame:
    return d.summary["strict_vs_lenient"]


@report_table("trial_variance", "Run-to-run variance: success per trial index, mean ± std across trials (%)",
              percent=("mean", "std", "min", "max"))
def _trial_variance(d: ReportData) -> pd.DataFrame:
    return d.summary["trial_variance"]


LATENCY_COLUMNS = ("wall_seconds_mean", "wall_seconds_median", "wall_seconds_p90", "wall_seconds_total")


@report_table("cost", "Steps, tokens and cost (USD) per episode")
def _cost(d: ReportData) -> pd.DataFrame:
    cost = d.summary["cost"]
    return cost.drop(columns=[c for c in LATENCY_COLUMNS if c in cost.columns])


# Wall-clock latencies differ on every run: they are written (``latency.*``) but kept out of git
# (.gitignore), so a rerun of `make reproduce` leaves the committed tables unchanged.
@report_table("latency", "Latency (seconds per episode; measured, differs between runs)")
def _latency(d: ReportData) -> pd.DataFrame:
    cost = d.summary["cost"]
    return cost[["system", "episodes"] + [c for c in LATENCY_COLUMNS if c in cost.columns]]


@report_table("dataset_counts", "Dataset: tasks by intent × level × noise level × subtype")
def _dataset_counts(d: ReportData) -> pd.DataFrame:
    ds = d.dataset.assign(noise_level=d.dataset["noise_level"].fillna("–"),
                          noise_subtype=d.dataset["noise_subtype"].fillna("–"))
    keys = ["intent", "level", "variant", "noise_level", "noise_subtype"]
    counts = ds.groupby(keys, sort=False).size().rename("tasks").reset_index()
    counts = vocab_sort(counts, keys)
    total = pd.DataFrame([{"intent": "total", "level": "", "variant": "", "noise_level": "", "noise_subtype": "",
                           "tasks": int(len(ds))}])
    return pd.concat([counts, total], ignore_index=True)


@report_table("dataset_composition", "Dataset composition: Noise questions per subtype by intent and level "
              "(Clean questions in the first row)")
def _dataset_composition(d: ReportData) -> pd.DataFrame:
    ds = d.dataset
    ds = ds.assign(row=np.where(ds["variant"] == "clean", "clean", ds["noise_subtype"].fillna("?")),
                   row_level=np.where(ds["variant"] == "clean", "–", ds["noise_level"].fillna("?")))
    intents = pd.crosstab([ds["row_level"], ds["row"]], ds["intent"]).reindex(columns=list(INTENTS), fill_value=0)
    levels = pd.crosstab([ds["row_level"], ds["row"]], ds["level"]).reindex(columns=list(LEVELS), fill_value=0)
    out = intents.join(levels)
    out["total"] = intents.sum(axis=1)
    out = out.reset_index().rename(columns={"row_level": "noise_level", "row": "noise_subtype"})
    out.columns.name = None
    clean = out[out["noise_subtype"] == "clean"]
    noisy = vocab_sort(out[out["noise_subtype"] != "clean"], ["noise_level", "noise_subtype"])
    total = noisy.drop(columns=["noise_level", "noise_subtype"]).sum().to_dict()
    total.update({"noise_level": "", "noise_subtype": "all noise"})
    return pd.concat([clean, noisy, pd.DataFrame([total])], ignore_index=True)[out.columns]


@report_table("dataset_splits", "Dataset: tasks per split and variant (train/dev/test: held-out patients; "
              "ood: held-out templates)")
def _dataset_splits(d: ReportData) -> pd.DataFrame:
    ds = d.dataset
    counts = pd.crosstab(ds["split"], ds["variant"]).reindex(columns=["clean", "noise"], fill_value=0)
    counts["tasks"] = counts.sum(axis=1)
    counts["templates"] = ds.groupby("split")["template_id"].nunique()
    out = counts.reset_index()
    out.columns.name = None
    return vocab_sort(out, ["split"])


@report_table("dataset_complexity", "Dataset: SQL structural complexity of the gold SQL (sqlglot AST nodes) per "
              "intent and level")
def _dataset_complexity(d: ReportData) -> pd.DataFrame | None:
    ds = d.dataset[d.dataset["complexity"].notna()]
    if ds.empty:
        return None  # only a benchmark directory (--bench) records SQL complexity
    ds = ds.assign(complexity=ds["complexity"].astype(float))
    rows = []
    for (intent, level), g in ds.groupby(["intent", "level"], sort=False):
        c = g["complexity"]
        clean = g[g["variant"] == "clean"]["complexity"]
        rows.append({"intent": intent, "level": level, "tasks": int(len(g)), "mean": float(c.mean()),
                     "median": float(c.median()), "min": int(c.min()), "max": int(c.max()),
                     "clean_mean": float(clean.mean()) if len(clean) else math.nan})
    out = vocab_sort(pd.DataFrame(rows), ["intent", "level"])
    c = ds["complexity"]
    total = {"intent": "all", "level": "", "tasks": int(len(ds)), "mean": float(c.mean()), "median": float(c.median()),
             "min": int(c.min()), "max": int(c.max()),
             "clean_mean": float(ds[ds["variant"] == "clean"]["complexity"].mean())}
    return pd.concat([out, pd.DataFrame([total])], ignore_index=True)


@report_table("transfer", "Transfer: the gym and external benchmarks per system — RS(c) (the EHRSQL official metric; "
              "+1 correct or abstained on unanswerable, 0 abstained on answerable, −c wrong), answer accuracy on "
              "answerable questions, abstention precision/recall, success rate (MedAgentBench's official metric; "
              "%, mean over trials)",
              percent=("RS(0)", "RS(5)", "RS(10)", "RS(N)", "answer_accuracy", "abstention_precision",
                       "abstention_recall", "success_rate"))
def _transfer(d: ReportData) -> pd.DataFrame | None:
    from ehrgym.external.metrics import transfer_frame

    frame = transfer_frame(d.episodes)
    return None if frame.empty else frame   # gym-only runs: the gym row(s), to set external runs against


@report_table("transfer_by_task_type", "Success rate per benchmark and system, overall and, for MedAgentBench (its "
              "official metric), per task type task1 … task10 (%, mean over trials)", percent=("success_rate",))
def _transfer_by_task_type(d: ReportData) -> pd.DataFrame | None:
    from ehrgym.external.metrics import task_type_frame

    frame = task_type_frame(d.episodes)
    return None if frame.empty else frame
