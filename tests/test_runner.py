"""The evaluation runner on the small benchmark: baselines, resume, kill -9, API agents end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ehrgym.agents.base import Entitlement
from ehrgym.agents.registry import agent_names, get_agent_entry, make_agent
from ehrgym.errors import AgentError
from ehrgym.eval.runner import make_briefing, run_evaluation, select_tasks, trajectory_dict
from ehrgym.eval.store import EpisodeStore, RunStoreError, read_run_config

from fake_openai_server import FakeServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Path:
    return small_bench


@pytest.fixture(scope="module")
def tasks(bench: Path) -> list[Any]:
    from ehrgym.bench.dataset import load_benchmark

    return load_benchmark(bench).tasks


def rates(run_dir: Path) -> dict[str, float]:
    ok: Counter[str] = Counter()
    n: Counter[str] = Counter()
    for r in EpisodeStore(run_dir).records():
        if r.success_strict is None:
            continue
        n[r.variant] += 1
        ok[r.variant] += int(r.success_strict)
    return {v: ok[v] / n[v] for v in n}


def stratified_pairs(tasks: list[Any], per_subtype: int) -> list[str]:
    """Task ids of the first ``per_subtype`` pairs of every noise subtype."""
    chosen: dict[str, list[str]] = {}
    for t in tasks:
        if t.variant == "noise":
            chosen.setdefault(t.noise.subtype, [])
            if len(chosen[t.noise.subtype]) < per_subtype:
                chosen[t.noise.subtype].append(t.pair_id)
    pairs = {p for ps in chosen.values() for p in ps}
    return [t.task_id for t in tasks if t.pair_id in pairs]


# ---------------------------------------------------------------------------------------------
def test_registry_and_entitlements(tasks: list[Any]) -> None:
    assert {"oracle", "credulous", "literal", "skeptic", "chat", "hf"} <= set(agent_names())
    with pytest.raises(AgentError, match="unknown agent"):
        get_agent_entry("nope")
    with pytest.raises(AgentError, match="does not accept"):
        make_agent("credulous", model="x")
    task = tasks[0]
    briefs = {name: make_briefing(make_agent(name), task, 2, 7) for name in ("oracle", "credulous", "literal",
                                                                          "skeptic")}
    assert briefs["oracle"].task is task and briefs["oracle"].draft_sql == task.naive_sql
    assert all(b.task_id == task.public_id != task.task_id for b in briefs.values())  # opaque ids only
    for name in ("credulous", "literal", "skeptic"):
        assert get_agent_entry(name).entitlement is Entitlement.DRAFT
        assert briefs[name].task is None and briefs[name].draft_sql == task.naive_sql
    chat_like = type("Chatty", (), {"entitlement": Entitlement.NONE})()
    none = make_briefing(chat_like, task, 0, 1)  # type: ignore[arg-type]
    assert none.draft_sql is None and none.task is None and none.question == task.question


def test_oracle_scores_100_percent(bench: Path, synth_db: Path, tmp_path: Path) -> None:
    s = run_evaluation(bench, synth_db, "oracle", tmp_path / "oracle", k=1, workers=2, progress=False)
    assert s.ran == s.planned > 0 and s.success_clean == 1.0 and s.success_noise == 1.0
    assert set(s.terminations) <= {"answered", "abstained"}
    records = EpisodeStore(tmp_path / "oracle").records()
    bad = [(r.task_id, r.failure, r.error) for r in records if not r.success_strict]
    assert not bad, bad[:5]
    run = read_run_config(tmp_path / "oracle")
    assert run and run["agent"] == "oracle" and run["k"] == 1 and run["env_config"] == {"schema_summary": False}


def test_credulous_falls_into_every_trap_and_skeptic_closes_the_gap(bench: Path, synth_db: Path, tasks: list[Any],
                                                                    tmp_path: Path) -> None:
    s = run_evaluation(bench, synth_db, "credulous", tmp_path / "cred", k=1, workers=2, progress=False)
    assert s.success_clean is not None and s.success_noise is not None
    assert s.success_clean >= 0.95 and s.success_noise <= 0.05
    assert s.success_clean - s.success_noise >= 0.9

    subset = stratified_pairs(tasks, per_subtype=2)
    sk = run_evaluation(bench, synth_db, "skeptic", tmp_path / "skeptic", k=1, workers=2, tasks=subset,
                        progress=False)
    cr = {r.task_id: r.success_strict for r in EpisodeStore(tmp_path / "cred").records()}
    cred_noise = [cr[t] for t in subset if t in cr and "noise" in t] or [0.0]
    assert sk.success_noise is not None and sk.success_clean is not None
    assert sk.success_noise > 0.6 > max(cred_noise)
    assert sk.success_clean >= 0.9


def test_resume_skips_finished_and_rejects_another_run(bench: Path, synth_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run_evaluation(bench, synth_db, "credulous", out, k=2, limit_pairs=3, progress=False)
    assert first.ran == first.planned == 12
    again = run_evaluation(bench, synth_db, "credulous", out, k=3, limit_pairs=3, progress=False)
    assert again.skipped == 12 and again.ran == 6 and again.planned == 18
    keys = [(d["task_id"], d["trial"]) for d in EpisodeStore(out).iter_dicts()]
    assert len(keys) == len(set(keys)) == 18
    with pytest.raises(RunStoreError, match="another run"):
        run_evaluation(bench, synth_db, "oracle", out, k=1, limit_pairs=1, progress=False)
    from click.testing import CliRunner

    from ehrgym.cli import cli

    res = CliRunner().invoke(cli, ["eval", "summarize", str(out)])
    assert res.exit_code == 0, res.output
    assert "clean_vs_noise" in res.output and "credulous" in res.output


def test_kill_9_mid_run_then_resume_loses_and_duplicates_nothing(bench: Path, synth_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "ehrgym.cli", "eval", "run", "--bench", str(bench), "--db", str(synth_db),
           "--agent", "credulous", "--k", "4", "--limit-pairs", "40", "--workers", "2", "--out", str(out),
           "--no-progress"]
    total = 80 * 4
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    path = out / "episodes.jsonl"
    deadline = time.time() + 120
    lines = 0
    while time.time() < deadline:
        lines = path.read_bytes().count(b"\n") if path.exists() else 0
        if lines >= 40 or proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run: main process and its workers
    proc.wait(10)
    assert 0 < lines < total, f"the run was not killed mid-way ({lines} of {total} episodes)"
    with open(path, "ab") as fh:  # and a torn half-record, as a crash mid-write would leave
        fh.write(b'{"run_id": "x", "task_id": "torn')
    done_before = {(d["task_id"], d["trial"]) for d in EpisodeStore(out).iter_dicts()}
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    keys = [(d["task_id"], d["trial"]) for d in EpisodeStore(out).iter_dicts()]
    assert len(keys) == total and len(set(keys)) == total
    assert done_before <= set(keys)
    assert f"{total - len(done_before)} episodes run, {len(done_before)} already done" in res.stdout


def test_chat_agent_through_the_runner_with_fault_injection(bench: Path, synth_db: Path, tasks: list[Any],
                                                           tmp_path: Path) -> None:
    two = [t.task_id for t in tasks[:2]]
    script = [
        {"tool_call": {"name": "sql", "arguments": {"query": "SELECT count(*) FROM patients"}}},
        {"status": 429, "message": "rate limited"},
        {"tool_call": {"name": "answer", "arguments": {"value": "42"}}},
        {"text": "I am not sure."},                                   # malformed -> corrective message
        {"text": "ABSTAIN: insufficient evidence: nothing found"},
    ]
    srv = FakeServer(tmp_path, script)
    out = tmp_path / "chat"
    kwargs = {"model": "fake", "base_url": srv.url, "api_key": "k", "backoff_base": 0.01, "timeout": 10.0}
    try:
        s = run_evaluation(bench, synth_db, "chat", out, k=1, workers=1, tasks=two, agent_kwargs=kwargs,
                           progress=False)
    finally:
        srv.stop()
    assert s.ran == 2 and s.infrastructure_errors == 0
    recs = {r.task_id: r for r in EpisodeStore(out).records()}
    first, second = recs[two[0]], recs[two[1]]
    assert first.termination == "answered" and first.answered_value == "42" and first.steps == 2
    assert first.prompt_tokens > 0 and first.completion_tokens > 0
    steps = first.trajectory["steps"]
    assert steps[0]["action"] == {"tool": "sql", "query": "SELECT count(*) FROM patients"}
    assert "count_star()" in steps[0]["observation"] and steps[0]["usage"]["prompt_tokens"] > 0
    assert first.trajectory["agent"]["usage"]["retries"] == 1
    assert second.termination == "abstained" and second.abstain_reason == "insufficient_evidence"
    roles = [m["role"] for m in second.trajectory["agent"]["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]

    # a server that keeps failing: infrastructure errors, excluded from success, then retried
    (tmp_path / "down").mkdir()
    srv = FakeServer(tmp_path / "down", [{"status": 500, "message": "overloaded", "repeat": True}])
    out2 = tmp_path / "chat_down"
    try:
        s2 = run_evaluation(bench, synth_db, "chat", out2, k=1, workers=2, tasks=two,
                            agent_kwargs={**kwargs, "base_url": srv.url, "max_retries": 1}, progress=False)
    finally:
        srv.stop()
    assert s2.infrastructure_errors == 2 and s2.success_clean is None and s2.success_noise is None
    rec = EpisodeStore(out2).records()[0]
    assert rec.termination == "infrastructure_error" and rec.success_strict is None and rec.failure is None
    assert "after 2 attempts" in (rec.error or "") and "episode attempts" in (rec.error or "")
    (tmp_path / "up").mkdir()
    srv = FakeServer(tmp_path / "up", [{"tool_call": {"name": "answer", "arguments": {"abstain": "out_of_scope"}},
                                        "repeat": True}])
    try:
        s3 = run_evaluation(bench, synth_db, "chat", out2, k=1, workers=2, tasks=two, retry_errors=True,
                            agent_kwargs={**kwargs, "base_url": srv.url, "max_retries": 1}, progress=False)
    finally:
        srv.stop()
    assert s3.ran == 2 and s3.infrastructure_errors == 0
    assert {r.termination for r in EpisodeStore(out2).records()} == {"abstained"}


def test_agent_error_and_step_limit_are_recorded(bench: Path, synth_db: Path, tasks: list[Any],
                                                 tmp_path: Path) -> None:
    one = [tasks[0].task_id]
    srv = FakeServer(tmp_path, [{"text": "hmm", "repeat": True}])
    try:
        s = run_evaluation(bench, synth_db, "chat", tmp_path / "err", k=1, tasks=one, progress=False,
                           agent_kwargs={"model": "fake", "base_url": srv.url, "max_format_retries": 1})
    finally:
        srv.stop()
    rec = EpisodeStore(tmp_path / "err").records()[0]
    assert s.terminations == {"agent_error": 1}
    assert rec.success_strict is False and rec.failure == "no_answer" and "no usable action" in (rec.error or "")
    (tmp_path / "loop").mkdir()
    srv = FakeServer(tmp_path / "loop", [{"tool_call": {"name": "sql", "arguments": {"query": "SELECT 1"}},
                                          "repeat": True}])
    try:
        run_evaluation(bench, synth_db, "chat", tmp_path / "steps", k=1, tasks=one, progress=False,
                       env_config={"max_steps": 3}, agent_kwargs={"model": "fake", "base_url": srv.url})
    finally:
        srv.stop()
    rec = EpisodeStore(tmp_path / "steps").records()[0]
    assert rec.termination == "step_limit" and rec.steps == 3 and rec.failure == "no_answer"


def test_select_tasks_and_trajectory_serialisation(tasks: list[Any], bench: Path, synth_db: Path) -> None:
    noisy = select_tasks(tasks, {"variant": "noise", "intent": ["labs", "vitals"]})
    assert noisy and all(t.variant == "noise" and t.intent in ("labs", "vitals") for t in noisy)
    two_pairs = select_tasks(tasks, None, limit_pairs=2)
    assert len(two_pairs) == 4 and len({t.pair_id for t in two_pairs}) == 2
    with pytest.raises(Exception, match="unknown task ids"):
        select_tasks(tasks, ["nope"])
    from ehrgym.env.actions import SqlAction
    from ehrgym.env.episode import EhrEnv

    with EhrEnv(synth_db) as env:
        env.reset(tasks[1])
        env.step(SqlAction("SELECT 1 AS one"), usage={"prompt_tokens": 3})
        env.abort()
        assert trajectory_dict(env.trajectory) == env.trajectory.to_dict()


def test_a_hostile_agent_costs_one_episode_never_the_run(bench: Path, synth_db: Path, tasks: list[Any],
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nested-parentheses query (a RecursionError in the parser) once crashed `ehrgym eval run` with
    0 episodes written; now it is an observation, and an environment error is recorded, not raised."""
    from ehrgym.agents.base import Agent, Concurrency
    from ehrgym.agents.registry import register_agent
    from ehrgym.env.actions import AnswerAction, SqlAction

    nested = "SELECT " + "(" * 600 + "1" + ")" * 600

    @register_agent("test-nested-parens")
    class NestedParens(Agent):
        """Sends the nested-parentheses query, a bytes query, then abstains."""

        concurrency = Concurrency.THREAD

        def reset(self, observation: Any, briefing: Any) -> None:
            super().reset(observation, briefing)
            self.plan = [SqlAction(nested), SqlAction(b"SELECT 1"),  # type: ignore[arg-type]
                         AnswerAction(abstain="insufficient_evidence")]

        def act(self, observation: Any) -> Any:
            return self.plan.pop(0)

    two = [t.task_id for t in tasks[:2]]
    s = run_evaluation(bench, synth_db, "test-nested-parens", tmp_path / "nested", k=1, tasks=two,
                       progress=False, env_config={"python": False})
    recs = EpisodeStore(tmp_path / "nested").records()
    assert s.ran == 2 and s.terminations == {"abstained": 2}
    first = recs[0].trajectory["steps"]
    assert "nested too deeply" in first[0]["observation"] and first[1]["observation"].startswith("1")

    import ehrgym.env.episode as episode

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("environment bug")

    monkeypatch.setattr(episode, "_jsonable", broken)  # step() itself fails after running the tool
    s = run_evaluation(bench, synth_db, "test-nested-parens", tmp_path / "broken", k=1, tasks=two,
                       progress=False, env_config={"python": False})
    recs = EpisodeStore(tmp_path / "broken").records()
    assert s.ran == 2 and len(recs) == 2
    assert all("environment error" in (r.error or "") and "environment bug" in (r.error or "") for r in recs)
    assert {r.termination for r in recs} == {"agent_error"}


