"""Results of admitted queries, remembered per environment and keyed by the data they read.

An episode connection is deterministic: the same admitted SQL over the same rows gives the same
result (queries run single-threaded, see :class:`~ehrgym.env.engine.ConnectionSettings`). A
result is therefore reusable whenever the query reads the same tables with the same overlay
edits — the k trials of one task, or the clean and noisy twin of a pair when the overlay
touches a table the query does not read. The key is ``(admitted SQL, {table: digest of the
overlay's edit of that table} for each table the gate says the query reads)``, so a query over
a table the current overlay edits is only reused for that very edit: noisy evidence is always
read from the episode's own data.

Only successful results are kept (timeouts, memory stops and errors are re-run); the Python
tool's ``sql()`` frames are not cached. ``EnvConfig.result_cache`` sets the number of entries
(0 turns the cache off). Reuse changes timings only (``db_seconds`` ≈ 0, ``cached: true`` in the
step info), never what the agent sees.

:class:`SharedResults` carries the same reuse across environments and processes: the runs of several
agents on one database (the pipeline's baselines run the same draft SQL over the same twins) read
what an earlier run's workers wrote. It lives in a directory of shard files, one per environment
that wrote, under a *namespace* that names everything a result depends on besides the SQL and the
overlay edits: the database's content, the query limits and connection settings, the DuckDB version
and the source of the code that runs and formats queries (:func:`shared_namespace`). A store written
by another database, other limits or other code is therefore never read. Timings are what reuse
reveals, so it is meant for scripted agents (the pipeline turns it on for its baselines only).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import pickle
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Hashable

from ehrgym.db.overlay import Overlay
from ehrgym.env.engine import QueryResult


def edit_digests(overlay: Overlay) -> dict[str, str]:
    """``{table: digest}`` of an overlay's edits (one per edited table)."""
    out = {}
    for table, edit in overlay.merged().items():
        text = json.dumps(edit.to_dict(), sort_keys=True, default=repr)
        out[table] = hashlib.sha256(text.encode()).hexdigest()[:24]
    return out


@dataclass
class ResultCache:
    """An LRU of :class:`QueryResult` keyed by SQL and the overlay edits of the tables it reads."""

    size: int = 256
    hits: int = 0
    misses: int = 0
    shared: "SharedResults | None" = None  # results of other environments and earlier runs (read and added to)
    _entries: "OrderedDict[Hashable, QueryResult]" = field(default_factory=OrderedDict, repr=False)
    _edits: dict[str, str] = field(default_factory=dict, repr=False)
    _overlay: Overlay | None = field(default=None, repr=False)

    def set_overlay(self, overlay: Overlay) -> None:
        """The overlay the next queries run over (called on every reset)."""
        if self._overlay is None or overlay != self._overlay:  # the next trial of a task: the same digests
            self._edits = edit_digests(overlay)
            self._overlay = overlay

    def key(self, sql: str, tables: tuple[str, ...]) -> Hashable:
        return sql, tuple((t, self._edits.get(t)) for t in sorted(set(tables)))

    def get(self, key: Hashable) -> QueryResult | None:
        if self.size <= 0:
            return None
        hit = self._entries.get(key)
        if hit is None and self.shared is not None:
            hit = self.shared.get(key)
        if hit is None:
            self.misses += 1
            return None
        self._entries[key] = hit
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        self.hits += 1
        return copy.deepcopy(hit)

    def put(self, key: Hashable, result: QueryResult) -> None:
        if self.size <= 0 or result.error is not None:
            return
        self._entries[key] = copy.deepcopy(result)
        if self.shared is not None:
            self.shared.put(key, self._entries[key])
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses}


SHARED_FORMAT = 1
"""Version of the shard files' layout (part of the namespace)."""
RESULT_CODE = ("env", "db")
"""Packages of ehrgym whose source shapes a query's result (gate, engine, query process, overlay views): part of the
namespace, so that results written by other code are never read."""


def shared_namespace(db_identity: str, limits: Any, settings: Any) -> str:
    """The namespace of a :class:`SharedResults`: a digest of the database's identity (its content hash), the
    query limits and connection settings (dataclasses), the DuckDB version and the source of ``ehrgym.env`` and
    ``ehrgym.db``."""
    import duckdb

    from ehrgym.codehash import source_digest

    named = {"format": SHARED_FORMAT, "db": db_identity, "limits": asdict(limits), "settings": asdict(settings),
             "duckdb": duckdb.__version__, "code": source_digest(RESULT_CODE)}
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode()).hexdigest()[:24]


class SharedResults:
    """Successful query results shared by environments through a directory (see the module docstring).

    Opening reads every shard of ``directory/<namespace>/``; :meth:`flush` writes the results this object added
    as one new shard (written whole, then renamed, so a reader never sees half a shard). Unreadable shards are
    skipped: the store is a cache, and a miss only costs the query."""

    def __init__(self, directory: str | Path, namespace: str) -> None:
        self.path = Path(directory) / namespace
        self._entries: dict[Hashable, QueryResult] = {}
        self._new: dict[Hashable, QueryResult] = {}
        self.shards = 0
        if self.path.is_dir():
            for shard in sorted(self.path.glob("*.pkl")):
                try:
                    with shard.open("rb") as fh:
                        got = pickle.load(fh)
                except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, ValueError):
                    continue
                if isinstance(got, dict):
                    self._entries.update(got)
                    self.shards += 1

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> QueryResult | None:
        return self._entries.get(key)

    def put(self, key: Hashable, result: QueryResult) -> None:
        if key not in self._entries:
            self._entries[key] = self._new[key] = result

    def flush(self) -> Path | None:
        """Write the results added since the last flush as a new shard (None: nothing new)."""
        if not self._new:
            return None
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / f"{os.getpid()}-{time.time_ns()}.pkl"
        tmp = target.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            pickle.dump(self._new, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, target)
        self._new = {}
        return target
