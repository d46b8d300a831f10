"""Gymnasium wrapper: the same episodes as a text environment, registered as ``EHRRobustGym-v0``.

Observations and actions are strings. An action is text read by :func:`ehrgym.env.protocol.parse_action`
(``SQL: …``, a ```` ```sql ```` block, ``PYTHON: …``, ``ANSWER: …``, ``ABSTAIN: reason: …`` or JSON
``{"tool": "sql", "query": …}``); unreadable text costs a step and returns the expected formats.

    import gymnasium as gym
    import ehrgym.env.gym  # registers EHRRobustGym-v0
    env = gym.make("EHRRobustGym-v0", db_path="data/synth.duckdb", bench_dir="data/bench-small")
    obs, info = env.reset(seed=0, options={"task_id": "..."})

``terminated`` is True when the agent answered or abstained; ``truncated`` when the step or time
limit ended the episode. The reward (1/0) comes at the last step. ``info`` holds the task's
opaque public id (:attr:`~ehrgym.bench.task.Task.public_id`), its intent and level, the tool,
row counts, errors and, once the episode is over, the verdict and termination; timings are
added when ``timings_in_info=True`` (off by default so that seeded episodes are exactly
reproducible). Nothing in ``info`` before the last step names the variant, the noise subtype,
the pair or the expected outcome: a trainer that needs them reads :attr:`EhrGymEnv.current_task`
or :meth:`EhrGymEnv.task_of` (evaluator side, never shown to the policy).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import gymnasium
from gymnasium import spaces

from ehrgym.bench.task import Task
from ehrgym.env.episode import EhrEnv, EnvConfig, public_info
from ehrgym.errors import BenchmarkError

ENV_ID = "EHRRobustGym-v0"


class UnicodeText(spaces.Text):
    """A text space holding any string up to ``max_length`` characters (samples are printable ASCII)."""

    def __init__(self, max_length: int, seed: int | None = None) -> None:
        super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.max_length})"


class EhrGymEnv(gymnasium.Env):
    """Text environment over an :class:`~ehrgym.env.episode.EhrEnv`."""

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(self, db_path: str | Path, bench_dir: str | Path | None = None, tasks: list[Task] | None = None,
                 config: EnvConfig = EnvConfig(), split: str | None = None, render_mode: str | None = None,
                 max_action_chars: int = 20_000,
                 timings_in_info: bool = False) -> None:
        if (bench_dir is None) == (tasks is None):
            raise BenchmarkError("give exactly one of bench_dir (a built benchmark) or tasks (a list of Task)")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None")
        if bench_dir is not None:
            self.env = EhrEnv.from_benchmark(bench_dir, db_path, config)
            tasks = list(self.env.benchmark.tasks)
        else:
            self.env = EhrEnv(db_path, config)
        assert tasks is not None
        if split is not None:
            tasks = [t for t in tasks if t.split == split]
        if not tasks:
            self.env.close()
            raise BenchmarkError(f"no tasks to serve (split={split!r})")
        self.tasks = tasks
        # reset(options={"task_id": ...}) takes an internal task id or the public id agents see
        self.by_id = {**{t.public_id: t for t in tasks}, **{t.task_id: t for t in tasks}}
        self.render_mode = render_mode
        self.timings_in_info = timings_in_info
        # the environment's own cap (EnvConfig.max_observation_chars) bounds every observation
        self.max_observation_chars = self.env.config.max_observation_chars
        self.observation_space = UnicodeText(self.max_observation_chars)
        self.action_space = UnicodeText(max_action_chars)
        self._last_text = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            if task_id not in self.by_id:
                raise BenchmarkError(f"task {task_id!r} is not served by this environment")
            task = self.by_id[task_id]
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        obs = self.env.reset(task)
        self._last_text = obs.text
        info = {"task_id": task.public_id, "intent": task.intent, "level": task.level,
                "max_steps": self.env.config.max_steps}
        return self._last_text, info

    @property
    def current_task(self) -> Task | None:
        """The full task of the current episode (variant, noise, expected outcome): evaluator side only."""
        return self.env.task

    def task_of(self, task_id: str) -> Task:
        """The full task for a public id (as in ``info["task_id"]``) or an internal task id."""
        try:
            return self.by_id[task_id]
        except KeyError:
            raise BenchmarkError(f"task {task_id!r} is not served by this environment") from None

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        info = dict(result.info) if self.timings_in_info else public_info(result.info)
        info["task_id"] = result.observation.task_id
        terminated, truncated = result.terminated, result.truncated
        self._last_text = result.observation.text
        if self.render_mode == "human":
            print(self._last_text)
        return self._last_text, float(result.reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_text
        if self.render_mode == "human":
            print(self._last_text)
        return None

    def close(self) -> None:
        self.env.close()
        super().close()


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="ehrgym.env.gym:EhrGymEnv")
