"""Clinically credible corrupted values and row copies used by the injectors."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ehrgym.db.schema import table_spec

# text of results without a number as the real MIMIC-IV demo stores them (labevents.value where
# valuenum is NULL); used only where the database itself holds no such rows to copy forms from
MISSING_PLACEHOLDERS: tuple[str, ...] = ("___", "ERROR", "UNABLE TO REPORT", "HOLD.  DISCARD GREATER THAN 4 HOURS OLD.")

# values another column of the same row gives exactly: noise in them can be read around, so no
# value noise goes there (ICU length of stay = outtime - intime)
DERIVABLE: dict[tuple[str, str], str] = {("icustays", "los"): "outtime - intime"}


@dataclass(frozen=True)
class CoStored:
    """Columns a row stores along with its value: ``mirrors`` hold the same number (where they did), ``scaled`` one
    proportional to it (the pump's rate of an infused amount)."""

    mirrors: tuple[str, ...] = ()
    scaled: tuple[str, ...] = ()


CO_STORED: dict[tuple[str, str], CoStored] = {
    ("inputevents", "amount"): CoStored(mirrors=("originalamount",), scaled=("rate", "originalrate")),
    ("inputevents", "rate"): CoStored(mirrors=("originalrate",), scaled=("amount", "originalamount")),
}


def derivable(table: str, column: str | None) -> bool:
    return column is not None and (table, column) in DERIVABLE


def decimals_of(value: float) -> int:
    text = repr(float(value))
    if "e" in text:
        return 6
    frac = text.split(".")[1].rstrip("0") if "." in text else ""
    return min(len(frac), 6)


def value_text(value: float | None) -> str | None:
    """A number as MIMIC-IV writes it in a text column."""
    if value is None:
        return None
    value = float(value)
    if value.is_integer():
        return str(int(value))
    return f"{value:.{max(decimals_of(value), 1)}f}"


def format_like(value: float | None, like: Any) -> str | None:
    """``value`` written as the text column writes the item's values: with the comparator prefix
    ("<=4" → "<=8") and the fixed number of decimals ("3.0" → "30.0") of ``like``, a base row's
    text, when that is a number; else as :func:`value_text` does."""
    if value is None:
        return None
    import re

    m = re.fullmatch(r"(<=|>=|=>|=<|<|>|=)?(\s*)-?[0-9]+(?:\.([0-9]+))?", str(like).strip()) \
        if like is not None else None
    if m is None:
        return value_text(value)
    k = len(m.group(3) or "")
    text = f"{float(value):.{k}f}" if k else value_text(value)
    return f"{m.group(1) or ''}{m.group(2) if m.group(1) else ''}{text}"


def with_decimals(value: float, d: int) -> float:
    """``value`` carrying ``d`` decimals like the item's other values: a conversion or slip that
    drops decimals (0.7935 mg → 793.5 mcg) gets its last decimal filled back in (793.5003)."""
    if decimals_of(value) >= d or d <= 0:
        return value
    digit = 1 + int(round(abs(value) * 10 ** min(d, 6))) % 9
    return round(value + math.copysign(digit * 10.0 ** -d, value if value else 1.0), d)


def implausible(value: float, bounds: tuple[float, float], low: bool = False,
                readable=None) -> float | None:
    """A decimal-slip or sign error far outside the plausible range (HR 90 → 900, T 37.2 → 372).

    The slip must leave the range by a factor of 2 at least (a value just past a bound is a tail,
    not an error), and ``readable(v)`` — true when ``v`` reads as a plausible value in another unit
    of the item (creatinine 80 as µmol/L) — must be false; otherwise a sign error is used for items
    that are never negative, or nothing."""
    lo, hi = bounds
    v = float(value)
    d = decimals_of(v)

    def ok(cand: float) -> bool:
        return not (readable and readable(cand))

    def same_precision(cand: float) -> float:
        # a slip drops decimals (7.38 → 73.8); values of an item carry the item's precision, so the
        # last decimal is filled back in (73.8 → 73.84) — still far outside the plausible range
        return with_decimals(cand, d)

    if not low:
        if v > 0:
            for k in range(1, 7):
                cand = same_precision(round(v * 10 ** k, max(d - k, 0)))
                if cand > 2 * hi and ok(cand):
                    return cand
    elif lo > 0 and v > 0:
        for k in range(1, 7):
            # the slipped value keeps the row's precision (0.6 → 0.06 would carry a decimal no value of the item
            # has, and its text "0.1" would disagree with it: the artifact tree told such rows from the base's at
            # 0.62 on lab minima); where it rounds to nothing, a sign slip follows
            cand = round(v / 10 ** k, d)
            if cand <= 0:
                break
            if cand < lo / 2 and ok(cand):
                return cand
    if v > 0 and lo >= 0:
        return -v  # a sign slip: values of these items are never negative
    return None


def shifted(value: float, up: bool, bounds: tuple[float, float] | None) -> float:
    """A plausible but clearly different value (25 % above the high / 20 % below the low one)."""
    v = float(value)
    if up:
        out = _distinct_round(v * 1.25 + (1 if v == 0 else 0), v)
    else:
        out = _distinct_round(v * 0.8, v) if v != 0 else -1.0
    if bounds is not None:
        lo, hi = bounds
        out = min(max(out, lo), hi)
    return out


def conflicting(value: float, rng: np.random.Generator, bounds: tuple[float, float] | None,
                up: bool | None = None) -> float:
    """A contradictory reading of the same sample: 20-40 % away (above it for ``up``, below for
    not ``up``, either for None), inside the plausible range."""
    v = float(value)
    frac = float(rng.uniform(0.2, 0.4))
    coin = bool(rng.integers(0, 2))
    up = coin if up is None else up
    if v == 0:
        return 1.0
    target = v * (1 + frac) if up else v * (1 - frac)
    if bounds is not None and not bounds[0] <= target <= bounds[1]:
        target = v * (1 - frac) if up else v * (1 + frac)
    return _distinct_round(target, v)


def _distinct_round(target: float, original: float) -> float:
    """``target`` with as many decimals as ``original`` (values of an item are stored with the
    same precision), moved one unit of the last decimal when it rounds back onto ``original``."""
    d = decimals_of(original)
    out = round(target, d)
    if out == original:
        step = 10.0 ** -d
        out = round(original + (step if target >= original else -step), d)
    return float(out)


def number_forms(texts: list[str]) -> list[str]:
    """Templates (``{v}`` for the number) of the number-bearing text forms in ``texts``: "{v}",
    "<{v}", ">{v}", "{v} <unit>" …, in the order first seen; forms that hide which number was
    measured (ranges "0-2", "16/.", comments) are left out."""
    import re

    out: list[str] = []
    for text in texts:
        m = re.fullmatch(r"\s*([<>]=?|GREATER THAN |LESS THAN )?([0-9]+(?:\.[0-9]+)?)(\s*[A-Za-z/%µ°]+)?\s*", text)
        if m is None:
            continue
        form = f"{m.group(1) or ''}{{v}}{m.group(3) or ''}"
        if form not in out:
            out.append(form)
    return out


def shift_times(row: dict[str, Any], table: str, delta: dt.timedelta) -> dict[str, Any]:
    """A copy of ``row`` with every timestamp column moved by ``delta``, a time's day column (:func:`restamped`) on
    the moved time's day (moved by part of a day, a culture's ``chartdate`` left midnight)."""
    out = dict(row)
    for col in table_spec(table).columns:
        if col.duckdb_type == "TIMESTAMP" and out.get(col.name) is not None:
            stamp = dt.datetime.fromisoformat(str(out[col.name]))
            out[col.name] = (stamp + delta).isoformat(sep=" ")
    for name in list(out):
        if name.endswith("time") and out[name] is not None:
            out.update(restamped(out, name, parse_stamp(out[name])))
    return out


def restamped(row: dict[str, Any], time_col: str, stamp: dt.datetime) -> dict[str, Any]:
    """The cells of ``row`` holding ``time_col`` at ``stamp``: the time and, where the row keeps the time's day in a
    column of its own (``storetime``'s ``storedate``, at midnight), that day. A re-stored copy stored 7 minutes later past
    midnight kept the day before beside its time, which no base row does (4 microbiology rows of a 1k `paper`
    build)."""
    out = {time_col: stamp.isoformat(sep=" ")}
    day = time_col.replace("time", "date")
    if day != time_col and row.get(day) is not None:
        out[day] = dt.datetime.combine(stamp.date(), dt.time()).isoformat(sep=" ")
    return out


def parse_stamp(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def on_the_hour(value: Any) -> bool:
    """Whether a timestamp sits exactly on the hour (the synthetic hospital charts vital signs there)."""
    t = parse_stamp(value)
    return t.minute == 0 and t.second == 0 and t.microsecond == 0


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def typed_value(table: str, column: str, value: float | None) -> float | int | None:
    """``value`` as the column stores it (integer columns get a rounded integer)."""
    if value is None:
        return None
    if table_spec(table).column(column).duckdb_type == "BIGINT":
        return int(round(value))
    return value


def with_value(evidence: Any, row: dict[str, Any], value: float | None) -> dict[str, Any]:
    """``row`` holding ``value`` in the evidence's value column, its text column written like the row's own and the
    columns stored with it agreeing (:func:`co_stored`)."""
    out = dict(row)
    out[evidence.value_col] = typed_value(evidence.table, evidence.value_col, value)
    if evidence.text_col:
        out[evidence.text_col] = format_like(value, row.get(evidence.text_col))
    return co_stored(evidence.table, evidence.value_col, row, out, scale=True)


def co_stored(table: str, column: str, old: dict[str, Any], new: dict[str, Any], scale: bool) -> dict[str, Any]:
    """``new`` (``old`` with ``column`` rewritten) with the columns stored along with it agreeing: a mirror
    (:data:`CO_STORED`) that held the old number holds the new one; with ``scale`` (the same unit), a proportional
    column moves by the same factor; a lab result's abnormal flag is set from its new number (:func:`flagged_as_base`).
    A row whose amount moved but whose rate and original amount did not was the only one of its kind (out-of-window
    copies of drip rows: 154 of 170 on a 1k `paper` build)."""
    spec = CO_STORED.get((table, column))
    before: Any = old.get(column)
    after: Any = new.get(column)
    if spec is None or not finite(before) or not finite(after):
        return flagged_as_base(new)
    out = dict(new)
    for col in spec.mirrors:
        if col in out and out[col] == before:
            out[col] = after
    if scale and float(before) != 0:
        for col in spec.scaled:
            if finite(out.get(col)):
                out[col] = float(out[col]) * float(after) / float(before)
    return flagged_as_base(out)


FLAG_COLUMNS = ("valuenum", "ref_range_lower", "ref_range_upper", "flag")


def flagged_as_base(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its abnormal flag as MIMIC-IV's laboratory sets it: ``'abnormal'`` exactly when the number lies
    outside the row's own reference range (every base row; all but 185 of the demo's 87,905 results with a number and
    a range, and none flagged inside it). Rows without a number or a range keep their flag. An overlay that changed a
    value but kept its flag left a row that told itself apart (a creatinine of 0.9 flagged abnormal against 0.4-1.1:
    36 of 94 conflicting copies and 161 of 272 out-of-window rows on the 1k `paper` build)."""
    if not all(c in row for c in FLAG_COLUMNS):
        return row
    value, low, high = row["valuenum"], row["ref_range_lower"], row["ref_range_upper"]
    if not finite(value) or not finite(low) or not finite(high):
        return row
    out = dict(row)
    out["flag"] = "abnormal" if (value < low or value > high) else None
    return out
