"""Loading a benchmark's tables from its SQLite DDL and CSV files, into SQLite and DuckDB.

SQLite runs the benchmark's gold SQL exactly as published (``strftime``, ``datetime(..)``);
DuckDB is what episodes run on. Both are built from the same DDL and the same rows, and the
DuckDB file carries a :class:`~ehrgym.db.profile.SchemaProfile` in its bookkeeping so the SQL
gate, the Python tool and the first observation follow the benchmark's schema.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ehrgym.db.connect import one_row, write_meta
from ehrgym.db.profile import META_KEY, SchemaProfile
from ehrgym.db.schema import ColumnSpec, TableSpec
from ehrgym.errors import DatabaseError

csv.field_size_limit(1 << 24)


def declared_kind(decl: str) -> str:
    """The kit's (BigQuery-style) type of a SQLite declared column type."""
    d = decl.upper()
    if "INT" in d:
        return "INT64"
    if any(k in d for k in ("DOUBLE", "FLOAT", "REAL", "NUMERIC", "DECIMAL")):
        return "FLOAT64"
    if "TIMESTAMP" in d or "DATETIME" in d:
        return "DATETIME"
    if d.strip() == "DATE":
        return "DATE"
    return "STRING"


def sqlite_tables(con: sqlite3.Connection, schema: str) -> tuple[TableSpec, ...]:
    """The tables of a SQLite database as kit table specs (in creation order) under ``schema``."""
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY rowid")]
    specs = []
    for name in names:
        cols = con.execute(f'PRAGMA table_info("{name}")').fetchall()  # cid, name, type, notnull, default, pk
        specs.append(TableSpec(schema, name.lower(),
                               tuple(ColumnSpec(c[1].lower(), declared_kind(c[2]), bool(c[3])) for c in cols)))
    return tuple(specs)


def _convert(value: str, kind: str) -> Any:
    if value == "":
        return None
    if kind == "INT64":
        try:
            return int(value)
        except ValueError:
            return int(float(value))
    if kind == "FLOAT64":
        return float(value)
    return value


def load_csv_rows(path: Path, spec: TableSpec) -> list[tuple[Any, ...]]:
    """Rows of a (gzipped) CSV whose header names ``spec``'s columns, typed by the spec."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:  # type: ignore[operator]
        reader = csv.reader(fh)
        header = [h.strip().lower() for h in next(reader)]
        want = spec.column_names
        missing = [c for c in want if c not in header]
        if missing:
            raise DatabaseError(f"{path} lacks the columns {missing} of table {spec.name}")
        index = [header.index(c) for c in want]
        kinds = [c.bigquery_type for c in spec.columns]
        return [tuple(_convert(row[i], k) for i, k in zip(index, kinds)) for row in reader]


def build_sqlite(ddl: Path, csv_dir: Path, out: Path, schema: str) -> tuple[tuple[TableSpec, ...], dict[str, int]]:
    """Create ``out`` from the DDL and fill every table from ``csv_dir/<table>.csv[.gz]``."""
    if out.exists():
        out.unlink()
    con = sqlite3.connect(out)
    try:
        con.executescript(ddl.read_text(encoding="utf-8"))
        specs = sqlite_tables(con, schema)
        counts = {}
        for spec in specs:
            path = next((p for p in (csv_dir / f"{spec.name}.csv.gz", csv_dir / f"{spec.name}.csv") if p.exists()),
                        None)
            if path is None:
                raise DatabaseError(f"no CSV for table {spec.name} in {csv_dir} (expected {spec.name}.csv.gz)")
            rows = load_csv_rows(path, spec)
            marks = ", ".join("?" * len(spec.columns))
            con.executemany(f'INSERT INTO "{spec.name}" VALUES ({marks})', rows)
            counts[spec.name] = len(rows)
        con.commit()
    finally:
        con.close()
    return specs, counts


# SQLite values -> Arrow (times stay text; DuckDB casts them on insert)
_ARROW = {"INT64": pa.int64(), "FLOAT64": pa.float64(), "STRING": pa.string(), "DATETIME": pa.string(),
          "DATE": pa.string()}


def copy_sqlite_to_duckdb(sqlite_path: Path, out: Path, profile: SchemaProfile, meta: dict[str, Any]) -> str:
    """Copy every table of ``profile`` from SQLite into a DuckDB file; returns its content hash."""
    for stale in (out, out.with_name(out.name + ".wal")):   # a rebuild starts from nothing
        if stale.exists():
            stale.unlink()
    src = sqlite3.connect(sqlite_path)
    con = duckdb.connect(str(out))
    digest = hashlib.sha256()
    try:
        for schema in profile.schemas:
            con.execute(f"CREATE SCHEMA {schema}")
        for spec in profile.tables:
            con.execute(spec.create_sql())
            cols = ", ".join(f'"{c}"' for c in spec.column_names)
            rows = src.execute(f'SELECT {cols} FROM "{spec.name}"').fetchall()
            arrays = {}
            for i, c in enumerate(spec.columns):
                try:
                    arrays[c.name] = pa.array([r[i] for r in rows], type=_ARROW[c.bigquery_type])
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    raise DatabaseError(f"{sqlite_path}: column {spec.name}.{c.name} holds values that do not fit "
                                        f"its declared type {c.bigquery_type} ({exc})") from exc
            arrow = pa.table(arrays)
            con.register("_ehrgym_rows", arrow)
            con.execute(f"INSERT INTO {spec.qualified} SELECT * FROM _ehrgym_rows")
            con.unregister("_ehrgym_rows")
            count, total = one_row(con, f"SELECT count(*), coalesce(sum(hash({cols})::HUGEINT), 0) "
                                        f"FROM {spec.qualified}")
            digest.update(f"{spec.qualified}:{count}:{total};".encode())
        content_hash = digest.hexdigest()
        write_meta(con, {**meta, META_KEY: profile.to_dict(), "content_hash": content_hash})
        con.execute("CHECKPOINT")
    finally:
        con.close()
        src.close()
    return content_hash
