"""Warm episode connections: one private DuckDB per live episode over a shared read-only file.

Each connection (:class:`~ehrgym.env.engine.EpisodeConnection`, or by default its process-isolated
form :class:`~ehrgym.env.sqlserver.IsolatedConnection`) is an in-memory DuckDB database with the kit
database ATTACHed ``READ_ONLY`` as ``base``, the views of its schema profile (MIMIC-IV, or an external
benchmark's: :mod:`ehrgym.db.profile`) in its own catalog and hardened
settings (see :mod:`ehrgym.env.engine`). Building one costs tens of milliseconds in process and
~0.2 s as a child process, so a :class:`ConnectionPool` keeps ``warm`` of them ready (refilled by a
background thread) and starting an episode only re-points the views the task's overlay touches.

:class:`~ehrgym.env.engine.Watchdog` enforces the per-query time limit of in-process connections:
one thread per pool that calls ``con.interrupt()`` when a query outlives its deadline.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Union

from ehrgym.db.overlay import Overlay
from ehrgym.env.engine import BASE_ALIAS, ConnectionSettings, EpisodeConnection, Watchdog, database_profile
from ehrgym.env.sqlserver import IsolatedConnection
from ehrgym.errors import DatabaseError

__all__ = ["BASE_ALIAS", "ConnectionPool", "ConnectionSettings", "EpisodeConnection", "IsolatedConnection",
           "Watchdog", "database_profile", "make_connection"]

AnyConnection = Union[EpisodeConnection, IsolatedConnection]


def make_connection(db_path: Path, settings: ConnectionSettings) -> AnyConnection:
    """A fresh episode connection of the kind ``settings.isolation`` asks for."""
    # the database's schema profile (ehrgym.db.profile; read once per file) decides the views,
    # the static ehrgym_info copy and the search path of the connection
    profile = database_profile(db_path)
    info_sql = _info_sql(profile)
    if settings.isolation == "process":
        return IsolatedConnection(db_path, settings, info_sql, profile)
    return EpisodeConnection(db_path, settings, info_sql, profile)


_INFO_SQL: dict[int, tuple[Any, list[str]]] = {}


def _info_sql(profile: Any) -> list[str]:
    from ehrgym.env.gate import info_schema_sql

    hit = _INFO_SQL.get(id(profile))
    if hit is None or hit[0] is not profile:
        if len(_INFO_SQL) > 64:
            _INFO_SQL.clear()
        hit = _INFO_SQL[id(profile)] = (profile, info_schema_sql(profile))
    return hit[1]


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
        self._ready: list[AnyConnection] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._refiller: threading.Thread | None = None
        if self.warm:
            self._ready.append(make_connection(self.db_path, settings))  # fail fast on a bad file
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
                    conn = make_connection(self.db_path, self.settings)
                except Exception:  # noqa: BLE001 - surfaced again by acquire()
                    break
                with self._lock:
                    if self._closed:
                        conn.close()
                        return
                    self._ready.append(conn)
            if self._closed:
                return

    def acquire(self) -> AnyConnection:
        with self._lock:
            if self._closed:
                raise DatabaseError("the connection pool is closed")
            conn = self._ready.pop() if self._ready else None
        self._wake.set()
        return conn if conn is not None else make_connection(self.db_path, self.settings)

    def release(self, conn: AnyConnection) -> None:
        if self._closed or not conn.healthy or not getattr(conn, "alive", True):
            conn.close()   # a query process that was killed is not restarted just to be pooled
            return
        try:
            conn.apply(Overlay())   # also drops what the episode's queries left in the catalog
        except Exception:  # noqa: BLE001 - a broken connection is dropped, not reused
            conn.close()
            return
        if not conn.healthy:
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
