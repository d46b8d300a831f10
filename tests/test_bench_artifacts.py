"""Noise must not be detectable from how the overlay stores it.

Per subtype, a depth-3 decision tree on storage features (id rank, scan position, NULL pattern,
decimals, text form, time precision) must not tell overlay-touched rows from base rows of the
same table and item better than chance on held-out tasks (balanced accuracy ≤ 0.55). The overlay
mechanics (scan order, dense ids) and the tree itself are tested directly as well.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from ehrgym.bench.artifacts import BAR, DepthLimitedTree, RowSet, balanced_accuracy, collect, held_out_accuracy
from ehrgym.bench.build import build_benchmark
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.dataset import load_benchmark
from ehrgym.bench.templates import all_templates
from ehrgym.db.connect import attach_base
from ehrgym.db.items import item_reference
from ehrgym.db.overlay import Overlay, OverlaySession, TableEdit, fetch_rows

ROW_SUBTYPES = ("duplicate_records", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
                "missing_value", "encoding_corruption")
# subtypes whose touched rows hold a NULL number: their rows are compared with the base's own rows of the same
# content (see ehrgym.bench.artifacts): a missing number with the hospital's results without a number (labevents'
# reference items carry MIMIC's NULL results, chartevents and microbiologyevents their own, see ehrgym.db.synth),
# a number stored only as text with the hospital's own numbers stored as text (labevents, chartevents)
NULL_SUBTYPES = {"missing_value": ("labevents", "chartevents", "microbiologyevents"),
                 "encoding_corruption": ("labevents", "chartevents")}
# none among the judged tables: encoding_corruption copies the base's own numbers stored as text, and columns
# MIMIC-IV never leaves NULL get no missing_value (test_missing_value_only_where_the_base_has_nulls_of_its_own)
KNOWN_LEAKS: dict[str, str] = {}
# none at the bar: encoding_corruption was (0.552 on this fixture) while it still went to MICs stored as text with
# no number, a row of no base kind; without them it measures 0.484 here and 0.474 on the drafted sample
UNDECIDED: dict[str, str] = {}


@pytest.fixture(scope="module")
def built(synth_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("artifacts") / "b"
    cfg = BuildConfig("artifacts", 600, oversample=4.0, min_candidates=24)
    # no card sections: the tests run the judge on the tasks themselves
    build_benchmark(synth_db, out, config=cfg, seed=11, progress=False, validity=[])
    return load_benchmark(out)


@pytest.fixture(scope="module")
def rowsets(built, synth_db):
    tasks = list(built.filter(variant="noise"))
    out = collect(synth_db, [t for t in tasks if t.noise is None or t.noise.subtype not in NULL_SUBTYPES], seed=3)
    tables = {t.id: t.evidence.table for t in all_templates()}
    null_tasks = [t for t in tasks if t.noise is not None and tables.get(t.template_id)
                  in NULL_SUBTYPES.get(t.noise.subtype, ())]
    out.update(collect(synth_db, null_tasks, seed=3))
    return out


@pytest.fixture(scope="module")
def session(synth_db):
    con = duckdb.connect()
    con.execute("SET threads = 1")
    attach_base(con, synth_db)
    yield OverlaySession(con)
    con.close()


def _base_has_null_numbers(db) -> bool:
    """The reference items carry both kinds of result without a parsed number: none at all, and one kept as text."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table in ("mimiciv_hosp.labevents", "mimiciv_icu.chartevents"):
            items = ", ".join(str(i) for i, r in item_reference().items() if r.table == table.split(".")[1])
            blank, text = con.execute(
                f"SELECT count(*) FILTER (WHERE NOT coalesce(regexp_matches(value, '[0-9]'), FALSE)), "
                f"count(*) FILTER (WHERE regexp_matches(value, '[0-9]')) FROM {table} "
                f"WHERE valuenum IS NULL AND itemid IN ({items})").fetchone()
            if not (blank and text):
                return False
        return con.execute("SELECT count(*) FROM mimiciv_hosp.microbiologyevents WHERE ab_itemid IS NOT NULL "
                           "AND dilution_value IS NULL").fetchone()[0] > 0
    finally:
        con.close()


@pytest.mark.parametrize("subtype", [pytest.param(s, marks=pytest.mark.xfail(reason=KNOWN_LEAKS[s], strict=True))
                                     if s in KNOWN_LEAKS else
                                     pytest.param(s, marks=pytest.mark.xfail(reason=UNDECIDED[s], strict=False))
                                     if s in UNDECIDED else s for s in ROW_SUBTYPES])
def test_overlay_rows_are_not_detectable_from_storage(subtype, rowsets, synth_db):
    if subtype in NULL_SUBTYPES:
        assert _base_has_null_numbers(synth_db), "the reference items must carry MIMIC-like results without a number"
    if subtype not in rowsets:
        pytest.skip(f"no {subtype} pairs with inserted rows in this build")
    rows = rowsets[subtype]
    assert rows.labels.sum() >= 5 if subtype in NULL_SUBTYPES else rows.labels.sum() >= 10, \
        f"too few touched rows to judge {subtype}"
    assert (rows.labels == 0).sum() >= rows.labels.sum(), f"too few base rows to compare {subtype} with"
    acc = held_out_accuracy(rows)
    assert acc <= BAR, f"{subtype}: a depth-3 tree tells overlay rows from base rows at {acc:.3f}"


