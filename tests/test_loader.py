"""The MIMIC-IV loader: the demo end to end, and every error path on small fake directories."""

from __future__ import annotations

import csv
import gzip
import warnings
from pathlib import Path

import duckdb
import pytest

from ehrgym.db import mimic_release
from ehrgym.db.connect import content_hash, open_database, read_meta, table_row_counts
from ehrgym.db.items import official_row_counts
from ehrgym.db.mimic import MimicLoadWarning, load_mimic
from ehrgym.db.mimic_release import KnownRelease, known_releases, recognise_release
from ehrgym.db.schema import mimic_schema, schema_mismatches
from ehrgym.errors import DatabaseError, LoaderError

from mimic_fakes import make_source, table_csv, write_table

DEMO_ABSENT = {"chartevents"}


def _quiet_load(source: Path, out: Path, **kw) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MimicLoadWarning)
        return load_mimic(source, out, progress=False, **kw)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name or p.suffix == ".duckdb")


# -- the demo ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_csv_stats(demo_dir: Path) -> dict[str, tuple[int, dict[str, int]]]:
    """Independently parsed demo files: ``table -> (rows, {column: non-empty fields})``."""
    stats = {}
    for name, spec in mimic_schema().items():
        path = demo_dir / spec.module / f"{name}.csv.gz"
        if not path.exists():
            continue
        with gzip.open(path, "rt", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            filled = [0] * len(header)
            rows = 0
            for rec in reader:
                rows += 1
                for i, v in enumerate(rec):
                    if v != "":
                        filled[i] += 1
        stats[name] = (rows, {h.lower(): n for h, n in zip(header, filled)})
    return stats


def test_demo_has_the_30_tables_the_tests_expect(demo_csv_stats):
    assert set(demo_csv_stats) == set(mimic_schema()) - DEMO_ABSENT
    assert len(demo_csv_stats) == 30


def test_demo_row_counts_equal_the_files_and_the_published_counts(demo_db, demo_csv_stats):
    con = open_database(demo_db)
    try:
        counts = table_row_counts(con)
    finally:
        con.close()
    for name, (rows, _) in demo_csv_stats.items():
        assert counts[name] == rows, name
        published = official_row_counts()[name][1]
        if published is not None:
            assert counts[name] == published, name
    assert counts["patients"] == 100


def test_demo_every_value_arrives(demo_db, demo_csv_stats):
    """No field is silently dropped: non-NULL cells per column equal non-empty CSV fields."""
    con = open_database(demo_db)
    try:
        for name, (_, filled) in demo_csv_stats.items():
            spec = mimic_schema()[name]
            exprs = ", ".join(f'count("{c}")' for c in spec.column_names)
            got = con.execute(f"SELECT {exprs} FROM {spec.qualified}").fetchone()
            expected = tuple(filled[c.lower()] for c in spec.column_names)
            assert got == expected, name
    finally:
        con.close()


def test_demo_chartevents_exists_and_is_empty(demo_db):
    con = open_database(demo_db)
    try:
        assert con.execute("SELECT count(*) FROM mimiciv_icu.chartevents").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM chartevents").fetchone()[0] == 0
        assert schema_mismatches(con) == []
    finally:
        con.close()


def test_demo_bookkeeping(demo_db, demo_dir):
    con = open_database(demo_db)
    try:
        meta = read_meta(con)
        assert meta["source"] == "mimic-iv-demo"
        assert meta["release"] == "2.2"
        assert meta["rows_validated"] is True
        assert meta["count_mismatches"] == []
        assert meta["patients"] == 100
        assert meta["missing_tables"] == ["chartevents"]
        assert meta["source_dir"] == str(demo_dir.resolve())
        assert meta["table_rows"] == table_row_counts(con)
        assert meta["content_hash"] == content_hash(con)
        assert meta["build_seconds"] > 0
    finally:
        con.close()


def test_demo_values_are_typed_and_rowids_follow_the_file(demo_db, demo_dir):
    with gzip.open(demo_dir / "hosp" / "labevents.csv.gz", "rt", newline="") as fh:
        reader = csv.DictReader(fh)
        first = next(reader)
    con = open_database(demo_db)
    try:
        row = con.execute("""SELECT labevent_id, itemid, strftime(charttime, '%Y-%m-%d %H:%M:%S'),
                                    typeof(charttime), typeof(valuenum)
                             FROM labevents WHERE rowid = 0""").fetchone()
    finally:
        con.close()
    assert row[0] == int(first["labevent_id"]) and row[1] == int(first["itemid"])
    assert row[2] == first["charttime"]
    assert row[3:] == ("TIMESTAMP", "DOUBLE")


# -- fake sources: success paths -------------------------------------------------------------------

ROWS = {"patients": 3, "admissions": 4, "labevents": 5, "procedureevents": 2}


def test_fake_full_source_loads_with_unknown_release_warning(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    out = tmp_path / "out" / "fake.duckdb"
    with pytest.warns(MimicLoadWarning, match="release not recognised.*not validated"):
        meta = load_mimic(src, out, progress=False)
    assert out.is_file() and _leftovers(out.parent) == ["fake.duckdb"]
    assert meta["source"] == "mimic-iv" and meta["release"] == "unknown"
    assert meta["rows_validated"] is False and meta["missing_tables"] == []
    assert meta["patients"] == 3
    assert {t: n for t, n in meta["table_rows"].items() if n} == ROWS


def test_load_is_deterministic(tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS)
    a = _quiet_load(src, tmp_path / "a.duckdb")
    b = _quiet_load(src, tmp_path / "b.duckdb")
    assert a["content_hash"] == b["content_hash"]
    write_table(src, "labevents", table_csv("labevents", 6))
    c = _quiet_load(src, tmp_path / "c.duckdb")
    assert c["content_hash"] != a["content_hash"]


def test_demo_copy_without_a_table_warns_and_creates_it_empty(tmp_path):
    src = make_source(tmp_path / "demo", rows=ROWS, skip=("chartevents", "omr"), demo=True)
    with pytest.warns(MimicLoadWarning) as record:
        meta = load_mimic(src, tmp_path / "d.duckdb", progress=False)
    messages = " | ".join(str(w.message) for w in record)
    assert "icu/chartevents.csv.gz; created mimiciv_icu.chartevents empty" in messages
    assert "hosp/omr.csv.gz; created mimiciv_hosp.omr empty" in messages
    assert meta["source"] == "mimic-iv-demo" and meta["missing_tables"] == ["omr", "chartevents"]
    con = open_database(tmp_path / "d.duckdb")
    try:
        assert schema_mismatches(con) == []
        assert con.execute("SELECT count(*) FROM omr").fetchone()[0] == 0
    finally:
        con.close()


def test_uncompressed_csv_is_accepted(tmp_path):
    src = make_source(tmp_path / "plain", rows=ROWS, compressed=False)
    meta = _quiet_load(src, tmp_path / "p.duckdb")
    gz = _quiet_load(make_source(tmp_path / "gz", rows=ROWS), tmp_path / "g.duckdb")
    assert meta["content_hash"] == gz["content_hash"]


def test_header_case_differences_map_onto_the_v22_columns(tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS)
    header = [c.lower() for c in mimic_schema()["procedureevents"].column_names]
    assert "originalamount" in header
    write_table(src, "procedureevents", table_csv("procedureevents", 2, header=header))
    meta = _quiet_load(src, tmp_path / "x.duckdb")
    assert meta["renamed_columns"] == {"procedureevents": {"originalamount": "ORIGINALAMOUNT",
                                                           "originalrate": "ORIGINALRATE"}}
    con = open_database(tmp_path / "x.duckdb")
    try:
        assert con.execute('SELECT sum("ORIGINALAMOUNT") FROM procedureevents').fetchone()[0] == 2.0
    finally:
        con.close()


def test_reordered_columns_land_in_the_right_place(tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS)
    cols = mimic_schema()["patients"].column_names
    text = ",".join(reversed(cols)) + "\n" + "\n".join(
        f"{'2180-03-01' if i == 0 else ''},2014 - 2016,2150,{50 + i},F,{100 + i}" for i in range(3)) + "\n"
    write_table(src, "patients", text)
    _quiet_load(src, tmp_path / "r.duckdb")
    con = open_database(tmp_path / "r.duckdb")
    try:
        rows = con.execute("SELECT subject_id, gender, anchor_age, dod FROM patients ORDER BY rowid").fetchall()
    finally:
        con.close()
    assert [r[:3] for r in rows] == [(100, "F", 50), (101, "F", 51), (102, "F", 52)]
    assert str(rows[0][3]) == "2180-03-01" and rows[1][3] is None


def test_unknown_files_are_ignored_with_a_warning(tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS)
    (src / "hosp" / "notes.csv.gz").write_bytes(gzip.compress(b"a,b\n1,2\n"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MimicLoadWarning)
        meta = load_mimic(src, tmp_path / "u.duckdb", progress=False)
    assert any("ignoring files that are not MIMIC-IV v2.2 tables: hosp/notes" in str(w.message) for w in caught)
    assert meta["ignored_files"] == ["hosp/notes"]


# -- release recognition and count validation ------------------------------------------------------

def test_known_releases_come_from_the_published_counts():
    full, demo = known_releases()
    assert (full.source, full.release, full.strict) == ("mimic-iv", "3.1", True)
    assert (demo.source, demo.release, demo.strict) == ("mimic-iv-demo", "2.2", False)
    assert full.count_map["patients"] == 364627 and demo.count_map["patients"] == 100
    assert recognise_release({"patients": 100, "admissions": 275}) is demo
    assert recognise_release({"patients": 364627, "admissions": 546028}) is full
    assert recognise_release({"patients": 100, "admissions": 276}) is None


def _fake_release(monkeypatch, strict: bool) -> None:
    release = KnownRelease("mimic-iv" if strict else "mimic-iv-demo", "9.9",
                           (("patients", 3), ("admissions", 4), ("labevents", 7)), strict)
    monkeypatch.setattr(mimic_release, "known_releases", lambda: (release,))


def test_full_release_count_mismatch_is_an_error(tmp_path, monkeypatch):
    _fake_release(monkeypatch, strict=True)
    src = make_source(tmp_path / "src", rows=ROWS)
    out = tmp_path / "o" / "full.duckdb"
    with pytest.raises(LoaderError, match=r"labevents has 5 rows but MIMIC-IV v9\.9 has 7 \(-2\).*"
                                          r"labevents\.csv\.gz.*SHA256SUMS"):
        load_mimic(src, out, progress=False)
    assert _leftovers(out.parent) == []


def test_full_release_with_matching_counts_is_validated(tmp_path, monkeypatch):
    _fake_release(monkeypatch, strict=True)
    src = make_source(tmp_path / "src", rows={**ROWS, "labevents": 7})
    with warnings.catch_warnings():
        warnings.simplefilter("error", MimicLoadWarning)
        meta = load_mimic(src, tmp_path / "ok.duckdb", progress=False)
    assert (meta["source"], meta["release"], meta["rows_validated"]) == ("mimic-iv", "9.9", True)


def test_demo_count_mismatch_is_a_warning(tmp_path, monkeypatch):
    _fake_release(monkeypatch, strict=False)
    src = make_source(tmp_path / "src", rows=ROWS, demo=True)
    with pytest.warns(MimicLoadWarning, match="labevents has 5 rows"):
        meta = load_mimic(src, tmp_path / "d.duckdb", progress=False)
    assert meta["release"] == "9.9" and meta["count_mismatches"] == [
        "labevents has 5 rows but MIMIC-IV demo v9.9 has 7 (-2)"]


# -- error paths -------------------------------------------------------------------------------

def test_nonexistent_directory(tmp_path):
    with pytest.raises(LoaderError, match="does not exist.*physionet.org"):
        load_mimic(tmp_path / "nowhere", tmp_path / "x.duckdb", progress=False)


def test_empty_directory_is_not_mimic(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoaderError, match="not a MIMIC-IV directory: it has no hosp/ or icu/ folder"):
        load_mimic(tmp_path / "empty", tmp_path / "x.duckdb", progress=False)


def test_pointing_at_hosp_suggests_the_parent(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    with pytest.raises(LoaderError, match=r"'hosp' module folder.*load-mimic .*mimiciv`"):
        load_mimic(src / "hosp", tmp_path / "x.duckdb", progress=False)


def test_pointing_at_an_ancestor_suggests_the_release_folder(tmp_path):
    src = make_source(tmp_path / "physionet.org" / "files" / "mimiciv" / "3.1", rows=ROWS)
    with pytest.raises(LoaderError) as info:
        load_mimic(tmp_path / "physionet.org", tmp_path / "x.duckdb", progress=False)
    assert f"pass that instead: `ehrgym db load-mimic {src}`" in str(info.value)
    other = make_source(tmp_path / "physionet.org" / "files" / "mimiciv" / "2.2", rows=ROWS)
    with pytest.raises(LoaderError) as info:
        load_mimic(tmp_path / "physionet.org", tmp_path / "x.duckdb", progress=False)
    assert "pass one of them instead" in str(info.value)
    assert f"\n  {other}\n  {src}" in str(info.value)


def test_flat_layout_is_explained(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "patients.csv.gz").write_bytes(gzip.compress(table_csv("patients", 1).encode()))
    with pytest.raises(LoaderError, match="hosp/ and icu/ subfolders"):
        load_mimic(flat, tmp_path / "x.duckdb", progress=False)


def test_missing_required_table_in_a_full_release(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS, skip=("chartevents", "emar"))
    with pytest.raises(LoaderError, match=r"missing required MIMIC-IV table file\(s\): "
                                          r"hosp/emar\.csv\.gz, icu/chartevents\.csv\.gz"):
        load_mimic(src, tmp_path / "x.duckdb", progress=False)
    assert _leftovers(tmp_path) == []


def test_truncated_gzip_names_the_file_and_the_checksum(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows={**ROWS, "labevents": 3000}, sha256sums=True)
    path = src / "hosp" / "labevents.csv.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "o" / "x.duckdb"
    with pytest.raises(LoaderError) as info:
        _quiet_load(src, out)
    msg = str(info.value)
    assert str(path) in msg and "truncated or corrupt" in msg
    assert "does NOT match SHA256SUMS.txt" in msg and "Re-download" in msg
    assert _leftovers(out.parent) == []


def test_garbage_gzip_is_reported_before_loading(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    path = src / "icu" / "d_items.csv.gz"
    path.write_bytes(b"this is not gzip\n")
    with pytest.raises(LoaderError, match=r"d_items\.csv\.gz is truncated or corrupt"):
        load_mimic(src, tmp_path / "x.duckdb", progress=False)


def test_unexpected_and_missing_columns_are_named(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    cols = mimic_schema()["patients"].column_names
    write_table(src, "patients", ",".join([c for c in cols if c != "dod"] + ["ethnicity"]) + "\n")
    with pytest.raises(LoaderError, match=r"patients\.csv\.gz does not have the MIMIC-IV v2\.2 columns of "
                                          r"mimiciv_hosp\.patients: unexpected column\(s\) ethnicity; "
                                          r"missing column\(s\) dod"):
        load_mimic(src, tmp_path / "x.duckdb", progress=False)


def test_values_that_do_not_fit_the_types_name_the_file(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    cols = mimic_schema()["icustays"].column_names
    write_table(src, "icustays", ",".join(cols) + "\n1,2,three,MICU,MICU,2180-01-01 00:00:00,,1.0\n")
    with pytest.raises(LoaderError, match=r"cannot load .*icustays\.csv\.gz into mimiciv_icu\.icustays"):
        _quiet_load(src, tmp_path / "x.duckdb")
    assert _leftovers(tmp_path) == []


def test_existing_output_is_not_overwritten_without_permission(tmp_path):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    out = tmp_path / "db.duckdb"
    out.write_bytes(b"precious")
    with pytest.raises(DatabaseError, match="already exists.*--force"):
        load_mimic(src, out, progress=False)
    assert out.read_bytes() == b"precious"
    meta = _quiet_load(src, out, overwrite=True)
    con = duckdb.connect(str(out), read_only=True)
    try:
        assert content_hash(con) == meta["content_hash"]
    finally:
        con.close()


def test_interrupt_leaves_no_half_built_database(tmp_path, monkeypatch):
    import ehrgym.db.mimic as mimic

    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    real, calls = mimic._load_table, []

    def flaky(*args, **kwargs):
        calls.append(args[2].spec.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(mimic, "_load_table", flaky)
    out = tmp_path / "o" / "x.duckdb"
    with pytest.raises(KeyboardInterrupt):
        _quiet_load(src, out)
    assert calls[:2] == ["patients", "admissions"]
    assert _leftovers(out.parent) == []


def test_progress_bar_reaches_the_total(tmp_path, capsys):
    src = make_source(tmp_path / "mimiciv", rows=ROWS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MimicLoadWarning)
        meta = load_mimic(src, tmp_path / "p.duckdb", progress=True)
    err = capsys.readouterr().err
    assert "load MIMIC-IV" in err and "100%" in err and "icu/procedureevents" in err
    assert meta["table_rows"]["labevents"] == 5
