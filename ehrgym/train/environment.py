"""The episode as a TRL environment (``GRPOTrainer(environment_factory=...)``).

TRL creates one instance per concurrent rollout with a zero-argument factory, calls
``reset(**row)`` with the dataset row (its ``task_id`` names the task; the returned first
observation is appended to the prompt), exposes every public method as a tool — here exactly
``sql``, ``python`` (when the episodes offer it) and ``answer``, typed and documented from the
environment's own tool descriptions (:mod:`ehrgym.env.tools`) — and, once the rollout is over,
calls ``get_reward()``, which scores the episode with the verifier (:mod:`ehrgym.train.rewards`).

Episode semantics follow :class:`~ehrgym.env.episode.EhrEnv`: the answer call *terminates* the
episode; the step limit, the one wall-clock limit (``EnvConfig.episode_timeout_s``, which also
counts the model's generation time between calls) and a rollout that stops without an answer
*truncate* it. A tool called after the episode ended is refused (the call raises
:class:`EpisodeOver`, which TRL turns into an error tool message). All instances share one
connection pool (:mod:`ehrgym.env.pool`) and one Python worker pool.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ehrgym.bench.task import Task
from ehrgym.env.actions import AnswerAction, PythonAction, SqlAction
from ehrgym.env.episode import EhrEnv, EnvConfig
from ehrgym.env.pool import ConnectionPool
from ehrgym.env.tools import TOOLS
from ehrgym.env.verifier import Verdict
from ehrgym.errors import EhrGymError
from ehrgym.train.rewards import EpisodeOutcome, get_reward_fn
from ehrgym.vocab import ABSTAIN_REASONS


class EpisodeOver(EhrGymError):
    """A tool was called after the episode ended (answered, step or time limit)."""


def _google_doc(name: str, arg_order: tuple[str, ...]) -> str:
    """A tool's docstring in the Google style transformers reads into a JSON schema."""
    tool = TOOLS[name]
    lines = [tool.description, "", "Args:"]
    for arg in arg_order:
        note = " ".join(tool.notes.get(arg, arg).split())
        if arg == "abstain":
            note += " (choices: [" + ", ".join(f'"{r}"' for r in ABSTAIN_REASONS) + "])"
        lines.append(f"    {arg}: {note}")
    lines += ["", "Returns:", "    What the environment shows: the result, an error, or the end of the episode."]
    return "\n".join(lines)


@dataclass
class SharedEpisodes:
    """What every environment instance of a training run shares: tasks, connections, workers."""

    db_path: Path
    tasks: dict[str, Task]                       # public id and internal id -> Task
    config: EnvConfig = field(default_factory=EnvConfig)
    reward: str = "strict"
    pool: ConnectionPool | None = None
    python_pool: Any = None
    instances: list["EpisodeEnvironment"] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        get_reward_fn(self.reward)       # fail fast on an unknown variant
        self.db_path = Path(self.db_path)
        if self.pool is None:
            self.pool = ConnectionPool(self.db_path, self.config.connection, warm=1, background=False)

    @classmethod
    def from_benchmark(cls, bench_dir: str | Path, db_path: str | Path, config: EnvConfig = EnvConfig(),
                       reward: str = "strict", split: str = "train") -> "SharedEpisodes":
        from ehrgym.bench.dataset import load_benchmark

        bench = load_benchmark(bench_dir)
        tasks = [t for t in bench.tasks if t.split == split]
        if not tasks:
            raise EhrGymError(f"{bench_dir} has no {split!r} tasks")
        shared = cls(Path(db_path), {**{t.public_id: t for t in tasks}, **{t.task_id: t for t in tasks}},
                     config, reward)
        probe = EhrEnv(db_path, config, pool=shared.pool)   # refuses a database the benchmark was not built on
        try:
            probe.check_manifest(getattr(bench, "manifest", {}) or {}, source=str(bench_dir))
        finally:
            probe.close()
        return shared

    def factory(self) -> "EpisodeEnvironment":
        """A new environment instance (TRL's ``environment_factory``)."""
        cls = PythonEpisodeEnvironment if self.config.python else EpisodeEnvironment
        env = cls(self)
        with self._lock:
            self.instances.append(env)
        return env

    def close(self) -> None:
        for env in self.instances:
            env._close()
        self.instances.clear()
        if self.python_pool is not None:
            self.python_pool.close()
            self.python_pool = None
        if self.pool is not None:
            self.pool.close()


