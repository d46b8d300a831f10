"""Evaluation runs: an agent × a task set × k trials, concurrent, durable and resumable.

``run_evaluation(bench_dir, db_path, agent_name, out_dir, k=4, workers=N)`` runs every
``(task, trial)`` episode not yet in ``out_dir/episodes.jsonl`` and appends one
:class:`~ehrgym.eval.records.EpisodeRecord` per finished episode (see :mod:`ehrgym.eval.store`
for the durability contract). Rerunning the same call resumes where a crash left off.

Concurrency follows the agent's declared :class:`~ehrgym.agents.base.Concurrency`: CPU-bound
scripted agents run in worker *processes* (each with its own environment), API agents in
*threads* (each with its own environment and agent). Only the main process writes the store.

Every episode ends with a termination reason: ``answered``, ``abstained``, ``step_limit``,
``time_limit`` (the episode's wall-clock budget ran out between steps), ``agent_error`` (the
agent raised; scored as a failure with ``failure='no_answer'``) or ``infrastructure_error``
(a model server failed after the agent's own retries; the episode is retried
``episode_retries`` times, then recorded with ``success_*=None`` so metrics exclude it from
denominators and count it).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing as mp
import multiprocessing.util
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement
from ehrgym.agents.registry import get_agent_entry, make_agent
from ehrgym.env.actions import AnswerAction
from ehrgym.errors import BenchmarkError, EhrGymError, InfrastructureError
from ehrgym.eval.records import EpisodeRecord
from ehrgym.eval.store import EpisodeStore, RunStoreError, encode_record, read_run_config, write_run_config

TaskFilter = Sequence[str] | Callable[[Any], bool] | dict[str, Any] | None

BACKENDS: tuple[str, ...] = ("local", "ray")   # where episodes run; not part of a run's identity
# run.json keys that must agree between a run directory and a resumed run
_IDENTITY_KEYS = ("agent", "model", "bench_content_hash", "db_content_hash", "seed", "agent_kwargs", "env_config")
_SECRET_KWARGS = ("api_key", "client", "sleep")
# how to reach a server, not what is evaluated: may change when a run is resumed
_OPERATIONAL_KWARGS = ("base_url", "timeout", "max_retries", "backoff_base", "backoff_max")


@dataclass
class RunSummary:
    run_dir: str
    run_id: str
    agent: str
    model: str | None
    planned: int                 # (task, trial) keys of this call
    skipped: int                 # already finished before this call
    ran: int                     # finished by this call
    terminations: dict[str, int] = field(default_factory=dict)   # over the whole run directory
    success_clean: float | None = None                           # strict, infra errors excluded
    success_noise: float | None = None
    infrastructure_errors: int = 0
    wall_seconds: float = 0.0
    episodes_per_second: float = 0.0
    repaired_bytes: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # setup, run loop, store writes, episodes (sum)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# one episode
# ---------------------------------------------------------------------------------------------
def episode_seed(run_seed: int, task_id: str, trial: int) -> int:
    digest = hashlib.sha256(f"{run_seed}:{task_id}:{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def make_briefing(agent: Agent, task: Any, trial: int, seed: int) -> Briefing:
    """What ``agent`` is entitled to know about ``task`` (see :class:`~ehrgym.agents.base.Entitlement`)."""
    level = agent.entitlement
    return Briefing(
        task_id=task.public_id, trial=trial, question=task.question, seed=seed,  # the opaque id, never the internal one
        draft_sql=task.naive_sql if level in (Entitlement.DRAFT, Entitlement.PRIVILEGED) else None,
        answer_type=task.expected.answer.type if level in (Entitlement.DRAFT, Entitlement.PRIVILEGED) else None,
        task=task if level is Entitlement.PRIVILEGED else None,
    )


@dataclass
class WorkerConfig:
    db_path: str
    agent_name: str
    agent_kwargs: dict[str, Any]
    env_config: dict[str, Any]
    run_id: str
    seed: int
    episode_time_limit: float | None
    episode_retries: int
    result_store: str | None = None  # a directory of query results shared across runs (EhrEnv's result_store)


class EpisodeWorker:
    """One environment + one agent, running episodes into :class:`EpisodeRecord` dicts."""

    def __init__(self, cfg: WorkerConfig) -> None:
        from ehrgym.env.episode import EhrEnv, EnvConfig

        self.cfg = cfg
        env_config = dict(cfg.env_config)
        if cfg.episode_time_limit is not None:  # the environment owns the one wall-clock limit
            env_config["episode_timeout_s"] = cfg.episode_time_limit
        self.env = EhrEnv(cfg.db_path, EnvConfig(**env_config), result_store=cfg.result_store)
        self.agent = make_agent(cfg.agent_name, **cfg.agent_kwargs)
        self._unsafe_label: str | None = None
        if cfg.env_config.get("python_unsafe"):
            sandbox = python_sandbox(cfg.env_config)
            if sandbox is not None and sandbox["unsafe"]:
                self._unsafe_label = sandbox["label"]

    def close(self) -> None:
        try:
            self.agent.close()
        finally:
            self.env.close()

    def run(self, task: Any, trial: int) -> dict[str, Any]:
        last: InfrastructureError | None = None
        attempts = self.cfg.episode_retries + 1
        start = time.perf_counter()
        for _ in range(attempts):
            try:
                return self._episode(task, trial)
            except InfrastructureError as exc:
                last = exc
                if self.env.trajectory is not None and not self.env.done:
                    self.env.abort("infrastructure_error")
        steps = len(self.env.trajectory.steps) if self.env.trajectory is not None else 0
        return self._record(task, trial, termination="infrastructure_error", verdict=None, final=None,
                            steps=steps, sql_errors=0, wall=time.perf_counter() - start,
                            error=f"{last} (after {attempts} episode attempts)", trajectory=self._trajectory())

    def _episode(self, task: Any, trial: int) -> dict[str, Any]:
        env, agent = self.env, self.agent
        start = time.perf_counter()
        observation = env.reset(task)
        agent.reset(observation, make_briefing(agent, task, trial, episode_seed(self.cfg.seed, task.task_id, trial)))
        final: AnswerAction | None = None
        error: str | None = None
        steps = sql_errors = 0
        while not env.done:
            if env.expired:   # the agent's own thinking used up the episode's time
                env.abort("time_limit")
                break
            before = _usage_snapshot(agent)
            try:
                action = agent.act(observation)
            except InfrastructureError:
                raise
            except Exception as exc:  # an agent bug or AgentError: the episode fails, the run goes on
                error = f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, EhrGymError):
                    error += "\n" + traceback.format_exc(limit=6)
                env.abort("agent_error")
                break
            try:
                result = env.step(action, usage=_usage_delta(before, agent))
            except InfrastructureError:   # e.g. a grader's server is unreachable: retried, then recorded as such
                raise
            except Exception as exc:  # noqa: BLE001 - step() turns agent input into observations; anything
                # left is an environment bug this episode provoked: record it, keep the run going
                error = f"environment error on step {steps + 1}: {type(exc).__name__}: {str(exc)[:500]}"
                try:
                    if not env.done:
                        env.abort("agent_error")
                except Exception as again:  # noqa: BLE001 - scoring itself fails: retried, then an infra error
                    raise InfrastructureError(f"{error}; ending the episode failed too: {again}") from exc
                break
            steps += 1
            observation = result.observation
            if result.info.get("error") and result.info.get("tool") in ("sql", "python"):
                sql_errors += 1
            if isinstance(action, AnswerAction):
                final = action
        trajectory = env.trajectory
        termination = trajectory.termination if trajectory is not None and trajectory.termination else "step_limit"
        return self._record(task, trial, termination=termination, verdict=env.verdict, final=final, steps=steps,
                            sql_errors=sql_errors, wall=time.perf_counter() - start, error=error,
                            trajectory=self._trajectory())

    def _trajectory(self) -> dict[str, Any]:
        traj = self.env.trajectory
        data: dict[str, Any] = trajectory_dict(traj) if traj is not None else {}
        if self._unsafe_label is not None:
            data["python_sandbox"] = self._unsafe_label   # every record of an unsafe run says so
        agent_part: dict[str, Any] = {"usage": self.agent.usage.to_dict()}
        transcript = getattr(self.agent, "transcript", None)
        if callable(transcript):
            agent_part["messages"] = transcript()
        data["agent"] = agent_part
        return data

    def _record(self, task: Any, trial: int, *, termination: str, verdict: Any, final: AnswerAction | None,
                steps: int, sql_errors: int, wall: float, error: str | None,
                trajectory: dict[str, Any]) -> dict[str, Any]:
        usage = self.agent.usage
        noise = task.noise
        infra = termination == "infrastructure_error"
        rec = EpisodeRecord(
            run_id=self.cfg.run_id, agent=self.cfg.agent_name, model=self.agent.model,
            task_id=task.task_id, pair_id=task.pair_id, trial=trial, variant=task.variant, intent=task.intent,
            level=task.level, template_id=task.template_id,
            noise_level=noise.level if noise else None, noise_subtype=noise.subtype if noise else None,
            split=task.split, expected_kind=task.expected.kind, expected_reason=task.expected.reason,
            termination=termination,
            success_strict=None if infra else bool(verdict.success_strict),
            success_lenient=None if infra else bool(verdict.success_lenient),
            failure=None if infra else verdict.failure,
            answered_value=_jsonable(final.value) if final is not None and not final.is_abstain else None,
            abstain_reason=final.abstain if final is not None else None,
            steps=steps, sql_errors=sql_errors, wall_seconds=round(wall, 6),
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cost_usd=round(usage.cost_usd, 8), error=error, trajectory=trajectory,
        )
        return {f.name: getattr(rec, f.name) for f in _RECORD_FIELDS}  # == rec.to_dict(), without a deep copy


_RECORD_FIELDS = fields(EpisodeRecord)


def trajectory_dict(traj: Any) -> dict[str, Any]:
    """``Trajectory.to_dict()`` without ``dataclasses.asdict``'s deep copy (a hot path: the
    runner serialises every episode at once). Equality with ``to_dict()`` is unit-tested."""
    data = {f.name: getattr(traj, f.name) for f in fields(traj)}
    data["steps"] = [{f.name: getattr(s, f.name) for f in fields(s)} for s in traj.steps]
    data["prompt_tokens"] = traj.prompt_tokens
    data["completion_tokens"] = traj.completion_tokens
    return data


def _usage_snapshot(agent: Agent) -> tuple[int, int, int, float]:
    u = agent.usage
    return (u.prompt_tokens, u.completion_tokens, u.calls, u.latency_s)


def _usage_delta(before: tuple[int, int, int, float], agent: Agent) -> dict[str, Any] | None:
    now = _usage_snapshot(agent)
    if now[2] == before[2]:
        return None
    return {"prompt_tokens": now[0] - before[0], "completion_tokens": now[1] - before[1],
            "calls": now[2] - before[2], "latency_s": round(now[3] - before[3], 6)}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if hasattr(value, "item"):
            return value.item()
        if isinstance(value, (set, frozenset, tuple)):
            return [_jsonable(v) for v in value]
        return str(value)


# ---------------------------------------------------------------------------------------------
# process workers (CPU-bound agents)
# ---------------------------------------------------------------------------------------------
_PROCESS_WORKER: EpisodeWorker | None = None   # per worker process (set by the pool initializer)
_PROCESS_ERROR: str | None = None


def _process_init(cfg: WorkerConfig) -> None:
    global _PROCESS_WORKER, _PROCESS_ERROR
    try:
        _PROCESS_WORKER = EpisodeWorker(cfg)
        # close env/agent (and any Python-tool worker processes) when the pool shuts this process down
        mp.util.Finalize(_PROCESS_WORKER, _PROCESS_WORKER.close, exitpriority=10)
    except Exception as exc:  # reported by the first chunk, so the run stops with the real cause
        _PROCESS_ERROR = f"{type(exc).__name__}: {exc}"


Encoded = tuple[str, str, "bool | None", float]  # (JSON line, variant, success_strict, wall_seconds)


def _encoded(record: dict[str, Any]) -> Encoded:
    return (encode_record(record), record["variant"], record["success_strict"], float(record["wall_seconds"]))


def _process_chunk(items: list[tuple[Any, int]]) -> list[Encoded]:
    """Run a chunk in a worker process; records come back JSON-encoded (the main process only writes)."""
    if _PROCESS_WORKER is None:
        raise EhrGymError(f"a worker process could not start its environment/agent: {_PROCESS_ERROR}")
    return [_encoded(_PROCESS_WORKER.run(task, trial)) for task, trial in items]


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------
def spread_pair_order(tasks: Sequence[Any]) -> list[str]:
    """The pair ids of ``tasks`` in the order ``limit_pairs`` takes them: round robin over (intent, noise subtype)
    groups, each group in a fixed hashed order. Any prefix spreads over intents and subtypes (the benchmark's own
    order — template ids — would fill a small limit with one intent), it does not depend on the order the tasks
    come in, and a longer limit extends a shorter one (a resumed run with a larger limit keeps what it ran)."""
    group_of: dict[str, tuple[str, str]] = {}
    for t in tasks:
        noise = getattr(t, "noise", None)
        subtype = str(getattr(noise, "subtype", "") or "") if noise is not None else ""
        key = (str(getattr(t, "intent", "") or ""), subtype)
        group_of[t.pair_id] = max(group_of.get(t.pair_id, key), key)  # the pair's noisy twin names its subtype
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pair, key in group_of.items():
        groups[key].append(pair)
    queues = [sorted(pairs, key=lambda p: (hashlib.sha256(str(p).encode()).hexdigest(), str(p)))
              for _, pairs in sorted(groups.items())]
    order: list[str] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        order += [q[rank] for q in queues if rank < len(q)]
    return order


def select_tasks(tasks: Sequence[Any], task_filter: TaskFilter = None, limit_pairs: int | None = None) -> list[Any]:
    """Tasks kept by ``task_filter`` (ids, predicate or ``{field: value | [values]}``); with ``limit_pairs``, the
    first N pairs of :func:`spread_pair_order` (spread over intents and noise subtypes)."""
    if task_filter is None:
        kept = list(tasks)
    elif callable(task_filter):
        kept = [t for t in tasks if task_filter(t)]
    elif isinstance(task_filter, dict):
        def ok(t: Any) -> bool:
            for key, want in task_filter.items():
                have = getattr(t, key)
                if isinstance(want, (list, tuple, set, frozenset)):
                    if have not in want:
                        return False
                elif have != want:
                    return False
            return True
        kept = [t for t in tasks if ok(t)]
    else:
        ids = set(task_filter)
        unknown = ids - {t.task_id for t in tasks}
        if unknown:
            raise BenchmarkError(f"unknown task ids {sorted(unknown)[:5]}; list ids with `ehrgym bench show`")
        kept = [t for t in tasks if t.task_id in ids]
    if limit_pairs is not None:
        allowed = set(spread_pair_order(kept)[:limit_pairs])
        kept = [t for t in kept if t.pair_id in allowed]
    return kept


def python_sandbox(env_config: dict[str, Any]) -> dict[str, Any] | None:
    """The Python tool's sandbox for a run with ``env_config`` (None when the tool is off).

    Raises :class:`~ehrgym.env.pyworker.SandboxUnavailable` when the host has no OS isolation layer
    and ``python_unsafe`` was not set: the run refuses to start instead of degrading silently."""
    if not env_config.get("python", True):
        return None
    unsafe = bool(env_config.get("python_unsafe", False))
    layers = _sandbox_layers(unsafe)
    from ehrgym.env.pyworker import ISOLATION_LAYERS, UNSAFE_LABEL

    isolated = any(layer in layers for layer in ISOLATION_LAYERS)
    return {"layers": list(layers), "unsafe": not isolated, "label": UNSAFE_LABEL if not isolated else "isolated"}


_SANDBOX_CACHE: dict[bool, tuple[str, ...]] = {}


def _sandbox_layers(unsafe: bool) -> tuple[str, ...]:
    """Layers a Python worker pool gets on this host (probed once per process: ~1 s)."""
    if unsafe not in _SANDBOX_CACHE:
        from ehrgym.env.pyworker import PythonWorkerPool

        with PythonWorkerPool(warm=0, allow_unisolated=unsafe) as pool:
            _SANDBOX_CACHE[unsafe] = pool.sandbox
    return _SANDBOX_CACHE[unsafe]


def _identity(agent_name: str, model: str | None, agent_kwargs: dict[str, Any], manifest: dict[str, Any],
              db_hash: str | None, seed: int, env_config: dict[str, Any]) -> dict[str, Any]:
    return {"agent": agent_name, "model": model, "agent_kwargs": _public_kwargs(agent_kwargs),
            "bench_content_hash": manifest.get("content_hash") or manifest.get("tasks_sha256"),
            "db_content_hash": db_hash, "seed": seed, "env_config": env_config}


def _public_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sorted(kwargs.items()) if k not in _SECRET_KWARGS + _OPERATIONAL_KWARGS}


def _db_content_hash(db_path: str | Path) -> str | None:
    from ehrgym.db.connect import open_database, read_meta

    con = open_database(db_path, read_only=True)
    try:
        return read_meta(con).get("content_hash")
    except EhrGymError:
        return None
    finally:
        con.close()


def _check_db(manifest: dict[str, Any], db_hash: str | None, db_path: str | Path) -> None:
    want = manifest.get("db_content_hash")
    if want and db_hash and want != db_hash:
        raise BenchmarkError(f"the benchmark was built on a database with content hash {want[:12]}…, but {db_path} "
                             f"has {db_hash[:12]}…; pass the --db the benchmark was built from")


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
class _Progress:
    """tqdm bar (ETA from tqdm) with the running strict success rate on Clean and Noise."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        from tqdm import tqdm  # text bars: they also stream through papermill

        self.bar = tqdm(total=total, disable=not enabled, desc=desc, unit="ep", dynamic_ncols=True)
        self.ok: Counter[str] = Counter()
        self.n: Counter[str] = Counter()
        self.episode_seconds = 0.0
        self.store_seconds = 0.0

    def update(self, records: Iterable[Encoded]) -> None:
        count = 0
        for _, variant, success, wall in records:
            count += 1
            self.episode_seconds += wall
            if success is None:
                continue
            self.n[variant] += 1
            self.ok[variant] += int(bool(success))
        parts = {v: f"{100 * self.ok[v] / self.n[v]:.1f}%" for v in ("clean", "noise") if self.n[v]}
        self.bar.set_postfix(parts, refresh=False)
        self.bar.update(count)

    def close(self) -> None:
        self.bar.close()


