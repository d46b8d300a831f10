"""Child side of the Python tool: the fork server ("zygote") and the sandboxed per-episode worker.

This file runs as a *script* in a fresh interpreter (``python -s -P pyworker_child.py CTL_FD CONFIG``)
so that it never imports the ``ehrgym`` package (which may import DuckDB) and never shares
memory with the process that holds the database, the tasks or the answers. The parent side
(:mod:`ehrgym.env.pyworker`) imports this module only for the wire protocol below.

Zygote: imports pandas/numpy once, warms their lazy imports, then (when it runs as root)
moves itself into private mount and network namespaces whose root file system holds only the
Python installation and system libraries, read-only, and (root or not) restricts itself with
Landlock to reading beneath those same paths -- both inherited by every worker. It then forks
one worker per request and hands the worker's socket to the parent with SCM_RIGHTS.

Worker (after fork): closes every inherited descriptor, drops to its own unprivileged uid, sets
rlimits (address space, lifetime CPU, processes, files), installs an audit hook that denies
file access outside the Python installation, sockets, process creation, ctypes and DuckDB, and
then serves ``run`` requests like a notebook kernel.

Wire protocol (both directions): 1 kind byte + 4-byte big-endian length + payload.
Parent → worker: ``R`` code, ``Q`` pickled DataFrame, ``E`` SQL error text, ``X`` exit.
Worker → parent: ``H`` hello (JSON), ``S`` SQL query text, ``D`` done (JSON). The parent
never unpickles anything the worker sends.
"""

from __future__ import annotations

import os
import struct
import sys

HEADER = struct.Struct("!cI")
# Zygote control channel (SOCK_SEQPACKET): requests F (fork), W<pid> (exit status), Q (quit);
# replies F<pid> + one fd, f<json error>, W<json>, R<json ready>, !<json failure>.
PID = struct.Struct("!I")
KILL_REASONS = ("cpu_time", "wall_time", "memory", "output_size", "processes", "crashed")

# Environment of the zygote: no secrets, single-threaded numeric libraries, deterministic hashing.
ZYGOTE_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "HOME": "/nonexistent",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}

