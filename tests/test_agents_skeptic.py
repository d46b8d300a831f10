"""The skeptic's generic SQL analysis (no database): reading a draft, matching names, relations."""

from __future__ import annotations

import datetime as dt

import duckdb
import sqlglot

from ehrgym.agents.skeptic_sql import (TABLE_RULES, analyse_draft, best_name, clean_relation, pushdown,
                                       replace_literal, rewrite_tables)
from ehrgym.db.schema import create_mimic_schema

DRAFT = """
WITH v AS (
  SELECT e.charttime, e.valuenum
  FROM mimiciv_hosp.labevents e
  JOIN mimiciv_hosp.d_labitems d ON d.itemid = e.itemid
  WHERE e.subject_id = 10018328 AND e.hadm_id = 26706939 AND d.itemid = 50983 AND d.label = 'Sodium'
    AND e.charttime BETWEEN TIMESTAMP '2150-01-01 00:00:00' AND TIMESTAMP '2150-02-01 00:00:00'
)
SELECT (SELECT valuenum FROM v ORDER BY charttime DESC LIMIT 1)
"""


def test_analyse_draft_reads_references_names_window_and_shape() -> None:
    a = analyse_draft(DRAFT)
    assert a.refs == {"subject_id": [10018328], "hadm_id": [26706939]}
    assert a.items == [50983]
    assert [(n.table, n.column, n.literal, n.others) for n in a.names] == \
        [("d_labitems", "label", "Sodium", "t.itemid = 50983")]
    assert a.window == (dt.datetime(2150, 1, 1), dt.datetime(2150, 2, 1))
    assert not a.aggregate  # the last value by time is a single value
    assert a.evidence_tables == ["labevents"]
    assert "valuenum" in a.columns["labevents"]
    ranked = analyse_draft("SELECT e.subject_id FROM labevents e WHERE e.itemid = 1 ORDER BY e.valuenum DESC LIMIT 1")
    assert ranked.aggregate  # ranking by value is a maximum
    assert analyse_draft("SELECT avg(valuenum) FROM labevents WHERE year(charttime) = 2150").window == \
        (dt.datetime(2150, 1, 1), dt.datetime(2150, 12, 31, 23, 59, 59))


def test_best_name_fixes_misspellings_and_abbreviations() -> None:
    labels = ["Creatinine", "Creatine Kinase (CK)", "Urea Nitrogen", "Hemoglobin", "Glucose"]
    assert best_name("creatinin", labels) == "Creatinine"
    assert best_name("BUN", labels) == "Urea Nitrogen"
    assert best_name("Hgb", labels) == "Hemoglobin"
    assert best_name("glucoze", labels) == "Glucose"
    assert best_name("pip-tazo", ["PIPERACILLIN/TAZO", "CEFEPIME"]) == "PIPERACILLIN/TAZO"
    assert best_name("essential hypertension NOS", ["Unspecified essential hypertension",
                                                    "Essential (primary) hypertension"]) == \
        "Unspecified essential hypertension"
    assert best_name("zebra", labels) is None


def test_pushdown_and_rewrite_keep_the_draft_answerable() -> None:
    a = analyse_draft(DRAFT)
    table = next(t for t in a.tree.find_all(sqlglot.exp.Table) if t.name == "labevents")
    where = pushdown(table, TABLE_RULES["labevents"])
    assert where == "r.hadm_id IN (26706939) AND r.itemid IN (50983) AND r.subject_id IN (10018328)"
    fixed = replace_literal(a.tree, "Sodium", "Sodium, Whole Blood")
    assert "'Sodium, Whole Blood'" in fixed.sql(dialect="duckdb")
    sql = rewrite_tables(a.tree, lambda r, w: clean_relation(r, False, tuple(a.items), w))
    con = duckdb.connect()
    create_mimic_schema(con)
    con.execute("SET search_path = 'mimiciv_hosp,mimiciv_icu'")
    con.execute("INSERT INTO mimiciv_hosp.admissions (subject_id, hadm_id, admittime, dischtime) VALUES "
                "(10018328, 26706939, '2150-01-01', '2150-01-20')")
    con.execute("INSERT INTO mimiciv_hosp.d_labitems (itemid, label) VALUES (50983, 'Sodium')")
    rows = [  # a duplicate re-stored copy, an out-of-window row, a value stored as text
        (1, "2150-01-02 06:00", "2150-01-02 07:00", "140", 140.0),
        (2, "2150-01-02 06:00", "2150-01-02 09:00", "140", 140.0),
        (3, "2150-01-25 06:00", "2150-01-25 07:00", "150", 150.0),
        (4, "2150-01-05 06:00", "2150-01-05 07:00", "1,3E2 H", None),
    ]
    con.executemany("INSERT INTO mimiciv_hosp.labevents (labevent_id, subject_id, hadm_id, itemid, charttime, "
                    "storetime, value, valuenum, valueuom) VALUES (?, 10018328, 26706939, 50983, ?, ?, ?, ?, "
                    "'mEq/L')", rows)
    assert con.execute(DRAFT).fetchall() == [(150.0,)]  # the credulous reading: the out-of-window row
    assert con.execute(sql).fetchall() == [(1.3,)]  # in window, parsed text ("1,3" → 1.3)


