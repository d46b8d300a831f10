"""Live episodes of the episode server, independent of any web framework.

A :class:`SessionManager` serves one built benchmark over one database. Each session holds one
:class:`~ehrgym.env.episode.EhrEnv`; all of them share one warm
:class:`~ehrgym.env.pool.ConnectionPool`, one SQL gate and one Python worker pool, so starting a
session costs a pooled connection, not a new database. Environments of closed sessions are kept
(up to ``max_sessions``) and reused by the next session.

- **Capacity**: at most ``max_sessions`` live sessions; one more gets :class:`ServerFull` (HTTP 429).
- **Per-session lock**: steps of one session run one at a time, sessions run in parallel.
- **Reaping**: a background thread closes sessions idle for ``idle_timeout_s`` (an unfinished
  episode is aborted); a later request for one says it was reaped.
- **Idempotent retries**: a request that carries a ``request_id`` already answered is answered
  again from the cache with the same body, without running anything a second time (a retried
  ``reset`` does not start a second session, a retried ``step`` does not cost a second step).
- **Restarts**: session ids carry the server run's id, so a request for a session of an earlier
  run is told that the server restarted and the episode is lost.

Responses are JSON-ready dicts shaped like OpenEnv's (``observation``, ``reward``, ``done``)
plus Gymnasium's ``terminated``/``truncated`` and the environment's ``info``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import math
import random
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ehrgym.bench.task import Task
from ehrgym.env.episode import EhrEnv, EnvConfig, Observation, StepResult, public_info
from ehrgym.errors import EnvironmentStateError
from ehrgym.serve.errors import BadRequest, EpisodeOver, PayloadTooLarge, ServerFull, SessionNotFound, UnknownTask

#: what ``/tasks`` shows of a task: nothing that reveals its variant, noise subtype, pair or answer
PUBLIC_TASK_FIELDS: tuple[str, ...] = ("task_id", "question", "intent", "level", "split")


@dataclass(frozen=True)
class ServeConfig:
    """Limits of an episode server."""

    max_sessions: int = 64
    idle_timeout_s: float = 300.0        # a session without a request for this long is reaped
    reap_interval_s: float | None = None  # how often to look (None: a quarter of idle_timeout_s, 0.05–30 s)
    split: str | None = None             # serve only this split's tasks (None: all)
    warm_connections: int = 4            # connections the shared pool keeps ready
    max_action_chars: int = 200_000      # a longer action is refused with 413
    replay_cache: int = 16               # answered requests kept per session for retries
    env: EnvConfig = field(default_factory=EnvConfig)

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if self.idle_timeout_s <= 0:
            raise ValueError("idle_timeout_s must be positive")


def public_task(task: Task) -> dict[str, Any]:
    """A task's public metadata: its opaque public id, question, intent, level and split."""
    return {"task_id": task.public_id, "question": task.question, "intent": task.intent,
            "level": task.level, "split": task.split}