def run_evaluation(bench_dir: str | Path, db_path: str | Path, agent_name: str, out_dir: str | Path, *,
                   k: int = 4, workers: int = 1, agent_kwargs: dict[str, Any] | None = None,
                   tasks: TaskFilter = None, limit_pairs: int | None = None,
                   env_config: dict[str, Any] | None = None, seed: int = 0,
                   episode_time_limit: float | None = None, episode_retries: int = 1,
                   retry_errors: bool = False, chunk_size: int | None = None,
                   progress: bool = True, backend: str = "local", address: str | None = None,
                   result_store: str | Path | None = None) -> RunSummary:
    """Run ``agent_name`` on the benchmark ``k`` times per task into ``out_dir`` (resumable).

    ``tasks`` selects tasks (a list of ids, a predicate on Task, or ``{"split": "test", ...}``),
    ``limit_pairs`` keeps the first N Clean–Noise pairs of that selection. ``retry_errors``
    re-runs episodes recorded as infrastructure errors (their new record supersedes the old).
    ``backend="ray"`` runs the episodes on ``workers`` Ray actors (a cluster at ``address``, or a
    local instance; :mod:`ehrgym.eval.ray_backend`); the store and its guarantees are the same.
    ``result_store``: a directory of query results the workers read and add to, shared with other runs on this
    database (:class:`~ehrgym.env.resultcache.SharedResults`). Episodes are the same with or without it (only
    their timings and ``cached`` flags differ), so it is not part of the run's identity; reuse shows in timings,
    so use it for scripted agents.
    """
    from ehrgym.bench.dataset import load_benchmark

    setup_start = time.perf_counter()
    if k < 1:
        raise EhrGymError(f"k must be >= 1, got {k}")
    workers = max(1, int(workers))
    if backend not in BACKENDS:
        raise EhrGymError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "ray":
        from ehrgym.eval.ray_backend import import_ray

        import_ray()   # fails before anything is written when Ray is missing
    agent_kwargs = dict(agent_kwargs or {})
    entry = get_agent_entry(agent_name)
    env_config = {**entry.factory.env_defaults, **(env_config or {})}
    from ehrgym.env.engine import database_profile

    try:
        offered = getattr(database_profile(db_path), "tools", None)
    except EhrGymError:   # a missing or bad database: _db_content_hash below says so
        offered = None
    if offered and "python" not in offered:   # e.g. a FHIR server's episodes: no Python tool, so no sandbox needed
        env_config["python"] = False
    sandbox = python_sandbox(env_config)   # fails closed before any episode runs
    bench = load_benchmark(bench_dir)
    manifest = dict(getattr(bench, "manifest", {}) or {})
    db_hash = _db_content_hash(db_path)
    _check_db(manifest, db_hash, db_path)
    selected = select_tasks(bench.tasks, tasks, limit_pairs)

    # the model name comes from the agent; build one in the main process to validate options
    probe = make_agent(agent_name, **agent_kwargs)
    model = probe.model
    description = probe.describe()
    probe.close()

    out_dir = Path(out_dir)
    identity = _identity(agent_name, model, agent_kwargs, manifest, db_hash, seed, env_config)
    run_id = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    previous = read_run_config(out_dir)
    if previous is not None:
        clash = [key for key in _IDENTITY_KEYS if json.dumps(previous.get(key), sort_keys=True, default=str)
                 != json.dumps(identity.get(key), sort_keys=True, default=str)]
        if clash:
            raise RunStoreError(f"{out_dir} holds another run (differs in {clash}); resume it with the same "
                                f"options or choose a new --out directory")
        run_id = previous["run_id"]
    config = {**identity, "run_id": run_id, "agent_description": description, "k": k,
              "bench_dir": str(Path(bench_dir).resolve()), "db_path": str(Path(db_path).resolve()),
              "tasks_selected": len(selected), "episode_time_limit": episode_time_limit,
              "episode_retries": episode_retries, "concurrency": entry.concurrency.value,
              "workers": workers, "backend": backend, "python_sandbox": sandbox, "created": (previous or {}).get("created", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))}

    store = EpisodeStore(out_dir)
    repaired = store.open()
    try:
        write_run_config(out_dir, config)
        done = store.finished(retry_errors=retry_errors)
        todo = [(t, trial) for t in selected for trial in range(k) if (t.task_id, trial) not in done]
        planned = len(selected) * k
        cfg = WorkerConfig(str(db_path), agent_name, agent_kwargs, env_config, run_id, seed,
                           episode_time_limit, episode_retries,
                           str(result_store) if result_store is not None else None)
        bar = _Progress(len(todo), progress, f"{agent_name}{'/' + model if model else ''}")
        start = time.perf_counter()
        timings = {"setup_s": round(start - setup_start, 3)}
        try:
            if todo:
                if backend == "ray":
                    from ehrgym.eval.ray_backend import run_ray

                    ran = run_ray(cfg, todo, workers, store, bar, chunk_size or k, address)
                elif entry.concurrency is Concurrency.PROCESS and workers > 1:
                    ran = _run_processes(cfg, todo, workers, store, bar, chunk_size or max(8 * k, 32))
                else:
                    ran = _run_threads(cfg, todo, workers, store, bar)
            else:
                ran = 0
        finally:
            bar.close()
        wall = time.perf_counter() - start
        timings.update(run_s=round(wall, 3), store_write_s=round(bar.store_seconds, 3),
                       episodes_sum_s=round(bar.episode_seconds, 3))
    finally:
        store.close()
    summary = _summarise(out_dir, run_id, agent_name, model, planned, planned - len(todo), ran, wall, repaired)
    summary.timings = timings
    return summary


