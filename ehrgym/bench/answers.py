"""Typed answers: turning SQL results into gold values, normalising and comparing them.

Shared by the builder (gold values, verification) and the verifier (scoring agents), so the
two can never disagree on what "equal" means (DESIGN.md, Verifier).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from ehrgym.errors import TaskFormatError
from ehrgym.vocab import ANSWER_TYPES


@dataclass(frozen=True)
class AnswerSpec:
    """How an answer is typed and compared. ``rel_tol``/``abs_tol`` apply to numbers."""

    type: str
    rel_tol: float = 1e-3
    abs_tol: float = 0.0
    decimals: int | None = None  # how the gold value is rounded for display

    def __post_init__(self) -> None:
        if self.type not in ANSWER_TYPES:
            raise TaskFormatError(f"unknown answer type {self.type!r}; use one of {ANSWER_TYPES}")

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "rel_tol": self.rel_tol, "abs_tol": self.abs_tol, "decimals": self.decimals}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AnswerSpec":
        try:
            return cls(str(data["type"]), float(data.get("rel_tol", 1e-3)), float(data.get("abs_tol", 0.0)),
                       data.get("decimals"))
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskFormatError(f"malformed answer spec {data!r}: {exc}") from exc


class NotComparable(ValueError):
    """A value cannot be read as the answer type (the verdict says 'wrong type')."""


_YES = {"yes", "y", "true", "t", "1", "present", "positive"}
_NO = {"no", "n", "false", "f", "0", "absent", "negative", "none"}
_NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _scalar_text(value: Any) -> str:
    return re.sub(r"\s+", " ", str(value)).strip()


def parse_number(value: Any) -> float:
    if isinstance(value, bool):
        raise NotComparable(f"{value!r} is a yes/no, not a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            raise NotComparable("NaN is not a number answer")
        return float(value)
    if hasattr(value, "item"):
        return parse_number(value.item())
    text = _scalar_text(value).replace("\u2212", "-")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # thousands separators
    match = _NUMBER.search(text)
    if not match:
        raise NotComparable(f"{value!r} is not a number")
    return float(match.group(0).replace(",", "."))


def parse_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = _scalar_text(value).lower().strip(".!")
    first = text.split(" ")[0].strip(",.;:") if text else ""
    if text in _YES or first in _YES:
        return True
    if text in _NO or first in _NO:
        return False
    raise NotComparable(f"{value!r} is not yes/no")


def parse_datetime(value: Any) -> str:
    """Normalise to ``YYYY-MM-DD HH:MM:SS``."""
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=0).isoformat(sep=" ")
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day).isoformat(sep=" ")
    text = _scalar_text(value).replace("T", " ").rstrip("Z")
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M", "%Y/%m/%d",
                "%Y-%m-%d %H:%M:%S.%f"):
        try:
            return dt.datetime.strptime(text, fmt).replace(microsecond=0).isoformat(sep=" ")
        except ValueError:
            continue
    raise NotComparable(f"{value!r} is not a date/time (use YYYY-MM-DD HH:MM:SS)")


def parse_date(value: Any) -> str:
    return parse_datetime(value)[:10]


def parse_string(value: Any) -> str:
    return _scalar_text(value).casefold()


def parse_items(value: Any) -> list[Any]:
    """A collection answer from a list, a JSON-ish list or a comma/semicolon/newline separated text."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if hasattr(value, "tolist"):
        return list(value.tolist())
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    # Items that contain commas themselves ("Chronic kidney disease, unspecified") are written
    # one per line or separated by semicolons; only plain lists are split on commas.
    separator = r"[;\n]" if re.search(r"[;\n]", text) else r",(?!\d{3}\b)|,(?=\s)"
    parts = [p.strip().strip("'\"") for p in re.split(separator, text)]
    return [p for p in parts if p]


def _item_key(item: Any) -> Any:
    """Set/list elements: numbers compare as rounded floats, everything else as folded text."""
    try:
        if isinstance(item, str) and not _NUMBER.fullmatch(item.strip()):
            raise NotComparable
        return round(parse_number(item), 6)
    except NotComparable:
        return parse_string(item)


def _integer(number: float) -> int | float:
    """Whole numbers compare as ints; a fractional answer stays a float (and so never equals an int)."""
    return int(number) if number.is_integer() else number


Normaliser = Callable[[Any], Any]

NORMALISERS: dict[str, Normaliser] = {
    "number": parse_number,
    "integer": lambda v: _integer(parse_number(v)),
    "string": parse_string,
    "set": lambda v: frozenset(_item_key(i) for i in parse_items(v)),
    "list": lambda v: tuple(_item_key(i) for i in parse_items(v)),
    "datetime": parse_datetime,
    "date": parse_date,
    "boolean": parse_boolean,
}


def normalise(value: Any, spec: AnswerSpec) -> Any:
    """Normalised form of ``value`` under ``spec``; raises :class:`NotComparable`."""
    if value is None:
        raise NotComparable("no value given")
    return NORMALISERS[spec.type](value)


def answers_match(gold: Any, given: Any, spec: AnswerSpec) -> bool:
    """True when ``given`` equals the gold value under the spec's comparison rules."""
    g = normalise(gold, spec)
    a = normalise(given, spec)
    if spec.type == "number":
        abs_tol = spec.abs_tol
        if spec.decimals is not None:
            # the gold value is rounded to `decimals`: any answer that rounds to it is right
            abs_tol = max(abs_tol, 0.5 * 10.0 ** -spec.decimals) + 1e-9
        return math.isclose(g, a, rel_tol=spec.rel_tol, abs_tol=abs_tol)
    return g == a


def gold_from_rows(rows: list[tuple[Any, ...]], spec: AnswerSpec) -> Any:
    """The JSON gold value of a gold-SQL result, or None when the result holds no answer.

    Scalar types read the first column of a single row; ``set``/``list`` read the first
    column of every row (lists keep the SQL's ORDER BY).
    """
    if spec.type in ("set", "list"):
        items = [_json_scalar(r[0]) for r in rows if r and r[0] is not None]
        if not items:
            return None
        return sorted(items, key=lambda x: (str(type(x)), x)) if spec.type == "set" else items
    if len(rows) != 1 or not rows[0] or rows[0][0] is None:
        return None
    value = _json_scalar(rows[0][0])
    if spec.type == "number":
        value = float(value)
        if not math.isfinite(value):
            return None
        return round(value, spec.decimals) if spec.decimals is not None else value
    if spec.type == "integer":
        return int(value)
    if spec.type == "boolean":
        return parse_boolean(value)
    if spec.type == "datetime":
        return parse_datetime(value)
    if spec.type == "date":
        return parse_date(value)
    return str(value)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=0).isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    return value


def format_answer(value: Any, spec: AnswerSpec) -> str:
    """How an agent would naturally write ``value`` (used by scripted agents)."""
    if value is None:
        return "null"
    if spec.type in ("set", "list"):
        items = [str(v) for v in value]
        return ("; " if any("," in i for i in items) else ", ").join(items)
    if spec.type == "boolean":
        return "yes" if value else "no"
    if spec.type == "number" and spec.decimals is not None:
        return f"{float(value):.{spec.decimals}f}"
    return str(value)
