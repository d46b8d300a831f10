"""Overlays: declarative per-task edits served as views that shadow the base tables.

An overlay never copies a table. Deleted rows are filtered out by their stable row identity
(DuckDB ``rowid`` of the read-only base table) and inserted rows are inlined, typed, into the
view definition, so applying one costs the same on a 1k- and a 20k-patient database.
Replacing cells is a delete of the original row plus an insert of the edited copy
(:func:`replace_cells` resolves it against the base when the overlay is made).

Inserted rows carry an *anchor*: the base ``rowid`` they follow in scan order (the row they
replace, or the row they sit next to), so a shadowed table scans in the base's order with the
new rows where a base row would be — not appended at the end. Where the base numbers an id
column densely by scan position (``dense_id``), the view renumbers it around the edits so the
ids stay a gap-free sequence in scan order, exactly as the base assigns them.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from ehrgym.db.schema import EXPOSED_SCHEMAS, TableSpec, mimic_schema, table_spec
from ehrgym.errors import OverlayError

JsonRow = dict[str, Any]

END = -2  # anchor of a row appended after the last base row (overlays written without anchors)
# Up to this many anchors a view scans rowid ranges with the new rows between; beyond, it sorts the span. Every
# range and every inserted row's VALUES list is bound again by each query that reads the view (≈0.5 ms and
# ≈0.8 ms at 10k patients), while a filtered query sorts only the rows its filter keeps: a microbiology view with
# 50 anchors planned in 90 ms as ranges and in 12 ms sorted. Serving the twins of a 10k-patient build took 1.89x
# less time with 8 than with 64 where a view has more than 8 anchors, 1.10x overall (benchmarks/bench_overlay.py
# --segments 64); the 1k `paper` build is byte-identical and 5 % cheaper. An unfiltered look at a whole large
# table pays for the sort (count(*) of labevents at 10k: 9 ms as ranges, 180 ms sorted); gold SQL never does that.
SEGMENTS = 8


@dataclass(frozen=True)
class TableEdit:
    """Edits of one table: rows removed by base ``rowid`` and full rows added.

    ``insert_after[i]`` is the base rowid the i-th inserted row follows in scan order (-1: before
    the first row, ``END``: after the last); ``dense_id`` names an id column the base numbers
    1, 2, 3 … in scan order (inserted rows then store the id of their anchor row).
    """

    table: str
    delete_rowids: tuple[int, ...] = ()
    insert_rows: tuple[JsonRow, ...] = ()
    insert_after: tuple[int, ...] = ()
    dense_id: str | None = None

    def __post_init__(self) -> None:
        if self.insert_rows and not self.insert_after:
            object.__setattr__(self, "insert_after", (END,) * len(self.insert_rows))
        if len(self.insert_after) != len(self.insert_rows):
            raise OverlayError(f"edit of {self.table}: {len(self.insert_rows)} inserted rows but "
                               f"{len(self.insert_after)} anchors")
        if self.dense_id is not None and END in self.insert_after:
            raise OverlayError(f"edit of {self.table}: rows without an anchor cannot be numbered densely")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"table": self.table, "delete_rowids": list(self.delete_rowids),
                               "insert_rows": [dict(r) for r in self.insert_rows],
                               "insert_after": list(self.insert_after)}
        if self.dense_id is not None:
            out["dense_id"] = self.dense_id
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TableEdit":
        try:
            table = str(data["table"])
            spec = table_spec(table)
            deletes = tuple(int(r) for r in data.get("delete_rowids", []))
            rows = tuple(dict(r) for r in data.get("insert_rows", []))
            after = tuple(int(a) for a in data.get("insert_after", []))
            dense = data.get("dense_id")
            if dense is not None:
                spec.column(str(dense))
        except (KeyError, TypeError, ValueError) as exc:
            raise OverlayError(f"malformed table edit {data!r}: {exc}") from exc
        for row in rows:
            unknown = set(row) - set(spec.column_names)
            if unknown:
                raise OverlayError(f"insert into {table} names unknown columns {sorted(unknown)}")
        return cls(spec.name, deletes, rows, after, None if dense is None else str(dense))


@dataclass(frozen=True)
class Overlay:
    """A task's noise as data: a tuple of table edits (empty for clean tasks)."""

    edits: tuple[TableEdit, ...] = field(default_factory=tuple)

    @property
    def is_empty(self) -> bool:
        return not self.edits

    @property
    def tables(self) -> list[str]:
        return sorted({e.table for e in self.edits})

    def merged(self) -> dict[str, TableEdit]:
        """One edit per table (edits of the same table are concatenated)."""
        out: dict[str, TableEdit] = {}
        for e in self.edits:
            prev = out.get(e.table)
            if prev is not None and prev.dense_id != e.dense_id:
                raise OverlayError(f"edits of {e.table} disagree on its dense id column")
            out[e.table] = e if prev is None else TableEdit(
                e.table, prev.delete_rowids + e.delete_rowids, prev.insert_rows + e.insert_rows,
                prev.insert_after + e.insert_after, e.dense_id)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"edits": [e.to_dict() for e in self.edits]}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Overlay":
        if not data:
            return cls()
        if not isinstance(data, dict) or not isinstance(data.get("edits", []), list):
            raise OverlayError(f"an overlay is {{'edits': [...]}}, got {data!r}")
        return cls(tuple(TableEdit.from_dict(e) for e in data.get("edits", [])))


