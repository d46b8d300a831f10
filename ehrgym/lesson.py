"""Teaching with the benchmark: predict, then reveal (notebooks 04 and 07), testable without widgets.

A student reads a noisy question and its evidence, commits to an answer or an abstention with a
reason — written in the same answer protocol agents use (:mod:`ehrgym.env.protocol`) — and the
kit's verifier (:func:`ehrgym.env.verifier.verify`) scores it. Only then does :class:`Reveal`
show the expected outcome, what the credulous shortcut answered (the trap), a robust solution
path (the oracle's SQL and result) and the subtype's teaching card
(:mod:`ehrgym.bench.noise.teaching`).

The comparison helpers turn evidence into something a person can read: clean and noisy rows in
one table with edited cells shown as ``clean → noisy`` and highlighted, the columns that matter
first, numbers rounded as the answer spec says, and a word-level diff of the two questions.
Everything returns plain data (DataFrames, strings) plus an ``html()`` rendering, so the same
code serves the widget, a static HTML fallback and the tests.
"""

from __future__ import annotations

import difflib
import html
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ehrgym.bench.answers import AnswerSpec, format_answer
from ehrgym.bench.noise.teaching import (
    TeachingCard,
    expected_outcomes,
    subtype_title,
    teaching_card,
)
from ehrgym.bench.task import Task
from ehrgym.env.actions import AnswerAction
from ehrgym.env.protocol import REASON_DESCRIPTIONS, parse_answer
from ehrgym.env.verifier import Verdict, verify
from ehrgym.errors import EhrGymError
from ehrgym.vocab import ABSTAIN_REASONS

# choices of the "your answer" control: answer, or abstain with one of the protocol's reasons
ANSWER_CHOICE = "answer"
PREDICTION_CHOICES: tuple[str, ...] = (ANSWER_CHOICE,) + tuple(f"abstain: {r}" for r in ABSTAIN_REASONS)

# row statuses of an evidence comparison
UNCHANGED, EDITED, REMOVED, INSERTED = "unchanged", "edited", "removed by the noise", "inserted by the noise"
BOTH_Q, CLEAN_Q, NOISY_Q = "both questions", "clean question only", "noisy question only"
STATUS = "rows"
ARROW = " → "
STATUS_COLOURS = {EDITED: "#fff3bf", REMOVED: "#ffe3e3", INSERTED: "#d3f9d8", CLEAN_Q: "#f1f3f5", NOISY_Q: "#e7f5ff"}
CHANGED_CELL = "background:#ffd43b;font-weight:bold"
DEFAULT_DECIMALS = 4       # float cells when the answer spec sets no rounding


class LessonError(EhrGymError):
    """A lesson request cannot be served (an empty prediction, an unknown choice, …)."""


# =============================================================================================
# predict: the student's answer through the agents' answer protocol, scored by the verifier
# =============================================================================================
@dataclass(frozen=True)
class Prediction:
    """A student's prediction on one task, as the protocol reads it and as the verifier scores it."""

    text: str
    action: AnswerAction | None
    verdict: Verdict

    @property
    def correct(self) -> bool:
        return self.verdict.success_strict

    @property
    def read_as(self) -> str:
        """How the protocol read the text: ``ANSWER: 7.2`` or ``ABSTAIN: false_premise``."""
        if self.action is None:
            return "(nothing the answer protocol can read)"
        if self.action.is_abstain:
            return f"ABSTAIN: {self.action.abstain}"
        return f"ANSWER: {self.action.value}"

    def summary(self) -> dict[str, Any]:
        return {"you wrote": self.text, "read as": self.read_as, "correct": self.correct,
                "verdict": self.verdict.detail, "failure": self.verdict.failure}


