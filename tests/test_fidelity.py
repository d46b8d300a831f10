"""``ehrgym db fidelity``: statistics checked independently (SQL / pandas / numpy), full MIMIC-IV
values from the published row counts, empty tables, --against, JSON/CSV, the figure, errors."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ehrgym.cli import cli
from ehrgym.db.fidelity import (STATISTICS, FidelityReport, compare, event_tables, fidelity_report,
                                format_report, full_mimic_values, profile_database)
from ehrgym.db.items import item_reference
from ehrgym.errors import DatabaseError
from ehrgym.resources import resource_path


@pytest.fixture(scope="module")
def synth_report(synth_db: Path) -> FidelityReport:
    return fidelity_report(synth_db)


def _con(path: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(path), read_only=True)


def _stat(report: FidelityReport, key: str) -> pd.Series:
    frame = report.statistics()
    row = frame[frame["key"] == key]
    assert len(row) == 1, key
    return row.iloc[0]


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------
def test_every_event_table_has_a_volume_statistic() -> None:
    hosp, icu = event_tables("hosp"), event_tables("icu")
    assert {"labevents", "diagnoses_icd", "prescriptions", "microbiologyevents", "emar", "omr"} <= set(hosp)
    assert set(icu) == {"chartevents", "datetimeevents", "ingredientevents", "inputevents", "outputevents",
                        "procedureevents"}
    assert not {"patients", "admissions", "icustays", "d_labitems", "d_items", "provider"} & set(hosp + icu)
    for table in hosp:
        assert f"volume.{table}_per_admissions" in STATISTICS
    for table in icu:
        assert f"volume.{table}_per_icustays" in STATISTICS


def test_full_mimic_values_follow_the_published_row_counts() -> None:
    with open(resource_path("mimic_iv_row_counts.csv"), newline="") as fh:
        rows = {r["table"]: r["rows_full_v3_1"] for r in csv.DictReader(fh)}
    full = full_mimic_values()
    assert full["volume.labevents_per_admissions"] == pytest.approx(int(rows["labevents"]) / int(rows["admissions"]))
    assert full["volume.labevents_per_admissions"] == pytest.approx(290.05, abs=0.01)
    assert full["volume.chartevents_per_icustays"] == pytest.approx(4584.0, abs=0.5)
    assert full["volume.admissions_per_patient"] == pytest.approx(546028 / 364627)
    assert full["volume.ingredientevents_per_icustays"] is None  # v3.1's count is not published
    assert full["vocabulary.labevents.itemid"] is None  # not derivable from row counts


@pytest.mark.parametrize(("value", "reference", "flag"), [
    (1.29, 1.0, "ok"), (0.71, 1.0, "ok"), (0.69, 1.0, "low"), (1.31, 1.0, "high"), (0.0, 11.6, "low"),
    (None, 1.0, "empty"), (1.0, None, ""), (0.0, 0.0, "ok"), (2.0, 0.0, "high")])
def test_compare_flags_within_30_percent(value, reference, flag) -> None:
    ratio, got = compare(value, reference)
    assert got == flag
    if value is not None and reference:
        assert ratio == pytest.approx(value / reference)


# ---------------------------------------------------------------------------------------------
# the synthetic hospital, checked independently
# ---------------------------------------------------------------------------------------------
def test_synth_statistics_match_independent_queries(synth_db: Path, synth_report: FidelityReport) -> None:
    con = _con(synth_db)
    try:
        labs = con.execute("SELECT itemid, hadm_id, valuenum FROM mimiciv_hosp.labevents").df()
        adm = con.execute("SELECT subject_id, hadm_id FROM mimiciv_hosp.admissions").df()
        n_patients = con.execute("SELECT count(*) FROM mimiciv_hosp.patients").fetchone()[0]
        n_stays = con.execute("SELECT count(*) FROM mimiciv_icu.icustays").fetchone()[0]
        n_chart = con.execute("SELECT count(*) FROM mimiciv_icu.chartevents").fetchone()[0]
        n_dx = con.execute("SELECT count(*) FROM mimiciv_hosp.diagnoses_icd").fetchone()[0]
        codes = con.execute("SELECT DISTINCT icd_version, icd_code FROM mimiciv_hosp.diagnoses_icd").fetchall()
        drugs = con.execute("SELECT DISTINCT drug FROM mimiciv_hosp.prescriptions WHERE drug IS NOT NULL").fetchall()
        micro = con.execute("SELECT hadm_id, spec_type_desc FROM mimiciv_hosp.microbiologyevents").df()
        inputs = con.execute("SELECT DISTINCT itemid FROM mimiciv_icu.inputevents").fetchall()
    finally:
        con.close()
    values = synth_report.this.values
    assert values["vocabulary.labevents.itemid"] == labs["itemid"].nunique()
    assert values["vocabulary.diagnoses_icd.icd_version+icd_code"] == len(codes)
    assert values["vocabulary.prescriptions.drug"] == len(drugs)
    assert values["vocabulary.microbiologyevents.spec_type_desc"] == micro["spec_type_desc"].dropna().nunique()
    assert values["vocabulary.inputevents.itemid"] == len(inputs)
    assert values["volume.labevents_per_admissions"] == pytest.approx(len(labs) / len(adm))
    assert values["volume.diagnoses_icd_per_admissions"] == pytest.approx(n_dx / len(adm))
    assert values["volume.chartevents_per_icustays"] == pytest.approx(n_chart / n_stays)
    assert values["volume.admissions_per_patient"] == pytest.approx(len(adm) / n_patients)
    assert values["messiness.labevents_null_valuenum"] == pytest.approx(100 * labs["valuenum"].isna().mean())
    assert values["messiness.labevents_outpatient"] == pytest.approx(100 * labs["hadm_id"].isna().mean())
    assert values["messiness.microbiologyevents_outpatient"] == pytest.approx(100 * micro["hadm_id"].isna().mean())
    per_patient = adm.groupby("subject_id").size()
    assert values["messiness.patients_readmitted"] == pytest.approx(100 * (per_patient > 1).mean())
    assert synth_report.this.source == "synthetic" and synth_report.this.patients == n_patients == 200
    assert synth_report.this.label == "synthetic (200 patients, seed 7)"


def test_synth_item_quantiles_match_numpy(synth_db: Path, synth_report: FidelityReport) -> None:
    con = _con(synth_db)
    try:
        creat = con.execute("SELECT valuenum FROM mimiciv_hosp.labevents WHERE itemid = 50912 "
                            "AND valuenum IS NOT NULL").df()["valuenum"].to_numpy()
        hr = con.execute("SELECT valuenum FROM mimiciv_icu.chartevents WHERE itemid = 220045 "
                         "AND valuenum IS NOT NULL").df()["valuenum"].to_numpy()
    finally:
        con.close()
    for itemid, values in ((50912, creat), (220045, hr)):
        q = synth_report.this.item(itemid)
        assert q is not None and q.n == len(values) > 0
        expected = np.percentile(values, [1, 5, 50, 95, 99])  # linear interpolation = quantile_cont
        assert [q.p01, q.p05, q.p50, q.p95, q.p99] == pytest.approx(list(expected))
    items = synth_report.items()
    row = items[items["itemid"] == 50912].iloc[0]
    ref = item_reference()[50912]
    assert row["reference"] == "demo" and row["ref_p50"] == ref.demo_p50
    assert row["median_shift"] == pytest.approx((row["p50"] - ref.demo_p50) / (ref.demo_p99 - ref.demo_p01))
    assert row["spread_ratio"] == pytest.approx((row["p99"] - row["p01"]) / (ref.demo_p99 - ref.demo_p01))
    assert row["flag"] == ("ok" if abs(row["median_shift"]) <= 0.1 and abs(row["spread_ratio"] - 1) <= 0.3
                           else "off")
    # chartevents items have no demo quantiles: nothing to compare with without --against
    assert items[items["itemid"] == 220045].iloc[0]["reference"] == ""


def test_ratio_and_flag_use_full_mimic_where_published(synth_report: FidelityReport) -> None:
    row = _stat(synth_report, "volume.labevents_per_admissions")
    assert row["reference"] == "full"
    assert row["ratio"] == pytest.approx(row["this"] / row["full_mimic_iv"])
    assert row["flag"] == compare(row["this"], row["full_mimic_iv"])[1]
    vocab = _stat(synth_report, "vocabulary.labevents.itemid")
    assert vocab["reference"] == "" and vocab["flag"] == "" and math.isnan(vocab["ratio"])


def test_an_empty_table_gives_empty_statistics(synth_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "nochart.duckdb"
    shutil.copy(synth_db, copy)
    con = duckdb.connect(str(copy))
    con.execute("DELETE FROM mimiciv_icu.chartevents")
    con.close()
    report = fidelity_report(copy)
    assert "chartevents" in report.this.empty_tables
    for key in ("volume.chartevents_per_icustays", "vocabulary.chartevents.itemid",
                "messiness.chartevents_null_valuenum"):
        assert report.this.values[key] is None
        assert _stat(report, key)["flag"] == "empty"
    assert all(q.table != "chartevents" for q in report.this.items)
    assert report.this.values["volume.labevents_per_admissions"] > 0
    text = format_report(report)
    assert any(line.startswith("chartevents rows per ICU stay") and "empty" in line for line in text.splitlines())


# ---------------------------------------------------------------------------------------------
# the MIMIC-IV demo (skips without it)
# ---------------------------------------------------------------------------------------------
def test_demo_statistics_and_stored_quantiles(demo_db: Path) -> None:
    profile = profile_database(demo_db)
    assert profile.source == "mimic-iv-demo" and profile.patients == 100
    assert profile.values["volume.chartevents_per_icustays"] is None  # the demo ships no chartevents
    assert profile.values["volume.labevents_per_admissions"] == pytest.approx(107727 / 275)
    assert profile.values["volume.diagnoses_icd_per_admissions"] == pytest.approx(4506 / 275)
    con = _con(demo_db)
    try:
        null_rate, outpatient = con.execute(
            "SELECT avg((valuenum IS NULL)::INT), avg((hadm_id IS NULL)::INT) FROM mimiciv_hosp.labevents").fetchone()
        n_items = con.execute("SELECT count(DISTINCT itemid) FROM mimiciv_hosp.labevents").fetchone()[0]
    finally:
        con.close()
    assert profile.values["messiness.labevents_null_valuenum"] == pytest.approx(100 * null_rate)
    assert profile.values["messiness.labevents_outpatient"] == pytest.approx(100 * outpatient)
    assert profile.values["vocabulary.labevents.itemid"] == n_items > 300
    # the item reference's demo quantiles were computed from this very data: shift 0, spread 1
    items = FidelityReport(profile).items()
    labs = items[items["reference"] == "demo"]
    assert len(labs) >= 30
    assert labs["median_shift"].abs().max() < 1e-3
    assert (labs["spread_ratio"] - 1).abs().max() < 1e-2
    assert set(labs["flag"]) == {"ok"}


def test_against_the_demo(synth_db: Path, demo_db: Path) -> None:
    report = fidelity_report(synth_db, demo_db)
    demo = profile_database(demo_db)
    frame = report.statistics()
    for row in frame.itertuples():
        expected = demo.values[row.key]
        assert (row.other is None or math.isnan(row.other)) if expected is None else row.other == expected
    vocab = _stat(report, "vocabulary.labevents.itemid")
    assert vocab["reference"] == "other"
    assert vocab["ratio"] == pytest.approx(vocab["this"] / vocab["other"])
    chart = _stat(report, "volume.chartevents_per_icustays")
    assert chart["reference"] == "full" and chart["flag"] != "empty"  # this side has chartevents
    # items without demo quantiles compare with the other database (inputevents are in the demo)
    items = report.items()
    inputs = items[(items["table"] == "inputevents") & (items["n"] > 0) & (items["other_n"] > 0)]
    assert not inputs.empty and set(inputs["reference"]) == {"other"}


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def test_cli_prints_and_writes_json_csv_and_figure(synth_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["db", "fidelity", str(synth_db), "--against", str(synth_db),
                                      "--json", str(out / "f.json"), "--csv", str(out / "f.csv"),
                                      "--figure", str(out / "f.png")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    report = fidelity_report(synth_db, synth_db)
    labs = next(line for line in lines if line.startswith("labevents rows per admission"))
    value = report.this.values["volume.labevents_per_admissions"]
    this, other = (float(x.replace(",", "")) for x in labs.split()[4:6])
    assert this == other == pytest.approx(value, rel=0.01)
    assert "290" in labs  # full MIMIC-IV v3.1: 158,374,764 / 546,028
    vocab = next(line for line in lines if line.startswith("distinct lab items in labevents"))
    assert vocab.split()[-2:] == ["1.00", "ok"]  # against itself, every compared statistic is ok
    # JSON round trip
    data = json.loads((out / "f.json").read_text())
    back = FidelityReport.from_dict(data)
    assert back == report
    assert back.to_dict() == data
    # CSV
    stats = pd.read_csv(out / "f.csv")
    assert list(stats["key"]) == list(STATISTICS)
    assert set(pd.read_csv(out / "f-items.csv")["itemid"]) == {q.itemid for q in report.this.items}
    # figure
    png = (out / "f.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_figure_bytes_are_deterministic(synth_report: FidelityReport, tmp_path: Path) -> None:
    from ehrgym.db.fidelity_figure import fidelity_figure, save_fidelity_figure

    a = save_fidelity_figure(fidelity_figure(synth_report), tmp_path / "a.png").read_bytes()
    b = save_fidelity_figure(fidelity_figure(synth_report), tmp_path / "b.png").read_bytes()
    assert a == b
    pdf = save_fidelity_figure(fidelity_figure(synth_report), tmp_path / "a.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")


def test_cli_rejects_an_unknown_figure_suffix(synth_db: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["db", "fidelity", str(synth_db), "--figure", str(tmp_path / "f.gif")])
    assert result.exit_code == 2 and "--figure" in result.output and ".png" in result.output


def test_clear_errors_on_files_that_are_not_kit_databases(tmp_path: Path) -> None:
    plain = tmp_path / "plain.duckdb"
    con = duckdb.connect(str(plain))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    with pytest.raises(DatabaseError, match="without the MIMIC-IV schemas"):
        profile_database(plain)
    unbooked = tmp_path / "unbooked.duckdb"
    con = duckdb.connect(str(unbooked))
    con.execute("CREATE SCHEMA mimiciv_hosp; CREATE SCHEMA mimiciv_icu")
    con.close()
    with pytest.raises(DatabaseError, match="no ehrgym bookkeeping"):
        profile_database(unbooked)
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    with pytest.raises(DatabaseError, match="cannot open"):
        profile_database(text)
    result = CliRunner().invoke(cli, ["db", "fidelity", str(tmp_path / "missing.duckdb")])
    assert result.exit_code != 0 and isinstance(result.exception, DatabaseError)
    assert "does not exist" in str(result.exception)


def test_text_lists_off_items_or_all_of_them(synth_report: FidelityReport) -> None:
    items = synth_report.items()
    tables = tuple(items["table"].unique())

    def item_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith(tables) and line.split()[1].isdigit()]

    every = item_lines(format_report(synth_report, all_items=True))
    assert [int(line.split()[1]) for line in every] == list(items["itemid"])
    off = item_lines(format_report(synth_report))
    assert [int(line.split()[1]) for line in off] == list(items.loc[items["flag"] == "off", "itemid"])
    assert all(line.endswith(" off") for line in off)