DRAFTS_PER_PAIR = 20
"""Pairs drafted per (template, subtype) for the larger sample of the NULL subtypes: a test-sized build holds
only a few dozen of their touched rows, too thin to judge at 0.55 (its held-out accuracy swings by ±0.1)."""


@pytest.fixture(scope="module")
def drafted_tasks(synth_db):
    """Noisy tasks of the NULL subtypes on every judged table, drafted straight through the builder."""
    import types

    from ehrgym.bench.builder import Builder
    from ehrgym.bench.configs import get_config
    from ehrgym.bench.noise import INJECTORS

    def judged(t, s):
        return s in t.noise and INJECTORS[s].applies(t) and t.evidence.table in NULL_SUBTYPES[s]

    temps = [t for t in all_templates() if any(judged(t, s) for s in NULL_SUBTYPES)]
    b = Builder(synth_db, get_config("small"), seed=5, progress=False, templates=temps)
    tasks = []
    try:
        for t in temps:
            b._draw(t, 80)
            for s in NULL_SUBTYPES:
                if not judged(t, s):
                    continue
                got = 0
                for c in b.candidates[t.id]:
                    d = b.attempt(t, s, c)
                    if d is None:
                        continue
                    tasks.append(types.SimpleNamespace(task_id=f"{t.id}:{s}:{c.index}", variant="noise",
                                                       noise=d.noise["noise"], template_id=t.id, meta=d.noise["meta"]))
                    got += 1
                    if got >= DRAFTS_PER_PAIR:
                        break
    finally:
        b.close()
    return tasks


@pytest.fixture(scope="module")
def drafted(drafted_tasks, synth_db):
    return collect(synth_db, drafted_tasks, seed=3, per_subtype=10_000)


def test_inserted_rows_are_rows_the_hospital_could_store(built, synth_db):
    """A row given another category holds that category's companions as some base row does (an organism under its own
    org_itemid, a DRG description under its own code, a diagnosis code under its own ICD version), and a copied
    specimen is a whole specimen under one new id, and a result copied to another time is another draw (a new
    specimen id; a culture copied whole, in another organism that organism's own culture). Before, one query per kind
    found noisy twins: an organism under another organism's item id, a copy of one susceptibility row as a specimen of
    its own (no base specimen is one), a specimen drawn at two times, a culture's store day beside a store time on
    the next."""
    from collections import Counter

    from ehrgym.bench.noise.base import LINK_IDS
    from ehrgym.bench.noise.companions import COMPANIONS, GROUP_IDS, incoherent_rows

    con = duckdb.connect()
    con.execute("SET threads = 1")
    attach_base(con, synth_db)
    cache: dict = {}
    breaks: list[str] = []
    exercised: Counter = Counter()
    category_tables = {table for table, _ in COMPANIONS}
    for task in built:
        for overlay in (task.noise.overlay if task.noise else None, task.decoy,
                        task.background if task.variant == "clean" else None):
            if overlay is None or overlay.is_empty:
                continue
            moved = task.pair_id.split(":")[1] == "out_of_window" and overlay is not task.background
            breaks += [f"{task.task_id}: {b}" for b in incoherent_rows(con, overlay, cache=cache)
                       if moved or not _one_result_draw(b)]
            for table, edit in overlay.merged().items():
                if table in category_tables and edit.insert_rows and task.noise and task.noise.subtype in (
                        "conflicting_records", "out_of_window"):
                    exercised["category rows"] += len(edit.insert_rows)
                if table in GROUP_IDS and edit.insert_rows and task.noise and \
                        task.noise.subtype == "duplicate_records":
                    exercised["copied specimens"] += 1
                if table in LINK_IDS and edit.insert_rows and task.noise and task.noise.subtype == "out_of_window":
                    exercised["moved results"] += len(edit.insert_rows)
                    exercised["moved cultures"] += table == "microbiologyevents"
    con.close()
    assert not breaks, f"{len(breaks)} inserted rows no base row looks like, e.g. {breaks[:3]}"
    assert exercised["category rows"] >= 20 and exercised["copied specimens"] >= 3, exercised
    assert exercised["moved results"] >= 10 and exercised["moved cultures"] >= 2, exercised


def _one_result_draw(brk: str) -> bool:
    return brk.startswith("labevents: new specimen_id") and " holds 1 rows " in brk


@pytest.mark.xfail(strict=True, reason="known, not fixed (README): the extra result of an implausible or missing "
                                       "value a minute from its source is a laboratory draw of one result; copied "
                                       "with its whole draw, missing values read 0.552 against base rows here")
def test_extra_results_a_minute_away_are_whole_draws(built, synth_db):
    from ehrgym.bench.noise.companions import incoherent_rows

    con = duckdb.connect()
    con.execute("SET threads = 1")
    attach_base(con, synth_db)
    cache: dict = {}
    found = [b for task in built if task.noise and task.noise.subtype in ("implausible_value", "missing_value")
             for b in incoherent_rows(con, task.noise.overlay, cache=cache) if _one_result_draw(b)]
    con.close()
    assert not found, f"{len(found)} one-result draws, e.g. {found[:2]}"


@pytest.mark.parametrize("subtype", [pytest.param(s, marks=pytest.mark.xfail(reason=UNDECIDED[s], strict=False))
                                     if s in UNDECIDED else s for s in sorted(NULL_SUBTYPES)])
