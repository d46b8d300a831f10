"""The proof that a query reads only its patient's rows (``ehrgym.bench.locality``): the cases it must accept and
refuse, and on a real build, that a query it accepts gives the same rows when other patients' rows change."""

from __future__ import annotations

import numpy as np
import pytest

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.background import COPYABLE, TABLES, BackgroundMaker, same_answer
from ehrgym.bench.locality import order_free, reads_only_patient, row_filters
from ehrgym.bench.task import load_tasks_jsonl
from ehrgym.bench.verify import PairVerifier
from ehrgym.db.overlay import Overlay, TableEdit, fetch_rows
from ehrgym.db.schema import table_spec

IDS = {"subject_id": {10}, "hadm_id": {20}, "stay_id": {30}}
LAB = "mimiciv_hosp.labevents"


@pytest.mark.parametrize("sql", [
    f"SELECT avg(valuenum) FROM {LAB} WHERE subject_id = 10 AND itemid = 50912",
    f"SELECT count(*) FROM {LAB} e WHERE e.hadm_id = 20",
    "SELECT e.drg_mortality FROM mimiciv_hosp.drgcodes e JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id "
    "WHERE a.subject_id = 10 AND a.hadm_id = 20",
    # an admission restricted to the patient restricts what joins it on its id
    "SELECT count(*) FROM mimiciv_hosp.admissions a JOIN mimiciv_hosp.transfers t ON t.hadm_id = a.hadm_id "
    "WHERE a.subject_id = 10",
    f"WITH cr AS (SELECT charttime, valuenum FROM {LAB} WHERE subject_id = 10 AND itemid = 1) "
    "SELECT max(valuenum) FROM cr",
    f"SELECT count(*) FROM {LAB} e WHERE e.subject_id = 10 AND NOT EXISTS "
    "(SELECT 1 FROM mimiciv_hosp.diagnoses_icd d WHERE d.hadm_id = 20 AND d.icd_code LIKE 'N17%')",
    "SELECT count(*) FROM mimiciv_hosp.d_labitems",  # a dictionary: no background edits it
    f"SELECT count(*) FROM mimiciv_icu.icustays s LEFT JOIN {LAB} e ON e.hadm_id = s.hadm_id WHERE s.stay_id = 30",
])
def test_patient_local_queries_are_proven(sql):
    assert reads_only_patient(sql, TABLES, IDS)


@pytest.mark.parametrize("sql", [
    f"SELECT avg(valuenum) FROM {LAB} WHERE itemid = 50912",  # a population question
    f"SELECT avg(valuenum) FROM {LAB} WHERE subject_id = 11",  # not the question's patient
    f"SELECT avg(valuenum) FROM {LAB} WHERE subject_id = 10 OR itemid = 1",
    f"SELECT avg(valuenum) FROM {LAB} WHERE subject_id IN (10, 11)",
    f"SELECT count(*) FROM (SELECT * FROM {LAB} QUALIFY row_number() OVER (PARTITION BY subject_id) = 1) e "
    "WHERE e.subject_id = 10",  # the derived table reads every patient's rows
    f"SELECT count(*) FROM mimiciv_icu.icustays s LEFT JOIN {LAB} e ON e.hadm_id = s.hadm_id WHERE e.subject_id = 10",
    f"SELECT count(*) FROM {LAB} e LEFT JOIN mimiciv_icu.icustays s ON s.stay_id = 30 WHERE e.itemid = 1",
    f"SELECT e.labevent_id FROM {LAB} e WHERE e.subject_id = 10",  # the background renumbers it
    # which of two tied rows comes first depends on how the view runs (tests below)
    f"SELECT valuenum FROM {LAB} e WHERE e.subject_id = 10 ORDER BY e.charttime LIMIT 1",
    f"SELECT first(valuenum) FROM {LAB} e WHERE e.subject_id = 10",
    f"SELECT count(*) FROM {LAB} e WHERE e.subject_id = 10 QUALIFY row_number() OVER (ORDER BY charttime) = 1",
    f"SELECT e.* FROM {LAB} e WHERE e.subject_id = 10",
    f"SELECT count(*) FROM {LAB} e WHERE e.subject_id = 10 AND e.hadm_id = (SELECT max(hadm_id) FROM {LAB})",
    "SELECT count(*) FROM mimiciv_hosp.admissions a JOIN mimiciv_hosp.transfers t ON t.subject_id = a.hadm_id "
    "WHERE a.hadm_id = 20",  # different id columns are not the same id
    "SELEC nonsense",
])
def test_queries_that_read_other_patients_are_not(sql):
    assert not reads_only_patient(sql, TABLES, IDS)


