"""Finding MIMIC-IV table files in PhysioNet's layout (``SOURCE/hosp``, ``SOURCE/icu``).

Everything here only looks at the file system (names and CSV headers); nothing is loaded.
Wrong layouts are diagnosed with a suggestion of the directory the user probably meant.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import zlib
from dataclasses import dataclass
from pathlib import Path

from ehrgym.db.schema import MODULE_SCHEMAS, TableSpec, mimic_schema
from ehrgym.errors import LoaderError

SUFFIXES: tuple[str, ...] = (".csv.gz", ".csv")  # preference order when both exist
DEMO_MARKER = "demo_subject_id.csv"
DOWNLOAD_HINT = ("PhysioNet ships MIMIC-IV as SOURCE/hosp/*.csv.gz and SOURCE/icu/*.csv.gz, e.g. "
                 "`wget -r -N -c -np --user USER --ask-password https://physionet.org/files/mimiciv/3.1/` "
                 "(or mimic-iv-demo/2.2/ for the open demo)")


@dataclass(frozen=True)
class TableFile:
    """One table's CSV file (``.csv.gz`` or ``.csv``)."""

    spec: TableSpec
    path: Path

    @property
    def compressed(self) -> bool:
        return self.path.name.endswith(".gz")

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def relative(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"


@dataclass(frozen=True)
class SourceLayout:
    """What a MIMIC-IV source directory holds."""

    root: Path
    files: dict[str, TableFile]          # table name -> file, for the tables present
    missing: tuple[str, ...]             # table names with no file
    unknown_files: tuple[str, ...]       # CSV files in hosp/ or icu/ that are no MIMIC-IV table
    is_demo: bool

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files.values())


def _table_file(module_dir: Path, table: str) -> Path | None:
    for suffix in SUFFIXES:
        path = module_dir / f"{table}{suffix}"
        if path.is_file():
            return path
    return None


def _csv_names(folder: Path) -> set[str]:
    names = set()
    for path in folder.iterdir():
        for suffix in SUFFIXES:
            if path.is_file() and path.name.endswith(suffix):
                names.add(path.name[: -len(suffix)])
    return names


def _looks_like_module_dir(folder: Path) -> bool:
    """A folder holding MIMIC-IV table files directly (the user pointed at hosp/ or icu/)."""
    return folder.is_dir() and bool(_csv_names(folder) & set(mimic_schema()))


def _candidate_roots(folder: Path, depth: int = 3) -> list[Path]:
    """Directories below ``folder`` (breadth-first, bounded) that have a hosp/ or icu/ child."""
    found: list[Path] = []
    frontier = [folder]
    for _ in range(depth):
        nxt: list[Path] = []
        for d in frontier:
            try:
                children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for child in children:
                if any((child / m).is_dir() for m in MODULE_SCHEMAS):
                    found.append(child)
                else:
                    nxt.append(child)
        frontier = nxt
    return found


def diagnose_wrong_directory(source: Path) -> LoaderError:
    """The most helpful error for a ``source`` without hosp/ and icu/ subdirectories."""
    if _looks_like_module_dir(source) and source.name in MODULE_SCHEMAS:
        return LoaderError(f"{source} is the '{source.name}' module folder, not the MIMIC-IV root; "
                           f"pass its parent instead: `ehrgym db load-mimic {source.parent}`")
    if _looks_like_module_dir(source):
        tables = sorted(_csv_names(source) & set(mimic_schema()))
        return LoaderError(f"{source} holds MIMIC-IV table files directly ({', '.join(tables[:4])}, ...) "
                           f"but the loader needs PhysioNet's layout with hosp/ and icu/ subfolders; "
                           f"move hosp tables into {source}/hosp and ICU tables into {source}/icu. "
                           f"{DOWNLOAD_HINT}")
    candidates = _candidate_roots(source)
    if len(candidates) == 1:
        return LoaderError(f"{source} has no hosp/ or icu/ folder, but {candidates[0]} below it does; "
                           f"pass that instead: `ehrgym db load-mimic {candidates[0]}`")
    if candidates:
        listed = "\n  ".join(str(c) for c in candidates[:5])
        return LoaderError(f"{source} has no hosp/ or icu/ folder, but these directories below it do; "
                           f"pass one of them instead:\n  {listed}")
    return LoaderError(f"{source} is not a MIMIC-IV directory: it has no hosp/ or icu/ folder. {DOWNLOAD_HINT}")