def _chunks(todo: list[tuple[Any, int]], size: int) -> list[list[tuple[Any, int]]]:
    """Consecutive chunks; trials of one task stay together (a warm overlay is reused)."""
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def _run_processes(cfg: WorkerConfig, todo: list[tuple[Any, int]], workers: int, store: EpisodeStore,
                   bar: _Progress, chunk_size: int) -> int:
    ctx = mp.get_context("spawn")  # never fork a process that holds DuckDB handles or threads
    ran = 0
    chunks = _chunks(todo, chunk_size)
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_process_init,
                                initargs=(cfg,)) as pool:
        pending: set[cf.Future[list[Encoded]]] = set()
        it = iter(chunks)
        try:
            for chunk in it:
                pending.add(pool.submit(_process_chunk, chunk))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                finished, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for fut in finished:
                    records = fut.result()
                    t0 = time.perf_counter()
                    store.append_lines([r[0] for r in records])
                    bar.store_seconds += time.perf_counter() - t0
                    ran += len(records)
                    bar.update(records)
                    nxt = next(it, None)
                    if nxt is not None:
                        pending.add(pool.submit(_process_chunk, nxt))
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
    return ran


def _run_threads(cfg: WorkerConfig, todo: list[tuple[Any, int]], workers: int, store: EpisodeStore,
                 bar: _Progress) -> int:
    local = threading.local()
    made: list[EpisodeWorker] = []
    made_lock = threading.Lock()

    def run_one(item: tuple[Any, int]) -> Encoded:
        worker = getattr(local, "worker", None)
        if worker is None:
            worker = EpisodeWorker(cfg)
            local.worker = worker
            with made_lock:
                made.append(worker)
        return _encoded(worker.run(*item))

    ran = 0
    write_lock = threading.Lock()
    try:
        with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ehrgym-episode") as pool:
            futures = [pool.submit(run_one, item) for item in todo]
            try:
                for fut in cf.as_completed(futures):
                    record = fut.result()
                    with write_lock:
                        t0 = time.perf_counter()
                        store.append_lines([record[0]])
                        bar.store_seconds += time.perf_counter() - t0
                        ran += 1
                        bar.update([record])
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    finally:
        for w in made:
            w.close()
    return ran


def _summarise(out_dir: Path, run_id: str, agent: str, model: str | None, planned: int, skipped: int, ran: int,
               wall: float, repaired: int) -> RunSummary:
    store = EpisodeStore(out_dir)
    terminations: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    n: Counter[str] = Counter()
    for rec in store.records():
        terminations[rec.termination] += 1
        if rec.success_strict is None:
            continue
        n[rec.variant] += 1
        ok[rec.variant] += int(rec.success_strict)
    return RunSummary(
        run_dir=str(out_dir), run_id=run_id, agent=agent, model=model, planned=planned, skipped=skipped, ran=ran,
        terminations=dict(sorted(terminations.items())),
        success_clean=ok["clean"] / n["clean"] if n["clean"] else None,
        success_noise=ok["noise"] / n["noise"] if n["noise"] else None,
        infrastructure_errors=terminations["infrastructure_error"], wall_seconds=round(wall, 3),
        episodes_per_second=round(ran / wall, 2) if wall > 0 else 0.0, repaired_bytes=repaired,
    )
