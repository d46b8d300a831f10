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


def test_lexorder_is_lexsort() -> None:
    """The packed-key sort is np.lexsort's permutation (stable, last key primary), fallback included."""
    import numpy as np

    from ehrgym.db.synth.common import lexorder

    rng = np.random.default_rng(0)
    n = 5000
    keys = (rng.integers(0, 3, n), rng.integers(-50, 50, n), rng.integers(0, 40, n) * 10**9, rng.random(n) < 0.5)
    for k in ((keys[0],), keys[:2], keys[:3], keys, (keys[1], rng.integers(-2**62, 2**62, n)),
              (rng.random(n), keys[0]), (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))):
        assert np.array_equal(lexorder(k), np.lexsort(k))


def test_number_text_is_duckdb_cast() -> None:
    """chartevents/labevents value text, made from the distinct numbers only, equals the per-row SQL CAST."""
    import numpy as np
    import pyarrow as pa

    from ehrgym.db.synth.writer import _TEXT_SQL, floats, ints, number_text

    rng = np.random.default_rng(1)
    n = 20000
    decimals = rng.integers(0, 4, n)
    values = np.round(rng.normal(0, 50, n), 2)
    values = np.array([np.round(v, d) for v, d in zip(values, decimals)])
    values[:50] = np.nan
    values[50:60] = -0.0
    values[60:70] = 0.0
    values[70:80] = 2.5                                        # integer CAST of a .5
    cases = [(values, decimals), (np.array([1e300, 1e-300, 3.14159265, np.nan, 7.0]), np.array([1, 1, 2, 0, 1])),
             (values[:100], 1), (np.zeros(0), 0), (np.full(5, np.nan), 0)]
    con = duckdb.connect()
    for vals, decs in cases:
        decs = np.broadcast_to(np.asarray(decs, dtype=np.int64), vals.shape)
        codes, labels = number_text(vals, decs)
        got = [None if c < 0 else labels[c] for c in codes.tolist()]
        con.register("t", pa.table({"i": ints(np.arange(vals.size)),
                                    "v": floats(np.nan_to_num(vals), null=np.isnan(vals)), "d": ints(decs)}))
        want = [r[0] for r in con.execute(f"SELECT {_TEXT_SQL} FROM t ORDER BY i").fetchall()]
        con.unregister("t")
        assert got == want


def test_chartevents_in_chunks_keep_order_and_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Big cohorts write chartevents in chunks of stays: the chunks follow each other in (stay, time, item)
    order, and the database holds every chunk."""
    import numpy as np

    from ehrgym.db.synth import generate_tables, icu

    monkeypatch.setattr(icu, "CHART_CHUNK_STAYS", 4)
    chunks = [t for t in generate_tables(40, 2) if t.name == "chartevents"]
    assert len(chunks) > 2
    cols = {c: np.concatenate([t.columns[c].to_numpy(zero_copy_only=False) for t in chunks])
            for c in ("stay_id", "charttime", "itemid")}
    stay, when, item = cols["stay_id"], cols["charttime"].astype(np.int64), cols["itemid"]
    same_stay = stay[1:] == stay[:-1]
    assert np.count_nonzero(~same_stay) == np.unique(stay).size - 1  # each stay's rows are contiguous
    later = (when[1:] > when[:-1]) | ((when[1:] == when[:-1]) & (item[1:] > item[:-1]))
    assert np.all(later[same_stay])                                   # (charttime, itemid) ascending in a stay
    info = build_synthetic_database(tmp_path / "chunks.duckdb", patients=40, seed=2, progress=False)
    assert info["table_rows"]["chartevents"] == sum(t.num_rows for t in chunks)
    con = open_database(tmp_path / "chunks.duckdb")
    dup = con.execute("SELECT count(*) - count(DISTINCT (stay_id, itemid, charttime)) FROM chartevents").fetchone()[0]
    assert dup == 0


def test_chartevents_volume_of_the_order_of_mimic(synth_db: Path) -> None:
    """MIMIC-IV v3.1 charts about 4,600 rows per ICU stay (1,190 per patient) over hundreds of items; the kit,
    with its few items, about 1,300. Heart rate is charted about hourly in both."""
    con = open_database(synth_db)
    rows, stays = con.execute("SELECT count(*), count(DISTINCT stay_id) FROM chartevents").fetchone()
    assert 1000 <= rows / stays <= 4600
    hr_rows = con.execute("SELECT count(*) FROM chartevents WHERE itemid = 220045").fetchone()[0]
    icu_hours = con.execute("SELECT sum(date_diff('minute', intime, outtime)) / 60 FROM icustays").fetchone()[0]
    assert 0.9 <= hr_rows / icu_hours <= 2.0
