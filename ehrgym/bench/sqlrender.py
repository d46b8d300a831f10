"""Rendering templates: entity parameters into SQL literals and question text, relations into SQL.

A template's SQL is a ``str.format`` string. Two kinds of placeholders appear in it:

* ``{param}`` — an entity parameter (``{subject_id}``, ``{label}``, ``{t0}`` …) rendered as a
  typed SQL literal (strings quoted and escaped, timestamps as ``TIMESTAMP '…'``);
* ``{<table>}`` — the evidence relation (``{labevents}``), rendered as the plain qualified table
  (clean / naive SQL) or as a cleaning subquery a careful analyst would write (robust SQL).

Questions use the same parameters rendered for humans (timestamps to the minute).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import string
from typing import Any, Mapping

from ehrgym.errors import BenchmarkError

Params = dict[str, Any]


def sql_value(value: Any) -> str:
    """A SQL literal for a parameter value."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BenchmarkError(f"non-finite parameter {value!r}")
        return repr(value)
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    text = str(value).replace("'", "''")
    return f"'{text}'"


def text_value(value: Any) -> str:
    """How a parameter reads in a question."""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def json_value(value: Any) -> Any:
    """A JSON-ready parameter (timestamps as ISO text)."""
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "item"):
        return value.item()
    return value


def placeholders(fmt: str) -> list[str]:
    """Names of the ``{placeholders}`` of a format string, in order of first appearance."""
    out: list[str] = []
    for _, name, _, _ in string.Formatter().parse(fmt):
        if name is not None and name not in out:
            out.append(name)
    return out


def render_sql(fmt: str, params: Mapping[str, Any], relations: Mapping[str, str]) -> str:
    """Fill a template's SQL: parameters as literals, relations as given."""
    mapping: dict[str, str] = {}
    for name in placeholders(fmt):
        if name in relations:
            mapping[name] = relations[name]
        elif name in params:
            mapping[name] = sql_value(params[name])
        else:
            raise BenchmarkError(f"SQL placeholder {{{name}}} has no parameter or relation; "
                                 f"parameters: {sorted(params)}, relations: {sorted(relations)}")
    return fmt.format_map(mapping)


def render_columns(fmt: str, alias: str, params: Mapping[str, Any] | None = None) -> str:
    """Fill placeholders with column references ``alias."name"`` (set-based forms of a predicate)."""
    mapping = {name: f'{alias}."{name}"' for name in placeholders(fmt)}
    return fmt.format_map(mapping)


def render_text(fmt: str, params: Mapping[str, Any]) -> str:
    """Fill a question paraphrase; a parameter rendered empty (a lab without a unit: "above {threshold} {unit}?")
    leaves no space before the punctuation after it, nor two spaces."""
    try:
        text = fmt.format_map({k: text_value(v) for k, v in params.items()})
    except KeyError as exc:
        raise BenchmarkError(f"question placeholder {exc} has no parameter in {sorted(params)}") from exc
    return re.sub(r" +([?.,;:])", r"\1", re.sub(r"(?<=\S)  +(?=\S)", " ", text))
