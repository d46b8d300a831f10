"""The Python tool's worker: notebook semantics, the sql() door, resource limits, pool resilience."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import duckdb
import numpy as np
import pandas as pd
import pytest

from ehrgym.env.pyworker import KILL_REASONS, PythonLimits, PythonResult, PythonWorkerPool, kill_message
from ehrgym.errors import EnvironmentStateError, GateRejection

# A generous wall limit keeps CPU-bound tests robust on a loaded machine; wall-time tests use
# their own pool with a short wall limit.
LIMITS = PythonLimits(cpu_seconds=1.5, wall_seconds=20.0, memory_mb=512, output_chars=2000, flood_chars=100_000)
WALL_LIMITS = PythonLimits(cpu_seconds=1.0, wall_seconds=1.0, memory_mb=512)


def no_sql(query: str) -> pd.DataFrame:
    raise AssertionError(f"unexpected sql() call: {query}")


@pytest.fixture(scope="module")
def pool() -> Iterator[PythonWorkerPool]:
    with PythonWorkerPool(LIMITS, warm=1) as p:
        yield p


@pytest.fixture(scope="module")
def wall_pool() -> Iterator[PythonWorkerPool]:
    with PythonWorkerPool(WALL_LIMITS, warm=1) as p:
        yield p


@pytest.fixture()
def worker(pool: PythonWorkerPool):  # noqa: ANN201
    w = pool.acquire()
    yield w
    w.close()


def assert_pool_serves(pool: PythonWorkerPool) -> None:
    w = pool.acquire()
    try:
        r = w.run("print(pd.DataFrame({'a': [1, 2]}).a.sum())", no_sql)
        assert r.ok and r.output == "3\n", r
    finally:
        w.close()


# ---------------------------------------------------------------- notebook semantics


def test_state_persists_across_runs(worker) -> None:  # noqa: ANN001
    assert worker.run("x = 40\nimport statistics\ndef inc(v):\n    return v + 1", no_sql).ok
    r = worker.run("print(inc(x))\nstatistics.mean([x, 44])", no_sql)
    assert r.ok, r
    assert r.output == "41\n42\n"
    assert worker.run("_ * 2", no_sql).output == "84\n"  # last displayed value is kept as _


def test_pandas_numpy_preimported_and_final_expression_is_shown(worker) -> None:  # noqa: ANN001
    r = worker.run("df = pd.DataFrame({'v': np.arange(3)})\ndf", no_sql)
    assert r.ok
    assert r.output == repr(pd.DataFrame({"v": [0, 1, 2]})) + "\n"
    assert worker.run("y = 5", no_sql).output == ""            # statements show nothing
    assert worker.run("y + 1;", no_sql).output == ""           # trailing ';' suppresses display
    assert worker.run("None", no_sql).output == ""


def test_error_is_a_short_traceback_of_user_code_only(worker) -> None:  # noqa: ANN001
    r = worker.run("a = 1\nb = {}\nb['missing']", no_sql)
    assert r.killed is None and r.output == ""
    assert r.error.startswith("Traceback (most recent call last):\n")
    assert 'File "<cell' in r.error and "line 3" in r.error and "b['missing']" in r.error
    assert r.error.rstrip().endswith("KeyError: 'missing'")
    assert "pyworker" not in r.error and "site-packages" not in r.error
    # an error deep inside pandas still shows only the user's frame and the exception
    r = worker.run("pd.DataFrame({'a': [1]})['zz']", no_sql)
    assert "site-packages" not in r.error and r.error.rstrip().endswith("KeyError: 'zz'")
    assert worker.run("a + 1", no_sql).output == "2\n"  # state survives an error


def test_display_and_unsendable_results(worker) -> None:  # noqa: ANN001
    r = worker.run("display(pd.Series([1, 2], name='n'), 'x')", no_sql)
    assert r.output == repr(pd.Series([1, 2], name="n")) + "\n'x'\n"
    r = worker.run("sql('SELECT 1')", lambda q: pd.DataFrame({"f": [lambda: 1]}))
    assert "cannot be sent to Python" in r.error and worker.alive


def test_syntax_error_and_stdout_stderr_capture(worker) -> None:  # noqa: ANN001
    r = worker.run("def f(:\n  pass", no_sql)
    assert "SyntaxError" in r.error and "<cell" in r.error
    r = worker.run("import sys\nprint('out')\nprint('err', file=sys.stderr)", no_sql)
    assert r.output == "out\nerr\n"


def test_common_analysis_works(worker) -> None:  # noqa: ANN001
    code = (
        "df = pd.DataFrame({'s': ['a', 'b', 'a', 'c'], 'v': [1.0, 2.0, 3.0, np.nan],"
        " 't': pd.to_datetime(['2150-01-01 00:00', '2150-01-02 00:00', '2150-03-01 10:00', '2150-04-01 00:00'])})\n"
        "g = df.groupby('s').v.agg(['mean', 'count'])\n"
        "d = df.describe(include='all').to_string()\n"
        "m = df.t.dt.month.tolist()\n"
        "u = df.s.str.upper().str.contains('A').sum()\n"
        "q = float(np.nanpercentile(df.v, 50))\n"
        "span = (df.t.max() - df.t.min()).days\n"
        "import scipy.stats as st\n"
        "p = round(float(st.norm.cdf(0)), 3)\n"
        "(g.loc['a', 'mean'], m, int(u), q, span, p, len(d) > 0)"
    )
    r = worker.run(code, no_sql)
    assert r.ok, r.error
    assert r.output.strip() == f"({np.float64(2.0)!r}, [1, 1, 3, 4], 2, 2.0, 90, 0.5, True)"


def test_workers_are_fresh_and_independent(pool: PythonWorkerPool) -> None:
    a, b = pool.acquire(), pool.acquire()
    try:
        assert a.pid != b.pid
        a.run("secret = 1", no_sql)
        r = b.run("secret", no_sql)
        assert "NameError" in r.error
    finally:
        a.close()
        b.close()


def test_acquire_hands_out_a_pre_forked_worker(pool: PythonWorkerPool) -> None:
    """Warm acquire forks nothing on demand: the worker it hands out was requested in advance,
    and acquire only asks the fork server for the next one. (How fast that is belongs to
    benchmarks/bench_env.py, not to a timed test on a shared machine.)"""
    pool.acquire().close()
    assert len(pool._ready) + pool._pending == pool.warm   # the replacement is already on its way
    sends: list[bytes] = []
    zygote = pool._zygote
    real_send = zygote.send

    def counting(message: bytes) -> None:
        sends.append(message)
        real_send(message)

    zygote.send = counting  # type: ignore[method-assign]
    try:
        w = pool.acquire()
    finally:
        zygote.send = real_send  # type: ignore[method-assign]
    try:
        assert w.alive and sends == [b"F"] * pool.warm   # only the top-up; an on-demand fork adds one
    finally:
        w.close()


# ---------------------------------------------------------------- the sql() door


def test_sql_is_proxied_to_the_callback(worker) -> None:  # noqa: ANN001
    seen: list[str] = []

    def fake(query: str) -> pd.DataFrame:
        seen.append(query)
        return pd.DataFrame({"subject_id": [1, 2], "label": ["Glucose", "Sodium"]})

    r = worker.run("df = sql('SELECT subject_id, label FROM labevents')\nprint(df.label.tolist(), df.subject_id.sum())", fake)
    assert r.ok, r.error
    assert r.output == "['Glucose', 'Sodium'] 3\n"
    assert seen == ["SELECT subject_id, label FROM labevents"]
    assert r.sql_calls == 1


def test_sql_errors_are_raised_in_the_worker_as_sqlerror(worker) -> None:  # noqa: ANN001
    def gate(query: str) -> pd.DataFrame:
        raise GateRejection("only SELECT queries are allowed; got DROP")

    r = worker.run("sql('DROP TABLE patients')", gate)
    assert r.killed is None
    assert r.error.rstrip().endswith("SQLError: only SELECT queries are allowed; got DROP")
    code = "try:\n    sql('DROP TABLE x')\nexcept SQLError as e:\n    print('caught:', e)"
    assert worker.run(code, gate).output == "caught: only SELECT queries are allowed; got DROP\n"


def test_sql_with_real_duckdb_frames(worker, tmp_path) -> None:  # noqa: ANN001
    db = tmp_path / "episode.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE lab AS SELECT range AS id, 'item' || range::VARCHAR AS label, "
                    "TIMESTAMP '2150-01-01' + INTERVAL (range) HOUR AS charttime, range * 1.5 AS value FROM range(1000)")
    con = duckdb.connect(str(db), read_only=True)
    try:
        r = worker.run("df = sql('SELECT * FROM lab')\n"
                       "(len(df), df.label.iloc[3], str(df.charttime.max()), df.value.sum())",
                       lambda q: con.execute(q).df())
    finally:
        con.close()
    assert r.ok, r.error
    assert r.output.strip() == f"(1000, 'item3', '2150-02-11 15:00:00', {np.float64(749250.0)!r})"


# ---------------------------------------------------------------- limits


def test_infinite_loop_is_killed_on_cpu_time(pool: PythonWorkerPool) -> None:
    w = pool.acquire()
    r = w.run("x = 1\nwhile True:\n    x += 1", no_sql)
    assert r.killed == "cpu_time"
    assert "CPU time limit" in r.error
    assert r.seconds >= LIMITS.cpu_seconds * 0.95  # (upper bounds are timings: benchmarks/, not tests)
    assert not w.alive
    with pytest.raises(EnvironmentStateError, match="acquire a new one"):
        w.run("1", no_sql)
    assert_pool_serves(pool)


def test_blocking_step_is_killed_on_wall_time(wall_pool: PythonWorkerPool) -> None:
    w = wall_pool.acquire()
    r = w.run("import time\ntime.sleep(60)", no_sql)
    assert r.killed == "wall_time" and not w.alive
    assert r.seconds >= WALL_LIMITS.wall_seconds
    assert_pool_serves(wall_pool)


def test_slow_sql_callback_counts_against_wall_time(wall_pool: PythonWorkerPool) -> None:
    w = wall_pool.acquire()

    def slow(query: str) -> pd.DataFrame:
        time.sleep(WALL_LIMITS.wall_seconds + 0.2)
        return pd.DataFrame({"a": [1]})

    r = w.run("sql('SELECT 1')", slow)
    assert r.killed == "wall_time"
    assert_pool_serves(wall_pool)


@pytest.mark.parametrize("code", [
    "a = np.ones(10 * 2**30 // 8)",          # 10 GB numpy array
    "b = bytearray(10 * 2**30)",              # 10 GB bytes
    "c = [0] * (10**10 // 8)",               # 10 GB list
])
def test_ten_gigabyte_allocation_is_contained(pool: PythonWorkerPool, code: str) -> None:
    w = pool.acquire()
    r = w.run(code, no_sql)
    assert r.killed == "memory", r
    assert "memory limit" in r.error
    assert_pool_serves(pool)


def test_caught_memory_error_keeps_the_worker(worker) -> None:  # noqa: ANN001
    r = worker.run("try:\n    a = np.ones(10 * 2**30 // 8)\nexcept MemoryError:\n    print('too big')", no_sql)
    assert r.ok and r.output == "too big\n" and worker.alive


@pytest.mark.parametrize("code", [
    "import os\nwhile True:\n    os.fork()",
    "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])",
    "import os\nos.system('sleep 100 &')",
    "import os\nos.execv('/bin/sh', ['sh'])",
    "import pty\npty.spawn('/bin/sh')",
    "import multiprocessing as mp\nmp.Process(target=print).start()",
])
def test_process_creation_is_contained(pool: PythonWorkerPool, code: str) -> None:
    w = pool.acquire()
    r = w.run(code, no_sql)
    assert r.killed == "processes", r
    assert "not allowed" in r.error
    assert_pool_serves(pool)


def test_fork_bomb_is_contained_even_if_the_violation_is_swallowed(pool: PythonWorkerPool) -> None:
    w = pool.acquire()
    code = ("import os\nn = 0\nfor _ in range(200):\n    try:\n        os.fork(); n += 1\n"
            "    except BaseException:\n        pass\nprint('forks', n)")
    r = w.run(code, no_sql)
    assert r.ok and r.output == "forks 0\n"
    w.close()
    assert_pool_serves(pool)


def test_output_is_truncated_with_a_notice(worker) -> None:  # noqa: ANN001
    r = worker.run("print('x' * 5000)", no_sql)
    assert r.truncated and r.killed is None
    assert r.output.startswith("x" * LIMITS.output_chars)
    assert "[output truncated: showing the first 2000 of 5001 characters]" in r.output
    assert worker.run("list(range(100000))", no_sql).truncated  # a huge repr is truncated, not fatal
    assert worker.alive


def test_output_flood_kills(pool: PythonWorkerPool) -> None:
    w = pool.acquire()
    r = w.run("while True:\n    print('flood' * 20)", no_sql)
    assert r.killed == "output_size" and r.truncated
    assert len(r.output) < LIMITS.output_chars + 200
    assert_pool_serves(pool)


def test_crash_is_reported_and_pool_serves(pool: PythonWorkerPool) -> None:
    for code in ("import os\nos._exit(3)", "import faulthandler\nfaulthandler._sigsegv()"):
        w = pool.acquire()
        r = w.run(code, no_sql)
        assert r.killed == "crashed", r
        assert_pool_serves(pool)


def test_forged_protocol_frames_kill_the_worker(pool: PythonWorkerPool) -> None:
    w = pool.acquire()
    code = ("import os, struct\nfor fd in range(3, 12):\n    try:\n"
            "        os.write(fd, struct.pack('!cI', b'Z', 5) + b'hello')\n    except OSError:\n        pass\n"
            "import time\ntime.sleep(30)")
    r = w.run(code, no_sql)
    assert r.killed == "crashed" and not w.alive
    assert_pool_serves(pool)


# ---------------------------------------------------------------- pool


def test_pool_lifecycle_restart_determinism_and_close(pool: PythonWorkerPool) -> None:
    code = "print(hash('subject_id'), list({'glucose', 'sodium', 'potassium', 'lactate'}))"

    def output(p: PythonWorkerPool) -> str:
        w = p.acquire()
        try:
            return w.run(code, no_sql).output
        finally:
            w.close()

    reference = output(pool)
    p = PythonWorkerPool(LIMITS, warm=0)
    try:
        assert output(p) == reference  # same hash seed and set order in every fork server
        os.kill(p._zygote.proc.pid, 9)  # the fork server dies: the next acquire restarts it
        p._zygote.proc.wait(5)
        assert output(p) == reference
        w = p.acquire()
        pid = w.pid
    finally:
        p.close()
    with pytest.raises(EnvironmentStateError, match="closed"):
        p.acquire()
    assert _state(pid) in "ZX"  # closing the pool stopped its workers
    r = w.run("1", no_sql)
    assert r.killed == "crashed" and not w.alive


def test_concurrent_workers_from_threads(pool: PythonWorkerPool) -> None:
    results: list[PythonResult] = []

    def episode(i: int) -> None:
        w = pool.acquire()
        try:
            w.run(f"v = {i}", no_sql)
            results.append(w.run("v * 10", no_sql))
        finally:
            w.close()

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.output for r in results) == ["0\n", "10\n", "20\n", "30\n"]


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def test_limits_are_validated_and_messages_cover_every_reason() -> None:
    with pytest.raises(ValueError, match="cpu_seconds"):
        PythonLimits(cpu_seconds=0)
    with pytest.raises(ValueError, match="flood_chars"):
        PythonLimits(output_chars=100, flood_chars=10)
    for reason in KILL_REASONS:
        assert "stopped" in kill_message(reason, LIMITS)
