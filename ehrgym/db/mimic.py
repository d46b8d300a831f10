"""Loading PhysioNet's MIMIC-IV (v2.2 or later) or the MIMIC-IV demo into a kit database.

``load_mimic(SOURCE, OUT)`` reads ``SOURCE/hosp/*.csv.gz`` and ``SOURCE/icu/*.csv.gz`` (or
``.csv``) with DuckDB's parallel CSV reader straight into the exact v2.2 schema, validates the
row counts when it recognises the release, and writes the bookkeeping record. The database is
built in a hidden temporary file next to ``OUT`` and renamed only when complete, so an error
or an interrupt never leaves a half-built database behind.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import duckdb
from tqdm import tqdm  # text bars: they also stream through papermill

from ehrgym import __version__
from ehrgym.db.connect import content_hash, one_row, write_meta
from ehrgym.db.mimic_columns import ColumnMapping, map_columns
from ehrgym.db.mimic_layout import (SourceLayout, TableFile, corrupt_file_error, gzip_is_intact,
                                    read_header, scan_source)
from ehrgym.db.mimic_release import (IDENTITY_TABLES, UNKNOWN_RELEASE, KnownRelease, known_releases,
                                     recognise_release)
from ehrgym.db.schema import create_mimic_schema, mimic_schema
from ehrgym.errors import DatabaseError, LoaderError

__all__ = ["MimicLoadWarning", "load_mimic", "plan_load"]


class MimicLoadWarning(UserWarning):
    """Something about a MIMIC-IV source the user should know, but that does not stop the load."""


def _warn(message: str) -> None:
    warnings.warn(message, MimicLoadWarning, stacklevel=3)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def plan_load(layout: SourceLayout) -> list[tuple[TableFile, ColumnMapping]]:
    """Check every file's header against the schema (before any loading) and order the work:
    identity tables first (they recognise the release), then the schema's order."""
    if layout.missing and not layout.is_demo:
        listed = ", ".join(f"{mimic_schema()[t].module}/{t}.csv.gz" for t in layout.missing)
        raise LoaderError(
            f"{layout.root} is missing required MIMIC-IV table file(s): {listed}. Download them from "
            f"PhysioNet (and check `sha256sum -c SHA256SUMS.txt`). If this is a copy of the MIMIC-IV "
            f"demo, keep its demo_subject_id.csv in {layout.root} so absent tables are created empty.")
    order = [t for t in IDENTITY_TABLES if t in layout.files]
    order += [t for t in mimic_schema() if t in layout.files and t not in order]
    plan = []
    for name in order:
        table_file = layout.files[name]
        header = read_header(table_file)
        plan.append((table_file, map_columns(table_file.spec, header, str(table_file.path))))
    return plan


