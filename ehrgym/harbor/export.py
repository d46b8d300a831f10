"""Export a benchmark split as a Harbor dataset: one task directory per task (docs/architecture.md §4).

Harbor (https://harborframework.com) runs an agent in a container built from a task's
``environment/``, then uploads ``tests/`` to ``/tests`` and runs ``tests/test.sh``, which must write
``/logs/verifier/reward.txt`` (or ``reward.json``). ``solution/`` is uploaded (to ``/solution``)
only when the oracle agent runs. So the agent's view is ``instruction.md`` and the image; the
expected outcome lives only in ``tests/`` and ``solution/``. Each task directory::

    <public id>/
      instruction.md        the question (by its opaque public id), how to query, the answer protocol
      task.toml             Harbor's task config: package name, metadata, resources, no network
      environment/
        Dockerfile          builds /data/ehr.duckdb from tables/ in a build stage; the kit's commands
        ehrgym-kit.tar.gz   the kit's package (deterministic tarball), for ehrgym-sql and the verifier
        tables/             the task's tables with its overlay materialised (Parquet + schema.sql)
      tests/
        test.sh             runs the kit's verifier on /app/answer.txt, writes reward.txt (+ verdict.json)
        task.json           the task (expected outcome, noise spec) — seen by the verifier only
      solution/solve.sh     writes the oracle's answer to /app/answer.txt

Same benchmark, database and options → byte-identical files.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import tarfile
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Sequence

from ehrgym.bench.answers import format_answer
from ehrgym.bench.task import Task
from ehrgym.env.episode import schema_summary
from ehrgym.env.protocol import protocol_text
from ehrgym.errors import BenchmarkError, EhrGymError
from ehrgym.harbor.materialise import PROFILE_FILE, SCHEMA_FILE, materialise_task_tables, table_file

EXPORT_FILE = "ehrgym-harbor.json"     # at the dataset root: what was exported (Harbor skips files)
KIT_ARCHIVE = "ehrgym-kit.tar.gz"
DB_IN_IMAGE = "/data/ehr.duckdb"
ANSWER_FILE = "/app/answer.txt"
PACKAGE_ORG = "ehrgym"
_KIT_SUFFIXES = (".py", ".csv", ".csv.gz", ".md", ".json", ".sql")
_EXECUTABLE = 0o755


@dataclass(frozen=True)
class HarborOptions:
    """Resources and limits written into every ``task.toml`` (Harbor's field names)."""

    cpus: int = 1
    memory_mb: int = 2048
    storage_mb: int = 4096
    agent_timeout_sec: float = 1800.0
    verifier_timeout_sec: float = 120.0
    build_timeout_sec: float = 900.0
    python_image: str = "python:3.11-slim"


@dataclass
class ExportSummary:
    out_dir: str
    tasks: int
    split: str | None
    benchmark: str
    files: int = 0
    bytes: int = 0
    task_dirs: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# small deterministic writers
# ---------------------------------------------------------------------------------------------
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)   # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dump_toml(data: dict[str, Any]) -> str:
    """TOML for ``{key: scalar | {key: scalar}}`` (one level of tables), keys in the given order."""
    lines: list[str] = []
    for key, value in data.items():
        if not isinstance(value, dict):
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in data.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]"] + [f"{k} = {_toml_value(v)}" for k, v in value.items()]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str | bytes, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    if mode is not None:
        path.chmod(mode)


