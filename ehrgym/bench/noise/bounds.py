"""Plausibility bounds of item values, each with its source.

A value is *implausible* only outside both the physiologic range of the item (the reference
list ``mimic_iv_items.csv``) and the tails of the real MIMIC-IV demo (its 0.1st and 99.9th
percentiles): a bound is the wider of the two, and the file records which one set it (items of
a table the demo copy lacks keep their physiologic bounds, with ``demo_n`` 0). So a
dose that real patients receive (propofol 313 mg: a third of the demo's rows exceed 300 mg) is
never labelled implausible. ``plausibility_bounds.csv`` is generated from the demo by
``python -m ehrgym.bench.noise.bounds --demo DIR`` and checked against it by the tests.
"""

from __future__ import annotations

import argparse
import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ehrgym.db.items import item_reference
from ehrgym.resources import resource_path

FILE = "plausibility_bounds.csv"
TAIL = 0.001  # the demo quantiles a bound must include: p0.1 and p99.9
# the numeric column the benchmark reads per table
VALUE_COLUMN: dict[str, str] = {"labevents": "valuenum", "chartevents": "valuenum", "outputevents": "value",
                                "inputevents": "amount"}
DEMO_FILE: dict[str, str] = {"labevents": "hosp/labevents.csv.gz", "chartevents": "icu/chartevents.csv.gz",
                             "outputevents": "icu/outputevents.csv.gz", "inputevents": "icu/inputevents.csv.gz"}
FIELDS = ("table", "itemid", "column", "label", "physio_min", "physio_max", "demo_n", "demo_p001", "demo_p999",
          "lower", "upper", "lower_source", "upper_source")


@dataclass(frozen=True)
class PlausibleRange:
    itemid: int
    lower: float
    upper: float
    lower_source: str  # physiology | demo p0.1
    upper_source: str  # physiology | demo p99.9


def _num(x: float) -> str:
    return repr(round(float(x), 6))


def compute_bounds(demo_dir: str | Path) -> str:
    """The CSV text of the bounds, from the item reference and the demo at ``demo_dir``."""
    import duckdb

    con = duckdb.connect()
    refs = item_reference()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(FIELDS)
    for table in VALUE_COLUMN:
        items = sorted(i for i, r in refs.items() if r.table == table)
        col = VALUE_COLUMN[table]
        path = Path(demo_dir) / DEMO_FILE[table]
        stats = {} if not path.exists() else {int(r[0]): r[1:] for r in con.execute(
            f"SELECT itemid, count({col}), quantile_cont({col}, {TAIL}), quantile_cont({col}, {1 - TAIL}) "
            f"FROM read_csv_auto('{path}') WHERE itemid IN ({', '.join(map(str, items))}) "
            f"AND {col} IS NOT NULL GROUP BY itemid").fetchall()}
        for itemid in items:
            ref = refs[itemid]
            n, p_lo, p_hi = stats.get(itemid, (0, None, None))
            lower, lower_src = ref.plausible_min, "physiology"
            upper, upper_src = ref.plausible_max, "physiology"
            if p_lo is not None and p_lo < lower:
                lower, lower_src = p_lo, "demo p0.1"
            if p_hi is not None and p_hi > upper:
                upper, upper_src = p_hi, "demo p99.9"
            writer.writerow([table, itemid, col, ref.label, _num(ref.plausible_min), _num(ref.plausible_max), n,
                             "" if p_lo is None else _num(p_lo), "" if p_hi is None else _num(p_hi),
                             _num(lower), _num(upper), lower_src, upper_src])
    return out.getvalue()


@lru_cache(maxsize=1)
def plausible_ranges() -> dict[int, PlausibleRange]:
    with open(resource_path(FILE), newline="") as fh:
        return {int(r["itemid"]): PlausibleRange(int(r["itemid"]), float(r["lower"]), float(r["upper"]),
                                                 r["lower_source"], r["upper_source"])
                for r in csv.DictReader(fh)}


def plausible_range(itemid: int | None) -> PlausibleRange | None:
    return plausible_ranges().get(int(itemid)) if itemid is not None else None


def main() -> None:  # pragma: no cover - a maintenance command
    parser = argparse.ArgumentParser(description="regenerate ehrgym/resources/plausibility_bounds.csv")
    parser.add_argument("--demo", required=True, help="the MIMIC-IV demo directory (hosp/, icu/)")
    args = parser.parse_args()
    Path(resource_path(FILE)).write_text(compute_bounds(args.demo))


if __name__ == "__main__":  # pragma: no cover
    main()
