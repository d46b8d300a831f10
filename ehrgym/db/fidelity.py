"""``ehrgym db fidelity``: how MIMIC-IV-like a kit database is.

A :class:`DatabaseProfile` measures one kit database (synthetic, the demo or full MIMIC-IV):
vocabulary sizes, volumes (rows per admission for every hosp event table, per ICU stay for every
icu event table), everyday-messiness rates and per-item value quantiles for the reference items
(``ehrgym/resources/mimic_iv_items.csv``). A :class:`FidelityReport` sets it beside an optional
second database and beside full MIMIC-IV v3.1, whose volumes follow from the published row
counts (``mimic_iv_row_counts.csv``: e.g. labevents rows / admissions rows), and flags each
statistic within ±30 % of its reference (full MIMIC-IV where published, else the other database).

Every statistic is one registered :class:`Statistic`; a statistic that reads a table the database
leaves empty (the demo ships no chartevents) is ``None`` ("empty"), not 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeGuard

import duckdb
import pandas as pd

from ehrgym.db.connect import one_row, open_database, read_meta, table_row_counts
from ehrgym.db.items import item_reference, official_row_counts
from ehrgym.db.schema import mimic_schema

TOLERANCE = 0.30  # a statistic is "ok" within ±30 % of its reference
QUANTILES: tuple[float, ...] = (0.01, 0.05, 0.5, 0.95, 0.99)
MEDIAN_SHIFT_MAX = 0.10  # item medians: |p50 - ref p50| <= 10 % of the reference's p1–p99 range
SECTIONS: tuple[str, ...] = ("vocabulary", "volume", "messiness")

#: tables that are not events: the population tables and the dictionaries
NON_EVENT_TABLES = frozenset({"patients", "admissions", "icustays", "provider", "caregiver"})
#: the column holding an item's numeric value, per table of the item reference
VALUE_COLUMN: dict[str, str] = {"labevents": "valuenum", "chartevents": "valuenum", "outputevents": "value",
                                "inputevents": "amount"}


def event_tables(module: str) -> tuple[str, ...]:
    """The event tables of ``module`` (hosp or icu) in schema order: everything but the population
    tables and the ``d_*`` dictionaries."""
    return tuple(name for name, spec in mimic_schema().items()
                 if spec.module == module and name not in NON_EVENT_TABLES and not name.startswith("d_"))


# ---------------------------------------------------------------------------------------------
# statistics: one registered object each
# ---------------------------------------------------------------------------------------------
Counts = dict[str, int]


@dataclass(frozen=True)
class Statistic:
    """One number about a database. ``measure`` gets the open connection and the per-table row
    counts and returns the value (None where it is undefined); ``tables`` are the tables it reads
    (the value is None when one of them is empty); ``full`` derives full MIMIC-IV v3.1's value from
    the published row counts, where it can."""

    key: str
    section: str
    label: str
    unit: str  # "count", "ratio" or "%"
    tables: tuple[str, ...]
    measure: Callable[[duckdb.DuckDBPyConnection, Counts], float | None]
    full: Callable[[dict[str, tuple[int | None, int | None]]], float | None] = lambda _: None


STATISTICS: dict[str, Statistic] = {}


def register(stat: Statistic) -> Statistic:
    if stat.key in STATISTICS:
        raise ValueError(f"fidelity statistic {stat.key!r} is registered twice")
    if stat.section not in SECTIONS:
        raise ValueError(f"unknown section {stat.section!r}")
    STATISTICS[stat.key] = stat
    return stat


def _scalar(sql: str) -> Callable[[duckdb.DuckDBPyConnection, Counts], float | None]:
    def measure(con: duckdb.DuckDBPyConnection, _: Counts) -> float | None:
        value = one_row(con, sql)[0]
        return None if value is None else float(value)
    return measure


def _ratio(numerator: str, denominator: str) -> Callable[[duckdb.DuckDBPyConnection, Counts], float | None]:
    def measure(_: duckdb.DuckDBPyConnection, counts: Counts) -> float | None:
        return counts[numerator] / counts[denominator] if counts[denominator] else None
    return measure


def _full_ratio(numerator: str, denominator: str) -> Callable[[dict[str, tuple[int | None, int | None]]], float | None]:
    def full(published: dict[str, tuple[int | None, int | None]]) -> float | None:
        num, den = published.get(numerator, (None, None))[0], published.get(denominator, (None, None))[0]
        return num / den if num is not None and den else None
    return full


def _vocabulary(table: str, expr: str, label: str) -> None:
    qualified = mimic_schema()[table].qualified
    register(Statistic(f"vocabulary.{table}.{expr.replace(', ', '+')}", "vocabulary", label, "count", (table,),
                       _scalar(f"SELECT count(DISTINCT ({expr})) FROM {qualified}")))


def _rate(key: str, table: str, condition: str, label: str, where: str = "TRUE") -> None:
    qualified = mimic_schema()[table].qualified
    register(Statistic(f"messiness.{key}", "messiness", label, "%", (table,),
                       _scalar(f"SELECT 100.0 * count(*) FILTER ({condition}) / count(*) FROM {qualified} "
                               f"WHERE {where}")))


def _register_all() -> None:
    _vocabulary("labevents", "itemid", "distinct lab items in labevents")
    _vocabulary("diagnoses_icd", "icd_version, icd_code", "distinct ICD codes in diagnoses_icd")
    _vocabulary("procedures_icd", "icd_version, icd_code", "distinct ICD codes in procedures_icd")
    _vocabulary("prescriptions", "drug", "distinct drug strings in prescriptions")
    _vocabulary("microbiologyevents", "spec_type_desc", "distinct specimen types in microbiologyevents")
    _vocabulary("microbiologyevents", "org_name", "distinct organisms in microbiologyevents")
    for table in ("chartevents", "inputevents", "outputevents", "procedureevents", "datetimeevents"):
        _vocabulary(table, "itemid", f"distinct items in {table}")

    register(Statistic("volume.admissions_per_patient", "volume", "admissions per patient", "ratio",
                       ("admissions",), _ratio("admissions", "patients"), _full_ratio("admissions", "patients")))
    register(Statistic("volume.icustays_per_admission", "volume", "ICU stays per admission", "ratio",
                       ("icustays",), _ratio("icustays", "admissions"), _full_ratio("icustays", "admissions")))
    for module, denominator, per in (("hosp", "admissions", "admission"), ("icu", "icustays", "ICU stay")):
        for table in event_tables(module):
            register(Statistic(f"volume.{table}_per_{denominator}", "volume", f"{table} rows per {per}", "ratio",
                               (table,), _ratio(table, denominator), _full_ratio(table, denominator)))

    _rate("labevents_null_valuenum", "labevents", "WHERE valuenum IS NULL", "lab rows with NULL valuenum")
    _rate("labevents_outpatient", "labevents", "WHERE hadm_id IS NULL", "lab rows without hadm_id (outpatient)")
    _rate("labevents_flagged", "labevents", "WHERE flag IS NOT NULL", "lab rows flagged abnormal")
    _rate("labevents_comments", "labevents", "WHERE comments IS NOT NULL", "lab rows with comments")
    _rate("labevents_no_ref_range", "labevents", "WHERE ref_range_lower IS NULL AND ref_range_upper IS NULL",
          "numeric lab rows without a reference range", where="valuenum IS NOT NULL")
    _rate("microbiologyevents_outpatient", "microbiologyevents", "WHERE hadm_id IS NULL",
          "micro rows without hadm_id (outpatient)")
    _rate("chartevents_null_valuenum", "chartevents", "WHERE valuenum IS NULL", "chart rows with NULL valuenum")
    _rate("admissions_ed", "admissions", "WHERE edregtime IS NOT NULL", "admissions through the ED (edregtime)")
    _rate("admissions_died", "admissions", "WHERE hospital_expire_flag = 1", "admissions ending in death")
    register(Statistic("messiness.patients_readmitted", "messiness", "patients with more than one admission", "%",
                       ("admissions",), _scalar(
                           "SELECT 100.0 * count(*) FILTER (WHERE n > 1) / count(*) FROM "
                           "(SELECT count(*) AS n FROM mimiciv_hosp.admissions GROUP BY subject_id)")))


_register_all()


# ---------------------------------------------------------------------------------------------
# one database
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ItemQuantiles:
    """Value quantiles (p1, p5, p50, p95, p99) of one reference item; None where it has no values."""

    table: str
    itemid: int
    n: int
    p01: float | None
    p05: float | None
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class DatabaseProfile:
    """The measured statistics of one kit database."""

    path: str
    source: str
    label: str
    patients: int
    values: dict[str, float | None]  # statistic key -> value (None: undefined or its table is empty)
    empty_tables: tuple[str, ...]
    items: tuple[ItemQuantiles, ...] = field(default=())

    def item(self, itemid: int) -> ItemQuantiles | None:
        return next((q for q in self.items if q.itemid == itemid), None)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "empty_tables": list(self.empty_tables), "items": [asdict(q) for q in self.items]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatabaseProfile:
        return cls(path=data["path"], source=data["source"], label=data["label"], patients=int(data["patients"]),
                   values=dict(data["values"]), empty_tables=tuple(data["empty_tables"]),
                   items=tuple(ItemQuantiles(**q) for q in data["items"]))


def _label(meta: dict[str, Any], patients: int) -> str:
    source = str(meta.get("source", "unknown"))
    if source == "synthetic":
        return f"synthetic ({patients:,} patients, seed {meta.get('seed')})"
    return f"{source} {meta.get('release', '')} ({patients:,} patients)".replace("  ", " ")


def _item_quantiles(con: duckdb.DuckDBPyConnection, counts: Counts) -> tuple[ItemQuantiles, ...]:
    out: list[ItemQuantiles] = []
    refs = sorted(item_reference().values(), key=lambda r: (r.table, r.itemid))
    for table, column in VALUE_COLUMN.items():
        ids = [r.itemid for r in refs if r.table == table]
        if not ids or not counts[table]:
            continue
        qs = ", ".join(str(q) for q in QUANTILES)
        rows = con.execute(
            f"SELECT itemid, count({column}), quantile_cont({column}, [{qs}]) FROM {mimic_schema()[table].qualified} "
            f"WHERE itemid IN ({', '.join(map(str, ids))}) GROUP BY itemid").fetchall()
        found = {int(itemid): (int(n), values) for itemid, n, values in rows}
        for itemid in ids:
            n, values = found.get(itemid, (0, None))
            values = values if n else [None] * len(QUANTILES)
            out.append(ItemQuantiles(table, itemid, n, *(None if v is None else float(v) for v in values)))
    return tuple(out)


def profile_database(path: str | Path) -> DatabaseProfile:
    """Measure every registered statistic and the reference items' quantiles of a kit database
    (read-only). Raises :class:`~ehrgym.errors.DatabaseError` for a file that is not a kit database."""
    con = open_database(path, read_only=True)
    try:
        meta = read_meta(con)
        counts = table_row_counts(con)
        empty = tuple(name for name, n in counts.items() if n == 0)
        values: dict[str, float | None] = {}
        for key, stat in STATISTICS.items():
            values[key] = None if any(counts[t] == 0 for t in stat.tables) else stat.measure(con, counts)
        items = _item_quantiles(con, counts)
    finally:
        con.close()
    patients = counts["patients"]
    return DatabaseProfile(str(path), str(meta.get("source", "unknown")), _label(meta, patients), patients, values,
                           empty, items)


def full_mimic_values() -> dict[str, float | None]:
    """Every statistic's full MIMIC-IV v3.1 value where the published row counts give it."""
    published = official_row_counts()
    return {key: stat.full(published) for key, stat in STATISTICS.items()}


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def _finite(x: float | None) -> TypeGuard[float]:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def compare(value: float | None, reference: float | None) -> tuple[float | None, str]:
    """``(value / reference, flag)``: flag ``ok`` within ±30 %, else ``low``/``high``; ``empty``
    when the value is undefined, ``""`` when there is nothing to compare with."""
    if not _finite(value):
        return None, "empty"
    if not _finite(reference):
        return None, ""
    if reference == 0:
        return None, "ok" if value == 0 else "high"
    ratio = value / reference
    flag = "ok" if abs(ratio - 1) <= TOLERANCE else ("low" if ratio < 1 else "high")
    return ratio, flag


