"""The database-state probe (ehrgym.bench.validity.state): what it computes from a task's served overlay is what an
agent reads through the environment with two whole-table queries; it reaches chance when both twins of a pair are
served the same database state, and no episode is served the clean database as such (the pair's background)."""

from __future__ import annotations

import pytest

from ehrgym.bench.task import load_tasks_jsonl
from ehrgym.bench.validity.state import BAR, OUTCOME_SLACK, served_overlay_state, state_passes, state_validity
from ehrgym.db.overlay import Overlay
from ehrgym.env.actions import SqlAction
from ehrgym.env.episode import EhrEnv, EnvConfig
from ehrgym.bench.verify import PairVerifier


@pytest.fixture(scope="module")
def bench(small_bench):
    return small_bench  # the run's shared "small" build (tests/conftest.py); read only


@pytest.fixture(scope="module")
def tasks(bench):
    return load_tasks_jsonl(bench / "tasks.jsonl")


FINGERPRINT = "SELECT count(*) AS n, sum(hash({t})) AS h FROM {t}"


def _fingerprint(env: EhrEnv, table: str) -> tuple[int, int]:
    result = env.step(SqlAction(FINGERPRINT.format(t=table)))  # the agent's way: through the gate
    assert "error" not in result.observation.text.lower()[:80], result.observation.text
    frame = env.sql_frame(FINGERPRINT.format(t=table))
    return int(frame["n"][0]), int(frame["h"][0])


def test_the_probe_reads_what_an_agent_reads_through_the_environment(bench, tasks, synth_db):
    """Per subtype, both twins' count change and content change per touched table, as the probe computes them,
    equal what ``count(*)`` and ``sum(hash(t))`` return in their episodes against the clean database."""
    by_subtype = {}
    for t in tasks:
        if t.noise is not None:
            by_subtype.setdefault(t.noise.subtype, t)
    assert len(by_subtype) >= 8, sorted(by_subtype)
    twins = {t.task_id: t for t in tasks}
    verifier = PairVerifier(synth_db)
    try:
        with EhrEnv.from_benchmark(bench, synth_db, EnvConfig(python=False, max_steps=50, result_cache=0)) as env:
            for _, noisy in sorted(by_subtype.items()):
                for task in (noisy, twins[f"{noisy.pair_id}:clean"]):
                    state = served_overlay_state(task)
                    assert state, task.task_id  # every episode is served its pair's background at least
                    env.reset(task)
                    for table, (delta, changed) in state.items():
                        n, h = _fingerprint(env, table)
                        n0, h0 = verifier.clean_con.execute(FINGERPRINT.format(t=table)).fetchone()
                        assert n - n0 == delta, (task.task_id, table)
                        assert (h != h0) == changed, (task.task_id, table)
    finally:
        verifier.close()


def test_the_probe_reaches_chance_when_both_twins_share_their_database_state(tasks):
    """Served with its noisy twin's overlay (a stand-in for a shared background), no clean twin is told apart."""
    overlay = {t.pair_id: t.overlay for t in tasks if t.noise is not None}
    shared = [t if t.noise is not None else _served(t, overlay[t.pair_id]) for t in tasks]
    report = state_validity(shared)
    assert report["clean_vs_noise"]["accuracy"] <= BAR, report["clean_vs_noise"]
    assert state_passes(report) == (report["answer_vs_abstain"]["accuracy"]
                                    <= report["answer_vs_abstain"]["majority"] + OUTCOME_SLACK)


def test_no_episode_is_served_the_clean_database(tasks):
    """Every pair carries a background (ehrgym.bench.background): no clean twin, and no query-level twin, is served
    the base as it is, so a whole-table checksum differs from the clean database's in every episode."""
    report = state_validity(tasks)
    assert report["clean_served_as_base"] == 0.0
    for key, row in report["detectable"].items():
        assert row["by_content"] == 1.0, key


def _served(task, overlay: Overlay):
    """A clean task as the probe reads it, served ``overlay`` (``Task.overlay`` is its noise's)."""
    from types import SimpleNamespace

    return SimpleNamespace(task_id=task.task_id, pair_id=task.pair_id, variant=task.variant, split=task.split,
                           expected=task.expected, overlay=overlay, noise=None)
