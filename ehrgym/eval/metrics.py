"""Metrics over run directories (docs/architecture.md §5): tidy pandas tables from ``episodes.jsonl``.

Python API::

    df = load_episodes(["data/runs/credulous", "data/runs/skeptic"])
    tables = summarize(df, strict=True, n_boot=1000, seed=0)   # {name: DataFrame}
    print(render_summary(tables))

Conventions of every table:

* one row per ``system`` (agent, plus ``(model)`` when the run names one) and breakdown key;
* rates are FRACTIONS in [0, 1] (``render_summary`` and the report show them as %);
* success of a task = its success rate over its valid trials; a success rate over a set of tasks
  is the mean of the task rates (every task weighs the same, whatever its number of trials);
* a pair is a success on trial t when both its Clean and its Noise task succeed on trial t;
* infrastructure errors (``termination == 'infrastructure_error'``) are excluded from every
  denominator and counted in ``overview`` / ``terminations``;
* 95% confidence intervals are seeded percentile bootstraps that resample Clean–Noise PAIRS
  (a task with its twin), never episodes;
* breakdowns by noise level / subtype group a pair by its noisy twin's noise, so each row has
  its own Clean baseline and drop.

Each table is one function registered with :func:`summary_table`; :func:`summarize` runs the
registry, so a new metric is one decorated function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ehrgym.errors import EhrGymError, ResultsError
from ehrgym.eval import stats
from ehrgym.eval.records import EpisodeRecord
from ehrgym.eval.store import EPISODES_FILE, iter_episode_dicts, read_run_config
from ehrgym.vocab import INTENTS, LEVELS, NOISE_LEVELS, NOISE_SUBTYPES, SPLITS, TERMINATIONS, VARIANTS
from ehrgym.registry import Registry

__all__ = [
    "ResultsError", "load_episodes", "summarize", "render_summary", "format_table",
    "SummaryContext", "SummaryTable", "SUMMARY_TABLES", "summary_table",
    "FailureMode", "FAILURE_MODES", "failure_mode", "classify_failures", "failure_examples",
    "RS_PENALTIES", "VARIANT_SCOPES", "VOCAB_ORDER", "vocab_sort",
]


# display order of the closed vocabularies (used to sort breakdown rows)
VOCAB_ORDER: dict[str, tuple[str, ...]] = {
    "intent": INTENTS, "level": LEVELS, "variant": VARIANTS + ("all",), "noise_level": NOISE_LEVELS,
    "noise_subtype": tuple(NOISE_SUBTYPES), "split": SPLITS, "termination": TERMINATIONS,
}


def vocab_sort(df: pd.DataFrame, by: Iterable[str]) -> pd.DataFrame:
    """Stable sort by columns, closed vocabularies in their vocabulary order (unknown values last)."""
    by = [c for c in by if c in df.columns]
    if not by or df.empty:
        return df.reset_index(drop=True)

    def key(col: pd.Series) -> pd.Series:
        order = VOCAB_ORDER.get(str(col.name))
        if order is None:
            return col
        rank = {v: i for i, v in enumerate(order)}
        return col.map(lambda v: rank.get(v, len(order)))

    return df.sort_values(by, key=key, kind="mergesort").reset_index(drop=True)


RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(EpisodeRecord))
VARIANT_SCOPES: tuple[str, ...] = ("clean", "noise", "all")
RS_PENALTIES: tuple[str, ...] = ("0", "5", "10", "N")  # N = number of tasks in scope


# ============================================================================================
# Loading
# ============================================================================================

def _as_dirs(rundirs: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(rundirs, (str, Path)):
        rundirs = [rundirs]
    dirs = [Path(d) for d in rundirs]
    if not dirs:
        raise ResultsError("no run directory given; pass one or more RUNDIRs written by `ehrgym eval run`")
    return dirs


def _model_name(model: Any) -> str | None:
    if model is None or (isinstance(model, float) and math.isnan(model)) or str(model) == "":
        return None
    return str(model)


def _system_label(agent: str, model: str | None) -> str:
    return f"{agent} ({model})" if model else str(agent)


def load_episodes(rundirs: str | Path | Iterable[str | Path], *, trajectories: bool = False) -> pd.DataFrame:
    """All episode records of the given run directories as one DataFrame.

    Columns: the fields of :class:`EpisodeRecord` (``trajectory`` only when ``trajectories``),
    plus ``rundir`` and ``system`` (the agent, with the model in parentheses; made unique per
    run with ``[run_id]`` when two runs would share a label). A torn last line (a crashed
    writer) is ignored; when a ``(task_id, trial)`` appears twice in a run the last record wins.
    ``df.attrs['runs']`` maps each run directory to its ``run.json`` (``None`` when absent).
    """
    rows: list[dict[str, Any]] = []
    configs: dict[str, Any] = {}
    names = [c for c in RECORD_COLUMNS if trajectories or c != "trajectory"]
    for d in _as_dirs(rundirs):
        path = d / EPISODES_FILE
        if not d.is_dir():
            raise ResultsError(f"run directory {d} does not exist; create one with "
                               f"`ehrgym eval run --bench BENCHDIR --agent NAME --out {d}`")
        if not path.is_file():
            raise ResultsError(f"{d} has no {EPISODES_FILE}; it is not a run directory. Create one with "
                               f"`ehrgym eval run --bench BENCHDIR --agent NAME --out {d}`")
        configs[str(d)] = read_run_config(d)
        latest: dict[tuple[str, str, int], dict[str, Any]] = {}
        for lineno, data in enumerate(iter_episode_dicts(path), 1):
            try:
                rec = EpisodeRecord.from_dict(data)
            except EhrGymError as exc:
                raise ResultsError(f"{path}: record {lineno}: {exc}") from exc
            if rec.termination not in TERMINATIONS:
                raise ResultsError(f"{path}: record {lineno}: unknown termination {rec.termination!r}; "
                                   f"expected one of {TERMINATIONS}")
            row = {name: getattr(rec, name) for name in names}  # no deep copy (asdict) of trajectories
            row["rundir"] = str(d)
            latest[(rec.run_id, rec.task_id, int(rec.trial))] = row
        rows.extend(latest.values())
    columns = [c for c in RECORD_COLUMNS if trajectories or c != "trajectory"] + ["rundir", "system"]
    df = pd.DataFrame(rows, columns=[c for c in columns if c != "system"])
    keys = [(str(r), str(a), _model_name(m)) for r, a, m in zip(df["run_id"], df["agent"], df["model"])]
    labels = {k: _system_label(k[1], k[2]) for k in sorted(set(keys), key=lambda k: (k[0], k[1], k[2] or ""))}
    counts = pd.Series(list(labels.values()), dtype=object).value_counts()
    system = {k: (v if counts[v] == 1 else f"{v} [{k[0]}]") for k, v in labels.items()}
    df["system"] = pd.Series([system[k] for k in keys], index=df.index, dtype=object)
    df["trial"] = df["trial"].astype("int64")
    df = df.sort_values(["system", "task_id", "trial"], kind="mergesort").reset_index(drop=True)
    df.attrs["runs"] = configs
    return df


# ============================================================================================
# Preparation
# ============================================================================================

def _prepare(df: pd.DataFrame, strict: bool) -> pd.DataFrame:
    """Adds ``valid``, ``success``, ``answered``, ``abstained``, ``expects_abstain`` and the pair's
    grouping attributes ``pair_intent``, ``pair_level``, ``pair_noise_level``, ``pair_noise_subtype``."""
    missing = [c for c in ("system", "task_id", "pair_id", "trial", "variant", "termination",
                           "success_strict", "success_lenient", "expected_kind") if c not in df.columns]
    if missing:
        raise ResultsError(f"episode table lacks columns {missing}; load it with load_episodes(RUNDIRS)")
    out = df.copy()
    col = "success_strict" if strict else "success_lenient"
    out["valid"] = (out["termination"] != "infrastructure_error") & out[col].notna()
    out["success"] = out[col].where(out["valid"], False).astype(bool)
    out["answered"] = out["termination"] == "answered"
    out["abstained"] = out["termination"] == "abstained"
    out["expects_abstain"] = out["expected_kind"] == "abstain"
    order = out.assign(_v=(out["variant"] != "clean").astype(int)).sort_values(
        ["system", "pair_id", "_v"], kind="mergesort")
    first = order.groupby(["system", "pair_id"], sort=True)[["intent", "level"]].first()
    noisy = order[order["variant"] == "noise"].groupby(["system", "pair_id"], sort=True)[
        ["noise_level", "noise_subtype"]].first()
    attrs = first.join(noisy, how="left").add_prefix("pair_")
    out = out.join(attrs, on=["system", "pair_id"])
    return out


@dataclass(frozen=True)
class SummaryContext:
    """What every summary table function receives."""

    episodes: pd.DataFrame   # all episodes, prepared (see _prepare)
    valid: pd.DataFrame      # infrastructure errors removed
    strict: bool
    n_boot: int
    seed: int
    level: float

    @property
    def systems(self) -> list[str]:
        return sorted(self.episodes["system"].unique().tolist())

    @cached_property
    def pair_clusters(self) -> pd.DataFrame:
        """Per (system, pair) sums for the bootstrap (see ``_pair_clusters``), computed once."""
        return _pair_clusters(self.valid)


@dataclass(frozen=True)
class SummaryTable:
    name: str
    description: str
    build: Callable[[SummaryContext], pd.DataFrame]
    percent: tuple[str, ...] = ()   # columns that hold rates (CI columns X_ci_low/X_ci_high follow X)


SUMMARY_TABLES: Registry[SummaryTable] = Registry("summary table", error=ResultsError)


def summary_table(name: str, description: str, percent: Sequence[str] = ()) -> Callable:
    """Register a summary table: ``@summary_table("name", "what it shows", percent=("rate",))``."""
    def deco(fn: Callable[[SummaryContext], pd.DataFrame]) -> Callable[[SummaryContext], pd.DataFrame]:
        SUMMARY_TABLES.add(name, SummaryTable(name, description, fn, tuple(percent)))
        return fn
    return deco


def summarize(df: pd.DataFrame, strict: bool = True, *, n_boot: int = 1000, seed: int = 0,
              level: float = 0.95, tables: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    """Every registered summary table (or the named ``tables``) for the episodes in ``df``.

    ``strict`` scores abstentions with their reason (``success_strict``), otherwise lenient.
    Bootstrap CIs use ``n_boot`` replicates from ``seed`` at confidence ``level``.
    """
    if df.empty:
        raise ResultsError("no episodes to summarize; the run directories hold no finished episode yet")
    names = list(SUMMARY_TABLES) if tables is None else list(tables)
    unknown = [n for n in names if n not in SUMMARY_TABLES]
    if unknown:
        raise ResultsError(f"unknown summary tables {unknown}; known: {list(SUMMARY_TABLES)}")
    prepared = _prepare(df, strict)
    ctx = SummaryContext(prepared, prepared[prepared["valid"]], strict, n_boot, seed, level)
    return {n: SUMMARY_TABLES[n].build(ctx).reset_index(drop=True) for n in names}


def _scope(frame: pd.DataFrame, scope: str) -> pd.DataFrame:
    return frame if scope == "all" else frame[frame["variant"] == scope]


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else math.nan


def _f1(precision: float, recall: float) -> float:
    if math.isnan(precision) or math.isnan(recall):
        return math.nan
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


# ============================================================================================
# Summary tables
# ============================================================================================

@summary_table("overview", "episodes, tasks, trials and infrastructure errors per system",
               percent=("infra_error_rate",))
def _overview(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system, g in ctx.episodes.groupby("system", sort=True):
        infra = int((g["termination"] == "infrastructure_error").sum())
        rows.append({
            "system": system, "agent": g["agent"].iloc[0], "model": g["model"].iloc[0],
            "runs": int(g["run_id"].nunique()), "tasks": int(g["task_id"].nunique()),
            "pairs": int(g["pair_id"].nunique()), "max_trials": int(g.groupby("task_id")["trial"].nunique().max()),
            "episodes": int(len(g)), "valid_episodes": int(g["valid"].sum()), "infra_errors": infra,
            "infra_error_rate": _ratio(infra, len(g)), "scoring": "strict" if ctx.strict else "lenient",
        })
    return pd.DataFrame(rows)


_SUCCESS_PERCENT = ("clean", "noise", "pair", "drop_abs", "drop_rel")


def _pair_clusters(valid: pd.DataFrame) -> pd.DataFrame:
    """Per (system, pair): summed task success rates and task counts for each variant, and the
    pair's both-correct rate; plus the pair's grouping attributes."""
    task = valid.groupby(["system", "pair_id", "variant", "task_id"], sort=True)["success"].mean().reset_index()
    agg = task.groupby(["system", "pair_id", "variant"], sort=True)["success"].agg(["sum", "count"]).unstack(
        "variant", fill_value=0)
    out = pd.DataFrame(index=agg.index)
    for v in ("clean", "noise"):
        out[f"{v}_sum"] = agg[("sum", v)] if ("sum", v) in agg.columns else 0.0
        out[f"{v}_cnt"] = agg[("count", v)] if ("count", v) in agg.columns else 0
    per_trial = valid.groupby(["system", "pair_id", "trial", "variant"], sort=True)["success"].all().unstack(
        "variant")
    for v in ("clean", "noise"):
        if v not in per_trial.columns:
            per_trial[v] = np.nan
    both = per_trial.dropna(subset=["clean", "noise"])
    pair_rate = (both["clean"].astype(bool) & both["noise"].astype(bool)).groupby(level=["system", "pair_id"]).mean()
    out["pair_sum"] = pair_rate.reindex(out.index).fillna(0.0)
    out["pair_cnt"] = pair_rate.reindex(out.index).notna().astype(int)
    attrs = valid.groupby(["system", "pair_id"], sort=True)[
        ["pair_intent", "pair_level", "pair_noise_level", "pair_noise_subtype"]].first()
    return out.join(attrs).reset_index()


def _success_stat(t: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    clean = t["clean_sum"] / t["clean_cnt"]
    noise = t["noise_sum"] / t["noise_cnt"]
    return {"clean": clean, "noise": noise, "pair": t["pair_sum"] / t["pair_cnt"],
            "drop_abs": clean - noise, "drop_rel": (clean - noise) / clean}


def _success_breakdown(ctx: SummaryContext, by: str | None) -> pd.DataFrame:
    clusters = ctx.pair_clusters
    keys = ["system"] + ([f"pair_{by}"] if by else [])
    rows = []
    sums = ["clean_sum", "clean_cnt", "noise_sum", "noise_cnt", "pair_sum", "pair_cnt"]
    for key, g in clusters.groupby(keys, sort=True, dropna=True):
        key = key if isinstance(key, tuple) else (key,)
        res = stats.cluster_bootstrap({c: g[c].to_numpy(float) for c in sums}, _success_stat,
                                      n_boot=ctx.n_boot, seed=ctx.seed, level=ctx.level)
        row: dict[str, Any] = {"system": key[0]}
        if by:
            row[by] = key[1]
        row.update({"n_pairs": int(len(g)), "n_clean": int(g["clean_cnt"].sum()), "n_noise": int(g["noise_cnt"].sum())})
        for name in ("clean", "noise", "pair", "drop_abs", "drop_rel"):
            est, lo, hi = res[name]
            row.update({name: est, f"{name}_ci_low": lo, f"{name}_ci_high": hi})
        rows.append(row)
    cols = ["system"] + ([by] if by else []) + ["n_pairs", "n_clean", "n_noise"] + [
        c for n in _SUCCESS_PERCENT for c in (n, f"{n}_ci_low", f"{n}_ci_high")]
    return vocab_sort(pd.DataFrame(rows, columns=cols), ["system"] + ([by] if by else []))


@summary_table("clean_vs_noise", "success on Clean, Noise and per pair, and the Clean→Noise drop, with 95% CIs",
               percent=_SUCCESS_PERCENT)
def _clean_vs_noise(ctx: SummaryContext) -> pd.DataFrame:
    return _success_breakdown(ctx, None)


@summary_table("by_intent", "Clean/Noise/pair success and drop per clinical intent", percent=_SUCCESS_PERCENT)
def _by_intent(ctx: SummaryContext) -> pd.DataFrame:
    return _success_breakdown(ctx, "intent")


@summary_table("by_level", "Clean/Noise/pair success and drop per question level", percent=_SUCCESS_PERCENT)
def _by_level(ctx: SummaryContext) -> pd.DataFrame:
    return _success_breakdown(ctx, "level")


@summary_table("by_noise_level", "Clean/Noise/pair success and drop per noise level (record/value/query)",
               percent=_SUCCESS_PERCENT)
def _by_noise_level(ctx: SummaryContext) -> pd.DataFrame:
    return _success_breakdown(ctx, "noise_level")


@summary_table("by_subtype", "Clean/Noise/pair success and drop per noise subtype", percent=_SUCCESS_PERCENT)
def _by_subtype(ctx: SummaryContext) -> pd.DataFrame:
    return _success_breakdown(ctx, "noise_subtype")


@summary_table("strict_vs_lenient", "success with strict (reason checked) and lenient abstention scoring",
               percent=("strict", "lenient", "lenient_minus_strict"))
def _strict_vs_lenient(ctx: SummaryContext) -> pd.DataFrame:
    e = ctx.episodes
    e = e[(e["termination"] != "infrastructure_error") & e["success_strict"].notna() & e["success_lenient"].notna()]
    e = e.assign(success_strict=e["success_strict"].astype(bool).astype(float),
                 success_lenient=e["success_lenient"].astype(bool).astype(float))
    rows = []
    for system in ctx.systems:
        g = e[e["system"] == system]
        for scope in VARIANT_SCOPES:
            s = _scope(g, scope)
            per_task = s.groupby("task_id")[["success_strict", "success_lenient"]].mean()
            strict = float(per_task["success_strict"].mean()) if len(per_task) else math.nan
            lenient = float(per_task["success_lenient"].mean()) if len(per_task) else math.nan
            rows.append({"system": system, "variant": scope, "n_tasks": int(len(per_task)), "strict": strict,
                         "lenient": lenient, "lenient_minus_strict": lenient - strict})
    return pd.DataFrame(rows)


@summary_table("abstention", "abstention precision/recall/F1 (decisions vs abstain-expected tasks), correct "
               "reasons, and over-abstention on answerable tasks (scope 'clean' = over-abstention on Clean)",
               percent=("precision", "recall", "f1", "reason_accuracy", "over_abstention"))
def _abstention(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system in ctx.systems:
        g = ctx.valid[ctx.valid["system"] == system]
        for scope in VARIANT_SCOPES:
            s = _scope(g, scope)
            exp, ab = s["expects_abstain"], s["abstained"]
            tp = int((exp & ab).sum())
            # a correct abstention under strict scoring: the expected reason or an equivalent one
            right_reason = int((exp & ab & s["success_strict"].fillna(False).astype(bool)).sum())
            precision, recall = _ratio(tp, ab.sum()), _ratio(tp, exp.sum())
            f1 = _f1(precision, recall)
            rows.append({
                "system": system, "variant": scope, "episodes": int(len(s)),
                "abstain_expected": int(exp.sum()), "abstentions": int(ab.sum()), "correct_abstentions": tp,
                "precision": precision, "recall": recall, "f1": f1,
                "reason_accuracy": _ratio(right_reason, tp),
                "answerable": int((~exp).sum()), "over_abstentions": int((~exp & ab).sum()),
                "over_abstention": _ratio((~exp & ab).sum(), (~exp).sum()),
            })
    return pd.DataFrame(rows)


@summary_table("pass_k", "pass@k and pass^k (unbiased; tasks with fewer than k valid trials are undefined "
               "and left out, counted in n_undefined) for k = 1..max trials",
               percent=("pass_at_k", "pass_hat_k"))
def _pass_k(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system in ctx.systems:
        g = ctx.valid[ctx.valid["system"] == system]
        all_tasks = ctx.episodes[ctx.episodes["system"] == system]
        for scope in VARIANT_SCOPES:
            s = _scope(g, scope)
            tasks = _scope(all_tasks, scope)["task_id"].unique()
            nc = s.groupby("task_id")["success"].agg(["count", "sum"]).reindex(tasks, fill_value=0)
            n, c = nc["count"].to_numpy(), nc["sum"].to_numpy()
            kmax = int(ctx.episodes.loc[ctx.episodes["system"] == system].groupby("task_id")["trial"].nunique().max())
            for k in range(1, kmax + 1):
                at, n_def, n_undef = stats.mean_defined(stats.pass_at_k_array(n, c, k))
                hat, _, _ = stats.mean_defined(stats.pass_hat_k_array(n, c, k))
                rows.append({"system": system, "variant": scope, "k": k, "n_tasks": int(len(tasks)),
                             "n_defined": n_def, "n_undefined": n_undef, "pass_at_k": at, "pass_hat_k": hat})
    return pd.DataFrame(rows, columns=["system", "variant", "k", "n_tasks", "n_defined", "n_undefined",
                                       "pass_at_k", "pass_hat_k"])


@summary_table("reliability", "reliability score RS(c) of EHRSQL-2024 (+1 success, 0 abstention/no answer, "
               "−c wrong answer), mean per task; c = N is the number of tasks in scope",
               percent=("rs",))
def _reliability(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system in ctx.systems:
        g = ctx.valid[ctx.valid["system"] == system]
        for scope in VARIANT_SCOPES:
            s = _scope(g, scope)
            n_tasks = int(s["task_id"].nunique())
            for label in RS_PENALTIES:
                penalty = float(n_tasks) if label == "N" else float(label)
                score = stats.reliability_scores(s["success"].to_numpy(), s["answered"].to_numpy(), penalty)
                per_task = pd.Series(score, index=s.index).groupby(s["task_id"]).mean()
                rows.append({"system": system, "variant": scope, "c": label, "penalty": penalty,
                             "n_tasks": n_tasks, "rs": float(per_task.mean()) if n_tasks else math.nan})
    return pd.DataFrame(rows)


@summary_table("trials", "success rate per trial index (episodes of that trial)", percent=("success",))
def _trials(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system in ctx.systems:
        g = ctx.valid[ctx.valid["system"] == system]
        for scope in VARIANT_SCOPES:
            for trial, t in _scope(g, scope).groupby("trial", sort=True):
                rows.append({"system": system, "variant": scope, "trial": int(trial), "episodes": int(len(t)),
                             "success": float(t["success"].mean())})
    return pd.DataFrame(rows, columns=["system", "variant", "trial", "episodes", "success"])


@summary_table("trial_variance", "run-to-run variance: mean, std (ddof=1), min and max of the per-trial success",
               percent=("mean", "std", "min", "max"))
def _trial_variance(ctx: SummaryContext) -> pd.DataFrame:
    per_trial = _trials(ctx)
    rows = []
    for (system, scope), g in per_trial.groupby(["system", "variant"], sort=False):
        x = g["success"].to_numpy(float)
        rows.append({"system": system, "variant": scope, "n_trials": int(len(x)), "mean": float(x.mean()),
                     "std": float(x.std(ddof=1)) if len(x) > 1 else math.nan,
                     "min": float(x.min()), "max": float(x.max())})
    return pd.DataFrame(rows, columns=["system", "variant", "n_trials", "mean", "std", "min", "max"])


@summary_table("mcnemar", "McNemar's test on Clean/Noise pairs (a variant counts as correct on a pair when it "
               "succeeds in a strict majority of its valid trials): exact binomial and chi² (continuity-corrected)")
def _mcnemar(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    v = ctx.valid
    maj = v.groupby(["system", "pair_id", "variant"], sort=True)["success"].mean().unstack("variant")
    for v_ in ("clean", "noise"):
        if v_ not in maj.columns:
            maj[v_] = np.nan
    maj = maj.dropna(subset=["clean", "noise"])
    for system in ctx.systems:
        g = maj.loc[system] if system in maj.index.get_level_values(0) else maj.iloc[0:0]
        cl, no = g["clean"].to_numpy() > 0.5, g["noise"].to_numpy() > 0.5
        b, c = int((cl & ~no).sum()), int((~cl & no).sum())
        res = stats.mcnemar(b, c)
        rows.append({"system": system, "n_pairs": int(len(g)), "both_correct": int((cl & no).sum()),
                     "clean_only": b, "noise_only": c, "both_wrong": int((~cl & ~no).sum()),
                     "statistic": res.statistic, "p_chi2": res.p_chi2, "p_exact": res.p_exact})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------
# Failure modes (first matching mode wins; registration order is precedence)
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FailureMode:
    name: str
    label: str
    matches: Callable[[pd.DataFrame], pd.Series]


# checked in registration order: built-in modes first, then plugins ("ehrgym.failure_modes")
FAILURE_MODES: Registry[FailureMode] = Registry("failure mode", error=ResultsError)


def failure_mode(name: str, label: str) -> Callable:
    """Register a failure mode; earlier registrations take precedence."""
    def deco(fn: Callable[[pd.DataFrame], pd.Series]) -> Callable[[pd.DataFrame], pd.Series]:
        FAILURE_MODES.add(name, FailureMode(name, label, fn))
        return fn
    return deco


@failure_mode("false_abstention", "false abstention")
def _fm_false_abstention(e: pd.DataFrame) -> pd.Series:
    return e["abstained"] & ~e["expects_abstain"]


@failure_mode("missed_abstention", "missed abstention")
def _fm_missed_abstention(e: pd.DataFrame) -> pd.Series:
    return e["answered"] & e["expects_abstain"]


@failure_mode("wrong_reason", "wrong abstention reason")
def _fm_wrong_reason(e: pd.DataFrame) -> pd.Series:
    return e["abstained"] & e["expects_abstain"]


@failure_mode("step_limit", "step/time limit")
def _fm_step_limit(e: pd.DataFrame) -> pd.Series:
    return e["termination"].isin(["step_limit", "time_limit"])


@failure_mode("agent_error", "agent error")
def _fm_agent_error(e: pd.DataFrame) -> pd.Series:
    return e["termination"] == "agent_error"


@failure_mode("sql_error", "SQL error")
def _fm_sql_error(e: pd.DataFrame) -> pd.Series:
    return e["answered"] & (e["sql_errors"].fillna(0) > 0)


@failure_mode("wrong_value", "wrong value")
def _fm_wrong_value(e: pd.DataFrame) -> pd.Series:
    return e["answered"]


def classify_failures(episodes: pd.DataFrame, strict: bool = True) -> pd.Series:
    """Failure mode of every failed valid episode (index of ``episodes``); None elsewhere.

    ``sql_error`` = a wrong answer given after at least one failed SQL query; ``wrong_value`` =
    any other wrong answer (value or type). Accepts raw or prepared episode tables.
    """
    e = episodes if "valid" in episodes.columns else _prepare(episodes, strict)
    failed = e["valid"] & ~e["success"]
    mode = pd.Series([None] * len(e), index=e.index, dtype=object)
    for fm in FAILURE_MODES.values():
        hit = failed & mode.isna() & fm.matches(e).astype(bool)
        mode[hit] = fm.name
    mode[failed & mode.isna()] = "other"
    return mode


@summary_table("failure_modes", "failed valid episodes by failure mode (first match in registry order)",
               percent=("share_of_failures", "share_of_episodes"))
def _failure_modes(ctx: SummaryContext) -> pd.DataFrame:
    mode = classify_failures(ctx.episodes, ctx.strict)
    e = ctx.episodes.assign(failure_mode=mode)
    names = list(FAILURE_MODES) + (["other"] if (mode == "other").any() else [])
    labels = {n: FAILURE_MODES[n].label if n in FAILURE_MODES else "other" for n in names}
    rows = []
    for system in ctx.systems:
        g = e[(e["system"] == system) & e["valid"]]
        for scope in VARIANT_SCOPES:
            s = _scope(g, scope)
            n_failed = int(s["failure_mode"].notna().sum())
            for n in names:
                count = int((s["failure_mode"] == n).sum())
                rows.append({"system": system, "variant": scope, "mode": n, "label": labels[n], "count": count,
                             "share_of_failures": _ratio(count, n_failed),
                             "share_of_episodes": _ratio(count, len(s))})
    return pd.DataFrame(rows)


def failure_examples(episodes: pd.DataFrame, per_mode: int = 2, strict: bool = True) -> pd.DataFrame:
    """Up to ``per_mode`` failed episodes per (system, failure mode), first by task id, for display."""
    mode = classify_failures(episodes, strict)
    e = episodes.assign(failure_mode=mode)
    e = e[e["failure_mode"].notna()].sort_values(["system", "failure_mode", "task_id", "trial"], kind="mergesort")
    cols = [c for c in ("system", "failure_mode", "task_id", "trial", "variant", "noise_subtype", "expected_kind",
                        "expected_reason", "termination", "answered_value", "abstain_reason", "sql_errors", "steps",
                        "error", "trajectory") if c in e.columns]
    return e.groupby(["system", "failure_mode"], sort=True).head(per_mode)[cols].reset_index(drop=True)


@summary_table("terminations", "how episodes ended (infrastructure errors are counted here and excluded "
               "from every denominator)", percent=("share",))
def _terminations(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system in ctx.systems:
        g = ctx.episodes[ctx.episodes["system"] == system]
        for t in TERMINATIONS:
            count = int((g["termination"] == t).sum())
            rows.append({"system": system, "termination": t, "count": count, "share": _ratio(count, len(g))})
    return pd.DataFrame(rows)


@summary_table("cost", "steps, tokens, cost (USD) and latency (s) per system, over all episodes")
def _cost(ctx: SummaryContext) -> pd.DataFrame:
    rows = []
    for system, g in ctx.episodes.groupby("system", sort=True):
        wall = g["wall_seconds"].astype(float)
        tokens = g["prompt_tokens"].astype(float) + g["completion_tokens"].astype(float)
        rows.append({
            "system": system, "episodes": int(len(g)), "steps_mean": float(g["steps"].mean()),
            "sql_errors_mean": float(g["sql_errors"].mean()),
            "prompt_tokens": int(g["prompt_tokens"].sum()), "completion_tokens": int(g["completion_tokens"].sum()),
            "tokens_per_episode": float(tokens.mean()), "cost_usd": float(g["cost_usd"].sum()),
            "cost_per_episode_usd": float(g["cost_usd"].mean()), "wall_seconds_mean": float(wall.mean()),
            "wall_seconds_median": float(wall.median()), "wall_seconds_p90": float(wall.quantile(0.9)),
            "wall_seconds_total": float(wall.sum()),
        })
    return pd.DataFrame(rows)


# ============================================================================================
# Rendering
# ============================================================================================

POINTS_COLUMNS: frozenset[str] = frozenset({"drop_abs", "lenient_minus_strict", "std"})  # differences of rates


def format_table(df: pd.DataFrame, percent: Sequence[str] = (), *, decimals: int = 1,
                 undefined: str = "undefined") -> pd.DataFrame:
    """Display strings: rate columns as % with their CI merged (``62.2 [58.1, 66.0]``), other floats
    with 3 significant decimals, NaN as ``undefined``. Column headers of rates get ``(%)``, those of
    rate differences (``POINTS_COLUMNS``) ``(pts)``."""
    out = pd.DataFrame(index=df.index)
    skip = {f"{p}_ci_{s}" for p in percent for s in ("low", "high")}

    def pct(x: Any) -> str:
        return undefined if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{decimals}f}"

    def num(x: Any) -> str:
        if x is None:
            return "–"
        if isinstance(x, float) and math.isnan(x):
            return undefined
        if isinstance(x, (bool, np.bool_)):
            return str(bool(x))
        if isinstance(x, (int, np.integer)):
            return str(int(x))
        if isinstance(x, (float, np.floating)):
            v = float(x)
            return f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:,.3f}".rstrip("0").rstrip(".")
        return str(x)

    for col in df.columns:
        if col in skip:
            continue
        if col in percent:
            lo, hi = f"{col}_ci_low", f"{col}_ci_high"
            header = f"{col} (pts)" if col in POINTS_COLUMNS else f"{col} (%)"
            if lo in df.columns and hi in df.columns:
                out[header] = [_with_ci(pct(v), pct(a), pct(b), undefined) for v, a, b in zip(df[col], df[lo], df[hi])]
            else:
                out[header] = [pct(v) for v in df[col]]
        else:
            out[col] = [num(v) for v in df[col]]
    return out


def _with_ci(value: str, low: str, high: str, undefined: str) -> str:
    if value == undefined or (low == undefined and high == undefined):
        return value
    return f"{value} [{low}, {high}]"


_RENDER_ORDER = ("overview", "clean_vs_noise", "by_noise_level", "by_subtype", "by_intent", "by_level",
                 "strict_vs_lenient", "abstention", "pass_k", "reliability", "trial_variance", "mcnemar",
                 "failure_modes", "terminations", "cost")


def render_summary(tables: dict[str, pd.DataFrame]) -> str:
    """Markdown text of the summary tables for a terminal or a notebook."""
    from tabulate import tabulate

    parts = []
    names = [n for n in _RENDER_ORDER if n in tables] + [n for n in tables if n not in _RENDER_ORDER]
    for name in names:
        df = tables[name]
        spec = SUMMARY_TABLES.get(name, None)
        if name == "failure_modes" and not df.empty:
            df = df[df["count"] > 0]
        shown = format_table(df, spec.percent if spec else ())
        title = f"## {name}" + (f" — {spec.description}" if spec else "")
        body = tabulate(shown, headers="keys", tablefmt="pipe", showindex=False, disable_numparse=True) \
            if len(shown) else "(no rows)"
        parts.append(f"{title}\n\n{body}\n")
    return "\n".join(parts)
