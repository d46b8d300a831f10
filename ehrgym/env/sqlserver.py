"""An episode connection in a child process: a query can be killed, and its memory is capped.

DuckDB's ``memory_limit`` covers its buffer pool (sorts, joins, aggregates), not the values one
scalar call builds (``repeat('x', 2000000000)``, ``list_sum(range(250000000))``), and
``interrupt()`` takes effect only between vectors, so one long scalar call outlives any time
limit. :class:`IsolatedConnection` therefore runs the :class:`~ehrgym.env.engine.EpisodeConnection`
in a child process (``python -m ehrgym.env.sqlserver``, started in ``/`` with the kit on its path)
and the environment process

* kills the child when its resident memory exceeds ``ConnectionSettings.process_memory_mb``
  (polled every 10 ms while a query runs) — the agent sees a memory error;
* kills it when a query is still running ``kill_grace_s`` after its time limit (the child's own
  watchdog interrupts it at the limit first) — the agent sees the time-limit message;
* treats any other death of the child as a crashed query.

The next request starts a fresh child with the same overlay (~0.2 s), so the episode goes on.
Requests travel pickled to the child; replies are pickled by code of this kit running in the child
(the environment unpickles them as it would have read DuckDB's results in process). DataFrames for
the Python tool travel as pickled bytes that the environment forwards to its sandboxed worker
without unpickling.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ehrgym.db.overlay import Overlay
from ehrgym.env.engine import (Catalog, ConnectionSettings, QueryError, QueryResult, SqlLimits, Watchdog,
                               database_profile, deadline_message, may_write_catalog, memory_message)
from ehrgym.errors import DatabaseError, EhrGymError, InfrastructureError

_START_TIMEOUT_S = 60.0
_CONTROL_TIMEOUT_S = 60.0
_POLL_S = 0.01
_PAGE = os.sysconf("SC_PAGE_SIZE")
_MAX_PREVIEW_REPLY = 64 << 20


class IsolatedConnection:
    """The parent side: the same interface as :class:`~ehrgym.env.engine.EpisodeConnection`."""

    def __init__(self, db_path: Path, settings: ConnectionSettings, info_sql: list[str] | None = None,
                 profile: Any = None) -> None:
        self.db_path = Path(db_path).resolve()
        self.settings = settings
        # the schema profile (ehrgym.db.profile) is read here, so the child needs no gate import
        self.profile = profile if profile is not None else database_profile(self.db_path)
        if info_sql is None:
            from ehrgym.env.gate import info_schema_sql

            info_sql = info_schema_sql(self.profile)
        self._info_sql = info_sql
        self._lock = threading.Lock()
        self.overlay = Overlay()
        self._pending = False           # self.overlay not yet sent to the child (apply)
        self.healthy = True
        self.dirty = False
        self.restarts = 0               # children killed or lost and replaced
        self.last_kill: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._chan: Connection | None = None
        self._statm: int | None = None
        self._start()

    # -- the child ----------------------------------------------------------------------------
    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "PYTHONHASHSEED", "HOME", "LANG",
                                                           "LC_ALL", "TMPDIR", "VIRTUAL_ENV")}
        import ehrgym

        kit_root = str(Path(ehrgym.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([kit_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        old = getattr(self, "_stderr", None)
        if old is not None:
            old.close()
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-s", "-B", "-m", "ehrgym.env.sqlserver", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env, cwd="/", stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True)
        finally:
            theirs.close()
        self._chan = Connection(ours.detach())
        try:
            self._statm = os.open(f"/proc/{self._proc.pid}/statm", os.O_RDONLY)
        except OSError:
            self._statm = None
        self._chan.send_bytes(pickle.dumps({"db": str(self.db_path), "settings": self.settings,
                                            "info_sql": self._info_sql, "profile": self.profile,
                                            "overlay": self.overlay}))
        status, detail = self._reply(_START_TIMEOUT_S)
        if status != "ok":
            self._kill()
            raise DatabaseError(f"cannot start the query process for {self.db_path}: {detail}")

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-2000:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def _rss_mb(self) -> float:
        if self._statm is None:
            return 0.0
        try:
            return int(os.pread(self._statm, 128, 0).split()[1]) * _PAGE / (1 << 20)
        except (OSError, ValueError, IndexError):
            return 0.0

    def _reply(self, timeout: float, kill_after: float | None = None) -> tuple[str, Any]:
        """Wait for the child's reply; kill it on the memory cap or ``kill_after`` seconds."""
        assert self._chan is not None
        start = time.monotonic()
        cap = self.settings.process_memory_mb
        limit = kill_after if kill_after is not None else timeout
        try:
            while not self._chan.poll(_POLL_S):
                if self._rss_mb() > cap:
                    self._kill()
                    return "killed", "memory"
                if time.monotonic() - start > limit:
                    self._kill()
                    return "killed", "timeout"
                if self._proc is not None and self._proc.poll() is not None:
                    break
            return pickle.loads(self._chan.recv_bytes())
        except (EOFError, OSError, pickle.UnpicklingError):
            self._kill()
            return "killed", "crashed"

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                self._proc.kill()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self._chan is not None:
            self._chan.close()
            self._chan = None
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None
        self._proc = None

    def _call(self, op: str, *args: Any, kill_after: float | None = None) -> tuple[str, Any]:
        with self._lock:
            if self._proc is None:
                self.restarts += 1
                self._start()
            assert self._chan is not None
            try:
                self._chan.send_bytes(pickle.dumps((op, args)))
            except OSError:
                self._kill()
                return "killed", "crashed"
            status, value = self._reply(_CONTROL_TIMEOUT_S, kill_after)
            if status == "killed":
                self.last_kill = value
            return status, value

    def _control(self, op: str, *args: Any) -> Any:
        status, value = self._call(op, *args)
        if status == "ok":
            return value
        if status == "killed":
            raise DatabaseError(f"the query process stopped during {op} ({value}); stderr:\n{self._stderr_tail()}")
        raise value if isinstance(value, Exception) else DatabaseError(str(value))

    # -- the EpisodeConnection interface -----------------------------------------------------
    def apply(self, overlay: Overlay, defer: bool = False) -> None:
        """Serve ``overlay``: the child re-points its views, restoring its catalog first if a query wrote to it.
        ``defer``: only when a request first needs them (:meth:`_ready`), so an episode whose queries the result
        cache answers never waits for it; an overlay that does not fit the database then fails at that request, as
        an infrastructure error, instead of here."""
        if self._pending or self.dirty or not self.alive or overlay != self.overlay:
            self.overlay = overlay   # a restarted child starts with it
            self._pending = True
        # else: the same overlay again (the next trial of a task), nothing written to the catalog since: the child
        # would neither restore nor re-point anything (EpisodeConnection.apply)
        if self._pending and not defer:
            self._send_overlay()

    def _send_overlay(self) -> None:
        self._pending = False
        self._control("apply", self.overlay)
        self.dirty = False

    def _ready(self) -> None:
        """Send the overlay :meth:`apply` left pending; a failure marks the connection unhealthy (the environment
        replaces it at the next reset) and is raised as an infrastructure error (the runner retries the episode)."""
        if self._pending:
            try:
                self._send_overlay()
            except Exception as exc:
                self.healthy = False
                raise InfrastructureError(f"the episode's data could not be served: {exc}") from exc

    def catalog(self) -> Catalog:
        self._ready()
        return self._control("catalog")

    def restore(self) -> bool:
        self._ready()
        ok = bool(self._control("restore"))
        self.healthy = self.healthy and ok
        self.dirty = False
        return ok

    def meta(self) -> dict[str, Any]:
        return self._control("meta")

    def raw(self, sql: str) -> list[tuple[Any, ...]]:
        self._ready()
        self.dirty = True  # kit SQL, not gated: it may write anything
        return self._control("raw", sql)

    def _query(self, op: str, sql: str, limits: SqlLimits) -> tuple[str, Any]:
        """Run ``op`` in the child under the kill deadline; a kill comes back as ("killed", (kind, message))."""
        self._ready()
        # as the child marks its own catalog for restoring (a fresh child after a kill starts restored)
        self.dirty = self.dirty or may_write_catalog(sql)
        status, value = self._call(op, sql, limits, kill_after=limits.timeout_s + self.settings.kill_grace_s)
        if status == "killed":
            return status, self._kill_message(value, limits)
        return status, value

    def run(self, sql: str, limits: SqlLimits, watchdog: Watchdog | None = None) -> QueryResult:
        status, value = self._query("run", sql, limits)
        if status == "ok":
            return value
        if status == "killed":
            kind, msg = value
            return QueryResult(error=msg, error_kind=kind)
        return QueryResult(error=str(value), error_kind="database")

    def frame(self, sql: str, limits: SqlLimits, watchdog: Watchdog | None = None) -> bytes:
        status, value = self._query("frame", sql, limits)
        if status == "ok":
            return value
        if status == "killed":
            kind, msg = value
            raise QueryError(msg, kind)
        raise value if isinstance(value, QueryError) else QueryError(str(value))

    def _kill_message(self, reason: str, limits: SqlLimits) -> tuple[str, str]:
        if reason == "timeout":
            return "timeout", deadline_message(limits.timeout_s)
        if reason == "memory":
            return "memory", memory_message(f"the query used more than {self.settings.process_memory_mb} MB "
                                            f"and was stopped")
        return "crashed", "the query crashed the database process and was stopped; try a simpler query"

    @property
    def alive(self) -> bool:
        """False after a kill until the next request starts a fresh query process."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        with self._lock:
            if self._chan is not None:
                try:
                    self._chan.send_bytes(pickle.dumps(("quit", ())))
                except OSError:
                    pass
            proc = self._proc
            if proc is not None:
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            self._kill()
            try:
                self._stderr.close()
            except OSError:
                pass

    def __del__(self) -> None:  # a forgotten connection must not leave its process behind
        try:
            if self._proc is not None:
                self._proc.kill()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


# ---------------------------------------------------------------------------------------------
# the child
# ---------------------------------------------------------------------------------------------
def serve(fd: int) -> None:
    from ehrgym.env.engine import EpisodeConnection

    chan = Connection(fd)
    init = pickle.loads(chan.recv_bytes())
    try:
        conn = EpisodeConnection(Path(init["db"]), init["settings"], init["info_sql"], init.get("profile"))
        conn.apply(init["overlay"])
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        chan.send_bytes(pickle.dumps(("error", f"{type(exc).__name__}: {exc}")))
        return
    chan.send_bytes(pickle.dumps(("ok", None)))
    watchdog = Watchdog()
    while True:
        try:
            op, args = pickle.loads(chan.recv_bytes())
        except EOFError:
            break
        if op == "quit":
            break
        try:
            if op == "run":
                reply: tuple[str, Any] = ("ok", conn.run(args[0], args[1], watchdog))
            elif op == "frame":
                reply = ("ok", conn.frame(args[0], args[1], watchdog))
            elif op == "apply":
                conn.apply(args[0])
                reply = ("ok", None)
            elif op == "restore":
                reply = ("ok", conn.restore())
            elif op == "catalog":
                reply = ("ok", conn.catalog())
            elif op == "meta":
                reply = ("ok", conn.meta())
            elif op == "raw":
                reply = ("ok", conn.raw(args[0]))
            else:
                reply = ("error", DatabaseError(f"unknown request {op!r}"))
        except (QueryError, EhrGymError) as exc:
            reply = ("error", exc)
        except Exception as exc:  # noqa: BLE001 - every failure goes back as a message
            reply = ("error", DatabaseError(f"{type(exc).__name__}: {exc}"))
        try:
            data = pickle.dumps(reply, protocol=5)
        except Exception as exc:  # noqa: BLE001 - e.g. an exotic value in a result
            data = pickle.dumps(("error", QueryError(f"the result cannot be sent back ({type(exc).__name__})")))
        if op == "run" and len(data) > _MAX_PREVIEW_REPLY:  # previews are cut to max_preview_bytes; a backstop
            data = pickle.dumps(("ok", QueryResult(error="the rows to show are too large; select fewer or shorter "
                                                         "columns", error_kind="memory")))
        chan.send_bytes(data)
    conn.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