# cells of these exact types are stored as they are (the build converts millions of cells: checked first)
_JSON_AS_IS: frozenset[type] = frozenset({int, str, bool, type(None)})


def to_json_value(value: Any) -> Any:
    """Convert a DuckDB/pandas cell to the JSON form overlays store."""
    kind = type(value)
    if kind in _JSON_AS_IS:
        return value
    if kind is float:
        return None if math.isnan(value) else value
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return value


def fetch_rows(con: duckdb.DuckDBPyConnection, table: str, rowids: list[int],
               catalog: str | None = None) -> dict[int, JsonRow]:
    """Full rows of ``table`` by base rowid, JSON-ready."""
    spec = table_spec(table)
    prefix = f"{catalog}." if catalog else ""
    if not rowids:
        return {}
    ids = ", ".join(str(int(r)) for r in rowids)
    # the span lets the scan skip the row groups outside it (a block of neighbours, one row: ~1 ms, not 4)
    span = f"rowid >= {min(int(r) for r in rowids)} AND rowid <= {max(int(r) for r in rowids)} AND "
    cur = con.execute(f"SELECT rowid, * FROM {prefix}{spec.qualified} WHERE {span}rowid IN ({ids})")
    names = [d[0] for d in cur.description]
    out = {}
    for rec in cur.fetchall():
        out[int(rec[0])] = {n: to_json_value(v) for n, v in zip(names[1:], rec[1:])}
    missing = set(int(r) for r in rowids) - set(out)
    if missing:
        raise OverlayError(f"{table} has no rows with rowid {sorted(missing)[:5]}")
    return out


def replace_cells(con: duckdb.DuckDBPyConnection, table: str, changes: dict[int, dict[str, Any]],
                  catalog: str | None = None) -> TableEdit:
    """Edit that replaces cells of existing rows: ``{rowid: {column: new_value}}``."""
    spec = table_spec(table)
    originals = fetch_rows(con, table, sorted(changes), catalog)
    rows = []
    for rowid in sorted(changes):
        row = dict(originals[rowid])
        for col, val in changes[rowid].items():
            spec.column(col)
            row[col] = to_json_value(val)
        rows.append(row)
    return TableEdit(spec.name, tuple(sorted(changes)), tuple(rows), tuple(sorted(changes)))


def _id_shifts(edit: TableEdit) -> list[tuple[int, int]]:
    """``[(from_rowid, shift)]``: how far the dense id of base rows from ``from_rowid`` on moves
    (+1 per inserted row anchored before, -1 per deleted row before); constant runs merged."""
    events: dict[int, int] = {}
    for a in edit.insert_after:
        events[a + 1] = events.get(a + 1, 0) + 1
    for d in set(edit.delete_rowids):
        events[d + 1] = events.get(d + 1, 0) - 1
    out: list[tuple[int, int]] = []
    shift = 0
    for at in sorted(events):
        if events[at]:
            shift += events[at]
            out.append((at, shift))
    return out


