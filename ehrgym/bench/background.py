"""Background overlays: no episode is served the clean database as such.

Every episode of a benchmark runs on one database file. Were a clean twin served the base tables
unchanged, an agent that remembers one clean episode — ``count(*)`` or ``sum(hash(t))`` of a table —
would see every record- or value-level noisy twin differ there, without reading its evidence
(:mod:`ehrgym.bench.validity.state` measures this). So each pair gets a background overlay, the same
for both twins: rows of other patients deleted, and re-sent blocks of other patients' rows stored
again (single rows for patients, admissions and ICU stays), in the tables the pair's noise touches
and the template reads its evidence from. Real MIMIC-IV has such gaps and re-sent batches
everywhere; here they never concern the question, and both twins share them, so a whole-table
fingerprint says nothing about the variant.

A background must not change any answer: the clean gold SQL on the clean twin, and the naive and the
robust SQL on the noisy twin, must give the answer they give without it (checked here, on the
verifier's connection; a patient question's query proven to read only its patient's rows of the edited tables,
or any query proven to read none of the rows the background deletes or stores, :mod:`ehrgym.bench.locality`,
cannot change and is not run again). The first draw also edits other patients' rows of the question's own items
(of the rows its noise edits; a population question's cohort is spared): the
noise always changes that item, so a fingerprint per item (``count(*) GROUP BY itemid``) must see
backgrounds change it too. When the draws fail (a population question that counts the rows drawn; the
last draw is smaller, ``DRAWS``), or the pair's tables are none a background edits (``TABLES``),
the background is deletions in tables that none of the pair's SQL reads, which cannot change them.
"""

from __future__ import annotations

import math
from typing import Any

import duckdb
import numpy as np

from ehrgym.bench.answers import AnswerSpec, gold_from_rows
from ehrgym.bench.locality import ROW, reads_only_patient, row_filters
from ehrgym.db.overlay import Overlay, TableEdit, changed_rows_sql, fetch_rows
from ehrgym.db.schema import table_spec

# table -> its id column when the base numbers it 1, 2, 3 … in scan order (re-stored copies then take their
# original's id and the view renumbers the rest), "" for tables with no row id (copies need none); tables whose
# rows carry another unique id only lose rows (a copy would repeat an id the base never repeats)
COPYABLE: dict[str, str] = {"labevents": "labevent_id", "chartevents": "", "outputevents": "",
                            "microbiologyevents": "microevent_id", "diagnoses_icd": "", "procedures_icd": ""}
# Patients, admissions and stays lose rows too: the noise deletes up to hundreds of them (missing evidence in a
# cohort), and a background that only ever added to them would leave a falling count (and rows pointing at a
# deleted admission) to the noise alone. Single rows of them are stored twice with their ids, as a re-sent ADT
# message would store them.
SINGLE_COPIES: tuple[str, ...] = ("patients", "admissions", "icustays")
DELETABLE: tuple[str, ...] = ("labevents", "chartevents", "outputevents", "inputevents", "microbiologyevents",
                              "prescriptions", "emar", "diagnoses_icd", "procedures_icd", "procedureevents",
                              "transfers", "drgcodes") + SINGLE_COPIES
TABLES: tuple[str, ...] = DELETABLE
# Sizes spread as the noise's own edits do (missing evidence deletes 1 to ~400 rows of a table, duplicates and
# out-of-window rows add 1 to 50): a background much smaller than the noise would leave the noise's tail readable
# in a table's row count
MAX_DELETED = 400     # rows one table loses: log-uniform in 1..MAX_DELETED (at most a third of the table)
MAX_BLOCKS = 2        # re-sent blocks per copyable table: uniform in 0..MAX_BLOCKS
MAX_BLOCK_ROWS = 25   # rows per block: uniform in 1..MAX_BLOCK_ROWS
# the draws tried, (item-focused, size): first one that also edits other patients' rows of the question's own items
# (a fingerprint per item — `count(*) GROUP BY itemid` — would otherwise change in the noisy twin alone: its noise
# edits that item, a background drawn from the whole table mostly does not), then whole-table ones, the second
# smaller, where a population question counts the rows drawn
DRAWS: tuple[tuple[bool, float], ...] = ((True, 1.0), (False, 1.0), (False, 0.05))
# the column naming what a row records (its item), by table: the focus of an item-focused draw
ITEM_COLUMN: dict[str, str] = {"labevents": "itemid", "chartevents": "itemid", "outputevents": "itemid",
                               "inputevents": "itemid", "procedureevents": "itemid",
                               "microbiologyevents": "test_name", "prescriptions": "drug", "emar": "medication",
                               "diagnoses_icd": "icd_code", "procedures_icd": "icd_code", "drgcodes": "drg_code",
                               "transfers": "careunit"}
