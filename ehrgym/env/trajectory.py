"""A versioned, JSON-serialisable record of one episode (every action, observation, timing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ehrgym.errors import TaskFormatError

TRAJECTORY_VERSION = 1


@dataclass
class TrajectoryStep:
    index: int
    action: dict[str, Any]            # actions.action_to_dict form (or {"tool": "invalid", "text": ...})
    observation: str
    reward: float = 0.0
    done: bool = False
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)  # tokens/latency the agent reported

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrajectoryStep":
        return cls(int(data["index"]), dict(data["action"]), str(data["observation"]), float(data.get("reward", 0)),
                   bool(data.get("done", False)), float(data.get("seconds", 0)), dict(data.get("info") or {}),
                   dict(data.get("usage") or {}))


@dataclass
class Trajectory:
    task_id: str
    initial_observation: str = ""
    steps: list[TrajectoryStep] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    termination: str | None = None     # one of vocab.TERMINATIONS once done
    reset_seconds: float = 0.0
    wall_seconds: float = 0.0
    version: int = TRAJECTORY_VERSION

    @property
    def prompt_tokens(self) -> int:
        return sum(int(s.usage.get("prompt_tokens", 0) or 0) for s in self.steps)

    @property
    def completion_tokens(self) -> int:
        return sum(int(s.usage.get("completion_tokens", 0) or 0) for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["prompt_tokens"] = self.prompt_tokens
        data["completion_tokens"] = self.completion_tokens
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        version = data.get("version", TRAJECTORY_VERSION)
        if version != TRAJECTORY_VERSION:
            raise TaskFormatError(f"trajectory version {version} is not supported (this kit reads "
                                  f"{TRAJECTORY_VERSION})")
        try:
            return cls(str(data["task_id"]), str(data.get("initial_observation", "")),
                       [TrajectoryStep.from_dict(s) for s in data.get("steps", [])], data.get("verdict"),
                       data.get("termination"), float(data.get("reset_seconds", 0)),
                       float(data.get("wall_seconds", 0)), version)
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskFormatError(f"malformed trajectory: {exc}") from exc
