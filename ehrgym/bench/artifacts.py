"""Can noise be told from how the overlay stores it? A per-subtype storage-artifact classifier.

For every noisy task whose overlay inserts rows, the shadowed table is scanned (the rows of the
same item/drug as the inserted ones, in scan order; an item of more than MAX_ROWS_PER_GROUP rows as the window of its
scan around the task's patients) and each row described by storage features
only — id rank, scan-position rank, their difference, NULL pattern, number of decimals, text
form, time precision — beside untouched rows of the same patients, table and item (for noise whose content is a missing number,
untouched rows without a number: the hospital's own NULLs; for a number stored only as text, the hospital's own
numbers stored as text; for copies — ``Injector.artifact_reference`` "originals" — the rows they copy,
so that the tree sees how a copy is stored, not which patients a cohort copies). A depth-3 decision tree (balanced class weights) learns to tell the rows the
overlay touched from the base rows of the same table and item; it is scored on held-out tasks
(5 folds by the patient each row belongs to — one patient's rows, touched by tasks of several templates or
cohorts, would otherwise sit in training and held-out folds alike and let the tree recognise the rows themselves
by their scan position, see ``_fold_key``; at most MAX_TOUCHED_CONTENT rows compared by content are judged per
task). Chance is 0.5 balanced accuracy; the benchmark's bar is 0.55.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ehrgym.bench.noise import get_injector
from ehrgym.bench.noise.value import RESULT_ROWS
from ehrgym.bench.noise.values import FLAG_COLUMNS, decimals_of, value_text
from ehrgym.bench.task import Task
from ehrgym.bench.templates import all_templates
from ehrgym.db.overlay import (Overlay, OverlaySession, TableEdit, bounded_view_sql, overlay_connection, scan_slice,
                               to_json_value)
from ehrgym.db.schema import table_spec

FEATURES = ("id_rank", "position_rank", "id_minus_position", "null_cells", "value_null", "decimals",
            "text_form", "flag_disagrees", "time_seconds", "time_minutes")
GROUP_COLUMNS = ("itemid", "drug", "medication", "test_itemid", "spec_itemid", "icd_code", "drg_type")
MAX_ROWS_PER_GROUP = 20000
"""Rows of a group (one item's rows in scan order) read around a task's rows: a larger group is read as the window of
this many rows of its scan centred on the task's patients (a limit from the top of the scan once skipped every task
whose patient came later: 29 of the 99 chartevents tasks of the 1k card, whose vital signs run to 34,000 rows an item).
"""
MAX_TOUCHED_CONTENT = 3
"""Touched rows judged per task when they are compared with the base's own rows of the same content (NULL
numbers, numbers stored as text): at most this many of a batch, drawn at random."""
FOLDS = 5
BAR = 0.55
CONTENT_CELLS = ("flag",)
"""Cells a row's own value fills or leaves empty (a result is flagged abnormal exactly when its number lies outside its
range): left out of the NULL count, which is about how a row is stored. An extreme value flagged as such is content
(an out-of-window copy of the maximum, shifted up, is more often abnormal than the rows beside it); whether the flag
agrees with the number is its own feature (``flag_disagrees``)."""


@dataclass(frozen=True)
class RowSet:
    features: np.ndarray  # (n, len(FEATURES))
    labels: np.ndarray  # 1: touched by the overlay
    task: np.ndarray  # fold group of each row: tasks about the same patient (or cohort) share one
    table: np.ndarray | None = None  # table of each row (for a judgement within each table)


def _text_form(text: Any, value: Any) -> int:
    if text is None:
        return -1
    s = str(text)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
        return 0 if s == value_text(value) else 3
    if re.search(r"[0-9]", s):
        return 1
    return 2


def _flag_disagrees(rec: dict[str, Any]) -> float:
    """1 when a result's abnormal flag says otherwise than its number and reference range do, 0 when they agree, -1
    where the row has no such columns or values (:func:`ehrgym.bench.noise.values.flagged_as_base`)."""
    if not all(c in rec for c in FLAG_COLUMNS) or None in (rec["valuenum"], rec["ref_range_lower"],
                                                           rec["ref_range_upper"]):
        return -1.0
    outside = rec["valuenum"] < rec["ref_range_lower"] or rec["valuenum"] > rec["ref_range_upper"]
    return float(outside != (rec["flag"] == "abnormal"))


def _stamp(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value
    return None


@lru_cache(maxsize=1)
def _templates() -> dict[str, Any]:
    return {t.id: t for t in all_templates()}


SIDES = ("noise", "decoy")
"""Whose rows are judged: a noisy twin's noise, or a clean twin's decoy (:mod:`ehrgym.bench.decoys`), which is written
by the same injector and must be stored as the noise is — else storage would tell a harmless anomaly from one that
changes the answer."""


def judged_overlay(task: Task, side: str = "noise") -> tuple[str, Overlay] | None:
    """The subtype and overlay whose rows are judged on ``side`` of ``task`` (None: it has none there — a clean twin
    carries no noise, a noisy twin no decoy)."""
    if side == "noise":
        return (task.noise.subtype, task.noise.overlay) if task.noise is not None else None
    if side != "decoy":
        raise ValueError(f"unknown side {side!r}: expected one of {SIDES}")
    decoy = getattr(task, "decoy", None)
    about = task.meta.get("decoy") if isinstance(getattr(task, "meta", None), dict) else None
    if decoy is None or decoy.is_empty or not about:
        return None
    return str(about["subtype"]), decoy


def task_rows(session: OverlaySession, task: Task, rng: np.random.Generator, side: str = "noise",
              groups: "GroupCache | None" = None) -> tuple[list[list[float]], list[int], list[Any]]:
    """Features and labels of the rows one task's noise (or, ``side="decoy"``, its clean twin's decoy) touched and of
    base rows beside them, and the patient of each row (None: the table has no patient column). ``groups`` keeps
    where each group's rows stand in the base's scan, for the next task reading it (:func:`_group_window`)."""
    template = _templates().get(task.template_id)
    judged = judged_overlay(task, side)
    if template is None or judged is None or judged[1].is_empty:
        return [], [], []
    subtype, overlay = judged
    ev = template.evidence
    feats: list[list[float]] = []
    labels: list[int] = []
    owners: list[Any] = []
    session.apply(overlay)
    for table, edit in overlay.merged().items():
        if not edit.insert_rows:
            continue
        spec = table_spec(table)
        names = spec.column_names
        group = next((c for c in GROUP_COLUMNS if c in names and all(r.get(c) is not None for r in edit.insert_rows)),
                     None)
        where, vals = "", []
        if group:
            vals = sorted({r[group] for r in edit.insert_rows}, key=str)
            where = f" WHERE {group} IN ({', '.join('?' for _ in vals)})"
        id_col = ev.id_col if ev.table == table and ev.id_col in names else None
        vcol = ev.value_col if ev.table == table else None
        # noise whose content is a missing number (missing_value, encoding_corruption) is compared with the base's
        # own results without a number: a NULL is what the noise is, not how the overlay stores it; the question
        # is whether the overlay's NULL rows look like the hospital's (text, comments, NULL pattern)
        # ... and noise whose content is a number stored only as text with the base's own numbers stored as text
        null_only = bool(vcol) and vcol is not None and all(r.get(vcol) is None for r in edit.insert_rows)
        kind = _content_kind(vcol, ev.text_col if ev.table == table else None, edit.insert_rows) if null_only else None
        if kind and table in RESULT_ROWS:
            kind = f"({kind} AND {RESULT_ROWS[table]})"  # results of the same kind (susceptibilities, not isolates)
        compare = comparison_filter(names, kind, edit.insert_rows, table)
        # scan order and ids of the whole group (two narrow columns) — or of the window of it around the task's
        # patients (MAX_ROWS_PER_GROUP) — full rows of its patients only
        subject = "subject_id" if "subject_id" in names else "NULL"
        subjects = {r.get("subject_id") for r in edit.insert_rows}
        read = _group_window(session.con, spec.qualified, where, vals, subjects if subject != "NULL" else None,
                             session.base, edit, groups)
        source, where, args = read.source, read.where, read.args
        slim = session.con.execute(f"SELECT {subject}, {id_col or 'NULL'}, {compare} FROM {source}{where}",
                                   args).fetchall()
        if not slim:
            continue
        mine = [i for i, r in enumerate(slim) if subject == "NULL" or r[0] in subjects]
        cond = (" AND " if where else " WHERE ") + f"subject_id IN ({', '.join('?' for _ in subjects)})" \
            if subject != "NULL" else ""
        cur = session.con.execute(f"SELECT * FROM {source}{where}{cond}",
                                  args + (sorted(subjects, key=str) if cond else []))
        cols = [d[0] for d in cur.description]
        rows = dict(zip(mine, cur.fetchall()))  # same scan order: the k-th of them is the k-th of ``mine``
        skip = {edit.dense_id} if edit.dense_id else set()

        def content_of(r: dict[str, Any], cols: list[str] = cols, skip: set[str] = skip) -> tuple[Any, ...]:
            return tuple((c, to_json_value(r.get(c))) for c in cols if c not in skip)

        def content(row: tuple[Any, ...], cols: list[str] = cols) -> tuple[Any, ...]:
            return content_of(dict(zip(cols, row)))

        wanted = {content_of(r) for r in edit.insert_rows}
        touched = {i for i, row in rows.items() if content(row) in wanted}
        if not touched:
            continue
        originals: list[int] | None = None
        if get_injector(subtype).artifact_reference == "originals":
            contents = {i: content(rows[i]) for i in touched}
            copies, originals = _copies(sorted(touched), contents.__getitem__,
                                        [content_of(r) for r in edit.insert_rows])
            touched = set(copies)
            originals = [i for i in originals if i in rows]
            if not touched or not originals:
                continue
        if kind and len(touched) > MAX_TOUCHED_CONTENT:
            # the base's own rows of that content are few: a task corrupting many rows (an aggregate's batch of
            # near-copies) would outweigh them, and the tree would learn the table the batch sits in
            touched = set(rng.choice(sorted(touched), size=MAX_TOUCHED_CONTENT, replace=False).tolist())
        n = len(slim)
        id_rank = None
        if id_col:
            ids = np.array([float(r[1]) if r[1] is not None else np.nan for r in slim])
            if read.total is None:
                order = np.argsort(np.argsort(np.nan_to_num(ids, nan=-1e18), kind="stable"), kind="stable")
                id_rank = order / max(n - 1, 1)
            else:  # among the whole group's ids, not the window's: see GroupRead
                id_rank = _ranks_in_group(session.con, read, id_col, ids, edit, groups)
        # base rows to compare with: first untouched rows of the same patients (what an agent looking
        # at the question's patients sees beside the noise), then rows of the other patients nearest in the scan
        near = [i for i in rows if i not in touched and slim[i][2]]
        want = 3 * len(touched)
        pick = rng.choice(near, size=min(len(near), want), replace=False).tolist() if near else []
        if originals is not None:
            pick = originals
        elif len(pick) < want and subject != "NULL":
            per: dict[Any, list[int]] = {}
            for i, r in enumerate(slim):
                if r[0] not in subjects and r[2]:
                    per.setdefault(r[0], []).append(i)
            chosen, have = [], 0
            for key in _nearest_patients(per, [i for i in mine if i not in touched], rng):
                chosen.append(key)
                have += len(per[key])
                if have >= want - len(pick):
                    break
            if chosen:
                more = session.con.execute(
                    f"SELECT * FROM {source}{where}{(' AND ' if where else ' WHERE ')}subject_id IN "
                    f"({', '.join('?' for _ in chosen)}) AND {compare}",
                    args + sorted(chosen, key=str)).fetchall()
                at = sorted(i for key in chosen for i in per[key])
                rows.update(zip(at, more))
                pick += rng.choice(at, size=min(len(at), want - len(pick)), replace=False).tolist()
        pick = sorted(pick)
        tcol = ev.text_col if ev.table == table else None
        time_col = ev.time_col if ev.table == table else None
        for i in sorted(touched) + pick:
            rec = dict(zip(cols, rows[i]))
            pos = i / max(n - 1, 1) if read.total is None else (read.offset + i) / max(read.total - 1, 1)
            idr = float(id_rank[i]) if id_rank is not None else 0.0
            value = rec.get(vcol) if vcol else None
            finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))
            stamp = _stamp(rec.get(time_col)) if time_col else None
            feats.append([idr, pos, idr - pos, float(sum(rec[c] is None for c in rec if c not in CONTENT_CELLS)),
                          float(vcol is not None and value is None),
                          float(decimals_of(value)) if finite and value is not None else -1.0,
                          float(_text_form(rec.get(tcol), value)) if tcol else -1.0, _flag_disagrees(rec),
                          float(stamp.second != 0) if stamp else -1.0, float(stamp.minute != 0) if stamp else -1.0])
            labels.append(1 if i in touched else 0)
            owners.append(slim[i][0] if subject != "NULL" else None)
    return feats, labels, owners


ROW_KINDS: dict[str, tuple[str, ...]] = {"microbiologyevents": ("org_name", "ab_itemid")}
"""Columns whose being filled makes a row of another kind, with cells of its own: a culture's no-growth, organism
and susceptibility rows. Which kind a noise writes is its content (an out-of-window copy of a positive culture is
grown rows), not how the overlay stores it: touched rows of one kind are compared with base rows of that kind. Against
all rows of their test, whole cultures copied out of window read 0.593 on the 1k card, by their empty cells alone."""


def comparison_filter(names: list[str] | tuple[str, ...], kind: str | None,
                      inserted: tuple[dict[str, Any], ...], table: str | None = None) -> str:
    """Which base rows of a group the touched rows are compared with: those of the same content ``kind`` (None: any),
    of the same row kind (:data:`ROW_KINDS`) where every touched row is of one, and, when every touched row belongs to
    an admission, inpatient rows only. Clinic results (no ``hadm_id``) are not what an agent sees beside an
    admission's evidence, and their extra NULL cell would tell the judge which rows a question can be about, not how
    the overlay stores them (pooled over subtypes, decoy rows of a 200-patient fixture read 0.558 against all rows
    of their items, 0.490 against inpatient rows)."""
    compare = kind or "TRUE"
    for col in ROW_KINDS.get(table or "", ()):
        filled = {r.get(col) is not None for r in inserted}
        if col in names and len(filled) == 1:
            compare = f"({compare} AND {col} IS {'NOT ' if filled.pop() else ''}NULL)"
    if "hadm_id" in names and all(r.get("hadm_id") is not None for r in inserted):
        compare = f"({compare} AND hadm_id IS NOT NULL)"
    return compare


WINDOW_TABLE = "__artifact_window"


@dataclass(frozen=True)
class BaseGroup:
    """Where a group's rows stand in the base's scan (one numbered scan of it, kept for every task of a worker that
    reads the same group): how many rows it holds, and the first and last scan position of each patient's."""

    total: int
    spans: dict[Any, tuple[int, int]]
    rowids: list[np.ndarray] = field(default_factory=list)  # a windowed group's base rowids, sorted (read once)
    ids: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """A windowed group's ids in the order of ``rowids`` and its non-NULL ids sorted, read when first needed."""


