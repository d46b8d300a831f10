"""Clinically credible corrupted values and row copies used by the injectors."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np

from ehrgym.db.schema import table_spec

MISSING_PLACEHOLDERS: tuple[str, ...] = ("___", "ERROR", "Unable to report", "see comment")


def decimals_of(value: float) -> int:
    text = repr(float(value))
    if "e" in text:
        return 3
    frac = text.split(".")[1].rstrip("0") if "." in text else ""
    return min(len(frac), 3)


def value_text(value: float | None) -> str | None:
    """A number as MIMIC-IV writes it in a text column."""
    if value is None:
        return None
    value = float(value)
    if value.is_integer():
        return str(int(value))
    return f"{value:.{max(decimals_of(value), 1)}f}"


def implausible(value: float, bounds: tuple[float, float], low: bool = False) -> float | None:
    """A decimal-slip or sign error that leaves the physiologic range (HR 90 → 900, T 37.2 → 372)."""
    lo, hi = bounds
    v = float(value)
    if not low:
        if v <= 0:
            return round(hi * 10, 1) if hi > 0 else None
        for k in range(1, 7):
            cand = round(v * 10 ** k, max(decimals_of(v) - k, 0))
            if cand > hi:
                return cand
        return None
    if lo > 0 and v > 0:
        for k in range(1, 7):
            cand = round(v / 10 ** k, decimals_of(v) + k)
            if 0 < cand < lo:
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


def conflicting(value: float, rng: np.random.Generator, bounds: tuple[float, float] | None) -> float:
    """A contradictory reading of the same sample: 20-40 % away, inside the plausible range."""
    v = float(value)
    frac = float(rng.uniform(0.2, 0.4))
    up = bool(rng.integers(0, 2))
    if v == 0:
        return 1.0
    target = v * (1 + frac) if up else v * (1 - frac)
    if bounds is not None and not bounds[0] <= target <= bounds[1]:
        target = v * (1 - frac) if up else v * (1 + frac)
    return _distinct_round(target, v)


def _distinct_round(target: float, original: float) -> float:
    """``target`` rounded like MIMIC (1-3 decimals) but never back onto ``original``."""
    for d in range(max(decimals_of(original), 1), 7):
        out = round(target, d)
        if out != original:
            return out
    return target


def corrupted_text(value: float, rng: np.random.Generator, ref_upper: float | None = None,
                   ref_lower: float | None = None, unit: str | None = None) -> str:
    """The value stored as text a careless interface produces: "1,2", "<0.3", "15.4 H", "1.2 mg/dL"."""
    v = float(value)
    text = value_text(v) or ""
    forms: list[str] = []
    if not v.is_integer():
        forms.append(text.replace(".", ","))
    if ref_upper is not None and v > ref_upper:
        forms.append(f"{text} H")
    elif ref_lower is not None and v < ref_lower:
        forms.append(f"{text} L")
        if v > 0:
            forms.append(f"<{text}")
    if unit:
        forms.append(f"{text} {unit}")
    forms.append(f"{text} *")
    return forms[int(rng.integers(0, len(forms)))]


def shift_times(row: dict[str, Any], table: str, delta: dt.timedelta) -> dict[str, Any]:
    """A copy of ``row`` with every timestamp column moved by ``delta``."""
    out = dict(row)
    for col in table_spec(table).columns:
        if col.duckdb_type == "TIMESTAMP" and out.get(col.name) is not None:
            stamp = dt.datetime.fromisoformat(str(out[col.name]))
            out[col.name] = (stamp + delta).isoformat(sep=" ")
    return out


def parse_stamp(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def typed_value(table: str, column: str, value: float | None) -> float | int | None:
    """``value`` as the column stores it (integer columns get a rounded integer)."""
    if value is None:
        return None
    if table_spec(table).column(column).duckdb_type == "BIGINT":
        return int(round(value))
    return value