def kit_archive() -> bytes:
    """The kit's package as a gzipped tarball with fixed names, order, owners, modes and times."""
    root = Path(__file__).resolve().parents[1]          # …/ehrgym
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.name.endswith(_KIT_SUFFIXES))
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in files:
                data = path.read_bytes()
                info = tarfile.TarInfo("ehrgym/" + path.relative_to(root).as_posix())
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _pins() -> dict[str, str]:
    """The versions the image installs: the ones this kit runs with (the DB reader must match the writer)."""
    out = {}
    for dist in ("duckdb", "sqlglot"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError as exc:  # pragma: no cover - both are kit dependencies
            raise EhrGymError(f"{dist} is not installed; the export pins its version into the image") from exc
    return out


# ---------------------------------------------------------------------------------------------
# one task directory
# ---------------------------------------------------------------------------------------------
def instruction_text(task: Task, profile: Any) -> str:
    described = profile.description if profile is not None else "a MIMIC-IV hospital database"
    now = f" Take the current time to be {profile.current_time}." if getattr(profile, "current_time", None) else ""
    summary = schema_summary() if profile is None or profile.name == "mimic-iv" else schema_summary(profile)
    return "\n".join([
        f"# EHR question {task.public_id}",
        "",
        f"Question: {task.question}",
        "",
        f"You are working with {described} (DuckDB SQL) at `{DB_IN_IMAGE}`.{now} Explore it, then answer "
        "or abstain.",
        "",
        "Query it with the `ehrgym-sql` command, one read-only SELECT per call, for example:",
        "",
        "    ehrgym-sql \"SELECT count(*) FROM mimiciv_hosp.admissions\"",
        "    echo \"DESCRIBE labevents\" | ehrgym-sql",
        "",
        "It applies the same rules as the benchmark's episode environment (a SQL gate, a time limit, "
        "the first rows of the result shown). Python 3 with the `duckdb` package is installed too.",
        "",
        protocol_text(),
        "",
        f"Write your final answer to `{ANSWER_FILE}` in one of these forms, for example `ANSWER: 42` "
        "or `ABSTAIN: insufficient_evidence: no measurement during the stay`. Only the last answer in "
        "the file counts; nothing else is graded.",
        "",
        summary,
        "",
    ])


def task_config(task: Task, benchmark: str, opts: HarborOptions, pins: dict[str, str]) -> dict[str, Any]:
    """``task.toml`` as a dict: nothing in it tells the variant, subtype, pair or expected outcome."""
    return {
        "schema_version": "1.4",
        "task": {"name": f"{PACKAGE_ORG}/{task.public_id}",
                 "description": f"EHR-RobustGym question {task.public_id} ({benchmark}, split {task.split})",
                 "keywords": ["ehr", "mimic-iv", "sql", "duckdb", "clinical", "abstention"]},
        "metadata": {"source": "ehrgym", "benchmark": benchmark, "public_id": task.public_id,
                     "split": task.split, "answer_file": ANSWER_FILE, "database": DB_IN_IMAGE,
                     "duckdb": pins["duckdb"], "category": "data-science"},
        "verifier": {"timeout_sec": opts.verifier_timeout_sec},
        "agent": {"timeout_sec": opts.agent_timeout_sec},
        "environment": {"build_timeout_sec": opts.build_timeout_sec, "cpus": opts.cpus,
                        "memory_mb": opts.memory_mb, "storage_mb": opts.storage_mb,
                        "network_mode": "no-network"},
    }


def dockerfile_text(opts: HarborOptions, pins: dict[str, str]) -> str:
    pip = f'pip install --no-cache-dir "duckdb=={pins["duckdb"]}" "sqlglot[c]=={pins["sqlglot"]}"'
    return "\n".join([
        "# EHR-RobustGym task image (generated by `ehrgym export harbor`)",
        f"FROM {opts.python_image} AS build",
        f"RUN {pip}",
        f"ADD {KIT_ARCHIVE} /opt/ehrgym/",
        "COPY tables/ /build/tables/",
        "ENV PYTHONPATH=/opt/ehrgym",
        f"RUN python -m ehrgym.harbor.container build-db /build/tables {DB_IN_IMAGE}",
        "",
        f"FROM {opts.python_image}",
        f"RUN {pip}",
        f"ADD {KIT_ARCHIVE} /opt/ehrgym/",
        f"ENV PYTHONPATH=/opt/ehrgym EHRGYM_DB={DB_IN_IMAGE}",
        f"COPY --from=build {DB_IN_IMAGE} {DB_IN_IMAGE}",
        f"RUN chmod 0444 {DB_IN_IMAGE} \\",
        "  && printf '#!/bin/sh\\nexec python -m ehrgym.harbor.container sql \"$@\"\\n' > /usr/local/bin/ehrgym-sql \\",
        "  && chmod 0755 /usr/local/bin/ehrgym-sql && mkdir -p /app /logs/verifier",
        "WORKDIR /app",
        "",
    ])


TEST_SH = """#!/bin/bash
# Scores the agent's answer file with the kit's verifier and writes Harbor's reward file.
# Local runs: EHRGYM_ANSWER, EHRGYM_REWARD_DIR and EHRGYM_PYTHON override the container paths.
TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ANSWER="${EHRGYM_ANSWER:-/app/answer.txt}"
REWARD_DIR="${EHRGYM_REWARD_DIR:-/logs/verifier}"
mkdir -p "$REWARD_DIR"
if ! "${EHRGYM_PYTHON:-python}" -m ehrgym.harbor.container verify --task "$TESTS_DIR/task.json" \\
    --answer "$ANSWER" --reward-dir "$REWARD_DIR"; then
  echo 0 > "$REWARD_DIR/reward.txt"   # a verifier crash scores 0, it never leaves the trial without a reward
fi
"""


def oracle_answer(task: Task) -> dict[str, Any]:
    """The oracle's final answer as protocol JSON (what ``solve.sh`` writes)."""
    expected = task.expected
    if expected.is_abstain:
        return {"abstain": expected.reason, "explanation": "oracle: the records do not support an answer"}
    value = expected.value
    if expected.answer.type in ("set", "list"):
        return {"answer": [v for v in value]}
    return {"answer": format_answer(value, expected.answer)}


def solve_text(task: Task) -> str:
    answer = json.dumps(oracle_answer(task), ensure_ascii=False, sort_keys=True)
    return "\n".join([
        "#!/bin/bash",
        "# The oracle's answer (EHR-RobustGym). EHRGYM_ANSWER overrides the path for local runs.",
        'ANSWER="${EHRGYM_ANSWER:-/app/answer.txt}"',
        'mkdir -p "$(dirname "$ANSWER")"',
        "cat > \"$ANSWER\" <<'EHRGYM_EOF'",
        answer,
        "EHRGYM_EOF",
        "",
    ])


def write_task_dir(task: Task, db_path: Path, out: Path, *, benchmark: str, profile: Any, kit: bytes,
                   opts: HarborOptions, pins: dict[str, str]) -> None:
    if out.exists():
        shutil.rmtree(out)
    _write(out / "instruction.md", instruction_text(task, profile))
    _write(out / "task.toml", dump_toml(task_config(task, benchmark, opts, pins)))
    env = out / "environment"
    _write(env / "Dockerfile", dockerfile_text(opts, pins))
    _write(env / KIT_ARCHIVE, kit)
    materialise_task_tables(db_path, task.overlay, env / "tables", profile)
    _write(out / "tests" / "test.sh", TEST_SH, _EXECUTABLE)
    _write(out / "tests" / "task.json", json.dumps(task.to_dict(), ensure_ascii=False, sort_keys=True, indent=1) + "\n")
    _write(out / "solution" / "solve.sh", solve_text(task), _EXECUTABLE)


# ---------------------------------------------------------------------------------------------
# the dataset
# ---------------------------------------------------------------------------------------------
def export_harbor(bench_dir: str | Path, db_path: str | Path, out_dir: str | Path, *, split: str | None = "test",
                  limit: int | None = None, task_ids: Sequence[str] | None = None,
                  options: HarborOptions = HarborOptions(), progress: bool = True) -> ExportSummary:
    """Write one Harbor task directory per selected task of the benchmark into ``out_dir``."""
    from tqdm import tqdm

    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.env.engine import database_profile
    from ehrgym.eval.runner import _check_db, _db_content_hash

    bench = load_benchmark(bench_dir)
    db_path = Path(db_path)
    _check_db(dict(bench.manifest or {}), _db_content_hash(db_path), db_path)
    tasks = [t for t in bench.tasks if split is None or t.split == split]
    if task_ids is not None:
        wanted = set(task_ids)
        tasks = [t for t in tasks if t.task_id in wanted or t.public_id in wanted]
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise BenchmarkError(f"no task of {bench_dir} matches split={split!r}"
                             f"{' and the given ids' if task_ids is not None else ''}; nothing to export")
    tasks = sorted(tasks, key=lambda t: t.public_id)
    out_dir = Path(out_dir)
    _prepare_out(out_dir)
    profile = database_profile(db_path)
    kit = kit_archive()
    pins = _pins()
    name = Path(bench_dir).resolve().name
    summary = ExportSummary(str(out_dir), len(tasks), split, name)
    for task in tqdm(tasks, desc="harbor export", unit="task", disable=not progress):
        write_task_dir(task, db_path, out_dir / task.public_id, benchmark=name, profile=profile, kit=kit,
                       opts=options, pins=pins)
        summary.task_dirs.append(task.public_id)
    record = {"format": "ehrgym-harbor/1", "benchmark": name,
              "bench_content_hash": bench.content_hash, "split": split, "tasks": summary.task_dirs,
              "options": options.__dict__, "pins": pins}
    _write(out_dir / EXPORT_FILE, json.dumps(record, sort_keys=True, indent=1) + "\n")
    files = [p for p in out_dir.rglob("*") if p.is_file()]
    summary.files, summary.bytes = len(files), sum(p.stat().st_size for p in files)
    return summary


def _prepare_out(out_dir: Path) -> None:
    """An empty folder or an earlier export (whose task directories are replaced); never anything else."""
    if not out_dir.exists():
        out_dir.mkdir(parents=True)
        return
    entries = list(out_dir.iterdir())
    if not entries:
        return
    if not (out_dir / EXPORT_FILE).exists():
        raise EhrGymError(f"{out_dir} is not empty and holds no earlier Harbor export ({EXPORT_FILE}); "
                          f"choose a new --out directory")
    previous = json.loads((out_dir / EXPORT_FILE).read_text(encoding="utf-8"))
    for name in previous.get("tasks", []):
        if re.fullmatch(r"[A-Za-z0-9._-]+", name) and (out_dir / name).is_dir():
            shutil.rmtree(out_dir / name)
    (out_dir / EXPORT_FILE).unlink()


# ---------------------------------------------------------------------------------------------
# the kit's own checks of an exported task directory
# ---------------------------------------------------------------------------------------------
AGENT_VISIBLE = ("instruction.md", "task.toml", "environment")


def agent_visible_files(task_dir: Path) -> list[Path]:
    out: list[Path] = []
    for name in AGENT_VISIBLE:
        path = task_dir / name
        out += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return out


def check_task_dir(task_dir: str | Path, task: Task | None = None) -> list[str]:
    """Problems with an exported task directory (empty: valid). With ``task``, also checks that no
    file the agent can see names its internal id, pair, template, variant or noise subtype."""
    task_dir = Path(task_dir)
    problems: list[str] = []
    required = ["instruction.md", "task.toml", "environment/Dockerfile", f"environment/{KIT_ARCHIVE}",
                f"environment/tables/{SCHEMA_FILE}", "tests/test.sh", "tests/task.json", "solution/solve.sh"]
    for rel in required:
        if not (task_dir / rel).is_file():
            problems.append(f"missing {rel}")
    for rel in ("tests/test.sh", "solution/solve.sh"):
        path = task_dir / rel
        if path.is_file() and not path.stat().st_mode & 0o111:
            problems.append(f"{rel} is not executable")
    if problems:
        return problems
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        return [f"task.toml: {exc}"]
    name = (config.get("task") or {}).get("name", "")
    if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*", name):
        problems.append(f"task.toml: [task].name {name!r} is not org/name")
    if name.split("/")[-1] != task_dir.name:
        problems.append(f"task.toml: [task].name {name!r} does not match the directory {task_dir.name!r}")
    env = config.get("environment") or {}
    if env.get("network_mode") != "no-network":
        problems.append("task.toml: [environment].network_mode must be 'no-network'")
    for key in ("cpus", "memory_mb", "storage_mb"):
        if not isinstance(env.get(key), int) or env[key] <= 0:
            problems.append(f"task.toml: [environment].{key} must be a positive integer")
    for section in ("agent", "verifier"):
        timeout = (config.get(section) or {}).get("timeout_sec")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            problems.append(f"task.toml: [{section}].timeout_sec must be positive")
    instruction = (task_dir / "instruction.md").read_text(encoding="utf-8")
    if task_dir.name not in instruction or ANSWER_FILE not in instruction:
        problems.append("instruction.md must name the task's public id and the answer file")
    schema_sql = (task_dir / "environment" / "tables" / SCHEMA_FILE).read_text(encoding="utf-8")
    tables = re.findall(r"CREATE TABLE ([\w.]+)\(", schema_sql)
    want = {table_file(*t.split(".", 1)) for t in tables} | {SCHEMA_FILE}
    have = {p.name for p in (task_dir / "environment" / "tables").iterdir()} - {PROFILE_FILE}
    if have != want:
        problems.append(f"environment/tables holds {sorted(have ^ want)} beyond/without the exposed tables")
    if task is not None:
        secrets = {task.task_id, task.pair_id, task.template_id}
        if task.noise is not None:
            secrets.add(task.noise.subtype)
        shared = protocol_text()   # reason codes such as false_premise appear in every task's instruction
        secrets = {s for s in secrets if s and s not in shared}
        for path in agent_visible_files(task_dir):
            if path.suffix in (".parquet", ".gz"):
                continue  # data and the kit's code; the data leak checks live in tests/test_harbor.py
            text = path.read_text(encoding="utf-8", errors="replace")
            for secret in sorted(secrets):
                if secret and secret in text:
                    problems.append(f"{path.relative_to(task_dir)} names {secret!r}")
    return problems


def iter_task_dirs(out_dir: str | Path) -> Iterable[Path]:
    record = json.loads((Path(out_dir) / EXPORT_FILE).read_text(encoding="utf-8"))
    for name in record["tasks"]:
        yield Path(out_dir) / name
