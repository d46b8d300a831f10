"""A task's database, materialised: the base with the task's overlay applied, as plain tables.

The episode environment serves an overlay as views over a shared read-only base
(:mod:`ehrgym.db.overlay`). A Harbor container has no kit in front of the database, so the export
writes the *result* instead: every exposed table read through those views, in their scan order,
into one Parquet file per table plus ``schema.sql`` (the base's own ``CREATE TABLE`` statements).
:func:`build_database` turns that folder into the task's DuckDB file (inside the image, at build
time). What the folder holds is exactly what an agent could read in an episode:

* the exposed schemas and tables with the base's column types, overlay rows where the views place
  them, row ids renumbered by the copy (no trace of deleted base row ids);
* no overlay spec, no clean rows the overlay removed, no task data, and no bookkeeping of the base
  (its content hash would tell a noisy copy from the clean one); only a non-MIMIC schema profile is
  recorded (``profile.json``), because the gated SQL command needs it to know the tables.

Why Parquet and not a DuckDB file: DuckDB stamps every new database file with a random identifier,
so two exports of one task would differ; Parquet written by one thread is byte-identical, and the
image's own DuckDB builds the file (no storage-version mismatch between exporter and image).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from ehrgym.db.connect import attach_base, one_row, write_meta
from ehrgym.db.overlay import Overlay, OverlaySession
from ehrgym.db.profile import META_KEY, SchemaProfile
from ehrgym.env.engine import database_profile
from ehrgym.errors import DatabaseError

BASE = "base"
SCHEMA_FILE = "schema.sql"
PROFILE_FILE = "profile.json"


def table_file(schema: str, table: str) -> str:
    return f"{schema}.{table}.parquet"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def materialise_task_tables(db_path: str | Path, overlay: Overlay, out_dir: str | Path,
                            profile: SchemaProfile | None = None) -> dict[str, int]:
    """Write the exposed tables of ``db_path`` as seen through ``overlay`` into ``out_dir``.

    Returns the row count per ``schema.table``. Files of an earlier export are replaced."""
    db_path, out_dir = Path(db_path), Path(out_dir)
    profile = profile if profile is not None else database_profile(db_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(":memory:")
    counts: dict[str, int] = {}
    ddl: list[str] = []
    try:
        con.execute("SET threads = 1")                  # one writer: the same bytes every time
        con.execute("SET preserve_insertion_order = true")
        attach_base(con, db_path, BASE)
        session = OverlaySession(con, BASE, profile)    # views in the memory catalog, over base
        session.apply(overlay)
        for spec in profile.tables:
            row = con.execute("SELECT sql FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? "
                              "AND table_name = ?", [BASE, spec.schema, spec.name]).fetchone()
            if row is None:
                raise DatabaseError(f"{db_path} has no table {spec.qualified}")
            ddl.append(str(row[0]))
            path = out_dir / table_file(spec.schema, spec.name)
            con.execute(f"COPY (SELECT * FROM memory.{_q(spec.schema)}.{_q(spec.name)}) TO '{path.as_posix()}' "
                        f"(FORMAT parquet, COMPRESSION zstd)")
            counts[spec.qualified] = int(one_row(
                con, f"SELECT count(*) FROM memory.{_q(spec.schema)}.{_q(spec.name)}")[0])
    except duckdb.Error as exc:
        raise DatabaseError(f"cannot materialise the task tables of {db_path}: {exc}") from exc
    finally:
        con.close()
    schemas = "".join(f"CREATE SCHEMA IF NOT EXISTS {_q(s)};\n" for s in profile.schemas)
    (out_dir / SCHEMA_FILE).write_text(schemas + "\n".join(ddl) + "\n", encoding="utf-8")
    profile_path = out_dir / PROFILE_FILE
    if profile.name != "mimic-iv":
        profile_path.write_text(json.dumps(profile.to_dict(), sort_keys=True, indent=1) + "\n", encoding="utf-8")
    else:
        profile_path.unlink(missing_ok=True)
    return counts


def build_database(tables_dir: str | Path, out_path: str | Path) -> dict[str, int]:
    """Build the task's DuckDB file from a :func:`materialise_task_tables` folder (run in the image)."""
    tables_dir, out_path = Path(tables_dir), Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (out_path, out_path.with_name(out_path.name + ".wal")):
        stale.unlink(missing_ok=True)
    counts: dict[str, int] = {}
    con = duckdb.connect(str(out_path))
    try:
        con.execute("SET threads = 1")
        con.execute("SET preserve_insertion_order = true")
        for stmt in (tables_dir / SCHEMA_FILE).read_text(encoding="utf-8").split(";\n"):
            if stmt.strip():
                con.execute(stmt)
        for schema, table in con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                                         "ORDER BY schema_name, table_name").fetchall():
            src = tables_dir / table_file(schema, table)
            con.execute(f"INSERT INTO {_q(schema)}.{_q(table)} SELECT * FROM read_parquet('{src.as_posix()}')")
            counts[f"{schema}.{table}"] = int(one_row(con, f"SELECT count(*) FROM {_q(schema)}.{_q(table)}")[0])
        profile_path = tables_dir / PROFILE_FILE
        if profile_path.exists():
            write_meta(con, {META_KEY: json.loads(profile_path.read_text(encoding="utf-8"))})
        con.execute("CHECKPOINT")
    except duckdb.Error as exc:
        raise DatabaseError(f"cannot build {out_path} from {tables_dir}: {exc}") from exc
    finally:
        con.close()
    return counts


def database_objects(path: str | Path) -> dict[str, Any]:
    """Schemas, tables and views of a DuckDB file (for leak checks)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        where = "database_name = current_database()"
        schemas = sorted(r[0] for r in con.execute(
            f"SELECT schema_name FROM duckdb_schemas() WHERE NOT internal AND {where}").fetchall())
        tables = sorted(f"{r[0]}.{r[1]}" for r in con.execute(
            f"SELECT schema_name, table_name FROM duckdb_tables() WHERE {where}").fetchall())
        views = sorted(f"{r[0]}.{r[1]}" for r in con.execute(
            f"SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal AND {where}").fetchall())
        return {"schemas": schemas, "tables": tables, "views": views}
    finally:
        con.close()
