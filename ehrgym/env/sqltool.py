"""Running one agent query: gate, time limit, row cap, readable preview, recoverable errors."""

from __future__ import annotations

import datetime as dt
import math
import re
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import duckdb

from ehrgym.env.gate import GateDecision, SqlGate
from ehrgym.env.pool import EpisodeConnection, Watchdog
from ehrgym.errors import GateRejection


@dataclass(frozen=True)
class SqlLimits:
    """What one query may cost and how much of its result is shown."""

    timeout_s: float = 10.0
    max_rows_shown: int = 50
    max_cell_chars: int = 80
    max_count_rows: int = 5_000_000    # rows counted beyond the preview before saying "more than"
    max_frame_rows: int = 1_000_000    # rows a Python ``sql()`` call may return


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
    error_kind: str | None = None      # gate | timeout | memory | database
    gate_seconds: float = 0.0
    db_seconds: float = 0.0
    format_seconds: float = 0.0
    tables: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def info(self) -> dict[str, Any]:
        return {"rows": self.row_count, "row_count_exact": self.row_count_exact, "truncated": self.truncated,
                "columns": len(self.columns), "error": self.error, "error_kind": self.error_kind,
                "gate_seconds": self.gate_seconds, "db_seconds": self.db_seconds,
                "format_seconds": self.format_seconds, "tables": list(self.tables)}


_HINT_NOISE = re.compile(r"\n?\s*Did you mean \"[^\"]*(?:base\.|ehrgym|memory\.|system\.|temp\.)[^\"]*\"\?", re.I)


def clean_error(exc: BaseException) -> str:
    """The DuckDB message an agent can act on, without catalog internals or tracebacks."""
    text = str(exc).strip()
    text = _HINT_NOISE.sub("", text)
    text = re.sub(r"\b(?:base|memory)\.(?=mimiciv_)", "", text)
    # DuckDB's "LINE n: …" excerpt and its ^ marker point where binding failed, which depends on
    # how the episode's view of a table is built (an overlay's shape): never shown to agents
    lines = [ln.rstrip() for ln in text.splitlines() if not re.match(r"^\s*(?:LINE \d+:.*|\^+)\s*$", ln)]
    return "\n".join(lines[:12]).strip()


def classify_error(exc: BaseException) -> str:
    if isinstance(exc, duckdb.InterruptException):
        return "timeout"
    if isinstance(exc, duckdb.OutOfMemoryException) or "memory" in type(exc).__name__.lower():
        return "memory"
    return "database"


def _deadline_message(timeout: float) -> str:
    return (f"the query exceeded the time limit of {timeout:g} s and was cancelled; restrict it with "
            f"WHERE on subject_id/hadm_id/itemid, aggregate, or add LIMIT")


def run_query(gate: SqlGate, conn: EpisodeConnection, watchdog: Watchdog, query: str,
              limits: SqlLimits) -> QueryOutcome:
    """Gate and run ``query`` on the episode connection; never raises for agent mistakes."""
    out = QueryOutcome(query=query)
    t0 = time.perf_counter()
    try:
        decision = gate.check(query)
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
    with watchdog.deadline(conn.con, limits.timeout_s) as token:
        try:
            cur = conn.con.execute(decision.sql)
            out.columns = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchmany(limits.max_rows_shown + 1)
            if len(rows) > limits.max_rows_shown:
                out.truncated = True
                rest, exact = _count_rest(cur, limits.max_count_rows)
                out.row_count = len(rows) + rest
                out.row_count_exact = exact
                rows = rows[: limits.max_rows_shown]
            else:
                out.row_count = len(rows)
            out.rows = rows
        except duckdb.Error as exc:
            kind = "timeout" if token.fired else classify_error(exc)
            out.error_kind = kind
            out.error = _deadline_message(limits.timeout_s) if kind == "timeout" else clean_error(exc)
            if kind == "memory":
                out.error = (out.error.splitlines()[0] + "\n(the query ran out of its memory budget; "
                             "aggregate or filter more, or add LIMIT)")
            out.columns, out.rows = [], []
    out.db_seconds = time.perf_counter() - t1
    return out


def _count_rest(cur: duckdb.DuckDBPyConnection, cap: int) -> tuple[int, bool]:
    total = 0
    reader = cur.fetchmany(8192)
    while reader:
        total += len(reader)
        if total >= cap:
            return total, False
        reader = cur.fetchmany(8192)
    return total, True


def query_frame(gate: SqlGate, conn: EpisodeConnection, watchdog: Watchdog, query: str,
                limits: SqlLimits) -> Any:
    """Gate and run ``query`` returning a pandas DataFrame (the Python worker's ``sql()``).

    Raises ``RuntimeError`` whose message is the gate's or DuckDB's message.
    """
    try:
        decision: GateDecision = gate.check(query)
    except GateRejection as exc:
        raise RuntimeError(str(exc)) from None
    import pandas as pd

    if decision.kind == "static":
        assert decision.static is not None
        return pd.DataFrame(list(decision.static.rows), columns=list(decision.static.columns))
    with watchdog.deadline(conn.con, limits.timeout_s) as token:
        try:
            cur = conn.con.execute(decision.sql)
            frame = cur.fetch_df_chunk(max(1, math.ceil((limits.max_frame_rows + 1) / 2048)))
        except duckdb.Error as exc:
            if token.fired:
                raise RuntimeError(_deadline_message(limits.timeout_s)) from None
            raise RuntimeError(clean_error(exc)) from None
    if len(frame) > limits.max_frame_rows:
        raise RuntimeError(f"the result has more than {limits.max_frame_rows:,} rows; aggregate or filter in SQL")
    return frame


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
        label = {"gate": "Query refused", "timeout": "Query cancelled"}.get(out.error_kind or "", "SQL error")
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