# Modules a worker may not import (a fresh import raises ImportError): database engines and
# drivers. Network and process modules may be imported (scipy pulls in socket, ctypes and
# multiprocessing) because what they would do is denied by event: every socket, ctypes
# (dlopen, foreign calls, raw memory) and process-creation audit event.
DENIED_MODULES = frozenset(
    {"duckdb", "_duckdb", "sqlite3", "_sqlite3", "psycopg", "psycopg2", "pymysql", "sqlalchemy",
     "adbc_driver_manager", "adbc_driver_duckdb", "polars", "requests", "urllib3", "httpx", "aiohttp"}
)
# Audit events denied outright (PermissionError), by exact name or by first dotted component.
DENIED_EVENTS = frozenset(
    {
        "os.chdir", "os.chmod", "os.chown", "os.link", "os.mkdir", "os.remove", "os.rename",
        "os.rmdir", "os.symlink", "os.truncate", "os.utime", "os.kill", "os.killpg",
        "os.setxattr", "os.removexattr", "os.getxattr", "os.listxattr", "os.lockf",
        "resource.setrlimit", "resource.prlimit", "sys.addaudithook", "gc.get_objects",
        "gc.get_referrers", "gc.get_referents", "sys._current_frames", "signal.pthread_kill",
        "tempfile.mkstemp", "tempfile.mkdtemp", "webbrowser.open", "urllib.Request",
        "ensurepip.bootstrap", "pdb.Pdb", "builtins.breakpoint", "syslog.openlog", "syslog.syslog",
    }
)
DENIED_EVENT_MODULES = frozenset(
    {"socket", "ctypes", "shutil", "sqlite3", "http", "ftplib", "smtplib", "imaplib", "poplib",
     "nntplib", "telnetlib", "cpython"}
)
PROCESS_EVENTS = frozenset(
    {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
     "subprocess.Popen", "pty.spawn", "os.startfile"}
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_RW_FILES = frozenset({"/dev/null"})

# --------------------------------------------------------------------------- wire protocol


def send_frame(fd: int, kind: bytes, payload: bytes = b"") -> None:
    """Write one frame to a blocking descriptor (worker side)."""
    data = memoryview(HEADER.pack(kind, len(payload)) + payload)
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        part = os.read(fd, min(n - len(chunks), 1 << 20))
        if not part:
            return None
        chunks += part
    return bytes(chunks)


def recv_frame(fd: int) -> tuple[bytes, bytes] | None:
    """Read one frame from a blocking descriptor (worker side); None on EOF."""
    head = _read_exact(fd, HEADER.size)
    if head is None:
        return None
    kind, size = HEADER.unpack(head)
    payload = _read_exact(fd, size) if size else b""
    if payload is None:
        return None
    return kind, payload


# --------------------------------------------------------------------------- sandbox helpers


class ProcessViolation(BaseException):
    """Raised by the audit hook when user code tries to start a process (kills the worker)."""


class CpuLimit(BaseException):
    """Raised by the SIGPROF handler when a run has used its CPU seconds."""


class OutputFlood(BaseException):
    """Raised by the output capture when a run prints more than the flood limit."""


def python_roots() -> tuple[str, ...]:
    """Directories the worker may read: the Python standard library and site-packages."""
    import sysconfig

    paths: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(value)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        for entry in sys.path:
            if entry and (entry == prefix or entry.startswith(prefix.rstrip("/") + "/")):
                paths.add(entry)
    for tz in ("/usr/share/zoneinfo",):
        paths.add(tz)
    roots: set[str] = set()
    for p in paths:
        if os.path.isdir(p):
            roots.add(os.path.abspath(p))
            roots.add(os.path.realpath(p))
    # keep only outermost roots
    ordered = sorted(roots)
    outer: list[str] = []
    for p in ordered:
        if not any(p == o or p.startswith(o.rstrip("/") + "/") for o in outer):
            outer.append(p)
    return tuple(outer)


def _vm_kb() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _Libc:
    """Thin ctypes wrapper for the few syscalls the sandbox needs (used before the hook is armed)."""

    CLONE_NEWNS = 0x00020000
    CLONE_NEWNET = 0x40000000
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
    MS_PRIVATE = 1 << 18
    MNT_DETACH = 2
    PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
    PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

    def __init__(self) -> None:
        import ctypes
        import platform

        self._ctypes = ctypes
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.machine = platform.machine()

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            err = self._ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def unshare(self, flags: int) -> None:
        self._check(self.lib.unshare(flags), "unshare")

    def mount(self, src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        enc = lambda s: None if s is None else s.encode()  # noqa: E731
        self._check(self.lib.mount(enc(src), enc(dst), enc(fstype), self._ctypes.c_ulong(flags), enc(data)), f"mount {dst}")

    def umount2(self, target: str, flags: int) -> None:
        self._check(self.lib.umount2(target.encode(), flags), f"umount {target}")

    def pivot_root(self, new: str, old: str) -> None:
        nr = self.PIVOT_ROOT.get(self.machine)
        if nr is None:
            raise OSError(f"pivot_root syscall number unknown for {self.machine}")
        self._check(self.lib.syscall(self._ctypes.c_long(nr), new.encode(), old.encode()), "pivot_root")

    def prctl(self, option: int, arg: int) -> None:
        c = self._ctypes.c_ulong
        self._check(self.lib.prctl(option, c(arg), c(0), c(0), c(0)), f"prctl {option}")


def _bind_sources(roots: tuple[str, ...]) -> list[str]:
    """Host paths to expose read-only inside the worker's root file system."""
    extra = ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache",
             "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]
    return [p for p in list(roots) + extra if os.path.lexists(p)]


def enter_private_root(libc: _Libc, roots: tuple[str, ...], layers: list[str]) -> None:
    """Zygote only (root): private network namespace and a minimal read-only root file system."""
    try:
        libc.unshare(libc.CLONE_NEWNET)
        layers.append("net_ns")
    except OSError:
        pass
    try:
        libc.unshare(libc.CLONE_NEWNS)
    except OSError:
        return
    libc.mount(None, "/", None, libc.MS_REC | libc.MS_PRIVATE)
    sources = _bind_sources(roots)
    base = next(
        (d for d in ("/mnt", "/media", "/srv", "/opt", "/var/tmp", "/tmp", "/run")
         if os.path.isdir(d) and not os.path.islink(d)
         and not any(s == d or s.startswith(d + "/") for s in sources)),
        None,
    )
    if base is None:
        return
    libc.mount("tmpfs", base, "tmpfs", libc.MS_NOSUID | libc.MS_NODEV, "mode=0755,size=4m")
    done: list[str] = []
    for src in sorted(sources, key=lambda p: (p.count("/"), p)):
        if any(src.startswith(d.rstrip("/") + "/") for d in done):
            continue  # already visible through an enclosing bind
        dst = base + src
        if os.path.islink(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.lexists(dst):
                os.symlink(os.readlink(src), dst)
            done.append(src)
            continue
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "w"):
                pass
        libc.mount(src, dst, None, libc.MS_BIND | libc.MS_REC)
        flags = libc.MS_BIND | libc.MS_REMOUNT | libc.MS_RDONLY | libc.MS_NOSUID
        if not src.startswith("/dev/"):
            flags |= libc.MS_NODEV
        libc.mount(None, dst, None, flags)
        done.append(src)
    os.chdir(base)
    os.mkdir(".old")
    try:
        libc.pivot_root(".", ".old")
        os.chroot(".")
        os.chdir("/")
        libc.umount2("/.old", libc.MNT_DETACH)
        os.rmdir("/.old")
    except OSError:
        os.chroot(".")
        os.chdir("/")
    libc.mount(None, "/", None, libc.MS_BIND | libc.MS_REMOUNT | libc.MS_RDONLY | libc.MS_NOSUID | libc.MS_NODEV)
    layers.append("mount_ns")


# Landlock (Linux >= 5.13, unprivileged): file-system rights by ABI version.
_LL_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_LL_READ_FILE, _LL_READ_DIR, _LL_WRITE_FILE = 1 << 2, 1 << 3, 1 << 1
_LL_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "riscv64": (444, 445, 446)}


def apply_landlock(libc: _Libc, read_paths: list[str], rw_files: frozenset[str]) -> int:
    """Restrict this process and its descendants to reading beneath ``read_paths``.

    Everything else the kernel can mediate is denied: reading or listing any other path,
    writing, creating, removing, renaming, truncating, executing; with ABI >= 4 every TCP bind
    and connect; with ABI >= 6 signals and abstract UNIX sockets outside the sandbox.
    Returns the ABI version applied; raises OSError when Landlock is unavailable.
    """
    ctypes = libc._ctypes
    nrs = _LL_SYSCALLS.get(libc.machine)
    if nrs is None:
        raise OSError(f"Landlock syscall numbers unknown for {libc.machine}")
    create, add_rule, restrict = nrs
    abi = libc.lib.syscall(ctypes.c_long(create), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not available")
    fs = _LL_FS_BY_ABI.get(abi, _LL_FS_BY_ABI[5])
    fields = [fs] + ([3] if abi >= 4 else []) + ([3] if abi >= 6 else [])  # net: bind+connect TCP; scope
    attr = struct.pack(f"<{len(fields)}Q", *fields)
    ruleset = libc.lib.syscall(ctypes.c_long(create), attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in read_paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if os.path.isdir(path):
                    rights = _LL_READ_FILE | _LL_READ_DIR
                else:
                    rights = _LL_READ_FILE | (_LL_WRITE_FILE if path in rw_files else 0)
                rule = struct.pack("<Qi", rights, fd)
                if libc.lib.syscall(ctypes.c_long(add_rule), ctypes.c_int(ruleset), ctypes.c_int(1), rule,
                                    ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        libc.prctl(libc.PR_SET_NO_NEW_PRIVS, 1)
        if libc.lib.syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _world_traversable(path: str) -> bool:
    import stat

    p = os.path.abspath(path)
    while True:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH or (p == os.path.abspath(path) and not mode & stat.S_IROTH):
            return False
        if p == "/":
            return True
        p = os.path.dirname(p)


def make_audit_hook(read_roots: tuple[str, ...], allow_fork: bool):  # noqa: ANN201 - returns a hook
    """Build the worker's audit hook; it is only ever referenced by sys.addaudithook."""
    prefixes = tuple(r.rstrip("/") + "/" for r in read_roots)
    roots = frozenset(read_roots)
    realpath, fsdecode, isinstance_, str_, bytes_ = os.path.realpath, os.fsdecode, isinstance, str, bytes
    denied_events, denied_mods, process_events = DENIED_EVENTS, DENIED_EVENT_MODULES, PROCESS_EVENTS
    denied_imports, write_flags, rw_files = DENIED_MODULES, _WRITE_FLAGS, _RW_FILES

    def readable(path: object) -> bool:
        if not isinstance_(path, (str_, bytes_)):
            return False
        # the aliased isinstance_ (kept local so user code cannot rebind it) narrows path, but mypy cannot see that
        p = realpath(fsdecode(path))  # type: ignore[arg-type]
        return p in roots or p.startswith(prefixes)

    def deny(event: str, detail: str = "") -> None:
        raise PermissionError(
            f"blocked by the Python tool sandbox: {event}{' ' + detail if detail else ''}. "
            "The only access to data is sql('SELECT ...'), which returns a pandas DataFrame."
        )

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance_(path, (str_, bytes_)) and realpath(fsdecode(path)) in rw_files:
                return
            writing = (isinstance_(mode, str_) and any(c in mode for c in "wax+")) or (
                isinstance_(flags, int) and flags & write_flags
            )
            if writing or not readable(path):
                deny("open", repr(path))
        elif event == "import":
            name = args[0] if args else ""
            if isinstance_(name, str_) and name.split(".", 1)[0] in denied_imports:
                raise ImportError(f"import of {name!r} is blocked in the Python tool; use sql() for data")
        elif event in ("os.listdir", "os.scandir", "os.walk", "os.fwalk", "glob.glob"):
            path = args[0] if args else "."
            if path is None:
                path = "."
            if isinstance_(path, int) or not readable(path):
                deny(event, repr(path))
        elif event in process_events:
            if not (allow_fork and event in ("os.fork", "os.forkpty")):
                raise ProcessViolation(f"{event}: starting processes is not allowed in the Python tool")
        elif event in denied_events or event.split(".", 1)[0] in denied_mods:
            deny(event)
        elif event == "mmap.__new__":
            if args and args[0] != -1:
                deny(event, "of a file")

    return hook


# --------------------------------------------------------------------------- zygote


def _warm_up() -> None:
    """Run a representative analysis once so that lazy imports happen before the sandbox."""
    import collections, datetime, decimal, fractions, functools, io, itertools, json, math  # noqa: F401,E401
    import operator, pickle, pprint, random, re, statistics, string, textwrap, traceback  # noqa: F401,E401
    import ast, linecache, signal, heapq, bisect, csv, dataclasses, typing, warnings  # noqa: F401,E401

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "subject_id": rng.integers(1, 5, 40),
            "label": rng.choice(["Glucose", "Sodium", "Creatinine"], 40),
            "valuenum": rng.normal(100, 10, 40),
            "charttime": pd.to_datetime("2150-01-01") + pd.to_timedelta(rng.integers(0, 9999, 40), unit="h"),
            "flag": rng.choice([True, False], 40),
        }
    )
    df.loc[3, "valuenum"] = np.nan
    repr(df), df.to_string(), str(df.head()), repr(df.valuenum), df._repr_html_()
    df.describe(include="all").to_string()
    df.groupby(["subject_id", "label"]).valuenum.agg(["mean", "median", "std", "count", "min", "max"])
    df.pivot_table(index="subject_id", columns="label", values="valuenum", aggfunc="mean")
    df.merge(df[["subject_id", "label"]].drop_duplicates(), on="subject_id", how="left")
    df.sort_values(["charttime"]).drop_duplicates("subject_id")
    df.label.str.lower().str.contains("gl"), df.label.str.upper().str.startswith("S"), df.label.value_counts()
    df.charttime.dt.year, df.charttime.dt.date, df.charttime.dt.floor("D"), df.charttime.diff().dt.total_seconds()
    df.set_index("charttime").valuenum.resample("D").mean()
    df.valuenum.rolling(3).mean(), df.valuenum.quantile([0.1, 0.5, 0.9]), df.valuenum.corr(df.subject_id)
    pd.cut(df.valuenum, 3), pd.qcut(df.valuenum, 4), pd.crosstab(df.subject_id, df.label)
    pd.concat([df, df]).reset_index(drop=True).nunique(), df.isna().sum(), df.fillna(0).astype({"valuenum": int})
    pd.read_csv(io.StringIO("a,b\n1,x\n2,y\n")), df.to_csv(), df.to_dict("records"), df.to_json()
    pd.to_datetime(["2150-01-02 03:04:05", "2150-02-03 00:00:00"]), pd.to_datetime("2150-02-03"), pd.Timestamp("2150-01-01").tz_localize("UTC")
    pickle.loads(pickle.dumps(df, protocol=5))
    np.mean(df.valuenum), np.nanmedian(df.valuenum), np.percentile(df.valuenum.dropna(), [5, 95])
    np.std(df.valuenum), np.unique(df.label), np.histogram(df.valuenum.dropna()), np.corrcoef(rng.random((3, 5)))
    np.linalg.inv(np.eye(3) * 2), repr(np.arange(10)), str(rng.random((30, 30)))
    # statistics an analysis reaches for: importing scipy.stats costs 1–1.5 s of CPU, most of a step's budget
    import scipy.stats

    scipy.stats.norm.cdf(0), scipy.stats.mannwhitneyu([1, 2, 3], [2, 3, 4]), scipy.stats.chi2_contingency([[3, 4], [5, 6]])
    traceback.format_exception_only(ValueError, ValueError("x"))
    try:
        df["no_such_column"]
    except KeyError:
        traceback.extract_tb(sys.exc_info()[2])
    try:
        ast.parse("x = (", "<w>", "exec")
    except SyntaxError as exc:
        traceback.format_exception_only(type(exc), exc)


class _Zygote:
    def __init__(self, ctl_fd: int, limits: dict) -> None:
        import socket

        self.ctl = socket.socket(fileno=ctl_fd)
        self.limits = limits
        self.layers: list[str] = []
        self.live: set[int] = set()
        self.statuses: dict[int, dict] = {}

    def start(self) -> dict:
        _warm_up()
        self.roots = python_roots()
        self.libc = _Libc()
        self.devnull = os.open("/dev/null", os.O_RDWR)
        mode = self.limits.get("os_isolation", True)  # True | "unprivileged" | False
        kernel_layers = mode is True or mode == "unprivileged"
        self.is_root = os.geteuid() == 0 and mode is True
        self.vm_kb = _vm_kb()  # before /proc disappears
        if self.is_root:
            enter_private_root(self.libc, self.roots, self.layers)
        self.drop_uid = self.is_root and (
            "mount_ns" in self.layers or all(_world_traversable(r) for r in self.roots)
        )
        self.zygote_pid = os.getpid()
        inside = lambda p: any(p == r or p.startswith(r.rstrip("/") + "/") for r in self.roots)  # noqa: E731
        self.child_path = [p for p in sys.path if p and inside(os.path.realpath(p))]
        self.denied_loaded = [m for m in sys.modules if m.split(".", 1)[0] in DENIED_MODULES]
        if kernel_layers:
            try:
                abi = apply_landlock(self.libc, _bind_sources(self.roots), _RW_FILES)
                self.layers.append("landlock")
                self.landlock_abi = abi
            except OSError:
                pass
        import gc

        gc.collect()
        gc.freeze()  # keep the warm heap shared copy-on-write with the workers
        return {"layers": self.layers, "roots": list(self.roots), "vm_kb": self.vm_kb, "pid": self.zygote_pid,
                "drop_uid": self.drop_uid}

    def reap(self) -> None:
        while self.live:
            try:
                pid, status, usage = os.wait3(os.WNOHANG)
            except ChildProcessError:
                self.live.clear()
                return
            if pid == 0:
                return
            self._record(pid, status, usage)

    def _record(self, pid: int, status: int, usage) -> None:  # noqa: ANN001
        self.live.discard(pid)
        self.statuses[pid] = {
            "pid": pid,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "cpu": usage.ru_utime + usage.ru_stime,
        }
        while len(self.statuses) > 4096:
            self.statuses.pop(next(iter(self.statuses)))

    def status(self, pid: int) -> dict:
        if pid not in self.statuses and pid in self.live:
            try:
                _, status, usage = os.wait4(pid, 0)
                self._record(pid, status, usage)
            except ChildProcessError:
                self.live.discard(pid)
        return self.statuses.pop(pid, {"pid": pid, "signal": None, "code": None, "cpu": None})

    def fork(self) -> None:
        import json
        import socket

        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError as exc:
            parent_end.close()
            child_end.close()
            self.ctl.send(b"f" + json.dumps({"error": str(exc)}).encode())
            return
        if pid == 0:  # worker
            code = 70
            try:
                parent_end.close()
                code = worker_main(self, child_end.detach())
            finally:
                os._exit(code)
        child_end.close()
        self.live.add(pid)
        socket.send_fds(self.ctl, [b"F" + PID.pack(pid)], [parent_end.fileno()])
        parent_end.close()

    def serve(self) -> None:
        import json

        while True:
            try:
                msg = self.ctl.recv(4096)
            except InterruptedError:
                continue
            self.reap()
            if not msg or msg[:1] == b"Q":
                break
            if msg[:1] == b"F":
                self.fork()
            elif msg[:1] == b"W" and len(msg) == 1 + PID.size:
                (pid,) = PID.unpack(msg[1:])
                self.ctl.send(b"W" + json.dumps(self.status(pid)).encode())
        for pid in list(self.live):
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def zygote_main(ctl_fd: int, limits_json: str) -> None:
    import json

    zyg = _Zygote(ctl_fd, json.loads(limits_json))
    try:
        info = zyg.start()
    except BaseException:  # noqa: BLE001 - report any start-up failure to the parent
        import traceback

        zyg.ctl.send(b"!" + json.dumps({"error": traceback.format_exc()[-3000:]}).encode())
        raise
    zyg.ctl.send(b"R" + json.dumps(info).encode())
    zyg.serve()


# --------------------------------------------------------------------------- worker


def _confine(zyg: _Zygote, fd: int) -> list[str]:
    """Apply the per-worker OS and interpreter restrictions (runs right after fork)."""
    import resource

    limits = zyg.limits
    layers = list(zyg.layers)
    for target in (0, 1, 2):
        os.dup2(zyg.devnull, target)
    os.closerange(3, fd)
    os.closerange(fd + 1, 1 << 16)
    os.setsid()
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past RLIMIT_FSIZE fails instead of killing
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    vm_limit = (zyg.vm_kb * 1024 if zyg.vm_kb else 0) + int(limits["memory_mb"]) * 1024 * 1024
    cpu_soft = max(1, int(limits["worker_cpu_seconds"]))
    rl = {
        resource.RLIMIT_AS: (vm_limit, vm_limit),
        resource.RLIMIT_CPU: (cpu_soft, cpu_soft + 2),
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_FSIZE: (0, 0),
        resource.RLIMIT_NOFILE: (64, 64),
        resource.RLIMIT_NPROC: (1 + int(limits["max_processes"]), 1 + int(limits["max_processes"])),
    }
    for res, value in rl.items():
        try:
            resource.setrlimit(res, value)
        except (OSError, ValueError):
            if res in (resource.RLIMIT_AS, resource.RLIMIT_CPU):
                raise
    layers.append("rlimits")
    if zyg.drop_uid:
        uid = 1_000_000 + os.getpid()
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            layers.append("uid")
        except OSError:
            try:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                layers.append("uid")
            except OSError:
                pass
        if 0 in os.getresuid():
            raise OSError("could not drop root privileges for the Python worker")
    libc = zyg.libc
    for option, arg in ((libc.PR_SET_PDEATHSIG, 9), (libc.PR_SET_NO_NEW_PRIVS, 1), (libc.PR_SET_DUMPABLE, 0)):
        try:
            libc.prctl(option, arg)
        except OSError:
            pass
    sys.dont_write_bytecode = True
    sys.path[:] = zyg.child_path
    sys.path_importer_cache.clear()
    for name in zyg.denied_loaded:
        sys.modules.pop(name, None)
    sys.addaudithook(make_audit_hook(zyg.roots, int(limits["max_processes"]) > 0))
    layers.append("audit_hook")
    return layers


class _Capture:
    """stdout/stderr replacement: keeps the first ``cap`` characters, counts the rest."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, cap: int, flood: int) -> None:
        self.cap, self.flood = cap, flood
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0

    def write(self, text: str, display: bool = False) -> int:
        """Capture ``text``; more than ``flood`` printed characters raise OutputFlood (not for display)."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        n = len(text)
        self.total += n
        if self.kept < self.cap:
            piece = text[: self.cap - self.kept]
            self.parts.append(piece)
            self.kept += len(piece)
        if self.total > self.flood and not display:
            raise OutputFlood()
        return n

    def writelines(self, lines) -> None:  # noqa: ANN001
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def text(self) -> tuple[str, bool]:
        out = "".join(self.parts)
        if self.total > self.cap:
            out += f"\n[output truncated: showing the first {self.cap} of {self.total} characters]"
            return out, True
        return out, False


def _format_user_error(exc: BaseException, prefix: str, cap: int) -> str:
    import traceback

    if isinstance(exc, SyntaxError):
        text = "".join(traceback.format_exception_only(type(exc), exc))
    else:
        stack = traceback.StackSummary.extract(traceback.walk_tb(exc.__traceback__), lookup_lines=False)
        mine = [f for f in stack if f.filename.startswith(prefix)]
        for f in mine:
            f.line  # noqa: B018 - load the source line from linecache
        lines = ["Traceback (most recent call last):\n"] if mine else []
        lines += traceback.StackSummary.from_list(mine).format()
        lines += traceback.format_exception_only(type(exc), exc)
        text = "".join(lines)
    return text if len(text) <= cap else text[: cap // 2] + "\n[...]\n" + text[-cap // 2:]


def worker_main(zyg: _Zygote, fd: int) -> int:
    import ast
    import json
    import linecache
    import pickle
    import signal

    import numpy as np
    import pandas as pd

    try:
        layers = _confine(zyg, fd)
    except BaseException:  # noqa: BLE001 - tell the parent why the worker cannot start
        import traceback

        send_frame(fd, b"H", json.dumps({"error": traceback.format_exc()[-2000:]}).encode())
        return 72
    limits = zyg.limits
    cap, flood = int(limits["output_chars"]), int(limits["flood_chars"])
    cpu_seconds = float(limits["cpu_seconds"])

    class SQLError(Exception):
        """The SQL gate rejected the query or DuckDB reported an error."""

    SQLError.__qualname__ = SQLError.__name__

    def sql(query: str) -> pd.DataFrame:
        """Run one read-only SQL query (DuckDB dialect) over the episode's tables; returns a DataFrame."""
        if not isinstance(query, str):
            raise TypeError("sql() takes the query as a string")
        try:
            send_frame(fd, b"S", query.encode("utf-8", "replace"))
            frame = recv_frame(fd)
            if frame is None:
                os._exit(0)
            kind, payload = frame
            if kind == b"Q":
                return pickle.loads(payload)
        except MemoryError:
            broken.append("memory")  # the channel may be mid-frame: this worker cannot go on
            raise
        except BaseException:
            broken.append("crashed")
            raise
        raise SQLError(payload.decode("utf-8", "replace"))

    def display(*objs: object) -> None:
        """Show objects like a notebook cell's final expression (repr, DataFrame preview)."""
        for obj in objs:
            sys.stdout.write(repr(obj) + "\n", display=True) if isinstance(sys.stdout, _Capture) else print(repr(obj))

    def on_sigprof(signum, frame) -> None:  # noqa: ANN001
        raise CpuLimit()

    signal.signal(signal.SIGPROF, on_sigprof)
    broken: list[str] = []
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__, "pd": pd, "np": np,
                       "sql": sql, "SQLError": SQLError, "display": display}
    null = _Capture(0, 1 << 62)
    usage = lambda: sum(os.times()[:2])  # noqa: E731
    send_frame(fd, b"H", json.dumps({"pid": os.getpid(), "cpu": usage(), "layers": layers}).encode())

    cell = 0
    while True:
        frame = recv_frame(fd)
        if frame is None or frame[0] == b"X":
            return 0
        kind, payload = frame
        if kind != b"R":
            return 73
        cell += 1
        filename = f"<cell {cell}>"
        source = payload.decode("utf-8", "replace")
        out = _Capture(cap, flood)
        error: str | None = None
        killed: str | None = None
        sys.stdout = sys.stderr = out
        try:
            signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
            try:
                linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
                tree = ast.parse(source, filename, "exec")
                last: ast.Expression | None = None
                tail = tree.body[-1] if tree.body else None
                if isinstance(tail, ast.Expr) and not source.rstrip().endswith(";"):
                    tree.body.pop()
                    last = ast.Expression(tail.value)
                exec(compile(tree, filename, "exec", dont_inherit=True), namespace)
                if last is not None:
                    value = eval(compile(last, filename, "eval", dont_inherit=True), namespace)
                    if value is not None:
                        namespace["_"] = value
                        out.write(repr(value) + "\n", display=True)
            except CpuLimit:
                killed = "cpu_time"
            except OutputFlood:
                killed = "output_size"
            except ProcessViolation as exc:
                killed, error = "processes", str(exc)
            except MemoryError:
                killed = "memory"
            except BaseException as exc:  # noqa: BLE001 - user errors go back to the agent
                error = _format_user_error(exc, "<cell ", cap)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
        except CpuLimit:
            killed = killed or "cpu_time"
        except MemoryError:
            killed = killed or "memory"
        except BaseException:  # noqa: BLE001 - e.g. a flood raised while formatting
            killed = killed or "crashed"
        sys.stdout = sys.stderr = null
        if broken and not killed:
            killed = broken[0]
        try:
            output, truncated = out.text()
            done = {"output": output, "error": error, "killed": killed, "truncated": truncated,
                    "cpu": usage()}
            send_frame(fd, b"D", json.dumps(done, ensure_ascii=False).encode("utf-8", "replace"))
        except MemoryError:
            send_frame(fd, b"D", json.dumps({"output": "", "error": None, "killed": "memory",
                                            "truncated": False, "cpu": usage()}).encode())
            return 0
        if killed:
            return 0


if __name__ == "__main__":
    zygote_main(int(sys.argv[1]), sys.argv[2])
