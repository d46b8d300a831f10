"""Typed answers: turning SQL results into gold values, normalising and comparing them.

Shared by the builder (gold values, verification) and the verifier (scoring agents), so the
two can never disagree on what "equal" means (docs/architecture.md §4, verifier).

Strict parsing of an agent's answer (the verifier's reward must not be gameable). A value that
is already typed (a Python number, bool, list, date) is read as it is. A text answer is read
under these rules; an answer that breaks one is *not comparable* (the verdict says
``wrong_type``, reward 0):

* **one candidate value**: a number answer holds exactly one number (``"2"``, ``"-0.5"``,
  ``"1,234.5"``, ``"1.2e3"``). ``"2 or 3"``, ``"2-3"``, ``"not 3 but 2"``, ``"3, 2"``, a number
  and a date, ``"1.2 x 10^3"``, a number also spelled in words (``"2 (three)"``, ``"two"``:
  digits only) or a decimal comma (``"3,2"``: a list or 3.2?) are rejected;
* **no hedging**: a number answer containing a hedge, bound or connective word (``maybe``,
  ``approximately``, ``about``, ``around``, ``~``, ``at least``, ``more than``, ``or``, ``and``,
  ``not`` …, see :data:`NUMBER_HEDGES`), a ``?``, ``±``, ``<``/``>`` or a trailing ``+`` is
  rejected, as is ``-ish``;
* **units and prose**: a unit after the number is allowed and ignored (``"2 mg"``,
  ``"140 mEq/L"``, ``"7.2 x10^9/L"``): the number must be in the unit the question asks for.
  A short lead-in without digits or hedges is allowed (``"The last value was 1.4 mg/dL"``);
* **yes/no**: the first word is the answer (``yes``/``true``/``present``/``positive`` or
  ``no``/``false``/``absent``/``negative``/``none``); the rest may explain but must not hold a
  word of the other polarity (``"yes and no"``, ``"yes, not married"``) or a hedge
  (``"yes, probably"``); the short forms ``y``/``n``/``t``/``f``/``1``/``0`` only stand alone
  (``"n/a"`` is not "no");
* **dates and times** must be the whole answer in one of the accepted formats (nothing else);
* **text, sets and lists** compare exactly (case, whitespace and a trailing period folded; sets ignore order
  and repeats, lists keep order), so an extra, a missing or a hedged element makes them wrong;
* **length**: a scalar answer (number, yes/no, date) longer than :data:`MAX_SCALAR_CHARS`
  characters is rejected, so padding cannot smuggle in a candidate.
"""

from __future__ import annotations

import datetime as dt
import json
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