def read_prediction(text: Any, choice: str = ANSWER_CHOICE) -> AnswerAction | None:
    """A prediction as an :class:`AnswerAction`, read by the agents' protocol parser.

    ``text`` may be a full protocol line (``ANSWER: 7.2``, ``ABSTAIN: false_premise: never given``,
    ``{"abstain": "conflicting_evidence"}``); otherwise ``choice`` says how to read it: ``answer``
    (the text is the value) or ``abstain: <reason>`` (the text, if any, is the explanation).
    """
    text = "" if text is None else str(text).strip()
    if choice not in PREDICTION_CHOICES:
        raise LessonError(f"unknown choice {choice!r}; use one of {PREDICTION_CHOICES}")
    direct = parse_answer(text) if text else None
    if direct is not None and re.match(r"(?is)^\s*(?:[*_`]*\s*)?(answer|abstain|final answer|\{)", text):
        return direct
    if choice == ANSWER_CHOICE:
        return parse_answer(f"ANSWER: {text}") if text else None
    reason = choice.split(":", 1)[1].strip()
    return parse_answer(f"ABSTAIN: {reason}: {text}" if text else f"ABSTAIN: {reason}")


def score_prediction(task: Task, text: Any, choice: str = ANSWER_CHOICE) -> Prediction:
    """Read ``text`` (see :func:`read_prediction`) and score it with the kit's verifier (strict)."""
    action = read_prediction(text, choice)
    return Prediction("" if text is None else str(text), action, verify(task, action))


# =============================================================================================
# reveal: expected outcome, the credulous trap, a robust path, the teaching card
# =============================================================================================
def expected_words(task: Task) -> str:
    """The expected outcome with its meaning: ``answer 7.20`` or ``abstain: reason — what it means``."""
    exp = task.expected
    if not exp.is_abstain:
        return f"answer {format_answer(exp.value, exp.answer)}"
    accepted = sorted(task.accepted_reasons - {exp.reason})
    also = f" (also accepted: {', '.join(accepted)})" if accepted else ""
    return f"abstain: {exp.reason} — {REASON_DESCRIPTIONS.get(str(exp.reason), '')}{also}"


def said_text(answer: Any, abstain: str | None, termination: str, spec: AnswerSpec | None) -> str:
    """What an agent said, with numbers rounded as the answer spec displays them and ``null`` explained."""
    if abstain:
        return f"abstain ({abstain})"
    if termination != "answered":
        return f"no answer ({termination})"
    if answer is None or (isinstance(answer, str) and answer.strip().lower() in ("null", "none", "")):
        return "answer null — the query returned no value and the agent reported that as the answer"
    if spec is not None and spec.type == "number" and spec.decimals is not None:
        try:
            return f"answer {format_answer(float(answer), spec)}"
        except (TypeError, ValueError):
            pass
    if isinstance(answer, float):
        return f"answer {round(answer, DEFAULT_DECIMALS):g}"
    if isinstance(answer, list):
        return "answer " + ", ".join(str(a) for a in answer)
    return f"answer {answer}"


@dataclass
class Reveal:
    """What is revealed after a prediction: the expected outcome, the trap, a robust path, the card."""

    task: Task
    prediction: Prediction | None
    expected: str
    credulous_said: str | None
    credulous_correct: bool | None
    robust_sql: str
    robust_steps: pd.DataFrame | None
    card: TeachingCard | None
    subtype: str | None

    def summary(self) -> dict[str, Any]:
        out = {"expected": self.expected, "credulous agent said": self.credulous_said,
               "credulous correct": self.credulous_correct}
        if self.prediction is not None:
            out = {"you": self.prediction.read_as, "you are correct": self.prediction.correct,
                   "verdict": self.prediction.verdict.detail, **out}
        return out

    def html(self) -> str:
        parts = []
        if self.prediction is not None:
            ok = self.prediction.correct
            parts.append(f"<p style='font-size:1.1em'><b>{'✔ correct' if ok else '✘ not correct'}</b> — you: "
                         f"<code>{_e(self.prediction.read_as)}</code>; verifier: {_e(self.prediction.verdict.detail)}"
                         f"</p>")
        parts.append(f"<p><b>Expected:</b> {_e(self.expected)}</p>")
        if self.credulous_said is not None:
            trap = "fell for it" if self.credulous_correct is False else "was right"
            parts.append(f"<p><b>The credulous shortcut</b> (run the obvious query, trust the result) said "
                         f"<code>{_e(self.credulous_said)}</code> — it {trap}.</p>")
        if self.card is not None and self.subtype:
            parts.append(card_html(self.subtype, self.card))
        parts.append("<p><b>A robust solution path</b> (the oracle's query on this view of the data):</p>"
                     + sql_details(self.robust_sql, open_=True))
        if self.robust_steps is not None and not self.robust_steps.empty:
            parts.append(steps_html(self.robust_steps))
        return "\n".join(parts)


