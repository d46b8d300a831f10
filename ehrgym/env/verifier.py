"""Scoring a final answer against a task's expected outcome (docs/architecture.md §4, verifier).

A pure function: typed comparison comes from :mod:`ehrgym.bench.answers` (the builder uses the
same code, so builder and verifier cannot disagree), which parses an answer strictly: one
candidate value, no hedging (its module docstring lists the rules). Abstentions: *strict*
scoring also checks the reason code — the expected one or any reason the evidence cannot tell
apart from it for the task's noise subtype (:data:`ehrgym.vocab.ACCEPTED_REASONS`); *lenient*
scoring accepts any abstention on an ``abstain`` task. The reward is 1/0 under the chosen
scoring (strict by default).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ehrgym.bench.answers import NotComparable, answers_match, format_answer, normalise
from ehrgym.bench.task import Task
from ehrgym.env.actions import AnswerAction
from ehrgym.vocab import FAILURES

SCORINGS: tuple[str, ...] = ("strict", "lenient")


@dataclass(frozen=True)
class Verdict:
    """Why an episode succeeded or failed. ``failure`` is one of ``vocab.FAILURES`` or None."""

    success_strict: bool
    success_lenient: bool
    reward: float
    failure: str | None
    detail: str

    def __post_init__(self) -> None:
        if self.failure is not None and self.failure not in FAILURES:
            raise ValueError(f"unknown failure {self.failure!r}; use one of {FAILURES}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        return cls(bool(data["success_strict"]), bool(data["success_lenient"]), float(data["reward"]),
                   data.get("failure"), str(data.get("detail", "")))


def _verdict(strict: bool, lenient: bool, failure: str | None, detail: str, scoring: str) -> Verdict:
    ok = strict if scoring == "strict" else lenient
    return Verdict(strict, lenient, 1.0 if ok else 0.0, failure, detail)


def verify(task: Task, action: AnswerAction | None, scoring: str = "strict", trajectory: Any = None) -> Verdict:
    """Score ``action`` (None = the episode ended without an answer) on ``task``.

    ``trajectory``: the episode so far (:class:`~ehrgym.env.trajectory.Trajectory`), for an external
    benchmark whose grading looks at the actions taken (MedAgentBench checks the POSTed orders)."""
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    scorer = (task.meta or {}).get("scorer")
    if scorer:  # an external benchmark's own answer comparison (ehrgym.external.scoring)
        from ehrgym.external.scoring import ANSWER_SCORERS

        return ANSWER_SCORERS.get(scorer)(task, action, scoring, trajectory=trajectory)
    expected = task.expected
    if action is None:
        return _verdict(False, False, "no_answer", "the episode ended without an answer", scoring)
    if expected.is_abstain:
        if action.is_abstain:
            given = str(action.abstain)
            accepted = task.accepted_reasons
            if given in accepted:
                return _verdict(True, True, None, f"correct abstention ({given})", scoring)
            return _verdict(False, True, "wrong_reason",
                            f"abstained with reason {given!r}; expected {' or '.join(sorted(accepted))}", scoring)
        return _verdict(False, False, "missed_abstention",
                        f"answered {action.value!r}; expected an abstention ({expected.reason})", scoring)
    spec = expected.answer
    gold_text = format_answer(expected.value, spec)
    if action.is_abstain:
        return _verdict(False, False, "false_abstention",
                        f"abstained ({action.abstain}); expected the answer {gold_text}", scoring)
    try:
        normalise(action.value, spec)
    except NotComparable as exc:
        return _verdict(False, False, "wrong_type", f"{exc}; expected a {spec.type} like {gold_text}", scoring)
    if answers_match(expected.value, action.value, spec):
        return _verdict(True, True, None, f"correct ({gold_text})", scoring)
    return _verdict(False, False, "wrong_value", f"answered {action.value!r}; expected {gold_text}", scoring)