@dataclass(frozen=True)
class FidelityReport:
    this: DatabaseProfile
    other: DatabaseProfile | None = None

    def statistics(self) -> pd.DataFrame:
        """One row per statistic: this database, the other (None without ``--against``), full
        MIMIC-IV v3.1, the ratio to the reference (full MIMIC-IV where published, else the other
        database) and the flag."""
        full = full_mimic_values()
        rows = []
        for key, stat in STATISTICS.items():
            this = self.this.values.get(key)
            other = self.other.values.get(key) if self.other else None
            reference, ref_name = (full[key], "full") if full[key] is not None else (
                (other, "other") if self.other is not None else (None, ""))
            ratio, flag = compare(this, reference)
            rows.append({"section": stat.section, "statistic": stat.label, "key": key, "unit": stat.unit,
                         "this": this, "other": other, "full_mimic_iv": full[key], "reference": ref_name,
                         "ratio": ratio, "flag": flag})
        return pd.DataFrame(rows)

    def items(self) -> pd.DataFrame:
        """One row per reference item with values here: its quantiles, the reference's (the demo
        quantiles of the item reference, else the other database's), the median shift as a
        fraction of the reference's p1–p99 range, the p1–p99 spread ratio and the flag (``ok``:
        |shift| <= 0.10 and spread within ±30 %)."""
        refs = item_reference()
        rows = []
        for q in self.this.items:
            ref = refs[q.itemid]
            other = self.other.item(q.itemid) if self.other else None
            r01: float | None
            r50: float | None
            r99: float | None
            if ref.demo_p50 is not None:
                r01, r50, r99, ref_name = ref.demo_p01, ref.demo_p50, ref.demo_p99, "demo"
            elif other is not None and other.n:
                r01, r50, r99, ref_name = other.p01, other.p50, other.p99, "other"
            else:
                r01 = r50 = r99 = None
                ref_name = ""
            shift: float | None = None
            spread: float | None = None
            flag = "empty" if not q.n else ""
            if q.n and r50 is not None and r01 is not None and r99 is not None and r99 > r01:
                assert q.p01 is not None and q.p50 is not None and q.p99 is not None  # n > 0: quantiles exist
                shift = (q.p50 - r50) / (r99 - r01)
                spread = (q.p99 - q.p01) / (r99 - r01)
                flag = "ok" if abs(shift) <= MEDIAN_SHIFT_MAX and abs(spread - 1) <= TOLERANCE else "off"
            rows.append({"table": q.table, "itemid": q.itemid, "label": ref.label, "unit": ref.unit, "n": q.n,
                         "p01": q.p01, "p05": q.p05, "p50": q.p50, "p95": q.p95, "p99": q.p99,
                         "other_n": other.n if other else None, "other_p50": other.p50 if other else None,
                         "ref_p01": r01, "ref_p50": r50, "ref_p99": r99, "reference": ref_name,
                         "median_shift": shift, "spread_ratio": spread, "flag": flag})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        return {"this": self.this.to_dict(), "other": self.other.to_dict() if self.other else None,
                "full_mimic_iv": full_mimic_values(), "tolerance": TOLERANCE,
                "statistics": _records(self.statistics()), "items": _records(self.items())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FidelityReport:
        other = data.get("other")
        return cls(DatabaseProfile.from_dict(data["this"]), DatabaseProfile.from_dict(other) if other else None)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.astype(object).to_dict(orient="records")]


