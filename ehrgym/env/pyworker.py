"""The ``python`` tool: an isolated, persistent per-episode Python worker.

A :class:`PythonWorkerPool` starts one fork server ("zygote", :mod:`ehrgym.env.pyworker_child`)
in a fresh interpreter that has pandas and numpy imported and warmed up, and keeps ``warm``
forked workers ready so that :meth:`PythonWorkerPool.acquire` returns in well under a
millisecond. A :class:`PythonWorker` is a notebook-like kernel: variables, imports and
definitions persist across :meth:`PythonWorker.run` calls; ``pd``, ``np``, ``sql``,
``SQLError`` and ``display`` are predefined; the value of a final expression is shown like a notebook cell.

The worker's only door to data is ``sql(query) -> DataFrame``: the query travels to this
process, which calls the ``sql`` callback given to ``run`` (the environment's SQL gate) and
sends back the pickled DataFrame or the error text (raised in the worker as ``SQLError``).
Nothing the worker sends is ever unpickled here.

Limits (:class:`PythonLimits`), each violation stops *that* worker and is reported in
``PythonResult.killed``; the pool keeps serving:

* ``cpu_time`` — per run: a CPU-time interval timer (ITIMER_PROF) of ``cpu_seconds``; per
  worker lifetime: RLIMIT_CPU of ``worker_cpu_seconds`` (kernel SIGXCPU, then SIGKILL).
* ``wall_time`` — this process kills the worker after ``wall_seconds`` per run (including the
  time its ``sql()`` calls take).
* ``memory`` — RLIMIT_AS of the pre-loaded interpreter's address space + ``memory_mb``.
* ``output_size`` — output beyond ``output_chars`` is truncated with a notice; printing more
  than ``flood_chars`` characters in one run kills.
* ``processes`` — any attempt to start a process (os.fork, subprocess, os.system, exec, pty…),
  denied by the audit hook; RLIMIT_NPROC (own uid) backs it at the kernel level.
* ``crashed`` — the worker died otherwise (segfault, os._exit, protocol violation).

Isolation (defence in depth; :attr:`PythonWorkerPool.sandbox` lists the layers in force):
``mount_ns`` (root only: the worker's file system holds nothing but the Python installation
and system libraries, read-only — no database, benchmark, repository or data directory),
``net_ns`` (root only: no network interfaces), ``landlock`` (Linux >= 5.13, no privilege
needed: the kernel lets the worker read only beneath the Python installation and system
libraries -- this also covers libraries that do file I/O in C, such as pyarrow -- and denies
writes, exec, TCP and signals to outside processes), ``uid`` (root only: an unprivileged uid of
its own per worker, no capabilities), ``rlimits``, ``audit_hook`` (always; the floor) (denies open/listdir outside the Python installation, writes,
sockets, process creation, ctypes calls, importing DuckDB/sqlite3/…, rlimit changes, signals
to other processes). The worker also starts with a clean environment and no inherited
descriptors besides its own channel.

The pool fails closed: unless ``mount_ns`` or ``landlock`` is in force it raises
:class:`SandboxUnavailable` naming what is missing, because the audit hook alone can be got
around (C++ file readers, monkeypatched path functions); ``allow_unisolated=True`` is the
explicit, labelled unsafe mode.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

from ehrgym.env import pyworker_child as _child
from ehrgym.errors import EnvironmentStateError, InfrastructureError

if TYPE_CHECKING:
    import pandas as pd

KILL_REASONS: tuple[str, ...] = _child.KILL_REASONS
_STARTUP_TIMEOUT_S = 120.0
_CONTROL_TIMEOUT_S = 30.0
_HELLO_TIMEOUT_S = 30.0
_MAX_QUERY_BYTES = 1 << 20


@dataclass(frozen=True)
class PythonLimits:
    """Resource limits of one Python worker (per run unless said otherwise)."""

    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 1024
    output_chars: int = 20000
    max_processes: int = 0
    #: printing more than this many characters in one run kills the worker ('output_size')
    flood_chars: int = 1_000_000
    #: CPU seconds one worker may use over its whole life (kernel RLIMIT_CPU backstop)
    worker_cpu_seconds: float = 600.0
    #: each ``sql()`` reply is sent a whole number of these milliseconds after the call asked (0: when ready), so a
    #: cell that times its own queries reads the quantum, not what the episode's views cost (a noisy twin's views
    #: carry the noise's edits on top of the background both twins get; ``ehrgym.bench.validity.timing``)
    sql_time_quantum_ms: float = 10.0

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_mb", "output_chars", "flood_chars", "worker_cpu_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"PythonLimits.{name} must be positive, got {getattr(self, name)!r}")
        if self.max_processes < 0:
            raise ValueError(f"PythonLimits.max_processes must be >= 0, got {self.max_processes!r}")
        if not self.sql_time_quantum_ms >= 0:
            raise ValueError(f"PythonLimits.sql_time_quantum_ms must be >= 0, got {self.sql_time_quantum_ms!r}")
        if self.flood_chars < self.output_chars:
            raise ValueError("PythonLimits.flood_chars must be at least output_chars")


@dataclass
class PythonResult:
    """What one ``run`` produced: captured output (+ final expression), a user-code traceback, or a kill."""

    output: str
    error: str | None
    killed: str | None
    seconds: float
    truncated: bool
    cpu_seconds: float = 0.0
    sql_calls: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and self.killed is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# One sentence per kill reason: what happened, in the agent's terms.
_KILL_NOTES: dict[str, str] = {
    "cpu_time": "CPU time limit exceeded ({cpu_seconds:g} s of CPU per step)",
    "wall_time": "time limit exceeded ({wall_seconds:g} s per step)",
    "memory": "memory limit exceeded ({memory_mb} MB)",
    "output_size": "output flood (more than {flood_chars} characters printed in one step)",
    "processes": "starting processes is not allowed in the Python tool",
    "crashed": "the Python worker crashed",
}


def kill_message(reason: str, limits: PythonLimits) -> str:
    """The agent-facing sentence for a kill ``reason`` (one of :data:`KILL_REASONS`)."""
    note = _KILL_NOTES[reason].format(**asdict(limits))
    return (f"{note}; the Python worker was stopped and its variables are lost "
            f"(the next python call starts a fresh one).")


#: the kernel layers that confine file access (at least one must be in force unless the user opts out)
ISOLATION_LAYERS: tuple[str, ...] = ("mount_ns", "landlock")
UNSAFE_LABEL = "UNSAFE: no OS isolation (audit hook + rlimits only)"


class SandboxUnavailable(InfrastructureError):
    """The host offers none of the OS isolation layers and the unsafe mode was not chosen."""


def sandbox_refusal(layers: tuple[str, ...]) -> str:
    """Why the Python tool refuses to start on this host, and what to do about it."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return ("The Python tool refuses to start: none of its OS isolation layers is available on this host "
            f"(in force: {', '.join(layers)}). Missing: mount_ns (a private read-only file system; needs root, "
            f"e.g. running as root in a container{'' if not root else ' - this process is root but unshare failed'}) "
            "and landlock (needs Linux >= 5.13 with Landlock enabled: CONFIG_SECURITY_LANDLOCK=y and 'landlock' in "
            "the kernel's lsm= list). Without them the in-process audit hook alone cannot keep an agent's code from "
            "reading the benchmark's answers or the clean database. Run on such a host, disable the tool "
            "(EnvConfig(python=False), `--no-python`), or accept the risk explicitly with the unsafe mode "
            "(EnvConfig(python_unsafe=True), `--python-unsafe`), which every run record then labels unsafe.")


