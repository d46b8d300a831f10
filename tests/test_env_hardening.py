"""Red-team tests of the episode environment, one class of leak at a time (issue 12):
memory, time, writes, state, crashes and the Python sandbox's fallback.

Limits are set small here (a 300 MB query process, 1 s queries) so each attack costs about a second.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_env_support import implausible_task, last_creat_task, make_tiny_db, missing_creat_task  # noqa: E402

from ehrgym.env.actions import AnswerAction, PythonAction, SqlAction  # noqa: E402
from ehrgym.env.engine import ConnectionSettings, EpisodeConnection, SqlLimits, Watchdog  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402
from ehrgym.errors import EnvironmentStateError  # noqa: E402

NESTED = "SELECT " + "(" * 600 + "1" + ")" * 600
PROCESS_MB = 300
SETTINGS = ConnectionSettings(process_memory_mb=PROCESS_MB, kill_grace_s=0.5)
LIMITS = SqlLimits(timeout_s=1.0, max_frame_bytes=1 << 20)


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_db(tmp_path_factory.mktemp("hardening") / "tiny.duckdb")


@pytest.fixture(scope="module")
def env(tiny_db: Path) -> Iterator[EhrEnv]:
    with EhrEnv(tiny_db, EnvConfig(max_steps=10_000, python=False, sql=LIMITS, connection=SETTINGS)) as e:
        yield e


@pytest.fixture(scope="module")
def mem_env(tiny_db: Path) -> Iterator[EhrEnv]:
    """A generous time limit, so that the memory cap is what stops the memory bombs."""
    cfg = EnvConfig(max_steps=10_000, python=False, sql=SqlLimits(timeout_s=20.0), connection=SETTINGS)
    with EhrEnv(tiny_db, cfg) as e:
        yield e


@pytest.fixture(scope="module")
def frame_env(tiny_db: Path) -> Iterator[EhrEnv]:
    """The byte caps of ``LIMITS`` with a generous time limit: on a loaded machine a 4-24 MB result can take
    longer than 1 s, and the time limit would then answer instead of the cap under test."""
    cfg = EnvConfig(max_steps=10_000, python=False, sql=SqlLimits(timeout_s=20.0, max_frame_bytes=LIMITS.max_frame_bytes),
                    connection=SETTINGS)
    with EhrEnv(tiny_db, cfg) as e:
        yield e


def sql(env: EhrEnv, query: str) -> Any:
    return env.step(SqlAction(query))


# --------------------------------------------------------------------------------------------- memory
@pytest.mark.parametrize("query", [
    "SELECT length(repeat('x', 2000000000))",              # one huge string, outside DuckDB's buffer pool
    "SELECT list_sum(range(250000000))",                   # one huge list
    "SELECT repeat('x', 8000000) AS s FROM range(400)",    # a huge result, fetched
], ids=["repeat", "list", "result"])
def test_memory_bombs_are_stopped_and_the_env_process_stays_small(mem_env: EhrEnv, query: str) -> None:
    env = mem_env
    env.reset(last_creat_task())
    before = _rss_mb()
    t0 = time.monotonic()
    r = sql(env, query)
    assert r.info["error_kind"] == "memory", r.observation.text
    assert f"more than {PROCESS_MB} MB" in r.observation.text
    assert time.monotonic() - t0 < 20
    assert _rss_mb() - before < 100, "the environment process itself grew"
    assert not r.done and sql(env, "SELECT count(*) FROM patients").observation.rows == [(3,)]  # a fresh child


def test_python_sql_results_are_capped_in_bytes_not_only_rows(frame_env: EhrEnv) -> None:
    env = frame_env
    env.reset(last_creat_task())
    with pytest.raises(RuntimeError, match="more than 1 MB"):
        env.sql_frame("SELECT repeat('x', 100000) AS s FROM range(40)")   # 40 rows, 4 MB
    assert len(env.sql_frame("SELECT repeat('x', 1000) AS s FROM range(40)")) == 40


def test_preview_cells_are_cut_before_they_travel(frame_env: EhrEnv) -> None:
    env = frame_env
    env.reset(last_creat_task())
    r = sql(env, "SELECT repeat('x', 400000) AS s FROM range(60)")  # 24 MB: well under the process cap
    assert r.observation.row_count == 60 and len(r.observation.rows) == 50
    assert max(len(row[0]) for row in r.observation.rows) <= LIMITS.max_preview_bytes // 50
    assert len(r.observation.text) < 20_000


# --------------------------------------------------------------------------------------------- time
def test_one_long_scalar_call_is_killed_at_the_time_limit(env: EhrEnv) -> None:
    """DuckDB checks interrupts between vectors; this single call would run ~10 s."""
    env.reset(last_creat_task())
    t0 = time.monotonic()
    r = sql(env, "SELECT levenshtein(repeat('a', 50000), repeat('b', 50000))")
    took = time.monotonic() - t0
    assert r.info["error_kind"] == "timeout", r.observation.text
    assert "time limit of 1 s" in r.observation.text
    assert took < LIMITS.timeout_s + SETTINGS.kill_grace_s + 2.0
    assert sql(env, "SELECT count(*) FROM admissions").observation.rows == [(3,)]


def test_an_ordinary_long_query_is_interrupted_without_a_kill(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    restarts = env.conn.restarts
    r = sql(env, "SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3")
    assert r.info["error_kind"] == "timeout"
    assert env.conn.restarts == restarts and env.conn.last_kill in (None, "memory", "timeout", "crashed")
    assert sql(env, "SELECT 1 AS one").observation.rows == [(1,)]


# --------------------------------------------------------------------------------------------- writes
def test_queries_never_spill_into_the_working_directory(tiny_db: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    root_tmp = Path("/.tmp").exists()
    conn = EpisodeConnection(tiny_db, ConnectionSettings(isolation="inprocess", memory_limit="20MB"))
    try:
        assert conn.raw("SELECT current_setting('temp_directory')") == [("",)]
        r = conn.run("SELECT range, random() AS r FROM range(3000000) ORDER BY r", LIMITS, Watchdog())
        assert r.error_kind in (None, "memory", "timeout")
    finally:
        conn.close()
    assert list(tmp_path.iterdir()) == [], "files appeared in the working directory"
    assert Path("/.tmp").exists() == root_tmp


def test_spilling_when_enabled_stays_in_a_private_capped_scratch(tiny_db: Path) -> None:
    conn = EpisodeConnection(tiny_db, ConnectionSettings(isolation="inprocess", temp_mb=64))
    try:
        scratch = conn.raw("SELECT current_setting('temp_directory'), current_setting('max_temp_directory_size')")[0]
        assert Path(scratch[0]).name.startswith("ehrgym-spill-") and Path(scratch[0]).parent != Path.cwd()
        assert scratch[1].replace(" ", "").upper().startswith(("64.0MIB", "64MB", "61.0MIB"))
    finally:
        conn.close()
    assert not Path(scratch[0]).exists()


def test_the_query_process_runs_outside_the_repository(env: EhrEnv) -> None:
    pid = env.conn.pid
    assert pid is not None and os.readlink(f"/proc/{pid}/cwd") == "/"


# --------------------------------------------------------------------------------------------- state
HOSTILE = [
    "SELECT * FROM (PIVOT admissions ON admission_type USING count(*) GROUP BY subject_id)",
    "SELECT * FROM (PIVOT labevents ON valueuom USING max(valuenum))",
    "WITH p AS (PIVOT admissions ON admission_type USING count(*)) SELECT * FROM p",
    "SELECT * FROM (UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v)",
]


@pytest.mark.parametrize("isolation", ["process", "inprocess"])
def test_hostile_episodes_leave_no_state_behind(tiny_db: Path, isolation: str) -> None:
    cfg = EnvConfig(max_steps=100, python=False, sql=LIMITS,
                    connection=ConnectionSettings(isolation=isolation, process_memory_mb=PROCESS_MB))
    with EhrEnv(tiny_db, cfg) as env:
        env.reset(last_creat_task())
        before = env.conn.catalog()
        for query in HOSTILE:
            sql(env, query)
        during = env.conn.catalog()
        assert during["types"] != before["types"], "PIVOT no longer writes the catalog: this test lost its bite"
        env.reset(missing_creat_task())
        assert env.conn.catalog() == before
        env.step("ANSWER: 1")
        env.reset(implausible_task())
        assert env.conn.catalog() == before


# --------------------------------------------------------------------------------------------- crashes
@pytest.mark.parametrize("action", [
    NESTED, SqlAction(NESTED), {"tool": "sql", "query": NESTED}, "PYTHON: " + "(" * 600,
    "answer(" + "(" * 600 + "1" + ")" * 600 + ")", SqlAction(b"\xff\xfe"), SqlAction(42),  # type: ignore[arg-type]
    PythonAction(None), AnswerAction(abstain=["x"]), AnswerAction(explanation=3),  # type: ignore[arg-type]
    {"tool": "answer", "abstain": {"a": 1}}, b"SQL: SELECT 1", 3.5, None, object(),
], ids=lambda a: type(a).__name__)
def test_no_agent_input_escapes_step(env: EhrEnv, action: Any) -> None:
    env.reset(last_creat_task())
    r = env.step(action)
    assert isinstance(r.observation.text, str) and r.observation.text
    assert env.trajectory is not None and env.trajectory.steps[-1].observation == r.observation.text


def test_nested_parentheses_are_refused_with_a_reason(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = sql(env, NESTED)
    assert r.info["error_kind"] == "gate" and "nested too deeply" in r.observation.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(
    st.text(max_size=300),
    st.binary(max_size=100),
    st.builds(SqlAction, st.one_of(st.text(max_size=200), st.binary(max_size=50), st.integers())),
    st.builds(AnswerAction, st.one_of(st.none(), st.integers(), st.text(max_size=20)),
              st.one_of(st.none(), st.text(max_size=30), st.integers())),
    st.dictionaries(st.sampled_from(["tool", "query", "code", "answer", "abstain", "name", "arguments"]),
                    st.one_of(st.text(max_size=40), st.integers(), st.none(), st.lists(st.integers(), max_size=3)),
                    max_size=4),
    st.sampled_from([NESTED, "SELECT " + "-" * 5000 + "1", "SELECT '" + "'" * 999, "sql(" * 300,
                     "SELECT * FROM labevents" + " UNION ALL SELECT * FROM labevents" * 200]),
))
def test_random_and_adversarial_actions_never_raise(env: EhrEnv, action: Any) -> None:
    if env.done or env.task is None or env.steps > 9000:
        env.reset(last_creat_task())
    r = env.step(action)
    assert isinstance(r.observation.text, str)


def test_step_after_close_is_a_clear_state_error(tiny_db: Path) -> None:
    env = EhrEnv(tiny_db, EnvConfig(python=False, connection=ConnectionSettings(isolation="inprocess")))
    env.reset(last_creat_task())
    env.close()
    with pytest.raises(EnvironmentStateError, match="closed"):
        env.step(SqlAction("SELECT 1"))


def test_bytes_queries_are_decoded_or_refused_with_the_reason(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    query = b"SELECT count(*) AS n FROM patients"
    assert env.step(SqlAction(query)).observation.rows == [(3,)]  # type: ignore[arg-type]
    r = env.step(SqlAction(b"SELECT '\xff'"))  # type: ignore[arg-type]
    assert r.info["tool"] == "invalid" and "not UTF-8" in r.observation.text
    assert "empty" not in r.observation.text


def test_an_abstention_reason_outside_the_vocabulary_is_refused(env: EhrEnv) -> None:
    env.reset(missing_creat_task())
    r = env.step(AnswerAction(abstain="because"))
    assert not r.done and r.info["tool"] == "invalid"
    assert "insufficient_evidence" in r.observation.text and "'because'" in r.observation.text
    r = env.step("ABSTAIN: because I said so")
    assert not r.done and r.info["tool"] == "invalid"
    r = env.step(AnswerAction(abstain="insufficient_evidence", explanation="no creatinine"))
    assert r.done and r.reward == 1.0


def test_an_abstention_naming_several_reasons_is_refused_until_it_names_one(env: EhrEnv) -> None:
    env.reset(missing_creat_task())
    for hedge in ("ABSTAIN: insufficient evidence or conflicting records", '{"abstain": "missing data / out of scope"}'):
        r = env.step(hedge)
        assert not r.done and r.info["tool"] == "invalid" and "insufficient_evidence" in r.observation.text
    r = env.step("ABSTAIN: insufficient evidence: no creatinine, nothing conflicts")
    assert r.done and r.reward == 1.0


def test_a_typo_gets_a_syntax_error_with_its_position(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    text = sql(env, "SELEC * FRM x").observation.text
    assert "syntax error" in text and "line 1, column 1" in text and "ALIAS" not in text
    text = sql(env, "SELECT *\nFROM labevents WHERE").observation.text
    assert "line 2" in text


def test_the_text_protocol_reads_calls_as_the_tool_help_shows_them(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    assert "answer(value" in env.reset(last_creat_task()).text
    r = env.step('sql("SELECT count(*) AS n FROM admissions")')
    assert r.observation.rows == [(3,)]
    r = env.step("answer(1.4)")
    assert r.done and env.trajectory is not None and env.trajectory.steps[-1].action["value"] == 1.4


# --------------------------------------------------------------------------------------------- fallback
@pytest.fixture()
def no_os_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every PythonWorkerPool behaves as on a host without namespaces or Landlock."""
    import ehrgym.env.pyworker as pw
    import ehrgym.eval.runner as runner

    original = pw.PythonWorkerPool.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["os_isolation"] = False
        original(self, *args, **kwargs)

    monkeypatch.setattr(pw.PythonWorkerPool, "__init__", init)
    monkeypatch.setattr(runner, "_SANDBOX_CACHE", {})


