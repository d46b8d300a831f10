"""The Python worker cannot reach the database file, benchmark files, the repository, the network
or other processes -- with OS isolation (namespaces + own uid, when root) and without it
(audit hook + rlimits only, the fallback on non-root hosts)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from ehrgym.env.pyworker import PythonLimits, PythonWorkerPool, SandboxUnavailable

SENTINEL = "ANSWER-SENTINEL-4242"
REPO = Path(__file__).resolve().parents[1]


def no_sql(query: str) -> pd.DataFrame:
    raise AssertionError("unexpected sql() call")


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("secrets")
    db = root / "clean.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(f"CREATE TABLE answers AS SELECT 'q1' AS task_id, '{SENTINEL}' AS answer")
    bench = root / "benchmark"
    bench.mkdir()
    (bench / "tasks.jsonl").write_text(json.dumps({"task_id": "q1", "answer": SENTINEL}) + "\n")
    (bench / "tasks.csv").write_text(f"task_id,answer\nq1,{SENTINEL}\n")
    return {"db": str(db), "bench": str(bench / "tasks.jsonl"), "csv": str(bench / "tasks.csv"),
            "dir": str(root), "bench_dir": str(bench)}


@pytest.fixture(scope="module", params=[True, "unprivileged", False], ids=["os_isolation", "unprivileged", "hook_only"])
def pool(request: pytest.FixtureRequest) -> Iterator[PythonWorkerPool]:
    os.environ["EHRGYM_TEST_SECRET"] = SENTINEL  # must not reach the worker
    try:
        try:  # the hook-only fallback must be asked for explicitly (the unsafe mode)
            p = PythonWorkerPool(PythonLimits(cpu_seconds=2, wall_seconds=5), warm=1,
                                 os_isolation=request.param, allow_unisolated=request.param is False)
        except SandboxUnavailable as exc:
            pytest.skip(f"no OS isolation layer on this host for mode {request.param!r}: {exc}")
        with p:
            yield p
    finally:
        os.environ.pop("EHRGYM_TEST_SECRET", None)


@pytest.fixture()
def worker(pool: PythonWorkerPool):  # noqa: ANN201
    w = pool.acquire()
    yield w
    w.close()


ATTACKS = {
    "open_db": "print('LEAK', open({db!r}, 'rb').read())",
    "open_bench": "print('LEAK', open({bench!r}).read())",
    "os_open": "import os\nfd = os.open({bench!r}, os.O_RDONLY)\nprint('LEAK', os.read(fd, 999))",
    "io_fileio": "import io\nprint('LEAK', io.FileIO({bench!r}).read())",
    "pathlib_read": "import pathlib\nprint('LEAK', pathlib.Path({bench!r}).read_text())",
    "pandas_read_csv": "print('LEAK', pd.read_csv({csv!r}).to_string())",
    "pandas_read_json": "print('LEAK', pd.read_json({bench!r}, lines=True).to_string())",
    "numpy_fromfile": "print('LEAK', np.fromfile({bench!r}, dtype=np.uint8).tobytes())",
    "numpy_loadtxt": "print('LEAK', np.loadtxt({csv!r}, dtype=str, delimiter=','))",
    "listdir": "import os\nprint('LEAK', os.listdir({dir!r}))",
    "scandir": "import os\nprint('LEAK', [e.name for e in os.scandir({bench_dir!r})])",
    "glob": "import glob\nprint('LEAK', glob.glob({dir!r} + '/**', recursive=True))",
    "pathlib_iterdir": "import pathlib\nprint('LEAK', list(pathlib.Path({dir!r}).iterdir()))",
    "walk": "import os\nprint('LEAK', list(os.walk({dir!r})))",
    "chdir": "import os\nos.chdir({dir!r})\nprint('LEAK', os.listdir('.'))",
    "import_duckdb": "import duckdb\nprint('LEAK', duckdb.connect({db!r}, read_only=True).sql('from answers').fetchall())",
    "importlib_duckdb": "import importlib\nm = importlib.import_module('duckdb')\nprint('LEAK', m)",
    "import_sqlite3": "import sqlite3\nprint('LEAK', sqlite3.connect(':memory:'))",
    "ctypes_dlopen": "import ctypes\nlibc = ctypes.CDLL(None)\nprint('LEAK', libc.getpid())",
    "ctypes_memory": "import ctypes\nprint('LEAK', ctypes.string_at(id(0), 8))",
    "repo_read": "print('LEAK', open({repo!r} + '/pyproject.toml').read()[:50])",
    "repo_list": "import os\nprint('LEAK', os.listdir({repo!r}))",
    "data_dir": "import os\nprint('LEAK', os.listdir({repo!r} + '/data'))",
    "etc_passwd": "print('LEAK', open('/etc/passwd').read())",
    "proc_parent_fds": "import os\nprint('LEAK', os.listdir('/proc/' + str({parent}) + '/fd'))",
    "proc_parent_environ": "print('LEAK', open('/proc/' + str({parent}) + '/environ', 'rb').read())",
    "proc_self_fd": "import os\nprint('LEAK', os.listdir('/proc/self/fd'))",
    "write_file": "open('/tmp/ehrgym_pwned', 'w').write('x')\nprint('LEAK')",
    "mkdir": "import os\nos.mkdir('/tmp/ehrgym_pwned_dir')\nprint('LEAK')",
    "tempfile": "import tempfile\nprint('LEAK', tempfile.mkstemp())",
    "socket_new": "import socket\ns = socket.socket()\nprint('LEAK', s)",
    "socket_connect": "import socket\nprint('LEAK', socket.create_connection(('127.0.0.1', 22), timeout=1))",
    "socket_unix": "import socket\ns = socket.socket(socket.AF_UNIX)\nprint('LEAK', s)",
    "urllib": "import urllib.request\nprint('LEAK', urllib.request.urlopen('http://127.0.0.1:1', timeout=1))",
    "dns": "import socket\nprint('LEAK', socket.getaddrinfo('example.com', 80))",
    "kill_parent": "import os\nos.kill({parent}, 0)\nprint('LEAK')",
    "setrlimit": "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))\nprint('LEAK')",
    "gc_objects": "import gc\nprint('LEAK', len(gc.get_objects()))",
    "env_secret": "import os\nprint('LEAK' if 'EHRGYM_TEST_SECRET' in os.environ else 'clean', os.environ.get('EHRGYM_TEST_SECRET'))",
    "breakpoint": "breakpoint()\nprint('LEAK')",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_fails(worker, secrets: dict[str, str], name: str) -> None:  # noqa: ANN001
    code = ATTACKS[name].format(**secrets, repo=str(REPO), parent=os.getpid())
    r = worker.run(code, no_sql)
    text = r.output + (r.error or "")
    assert SENTINEL not in text, text
    assert "LEAK" not in r.output, r
    if name != "env_secret":
        assert r.error is not None, r
    assert not Path("/tmp/ehrgym_pwned").exists() and not Path("/tmp/ehrgym_pwned_dir").exists()


def test_native_readers_cannot_reach_files_with_os_isolation(pool: PythonWorkerPool, secrets: dict[str, str]) -> None:
    """pyarrow reads files in C++, below the audit hook: only the mount namespace stops it."""
    if not {"mount_ns", "landlock"} & set(pool.sandbox):
        pytest.skip("needs the mount namespace (root) or Landlock; the hook alone cannot see native reads")
    w = pool.acquire()
    try:
        for code in (f"import pyarrow.csv as c\nprint('LEAK', c.read_csv({secrets['csv']!r}))",
                     f"import pyarrow as pa\nprint('LEAK', pa.OSFile({secrets['db']!r}).read())",
                     f"import pyarrow as pa\nprint('LEAK', pa.memory_map({secrets['bench']!r}).read())",
                     f"import pyarrow.fs as f\nprint('LEAK', f.LocalFileSystem().get_file_info(f.FileSelector({secrets['dir']!r})))",
                     f"import pyarrow as pa\npa.OSFile({secrets['bench']!r}, 'w').write(b'x')\nprint('LEAK')",
                     f"import pyarrow.fs as f\nf.LocalFileSystem().delete_file({secrets['csv']!r})\nprint('LEAK')",
                     "import pyarrow as pa\nprint('LEAK', pa.OSFile('/etc/passwd').read())"):
            r = w.run(code, no_sql)
            text = r.output + (r.error or "")
            assert SENTINEL not in text and "LEAK" not in r.output, text
            assert r.error is not None
    finally:
        w.close()
    assert SENTINEL in Path(secrets["bench"]).read_text() and Path(secrets["csv"]).exists()


def test_mount_namespace_hides_the_host_file_system(pool: PythonWorkerPool, secrets: dict[str, str]) -> None:
    if "mount_ns" not in pool.sandbox:
        pytest.skip("no mount namespace in this isolation mode (it needs root)")
    w = pool.acquire()
    try:
        code = (f"import os\nprint(os.path.exists({secrets['db']!r}), os.path.exists({str(REPO / 'pyproject.toml')!r}),"
                " os.path.exists('/proc'), os.path.exists('/home'))")
        assert w.run(code, no_sql).output == "False False False False\n"
    finally:
        w.close()


def _landlock_abi() -> int:
    import ctypes
    import platform

    if platform.machine() not in ("x86_64", "aarch64"):
        return 0
    return max(0, ctypes.CDLL(None).syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def test_kernel_layers(pool: PythonWorkerPool) -> None:
    if pool.os_isolation is False:
        assert pool.sandbox == ("rlimits", "audit_hook")
        return
    assert ("landlock" in pool.sandbox) == (_landlock_abi() > 0)
    if os.geteuid() != 0 or pool.os_isolation == "unprivileged":
        assert not {"mount_ns", "net_ns", "uid"} & set(pool.sandbox)
        return
    assert {"mount_ns", "net_ns", "uid", "rlimits", "audit_hook"} <= set(pool.sandbox)
    w = pool.acquire()
    try:
        r = w.run("import os, resource\n(os.getuid() != 0, os.getgid() != 0, "
                  "resource.getrlimit(resource.RLIMIT_NPROC)[1], resource.getrlimit(resource.RLIMIT_FSIZE)[1])", no_sql)
        assert r.output == "(True, True, 1, 0)\n", r
        for ns in ("net", "mnt"):  # the kernel puts the worker in namespaces of its own
            assert os.readlink(f"/proc/{w.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
    finally:
        w.close()


def test_worker_never_imported_duckdb(worker) -> None:  # noqa: ANN001
    r = worker.run("import sys\nsorted(m for m in sys.modules if m.split('.')[0] in ('duckdb', '_duckdb', 'ehrgym'))", no_sql)
    assert r.output == "[]\n", r
