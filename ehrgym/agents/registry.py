"""The one agent registry: name -> factory (``ehrgym eval run --agent NAME``).

Adding an agent = one module with a class and one ``@register_agent("name")`` line; the module
is listed in ``_BUILTIN_MODULES`` so it is imported lazily (the LLM and Hugging Face stacks are
only imported when those agents are used).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ehrgym.agents.base import Agent, Concurrency, Entitlement
from ehrgym.errors import AgentError

AgentFactory = Callable[..., Agent]


@dataclass(frozen=True)
class AgentEntry:
    name: str
    factory: type[Agent]
    summary: str

    @property
    def concurrency(self) -> Concurrency:
        return self.factory.concurrency

    @property
    def entitlement(self) -> Entitlement:
        return self.factory.entitlement


_REGISTRY: dict[str, AgentEntry] = {}

# name -> module that registers it (imported on first use)
_BUILTIN_MODULES: dict[str, str] = {
    "oracle": "ehrgym.agents.oracle",
    "credulous": "ehrgym.agents.credulous",
    "literal": "ehrgym.agents.literal",
    "skeptic": "ehrgym.agents.skeptic",
    "chat": "ehrgym.agents.chat",
    "hf": "ehrgym.agents.hf",
}


def register_agent(name: str) -> Callable[[type[Agent]], type[Agent]]:
    """Class decorator: register an :class:`Agent` subclass under ``name``."""

    def deco(cls: type[Agent]) -> type[Agent]:
        if name in _REGISTRY and _REGISTRY[name].factory is not cls:
            raise ValueError(f"agent name {name!r} is already registered by {_REGISTRY[name].factory}")
        cls.name = name
        doc = (cls.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = AgentEntry(name, cls, doc[0] if doc else "")
        return cls

    return deco


def agent_names() -> list[str]:
    return sorted(set(_BUILTIN_MODULES) | set(_REGISTRY))


def get_agent_entry(name: str) -> AgentEntry:
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r}; choose one of {agent_names()}") from None


def make_agent(name: str, **kwargs: Any) -> Agent:
    """Instantiate a registered agent with its keyword arguments."""
    entry = get_agent_entry(name)
    try:
        return entry.factory(**kwargs)
    except TypeError as exc:
        raise AgentError(f"agent {name!r} does not accept these options {sorted(kwargs)}: {exc}") from exc
