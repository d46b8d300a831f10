"""The agent's tools: descriptions and OpenAI function-calling schemas, derived from the actions.

Each tool is one :class:`Tool` in :data:`TOOLS`, built from an action dataclass of
:mod:`ehrgym.env.actions`: the tool name is the action's ``tool`` default, the description is
its docstring, the parameters are its fields (types from the annotations) with a short note
each. Adding a tool = adding an action dataclass and one :class:`Tool` entry.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ehrgym.env.actions import AnswerAction, FhirGetAction, FhirPostAction, PythonAction, SqlAction
from ehrgym.vocab import ABSTAIN_REASONS

_JSON_TYPES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
}


def _json_schema(annotation: Any) -> dict[str, Any]:
    hint = annotation
    if hint in _JSON_TYPES:
        return dict(_JSON_TYPES[hint])
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and len(args) == 1:
        return _json_schema(args[0])
    # Any: an answer may be a number, text, yes/no or a list
    return {"type": ["string", "number", "boolean", "array"], "items": {"type": ["string", "number"]}}


@dataclass(frozen=True)
class Tool:
    action: type
    notes: dict[str, str]
    required: tuple[str, ...] = ()
    enums: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    types: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)   # JSON schema of a parameter

    @property
    def name(self) -> str:
        name = next(f.default for f in dataclasses.fields(self.action) if f.name == "tool")
        assert isinstance(name, str), f"{self.action.__name__}.tool must default to the tool's name"
        return name

    @property
    def description(self) -> str:
        return " ".join((self.action.__doc__ or "").split())

    def parameters(self) -> dict[str, Any]:
        hints = typing.get_type_hints(self.action)
        props: dict[str, Any] = {}
        for f in dataclasses.fields(self.action):
            if f.name == "tool":
                continue
            schema = _json_schema(hints[f.name])
            if f.name in self.enums:
                schema = {"type": "string", "enum": list(self.enums[f.name])}
            if f.name in self.types:
                schema = dict(self.types[f.name])
            schema["description"] = self.notes.get(f.name, f.name)
            props[f.name] = schema
        return {"type": "object", "properties": props, "required": list(self.required),
                "additionalProperties": False}

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters()}}


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool(SqlAction, {"query": "One DuckDB SELECT over the MIMIC-IV tables (mimiciv_hosp.*, mimiciv_icu.*), "
                              "or SHOW TABLES / DESCRIBE <table>. Results show at most 50 rows."},
         required=("query",)),
    Tool(PythonAction, {"code": "Python source; state persists between calls like a notebook. pandas is pd, "
                                "numpy is np, and sql(query) returns a DataFrame through the same SQL gate. "
                                "Print what you want to see."},
         required=("code",)),
    Tool(AnswerAction, {"value": "The final answer (number, text, yes/no, date/time or a list); omit when "
                                 "abstaining.",
                        "abstain": "Set instead of value when the records do not support an answer: the reason "
                                   "code.",
                        "explanation": "Optional short justification, in particular for an abstention."},
         enums={"abstain": ABSTAIN_REASONS}),
    Tool(FhirGetAction, {"url": "The resource and its search parameters, e.g. Patient?identifier=S123 or "
                                "Observation?patient=S123&code=MG (relative to the FHIR base URL, or the full URL "
                                "on that server)."},
         required=("url",)),
    Tool(FhirPostAction, {"url": "The resource type to create, e.g. Observation or MedicationRequest (relative to "
                                 "the FHIR base URL, or the full URL on that server).",
                          "payload": "The FHIR resource as a JSON object."},
         required=("url", "payload"), types={"payload": {"type": "object"}}),
)}

# the gym's tools; an episode on a FHIR server offers FHIR_TOOLS (its schema profile names them)
GYM_TOOLS: tuple[str, ...] = ("sql", "python", "answer")
FHIR_TOOLS: tuple[str, ...] = ("fhir_get", "fhir_post", "answer")


_MIMIC_SCOPE = "the MIMIC-IV tables (mimiciv_hosp.*, mimiciv_icu.*)"
_MIMIC_EPISODE = "the episode's MIMIC-IV tables"
_MIMIC_SCHEMAS = ("mimiciv_hosp", "mimiciv_icu")


def _scoped(text: str, schemas: tuple[str, ...] | None) -> str:
    """``text`` naming the episode's schemas instead of MIMIC-IV's (``schemas``: those of the
    episode's schema profile, :mod:`ehrgym.db.profile`; None or MIMIC-IV's: unchanged)."""
    if not schemas or tuple(schemas) == _MIMIC_SCHEMAS:
        return text
    listed = ", ".join(f"{s}.*" for s in schemas)
    return text.replace(_MIMIC_SCOPE, f"the episode's tables ({listed})").replace(_MIMIC_EPISODE,
                                                                                   "the episode's tables")


def tool_schemas(names: tuple[str, ...] | None = None,
                 schemas: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """OpenAI function-calling schemas of the tools (the gym's, or ``names`` in that order: an episode's
    ``Observation.tool_names``); ``schemas``: the schemas the episode exposes (``Observation.schemas``),
    named in the SQL tool's text."""
    chosen = names if names is not None else GYM_TOOLS
    out = [TOOLS[n].schema() for n in chosen]
    if schemas and tuple(schemas) != _MIMIC_SCHEMAS:
        for spec in out:
            fn = spec["function"]
            fn["description"] = _scoped(fn["description"], schemas)
            for prop in fn["parameters"]["properties"].values():
                prop["description"] = _scoped(prop["description"], schemas)
    return out


@lru_cache(maxsize=16)
def tool_descriptions(names: tuple[str, ...] | None = None, schemas: tuple[str, ...] | None = None) -> str:
    """The tools as text for prompts and the first observation (``schemas``: as for :func:`tool_schemas`)."""
    chosen = names if names is not None else GYM_TOOLS
    lines = []
    for n in chosen:
        tool = TOOLS[n]
        params = ", ".join(p for p in tool.parameters()["properties"])
        lines.append(f"- {n}({params}): {_scoped(tool.description, schemas)}")
        for p, note in tool.notes.items():
            lines.append(f"    {p}: {_scoped(note, schemas)}")
    return "\n".join(lines)
