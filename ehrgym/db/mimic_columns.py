"""Mapping a CSV header onto the kit's MIMIC-IV v2.2 columns.

PhysioNet's CSV headers are the v2.2 column names; one table of the demo and of v2.2
(``procedureevents``) spells two of them in capitals (``ORIGINALAMOUNT``), which later
releases may write in lower case. Matching is therefore case-insensitive: a header column maps
onto the v2.2 column with the same name up to case. Anything else — a column the v2.2 schema
does not have, or a v2.2 column the file lacks — cannot be mapped faithfully and is an error
that names the columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from ehrgym.db.schema import TableSpec
from ehrgym.errors import LoaderError


@dataclass(frozen=True)
class ColumnMapping:
    """How a file's columns feed a table: ``file_columns[i]`` loads into ``targets[i]``."""

    spec: TableSpec
    file_columns: tuple[str, ...]
    targets: tuple[str, ...]          # v2.2 column fed by each file column (same order)

    @property
    def renamed(self) -> dict[str, str]:
        return {f: t for f, t in zip(self.file_columns, self.targets) if f != t}

    @property
    def reorders(self) -> bool:
        return list(self.targets) != self.spec.column_names

    def read_columns(self) -> dict[str, str]:
        """``columns=`` argument of DuckDB's ``read_csv``: the v2.2 name and type of each file
        column, in file order (DuckDB assigns them by position, so renamed columns need no SQL)."""
        return {t: self.spec.column(t).duckdb_type for t in self.targets}

    def select_list(self) -> str:
        """SELECT list producing the table's columns in the schema's order."""
        return ", ".join(f'"{c}"' for c in self.spec.column_names)


def map_columns(spec: TableSpec, header: list[str], where: str) -> ColumnMapping:
    """Map ``header`` (from file ``where``) onto ``spec``; :class:`LoaderError` if it cannot."""
    by_lower = {c.lower(): c for c in spec.column_names}
    targets: list[str] = []
    unexpected: list[str] = []
    seen: dict[str, str] = {}
    for col in header:
        target = by_lower.get(col.strip().lower())
        if target is None:
            unexpected.append(col)
            continue
        if target in seen:
            raise LoaderError(f"{where}: columns {seen[target]!r} and {col!r} both map onto "
                              f"{spec.qualified}.{target}; the file header is malformed")
        seen[target] = col
        targets.append(target)
    missing = [c for c in spec.column_names if c not in seen]
    if unexpected or missing:
        parts = []
        if unexpected:
            parts.append(f"unexpected column(s) {', '.join(unexpected)}")
        if missing:
            parts.append(f"missing column(s) {', '.join(missing)}")
        raise LoaderError(
            f"{where} does not have the MIMIC-IV v2.2 columns of {spec.qualified}: {'; '.join(parts)}. "
            f"Expected: {', '.join(spec.column_names)}. Check that the file is the PhysioNet original "
            f"(v2.2 or later) and not an edited or derived copy.")
    return ColumnMapping(spec, tuple(header), tuple(targets))
