"""Build configurations and the quota plan that distributes pairs.

Distribution (both configs; ``paper`` targets exactly 5,486 pairs, ``small`` 300):

1. pairs are split evenly over the (intent, level) cells that have at least one usable template
   (largest remainder, cells in sorted order: encounters, diagnoses, labs, medications, vitals,
   microbiology × patient, population — intents whose tables are empty drop out);
2. inside a cell, evenly over the noise levels (record, value, query) that some template of
   the cell supports — about one third each;
3. inside a (cell, noise level), evenly over the subtypes that some template of the cell
   supports (record: 4 subtypes, value: 4, query: 5);
4. inside a (cell, subtype), evenly over the templates that support it.

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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["split_fractions"] = list(self.split_fractions)
        out.pop("workers")  # how the build ran, not what it built: files are identical for any value
        return out


CONFIGS: dict[str, BuildConfig] = {
    "small": BuildConfig("small", 300, oversample=4.0, min_candidates=24),
    "paper": BuildConfig("paper", 5486, workers=2),
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


def plan_quotas(total: int, applicable: dict[tuple[str, str, str], list[str]],
                noise_level: dict[str, str]) -> dict[tuple[str, str], int]:
    """Slot quotas ``{(template_id, subtype): pairs}``.

    ``applicable`` maps ``(intent, level, template_id)`` to the subtypes the template supports.
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
                for tid, q in even_split(sub_q, tids).items():
                    if q:
                        quotas[(tid, sub)] = q
    return quotas
