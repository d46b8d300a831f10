"""Exploring a benchmark and its noise: the logic behind notebooks 01 (dataset statistics),
03 (failure trajectories) and 04 (the interactive noise explorer), testable without widgets.

>>> ex = NoiseExplorer("data/synthetic-p1000-s0.duckdb", "data/bench/…")     # doctest: +SKIP
>>> view = ex.compare(ex.pairs().pair_id[0])       # question, evidence clean vs noisy, credulous vs expected
>>> ex.run_agent(view.noise, "skeptic").steps      # a live episode, step by step

Evidence rows come from the task's ``meta['evidence_sql']`` run on a private in-memory DuckDB
connection: the database attached read-only as ``base`` and the task's overlay applied with
:class:`~ehrgym.db.overlay.OverlaySession` — the same views an episode sees.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import duckdb
import pandas as pd

from ehrgym.bench.answers import format_answer
from ehrgym.bench.task import Task
from ehrgym.db.connect import attach_base
from ehrgym.db.overlay import Overlay, OverlaySession
from ehrgym.db.schema import search_path_sql
from ehrgym.errors import EhrGymError
from ehrgym.vocab import INTENTS, LEVELS, NOISE_LEVELS, NOISE_SUBTYPES, SPLITS, VARIANTS

ORDER: dict[str, tuple[str, ...]] = {"intent": INTENTS, "level": LEVELS, "variant": VARIANTS,
                                     "noise_level": NOISE_LEVELS, "noise_subtype": tuple(NOISE_SUBTYPES),
                                     "split": SPLITS}
STATUS_COLUMN = "evidence"          # evidence_diff: which side a row is on
MAX_CELL = 160                      # characters of an observation shown per trajectory step


class ExploreError(EhrGymError):
    """An exploration request cannot be served (unknown pair, task without evidence SQL, …)."""


# =============================================================================================
# loading
# =============================================================================================
def load_tasks(bench: str | Path | Any) -> list[Task]:
    """Tasks of a benchmark directory, a loaded ``Benchmark`` or an iterable of :class:`Task`."""
    if isinstance(bench, (str, Path)):
        from ehrgym.bench.dataset import load_benchmark

        return list(load_benchmark(bench).tasks)
    tasks = getattr(bench, "tasks", bench)
    out = list(tasks)
    if not all(isinstance(t, Task) for t in out):
        raise ExploreError("expected a benchmark directory, a Benchmark or Task objects")
    return out


def expected_text(task: Task) -> str:
    """What the task expects, as a person would say it: ``answer 7.2`` or ``abstain (reason)``."""
    exp = task.expected
    if exp.is_abstain:
        return f"abstain ({exp.reason})"
    return f"answer {format_answer(exp.value, exp.answer)}"


def _vocab_sort(df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    by = [c for c in by if c in df.columns]
    if df.empty or not by:
        return df.reset_index(drop=True)

    def key(col: pd.Series) -> pd.Series:
        order = ORDER.get(str(col.name))
        if order is None:
            return col.astype(str)
        rank = {v: i for i, v in enumerate(order)}
        return col.map(lambda v: rank.get(v, len(order)))

    return df.sort_values(by, key=key, kind="mergesort").reset_index(drop=True)


# =============================================================================================
# dataset statistics (notebook 01)
# =============================================================================================
TASK_COLUMNS = ("task_id", "pair_id", "variant", "intent", "level", "template_id", "split", "noise_level",
                "noise_subtype", "expected_kind", "expected_reason", "answer_type", "complexity", "n_tables",
                "question")


def task_frame(tasks: Iterable[Task]) -> pd.DataFrame:
    """One row per task: categories, expected outcome, answer type and SQL complexity."""
    rows = []
    for t in tasks:
        meta = t.meta or {}
        tables = meta.get("tables") or []
        rows.append({
            "task_id": t.task_id, "pair_id": t.pair_id, "variant": t.variant, "intent": t.intent, "level": t.level,
            "template_id": t.template_id, "split": t.split,
            "noise_level": t.noise.level if t.noise else None, "noise_subtype": t.noise.subtype if t.noise else None,
            "expected_kind": t.expected.kind, "expected_reason": t.expected.reason,
            "answer_type": meta.get("answer_type", t.expected.answer.type),
            "complexity": _complexity(meta.get("complexity")), "n_tables": len(tables), "question": t.question,
        })
    return pd.DataFrame(rows, columns=list(TASK_COLUMNS))


def _complexity(value: Any) -> int | None:
    """The complexity score of ``meta['complexity']`` (an int, or a dict with a ``score``/``total``)."""
    if isinstance(value, dict):
        for key in ("score", "total", "count"):
            if key in value:
                return int(value[key])
        return None
    return None if value is None else int(value)


def dataset_overview(frame: pd.DataFrame) -> pd.DataFrame:
    """Tasks and pairs per split, and how many noisy tasks expect an answer vs an abstention."""
    rows = []
    for split, g in frame.groupby("split", sort=False):
        noisy = g[g["variant"] == "noise"]
        rows.append({"split": split, "pairs": g["pair_id"].nunique(), "tasks": len(g),
                     "noise_expect_answer": int((noisy["expected_kind"] == "answer").sum()),
                     "noise_expect_abstain": int((noisy["expected_kind"] == "abstain").sum()),
                     "templates": g["template_id"].nunique()})
    out = _vocab_sort(pd.DataFrame(rows), ["split"])
    total = {"split": "all", "pairs": frame["pair_id"].nunique(), "tasks": len(frame),
             "noise_expect_answer": int(out["noise_expect_answer"].sum()) if len(out) else 0,
             "noise_expect_abstain": int(out["noise_expect_abstain"].sum()) if len(out) else 0,
             "templates": frame["template_id"].nunique()}
    return pd.concat([out, pd.DataFrame([total])], ignore_index=True)


def category_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Pairs by intent × level × noise level × subtype (one row per combination present)."""
    noisy = frame[frame["variant"] == "noise"]
    counts = (noisy.groupby(["intent", "level", "noise_level", "noise_subtype"], sort=False).size()
              .rename("pairs").reset_index())
    return _vocab_sort(counts, ["intent", "level", "noise_level", "noise_subtype"])


