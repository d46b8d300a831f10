"""Distributed evaluation on Ray: episodes run in Ray actors, the driver writes the store.

``run_evaluation(..., backend="ray", address=...)`` hands the planned ``(task, trial)`` episodes to
this module instead of the local process/thread pools. Each actor holds one
:class:`~ehrgym.eval.runner.EpisodeWorker` (an environment and an agent, built once) and runs
*chunks* of consecutive episodes (the trials of a task stay together, so a warm overlay is reused);
at most two chunks are queued per actor. Records come back JSON-encoded and only the driver appends
them to ``episodes.jsonl`` — the same single-writer store as the local backends, so the durability
contract of :mod:`ehrgym.eval.store` holds unchanged:

* exactly once: a record is written when its chunk's result reaches the driver, never by an actor;
  an actor that dies is restarted and its chunk re-run by Ray (``max_task_retries``), and the
  driver still receives that chunk's records once;
* resumable: a killed driver loses only the chunks in flight; the rerun skips every finished key.

Cluster use: every node needs the kit installed (``pip install 'ehrgym[ray]'``) and the database
at the same absolute path (a shared filesystem, or a copy per node). Agents that call a model
server reach it from the nodes, so give them a URL the nodes can resolve.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ehrgym.errors import EhrGymError

if TYPE_CHECKING:  # pragma: no cover
    from ehrgym.eval.runner import Encoded, WorkerConfig, _Progress
    from ehrgym.eval.store import EpisodeStore

QUEUED_PER_ACTOR = 2


class RayUnavailable(EhrGymError):
    """``--backend ray`` without Ray installed."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("the ray backend needs Ray: pip install 'ehrgym[ray]' (or pip install 'ray>=2.60')") from exc
    return ray


class EpisodeActor:
    """A Ray actor body: one environment + one agent, running chunks of episodes."""

    def __init__(self, cfg: "WorkerConfig") -> None:
        from ehrgym.eval.runner import EpisodeWorker

        self.error: str | None = None
        self.worker: Any = None
        try:
            self.worker = EpisodeWorker(cfg)
        except Exception as exc:  # reported by the first chunk, so the run stops with the real cause
            self.error = f"{type(exc).__name__}: {exc}"

    def run_chunk(self, items: list[tuple[Any, int]]) -> list["Encoded"]:
        from ehrgym.eval.runner import _encoded

        if self.worker is None:
            raise EhrGymError(f"a Ray actor could not start its environment/agent: {self.error}")
        return [_encoded(self.worker.run(task, trial)) for task, trial in items]

    def close(self) -> bool:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        return True


def run_ray(cfg: "WorkerConfig", todo: list[tuple[Any, int]], workers: int, store: "EpisodeStore",
            bar: "_Progress", chunk_size: int, address: str | None = None) -> int:
    """Run ``todo`` on ``workers`` Ray actors; append every record to ``store`` here, once."""
    import time

    from ehrgym.eval.runner import WorkerConfig, _chunks

    ray = import_ray()
    started = False
    if not ray.is_initialized():
        ray.init(address=address, logging_level="WARNING", log_to_driver=False, include_dashboard=False)
        started = True
    elif address is not None:
        raise EhrGymError("Ray is already initialised in this process; drop --address or call ray.shutdown() first")
    # workers on other nodes open the database by its absolute path
    cfg = WorkerConfig(**{**cfg.__dict__, "db_path": str(Path(cfg.db_path).resolve()),
                           "result_store": str(Path(cfg.result_store).resolve()) if cfg.result_store else None})
    actor_cls = ray.remote(num_cpus=1, max_restarts=1, max_task_retries=1)(EpisodeActor)
    actors = [actor_cls.remote(cfg) for _ in range(max(1, workers))]
    chunks = iter(_chunks(todo, chunk_size))
    pending: dict[Any, Any] = {}
    ran = 0

    def submit(actor: Any) -> None:
        chunk = next(chunks, None)
        if chunk is not None:
            pending[actor.run_chunk.remote(chunk)] = actor

    try:
        for _ in range(QUEUED_PER_ACTOR):
            for actor in actors:
                submit(actor)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                actor = pending.pop(ref)
                records = ray.get(ref)       # re-raises an actor's error: the run stops, the store stays valid
                t0 = time.perf_counter()
                store.append_lines([r[0] for r in records])
                bar.store_seconds += time.perf_counter() - t0
                ran += len(records)
                bar.update(records)
                submit(actor)
    finally:
        for ref in pending:
            try:
                ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001 - already finished, or not cancellable: the actor is killed
                pass
        try:
            ray.get([a.close.remote() for a in actors], timeout=60)
        except Exception:  # noqa: BLE001 - closing is best effort; the actors are killed next
            pass
        for actor in actors:
            ray.kill(actor)
        if started:
            ray.shutdown()
    return ran
