"""Verification of Clean–Noise pairs through the one overlay function of the database layer.

The verifier owns an in-memory DuckDB connection with the benchmark database attached read-only
as ``base`` and an :class:`~ehrgym.db.overlay.OverlaySession` whose views shadow the 31 tables —
exactly how the environment serves an episode (a query whose result no row order can change reads a
second set of views that serve inserted rows after the base rows, in one scan: the same rows, so the same
result, but for a float sum's last bit). A pair is kept only if

1. the clean gold SQL gives a meaningful (non-null, non-empty) answer on the clean evidence;
2. the noise traps a credulous agent: the naive SQL (the clean gold SQL of the noisy question)
   on the noisy evidence yields something other than the expected outcome — for an expected
   answer a value that does not match it; for an expected abstention a value-looking result
   (for missing-evidence-style noise an empty/NULL result, which a credulous agent reports too);
3. for recoverable noise the robust gold SQL on the noisy evidence reproduces the expected answer;
4. the trap is clinically meaningful: the credulous answer (for an expected answer), or the answer
   in the world where a contradicting record is the true one (for a conflict), moves away from
   the gold by at least the trap margin of the answer type (:data:`TRAP_MARGINS`).

Whether an empty/NULL naive result still traps is the injector's ``empty_is_trap``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ehrgym.bench.answers import AnswerSpec, NotComparable, answers_match, gold_from_rows, parse_datetime
from ehrgym.bench.locality import order_free
from ehrgym.db.overlay import Overlay, OverlaySession, overlay_connection
from ehrgym.db.schema import search_path_sql


@dataclass(frozen=True)
class TrapMargin:
    """How far a trap must move the answer: ``relative`` of |gold| and at least ``absolute`` (in
    ``unit``). Types without a distance (strings, sets, booleans) only need to differ."""

    relative: float = 0.0
    absolute: float = 0.0
    unit: str = ""
    why: str = ""


TRAP_MARGINS: dict[str, TrapMargin] = {
    "number": TrapMargin(0.05, 0.0, "× |gold|", "5 % of a lab value, dose or duration is beyond assay and "
                         "charting imprecision (well beyond the 2 % floor)"),
    "integer": TrapMargin(0.05, 1.0, "count", "at least one more or fewer event, and 5 % of a large count"),
    "datetime": TrapMargin(0.0, 1.0, "hours", "an hour changes what happened first and time-to-event answers"),
    "date": TrapMargin(0.0, 1.0, "days", "another day"),
}


def trap_distance(gold: Any, other: Any, spec: AnswerSpec) -> float | None:
    """How far ``other`` lies from ``gold`` in the margin's unit (relative for numbers, hours or
    days for times); None for types without a distance or values that cannot be compared."""
    try:
        if spec.type in ("number", "integer"):
            g, o = float(gold), float(other)
            if not (math.isfinite(g) and math.isfinite(o)):
                return None
            return abs(o - g) if spec.type == "integer" else abs(o - g) / max(abs(g), 1e-9)
        if spec.type in ("datetime", "date"):
            a = dt.datetime.fromisoformat(parse_datetime(gold))
            b = dt.datetime.fromisoformat(parse_datetime(other))
            return abs((b - a).total_seconds()) / (3600 if spec.type == "datetime" else 86400)
    except (TypeError, ValueError, NotComparable):
        return None
    return None


def moves_enough(gold: Any, other: Any, spec: AnswerSpec) -> bool:
    """True when ``other`` differs from ``gold`` by at least the answer type's trap margin."""
    if other is None:
        return True  # an empty answer is judged by the injector's empty_is_trap
    if _match(gold, other, spec):
        return False
    margin = TRAP_MARGINS.get(spec.type)
    if margin is None:
        return True
    dist = trap_distance(gold, other, spec)
    if dist is None:
        return not isinstance(other, (list, tuple))
    if spec.type == "integer":
        return dist >= max(margin.absolute, margin.relative * abs(float(gold)))
    return dist >= max(margin.relative, margin.absolute)


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str | None = None  # why the pair is discarded
    naive_value: Any = None
    robust_value: Any = None
    margin: float | None = None  # trap_distance of the trap from the gold (answers and conflicts)


