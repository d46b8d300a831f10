"""One episode's DuckDB connection and how a query runs on it (no gate here: see :mod:`ehrgym.env.gate`).

:class:`EpisodeConnection` is an in-memory DuckDB database with the kit database ATTACHed
``READ_ONLY`` as ``base``, the views of :class:`~ehrgym.db.overlay.OverlaySession` in its own
catalog (the tables of the database's schema profile, :mod:`ehrgym.db.profile`: MIMIC-IV unless the
database's bookkeeping names another), their search path, a static ``ehrgym_info`` copy of the
public schema, and
hardened settings: ``threads``, ``memory_limit`` (DuckDB's buffer pool), no spilling to disk
(or a private scratch directory capped at ``temp_mb``; never the working directory),
``max_expression_depth``, no Python replacement scans, no extension autoloading, then
``enable_external_access=false`` and ``lock_configuration=true``.

:meth:`EpisodeConnection.run` and :meth:`EpisodeConnection.frame` execute an admitted query with
a row cap and a byte cap on what leaves DuckDB; :class:`Watchdog` interrupts a query that
outlives its deadline (DuckDB checks for interrupts between vectors, so one long scalar call
runs on: :mod:`ehrgym.env.sqlserver` runs the connection in a child process that is killed
instead). Nothing an agent's query leaves in the catalog (the enum types ``PIVOT`` creates)
survives :meth:`EpisodeConnection.apply`: the catalog is compared with the snapshot taken when
the connection was built and the difference is dropped.

This module imports only DuckDB and the kit's schema/overlay code, so the query process starts fast.
"""

from __future__ import annotations

import heapq
import itertools
import math
import pickle
import re
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import duckdb

from ehrgym.db.connect import attach_base, read_meta
from ehrgym.db.overlay import Overlay, OverlaySession
from ehrgym.errors import DatabaseError

BASE_ALIAS = "base"
ISOLATION_MODES: tuple[str, ...] = ("process", "inprocess")


@dataclass(frozen=True)
class ConnectionSettings:
    """DuckDB resources of one episode connection and where it runs.

    ``isolation="process"`` (default) runs the connection in a child process whose resident
    memory is capped at ``process_memory_mb`` and which is killed when a query outlives its
    time limit by ``kill_grace_s`` (see :mod:`ehrgym.env.sqlserver`); ``"inprocess"`` runs it in
    the environment's own process (faster to start; one scalar call can then exceed the memory
    and time limits).
    """

    threads: int = 1
    memory_limit: str = "1GB"            # DuckDB's buffer pool (sorts, joins, aggregates)
    temp_mb: int = 0                     # 0: never spill to disk; >0: a private scratch dir capped at this
    max_expression_depth: int = 250      # parser nesting limit (DuckDB's default is 1000)
    isolation: str = "process"
    process_memory_mb: int = 2048        # resident-memory cap of the query process (isolation="process")
    kill_grace_s: float = 2.0            # a query still running this long after its time limit is killed

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"ConnectionSettings.isolation must be one of {ISOLATION_MODES}, got {self.isolation!r}")
        if self.threads < 1 or self.temp_mb < 0 or self.max_expression_depth < 10 or self.process_memory_mb < 64:
            raise ValueError("ConnectionSettings: threads >= 1, temp_mb >= 0, max_expression_depth >= 10 and "
                             "process_memory_mb >= 64 are required")
        if not re.fullmatch(r"\s*\d+(\.\d+)?\s*[KMGT]i?B\s*", self.memory_limit, re.I):
            raise ValueError(f"ConnectionSettings.memory_limit must look like '512MB', got {self.memory_limit!r}")


@dataclass(frozen=True)
class SqlLimits:
    """What one query may cost and how much of its result is shown."""

    timeout_s: float = 10.0
    max_rows_shown: int = 50
    max_cell_chars: int = 80
    max_count_rows: int = 5_000_000    # rows counted beyond the preview before saying "more than"
    max_frame_rows: int = 1_000_000    # rows a Python ``sql()`` call may return
    max_frame_bytes: int = 256 << 20   # bytes a Python ``sql()`` result may take (pickled)
    max_preview_bytes: int = 4 << 20   # bytes of the rows shown (each cell is cut to max_cell_chars anyway)