def test_an_unsafe_python_sandbox_is_labelled_in_run_json_and_every_record(
        bench: Path, synth_db: Path, tasks: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host without OS isolation a run refuses to start unless the unsafe mode is chosen; then
    run.json and every record say so."""
    import ehrgym.env.pyworker as pw
    import ehrgym.eval.runner as runner

    original = pw.PythonWorkerPool.__init__

    def no_isolation(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["os_isolation"] = False   # as on a host without namespaces or Landlock
        original(self, *args, **kwargs)

    monkeypatch.setattr(pw.PythonWorkerPool, "__init__", no_isolation)
    monkeypatch.setattr(runner, "_SANDBOX_CACHE", {})
    one = [tasks[0].task_id]
    with pytest.raises(pw.SandboxUnavailable, match="refuses to start"):
        run_evaluation(bench, synth_db, "oracle", tmp_path / "refused", k=1, tasks=one, progress=False)
    assert not (tmp_path / "refused" / "episodes.jsonl").exists()
    run_evaluation(bench, synth_db, "oracle", tmp_path / "unsafe", k=2, tasks=one, progress=False,
                   env_config={"python_unsafe": True})
    assert read_run_config(tmp_path / "unsafe")["python_sandbox"]["label"] == pw.UNSAFE_LABEL
    recs = EpisodeStore(tmp_path / "unsafe").records()
    assert len(recs) == 2 and all(r.trajectory["python_sandbox"] == pw.UNSAFE_LABEL for r in recs)
    run_evaluation(bench, synth_db, "oracle", tmp_path / "off", k=1, tasks=one, progress=False,
                   env_config={"python": False})
    assert read_run_config(tmp_path / "off")["python_sandbox"] is None
