"""The environment's result cache: reuse only over identical data, never across overlays of the tables read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_env_support import last_creat_task, make_tiny_db, missing_creat_task  # noqa: E402

from ehrgym.db.overlay import Overlay, TableEdit  # noqa: E402
from ehrgym.env.actions import SqlAction  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402
from ehrgym.env.resultcache import ResultCache, edit_digests  # noqa: E402

LABS = "SELECT count(*) FROM labevents WHERE subject_id = 1"
PATIENTS = "SELECT count(*) FROM patients"


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_db(tmp_path_factory.mktemp("cache") / "tiny.duckdb")


def test_reuse_within_one_overlay_and_across_untouched_tables(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(max_steps=10, python=False)) as env:
        env.reset(last_creat_task())
        first = env.step(SqlAction(LABS))
        again = env.step(SqlAction(LABS))
        assert first.info["cached"] is False and again.info["cached"] is True
        assert again.observation.text == first.observation.text and again.observation.rows == first.observation.rows
        pats = env.step(SqlAction(PATIENTS))
        assert pats.info["cached"] is False
        # the noisy twin deletes labevents rows: a labevents query is re-run on its data, a patients query is reused
        env.reset(missing_creat_task())
        noisy = env.step(SqlAction(LABS))
        assert noisy.info["cached"] is False and noisy.observation.rows != first.observation.rows
        assert env.step(SqlAction(PATIENTS)).info["cached"] is True
        # back on the clean data: the clean result is still there
        env.reset(last_creat_task())
        assert env.step(SqlAction(LABS)).observation.rows == first.observation.rows


def test_errors_are_not_cached_and_size_zero_turns_it_off(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(max_steps=10, python=False)) as env:
        env.reset(last_creat_task())
        bad = "SELECT nosuchcolumn FROM labevents"
        assert env.step(SqlAction(bad)).info["error"]
        assert env.step(SqlAction(bad)).info["cached"] is False
    with EhrEnv(tiny_db, EnvConfig(max_steps=10, python=False, result_cache=0)) as env:
        env.reset(last_creat_task())
        env.step(SqlAction(LABS))
        assert env.step(SqlAction(LABS)).info["cached"] is False
        assert env.results.stats()["entries"] == 0


def test_key_depends_on_the_edit_of_each_table_read() -> None:
    cache = ResultCache(size=2)
    a = Overlay((TableEdit("labevents", delete_rowids=(0,)),))
    b = Overlay((TableEdit("labevents", delete_rowids=(1,)),))
    assert edit_digests(a) != edit_digests(b) and edit_digests(Overlay()) == {}
    cache.set_overlay(a)
    ka = cache.key("q", ("labevents", "patients"))
    cache.set_overlay(b)
    assert cache.key("q", ("labevents", "patients")) != ka
    assert cache.key("q", ("patients",)) == ResultCache().key("q", ("patients",))
    cache.set_overlay(Overlay())
    for i in range(3):  # least recently used entries go first
        from ehrgym.env.engine import QueryResult

        cache.put(("k", i), QueryResult(columns=["x"], rows=[(i,)]))
    assert cache.get(("k", 0)) is None and cache.get(("k", 2)).rows == [(2,)]
