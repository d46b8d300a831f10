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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from ehrgym.bench.answers import AnswerSpec, format_answer
from ehrgym.bench.noise.teaching import subtype_title, teaching_card
from ehrgym.bench.task import Task
from ehrgym.db.connect import attach_base
from ehrgym.db.overlay import Overlay, OverlaySession
from ehrgym.db.schema import search_path_sql
from ehrgym.errors import EhrGymError
from ehrgym.lesson import (ANSWER_CHOICE, cell_key, PREDICTION_CHOICES, EvidenceComparison, Prediction, Reveal,
                           compare_evidence, expected_words, question_diff_html, question_diff_text, relevant_columns,
                           round_frame, said_text, score_prediction, steps_html, subtype_label)
from ehrgym.vocab import INTENTS, LEVELS, NOISE_LEVELS, NOISE_SUBTYPES, SPLITS, VARIANTS

ORDER: dict[str, tuple[str, ...]] = {"intent": INTENTS, "level": LEVELS, "variant": VARIANTS,
                                     "noise_level": NOISE_LEVELS, "noise_subtype": tuple(NOISE_SUBTYPES),
                                     "split": SPLITS}
PAIR_COLUMNS = ("pair_id", "intent", "level", "noise_level", "noise_subtype", "template_id", "split", "question",
                "noisy_question", "subtype_name", "expected")
STATUS_COLUMN = "evidence"          # evidence_diff: which side a row is on
ALL = "(all)"                       # the "no filter" choice of the explorer's dropdowns
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
def _short(text: Any, limit: int | None = MAX_CELL) -> str:
    s = "" if text is None else str(text)
    if limit is None:
        return s
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


def trajectory_frame(trajectory: dict[str, Any] | None, limit: int | None = MAX_CELL) -> pd.DataFrame:
    """A recorded trajectory as a table: step, tool, action, observation (shortened to ``limit``
    characters on one line; ``None``: full texts, as :func:`ehrgym.lesson.steps_html` shows them)."""
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
    trajectory: dict[str, Any] | None = None       # the full record (steps_html shows it)
    spec: AnswerSpec | None = None                 # the task's answer spec (rounding of numbers)

    @property
    def said(self) -> str:
        """What the agent said, numbers rounded as the answer spec displays them, ``null`` explained."""
        return said_text(self.answer, self.abstain, self.termination, self.spec)

    def steps_html(self) -> str:
        """Every step with its full SQL (collapsible) and its result as a table."""
        return steps_html(trajectory_frame(self.trajectory, limit=None))

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
    comparison: EvidenceComparison | None = None                   # changed cells, relevant columns first

    @property
    def noise_label(self) -> str:
        assert self.noise.noise is not None
        return f"{self.noise.noise.level} · {self.noise.noise.subtype}"

    @property
    def subtype(self) -> str:
        assert self.noise.noise is not None
        return self.noise.noise.subtype

    def outcome_table(self) -> pd.DataFrame:
        """Per variant: question, expected outcome, what the credulous agent said and whether it was right."""
        rows = []
        for variant, task in (("clean", self.clean), ("noise", self.noise)):
            run = self.credulous.get(variant)
            rows.append({"variant": variant, "question": task.question, "expected": expected_text(task),
                         "credulous_says": run.said if run else None,
                         "credulous_correct": run.success if run else None})
        return pd.DataFrame(rows)

    def question_change(self) -> str:
        """The question edit in words (``'2196' → '2197' (time window)``), or that the question is unchanged."""
        edit = (self.noise.noise.question_edit if self.noise.noise else None) or {}
        if self.clean.question == self.noise.question:
            return "unchanged (the noise is in the data)"
        if edit.get("from") is not None:
            kind = str(edit.get("kind", "")).replace("_", " ")
            return f"{edit.get('from')!r} → {edit.get('to')!r}" + (f" ({kind})" if kind else "")
        return question_diff_text(self.clean.question, self.noise.question)

    def summary(self) -> dict[str, Any]:
        noise = self.noise.noise
        assert noise is not None
        return {"pair_id": self.pair_id, "intent": self.clean.intent, "level": self.clean.level,
                "noise": subtype_label(noise.subtype), "description": noise.description,
                "question change": self.question_change(),
                "tables changed": ", ".join(noise.overlay.tables) or "none (only the question changed)",
                "evidence_rows_clean": len(self.evidence_clean), "evidence_rows_noise": len(self.evidence_noise)}

    def student_html(self) -> str:
        """What a student sees before predicting: the noisy twin's question and its evidence as an agent
        would find it (no labels)."""
        ev = round_frame(self.evidence_noise, self.noise.expected.answer.decimals)
        ev = ev[relevant_columns(list(ev.columns), self.noise.gold_sql + " " + self.noise.naive_sql)]
        table = ev.head(40).to_html(index=False, border=0, na_rep="NULL") if len(ev) else \
            "<p><i>(no evidence rows: the obvious query finds nothing)</i></p>"
        more = f"<p><i>{len(ev) - 40} more rows not shown</i></p>" if len(ev) > 40 else ""
        return (f"<p><b>Question:</b> {_html(self.noise.question)}</p>"
                f"<p><b>Evidence</b> — the rows the question is about, as an agent finds them "
                f"({len(self.evidence_noise)} rows, numbers rounded):</p>"
                f"<div style='overflow-x:auto;max-width:100%;font-size:0.85em'>{table}</div>{more}")

    def comparison_html(self) -> str:
        """Revealed after a prediction: both questions with a word-level diff, and the evidence compared."""
        comp = self.comparison
        body = comp.html() if comp is not None else ""
        return question_diff_html(self.clean.question, self.noise.question) + body


