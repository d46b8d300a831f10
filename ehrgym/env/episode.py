"""Episodes: an agent meets a task (docs/architecture.md §4).

``EhrEnv(db_path)`` holds one warm episode connection (see :mod:`ehrgym.env.pool`), so
``reset(task)`` only re-points the views the task's overlay touches and builds the first
observation; ``step(action)`` runs a tool (SQL through the gate, Python in the per-episode
worker) or scores the final answer with :func:`ehrgym.env.verifier.verify`. A step limit (and an
optional wall-clock limit) ends the episode without an answer. Every episode is recorded as a
:class:`~ehrgym.env.trajectory.Trajectory`.

Many episodes run concurrently against one database file: give several environments the same
:class:`~ehrgym.env.pool.ConnectionPool` (one in-memory connection per live environment).

    with EhrEnv.from_benchmark("data/bench-small", "data/synth.duckdb") as env:
        obs = env.reset(env.benchmark.tasks[0])          # or a task id
        print(obs.text)                                  # question, tools, protocol, schema
        r = env.step(SqlAction("SELECT count(*) FROM labevents"))   # or text: "SQL: ..."
        r = env.step("ABSTAIN: insufficient_evidence: no creatinine was measured")
        r.reward, r.terminated, r.truncated, r.info["verdict"], env.trajectory.to_dict()
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ehrgym.bench.task import Task
from ehrgym.db.schema import EXPOSED_SCHEMAS, mimic_schema
from ehrgym.env.actions import (ACTION_TYPES, Action, AnswerAction, PythonAction, SqlAction, action_to_dict,
                                check_action)
from ehrgym.env.gate import SqlGate
from ehrgym.env.pool import ConnectionPool, ConnectionSettings
from ehrgym.env.protocol import ActionParseError, parse_action, protocol_text
from ehrgym.env.resultcache import ResultCache, SharedResults, shared_namespace
from ehrgym.env.sqltool import SqlLimits, format_outcome, query_frame, run_query
from ehrgym.env.tools import tool_descriptions
from ehrgym.env.trajectory import Trajectory, TrajectoryStep
from ehrgym.env.verifier import Verdict, verify
from ehrgym.errors import BenchmarkError, DatabaseError, EnvironmentStateError, InfrastructureError


@dataclass(frozen=True)
class EnvConfig:
    """Limits and presentation of an episode."""

    max_steps: int = 20                      # actions per episode, the final answer included
    episode_timeout_s: float | None = None   # the one wall-clock limit of an episode (None: no limit)
    sql: SqlLimits = field(default_factory=SqlLimits)
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    python: bool = True                      # offer the python tool
    python_limits: Any = None                # ehrgym.env.pyworker.PythonLimits (None: its defaults)
    python_warm: int = 1                     # pre-forked workers kept by the env's own worker pool
    python_unsafe: bool = False              # run the python tool without OS isolation (labelled unsafe)
    scoring: str = "strict"                  # reward on abstentions: strict (reason must match) | lenient
    schema_summary: bool = True              # show the compact schema in the first observation
    gate_check: str = "tokens"               # the SQL gate's DuckDB layer: tokens (lexer) | ast (full parse)
    max_observation_chars: int = 20_000      # the one cap on any observation text the agent gets
    result_cache: int = 256                  # SQL results reused over identical data (ehrgym.env.resultcache); 0: off

    @property
    def tools(self) -> tuple[str, ...]:
        return ("sql", "python", "answer") if self.python else ("sql", "answer")


@dataclass
class Observation:
    """What the agent sees: ``text`` (for an LLM) plus structured fields."""

    text: str
    kind: str                    # task | sql | python | fhir_get | fhir_post | answer | invalid | limit
    task_id: str = ""
    step: int = 0
    steps_left: int = 0
    question: str = ""
    protocol: str = ""
    tools: str = ""
    schema_summary: str = ""
    schemas: tuple[str, ...] = ()  # the schemas the episode's tables live in (first observation)
    tool_names: tuple[str, ...] = ()  # the tools the episode offers (first observation; ehrgym.env.tools)
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    row_count: int | None = None
    truncated: bool = False
    error: str | None = None

    def __str__(self) -> str:
        return self.text


@dataclass
class StepResult:
    """One step's outcome, with Gymnasium's meaning of the two end flags.

    ``terminated``: the episode reached its natural end (the agent answered or abstained);
    ``truncated``: it was cut off (step limit, time limit, aborted) — the verdict then scores a
    missing answer. ``done`` is either of them.
    """

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def __iter__(self):  # ``obs, reward, terminated, truncated, info = env.step(a)``, as in Gymnasium
        return iter((self.observation, self.reward, self.terminated, self.truncated, self.info))


# step info an agent must not see: timings and result-cache hits say whether the data a query read
# is the same as in an earlier episode (an untouched table), i.e. something about the overlay
PRIVATE_INFO_KEYS: tuple[str, ...] = ("seconds", "gate_seconds", "db_seconds", "format_seconds",
                                      "python_seconds", "cached")


def public_info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without what could reveal the overlay (:data:`PRIVATE_INFO_KEYS`)."""
    return {k: v for k, v in info.items() if k not in PRIVATE_INFO_KEYS}