def card_html(subtype: str, card: TeachingCard) -> str:
    """A teaching card as an HTML block."""
    rows = [("What it is", card.definition), ("How it arises", card.arises), ("The credulous trap", card.trap),
            ("The check that catches it", card.check), (f"Expected: {expected_outcomes(subtype)}", card.outcome)]
    body = "".join(f"<tr><th style='text-align:left;vertical-align:top;padding-right:1em'>{_e(k)}</th>"
                   f"<td style='text-align:left'>{_code(v)}</td></tr>" for k, v in rows)
    return (f"<div style='border-left:4px solid #4477AA;padding-left:0.6em;margin:0.5em 0'>"
            f"<b>{_e(card.title)}</b> <code>{_e(subtype)}</code><table>{body}</table></div>")


# =============================================================================================
# comparison: evidence, questions, agent steps
# =============================================================================================
@dataclass
class EvidenceComparison:
    """Clean and noisy evidence in one table: a ``rows`` status column, edited cells as ``clean → noisy``."""

    table: pd.DataFrame
    changed: set[tuple[int, str]] = field(default_factory=set)     # (row position, column) of edited cells
    data_changed: bool = True          # False for query-level noise: only the question changed
    note: str = ""

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.table[STATUS])) if len(self.table) else {}

    def html(self, max_rows: int = 60) -> str:
        cols = list(self.table.columns)
        head = "".join(f"<th>{_e(c)}</th>" for c in cols)
        body = []
        for i, row in enumerate(self.table.head(max_rows).itertuples(index=False, name=None)):
            colour = STATUS_COLOURS.get(row[0], "")
            cells = []
            for c, v in zip(cols, row):
                style = CHANGED_CELL if (i, c) in self.changed else ""
                cells.append(f"<td style='{style}'>{_e(_show(v))}</td>")
            body.append(f"<tr style='background:{colour}'>" + "".join(cells) + "</tr>")
        more = (f"<p><i>{len(self.table) - max_rows} more rows not shown</i></p>"
                if len(self.table) > max_rows else "")
        return (f"<p>{_e(self.note)}</p><div style='overflow-x:auto;max-width:100%'>"
                f"<table style='font-size:0.85em'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
                f"</table></div>{more}")


def relevant_columns(columns: Sequence[str], sql: str, first: Sequence[str] = ()) -> list[str]:
    """``columns`` reordered: ``first`` (e.g. changed columns), then those ``sql`` mentions, then the rest."""
    mentioned = {c for c in columns if re.search(rf"(?<![\w.]){re.escape(c)}\b|\.{re.escape(c)}\b", sql)}
    head = [c for c in first if c in columns]
    return head + [c for c in columns if c in mentioned and c not in head] + \
        [c for c in columns if c not in mentioned and c not in head]


def round_frame(df: pd.DataFrame, decimals: int | None) -> pd.DataFrame:
    """Float cells rounded to ``decimals`` (the answer spec's; :data:`DEFAULT_DECIMALS` when None)."""
    d = DEFAULT_DECIMALS if decimals is None else max(int(decimals), 0)
    out = df.copy()
    for c in out.columns:
        if pd.api.types.is_float_dtype(out[c]):
            out[c] = out[c].round(d)
    return out


