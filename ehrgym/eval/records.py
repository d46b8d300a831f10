"""The episode record: one finished (task, trial), as stored in a run's ``episodes.jsonl``.

The runner writes these; metrics and reports read them. Flat fields are what the statistics
need; ``trajectory`` carries the full episode (actions, observations, timings, verdict).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from ehrgym.errors import ResultsError
from ehrgym.vocab import FAILURES, TERMINATIONS

__all__ = ["EpisodeRecord", "FAILURES", "RECORD_VERSION", "TERMINATIONS"]

RECORD_VERSION = 1

@dataclass
class EpisodeRecord:
    run_id: str
    agent: str
    model: str | None
    task_id: str
    pair_id: str
    trial: int
    variant: str                 # clean | noise
    intent: str
    level: str                   # patient | population
    template_id: str
    noise_level: str | None      # record | value | query (None on clean)
    noise_subtype: str | None
    split: str
    expected_kind: str           # answer | abstain
    expected_reason: str | None
    termination: str             # one of TERMINATIONS
    success_strict: bool | None  # None when the episode is an infrastructure error
    success_lenient: bool | None
    failure: str | None          # one of FAILURES, None on success or infra error
    answered_value: Any = None
    abstain_reason: str | None = None
    steps: int = 0
    sql_errors: int = 0
    wall_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None     # agent/infrastructure error message
    trajectory: dict[str, Any] = field(default_factory=dict)
    record_version: int = RECORD_VERSION

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.trial)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EpisodeRecord":
        names = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls)
                   if f.name not in data and f.default is MISSING and f.default_factory is MISSING]
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise ResultsError(f"malformed episode record ({exc}); missing: {missing}") from exc
