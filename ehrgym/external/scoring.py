"""EHRSQL scoring: the benchmark's SQL post-processing, answer normalisation and reliability score.

Answers are compared the way the EHRSQL shared tasks compare execution results: every value is
written as text (floats rounded to 3 decimals), the rows are sorted and the first 100 kept. An
agent's final answer (a list of rows, a list of values, a scalar or text) goes through the same
steps; cells that read as numbers then compare as numbers rounded to 3 decimals, text cells
case-insensitively, and a yes/no answer reads as 1/0 (the benchmark's boolean questions return
``COUNT(*) > 0``).

RS(c) (Lee et al., 2024): +1 for a correct answer to an answerable question or an abstention on an
unanswerable one, 0 for an abstention on an answerable one, −c for a wrong answer or for answering
an unanswerable one; reported as a percentage of the questions, at c = 0, 5, 10 and N (the number
of questions). An episode that ends without an answer counts as an abstention (the benchmark's
``null`` prediction).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ehrgym.registry import Registry

EHRSQL_CURRENT_TIME = "2100-12-31 23:59:00"
MAX_ROWS = 100
DECIMALS = 3

# normal ranges the benchmark substitutes for ``<vital>_lower`` / ``<vital>_upper`` in its gold SQL
VITAL_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (35.5, 38.1), "sao2": (95.0, 100.0), "heart rate": (60.0, 100.0),
    "respiration": (12.0, 18.0), "systolic bp": (90.0, 120.0), "diastolic bp": (60.0, 90.0),
    "mean bp": (60.0, 110.0),
}


def post_process_sql(sql: str, current_time: str = EHRSQL_CURRENT_TIME) -> str:
    """The benchmark's rewriting of a (gold or predicted) SQL before it runs on SQLite."""
    query = sql.lower().replace("current_time", f"'{current_time}'")
    lower = re.findall(r"[ \n]+([a-zA-Z0-9_]+_lower)", query)
    upper = re.findall(r"[ \n]+([a-zA-Z0-9_]+_upper)", query)
    if lower and upper:
        names = set(re.findall(r"([a-zA-Z0-9_]+)_lower", lower[0]) + re.findall(r"([a-zA-Z0-9_]+)_upper", upper[0]))
        if len(names) == 1:
            vital = names.pop().replace("_", " ")
            if vital in VITAL_RANGES:
                lo, hi = VITAL_RANGES[vital]
                query = query.replace(lower[0], str(lo)).replace(upper[0], str(hi))
    return query.replace("%y", "%Y").replace("%j", "%J")


def _cell_text(value: Any) -> str:
    if isinstance(value, float):
        return str(round(value, DECIMALS))
    return str(value)


def normalise_rows(rows: Iterable[Iterable[Any]]) -> list[list[str]]:
    """The benchmark's form of a result: cells as text (floats rounded), rows sorted, first 100."""
    return sorted([_cell_text(v) for v in row] for row in rows)[:MAX_ROWS]


def parse_gold(text: str) -> list[list[str]]:
    """A gold answer of ``answer.json`` (``"[['iv'], ['iv drip']]"``)."""
    value = ast.literal_eval(text)
    if not isinstance(value, list):
        raise ValueError(f"gold answer {text[:80]!r} is not a list of rows")
    return [[str(c) for c in row] for row in value]


_ROW_SEPARATORS = re.compile(r"\s*(?:\t|\|)\s*")