@lru_cache(maxsize=8)
def schema_summary(profile: Any = None) -> str:
    """The exposed tables (MIMIC-IV's 31 unless ``profile`` names others) and their columns, one line per table."""
    schemas = profile.schemas if profile is not None else EXPOSED_SCHEMAS
    specs = profile.tables if profile is not None else tuple(mimic_schema().values())
    lines = [f"Tables (schemas {', '.join(schemas)}; unqualified names also work):"]
    for spec in specs:
        lines.append(f"{spec.qualified}({', '.join(spec.column_names)})")
    return "\n".join(lines)


class ToolContext:
    """What a tool handler may use of its episode, and nothing else.

    Handlers never reach into the environment's internals: they run gated SQL, borrow the
    episode's Python worker, and clip text to the one observation cap through this object.
    The task (and so its labels) is deliberately not part of it.
    """

    __slots__ = ("_env",)

    def __init__(self, env: "EhrEnv") -> None:
        self._env = env

    @property
    def config(self) -> EnvConfig:
        return self._env.config

    def run_sql(self, query: str) -> Any:
        """One gated query with the episode's limits (an :class:`~ehrgym.env.sqltool.QueryOutcome`);
        a result the episode's data already gave for the same SQL is reused (``EnvConfig.result_cache``)."""
        env = self._env
        return run_query(env.gate, env.conn, env.pool.watchdog, query, env.config.sql, cache=env.results)

    def sql_frame_pickled(self, query: str) -> bytes:
        """One gated query as a pickled DataFrame, for the Python worker's ``sql()``."""
        return self._env._sql_frame_pickled(query)

    def python_worker(self) -> Any:
        """The episode's Python worker (started on first use; raises if the host cannot sandbox it)."""
        return self._env._python_worker()

    def drop_python_worker(self) -> None:
        """Discard the episode's Python worker (after it was killed); the next use starts a fresh one."""
        self._env._drop_worker()

    def clip(self, text: str) -> str:
        """``text`` cut to the environment's one observation cap, saying so."""
        return self._env._truncate(text)

    def tool_setting(self, name: str) -> Any:
        """A per-task setting a tool needs (e.g. ``fhir_url``), from the task's metadata.

        Only names registered in :data:`TOOL_SETTINGS` can be read, so a handler cannot reach
        the task's labels through this door.
        """
        if name not in TOOL_SETTINGS:
            raise KeyError(f"{name!r} is not a registered tool setting ({sorted(TOOL_SETTINGS)})")
        task = self._env.task
        return (getattr(task, "meta", None) or {}).get(name) if task is not None else None


TOOL_SETTINGS: set[str] = set()   # task metadata keys a tool may read (tools register theirs)