class _ProgressPoller:
    """Moves the byte-weighted bar through a table while DuckDB loads it (``query_progress``)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, bar: Any, size: int, interval: float = 0.5) -> None:
        self.con, self.bar, self.size, self.interval = con, bar, size, interval
        self.base = bar.n
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                pct = self.con.query_progress()
            except duckdb.Error:
                return
            target = self.base + int(self.size * min(max(pct, 0.0), 100.0) / 100.0)
            if target > self.bar.n:
                self.bar.update(target - self.bar.n)

    def __enter__(self) -> "_ProgressPoller":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.bar.update(self.base + self.size - self.bar.n)


def _load_table(con: duckdb.DuckDBPyConnection, root: Path, table_file: TableFile,
                mapping: ColumnMapping) -> int:
    """Bulk-load one file into its table in file order (base rowids follow the file)."""
    spec = table_file.spec
    columns = "{" + ", ".join(f"{_sql_string(c)}: {_sql_string(t)}"
                              for c, t in mapping.read_columns().items()) + "}"
    compression = "gzip" if table_file.compressed else "none"
    sql = (f"INSERT INTO {spec.qualified} SELECT {mapping.select_list()} FROM read_csv("
           f"{_sql_string(str(table_file.path))}, header=true, auto_detect=false, delim=',', "
           f"quote='\"', escape='\"', compression='{compression}', columns={columns})")
    try:
        return int(one_row(con, sql)[0])
    except duckdb.Error as exc:
        detail = str(exc).strip().splitlines()[0]
        if table_file.compressed and not gzip_is_intact(table_file.path):
            raise corrupt_file_error(table_file, detail, root) from exc
        raise LoaderError(
            f"cannot load {table_file.path} into {spec.qualified}: {detail}. The file is malformed "
            f"or truncated, or its values do not fit the MIMIC-IV v2.2 types "
            f"({', '.join(f'{c.name} {c.duckdb_type}' for c in spec.columns)}); restore the "
            f"PhysioNet original and check it with `sha256sum -c SHA256SUMS.txt`.") from exc


class _CountValidator:
    """Recognises the release once the identity tables are in, then checks each table."""

    def __init__(self, layout: SourceLayout) -> None:
        self.layout = layout
        self.counts: dict[str, int] = {}
        self.release: KnownRelease | None = None
        self.decided = False
        self.mismatches: list[str] = []

    def add(self, table_file: TableFile, rows: int) -> None:
        name = table_file.spec.name
        self.counts[name] = rows
        if not self.decided and all(t in self.counts or t not in self.layout.files for t in IDENTITY_TABLES):
            self.decided = True
            self.release = recognise_release(self.counts)
            if self.release is None:
                found = ", ".join(f"{t}={self.counts[t]:,}" for t in IDENTITY_TABLES if t in self.counts)
                _warn(f"{self.layout.root}: release not recognised ({found or 'no patients/admissions'} "
                      f"match no known release: {', '.join(r.label for r in known_releases())}); "
                      f"row counts are not validated")
            for done, n in list(self.counts.items()):
                self._check(self.layout.files[done], n)
        elif self.decided:
            self._check(table_file, rows)

    def _check(self, table_file: TableFile, rows: int) -> None:
        if self.release is None:
            return
        problem = self.release.mismatch(table_file.spec.name, rows)
        if problem is None:
            return
        if self.release.strict:
            raise LoaderError(f"{problem}: {table_file.path} is incomplete or damaged. Re-download it "
                              f"from PhysioNet and check it with `sha256sum -c SHA256SUMS.txt`.")
        self.mismatches.append(problem)
        _warn(f"{problem}; loading it as it is")


def _remove_partial(tmp: Path) -> None:
    for path in (tmp, tmp.with_name(tmp.name + ".wal")):
        if path.exists():
            path.unlink()


def load_mimic(source: str | Path, out: str | Path, progress: bool = True,
               overwrite: bool = False) -> dict[str, Any]:
    """Load MIMIC-IV (v2.2+) or the demo from ``source`` into a new DuckDB file ``out``.

    Returns the bookkeeping record written to ``ehrgym_meta`` (source, release, patients,
    source_dir, build_seconds, content_hash, table_rows, missing_tables, ...).
    Raises :class:`LoaderError` for a wrong directory, a missing required table, a corrupt or
    truncated file, columns that do not map onto the v2.2 schema, or (full release) row counts
    that differ from the published ones.
    """
    started = time.perf_counter()
    out = Path(out).expanduser()
    if out.is_dir():
        raise DatabaseError(f"{out} is a directory; --out must be a database file path such as {out}/mimic.duckdb")
    if out.exists() and not overwrite:
        raise DatabaseError(f"{out} already exists; pass --force (overwrite=True) to replace it, "
                            f"or choose another --out")
    layout = scan_source(source)
    plan = plan_load(layout)
    if layout.unknown_files:
        _warn(f"{layout.root}: ignoring files that are not MIMIC-IV v2.2 tables: {', '.join(layout.unknown_files)}")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    _remove_partial(tmp)
    con: duckdb.DuckDBPyConnection | None = None
    try:
        try:
            con = duckdb.connect(str(tmp))
        except duckdb.Error as exc:
            raise DatabaseError(f"cannot create a database next to {out}: {exc}; choose a writable --out") from exc
        # progress is tracked (for the bar) but never printed by DuckDB itself
        con.execute(f"SET enable_progress_bar = {'true' if progress else 'false'}")
        con.execute("SET enable_progress_bar_print = false")
        create_mimic_schema(con)
        validator = _CountValidator(layout)
        with tqdm(total=layout.total_bytes, unit="B", unit_scale=True, disable=not progress,
                  desc="load MIMIC-IV", leave=True) as bar:
            for table_file, mapping in plan:
                bar.set_postfix_str(table_file.relative)
                if progress:
                    with _ProgressPoller(con, bar, table_file.size):
                        rows = _load_table(con, layout.root, table_file, mapping)
                else:
                    rows = _load_table(con, layout.root, table_file, mapping)
                validator.add(table_file, rows)
        for name in layout.missing:
            spec = mimic_schema()[name]
            _warn(f"{layout.root} has no {spec.module}/{name}.csv.gz; created {spec.qualified} empty "
                  f"so the schema stays complete")
        release = validator.release
        source_kind = release.source if release else ("mimic-iv-demo" if layout.is_demo else "mimic-iv")
        table_rows = {name: validator.counts.get(name, 0) for name in mimic_schema()}
        meta: dict[str, Any] = {
            "source": source_kind,
            "release": release.release if release else UNKNOWN_RELEASE,
            "rows_validated": release is not None,
            "count_mismatches": validator.mismatches,
            "patients": table_rows["patients"],
            "source_dir": str(layout.root.resolve()),
            "table_rows": table_rows,
            "missing_tables": list(layout.missing),
            "ignored_files": list(layout.unknown_files),
            "renamed_columns": {m.spec.name: m.renamed for _, m in plan if m.renamed},
            "kit_version": __version__,
            "content_hash": content_hash(con),
        }
        meta["build_seconds"] = round(time.perf_counter() - started, 3)
        write_meta(con, meta)
        con.execute("CHECKPOINT")
        con.close()
        con = None
        os.replace(tmp, out)
    except BaseException:
        if con is not None:
            con.close()
        _remove_partial(tmp)
        raise
    return meta
