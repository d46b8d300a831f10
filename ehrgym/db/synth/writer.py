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


def ts(seconds: np.ndarray) -> pa.Array:
    """Timestamps from int64 seconds (``NAT`` → NULL)."""
    seconds = np.asarray(seconds, dtype=np.int64)
    mask = seconds == NAT
    return pa.array(np.where(mask, 0, seconds), type=pa.int64(), mask=mask if mask.any() else None).cast(pa.timestamp("s"))


def dates(days: np.ndarray) -> pa.Array:
    """Dates from int64 days since 1970-01-01 (``NAT`` → NULL)."""
    days = np.asarray(days, dtype=np.int64)
    mask = days == NAT
    return pa.array(np.where(mask, 0, days).astype(np.int32), type=pa.int32(),
                    mask=mask if mask.any() else None).cast(pa.date32())


def ints(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    values = np.asarray(values, dtype=np.int64)
    return pa.array(values, type=pa.int64(), mask=null if null is not None and null.any() else None)


def floats(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    values = np.asarray(values, dtype=np.float64)
    return pa.array(values, type=pa.float64(), mask=null if null is not None and null.any() else None)


def cat(codes: np.ndarray, labels: Sequence[str | None]) -> pa.Array:
    """Dictionary-encoded strings: ``labels[codes]`` without materialising Python strings (code < 0 or a
    ``None`` label → NULL)."""
    codes = np.asarray(codes, dtype=np.int64)
    label_list = list(labels)
    null_labels = np.array([lab is None for lab in label_list] + [True], dtype=bool)
    mask = (codes < 0) | null_labels[np.where(codes < 0, len(label_list), codes)]
    safe = np.where(mask, 0, codes).astype(np.int32)
    dictionary = pa.array(["" if lab is None else lab for lab in label_list] or [""], type=pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(safe, type=pa.int32(), mask=mask if mask.any() else None),
                                          dictionary)


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
        return pa.table(self.columns)


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
