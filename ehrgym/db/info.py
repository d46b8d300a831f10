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


def format_info(info: dict[str, Any]) -> str:
    lines = [f"database      {info['path']} ({info['size_bytes'] / 2**20:.1f} MiB)"]
    for key in ("source", "release", "seed", "patients", "build_seconds", "content_hash"):
        if key in info:
            lines.append(f"{key:<13} {info[key]}")
    lines.append("")
    lines.append(f"{'table':<32} {'rows':>14}")
    total = 0
    for name, spec in mimic_schema().items():
        n = info["row_counts"][name]
        total += n
        lines.append(f"{spec.qualified:<32} {n:>14,}")
    lines.append(f"{'total':<32} {total:>14,}")
    return "\n".join(lines)