MAX_SCALAR_CHARS = 200
# Words that make a number answer hedged, a bound, a range or a choice (whole words, folded).
NUMBER_HEDGES: frozenset[str] = frozenset({
    "maybe", "perhaps", "possibly", "possible", "probably", "probable", "likely", "unlikely", "approximately",
    "approximate", "approx", "about", "around", "roughly", "nearly", "almost", "circa", "estimated", "estimate",
    "guess", "think", "believe", "seems", "seem", "appears", "suspect", "unsure", "uncertain", "unclear",
    "unknown", "either", "neither", "or", "and", "nor", "to", "but", "not", "no", "never", "except", "than",
    "between", "versus", "vs", "if", "unless", "otherwise", "range", "least", "most", "more", "less", "fewer",
    "greater", "higher", "lower", "over", "under", "above", "below", "up", "upto", "within", "plus", "minus",
    "some", "several", "few", "many", "multiple", "various", "somewhere", "something", "ish",
})
# numbers written as words: a second candidate next to the digits ("2 (three)"), so rejected
NUMBER_WORDS: frozenset[str] = frozenset({
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "hundred", "thousand", "million", "dozen", "half", "once", "twice", "thrice", "couple",
})
_HEDGE_MARKS = re.compile(r"[~≈±<>≤≥?]|\+/-|\d\s*\+(?!\s*\d)")
# a number candidate: not glued to a letter, digit, ^ or . on its left ("m2", "10^9", "x10" are unit parts)
_CANDIDATE = re.compile(r"(?<![A-Za-z0-9_^.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_YES_WORDS = frozenset({"yes", "true", "present", "positive"})
_NO_WORDS = frozenset({"no", "not", "false", "absent", "negative", "none", "never", "nothing", "neither", "nor"})
BOOLEAN_HEDGES: frozenset[str] = frozenset({
    "maybe", "perhaps", "possibly", "possible", "probably", "probable", "likely", "unlikely", "unsure", "uncertain",
    "unclear", "unknown", "either", "depends", "partially", "partly", "somewhat", "guess", "think", "believe",
    "seems", "appears", "suspect", "or",
})


def _scalar_text(value: Any) -> str:
    return re.sub(r"\s+", " ", str(value)).strip()


def _answer_text(value: Any, what: str) -> str:
    """A scalar text answer, whitespace-folded, unwrapped from quotes/markdown; rejects padding."""
    text = _scalar_text(value).replace("\u2212", "-").replace("\u2013", "-").replace("\u2014", "-")
    if len(text) > MAX_SCALAR_CHARS:
        raise NotComparable(f"a {what} answer of {len(text)} characters is not one value (at most "
                            f"{MAX_SCALAR_CHARS})")
    text = re.sub(r"^[*_`'\"\s]+|[*_`'\"\s]+$", "", text)
    return text[:-1].rstrip() if text.endswith((".", "!")) and not re.search(r"\d\.$", text) else text


def parse_number(value: Any) -> float:
    """A number answer under the strict rules of the module docstring."""
    if isinstance(value, bool):
        raise NotComparable(f"{value!r} is a yes/no, not a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            raise NotComparable("NaN is not a number answer")
        return float(value)
    if hasattr(value, "item"):
        return parse_number(value.item())
    text = _answer_text(value, "number")
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # thousands separators (1,234)
    if _HEDGE_MARKS.search(text):
        raise NotComparable(f"{value!r} is hedged or a bound (~, ?, ±, <, >, +), not one number")
    words = _WORD.findall(text.casefold())
    hedges = sorted({w for w in words if w in NUMBER_HEDGES or w.endswith("ish")})
    if hedges:
        raise NotComparable(f"{value!r} is hedged or not a single value ({', '.join(hedges)})")
    spelled = sorted({w for w in words if w in NUMBER_WORDS})
    if spelled:
        raise NotComparable(f"{value!r} spells a number in words ({', '.join(spelled)}); give one value in digits")
    candidates = _CANDIDATE.findall(text)
    if not candidates:
        raise NotComparable(f"{value!r} is not a number")
    if len(candidates) > 1:
        raise NotComparable(f"{value!r} holds {len(candidates)} candidate numbers; give exactly one")
    if re.search(r"(?<![\w)])[-+]\s+\d", text):
        raise NotComparable(f"{value!r}: a sign apart from its number (a bullet or a minus?) is ambiguous")
    if re.search(r"\d,\d", text):
        raise NotComparable(f"{value!r}: a decimal comma is ambiguous; write the number with a point")
    return float(candidates[0])


def parse_boolean(value: Any) -> bool:
    """A yes/no answer under the strict rules of the module docstring."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = _answer_text(value, "yes/no").casefold()
    if "?" in text:
        raise NotComparable(f"{value!r} is hedged, not yes/no")
    tokens = re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text)
    if not tokens or (tokens[0] not in _YES and tokens[0] not in _NO):
        raise NotComparable(f"{value!r} is not yes/no (start the answer with yes or no)")
    if len(tokens) > 1 and tokens[0] not in _YES_WORDS | _NO_WORDS:
        # "y", "n", "1", "0" … only on their own ("n/a" is not "no", "1 or 2 doses" is not "yes")
        raise NotComparable(f"{value!r} is not yes/no (a short form like y/n/1/0 must stand alone)")
    answer = tokens[0] in _YES
    rest = set(tokens[1:])
    opposite = _NO_WORDS if answer else _YES_WORDS
    contradiction = (rest & opposite) or (answer and any(t.endswith("n't") for t in rest))
    if contradiction or rest & BOOLEAN_HEDGES:
        raise NotComparable(f"{value!r} is hedged or says both yes and no")
    return answer


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
    """Text folded for comparison: whitespace and case, and a trailing period — the answer protocol reads a period
    ending an answer as the end of a sentence (``ANSWER: MICU.``), so a database string ending in one
    ("ENTEROCOCCUS SP.") must equal itself without it."""
    return re.sub(r"\s*\.+$", "", _scalar_text(value)).casefold()


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


def answer_key(value: Any) -> str:
    """An answer as one string (the value as JSON): equal strings are the same answer (what the builder's answer
    spread and the answer-prior probe count)."""
    return json.dumps(value, sort_keys=True, default=lambda v: _json_scalar(v) if hasattr(v, "item") or
                      isinstance(v, dt.date) else str(v))


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