def test_null_subtypes_are_not_detectable_on_a_larger_sample(subtype, drafted):
    rows = drafted[subtype]
    assert rows.labels.sum() >= 60, f"too few touched rows to judge {subtype}"
    assert (rows.labels == 0).sum() >= rows.labels.sum(), f"too few base rows to compare {subtype} with"
    # one tree per table: the judged tables mix touched and base rows in different shares
    acc = held_out_accuracy(rows, by_table=True)
    assert acc <= BAR, f"{subtype}: a depth-3 tree tells overlay rows from base rows at {acc:.3f}"


def test_the_judge_catches_rows_stored_away_from_their_patient(drafted_tasks, synth_db):
    # the base rows beside a task are its patients' own and the patients nearest them in the scan: an overlay
    # that appended its rows at the end of the table must still be caught (it is what the judge is for)
    import dataclasses
    import types

    from ehrgym.db.schema import table_spec

    con = duckdb.connect(str(synth_db), read_only=True)
    last = {t: con.execute(f"SELECT max(rowid) FROM {table_spec(t).qualified}").fetchone()[0]
            for t in NULL_SUBTYPES["missing_value"]}
    con.close()
    appended = []
    for t in drafted_tasks:
        if t.noise.subtype != "missing_value":
            continue
        edits = tuple(dataclasses.replace(e, insert_after=tuple(last[e.table] for _ in e.insert_rows))
                      for e in t.noise.overlay.edits)
        noise = types.SimpleNamespace(subtype=t.noise.subtype, overlay=dataclasses.replace(t.noise.overlay, edits=edits))
        appended.append(types.SimpleNamespace(**{**vars(t), "noise": noise}))
    rows = collect(synth_db, appended, seed=3, per_subtype=10_000)["missing_value"]
    acc = held_out_accuracy(rows, by_table=True)
    assert acc > 0.8, f"rows appended at the end of the table judged at {acc:.3f}"


def test_admission_evidence_is_compared_with_inpatient_rows_only():
    from ehrgym.bench.artifacts import comparison_filter

    names = ("labevent_id", "subject_id", "hadm_id", "itemid", "valuenum")
    inpatient = ({"subject_id": 1, "hadm_id": 7, "itemid": 50912},)
    assert comparison_filter(names, None, inpatient) == "(TRUE AND hadm_id IS NOT NULL)"
    assert comparison_filter(names, "valuenum IS NULL", inpatient) == "(valuenum IS NULL AND hadm_id IS NOT NULL)"
    # a clinic row among the touched ones (or a table without admissions): every row of the group is comparable
    assert comparison_filter(names, None, inpatient + ({"subject_id": 1, "hadm_id": None},)) == "TRUE"
    assert comparison_filter(("subject_id", "itemid"), None, inpatient) == "TRUE"
    # a culture's rows of one kind (grown, susceptibility) are compared with the base's rows of that kind
    micro = ("subject_id", "hadm_id", "org_name", "ab_itemid")
    grown = ({"subject_id": 1, "hadm_id": 2, "org_name": "E. COLI", "ab_itemid": None},
             {"subject_id": 1, "hadm_id": 2, "org_name": "E. COLI", "ab_itemid": 90})
    assert comparison_filter(micro, None, grown, "microbiologyevents") == \
        "((TRUE AND org_name IS NOT NULL) AND hadm_id IS NOT NULL)"
    assert comparison_filter(micro, None, grown[1:], "microbiologyevents") == \
        "(((TRUE AND org_name IS NOT NULL) AND ab_itemid IS NOT NULL) AND hadm_id IS NOT NULL)"
    assert comparison_filter(micro, None, grown, "labevents") == "(TRUE AND hadm_id IS NOT NULL)"


def test_nearest_patients_stand_beside_the_task_in_the_scan():
    from ehrgym.bench.artifacts import _nearest_patients

    per = {"far": [900, 950], "near": [105, 400], "mid": [300]}
    assert _nearest_patients(per, [100, 110], np.random.default_rng(0)) == ["near", "mid", "far"]
    # no untouched rows of the task's patients: any order, drawn from the stream
    assert sorted(_nearest_patients(per, [], np.random.default_rng(0))) == ["far", "mid", "near"]


def test_missing_value_only_where_the_base_has_nulls_of_its_own(synth_db):
    from ehrgym.bench.noise import INJECTORS
    from ehrgym.bench.noise.value import NEVER_NULL

    con = duckdb.connect(str(synth_db), read_only=True)
    try:
        for t in all_templates():
            ev = t.evidence
            if (ev.table, ev.value_col) in NEVER_NULL and INJECTORS["missing_value"].applies(t):
                from ehrgym.db.schema import table_spec

                where = " AND drg_type = 'APR'" if ev.table == "drgcodes" else ""
                nulls = con.execute(f"SELECT count(*) FROM {table_spec(ev.table).qualified} "
                                    f"WHERE {ev.value_col} IS NULL{where}").fetchone()[0]
                assert nulls > 0, f"{t.id}: {ev.table}.{ev.value_col} is never NULL in the base"
    finally:
        con.close()


