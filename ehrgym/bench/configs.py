"""Build configurations and the quota plan that distributes pairs.

Distribution (both configs; ``paper`` targets exactly 5,486 pairs, ``small`` 300):

1. pairs are split evenly over the (intent, level) cells that have at least one usable template
   (largest remainder, cells in sorted order: encounters, diagnoses, labs, medications, vitals,
   microbiology × patient, population — intents whose tables are empty drop out);
2. inside a cell, evenly over the noise levels (record, value, query) that some template of
   the cell supports — about one third each;
3. inside a (cell, noise level), evenly over the subtypes that some template of the cell
   supports (record: 4 subtypes, value: 4, query: 5);
4. inside a (cell, subtype), over the templates that support it in proportion to their
   difficulty-tier weight (``tier_weights``: tiers 1, 2, 3 — see ``templates.base.TIERS``), so
   that harder templates get a larger share without changing the balance of steps 1-3;
5. outcome balance: inside every template that has subtypes of both expected outcomes (answer
   and abstain, ``Injector.expected``), its total is re-split so that half its noisy twins (rounded
   down) expect an answer and the rest an abstention — each side over that outcome's subtypes in
   proportion to their step-4 quotas. Out-of-scope twins (``MARKED_SUBTYPES``: their words say
   the question cannot be answered) keep their step-4 quota outside this count, and lexical
   variation gets at most as many pairs as the template's other unmarked query subtypes. A template's wording then does not predict the outcome of
   its noisy twin (a count template would otherwise carry mostly answered duplicates, a single-
   value template mostly abstained missing values). Templates whose subtypes all expect an
   abstention keep their step-4 quotas: with every other template at one half (answer share at
   most one half), telling them apart gains a text-only classifier nothing over the majority rate.

6. answer spread: one clean answer (the same value, written as the gold is) is the gold of at most
   ``max_answer_share`` of a template's pairs, rounded up, at every point of the build
   (``answer_allowed``; a boolean template alternates yes and no), and of at most that share of its
   pairs about one concept (``spread_groups``: the names the question carries — blood cultures come
   in pairs, so "how many blood culture specimens" would otherwise be answered "2" from the name). Real data piles
   up on a few values — one culture, no readmission, "no organism", the Medicine service — and a
   template whose clean answer is mostly one value can be answered from its wording alone (a
   policy that says each template's most common training answer, ``ehrgym.bench.validity.prior``).
   A candidate whose clean answer has reached the limit is passed over (``answer_share_cap``) before
   any noise is injected, so the cap costs one cached clean query; it is not a failed attempt (a
   slot gives up after ``max_failures_per_slot`` of those, and a slot whose subtype only ever traps
   one answer would otherwise give up as soon as that answer reached its share), and the candidate
   stays available to the template's other slots.

The builder keeps step 5 through the build (``Builder._settle``): lexical twins beyond the
template's realised unmarked abstaining query twins are dropped (and not made again);
a template whose first pass
left one outcome short is topped up from its own slots of that outcome, and a surplus it cannot
match is dropped; the pairs then missing are made in answer/abstain couples of one template
(round robin, first inside the cell that lost them, then over all templates), and only what
couples cannot fill goes to abstain-only templates, then to any slot. The total is met exactly
whenever the database has enough entities. The card records the realised distribution and the
build report any shortfall.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, TypeVar

from ehrgym.errors import BenchmarkError

K = TypeVar("K")


@dataclass(frozen=True)
class BuildConfig:
    name: str
    pairs: int
    oversample: float = 3.0  # candidates drawn per planned pair of a template
    min_candidates: int = 16  # at least this many candidates drawn per template
    max_candidates: int = 20000
    max_failures_per_slot: int = 60  # consecutive failed candidates before a slot gives up
    split_fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)  # train, dev, test
    ood_templates_per_intent: int = 1
    workers: int = 1  # processes for the first verification pass (the result does not depend on it)
    tier_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)  # template share by tier 1, 2, 3 (step 4)
    # step 6: one clean answer may be the gold of at most this share of a template's pairs (rounded up)
    max_answer_share: float = 0.5
    # the clean twin of a record/value-level pair is served one harmless anomaly of the pair's kind (bench.decoys)
    decoys: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["split_fractions"] = list(self.split_fractions)
        out["tier_weights"] = list(self.tier_weights)
        out.pop("workers")  # how the build ran, not what it built: files are identical for any value
        return out


CONFIGS: dict[str, BuildConfig] = {
    "small": BuildConfig("small", 300, oversample=4.0, min_candidates=24, tier_weights=(1.0, 1.0, 2.0)),
    "paper": BuildConfig("paper", 5486, workers=2, tier_weights=(1.0, 1.0, 2.0)),
}


def answer_allowed(count: int, made: int, share: float) -> bool:
    """Step 6: whether a template that has ``made`` pairs, ``count`` of them with some clean answer, may make one
    more with that answer — it then holds at most ``share`` of the template's pairs, rounded up."""
    return count + 1 <= max(1, math.ceil(share * (made + 1) - 1e-9))


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def spread_groups(tid: str, params: dict[str, Any]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """Step 6 spreads a template's clean answers over all its pairs and over its pairs about each concept: the
    names its question carries (text parameters — a specimen, an organism and antibiotic, a lab — not dates).
    Blood cultures come in pairs, so "how many blood culture specimens" would be answered "2" from the name."""
    concept = tuple(sorted((k, v) for k, v in params.items() if isinstance(v, str) and not _DATE.match(v)))
    return ((tid, ()), (tid, concept)) if concept else ((tid, ()),)


def get_config(name: str | BuildConfig) -> BuildConfig:
    if isinstance(name, BuildConfig):
        return name
    try:
        return CONFIGS[name]
    except KeyError:
        raise BenchmarkError(f"unknown build config {name!r}; use one of {sorted(CONFIGS)}") from None


def even_split(total: int, keys: Iterable[K]) -> dict[K, int]:
    """``total`` split as evenly as possible over ``keys`` (earlier keys get the remainder)."""
    keys = list(keys)
    if not keys:
        return {}
    base, extra = divmod(total, len(keys))
    return {k: base + (1 if i < extra else 0) for i, k in enumerate(keys)}


def weighted_split(total: int, weights: dict[K, float]) -> dict[K, int]:
    """``total`` split in proportion to ``weights`` (largest remainder; ties to earlier keys)."""
    keys = list(weights)
    if not keys:
        return {}
    w = [max(float(weights[k]), 0.0) for k in keys]
    if sum(w) <= 0:
        return even_split(total, keys)
    exact = [total * x / sum(w) for x in w]
    out = [int(e) for e in exact]
    order = sorted(range(len(keys)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:total - sum(out)]:
        out[i] += 1
    return dict(zip(keys, out))


def plan_quotas(total: int, applicable: dict[tuple[str, str, str], list[str]],
                noise_level: dict[str, str], weights: dict[str, float] | None = None,
                outcomes: dict[tuple[str, str], str] | None = None) -> dict[tuple[str, str], int]:
    """Slot quotas ``{(template_id, subtype): pairs}``.

    ``applicable`` maps ``(intent, level, template_id)`` to the subtypes the template supports;
    ``weights`` (template id -> weight, default 1) sets the templates' shares in step 4;
    ``outcomes`` (``(template_id, subtype)`` -> ``"answer"``/``"abstain"``) turns on step 5.
    """
    from ehrgym.vocab import INTENTS, LEVELS, NOISE_LEVELS, NOISE_SUBTYPES

    cells = sorted({(i, lv) for (i, lv, _), subs in applicable.items() if subs},
                   key=lambda c: (INTENTS.index(c[0]), LEVELS.index(c[1])))
    quotas: dict[tuple[str, str], int] = {}
    for cell, cell_q in even_split(total, cells).items():
        members = {tid: subs for (i, lv, tid), subs in sorted(applicable.items()) if (i, lv) == cell and subs}
        levels = [nl for nl in NOISE_LEVELS if any(noise_level[s] == nl for subs in members.values() for s in subs)]
        for nl, level_q in even_split(cell_q, levels).items():
            subtypes = [s for s in NOISE_SUBTYPES if noise_level[s] == nl
                        and any(s in subs for subs in members.values())]
            for sub, sub_q in even_split(level_q, subtypes).items():
                tids = [tid for tid, subs in members.items() if sub in subs]
                shares = {tid: (weights or {}).get(tid, 1.0) for tid in tids}
                for tid, q in weighted_split(sub_q, shares).items():
                    if q:
                        quotas[(tid, sub)] = q
    if outcomes is not None:
        quotas = balance_outcomes(quotas, {tid: subs for (_, _, tid), subs in applicable.items()}, outcomes)
    return quotas


# Subtypes whose question states in its own words that it cannot be answered (an out-of-scope
# twin names what no table holds): they keep their step-4 quota and stay out of the outcome
# balance, so that their recognisable wording does not tip the rest of a template's twins.
MARKED_SUBTYPES: tuple[str, ...] = ("out_of_scope",)
LEXICAL = "lexical_variation"


def balance_outcomes(quotas: dict[tuple[str, str], int], subtypes: dict[str, list[str]],
                     outcomes: dict[tuple[str, str], str]) -> dict[tuple[str, str], int]:
    """Step 5 of the plan: every template with (unmarked) subtypes of both outcomes gets half its
    unmarked total (rounded down) on its answer subtypes and the rest on its abstain subtypes, each
    side split in proportion to the step-4 quotas of that side (evenly where they are all zero).
    Inside the query level the answer subtype (lexical variation) then gets at most as many pairs
    as the template's unmarked abstaining query subtypes; any excess goes to its other answer
    subtypes."""
    pools = {tid: balanced_subtypes(tid, subs, outcomes) for tid, subs in subtypes.items()}
    totals: dict[str, int] = {}
    for (tid, s), q in quotas.items():
        if s in pools.get(tid, ()):
            totals[tid] = totals.get(tid, 0) + q
    out = {k: q for k, q in quotas.items() if k[1] not in pools.get(k[0], ())}
    for tid, total in sorted(totals.items()):
        subs = pools[tid]
        answer = total // 2
        share: dict[str, int] = {}
        for side, n in (("answer", answer), ("abstain", total - answer)):
            members = [s for s in subs if outcomes[(tid, s)] == side]
            share.update(weighted_split(n, {s: float(quotas.get((tid, s), 0)) for s in members}))
        query_abstain = sum(q for s, q in share.items() if s in _QUERY and outcomes[(tid, s)] == "abstain")
        others = [s for s in subs if outcomes[(tid, s)] == "answer" and s != LEXICAL]
        excess = share.get(LEXICAL, 0) - query_abstain
        if excess > 0 and others:
            share[LEXICAL] -= excess
            for s, q in weighted_split(excess, {s: float(share.get(s, 0)) for s in others}).items():
                share[s] = share.get(s, 0) + q
        out.update({(tid, s): q for s, q in share.items() if q})
    return out


_QUERY = ("nonexistent_entity", "false_premise", "temporal_mismatch", "lexical_variation", "out_of_scope")
QUERY_ABSTAIN = ("nonexistent_entity", "false_premise", "temporal_mismatch")  # unmarked abstaining query subtypes


def balanced_subtypes(tid: str, subs: Iterable[str], outcomes: dict[tuple[str, str], str]) -> list[str]:
    """The subtypes of a template that step 5 balances: all but the marked ones — unless without
    them only answers are left (a count template whose one abstention is out of scope), then all;
    empty when they do not include both outcomes."""
    subs = list(subs)
    for pool in ([s for s in subs if s not in MARKED_SUBTYPES], subs):
        if {outcomes[(tid, s)] for s in pool} == {"answer", "abstain"}:
            return pool
    return []


def both_outcomes(tid: str, subtypes: dict[str, list[str]], outcomes: dict[tuple[str, str], str]) -> bool:
    """Step 5 balances this template (its subtypes include both expected outcomes)."""
    return bool(balanced_subtypes(tid, subtypes.get(tid, ()), outcomes))
