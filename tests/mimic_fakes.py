"""Tiny MIMIC-IV-layout directories (hosp/*.csv.gz, icu/*.csv.gz) for loader tests.

Values are synthetic and typed per the v2.2 schema; nothing is taken from MIMIC-IV.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from pathlib import Path

from ehrgym.db.schema import mimic_schema

VALUE_BY_TYPE = {
    "BIGINT": lambda i: str(i + 1),
    "DOUBLE": lambda i: f"{i + 0.5}",
    "VARCHAR": lambda i: f"text {i}",
    "TIMESTAMP": lambda i: f"2180-01-{(i % 28) + 1:02d} 0{i % 10}:30:00",
    "DATE": lambda i: f"2180-02-{(i % 28) + 1:02d}",
}


def table_csv(table: str, rows: int, header: list[str] | None = None) -> str:
    spec = mimic_schema()[table]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header if header is not None else spec.column_names)
    for i in range(rows):
        writer.writerow([VALUE_BY_TYPE[c.duckdb_type](i) for c in spec.columns])
    return buf.getvalue()


def write_table(root: Path, table: str, text: str, compressed: bool = True) -> Path:
    spec = mimic_schema()[table]
    folder = root / spec.module
    folder.mkdir(parents=True, exist_ok=True)
    if compressed:
        path = folder / f"{table}.csv.gz"
        # mtime=0: byte-identical archives for identical content
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as fh:
            fh.write(text.encode())
    else:
        path = folder / f"{table}.csv"
        path.write_text(text)
    return path


def make_source(root: Path, rows: dict[str, int] | None = None, skip: tuple[str, ...] = (),
                demo: bool = False, compressed: bool = True, sha256sums: bool = False) -> Path:
    """Write every table (header plus ``rows[table]`` rows, default 0) except ``skip``."""
    rows = rows or {}
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for table in mimic_schema():
        if table not in skip:
            written.append(write_table(root, table, table_csv(table, rows.get(table, 0)), compressed))
    if demo:
        (root / "demo_subject_id.csv").write_text("subject_id\n1\n2\n")
    if sha256sums:
        lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.parent.name}/{p.name}" for p in written]
        (root / "SHA256SUMS.txt").write_text("\n".join(lines) + "\n")
    return root
