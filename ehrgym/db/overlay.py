"""Overlays: declarative per-task edits served as views that shadow the base tables.

An overlay never copies a table. Deleted rows are filtered out by their stable row identity
(DuckDB ``rowid`` of the read-only base table) and inserted rows are inlined, typed, into the
view definition, so applying one costs the same on a 1k- and a 20k-patient database.
Replacing cells is a delete of the original row plus an insert of the edited copy
(:func:`replace_cells` resolves it against the base when the overlay is made).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

import duckdb

from ehrgym.db.schema import EXPOSED_SCHEMAS, TableSpec, mimic_schema, table_spec
from ehrgym.errors import OverlayError

JsonRow = dict[str, Any]


@dataclass(frozen=True)
class TableEdit:
    """Edits of one table: rows removed by base ``rowid`` and full rows added."""

    table: str
    delete_rowids: tuple[int, ...] = ()
    insert_rows: tuple[JsonRow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "delete_rowids": list(self.delete_rowids),
                "insert_rows": [dict(r) for r in self.insert_rows]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TableEdit":
        try:
            table = str(data["table"])
            spec = table_spec(table)
            deletes = tuple(int(r) for r in data.get("delete_rowids", []))
            rows = tuple(dict(r) for r in data.get("insert_rows", []))
        except (KeyError, TypeError, ValueError) as exc:
            raise OverlayError(f"malformed table edit {data!r}: {exc}") from exc
        for row in rows:
            unknown = set(row) - set(spec.column_names)
            if unknown:
                raise OverlayError(f"insert into {table} names unknown columns {sorted(unknown)}")
        return cls(spec.name, deletes, rows)


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
            out[e.table] = e if prev is None else TableEdit(
                e.table, prev.delete_rowids + e.delete_rowids, prev.insert_rows + e.insert_rows)
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


def to_json_value(value: Any) -> Any:
    """Convert a DuckDB/pandas cell to the JSON form overlays store."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return value


def sql_literal(value: Any, duckdb_type: str) -> str:
    """A typed SQL literal for an overlay cell."""
    if value is None:
        return f"CAST(NULL AS {duckdb_type})"
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise OverlayError(f"non-finite value {value!r} cannot be stored in an overlay")
        return f"CAST({value!r} AS {duckdb_type})"
    text = str(value).replace("'", "''")
    return f"CAST('{text}' AS {duckdb_type})"


def fetch_rows(con: duckdb.DuckDBPyConnection, table: str, rowids: list[int],
               catalog: str | None = None) -> dict[int, JsonRow]:
    """Full rows of ``table`` by base rowid, JSON-ready."""
    spec = table_spec(table)
    prefix = f"{catalog}." if catalog else ""
    if not rowids:
        return {}
    ids = ", ".join(str(int(r)) for r in rowids)
    cur = con.execute(f"SELECT rowid, * FROM {prefix}{spec.qualified} WHERE rowid IN ({ids})")
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
    return TableEdit(spec.name, tuple(sorted(changes)), tuple(rows))


def _view_sql(spec: TableSpec, base: str, edit: TableEdit | None) -> str:
    source = f"{base}.{spec.qualified}"
    if edit is None:
        return f"SELECT * FROM {source}"
    select = f"SELECT * FROM {source}"
    if edit.delete_rowids:
        ids = ", ".join(str(r) for r in sorted(set(edit.delete_rowids)))
        select += f" WHERE rowid NOT IN ({ids})"
    parts = [select]
    for row in edit.insert_rows:
        cells = ", ".join(f'{sql_literal(row.get(c.name), c.duckdb_type)} AS "{c.name}"' for c in spec.columns)
        parts.append(f"SELECT {cells}")
    return "\nUNION ALL ".join(parts)


class OverlaySession:
    """Views named like the MIMIC-IV tables, in a connection's own catalog, over an attached base.

    ``apply(overlay)`` re-points only the tables the previous and the new overlay touch, so
    switching tasks on a warm connection costs a handful of ``CREATE OR REPLACE VIEW``.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, base: str = "base", profile: Any = None) -> None:
        self.con = con
        self.base = base
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
        pending = sorted(self._touched | set(merged))
        # Record every table that may be left re-pointed before touching any, so a failure
        # part-way still lets clear() restore them all.
        self._touched |= set(merged)
        self._current = None  # unknown until every view is re-pointed
        for name in pending:
            spec = self._spec(name)
            try:
                self.con.execute(f"CREATE OR REPLACE VIEW {spec.qualified} AS "
                                 f"{_view_sql(spec, self.base, merged.get(name))}")
            except duckdb.Error as exc:
                raise OverlayError(f"overlay on {name} does not fit the database: {exc}") from exc
        self._touched = set(merged)
        self._current = merged

    def clear(self) -> None:
        self.apply(Overlay())


def apply_overlay(con: duckdb.DuckDBPyConnection, overlay: Overlay, base: str = "base") -> OverlaySession:
    """Create the shadowing views for ``overlay`` on ``con`` (whose ``base`` is attached)."""
    session = OverlaySession(con, base)
    session.apply(overlay)
    return session
