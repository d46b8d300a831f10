"""The answer protocol: how an agent answers or abstains, as prompt text and as parsers.

Structured: :class:`~ehrgym.env.actions.AnswerAction`, or JSON ``{"answer": ...}`` /
``{"abstain": "reason", "explanation": "..."}`` / ``{"tool": "sql", "query": ...}``.
Free text (LLM output): ``ANSWER: <value>``, ``ABSTAIN: <reason>: <explanation>``,
``SQL: <query>`` / ```` ```sql ```` fences, ``PYTHON: <code>`` / ```` ```python ```` fences; on a
FHIR server (MedAgentBench) also the official harness's lines ``GET <url>``, ``POST <url>`` followed
by the JSON payload, and ``FINISH([answer, ...])``.
Parsing is tolerant of casing, punctuation, markdown and reason synonyms
("insufficient evidence", "contradictory records", …); the reason codes come from
:data:`ehrgym.vocab.ABSTAIN_REASONS`.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from typing import Any

from ehrgym.env.actions import Action, AnswerAction, FhirGetAction, FhirPostAction, PythonAction, SqlAction
from ehrgym.errors import AgentError
from ehrgym.vocab import ABSTAIN_REASONS


class ActionParseError(AgentError):
    """Text could not be read as a tool call; the message says what format is expected."""


REASON_DESCRIPTIONS: dict[str, str] = {
    "insufficient_evidence": "the records needed to answer are missing (no rows, or the value is empty)",
    "conflicting_evidence": "the records contradict each other (e.g. two different values at the same time)",
    "implausible_value": "the only evidence is a physiologically impossible value",
    "invalid_reference": "the question names a patient, admission or stay that does not exist",
    "false_premise": "the question presupposes an event or time window the records do not contain",
    "out_of_scope": "the question asks for information no EHR table holds",
}
assert set(REASON_DESCRIPTIONS) == set(ABSTAIN_REASONS)

REASON_SYNONYMS: dict[str, str] = {
    "insufficient evidence": "insufficient_evidence", "insufficient data": "insufficient_evidence",
    "insufficient information": "insufficient_evidence", "not enough evidence": "insufficient_evidence",
    "not enough data": "insufficient_evidence", "not enough information": "insufficient_evidence",
    "missing evidence": "insufficient_evidence", "missing data": "insufficient_evidence",
    "missing value": "insufficient_evidence", "no data": "insufficient_evidence",
    "no evidence": "insufficient_evidence", "no records": "insufficient_evidence",
    "no record": "insufficient_evidence", "no value": "insufficient_evidence",
    "null value": "insufficient_evidence", "insufficient": "insufficient_evidence",
    "conflicting evidence": "conflicting_evidence", "conflicting records": "conflicting_evidence",
    "conflicting": "conflicting_evidence", "conflict": "conflicting_evidence",
    "contradictory": "conflicting_evidence", "contradiction": "conflicting_evidence",
    "contradicting": "conflicting_evidence", "inconsistent": "conflicting_evidence",
    "discrepancy": "conflicting_evidence", "discrepant": "conflicting_evidence",
    "implausible value": "implausible_value", "implausible": "implausible_value",
    "physiologically impossible": "implausible_value", "impossible value": "implausible_value",
    "not plausible": "implausible_value", "erroneous value": "implausible_value",
    "invalid value": "implausible_value", "outlier": "implausible_value",
    "invalid reference": "invalid_reference", "invalid ref": "invalid_reference",
    "nonexistent": "invalid_reference", "non existent": "invalid_reference",
    "does not exist": "invalid_reference", "doesnt exist": "invalid_reference",
    "no such patient": "invalid_reference", "no such admission": "invalid_reference",
    "unknown patient": "invalid_reference", "unknown admission": "invalid_reference",
    "invalid patient": "invalid_reference", "invalid id": "invalid_reference",
    "invalid identifier": "invalid_reference", "invalid": "invalid_reference",
    "false premise": "false_premise", "premise": "false_premise", "never happened": "false_premise",
    "did not happen": "false_premise", "never occurred": "false_premise",
    "did not occur": "false_premise", "temporal mismatch": "false_premise",
    "outside the record": "false_premise",
    "out of scope": "out_of_scope", "outside the scope": "out_of_scope", "not in scope": "out_of_scope",
    "beyond the scope": "out_of_scope", "scope": "out_of_scope", "unanswerable": "out_of_scope",
    "not stored": "out_of_scope", "not captured": "out_of_scope",
}
# every phrase that names a reason (the codes spelled out, then the synonyms), longest first: at each position the
# longest phrase wins, so "invalid value" is one implausible value and not an invalid reference
_REASON_PHRASES: dict[str, str] = {**{code.replace("_", " "): code for code in ABSTAIN_REASONS}, **REASON_SYNONYMS}
_REASON_MENTION = re.compile(
    r"(?<!\S)(" + "|".join(re.escape(p) for p in sorted(_REASON_PHRASES, key=lambda p: (-len(p), p))) + r")(?!\S)")


@lru_cache(maxsize=1)
def protocol_text() -> str:
    """The answer protocol as shown to an agent (first observation, system prompts)."""
    reasons = "\n".join(f"  - {code}: {desc}" for code, desc in REASON_DESCRIPTIONS.items())
    return (
        "Answer protocol. When you are done, give exactly one final answer:\n"
        "  ANSWER: <value>            (a number, date/time YYYY-MM-DD HH:MM:SS, yes/no, text, or a "
        "comma-separated list)\n"
        "  ABSTAIN: <reason>: <explanation>   (when the records do not support an answer)\n"
        "or the JSON forms {\"answer\": <value>} / {\"abstain\": \"<reason>\", \"explanation\": \"...\"}.\n"
        "Abstention reasons (name exactly one):\n" + reasons + "\n"
        "Only answer with a value the records support; an abstention with the right reason counts as "
        "a correct response when the records do not support an answer.\n"
        "Give exactly one value, in digits for numbers (a unit after it is fine): an answer that holds "
        "several candidate values or hedges (\"2 or 3\", \"about 2\", \"maybe\", \"yes and no\") is scored "
        "wrong."
    )


# ---------------------------------------------------------------------------------------------
# Reasons and answer values
# ---------------------------------------------------------------------------------------------

def _plain(text: str) -> str:
    text = re.sub(r"[`*_#>\"'“”‘’]", " ", str(text)).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def normalise_reason(text: Any) -> str | None:
    """The reason code named by ``text`` (a code, a phrase or a synonym), or None — also when ``text`` names more
    than one reason ("conflicting or missing evidence"): a hedge across reasons, like "2 or 3" for a number, names
    none of them (the first named would reward listing every reason)."""
    if text is None:
        return None
    plain = _plain(str(text).replace("_", " ").replace("-", " "))
    code = plain.replace(" ", "_")
    if code in ABSTAIN_REASONS:
        return code
    named = {_REASON_PHRASES[m.group(1)] for m in _REASON_MENTION.finditer(plain)}
    return named.pop() if len(named) == 1 else None


def _clean_value(text: str) -> Any:
    value = text.strip()
    value = re.sub(r"^[*_`\s]+|[*_`\s]+$", "", value)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1].strip()
    if value.startswith("[") and value.endswith("]"):
        try:
            parsed = json.loads(value)
            if isinstance(parsed, list):
                return parsed
        except json.JSONDecodeError:
            pass
    if value.endswith(".") and not re.search(r"\d\.$", value):
        value = value[:-1].rstrip()
    return value


def _answer_block(rest: str) -> str:
    """The value after ``ANSWER:``: the rest of that line, or the bullet list that follows."""
    lines = rest.split("\n")
    first = lines[0].strip()
    if first and not first.endswith(":"):
        return first
    items: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        bullet = re.match(r"^(?:[-*•]|\d+[.)])\s+(.*)$", stripped)
        if bullet:
            items.append(_clean_item(bullet.group(1)))
        elif items or (stripped and not first):
            if not items:
                return stripped
            break
    return "; ".join(items) if items else first


def _clean_item(item: str) -> str:
    return re.sub(r"^[*_`\s]+|[*_`\s]+$", "", item)


def answer_from_mapping(data: dict[str, Any]) -> AnswerAction | None:
    """An answer/abstention from a JSON-like mapping, or None when it holds neither."""
    keys = {str(k).lower(): v for k, v in data.items()}
    explanation = str(keys.get("explanation", keys.get("reasoning", "")) or "")
    if keys.get("abstain") not in (None, False, ""):
        raw = keys["abstain"]
        if raw is True:
            raw = keys.get("reason", "")
        reason = normalise_reason(raw)
        return AnswerAction(None, reason or _plain(str(raw)).replace(" ", "_") or "unspecified", explanation)
    for key in ("answer", "value", "final_answer"):
        if key in keys:
            return AnswerAction(keys[key], None, explanation)
    return None


# ---------------------------------------------------------------------------------------------
# Tool calls from text
# ---------------------------------------------------------------------------------------------

_MARKER = re.compile(r"(?im)(?:^|(?<=[\s*_#>`]))(final\s+answer|answer|abstain|sql|python)\s*[*_]*\s*[:：]")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)
_SQL_START = re.compile(r"^\s*(?:select|with|from|show|describe|desc|summarize|values|pivot|\()\b", re.I)


_CALL = re.compile(r"(?im)^[ \t*_#>`]*(answer|abstain|sql|python|fhir_get|fhir_post)\s*\(")
# MedAgentBench's own text protocol: a line "GET url", "POST url" + JSON payload lines, "FINISH([...])"
_HTTP = re.compile(r"(?m)^[ \t]*(GET|POST)[ \t]+(\S+)[ \t]*$")
_FINISH = re.compile(r"(?m)^[ \t]*FINISH\((.*)\)[ \t]*$", re.S)
_CALL_WINDOW = 20_000     # characters a call may span
_CALL_TRIES = 128         # closing parentheses tried as the call's end


def _literal_call(text: str, start: int) -> tuple[str, list[Any], dict[str, Any]] | None:
    """``name(literal, key=literal)`` starting at ``start`` (the tools as their help shows them), or None."""
    end = text.find(")", start)
    tries = 0
    while end != -1 and tries < _CALL_TRIES and end - start < _CALL_WINDOW:
        tries += 1
        try:
            node = ast.parse(text[start:end + 1], mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            end = text.find(")", end + 1)
            continue
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return None
        try:
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {str(k.arg).lower(): ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
        return node.func.id.lower(), args, kwargs
    return None


def action_from_call(name: str, args: list[Any], kwargs: dict[str, Any]) -> Action | None:
    """A tool call written as a function call: ``answer(2)``, ``answer(abstain="false_premise",
    explanation="...")``, ``abstain("invalid_reference", "...")``, ``sql("SELECT ...")``, ``python("...")``."""
    names = {"sql": ("query",), "python": ("code",), "answer": ("value", "abstain", "explanation"),
             "abstain": ("abstain", "explanation"), "fhir_get": ("url",), "fhir_post": ("url", "payload")}[name]
    if len(args) > len(names):
        return None
    params = dict(zip(names, args))
    for key, value in kwargs.items():
        key = "abstain" if key == "reason" and name in ("answer", "abstain") else key
        if key not in names or key in params:
            return None
        params[key] = value
    if name == "sql":
        return SqlAction(params["query"]) if isinstance(params.get("query"), str) else None
    if name == "python":
        return PythonAction(params["code"]) if isinstance(params.get("code"), str) else None
    if name in ("fhir_get", "fhir_post"):
        return _fhir_action(name, params)
    explanation = str(params.get("explanation") or "")
    if params.get("abstain") not in (None, False, ""):
        raw = params["abstain"]
        return AnswerAction(None, normalise_reason(raw) or _plain(str(raw)).replace(" ", "_") or "unspecified",
                            explanation)
    if name == "abstain" or "value" not in params:
        return None
    return AnswerAction(params["value"], None, explanation)


def action_from_mapping(data: dict[str, Any]) -> Action | None:
    """A tool call from a mapping: ``{"tool": ...}``, ``{"name":..., "arguments":...}``, or short keys."""
    keys = {str(k).lower(): v for k, v in data.items()}
    if "name" in keys and "arguments" in keys and "tool" not in keys:
        args = keys["arguments"]
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        if not isinstance(args, dict):
            return None
        return action_from_mapping({"tool": keys["name"], **args})
    tool = str(keys.get("tool", "")).lower()
    if tool == "sql" or (not tool and "sql" in keys):
        query = keys.get("query", keys.get("sql"))
        return SqlAction(str(query)) if isinstance(query, str) else None
    if tool == "python" or (not tool and ("python" in keys or "code" in keys)):
        code = keys.get("code", keys.get("python"))
        return PythonAction(str(code)) if isinstance(code, str) else None
    if tool in ("fhir_get", "fhir_post"):
        return _fhir_action(tool, keys)
    if tool in ("answer", ""):
        return answer_from_mapping(keys)
    return None


def _fhir_action(tool: str, params: dict[str, Any]) -> Action | None:
    url = params.get("url")
    if not isinstance(url, str):
        return None
    return FhirGetAction(url) if tool == "fhir_get" else FhirPostAction(url, params.get("payload"))


def _finish_value(body: str) -> Any:
    """The value of ``FINISH(<body>)``: its JSON (the official answers are lists), else the text."""
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body.strip()


def _http_candidates(text: str) -> list[tuple[int, Action]]:
    """MedAgentBench's text calls: ``GET url``; ``POST url`` and the JSON payload on the lines after it."""
    found: list[tuple[int, Action]] = []
    for m in _HTTP.finditer(text):
        if m.group(1) == "GET":
            found.append((m.start(), FhirGetAction(m.group(2))))
        else:
            payload = re.sub(r"^```[A-Za-z]*\s*|\s*```\s*$", "", text[m.end():].strip())
            found.append((m.start(), FhirPostAction(m.group(2), payload)))
    for m in _FINISH.finditer(text):
        found.append((m.start(), AnswerAction(_finish_value(m.group(1)))))
    return found