@dataclass
class QueryResult:
    """What running one admitted query produced (rows for the preview, or an error)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    row_count: int = 0
    row_count_exact: bool = True
    truncated: bool = False
    error: str | None = None
    error_kind: str | None = None      # timeout | memory | database | crashed


class QueryError(Exception):
    """A query failed; ``kind`` is timeout | memory | database | crashed, the message is agent-readable."""

    def __init__(self, message: str, kind: str = "database") -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        return (QueryError, (str(self), self.kind))


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
    if isinstance(exc, (duckdb.OutOfMemoryException, MemoryError)) or "memory" in type(exc).__name__.lower():
        return "memory"
    return "database"


def deadline_message(timeout: float) -> str:
    return (f"the query exceeded the time limit of {timeout:g} s and was cancelled; restrict it with "
            f"WHERE on subject_id/hadm_id/itemid, aggregate, or add LIMIT")


def memory_message(detail: str) -> str:
    return (f"{detail}\n(the query ran out of its memory budget; aggregate or filter more, avoid building huge "
            f"strings or lists, or add LIMIT)")


def error_message(exc: BaseException, kind: str, limits: SqlLimits) -> str:
    if kind == "timeout":
        return deadline_message(limits.timeout_s)
    if isinstance(exc, RecursionError):
        return "the query is nested too deeply to be read; flatten it (fewer nested parentheses or subqueries)"
    text = clean_error(exc) or type(exc).__name__
    return memory_message(text.splitlines()[0]) if kind == "memory" else text


class _Deadline:
    __slots__ = ("con", "at", "fired", "done", "lock")

    def __init__(self, con: duckdb.DuckDBPyConnection, at: float) -> None:
        self.con = con
        self.at = at
        self.fired = False
        self.done = False
        self.lock = threading.Lock()


class Watchdog:
    """Interrupts queries that outlive their deadline (one daemon thread, a heap of deadlines)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def deadline(self, con: duckdb.DuckDBPyConnection, seconds: float) -> Iterator[_Deadline]:
        token = _Deadline(con, time.monotonic() + seconds)
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ehrgym-query-watchdog", daemon=True)
                self._thread.start()
            # the thread sleeps until the earliest deadline; wake it only if this one is earlier
            wake = not self._heap or token.at < self._heap[0][0]
            heapq.heappush(self._heap, (token.at, next(self._seq), token))
            if wake:
                self._cv.notify()
        try:
            yield token
        finally:
            with token.lock:
                token.done = True

    def _loop(self) -> None:
        with self._cv:
            while not self._closed:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cv.wait()
                    continue
                at, _, token = self._heap[0]
                delay = at - time.monotonic()
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                heapq.heappop(self._heap)
                with token.lock:
                    if not token.done:
                        token.fired = True
                        token.con.interrupt()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()


# Catalog listings an agent's query could add to (settings are locked; compared too).
_CATALOG_QUERIES: dict[str, str] = {
    "types": "SELECT database_name, schema_name, type_name FROM duckdb_types() WHERE NOT internal",
    "macros": "SELECT database_name, schema_name, function_name, function_type FROM duckdb_functions() "
              "WHERE NOT internal",
    "views": "SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE NOT internal",
    "tables": "SELECT database_name, schema_name, table_name FROM duckdb_tables() WHERE database_name <> 'base'",
    "sequences": "SELECT database_name, schema_name, sequence_name FROM duckdb_sequences()",
    "schemas": "SELECT database_name, schema_name FROM duckdb_schemas() WHERE database_name <> 'base'",
    "databases": "SELECT database_name FROM duckdb_databases()",
    "settings": "SELECT name, value FROM duckdb_settings()",
}
_DROP: dict[str, str] = {"types": "TYPE", "views": "VIEW", "tables": "TABLE", "sequences": "SEQUENCE"}

Catalog = dict[str, frozenset[tuple[Any, ...]]]


def _ident(name: Any) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def _attached_profile(con: duckdb.DuckDBPyConnection) -> Any:
    """The schema profile named by the bookkeeping of the database attached as ``base``."""
    from ehrgym.db.profile import mimic_profile, profile_from_meta

    try:
        return profile_from_meta(read_meta(con, BASE_ALIAS))
    except DatabaseError:  # no bookkeeping: a plain MIMIC-IV database
        return mimic_profile()


_PROFILES: dict[tuple[str, int, int], Any] = {}
_PROFILES_LOCK = threading.Lock()