GroupCache = dict[tuple[str, str, tuple[Any, ...]], BaseGroup]


@dataclass(frozen=True)
class GroupRead:
    """Where :func:`task_rows` reads a group from: ``source`` with the filter ``where`` and its ``args``; for a
    window of a larger group, its first row's place in the group's scan (``offset``) and the group's size
    (``total``, None: the whole group is read). A row's scan and id ranks are taken in the whole group, as an agent
    scanning the table sees it, not in the window: the window is centred on the task's patients, so ranks within
    it put the touched rows in its middle and the base rows of a rare kind (the hospital's own NULL numbers)
    further out — on a 10k build, missing-value rows were told from base rows at 0.769 by their rank in the
    window alone (``position_rank`` 0.494-0.504)."""

    source: str
    where: str
    args: list[Any]
    offset: int = 0
    total: int | None = None
    key: tuple[str, str, tuple[Any, ...]] | None = None  # the group's own relation, filter and its parameters
    deleted: np.ndarray | None = None  # positions in the group's sorted base rowids of the rows the task deletes


def _ranks_in_group(con: Any, read: GroupRead, id_col: str, ids: np.ndarray, edit: TableEdit | None,
                    cache: GroupCache | None) -> np.ndarray:
    """Rank of each of a window's ``ids`` (in scan order) among the ids of its whole group as served, in [0, 1]; a
    row without an id ranks first. A dense id (the overlay renumbers the table 1, 2, 3 … in scan order) ranks as
    its row stands in the scan; other ids keep their base values, so the group's served ids are its base ids
    (sorted once per worker, :class:`BaseGroup`) less the task's deleted rows' and with its inserted rows'."""
    assert read.key is not None and read.total is not None
    scale = max(read.total - 1, 1)
    if edit is not None and edit.dense_id == id_col:
        return (read.offset + np.arange(len(ids))) / scale
    source, where, vals = read.key
    group = (cache or {}).get(read.key) or BaseGroup(read.total, {})  # no cache: read for this task only
    if id_col not in group.ids:
        got = con.execute(f"SELECT {id_col} FROM {source}{where} ORDER BY rowid", list(vals)).fetchnumpy()
        by_rowid = np.asarray(got[id_col], dtype=float)
        group.ids[id_col] = (by_rowid, np.sort(by_rowid[~np.isnan(by_rowid)]))
    by_rowid, known = group.ids[id_col]
    gone = by_rowid[read.deleted if read.deleted is not None else np.array([], dtype=np.int64)]
    added = np.array([float(r[id_col]) if r.get(id_col) is not None else np.nan
                      for r in (edit.insert_rows if edit is not None else ())], dtype=float)
    nulls = int(np.isnan(by_rowid).sum() - np.isnan(gone).sum() + np.isnan(added).sum())
    gone, added = np.sort(gone[~np.isnan(gone)]), np.sort(added[~np.isnan(added)])
    rank = nulls + np.searchsorted(known, ids, "left") - np.searchsorted(gone, ids, "left") \
        + np.searchsorted(added, ids, "left")
    return np.where(np.isnan(ids), 0.0, rank / scale)


