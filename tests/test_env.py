"""Episodes: observations, overlays, limits, step limit, errors, concurrency, trajectories."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_env_support import SECRET, implausible_task, last_creat_task, make_tiny_db, missing_creat_task  # noqa: E402

from ehrgym.env.actions import AnswerAction, PythonAction, SqlAction  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig, Observation  # noqa: E402
from ehrgym.env.pool import ConnectionPool, ConnectionSettings  # noqa: E402
from ehrgym.env.sqltool import SqlLimits  # noqa: E402
from ehrgym.env.trajectory import Trajectory  # noqa: E402
from ehrgym.errors import BenchmarkError, DatabaseError, EnvironmentStateError  # noqa: E402
from ehrgym.vocab import ABSTAIN_REASONS  # noqa: E402

COUNT_P1 = "SELECT count(*) FROM labevents WHERE subject_id = 1"


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_db(tmp_path_factory.mktemp("env") / "tiny.duckdb")


@pytest.fixture()
def env(tiny_db: Path):
    with EhrEnv(tiny_db, EnvConfig(max_steps=10, python=False)) as e:
        yield e


def test_first_observation(env: EhrEnv) -> None:
    task = last_creat_task()
    obs = env.reset(task)
    assert isinstance(obs, Observation) and obs.kind == "task"
    assert obs.question == task.question and task.question in obs.text
    for reason in ABSTAIN_REASONS:
        assert reason in obs.text
    assert "mimiciv_hosp.labevents(labevent_id" in obs.text and "sql(query)" in obs.text
    assert "python(code)" not in obs.text  # the python tool is disabled in this config
    # the default schema profile: MIMIC-IV's schemas, named in the SQL tool's text
    assert obs.schemas == ("mimiciv_hosp", "mimiciv_icu") and "MIMIC-IV tables (mimiciv_hosp.*" in obs.tools
    assert env.conn.profile.name == "mimic-iv"
    assert obs.steps_left == 10
    assert SECRET not in obs.text


def test_clean_episode_answer_and_reward(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = env.step(SqlAction(last_creat_task().gold_sql))
    assert r.observation.rows == [(1.4,)] and r.reward == 0.0 and not r.done
    assert r.info["rows"] == 1 and r.info["db_seconds"] >= 0 and r.info["gate_seconds"] >= 0
    r = env.step("ANSWER: 1.4 mg/dL")
    assert r.done and r.reward == 1.0 and r.info["termination"] == "answered"
    assert r.info["verdict"]["success_strict"] is True
    with pytest.raises(EnvironmentStateError):
        env.step(SqlAction("SELECT 1"))


def test_overlays_shadow_the_base_and_reset_restores(env: EhrEnv) -> None:
    env.reset(missing_creat_task())
    assert env.step(SqlAction(COUNT_P1)).observation.rows == [(0,)]
    assert env.step(SqlAction("SELECT count(*) FROM mimiciv_hosp.labevents")).observation.rows == [(2,)]
    r = env.step(AnswerAction(abstain="insufficient_evidence"))
    assert r.reward == 1.0 and r.info["termination"] == "abstained"
    env.reset(implausible_task())
    r = env.step(SqlAction("SELECT max(valuenum) FROM labevents WHERE subject_id = 1"))
    assert r.observation.rows == [(95.0,)]
    env.reset(last_creat_task())
    assert env.step(SqlAction(COUNT_P1)).observation.rows == [(2,)]


def test_wrong_answer_and_wrong_reason(env: EhrEnv) -> None:
    env.reset(implausible_task())
    r = env.step("ANSWER: 95")
    assert r.reward == 0.0 and r.info["verdict"]["failure"] == "missed_abstention"
    env.reset(implausible_task())
    r = env.step("ABSTAIN: conflicting evidence: odd")
    assert r.reward == 0.0 and r.info["verdict"]["failure"] == "wrong_reason"
    assert r.info["verdict"]["success_lenient"] is True
    lenient = EhrEnv(env.db_path, EnvConfig(scoring="lenient", python=False), pool=env.pool)
    try:
        lenient.reset(implausible_task())
        assert lenient.step("ABSTAIN: conflicting evidence: odd").reward == 1.0
    finally:
        lenient.close()


def test_row_cap_and_truncation_notice(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(sql=SqlLimits(max_rows_shown=7), python=False)) as env:
        env.reset(last_creat_task())
        r = env.step(SqlAction("SELECT * FROM range(1000)"))
        assert len(r.observation.rows) == 7 and r.observation.truncated and r.observation.row_count == 1000
        assert "first 7 of 1,000 rows" in r.observation.text and "truncated" in r.observation.text
        r = env.step(SqlAction("SELECT * FROM range(7)"))
        assert not r.observation.truncated and "(7 rows)" in r.observation.text


def test_errors_are_duckdb_messages_and_the_episode_continues(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = env.step(SqlAction("SELECT valuenumx FROM labevents"))
    assert r.info["error_kind"] == "database" and "valuenumx" in r.observation.text
    assert "Traceback" not in r.observation.text and not r.done
    r = env.step(SqlAction("SELEC 1"))
    assert r.info["error_kind"] == "gate" and "Allowed:" in r.observation.text
    r = env.step("what should I do?")
    assert r.observation.kind == "invalid" and "ANSWER:" in r.observation.text
    assert env.step(SqlAction("SELECT 1 AS one")).observation.rows == [(1,)]


def test_query_time_limit_interrupts(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(sql=SqlLimits(timeout_s=0.3), python=False)) as env:
        env.reset(last_creat_task())
        r = env.step(SqlAction("SELECT count(*) FROM range(100000000000) a"))
        assert r.info["error_kind"] == "timeout" and "time limit" in r.observation.text
        assert r.info["db_seconds"] < 5
        assert env.step(SqlAction("SELECT 2")).observation.rows == [(2,)]


def test_memory_limit(tiny_db: Path) -> None:
    config = EnvConfig(connection=ConnectionSettings(memory_limit="64MB"), python=False)
    with EhrEnv(tiny_db, config) as env:
        env.reset(last_creat_task())
        r = env.step(SqlAction("SELECT list(i) FROM range(100000000) t(i)"))
        assert r.info["error_kind"] == "memory" and "memory" in r.observation.text.lower()
        assert env.step(SqlAction("SELECT 3")).observation.rows == [(3,)]


def test_step_limit_ends_without_answer(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(max_steps=3, python=False)) as env:
        env.reset(last_creat_task())
        assert not env.step(SqlAction("SELECT 1")).done
        r = env.step(SqlAction("SELECT 1"))
        assert "1 step left" in r.observation.text
        r = env.step(SqlAction("SELECT 1"))
        assert r.done and r.reward == 0.0 and r.info["termination"] == "step_limit"
        assert r.truncated and not r.terminated  # Gymnasium: cut off, not a natural end
        assert r.info["verdict"]["failure"] == "no_answer" and "Step limit" in r.observation.text
        assert env.trajectory.termination == "step_limit"


def test_time_limit_ends_without_answer(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(episode_timeout_s=0.0, python=False)) as env:
        env.reset(last_creat_task())
        assert env.expired
        r = env.step(SqlAction("SELECT 1"))
        assert r.done and r.info["termination"] == "time_limit" and r.info["verdict"]["failure"] == "no_answer"
        assert r.truncated and not r.terminated


def test_answers_terminate_and_every_step_unpacks_like_gymnasium(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(python=False)) as env:
        env.reset(last_creat_task())
        obs, reward, terminated, truncated, info = env.step(SqlAction("SELECT 1"))
        assert (reward, terminated, truncated) == (0.0, False, False) and info["tool"] == "sql"
        for answer in ("ANSWER: 1.4", "ABSTAIN: insufficient_evidence: none measured"):
            env.reset(last_creat_task())
            r = env.step(answer)
            assert r.terminated and not r.truncated and r.done


def test_one_cap_bounds_every_observation(tiny_db: Path) -> None:
    with EhrEnv(tiny_db, EnvConfig(python=False, max_observation_chars=300)) as env:
        first = env.reset(last_creat_task())
        assert len(first.text) <= 300 and first.text.endswith("[output truncated to 300 characters]")
        for action in (SqlAction("SELECT repeat('x', 5000)"), SqlAction("SELEC 1" + " x" * 500)):
            assert len(env.step(action).observation.text) <= 300


def test_use_out_of_order_is_a_clear_error(tiny_db: Path) -> None:
    env = EhrEnv(tiny_db, EnvConfig(python=False))
    with pytest.raises(EnvironmentStateError, match="reset"):
        env.step(SqlAction("SELECT 1"))
    with pytest.raises(EnvironmentStateError, match="benchmark"):
        env.reset("some-task-id")
    env.close()
    with pytest.raises(EnvironmentStateError, match="closed"):
        env.reset(last_creat_task())
    with pytest.raises(DatabaseError, match="ehrgym db synth"):
        EhrEnv(tiny_db.parent / "missing.duckdb")


def test_abort_records_agent_error(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    verdict = env.abort("agent_error")
    assert verdict.failure == "no_answer" and env.trajectory.termination == "agent_error" and env.done


def test_trajectory_is_recorded_and_serialisable(env: EhrEnv) -> None:
    task = last_creat_task()
    env.reset(task)
    env.step(SqlAction("SELECT 1"), usage={"prompt_tokens": 100, "completion_tokens": 7})
    env.step("nonsense")
    env.step(AnswerAction(1.4), usage={"prompt_tokens": 120, "completion_tokens": 5})
    data = json.loads(json.dumps(env.trajectory.to_dict()))
    # the trajectory is what the agent saw: it names the task by its opaque public id
    assert data["task_id"] == task.public_id != task.task_id and data["termination"] == "answered"
    assert [s["action"]["tool"] for s in data["steps"]] == ["sql", "invalid", "answer"]
    assert data["prompt_tokens"] == 220 and data["completion_tokens"] == 12
    assert data["verdict"]["reward"] == 1.0 and data["initial_observation"].startswith("Question:")
    assert Trajectory.from_dict(data).to_dict() == data


def test_manifest_hash_check(env: EhrEnv) -> None:
    actual = env.database_hash()
    assert isinstance(actual, str) and len(actual) == 64
    env.check_manifest({"db_content_hash": actual})
    env.check_manifest({"db": {"content_hash": actual}})
    with pytest.raises(BenchmarkError, match="content hash"):
        env.check_manifest({"db_content_hash": "0" * 64})


def test_python_tool_disabled_is_an_observation(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    r = env.step(PythonAction("print(1)"))
    assert "disabled" in r.observation.text and not r.done


def test_concurrent_episodes_share_one_database_file(tiny_db: Path) -> None:
    tasks = [last_creat_task(), missing_creat_task(), implausible_task(), last_creat_task("t2", 2)]
    expected = {"t-clean": 2, "t-noise": 0, "t-implausible": 3, "t2": 2}
    errors: list[str] = []
    with ConnectionPool(tiny_db, warm=4) as pool:
        envs = [EhrEnv(tiny_db, EnvConfig(python=False), pool=pool) for _ in tasks]

        def worker(env: EhrEnv, task) -> None:
            for _ in range(15):
                env.reset(task)
                rows = env.step(SqlAction(COUNT_P1)).observation.rows
                if rows != [(expected[task.task_id],)]:
                    errors.append(f"{task.task_id}: {rows}")
                env.step(AnswerAction(1))

        threads = [threading.Thread(target=worker, args=(e, t)) for e, t in zip(envs, tasks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in envs:
            e.close()
    assert errors == []


def test_a_bad_overlay_fails_cleanly_and_leaves_no_trace(env: EhrEnv) -> None:
    from dataclasses import replace

    from ehrgym.db.overlay import Overlay, TableEdit
    from ehrgym.errors import OverlayError

    good = missing_creat_task()
    # admissions is re-pointed first (tables are applied in name order), then labevents fails
    bad_overlay = Overlay((TableEdit("admissions", delete_rowids=(0,)),
                           TableEdit("labevents", insert_rows=({"valuenum": float("inf")},))))
    bad = replace(good, noise=replace(good.noise, overlay=bad_overlay))
    with pytest.raises(OverlayError):
        env.reset(bad)
    with pytest.raises(EnvironmentStateError):
        env.step(SqlAction("SELECT 1"))
    env.reset(last_creat_task())
    assert env.step(SqlAction("SELECT count(*) FROM admissions")).observation.rows == [(3,)]
    assert env.step(SqlAction(COUNT_P1)).observation.rows == [(2,)]