class _Dead(Exception):
    """The worker's channel closed or misbehaved."""


class _Timeout(Exception):
    """The run's wall-clock deadline passed."""


class _Zygote:
    """Handle on the fork-server process (parent side)."""

    def __init__(self, limits: PythonLimits, os_isolation: bool | str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._stderr = tempfile.TemporaryFile()
        # -s -P (not -I): no user site, no script dir on sys.path, but PYTHONHASHSEED from our clean env
        # is honoured, so set iteration order in the worker is the same in every run.
        cmd = [sys.executable, "-s", "-P", "-B", _child.__file__, str(theirs.fileno()),
               json.dumps({**asdict(limits), "os_isolation": os_isolation})]
        try:
            self.proc = subprocess.Popen(
                cmd, pass_fds=(theirs.fileno(),), env=dict(_child.ZYGOTE_ENV), cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.sock = ours
        try:
            kind, payload, _ = self.recv(_STARTUP_TIMEOUT_S)
        except InfrastructureError:
            self.close()
            raise
        if kind != b"R":
            detail = json.loads(payload or b"{}").get("error", "") if kind == b"!" else repr(kind)
            self.close()
            raise InfrastructureError(f"the Python worker fork server failed to start:\n{detail}")
        self.info: dict[str, Any] = json.loads(payload)

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-3000:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self.sock.fileno() != -1

    def send(self, msg: bytes) -> None:
        try:
            self.sock.settimeout(_CONTROL_TIMEOUT_S)
            self.sock.send(msg)
        except OSError as exc:
            raise InfrastructureError(f"the Python worker fork server is gone ({exc}); the pool restarts it") from exc

    def recv(self, timeout: float = _CONTROL_TIMEOUT_S) -> tuple[bytes, bytes, list[int]]:
        try:
            self.sock.settimeout(timeout)
            msg, fds, _, _ = socket.recv_fds(self.sock, 65536, 1)
        except OSError as exc:  # includes socket.timeout
            raise InfrastructureError(
                f"the Python worker fork server did not answer ({exc}). Its stderr:\n{self._stderr_tail()}") from exc
        if not msg:
            raise InfrastructureError(
                f"the Python worker fork server exited (code {self.proc.poll()}). Its stderr:\n{self._stderr_tail()}")
        return msg[:1], msg[1:], fds

    def close(self) -> None:
        try:
            if self.sock.fileno() != -1:
                try:
                    self.sock.settimeout(1.0)
                    self.sock.send(b"Q")
                except OSError:
                    pass
                self.sock.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        finally:
            self._stderr.close()


@dataclass
class _Spawn:
    pid: int
    sock: socket.socket


class _Handle:
    """OS resources of one worker; closing kills the process (idempotent, finalizer-safe)."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def kill(self) -> None:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def close(self) -> None:
        self.kill()
        self.sock.close()
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None


class PythonWorkerPool:
    """Fork server + ``warm`` ready workers; :meth:`acquire` hands out a fresh worker per episode."""

    def __init__(self, limits: PythonLimits = PythonLimits(), warm: int = 1, *,
                 os_isolation: bool | str = True, allow_unisolated: bool = False) -> None:
        """Start the fork server (0.5-1.5 s: it imports pandas once).

        ``os_isolation``: ``True`` (default) applies every kernel layer the host allows;
        ``"unprivileged"`` only those a non-root user gets (Landlock), as on a non-root host;
        ``False`` none (audit hook + rlimits only). The last two exist to test the fallbacks.

        Fails closed: when neither ``mount_ns`` nor ``landlock`` is in force the pool raises
        :class:`SandboxUnavailable` (saying what is missing), unless ``allow_unisolated=True``
        (the unsafe mode: :attr:`unsafe` is then True).
        """
        if os_isolation not in (True, False, "unprivileged"):
            raise ValueError(f"os_isolation must be True, False or 'unprivileged', got {os_isolation!r}")
        if warm < 0:
            raise ValueError(f"warm must be >= 0, got {warm}")
        self.limits = limits
        self.warm = warm
        self.os_isolation = os_isolation
        self._lock = threading.RLock()
        self._owner = os.getpid()
        self._ready: deque[_Spawn] = deque()
        self._pending = 0
        self._closed = False
        self.allow_unisolated = allow_unisolated
        self._zygote = _Zygote(limits, os_isolation)
        self._finalizer = weakref.finalize(self, PythonWorkerPool._shutdown, self._zygote, self._ready)
        if not self.isolated and not allow_unisolated:
            layers = self.sandbox
            self.close()
            raise SandboxUnavailable(sandbox_refusal(layers))
        with self._lock:
            self._top_up()

    # ------------------------------------------------------------------ public

    @property
    def sandbox(self) -> tuple[str, ...]:
        """Isolation layers in force for this pool's workers (see the module docstring)."""
        info = self._zygote.info
        return tuple(info.get("layers", ())) + ("rlimits",) + (("uid",) if info.get("drop_uid") else ()) + ("audit_hook",)

    @property
    def isolated(self) -> bool:
        """True when at least one OS layer confines the workers' file access (see :data:`ISOLATION_LAYERS`)."""
        return any(layer in self.sandbox for layer in ISOLATION_LAYERS)

    @property
    def unsafe(self) -> bool:
        """True when workers run without OS isolation (only by explicit ``allow_unisolated=True``)."""
        return not self.isolated

    def acquire(self) -> PythonWorker:
        """A fresh worker (new process, empty namespace); the caller closes it when the episode ends."""
        last: Exception | None = None
        for _ in range(3):
            with self._lock:
                self._check_usable()
                try:
                    if not self._zygote.alive:
                        self._restart()
                    spawn = self._next_spawn()
                    self._top_up()
                except InfrastructureError as exc:
                    last = exc
                    self._restart()
                    continue
            try:
                return PythonWorker._start(self, spawn)
            except InfrastructureError as exc:
                last = exc
        raise InfrastructureError(f"could not start a Python worker: {last}")

    def close(self) -> None:
        """Stop the fork server and every worker it started (idempotent)."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> PythonWorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _shutdown(zygote: _Zygote, ready: deque[_Spawn]) -> None:
        while ready:
            spawn = ready.popleft()
            _Handle(spawn.pid, spawn.sock).close()
        zygote.close()  # the fork server kills every worker it forked

    def _check_usable(self) -> None:
        if self._closed:
            raise EnvironmentStateError("the Python worker pool is closed; create a new PythonWorkerPool")
        if os.getpid() != self._owner:
            raise EnvironmentStateError(
                "a PythonWorkerPool cannot be used from a forked child process; create one per process")

    def _restart(self) -> None:
        self._finalizer.detach()
        self._shutdown(self._zygote, self._ready)
        self._pending = 0
        self._zygote = _Zygote(self.limits, self.os_isolation)
        self._finalizer = weakref.finalize(self, PythonWorkerPool._shutdown, self._zygote, self._ready)

    def _top_up(self) -> None:
        while len(self._ready) + self._pending < self.warm:
            self._zygote.send(b"F")
            self._pending += 1

    def _next_spawn(self) -> _Spawn:
        while not self._ready:
            if self._pending == 0:
                self._zygote.send(b"F")
                self._pending += 1
            self._read_reply()
        return self._ready.popleft()

    def _read_reply(self) -> tuple[bytes, bytes]:
        kind, payload, fds = self._zygote.recv()
        if kind in (b"F", b"f"):
            self._pending -= 1
            if kind == b"f":
                for fd in fds:
                    os.close(fd)
                raise InfrastructureError(f"fork of a Python worker failed: {payload.decode('utf-8', 'replace')}")
            if len(fds) != 1:
                raise InfrastructureError("the fork server sent a malformed reply")
            (pid,) = _child.PID.unpack(payload)
            self._ready.append(_Spawn(pid, socket.socket(fileno=fds[0])))
        return kind, payload

    def _exit_status(self, pid: int) -> dict[str, Any]:
        """Exit status and CPU use of a dead (or just killed) worker, from the fork server."""
        with self._lock:
            try:
                self._zygote.send(b"W" + _child.PID.pack(pid))
                while True:
                    kind, payload = self._read_reply()
                    if kind == b"W":
                        return json.loads(payload)
            except (InfrastructureError, ValueError):
                return {}


class PythonWorker:
    """One episode's kernel. Not thread-safe across concurrent ``run`` calls (one episode, one caller)."""

    alive: bool

    def __init__(self, pool: PythonWorkerPool, handle: _Handle, hello: dict[str, Any]) -> None:
        self._pool = pool
        self._h = handle
        self.limits = pool.limits
        self.pid = handle.pid
        self.layers: tuple[str, ...] = tuple(hello.get("layers", ()))
        self._cpu = float(hello.get("cpu", 0.0))
        self.alive = True
        self.killed: str | None = None
        self._busy = threading.Lock()
        self._finalizer = weakref.finalize(self, handle.close)
        lim = self.limits
        self._max_done = 6 * (2 * lim.output_chars + 4096) + 65536

    @classmethod
    def _start(cls, pool: PythonWorkerPool, spawn: _Spawn) -> PythonWorker:
        handle = _Handle(spawn.pid, spawn.sock)
        deadline = time.monotonic() + _HELLO_TIMEOUT_S
        try:
            kind, payload = _recv_frame(handle.sock, deadline, {b"H": 65536})
            hello = json.loads(payload)
        except (_Dead, _Timeout, ValueError) as exc:
            handle.close()
            raise InfrastructureError(f"a Python worker did not start ({type(exc).__name__})") from exc
        if "error" in hello:
            handle.close()
            raise InfrastructureError(f"a Python worker could not enter its sandbox:\n{hello['error']}")
        return cls(pool, handle, hello)

    def run(self, code: str, sql: Callable[[str], pd.DataFrame]) -> PythonResult:
        """Execute ``code`` in the persistent namespace; ``sql`` serves the worker's ``sql()`` calls."""
        if not self.alive:
            raise EnvironmentStateError(
                f"this Python worker was stopped ({self.killed or 'closed'}); acquire a new one from the pool")
        if not isinstance(code, str):
            raise TypeError("code must be a string")
        if not self._busy.acquire(blocking=False):
            raise EnvironmentStateError("this Python worker is already running a step")
        try:
            return self._run(code, sql)
        finally:
            self._busy.release()

    def close(self) -> None:
        """Stop the worker process (idempotent)."""
        self.alive = False
        self._finalizer()

    def __enter__(self) -> PythonWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _run(self, code: str, sql: Callable[[str], pd.DataFrame]) -> PythonResult:
        import pandas as pd

        lim = self.limits
        t0 = time.monotonic()
        deadline = t0 + lim.wall_seconds
        cpu0 = self._cpu
        calls = 0
        sock = self._h.sock
        try:
            _send_frame(sock, b"R", code.encode("utf-8", "surrogatepass"), deadline)
            while True:
                kind, payload = _recv_frame(sock, deadline, {b"S": _MAX_QUERY_BYTES, b"D": self._max_done})
                if kind == b"S":
                    calls += 1
                    asked = time.monotonic()
                    reply_kind, reply = self._serve_sql(payload.decode("utf-8", "replace"), sql, pd)
                    _hold_to_quantum(asked, lim.sql_time_quantum_ms, deadline)
                    _send_frame(sock, reply_kind, reply, deadline)
                    continue
                done = _parse_done(payload)
                break
        except _Timeout:
            return self._stop("wall_time", time.monotonic() - t0, calls)
        except _Dead as exc:
            self._h.kill()
            reason = "output_size" if str(exc) == "oversize:D" else self._classify(cpu0)
            return self._stop(reason, time.monotonic() - t0, calls)
        seconds = time.monotonic() - t0
        self._cpu = done["cpu"]
        result = PythonResult(done["output"], done["error"], done["killed"], seconds, done["truncated"],
                              max(0.0, done["cpu"] - cpu0), calls)
        if result.killed:
            note = kill_message(result.killed, lim)
            result.error = f"{result.error}\n{note}" if result.error else note
            self._mark_dead(result.killed)
        return result

    @staticmethod
    def _serve_sql(query: str, sql: Callable[[str], Any], pd: Any) -> tuple[bytes, bytes]:
        try:
            frame = sql(query)
        except Exception as exc:  # noqa: BLE001 - every SQL failure goes back to the agent as SQLError
            return b"E", (str(exc) or type(exc).__name__).encode("utf-8", "replace")
        if isinstance(frame, bytes):  # already pickled by the query process: forwarded, never unpickled here
            return b"Q", frame
        if not isinstance(frame, pd.DataFrame):
            return b"E", f"internal error: the SQL tool returned {type(frame).__name__}, not a DataFrame".encode()
        try:
            return b"Q", pickle.dumps(frame, protocol=5)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable object column
            return b"E", f"the query result cannot be sent to Python ({type(exc).__name__}: {exc})".encode()

    def _classify(self, cpu0: float) -> str:
        status = self._pool._exit_status(self.pid)
        sig, cpu = status.get("signal"), status.get("cpu")
        lim = self.limits
        if sig == signal.SIGXCPU:
            return "cpu_time"
        if isinstance(cpu, (int, float)) and (
            cpu >= int(lim.worker_cpu_seconds) or cpu - cpu0 >= lim.cpu_seconds * 0.98
        ):
            return "cpu_time"
        return "crashed"

    def _stop(self, reason: str, seconds: float, calls: int) -> PythonResult:
        self._mark_dead(reason)
        return PythonResult("", kill_message(reason, self.limits), reason, seconds, False, 0.0, calls)

    def _mark_dead(self, reason: str) -> None:
        self.killed = reason
        self.close()


# ---------------------------------------------------------------------- framing (parent side)


def _hold_to_quantum(asked: float, quantum_ms: float, deadline: float) -> None:
    """Wait until a whole number (at least one) of ``quantum_ms`` has passed since ``asked`` (never past the
    run's deadline): what the reply's timing tells the cell is how many quanta the query took, not its cost."""
    if quantum_ms <= 0:
        return
    quantum = quantum_ms / 1000.0
    target = asked + max(1, math.ceil((time.monotonic() - asked) / quantum)) * quantum
    wait = min(target, deadline) - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def _send_frame(sock: socket.socket, kind: bytes, payload: bytes, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Timeout()
    try:
        sock.settimeout(remaining)
        sock.sendall(_child.HEADER.pack(kind, len(payload)))
        if payload:
            sock.sendall(payload)
    except socket.timeout as exc:
        raise _Timeout() from exc
    except OSError as exc:
        raise _Dead(str(exc)) from exc


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Timeout()
        try:
            sock.settimeout(remaining)
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout as exc:
            raise _Timeout() from exc
        except OSError as exc:
            raise _Dead(str(exc)) from exc
        if k == 0:
            raise _Dead("eof")
        got += k
    return bytes(buf)


def _recv_frame(sock: socket.socket, deadline: float, allowed: dict[bytes, int]) -> tuple[bytes, bytes]:
    kind, size = _child.HEADER.unpack(_recv_exact(sock, _child.HEADER.size, deadline))
    if kind not in allowed:
        raise _Dead(f"unexpected frame {kind!r}")
    if size > allowed[kind]:
        raise _Dead(f"oversize:{kind.decode()}")
    return kind, _recv_exact(sock, size, deadline) if size else b""


def _parse_done(payload: bytes) -> dict[str, Any]:
    """Validate the worker's (untrusted) JSON report."""
    try:
        done = json.loads(payload)
        ok = (isinstance(done, dict) and isinstance(done.get("output"), str)
              and isinstance(done.get("error"), (str, type(None)))
              and done.get("killed") in (None, *KILL_REASONS)
              and isinstance(done.get("truncated"), bool) and isinstance(done.get("cpu"), (int, float)))
    except ValueError:
        ok = False
    if not ok:
        raise _Dead("malformed report")
    return done


__all__ = ["ISOLATION_LAYERS", "KILL_REASONS", "PythonLimits", "PythonResult", "PythonWorker", "PythonWorkerPool",
           "SandboxUnavailable", "UNSAFE_LABEL", "kill_message", "sandbox_refusal"]
