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
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
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
    _entries: "OrderedDict[Hashable, QueryResult]" = field(default_factory=OrderedDict, repr=False)
    _edits: dict[str, str] = field(default_factory=dict, repr=False)

    def set_overlay(self, overlay: Overlay) -> None:
        """The overlay the next queries run over (called on every reset)."""
        self._edits = edit_digests(overlay)

    def key(self, sql: str, tables: tuple[str, ...]) -> Hashable:
        return sql, tuple((t, self._edits.get(t)) for t in sorted(set(tables)))

    def get(self, key: Hashable) -> QueryResult | None:
        if self.size <= 0:
            return None
        hit = self._entries.get(key)
        if hit is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return copy.deepcopy(hit)

    def put(self, key: Hashable, result: QueryResult) -> None:
        if self.size <= 0 or result.error is not None:
            return
        self._entries[key] = copy.deepcopy(result)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses}
