"""``oracle``: the privileged baseline that replays a task's expected path (it must score 100%).

It runs the task's ``gold_sql`` through the environment, reads the gold value off the result
with the builder's own :func:`~ehrgym.bench.answers.gold_from_rows`, writes it the way a person
would (:func:`~ehrgym.bench.answers.format_answer`) and answers it — or abstains with the
expected reason. Anything short of 100% therefore points at a disagreement between builder,
overlays, gate and verifier, which is what this agent exists to catch.
"""

from __future__ import annotations

from typing import Any

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement
from ehrgym.agents.registry import register_agent
from ehrgym.agents.scripted import read_result
from ehrgym.bench.answers import format_answer, gold_from_rows
from ehrgym.env.actions import Action, AnswerAction, SqlAction
from ehrgym.errors import AgentError


@register_agent("oracle")
class OracleAgent(Agent):
    """Privileged: runs the gold SQL, then answers the expected value or abstention."""

    entitlement = Entitlement.PRIVILEGED
    concurrency = Concurrency.PROCESS
    env_defaults = {"schema_summary": False}

    def __init__(self) -> None:
        super().__init__()
        self._task: Any = None
        self._ran = False

    def reset(self, observation: Any, briefing: Briefing) -> None:
        super().reset(observation, briefing)
        if briefing.task is None:
            raise AgentError("the oracle needs the task (privileged briefing)")
        self._task = briefing.task
        self._ran = False

    def act(self, observation: Any) -> Action:
        task = self._task
        if not self._ran:
            self._ran = True
            return SqlAction(task.gold_sql)
        expected = task.expected
        if expected.is_abstain:
            return AnswerAction(abstain=expected.reason, explanation="oracle: expected abstention")
        result = read_result(observation)
        if not result.ok:
            raise AgentError(f"the gold SQL of {task.task_id} failed in the environment: {result.error}")
        value = gold_from_rows(list(result.rows), expected.answer)
        if value is None:
            raise AgentError(f"the gold SQL of {task.task_id} returned no answer in the environment")
        if expected.answer.type in ("set", "list"):
            return AnswerAction(list(value), explanation="oracle: gold SQL result")  # elements may hold commas
        return AnswerAction(format_answer(value, expected.answer), explanation="oracle: gold SQL result")
