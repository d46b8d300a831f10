"""``external-oracle``: the privileged baseline of the external benchmarks (it must score 100 %).

MedAgentBench: the oracle computes each task's reference solution from your FHIR server (as the
official reference solution does) and plays it through the episode: the expected POSTs, then
the answer list (:func:`ehrgym.external.medagentbench.oracle_plan`). EHRSQL and MIMICSQL:

The gold SQL uses SQLite functions (``strftime``, ``datetime(current_time, …)``), so the oracle
does not send it through the episode's DuckDB SQL tool: it runs it, post-processed as the
benchmark does, on the benchmark's SQLite build (the task's ``meta["official_db"]``, written by
``ehrgym external build``, or the ``official_db`` option) and answers the normalised rows
through the episode — or abstains when the question is unanswerable. Anything short of 100 %
answer accuracy and RS(N) = 100 points at a disagreement between the adapter's tasks, the
episode path and the EHRSQL answer comparison.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement
from ehrgym.agents.registry import register_agent
from ehrgym.env.actions import Action, AnswerAction
from ehrgym.errors import AgentError


@register_agent("external-oracle")
class ExternalOracleAgent(Agent):
    """Privileged: runs an external task's gold SQL on the benchmark's SQLite build, answers its rows."""

    entitlement = Entitlement.PRIVILEGED
    concurrency = Concurrency.PROCESS
    env_defaults = {"schema_summary": False, "python": False}

    def __init__(self, official_db: str | None = None) -> None:
        super().__init__()
        self.official_db = official_db
        self._task: Any = None
        self._plan: list[Action] | None = None
        self._cons: dict[str, sqlite3.Connection] = {}

    def reset(self, observation: Any, briefing: Briefing) -> None:
        super().reset(observation, briefing)
        if briefing.task is None:
            raise AgentError("the external oracle needs the task (privileged briefing)")
        self._task = briefing.task
        self._plan = None
        if (briefing.task.meta or {}).get("scorer") == "medagentbench":   # a FHIR task: the reference solution
            from ehrgym.env.fhirtool import client_for
            from ehrgym.external.medagentbench import oracle_plan

            self._plan = oracle_plan(briefing.task, client_for(briefing.task))

    def _connection(self) -> sqlite3.Connection:
        path = self.official_db or self._task.meta.get("official_db")
        if not path:
            raise AgentError(f"task {self._task.task_id} names no SQLite build; pass --agent-kwarg official_db=PATH")
        if path not in self._cons:
            try:
                self._cons[path] = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            except sqlite3.Error as exc:
                raise AgentError(f"cannot open the benchmark's SQLite build {path}: {exc}") from exc
        return self._cons[path]

    def act(self, observation: Any) -> Action:
        from ehrgym.external.ehrsql2024 import run_official

        task = self._task
        if self._plan is not None:   # MedAgentBench: its POSTs, then the answer
            if not self._plan:
                raise AgentError(f"the oracle's plan for {task.task_id} is used up")
            return self._plan.pop(0)
        if task.expected.is_abstain or not task.gold_sql:
            return AnswerAction(abstain=task.expected.reason or "out_of_scope",
                                explanation="oracle: the question is unanswerable")
        try:
            if task.meta.get("raw_sql"):  # MIMICSQL: the gold SQL runs as published
                from ehrgym.external.scoring import normalise_rows

                return AnswerAction(normalise_rows(self._connection().execute(task.gold_sql).fetchall()),
                                    explanation="oracle: gold SQL result on the benchmark's SQLite database")
            rows = run_official(self._connection(), task.gold_sql,
                                **({"current_time": task.meta["current_time"]} if task.meta.get("current_time") else {}))
        except sqlite3.Error as exc:
            raise AgentError(f"the gold SQL of {task.task_id} failed on SQLite: {exc}") from exc
        return AnswerAction(rows, explanation="oracle: gold SQL result on the benchmark's SQLite build")

    def close(self) -> None:
        for con in self._cons.values():
            con.close()
        self._cons.clear()


@register_agent("external-abstain")
class ExternalAbstainAgent(Agent):
    """Scripted floor: abstains on every question (RS(c) = the share of unanswerable questions, any c)."""

    entitlement = Entitlement.NONE
    concurrency = Concurrency.PROCESS
    env_defaults = {"schema_summary": False, "python": False}

    def act(self, observation: Any) -> Action:
        return AnswerAction(abstain="out_of_scope", explanation="always abstains")
