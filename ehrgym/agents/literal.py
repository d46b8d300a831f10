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

from ehrgym.agents.credulous import CredulousAgent
from ehrgym.agents.registry import register_agent
from ehrgym.agents.scripted import rows_to_value
from ehrgym.env.actions import Action, AnswerAction

ABSTAIN_REASON = "insufficient_evidence"


def is_empty(value: Any) -> bool:
    """No answer in a result: no rows, a NULL, or only NULLs."""
    if value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(v is None for v in value)
    return False


@register_agent("literal")
class LiteralAgent(CredulousAgent):
    """Runs the draft SQL; abstains (insufficient_evidence) on an empty/NULL result, else answers it."""

    def answer(self, result: Any) -> Action:
        if not result.ok:
            return AnswerAction(abstain=ABSTAIN_REASON, explanation="literal: the query failed")
        value = rows_to_value(result.rows, self._type)
        if is_empty(value):
            return AnswerAction(abstain=ABSTAIN_REASON, explanation="literal: the query returns nothing")
        return AnswerAction(value, explanation="literal: the query result")
