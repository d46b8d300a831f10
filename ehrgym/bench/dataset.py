"""A built benchmark on disk: writing its files and loading them back with validation.

Layout of a benchmark directory::

    tasks.jsonl        one task per line (ehrgym.bench.task), sorted by task_id
    tasks.parquet      the same, flattened (nested fields as JSON strings)
    card.json/.md      the dataset card
    build_report.json  candidates, kept, discarded by reason, timings
    manifest.json      format version, config, seed, database identity, counts, content hash

The benchmark's content hash is the SHA-256 of ``tasks.jsonl``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ehrgym.bench.task import Task, load_tasks_jsonl, write_tasks_jsonl
from ehrgym.errors import BenchmarkError, TaskFormatError

MANIFEST_KEYS = ("format_version", "config", "seed", "db_path", "db_content_hash", "db_source", "task_counts",
                 "content_hash")
FILES = ("tasks.jsonl", "tasks.parquet", "card.json", "card.md", "build_report.json", "manifest.json")


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dump_json(data: Any, path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, ensure_ascii=False, default=str)
        fh.write("\n")


PARQUET_SCHEMA = pa.schema([
    ("task_id", pa.string()), ("pair_id", pa.string()), ("variant", pa.string()), ("intent", pa.string()),
    ("level", pa.string()), ("template_id", pa.string()), ("split", pa.string()), ("question", pa.string()),
    ("gold_sql", pa.string()), ("naive_sql", pa.string()), ("expected_kind", pa.string()),
    ("expected_reason", pa.string()), ("expected_value", pa.string()), ("answer_type", pa.string()),
    ("noise_level", pa.string()), ("noise_subtype", pa.string()), ("complexity", pa.int64()),
    ("expected", pa.string()), ("noise", pa.string()), ("meta", pa.string()), ("background", pa.string()),
])


def _j(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def write_parquet(tasks: list[Task], path: Path) -> None:
    cols: dict[str, list[Any]] = {f.name: [] for f in PARQUET_SCHEMA}
    for t in tasks:
        d = t.to_dict()
        for k in ("task_id", "pair_id", "variant", "intent", "level", "template_id", "split", "question",
                  "gold_sql", "naive_sql"):
            cols[k].append(d[k])
        cols["expected_kind"].append(t.expected.kind)
        cols["expected_reason"].append(t.expected.reason)
        cols["expected_value"].append(_j(t.expected.value))
        cols["answer_type"].append(t.expected.answer.type)
        cols["noise_level"].append(t.noise.level if t.noise else None)
        cols["noise_subtype"].append(t.noise.subtype if t.noise else None)
        cols["complexity"].append(int(t.meta.get("complexity", 0)))
        cols["expected"].append(_j(d["expected"]))
        cols["noise"].append(_j(d["noise"]) if d["noise"] else None)
        cols["meta"].append(_j(d["meta"]))
        cols["background"].append(_j(d["background"]) if "background" in d else None)
    table = pa.table(cols, schema=PARQUET_SCHEMA)
    pq.write_table(table, path, compression="zstd", write_statistics=False)


def write_benchmark(out: Path, tasks: list[Task], card: dict[str, Any], card_md: str, report: dict[str, Any],
                    manifest: dict[str, Any]) -> dict[str, Any]:
    """Write every file; completes ``manifest`` with counts and hashes and returns it."""
    write_tasks_jsonl(tasks, out / "tasks.jsonl")
    write_parquet(tasks, out / "tasks.parquet")
    dump_json(card, out / "card.json")
    (out / "card.md").write_text(card_md, encoding="utf-8")
    dump_json(report, out / "build_report.json")
    manifest = dict(manifest)
    manifest["task_counts"] = task_counts(tasks)
    manifest["content_hash"] = sha256_file(out / "tasks.jsonl")
    manifest["file_sha256"] = {name: sha256_file(out / name) for name in ("tasks.jsonl", "tasks.parquet",
                                                                          "card.json", "card.md")}
    dump_json(manifest, out / "manifest.json")
    return manifest


def task_counts(tasks: list[Task]) -> dict[str, Any]:
    return {
        "tasks": len(tasks),
        "pairs": len({t.pair_id for t in tasks}),
        "by_split": dict(sorted(Counter(t.split for t in tasks).items())),
        "by_variant": dict(sorted(Counter(t.variant for t in tasks).items())),
        "by_intent": dict(sorted(Counter(t.intent for t in tasks).items())),
    }


@dataclass
class Benchmark:
    """A loaded benchmark: its tasks (sorted by id), manifest and card."""

    path: Path
    tasks: list[Task]
    manifest: dict[str, Any]
    card: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id: dict[str, Task] = {t.task_id: t for t in self.tasks}
        self._by_public: dict[str, Task] | None = None

    @property
    def by_public_id(self) -> dict[str, Task]:
        """Tasks by the opaque id agents see (:attr:`Task.public_id`); built on first use."""
        if self._by_public is None:
            self._by_public = {t.public_id: t for t in self.tasks}
        return self._by_public

    def task(self, task_id: str) -> Task:
        """The task with this internal id or public id; KeyError when neither matches."""
        found = self.by_id.get(task_id)
        return found if found is not None else self.by_public_id[task_id]

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]

    @property
    def db_content_hash(self) -> str | None:
        return self.manifest.get("db_content_hash")

    def pairs(self) -> list[tuple[Task, Task]]:
        """(clean, noise) for every pair, sorted by pair id."""
        groups: dict[str, dict[str, Task]] = defaultdict(dict)
        for t in self.tasks:
            groups[t.pair_id][t.variant] = t
        return [(g["clean"], g["noise"]) for _, g in sorted(groups.items())]

    def filter(self, **criteria: Any) -> list[Task]:
        """Tasks whose fields equal the given values; a list/tuple/set value means any of them.

        Fields: any Task attribute (split, variant, intent, level, template_id …) plus
        ``noise_level`` and ``noise_subtype``.
        """
        def get(t: Task, key: str) -> Any:
            if key == "noise_level":
                return t.noise.level if t.noise else None
            if key == "noise_subtype":
                return t.noise.subtype if t.noise else None
            if not hasattr(t, key):
                raise BenchmarkError(f"cannot filter tasks by {key!r}")
            return getattr(t, key)

        out = []
        for t in self.tasks:
            ok = True
            for key, want in criteria.items():
                if want is None:
                    continue
                have = get(t, key)
                ok = have in want if isinstance(want, (list, tuple, set, frozenset)) else have == want
                if not ok:
                    break
            if ok:
                out.append(t)
        return out


_LAST_LOADED: list[tuple[tuple[Any, ...], Benchmark]] = []
"""The benchmark this process loaded last, with the state of its directory's files then: loading it again while
none of them changed (the pipeline evaluates four baselines on one benchmark) parses nothing."""


def _directory_state(path: Path, verify_hash: bool) -> tuple[Any, ...]:
    stats = sorted((p.name, p.stat()) for p in path.iterdir() if p.is_file())
    return (str(path.resolve()), verify_hash, tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats))


def load_benchmark(path: str | Path, verify_hash: bool = True) -> Benchmark:
    """Load and validate a benchmark directory (clear errors on missing or malformed files).

    Loading the benchmark loaded last again, with none of its directory's files changed since (size and
    modification time), returns a new :class:`Benchmark` over the same (immutable) tasks without reading them."""
    path = Path(path)
    if not path.is_dir():
        raise BenchmarkError(f"benchmark directory {path} does not exist; build one with "
                             f"`ehrgym bench build --db DB --out {path}`")
    state = _directory_state(path, verify_hash)
    if _LAST_LOADED and _LAST_LOADED[0][0] == state:
        last = _LAST_LOADED[0][1]
        return Benchmark(path, list(last.tasks), copy.deepcopy(last.manifest), copy.deepcopy(last.card))
    bench = _load_benchmark(path, verify_hash)
    if _directory_state(path, verify_hash) == state:  # unchanged while it was read
        _LAST_LOADED[:] = [(state, Benchmark(path, list(bench.tasks), copy.deepcopy(bench.manifest),
                                             copy.deepcopy(bench.card)))]
    return bench


def _load_benchmark(path: Path, verify_hash: bool) -> Benchmark:
    manifest_path = path / "manifest.json"
    tasks_path = path / "tasks.jsonl"
    for p in (manifest_path, tasks_path):
        if not p.exists():
            raise BenchmarkError(f"{path} is not a complete benchmark: {p.name} is missing; rebuild it with "
                                 f"`ehrgym bench build`")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"{manifest_path} is not valid JSON ({exc.msg}); rebuild the benchmark") from exc
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if not isinstance(manifest, dict) or missing:
        raise BenchmarkError(f"{manifest_path} lacks {missing}; rebuild the benchmark with `ehrgym bench build`")
    if manifest["format_version"] != 1:
        raise BenchmarkError(f"benchmark format {manifest['format_version']} is not supported by this kit (1)")
    if verify_hash:
        _verify_files(path, manifest)
    tasks = load_tasks_jsonl(tasks_path)
    if manifest.get("kind") != "external":  # an external benchmark's tasks are single questions, not pairs
        _validate_pairs(tasks, tasks_path)
    card = {}
    if (path / "card.json").exists():
        try:
            card = json.loads((path / "card.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise BenchmarkError(f"{path / 'card.json'} is not valid JSON ({exc.msg}); rebuild the benchmark") from exc
    return Benchmark(path, tasks, manifest, card)


def _verify_files(path: Path, manifest: dict[str, Any]) -> None:
    """Every file the manifest lists must be present and unchanged since the build."""
    expected = dict(manifest.get("file_sha256") or {})
    expected.setdefault("tasks.jsonl", manifest["content_hash"])
    for name, digest in sorted(expected.items()):
        file = path / name
        if not file.exists():
            raise BenchmarkError(f"{path} is not a complete benchmark: {name} is listed in manifest.json but missing; "
                                 f"rebuild it with `ehrgym bench build`")
        actual = sha256_file(file)
        if actual != digest:
            raise BenchmarkError(f"{file} does not match its manifest (sha256 {actual[:12]}… ≠ {str(digest)[:12]}…): "
                                 f"the file was modified after the build; rebuild, or load with verify_hash=False "
                                 f"(`--no-verify-hash` on the command line)")


def _validate_pairs(tasks: list[Task], where: Path) -> None:
    groups: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        groups[t.pair_id].append(t)
    for pair_id, members in groups.items():
        variants = sorted(t.variant for t in members)
        if variants != ["clean", "noise"]:
            raise TaskFormatError(f"{where}: pair {pair_id!r} has variants {variants}; every pair needs exactly "
                                  f"one clean and one noise task")
        if len({t.split for t in members}) != 1:
            raise TaskFormatError(f"{where}: the two tasks of pair {pair_id!r} are in different splits")
        if len({(t.template_id, t.intent, t.level) for t in members}) != 1:
            raise TaskFormatError(f"{where}: the two tasks of pair {pair_id!r} disagree on template/intent/level")
