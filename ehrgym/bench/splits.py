"""Splits: train/dev/test by patient, ``ood`` by held-out templates.

* ``ood``: for every intent with at least two templates in the build, the
  ``ood_templates_per_intent`` templates with the smallest ``sha256(seed:template_id)`` are held
  out whole (all their pairs, any patient).
* every other pair goes to train/dev/test by a seeded hash of its patient (``subject_id``) for
  patient-level templates — so no patient is in two of train/dev/test — and by a hash of the
  template instance (template id + entity) for population-level templates.

Both tasks of a pair share the pair's split.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any, Iterable


def unit_hash(*parts: Any) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return int(digest[:13], 16) / float(1 << 52)


def ood_templates(template_intents: dict[str, str], seed: int, per_intent: int) -> set[str]:
    by_intent: dict[str, list[str]] = defaultdict(list)
    for tid, intent in template_intents.items():
        by_intent[intent].append(tid)
    held: set[str] = set()
    for tids in by_intent.values():
        if len(tids) < 2 or per_intent <= 0:
            continue
        ranked = sorted(tids, key=lambda tid: hashlib.sha256(f"{seed}:{tid}".encode()).hexdigest())
        held.update(ranked[:min(per_intent, len(tids) - 1)])
    return held


def split_of(level: str, subject_id: int | None, template_id: str, entity: dict[str, Any], seed: int,
             fractions: tuple[float, float, float]) -> str:
    if level == "patient" and subject_id is not None:
        u = unit_hash("patient", seed, int(subject_id))
    else:
        u = unit_hash("instance", seed, template_id, entity)
    train, dev, _ = fractions
    if u < train:
        return "train"
    if u < train + dev:
        return "dev"
    return "test"


def assign_splits(pairs: Iterable[tuple[str, str, str, str, int | None, dict[str, Any]]], seed: int,
                  fractions: tuple[float, float, float], ood_per_intent: int) -> tuple[dict[str, str], list[str]]:
    """``pairs``: (pair_id, template_id, intent, level, subject_id, entity) → ({pair_id: split}, ood templates)."""
    pairs = list(pairs)
    held = ood_templates({tid: intent for _, tid, intent, _, _, _ in pairs}, seed, ood_per_intent)
    out = {}
    for pair_id, tid, _, level, subject, entity in pairs:
        out[pair_id] = "ood" if tid in held else split_of(level, subject, tid, entity, seed, fractions)
    return out, sorted(held)