ActionHandler = Callable[[ToolContext, Any], tuple[Observation, dict[str, Any]]]
ACTION_HANDLERS: dict[type, ActionHandler] = {}


def action_handler(kind: type) -> Callable[[ActionHandler], ActionHandler]:
    def register(fn: ActionHandler) -> ActionHandler:
        ACTION_HANDLERS[kind] = fn
        return fn
    return register


class EhrEnv:
    """One episode at a time over a kit database; see the module docstring."""

    def __init__(self, db_path: str | Path, config: EnvConfig = EnvConfig(), *,
                 pool: ConnectionPool | None = None, python_pool: Any = None,
                 gate: SqlGate | None = None, result_store: str | Path | None = None) -> None:
        """``result_store``: a directory of query results shared with other environments and runs on this
        database (:class:`~ehrgym.env.resultcache.SharedResults`; for scripted agents: reuse shows in timings)."""
        self.db_path = Path(db_path)
        self.config = config
        self._own_pool = pool is None
        self.pool = pool if pool is not None else ConnectionPool(self.db_path, config.connection, warm=1,
                                                                 background=False)
        self.conn = self.pool.acquire()
        # the database's schema profile (MIMIC-IV, or an external benchmark's; see ehrgym.db.profile)
        self.profile = getattr(self.conn, "profile", None)
        if gate is not None and self.profile is not None and getattr(gate, "tables", None) is not None \
                and set(gate.tables) != {spec.name for spec in self.profile.tables}:
            self.pool.release(self.conn)
            if self._own_pool:
                self.pool.close()
            raise DatabaseError(f"the SQL gate passed in admits other tables than {self.db_path}'s "
                                f"{self.profile.name} schema; build it with SqlGate(profile=...)")
        self._own_gate = gate is None
        self.gate = gate if gate is not None else SqlGate(duckdb_check=config.gate_check, profile=self.profile)
        self._own_python_pool = python_pool is None
        self._python_pool = python_pool
        self._worker: Any = None
        self._python_refusal: str | None = None
        self.task: Task | None = None
        self.trajectory: Trajectory | None = None
        self.verdict: Verdict | None = None
        self.done = True
        self.steps = 0
        self.benchmark: Any = None
        self._started = 0.0
        self._closed = False
        self._tools = ToolContext(self)
        self.results = ResultCache(size=config.result_cache)
        if result_store is not None and config.result_cache > 0:
            self.results.shared = SharedResults(result_store, shared_namespace(self._database_identity(), config.sql,
                                                                               config.connection))

    # -- construction from a benchmark ----------------------------------------------------------
    @classmethod
    def from_benchmark(cls, bench_dir: str | Path, db_path: str | Path, config: EnvConfig = EnvConfig(),
                       **kwargs: Any) -> "EhrEnv":
        """An environment for a built benchmark; refuses a database the benchmark was not built on."""
        from ehrgym.bench.dataset import load_benchmark

        bench = load_benchmark(bench_dir)
        env = cls(db_path, config, **kwargs)
        try:
            env.check_manifest(getattr(bench, "manifest", {}) or {}, source=str(bench_dir))
        except BenchmarkError:
            env.close()
            raise
        env.benchmark = bench
        return env

    def _database_identity(self) -> str:
        """The database's content hash, else its file's resolved path, size and modification time."""
        found = self.database_hash()
        if found:
            return f"content:{found}"
        stat = self.db_path.stat()
        return f"file:{self.db_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"

    def database_hash(self) -> str | None:
        try:
            return self.conn.meta().get("content_hash")
        except DatabaseError:
            return None

    def check_manifest(self, manifest: dict[str, Any], source: str = "the benchmark") -> None:
        """Raise :class:`BenchmarkError` when ``manifest``'s database hash differs from this database's."""
        expected = manifest.get("db_content_hash")
        if expected is None and isinstance(manifest.get("db"), dict):
            expected = manifest["db"].get("content_hash")
        if expected is None:
            return
        actual = self.database_hash()
        if actual != expected:
            raise BenchmarkError(
                f"{source} was built on a database with content hash {expected}, but {self.db_path} has "
                f"{actual}; use the database the benchmark was built on (see its manifest.json) or rebuild "
                f"the benchmark with `ehrgym bench build --db {self.db_path}`")

    # -- episode ------------------------------------------------------------------------------
    def reset(self, task: Task | str) -> Observation:
        """Start an episode on ``task`` (a Task, or a task id or public id of the attached benchmark).

        What the agent sees names the task by its opaque :attr:`Task.public_id` only.
        """
        if self._closed:
            raise EnvironmentStateError("this environment is closed; create a new EhrEnv")
        t0 = time.perf_counter()
        if isinstance(task, str):
            task = self._task_by_id(task)
        self._drop_worker()
        if not self.conn.healthy:  # a query broke it, or its catalog could not be restored
            self.pool.release(self.conn)
            self.conn = self.pool.acquire()
        try:
            # restores the catalog first if a query ran; with a shared result store (scripted baselines: many
            # episodes whose every query is answered by it) the views are re-pointed only when a query needs them
            self.conn.apply(task.overlay, defer=self.results.shared is not None)
            if not self.conn.healthy:
                raise EnvironmentStateError("the episode connection could not be restored")
        except Exception:
            # a half-applied overlay must not leak into the next episode: replace the connection
            self.task, self.trajectory, self.done = None, None, True
            self.conn.healthy = False
            self.pool.release(self.conn)
            self.conn = self.pool.acquire()
            raise
        self.results.set_overlay(task.overlay)
        self.task = task
        self.steps = 0
        self.done = False
        self.verdict = None
        text = self._task_text(task)
        obs = Observation(text=text, kind="task", task_id=task.public_id, step=0, steps_left=self.config.max_steps,
                          question=task.question, protocol=self._protocol(),
                          tools=self._tool_text(), schemas=self._schemas(), tool_names=self.tools,
                          schema_summary=self._schema_summary() if self.config.schema_summary else "")
        self.trajectory = Trajectory(task_id=task.public_id, initial_observation=text)
        self._started = time.perf_counter()
        self.trajectory.reset_seconds = self._started - t0
        return obs

    def step(self, action: Action | str | dict[str, Any], usage: dict[str, Any] | None = None) -> StepResult:
        """Run one action; ``usage`` (tokens, latency) is recorded in the trajectory when given."""
        if self._closed:
            raise EnvironmentStateError("this environment is closed; create a new EhrEnv (step() after close())")
        if self.task is None or self.trajectory is None:
            raise EnvironmentStateError("call reset(task) before step()")
        if self.done:
            raise EnvironmentStateError("the episode is over; call reset(task) to start another")
        t0 = time.perf_counter()
        self.steps += 1
        parsed, parse_error = self._coerce(action)
        if parsed is None:
            obs = Observation(text=str(parse_error), kind="invalid", error=str(parse_error))
            info: dict[str, Any] = {"tool": "invalid", "error": str(parse_error)}
            action_record = {"tool": "invalid", "text": action if isinstance(action, str) else _short_repr(action)}
        else:
            obs, info = self._run_handler(parsed)
            action_record = action_to_dict(parsed)
        reward = 0.0
        if isinstance(parsed, AnswerAction):
            self.verdict = verify(self.task, parsed, self.config.scoring, trajectory=self.trajectory)
            self.done = True
            reward = self.verdict.reward
            self.trajectory.termination = "abstained" if parsed.is_abstain else "answered"
        elif self.steps >= self.config.max_steps:
            reward = self._end_without_answer("step_limit", obs,
                                              f"Step limit of {self.config.max_steps} reached; the episode "
                                              f"ended without an answer.")
        elif self.expired:
            reward = self._end_without_answer("time_limit", obs,
                                              f"Time limit of {self.config.episode_timeout_s:g} s reached; "
                                              f"the episode ended without an answer.")
        obs.task_id, obs.step = self.task.public_id, self.steps
        obs.steps_left = max(0, self.config.max_steps - self.steps)
        if not self.done and obs.steps_left <= 2:
            obs.text += f"\n[{obs.steps_left} step{'s' if obs.steps_left != 1 else ''} left]"
        obs.text = self._truncate(obs.text)
        seconds = time.perf_counter() - t0
        info.update({"step": self.steps, "steps_left": obs.steps_left, "seconds": seconds})
        if self.done:
            info["termination"] = self.trajectory.termination
            info["verdict"] = self.verdict.to_dict() if self.verdict else None
            self.trajectory.verdict = info["verdict"]
            self.trajectory.wall_seconds = time.perf_counter() - self._started
            self._drop_worker()
        self.trajectory.steps.append(TrajectoryStep(self.steps, action_record, obs.text, reward, self.done, seconds,
                                                    _jsonable(info), dict(usage or {})))
        terminated = self.done and isinstance(parsed, AnswerAction)
        return StepResult(obs, reward, terminated, self.done and not terminated, info)

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools this episode offers: its schema profile's when it names them (a FHIR server's), else
        ``EnvConfig.tools``."""
        if self.profile is not None and getattr(self.profile, "tools", None):
            return tuple(self.profile.tools)
        return self.config.tools

    @property
    def expired(self) -> bool:
        """The episode's wall-clock limit (``EnvConfig.episode_timeout_s``) has run out."""
        limit = self.config.episode_timeout_s
        return limit is not None and self.task is not None and time.perf_counter() - self._started > limit

    def abort(self, termination: str = "agent_error") -> Verdict:
        """End the current episode without an answer (e.g. the agent crashed)."""
        if self.task is None or self.trajectory is None:
            raise EnvironmentStateError("call reset(task) first")
        if not self.done:
            self.done = True
            self.verdict = verify(self.task, None, self.config.scoring)
            self.trajectory.termination = termination
            self.trajectory.verdict = self.verdict.to_dict()
            self.trajectory.wall_seconds = time.perf_counter() - self._started
            self._drop_worker()
        assert self.verdict is not None
        return self.verdict

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.results.shared is not None:
            try:
                self.results.shared.flush()
            except OSError:  # a cache: what could not be written is only run again by the next environment
                pass
        self._drop_worker()
        if self._python_pool is not None and self._own_python_pool:
            self._python_pool.close()
        self.pool.release(self.conn)
        if self._own_pool:
            self.pool.close()
        if self._own_gate:
            self.gate.close()

    def __enter__(self) -> "EhrEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tools (what the Python worker's sql() calls, too) ------------------------------------
    def sql_frame(self, query: str) -> Any:
        """Gate and run ``query``, returning a DataFrame; raises RuntimeError with the message."""
        return query_frame(self.gate, self.conn, self.pool.watchdog, query, self.config.sql)

    def _sql_frame_pickled(self, query: str) -> bytes:
        return query_frame(self.gate, self.conn, self.pool.watchdog, query, self.config.sql, pickled=True)

    # -- internals ----------------------------------------------------------------------------
    def _coerce(self, action: Any) -> tuple[Action | None, str | None]:
        """The action to run, or None and the message that tells the agent what to send instead.
        Never raises: whatever the agent produced becomes an action or an ``invalid`` observation."""
        try:
            if isinstance(action, ACTION_TYPES):
                return check_action(action)
            if isinstance(action, dict):
                from ehrgym.env.protocol import action_from_mapping

                parsed = action_from_mapping(action)
                if parsed is None:
                    return None, (f"Could not read the action mapping {_short_repr(action)}; use tool "
                                  f"sql/python/answer.")
                return check_action(parsed)
            if isinstance(action, (bytes, bytearray)):
                action = bytes(action).decode("utf-8")
            if not isinstance(action, str):
                return None, (f"Could not read an action of type {type(action).__name__}; send text, a mapping "
                              f"or an SqlAction/PythonAction/AnswerAction.")
            return check_action(parse_action(action))
        except ActionParseError as exc:
            return None, str(exc)
        except UnicodeDecodeError:
            return None, "Could not read the action: its bytes are not UTF-8 text."
        except (RecursionError, MemoryError, ValueError, TypeError) as exc:
            return None, f"Could not read the action ({type(exc).__name__}); send a shorter, flatter tool call."

    def _run_handler(self, action: Action) -> tuple[Observation, dict[str, Any]]:
        """Run a tool; an exception (an environment bug an agent's input provoked) becomes an observation."""
        offered = getattr(self.profile, "tools", None)
        if offered and action.tool not in offered:   # a profile that names its tools offers only those
            msg = f"The {action.tool} tool is not offered in this episode; use {', '.join(offered)}."
            return Observation(text=msg, kind="invalid", error=msg), {"tool": action.tool, "error": msg}
        try:
            return ACTION_HANDLERS[type(action)](self._tools, action)
        except InfrastructureError:  # not the agent's doing (the episode's data could not be served): retried
            raise
        except Exception as exc:  # noqa: BLE001 - nothing an agent sends may stop the episode or the run
            tool = getattr(action, "tool", "invalid")
            msg = (f"The environment could not run this {tool} call ({type(exc).__name__}: "
                   f"{str(exc)[:300]}); try a simpler call.")
            if tool == "sql" and not isinstance(exc, (RecursionError, ValueError, TypeError)):
                self.conn.healthy = False      # replaced at the next reset()
            return (Observation(text=msg, kind=tool, error=msg),
                    {"tool": tool, "error": msg, "error_kind": "internal"})

    def _end_without_answer(self, termination: str, obs: Observation, note: str) -> float:
        assert self.task is not None and self.trajectory is not None
        self.done = True
        self.verdict = verify(self.task, None, self.config.scoring)
        self.trajectory.termination = termination
        obs.text += f"\n{note}"
        return self.verdict.reward

    def _task_by_id(self, task_id: str) -> Task:
        if self.benchmark is None:
            raise EnvironmentStateError("reset() got a task id but no benchmark is attached; pass a Task or use "
                                        "EhrEnv.from_benchmark(bench_dir, db_path)")
        try:
            return self.benchmark.task(task_id)  # an internal task id or the public id agents see
        except KeyError:
            raise EnvironmentStateError(f"task {task_id!r} is not in the benchmark") from None

    def _task_text(self, task: Task) -> str:
        cfg = self.config
        profile = self.profile
        described = profile.description if profile is not None else "a MIMIC-IV hospital database"
        now = f' Take the current time to be {profile.current_time}.' if profile is not None and \
            profile.current_time else ""
        dialect = " (DuckDB SQL)" if "sql" in self.tools else ""
        parts = [f"Question: {task.question}", "",
                 f"You are working with {described}{dialect}.{now} Explore it with the tools "
                 "below, then answer or abstain.", "",
                 "Tools:", self._tool_text(), "", self._protocol(), ""]
        if cfg.schema_summary:
            parts += [self._schema_summary(), ""]
        parts.append(f"You have {cfg.max_steps} steps (tool calls, the final answer included).")
        return self._truncate("\n".join(parts))

    def _schemas(self) -> tuple[str, ...]:
        """The schemas the episode exposes (its profile's; MIMIC-IV's by default)."""
        return tuple(self.profile.schemas) if self.profile is not None else tuple(EXPOSED_SCHEMAS)

    def _protocol(self) -> str:
        """The answer protocol shown to the agent: the gym's, or the FHIR tools' (MedAgentBench)."""
        return _fhirtool.PROTOCOL if "fhir_get" in self.tools else protocol_text()

    def _tool_text(self) -> str:
        return tool_descriptions(self.tools, self._schemas())

    def _schema_summary(self) -> str:
        if self.profile is None or self.profile.name == "mimic-iv":
            return schema_summary()
        if getattr(self.profile, "summary", None):   # a FHIR server's functions instead of tables
            return str(self.profile.summary)
        if getattr(self, "_profile_summary", None) is None:
            self._profile_summary = schema_summary(self.profile)
        return self._profile_summary

    def _drop_worker(self) -> None:
        if self._worker is not None:
            try:
                self._worker.close()
            except Exception:  # noqa: BLE001 - a dead worker is simply dropped
                pass
            self._worker = None

    def _python_worker(self) -> Any:
        if self._worker is not None and getattr(self._worker, "alive", True):
            return self._worker
        self._worker = None
        if self._python_pool is None:
            from ehrgym.env.pyworker import PythonLimits, PythonWorkerPool, SandboxUnavailable

            if self._python_refusal is not None:  # the host has no sandbox: say so again, without retrying
                raise SandboxUnavailable(self._python_refusal)
            limits = self.config.python_limits if self.config.python_limits is not None else PythonLimits()
            try:
                self._python_pool = PythonWorkerPool(limits, warm=self.config.python_warm,
                                                     allow_unisolated=self.config.python_unsafe)
            except SandboxUnavailable as exc:
                self._python_refusal = str(exc)
                raise
        self._worker = self._python_pool.acquire()
        return self._worker

    def _truncate(self, text: str) -> str:
        limit = self.config.max_observation_chars
        if len(text) <= limit:
            return text
        note = f"\n[output truncated to {limit} characters]"
        return text[:max(0, limit - len(note))] + note