def _html(text: Any) -> str:
    import html

    return html.escape("" if text is None else str(text))


def evidence_diff(clean: pd.DataFrame, noise: pd.DataFrame) -> pd.DataFrame:
    """Clean and noisy evidence rows in one table, each row marked ``both``, ``clean only`` (removed
    or edited by the noise) or ``noisy only`` (inserted or edited). Rows are matched as whole
    tuples, counting duplicates (a duplicated row appears once as ``both`` and once as ``noisy only``)."""
    cols = list(dict.fromkeys(list(clean.columns) + list(noise.columns)))
    c = clean.reindex(columns=cols)
    n = noise.reindex(columns=cols)

    def keys(df: pd.DataFrame) -> list[tuple[str, ...]]:
        return [tuple(cell_key(v) for v in row) for row in df.itertuples(index=False, name=None)]

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
    status_n: list[str | None] = []
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

    def __enter__(self) -> NoiseExplorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- choosing a pair --------------------------------------------------------------------
    def pairs(self, **filters: Any) -> pd.DataFrame:
        """One row per complete pair (pair id, intent, level, noise level, subtype, template, split, both
        questions, the subtype's readable name, the noisy twin's expected outcome: ``answer`` or
        ``abstain: <reason>``), in vocabulary order; ``filters`` keep rows whose column equals the value."""
        rows = []
        for pair_id, pair in self._by_pair.items():
            if "clean" not in pair or "noise" not in pair:
                continue
            noise = pair["noise"].noise
            assert noise is not None
            exp = pair["noise"].expected
            rows.append({"pair_id": pair_id, "intent": pair["clean"].intent, "level": pair["clean"].level,
                         "noise_level": noise.level, "noise_subtype": noise.subtype,
                         "template_id": pair["clean"].template_id, "split": pair["clean"].split,
                         "question": pair["clean"].question, "noisy_question": pair["noise"].question,
                         "subtype_name": subtype_title(noise.subtype),
                         "expected": f"abstain: {exp.reason}" if exp.is_abstain else "answer"})
        df = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
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
        # the noise's own edits (both twins share the pair's background)
        noise_edits = noise.noise.overlay if noise.noise is not None else Overlay()
        view.comparison = compare_evidence(ev_c, ev_n, data_changed=not noise_edits.is_empty,
                                           sql=noise.gold_sql + " " + noise.naive_sql,
                                           decimals=noise.expected.answer.decimals)
        if credulous:
            view.credulous = {"clean": self.run_agent(clean, "credulous"), "noise": self.run_agent(noise, "credulous")}
        return view

    def search(self, text: str = "", **filters: Any) -> pd.DataFrame:
        """:meth:`pairs` narrowed by ``filters`` (a value of ``None`` or ``"(all)"`` is no filter) and by
        ``text`` (case-insensitive, in either question, the pair id or the subtype's name)."""
        df = self.pairs(**{k: v for k, v in filters.items() if v not in (None, ALL)})
        text = (text or "").strip().casefold()
        if text:
            hay = (df["question"] + "\n" + df["noisy_question"] + "\n" + df["pair_id"] + "\n" + df["subtype_name"])
            df = df[hay.str.casefold().str.contains(text, regex=False)]
        return df.reset_index(drop=True)

    # -- predict, then reveal -----------------------------------------------------------------
    def predict(self, task: Task | str, text: Any, choice: str = ANSWER_CHOICE) -> Prediction:
        """Score a student's prediction on ``task`` (a task, a task id or a pair id: its noisy twin) with
        the agents' answer protocol and the kit's verifier (see :func:`ehrgym.lesson.score_prediction`)."""
        return score_prediction(self._resolve(task), text, choice)

    def reveal(self, task: Task | str, prediction: Prediction | None = None) -> Reveal:
        """The expected outcome, the credulous agent's live answer (the trap), a robust solution path (the
        oracle's query and its result, run live) and the subtype's teaching card."""
        task = self._resolve(task)
        credulous = self.run_agent(task, "credulous")
        oracle = self.run_agent(task, "oracle")
        subtype = task.noise.subtype if task.noise else None
        return Reveal(task, prediction, expected_words(task), credulous.said, credulous.success, task.gold_sql,
                      trajectory_frame(oracle.trajectory, limit=None), teaching_card(subtype) if subtype else None,
                      subtype)

    def _resolve(self, task: Task | str) -> Task:
        if isinstance(task, Task):
            return task
        if task in self._by_pair:
            return self.pair(task)[1]
        return self.task(task)

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
                        steps=trajectory_frame(traj), trajectory=traj, spec=task.expected.answer)


