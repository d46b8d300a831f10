"""Arrow column builders and the bulk writer: one ``INSERT INTO … SELECT`` per table.

Generators return :class:`TableData`: Arrow columns named like the schema's columns (plus helper
columns) and optional SQL expressions for derived columns (e.g. ``emar_id``). The writer selects
the schema's columns in order, casts each to its DuckDB type and fills absent ones with NULL.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from ehrgym.db.schema import table_spec
from ehrgym.db.synth.common import NAT
from ehrgym.errors import SchemaError


ROW_GROUP_ROWS = 122_880
"""Rows per Arrow record batch handed to DuckDB: its row-group size, so that a big table arrives as many
batches, which DuckDB converts, compresses and writes on all its threads (batch insert keeps the order)."""


def _validity(null: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if null is None:
        return None, 0
    null = np.asarray(null, dtype=bool)
    nulls = int(np.count_nonzero(null))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(~null, bitorder="little")), nulls


def _array(arrow_type: pa.DataType, values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """A primitive Arrow array over ``values``' memory (``null`` marks NULLs). Built from buffers rather
    than with ``pa.array``, which imports pandas on first use and ``pyarrow.compute`` for casts."""
    validity, nulls = _validity(null)
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, values.size, [validity, pa.py_buffer(values)], null_count=nulls)


def _strings(values: Sequence[str]) -> pa.Array:
    """A (small) Arrow string array without ``pa.array``."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def ts(seconds: np.ndarray) -> pa.Array:
    """Timestamps from int64 seconds (``NAT`` → NULL)."""
    seconds = np.asarray(seconds, dtype=np.int64)
    if seconds.size == 0 or int(seconds.min()) != NAT:
        return _array(pa.timestamp("s"), seconds)
    mask = seconds == NAT
    return _array(pa.timestamp("s"), np.where(mask, 0, seconds), mask)


def dates(days: np.ndarray) -> pa.Array:
    """Dates from int64 days since 1970-01-01 (``NAT`` → NULL)."""
    days = np.asarray(days, dtype=np.int64)
    mask = days == NAT
    return _array(pa.date32(), np.where(mask, 0, days).astype(np.int32), mask)