@action_handler(SqlAction)
def _sql_step(ctx: ToolContext, action: SqlAction) -> tuple[Observation, dict[str, Any]]:
    out = ctx.run_sql(action.query)
    text = ctx.clip(format_outcome(out, ctx.config.sql))
    obs = Observation(text=text, kind="sql", columns=out.columns, rows=out.rows, row_count=out.row_count,
                      truncated=out.truncated, error=out.error)
    return obs, {"tool": "sql", **out.info()}


@action_handler(PythonAction)
def _python_step(ctx: ToolContext, action: PythonAction) -> tuple[Observation, dict[str, Any]]:
    if not ctx.config.python:
        msg = "The python tool is disabled in this environment; use sql or answer."
        return Observation(text=msg, kind="python", error=msg), {"tool": "python", "error": msg}
    try:
        worker = ctx.python_worker()
    except (ImportError, InfrastructureError) as exc:
        msg = f"The python tool is unavailable ({exc}); use sql or answer."
        return Observation(text=msg, kind="python", error=msg), {"tool": "python", "error": msg}
    sql_calls = {"n": 0}

    def sql(query: str) -> Any:
        sql_calls["n"] += 1
        return ctx.sql_frame_pickled(query)

    result = worker.run(action.code, sql)
    parts = []
    if result.output:
        parts.append(result.output.rstrip("\n"))
    if result.error:
        parts.append(result.error.rstrip("\n"))
    if result.truncated:
        parts.append("[output truncated]")
    if result.killed:  # result.error already holds the one note on why (pyworker.kill_message)
        ctx.drop_python_worker()
    text = ctx.clip("\n".join(parts) if parts else "(no output)")
    obs = Observation(text=text, kind="python", error=result.error or (result.killed and f"killed: {result.killed}"))
    info = {"tool": "python", "python_seconds": result.seconds, "killed": result.killed,
            "error": result.error, "truncated": result.truncated, "sql_calls": sql_calls["n"]}
    return obs, info


@action_handler(AnswerAction)
def _answer_step(ctx: ToolContext, action: AnswerAction) -> tuple[Observation, dict[str, Any]]:
    if action.is_abstain:
        text = f"Abstention recorded ({action.abstain}). The episode is over."
    else:
        text = f"Answer recorded ({action.value!r}). The episode is over."
    return Observation(text=text, kind="answer"), {"tool": "answer"}


def _short_repr(value: Any, limit: int = 200) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# the FHIR tools (fhir_get, fhir_post) register their handlers here; an episode offers them when its
# schema profile names them (ehrgym.db.profile.SchemaProfile.tools)
from ehrgym.env import fhirtool as _fhirtool  # noqa: E402,F401