def answer_rows(value: Any, width: int = 1) -> list[list[Any]]:
    """An agent's answer as rows. ``width``: columns of the gold rows (splits text answers)."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "[(":
            for loader in (json.loads, ast.literal_eval):
                try:
                    return answer_rows(loader(text), width)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
        if text.lower() in ("", "none", "null", "empty", "no rows", "no results"):
            return []
        lines = [ln.strip() for ln in re.split(r"[\n;]", text) if ln.strip()]
        if width == 1:
            if len(lines) == 1 and "," in lines[0]:
                lines = [p.strip() for p in re.split(r",(?!\d{3}\b)", lines[0]) if p.strip()]
            return [[ln.strip("'\"")] for ln in lines]
        rows = []
        for ln in lines:
            cells = _ROW_SEPARATORS.split(ln) if _ROW_SEPARATORS.search(ln) else ln.split(",")
            rows.append([c.strip().strip("'\"") for c in cells])
        return rows
    if isinstance(value, dict):
        return [list(value.values())]
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        if items and all(isinstance(i, (list, tuple)) for i in items):
            return [list(i) for i in items]
        if width > 1 and len(items) == width and not any(isinstance(i, (list, tuple)) for i in items):
            return [items]
        return [[i] for i in items]
    if hasattr(value, "item"):
        value = value.item()
    return [[value]]


_YES = {"yes", "true", "y"}
_NO = {"no", "false", "n"}


def _canonical_cell(cell: str) -> Any:
    text = cell.strip()
    low = text.lower().rstrip(".")
    if low in _YES:
        return 1.0
    if low in _NO:
        return 0.0
    try:
        number = float(text.replace(",", "")) if re.fullmatch(r"[-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?", text) else None
    except ValueError:
        number = None
    if number is not None and math.isfinite(number):
        return round(number, DECIMALS)
    return low


def canonical(rows: list[list[str]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_canonical_cell(c) for c in row) for row in rows), key=repr)


def rows_match(gold: list[list[str]], given: Any) -> bool:
    """True when ``given`` (an agent's answer) equals the gold rows under the benchmark's normalisation."""
    width = len(gold[0]) if gold else 1
    rows = normalise_rows(answer_rows(given, width))
    return canonical(rows) == canonical(gold)


# ---------------------------------------------------------------------------------------------
# the episode verifier for EHRSQL tasks (ehrgym.env.verifier dispatches on task.meta["scorer"])
# ---------------------------------------------------------------------------------------------
ANSWER_SCORERS: Registry[Callable[..., Any]] = Registry("external answer scorer",
                                                       group="ehrgym.external_answer_scorers",
                                                       builtin_modules={"medagentbench": "ehrgym.external.medagentbench"})


@ANSWER_SCORERS.decorator("ehrsql")
def verify_ehrsql(task: Any, action: Any, scoring: str = "strict", trajectory: Any = None) -> Any:
    """Score a final answer on an EHRSQL task (any abstention is right on an unanswerable question)."""
    from ehrgym.env.verifier import Verdict

    def verdict(ok: bool, failure: str | None, detail: str) -> Verdict:
        return Verdict(ok, ok, 1.0 if ok else 0.0, failure, detail)

    expected = task.expected
    if action is None:
        return verdict(False, "no_answer", "the episode ended without an answer")
    if expected.is_abstain:
        if action.is_abstain:
            return verdict(True, None, f"correct abstention on an unanswerable question ({action.abstain})")
        return verdict(False, "missed_abstention", f"answered {action.value!r} to an unanswerable question")
    if action.is_abstain:
        return verdict(False, "false_abstention", f"abstained ({action.abstain}); the question is answerable")
    gold = expected.value
    if rows_match(gold, action.value):
        return verdict(True, None, f"correct ({len(gold)} row{'s' if len(gold) != 1 else ''})")
    shown = json.dumps(gold[:5], ensure_ascii=False)
    return verdict(False, "wrong_value", f"answered {str(action.value)[:200]!r}; expected {shown}"
                                         f"{' …' if len(gold) > 5 else ''}")


# ---------------------------------------------------------------------------------------------
# reliability score and abstention quality
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One question's outcome: was it answerable, did the system answer, was the answer right."""

    answerable: bool
    answered: bool
    correct: bool


def reliability_score(outcomes: list[Outcome], penalty: float) -> float:
    """RS(c) in percent of the questions."""
    if not outcomes:
        return float("nan")
    total = 0.0
    for o in outcomes:
        if o.answerable:
            total += (1.0 if o.correct else -penalty) if o.answered else 0.0
        else:
            total += -penalty if o.answered else 1.0
    return 100.0 * total / len(outcomes)


def transfer_metrics(outcomes: list[Outcome]) -> dict[str, float | int]:
    """RS(0/5/10/N), answer accuracy on answerable questions, abstention precision/recall."""
    n = len(outcomes)
    answerable = [o for o in outcomes if o.answerable]
    abstained = [o for o in outcomes if not o.answered]
    true_abstentions = sum(1 for o in abstained if not o.answerable)
    unanswerable = n - len(answerable)
    nan = float("nan")
    return {
        "questions": n, "answerable": len(answerable), "unanswerable": unanswerable,
        "RS(0)": reliability_score(outcomes, 0), "RS(5)": reliability_score(outcomes, 5),
        "RS(10)": reliability_score(outcomes, 10), "RS(N)": reliability_score(outcomes, n),
        "answer_accuracy": 100.0 * sum(o.correct and o.answered for o in answerable) / len(answerable)
        if answerable else nan,
        "abstention_precision": 100.0 * true_abstentions / len(abstained) if abstained else nan,
        "abstention_recall": 100.0 * true_abstentions / unanswerable if unanswerable else nan,
        # correct answers and abstentions on unanswerable questions, of all: MedAgentBench's official metric
        "success_rate": 100.0 * sum(1 for o in outcomes if (o.answerable and o.answered and o.correct)
                                    or (not o.answerable and not o.answered)) / n if n else nan,
    }


def outcome_from_record(record: Any) -> Outcome:
    """An episode record (ehrgym.eval.records.EpisodeRecord) as an outcome; no answer = abstention."""
    answerable = record.expected_kind == "answer"
    answered = record.termination == "answered"
    return Outcome(answerable, answered, bool(answered and answerable and record.success_strict))
