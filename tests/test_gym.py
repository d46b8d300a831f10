"""Gymnasium wrapper: registration, text spaces, seeded resets, terminated/truncated, env checker."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

sys.path.insert(0, str(Path(__file__).parent))
from test_env_support import implausible_task, last_creat_task, make_tiny_db, missing_creat_task  # noqa: E402

import ehrgym.env.gym as ehrgym_gym  # noqa: E402  (registers EHRRobustGym-v0)
from ehrgym.env.episode import EnvConfig  # noqa: E402
from ehrgym.errors import BenchmarkError  # noqa: E402

TASKS = [last_creat_task(), missing_creat_task(), implausible_task()]


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_db(tmp_path_factory.mktemp("gym") / "tiny.duckdb")


def make(tiny_db: Path, **kwargs):
    return gym.make(ehrgym_gym.ENV_ID, db_path=tiny_db, tasks=TASKS,
                    config=EnvConfig(max_steps=4, python=False), **kwargs)


def test_registered_and_passes_the_env_checker(tiny_db: Path) -> None:
    assert ehrgym_gym.ENV_ID in gym.registry
    env = make(tiny_db)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_seeded_reset_is_reproducible_and_options_pick_a_task(tiny_db: Path) -> None:
    env = make(tiny_db)
    obs_a, info_a = env.reset(seed=3)
    obs_b, info_b = env.reset(seed=3)
    assert obs_a == obs_b and info_a == info_b
    seen = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert seen == {t.public_id for t in TASKS}  # agents see opaque ids only
    obs, info = env.reset(options={"task_id": "t-noise"})
    noisy = next(t for t in TASKS if t.task_id == "t-noise")
    assert info["task_id"] == noisy.public_id and set(info) == {"task_id", "intent", "level", "max_steps"}
    task = env.unwrapped.current_task  # the evaluator side still knows everything
    assert task.variant == "noise" and task.noise.subtype == "missing_evidence"
    assert env.unwrapped.task_of(info["task_id"]) is task
    assert env.reset(options={"task_id": noisy.public_id})[1]["task_id"] == noisy.public_id
    assert isinstance(obs, str) and obs.startswith("Question:") and env.observation_space.contains(obs)
    with pytest.raises(BenchmarkError):
        env.reset(options={"task_id": "nope"})
    env.close()


def test_text_actions_reward_and_termination(tiny_db: Path) -> None:
    env = make(tiny_db)
    env.reset(options={"task_id": "t-noise"})
    obs, reward, terminated, truncated, info = env.step("SQL: SELECT count(*) FROM labevents WHERE subject_id = 1")
    assert "0" in obs and reward == 0.0 and not terminated and not truncated and info["tool"] == "sql"
    assert "seconds" not in info
    obs, reward, terminated, truncated, info = env.step("ABSTAIN: insufficient evidence: no creatinine rows")
    assert reward == 1.0 and terminated and not truncated
    assert info["verdict"]["success_strict"] and info["termination"] == "abstained"
    env.close()


def test_step_limit_truncates(tiny_db: Path) -> None:
    env = make(tiny_db, timings_in_info=True)
    env.reset(options={"task_id": "t-clean"})
    for _i in range(4):
        obs, reward, terminated, truncated, info = env.step("garbage that is not an action")
        assert "seconds" in info
    assert truncated and not terminated and reward == 0.0 and info["termination"] == "step_limit"
    env.close()


def test_needs_tasks_or_benchmark(tiny_db: Path) -> None:
    with pytest.raises(BenchmarkError):
        ehrgym_gym.EhrGymEnv(tiny_db)
    with pytest.raises(BenchmarkError):
        ehrgym_gym.EhrGymEnv(tiny_db, tasks=TASKS, split="train")


def test_render_ansi(tiny_db: Path) -> None:
    env = make(tiny_db, render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    env.close()


def test_make_with_module_prefix(tiny_db: Path) -> None:
    env = gym.make("ehrgym.env.gym:EHRRobustGym-v0", db_path=tiny_db, tasks=TASKS,
                   config=EnvConfig(max_steps=4, python=False))
    obs, info = env.reset(seed=1)
    assert obs.startswith("Question:") and info["task_id"] in {t.public_id for t in TASKS}
    env.close()