def database_profile(db_path: str | Path) -> Any:
    """The :class:`~ehrgym.db.profile.SchemaProfile` of a database file (read once per file version)."""
    path = Path(db_path).resolve()
    try:
        st = path.stat()
    except OSError as exc:
        raise DatabaseError(f"database {path} does not exist") from exc
    key = (str(path), st.st_mtime_ns, st.st_size)
    with _PROFILES_LOCK:
        if key in _PROFILES:
            return _PROFILES[key]
    con = duckdb.connect(":memory:")
    try:
        attach_base(con, path, BASE_ALIAS)
        profile = _attached_profile(con)
    except duckdb.Error as exc:
        raise DatabaseError(f"cannot open {path} for episodes: {exc}") from exc
    finally:
        con.close()
    with _PROFILES_LOCK:
        if len(_PROFILES) > 64:
            _PROFILES.clear()
        _PROFILES[key] = profile
    return profile


class EpisodeConnection:
    """One episode's private DuckDB: views over ``base`` with the current task's overlay."""

    def __init__(self, db_path: Path, settings: ConnectionSettings, info_sql: list[str] | None = None,
                 profile: Any = None) -> None:
        self.db_path = db_path
        self.settings = settings
        self.con = duckdb.connect(":memory:")
        self._scratch: str | None = None
        try:
            attach_base(self.con, db_path, BASE_ALIAS)
            # the tables exposed: MIMIC-IV, or the schema profile the database's bookkeeping names
            self.profile = profile if profile is not None else _attached_profile(self.con)
            self.session = OverlaySession(self.con, BASE_ALIAS, self.profile)
            if info_sql is None:
                from ehrgym.env.gate import info_schema_sql

                info_sql = info_schema_sql(self.profile)
            for stmt in info_sql:
                self.con.execute(stmt)
            self.con.execute(self.profile.search_path_sql())
            self.con.execute(f"SET threads = {int(settings.threads)}")
            self.con.execute(f"SET memory_limit = '{settings.memory_limit.strip()}'")
            self.con.execute(f"SET max_expression_depth = {int(settings.max_expression_depth)}")
            if settings.temp_mb > 0:
                self._scratch = tempfile.mkdtemp(prefix="ehrgym-spill-")
                self.con.execute(f"SET temp_directory = '{self._scratch}'")
                self.con.execute(f"SET max_temp_directory_size = '{int(settings.temp_mb)}MB'")
            else:  # no spilling at all: a query that needs more than memory_limit fails instead
                self.con.execute("SET temp_directory = ''")
            # no Python replacement scans: a bare name must never reach a DataFrame of the env process
            self.con.execute("SET python_enable_replacements = false")
            # no extension may load behind an unknown function name
            self.con.execute("SET autoinstall_known_extensions = false")
            self.con.execute("SET autoload_known_extensions = false")
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")
            self._baseline = self.catalog()
        except duckdb.Error as exc:
            self.close()
            raise DatabaseError(f"cannot open {db_path} for episodes: {exc}") from exc
        self.overlay = Overlay()
        self.healthy = True
        self.dirty = False          # a query that can write the catalog (PIVOT) ran since the last restore

    # -- state ----------------------------------------------------------------------------------
    def apply(self, overlay: Overlay, defer: bool = False) -> None:
        """Point the views at ``overlay``, first restoring the catalog if a query ran since (``defer`` is for the
        isolated connection's round trip; here re-pointing the same overlay is already free)."""
        if self.dirty:
            self.restore()
        self.session.apply(overlay)
        self.overlay = overlay

    def catalog(self) -> Catalog:
        """Every user-visible catalog object and setting (compared before and after episodes)."""
        return {name: frozenset(tuple(r) for r in self.con.execute(sql).fetchall())
                for name, sql in _CATALOG_QUERIES.items()}

    def restore(self) -> bool:
        """Drop what queries added to the catalog since the connection was built; False (and
        ``healthy=False``) if the catalog still differs."""
        now = self.catalog()
        for kind, rows in now.items():
            extra = rows - self._baseline[kind]
            for row in sorted(extra, key=repr):
                try:
                    self._drop(kind, row)
                except duckdb.Error:
                    pass
        self.dirty = False
        if self.catalog() != self._baseline:
            self.healthy = False
        return self.healthy

    def _drop(self, kind: str, row: tuple[Any, ...]) -> None:
        if kind in _DROP:
            db, schema, name = row
            self.con.execute(f"DROP {_DROP[kind]} IF EXISTS {_ident(db)}.{_ident(schema)}.{_ident(name)}")
        elif kind == "macros":
            db, schema, name, ftype = row
            what = "MACRO TABLE" if ftype == "table_macro" else "MACRO"
            self.con.execute(f"DROP {what} IF EXISTS {_ident(db)}.{_ident(schema)}.{_ident(name)}")
        elif kind == "schemas":
            db, schema = row
            self.con.execute(f"DROP SCHEMA IF EXISTS {_ident(db)}.{_ident(schema)} CASCADE")

    def meta(self) -> dict[str, Any]:
        """The database's bookkeeping (kit code only; agents cannot reach ``base``)."""
        return read_meta(self.con, BASE_ALIAS)

    # -- queries ------------------------------------------------------------------------------
    def run(self, sql: str, limits: SqlLimits, watchdog: Watchdog) -> QueryResult:
        """Run an admitted query: up to ``max_rows_shown`` rows and a count of the rest."""
        out = QueryResult()
        self._note(sql)
        with watchdog.deadline(self.con, limits.timeout_s) as token:
            try:
                cur = self.con.execute(sql)
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
                out.rows = _cap_preview(rows, limits)
            except (duckdb.Error, RecursionError, MemoryError) as exc:
                kind = "timeout" if token.fired else classify_error(exc)
                out.error_kind, out.error = kind, error_message(exc, kind, limits)
                out.columns, out.rows, out.row_count, out.truncated = [], [], 0, False
        return out

    def frame(self, sql: str, limits: SqlLimits, watchdog: Watchdog) -> bytes:
        """Run an admitted query into a pickled DataFrame of at most ``max_frame_rows`` rows and
        ``max_frame_bytes`` bytes; raises :class:`QueryError`."""
        self._note(sql)
        with watchdog.deadline(self.con, limits.timeout_s) as token:
            try:
                cur = self.con.execute(sql)
                chunks = max(1, math.ceil((limits.max_frame_rows + 1) / 2048))
                frame = cur.fetch_df_chunk(chunks)
            except (duckdb.Error, RecursionError, MemoryError) as exc:
                kind = "timeout" if token.fired else classify_error(exc)
                raise QueryError(error_message(exc, kind, limits), kind) from None
        if len(frame) > limits.max_frame_rows:
            raise QueryError(f"the result has more than {limits.max_frame_rows:,} rows; aggregate or filter in SQL")
        data = pickle.dumps(frame, protocol=5)
        if len(data) > limits.max_frame_bytes:
            raise QueryError(f"the result takes more than {limits.max_frame_bytes >> 20} MB; select fewer or shorter "
                             f"columns, aggregate or filter in SQL", "memory")
        return data

    def _note(self, sql: str) -> None:
        """Mark the catalog for restoring when ``sql`` may add to it (:func:`may_write_catalog`)."""
        if may_write_catalog(sql):
            self.dirty = True

    def raw(self, sql: str) -> list[tuple[Any, ...]]:
        """Run kit SQL without the gate (benchmarks and tests only; never agent text)."""
        return self.con.execute(sql).fetchall()

    def close(self) -> None:
        try:
            self.con.close()
        except duckdb.Error:
            pass
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def may_write_catalog(sql: str) -> bool:
    """Whether an admitted query may add to the catalog. An admitted query is one SELECT (no CREATE, SET, macro or
    temp table: the gate refuses them and the settings are locked); the one catalog write left is the enum type
    DuckDB creates for a ``PIVOT`` (or UNPIVOT)."""
    return "pivot" in sql.lower()