def compare_evidence(clean: pd.DataFrame, noise: pd.DataFrame, *, data_changed: bool = True, sql: str = "",
                     decimals: int | None = None) -> EvidenceComparison:
    """Match clean and noisy evidence rows and say what the noise did to each.

    Identical rows (as whole tuples, duplicates counted) are ``unchanged``; a leftover noisy row
    that agrees with a leftover clean row on at least half of its cells (the most such cells wins)
    is that row ``edited`` (its differing cells shown as ``clean → noisy``); other leftovers
    are ``removed`` / ``inserted``. For query-level noise (``data_changed=False``) the database is
    the same and the two sides are the rows each *question* reads.
    """
    cols = list(dict.fromkeys(list(clean.columns) + list(noise.columns)))
    c = round_frame(clean.reindex(columns=cols), decimals)
    n = round_frame(noise.reindex(columns=cols), decimals)
    ids = [i for i, col in enumerate(cols) if _row_id(col, c[col], n[col])]
    ck_full = [tuple(cell_key(v) for v in r) for r in c.itertuples(index=False, name=None)]
    nk_full = [tuple(cell_key(v) for v in r) for r in n.itertuples(index=False, name=None)]
    # rows match on their content: a row id column (unique on both sides) is bookkeeping — a re-stored
    # copy differs from its original only there, and an insert renumbers dense ids after it
    ck = [tuple(v for i, v in enumerate(k) if i not in ids) for k in ck_full]
    nk = [tuple(v for i, v in enumerate(k) if i not in ids) for k in nk_full]
    pool = Counter(ck)
    n_match = []
    for k in nk:
        if pool[k] > 0:
            pool[k] -= 1
            n_match.append(True)
        else:
            n_match.append(False)
    left_clean = []
    taken = Counter(k for k, m in zip(nk, n_match) if m)
    for i, k in enumerate(ck):
        if taken[k] > 0:
            taken[k] -= 1
        else:
            left_clean.append(i)
    labels = (UNCHANGED, REMOVED, INSERTED) if data_changed else (BOTH_Q, CLEAN_Q, NOISY_Q)
    edited_of: dict[int, tuple[int, set[str]]] = {}
    if data_changed:
        free = list(left_clean)
        need = max(1, (len(ck[0]) + 1) // 2) if ck else 1
        for j, matched in enumerate(n_match):
            if matched or not free:
                continue
            if ids:       # the same row id: that row, edited
                same_id = [i for i in free if all(ck_full[i][x] == nk_full[j][x] for x in ids)]
                best = same_id[0] if same_id else None
            else:         # no row id: the leftover clean row sharing the most cells, if at least half
                best = max(free, key=lambda i: (sum(a == b for a, b in zip(ck[i], nk[j])), -i))
                if sum(a == b for a, b in zip(ck[best], nk[j])) < need:
                    best = None
            if best is not None:
                edited_of[j] = (best, {col for col, a, b in zip(cols, ck_full[best], nk_full[j]) if a != b})
                free.remove(best)
        left_clean = [i for i in left_clean if i not in {b for b, _ in edited_of.values()}]
    changed_cols: list[str] = []
    for _i, diff in edited_of.values():
        changed_cols += [col for col in cols if col in diff and col not in changed_cols]
    # one row per clean row in clean order (unchanged / edited / removed), inserted rows after their neighbours
    clean_to_noise = {i: j for j, (i, _) in edited_of.items()}
    out_rows: list[tuple[str, list[Any], set[str]]] = []
    left = set(left_clean)
    for i in range(len(ck)):
        if i in clean_to_noise:
            j = clean_to_noise[i]
            diff = edited_of[j][1]
            vals = [f"{_show(a)}{ARROW}{_show(b)}" if col in diff else a
                    for col, a, b in zip(cols, c.iloc[i].tolist(), n.iloc[j].tolist())]
            out_rows.append((EDITED, vals, diff))
        elif i in left:
            out_rows.append((labels[1], c.iloc[i].tolist(), set()))
        else:
            out_rows.append((labels[0], c.iloc[i].tolist(), set()))
    for j, matched in enumerate(n_match):
        if not matched and j not in edited_of:
            out_rows.append((labels[2], n.iloc[j].tolist(), set()))
    order = relevant_columns(cols, sql, changed_cols)
    pos = {col: cols.index(col) for col in order}
    table = pd.DataFrame([[s] + [vals[pos[col]] for col in order] for s, vals, _ in out_rows],
                         columns=[STATUS] + order)
    changed = {(r, col) for r, (_, _, diff) in enumerate(out_rows) for col in diff}
    if data_changed:
        note = ("The noise changed the data: edited cells show clean → noisy (highlighted); removed rows are in "
                "the clean database only, inserted rows in the noisy view only.")
    else:
        note = ("Only the question changed — the database is the same. The rows are those each question reads: "
                "the clean question's evidence and the noisy question's (empty when the noisy question refers to "
                "something the records do not hold).")
    return EvidenceComparison(table, changed, data_changed, note)


def _row_id(name: str, a: pd.Series, b: pd.Series) -> bool:
    """A row identifier: an ``…_id`` column other than the entity references, unique and set on both sides."""
    if not name.endswith("_id") or name in ("subject_id", "hadm_id", "stay_id"):
        return False
    return all(s.notna().all() and s.is_unique for s in (a, b)) and (len(a) + len(b)) > 0


def _is_null(v: Any) -> bool:
    if v is None or v is pd.NaT:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):   # lists, arrays: not a scalar NULL
        return False