def scan_source(source: str | Path) -> SourceLayout:
    """Locate every table file of ``source``; raise :class:`LoaderError` for a wrong directory."""
    root = Path(source).expanduser()
    if not root.exists():
        parent_hint = f" ({root.parent} exists)" if root.parent.is_dir() else ""
        raise LoaderError(f"MIMIC-IV directory {root} does not exist{parent_hint}. {DOWNLOAD_HINT}")
    if not root.is_dir():
        raise LoaderError(f"{root} is a file; pass the MIMIC-IV directory that contains hosp/ and icu/ "
                          f"(for {root.name} that is probably {root.parent.parent})")
    module_dirs = {m: root / m for m in MODULE_SCHEMAS}
    if not any(d.is_dir() for d in module_dirs.values()):
        raise diagnose_wrong_directory(root)
    files: dict[str, TableFile] = {}
    missing: list[str] = []
    for name, spec in mimic_schema().items():
        folder = module_dirs[spec.module]
        path = _table_file(folder, name) if folder.is_dir() else None
        if path is None:
            missing.append(name)
        else:
            files[name] = TableFile(spec, path)
    unknown = sorted(f"{m}/{n}" for m, d in module_dirs.items() if d.is_dir()
                     for n in _csv_names(d) - set(mimic_schema()))
    if not files:
        raise LoaderError(f"{root} has hosp/ or icu/ folders but no MIMIC-IV table files "
                          f"(expected e.g. hosp/patients.csv.gz). {DOWNLOAD_HINT}")
    is_demo = (root / DEMO_MARKER).is_file() or "demo" in root.name.lower()
    return SourceLayout(root, files, tuple(missing), tuple(unknown), is_demo)


# -- file integrity ---------------------------------------------------------------------------

def read_header(table_file: TableFile) -> list[str]:
    """Column names on the first line of a table file."""
    path = table_file.path
    try:
        if table_file.compressed:
            with gzip.open(path, "rt", newline="", encoding="utf-8-sig") as fh:
                line = fh.readline()
        else:
            with open(path, newline="", encoding="utf-8-sig") as fh:
                line = fh.readline()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise corrupt_file_error(table_file, str(exc)) from exc
    if not line.strip():
        raise corrupt_file_error(table_file, "the file is empty (no header line)")
    return next(csv.reader(io.StringIO(line)))


def gzip_is_intact(path: Path, chunk: int = 1 << 22) -> bool:
    """True when ``path`` decompresses to its end without a gzip error."""
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(chunk):
                pass
    except (OSError, EOFError, zlib.error):
        return False
    return True


def sha256_check(root: Path, table_file: TableFile) -> str:
    """A sentence about the file's SHA256 against ``SHA256SUMS.txt`` (empty when not listed)."""
    sums = root / "SHA256SUMS.txt"
    if not sums.is_file():
        return ""
    rel = table_file.relative
    expected = None
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == rel:
            expected = parts[0].lower()
    if expected is None:
        return ""
    digest = hashlib.sha256()
    with open(table_file.path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    if digest.hexdigest() == expected:
        return " Its SHA256 matches SHA256SUMS.txt."
    return " Its SHA256 does NOT match SHA256SUMS.txt."


def corrupt_file_error(table_file: TableFile, detail: str, root: Path | None = None) -> LoaderError:
    check = sha256_check(root, table_file) if root is not None else ""
    return LoaderError(f"{table_file.path} is truncated or corrupt ({detail}).{check} Re-download it "
                       f"from PhysioNet and check it with `sha256sum -c SHA256SUMS.txt` in the MIMIC-IV "
                       f"directory before loading again.")