def category_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """The same counts as a matrix: rows intent × level, columns noise level / subtype, plus totals."""
    counts = category_counts(frame)
    if counts.empty:
        return pd.DataFrame()
    mat = counts.pivot_table(index=["intent", "level"], columns=["noise_level", "noise_subtype"], values="pairs",
                             aggfunc="sum", fill_value=0)
    cols = [(lvl, sub) for sub, lvl in NOISE_SUBTYPES.items() if (lvl, sub) in mat.columns]
    rows = [(i, lv) for i in INTENTS for lv in LEVELS if (i, lv) in mat.index]
    mat = mat.loc[rows, cols]
    mat[("all", "pairs")] = mat.sum(axis=1)
    mat.loc[("all", ""), :] = mat.sum(axis=0)
    return mat.astype(int)


def complexity_distribution(frame: pd.DataFrame) -> pd.DataFrame:
    """Clean gold-SQL complexity: tasks per complexity score (rows) and intent (columns)."""
    clean = frame[(frame["variant"] == "clean") & frame["complexity"].notna()]
    if clean.empty:
        return pd.DataFrame()
    tab = pd.crosstab(clean["complexity"].astype(int), clean["intent"])
    tab = tab[[i for i in INTENTS if i in tab.columns]]
    tab.index.name = "complexity"
    return tab