# =============================================================================================
# the widget (thin: every callback calls the functions above; tests drive the same callbacks)
# =============================================================================================
FILTERS: tuple[tuple[str, str], ...] = (("intent", "intent"), ("level", "level"), ("noise_level", "noise level"),
                                        ("noise_subtype", "noise"), ("expected", "expected"))


class ExplorerUI:
    """The predict-then-reveal explorer as ipywidgets.

    Filters (intent, level, noise level, subtype by its readable name, expected outcome), a search box
    and a pair list; *next* / *random* buttons. For the chosen pair it shows the noisy question and
    its evidence as an agent finds them; the student picks *answer* or *abstain: <reason>*, types
    the value (or an explanation) and presses *check*: the prediction is read by the agents' answer
    protocol and scored by the verifier, and only then are the expected outcome, the credulous trap,
    a robust solution path, the teaching card and the clean-vs-noisy comparison revealed. *run agent
    live* shows any agent's steps (full SQL, results as tables).

    ``ui.widget`` is the top-level widget; in a notebook the object displays itself, with a static HTML
    snapshot as fallback for viewers without a live kernel (nbviewer, an exported or reopened copy).
    """

    def __init__(self, explorer: NoiseExplorer, agents: Sequence[str] = ("credulous", "skeptic", "oracle"),
                 pair_id: str | None = None, seed: int = 0) -> None:
        import random

        import ipywidgets as w

        self.explorer = explorer
        self.index = explorer.pairs()
        if self.index.empty:
            raise ExploreError("the benchmark has no complete pairs to explore")
        self._rng = random.Random(seed)
        self.view: PairView | None = None
        self.prediction: Prediction | None = None
        self.revealed: Reveal | None = None
        self.last_run: AgentRun | None = None
        self.filters: dict[str, Any] = {}
        for col, label in FILTERS:
            values = list(dict.fromkeys(_vocab_sort(self.index, [col])[col]))
            if col == "noise_subtype":
                options = [(ALL, ALL)] + [(subtype_label(v), v) for v in values]
            else:
                options = [(ALL, ALL)] + [(str(v), v) for v in values]
            self.filters[col] = w.Dropdown(options=options, value=ALL, description=label,
                                           layout=w.Layout(width="auto"), style={"description_width": "initial"})
        self.search = w.Text(placeholder="search the questions, e.g. potassium", description="search",
                             layout=w.Layout(width="40%"))
        self.pair = w.Select(options=[], rows=6, layout=w.Layout(width="98%"), description="pair")
        self.count = w.HTML()
        self.next_button = w.Button(description="next pair", icon="forward")
        self.random_button = w.Button(description="random pair", icon="random")
        self.choice = w.Dropdown(options=list(PREDICTION_CHOICES), value=ANSWER_CHOICE, description="you",
                                 layout=w.Layout(width="auto"))
        self.answer = w.Text(placeholder="your answer (e.g. 7.2) or, when abstaining, why",
                             layout=w.Layout(width="45%"))
        self.check_button = w.Button(description="check my answer", button_style="primary")
        self.agent = w.Dropdown(options=list(agents), value=list(agents)[0], description="agent")
        self.run_button = w.Button(description="run agent live")
        self.question = w.Output()
        self.result = w.Output()
        self.live = w.Output()
        for dd in self.filters.values():
            dd.observe(self.on_filter, names="value")
        self.search.observe(self.on_filter, names="value")
        self.pair.observe(self.on_pair, names="value")
        self.next_button.on_click(self.on_next)
        self.random_button.on_click(self.on_random)
        self.check_button.on_click(self.on_check)
        self.run_button.on_click(self.on_run)
        self.widget = w.VBox([
            w.HBox(list(self.filters.values()), layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.search, self.next_button, self.random_button, self.count]),
            self.pair, self.question,
            w.HTML("<b>What would you answer?</b> Pick <i>answer</i> and type the value, or pick an abstention "
                   "reason (the same answer protocol agents use), then press <i>check my answer</i>."),
            w.HBox([self.choice, self.answer, self.check_button]),
            self.result,
            w.HBox([self.agent, self.run_button]), self.live])
        self.on_filter()
        if pair_id is not None:
            self.select(pair_id)

    # -- state ------------------------------------------------------------------------------
    def visible(self) -> pd.DataFrame:
        """The pairs the filters and the search box leave."""
        return self.explorer.search(self.search.value, **{k: dd.value for k, dd in self.filters.items()})

    def select(self, pair_id: str) -> None:
        if pair_id not in {v for _, v in self.pair.options}:
            for dd in self.filters.values():
                dd.value = ALL
            self.search.value = ""
        self.pair.value = pair_id

    # -- callbacks ----------------------------------------------------------------------------
    def on_filter(self, _: Any = None) -> None:
        rows = self.visible()
        options = [(f"{r.subtype_name} · {r.intent}/{r.level} · {r.noisy_question}", r.pair_id)
                   for r in rows.itertuples()]
        keep = self.pair.value
        self.pair.options = options
        self.count.value = f"{len(options)} of {len(self.index)} pairs"
        values = [v for _, v in options]
        if values:
            self.pair.value = keep if keep in values else values[0]
        else:
            self.view = None
            self.question.clear_output()

    def on_pair(self, _: Any = None) -> None:
        from IPython.display import HTML, display

        self.result.clear_output()
        self.live.clear_output()
        self.prediction, self.revealed = None, None
        self.answer.value = ""
        self.question.clear_output()
        if self.pair.value is None:
            return
        self.view = self.explorer.compare(self.pair.value, credulous=False)
        with self.question:
            display(HTML(self.view.student_html()))

    def on_next(self, _: Any = None) -> None:
        values = [v for _, v in self.pair.options]
        if values:
            i = values.index(self.pair.value) if self.pair.value in values else -1
            self.pair.value = values[(i + 1) % len(values)]

    def on_random(self, _: Any = None) -> None:
        values = [v for _, v in self.pair.options]
        if values:
            self.pair.value = self._rng.choice(values)

    def on_check(self, _: Any = None) -> None:
        from IPython.display import HTML, display

        if self.view is None:
            return
        self.prediction = self.explorer.predict(self.view.noise, self.answer.value, self.choice.value)
        self.revealed = self.explorer.reveal(self.view.noise, self.prediction)
        self.result.clear_output()
        with self.result:
            display(HTML(self.revealed.html() + "<h4>Clean vs noisy</h4>" + self.view.comparison_html()))

    def on_run(self, _: Any = None) -> None:
        from IPython.display import HTML, display

        if self.view is None:
            return
        self.live.clear_output()
        self.last_run = run = self.explorer.run_agent(self.view.noise, self.agent.value)
        with self.live:
            ok = "✔" if run.success else "✘"
            display(HTML(f"<p><b>{_html(run.agent)}</b> said <code>{_html(run.said)}</code> {ok} — "
                         f"{_html(run.verdict)}</p>" + run.steps_html()))

    # -- display --------------------------------------------------------------------------------
    def static_html(self) -> str:
        """A snapshot for viewers without a live kernel: the current pair as a student sees it."""
        note = ("<p><i>Static snapshot of the noise explorer. The interactive version needs a running Python "
                "kernel: open the notebook in Jupyter and run this cell (after a kernel restart too).</i></p>")
        return note + (self.view.student_html() if self.view is not None else "")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data = dict(data or {})
        data["text/html"] = self.static_html()
        return data


def explorer_widget(explorer: NoiseExplorer, agents: Sequence[str] = ("credulous", "skeptic", "oracle"),
                    pair_id: str | None = None) -> ExplorerUI:
    """The predict-then-reveal explorer (:class:`ExplorerUI`); display it in a notebook cell."""
    return ExplorerUI(explorer, agents, pair_id)


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