def _shift_at(shifts: list[tuple[int, int]], rowid: int) -> int:
    """The shift of the last move at or before ``rowid`` (0 before the first)."""
    i = bisect.bisect_right(shifts, rowid, key=lambda m: m[0])
    return shifts[i - 1][1] if i else 0


def _within(values: list[Any], lo: int | None, hi: int | None, key: Any = None) -> list[Any]:
    """The items of sorted ``values`` (by ``key``) in (lo, hi]; None: unbounded on that side."""
    start = 0 if lo is None else bisect.bisect_right(values, lo, key=key)
    stop = len(values) if hi is None else bisect.bisect_right(values, hi, key=key)
    return values[start:stop]


# Deleted rowids per leaf of the filter's search tree. DuckDB compares a literal ``rowid NOT IN (...)`` list value
# by value for every row the scan passes up: a whole-table look at a 10k-patient view deleting 400+ rows took 392 ms
# against 63 ms as a tree with 16 per leaf (medians, ``benchmarks/bench_overlay.py``); gold SQL that filters first
# gains less (population 1.10x, patient 1.00x). A hashed anti-join (``NOT IN (SELECT unnest(...))``) is as fast
# but does not keep the base's scan order, which tied rows are read in.
DELETION_LEAF = 16


def _not_deleted(rowids: list[int]) -> str:
    """A filter keeping the rows whose rowid is not in ``rowids`` (sorted): a binary search tree of CASE branches
    on ``rowid``, ``NOT IN`` lists at its leaves, evaluated row by row as a plain filter (scan order kept)."""
    if len(rowids) <= DELETION_LEAF:
        return f"rowid NOT IN ({', '.join(str(r) for r in rowids)})"
    mid = len(rowids) // 2
    return (f"CASE WHEN rowid < {rowids[mid]} THEN {_not_deleted(rowids[:mid])} "
            f"ELSE {_not_deleted(rowids[mid:])} END")


def _cell_text(value: Any) -> str:
    """An inserted cell as the text literal its view casts to the column's type: every cell of a ``VALUES`` list
    is text (or NULL), so rows never disagree on a column's type, and a number's shortest repr casts back to it."""
    if value is None:
        return "NULL"
    kind = type(value)
    if kind is str:
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return "'1'" if value else "'0'"
    if isinstance(value, float) and not math.isfinite(value):
        raise OverlayError(f"non-finite value {value!r} cannot be stored in an overlay")
    text = repr(value) if isinstance(value, (int, float)) else str(value)
    return "'" + text.replace("'", "''") + "'"


def _rows_sql(spec: TableSpec, rows: list[tuple[int, int, JsonRow]], keyed: bool) -> str:
    """Inserted rows, in the given order, as one ``VALUES`` list cast once per column. A ``SELECT`` of typed
    literals per row made DuckDB bind and rewrite a cast per cell in every query that read the view; one list
    binds a cast per column (``benchmarks/bench_overlay.py``). ``keyed`` adds the sort keys ``__pos, __kind, __j``
    of a view that sorts its span."""
    names = [f"c{i}" for i in range(len(spec.columns))]
    casts = ", ".join(f'CAST({n} AS {c.duckdb_type}) AS "{c.name}"' for n, c in zip(names, spec.columns))
    values = ", ".join("(" + (f"{a}, {j}, " if keyed else "")
                       + ", ".join(_cell_text(row.get(c.name)) for c in spec.columns) + ")" for a, j, row in rows)
    keys, head = ("__pos, 1 AS __kind, __j, ", "__pos, __j, ") if keyed else ("", "")
    return f"SELECT {keys}{casts} FROM (VALUES {values}) AS __rows({head}{', '.join(names)})"