def _base_group(con: Any, source: str, where: str, vals: list[Any], has_subjects: bool, cache: GroupCache | None
                ) -> BaseGroup:
    key = (source, where, tuple(vals))
    if cache is not None and key in cache:
        return cache[key]
    if has_subjects:
        got = con.execute(f"SELECT subject_id, min(__pos), max(__pos), count(*) FROM (SELECT row_number() OVER () - 1 "
                          f"AS __pos, subject_id FROM {source}{where}) GROUP BY subject_id", vals).fetchall()
        group = BaseGroup(sum(int(r[3]) for r in got), {r[0]: (int(r[1]), int(r[2])) for r in got})
    else:
        group = BaseGroup(int(con.execute(f"SELECT count(*) FROM {source}{where}", vals).fetchone()[0]), {})
    if cache is not None:
        cache[key] = group
    return group


def _group_window(con: Any, table: str, where: str, vals: list[Any], subjects: set[Any] | None,
                  base: str = "base", edit: TableEdit | None = None, cache: GroupCache | None = None
                  ) -> GroupRead:
    """What ``task_rows`` reads a group from (:class:`GroupRead`): ``table`` with the group's filter
    ``where`` when the group holds at most :data:`MAX_ROWS_PER_GROUP` rows, else a temporary table holding the window
    of that many rows of the group's scan centred on the rows of ``subjects`` (None: a table without patients, the
    top of the scan), in scan order (read with ``LIMIT``/``OFFSET`` by one thread; the table keeps them in that
    order).

    The group's size and its patients' scan positions are read from the base table (``base``), once per group with a
    ``cache`` (:class:`BaseGroup`), and widened by the rows the task's ``edit`` inserts and deletes, which are all
    that may move them in the overlay's scan: one scan of the group per task instead of three (at 10k patients the
    card's judge took 183 s, most of it counting and numbering the same vital-sign items for every task)."""
    inserted = len(edit.insert_rows) if edit is not None else 0
    deleted = len(edit.delete_rowids) if edit is not None else 0
    group = _base_group(con, f"{base}.{table}", where, list(vals), subjects is not None, cache)
    if group.total + inserted <= MAX_ROWS_PER_GROUP:
        return GroupRead(table, where, list(vals))
    lo = 0
    spans = [group.spans[s] for s in subjects or () if s in group.spans]
    if spans:
        first = min(a for a, _ in spans) - deleted  # rows deleted before them move them up the scan
        span = max(b for _, b in spans) - first + 1 + inserted  # rows inserted among or before them, down
        lo = max(0, first) if span >= MAX_ROWS_PER_GROUP else \
            max(0, min(group.total + inserted - MAX_ROWS_PER_GROUP, first - (MAX_ROWS_PER_GROUP - span) // 2))
    if not group.rowids:  # which base rows are the group's, to count the task's deletions among them
        group.rowids.append(con.execute(f"SELECT rowid FROM {base}.{table}{where} ORDER BY 1",
                                        list(vals)).fetchnumpy()["rowid"])
    removed = np.array(sorted(edit.delete_rowids) if edit is not None else [], dtype=np.int64)
    at = np.searchsorted(group.rowids[0], removed)  # sorted rowids: a lookup, not a hash of the group per task
    inside = at < len(group.rowids[0])
    inside[inside] &= group.rowids[0][at[inside]] == removed[inside]
    # the window in the served scan, located from the group's base rowids and the edit's anchors, is read from the
    # slice of base rowids it spans (pushed into the base scans; the view was scanned from its top to the window's
    # end), with LIMIT/OFFSET within the slice on one thread: the rows in scan order
    since, until, skip = scan_slice(np.delete(group.rowids[0], at[inside]), edit, int(lo), MAX_ROWS_PER_GROUP)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {WINDOW_TABLE} AS SELECT * FROM "
                f"({bounded_view_sql(table_spec(table), base, edit, since, until)}) AS __slice{where} "
                f"LIMIT {MAX_ROWS_PER_GROUP} OFFSET {skip}", list(vals))
    return GroupRead(f"temp.main.{WINDOW_TABLE}", " WHERE TRUE", [], int(lo), group.total + inserted - int(inside.sum()),
                     (f"{base}.{table}", where, tuple(vals)), at[inside])


def _nearest_patients(per: dict[Any, list[int]], own: list[int], rng: np.random.Generator) -> list[Any]:
    """Other patients in the order their rows stand from the task's patients' own untouched rows in the scan
    (nearest first; ties and a patient without untouched rows in random order).

    Beside a task's rows means beside them in the table: patients drawn from anywhere in the scan would let the
    tree learn where in the table the sample's recurring patients sit (a 1k `paper` card: 21 of the 53
    missing-value rows judged came from 5 recurring patients with high ids, 0.552), not how the overlay stores a
    row. An overlay that stored its rows away from their patient's (appended at the end, say) still shows: the
    reference rows stand where the patient's own rows are, the touched ones do not."""
    keys = list(per)
    shuffled = rng.permutation(len(keys)).tolist()
    if not own:
        return [keys[j] for j in shuffled]
    centre = float(np.median(own))
    distance = {k: min(abs(i - centre) for i in per[k]) for k in keys}
    return sorted((keys[j] for j in shuffled), key=lambda k: distance[k])


def _copies(matching: list[int], key: Any, inserted: list[tuple[Any, ...]]) -> tuple[list[int], list[int]]:
    """The scan positions of the inserted copies among ``matching`` (the rows with an inserted row's content, in
    scan order) and of their originals. The overlay places each copy right after the row it is anchored to, its
    original: where copy and original share the content, the second of two neighbouring rows of it is the copy;
    where they differ (a copy re-stored later), every matching row is a copy and its original stands as far before
    it as the run of copies it is in is long (a copied specimen follows its specimen as a block, its k-th row the
    k-th row of the specimen; a lone copy follows its original)."""
    need: dict[Any, int] = defaultdict(int)
    for k in inserted:
        need[k] += 1
    runs: dict[Any, list[int]] = defaultdict(list)
    for i in matching:
        runs[key(i)].append(i)
    block: dict[int, int] = {}  # each matching row's run length (consecutive scan positions)
    ordered = sorted(matching)
    start = 0
    for j in range(1, len(ordered) + 1):
        if j == len(ordered) or ordered[j] != ordered[j - 1] + 1:
            for i in ordered[start:j]:
                block[i] = j - start
            start = j
    copies: list[int] = []
    originals: list[int] = []
    for k, found in runs.items():
        if len(found) <= need[k]:
            pairs = [(i, i - block[i]) for i in found if i - block[i] >= 0]
        else:
            pairs = []
            taken: set[int] = set()
            for i in found:
                if len(pairs) < need[k] and i - 1 in found and i - 1 not in taken:
                    pairs.append((i, i - 1))
                    taken.update((i, i - 1))
        copies += [c for c, _ in pairs]
        originals += [o for _, o in pairs]
    return sorted(copies), sorted(originals)


def _has_digit(text: Any) -> bool:
    return text is not None and re.search(r"[0-9]", str(text)) is not None


def _content_kind(vcol: str | None, tcol: str | None, inserted: tuple[dict[str, Any], ...]) -> str | None:
    """SQL predicate of the base rows whose content is the same as the inserted rows' (all without a number in
    ``vcol``): a number kept only in the text column ('4.2', valuenum NULL), or no number at all."""
    if not vcol:
        return None
    if not tcol:
        return f"{vcol} IS NULL"
    digits = {_has_digit(r.get(tcol)) for r in inserted}
    if digits == {True}:
        return f"({vcol} IS NULL AND regexp_matches({tcol}, '[0-9]'))"
    if digits == {False}:
        return f"({vcol} IS NULL AND NOT coalesce(regexp_matches({tcol}, '[0-9]'), FALSE))"
    return f"{vcol} IS NULL"


class DepthLimitedTree:
    """A CART decision tree (Gini, balanced class weights) of limited depth, in numpy."""

    def __init__(self, depth: int = 3, min_leaf: int = 5) -> None:
        self.depth, self.min_leaf = depth, min_leaf
        self.node: Any = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> "DepthLimitedTree":
        w = np.where(y == 1, 0.5 / max((y == 1).sum(), 1), 0.5 / max((y == 0).sum(), 1))
        self.node = self._grow(x, y, w, self.depth)
        return self

    def _leaf(self, y: np.ndarray, w: np.ndarray) -> Any:
        return ("leaf", int(w[y == 1].sum() > w[y == 0].sum()))

    def _grow(self, x, y, w, depth):
        if depth == 0 or len(y) < 2 * self.min_leaf or len(set(y.tolist())) < 2:
            return self._leaf(y, w)
        best = None
        total = w.sum()
        for f in range(x.shape[1]):
            # every threshold between two neighbouring values at once: cumulative counts and weights in value order
            order = np.argsort(x[:, f], kind="stable")
            vals, ws, wpos = x[order, f], w[order], np.where(y[order] == 1, w[order], 0.0)
            last = np.flatnonzero(vals[1:] != vals[:-1])  # the last row of each value but the largest
            if not len(last):
                continue
            n_left = last + 1
            w_left, pos_left = np.cumsum(ws)[last], np.cumsum(wpos)[last]
            w_right, pos_right = total - w_left, wpos.sum() - pos_left
            with np.errstate(divide="ignore", invalid="ignore"):
                p_left = np.where(w_left > 0, pos_left / w_left, 0.0)
                p_right = np.where(w_right > 0, pos_right / w_right, 0.0)
            gini = (w_left / total * 2 * p_left * (1 - p_left) + w_right / total * 2 * p_right * (1 - p_right))
            valid = (n_left >= self.min_leaf) & (len(y) - n_left >= self.min_leaf)
            thresholds = (vals[last] + vals[last + 1]) / 2
            for k in np.flatnonzero(valid).tolist():  # the first of equal splits wins, as in a plain scan
                if best is None or gini[k] < best[0] - 1e-12:
                    best = (float(gini[k]), f, float(thresholds[k]))
        if best is None:
            return self._leaf(y, w)
        _, f, thr = best
        left = x[:, f] <= thr
        return ("split", f, thr, self._grow(x[left], y[left], w[left], depth - 1),
                self._grow(x[~left], y[~left], w[~left], depth - 1))

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = np.empty(len(x), dtype=int)
        for i, row in enumerate(x):
            node = self.node
            while node[0] == "split":
                node = node[3] if row[node[1]] <= node[2] else node[4]
            out[i] = node[1]
        return out


def balanced_accuracy(y: np.ndarray, pred: np.ndarray) -> float:
    tpr = float((pred[y == 1] == 1).mean()) if (y == 1).any() else 0.0
    tnr = float((pred[y == 0] == 0).mean()) if (y == 0).any() else 0.0
    return (tpr + tnr) / 2


def held_out_accuracy(rows: RowSet, depth: int = 3, by_table: bool = False) -> float:
    """Balanced accuracy of the tree on held-out tasks (5 folds by task, predictions pooled).

    ``by_table``: one tree per table and fold (predictions still pooled) — rows are told from base rows of the
    same table; where the touched/base mix differs between tables, a tree over all of them would otherwise learn
    which table a row is from (a row in chartevents has no id, one in labevents has), not how it is stored."""
    fold = rows.task % FOLDS
    pred = np.zeros_like(rows.labels)
    strata = rows.table if by_table and rows.table is not None else np.zeros(len(rows.labels), dtype=object)
    for k in range(FOLDS):
        for stratum in sorted(set(strata.tolist()), key=str):
            test = (fold == k) & (strata == stratum)
            train = (fold != k) & (strata == stratum)
            if not test.any() or not train.any():
                continue
            tree = DepthLimitedTree(depth).fit(rows.features[train], rows.labels[train])
            pred[test] = tree.predict(rows.features[test])
    return balanced_accuracy(rows.labels, pred)


def _fold_key(task: Task, subject: Any = None) -> int:
    """Fold group of a row: the row's own patient (``subject``), else the task's patient or cohort. A cohort task
    touches the rows of many patients, and the base rows beside a task are drawn beside other tasks too: one
    patient's rows in both the training and the held-out folds let a tree learn their scan position (measured on a
    1k `paper` build: unit mismatch 0.58 with folds by cohort, 0.49 by the rows' patients)."""
    import hashlib
    import json

    entity = task.meta.get("entity", {})
    if subject is not None:
        key = f"subject:{subject}"
    else:
        key = f"subject:{entity['subject_id']}" if "subject_id" in entity else json.dumps(entity, sort_keys=True)
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def _task_rng(seed: int, task: Task) -> np.random.Generator:
    """The draws of one task (which base rows stand beside its rows): its own stream, so that the rows judged for a
    task do not depend on which other tasks (of this or another subtype) were judged before it."""
    return np.random.default_rng([seed, int(_hashed(task.task_id)[:12], 16)])


def collect(db: str | Path, tasks: list[Task], seed: int = 0, per_subtype: int = 80, workers: int = 1,
            side: str = "noise") -> dict[str, RowSet]:
    """Row features of up to ``per_subtype`` tasks per subtype whose noise (``side="decoy"``: whose clean twin's
    decoy) inserts rows.

    ``workers`` > 1 judges the tasks in that many worker processes (``python -m ehrgym.bench.worker``, as the
    build's); each task draws from its own stream, so the rows do not depend on it."""
    chosen = _chosen(tasks, per_subtype, side)
    return _assembled(chosen, _judge(db, _wanted([(side, chosen)]), seed, workers), side)


Chosen = dict[str, list[Task]]  # subtype -> the tasks judged for it, in task-id order


def _hashed(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()


def _chosen(tasks: list[Task], per_subtype: int, side: str) -> Chosen:
    """Up to ``per_subtype`` tasks per subtype, a uniform sample by a hash of the task id (the first ones in id order
    were the alphabetically first templates': the 1k card judged implausible values on diagnoses and encounters
    templates alone, never on a lab or a vital sign), listed in task-id order."""
    by_sub: dict[str, list[Task]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: _hashed(t.task_id)):
        judged = judged_overlay(t, side)
        if judged is not None and any(e.insert_rows for e in judged[1].edits):
            by_sub[judged[0]].append(t)
    return {sub: sorted(group[:per_subtype], key=lambda t: t.task_id) for sub, group in sorted(by_sub.items())}


def _wanted(selections: list[tuple[str, Chosen]]) -> list[tuple[str, Task]]:
    """Each (side, task) of the selections once, in order (a task's rows are the same in every selection)."""
    seen: dict[tuple[str, str], tuple[str, Task]] = {}
    for side, chosen in selections:
        for group in chosen.values():
            for t in group:
                seen.setdefault((side, t.task_id), (side, t))
    return list(seen.values())


def _judge(db: str | Path, wanted: list[tuple[str, Task]], seed: int, workers: int
           ) -> dict[tuple[str, str], "TaskRows"]:
    parts = max(1, min(workers, len(wanted)))
    if parts == 1:
        return _collect_tasks(str(db), wanted, seed)
    from ehrgym.bench.builder import run_worker_processes

    got: dict[tuple[str, str], TaskRows] = {}
    for part in run_worker_processes([{"call": _collect_tasks, "args": (str(db), wanted[k::parts], seed)}
                                      for k in range(parts)]):  # interleaved: subtypes differ in cost
        got.update(part)
    return got


def _assembled(chosen: Chosen, got: dict[tuple[str, str], "TaskRows"], side: str) -> dict[str, RowSet]:
    out: dict[str, RowSet] = {}
    for sub, group in chosen.items():
        feats, labels, owner, where = [], [], [], []
        for t in group:
            f, lab, who, table = got[(side, t.task_id)]
            feats += f
            labels += lab
            owner += who
            where += [table] * len(lab)
        if labels:
            out[sub] = RowSet(np.array(feats, dtype=float), np.array(labels), np.array(owner),
                              np.array(where, dtype=object))
    return out


ROLE_FEATURES = ("id_rank", "position_rank")
"""Where a row stands among its item's rows: beside base rows a storage artifact (ids above the table's maximum), but
between noise and decoy rows mostly the row's role — noise touches the row that decides the answer (the latest, the
largest), a decoy one that does not, and telling those apart is the skill the benchmark asks for, not a leak. Rows
stored out of place still show in ``id_minus_position``."""


def noise_against_decoys(noise: RowSet, decoys: RowSet) -> RowSet:
    """The rows noise touched (label 1) beside the rows decoys touched (label 0), base rows left out, with the
    :data:`ROLE_FEATURES` blanked: can storage tell the anomaly that changes the answer from the one that does not?"""
    n, d = noise.labels == 1, decoys.labels == 1
    tables = None
    if noise.table is not None and decoys.table is not None:
        tables = np.concatenate([noise.table[n], decoys.table[d]])
    features = np.concatenate([noise.features[n], decoys.features[d]])
    features[:, [FEATURES.index(f) for f in ROLE_FEATURES]] = 0.0
    return RowSet(features,
                  np.concatenate([np.ones(int(n.sum()), dtype=int), np.zeros(int(d.sum()), dtype=int)]),
                  np.concatenate([noise.task[n], decoys.task[d]]), tables)


TaskRows = tuple[list[list[float]], list[int], list[int], str]


def _collect_tasks(db: str, wanted: list[tuple[str, Task]], seed: int) -> dict[tuple[str, str], TaskRows]:
    """Features, labels, fold keys and evidence table of the rows each ``(side, task)`` touched."""
    con, session = overlay_connection(db)  # one thread: scan order as one reader sees it
    out: dict[tuple[str, str], TaskRows] = {}
    groups: GroupCache = {}
    try:
        for side, task in wanted:
            f, lab, who = task_rows(session, task, _task_rng(seed, task), side, groups)
            out[(side, task.task_id)] = (f, lab, [_fold_key(task, w) for w in who],
                                         _templates()[task.template_id].evidence.table)
    finally:
        con.close()
    return out


def _summary(rows: RowSet, judge: bool = True) -> dict[str, Any]:
    return {"balanced_accuracy": round(held_out_accuracy(rows), 3) if judge else None,
            "entities": int(len(set(rows.task.tolist()))),
            "touched_rows": int(rows.labels.sum()), "base_rows": int((rows.labels == 0).sum())}


MIN_JUDGED_ROWS = 20
"""Rows a side needs before its accuracy is reported (fewer: the count is reported, the accuracy is not — a tree on
a dozen rows swings by ±0.2)."""


def artifact_report(db: str | Path, tasks: list[Task], seed: int = 0, per_subtype: int = 80, workers: int = 1,
                    decoys: bool = True) -> dict[str, Any]:
    """``{subtype: {balanced_accuracy, entities, touched_rows, base_rows}}`` for noise rows against base rows and, with
    ``decoys``, for decoy rows against base rows (``decoys_by_subtype``) and noise rows against decoy rows
    (``noise_vs_decoy``, where ``base_rows`` counts the decoy rows), and the bar."""
    # the noise and the decoy of the same pairs (same template, patient and evidence table): what differs between
    # the two sides is then only which row was touched and how it is stored. Every task is judged once, in one
    # round of worker processes (a noisy twin of a decoyed pair is often among the noise sample too).
    noise = _chosen(tasks, per_subtype, "noise")
    decoyed = decoyed_pairs(tasks, per_subtype) if decoys else set()
    twins = [t for t in tasks if t.pair_id in decoyed]
    decoy_side, paired = _chosen(twins, len(twins), "decoy"), _chosen(twins, len(twins), "noise")
    got = _judge(db, _wanted([("noise", noise), ("decoy", decoy_side), ("noise", paired)]), seed, workers)
    report: dict[str, Any] = {"bar": BAR, "features": list(FEATURES), "tasks_per_subtype": per_subtype,
                              "by_subtype": {sub: _summary(rows) for sub, rows in _assembled(noise, got, "noise").items()}}
    if not decoys:
        return report
    decoy_rows, paired_noise = _assembled(decoy_side, got, "decoy"), _assembled(paired, got, "noise")
    report["decoys_by_subtype"] = {sub: _judged(rows) for sub, rows in decoy_rows.items()}
    report["noise_vs_decoy"] = {sub: _judged(noise_against_decoys(paired_noise[sub], rows))
                                for sub, rows in decoy_rows.items() if sub in paired_noise}
    return report


def decoyed_pairs(tasks: list[Task], per_subtype: int) -> set[str]:
    """Up to ``per_subtype`` pairs per subtype whose clean twin's decoy inserts rows (by a hash of the pair id)."""
    by_sub: dict[str, list[str]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: _hashed(t.pair_id)):  # a uniform sample, as ``_chosen``
        judged = judged_overlay(t, "decoy")
        if judged is not None and any(e.insert_rows for e in judged[1].edits):
            by_sub[judged[0]].append(t.pair_id)
    return {p for group in by_sub.values() for p in group[:per_subtype]}


def _judged(rows: RowSet) -> dict[str, Any]:
    """:func:`_summary`, with the accuracy left out (None) when either class has fewer than MIN_JUDGED_ROWS rows."""
    return _summary(rows, judge=min(int(rows.labels.sum()), int((rows.labels == 0).sum())) >= MIN_JUDGED_ROWS)