def complexity_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean / median / max clean gold-SQL complexity and tables touched per intent × level."""
    clean = frame[(frame["variant"] == "clean") & frame["complexity"].notna()]
    if clean.empty:
        return pd.DataFrame()
    g = clean.groupby(["intent", "level"], sort=False)
    out = g.agg(tasks=("task_id", "size"), complexity_mean=("complexity", "mean"),
                complexity_median=("complexity", "median"), complexity_max=("complexity", "max"),
                tables_mean=("n_tables", "mean")).reset_index()
    out["complexity_mean"] = out["complexity_mean"].round(2)
    out["tables_mean"] = out["tables_mean"].round(2)
    return _vocab_sort(out, ["intent", "level"])


def example_pairs(tasks: Iterable[Task], per_subtype: int = 1) -> pd.DataFrame:
    """The first ``per_subtype`` pairs (by pair id) of every noise subtype: both questions and outcomes."""
    by_pair: dict[str, dict[str, Task]] = {}
    for t in tasks:
        by_pair.setdefault(t.pair_id, {})[t.variant] = t
    seen: Counter[str] = Counter()
    rows = []
    for pair_id in sorted(by_pair):
        pair = by_pair[pair_id]
        if "clean" not in pair or "noise" not in pair:
            continue
        clean, noise = pair["clean"], pair["noise"]
        assert noise.noise is not None
        sub = noise.noise.subtype
        if seen[sub] >= per_subtype:
            continue
        seen[sub] += 1
        rows.append({"noise_level": noise.noise.level, "noise_subtype": sub, "intent": clean.intent,
                     "level": clean.level, "pair_id": pair_id, "clean_question": clean.question,
                     "clean_expected": expected_text(clean), "noisy_question": noise.question,
                     "noisy_expected": expected_text(noise), "noise": noise.noise.description})
    return _vocab_sort(pd.DataFrame(rows), ["noise_level", "noise_subtype"])


# =============================================================================================
# trajectories (notebooks 03 and 04)
# =============================================================================================
def _short(text: Any, limit: int = MAX_CELL) -> str:
    s = "" if text is None else str(text)
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def action_text(action: dict[str, Any]) -> str:
    """One line for a recorded action (``action_to_dict`` form)."""
    tool = action.get("tool", "?")
    if tool == "sql":
        return f"sql: {action.get('query', '')}"
    if tool == "python":
        return f"python: {action.get('code', '')}"
    if tool == "answer":
        if action.get("abstain"):
            return f"abstain: {action.get('abstain')}"
        return f"answer: {json.dumps(action.get('value'), ensure_ascii=False, default=str)}"
    return f"{tool}: {action.get('text', '')}"


def trajectory_frame(trajectory: dict[str, Any] | None, limit: int = MAX_CELL) -> pd.DataFrame:
    """A recorded trajectory as a table: step, tool, action, observation (shortened)."""
    steps = (trajectory or {}).get("steps") or []
    rows = [{"step": s.get("index"), "tool": (s.get("action") or {}).get("tool"),
             "action": _short(action_text(s.get("action") or {}), limit),
             "observation": _short(s.get("observation"), limit)} for s in steps]
    return pd.DataFrame(rows, columns=["step", "tool", "action", "observation"])


def failure_gallery(episodes: pd.DataFrame, per_mode: int = 1, strict: bool = True) -> list[dict[str, Any]]:
    """Example failed episodes per (system, failure mode), each with its trajectory as a table.

    ``episodes`` must come from ``load_episodes(..., trajectories=True)``."""
    from ehrgym.eval.metrics import failure_examples

    if "trajectory" not in episodes.columns:
        raise ExploreError("load the episodes with trajectories=True to show failed trajectories")
    out = []
    for rec in failure_examples(episodes, per_mode=per_mode, strict=strict).to_dict("records"):
        traj = rec.pop("trajectory", None)
        header = {k: (None if _missing(v) else v) for k, v in rec.items()}
        detail = ((traj or {}).get("verdict") or {}).get("detail", "")
        where = header.get("variant") or ""
        if header.get("noise_subtype"):
            where += f", {header['noise_subtype']}"
        title = (f"**{header.get('system')} · {header.get('failure_mode')}** — task `{header.get('task_id')}` "
                 f"(trial {header.get('trial')}, {where}): {detail}")
        out.append({"header": header, "verdict": detail, "title": title, "steps": trajectory_frame(traj)})
    return out


def _missing(value: Any) -> bool:
    """None or a pandas/NumPy missing value (NaN, NaT, pd.NA); False for lists and other containers."""
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


# =============================================================================================
# the noise explorer (notebook 04)
# =============================================================================================
@dataclass
class AgentRun:
    """One live episode of an agent on a task."""

    agent: str
    task_id: str
    success: bool | None
    termination: str
    answer: Any
    abstain: str | None
    failure: str | None
    verdict: str
    steps: pd.DataFrame

    @property
    def said(self) -> str:
        if self.abstain:
            return f"abstain ({self.abstain})"
        if self.termination in ("answered",):
            return f"answer {json.dumps(self.answer, ensure_ascii=False, default=str)}"
        return f"no answer ({self.termination})"

    def summary(self) -> dict[str, Any]:
        return {"agent": self.agent, "task_id": self.task_id, "said": self.said, "success": self.success,
                "termination": self.termination, "failure": self.failure, "verdict": self.verdict}


@dataclass
class PairView:
    """Everything the explorer shows about one Clean–Noise pair."""

    pair_id: str
    clean: Task
    noise: Task
    evidence_clean: pd.DataFrame
    evidence_noise: pd.DataFrame
    evidence: pd.DataFrame                     # side by side, with the STATUS_COLUMN
    credulous: dict[str, AgentRun] = field(default_factory=dict)   # variant -> run

    @property
    def noise_label(self) -> str:
        assert self.noise.noise is not None
        return f"{self.noise.noise.level} · {self.noise.noise.subtype}"

    def outcome_table(self) -> pd.DataFrame:
        """Per variant: question, expected outcome, what the credulous agent said and whether it was right."""
        rows = []
        for variant, task in (("clean", self.clean), ("noise", self.noise)):
            run = self.credulous.get(variant)
            rows.append({"variant": variant, "question": task.question, "expected": expected_text(task),
                         "credulous_says": run.said if run else None,
                         "credulous_correct": run.success if run else None})
        return pd.DataFrame(rows)

    def summary(self) -> dict[str, Any]:
        noise = self.noise.noise
        assert noise is not None
        return {"pair_id": self.pair_id, "intent": self.clean.intent, "level": self.clean.level,
                "noise": self.noise_label, "description": noise.description,
                "question_edit": noise.question_edit, "overlay_tables": noise.overlay.tables,
                "evidence_rows_clean": len(self.evidence_clean), "evidence_rows_noise": len(self.evidence_noise)}


def evidence_diff(clean: pd.DataFrame, noise: pd.DataFrame) -> pd.DataFrame:
    """Clean and noisy evidence rows in one table, each row marked ``both``, ``clean only`` (removed
    or edited by the noise) or ``noisy only`` (inserted or edited). Rows are matched as whole
    tuples, counting duplicates (a duplicated row appears once as ``both`` and once as ``noisy only``)."""
    cols = list(dict.fromkeys(list(clean.columns) + list(noise.columns)))
    c = clean.reindex(columns=cols)
    n = noise.reindex(columns=cols)

    def keys(df: pd.DataFrame) -> list[tuple[str, ...]]:
        return [tuple(_cell_key(v) for v in row) for row in df.itertuples(index=False, name=None)]

    ck, nk = keys(c), keys(n)
    remaining = Counter(nk)
    status_c = []
    for k in ck:
        if remaining[k] > 0:
            remaining[k] -= 1
            status_c.append("both")
        else:
            status_c.append("clean only")
    matched = Counter(ck)
    status_n = []
    for k in nk:
        if matched[k] > 0:
            matched[k] -= 1
            status_n.append(None)       # already listed from the clean side
        else:
            status_n.append("noisy only")
    left = c.assign(**{STATUS_COLUMN: status_c})
    right = n.assign(**{STATUS_COLUMN: status_n})
    right = right[right[STATUS_COLUMN].notna()]
    out = pd.concat([left, right], ignore_index=True)
    return out[[STATUS_COLUMN] + cols]


def _cell_key(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "\0null"
    if v is pd.NaT:
        return "\0null"
    try:
        if pd.isna(v):
            return "\0null"
    except (TypeError, ValueError):
        pass
    return repr(v) if isinstance(v, float) else str(v)


class NoiseExplorer:
    """Pairs of a benchmark on its database: questions, evidence, credulous vs expected, live agents.

    Holds one in-memory DuckDB connection (the database attached read-only, MIMIC-IV views from
    :class:`OverlaySession`) and, per agent, one warm episode worker; call :meth:`close` (or use
    ``with``) when done.
    """

    def __init__(self, db_path: str | Path, bench: str | Path | Any, *, max_rows: int = 200) -> None:
        self.db_path = Path(db_path)
        self.tasks = load_tasks(bench)
        self.max_rows = max_rows
        self._by_pair: dict[str, dict[str, Task]] = {}
        for t in self.tasks:
            self._by_pair.setdefault(t.pair_id, {})[t.variant] = t
        self._con = duckdb.connect()
        attach_base(self._con, self.db_path)
        self._session = OverlaySession(self._con)
        self._con.execute(search_path_sql())
        self._workers: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        for w in self._workers.values():
            w.close()
        self._workers.clear()
        self._con.close()

    def __enter__(self) -> "NoiseExplorer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- choosing a pair --------------------------------------------------------------------
    def pairs(self, **filters: Any) -> pd.DataFrame:
        """One row per complete pair (pair id, intent, level, noise level, subtype, template, clean
        question), in vocabulary order; ``filters`` keep rows whose column equals the value."""
        rows = []
        for pair_id, pair in self._by_pair.items():
            if "clean" not in pair or "noise" not in pair:
                continue
            noise = pair["noise"].noise
            assert noise is not None
            rows.append({"pair_id": pair_id, "intent": pair["clean"].intent, "level": pair["clean"].level,
                         "noise_level": noise.level, "noise_subtype": noise.subtype,
                         "template_id": pair["clean"].template_id, "split": pair["clean"].split,
                         "question": pair["clean"].question})
        df = pd.DataFrame(rows, columns=["pair_id", "intent", "level", "noise_level", "noise_subtype", "template_id",
                                         "split", "question"])
        for key, want in filters.items():
            if key not in df.columns:
                raise ExploreError(f"cannot filter pairs by {key!r}; columns: {list(df.columns)}")
            df = df[df[key] == want]
        return _vocab_sort(df, ["noise_level", "noise_subtype", "intent", "level", "pair_id"])

    def pair(self, pair_id: str) -> tuple[Task, Task]:
        """The (clean, noise) tasks of a pair."""
        pair = self._by_pair.get(pair_id)
        if pair is None or "clean" not in pair or "noise" not in pair:
            raise ExploreError(f"no complete Clean–Noise pair {pair_id!r}; list them with NoiseExplorer.pairs()")
        return pair["clean"], pair["noise"]

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise ExploreError(f"no task {task_id!r} in this benchmark")

    # -- evidence ---------------------------------------------------------------------------
    def query(self, sql: str, overlay: Overlay | None = None) -> pd.DataFrame:
        """Run ``sql`` on the database as seen through ``overlay`` (clean when None); at most ``max_rows`` rows."""
        self._session.apply(overlay or Overlay())
        try:
            return self._con.sql(sql).limit(self.max_rows).df()
        except duckdb.Error as exc:
            raise ExploreError(f"query failed: {exc}") from exc
        finally:
            self._session.clear()

    def evidence(self, task: Task) -> pd.DataFrame:
        """The evidence rows of ``task`` on its own view of the data (``meta['evidence_sql']``)."""
        sql = (task.meta or {}).get("evidence_sql")
        if not sql:
            raise ExploreError(f"task {task.task_id} has no meta['evidence_sql']; rebuild the benchmark with a "
                               f"kit version that records it (`ehrgym bench build`)")
        return self.query(sql, task.overlay)

    def compare(self, pair_id: str, *, credulous: bool = True) -> PairView:
        """The pair side by side: evidence on clean vs noisy views and (optionally) credulous runs."""
        clean, noise = self.pair(pair_id)
        ev_c, ev_n = self.evidence(clean), self.evidence(noise)
        view = PairView(pair_id, clean, noise, ev_c, ev_n, evidence_diff(ev_c, ev_n))
        if credulous:
            view.credulous = {"clean": self.run_agent(clean, "credulous"), "noise": self.run_agent(noise, "credulous")}
        return view

    # -- live agents --------------------------------------------------------------------------
    def run_agent(self, task: Task | str, agent: str, *, trial: int = 0, seed: int = 0,
                  **agent_kwargs: Any) -> AgentRun:
        """Run ``agent`` live on ``task`` exactly as the evaluation runner does (same briefing and
        environment); agents with options get one worker per option set."""
        from ehrgym.agents.registry import get_agent_entry
        from ehrgym.eval.runner import EpisodeWorker, WorkerConfig

        if isinstance(task, str):
            task = self.task(task)
        key = json.dumps([agent, agent_kwargs], sort_keys=True, default=str)
        worker = self._workers.get(key)
        if worker is None:
            env_config = dict(getattr(get_agent_entry(agent).factory, "env_defaults", {}) or {})
            cfg = WorkerConfig(str(self.db_path), agent, dict(agent_kwargs), env_config, "explore", seed, None, 0)
            worker = self._workers[key] = EpisodeWorker(cfg)
        rec = worker.run(task, trial)
        traj = rec.get("trajectory") or {}
        verdict = (traj.get("verdict") or {}).get("detail", "")
        if rec.get("error"):
            verdict = f"{verdict} [{_short(rec['error'], 300)}]".strip()
        return AgentRun(agent=agent, task_id=task.task_id, success=rec.get("success_strict"),
                        termination=rec["termination"], answer=rec.get("answered_value"),
                        abstain=rec.get("abstain_reason"), failure=rec.get("failure"), verdict=verdict,
                        steps=trajectory_frame(traj))


# =============================================================================================
# the widget (thin: every callback calls the functions above)
# =============================================================================================
def explorer_widget(explorer: NoiseExplorer, agents: Sequence[str] = ("credulous", "skeptic", "oracle"),
                    pair_id: str | None = None) -> Any:
    """An ipywidgets UI: filter by noise subtype, pick a pair, see question / evidence / credulous vs
    expected, and run a chosen agent live. Returns the top-level widget (``ui.children`` for tests)."""
    import ipywidgets as w
    from IPython.display import display

    index = explorer.pairs()
    if index.empty:
        raise ExploreError("the benchmark has no complete pairs to explore")
    subtypes = ["(all)"] + list(dict.fromkeys(index["noise_subtype"]))
    subtype = w.Dropdown(options=subtypes, value="(all)", description="noise")

    def pair_options(sub: str) -> list[tuple[str, str]]:
        rows = index if sub == "(all)" else index[index["noise_subtype"] == sub]
        return [(f"{r.noise_subtype} · {r.intent}/{r.level} · {_short(r.question, 70)}", r.pair_id)
                for r in rows.itertuples()]

    options = pair_options("(all)")
    pair = w.Dropdown(options=options, value=pair_id or options[0][1], description="pair",
                      layout=w.Layout(width="95%"))
    agent = w.Dropdown(options=list(agents), value=list(agents)[0], description="agent")
    run_button = w.Button(description="run agent live", button_style="primary")
    show = w.Output()
    live = w.Output()

    def render(_: Any = None) -> None:
        show.clear_output()
        live.clear_output()
        with show:
            view = explorer.compare(pair.value)
            display(pd.DataFrame([view.summary()]).T.rename(columns={0: ""}))
            display(view.outcome_table())
            display(view.evidence)

    def on_subtype(change: dict[str, Any]) -> None:
        opts = pair_options(change["new"])
        pair.options = opts
        pair.value = opts[0][1]

    def on_run(_: Any = None) -> None:
        live.clear_output()
        with live:
            _, noise = explorer.pair(pair.value)
            result = explorer.run_agent(noise, agent.value)
            display(pd.DataFrame([result.summary()]))
            display(result.steps)

    subtype.observe(on_subtype, names="value")
    pair.observe(render, names="value")
    run_button.on_click(on_run)
    render()
    return w.VBox([w.HBox([subtype, agent, run_button]), pair, show, live])


# =============================================================================================
# report display (notebook 03)
# =============================================================================================
def report_section(manifest: Any, name: str, *, table: bool = True, figure: bool = True) -> list[Any]:
    """IPython display objects for the report item ``name``: its Markdown table and its PNG figure
    (whichever :func:`ehrgym.report.build_report` wrote; a note when it skipped them)."""
    from IPython.display import Image, Markdown

    out: list[Any] = []
    if table:
        paths = {p.suffix: p for p in (manifest.tables.get(name) or [])}
        if ".md" in paths:
            out.append(Markdown(Path(paths[".md"]).read_text(encoding="utf-8")))
        elif f"table:{name}" in manifest.skipped:
            out.append(Markdown(f"*table `{name}` skipped: {manifest.skipped[f'table:{name}']}*"))
    if figure:
        paths = {p.suffix: p for p in (manifest.figures.get(name) or [])}
        if ".png" in paths:
            out.append(Image(filename=str(paths[".png"])))
        elif f"figure:{name}" in manifest.skipped:
            out.append(Markdown(f"*figure `{name}` skipped: {manifest.skipped[f'figure:{name}']}*"))
    return out


def trap_table(explorer: NoiseExplorer, per_subtype: int = 1) -> pd.DataFrame:
    """For the first ``per_subtype`` pairs of each noise subtype: what the credulous agent says on the
    noisy question and what is expected — the trap each noise sets, one line per pair."""
    index = explorer.pairs()
    rows = []
    for _, g in index.groupby("noise_subtype", sort=False):
        for pair_id in g["pair_id"].head(per_subtype):
            _, noise = explorer.pair(pair_id)
            run = explorer.run_agent(noise, "credulous")
            assert noise.noise is not None
            rows.append({"noise_level": noise.noise.level, "noise_subtype": noise.noise.subtype,
                         "question": noise.question, "credulous_says": _short(run.said, 80),
                         "expected": expected_text(noise), "trapped": not bool(run.success)})
    return _vocab_sort(pd.DataFrame(rows), ["noise_level", "noise_subtype"])
