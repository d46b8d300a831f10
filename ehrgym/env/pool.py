"""Warm episode connections: one in-memory DuckDB per live episode over a shared read-only file.

Each :class:`EpisodeConnection` is an in-memory DuckDB database with the kit database
ATTACHed ``READ_ONLY`` as ``base``, the MIMIC-IV views of :class:`~ehrgym.db.overlay.OverlaySession`
in its own catalog, the MIMIC-IV search path, a static ``ehrgym_info`` copy of the public
schema, ``threads``/``memory_limit``, no Python replacement scans, no extension autoloading and finally
``enable_external_access=false`` and ``lock_configuration=true``. Building one costs tens of milliseconds, so a
:class:`ConnectionPool` keeps ``warm`` of them ready (refilled by a background thread) and
starting an episode only re-points the views the task's overlay touches.

:class:`Watchdog` enforces the per-query time limit: one thread per pool that calls
``con.interrupt()`` when a query outlives its deadline.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import duckdb

from ehrgym.db.connect import attach_base, read_meta
from ehrgym.db.overlay import Overlay, OverlaySession
from ehrgym.env.gate import info_schema_sql
from ehrgym.errors import DatabaseError

BASE_ALIAS = "base"


@dataclass(frozen=True)
class ConnectionSettings:
    """DuckDB resources of one episode connection."""

    threads: int = 1
    memory_limit: str = "1GB"


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


class EpisodeConnection:
    """One episode's private DuckDB: views over ``base`` with the current task's overlay."""

    def __init__(self, db_path: Path, settings: ConnectionSettings) -> None:
        self.db_path = db_path
        self.con = duckdb.connect(":memory:")
        try:
            attach_base(self.con, db_path, BASE_ALIAS)
            # the tables exposed: MIMIC-IV, or the schema profile the database's bookkeeping names
            self.profile = _database_profile(self.con)
            self.session = OverlaySession(self.con, BASE_ALIAS, self.profile)
            for stmt in info_schema_sql(self.profile):
                self.con.execute(stmt)
            self.con.execute(self.profile.search_path_sql())
            self.con.execute(f"SET threads = {int(settings.threads)}")
            self.con.execute(f"SET memory_limit = '{settings.memory_limit}'")
            # no Python replacement scans: a bare name must never reach a DataFrame of the env process
            self.con.execute("SET python_enable_replacements = false")
            # no extension may load behind an unknown function name
            self.con.execute("SET autoinstall_known_extensions = false")
            self.con.execute("SET autoload_known_extensions = false")
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")
        except duckdb.Error as exc:
            self.con.close()
            raise DatabaseError(f"cannot open {db_path} for episodes: {exc}") from exc
        self.overlay = Overlay()
        self.healthy = True

    def apply(self, overlay: Overlay) -> None:
        self.session.apply(overlay)
        self.overlay = overlay

    def meta(self) -> dict[str, Any]:
        """The database's bookkeeping (kit code only; agents cannot reach ``base``)."""
        return read_meta(self.con, BASE_ALIAS)

    def close(self) -> None:
        try:
            self.con.close()
        except duckdb.Error:
            pass


def _database_profile(con: duckdb.DuckDBPyConnection) -> Any:
    from ehrgym.db.profile import mimic_profile, profile_from_meta

    try:
        return profile_from_meta(read_meta(con, BASE_ALIAS))
    except DatabaseError:  # no bookkeeping: a plain MIMIC-IV database
        return mimic_profile()


class ConnectionPool:
    """Pre-warmed :class:`EpisodeConnection` objects for one database file.

    ``acquire()`` hands out a ready connection (building one only when the pool is empty) and
    wakes the background refill; ``release()`` clears the overlay and keeps the connection for
    the next episode. Any number of episodes can hold connections at once.
    """

    def __init__(self, db_path: str | Path, settings: ConnectionSettings = ConnectionSettings(),
                 warm: int = 1, background: bool = True) -> None:
        self.db_path = Path(db_path)
        if not self.db_path.exists():
            raise DatabaseError(f"database {self.db_path} does not exist; build one with "
                                f"`ehrgym db synth --out {self.db_path}`")
        self.settings = settings
        self.warm = max(0, int(warm))
        self.watchdog = Watchdog()
        self._ready: list[EpisodeConnection] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._refiller: threading.Thread | None = None
        if self.warm:
            self._ready.append(EpisodeConnection(self.db_path, settings))  # fail fast on a bad file
        if background and self.warm:
            self._refiller = threading.Thread(target=self._refill_loop, name="ehrgym-conn-refill", daemon=True)
            self._refiller.start()
            self._wake.set()

    def _refill_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                with self._lock:
                    if self._closed or len(self._ready) >= self.warm:
                        break
                try:
                    conn = EpisodeConnection(self.db_path, self.settings)
                except Exception:  # noqa: BLE001 - surfaced again by acquire()
                    break
                with self._lock:
                    if self._closed:
                        conn.close()
                        return
                    self._ready.append(conn)
            if self._closed:
                return

    def acquire(self) -> EpisodeConnection:
        with self._lock:
            if self._closed:
                raise DatabaseError("the connection pool is closed")
            conn = self._ready.pop() if self._ready else None
        self._wake.set()
        return conn if conn is not None else EpisodeConnection(self.db_path, self.settings)

    def release(self, conn: EpisodeConnection) -> None:
        if self._closed or not conn.healthy:
            conn.close()
            return
        try:
            conn.apply(Overlay())
        except Exception:  # noqa: BLE001 - a broken connection is dropped, not reused
            conn.close()
            return
        with self._lock:
            if len(self._ready) < max(self.warm, 1) * 4:
                self._ready.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        self._wake.set()
        for conn in ready:
            conn.close()
        self.watchdog.close()

    def __enter__(self) -> "ConnectionPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