def fidelity_report(path: str | Path, against: str | Path | None = None) -> FidelityReport:
    """Profile ``path`` (and ``against``, e.g. the loaded demo) for :class:`FidelityReport`."""
    return FidelityReport(profile_database(path), profile_database(against) if against is not None else None)


# ---------------------------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------------------------
def _fmt(value: float | None, unit: str) -> str:
    if not _finite(value):
        return "-"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "count" or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def format_report(report: FidelityReport, *, all_items: bool = False) -> str:
    """The statistics table (grouped by section) and a summary of the item quantiles (every item
    with ``all_items``, else only those off their reference)."""
    stats = report.statistics()
    lines = [f"this      {report.this.label}  [{report.this.path}]"]
    if report.other is not None:
        lines.append(f"other     {report.other.label}  [{report.other.path}]")
    lines.append("full      MIMIC-IV v3.1, derived from the published row counts")
    lines.append(f"ratio     this / reference (full MIMIC-IV where published, else other); ok within "
                 f"±{TOLERANCE:.0%}; '-' undefined or empty table")
    other_head = f"{'other':>11}" if report.other is not None else f"{'':>11}"
    header = f"{'statistic':<46} {'this':>11} {other_head} {'full':>11} {'ratio':>7}  flag"
    for section in SECTIONS:
        lines += ["", f"[{section}]", header]
        for row in stats[stats["section"] == section].itertuples():
            ratio = "-" if not _finite(row.ratio) else f"{row.ratio:.2f}" if row.ratio >= 0.1 else f"{row.ratio:.3f}"
            this = "empty" if row.flag == "empty" else _fmt(row.this, row.unit)
            other = _fmt(row.other, row.unit) if report.other is not None else ""
            lines.append(f"{row.statistic:<46} {this:>11} {other:>11} {_fmt(row.full_mimic_iv, row.unit):>11} "
                         f"{ratio:>7}  {row.flag}")
    items = report.items()
    lines += ["", "[item values]  median shift = (p50 - reference p50) / reference p1-p99 range; spread = p1-p99 "
              f"range / reference's; ok: |shift| <= {MEDIAN_SHIFT_MAX:.2f} and spread within ±{TOLERANCE:.0%}"]
    compared = items[items["flag"].isin(["ok", "off"])]
    lines.append(f"{len(compared)} of {len(items)} reference items compared ({(compared['flag'] == 'ok').sum()} ok); "
                 f"{int((items['n'] > 0).sum())} have values here")
    shown = items if all_items else items[items["flag"] == "off"]
    if not shown.empty:
        lines.append(f"{'table':<13} {'itemid':>6} {'label':<28} {'n':>8} {'p5':>9} {'p50':>9} {'p95':>9} "
                     f"{'ref p50':>9} {'shift':>6} {'spread':>6}  flag")
        for row in shown.itertuples():
            num = lambda v, d=2: f"{v:.{d}f}" if _finite(v) else "-"  # noqa: E731
            lines.append(f"{row.table:<13} {row.itemid:>6} {row.label[:28]:<28} {row.n:>8,} {num(row.p05):>9} "
                         f"{num(row.p50):>9} {num(row.p95):>9} {num(row.ref_p50):>9} {num(row.median_shift):>6} "
                         f"{num(row.spread_ratio):>6}  {row.flag}")
    return "\n".join(lines)
