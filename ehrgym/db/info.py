"""``ehrgym db info``: what a kit database holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ehrgym.db.connect import open_database, read_meta, table_row_counts
from ehrgym.db.schema import mimic_schema


def database_info(path: str | Path) -> dict[str, Any]:
    """Bookkeeping plus live per-table row counts of a kit database."""
    con = open_database(path, read_only=True)
    try:
        meta = read_meta(con)
        counts = table_row_counts(con)
    finally:
        con.close()
    return {"path": str(path), "size_bytes": Path(path).stat().st_size, **meta, "row_counts": counts}


CORE_KEYS: tuple[str, ...] = ("source", "release", "seed", "patients", "build_seconds", "content_hash")


def format_info(info: dict[str, Any]) -> str:
    """Human-readable summary: bookkeeping (``-`` where a key does not apply, e.g. the seed of a
    loaded MIMIC-IV) and per-table row counts."""
    lines = [f"database      {info['path']} ({info['size_bytes'] / 2**20:.1f} MiB)"]
    for key in CORE_KEYS:
        lines.append(f"{key:<13} {info.get(key, '-')}")
    if "rows_validated" in info:
        mismatches = info.get("count_mismatches") or []
        state = "yes" if info["rows_validated"] and not mismatches else (
            f"{len(mismatches)} mismatch(es)" if mismatches else "no (release not recognised)")
        lines.append(f"{'validated':<13} {state}")
    if info.get("missing_tables"):
        lines.append(f"{'missing':<13} {', '.join(info['missing_tables'])} (created empty)")
    lines.append("")
    lines.append(f"{'table':<32} {'rows':>14}")
    total = 0
    for name, spec in mimic_schema().items():
        n = info["row_counts"][name]
        total += n
        lines.append(f"{spec.qualified:<32} {n:>14,}")
    lines.append(f"{'total':<32} {total:>14,}")
    return "\n".join(lines)
