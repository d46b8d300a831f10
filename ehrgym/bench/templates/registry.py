"""The one template registry: ``register`` adds a template, ``all_templates`` lists them."""

from __future__ import annotations

import importlib

from ehrgym.bench.templates.base import Template
from ehrgym.errors import BenchmarkError

_REGISTRY: dict[str, Template] = {}

# Modules whose import registers templates (one per intent, then the harder multi-intent
# ones). A module that does not exist yet
# is skipped, so intents can be added independently.
TEMPLATE_MODULES: tuple[str, ...] = (
    "ehrgym.bench.templates.encounters",
    "ehrgym.bench.templates.diagnoses",
    "ehrgym.bench.templates.labs",
    "ehrgym.bench.templates.medications",
    "ehrgym.bench.templates.vitals",
    "ehrgym.bench.templates.microbiology",
    # harder templates (tier 3 and cross-intent), each module spanning several intents
    "ehrgym.bench.templates.cohorts",
    "ehrgym.bench.templates.timing",
    "ehrgym.bench.templates.crossintent",
)


def register(*templates: Template) -> None:
    """Register templates (called at import time of a template module)."""
    for t in templates:
        if t.id in _REGISTRY and _REGISTRY[t.id] != t:
            raise BenchmarkError(f"template id {t.id!r} is registered twice")
        _REGISTRY[t.id] = t


def _load() -> None:
    for module in TEMPLATE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def all_templates() -> list[Template]:
    """Every registered template, sorted by id."""
    _load()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_template(template_id: str) -> Template:
    _load()
    try:
        return _REGISTRY[template_id]
    except KeyError:
        raise BenchmarkError(f"unknown template {template_id!r}; known: {sorted(_REGISTRY)}") from None