def _view_sql(spec: TableSpec, base: str, edit: TableEdit | None,
              bounds: tuple[int | None, int | None] | None = None, ordered: bool = True) -> str:
    """The view serving ``spec``'s table under ``edit``; ``bounds`` (see :func:`bounded_view_sql`) keeps the rows
    anchored in a range of base rowids only. ``ordered`` False serves the same rows, ids renumbered alike, with
    the inserted ones after every base row: one scan, for a reader whose result no row order can change."""
    source = f"{base}.{spec.qualified}"
    first, last = bounds if bounds is not None else (None, None)
    bound = ""
    if first is not None:
        bound += f" AND rowid >= {int(first)}"
    if last is not None:
        bound += f" AND rowid <= {int(last)}"
    if edit is None:
        return f"SELECT * FROM {source} WHERE TRUE{bound}" if bound else f"SELECT * FROM {source}"
    deleted = sorted(set(edit.delete_rowids))

    def not_in(lo: int | None = None, hi: int | None = None) -> str:
        """The deletion filter of the base rows in (lo, hi]: only the deleted rowids there (a view cut into many
        rowid ranges would otherwise repeat the whole list in each), and the bounds."""
        inside = _within(deleted, lo, hi)
        return (_not_deleted(inside) if inside else "TRUE") + bound
    shifts = _id_shifts(edit) if edit.dense_id else []

    def proj(lo: int | None = None, hi: int | None = None) -> str:
        """The columns of the base rows in (lo, hi]: the dense id moved by the edits before each row, spelled
        out only for the moves inside the range (a view cut into many rowid ranges would otherwise repeat every
        move in each, and bind them all again in every query that reads the view)."""
        if not shifts:
            return "*"
        start = _shift_at(shifts, lo + 1) if lo is not None else 0
        inside = _within(shifts, None if lo is None else lo + 1, hi, key=lambda m: m[0])
        shift = str(start)
        if inside:
            case = " ".join(f"WHEN rowid < {at} THEN {prev}" for (at, _), prev in
                            zip(inside, [start] + [s for _, s in inside[:-1]]))
            shift = f"CASE {case} ELSE {inside[-1][1]} END"
        return f'* REPLACE ("{edit.dense_id}" + {shift} AS "{edit.dense_id}")'
    if not edit.insert_rows:
        return f"SELECT {proj()} FROM {source} WHERE {not_in()}"
    # inserted rows in scan order: after their anchor, several at one anchor in the given order
    placed: list[tuple[int, int, JsonRow]] = []
    seen: dict[int, int] = {}
    for anchor, row in zip(edit.insert_after, edit.insert_rows):
        j = seen.get(anchor, 0)
        seen[anchor] = j + 1
        if edit.dense_id is not None and row.get(edit.dense_id) is not None:
            kept = 0 if anchor in set(deleted) else 1
            row = {**row, edit.dense_id: int(row[edit.dense_id]) + _shift_at(shifts, anchor) + kept + j}
        placed.append((anchor, j, row))
    if bounds is not None:
        placed = [p for p in placed if _anchored_within(p[0], first, last)]

    def literal(rows: list[tuple[int, int, JsonRow]], keyed: bool) -> list[str]:
        return [_rows_sql(spec, rows, keyed)] if rows else []

    anchored = sorted((p for p in placed if p[0] != END), key=lambda p: (p[0], p[1]))
    tail = [p for p in placed if p[0] == END]
    parts: list[str] = []
    if not ordered:
        return "\nUNION ALL ".join([f"SELECT {proj()} FROM {source} WHERE {not_in()}", *literal(anchored + tail, False)])
    stops = sorted({a for a, _, _ in anchored})
    if anchored and len(stops) <= SEGMENTS:
        at_stop: dict[int, list[tuple[int, int, JsonRow]]] = {}
        for p in anchored:
            at_stop.setdefault(p[0], []).append(p)
        # few anchors: base rows in rowid ranges (pushed into the scan) with the new rows between
        prev = None
        for stop in stops:
            after = f"rowid > {prev} AND " if prev is not None else ""
            parts.append(f"SELECT {proj(prev, stop)} FROM {source} WHERE {after}rowid <= {stop} AND {not_in(prev, stop)}")
            parts += literal(at_stop[stop], False)
            prev = stop
        parts.append(f"SELECT {proj(prev)} FROM {source} WHERE rowid > {prev} AND {not_in(prev)}")
    elif anchored:
        lo, hi = anchored[0][0], anchored[-1][0]
        parts.append(f"SELECT {proj(None, lo)} FROM {source} WHERE rowid <= {lo} AND {not_in(None, lo)}")
        if lo == hi:
            parts += literal(anchored, False)
        else:  # many anchors: the base rows between the first and the last, sorted with the new ones
            middle = [f"SELECT rowid AS __pos, 0 AS __kind, 0 AS __j, {proj(lo, hi)} FROM {source} "
                      f"WHERE rowid > {lo} AND rowid <= {hi} AND {not_in(lo, hi)}"]
            middle += literal(anchored, True)
            parts.append("SELECT * EXCLUDE (__pos, __kind, __j) FROM ("
                         + "\nUNION ALL ".join(middle) + "\nORDER BY __pos, __kind, __j)")
        parts.append(f"SELECT {proj(hi)} FROM {source} WHERE rowid > {hi} AND {not_in(hi)}")
    else:
        parts.append(f"SELECT {proj()} FROM {source} WHERE {not_in()}")
    parts += literal(tail, False)
    return "\nUNION ALL ".join(parts)