def jsonable(value: Any) -> Any:
    """``value`` with every leaf JSON-serialisable (dates as ISO text, decimals as numbers, NaN as None)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return jsonable(float(value))
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if hasattr(value, "item"):  # numpy scalars
        try:
            return jsonable(value.item())
        except Exception:  # noqa: BLE001 - fall back to text
            pass
    return str(value)


def observation_dict(obs: Observation) -> dict[str, Any]:
    return jsonable(dataclasses.asdict(obs))


def step_dict(result: StepResult, session_id: str) -> dict[str, Any]:
    return {"session_id": session_id, "observation": observation_dict(result.observation),
            "reward": float(result.reward), "done": result.done, "terminated": result.terminated,
            "truncated": result.truncated, "info": jsonable(public_info(result.info))}


@dataclass
class Session:
    session_id: str
    env: EhrEnv
    created: float
    last_active: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    episodes: int = 0
    responses: "OrderedDict[str, dict[str, Any]]" = field(default_factory=OrderedDict)


class SessionManager:
    """Sessions over one benchmark and one database; see the module docstring."""

    def __init__(self, bench_dir: str | Path, db_path: str | Path, config: ServeConfig = ServeConfig(), *,
                 reaper: bool = True) -> None:
        from ehrgym.bench.dataset import load_benchmark
        from ehrgym.env.gate import SqlGate
        from ehrgym.env.pool import ConnectionPool, database_profile

        self.config = config
        self.bench_dir, self.db_path = Path(bench_dir), Path(db_path)
        self.benchmark = load_benchmark(self.bench_dir)
        tasks = list(self.benchmark.tasks)
        if config.split is not None:
            tasks = [t for t in tasks if t.split == config.split]
        if not tasks:
            raise UnknownTask(f"the benchmark {self.bench_dir} has no tasks in split {config.split!r}")
        self.tasks = tasks
        # reset() takes the public id agents see (and, like the Gymnasium wrapper, an internal id)
        self._by_id = {**{t.public_id: t for t in tasks}, **{t.task_id: t for t in tasks}}
        self.run_id = secrets.token_hex(4)   # this server run; part of every session id
        self.started = time.time()
        self.pool = ConnectionPool(self.db_path, config.env.connection, warm=config.warm_connections)
        self.gate = SqlGate(duckdb_check=config.env.gate_check, profile=database_profile(self.db_path))
        self.python_pool = self._python_pool()
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._spare: list[EhrEnv] = []
        self._ended: OrderedDict[str, str] = OrderedDict()   # session id -> why it ended (closed | reaped)
        self._reset_ids: OrderedDict[str, str] = OrderedDict()  # reset request id -> session id
        self._counter = 0
        self._turn = 0                                  # the next task of a reset without task_id
        self.reaped = 0
        self.episodes_started = 0    # resets run (a retried reset is not counted twice)
        self.episodes_ended = 0      # episodes that reached terminated or truncated through step
        self._closed = False
        try:  # refuse a database the benchmark was not built on, as EhrEnv.from_benchmark does
            env = self._new_env()
            env.check_manifest(getattr(self.benchmark, "manifest", {}) or {}, source=str(self.bench_dir))
            self._spare.append(env)
        except Exception:
            self.close()
            raise
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        if reaper:
            self._reaper = threading.Thread(target=self._reap_loop, name="ehrgym-serve-reaper", daemon=True)
            self._reaper.start()

    # -- public operations ------------------------------------------------------------------
    def public_tasks(self, split: str | None = None) -> list[dict[str, Any]]:
        return [public_task(t) for t in self.tasks if split is None or t.split == split]

    def health(self) -> dict[str, Any]:
        with self._lock:
            active = len(self._sessions)
        return {"status": "healthy" if not self._closed else "closing", "server_run": self.run_id,
                "active_sessions": active, "max_sessions": self.config.max_sessions,
                "idle_timeout_s": self.config.idle_timeout_s, "reaped": self.reaped, "tasks": len(self.tasks),
                "episodes_started": self.episodes_started, "episodes_ended": self.episodes_ended,
                "uptime_s": round(time.time() - self.started, 3)}

    def reset(self, task_id: Any = None, session_id: str | None = None, request_id: str | None = None,
              seed: Any = None) -> dict[str, Any]:
        """Start an episode on ``task_id``: in a new session, or in ``session_id``'s (a new episode there).

        Without ``task_id`` (an OpenEnv client's plain reset) the task is drawn: by ``seed`` when
        given (the same seed, the same task), else the served tasks in turn."""
        request_id = _request_id(request_id)
        task = self._pick(task_id, seed)
        if session_id is not None:
            session = self._get(session_id)
            return self._locked(session, request_id, lambda: self._reset_in(session, task))
        with self._lock:
            if request_id is not None and request_id in self._reset_ids:  # a retried reset
                found = self._sessions.get(self._reset_ids[request_id])
                if found is None:
                    raise SessionNotFound(self._gone(self._reset_ids[request_id]))
                session = found
            else:
                session = self._open_session_locked(request_id)
        return self._locked(session, request_id, lambda: self._reset_in(session, task), fresh=True)

    def step(self, session_id: Any, action: Any, request_id: str | None = None) -> dict[str, Any]:
        """Run one action (a tool-call mapping or action text) in ``session_id``'s episode."""
        request_id = _request_id(request_id)
        if not isinstance(action, (str, dict)):
            raise BadRequest(f"action must be a tool call object ({{\"tool\": \"sql\", \"query\": ...}}) or action "
                             f"text, got {type(action).__name__}; see GET /schema")
        if _size(action) > self.config.max_action_chars:
            raise PayloadTooLarge(f"the action is longer than {self.config.max_action_chars} characters")
        session = self._get(session_id)

        def run() -> dict[str, Any]:
            env = session.env
            if env is None or env.task is None:
                raise EpisodeOver("this session has no episode yet; POST /reset with its session_id and a task_id")
            if env.done:
                raise EpisodeOver("the episode is over; start another with POST /reset (the session_id may be "
                                  "reused) or close the session")
            out = step_dict(env.step(action), session.session_id)
            if out["done"]:
                with self._lock:
                    self.episodes_ended += 1
            return out

        return self._locked(session, request_id, run)

    def state(self, session_id: Any) -> dict[str, Any]:
        """OpenEnv's ``State``: ``episode_id`` and ``step_count``, plus the episode's public fields."""
        session = self._get(session_id)
        with session.lock:
            env = session.env
            if env is None:
                return {"episode_id": session.session_id, "session_id": session.session_id, "step_count": 0,
                        "task_id": None, "done": True, "steps_left": 0, "episodes": 0, "idle_s": 0.0}
            return {"episode_id": session.session_id, "session_id": session.session_id,
                    "step_count": env.steps if env.task is not None else 0,
                    "task_id": env.task.public_id if env.task is not None else None,
                    "done": bool(env.done), "steps_left": max(0, env.config.max_steps - env.steps),
                    "episodes": session.episodes, "idle_s": round(time.time() - session.last_active, 3)}

    def close_session(self, session_id: Any) -> dict[str, Any]:
        """End a session (an unfinished episode is aborted); closing a closed session is a no-op."""
        if not isinstance(session_id, str):
            raise BadRequest("close needs session_id (a string, from POST /reset)")
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                why = self._ended.get(session_id)
                if why is not None:
                    return {"session_id": session_id, "closed": True, "already": why}
                raise SessionNotFound(self._gone(session_id))
        with session.lock:
            self._end(session, "closed")
        return {"session_id": session_id, "closed": True}

    def reap(self, now: float | None = None) -> list[str]:
        """Close the sessions idle for longer than ``idle_timeout_s`` (busy ones are skipped)."""
        now = time.time() if now is None else now
        with self._lock:
            idle = [s for s in self._sessions.values() if now - s.last_active > self.config.idle_timeout_s]
        done = []
        for session in idle:
            if not session.lock.acquire(blocking=False):
                continue  # a request is running: not idle
            try:
                if not session.closed and now - session.last_active > self.config.idle_timeout_s:
                    self._end(session, "reaped")
                    self.reaped += 1
                    done.append(session.session_id)
            finally:
                session.lock.release()
        return done

    def close(self) -> None:
        """Close every session and the shared pools."""
        self._closed = True
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            with s.lock:
                self._end(s, "closed")
        with self._lock:
            spare, self._spare = self._spare, []
        for env in spare:
            _quiet(env.close)
        if self.python_pool is not None:
            _quiet(self.python_pool.close)
        _quiet(self.gate.close)
        _quiet(self.pool.close)

    def __enter__(self) -> "SessionManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------
    def _pick(self, task_id: Any, seed: Any) -> Task:
        if task_id is None:
            if seed is not None:
                if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                    raise BadRequest("seed must be a non-negative integer")
                return self.tasks[random.Random(seed).randrange(len(self.tasks))]
            with self._lock:
                self._turn += 1
                return self.tasks[(self._turn - 1) % len(self.tasks)]
        if not isinstance(task_id, str) or not task_id:
            raise BadRequest("task_id must be a task's public id as listed by GET /tasks")
        task = self._by_id.get(task_id)
        if task is None:
            raise UnknownTask(f"task {task_id[:100]!r} is not served here; list the served tasks with GET /tasks")
        return task

    def _python_pool(self) -> Any:
        cfg = self.config.env
        if not cfg.python:
            return None
        try:
            from ehrgym.env.pyworker import PythonLimits, PythonWorkerPool

            limits = cfg.python_limits if cfg.python_limits is not None else PythonLimits()
            return PythonWorkerPool(limits, warm=max(1, cfg.python_warm), allow_unisolated=cfg.python_unsafe)
        except Exception:  # noqa: BLE001 - no sandbox here: each env says so when the python tool is called
            return None

    def _new_env(self) -> EhrEnv:
        # no result cache for remote clients: a hit is faster, and a client can time its requests
        env = EhrEnv(self.db_path, dataclasses.replace(self.config.env, result_cache=0), pool=self.pool,
                     python_pool=self.python_pool, gate=self.gate)
        env.benchmark = self.benchmark
        return env

    def _open_session_locked(self, request_id: str | None) -> Session:
        if self._closed:
            raise SessionNotFound("the server is shutting down; no new sessions")
        if len(self._sessions) >= self.config.max_sessions:
            raise ServerFull(f"the episode server is full: {len(self._sessions)} of {self.config.max_sessions} "
                             f"sessions are in use; close finished sessions (POST /close) or retry later "
                             f"(idle sessions are reaped after {self.config.idle_timeout_s:g} s)",
                             active_sessions=len(self._sessions), max_sessions=self.config.max_sessions)
        self._counter += 1
        sid = f"{self.run_id}-{self._counter:06d}-{secrets.token_hex(4)}"
        env = self._spare.pop() if self._spare else None
        now = time.time()
        # the env is built outside the manager lock below when none is spare (placeholder None)
        session = Session(sid, env, now, now)  # type: ignore[arg-type]
        self._sessions[sid] = session
        if request_id is not None:
            _remember(self._reset_ids, request_id, sid, 4096)
        return session

    def _reset_in(self, session: Session, task: Task) -> dict[str, Any]:
        if session.env is None:
            session.env = self._new_env()
        env = session.env
        if env.task is not None and not env.done:
            env.abort("reset")
        obs = env.reset(task)
        session.episodes += 1
        with self._lock:
            self.episodes_started += 1
        info = {"task_id": task.public_id, "intent": task.intent, "level": task.level,
                "max_steps": env.config.max_steps}
        return {"session_id": session.session_id, "observation": observation_dict(obs), "reward": None,
                "done": False, "terminated": False, "truncated": False, "info": info}

    def _locked(self, session: Session, request_id: str | None, run: Any, fresh: bool = False) -> dict[str, Any]:
        """Run ``run`` under the session's lock, once per ``request_id``."""
        with session.lock:
            if session.closed:
                raise SessionNotFound(self._gone(session.session_id))
            if request_id is not None and request_id in session.responses:
                session.last_active = time.time()
                return session.responses[request_id]
            try:
                out = run()
            except EpisodeOver:
                raise
            except EnvironmentStateError as exc:
                if fresh:
                    self._abandon(session, request_id)
                raise EpisodeOver(str(exc)) from exc
            except Exception:
                if fresh:  # a session whose first reset failed is not left behind
                    self._abandon(session, request_id)
                raise
            session.last_active = time.time()
            if request_id is not None:
                _remember(session.responses, request_id, out, self.config.replay_cache)
            return out

    def _abandon(self, session: Session, request_id: str | None) -> None:
        """Drop a new session whose first reset failed; a retry of that reset runs afresh."""
        self._end(session, "closed")
        if request_id is not None:
            with self._lock:
                if self._reset_ids.get(request_id) == session.session_id:
                    del self._reset_ids[request_id]

    def _get(self, session_id: Any) -> Session:
        if not isinstance(session_id, str) or not session_id:
            raise BadRequest("session_id (a string, from POST /reset) is required")
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(self._gone(session_id))
        return session

    def _gone(self, session_id: str) -> str:
        why = self._ended.get(session_id)
        shown = session_id[:80]
        if why == "reaped":
            return (f"session {shown} was closed after {self.config.idle_timeout_s:g} s without requests; its "
                    f"episode is lost; start a new one with POST /reset")
        if why is not None:
            return f"session {shown} is closed; start a new episode with POST /reset"
        if not session_id.startswith(self.run_id + "-"):
            return (f"session {shown} is not known to this server run ({self.run_id}): the server restarted or "
                    f"the id is wrong; its episode is lost; start a new one with POST /reset")
        return f"session {shown} does not exist; start an episode with POST /reset"

    def _end(self, session: Session, why: str) -> None:
        """Close ``session`` (its lock held): abort its episode, keep its env for reuse."""
        if session.closed:
            return
        session.closed = True
        env = session.env
        with self._lock:
            self._sessions.pop(session.session_id, None)
            _remember(self._ended, session.session_id, why, 4096)
        if env is None:
            return
        try:
            if env.task is not None and not env.done:
                env.abort("aborted")
        except Exception:  # noqa: BLE001 - a broken env is closed below instead of reused
            _quiet(env.close)
            return
        with self._lock:
            if not self._closed and len(self._spare) < self.config.max_sessions:
                self._spare.append(env)
                return
        _quiet(env.close)

    def _reap_loop(self) -> None:
        cfg = self.config
        interval = cfg.reap_interval_s if cfg.reap_interval_s is not None else \
            min(30.0, max(0.05, cfg.idle_timeout_s / 4))
        while not self._stop.wait(interval):
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - the reaper keeps going
                pass


def _request_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 255:
        raise BadRequest("request_id must be a non-empty string of at most 255 characters")
    return value


def _size(action: Any) -> int:
    if isinstance(action, str):
        return len(action)
    return sum(len(str(k)) + (len(v) if isinstance(v, str) else len(str(v))) for k, v in action.items())


def _remember(cache: OrderedDict, key: str, value: Any, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def _quiet(fn: Any) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - cleanup must not fail the request
        pass
