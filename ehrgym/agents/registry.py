"""The one agent registry: name -> factory (``ehrgym eval run --agent NAME``).

Adding an agent = one module with a class and one ``@register_agent("name")`` line. Built-in
modules are listed in ``_BUILTIN_MODULES`` and imported lazily; an agent in another package is
found through the entry-point group ``ehrgym.agents`` (see :mod:`ehrgym.registry`), so
``ehrgym eval run --agent NAME`` works for it once that package is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ehrgym.agents.base import Agent, Concurrency, Entitlement
from ehrgym.errors import AgentError
from ehrgym.registry import Registry

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


# name -> module that registers it (imported on first use, so the LLM and Hugging Face stacks
# are only imported when those agents are used)
_BUILTIN_MODULES: dict[str, str] = {
    "oracle": "ehrgym.agents.oracle",
    "credulous": "ehrgym.agents.credulous",
    "literal": "ehrgym.agents.literal",
    "skeptic": "ehrgym.agents.skeptic",
    "chat": "ehrgym.agents.chat",
    "hf": "ehrgym.agents.hf",
    "external-oracle": "ehrgym.external.oracle",
    "external-abstain": "ehrgym.external.oracle",
}


def _entry(name: str, cls: object) -> AgentEntry:
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise AgentError(f"agent plugin {name!r} must name an Agent subclass or a module, got {cls!r}")
    cls.name = name
    doc = (cls.__doc__ or "").strip().splitlines()
    return AgentEntry(name, cls, doc[0] if doc else "")


# other packages add agents through the entry-point group "ehrgym.agents"
AGENTS: Registry[AgentEntry] = Registry("agent", builtin_modules=_BUILTIN_MODULES, error=AgentError, adapt=_entry)


def register_agent(name: str) -> Callable[[type[Agent]], type[Agent]]:
    """Class decorator: register an :class:`Agent` subclass under ``name``."""

    def deco(cls: type[Agent]) -> type[Agent]:
        AGENTS.add(name, _entry(name, cls), same=lambda a, b: a.factory is b.factory)
        return cls

    return deco


def agent_names() -> list[str]:
    return AGENTS.names()


def get_agent_entry(name: str) -> AgentEntry:
    return AGENTS.get(name)


def make_agent(name: str, **kwargs: Any) -> Agent:
    """Instantiate a registered agent with its keyword arguments."""
    entry = get_agent_entry(name)
    try:
        return entry.factory(**kwargs)
    except TypeError as exc:
        raise AgentError(f"agent {name!r} does not accept these options {sorted(kwargs)}: {exc}") from exc
