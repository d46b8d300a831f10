"""The kit's MIMIC-IV schema equals the shared reference, and created databases follow it."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import pytest

from ehrgym.db.connect import open_database, write_meta
from ehrgym.db.schema import (EXPOSED_SCHEMAS, META_SCHEMA, create_mimic_schema, mimic_schema,
                              schema_mismatches, table_spec)
from ehrgym.errors import DatabaseError
from ehrgym.resources import resource_path

REPO = Path(__file__).resolve().parents[1]
SHARED_SCHEMA = REPO.parent / "shared" / "reference" / "mimic_iv_schema.csv"

# written out here on purpose (not imported): BigQuery type -> DuckDB type
EXPECTED_DUCKDB = {"INT64": "BIGINT", "FLOAT64": "DOUBLE", "STRING": "VARCHAR",
                   "DATETIME": "TIMESTAMP", "DATE": "DATE"}


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def reference_rows() -> list[dict[str, str]]:
    if not SHARED_SCHEMA.is_file():
        pytest.skip(f"shared reference schema not found at {SHARED_SCHEMA}")
    return _rows(SHARED_SCHEMA)


def _expected_tables(rows: list[dict[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """``schema.table -> [(column, duckdb type)]`` in ordinal order, from the reference rows."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    for r in rows:
        schema = {"hosp": "mimiciv_hosp", "icu": "mimiciv_icu"}[r["module"]]
        out.setdefault(f"{schema}.{r['table']}", []).append(
            (int(r["ordinal"]), r["column"], EXPECTED_DUCKDB[r["bigquery_type"]]))
    return {k: [(c, t) for _, c, t in sorted(v)] for k, v in out.items()}


def test_reference_has_31_tables_and_342_columns(reference_rows):
    assert len({(r["module"], r["table"]) for r in reference_rows}) == 31
    assert len(reference_rows) == 342


def test_package_schema_equals_reference_column_by_column(reference_rows):
    schema = mimic_schema()
    assert {r["table"] for r in reference_rows} == set(schema)
    for r in reference_rows:
        spec = schema[r["table"]]
        assert spec.module == r["module"], r
        col = spec.columns[int(r["ordinal"]) - 1]
        assert col.name == r["column"], r
        assert col.bigquery_type == r["bigquery_type"], r
        assert col.duckdb_type == EXPECTED_DUCKDB[r["bigquery_type"]], r
        assert col.required == (r["mode"] == "REQUIRED"), r
    for name, spec in schema.items():
        n_ref = sum(1 for r in reference_rows if r["table"] == name)
        assert len(spec.columns) == n_ref, name


def test_packaged_resource_is_the_shared_reference(reference_rows):
    assert _rows(resource_path("mimic_iv_schema.csv")) == reference_rows


def test_created_database_matches_reference_exactly(reference_rows, tmp_path):
    con = duckdb.connect(str(tmp_path / "schema.duckdb"))
    create_mimic_schema(con)
    got: dict[str, list[tuple[str, str]]] = {}
    for schema, table, column, dtype in con.execute(
            """SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns
               WHERE table_schema IN ('mimiciv_hosp', 'mimiciv_icu')
               ORDER BY table_schema, table_name, ordinal_position""").fetchall():
        got.setdefault(f"{schema}.{table}", []).append((column, dtype))
    assert got == _expected_tables(reference_rows)
    kinds = con.execute("""SELECT DISTINCT table_type FROM information_schema.tables
                           WHERE table_schema IN ('mimiciv_hosp', 'mimiciv_icu')""").fetchall()
    assert kinds == [("BASE TABLE",)]
    assert schema_mismatches(con) == []
    con.close()


def test_schema_mismatches_reports_a_changed_table(tmp_path):
    con = duckdb.connect(str(tmp_path / "changed.duckdb"))
    create_mimic_schema(con)
    con.execute("ALTER TABLE mimiciv_hosp.labevents DROP COLUMN comments")
    con.execute("DROP TABLE mimiciv_icu.caregiver")
    problems = schema_mismatches(con)
    assert any(p.startswith("mimiciv_hosp.labevents") for p in problems)
    assert "missing table mimiciv_icu.caregiver" in problems
    assert len(problems) == 2
    con.close()


def test_table_spec_accepts_bare_and_qualified_names():
    assert table_spec("labevents") is table_spec("mimiciv_hosp.labevents")
    assert table_spec("MIMICIV_ICU.CHARTEVENTS").qualified == "mimiciv_icu.chartevents"
    with pytest.raises(KeyError, match="not a MIMIC-IV table"):
        table_spec("noteevents")


@pytest.fixture()
def small_db(tmp_path: Path) -> Path:
    path = tmp_path / "small.duckdb"
    con = duckdb.connect(str(path))
    create_mimic_schema(con)
    con.execute("INSERT INTO mimiciv_hosp.patients VALUES (1, 'F', 60, 2150, '2014 - 2016', NULL)")
    con.execute("INSERT INTO mimiciv_icu.d_items (itemid, label) VALUES (220045, 'Heart Rate')")
    write_meta(con, {"source": "test"})
    con.close()
    return path


@pytest.mark.parametrize("table", ["patients", "mimiciv_hosp.patients", "d_items", "mimiciv_icu.d_items",
                                   "labevents", "mimiciv_hosp.labevents", "chartevents"])
def test_open_database_resolves_unqualified_and_qualified_names(small_db, table):
    con = open_database(small_db)
    try:
        n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()
    assert n == (1 if table.split(".")[-1] in ("patients", "d_items") else 0)


def test_search_path_exposes_only_the_mimic_schemas(small_db):
    con = open_database(small_db)
    try:
        path = con.execute("SELECT current_setting('search_path')").fetchone()[0]
        assert [p.split(".")[-1] for p in path.split(",")] == list(EXPOSED_SCHEMAS)
        with pytest.raises(duckdb.CatalogException):
            con.execute("SELECT * FROM build_info")
        assert con.execute(f"SELECT count(*) FROM {META_SCHEMA}.build_info").fetchone()[0] == 1
    finally:
        con.close()


def test_open_database_read_only_refuses_writes(small_db):
    con = open_database(small_db)
    try:
        with pytest.raises(duckdb.Error):
            con.execute("DELETE FROM patients")
    finally:
        con.close()


def test_open_database_missing_file_says_how_to_build_one(tmp_path):
    with pytest.raises(DatabaseError, match="ehrgym db synth"):
        open_database(tmp_path / "nope.duckdb")