class PairVerifier:
    """Runs SQL on clean or overlaid views of one database (see the module docstring)."""

    def __init__(self, db_path: str | Path, threads: int | None = 1) -> None:
        # One thread by default, as episodes are served (ConnectionSettings.threads): a naive SQL that meets
        # tied rows (conflicting records at one charttime) then reads them in scan order, so what the verifier
        # records is what an agent's query returns, not one of several thread schedules.
        self.con, self.session = overlay_connection(db_path, threads)
        self._threads = threads
        self._clean_rows: dict[str, list[tuple[Any, ...]]] = {}
        self.last_rows: dict[str, list[tuple[Any, ...]]] = {}  # check_noise's naive and robust rows
        # The clean database on a second connection to the same instance (one buffer pool), whose default
        # catalog is the read-only base: its tables are what clean views show, row for row in the same scan
        # order. Clean queries (gold answers, injectors, contexts) then never re-point the overlaid views,
        # which costs one CREATE VIEW per noisy twin instead of two.
        self.clean_con = self.con.cursor()
        self.clean_con.execute("USE base")
        self.clean_con.execute(search_path_sql("base"))
        # Overlaid queries whose result no row order can change (ehrgym.bench.locality.order_free: one aggregate
        # row, no ORDER BY, LIMIT or window) read views in a catalog of their own that serve the inserted rows after
        # the base rows: one scan instead of the rowid ranges that put them where a base row would be (1.81x less
        # time on those queries, 1.51x on all overlaid ones, in a replay of a 10k-patient build's).
        self.con.execute("ATTACH ':memory:' AS unordered")
        self.free_con = self.con.cursor()
        self.free_con.execute("USE unordered")
        self.free_session = OverlaySession(self.free_con, ordered=False)
        self.free_con.execute(search_path_sql("unordered"))
        self._pointed: dict[int, Overlay] = {id(self.session): Overlay(), id(self.free_session): Overlay()}

    @contextmanager
    def threads(self, n: int) -> Iterator[None]:
        """Run queries with ``n`` threads inside the block (the verifier's own count again after it). Only for queries
        whose result does not depend on scan order (the candidate samplers: totally ordered, counts), run while no
        worker competes."""
        self.con.execute(f"SET threads = {max(1, int(n))}")
        try:
            yield
        finally:
            self.con.execute("RESET threads" if self._threads is None else f"SET threads = {int(self._threads)}")

    def use(self, overlay: Overlay) -> None:
        """Point the ordered views (an episode's) at ``overlay``."""
        self._point(self.session, overlay)

    def views_for(self, sql: str) -> tuple[OverlaySession, duckdb.DuckDBPyConnection]:
        """The views an overlaid ``sql`` is read from, and the cursor that reads them: the unordered ones when no row
        order can change its result."""
        return (self.free_session, self.free_con) if order_free(sql) else (self.session, self.con)

    def _point(self, session: OverlaySession, overlay: Overlay) -> None:
        if overlay != self._pointed[id(session)]:
            session.apply(overlay)
            self._pointed[id(session)] = overlay

    def clean(self) -> None:
        self.use(Overlay())

    def rows(self, sql: str, overlay: Overlay | None = None) -> list[tuple[Any, ...]]:
        overlay = overlay if overlay is not None else Overlay()
        clean = overlay.is_empty
        if clean:
            if sql in self._clean_rows:  # the clean database never changes
                return self._clean_rows[sql]
            result = self.clean_con.execute(sql).fetchall()
        else:
            session, cursor = self.views_for(sql)
            self._point(session, overlay)
            result = cursor.execute(sql).fetchall()
        if clean:
            if len(self._clean_rows) >= 8192:
                self._clean_rows.pop(next(iter(self._clean_rows)))
            self._clean_rows[sql] = result
        return result

    def value(self, sql: str, spec: AnswerSpec, overlay: Overlay | None = None) -> Any:
        return gold_from_rows(self.rows(sql, overlay), spec)

    def check_noise(self, *, subtype: str, overlay: Overlay, spec: AnswerSpec, expected_kind: str,
                    expected_value: Any, naive_sql: str, robust_sql: str | None,
                    alternative: Overlay | None = None) -> Outcome:
        """Properties 2-4 for one noisy twin (property 1 is checked on the clean twin)."""
        from ehrgym.bench.noise import get_injector

        self.last_rows = {}
        try:
            naive_rows = self.rows(naive_sql, overlay)
        except duckdb.Error:
            return Outcome(False, "naive_sql_error")
        self.last_rows["naive"] = naive_rows
        naive = gold_from_rows(naive_rows, spec)
        if expected_kind == "answer":
            if naive is not None and _match(expected_value, naive, spec):
                return Outcome(False, "no_trap", naive)
            if not moves_enough(expected_value, naive, spec):
                return Outcome(False, "trap_too_small", naive)
            if robust_sql is None:
                return Outcome(False, "not_recoverable", naive)
            try:
                robust_rows = self.rows(robust_sql, overlay)
            except duckdb.Error:
                return Outcome(False, "robust_sql_error", naive)
            self.last_rows["robust"] = robust_rows
            robust = gold_from_rows(robust_rows, spec)
            if robust is None or not _match(expected_value, robust, spec):
                return Outcome(False, "not_recoverable", naive, robust)
            return Outcome(True, None, naive, robust, trap_distance(expected_value, naive, spec))
        margin = None
        if alternative is not None:  # a contradiction must matter: believing the other record changes the answer
            try:
                other = self.value(naive_sql, spec, alternative)
            except duckdb.Error:
                return Outcome(False, "naive_sql_error", naive)
            if other is None or not moves_enough(expected_value, other, spec):
                return Outcome(False, "conflict_does_not_change_answer", naive)
            margin = trap_distance(expected_value, other, spec)
        # several rows (a conflict) still look like an answer to a credulous agent
        looks_like_value = any(r and r[0] is not None for r in naive_rows)
        if not looks_like_value and not get_injector(subtype).empty_is_trap:
            return Outcome(False, "no_trap", naive)
        if naive is None and looks_like_value:
            naive = _json_first(naive_rows)
        return Outcome(True, None, naive, margin=margin)

    def close(self) -> None:
        self.clean_con.close()
        self.free_con.close()
        self.con.close()


def _json_first(rows: list[tuple[Any, ...]]) -> Any:
    from ehrgym.bench.sqlrender import json_value

    return [json_value(r[0]) for r in rows if r and r[0] is not None][:5]


def _match(gold: Any, given: Any, spec: AnswerSpec) -> bool:
    try:
        return answers_match(gold, given, spec)
    except NotComparable:
        return False