def test_the_classifier_finds_a_real_artifact():
    # the same machinery must catch what it is meant to catch: touched rows with an odd decimal count
    rng = np.random.default_rng(0)
    n = 400
    x = rng.normal(size=(n, 9))
    y = (np.arange(n) % 4 == 0).astype(int)
    x[:, 5] = np.where(y == 1, 3, rng.integers(0, 2, n))
    rows = RowSet(x, y, np.arange(n) // 4)
    assert held_out_accuracy(rows) > 0.95
    assert balanced_accuracy(y, DepthLimitedTree(1).fit(x, y).predict(x)) > 0.95


@pytest.mark.parametrize("segments", [64, 1], ids=["rowid-ranges", "sorted-span"])
def test_inserted_rows_scan_where_their_anchor_is(session, segments, monkeypatch):
    from ehrgym.db import overlay

    monkeypatch.setattr(overlay, "SEGMENTS", segments)
    con = session.con
    base = [r[0] for r in con.execute("SELECT labevent_id FROM base.mimiciv_hosp.labevents").fetchall()]
    anchors = (5, 9, 9, len(base) - 1)
    rows = tuple(dict(fetch_rows(con, "labevents", [a], "base")[a]) for a in anchors)
    edit = TableEdit("labevents", (9,), rows, anchors, "labevent_id")
    session.apply(Overlay((edit,)))
    got = [r[0] for r in con.execute("SELECT labevent_id FROM mimiciv_hosp.labevents").fetchall()]
    # dense ids stay a gap-free sequence in scan order, inserted rows included; nothing above the new count
    assert got == list(range(base[0], base[0] + len(base) + 3))
    # the copies sit right after their anchors (the replaced row 9 takes its own place)
    vals = [r[0] for r in con.execute("SELECT charttime FROM mimiciv_hosp.labevents").fetchall()]
    times = [r["charttime"] for r in rows]
    assert str(vals[6]) == str(times[0]) and str(vals[9]) == str(times[1]) and str(vals[10]) == str(times[2])
    assert str(vals[-1]) == str(times[3])
    session.clear()
    assert [r[0] for r in con.execute("SELECT labevent_id FROM mimiciv_hosp.labevents").fetchall()] == base


@pytest.mark.parametrize("segments", [64, 1], ids=["rowid-ranges", "sorted-span"])
def test_dense_ids_stay_gap_free_under_many_deletions_and_anchors(session, segments, monkeypatch):
    """A background's hundreds of deletions and dozens of anchors: dense ids stay a gap-free sequence in scan order,
    and each rowid range of the view spells out only the id moves inside it (not every move in every range)."""
    from ehrgym.db import overlay

    monkeypatch.setattr(overlay, "SEGMENTS", segments)
    con = session.con
    base = [r[0] for r in con.execute("SELECT labevent_id FROM base.mimiciv_hosp.labevents").fetchall()]
    rng = np.random.default_rng(11)
    deleted = tuple(sorted({int(r) for r in rng.integers(0, len(base), 300)}))
    anchors = (-1,) + tuple(sorted(int(a) for a in rng.integers(0, len(base), 40))) + (len(base) - 1,)
    rows = tuple({**fetch_rows(con, "labevents", [max(a, 0)], "base")[max(a, 0)],
                  "labevent_id": base[0] + a} for a in anchors)  # each stores its anchor's id
    edit = TableEdit("labevents", deleted, rows, anchors, "labevent_id")
    sql = overlay._view_sql(overlay.table_spec("labevents"), "base", edit)
    moves = len(overlay._id_shifts(edit))
    assert sql.count("THEN") - sql.count("CASE WHEN rowid <") <= moves + 2 * len(set(anchors)) + 2
    session.apply(Overlay((edit,)))
    try:
        got = [r[0] for r in con.execute("SELECT labevent_id FROM mimiciv_hosp.labevents").fetchall()]
        assert got == list(range(base[0], base[0] + len(base) - len(deleted) + len(rows)))
    finally:
        session.clear()


@pytest.mark.parametrize("segments", [64, 1], ids=["rowid-ranges", "sorted-span"])
def test_deleted_rows_leave_every_rowid_range_of_the_view(session, segments, monkeypatch):
    """Each rowid range of a view filters only the deletions inside it; the rows left are the base's minus the
    deleted ones, with the inserted rows after their anchors, whichever range a deletion falls in."""
    from ehrgym.db import overlay

    monkeypatch.setattr(overlay, "SEGMENTS", segments)
    con = session.con
    base = [r[0] for r in con.execute("SELECT labevent_id FROM base.mimiciv_hosp.labevents").fetchall()]
    last = len(base) - 1
    deleted = (0, 2, 5, 6, 41, 199, 200, 201, last - 1, last)
    anchors = (5, 40, 40, 200, last - 3)
    rows = tuple(dict(fetch_rows(con, "labevents", [a], "base")[a]) for a in anchors)
    session.apply(Overlay((TableEdit("labevents", deleted, rows, anchors, None),)))
    expected: list[int] = []
    for rowid, value in enumerate(base):
        if rowid not in deleted:
            expected.append(value)
        expected += [base[a] for a in anchors if a == rowid]
    assert [r[0] for r in con.execute("SELECT labevent_id FROM mimiciv_hosp.labevents").fetchall()] == expected
    session.clear()


def test_scan_order_is_the_same_with_several_threads(session):
    con = session.con
    rows = tuple(dict(fetch_rows(con, "labevents", [a], "base")[a]) for a in (100, 3000))
    session.apply(Overlay((TableEdit("labevents", (), rows, (100, 3000), "labevent_id"),)))
    try:
        con.execute("SET threads = 1")
        one = con.execute("SELECT labevent_id, charttime FROM mimiciv_hosp.labevents").fetchall()
        con.execute("SET threads = 4")
        four = con.execute("SELECT labevent_id, charttime FROM mimiciv_hosp.labevents").fetchall()
        assert one == four
    finally:
        con.execute("SET threads = 1")
        session.clear()


def test_copies_are_judged_against_their_originals():
    from ehrgym.bench.artifacts import _copies
    from ehrgym.bench.noise import INJECTORS

    assert INJECTORS["duplicate_records"].artifact_reference == "originals"
    # copies with their original's content: of each neighbouring pair of one content the second is the copy
    content = {3: "a", 4: "a", 7: "b", 8: "b", 9: "b"}
    assert _copies([3, 4, 7, 8, 9], content.__getitem__, ["a", "b"]) == ([4, 8], [3, 7])
    # copies re-stored later (content differs from the original): each is a copy, the row before it the original
    assert _copies([5, 12], {5: "x", 12: "y"}.__getitem__, ["x", "y"]) == ([5, 12], [4, 11])
    # a copied specimen follows its specimen as a block: the k-th copy's original is the specimen's k-th row
    block = {20: "p", 21: "q", 22: "r"}
    assert _copies([20, 21, 22], block.__getitem__, ["p", "q", "r"]) == ([20, 21, 22], [17, 18, 19])
    # a content with more rows than copies and no neighbouring pair: nothing is taken for a copy
    assert _copies([2, 6], {2: "z", 6: "z"}.__getitem__, ["z"]) == ([], [])


def test_the_judgement_does_not_depend_on_the_worker_processes(built, synth_db):
    tasks = list(built.filter(variant="noise"))
    one = collect(synth_db, tasks, seed=3, per_subtype=6)
    two = collect(synth_db, tasks, seed=3, per_subtype=6, workers=2)
    assert one.keys() == two.keys() and len(one) >= 3
    for sub in one:
        for field in ("features", "labels", "task", "table"):
            assert np.array_equal(getattr(one[sub], field), getattr(two[sub], field)), (sub, field)


def test_many_deletions_filter_through_a_tree_that_keeps_the_scan_order(session):
    """Hundreds of deleted rowids (a background's losses) are filtered by a search tree of CASE branches: the rows
    left are the base's minus the deleted ones, in the base's order, and every query reads what one literal
    ``NOT IN`` list gives (``benchmarks/bench_overlay.py`` times the two)."""
    from ehrgym.db import overlay

    con = session.con
    base = [r[0] for r in con.execute("SELECT labevent_id FROM base.mimiciv_hosp.labevents").fetchall()]
    deleted = tuple(sorted({int(r) for r in np.random.default_rng(5).integers(0, len(base), 600)}))
    edit = TableEdit("labevents", deleted, (), (), None)
    assert overlay._view_sql(overlay.table_spec("labevents"), "base", edit).count("CASE WHEN rowid <") >= 31
    session.apply(Overlay((edit,)))
    gone = set(deleted)
    expected = [v for rowid, v in enumerate(base) if rowid not in gone]
    query = ("SELECT itemid, count(*), round(sum(valuenum), 6), min(labevent_id) FROM mimiciv_hosp.labevents "
             "GROUP BY itemid ORDER BY itemid")
    try:
        assert [r[0] for r in con.execute("SELECT labevent_id FROM mimiciv_hosp.labevents").fetchall()] == expected
        tree = con.execute(query).fetchall()
        session.clear()
        con.execute(f"CREATE TEMP TABLE kept AS SELECT * FROM base.mimiciv_hosp.labevents "
                    f"WHERE rowid NOT IN ({', '.join(map(str, deleted))})")
        assert con.execute(query.replace("mimiciv_hosp.labevents", "kept")).fetchall() == tree
    finally:
        con.execute("DROP TABLE IF EXISTS kept")
        session.clear()


# ---------------------------------------------------------------- decoys (ehrgym.bench.decoys)

DECOYS_PER_SUBTYPE = 40
DECOYS_PER_TEMPLATE = 8  # spread over the subtype's templates, as a build spreads its pairs
ATTEMPTS_PER_SUBTYPE = 600


@pytest.fixture(scope="module")
def decoyed_twins(synth_db):
    """Both twins of pairs whose clean twin was served a decoy, drafted straight through the builder: a test-sized
    build serves a few dozen decoys over seven subtypes, too thin to judge each."""
    import types

    from ehrgym.bench.builder import Builder
    from ehrgym.bench.configs import get_config
    from ehrgym.bench.decoys import DECOYED
    from ehrgym.bench.noise import INJECTORS

    temps = [t for t in all_templates() if any(s in t.noise and INJECTORS[s].applies(t) for s in DECOYED)]
    b = Builder(synth_db, get_config("small"), seed=5, progress=False, templates=temps)
    twins = []
    try:
        for s in sorted(DECOYED):
            got = tried = 0
            for t in temps:
                if not (s in t.noise and INJECTORS[s].applies(t)):
                    continue
                if t.id not in b.candidates:
                    b._draw(t, 60)
                mine = 0
                for c in b.candidates[t.id]:
                    if mine >= DECOYS_PER_TEMPLATE or got >= DECOYS_PER_SUBTYPE or tried >= ATTEMPTS_PER_SUBTYPE:
                        break
                    tried += 1
                    d = b.attempt(t, s, c)
                    if d is None or "decoy" not in d.clean:
                        continue
                    pair = f"{t.id}:{s}:{c.index}"
                    twins.append(types.SimpleNamespace(task_id=pair + ":clean", pair_id=pair, variant="clean",
                                                       noise=None, decoy=d.clean["decoy"], template_id=t.id,
                                                       meta=d.clean["meta"]))
                    twins.append(types.SimpleNamespace(task_id=pair + ":noise", pair_id=pair, variant="noise",
                                                       noise=d.noise["noise"], template_id=t.id, meta=d.noise["meta"]))
                    mine += 1
                    got += 1
    finally:
        b.close()
    return twins


@pytest.fixture(scope="module")
def decoy_rowsets(decoyed_twins, synth_db):
    return (collect(synth_db, decoyed_twins, seed=3, per_subtype=10_000, side="decoy"),
            collect(synth_db, decoyed_twins, seed=3, per_subtype=10_000))


def _judged_subtypes(decoys: dict[str, RowSet]) -> list[str]:
    return [s for s, r in decoys.items() if r.labels.sum() >= 20]


def _pooled(sets: list[RowSet]) -> RowSet:
    return RowSet(np.concatenate([r.features for r in sets]), np.concatenate([r.labels for r in sets]),
                  np.concatenate([r.task for r in sets]),
                  np.concatenate([r.table if r.table is not None else np.full(len(r.labels), "") for r in sets]))


def _slack(rows: RowSet) -> float:
    """Two standard errors of a chance-level accuracy on these rows: a subtype judged on 40 rows a side swings by
    ±0.08 (measured: conflicting records 0.61 on 40 drafted decoys, 0.51 on 260)."""
    return 2 * 0.5 / np.sqrt(min(int(rows.labels.sum()), int((rows.labels == 0).sum())))


def test_noise_rows_are_not_told_from_decoy_rows_by_storage(decoy_rowsets):
    # the anomaly that changes the answer and the harmless one are written by the same injector: storage must not
    # tell them apart (the withdrawn implausible decoys made impossible the other way round read 0.665 on a 1k build)
    from ehrgym.bench.artifacts import noise_against_decoys

    decoys, noise = decoy_rowsets
    judged = _judged_subtypes(decoys)
    assert len(judged) >= 4, f"too few decoyed subtypes with rows to judge: {sorted(decoys)}"
    sets = {s: noise_against_decoys(noise[s], decoys[s]) for s in judged}
    pooled = held_out_accuracy(_pooled(list(sets.values())), by_table=True)
    assert pooled <= BAR, f"a depth-3 tree tells noise rows from decoy rows at {pooled:.3f} over {judged}"
    for s, rows in sets.items():
        acc = held_out_accuracy(rows)
        assert acc <= BAR + _slack(rows), f"{s}: noise rows told from decoy rows at {acc:.3f}"


def test_decoy_rows_are_stored_like_the_noise_they_copy(decoy_rowsets):
    # beside the base's rows a decoy is no easier to spot than its pair's noise (implausible minima sit at the bar
    # on both sides: an impossible value is on an extreme row, which the hospital flags like its own extreme rows)
    decoys, noise = decoy_rowsets
    judged = _judged_subtypes(decoys)
    pooled = held_out_accuracy(_pooled([decoys[s] for s in judged]), by_table=True)
    ref = held_out_accuracy(_pooled([noise[s] for s in judged]), by_table=True)
    assert pooled <= max(BAR, ref + 0.03), f"decoy rows told from base rows at {pooled:.3f} (their noise {ref:.3f})"
    for s in judged:
        acc, own = held_out_accuracy(decoys[s]), held_out_accuracy(noise[s])
        assert acc <= max(BAR, own) + _slack(decoys[s]), f"{s}: decoy rows told from base rows at {acc:.3f} " \
                                                           f"(its noise {own:.3f})"


def test_the_decoy_side_judges_only_clean_twins_decoys(decoyed_twins):
    from ehrgym.bench.artifacts import decoyed_pairs, judged_overlay

    clean = [t for t in decoyed_twins if t.variant == "clean"]
    noisy = [t for t in decoyed_twins if t.variant == "noise"]
    assert all(judged_overlay(t, "decoy")[0] == t.meta["decoy"]["subtype"] for t in clean)
    assert all(judged_overlay(t, "decoy") is None for t in noisy)  # a noisy twin is served no decoy
    assert all(judged_overlay(t, "noise") is None for t in clean)
    assert decoyed_pairs(decoyed_twins, 10_000) <= {t.pair_id for t in clean}
    with pytest.raises(ValueError, match="unknown side"):
        judged_overlay(clean[0], "background")


@pytest.mark.parametrize("segments", [64, 1], ids=["rowid-ranges", "sorted-span"])
def test_inserted_cells_read_back_exactly_as_stored(session, segments, monkeypatch):
    """Inserted rows are one VALUES list of text cells cast per column: every cell reads back as the overlay stores
    it (shortest-repr floats to the last bit, quotes, NULLs, a float in an integer column rounded as a cast would),
    whatever the rows at one anchor hold side by side."""
    from ehrgym.db import overlay

    monkeypatch.setattr(overlay, "SEGMENTS", segments)
    con = session.con
    template = fetch_rows(con, "labevents", [3], "base")[3]
    cells = [(0.1 + 0.2, "it's 7.2", 5), (1e-300, None, 6), (123456789.123456, "1,2", 7), (None, "x H", 8.0),
             (2.5e20, "", 9), (-0.0, "'; DROP TABLE x; --", 10)]
    rows = tuple({**template, "subject_id": -7, "valuenum": v, "value": s, "labevent_id": i} for v, s, i in cells)
    session.apply(Overlay((TableEdit("labevents", (), rows, (3, 3, 3, 20, 20, 40)),)))
    got = con.execute("SELECT valuenum, value, labevent_id FROM mimiciv_hosp.labevents WHERE subject_id = -7").fetchall()
    assert got == [(v, s, round(i)) for v, s, i in cells]  # in the order stored
    assert str(got[-1][0]) == "-0.0" and got[0][0] == 0.30000000000000004
    session.clear()


def test_a_group_larger_than_the_window_is_read_around_the_tasks_rows(built, synth_db, monkeypatch):
    # an item's rows beyond MAX_ROWS_PER_GROUP are read as the window of its scan around the task's patients: a
    # limit from the top of the scan once skipped every task whose patient came later (29 of 99 chartevents tasks
    # of the 1k card)
    import ehrgym.bench.artifacts as artifacts

    tasks = [t for t in built.filter(variant="noise") if t.noise is not None
             and any(e.insert_rows for e in t.noise.overlay.edits)][:80]
    wanted = [("noise", t) for t in tasks]
    whole = artifacts._collect_tasks(str(synth_db), wanted, 3)
    monkeypatch.setattr(artifacts, "MAX_ROWS_PER_GROUP", 500)
    windowed = artifacts._collect_tasks(str(synth_db), wanted, 3)
    judged = {k for k, v in whole.items() if v[0]}
    assert len(judged) >= 40
    assert judged == {k for k, v in windowed.items() if v[0]}
    assert all(sum(windowed[k][1]) == sum(whole[k][1]) for k in judged)  # the same touched rows found

    def touched(got):  # the touched rows' features, ranks included: taken in the whole group either way
        return sorted(tuple(round(x, 9) for x in f) for f, label in zip(got[0], got[1]) if label)

    # ranks within the window put a task's rows in its middle (a 10k build's missing values: 0.769 on rank alone)
    assert all(touched(windowed[k]) == touched(whole[k]) for k in judged)


def test_the_window_is_the_scan_slice_around_the_patient(session):
    # under an overlay that re-sends a patient's rows (the view sorts its span), the window is the scan's slice and
    # the patient's rows read from it with a filter come in scan order: a window as a subquery with the filter
    # outside returned them reordered on the 1k card (duplicate records in outputevents)
    from ehrgym.bench import artifacts

    con = session.con
    table, where, vals = "mimiciv_icu.chartevents", " WHERE itemid IN (?)", [220045]
    session.apply(Overlay())
    plain = con.execute(f"SELECT rowid, subject_id FROM base.{table}{where}", vals).fetchall()
    middle = len(plain) // 2
    patients = sorted({s for _, s in plain[middle:middle + 400]})[:3]  # neighbours in the scan
    own = sorted(r for p in patients for r in [r for r, s in plain if s == p][:6])
    rows = fetch_rows(con, "chartevents", own, "base")
    edit = TableEdit("chartevents", (), tuple(rows[r] for r in own), tuple(own), None)
    session.apply(Overlay((edit,)))
    scan = con.execute(f"SELECT subject_id, charttime, valuenum FROM {table}{where}", vals).fetchall()
    at = [i for i, r in enumerate(scan) if r[0] in patients]
    size = 50 + at[-1] - at[0] + 1
    assert len(scan) > 2 * size
    original = artifacts.MAX_ROWS_PER_GROUP
    try:
        artifacts.MAX_ROWS_PER_GROUP = size
        cache: artifacts.GroupCache = {}
        read = artifacts._group_window(con, table, where, vals, set(patients), "base", edit, cache)
        source, cond, args = read.source, read.where, read.args
        assert len(cache) == 1  # where the group's rows stand in the base, kept for the next task reading it
        assert read.total == len(scan)  # the group's size as served (18 rows re-sent)
        again = con.execute(f"SELECT * FROM {source}{cond}", args).fetchall()
        artifacts._group_window(con, table, where, vals, set(patients), "base", edit, cache)
        assert con.execute(f"SELECT * FROM {source}{cond}", args).fetchall() == again
    finally:
        artifacts.MAX_ROWS_PER_GROUP = original
    window = con.execute(f"SELECT subject_id, charttime, valuenum FROM {source}{cond}", args).fetchall()
    start = scan.index(window[0])
    assert len(window) == size and scan[start:start + size] == window and start == read.offset
    mine = [r for r in scan if r[0] in patients]
    assert [r for r in window if r[0] in patients] == mine
    assert con.execute(f"SELECT subject_id, charttime, valuenum FROM {source}{cond} AND subject_id IN (?, ?, ?)",
                       args + patients).fetchall() == mine
    session.apply(Overlay())


def test_the_card_judges_a_uniform_sample_of_each_subtypes_tasks(built):
    # the first tasks in id order were the alphabetically first templates': the 1k card judged implausible values
    # on diagnoses and encounters templates alone
    from collections import Counter

    from ehrgym.bench.artifacts import _chosen

    tasks = list(built.filter(variant="noise"))
    everything = _chosen(tasks, 10_000, "noise")
    checked = 0
    for sub, group in everything.items():
        intents = Counter(t.intent for t in group)
        if len(group) < 40 or len(intents) < 2:
            continue
        sample = _chosen(tasks, len(group) // 2, "noise")[sub]
        got = Counter(t.intent for t in sample)
        for intent, n in intents.items():
            if n >= len(group) // 4:
                assert got[intent] >= n // 4, (sub, intent, n, got)
        checked += 1
    assert checked >= 2


def _edit_everywhere(con, table: str, rowids: list[int], dense: str | None) -> TableEdit:
    """Deletions and insertions before the first row, after the last (when the table is not densely numbered), at
    deleted rows, at kept rows, several at one anchor, and at more anchors than a view cuts into segments."""
    from ehrgym.db.overlay import END, SEGMENTS

    picked = rowids[1:: max(1, len(rowids) // (3 * SEGMENTS))][: 3 * SEGMENTS]
    deleted = tuple(picked[::3])
    anchors = [-1, picked[0], picked[0], *picked[1::2]] + ([] if dense else [END, END])
    rows = fetch_rows(con, table.split(".")[-1], sorted(set(a for a in anchors if a >= 0) | {rowids[0]}), "base")
    copies = tuple(rows[a if a >= 0 else rowids[0]] for a in anchors)
    return TableEdit(table.split(".")[-1], deleted, copies, tuple(anchors), dense)


@pytest.mark.parametrize("table,dense", [("mimiciv_icu.chartevents", None), ("mimiciv_hosp.labevents", "labevent_id")])
def test_bounded_views_cut_the_served_scan_into_its_slices(session, table, dense):
    # the card's judge reads a large group's window as the slice of base rowids it spans: slices cut anywhere
    # (at deleted rows, at anchors, between them) must add up to the view's own scan, inserted rows where it serves them
    from ehrgym.db.overlay import bounded_view_sql
    from ehrgym.db.schema import table_spec

    con = session.con
    session.apply(Overlay())
    rowids = [r for (r,) in con.execute(f"SELECT rowid FROM base.{table} ORDER BY 1").fetchall()]
    edit = _edit_everywhere(con, table, rowids, dense)
    spec = table_spec(table)
    assert con.execute(f"SELECT * FROM ({bounded_view_sql(spec, 'base', None, rowids[5], rowids[40])})").fetchall() \
        == con.execute(f"SELECT * FROM base.{table} WHERE rowid BETWEEN ? AND ?", [rowids[5], rowids[40]]).fetchall()
    session.apply(Overlay((edit,)))
    served = con.execute(f"SELECT * FROM {table}").fetchall()
    assert len(served) == len(rowids) - len(edit.delete_rowids) + len(edit.insert_rows)
    cuts = sorted({edit.delete_rowids[0], edit.insert_after[1], edit.insert_after[3] - 1, edit.insert_after[-3] + 1,
                   rowids[len(rowids) // 2]})
    bounds = list(zip([None] + [c + 1 for c in cuts], cuts + [None]))
    slices = [con.execute(f"SELECT * FROM ({bounded_view_sql(spec, 'base', edit, a, b)})").fetchall()
              for a, b in bounds]
    assert all(slices) and [r for part in slices for r in part] == served
    session.apply(Overlay())


@pytest.mark.parametrize("table,dense", [("mimiciv_icu.chartevents", None), ("mimiciv_hosp.labevents", "labevent_id")])
def test_a_window_read_from_its_slice_is_the_served_scan_there(session, table, dense):
    # at every offset, the window located from the group's base rowids and the edit's anchors (``scan_slice``) is
    # the served scan's rows from that offset on: the first row, rows inserted before and after it, the last ones
    from ehrgym.db.overlay import bounded_view_sql, scan_slice
    from ehrgym.db.schema import table_spec

    con = session.con
    session.apply(Overlay())
    item = con.execute(f"SELECT itemid FROM base.{table} GROUP BY 1 ORDER BY abs(count(*) - 400), 1 LIMIT 1"
                       ).fetchone()[0]  # a group small enough to read the window at every offset
    where = " WHERE itemid IN (?)"
    rowids = [r for (r,) in con.execute(f"SELECT rowid FROM base.{table}{where} ORDER BY 1", [item]).fetchall()]
    edit = _edit_everywhere(con, table, rowids, dense)
    session.apply(Overlay((edit,)))
    served = con.execute(f"SELECT * FROM {table}{where}", [item]).fetchall()
    size = max(7, len(served) // 9)
    kept = np.array([r for r in rowids if r not in set(edit.delete_rowids)], dtype=np.int64)
    for lo in range(len(served)):
        first, last, skip = scan_slice(kept, edit, lo, size)
        got = con.execute(f"SELECT * FROM ({bounded_view_sql(table_spec(table), 'base', edit, first, last)}) AS s"
                          f"{where} LIMIT {size} OFFSET {skip}", [item]).fetchall()
        assert got == served[lo:lo + size], lo
    session.apply(Overlay())
