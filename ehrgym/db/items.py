"""The item reference: real MIMIC-IV item ids, labels, units, physiologic bounds, demo quantiles."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from ehrgym.resources import resource_path


@dataclass(frozen=True)
class ItemRef:
    table: str
    itemid: int
    label: str
    group: str
    unit: str
    plausible_min: float
    plausible_max: float
    demo_p01: float | None
    demo_p50: float | None
    demo_p99: float | None

    def is_plausible(self, value: float) -> bool:
        return self.plausible_min <= value <= self.plausible_max


def _opt(text: str) -> float | None:
    return float(text) if text.strip() else None


@lru_cache(maxsize=1)
def item_reference() -> dict[int, ItemRef]:
    """All reference items keyed by itemid."""
    out: dict[int, ItemRef] = {}
    with open(resource_path("mimic_iv_items.csv"), newline="") as fh:
        for row in csv.DictReader(fh):
            ref = ItemRef(
                table=row["table"],
                itemid=int(row["itemid"]),
                label=row["label"],
                group=row["group"],
                unit=row["unit"],
                plausible_min=float(row["plausible_min"]),
                plausible_max=float(row["plausible_max"]),
                demo_p01=_opt(row["demo_p01"]),
                demo_p50=_opt(row["demo_p50"]),
                demo_p99=_opt(row["demo_p99"]),
            )
            out[ref.itemid] = ref
    return out


def items_for_table(table: str) -> list[ItemRef]:
    return [ref for ref in item_reference().values() if ref.table == table]


@lru_cache(maxsize=1)
def official_row_counts() -> dict[str, tuple[int | None, int | None]]:
    """``table -> (rows in full v3.1, rows in demo v2.2)``; None where not published."""
    out: dict[str, tuple[int | None, int | None]] = {}
    with open(resource_path("mimic_iv_row_counts.csv"), newline="") as fh:
        for row in csv.DictReader(fh):
            full = int(row["rows_full_v3_1"]) if row["rows_full_v3_1"] else None
            demo = int(row["rows_demo_v2_2"]) if row["rows_demo_v2_2"] else None
            out[row["table"]] = (full, demo)
    return out
