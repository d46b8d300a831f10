"""The python tool inside episodes: state, the gated sql() door, kills reported, env keeps serving."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_env_support import SECRET, last_creat_task, make_tiny_db, missing_creat_task  # noqa: E402

from ehrgym.env.actions import PythonAction  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402

pyworker = pytest.importorskip("ehrgym.env.pyworker")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    db = make_tiny_db(tmp_path_factory.mktemp("py") / "tiny.duckdb")
    limits = pyworker.PythonLimits(cpu_seconds=1.0, wall_seconds=3.0)
    with EhrEnv(db, EnvConfig(max_steps=100, python_limits=limits)) as e:
        yield e


def run(env: EhrEnv, code: str):
    return env.step(PythonAction(code))


def test_state_persists_and_sql_goes_through_the_episode_views(env: EhrEnv) -> None:
    env.reset(missing_creat_task())
    assert run(env, "print(1)").observation.text.strip() == "1"
    r = run(env, "df = sql('SELECT subject_id, valuenum FROM labevents ORDER BY subject_id')\nprint(len(df))")
    assert r.observation.text.strip() == "2" and r.info["sql_calls"] == 1  # the overlay hid patient 1's rows
    r = run(env, "print(round(df.valuenum.mean(), 2), type(df).__name__)")
    assert r.observation.text.strip() == "1.45 DataFrame"


def test_sql_refusals_reach_the_agent_as_errors(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = run(env, "sql('SELECT * FROM base.ehrgym_meta.build_info')")
    assert "Query refused" in r.observation.text and SECRET not in r.observation.text and not r.done
    r = run(env, "try:\n    sql('SELECT nosuchcol FROM labevents')\nexcept Exception as e:\n    print('caught', e)")
    assert "caught" in r.observation.text and "nosuchcol" in r.observation.text


def test_the_worker_cannot_read_the_database_file(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = run(env, f"print(open({str(env.db_path)!r}, 'rb').read()[:100])")
    assert r.observation.error and SECRET not in r.observation.text


def test_a_killed_worker_is_reported_and_replaced(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    run(env, "x = 41")
    r = run(env, "while True:\n    pass")
    assert r.info["killed"] in ("cpu_time", "wall_time") and "stopped" in r.observation.text and not r.done
    r = run(env, "print('x' in globals(), 1 + 1)")
    assert r.observation.text.strip() == "False 2"  # a fresh worker, state lost


def test_reset_gives_a_fresh_worker(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    run(env, "y = 5")
    env.reset(last_creat_task())
    assert run(env, "print('y' in globals())").observation.text.strip() == "False"


def test_a_huge_allocation_is_contained(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = run(env, "x = bytearray(10 * 1024 ** 3)\nprint(len(x))")
    assert r.observation.error and not r.done
    assert "MemoryError" in r.observation.text or r.info["killed"] == "memory"
    assert run(env, "print(2 + 2)").observation.text.strip() == "4"


def test_sql_replies_come_in_whole_quanta(tmp_path) -> None:
    """PythonLimits.sql_time_quantum_ms: a cell timing its sql() calls reads whole quanta (0: the query's own time)."""
    db = make_tiny_db(tmp_path / "q.duckdb")
    code = ("import time\nts = []\nfor _ in range(4):\n    s = time.perf_counter()\n    sql('SELECT count(*) FROM "
            "labevents')\n    ts.append((time.perf_counter() - s) * 1000)\nprint(*ts)")
    for quantum in (40.0, 0.0):
        limits = pyworker.PythonLimits(cpu_seconds=1.0, wall_seconds=5.0, sql_time_quantum_ms=quantum)
        with EhrEnv(db, EnvConfig(max_steps=10, python_limits=limits)) as env:
            env.reset(last_creat_task())
            times = [float(x) for x in run(env, code).observation.text.split()]
        if quantum:  # each call a whole number of quanta (the first, in a fresh worker, may take several)
            assert all(t >= quantum * 0.98 and (t + 0.02 * quantum) % quantum < 0.4 * quantum for t in times), times
        else:
            assert min(times) < 20, times
    with pytest.raises(ValueError, match="sql_time_quantum_ms"):
        pyworker.PythonLimits(sql_time_quantum_ms=-1)
