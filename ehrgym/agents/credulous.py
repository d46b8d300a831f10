"""``credulous``: runs the clean gold SQL for the question and answers whatever comes back.

It is entitled to the task's ``naive_sql`` only (no overlay, no expected outcome): the query a
competent analyst would write on clean data. It never checks anything — an empty or NULL result
is answered as such — so on noisy tasks it falls into exactly the trap each noise sets.
"""

from __future__ import annotations

from typing import Any

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement
from ehrgym.agents.registry import register_agent
from ehrgym.agents.scripted import read_result, rows_to_value
from ehrgym.env.actions import Action, AnswerAction, SqlAction
from ehrgym.errors import AgentError


@register_agent("credulous")
class CredulousAgent(Agent):
    """Runs the naive (clean gold) SQL and answers its result, whatever it is."""

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
            raise AgentError(f"the {self.name} agent needs the draft SQL (DRAFT briefing)")
        self._sql = briefing.draft_sql
        self._type = briefing.answer_type
        self._ran = False

    def act(self, observation: Any) -> Action:
        if not self._ran:
            self._ran = True
            return SqlAction(self._sql or "")
        return self.answer(read_result(observation))

    def answer(self, result: Any) -> Action:
        """The final action once the draft query's result is back."""
        value = rows_to_value(result.rows, self._type) if result.ok else None
        return AnswerAction(value, explanation="credulous: the query result")
