"""The three actions (tools) an agent can take in an episode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union


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


Action = Union[SqlAction, PythonAction, AnswerAction]


def action_to_dict(action: Action) -> dict[str, Any]:
    if isinstance(action, SqlAction):
        return {"tool": "sql", "query": action.query}
    if isinstance(action, PythonAction):
        return {"tool": "python", "code": action.code}
    return {"tool": "answer", "value": action.value, "abstain": action.abstain, "explanation": action.explanation}


def action_from_dict(data: dict[str, Any]) -> Action:
    tool = data.get("tool")
    if tool == "sql":
        return SqlAction(str(data["query"]))
    if tool == "python":
        return PythonAction(str(data["code"]))
    if tool == "answer":
        return AnswerAction(data.get("value"), data.get("abstain"), str(data.get("explanation", "")))
    raise ValueError(f"unknown tool {tool!r}; use sql, python or answer")