def test_pushdown_reads_item_ids_from_literal_concept_tables() -> None:
    """``JOIN (VALUES …) cpt … WHERE cpt.concept = 'x'`` (or a CTE of VALUES) restricts the item ids;
    an outer join does not."""
    inline = ("SELECT avg(e.valuenum) FROM mimiciv_hosp.labevents e JOIN (VALUES ('creatinine', 50912), "
              "('potassium', 50971), ('potassium', 52610)) AS cpt(concept, itemid) ON cpt.itemid = e.itemid "
              "WHERE cpt.concept = 'potassium'")
    cte = ("WITH names(itemid, lab) AS (SELECT * FROM (VALUES (50912, 'creatinine'), (50971, 'potassium')) AS v) "
           "SELECT min(e.valuenum) FROM mimiciv_hosp.labevents e JOIN names n ON n.itemid = e.itemid "
           "WHERE n.lab = 'creatinine'")
    outer = inline.replace("JOIN (VALUES", "LEFT JOIN (VALUES")
    expected = {inline: "r.itemid IN (50971, 52610)", cte: "r.itemid IN (50912)", outer: None}
    for sql, where in expected.items():
        tree = sqlglot.parse_one(sql, read="duckdb")
        table = next(t for t in tree.find_all(sqlglot.exp.Table) if t.name == "labevents")
        assert pushdown(table, TABLE_RULES["labevents"]) == where, sql


def test_evidence_rows_ignore_comparisons_with_the_entitys_other_rows() -> None:
    """"How many moves into another unit": every transfer row of the admission is evidence, whether or not it
    changed unit — zero moves over rows that exist is a count of 0, not missing records. A subquery naming a
    cohort (not correlated with the row) still says which rows the question is about."""
    from ehrgym.agents.skeptic_sql import evidence_select

    draft = """SELECT count(*) FROM mimiciv_hosp.transfers e
    JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
    WHERE a.hadm_id = 20724572 AND e.eventtype = 'transfer'
      AND e.careunit IS DISTINCT FROM (SELECT p.careunit FROM mimiciv_hosp.transfers p
                                       WHERE p.hadm_id = e.hadm_id AND p.intime < e.intime
                                       ORDER BY p.intime DESC LIMIT 1)
      AND e.hadm_id IN (SELECT hadm_id FROM mimiciv_hosp.diagnoses_icd WHERE icd_code LIKE 'A41%')"""
    ev = evidence_select(analyse_draft(draft).tree, "transfers")
    assert ev is not None
    where = ev.args["where"].sql(dialect="duckdb")
    assert "careunit" not in where  # the correlated comparison is gone
    assert "a.hadm_id = 20724572" in where and "e.eventtype = 'transfer'" in where
    assert "diagnoses_icd" in where  # the cohort's uncorrelated subquery stays


def _grafted(tree: sqlglot.exp.Expression, relation, only: str | None = None) -> str:
    """``rewrite_tables`` the direct way (its form before text placeholders): a copy of the draft with each evidence
    table replaced by the relation's parsed subquery."""
    from ehrgym.agents.skeptic_sql import _mimic_table

    new = tree.copy()
    for t in list(new.find_all(sqlglot.exp.Table)):
        name = _mimic_table(t)
        rule = TABLE_RULES.get(name or "")
        if rule is None or (only is not None and name != only):
            continue
        alias = t.alias or t.name
        sub = sqlglot.parse_one(f"SELECT * FROM {relation(rule, pushdown(t, rule))} AS {alias}",
                                read="duckdb").find(sqlglot.exp.From).this
        t.replace(sub)
    return new.sql(dialect="duckdb")


def test_rewrite_tables_writes_what_grafting_the_relations_writes_and_leaves_the_draft_as_it_was() -> None:
    drafts = [DRAFT,
              "SELECT count(*) FROM mimiciv_hosp.labevents JOIN mimiciv_icu.icustays i USING (hadm_id) "
              "JOIN mimiciv_icu.inputevents ie ON ie.stay_id = i.stay_id WHERE labevents.itemid = 50912 "
              "AND ie.itemid IN (221906, 221289)",
              "SELECT max(x.valuenum) FROM (SELECT * FROM labevents WHERE subject_id = 10000032) x "
              "WHERE x.valuenum > (SELECT avg(valuenum) FROM labevents l2 WHERE l2.itemid = 50912)"]
    for draft in drafts:
        tree = analyse_draft(draft).tree
        before = tree.sql(dialect="duckdb")
        for only in (None, "labevents"):
            for drop in (False, True):
                def relation(r, w, drop=drop):
                    return clean_relation(r, drop, (50912,), w)
                got = rewrite_tables(tree, relation, only=only)
                assert got == _grafted(tree, relation, only=only), (draft, only, drop)
                assert tree.sql(dialect="duckdb") == before  # restored
        assert "__ehrgym_relation_" not in got

    calls = []

    def failing(r, w):  # the second evidence table's relation fails, after the first was swapped
        calls.append(r.table)
        if len(calls) == 2:
            raise RuntimeError("relation failed")
        return clean_relation(r, False, (), w)
    tree = analyse_draft(drafts[1]).tree
    before = tree.sql(dialect="duckdb")
    try:
        rewrite_tables(tree, failing)
    except RuntimeError:
        pass
    assert len(calls) == 2
    assert tree.sql(dialect="duckdb") == before  # restored after a failure too