# Above this many rowids the deleted rows are found by a hash join on the list, below by a literal list inside the
# rowid span (medians on a 5M-row labevents: 10 rows 4.0 against 5.8 ms, 100 rows 10.9 against 7.0 ms, 800 rows
# 60 against 14 ms; a bare IN list 9.7, 20, 34 ms)
CHANGED_BY_JOIN = 32


def changed_rows_sql(spec: TableSpec, base: str, edit: TableEdit) -> str | None:
    """The rows ``edit`` takes out of or adds to ``spec``'s table, with the table's columns: the deleted base rows
    as the base stores them, the inserted ones as the view serves them (a dense id aside, which the view
    renumbers), in no particular order; None when it changes no row."""
    parts = []
    deleted = sorted(set(edit.delete_rowids))
    listed = ", ".join(str(r) for r in deleted)
    if len(deleted) > CHANGED_BY_JOIN:
        parts.append(f"SELECT __d.* FROM {base}.{spec.qualified} AS __d SEMI JOIN (SELECT unnest([{listed}]) AS r) "
                     "AS __k ON __d.rowid = __k.r")
    elif deleted:
        parts.append(f"SELECT * FROM {base}.{spec.qualified} WHERE rowid >= {deleted[0]} AND rowid <= {deleted[-1]} "
                     f"AND rowid IN ({listed})")
    if edit.insert_rows:
        parts.append(_rows_sql(spec, [(0, 0, row) for row in edit.insert_rows], False))
    return "\nUNION ALL ".join(parts) or None


def _anchored_within(anchor: int, first: int | None, last: int | None) -> bool:
    """Whether a row inserted after ``anchor`` is served among the base rows of rowids in [first, last] (None:
    unbounded): a row before the first base row only from the top, a row after the last only to the end."""
    if anchor == END:
        return last is None
    return (first is None or anchor >= first) and (last is None or anchor <= last)


def bounded_view_sql(spec: TableSpec, base: str, edit: TableEdit | None, first: int | None,
                     last: int | None) -> str:
    """The rows the view of ``spec``'s table under ``edit`` serves from base rowid ``first`` to ``last`` (None:
    from the top, to the end), in the view's order: the base rows of those rowids the edit keeps, each followed by
    the rows inserted after it (``first`` -1 or None: with the rows inserted before the first base row; ``last``
    None: with those appended at the end). The rowid bounds are pushed into the base scans, so a slice of a large
    table is read without scanning the rest."""
    return _view_sql(spec, base, edit, (first, last))