MAX_ITEM_COPIES = 40  # rows of the question's items re-sent in one batch: log-uniform in 1..MAX_ITEM_COPIES
# rows of the question's items lost: log-uniform in 1..MAX_ITEM_LOST (at most half the other patients' rows of
# them). Wider than MAX_DELETED: the noisy twin's item loses the background's rows plus the noise's own (missing
# evidence: a median 28, a tail past 250), so a background as wide as the noise leaves the sum's tail to the noisy
# twin (measured: the items probe read 0.552 at 400, a replay of the same pairs 0.538 at 800)
MAX_ITEM_LOST = 800
# tables up to this many rows have their subjects and item groups read into memory once per build process (~16
# bytes a row); larger ones (full MIMIC-IV's chartevents) are asked row by row
CACHED_ROWS = 50_000_000
# the (rowid, subject) rows of the question's items kept per process, the oldest items dropped past it (16 bytes a
# row): a template's noise edits the same few items pair after pair, and a common lab's rows run to hundreds of
# thousands at 10k patients (sorting them again took ~20 ms a pair)
POOLED_ROWS = 4_000_000


class BackgroundMaker:
    """Draws and verifies the background overlay of a pair on a :class:`~ehrgym.bench.verify.PairVerifier`."""

    def __init__(self, verifier: Any) -> None:
        self.verifier = verifier
        self._rows: dict[str, int] = {}
        self._dense: dict[str, str | None] = {}
        self._subjects: dict[str, np.ndarray | None] = {}
        self._by_item: dict[str, tuple[dict[str, tuple[int, int]], np.ndarray]] = {}
        self._asked: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}
        self._item_pools: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}
        self._pooled = 0

    def subjects(self, table: str) -> np.ndarray | None:
        """``subject_id`` of every row of ``table`` by rowid (-1 where NULL), read once per process; None for a
        table too large to hold (``CACHED_ROWS``) or whose rowids have gaps (the draws then ask the database)."""
        if table not in self._subjects:
            n = self._count(table)
            got = None
            if n <= CACHED_ROWS:
                con = self.verifier.clean_con
                top = con.execute(f"SELECT max(rowid) FROM {_spec(table)}").fetchone()
                if top is not None and top[0] == n - 1:
                    got = con.execute(f"SELECT coalesce(subject_id, -1) AS s FROM {_spec(table)} ORDER BY rowid"
                                      ).fetchnumpy()["s"].astype(np.int64)
            self._subjects[table] = got
        return self._subjects[table]

    def item_rows(self, table: str, items: tuple[str, ...]) -> np.ndarray:
        """(rowid, subject_id) of the rows of ``table`` whose item (as text) is one of ``items``, in rowid order.
        The table's rowids sorted by item are read once per process, each item then a slice of them."""
        subjects = self.subjects(table)
        if subjects is None:
            return self._item_rows_sql(table, items)
        if table not in self._by_item:
            col = ITEM_COLUMN[table]
            spec = _spec(table)
            groups = self.verifier.clean_con.execute(
                f"SELECT CAST({col} AS VARCHAR) AS v, count(*) FROM {spec} WHERE {col} IS NOT NULL "
                f"GROUP BY v ORDER BY v").fetchall()
            rowids = self.verifier.clean_con.execute(
                f"SELECT rowid FROM {spec} WHERE {col} IS NOT NULL ORDER BY CAST({col} AS VARCHAR), rowid"
            ).fetchnumpy()["rowid"].astype(np.int64)
            ends = np.cumsum([c for _, c in groups], dtype=np.int64)
            self._by_item[table] = ({v: (int(e - c), int(e)) for (v, c), e in zip(groups, ends)}, rowids)
        key = (table, tuple(sorted(set(items))))
        if key not in self._item_pools:
            spans, rowids = self._by_item[table]
            picked = [rowids[a:b] for a, b in (spans[i] for i in key[1] if i in spans)]
            if not picked:
                return np.zeros((0, 2))
            # one item's slice is in rowid order already
            found = picked[0] if len(picked) == 1 else np.sort(np.concatenate(picked))
            pool = np.stack([found, subjects[found].astype(np.float64)], axis=1)
            pool.flags.writeable = False  # shared by every draw of these items
            while self._item_pools and self._pooled + len(pool) > POOLED_ROWS:
                self._pooled -= len(self._item_pools.pop(next(iter(self._item_pools))))
            self._item_pools[key] = pool
            self._pooled += len(pool)
        return self._item_pools[key]

    def _item_rows_sql(self, table: str, items: tuple[str, ...]) -> np.ndarray:
        """``item_rows`` of a table too large to hold: one scan per set of items, the last 512 kept (a template's
        noise edits the same few items pair after pair)."""
        key = (table, items)
        if key not in self._asked:
            if len(self._asked) >= 512:
                self._asked.pop(next(iter(self._asked)))
            col = ITEM_COLUMN[table]
            got = self.verifier.clean_con.execute(
                f"SELECT rowid, coalesce(subject_id, -1) AS subject_id FROM {_spec(table)} WHERE "
                f"CAST({col} AS VARCHAR) IN (SELECT unnest(?::VARCHAR[])) ORDER BY rowid", [list(items)]).fetchnumpy()
            self._asked[key] = np.stack([got["rowid"].astype(np.int64),
                                         np.asarray(got["subject_id"], dtype=np.float64)], axis=1) \
                if len(got["rowid"]) else np.zeros((0, 2))
        return self._asked[key]

    def _subject_of(self, table: str, rowids: list[int]) -> dict[int, int]:
        """rowid -> subject_id (-1 where NULL) of ``rowids``."""
        subjects = self.subjects(table)
        if subjects is not None:
            return {r: int(subjects[r]) for r in rowids}
        return dict(self.verifier.clean_con.execute(
            f"SELECT rowid, coalesce(subject_id, -1) FROM {_spec(table)} WHERE rowid IN "
            f"({', '.join(map(str, rowids))})").fetchall())

    def focus(self, noise: Overlay, cohort_sql: str | None) -> tuple[dict[str, tuple[str, ...]], set[int]]:
        """The question's items per table: those of the rows its noise edits (a pair whose noise edits no row has
        twins that an item's fingerprint cannot tell apart). For a population question (``cohort_sql`` lists its
        evidence rows) also its cohort's patients, whom the item-focused draw spares."""
        con = self.verifier.clean_con
        items: dict[str, set[str]] = {}
        for table, edit in noise.merged().items():
            if table not in ITEM_COLUMN:
                continue
            col = ITEM_COLUMN[table]
            rows = list(fetch_rows(con, table, sorted(set(edit.delete_rowids))).values()) + list(edit.insert_rows)
            items.setdefault(table, set()).update(str(r[col]) for r in rows if r.get(col) is not None)
        cohort: set[int] = set()
        if items and cohort_sql:
            cohort = {int(s) for (s,) in con.execute(f"SELECT DISTINCT subject_id FROM ({cohort_sql})").fetchall()
                      if s is not None}
        return {t: tuple(sorted(v)) for t, v in items.items() if v}, cohort

    def _count(self, table: str) -> int:
        if table not in self._rows:
            spec = _spec(table)
            self._rows[table] = int(self.verifier.clean_con.execute(f"SELECT count(*) FROM {spec}").fetchone()[0])
        return self._rows[table]

    def _dense_id(self, table: str) -> str | None:
        col = COPYABLE.get(table)
        if not col:
            return None
        if table not in self._dense:
            got = self.verifier.clean_con.execute(
                f"SELECT count(*) = count(DISTINCT {col}) AND max({col}) - min({col}) + 1 = count(*) AND "
                f"bool_and({col} - rowid = (SELECT min({col}) FROM {_spec(table)})) FROM {_spec(table)}").fetchone()
            self._dense[table] = col if got and got[0] else None
        return self._dense[table]

    def _edit(self, table: str, rng: np.random.Generator, avoid_subjects: set[int], avoid_rows: set[int],
              copies: bool, noise: Overlay, scale: float, items: tuple[str, ...] = ()) -> TableEdit | None:
        n = self._count(table)
        if n < 20:  # a table this small (a toy database) keeps every row
            return None
        con = self.verifier.clean_con
        want = min(int(math.exp(rng.uniform(0.0, math.log(scale * MAX_DELETED + 1)))), n // 3)
        picks = sorted({int(r) for r in rng.integers(0, n, size=2 * want + 8)})
        subj = self._subject_of(table, picks)
        deleted = [r for r in picks if r not in avoid_rows and subj.get(r) not in avoid_subjects]
        # renumbered like the noise's edit of the same table (one view renumbers a table one way), else as the base
        own = noise.merged().get(table)
        dense = own.dense_id if own is not None else self._dense_id(table)
        item_copies: list[int] = []
        lose = 0  # of the rows deleted, this many are of the question's items (the rest of the table's deletions
        # fill the whole-table draw's budget)
        if items:  # other patients' rows of the question's items: some lost, some (where copies fit) re-sent
            pool = self.item_rows(table, items)
            free = pool[~np.isin(pool[:, 1], sorted(avoid_subjects))] if len(pool) else pool
            free = free[~np.isin(free[:, 0], sorted(avoid_rows | set(deleted)))] if len(free) else free
            resend = copies and table in COPYABLE and bool(dense or not COPYABLE[table]) and rng.random() < 0.5
            if len(free) >= 3 and resend:  # the item's count grows, as duplicates and late rows make it grow
                # one patient's results of the item re-sent as a batch (stored again after the batch's last row:
                # one view segment, where single rows each after its original would cost one each)
                k = min(int(math.exp(rng.uniform(0.0, math.log(scale * MAX_ITEM_COPIES + 1)))), len(free) // 3)
                subject = free[int(rng.integers(0, len(free))), 1]
                batch = free[free[:, 1] == subject, 0].astype(np.int64)
                start = int(rng.integers(0, max(1, len(batch) - k + 1)))
                item_copies = [int(r) for r in batch[start:start + k]]
            elif len(free) >= 3:  # or falls, as missing evidence makes it fall
                lose = min(int(math.exp(rng.uniform(0.0, math.log(scale * MAX_ITEM_LOST + 1)))), len(free) // 2)
                chosen = {int(free[i, 0]) for i in rng.choice(len(free), size=lose, replace=False)}
                deleted = sorted(chosen | set([r for r in deleted if r not in chosen][:max(0, want - lose)]))
        deleted = deleted if lose else deleted[:want]
        rows: list[dict[str, Any]] = []
        anchors: list[int] = []
        if item_copies:
            got = fetch_rows(con, table, item_copies)
            rows += [got[r] for r in item_copies]
            anchors += [item_copies[-1]] * len(item_copies)
        if table in SINGLE_COPIES and copies:
            for r in sorted({int(x) for x in rng.integers(0, n, size=int(rng.integers(1, 4)))}):
                row = fetch_rows(con, table, [r])[r]
                if r not in avoid_rows and row.get("subject_id") not in avoid_subjects:
                    rows.append(row)
                    anchors.append(r)
        elif copies and table in COPYABLE and (dense or not COPYABLE[table]):
            for _ in range(int(rng.integers(0, MAX_BLOCKS + 1))):
                size = int(rng.integers(1, max(1, int(scale * MAX_BLOCK_ROWS)) + 1))
                start = int(rng.integers(0, n - size))
                block = list(range(start, start + size))
                got = fetch_rows(con, table, block)
                if any(b in avoid_rows or b in deleted for b in block) or \
                        any(got[b].get("subject_id") in avoid_subjects for b in block) or \
                        len({got[b].get("subject_id") for b in block}) != 1:
                    continue  # one patient's re-sent batch, never the question's patients
                rows += [got[b] for b in block]
                anchors += [block[-1]] * size
        if not deleted and not rows:
            return None
        return TableEdit(table, tuple(deleted), tuple(rows), tuple(anchors), dense)

    def draw(self, rng: np.random.Generator, tables: list[str], avoid_subjects: set[int], noise: Overlay,
             copies: bool = True, scale: float = 1.0, items: dict[str, tuple[str, ...]] | None = None) -> Overlay:
        avoid_rows = {r for e in noise.edits for r in (*e.delete_rowids, *e.insert_after)}
        edits = [e for e in (self._edit(t, rng, avoid_subjects, avoid_rows, copies, noise, scale,
                                        (items or {}).get(t, ())) for t in tables)
                 if e is not None]
        return Overlay(tuple(edits))

    def make(self, seed: list[int], evidence_table: str, subjects: set[int], noise: Overlay,
             checks: list[tuple[str, Overlay, list[tuple[Any, ...]]]], reads: set[str],
             spec: AnswerSpec, cohort_sql: str | None = None,
             patient_ids: dict[str, set[int]] | None = None) -> tuple[Overlay, str]:
        """The pair's background: ``checks`` are (sql, the overlay it ran on, the rows it gave); each must give the
        same answer (``spec``; a float sum regrouped by the deleted rows may move in its last bit, not in its
        answer) with the background added. ``reads``: every table the pair's SQL reads; ``cohort_sql`` lists a
        population question's evidence rows (their patients are spared by the item-focused draw).
        ``patient_ids``: a patient question's ids (``subject_id``, ``hadm_id``, ``stay_id``); a check whose SQL is
        proven to read only those rows of the tables a background edits (:mod:`ehrgym.bench.locality`) cannot
        change and is not run again.
        Returns the overlay and how it was made (``verified``, ``verified_items`` or ``unread_tables``)."""
        rng = np.random.default_rng(seed)
        tables = sorted(t for t in set(noise.tables) | {evidence_table} if t in TABLES)
        unique: dict[tuple[str, int], tuple[Overlay, list[tuple[Any, ...]]]] = {}
        for sql, overlay, rows in checks:  # the same query on the same data is checked once
            if patient_ids is None or not reads_only_patient(sql, TABLES, patient_ids):
                unique.setdefault((sql, 0 if overlay.is_empty else id(overlay)), (overlay, rows))
        filters = {sql: row_filters(sql, TABLES) for sql, _ in unique}
        wanted: dict[str, set[str]] = {}
        for found in filters.values():
            for table, conditions in (found or {}).items():
                wanted.setdefault(table, set()).update(conditions)
        items, cohort = self.focus(noise, cohort_sql)
        for focused, scale in DRAWS if tables else ():
            if focused and not items:
                continue
            background = self.draw(rng, tables, subjects | cohort if focused else subjects, noise, scale=scale,
                                   items=items if focused else None)
            if background.is_empty:
                continue
            met: dict[tuple[str, str], bool] = {}
            if all(self.reads_none(background, filters[sql], met, wanted)
                   or same_answer(self.verifier.rows(sql, _plus(background, overlay)), rows, spec)
                   for (sql, _), (overlay, rows) in unique.items()):
                return background, "verified_items" if focused else "verified"
        unread = [t for t in DELETABLE if t not in reads]
        if not unread:
            return Overlay(), "none"
        picked = sorted({unread[int(i)] for i in rng.integers(0, len(unread), size=2)})
        return self.draw(rng, picked, subjects, noise, copies=False), "unread_tables"

    def reads_none(self, background: Overlay, filters: dict[str, list[str]] | None, met: dict[tuple[str, str], bool],
                   wanted: dict[str, set[str]] | None = None) -> bool:
        """Whether a query whose reads are ``filters`` (:func:`~ehrgym.bench.locality.row_filters`) reads none of
        the rows ``background`` deletes or stores: its result is then the same with the background and it need
        not run again. ``met`` memoises, per (table, condition), whether a changed row meets it; ``wanted``: more
        conditions per table to settle in the same read of the changed rows (the pair's other checks')."""
        if filters is None:
            return False
        for table, edit in background.merged().items():
            conditions = filters.get(table, ())
            pending = sorted(({*conditions, *(wanted or {}).get(table, ())}) - {c for t, c in met if t == table})
            if any((table, c) not in met for c in conditions):
                met.update(((table, c), hit) for c, hit in zip(pending, self._meets(table, edit, pending)))
            if any(met[(table, c)] for c in conditions):
                return False
        return True

    def _meets(self, table: str, edit: TableEdit, conditions: list[str]) -> list[bool]:
        """For each condition (over ``locality.ROW``), whether a row ``edit`` deletes or stores meets it (True when
        that cannot be read), in one read of the changed rows."""
        changed = changed_rows_sql(table_spec(table), "base", edit)
        if changed is None:
            return [False] * len(conditions)
        asked = [c for c in conditions if c != "TRUE"]
        got: dict[str, bool] = {}
        if asked:
            counts = ", ".join(f"count(*) FILTER (WHERE {c})" for c in asked)
            try:
                row = self.verifier.clean_con.execute(f"SELECT {counts} FROM ({changed}) AS {ROW}").fetchone()
                got = {c: row is None or int(n) > 0 for c, n in zip(asked, row or [None] * len(asked))}
            except duckdb.Error:
                got = dict.fromkeys(asked, True)
        return [got.get(c, True) for c in conditions]


def same_answer(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], spec: AnswerSpec) -> bool:
    """Both results read as the same answer (``gold_from_rows``: rounded as the answer type is), NaN equal to NaN;
    a result with no answer (a credulous agent's NULL or empty result) equal only to another."""
    x, y = gold_from_rows(a, spec), gold_from_rows(b, spec)
    if x is None or y is None:
        return x is None and y is None and (not a) == (not b)
    return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))


def _plus(background: Overlay, overlay: Overlay) -> Overlay:
    return Overlay(background.edits + overlay.edits)


def _spec(table: str) -> str:
    from ehrgym.db.schema import table_spec

    return table_spec(table).qualified
