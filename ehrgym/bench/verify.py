"""Verification of Clean–Noise pairs through the one overlay function of the database layer.

The verifier owns an in-memory DuckDB connection with the benchmark database attached read-only
as ``base`` and an :class:`~ehrgym.db.overlay.OverlaySession` whose views shadow the 31 tables —
exactly how the environment serves an episode. A pair is kept only if

1. the clean gold SQL gives a meaningful (non-null, non-empty) answer on the clean evidence;
2. the noise traps a credulous agent: the naive SQL (the clean gold SQL of the noisy question)
   on the noisy evidence yields something other than the expected outcome — for an expected
   answer a value that does not match it; for an expected abstention a value-looking result
   (for missing-evidence-style noise an empty/NULL result, which a credulous agent reports too);
3. for recoverable noise the robust gold SQL on the noisy evidence reproduces the expected answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ehrgym.bench.answers import AnswerSpec, NotComparable, answers_match, gold_from_rows
from ehrgym.db.connect import attach_base
from ehrgym.db.overlay import Overlay, OverlaySession
from ehrgym.db.schema import search_path_sql

# abstentions where a credulous agent reports the empty/NULL result it gets
EMPTY_IS_TRAP: frozenset[str] = frozenset({"missing_evidence", "missing_value", "nonexistent_entity",
                                           "false_premise", "temporal_mismatch"})


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str | None = None  # why the pair is discarded
    naive_value: Any = None
    robust_value: Any = None


class PairVerifier:
    """Runs SQL on clean or overlaid views of one database (see the module docstring)."""

    def __init__(self, db_path: str | Path, threads: int | None = None) -> None:
        self.con = duckdb.connect()
        if threads:
            self.con.execute(f"SET threads = {int(threads)}")
        attach_base(self.con, db_path)
        self.session = OverlaySession(self.con)
        self.con.execute(search_path_sql())
        self._overlay: Overlay | None = Overlay()
        self._clean_rows: dict[str, list[tuple[Any, ...]]] = {}

    def use(self, overlay: Overlay) -> None:
        if overlay != self._overlay:
            self.session.apply(overlay)
            self._overlay = overlay

    def clean(self) -> None:
        self.use(Overlay())

    def rows(self, sql: str, overlay: Overlay | None = None) -> list[tuple[Any, ...]]:
        overlay = overlay if overlay is not None else Overlay()
        clean = overlay.is_empty
        if clean and sql in self._clean_rows:  # the clean database never changes
            return self._clean_rows[sql]
        self.use(overlay)
        result = self.con.execute(sql).fetchall()
        if clean:
            if len(self._clean_rows) >= 8192:
                self._clean_rows.pop(next(iter(self._clean_rows)))
            self._clean_rows[sql] = result
        return result

    def value(self, sql: str, spec: AnswerSpec, overlay: Overlay | None = None) -> Any:
        return gold_from_rows(self.rows(sql, overlay), spec)

    def check_noise(self, *, subtype: str, overlay: Overlay, spec: AnswerSpec, expected_kind: str,
                    expected_value: Any, naive_sql: str, robust_sql: str | None) -> Outcome:
        """Properties 2 and 3 for one noisy twin (property 1 is checked on the clean twin)."""
        try:
            naive_rows = self.rows(naive_sql, overlay)
        except duckdb.Error:
            return Outcome(False, "naive_sql_error")
        naive = gold_from_rows(naive_rows, spec)
        if expected_kind == "answer":
            if naive is not None and _match(expected_value, naive, spec):
                return Outcome(False, "no_trap", naive)
            if robust_sql is None:
                return Outcome(False, "not_recoverable", naive)
            try:
                robust = self.value(robust_sql, spec, overlay)
            except duckdb.Error:
                return Outcome(False, "robust_sql_error", naive)
            if robust is None or not _match(expected_value, robust, spec):
                return Outcome(False, "not_recoverable", naive, robust)
            return Outcome(True, None, naive, robust)
        # several rows (a conflict) still look like an answer to a credulous agent
        looks_like_value = any(r and r[0] is not None for r in naive_rows)
        if not looks_like_value and subtype not in EMPTY_IS_TRAP:
            return Outcome(False, "no_trap", naive)
        if naive is None and looks_like_value:
            naive = _json_first(naive_rows)
        return Outcome(True, None, naive)

    def close(self) -> None:
        self.con.close()


def _json_first(rows: list[tuple[Any, ...]]) -> Any:
    from ehrgym.bench.sqlrender import json_value

    return [json_value(r[0]) for r in rows if r and r[0] is not None][:5]


def _match(gold: Any, given: Any, spec: AnswerSpec) -> bool:
    try:
        return answers_match(gold, given, spec)
    except NotComparable:
        return False
