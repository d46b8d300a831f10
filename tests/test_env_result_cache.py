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


# ---------------------------------------------------------------------------------------------
# the shared store: results reused across environments and runs, only over the same data, limits and code
def _steps(env: EhrEnv, task: object, *queries: str) -> list[tuple[bool, object]]:
    env.reset(task)
    return [(s.info["cached"], s.observation.rows) for s in (env.step(SqlAction(q)) for q in queries)]


def test_a_shared_store_serves_later_environments_only_over_identical_data(tiny_db: Path, tmp_path: Path) -> None:
    store = tmp_path / "results"
    config = EnvConfig(max_steps=10, python=False)
    with EhrEnv(tiny_db, config) as plain:
        (_, clean_rows), (_, patient_rows) = _steps(plain, last_creat_task(), LABS, PATIENTS)
        noisy_rows = _steps(plain, missing_creat_task(), LABS)[0][1]
    assert clean_rows != noisy_rows
    with EhrEnv(tiny_db, config, result_store=store) as first:
        assert [c for c, _ in _steps(first, last_creat_task(), LABS, PATIENTS)] == [False, False]
    assert len(list(store.glob("*/*.pkl"))) == 1  # one shard, written when the environment closed
    with EhrEnv(tiny_db, config, result_store=store) as second:
        assert _steps(second, last_creat_task(), LABS, PATIENTS) == [(True, clean_rows), (True, patient_rows)]
        # the noisy twin deletes labevents rows: its labevents query is run on its own data, never served the clean one
        noisy = _steps(second, missing_creat_task(), LABS, PATIENTS)
        assert noisy[0] == (False, noisy_rows) and noisy[1][0] is True
    with EhrEnv(tiny_db, config, result_store=store) as third:  # what the second added is there too
        assert _steps(third, missing_creat_task(), LABS) == [(True, noisy_rows)]
    # other query limits are another namespace: nothing written under the first is read
    from ehrgym.env.engine import SqlLimits

    with EhrEnv(tiny_db, EnvConfig(max_steps=10, python=False, sql=SqlLimits(max_rows_shown=3)),
                result_store=store) as other:
        assert _steps(other, last_creat_task(), LABS)[0] == (False, clean_rows)
    assert len([p for p in store.iterdir() if p.is_dir()]) == 2


def test_the_namespace_names_the_database_the_limits_and_the_settings() -> None:
    from ehrgym.env.engine import ConnectionSettings, SqlLimits
    from ehrgym.env.resultcache import shared_namespace

    base = shared_namespace("content:a", SqlLimits(), ConnectionSettings())
    assert base == shared_namespace("content:a", SqlLimits(), ConnectionSettings())
    assert base != shared_namespace("content:b", SqlLimits(), ConnectionSettings())
    assert base != shared_namespace("content:a", SqlLimits(timeout_s=1.5), ConnectionSettings())
    assert base != shared_namespace("content:a", SqlLimits(), ConnectionSettings(threads=2))


def test_a_broken_shard_is_skipped_and_errors_are_never_shared(tmp_path: Path) -> None:
    from ehrgym.env.engine import QueryResult
    from ehrgym.env.resultcache import SharedResults

    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "broken.pkl").write_bytes(b"not a pickle")
    shared = SharedResults(tmp_path, "ns")
    assert len(shared) == 0 and shared.shards == 0
    cache = ResultCache(size=4, shared=shared)
    cache.put(("ok",), QueryResult(columns=["x"], rows=[(1,)]))
    cache.put(("bad",), QueryResult(error="boom", error_kind="database"))
    assert shared.flush() is not None and shared.flush() is None  # nothing new the second time
    again = ResultCache(size=4, shared=SharedResults(tmp_path, "ns"))
    assert again.get(("ok",)).rows == [(1,)] and again.get(("bad",)) is None


def test_with_a_store_the_views_are_re_pointed_only_when_a_query_needs_them(tiny_db: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    from ehrgym.errors import InfrastructureError

    store = tmp_path / "results"
    config = EnvConfig(max_steps=10, python=False)
    with EhrEnv(tiny_db, config, result_store=store) as first:
        _steps(first, missing_creat_task(), LABS)
    with EhrEnv(tiny_db, config, result_store=store) as env:
        sent: list[str] = []
        control = env.conn._control

        def counted(op: str, *args: object) -> object:
            sent.append(op)
            return control(op, *args)

        env.conn._control = counted  # type: ignore[method-assign]
        # every query of this episode is in the store: its overlay is never sent to the query process
        assert _steps(env, missing_creat_task(), LABS)[0][0] is True and "apply" not in sent
        # a query the store does not hold: the views are re-pointed first, and it reads the episode's own data
        env.reset(missing_creat_task())
        noisy = env.step(SqlAction(LABS + " AND valuenum IS NOT NULL"))
        assert sent == ["apply"] and noisy.info["cached"] is False
        assert env.step(SqlAction("SELECT count(*) FROM labevents")).observation.rows != \
            _count_on_clean(tiny_db)
        # an overlay that does not fit the database fails at the query that needs it, as an infrastructure error
        # (the runner retries the episode), and the next episode is served on a fresh connection
        good = missing_creat_task()
        bad = replace(good, noise=replace(good.noise, overlay=Overlay((
            TableEdit("labevents", insert_rows=({"valuenum": float("inf")},)),))))
        env.reset(bad)
        with pytest.raises(InfrastructureError):
            env.step(SqlAction("SELECT count(*) FROM labevents WHERE valuenum > 0"))
        env.reset(last_creat_task())
        assert env.step(SqlAction("SELECT count(*) FROM labevents")).observation.rows == _count_on_clean(tiny_db)


def _count_on_clean(db: Path) -> object:
    with EhrEnv(db, EnvConfig(max_steps=10, python=False)) as env:
        env.reset(last_creat_task())
        return env.step(SqlAction("SELECT count(*) FROM labevents")).observation.rows
