"""The synthetic hospital looks like MIMIC-IV: vocabulary breadth (from the shipped demo catalog), rows per
admission / ICU stay near full MIMIC-IV v3.1, the demo's everyday messiness, typical ICU vitals; and the
vocabulary resources are what the derivation makes of the demo, with their license."""

from __future__ import annotations

import filecmp
from pathlib import Path

import duckdb
import pytest

from ehrgym.db.connect import open_database
from ehrgym.db.items import item_reference, official_row_counts
from ehrgym.db.synth import catalog
from ehrgym.db.synth.derive import QUERIES, derive_resources
from ehrgym.resources import resource_path

SYNTH_DIR = resource_path("synth")
# tables kept deliberately smaller than MIMIC-IV (see ehrgym.db.synth: fewer charted items, faster builds)
SMALLER = {"chartevents"}
HOSP_EVENTS = ("diagnoses_icd", "drgcodes", "emar", "emar_detail", "hcpcsevents", "labevents", "microbiologyevents",
               "pharmacy", "poe", "poe_detail", "prescriptions", "procedures_icd", "services", "transfers")
ICU_EVENTS = ("chartevents", "datetimeevents", "inputevents", "outputevents", "procedureevents")


@pytest.fixture(scope="module")
def con(synth_db: Path) -> duckdb.DuckDBPyConnection:
    return open_database(synth_db)


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> float:
    return con.execute(sql).fetchone()[0]


def test_resources_are_vocabulary_with_their_license() -> None:
    files = sorted(p.name for p in SYNTH_DIR.iterdir() if not p.name.startswith("."))
    assert files == sorted([f"{name}.csv.gz" for name in QUERIES] + ["LICENSE.md"])
    license_text = (SYNTH_DIR / "LICENSE.md").read_text()
    assert "Open Database License" in license_text and "MIMIC-IV Clinical Database Demo" in license_text
    mimic_tables = {*official_row_counts()}
    assert not any(f.split(".")[0] in mimic_tables for f in files), "a resource is named like a MIMIC-IV table"
    # one row per vocabulary entry: no resource comes near the size of a demo event table
    assert max(len(catalog.rows(name)) for name in QUERIES) < 2000


def test_resources_are_what_the_derivation_makes_of_the_demo(demo_dir: Path, tmp_path: Path) -> None:
    derive_resources(demo_dir, tmp_path)
    for name in QUERIES:
        assert filecmp.cmp(tmp_path / f"{name}.csv.gz", SYNTH_DIR / f"{name}.csv.gz", shallow=False), name


def test_vocabulary_breadth(con: duckdb.DuckDBPyConnection) -> None:
    # 200 patients (the issue asks per 10,000: >= 300 lab items, 1,000 ICD codes, 400 drugs, 20 specimens, 60 inputs)
    assert _one(con, "SELECT count(DISTINCT itemid) FROM labevents") >= 300
    assert _one(con, "SELECT count(DISTINCT (icd_code, icd_version)) FROM diagnoses_icd") >= 500
    assert _one(con, "SELECT count(DISTINCT drug) FROM prescriptions") >= 400
    assert _one(con, "SELECT count(DISTINCT spec_type_desc) FROM microbiologyevents") >= 20
    assert _one(con, "SELECT count(DISTINCT itemid) FROM inputevents") >= 60


def test_drugs_come_in_mimic_spelling_variants(con: duckdb.DuckDBPyConnection) -> None:
    spellings = dict(con.execute("""SELECT lower(drug), count(DISTINCT drug) FROM prescriptions GROUP BY 1
                                    HAVING count(DISTINCT drug) > 1""").fetchall())
    assert len(spellings) >= 10 and "ceftriaxone" in spellings


def test_frequencies_are_long_tailed(con: duckdb.DuckDBPyConnection) -> None:
    # a few codes carry much of the coding, most codes are rare (demo: top 20 codes 16 % of rows, 85 % of
    # codes under 0.1 % each)
    shares = [r[0] for r in con.execute("""SELECT count(*) * 1.0 / sum(count(*)) OVER () FROM diagnoses_icd
                                           GROUP BY icd_code ORDER BY 1 DESC""").fetchall()]
    assert 0.1 < sum(shares[:20]) < 0.4 and sum(1 for s in shares if s < 1e-3) > len(shares) / 2


@pytest.mark.parametrize("table", HOSP_EVENTS + ICU_EVENTS)
def test_rows_per_admission_or_stay_near_full_mimic(con: duckdb.DuckDBPyConnection, table: str) -> None:
    full = {t: rows for t, (rows, _) in official_row_counts().items()}
    per = "icustays" if table in ICU_EVENTS else "admissions"
    ours = _one(con, f"SELECT count(*) FROM {table}") / _one(con, f"SELECT count(*) FROM {per}")
    ratio = ours / (full[table] / full[per])
    if table in SMALLER:
        assert 0.2 <= ratio < 0.7, ratio
    else:
        assert 0.7 <= ratio <= 1.3, (table, round(ratio, 2))


