"""``literal``: runs the obvious query for the question and abstains when it returns nothing.

The floor a robust agent must beat. Like ``credulous`` it is entitled to the task's draft SQL
only (``Entitlement.DRAFT``: the clean gold SQL rendered for this question, plus the answer
format) and never inspects the data; unlike ``credulous`` it treats an empty result, a NULL, or
an error as "the records hold no answer" and abstains with ``insufficient_evidence``. Whatever
else comes back it answers as is. A benchmark on which this policy scores well on noisy tasks
rewards reading an empty result, not checking the evidence.
"""

from __future__ import annotations

from typing import Any

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement
from ehrgym.agents.registry import register_agent
from ehrgym.agents.scripted import read_result, rows_to_value
from ehrgym.env.actions import Action, AnswerAction, SqlAction
from ehrgym.errors import AgentError

ABSTAIN_REASON = "insufficient_evidence"


def is_empty(value: Any) -> bool:
    """No answer in a result: no rows, a NULL, or only NULLs."""
    if value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(v is None for v in value)
    return False


@register_agent("literal")
class LiteralAgent(Agent):
    """Runs the draft SQL; abstains (insufficient_evidence) on an empty/NULL result, else answers it."""

    entitlement = Entitlement.DRAFT
    concurrency = Concurrency.PROCESS
    env_defaults = {"schema_summary": False}

    def __init__(self) -> None:
        super().__init__()
        self._sql: str | None = None
        self._type: str | None = None
        self._ran = False

    def reset(self, observation: Any, briefing: Briefing) -> None:
        super().reset(observation, briefing)
        if briefing.draft_sql is None:
            raise AgentError("the literal agent needs the draft SQL (DRAFT briefing)")
        self._sql = briefing.draft_sql
        self._type = briefing.answer_type
        self._ran = False

    def act(self, observation: Any) -> Action:
        if not self._ran:
            self._ran = True
            return SqlAction(self._sql or "")
        result = read_result(observation)
        if not result.ok:
            return AnswerAction(abstain=ABSTAIN_REASON, explanation="literal: the query failed")
        value = rows_to_value(result.rows, self._type)
        if is_empty(value):
            return AnswerAction(abstain=ABSTAIN_REASON, explanation="literal: the query returns nothing")
        return AnswerAction(value, explanation="literal: the query result")
