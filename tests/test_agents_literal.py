"""The ``literal`` baseline: the draft query, read literally; abstain only on an empty result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ehrgym.agents.base import Briefing, Entitlement
from ehrgym.agents.literal import LiteralAgent, is_empty
from ehrgym.agents.registry import agent_names, get_agent_entry, make_agent
from ehrgym.env.actions import AnswerAction, SqlAction
from ehrgym.errors import AgentError


@dataclass
class Obs:
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    columns: list[str] = field(default_factory=lambda: ["x"])
    row_count: int = 0
    error: str | None = None


def run(answer_type: str, obs: Obs) -> AnswerAction:
    agent = make_agent("literal")
    agent.reset(None, Briefing("task-0", 0, "q?", 1, draft_sql="SELECT 42", answer_type=answer_type))
    first = agent.act(None)
    assert isinstance(first, SqlAction) and first.query == "SELECT 42"
    final = agent.act(obs)
    assert isinstance(final, AnswerAction)
    return final


def test_registered_with_the_draft_entitlement() -> None:
    assert "literal" in agent_names()
    entry = get_agent_entry("literal")
    assert entry.factory is LiteralAgent and entry.entitlement is Entitlement.DRAFT


@pytest.mark.parametrize("obs", [Obs(), Obs(rows=[(None,)], row_count=1), Obs(rows=[(None,), (None,)], row_count=2),
                                 Obs(error="Binder Error: no such column")])
def test_abstains_on_nothing(obs: Obs) -> None:
    final = run("number", obs)
    assert final.is_abstain and final.abstain == "insufficient_evidence"


def test_answers_whatever_else_comes_back() -> None:
    assert run("number", Obs(rows=[(3.5,)], row_count=1)).value == 3.5
    assert run("integer", Obs(rows=[(0,)], row_count=1)).value == 0  # zero is an answer, not nothing
    assert run("set", Obs(rows=[("a, b",), (None,)], row_count=2)).value == ["a, b", None]
    assert run("boolean", Obs(rows=[(False,)], row_count=1)).value is False


def test_is_empty() -> None:
    assert is_empty(None) and is_empty([]) and is_empty([None, None])
    assert not is_empty(0) and not is_empty("") and not is_empty([None, 1])


def test_needs_the_draft() -> None:
    with pytest.raises(AgentError):
        LiteralAgent().reset(None, Briefing("task-0", 0, "q?", 1))