class EpisodeEnvironment:
    """One rollout's episode; the public methods are the model's tools (see the module docstring)."""

    def __init__(self, shared: SharedEpisodes) -> None:
        self._shared = shared
        if shared.config.python and shared.python_pool is None:
            from ehrgym.env.pyworker import PythonLimits, PythonWorkerPool

            limits = shared.config.python_limits if shared.config.python_limits is not None else PythonLimits()
            shared.python_pool = PythonWorkerPool(limits, warm=shared.config.python_warm,
                                                  allow_unisolated=shared.config.python_unsafe)
        self._env = EhrEnv(shared.db_path, shared.config, pool=shared.pool, python_pool=shared.python_pool)
        self._terminated = False
        self._truncated = False
        self._refused = 0
        self._last_verdict: Verdict | None = None

    # -- TRL's protocol -----------------------------------------------------------------------
    def reset(self, task_id: str | None = None, **row: Any) -> str:
        """Start the episode of the row's task; returns the first observation (question, tools, protocol)."""
        if task_id is None:
            raise EhrGymError("the training dataset's rows need a task_id column (build it with "
                              "ehrgym.train.grpo.episode_dataset)")
        task = self._shared.tasks.get(str(task_id))
        if task is None:
            raise EhrGymError(f"task {task_id!r} is not a training task of this environment")
        self._terminated = self._truncated = False
        self._refused = 0
        self._last_verdict = None
        return self._env.reset(task).text

    def get_reward(self) -> float:
        """The chosen reward variant of the finished episode (a rollout that stopped without an
        answer is truncated here and scored as no answer)."""
        return float(get_reward_fn(self._shared.reward)(self._finish()))

    # -- tools ------------------------------------------------------------------------------
    def sql(self, query: str) -> str:
        return self._step(SqlAction(query))

    def answer(self, value: str | None = None, abstain: str | None = None, explanation: str = "") -> str:
        return self._step(AnswerAction(value, abstain or None, explanation or ""))

    # -- evaluator side: properties and underscored names only (public methods become tools) ----
    @property
    def terminated(self) -> bool:
        """The episode ended naturally (the model answered or abstained)."""
        return self._terminated

    @property
    def truncated(self) -> bool:
        """The episode was cut off (step or time limit, or the rollout ended without an answer)."""
        return self._truncated

    @property
    def verdict(self) -> Verdict | None:
        return self._env.verdict

    @property
    def episode(self) -> EhrEnv:
        return self._env

    def _step(self, action: Any) -> str:
        env = self._env
        if env.task is None:
            raise EpisodeOver("no episode is running; the trainer calls reset() first")
        if env.done:
            self._refused += 1
            raise EpisodeOver("The episode is over (" + str(env.trajectory.termination if env.trajectory else "done")
                              + "); no more tool calls are accepted.")
        if env.expired:   # the model's own generation used up the episode's time
            env.abort("time_limit")
            self._truncated = True
            self._refused += 1
            raise EpisodeOver(f"Time limit of {env.config.episode_timeout_s:g} s reached; the episode ended "
                              f"without an answer.")
        result = env.step(action)
        self._terminated, self._truncated = result.terminated, result.truncated
        return result.observation.text

    def _finish(self) -> EpisodeOutcome:
        env = self._env
        if env.task is None:
            raise EhrGymError("get_reward() before reset()")
        if not env.done:
            # the model stopped calling tools (or ran out of completion tokens) before answering
            env.abort("step_limit" if env.steps >= env.config.max_steps else "agent_error")
            self._truncated = True
        assert env.verdict is not None
        answered = bool(env.trajectory and env.trajectory.termination in ("answered", "abstained"))
        return EpisodeOutcome(env.verdict, answered)

    def _close(self) -> None:
        self._env.close()


class PythonEpisodeEnvironment(EpisodeEnvironment):
    """An episode that also offers the python tool."""

    def python(self, code: str) -> str:
        return self._step(PythonAction(code))


EpisodeEnvironment.sql.__doc__ = _google_doc("sql", ("query",))
EpisodeEnvironment.answer.__doc__ = _google_doc("answer", ("value", "abstain", "explanation"))
PythonEpisodeEnvironment.python.__doc__ = _google_doc("python", ("code",))
