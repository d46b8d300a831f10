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
   that harder templates get a larger share without changing the balance of steps 1-3.

A slot (template × subtype) that runs out of verifiable candidates hands its deficit first to
the other slots of its cell, then to every slot (round robin in sorted order), so the total is
met exactly whenever the database has enough entities. The card records the realised
distribution and the build report any shortfall.
"""

from __future__ import annotations

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
                noise_level: dict[str, str], weights: dict[str, float] | None = None) -> dict[tuple[str, str], int]:
    """Slot quotas ``{(template_id, subtype): pairs}``.

    ``applicable`` maps ``(intent, level, template_id)`` to the subtypes the template supports;
    ``weights`` (template id -> weight, default 1) sets the templates' shares in step 4.
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
    return quotas
