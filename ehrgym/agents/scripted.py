"""Shared pieces of the scripted baselines: reading a SQL step's result and turning rows into an answer."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from ehrgym.errors import AgentError


@dataclass(frozen=True)
class StepResult:
    """The structured result of the last SQL step as a scripted agent reads it."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    row_count: int
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


def read_result(observation: Any) -> StepResult:
    """The structured SQL result of an observation (never the preview text)."""
    outcome = getattr(observation, "outcome", None)
    if outcome is None:
        outcome = getattr(observation, "result", None)
    if outcome is None and hasattr(observation, "rows"):
        outcome = observation
    if outcome is None:
        raise AgentError("the observation carries no structured SQL result; scripted agents need the "
                         "environment's query outcome (Observation.outcome)")
    if isinstance(outcome, dict):
        return StepResult(tuple(outcome.get("columns") or ()), tuple(tuple(r) for r in outcome.get("rows") or ()),
                          int(outcome.get("row_count", len(outcome.get("rows") or ()))), outcome.get("error"))
    rows = tuple(tuple(r) for r in (getattr(outcome, "rows", None) or ()))
    return StepResult(tuple(getattr(outcome, "columns", None) or ()), rows,
                      int(getattr(outcome, "row_count", len(rows)) or 0), getattr(outcome, "error", None))


def plain(value: Any) -> Any:
    """A JSON-friendly scalar (dates as ISO text, numpy/Decimal as Python numbers)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=0).isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if hasattr(value, "item"):
        return value.item()
    if type(value).__name__ == "Decimal":
        return float(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def rows_to_value(rows: tuple[tuple[Any, ...], ...] | list[tuple[Any, ...]], answer_type: str | None = None) -> Any:
    """What a literal-minded analyst reads off a result: one cell, a list of first-column values, or None.

    For a set/list question every row is an element (a list even for one row, so an element with
    a comma in it stays whole).
    """
    if not rows:
        return None
    if answer_type in ("set", "list"):
        return [plain(r[0]) for r in rows if r]
    if len(rows) == 1:
        return plain(rows[0][0]) if rows[0] else None
    return [plain(r[0]) for r in rows if r]
