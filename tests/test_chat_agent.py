"""The chat agent with the real ``openai`` client against a scripted OpenAI-compatible server process."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from ehrgym.agents.base import Briefing
from ehrgym.agents.registry import make_agent
from ehrgym.env.actions import AnswerAction, PythonAction, SqlAction
from ehrgym.errors import AgentError, InfrastructureError

from fake_openai_server import FakeServer



@dataclass
class Obs:
    text: str


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Any]:
    made: list[FakeServer] = []

    def start(script: list[dict[str, Any]]) -> FakeServer:
        s = FakeServer(tmp_path, script)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()


def agent_for(srv: FakeServer, **kw: Any) -> Any:
    sleeps: list[float] = []
    kw.setdefault("backoff_base", 0.01)
    kw.setdefault("timeout", 5.0)
    agent = make_agent("chat", model="fake-model", base_url=srv.url, api_key="test-key", sleep=sleeps.append, **kw)
    agent.sleeps = sleeps
    return agent


def brief(seed: int = 1, trial: int = 0) -> Briefing:
    return Briefing(task_id="t1", trial=trial, question="q?", seed=seed)


def test_tool_calls_map_to_actions_and_results_go_back_as_tool_messages(server: Any) -> None:
    srv = server([
        {"tool_call": {"name": "sql", "arguments": {"query": "SELECT 1"}}},
        {"tool_call": {"name": "python", "arguments": {"code": "print(1)"}}},
        {"tool_call": {"name": "answer", "arguments": {"abstain": "conflicting evidence", "explanation": "two"}}},
    ])
    agent = agent_for(srv, seed=11)
    agent.reset(Obs("first observation"), brief(trial=2))
    assert agent.act(Obs("first observation")) == SqlAction("SELECT 1")
    assert agent.act(Obs("1 row")) == PythonAction("print(1)")
    final = agent.act(Obs("printed 1"))
    assert isinstance(final, AnswerAction) and final.abstain == "conflicting_evidence"
    reqs = srv.requests()
    assert len(reqs) == 3
    assert {t["function"]["name"] for t in reqs[0]["tools"]} == {"sql", "python", "answer"}
    assert reqs[0]["seed"] == 13  # seed + trial
    assert [m["role"] for m in reqs[2]["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert reqs[2]["messages"][3]["content"] == "1 row"
    assert reqs[2]["messages"][3]["tool_call_id"] == reqs[2]["messages"][2]["tool_calls"][0]["id"]
    assert agent.usage.calls == 3 and agent.usage.prompt_tokens > 0 and agent.usage.completion_tokens > 0
    assert agent.usage.latency_s > 0


def test_429_then_success_is_retried_with_backoff(server: Any) -> None:
    srv = server([{"status": 429, "message": "slow down"}, {"status": 503},
                  {"text": "ANSWER: 42"}])
    agent = agent_for(srv)
    agent.reset(Obs("obs"), brief())
    action = agent.act(Obs("obs"))
    assert action == AnswerAction("42")
    assert len(agent.sleeps) == 2 and agent.sleeps[1] > agent.sleeps[0] * 0.6  # exponential with jitter
    assert agent.usage.retries == 2 and agent.usage.calls == 1


def test_jitter_is_seeded_per_episode(server: Any) -> None:
    delays = []
    for _ in range(2):
        srv = server([{"status": 500}, {"status": 500}, {"text": "ANSWER: 1"}])
        agent = agent_for(srv)
        agent.reset(Obs("obs"), brief(seed=5))
        agent.act(Obs("obs"))
        delays.append(agent.sleeps)
        srv.stop()
    assert delays[0] == delays[1]


def test_persistent_500_raises_infrastructure_error(server: Any) -> None:
    srv = server([{"status": 500, "message": "boom", "repeat": True}])
    agent = agent_for(srv, max_retries=3)
    agent.reset(Obs("obs"), brief())
    with pytest.raises(InfrastructureError, match="after 4 attempts"):
        agent.act(Obs("obs"))
    assert len(srv.requests()) == 4


def test_slow_reply_times_out_then_infrastructure_error(server: Any) -> None:
    srv = server([{"text": "ANSWER: 1", "delay": 3.0, "repeat": True}])
    agent = agent_for(srv, max_retries=1, timeout=0.3)
    agent.reset(Obs("obs"), brief())
    start = time.perf_counter()
    with pytest.raises(InfrastructureError, match="Timeout"):
        agent.act(Obs("obs"))
    assert time.perf_counter() - start < 3.0


def test_auth_error_is_infrastructure_not_wrong_answer(server: Any) -> None:
    srv = server([{"status": 401, "message": "bad key"}])
    agent = agent_for(srv)
    agent.reset(Obs("obs"), brief())
    with pytest.raises(InfrastructureError, match="OPENAI_API_KEY"):
        agent.act(Obs("obs"))


def test_malformed_output_gets_a_corrective_message(server: Any) -> None:
    srv = server([
        {"text": "I think I should look at the labs first."},
        {"tool_call": {"name": "sql", "arguments": "{not json"}},
        {"tool_call": {"name": "frobnicate", "arguments": {}}},
        {"text": "```sql\nSELECT count(*) FROM labevents\n```"},
    ])
    agent = agent_for(srv, max_format_retries=3)
    agent.reset(Obs("obs"), brief())
    assert agent.act(Obs("obs")) == SqlAction("SELECT count(*) FROM labevents")
    last = srv.requests()[-1]["messages"]
    # corrective observations: a user message after plain text, tool messages after broken tool calls
    roles = [m["role"] for m in last]
    assert roles == ["system", "user", "assistant", "user", "assistant", "tool", "assistant", "tool"]
    assert "ANSWER" in last[3]["content"]
    assert "not valid JSON" in last[5]["content"]
    assert "no tool 'frobnicate'" in last[7]["content"]


def test_malformed_output_beyond_the_budget_is_an_agent_error(server: Any) -> None:
    srv = server([{"text": "hmm", "repeat": True}])
    agent = agent_for(srv, max_format_retries=1)
    agent.reset(Obs("obs"), brief())
    with pytest.raises(AgentError, match="no usable action after 2 attempts"):
        agent.act(Obs("obs"))


def test_server_rejecting_tools_falls_back_to_text(server: Any) -> None:
    srv = server([
        {"tool_call": {"name": "sql", "arguments": {"query": "SELECT 2"}}},
        {"reject_tools": True},
        {"text": "Let me answer.\nABSTAIN: insufficient_evidence: no rows"},
        {"text": "ANSWER: 7"},
    ])
    agent = agent_for(srv)
    agent.reset(Obs("obs"), brief())
    assert agent.act(Obs("obs")) == SqlAction("SELECT 2")
    action = agent.act(Obs("0 rows"))
    assert action.abstain == "insufficient_evidence"
    assert not agent.native_tools and agent.fallbacks == 1
    reqs = srv.requests()
    assert "tools" in reqs[1] and "tools" not in reqs[2]
    # the text-mode history has no tool messages and the system prompt describes the text protocol
    assert [m["role"] for m in reqs[2]["messages"]] == ["system", "user", "assistant", "user"]
    assert "```sql" in reqs[2]["messages"][0]["content"] and "SELECT 2" in reqs[2]["messages"][2]["content"]
    # later episodes stay in text mode
    agent.reset(Obs("obs"), brief())
    assert agent.act(Obs("obs")) == AnswerAction("7")
    assert "tools" not in srv.requests()[3]


def test_no_tools_mode_and_prompt_variants(server: Any) -> None:
    srv = server([{"text": "SQL: SELECT 3"}])
    agent = agent_for(srv, tools=False, prompt="noise_aware", temperature=0.7, top_p=0.9, max_tokens=64)
    agent.reset(Obs("obs"), brief())
    assert agent.act(Obs("obs")) == SqlAction("SELECT 3")
    req = srv.requests()[0]
    assert "tools" not in req and req["temperature"] == 0.7 and req["top_p"] == 0.9 and req["max_tokens"] == 64
    assert "duplicated" in req["messages"][0]["content"]
    with pytest.raises(AgentError, match="unknown prompt variant"):
        make_agent("chat", model="m", base_url=srv.url, prompt="nope")


def test_configuration_from_environment(monkeypatch: pytest.MonkeyPatch, server: Any) -> None:
    srv = server([{"text": "ANSWER: yes"}])
    monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("EHRGYM_MODEL", "env-model")
    agent = make_agent("chat")
    assert agent.model == "env-model"
    agent.reset(Obs("obs"), brief())
    assert agent.act(Obs("obs")) == AnswerAction("yes")
    assert srv.requests()[0]["model"] == "env-model"
    monkeypatch.delenv("EHRGYM_MODEL")
    with pytest.raises(AgentError, match="EHRGYM_MODEL"):
        make_agent("chat")