def ints(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    return _array(pa.int64(), np.asarray(values, dtype=np.int64), null)


def floats(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    return _array(pa.float64(), np.asarray(values, dtype=np.float64), null)


def cat(codes: np.ndarray, labels: Sequence[str | None]) -> pa.Array:
    """Dictionary-encoded strings: ``labels[codes]`` without materialising Python strings (code < 0 or a
    ``None`` label → NULL)."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        codes = codes.astype(np.int64)
    label_list = list(labels)
    if codes.size and int(codes.max()) >= len(label_list):
        raise SchemaError(f"category code {int(codes.max())} out of range for {len(label_list)} labels")
    dictionary = _strings(["" if lab is None else lab for lab in label_list] or [""])
    null_labels = np.array([lab is None for lab in label_list], dtype=bool)
    if not null_labels.any() and (codes.size == 0 or int(codes.min()) >= 0):  # no NULL: codes as they are
        return pa.DictionaryArray.from_arrays(_array(pa.int32(), codes.astype(np.int32, copy=False)), dictionary)
    mask = codes < 0
    if null_labels.any():
        mask |= null_labels[np.where(mask, 0, codes)]
    safe = codes.astype(np.int32)
    safe[mask] = 0
    return pa.DictionaryArray.from_arrays(_array(pa.int32(), safe, mask), dictionary)


def const(value: str | None, n: int) -> pa.Array:
    return cat(np.zeros(n, dtype=np.int64), [value])


_TEXT_SQL = "CASE WHEN d = 0 THEN CAST(CAST(v AS BIGINT) AS VARCHAR) ELSE CAST(v AS VARCHAR) END"
"""How a charted or measured number is written in a ``value`` column: DuckDB's own text of the double, or of
its integer for items charted without decimals ('120', '98.6', '7.35'). It used to run per row in the INSERT;
:func:`number_text` runs it on the distinct numbers only and hands DuckDB a dictionary array (same text)."""
_formatter_lock = threading.Lock()
_formatter: duckdb.DuckDBPyConnection | None = None
_POW10 = 10.0 ** np.arange(8)


def _factorize(values: np.ndarray, decimals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes, distinct values, their decimals)`` of the (value, decimals) pairs (NaN → code -1).

    Values rounded to few decimals take few distinct values in a bounded range: the rounded integer
    ``K = rint(value * 10**decimals)`` keys a presence table (linear time, no sort, no per-row Python) and
    each distinct value is rebuilt as ``K / 10**decimals``, which is what ``np.round`` returns. Every row is
    then checked bit for bit against its rebuilt value (-0.0 has its own key: its text is '-0.0'); values
    that are not such rounded numbers, or too wide a range, fall back to ``np.unique``.
    """
    n = values.size
    missing = np.isnan(values)
    bits = values.view(np.int64)
    if n and 0 <= int(decimals.min()) and int(decimals.max()) < _POW10.size:
        scaled = values * _POW10[decimals]
        np.rint(scaled, out=scaled)
        scaled[missing] = 0.0
        if -2.0 ** 52 < scaled.min() and scaled.max() < 2.0 ** 52:
            key = scaled.astype(np.int64)
            key *= 16
            key += decimals * 2
            key += (values == 0) & np.signbit(values)
            lo = int(key.min())
            span = int(key.max()) - lo + 1
            if span <= max(4 * n, 1 << 22):
                key -= lo
                present = np.zeros(span, dtype=bool)
                present[key] = True
                distinct = np.flatnonzero(present)
                lookup = np.empty(span, dtype=np.int32)
                lookup[distinct] = np.arange(distinct.size, dtype=np.int32)
                codes = lookup[key]
                codes[missing] = -1
                distinct += lo
                dist_dec = (distinct >> 1) & 7
                dist_val = (distinct >> 4) / _POW10[dist_dec]
                dist_val[(distinct & 1) == 1] = -0.0
                same = dist_val.view(np.int64)[codes] == bits
                same |= missing
                if same.all():
                    return codes, dist_val, dist_dec
    rows = np.flatnonzero(~missing)
    _, by_bits = np.unique(bits[rows], return_inverse=True)
    decs, by_dec = np.unique(decimals[rows], return_inverse=True)
    _, first, inverse = np.unique(by_bits.reshape(-1).astype(np.int64) * decs.size + by_dec.reshape(-1),
                                  return_index=True, return_inverse=True)
    codes = np.full(n, -1, dtype=np.int32)
    codes[rows] = inverse.reshape(-1)
    return codes, values[rows[first]], decimals[rows[first]]


def number_text(values: np.ndarray, decimals: np.ndarray | int) -> tuple[np.ndarray, list[str]]:
    """``(codes, labels)`` for :func:`cat`: the text of each number exactly as ``CAST`` writes it in SQL
    (see ``_TEXT_SQL``; NaN → NULL), formatting only the distinct numbers, by DuckDB itself."""
    global _formatter
    values = np.ascontiguousarray(values, dtype=np.float64)
    decimals = np.ascontiguousarray(np.broadcast_to(np.asarray(decimals, dtype=np.int64), values.shape))
    codes, dist_val, dist_dec = _factorize(values, decimals)
    if dist_val.size == 0:
        return codes, []
    distinct = pa.table({"i": ints(np.arange(dist_val.size)), "v": floats(dist_val), "d": ints(dist_dec)})
    with _formatter_lock:  # generators run on a background thread; one private in-memory DuckDB
        if _formatter is None:
            _formatter = duckdb.connect()
        _formatter.register("_distinct_numbers", distinct)
        try:
            labels = [r[0] for r in _formatter.execute(
                f"SELECT {_TEXT_SQL} FROM _distinct_numbers ORDER BY i").fetchall()]
        finally:
            _formatter.unregister("_distinct_numbers")
    return codes, labels


@dataclass
class TableData:
    name: str
    columns: dict[str, pa.Array]
    exprs: dict[str, str] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def arrow(self) -> pa.Table:
        lengths = {k: len(v) for k, v in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise SchemaError(f"synthetic table {self.name}: columns of unequal length {lengths}")
        table = pa.table(self.columns)
        if table.num_rows <= ROW_GROUP_ROWS:
            return table
        return pa.Table.from_batches(table.to_batches(max_chunksize=ROW_GROUP_ROWS), table.schema)


def insert(con: duckdb.DuckDBPyConnection, data: TableData) -> int:
    """Bulk-insert one generated table into its MIMIC-IV table; returns the row count."""
    spec = table_spec(data.name)
    known = set(spec.column_names)
    unknown = [c for c in data.exprs if c not in known]
    if unknown:
        raise SchemaError(f"synthetic table {data.name}: expressions for unknown columns {unknown}")
    if data.num_rows == 0:
        return 0
    select = []
    for col in spec.columns:
        if col.name in data.exprs:
            source = f"({data.exprs[col.name]})"
        elif col.name in data.columns:
            source = f'"{col.name}"'
        else:
            source = "NULL"
        select.append(f'CAST({source} AS {col.duckdb_type}) AS "{col.name}"')
    view = f"_synth_{data.name}"
    con.register(view, data.arrow())
    try:
        con.execute(f"INSERT INTO {spec.qualified} SELECT {', '.join(select)} FROM {view}")
    finally:
        con.unregister(view)
    return data.num_rows
