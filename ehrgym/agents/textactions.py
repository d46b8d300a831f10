"""Reading an action out of a language model's output, with a corrective message when that fails.

Parsing itself belongs to the environment's answer protocol (:mod:`ehrgym.env.protocol`), so
agents and environment can never read the same text differently. This module only maps a
parse failure to :class:`MalformedOutput`, whose message is the corrective observation an
agent sends back to the model, and reads native tool calls.
"""

from __future__ import annotations

import json
from typing import Any

from ehrgym.env import protocol
from ehrgym.env.actions import Action

CORRECTIVE = ("Reply with exactly one action: a ```sql``` block, a ```python``` block, 'ANSWER: <value>' or "
              "'ABSTAIN: <reason>: <explanation>'.")


class MalformedOutput(ValueError):
    """The model's output holds no usable action; ``str(exc)`` is the corrective message."""


def parse_text_action(text: str | None) -> Action:
    """The action written in ``text`` (see :func:`ehrgym.env.protocol.parse_action`)."""
    if text is None or not str(text).strip():
        raise MalformedOutput("Your last message was empty. " + CORRECTIVE)
    try:
        return protocol.parse_action(str(text))
    except protocol.ActionParseError as exc:
        raise MalformedOutput(str(exc)) from exc


def action_from_tool_call(name: str, arguments: str | dict[str, Any] | None) -> Action:
    """Map one native tool call to an action; raises :class:`MalformedOutput` with a corrective message."""
    if isinstance(arguments, dict):
        args: Any = arguments
    else:
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise MalformedOutput(f"The arguments of your {name!r} call are not valid JSON ({exc.msg}). "
                                  f"Call the tool again with a JSON object.") from exc
    if not isinstance(args, dict):
        raise MalformedOutput(f"The arguments of your {name!r} call must be a JSON object.")
    tool = (name or "").strip().lower()
    if tool not in ("sql", "python", "answer", "fhir_get", "fhir_post"):
        raise MalformedOutput(f"There is no tool {name!r}; use the tools the episode offers (sql, python, answer; "
                              f"on a FHIR server fhir_get, fhir_post, answer).")
    action = protocol.action_from_mapping({**args, "tool": tool})
    if action is None:
        needs = {"sql": "query", "python": "code", "answer": "value (or abstain with a reason)", "fhir_get": "url",
                 "fhir_post": "url"}[tool]
        raise MalformedOutput(f"Your {tool!r} call lacks its argument {needs}.")
    return action
