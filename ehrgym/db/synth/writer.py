"""Arrow column builders and the bulk writer: one ``INSERT INTO … SELECT`` per table.

Generators return :class:`TableData`: Arrow columns named like the schema's columns (plus helper
columns) and optional SQL expressions for derived columns (e.g. ``emar_id``). The writer selects
the schema's columns in order, casts each to its DuckDB type and fills absent ones with NULL.
"""

from __future__ import annotations

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
    mask = codes < 0
    null_labels = np.array([lab is None for lab in label_list], dtype=bool)
    if null_labels.any():
        mask |= null_labels[np.where(mask, 0, codes)]
    safe = codes.astype(np.int32)
    safe[mask] = 0
    return pa.DictionaryArray.from_arrays(_array(pa.int32(), safe, mask),
                                          _strings(["" if lab is None else lab for lab in label_list] or [""]))


def const(value: str | None, n: int) -> pa.Array:
    return cat(np.zeros(n, dtype=np.int64), [value])


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
