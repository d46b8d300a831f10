"""The database-state probe (ehrgym.bench.validity.state): what it computes from a task's overlay is what an agent
reads through the environment with two whole-table queries, and it reaches chance once both twins of a pair are
served the same database state — the remedy it measures the need for."""

from __future__ import annotations

import pytest

from ehrgym.bench.build import build_benchmark
from ehrgym.bench.configs import get_config
from ehrgym.bench.task import load_tasks_jsonl
from ehrgym.bench.validity.state import BAR, OUTCOME_SLACK, served_overlay_state, state_passes, state_validity
from ehrgym.db.overlay import Overlay
from ehrgym.env.actions import SqlAction
from ehrgym.env.episode import EhrEnv, EnvConfig


@pytest.fixture(scope="module")
def bench(synth_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("state") / "bench"
    build_benchmark(synth_db, out, config=get_config("small"), seed=3, progress=False)
    return out


@pytest.fixture(scope="module")
def tasks(bench):
    return load_tasks_jsonl(bench / "tasks.jsonl")


def _fingerprint(env: EhrEnv, table: str) -> tuple[int, str]:
    result = env.step(SqlAction(f"SELECT count(*) AS n, sum(hash({table})) AS h FROM {table}"))
    frame = env.sql_frame(f"SELECT count(*) AS n, sum(hash({table})) AS h FROM {table}")
    assert "error" not in result.observation.text.lower()[:80], result.observation.text
    return int(frame["n"][0]), str(frame["h"][0])


def test_the_probe_reads_what_an_agent_reads_through_the_environment(bench, tasks, synth_db):
    """Per subtype, a noisy task's count change and content change per touched table, as the probe computes them,
    equal what ``count(*)`` and ``sum(hash(t))`` return in its episode against a clean twin's episode."""
    by_subtype = {}
    for t in tasks:
        if t.noise is not None and not t.noise.overlay.is_empty:
            by_subtype.setdefault(t.noise.subtype, t)
    assert len(by_subtype) >= 6, sorted(by_subtype)
    clean = next(t for t in tasks if t.variant == "clean")
    with EhrEnv.from_benchmark(bench, synth_db, EnvConfig(python=False, max_steps=50, result_cache=0)) as env:
        for subtype, task in sorted(by_subtype.items()):
            state = served_overlay_state(task)
            env.reset(clean)
            base = {table: _fingerprint(env, table) for table in state}
            env.reset(task)
            for table, (delta, changed) in state.items():
                n, h = _fingerprint(env, table)
                assert n - base[table][0] == delta, (subtype, table)
                assert (h != base[table][1]) == changed, (subtype, table)
    assert served_overlay_state(clean) == {}


def test_the_probe_reaches_chance_when_both_twins_share_their_database_state(tasks):
    """Served with its noisy twin's overlay (a stand-in for a shared background), no clean twin is told apart."""
    overlay = {t.pair_id: t.noise.overlay for t in tasks if t.noise is not None}
    shared = [t if t.noise is not None else _served(t, overlay[t.pair_id]) for t in tasks]
    report = state_validity(shared)
    assert report["clean_vs_noise"]["accuracy"] <= BAR, report["clean_vs_noise"]
    assert state_passes(report) == (report["answer_vs_abstain"]["accuracy"]
                                    <= report["answer_vs_abstain"]["majority"] + OUTCOME_SLACK)


def test_the_probe_finds_the_served_base(tasks):
    """Today every clean twin is served the base as it is: the probe sees each record- or value-level twin."""
    report = state_validity(tasks)
    assert report["clean_served_as_base"] == 1.0
    for key, row in report["detectable"].items():
        subtype = key.split(":")[0]
        level = next(t.noise.level for t in tasks if t.noise is not None and t.noise.subtype == subtype)
        assert row["by_content"] == (0.0 if level == "query" else 1.0), key


def _served(task, overlay: Overlay):
    """A clean task as the probe reads it, served ``overlay`` (``Task.overlay`` is its noise's)."""
    from types import SimpleNamespace

    return SimpleNamespace(task_id=task.task_id, pair_id=task.pair_id, variant=task.variant, split=task.split,
                           expected=task.expected, overlay=overlay, noise=None)
