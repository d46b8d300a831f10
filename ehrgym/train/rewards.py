"""Reward variants for reinforcement learning: one small registered function each (name -> reward).

Every variant reads the verifier's :class:`~ehrgym.env.verifier.Verdict` of the finished episode
(the same code that scores evaluations) and, for ``shaped``, whether the episode ended with a
final call. The strict verdict is always logged besides the chosen reward.

* ``strict``  — 1 when the verdict is a strict success (right value, or abstention with an
  accepted reason), else 0: exactly the evaluation's success.
* ``lenient`` — 1 on a lenient success (any abstention counts on an ``abstain`` task), else 0.
* ``shaped``  — 1 on a strict success; otherwise partial credit: ``abstention_reason``
  (0.4) when the model rightly abstained but named a reason the evidence does not support
  (``wrong_reason``), plus ``format`` (0.1) when the episode ended with a well-formed answer or
  abstention call rather than running out of steps or time. Never above 1; 0 without an answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ehrgym.env.verifier import Verdict
from ehrgym.errors import EhrGymError


@dataclass(frozen=True)
class EpisodeOutcome:
    """What a reward may read: the verdict and whether the agent gave a final call."""

    verdict: Verdict
    answered: bool          # the episode ended with an answer/abstention (not a step/time limit)


RewardFn = Callable[[EpisodeOutcome], float]
REWARDS: dict[str, RewardFn] = {}
SHAPED_FORMAT = 0.1
SHAPED_REASON = 0.4


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    def add(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        return fn
    return add


def get_reward_fn(name: str) -> RewardFn:
    try:
        return REWARDS[name]
    except KeyError:
        raise EhrGymError(f"unknown reward {name!r}; choose one of {sorted(REWARDS)}") from None


@register_reward("strict")
def strict_reward(outcome: EpisodeOutcome) -> float:
    return 1.0 if outcome.verdict.success_strict else 0.0


@register_reward("lenient")
def lenient_reward(outcome: EpisodeOutcome) -> float:
    return 1.0 if outcome.verdict.success_lenient else 0.0


@register_reward("shaped")
def shaped_reward(outcome: EpisodeOutcome) -> float:
    if outcome.verdict.success_strict:
        return 1.0
    reward = SHAPED_FORMAT if outcome.answered else 0.0
    if outcome.verdict.failure == "wrong_reason":
        reward += SHAPED_REASON
    return reward
