"""Opening kit databases, bookkeeping (``ehrgym_meta``) and content hashing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import duckdb

from ehrgym.db.schema import EXPOSED_SCHEMAS, META_SCHEMA, mimic_schema, search_path_sql
from ehrgym.errors import DatabaseError


def open_database(path: str | Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open a kit database with the MIMIC-IV search path (``labevents`` resolves unqualified)."""
    path = Path(path)
    if read_only and not path.exists():
        raise DatabaseError(f"database {path} does not exist; build one with `ehrgym db synth --out {path}` "
                            f"or `ehrgym db load-mimic DIR --out {path}`")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise DatabaseError(f"cannot open {path} as a DuckDB database: {exc}") from exc
    try:
        con.execute(search_path_sql())
    except duckdb.CatalogException as exc:
        if _profile_search_path(con):  # an external benchmark's database (ehrgym.db.profile)
            return con
        con.close()
        raise DatabaseError(f"{path} is a DuckDB file without the MIMIC-IV schemas (mimiciv_hosp, mimiciv_icu); "
                            f"build a kit database with `ehrgym db synth` or `ehrgym db load-mimic`") from exc
    return con


def _profile_search_path(con: duckdb.DuckDBPyConnection) -> bool:
    """Set the search path of the schema profile a database's bookkeeping names; False when it names none."""
    from ehrgym.db.profile import META_KEY, SchemaProfile

    try:
        meta = read_meta(con)
    except DatabaseError:
        return False
    if not meta.get(META_KEY):
        return False
    con.execute(SchemaProfile.from_dict(meta[META_KEY]).search_path_sql())
    return True


def attach_base(con: duckdb.DuckDBPyConnection, path: str | Path, alias: str = "base") -> None:
    """Attach a kit database read-only under ``alias`` (used by overlays and episodes)."""
    path = Path(path)
    if not path.exists():
        raise DatabaseError(f"database {path} does not exist")
    con.execute(f"ATTACH '{path.as_posix()}' AS {alias} (READ_ONLY)")


def one_row(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """The first row of a query that always returns one (an aggregate such as ``count(*)``)."""
    row = (con.execute(sql) if params is None else con.execute(sql, params)).fetchone()
    assert row is not None, f"query returned no row: {sql[:200]}"
    return row


def write_meta(con: duckdb.DuckDBPyConnection, info: dict[str, Any]) -> None:
    """Replace the bookkeeping record (agents never see this schema)."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {META_SCHEMA}")
    con.execute(f"CREATE OR REPLACE TABLE {META_SCHEMA}.build_info (key VARCHAR, value VARCHAR)")
    rows = [(k, json.dumps(v, sort_keys=True)) for k, v in sorted(info.items())]
    con.executemany(f"INSERT INTO {META_SCHEMA}.build_info VALUES (?, ?)", rows)


def read_meta(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> dict[str, Any]:
    prefix = f"{catalog}." if catalog else ""
    try:
        rows = con.execute(f"SELECT key, value FROM {prefix}{META_SCHEMA}.build_info ORDER BY key").fetchall()
    except duckdb.CatalogException as exc:
        raise DatabaseError("this database has no ehrgym bookkeeping; it was not built by "
                            "`ehrgym db synth` or `ehrgym db load-mimic`") from exc
    return {k: json.loads(v) for k, v in rows}


def table_row_counts(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> dict[str, int]:
    prefix = f"{catalog}." if catalog else ""
    return {name: one_row(con, f"SELECT count(*) FROM {prefix}{spec.qualified}")[0]
            for name, spec in mimic_schema().items()}


def content_hash(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> str:
    """Order-independent digest of every row of the 31 tables (duplicates count)."""
    import hashlib

    prefix = f"{catalog}." if catalog else ""
    digest = hashlib.sha256()
    for name, spec in mimic_schema().items():
        cols = ", ".join(f'"{c}"' for c in spec.column_names)
        count, total = one_row(
            con, f"SELECT count(*), coalesce(sum(hash({cols})::HUGEINT), 0) FROM {prefix}{spec.qualified}")
        digest.update(f"{name}:{count}:{total};".encode())
    return digest.hexdigest()


def exposed_schemas() -> tuple[str, ...]:
    return EXPOSED_SCHEMAS
