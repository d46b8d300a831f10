"""The agent protocol: an agent maps the observation history of an episode to its next action.

The runner drives every agent the same way::

    agent.reset(first_observation, briefing)
    while not (terminated or truncated):
        action = agent.act(observation)      # SqlAction | PythonAction | AnswerAction
        observation, reward, terminated, truncated, info = env.step(action)

What an agent may know besides the observations is explicit and auditable: each agent class
declares an :class:`Entitlement` and the runner builds the :class:`Briefing` from it.

* ``NONE`` — observations only (LLM agents);
* ``DRAFT`` — also the task's ``naive_sql``: the clean gold SQL for this question, i.e. what a
  competent analyst's first draft would be, and the answer format the question asks for (a
  number, a set …, so a one-row result ``"Hypotension, unspecified"`` is answered as a one-element
  set, not split at its comma). Neither carries an overlay or an expected outcome
  (``credulous``, ``skeptic``);
* ``PRIVILEGED`` — the whole :class:`~ehrgym.bench.task.Task` (``oracle`` only; it exists to
  check that builder, environment and verifier agree).

An agent reports model usage (tokens, latency, calls, retries) in :attr:`Agent.usage`; it raises
:class:`~ehrgym.errors.InfrastructureError` when a server failed after retries (the runner
records the episode as an infrastructure error, never as a wrong answer) and
:class:`~ehrgym.errors.AgentError` when it cannot produce an action.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ehrgym.env.actions import Action


class Entitlement(enum.Enum):
    NONE = "none"
    DRAFT = "draft"
    PRIVILEGED = "privileged"


class Concurrency(enum.Enum):
    """How the runner parallelises an agent: CPU-bound agents in processes, API agents in threads."""

    PROCESS = "process"
    THREAD = "thread"


@dataclass(frozen=True)
class Briefing:
    """What the runner hands an agent at ``reset`` besides the first observation."""

    task_id: str                    # the task's opaque public id (Task.public_id), never the internal id
    trial: int
    question: str
    seed: int                       # per-episode seed (derived from the run seed, task and trial)
    draft_sql: str | None = None    # Entitlement.DRAFT and above
    answer_type: str | None = None  # DRAFT and above: the answer format the question asks for (number, set …)
    task: Any = None                # Entitlement.PRIVILEGED only: the Task


@dataclass
class Usage:
    """Model usage of one episode (zeros for scripted agents)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    retries: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    per_call: list[dict[str, Any]] = field(default_factory=list)

    def add_call(self, prompt_tokens: int, completion_tokens: int, latency_s: float, retries: int = 0,
                 cost_usd: float = 0.0) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.calls += 1
        self.retries += retries
        self.latency_s += latency_s
        self.cost_usd += cost_usd
        self.per_call.append({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "latency_s": round(latency_s, 6), "retries": retries})

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "calls": self.calls, "retries": self.retries, "latency_s": round(self.latency_s, 6),
                "cost_usd": self.cost_usd, "per_call": list(self.per_call)}


class Agent(abc.ABC):
    """Base class of every agent. Subclasses set ``name``, ``entitlement`` and ``concurrency``."""

    name: ClassVar[str] = "agent"
    entitlement: ClassVar[Entitlement] = Entitlement.NONE
    concurrency: ClassVar[Concurrency] = Concurrency.PROCESS
    # EnvConfig fields this agent runs with unless the user overrides them (scripted agents read
    # structured results, so they skip the schema summary in the first observation)
    env_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.usage = Usage()

    @property
    def model(self) -> str | None:
        """The model identifier recorded with each episode (None for scripted agents)."""
        return None

    def reset(self, observation: Any, briefing: Briefing) -> None:
        """Start an episode. Subclasses call ``super().reset`` to clear usage."""
        self.usage = Usage()

    @abc.abstractmethod
    def act(self, observation: Any) -> Action:
        """The next action given the latest observation."""

    def close(self) -> None:  # noqa: B027 - an optional hook; most agents hold nothing to release
        """Release resources (HTTP clients, models)."""

    def describe(self) -> dict[str, Any]:
        """The agent's configuration as stored in ``run.json`` (never secrets)."""
        return {"name": self.name, "entitlement": self.entitlement.value, "model": self.model}


def observation_text(observation: Any) -> str:
    """The text an LLM sees for an observation (``.text``, or ``str()`` as a fallback)."""
    text = getattr(observation, "text", None)
    return text if isinstance(text, str) else str(observation)
