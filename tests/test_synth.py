"""The synthetic-hospital builder: API, bookkeeping, determinism, atomic writes."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from ehrgym.db.connect import content_hash, open_database, read_meta, table_row_counts
from ehrgym.db.schema import mimic_schema, schema_mismatches
from ehrgym.db.synth import RELEASE, build_synthetic_database
from ehrgym.errors import DatabaseError


def test_schema_is_exactly_the_reference(synth_db: Path) -> None:
    con = open_database(synth_db)
    assert schema_mismatches(con) == []


def test_every_table_is_populated(synth_db: Path) -> None:
    con = open_database(synth_db)
    counts = table_row_counts(con)
    assert set(counts) == set(mimic_schema())
    assert [t for t, n in counts.items() if n == 0] == []


def test_bookkeeping_record(synth_db: Path) -> None:
    con = open_database(synth_db)
    meta = read_meta(con)
    assert meta["source"] == "synthetic"
    assert meta["release"] == RELEASE
    assert meta["seed"] == 7 and meta["patients"] == 200
    assert meta["build_seconds"] > 0
    assert meta["table_rows"] == table_row_counts(con)
    assert meta["content_hash"] == content_hash(con)
    assert con.execute("SELECT count(*) FROM patients").fetchone()[0] == 200


def test_bookkeeping_schema_is_not_on_the_search_path(synth_db: Path) -> None:
    con = open_database(synth_db)
    with pytest.raises(duckdb.CatalogException):
        con.execute("SELECT * FROM build_info")


def test_same_seed_same_hash_other_seed_other_hash(tmp_path: Path) -> None:
    a = build_synthetic_database(tmp_path / "a.duckdb", patients=30, seed=11, progress=False)
    b = build_synthetic_database(tmp_path / "b.duckdb", patients=30, seed=11, progress=False)
    c = build_synthetic_database(tmp_path / "c.duckdb", patients=30, seed=12, progress=False)
    d = build_synthetic_database(tmp_path / "d.duckdb", patients=31, seed=11, progress=False)
    assert a["content_hash"] == b["content_hash"]
    assert a["table_rows"] == b["table_rows"]
    assert c["content_hash"] != a["content_hash"]
    assert d["content_hash"] != a["content_hash"]


def test_same_seed_identical_rows(tmp_path: Path) -> None:
    """Stronger than the hash: the ordered content of a table is identical."""
    build_synthetic_database(tmp_path / "a.duckdb", patients=12, seed=3, progress=False)
    build_synthetic_database(tmp_path / "b.duckdb", patients=12, seed=3, progress=False)
    rows = []
    for name in ("a", "b"):
        con = open_database(tmp_path / f"{name}.duckdb")
        rows.append(con.execute("SELECT * FROM labevents ORDER BY labevent_id").fetchall())
    assert rows[0] == rows[1]


def test_refuses_to_overwrite_without_permission(tmp_path: Path) -> None:
    out = tmp_path / "x.duckdb"
    build_synthetic_database(out, patients=3, seed=1, progress=False)
    before = out.read_bytes()
    with pytest.raises(DatabaseError, match="already exists.*overwrite=True"):
        build_synthetic_database(out, patients=3, seed=2, progress=False)
    assert out.read_bytes() == before
    info = build_synthetic_database(out, patients=3, seed=2, progress=False, overwrite=True)
    assert read_meta(open_database(out))["seed"] == 2 == info["seed"]


def test_failed_build_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ehrgym.db.synth import build

    def broken(patients: int, seed: int):
        yield from []
        raise RuntimeError("generator exploded")

    monkeypatch.setattr(build, "generate_tables", broken)
    out = tmp_path / "y.duckdb"
    with pytest.raises(RuntimeError, match="exploded"):
        build_synthetic_database(out, patients=3, seed=1, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="at least 1"):
        build_synthetic_database(tmp_path / "z.duckdb", patients=0, seed=1, progress=False)
    with pytest.raises(DatabaseError, match="directory"):
        build_synthetic_database(tmp_path, patients=2, seed=1, progress=False, overwrite=True)


def test_a_single_patient_builds(tmp_path: Path) -> None:
    info = build_synthetic_database(tmp_path / "one.duckdb", patients=1, seed=5, progress=False)
    assert info["table_rows"]["patients"] == 1
    assert info["table_rows"]["admissions"] >= 1


def test_infusion_parameters_respect_plausible_bounds() -> None:
    """No generated row can exceed its item's plausible maximum, whatever the cohort size."""
    from ehrgym.db.items import item_reference
    from ehrgym.db.synth.icu import INFUSIONS, max_amount

    refs = item_reference()
    for inf in INFUSIONS:
        assert max_amount(inf) <= refs[inf.itemid].plausible_max, refs[inf.itemid].label


def test_hash_independent_of_python_hash_seed(tmp_path: Path) -> None:
    """No dependence on set/dict ordering: another interpreter with another PYTHONHASHSEED agrees."""
    import os
    import subprocess
    import sys

    here = build_synthetic_database(tmp_path / "here.duckdb", patients=8, seed=21, progress=False)
    code = ("from ehrgym.db.synth import build_synthetic_database as b; import sys; "
            "print(b(sys.argv[1], patients=8, seed=21, progress=False)['content_hash'])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "there.duckdb")], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out == here["content_hash"]
