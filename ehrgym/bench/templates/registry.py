"""The one template registry: ``register`` adds a template, ``all_templates`` lists them.

Other packages add templates through the entry-point group ``ehrgym.templates``: an entry point
naming a module whose import calls :func:`register`, or a :class:`Template` object.
"""

from __future__ import annotations

import importlib
import sys

from ehrgym.bench.templates.base import Template
from ehrgym.errors import BenchmarkError
from ehrgym.registry import Registry

TEMPLATES: Registry[Template] = Registry("template", group="ehrgym.templates", error=BenchmarkError)

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
    "ehrgym.bench.templates.episodes",
    "ehrgym.bench.templates.comorbidity",
    "ehrgym.bench.templates.disposition",
)


# the module whose import registered each template (its intent module, or a harder multi-intent one)
ORIGINS: dict[str, str] = {}


def register(*templates: Template) -> None:
    """Register templates (called at import time of a template module)."""
    caller = sys._getframe(1).f_globals.get("__name__", "")
    for t in templates:
        TEMPLATES.add(t.id, t)
        ORIGINS.setdefault(t.id, caller)


def import_template_modules() -> None:
    """Import every built-in template module: they register their templates, and the curated names
    (lexicon) and unit conversions the noise injectors read."""
    for module in TEMPLATE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def _load() -> None:
    import_template_modules()
    TEMPLATES.load_plugins()


def template_module(template_id: str) -> str:
    """The module that registered a template (e.g. ``ehrgym.bench.templates.cohorts``)."""
    _load()
    TEMPLATES.get(template_id)
    return ORIGINS.get(template_id, "")


def all_templates() -> list[Template]:
    """Every registered template, sorted by id."""
    _load()
    entries = TEMPLATES.loaded()
    return [entries[k] for k in sorted(entries)]


def get_template(template_id: str) -> Template:
    _load()
    return TEMPLATES.get(template_id)
