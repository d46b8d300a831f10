"""The actions (tools) an agent can take in an episode.

SQL, Python and the final answer are the gym's tools. ``fhir_get`` / ``fhir_post`` are the tools of
an episode on a FHIR R4 server (MedAgentBench, :mod:`ehrgym.env.fhirtool`); an episode offers the
tools its schema profile names (:attr:`ehrgym.db.profile.SchemaProfile.tools`), SQL, Python and
answer by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace
from typing import Any, Union

from ehrgym.vocab import ABSTAIN_REASONS


@dataclass(frozen=True)
class SqlAction:
    """Run one read-only SQL query over the episode's MIMIC-IV tables."""

    query: str
    tool: str = "sql"


@dataclass(frozen=True)
class PythonAction:
    """Run Python in the episode's persistent worker (pandas as pd, numpy as np, sql() -> DataFrame)."""

    code: str
    tool: str = "python"


@dataclass(frozen=True)
class AnswerAction:
    """Give the final answer, or abstain with a reason code and an explanation."""

    value: Any = None
    abstain: str | None = None
    explanation: str = ""
    tool: str = "answer"

    @property
    def is_abstain(self) -> bool:
        return self.abstain is not None


@dataclass(frozen=True)
class FhirGetAction:
    """Send one GET request to the episode's FHIR R4 server and see its JSON response."""

    url: str
    tool: str = "fhir_get"


@dataclass(frozen=True)
class FhirPostAction:
    """Send one POST request (create a FHIR resource) to the episode's FHIR R4 server; it is recorded for grading."""

    url: str
    payload: Any = None
    tool: str = "fhir_post"


Action = Union[SqlAction, PythonAction, AnswerAction, FhirGetAction, FhirPostAction]
ACTION_TYPES = (SqlAction, PythonAction, AnswerAction, FhirGetAction, FhirPostAction)


def _text(value: Any, what: str) -> tuple[str | None, str | None]:
    """``value`` as text: bytes are decoded as UTF-8; anything else is refused with a message."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8"), None
        except UnicodeDecodeError:
            return None, f"the {what} is bytes that are not UTF-8 text; send it as a str"
    return None, f"the {what} must be text (a str), got {type(value).__name__}"


def check_action(action: Action) -> tuple[Action | None, str | None]:
    """``(action, None)`` when ``action`` is well formed (bytes decoded to text), else ``(None, message)``.

    An abstention must name one of :data:`ehrgym.vocab.ABSTAIN_REASONS`."""
    if isinstance(action, SqlAction):
        query, problem = _text(action.query, "SQL query")
        if query is None:
            return None, f"Could not run the sql call: {problem}."
        return (action if query is action.query else replace(action, query=query)), None
    if isinstance(action, PythonAction):
        code, problem = _text(action.code, "Python code")
        if code is None:
            return None, f"Could not run the python call: {problem}."
        return (action if code is action.code else replace(action, code=code)), None
    if isinstance(action, AnswerAction):
        if action.abstain is not None and (not isinstance(action.abstain, str)
                                           or action.abstain not in ABSTAIN_REASONS):
            shown = repr(action.abstain)[:80]
            return None, (f"Could not record the abstention: its reason {shown} is not one of "
                          f"{', '.join(ABSTAIN_REASONS)}. Abstain again with one of these reason codes "
                          f"(or answer with a value).")
        if not isinstance(action.explanation, str):
            return None, "Could not record the answer: explanation must be text (a str)."
        return action, None
    if isinstance(action, (FhirGetAction, FhirPostAction)):   # the payload is checked when the POST runs
        url, problem = _text(action.url, "URL")
        if url is None:
            return None, f"Could not run the {action.tool} call: {problem}."
        return (action if url is action.url else replace(action, url=url)), None
    return None, f"Could not read an action of type {type(action).__name__}; use sql, python or answer."


def action_to_dict(action: Action) -> dict[str, Any]:
    if isinstance(action, SqlAction):
        return {"tool": "sql", "query": action.query}
    if isinstance(action, PythonAction):
        return {"tool": "python", "code": action.code}
    if isinstance(action, FhirGetAction):
        return {"tool": "fhir_get", "url": action.url}
    if isinstance(action, FhirPostAction):
        return {"tool": "fhir_post", "url": action.url, "payload": action.payload}
    return {"tool": "answer", "value": action.value, "abstain": action.abstain, "explanation": action.explanation}


def action_from_dict(data: dict[str, Any]) -> Action:
    tool = data.get("tool")
    if tool == "sql":
        return SqlAction(str(data["query"]))
    if tool == "python":
        return PythonAction(str(data["code"]))
    if tool == "answer":
        return AnswerAction(data.get("value"), data.get("abstain"), str(data.get("explanation", "")))
    if tool == "fhir_get":
        return FhirGetAction(str(data["url"]))
    if tool == "fhir_post":
        return FhirPostAction(str(data["url"]), data.get("payload"))
    raise ValueError(f"unknown tool {tool!r}; use sql, python, answer, fhir_get or fhir_post")