def test_the_python_tool_fails_closed_without_os_isolation(no_os_isolation: None) -> None:
    from ehrgym.env.pyworker import PythonWorkerPool, SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="(?s)mount_ns.*landlock.*python_unsafe"):
        PythonWorkerPool(warm=0)
    with PythonWorkerPool(warm=0, allow_unisolated=True) as pool:
        assert pool.unsafe and pool.sandbox == ("rlimits", "audit_hook")


def test_an_episode_without_isolation_gets_a_refusal_not_a_weak_sandbox(tiny_db: Path, no_os_isolation: None) -> None:
    with EhrEnv(tiny_db, EnvConfig(connection=ConnectionSettings(isolation="inprocess"))) as env:
        env.reset(last_creat_task())
        r = env.step(PythonAction("print(open('/etc/hostname').read())"))
        assert "refuses to start" in r.observation.text and r.info["error"]
        import ehrgym.env.pyworker as pw

        probes: list[int] = []
        probe = pw.PythonWorkerPool.__init__

        def counting(self: Any, *args: Any, **kwargs: Any) -> None:
            probes.append(1)
            probe(self, *args, **kwargs)

        pw.PythonWorkerPool.__init__ = counting  # type: ignore[method-assign]
        try:
            assert "refuses to start" in env.step(PythonAction("print(1)")).observation.text
        finally:
            pw.PythonWorkerPool.__init__ = probe  # type: ignore[method-assign]
        assert probes == [], "the refusal is remembered, not probed again"


def test_a_run_refuses_to_start_unless_unsafe_is_chosen_and_then_says_so(no_os_isolation: None) -> None:
    from ehrgym.env.pyworker import UNSAFE_LABEL, SandboxUnavailable
    from ehrgym.eval.runner import python_sandbox

    with pytest.raises(SandboxUnavailable):
        python_sandbox({})
    assert python_sandbox({"python": False}) is None
    assert python_sandbox({"python_unsafe": True}) == {"layers": ["rlimits", "audit_hook"], "unsafe": True,
                                                       "label": UNSAFE_LABEL}


def test_a_python_crash_is_reported_once_and_not_as_a_limit(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(connection=ConnectionSettings(isolation="inprocess"))) as env:
        env.reset(last_creat_task())
        text = env.step(PythonAction("import os\nos._exit(3)")).observation.text
        assert text.count("crashed") == 1 and "limit" not in text and text.count("stopped") == 1
        text = env.step(PythonAction("x = bytearray(50 * 1024 ** 3)")).observation.text
        assert text.count("memory limit exceeded") == 1 and text.count("stopped") == 1
        assert env.step(PythonAction("print(2 + 2)")).observation.text == "4"