@pytest.fixture(scope="module")
def built(small_bench):
    return load_tasks_jsonl(small_bench / "tasks.jsonl")  # the run's shared "small" build (tests/conftest.py)


def _others_changed(verifier: PairVerifier, tables: list[str], subject: int, rng: np.random.Generator,
                    noise: Overlay) -> Overlay:
    """An overlay that deletes a third of every other patient's rows (at most 400, a background's widest) of ``tables`` and stores a block of them again
    (renumbering a dense id as the noise's own edit of the table does)."""
    own = noise.merged()
    edits = []
    con = verifier.clean_con
    for table in tables:
        q = table_spec(table).qualified
        rows = [r for (r,) in con.execute(f"SELECT rowid FROM {q} WHERE subject_id IS DISTINCT FROM {subject} "
                                          f"ORDER BY rowid").fetchall()]
        if len(rows) < 10:
            continue
        deleted = sorted(int(r) for r in rng.choice(rows, size=min(len(rows) // 3, 400), replace=False))
        kept = [r for r in rows if r not in set(deleted)][:5]
        copies = fetch_rows(con, table, kept)
        dense = own[table].dense_id if table in own else COPYABLE.get(table) or None
        edits.append(TableEdit(table, tuple(deleted), tuple(copies[r] for r in kept), tuple(kept), dense))
    return Overlay(tuple(edits))


def test_a_proven_query_gives_the_same_rows_when_other_patients_rows_change(built, synth_db):
    verifier = PairVerifier(synth_db)
    rng = np.random.default_rng(0)
    proven = 0
    try:
        for t in [t for t in built if t.level == "patient"][:100]:
            entity = t.meta["entity"]
            ids = {k: {int(entity[k])} for k in ("subject_id", "hadm_id", "stay_id") if isinstance(entity.get(k), int)}
            if "subject_id" not in ids or not reads_only_patient(t.gold_sql, TABLES, ids):
                continue
            tables = sorted(set(t.meta["tables"]) & set(TABLES))
            noise = t.noise.overlay if t.noise else Overlay()
            other = _others_changed(verifier, tables, next(iter(ids["subject_id"])), rng, noise)
            served = Overlay(other.edits + noise.edits)
            base = verifier.rows(t.gold_sql, noise)
            assert verifier.rows(t.gold_sql, served) == base, t.task_id
            proven += 1
    finally:
        verifier.close()
    assert proven >= 25  # most patient questions' SQL is proven local


@pytest.mark.parametrize(("sql", "expected"), [
    (f"SELECT count(DISTINCT subject_id) FROM {LAB} WHERE itemid = 50912 AND valuenum > 2",
     {"labevents": ["(itemid = 50912) AND (valuenum > 2)"]}),
    # an inner join's ON filters both sides; a condition over two sources filters neither on its own
    (f"SELECT count(*) FROM {LAB} l JOIN mimiciv_hosp.admissions a ON a.hadm_id = l.hadm_id AND l.itemid = 1 "
     "WHERE a.admission_type = 'URGENT' AND l.valuenum > a.hadm_id",
     {"labevents": ["(__row.itemid = 1)"], "admissions": ["(__row.admission_type = 'URGENT')"]}),
    # a LEFT join's null-extended side: only its own ON (its rows failing WHERE still decide which rows are null)
    (f"SELECT count(*) FROM mimiciv_icu.icustays s LEFT JOIN {LAB} e ON e.hadm_id = s.hadm_id AND e.itemid = 5 "
     "WHERE e.valuenum IS NULL AND s.los > 1",
     {"icustays": ["(__row.los > 1)"], "labevents": ["(__row.itemid = 5)"]}),
    # an ANTI join's ON filters nothing of its left side
    (f"SELECT count(*) FROM mimiciv_icu.icustays s ANTI JOIN {LAB} e ON e.hadm_id = s.hadm_id AND s.los > 1 "
     "AND e.itemid = 5", {"icustays": ["TRUE"], "labevents": ["(__row.itemid = 5)"]}),
    # a correlated reference to the outer query is not the inner table's own condition
    (f"SELECT count(*) FROM mimiciv_hosp.admissions a WHERE EXISTS (SELECT 1 FROM {LAB} WHERE hadm_id = a.hadm_id "
     "AND itemid = 7)", {"admissions": ["TRUE"], "labevents": ["(itemid = 7)"]}),
    ("SELECT count(*) FROM mimiciv_hosp.d_labitems", {}),
    # a concept's items as an inner-joined VALUES list filter through its rows
    ("SELECT avg(e.valuenum) FROM mimiciv_icu.chartevents e JOIN (VALUES ('hr', 220045), ('rr', 220210)) "
     "cpt(concept, itemid) ON cpt.itemid = e.itemid WHERE cpt.concept = 'hr' AND e.valuenum > 0",
     {"chartevents": ["(__row.valuenum > 0) AND EXISTS (SELECT 1 FROM (VALUES ('hr', 220045), ('rr', 220210)) AS "
                            "cpt(concept, itemid) WHERE (cpt.concept = 'hr') AND (cpt.itemid = __row.itemid))"]}),
    # … not a LEFT-joined one
    ("SELECT count(*) FROM mimiciv_icu.chartevents e LEFT JOIN (VALUES (220045)) cpt(itemid) ON cpt.itemid = e.itemid",
     {"chartevents": ["TRUE"]}),
    # a robust relation's plain filter: the outer query's conditions on it are on the table's rows (a * there carries
    # the renumbered id nowhere the query reads it)
    (f"SELECT count(*) FROM (SELECT * FROM {LAB} WHERE valuenum IS NULL OR valuenum < 3) e "
     "WHERE e.itemid = 5 AND valuenum > 1",
     {"labevents": ["(valuenum IS NULL OR valuenum < 3) AND (__row.itemid = 5) AND (valuenum > 1)"]}),
    (f"SELECT count(*) FROM mimiciv_hosp.admissions a LEFT JOIN (SELECT * FROM {LAB} WHERE valuenum < 3) e "
     "ON e.hadm_id = a.hadm_id AND e.itemid = 5 WHERE e.valuenum IS NULL",
     {"admissions": ["TRUE"], "labevents": ["(valuenum < 3) AND (__row.itemid = 5)"]}),
    # … not through DISTINCT (or grouping, a limit …), nor a column the filter does not pass on
    (f"SELECT count(*) FROM (SELECT DISTINCT * FROM {LAB} WHERE valuenum < 3) e WHERE e.itemid = 5",
     {"labevents": ["(valuenum < 3)"]}),
    (f"SELECT count(*) FROM (SELECT subject_id, itemid FROM {LAB}) e WHERE e.itemid = 5 AND e.valuenum > 3",
     {"labevents": ["(__row.itemid = 5)"]}),
])
def test_row_filters_name_the_rows_each_read_can_see(sql, expected):
    assert row_filters(sql, TABLES) == expected


@pytest.mark.parametrize("sql", [
    f"SELECT valuenum FROM {LAB} WHERE itemid = 1 ORDER BY charttime LIMIT 1",  # tied rows' order
    f"SELECT labevent_id FROM {LAB} WHERE itemid = 1",  # renumbered by a background
    f"SELECT * FROM {LAB} WHERE itemid = 1",
    f"SELECT e.* FROM (SELECT * FROM {LAB}) e WHERE e.itemid = 1",  # the id carried to the result
    f"SELECT e FROM (SELECT * FROM {LAB}) e WHERE e.itemid = 1",  # a whole row, id and all
    f"SELECT hash(*) FROM {LAB} WHERE itemid = 1",
    f"SELECT count(*) FROM mimiciv_icu.icustays s RIGHT JOIN {LAB} e ON e.hadm_id = s.hadm_id",
    f"SELECT count(*) FROM mimiciv_icu.icustays s ASOF JOIN {LAB} e ON e.charttime >= s.intime",
    f"SELECT count(*) FROM mimiciv_icu.icustays s POSITIONAL JOIN {LAB} e",
    "SELEC nonsense",
])
def test_row_filters_refuse_what_they_cannot_show(sql):
    assert row_filters(sql, TABLES) is None


def test_a_query_reading_none_of_a_backgrounds_rows_gives_the_same_rows_with_it(built, synth_db):
    """On a real build: every check the background maker skips (its SQL reads none of the rows a drawn background
    deletes or stores) gives, run again, the rows it gave without the background; and the proof skips some."""
    verifier = PairVerifier(synth_db)
    maker = BackgroundMaker(verifier)
    rng = np.random.default_rng(0)
    skipped = ran = 0
    try:
        for t in built[:160]:
            noise = t.noise.overlay if t.noise else Overlay()
            filters = row_filters(t.gold_sql, TABLES)
            if filters is None:
                continue
            tables = sorted(set(t.meta["tables"]) & set(TABLES))
            subjects = {int(s) for s in t.meta.get("subject_ids", [])}
            for _ in range(3):
                background = maker.draw(rng, tables, subjects, noise, scale=float(rng.choice([0.05, 1.0])))
                if background.is_empty:
                    continue
                if maker.reads_none(background, filters, {}):
                    served = Overlay(background.edits + noise.edits)
                    # repr: NaN equal to NaN, every float to its last bit
                    assert repr(verifier.rows(t.gold_sql, served)) == repr(verifier.rows(t.gold_sql, noise)), t.task_id
                    skipped += 1
                else:
                    ran += 1
    finally:
        verifier.close()
    assert skipped >= 20 and ran >= 20


@pytest.mark.parametrize("deleted", [5, 200])  # a literal list in the rowid span, a join on the list
def test_changed_rows_are_the_rows_an_edit_deletes_and_stores(synth_db, deleted):
    from ehrgym.db.overlay import changed_rows_sql

    verifier = PairVerifier(synth_db)
    try:
        con = verifier.clean_con
        table = "labevents"
        q = table_spec(table).qualified
        n = con.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
        gone = sorted({int(r) for r in np.random.default_rng(deleted).integers(0, n, deleted)})
        stored = fetch_rows(con, table, [3, 4])
        edit = TableEdit(table, tuple(gone), (stored[3], stored[4]), (3, 4))
        got = con.execute(f"SELECT * FROM ({changed_rows_sql(table_spec(table), 'base', edit)})").fetchall()
        assert sorted(map(repr, got)) == sorted(map(repr, con.execute(
            f"SELECT * FROM {q} WHERE rowid IN ({', '.join(map(str, gone))}) UNION ALL "
            f"SELECT * FROM {q} WHERE rowid IN (3, 4)").fetchall()))
        assert changed_rows_sql(table_spec(table), "base", TableEdit(table)) is None
    finally:
        verifier.close()


def test_the_remembered_proofs_are_the_proofs(built):
    """A build proves a candidate's clean SQL again for every subtype tried on it, so the proofs are remembered by SQL
    text, tables and ids: what they answer must be what proving again answers, for every gold and naive SQL of a
    build with its own patient (often proven) and another (never), and a caller's change to a returned condition list
    must reach no later caller."""
    from ehrgym.bench import locality

    locality._row_filters.cache_clear()
    locality._reads_only_patient.cache_clear()
    asked = sorted({(sql, s) for t in built for s in t.meta.get("subject_ids", [])[:1]
                    for sql in (t.gold_sql, t.naive_sql) if sql})
    assert len(asked) > 20
    for _ in range(2):  # the second round is answered from memory
        for sql, subject in asked:
            for ids in ({"subject_id": {subject}}, {"subject_id": {subject + 1}, "hadm_id": set()}):
                fresh = locality._reads_only_patient.__wrapped__(
                    sql, frozenset(TABLES), tuple((k, frozenset(ids.get(k, ()))) for k in locality.KEYS))
                assert reads_only_patient(sql, TABLES, ids) == fresh
            found = locality._row_filters.__wrapped__(sql, frozenset(TABLES))
            assert row_filters(sql, TABLES) == (None if found is None else {k: list(v) for k, v in found.items()})
    sqls = {sql for sql, _ in asked}
    assert locality._row_filters.cache_info().misses == len(sqls)
    assert locality._reads_only_patient.cache_info().misses == 2 * len(asked)
    assert any(reads_only_patient(sql, TABLES, {"subject_id": {s}}) for sql, s in asked)
    proven = next(sql for sql in sorted(sqls) if row_filters(sql, TABLES))
    got = row_filters(proven, TABLES)
    table = next(iter(got))
    got[table].append("FALSE")
    assert "FALSE" not in row_filters(proven, TABLES)[table]


@pytest.mark.parametrize(("sql", "free"), [
    (f"SELECT avg(valuenum) FROM {LAB} WHERE itemid = 50912", True),
    (f"SELECT round(count(DISTINCT subject_id) / 2.0, 2), max(charttime) FROM {LAB} e JOIN mimiciv_hosp.admissions a "
     "ON a.hadm_id = e.hadm_id WHERE a.admission_type = 'URGENT'", True),
    (f"WITH c AS (SELECT * FROM {LAB} WHERE itemid = 1) SELECT sum(valuenum) FROM c", True),
    (f"SELECT (SELECT count(*) FROM {LAB}) / (SELECT count(*) FROM mimiciv_hosp.admissions)", True),
    # more than one result row, in whatever order the rows were met
    (f"SELECT valuenum FROM {LAB} WHERE subject_id = 10", False),
    (f"SELECT itemid, count(*) FROM {LAB} GROUP BY itemid", False),
    (f"SELECT avg(valuenum) FROM {LAB} UNION ALL SELECT 1", False),
    (f"SELECT (SELECT max(valuenum) FROM {LAB}) FROM mimiciv_hosp.admissions", False),
    # which of tied rows is picked depends on the order they are read in
    (f"SELECT valuenum FROM {LAB} ORDER BY charttime LIMIT 1", False),
    (f"SELECT count(*) FROM (SELECT * FROM {LAB} ORDER BY charttime LIMIT 5)", False),
    (f"SELECT max(rn) FROM (SELECT row_number() OVER (ORDER BY charttime) AS rn FROM {LAB})", False),
    (f"SELECT string_agg(value, ',') FROM {LAB}", False),
    (f"SELECT arg_max(valuenum, charttime) FROM {LAB}", False),
    (f"SELECT mode(valuenum) FROM {LAB}", False),  # a function sqlglot does not know: not shown
    (f"SELECT count(*) FROM (SELECT DISTINCT ON (hadm_id) * FROM {LAB})", False),
    ("SELECT FROM WHERE", False),
])
def test_order_free_queries_are_one_aggregate_row_of_order_blind_aggregates(sql, free):
    assert order_free(sql) is free


def test_order_free_golds_give_the_same_answer_from_either_views(built, synth_db):
    """The verifier reads an order-free query from views that serve inserted rows last; on every twin of a build,
    its answer there is the answer of the views an episode reads."""
    verifier = PairVerifier(synth_db)
    compared = 0
    try:
        for t in built:
            served = t.overlay
            for sql in sorted({t.gold_sql, t.naive_sql} - {None}):
                if served.is_empty or not order_free(sql):
                    continue
                free = verifier.rows(sql, served)
                verifier.use(served)
                spec = t.expected.answer or AnswerSpec("text")
                assert same_answer(free, verifier.con.execute(sql).fetchall(), spec), t.task_id
                compared += 1
    finally:
        verifier.close()
    assert compared >= 50, compared