def scan_slice(kept: np.ndarray, edit: TableEdit | None, start: int, size: int) -> tuple[int | None, int | None, int]:
    """Where served rows ``start`` to ``start + size`` of a set of rows lie, as the bounds ``(first, last)`` of
    :func:`bounded_view_sql` holding them and how many of the set's rows that slice serves before them. ``kept``: the
    sorted base rowids of the set's rows the edit keeps; every row the edit inserts belongs to the set. The order is
    the view's: a base row's key is 2·rowid, an inserted row's 2·anchor + 1 (appended rows last), sorted stably in
    insertion order."""
    anchors = np.array(edit.insert_after if edit is not None else (), dtype=np.int64)
    tail = np.iinfo(np.int64).max
    keys = np.sort(np.concatenate([kept.astype(np.int64) * 2, np.where(anchors == END, tail, anchors * 2 + 1)]),
                   kind="stable")
    if len(keys) == 0 or start >= len(keys):
        return None, None, 0
    head, stop = keys[start], keys[min(start + size, len(keys)) - 1]
    first = None if start == 0 else int(head // 2)
    last = None if stop == tail else int(stop // 2)
    skip = 0 if first is None else start - int(np.searchsorted(keys, 2 * first, "left"))
    return first, last, skip


class OverlaySession:
    """Views named like the MIMIC-IV tables, in a connection's own catalog, over an attached base.

    ``apply(overlay)`` re-points only the tables the previous and the new overlay touch, so
    switching tasks on a warm connection costs a handful of ``CREATE OR REPLACE VIEW``.
    ``ordered`` False serves each table's inserted rows after its base rows, in one scan (the pair verifier's
    views for queries no row order can change, :func:`ehrgym.bench.locality.order_free`); an episode's views
    always serve them where a base row would be.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, base: str = "base", profile: Any = None,
                 ordered: bool = True) -> None:
        self.con = con
        self.base = base
        self.ordered = ordered
        self._touched: set[str] = set()
        self._current: dict[str, TableEdit] | None = {}
        # profile: an ehrgym.db.profile.SchemaProfile (None: the MIMIC-IV tables)
        self._spec = profile.table_spec if profile is not None else table_spec
        specs = profile.tables if profile is not None else tuple(mimic_schema().values())
        for schema in (profile.schemas if profile is not None else EXPOSED_SCHEMAS):
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        for spec in specs:
            con.execute(f"CREATE OR REPLACE VIEW {spec.qualified} AS {_view_sql(spec, base, None)}")

    def apply(self, overlay: Overlay) -> None:
        merged = overlay.merged()
        if merged == self._current:
            return  # the k trials of a task reuse one overlay: nothing to re-point
        known = self._current
        # a view whose edit is the same in both overlays stays as it is (a pair's background under its noise)
        pending = sorted(name for name in self._touched | set(merged)
                         if known is None or known.get(name) != merged.get(name))
        # Record every table that may be left re-pointed before touching any, so a failure
        # part-way still lets clear() restore them all.
        self._touched |= set(merged)
        self._current = None  # unknown until every view is re-pointed
        for name in pending:
            spec = self._spec(name)
            try:
                self.con.execute(f"CREATE OR REPLACE VIEW {spec.qualified} AS "
                                 f"{_view_sql(spec, self.base, merged.get(name), ordered=self.ordered)}")
            except duckdb.Error as exc:
                raise OverlayError(f"overlay on {name} does not fit the database: {exc}") from exc
        self._touched = set(merged)
        self._current = merged

    def clear(self) -> None:
        self.apply(Overlay())


def overlay_connection(db: Any, threads: int | None = 1) -> tuple[duckdb.DuckDBPyConnection, OverlaySession]:
    """A fresh in-memory connection with ``db`` attached read-only as ``base`` and views named like the MIMIC-IV
    tables on the search path — an episode's connection; ``threads`` 1 reads tied rows in scan order, as
    episodes are served (None: DuckDB's default)."""
    from ehrgym.db.connect import attach_base
    from ehrgym.db.schema import search_path_sql

    con = duckdb.connect()
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    attach_base(con, db)
    session = OverlaySession(con)
    con.execute(search_path_sql())
    return con, session


def apply_overlay(con: duckdb.DuckDBPyConnection, overlay: Overlay, base: str = "base") -> OverlaySession:
    """Create the shadowing views for ``overlay`` on ``con`` (whose ``base`` is attached)."""
    session = OverlaySession(con, base)
    session.apply(overlay)
    return session