def _cap_preview(rows: list[tuple[Any, ...]], limits: SqlLimits) -> list[tuple[Any, ...]]:
    """Cut long cells of the shown rows (they are shown cut to max_cell_chars anyway) so that a preview
    of huge values never travels or stays whole: at most ``max_preview_bytes`` characters in all.
    A list, map or struct value longer than its share is replaced by its text, cut."""
    cells = sum(len(r) for r in rows)
    budget = max(limits.max_cell_chars * 4, limits.max_preview_bytes // max(1, cells))
    out = []
    for row in rows:
        if any(isinstance(v, (str, bytes, list, dict, tuple)) for v in row):
            row = tuple(_cap_value(v, budget) for v in row)
        out.append(row)
    return out


def _cap_value(value: Any, budget: int) -> Any:
    if isinstance(value, (str, bytes)):
        return value[:budget] if len(value) > budget else value
    if isinstance(value, (list, dict, tuple)):
        text = str(value)
        return text[:budget] if len(text) > budget else value
    return value


def _count_rest(cur: duckdb.DuckDBPyConnection, cap: int) -> tuple[int, bool]:
    total = 0
    reader = cur.fetchmany(8192)
    while reader:
        total += len(reader)
        if total >= cap:
            return total, False
        reader = cur.fetchmany(8192)
    return total, True
