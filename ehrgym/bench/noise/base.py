"""The noise-injector model and its one registry.

An injector is one small object per subtype of the noise taxonomy (docs/architecture.md §3).
``applies(template)`` says whether it can corrupt a template at all; ``inject(ctx)`` returns an :class:`Injection` for one
sampled entity — the :class:`~ehrgym.bench.task.NoiseSpec` (overlay and/or question edit), the
expected outcome, and for recoverable noise the cleaners whose robust gold SQL recovers the
answer — or ``None`` when this entity cannot carry the noise.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import duckdb
import numpy as np

from ehrgym.bench.context import CourseClause
from ehrgym.bench.locality import ROW_IDS
from ehrgym.bench.noise.cleaning import Cleaner
from ehrgym.bench.noise.teaching import TeachingCard
from ehrgym.bench.noise.values import finite
from ehrgym.bench.sqlrender import render_sql
from ehrgym.bench.task import NoiseSpec
from ehrgym.bench.templates.base import Template
from ehrgym.db.overlay import TableEdit, to_json_value
from ehrgym.db.schema import table_spec
from ehrgym.errors import BenchmarkError
from ehrgym.registry import Registry
from ehrgym.vocab import NOISE_SUBTYPES

ROWID = "__rowid"
COUNT = "__count"  # the number of evidence rows, beside each of the first few
NUMERIC_TYPES = frozenset({"DOUBLE", "FLOAT", "REAL", "BIGINT", "INTEGER", "SMALLINT", "TINYINT"})


# Ids that tie rows of one event together (a draw's results, a culture's rows), never shared by rows of two times in
# the base: a copy at another time gets a new one (InjectContext.relink)
LINK_IDS: dict[str, tuple[str, ...]] = {"labevents": ("specimen_id",), "microbiologyevents": ("micro_specimen_id",)}
# A chain of rate changes is linked to the order that started it (linkorderid = that row's orderid): a copy at
# another time starts a chain of its own
SELF_LINKS: dict[str, tuple[str, str]] = {"inputevents": ("linkorderid", "orderid"),
                                          "procedureevents": ("linkorderid", "orderid")}
# Rows of one event that a copy at another time takes along: a culture is one specimen, drawn once, whose organism
# and susceptibility rows share its micro_specimen_id; a copy of one of its rows days away was a specimen of one row
# (or kept the id of a specimen drawn at another time): one query found every such copy (1k `paper` build: 414 rows of
# noisy twins, 169 of decoys). A laboratory draw's results share its specimen_id: a copy of one result was a draw of
# one result, which 0.7 % of base draws are (still so for the extra result of an implausible or missing value a
# minute away, noise.value._extra: see README)
EVENT_GROUPS: dict[str, str] = {"microbiologyevents": "micro_specimen_id", "labevents": "specimen_id"}
# Categories all rows of one such event share (one culture, one specimen type; an isolate's organism): a copy in
# another category is another event of that category, not the same rows relabelled (a culture's susceptibility panel
# is its organism's)
EVENT_CATEGORIES: dict[str, frozenset[str]] = {"microbiologyevents": frozenset({"org_name", "spec_type_desc"})}
# Who an event belongs to: what a copy of another event takes from the row it stands in for
EVENT_OWNER: tuple[str, ...] = ("subject_id", "hadm_id", "order_provider_id")
LINK_TIMES: dict[str, str] = {"labevents": "charttime", "microbiologyevents": "charttime", "inputevents": "starttime",
                              "procedureevents": "starttime"}


@dataclass(frozen=True)
class Injection:
    noise: NoiseSpec
    expected_kind: str  # answer | abstain
    reason: str | None = None
    params: dict[str, Any] | None = None  # parameters of the noisy question (None: unchanged)
    question: str | None = None  # a replacement question (out of scope)
    clean_question: str | None = None  # the clean twin's question where the pair rewrites it too (a course clause)
    cleaners: tuple[Cleaner, ...] = ()  # robust gold SQL = gold SQL over these cleaners
    robust_params: dict[str, Any] | None = None  # parameters of the robust gold SQL (None: clean ones)
    # for a contradiction: the evidence as it would be if the other record were the true one; the
    # pair is kept only if the answer there differs from the clean answer by the trap margin
    alternative: Any = None  # Overlay | None


class EvidenceReads:
    """Results of evidence reads on the clean base, by SQL text. Rows are tuples, which no reader changes; results
    of up to ``max_rows`` rows are kept, the oldest dropped once more than ``max_total`` rows are kept in all."""

    def __init__(self, max_rows: int = 2000, max_total: int = 200_000) -> None:
        self.max_rows, self.max_total = max_rows, max_total
        self._kept: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
        self._total = 0

    def get(self, con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        if sql in self._kept:
            return self._kept[sql]
        cur = con.execute(sql)
        result = ([d[0] for d in cur.description], cur.fetchall())
        if len(result[1]) <= self.max_rows:
            self._kept[sql] = result
            self._total += len(result[1])
            while self._total > self.max_total:
                self._total -= len(self._kept.pop(next(iter(self._kept)))[1])
        return result


@dataclass
class InjectContext:
    """What an injector may look at: the clean database (through ``con``), the entity, its answer."""

    con: duckdb.DuckDBPyConnection  # clean views over the read-only base catalog ``base``
    template: Template
    params: dict[str, Any]
    clean_value: Any
    rng: np.random.Generator
    base: str = "base"
    max_ids: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # id facts cached across contexts
    paraphrase: int = 0  # index of the paraphrase both twins are written in
    shown: dict[str, str] = field(default_factory=dict)  # parameter -> the alias the clean question shows
    places: tuple[str, ...] = ()  # places outside the record the question's context names (bench.context)
    clauses: tuple[CourseClause, ...] = ()  # the admission's arrival and departure in clause form (bench.context)
    refused: str = ""  # why an injector that returned None declined (a build-report discard reason)
    # evidence reads of the clean base, by SQL, shared by every context of one build process (an entity's
    # evidence is read again by each subtype tried on it and by its decoy): the base never changes
    reads: EvidenceReads | None = None
    # a decoy's context (bench.decoys.DecoyContext): the edit is aimed at a row that must not decide the answer
    harmless: ClassVar[bool] = False

    @property
    def evidence(self):
        return self.template.evidence

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql).fetchall()

    def where_sql(self, params: dict[str, Any] | None = None) -> str:
        return render_sql(self.evidence.where, params or self.params, {})

    def evidence_rows(self, order: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Evidence rows of the clean base with their base ``rowid`` (key ``__rowid``), JSON-ready."""
        ev = self.evidence
        spec = table_spec(ev.table)
        order_sql = order or self.focus_order()
        join = render_sql(ev.join, self.params, {}) + " " if ev.join else ""
        sql = (f"SELECT e.rowid AS {ROWID}, e.* FROM {self.base}.{spec.qualified} e {join}WHERE {self.where_sql()} "
               f"ORDER BY {order_sql}")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        names, got = self._read(sql)
        return [{n: (int(v) if n == ROWID else to_json_value(v)) for n, v in zip(names, rec)} for rec in got]

    def _read(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The column names and rows of ``sql`` on the clean base (through :attr:`reads` when shared)."""
        if self.reads is not None:
            return self.reads.get(self.con, sql)
        cur = self.con.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()

    def evidence_batch(self, order: str | None = None, finite_values: bool = False) -> tuple[int, list[dict[str, Any]]]:
        """How many evidence rows there are (with ``finite_values``: rows whose value is a finite number) and
        the first :data:`BATCH_MAX` of them in ``order`` — all that :func:`batch_size` can take. The same rows as
        ``evidence_rows`` filtered and cut in Python, but counted and cut in the database: a cohort's
        evidence runs to tens of thousands of rows on a large database."""
        ev = self.evidence
        spec = table_spec(ev.table)
        numeric = ev.value_col is not None and spec.column(ev.value_col).duckdb_type in NUMERIC_TYPES
        if finite_values and not numeric:
            rows = [r for r in self.evidence_rows(order=order) if ev.value_col and finite(r.get(ev.value_col))]
            return len(rows), rows[:BATCH_MAX]
        join = render_sql(ev.join, self.params, {}) + " " if ev.join else ""
        keep = f" AND isfinite(CAST(e.{ev.value_col} AS DOUBLE))" if finite_values else ""
        names, got = self._read(
            f"SELECT count(*) OVER () AS {COUNT}, e.rowid AS {ROWID}, e.* FROM {self.base}.{spec.qualified} e "
            f"{join}WHERE ({self.where_sql()}){keep} ORDER BY {order or self.focus_order()} LIMIT {BATCH_MAX}")
        names = names[1:]
        rows = [{n: (int(v) if n == ROWID else to_json_value(v)) for n, v in zip(names, rec[1:])} for rec in got]
        return (int(got[0][0]) if got else 0), rows

    def focus_order(self, focus: str | None = None) -> str:
        """ORDER BY putting the row that decides the answer first (ties broken by rowid)."""
        ev = self.evidence
        focus = focus or ev.focus
        t, v = (f"e.{ev.time_col}" if ev.time_col else None), (f"e.{ev.value_col}" if ev.value_col else None)
        if focus == "first" and t:
            return f"{t} ASC, e.rowid"
        if focus == "last" and t:
            return f"{t} DESC, e.rowid"
        if focus == "max" and v:
            return f"{v} DESC NULLS LAST, {t or 'e.rowid'}, e.rowid"
        if focus == "min" and v:
            return f"{v} ASC NULLS LAST, {t or 'e.rowid'}, e.rowid"
        if v:
            return f"abs({v} - avg({v}) OVER ()) DESC NULLS LAST, e.rowid"
        return f"{t + ', ' if t else ''}e.rowid"

    def one_sided_order(self) -> str | None:
        """For an aggregate over many values ("any" focus): rows with the highest values first (the
        lowest for min-type answers), so corrupting the first few moves the aggregate one way instead
        of cancelling out; None when the focus already decides the order or there is no value."""
        ev = self.evidence
        if ev.focus != "any" or not ev.value_col:
            return None
        return self.focus_order("min" if ev.extreme == "low" else "max")

    def dense_id(self) -> str | None:
        """The column of the evidence table the base numbers 1, 2, 3 … in scan order: the evidence id, else the
        table's row id (:data:`~ehrgym.bench.locality.ROW_IDS`); None when neither is. The overlay view renumbers it
        around new rows (:meth:`table_edit`)."""
        ev = self.evidence
        for col in (ev.id_col, ROW_IDS.get(ev.table)):
            if col and self._dense_start(col) is not None:
                return col
        return None

    def _dense_start(self, col: str) -> int | None:
        """The first id of ``col`` when the base numbers the evidence table's rows by it 1, 2, 3 … in scan order
        (id = rowid + first id), else None."""
        ev = self.evidence
        key = ("dense", ev.table, col)
        if key not in self.max_ids:
            spec = table_spec(ev.table)
            got = self.con.execute(
                f"SELECT count(*), count(DISTINCT {col}), min({col}), max({col}), "
                f"bool_and({col} - rowid = (SELECT min({col}) FROM {self.base}.{spec.qualified})) "
                f"FROM {self.base}.{spec.qualified}").fetchone()
            assert got is not None  # an aggregate query always returns one row
            n, distinct, lo, hi, aligned = got
            self.max_ids[key] = int(lo) if n and distinct == n and hi - lo + 1 == n and aligned else None
        return self.max_ids[key]

    def _evidence_id_dense(self) -> bool:
        return self.dense_id() is not None and self.dense_id() == self.evidence.id_col

    def table_edit(self, rows: tuple[dict[str, Any], ...], anchors: tuple[int, ...],
                   delete_rowids: tuple[int, ...] = (), sources: tuple[dict[str, Any], ...] = ()) -> TableEdit:
        """An edit of the evidence table inserting ``rows`` after base rows ``anchors``. Where the base numbers its
        rows densely (:meth:`dense_id`), each new row carries its anchor's id, which the overlay view renumbers
        around it: a copy that kept its source's id where the evidence id was another column (a specimen's copy
        keeping its microevent_id) was the only duplicate of a row id, numbered where it did not stand.
        ``sources``: the base row each new row copies (:meth:`relink`)."""
        if sources:
            rows = self.relink(rows, sources)
        dense = self.dense_id()
        if dense is not None:
            start = self._dense_start(dense)
            assert start is not None
            rows = tuple({**r, dense: start + anchor} for r, anchor in zip(rows, anchors))
        return TableEdit(self.evidence.table, delete_rowids, rows, anchors, dense)

    def relink(self, rows: tuple[dict[str, Any], ...], sources: tuple[dict[str, Any], ...]
               ) -> tuple[dict[str, Any], ...]:
        """``rows`` with new link ids where a copy left its source's time (:data:`LINK_IDS`, :data:`SELF_LINKS`): a
        copy a minute or days away from its source is another draw, culture or infusion, and kept its source's
        ``specimen_id`` (``linkorderid``), an id no base row shares across two times — one query for such ids found
        out-of-window copies and the extra rows of implausible and missing values (1k `paper` build: 365 laboratory
        and 356 infusion and procedure rows of noisy twins). Copies of one source id at one new time share the new
        id, the free value nearest above the source's among the base's; a chain link becomes the copy's own order
        id."""
        table = self.evidence.table
        time_col = LINK_TIMES.get(table)
        if time_col is None:
            return rows
        out: list[dict[str, Any]] = []
        given: dict[tuple[Any, ...], int] = {}
        for row, src in zip(rows, sources):
            if row.get(time_col) == src.get(time_col):
                out.append(row)
                continue
            row = dict(row)
            for col in LINK_IDS.get(table, ()):
                if row.get(col) is not None and row.get(col) == src.get(col):
                    key = (col, row[col], row.get(time_col))
                    if key not in given:
                        given[key] = self._free_id(col, int(row[col]), set(given.values()))
                    row[col] = given[key]
            if table in SELF_LINKS:
                link, own = SELF_LINKS[table]
                if row.get(link) is not None and row.get(link) == src.get(link) and row.get(own) is not None:
                    row[link] = row[own]
            out.append(row)
        return tuple(out)

    def _free_id(self, col: str, near: int, taken: set[Any]) -> int:
        """The free value of ``col`` nearest above ``near`` among the base's values (below it when none is free up to
        the table's largest), other than ``taken``."""
        key = ("link_ids", self.evidence.table, col)
        if key not in self.max_ids:
            got = self.con.execute(f"SELECT DISTINCT {col} FROM {self.base}.{table_spec(self.evidence.table).qualified}"
                                   f" WHERE {col} IS NOT NULL ORDER BY 1").fetchnumpy()[col]
            self.max_ids[key] = np.asarray(got, dtype=np.int64)
        known = self.max_ids[key]
        top = int(known[-1]) if len(known) else near
        for step in (1, -1):
            candidate = near + step
            while (candidate <= top if step > 0 else candidate > 0):
                at = int(np.searchsorted(known, candidate))
                if (at >= len(known) or known[at] != candidate) and candidate not in taken:
                    return candidate
                candidate += step
        raise BenchmarkError(f"no free {self.evidence.table}.{col} value near {near}")

    def anchor_for(self, row: dict[str, Any], time: Any = None) -> tuple[int, Any]:
        """Where a new row copied from ``row`` (timestamped ``time``) goes in scan order: the base
        rowid it follows and that row's id (``row`` itself; for a moved timestamp the last row of
        the same subject stored before ``time``, or just before the subject's first row)."""
        ev = self.evidence
        own = (int(row[ROWID]), row.get(ev.id_col) if ev.id_col else None)
        if time is None or not ev.time_col or "subject_id" not in row or row.get(ev.time_col) == time:
            return own
        src = f"{self.base}.{table_spec(ev.table).qualified}"
        idc = ev.id_col or "NULL"
        got = self.con.execute(f"SELECT rowid, {idc} FROM {src} WHERE subject_id = ? AND {ev.time_col} <= ? "
                               f"ORDER BY rowid DESC LIMIT 1", [row["subject_id"], time]).fetchone()
        if got is not None:
            return int(got[0]), got[1]
        first = self.con.execute(f"SELECT rowid, {idc} FROM {src} WHERE subject_id = ? ORDER BY rowid LIMIT 1",
                                 [row["subject_id"]]).fetchone()
        assert first is not None  # ``row`` itself is a row of this subject
        return self.before(int(first[0]), first[1])

    def before(self, rowid: int, row_id: Any) -> tuple[int, Any]:
        """The anchor placing a new row just before base row ``rowid`` (whose id is ``row_id``): the row before it
        and, for ids that are not dense, that row's id, so that the new row is numbered after the row it follows
        (:meth:`ids_after`). Numbered after ``row_id`` it stood before a row with a smaller id: where the base
        numbers in scan order, its id ranked one above its place (out-of-window ICU stays on a 1k `paper` card:
        0.71 within icustays)."""
        if row_id is not None and self._evidence_id_dense():
            return rowid - 1, int(row_id) - 1
        ev = self.evidence
        if row_id is None or not ev.id_col or rowid <= 0:
            return rowid - 1, row_id
        got = self.con.execute(f"SELECT {ev.id_col} FROM {self.base}.{table_spec(ev.table).qualified} "
                               "WHERE rowid = ?", [rowid - 1]).fetchone()
        return rowid - 1, got[0] if got is not None and got[0] is not None else row_id

    def id_groups(self, rows: list[dict[str, Any]], limit: int | None = None) -> list[list[dict[str, Any]]]:
        """The rows a copy of ``rows`` must hold, one list per evidence id in the order ``rows`` first names them (at
        most ``limit`` ids). Where the base gives one evidence id to several rows (a specimen's organism and
        susceptibility rows share its ``micro_specimen_id``), each list holds every base row of that id in scan order,
        so that a re-stored or misdated copy is a whole specimen under one new id; else each row stands alone. A copy
        of one susceptibility row under an id of its own was a specimen of one antibiotic, which no base specimen is:
        one query found every such copy (244 rows of duplicated specimens on a 1k `paper` build)."""
        ev = self.evidence
        if not ev.id_col or not self._id_is_shared():
            return [[r] for r in rows[:limit]]
        order: list[Any] = []
        for r in rows:
            if r.get(ev.id_col) is not None and r[ev.id_col] not in order:
                order.append(r[ev.id_col])
        order = order[:limit]
        if not order:
            return []
        names, got = self._read(
            f"SELECT rowid AS {ROWID}, * FROM {self.base}.{table_spec(ev.table).qualified} WHERE {ev.id_col} IN "
            f"({', '.join(str(int(i)) for i in order)}) ORDER BY rowid")
        by_id: dict[Any, list[dict[str, Any]]] = {i: [] for i in order}
        for rec in got:
            row = {n: (int(v) if n == ROWID else to_json_value(v)) for n, v in zip(names, rec)}
            by_id[row[ev.id_col]].append(row)
        return [by_id[i] for i in order if by_id[i]]

    def event_rows(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The base rows of ``row``'s event in scan order, ``row`` among them: its id group (:meth:`id_groups`), else
        the rows sharing its :data:`EVENT_GROUPS` id (an event copied to another time is copied whole), else ``row``
        alone."""
        ev = self.evidence
        if ev.id_col and self._id_is_shared():
            return self.id_groups([row])[0] or [row]
        col = EVENT_GROUPS.get(ev.table)
        if col is None or row.get(col) is None:
            return [row]
        return self.event_of(int(row[col])) or [row]

    def event_of(self, event_id: int) -> list[dict[str, Any]]:
        """The base rows of the evidence table's event ``event_id`` (:data:`EVENT_GROUPS`) in scan order."""
        ev = self.evidence
        names, got = self._read(f"SELECT rowid AS {ROWID}, * FROM {self.base}.{table_spec(ev.table).qualified} "
                                f"WHERE {EVENT_GROUPS[ev.table]} = {int(event_id)} ORDER BY rowid")
        return [{n: (int(v) if n == ROWID else to_json_value(v)) for n, v in zip(names, rec)} for rec in got]

    def _id_is_shared(self) -> bool:
        """Whether some base rows of the evidence table share an evidence id (cached per table)."""
        ev = self.evidence
        key = ("shared_id", ev.table, ev.id_col)
        if key not in self.max_ids:
            got = self.con.execute(f"SELECT count(*) > count(DISTINCT {ev.id_col}) FROM "
                                   f"{self.base}.{table_spec(ev.table).qualified} WHERE {ev.id_col} IS NOT NULL").fetchone()
            self.max_ids[key] = bool(got and got[0])
        return bool(self.max_ids[key])

    def give_ids(self, rows: list[dict[str, Any]], place: tuple[int, Any], taken_by_edit: set[int]) -> None:
        """Number ``rows``, the copies of one event stored after ``place``, as the base numbers an event's rows: one
        new evidence id for them all where the base gives one id to several rows (:meth:`_id_is_shared`: a copied
        specimen), else one each (:meth:`ids_after`)."""
        ev = self.evidence
        if not ev.id_col or not rows:
            return
        shared = self._id_is_shared()
        ids = self.ids_after(place, 1 if shared else len(rows), taken_by_edit)
        for i, row in enumerate(rows):
            row[ev.id_col] = ids[0 if shared else i]

    def ids_after(self, anchor: tuple[int, Any], k: int, taken_by_edit: set[int] | None = None) -> list[int]:
        """Ids for ``k`` new rows following ``anchor`` (see :meth:`anchor_for`), drawn as the base
        draws them.

        Dense ids (see :meth:`dense_id`): the anchor's own id — the overlay view renumbers the
        table around the new rows. Other ids: the free values nearest above the anchor's id
        (below the table's maximum; below the anchor when the values above are taken), other than
        those in ``taken_by_edit`` (ids given to other rows of the same edit; updated)."""
        ev = self.evidence
        if not ev.id_col:
            return []
        spec = table_spec(ev.table)
        src = f"{self.base}.{spec.qualified}"
        ref = int(anchor[1]) if anchor[1] is not None else 0
        if self._evidence_id_dense():
            return [ref] * k
        key = ("max", ev.table, ev.id_col)
        if key not in self.max_ids:
            top_row = self.con.execute(f"SELECT max({ev.id_col}) FROM {src}").fetchone()
            assert top_row is not None  # an aggregate query always returns one row
            self.max_ids[key] = int(top_row[0] or 0)
        top = self.max_ids[key]
        out: list[int] = []
        for lo, hi in ((ref + 1, min(ref + 1 + 50 * k + 200, top)), (max(ref - 50 * k - 200, 1), ref - 1)):
            if lo > hi:
                continue
            taken = {int(r[0]) for r in self.con.execute(
                f"SELECT {ev.id_col} FROM {src} WHERE {ev.id_col} BETWEEN ? AND ?", [lo, hi]).fetchall()}
            free = [i for i in range(lo, hi + 1) if i not in taken and i not in (taken_by_edit or ())]
            out += free if lo > ref else free[::-1]
            if len(out) >= k:
                break
        if len(out) < k:
            raise BenchmarkError(f"no free {ev.table}.{ev.id_col} values near {ref}")
        if taken_by_edit is not None:
            taken_by_edit.update(out[:k])
        return out[:k]

    def window_of(self, row: dict[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
        """Start and end of the admission/stay an evidence row is linked to."""
        w = self.evidence.window
        if w is None or row.get(w.key) is None:
            return None
        spec = table_spec(w.table)
        got = self.con.execute(f"SELECT {w.start}, {w.end} FROM {self.base}.{spec.qualified} "
                               f"WHERE {w.key} = ?", [row[w.key]]).fetchone()
        if got is None or got[0] is None or got[1] is None:
            return None
        return got[0], got[1]


# share of a population aggregate's rows a record/value corruption touches (an interface that
# re-sends or mis-stores a batch), and the cap: enough to move a cohort mean by the trap margin
BATCH_SHARE, BATCH_MAX = 0.2, 50


def batch_size(n: int) -> int:
    return min(max(1, math.ceil(BATCH_SHARE * n)), BATCH_MAX, n)


# answer types for which "none happened" is itself the answer (0 events, False)
ZERO_IS_AN_ANSWER: frozenset[str] = frozenset({"integer", "boolean"})


class Injector:
    """Base class: set ``subtype``; ``requires`` names Evidence attributes that must be set.

    The label of the noisy twin lives here too: ``outcome`` and ``reason`` (the expected outcome,
    see :meth:`expected`), ``rationale`` (why a careful analyst would give it) and
    ``empty_is_trap`` (for an abstention: an empty/NULL result of the naive query is what a
    credulous agent reports, so it still traps). ``presupposes_event``: the noise makes the
    question ask about events that did not happen — only valid where "none" is not itself an
    answer (not for counts or yes/no questions, where 0 / False is simply correct).
    ``teaching``: the :class:`~ehrgym.bench.noise.teaching.TeachingCard` that explains the
    subtype to people (explorer, exercises, benchmark card, docs/noise.md).
    """

    subtype: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    outcome: ClassVar[str] = "answer"  # answer | abstain
    reason: ClassVar[str | None] = None
    rationale: ClassVar[str] = ""
    empty_is_trap: ClassVar[bool] = False
    presupposes_event: ClassVar[bool] = False
    teaching: ClassVar[TeachingCard | None] = None  # the subtype explained for people (noise.teaching)
    # the base rows its inserted rows are judged against for storage artifacts (bench.artifacts):
    # "neighbours" (rows of the same table and item beside them) or "originals" (the rows they copy)
    artifact_reference: ClassVar[str] = "neighbours"
    # whether ``inject`` reads ``InjectContext.places`` (the places the question's context names): the
    # builder reads that context before injecting only for such injectors, else only for kept pairs
    reads_places: ClassVar[bool] = False

    @property
    def level(self) -> str:
        return NOISE_SUBTYPES[self.subtype]

    def applies(self, template: Template) -> bool:
        """The template lists the subtype, its evidence can carry it, and the label is defensible."""
        if self.subtype not in template.noise:
            return False
        return self.can_corrupt(template) and self.label_problem(template) is None

    def can_corrupt(self, template: Template) -> bool:
        """The template's evidence has what the injector needs (whether or not the template lists it)."""
        return all(getattr(template.evidence, a) for a in self.requires) and self.fits(template)

    def fits(self, template: Template) -> bool:
        """Extra static conditions (override)."""
        return True

    def label_problem(self, template: Template) -> str | None:
        """Why a careful analyst would dispute this subtype's expected outcome on ``template``
        (None: no reason). Such templates get no pairs of the subtype (override to add rules)."""
        if self.presupposes_event and template.answer.type in ZERO_IS_AN_ANSWER:
            return f"for a {template.answer.type!r} answer 0/False is simply correct outside the record"
        return None

    def accepts(self, template: Template, params: dict[str, Any]) -> bool:
        """Cheap per-entity pre-check before any SQL runs (override)."""
        return True

    def expected(self, template: Template) -> tuple[str, str | None]:
        """Expected outcome and abstention reason of a noisy twin of ``template`` (override when it
        depends on the template, e.g. one corrupted row decides the answer or is one of many)."""
        return self.outcome, self.reason

    def inject(self, ctx: InjectContext) -> Injection | None:
        raise NotImplementedError

    def spec(self, overlay=None, question_edit=None, description: str = "") -> NoiseSpec:
        from ehrgym.db.overlay import Overlay

        return NoiseSpec(self.level, self.subtype, overlay or Overlay(), question_edit,
                         description or self.description)


# One instance per subtype; other packages plug in through the entry-point group
# ``ehrgym.noise_injectors`` (a module whose ``@register_injector`` classes register themselves).
INJECTORS: Registry[Injector] = Registry("noise injector", group="ehrgym.noise_injectors", error=BenchmarkError)


def register_injector(cls: type[Injector]) -> type[Injector]:
    """Class decorator: one instance per subtype in the one registry."""
    if cls.subtype not in NOISE_SUBTYPES:
        raise BenchmarkError(f"{cls.__name__}: unknown noise subtype {cls.subtype!r}")
    if cls.subtype in INJECTORS:
        raise BenchmarkError(f"noise subtype {cls.subtype!r} registered twice")
    INJECTORS.add(cls.subtype, cls())
    return cls


def get_injector(subtype: str) -> Injector:
    from ehrgym.bench import noise  # noqa: F401  (registers the injectors)

    return INJECTORS.get(subtype)