def cell_key(v: Any) -> str:
    """A cell as a comparable key: NULLs alike, floats by their exact repr."""
    if _is_null(v):
        return "\0null"
    return repr(v) if isinstance(v, float) else str(v)


def _show(v: Any) -> str:
    if _is_null(v):
        return "NULL"
    if isinstance(v, float):
        return f"{v:g}" if abs(v) < 1e15 else repr(v)
    if isinstance(v, pd.Timestamp):
        return str(v.to_pydatetime())
    return str(v)


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text))


def _code(text: Any) -> str:
    """Escaped text with Markdown `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def question_diff(clean: str, noisy: str) -> list[tuple[str, str]]:
    """A word-level diff of two questions: ``(op, text)`` with op ``=`` (same), ``-`` (clean only), ``+``."""
    a, b = clean.split(), noisy.split()
    out: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            out.append(("=", " ".join(a[i1:i2])))
        else:
            if i2 > i1:
                out.append(("-", " ".join(a[i1:i2])))
            if j2 > j1:
                out.append(("+", " ".join(b[j1:j2])))
    return out


def question_diff_text(clean: str, noisy: str) -> str:
    """The diff as one line: ``… [-2196?-] {+2197?+}`` (wdiff style)."""
    return " ".join(t if op == "=" else (f"[-{t}-]" if op == "-" else f"{{+{t}+}}")
                    for op, t in question_diff(clean, noisy))


def question_diff_html(clean: str, noisy: str) -> str:
    """Both questions in full, the words that differ struck out (clean) and highlighted (noisy)."""
    diff = question_diff(clean, noisy)
    same = all(op == "=" for op, _ in diff)
    if same:
        return f"<p><b>Question</b> (the same in both twins):<br>{_e(clean)}</p>"
    cq = " ".join(_e(t) if op == "=" else f"<del style='background:#ffe3e3'>{_e(t)}</del>"
                  for op, t in diff if op != "+")
    nq = " ".join(_e(t) if op == "=" else f"<ins style='background:#d3f9d8;text-decoration:none'>{_e(t)}</ins>"
                  for op, t in diff if op != "-")
    return f"<p><b>Clean question:</b> {cq}<br><b>Noisy question:</b> {nq}</p>"


def observation_table(text: str) -> pd.DataFrame | None:
    """A SQL observation (the environment's text table: header, ``-+-`` rule, rows, ``(n rows)``) as a
    DataFrame; None when ``text`` is not such a table (an error, a Python output)."""
    lines = [ln for ln in str(text).splitlines()]
    if len(lines) < 2 or not re.fullmatch(r"-+(?:-\+-+)*-*", lines[1].strip() or "x"):
        return None
    header = [h.strip() for h in lines[0].split(" | ")]
    rows = []
    for ln in lines[2:]:
        if re.match(r"^\((?:\d+ rows?|showing .*)", ln.strip()) or not ln.strip():
            break
        cells = [x.strip() for x in ln.split(" | ")]
        if len(cells) < len(header):
            cells += [""] * (len(header) - len(cells))
        if len(cells) != len(header):
            return None
        rows.append(cells)
    return pd.DataFrame(rows, columns=header)


def sql_details(sql: str, summary: str | None = None, open_: bool = False) -> str:
    """A collapsible block holding a full SQL query (the first line as its summary)."""
    first = summary or (" ".join(str(sql).split())[:90] + ("…" if len(" ".join(str(sql).split())) > 90 else ""))
    return (f"<details{' open' if open_ else ''}><summary><code>{_e(first)}</code></summary>"
            f"<pre style='white-space:pre-wrap'>{_e(sql)}</pre></details>")


def steps_html(steps: pd.DataFrame) -> str:
    """Agent steps (a frame with step, tool, action, observation — full texts) as HTML: each query in a
    collapsible block, each SQL result as a table."""
    out = []
    for s in steps.to_dict("records"):
        action = str(s.get("action") or "")
        tool = s.get("tool")
        if tool in ("sql", "python"):
            body = action.split(":", 1)[1].strip() if ":" in action else action
            shown = sql_details(body, f"{tool}: " + " ".join(body.split())[:90])
        else:
            shown = f" <code>{_e(action)}</code>"
        obs = str(s.get("observation") or "")
        table = observation_table(obs) if tool == "sql" else None
        result = table.to_html(index=False, border=0) if table is not None else \
            f"<pre style='white-space:pre-wrap'>{_e(obs)}</pre>"
        out.append(f"<div style='margin:0.4em 0'><b>step {s.get('step')}</b> · {_e(tool)}{shown}{result}</div>")
    return "\n".join(out)


def subtype_label(subtype: str | None) -> str:
    """``Unit mismatch (value)`` — a subtype's readable name and its noise level."""
    if not subtype:
        return "clean"
    from ehrgym.vocab import NOISE_SUBTYPES

    return f"{subtype_title(subtype)} ({NOISE_SUBTYPES.get(subtype, '?')})"


def card_for(task: Task) -> TeachingCard | None:
    return teaching_card(task.noise.subtype) if task.noise else None


# =============================================================================================
# the exercise notebook (07): a guided lesson, checked answers, open exercises, an answer key
# =============================================================================================
def protocol_line(task: Task) -> str:
    """The expected outcome as a student would write it in the answer protocol."""
    exp = task.expected
    if exp.is_abstain:
        return f"ABSTAIN: {exp.reason}"
    return f"ANSWER: {format_answer(exp.value, exp.answer)}"


def lesson_pairs(explorer: Any, seed: int = 0) -> pd.DataFrame:
    """One pair per noise level (record, value, query), drawn with ``seed``: the guided lesson's steps."""
    import random

    from ehrgym.vocab import NOISE_LEVELS

    index = explorer.pairs()
    rng = random.Random(seed)
    rows = []
    for level in NOISE_LEVELS:
        group = index[index["noise_level"] == level]
        if len(group):
            rows.append(group.iloc[rng.randrange(len(group))])
    if not rows:
        raise LessonError("the benchmark has no complete pairs for a lesson")
    out = pd.DataFrame(rows).reset_index(drop=True)
    out.insert(0, "step", range(1, len(out) + 1))
    return out


def _step(lesson: pd.DataFrame, step: int) -> pd.Series:
    got = lesson[lesson["step"] == step]
    if got.empty:
        raise LessonError(f"the lesson has steps {lesson['step'].tolist()}, not {step}")
    return got.iloc[0]


def exercise_html(explorer: Any, lesson: pd.DataFrame, step: int) -> str:
    """Step ``step`` as a student sees it before answering: the noisy question and its evidence."""
    row = _step(lesson, step)
    view = explorer.compare(row["pair_id"], credulous=False)
    return (f"<h4>Exercise {step} of {len(lesson)} — {_e(row['intent'])} · {_e(row['level'])} question</h4>"
            + view.student_html())


def check_answer(explorer: Any, lesson: pd.DataFrame, step: int, answer: Any, *, use_key: bool = False) -> str:
    """Score the student's ``answer`` to step ``step`` (protocol text, e.g. ``ANSWER: 7.2`` or
    ``ABSTAIN: false_premise: …``) and, once answered, reveal everything (HTML). ``answer`` None:
    a reminder to answer first — or, with ``use_key``, the answer key's line (for a teacher's run)."""
    row = _step(lesson, step)
    _, noise = explorer.pair(row["pair_id"])
    if answer is None or not str(answer).strip():
        if not use_key:
            return (f"<p><i>Write your answer to exercise {step} in <code>answer_{step}</code> above (e.g. "
                    f"<code>\"ANSWER: 7.2\"</code> or <code>\"ABSTAIN: insufficient_evidence: no rows\"</code>) "
                    f"and run both cells again. Nothing is revealed before you answer.</i></p>")
        answer = protocol_line(noise)
    prediction = explorer.predict(noise, answer)
    reveal = explorer.reveal(noise, prediction)
    view = explorer.compare(row["pair_id"], credulous=False)
    return reveal.html() + "<h4>Clean vs noisy</h4>" + view.comparison_html()


def answer_key(explorer: Any, lesson: pd.DataFrame) -> pd.DataFrame:
    """The lesson's answers: per step the subtype, the expected protocol line and the check that catches it."""
    rows = []
    for row in lesson.itertuples():
        _, noise = explorer.pair(row.pair_id)
        sub = noise.noise.subtype if noise.noise else None
        rows.append({"step": row.step, "noise": subtype_label(sub), "answer": protocol_line(noise),
                     "the check that catches it": teaching_card(sub).check if sub else ""})
    return pd.DataFrame(rows)


def agent_failures(explorer: Any, agent: str = "skeptic", limit: int = 40) -> pd.DataFrame:
    """Run ``agent`` live on up to ``limit`` noisy twins (taken round-robin over the subtypes, in pair
    order, so every subtype is tried) and list those it gets wrong: the open exercise's raw material."""
    index = explorer.pairs()
    queues = {sub: list(g["pair_id"]) for sub, g in index.groupby("noise_subtype", sort=False)}
    chosen: list[str] = []
    while len(chosen) < limit and any(queues.values()):
        for q in queues.values():
            if q and len(chosen) < limit:
                chosen.append(q.pop(0))
    rows = []
    for pair_id in chosen:
        _, noise = explorer.pair(pair_id)
        run = explorer.run_agent(noise, agent)
        if not run.success:
            rows.append({"pair_id": pair_id, "noise": subtype_label(noise.noise.subtype if noise.noise else None),
                         "question": noise.question, f"{agent} said": run.said, "expected": protocol_line(noise),
                         "failure": run.failure, "verdict": run.verdict})
    columns = ["pair_id", "noise", "question", f"{agent} said", "expected", "failure", "verdict"]
    return pd.DataFrame(rows, columns=columns)
