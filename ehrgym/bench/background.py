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
verifier's connection). When two draws fail (a population question that counts the rows drawn; the
second draw is smaller, ``SCALES``), or the pair's tables are none a background edits (``TABLES``),
the background is deletions in tables that none of the pair's SQL reads, which cannot change them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ehrgym.bench.answers import AnswerSpec, gold_from_rows
from ehrgym.db.overlay import Overlay, TableEdit, fetch_rows

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
# the draws tried, by size: a second, smaller one where the first touched rows a population question counts (a
# background of the question's own tables hides the noise's edits there; one of other tables does not)
SCALES = (1.0, 0.05)


class BackgroundMaker:
    """Draws and verifies the background overlay of a pair on a :class:`~ehrgym.bench.verify.PairVerifier`."""

    def __init__(self, verifier: Any) -> None:
        self.verifier = verifier
        self._rows: dict[str, int] = {}
        self._dense: dict[str, str | None] = {}

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
              copies: bool, noise: Overlay, scale: float) -> TableEdit | None:
        n = self._count(table)
        if n < 20:  # a table this small (a toy database) keeps every row
            return None
        con = self.verifier.clean_con
        want = min(int(math.exp(rng.uniform(0.0, math.log(scale * MAX_DELETED + 1)))), n // 3)
        picks = sorted({int(r) for r in rng.integers(0, n, size=2 * want + 8)})
        subj = dict(con.execute(f"SELECT rowid, subject_id FROM {_spec(table)} WHERE rowid IN "
                                f"({', '.join(map(str, picks))})").fetchall())
        deleted = [r for r in picks if r not in avoid_rows and subj.get(r) not in avoid_subjects][:want]
        rows: list[dict[str, Any]] = []
        anchors: list[int] = []
        # renumbered like the noise's edit of the same table (one view renumbers a table one way), else as the base
        own = noise.merged().get(table)
        dense = own.dense_id if own is not None else self._dense_id(table)
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
             copies: bool = True, scale: float = 1.0) -> Overlay:
        avoid_rows = {r for e in noise.edits for r in (*e.delete_rowids, *e.insert_after)}
        edits = [e for e in (self._edit(t, rng, avoid_subjects, avoid_rows, copies, noise, scale) for t in tables)
                 if e is not None]
        return Overlay(tuple(edits))

    def make(self, seed: list[int], evidence_table: str, subjects: set[int], noise: Overlay,
             checks: list[tuple[str, Overlay, list[tuple[Any, ...]]]], reads: set[str],
             spec: AnswerSpec) -> tuple[Overlay, str]:
        """The pair's background: ``checks`` are (sql, the overlay it ran on, the rows it gave); each must give the
        same answer (``spec``; a float sum regrouped by the deleted rows may move in its last bit, not in its
        answer) with the background added. ``reads``: every table the pair's SQL reads. Returns the overlay and how
        it was made (``verified`` or ``unread_tables``)."""
        rng = np.random.default_rng(seed)
        tables = sorted(t for t in set(noise.tables) | {evidence_table} if t in TABLES)
        unique: dict[tuple[str, int], tuple[Overlay, list[tuple[Any, ...]]]] = {}
        for sql, overlay, rows in checks:  # the same query on the same data is checked once
            unique.setdefault((sql, 0 if overlay.is_empty else id(overlay)), (overlay, rows))
        for scale in SCALES if tables else ():
            background = self.draw(rng, tables, subjects, noise, scale=scale)
            if background.is_empty:
                continue
            if all(same_answer(self.verifier.rows(sql, _plus(background, overlay)), rows, spec)
                   for (sql, _), (overlay, rows) in unique.items()):
                return background, "verified"
        unread = [t for t in DELETABLE if t not in reads]
        if not unread:
            return Overlay(), "none"
        picked = sorted({unread[int(i)] for i in rng.integers(0, len(unread), size=2)})
        return self.draw(rng, picked, subjects, noise, copies=False), "unread_tables"


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