def _json_objects(text: str, spans: list[tuple[int, int]] | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Top-level JSON objects embedded in ``text`` with their start offsets (their spans go to ``spans``)."""
    found = []
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append((i, obj))
            if spans is not None:
                spans.append((i, end))
        i = text.find("{", end)
    return found


def parse_action(text: str) -> Action:
    """Read one tool call from free text (the last directive in the text wins).

    Raises :class:`ActionParseError` with the expected formats when nothing can be read.
    """
    if not isinstance(text, str) or not text.strip():
        raise ActionParseError(_expected_formats("the message is empty"))
    candidates: list[tuple[int, Action]] = []
    json_spans: list[tuple[int, int]] = []
    for pos, obj in _json_objects(text, json_spans):
        action = action_from_mapping(obj)
        if action is not None:
            candidates.append((pos, action))
    http = _http_candidates(text)
    if http:   # a POST's payload is JSON: the first GET/POST/FINISH line decides, as in the official harness
        return min(http, key=lambda c: c[0])[1]
    fenced_spans = []
    for m in _FENCE.finditer(text):
        lang, body = m.group(1).lower(), m.group(2).strip()
        fenced_spans.append(m.span())
        if lang in ("sql", "duckdb", "postgresql", "sqlite") or (not lang and _SQL_START.match(body)):
            candidates.append((m.start(), SqlAction(body)))
        elif lang in ("python", "py", "python3"):
            candidates.append((m.start(), PythonAction(body)))
    # code after SQL:/PYTHON: (up to an ANSWER/ABSTAIN line) may call sql(...) itself: not a tool call
    code_spans = []
    for m in _MARKER.finditer(text):
        if m.group(1).lower() in ("sql", "python"):
            stop = re.search(r"(?im)^\s*(?:answer|abstain|final\s+answer)\s*:", text[m.end():])
            code_spans.append((m.start(), m.end() + stop.start() if stop else len(text)))
    for m in _CALL.finditer(text):
        at = m.start(1)
        if any(a <= at < b for a, b in fenced_spans + json_spans + code_spans):
            continue
        call = _literal_call(text, at)
        action = action_from_call(*call) if call is not None else None
        if action is not None:
            candidates.append((at, action))
    for m in _MARKER.finditer(text):
        if any(a <= m.start() < b for a, b in fenced_spans):
            continue
        kind = re.sub(r"\s+", " ", m.group(1).lower())
        rest = text[m.end():]
        if kind in ("answer", "final answer"):
            candidates.append((m.start(), AnswerAction(_clean_value(_answer_block(rest)))))
        elif kind == "abstain":
            candidates.append((m.start(), parse_abstain(rest)))
        else:
            body = rest.strip()
            fence = _FENCE.match(body)
            if fence:
                continue  # the fenced block itself is a candidate
            if body:
                cls = SqlAction if kind == "sql" else PythonAction
                stop = re.search(r"(?im)^\s*(?:answer|abstain|final\s+answer)\s*:", body)
                candidates.append((m.start(), cls(body[: stop.start()].strip() if stop else body)))
    if candidates:
        return max(candidates, key=lambda c: c[0])[1]
    if _SQL_START.match(text):
        return SqlAction(text.strip())
    raise ActionParseError(_expected_formats("no tool call or final answer was found"))


def parse_abstain(rest: str) -> AnswerAction:
    """``<reason>: <explanation>`` (or ``<reason> - <explanation>``, or free text)."""
    line = rest.strip()
    parts = re.split(r"\s*(:|—|–|\s-\s|\(|\n)\s*", line, maxsplit=1)
    head = parts[0]
    explanation = ""
    if len(parts) == 3:
        explanation = parts[2].strip()
        if parts[1] == "(" and explanation.endswith(")"):
            explanation = explanation[:-1].strip()
    reason = normalise_reason(head) or normalise_reason(line)
    if reason is None:
        reason = _plain(head).replace(" ", "_")[:60] or "unspecified"
    return AnswerAction(None, reason, explanation)


def parse_answer(text: str) -> AnswerAction | None:
    """The final answer/abstention in ``text``, or None when it holds none."""
    try:
        action = parse_action(text)
    except ActionParseError:
        return None
    return action if isinstance(action, AnswerAction) else None


def _expected_formats(problem: str) -> str:
    return (f"Could not read an action: {problem}. Reply with one of: SQL: <query> (or a ```sql block), "
            f"PYTHON: <code> (or a ```python block), ANSWER: <value>, ABSTAIN: <reason>: <explanation>, "
            f"a call as the tool help shows it (answer(2), sql(\"SELECT ...\")), "
            f"or JSON like {{\"tool\": \"sql\", \"query\": \"...\"}}. Reasons: {', '.join(ABSTAIN_REASONS)}.")
