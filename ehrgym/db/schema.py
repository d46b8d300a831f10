"""The 31-table MIMIC-IV schema (v2.2 names, order and types) as data.

The single source of truth is ``ehrgym/resources/mimic_iv_schema.csv`` (BigQuery types as
PhysioNet publishes them); DuckDB types are derived from it here.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

import duckdb

from ehrgym.resources import resource_path

MODULE_SCHEMAS: dict[str, str] = {"hosp": "mimiciv_hosp", "icu": "mimiciv_icu"}
EXPOSED_SCHEMAS: tuple[str, ...] = tuple(MODULE_SCHEMAS.values())
META_SCHEMA = "ehrgym_meta"

BIGQUERY_TO_DUCKDB: dict[str, str] = {
    "INT64": "BIGINT",
    "FLOAT64": "DOUBLE",
    "STRING": "VARCHAR",
    "DATETIME": "TIMESTAMP",
    "DATE": "DATE",
}


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    bigquery_type: str
    required: bool

    @property
    def duckdb_type(self) -> str:
        return BIGQUERY_TO_DUCKDB[self.bigquery_type]


@dataclass(frozen=True)
class TableSpec:
    module: str
    name: str
    columns: tuple[ColumnSpec, ...]

    @property
    def schema(self) -> str:
        # a MIMIC-IV module maps to its schema; other profiles (ehrgym.db.profile) name the schema itself
        return MODULE_SCHEMAS.get(self.module, self.module)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> ColumnSpec:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"{self.qualified} has no column {name!r}")

    def create_sql(self, catalog: str | None = None) -> str:
        cols = ",\n  ".join(f'"{c.name}" {c.duckdb_type}' for c in self.columns)
        prefix = f"{catalog}." if catalog else ""
        return f"CREATE TABLE {prefix}{self.qualified} (\n  {cols}\n)"


@lru_cache(maxsize=1)
def mimic_schema() -> dict[str, TableSpec]:
    """All 31 tables keyed by bare table name (names are unique across modules)."""
    grouped: dict[tuple[str, str], list[tuple[int, ColumnSpec]]] = {}
    with open(resource_path("mimic_iv_schema.csv"), newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["module"], row["table"])
            spec = ColumnSpec(row["column"], row["bigquery_type"], row["mode"] == "REQUIRED")
            grouped.setdefault(key, []).append((int(row["ordinal"]), spec))
    tables = {}
    for (module, name), cols in grouped.items():
        ordered = tuple(spec for _, spec in sorted(cols, key=lambda t: t[0]))
        tables[name] = TableSpec(module, name, ordered)
    return dict(sorted(tables.items(), key=lambda kv: (kv[1].module, kv[0])))


def table_spec(name: str) -> TableSpec:
    """Spec of a table by bare (``labevents``) or qualified (``mimiciv_hosp.labevents``) name."""
    bare = name.split(".")[-1].lower()
    try:
        return mimic_schema()[bare]
    except KeyError:
        raise KeyError(f"{name!r} is not a MIMIC-IV table; known: {', '.join(mimic_schema())}") from None


def create_mimic_schema(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> None:
    """Create both MIMIC-IV schemas and all 31 empty tables on ``con``."""
    prefix = f"{catalog}." if catalog else ""
    for schema in EXPOSED_SCHEMAS:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {prefix}{schema}")
    for spec in mimic_schema().values():
        con.execute(spec.create_sql(catalog))


def search_path_sql(catalog: str | None = None) -> str:
    parts = [f"{catalog}.{s}" if catalog else s for s in EXPOSED_SCHEMAS]
    return f"SET search_path = '{','.join(parts)}'"


def describe_database_schema(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Actual (column, type) lists of the MIMIC-IV tables found on ``con``, keyed ``schema.table``."""
    cat_filter = f"AND table_catalog = '{catalog}'" if catalog else "AND table_catalog = current_database()"
    rows = con.execute(
        f"""SELECT table_schema, table_name, column_name, data_type
            FROM information_schema.columns
            WHERE table_schema IN ('mimiciv_hosp', 'mimiciv_icu') {cat_filter}
            ORDER BY table_schema, table_name, ordinal_position"""
    ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for schema, table, column, dtype in rows:
        out.setdefault(f"{schema}.{table}", []).append((column, dtype))
    return out


def schema_mismatches(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> list[str]:
    """Human-readable differences between ``con``'s tables and the reference schema."""
    actual = describe_database_schema(con, catalog)
    problems = []
    for spec in mimic_schema().values():
        expected = [(c.name, c.duckdb_type) for c in spec.columns]
        got = actual.get(spec.qualified)
        if got is None:
            problems.append(f"missing table {spec.qualified}")
        elif got != expected:
            problems.append(f"{spec.qualified}: expected {expected}, found {got}")
    return problems
