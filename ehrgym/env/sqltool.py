"""Running one agent query: gate, time limit, row cap, readable preview, recoverable errors."""

from __future__ import annotations

import datetime as dt
import math
import pickle
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ehrgym.env.engine import (QueryError, SqlLimits, Watchdog, classify_error, clean_error,  # noqa: F401
                               deadline_message)
from ehrgym.env.gate import GateDecision, SqlGate
from ehrgym.env.pool import AnyConnection
from ehrgym.env.resultcache import ResultCache
from ehrgym.errors import GateRejection

__all__ = ["QueryOutcome", "SqlLimits", "classify_error", "clean_error", "format_outcome", "format_table",
           "query_frame", "run_query"]


@dataclass
class QueryOutcome:
    """The result (or error) of one query, with timings."""

    query: str
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # at most max_rows_shown
    row_count: int = 0
    row_count_exact: bool = True
    truncated: bool = False
    error: str | None = None
    error_kind: str | None = None      # gate | timeout | memory | database | crashed | internal
    gate_seconds: float = 0.0
    db_seconds: float = 0.0
    format_seconds: float = 0.0
    tables: tuple[str, ...] = ()
    cached: bool = False               # the result was reused (same SQL over the same data; see resultcache)

    @property
    def ok(self) -> bool:
        return self.error is None

    def info(self) -> dict[str, Any]:
        return {"rows": self.row_count, "row_count_exact": self.row_count_exact, "truncated": self.truncated,
                "columns": len(self.columns), "error": self.error, "error_kind": self.error_kind,
                "gate_seconds": self.gate_seconds, "db_seconds": self.db_seconds,
                "format_seconds": self.format_seconds, "tables": list(self.tables), "cached": self.cached}


def _gate(gate: SqlGate, query: Any) -> GateDecision:
    """The gate's decision; a text the gate's parser cannot even walk (RecursionError) is refused."""
    if not isinstance(query, str):
        raise GateRejection("Query refused: the query must be text (a str), got "
                            f"{type(query).__name__}")
    try:
        return gate.check(query)
    except RecursionError:
        raise GateRejection("Query refused: it is nested too deeply to be read; flatten it (fewer nested "
                            "parentheses or subqueries)") from None


def run_query(gate: SqlGate, conn: AnyConnection, watchdog: Watchdog, query: str,
              limits: SqlLimits, cache: ResultCache | None = None) -> QueryOutcome:
    """Gate and run ``query`` on the episode connection; never raises for agent mistakes.

    With ``cache`` (the environment's :class:`~ehrgym.env.resultcache.ResultCache`), a result of
    the same admitted SQL over the same overlay edits of the tables it reads is reused.
    """
    out = QueryOutcome(query=query)
    t0 = time.perf_counter()
    try:
        decision = _gate(gate, query)
    except GateRejection as exc:
        out.gate_seconds = time.perf_counter() - t0
        out.error, out.error_kind = str(exc), "gate"
        return out
    out.gate_seconds = time.perf_counter() - t0
    out.tables = decision.tables
    if decision.kind == "static":
        assert decision.static is not None
        out.columns = list(decision.static.columns)
        all_rows = list(decision.static.rows)
        out.row_count = len(all_rows)
        out.rows = all_rows[: limits.max_rows_shown]
        out.truncated = len(all_rows) > limits.max_rows_shown
        return out
    t1 = time.perf_counter()
    key = cache.key(decision.sql, decision.tables) if cache is not None else None
    res = cache.get(key) if cache is not None else None
    if res is not None:
        out.cached = True
    else:
        res = conn.run(decision.sql, limits, watchdog)
        if cache is not None:
            cache.put(key, res)
    out.columns, out.rows, out.row_count = res.columns, res.rows, res.row_count
    out.row_count_exact, out.truncated = res.row_count_exact, res.truncated
    out.error, out.error_kind = res.error, res.error_kind
    out.db_seconds = time.perf_counter() - t1
    return out


def query_frame(gate: SqlGate, conn: AnyConnection, watchdog: Watchdog, query: str,
                limits: SqlLimits, pickled: bool = False) -> Any:
    """Gate and run ``query`` returning a pandas DataFrame (the Python worker's ``sql()``), or with
    ``pickled=True`` its pickle (forwarded to the worker without unpickling it here).

    Raises ``RuntimeError`` whose message is the gate's or DuckDB's message.
    """
    try:
        decision = _gate(gate, query)
    except GateRejection as exc:
        raise RuntimeError(str(exc)) from None
    if decision.kind == "static":
        import pandas as pd

        assert decision.static is not None
        frame = pd.DataFrame(list(decision.static.rows), columns=list(decision.static.columns))
        return pickle.dumps(frame, protocol=5) if pickled else frame
    try:
        data = conn.frame(decision.sql, limits, watchdog)
    except QueryError as exc:
        raise RuntimeError(str(exc)) from None
    return data if pickled else pickle.loads(data)


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------

def format_cell(value: Any, max_chars: int) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        if math.isnan(value):
            text = "NaN"
        elif value.is_integer() and abs(value) < 1e15:
            text = f"{value:.1f}"
        else:
            text = f"{value:.10g}"
    elif isinstance(value, Decimal):
        text = format(value, "f")
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
    elif isinstance(value, (dt.date, dt.time)):
        text = value.isoformat()
    elif isinstance(value, dt.timedelta):
        text = str(value)
    else:
        text = str(value)
    text = text.replace("\n", "\\n").replace("\t", " ")
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text


def format_table(columns: list[str], rows: list[tuple[Any, ...]], max_cell_chars: int) -> str:
    """A fixed-width text table (header, rule, rows)."""
    if not columns:
        return "(no columns)"
    cells = [[format_cell(v, max_cell_chars) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        for i, c in enumerate(row):
            if len(c) > widths[i]:
                widths[i] = len(c)
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
             "-+-".join("-" * w for w in widths)]
    lines.extend(" | ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)
    return "\n".join(lines)


def format_outcome(out: QueryOutcome, limits: SqlLimits) -> str:
    """What the agent sees after a SQL step."""
    t0 = time.perf_counter()
    if out.error is not None:
        label = {"gate": "Query refused", "timeout": "Query cancelled", "memory": "Query stopped",
                 "crashed": "Query stopped"}.get(out.error_kind or "", "SQL error")
        text = out.error if out.error.startswith("Query refused") else f"{label}: {out.error}"
    else:
        table = format_table(out.columns, out.rows, limits.max_cell_chars)
        if out.row_count == 0:
            text = f"{table}\n(0 rows)"
        elif out.truncated:
            total = f"{out.row_count:,}" if out.row_count_exact else f"more than {out.row_count:,}"
            text = (f"{table}\n(showing the first {len(out.rows)} of {total} rows — the result was truncated; "
                    f"aggregate, filter or add LIMIT to see the rest)")
        else:
            text = f"{table}\n({out.row_count} row{'s' if out.row_count != 1 else ''})"
    out.format_seconds = time.perf_counter() - t0
    return text