MESSINESS = {
    "lab results without a number": ("labevents", "avg((valuenum IS NULL)::INT)"),
    "outpatient lab results": ("labevents", "avg((hadm_id IS NULL)::INT)"),
    "commented lab results": ("labevents", "avg((comments IS NOT NULL)::INT)"),
    "flagged lab results": ("labevents", "avg((flag IS NOT NULL)::INT)"),
    "lab results without reference range": ("labevents", "avg((ref_range_lower IS NULL)::INT)"),
    "outpatient cultures": ("microbiologyevents", "avg((hadm_id IS NULL)::INT)"),
}


@pytest.mark.parametrize("name", list(MESSINESS))
def test_messiness_rates_near_the_demo(con: duckdb.DuckDBPyConnection, demo_dir: Path, name: str) -> None:
    table, expr = MESSINESS[name]
    demo = duckdb.connect().execute(
        f"SELECT {expr} FROM read_csv('{demo_dir / 'hosp' / (table + '.csv.gz')}', sample_size=-1)").fetchone()[0]
    ours = _one(con, f"SELECT {expr} FROM {table}")
    assert 0.7 * demo <= ours <= 1.3 * demo, (name, ours, demo)


def test_messiness_present_without_the_demo(con: duckdb.DuckDBPyConnection) -> None:
    assert 0.05 < _one(con, "SELECT avg((valuenum IS NULL)::INT) FROM labevents") < 0.2
    assert 0.15 < _one(con, "SELECT avg((hadm_id IS NULL)::INT) FROM labevents") < 0.4
    assert 0.15 < _one(con, "SELECT avg((hadm_id IS NULL)::INT) FROM microbiologyevents") < 0.45
    assert _one(con, "SELECT count(*) FROM labevents WHERE valuenum IS NULL AND value = '___'") > 0
    assert _one(con, "SELECT avg(n) FROM (SELECT count(*) AS n FROM admissions GROUP BY subject_id)") > 1.2
    assert _one(con, "SELECT avg((edregtime IS NOT NULL)::INT) FROM admissions") > 0.3


def test_icu_vitals_are_typical_with_sick_tails(con: duckdb.DuckDBPyConnection) -> None:
    mean_hr, p95_hr = con.execute("""SELECT avg(valuenum), quantile_cont(valuenum, 0.95) FROM chartevents
                                     WHERE itemid = 220045""").fetchone()
    assert 80 <= mean_hr <= 95 and p95_hr >= 110
    median_f, p95_f = con.execute("""SELECT median(valuenum), quantile_cont(valuenum, 0.95) FROM chartevents
                                     WHERE itemid = 223761""").fetchone()
    assert 98.0 <= median_f <= 99.3 and p95_f >= 99.8


def test_background_lab_values_follow_the_demo_quantiles(con: duckdb.DuckDBPyConnection) -> None:
    # the reference items follow their own condition-shifted model (tests/test_synth_clinical.py)
    lab = catalog.labs()
    reference = {ref.itemid for ref in item_reference().values()}
    checked = 0
    for i in range(lab.itemid.size):
        if (lab.weight[i] < 500 or not lab.numeric[i] or lab.quantiles[i, 3] == lab.quantiles[i, 2]
                or int(lab.itemid[i]) in reference):
            continue
        got = _one(con, f"SELECT median(valuenum) FROM labevents WHERE itemid = {int(lab.itemid[i])}")
        if got is None:
            continue
        q25, q75 = lab.quantiles[i, 2], lab.quantiles[i, 4]
        assert q25 <= got <= q75, (int(lab.itemid[i]), lab.label[i], got, q25, q75)
        checked += 1
    assert checked >= 5


def test_reference_lab_medians_near_the_demo(con: duckdb.DuckDBPyConnection) -> None:
    """Condition-shifted reference items keep the demo's centre: median inside the demo's p10–p90 for every
    item and inside its p25–p75 for 90 % of them (a healthy majority, the shifts make the tails)."""
    lab = catalog.labs()
    row = {int(i): k for k, i in enumerate(lab.itemid)}
    inner, outside = 0, []
    refs = [r for r in item_reference().values() if r.table == "labevents"]
    for ref in refs:
        q = lab.quantiles[row[ref.itemid]]
        got = _one(con, f"SELECT median(valuenum) FROM labevents WHERE itemid = {ref.itemid}")
        if not q[1] <= got <= q[5]:
            outside.append((ref.label, got, q[1], q[5]))
        inner += q[2] <= got <= q[4]
    assert outside == [] and inner >= 0.9 * len(refs), (outside, inner)
