"""The validity report of a built benchmark: checks that a shortcut (how noise is stored, the
question text) does not reveal the variant or the expected outcome, as a small registry of
sections, one function each.

Each section takes a :class:`ValidityContext` and returns a JSON-ready dict; the card records
them under ``card["validity"][name]`` and ``card.md`` prints them. To add a section (text
classifiers, complexity by tier, baseline scores …) write one function and decorate it with
``@validity_section("name")`` in any module imported by :mod:`ehrgym.bench.validity_sections`
— no other file changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ehrgym.bench.task import Task
from ehrgym.errors import BenchmarkError
from ehrgym.registry import Registry


@dataclass(frozen=True)
class ValidityContext:
    tasks: list[Task]
    db: Path | None = None  # the database the benchmark was built on (None: sections needing it skip)
    seed: int = 0
    workers: int = 1  # processes a section may use (the build's workers; results do not depend on it)


Section = Callable[[ValidityContext], dict[str, Any]]
# other packages add sections through the entry-point group "ehrgym.validity_sections"
SECTIONS: Registry[Section] = Registry("validity section", error=BenchmarkError)


def validity_section(name: str) -> Callable[[Section], Section]:
    def register(fn: Section) -> Section:
        SECTIONS.add(name, fn)
        return fn
    return register


def validity_report(ctx: ValidityContext) -> dict[str, Any]:
    from ehrgym.bench import validity_sections  # noqa: F401  (registers the sections)

    return {name: SECTIONS[name](ctx) for name in sorted(SECTIONS)}


def validity_markdown(report: dict[str, Any]) -> list[str]:
    lines = ["", "## Validity", ""]
    for name, section in report.items():
        lines += [f"### {name}", ""]
        render = section.get("markdown") if isinstance(section, dict) else None
        if isinstance(render, list):
            lines += [str(x) for x in render]
        else:
            lines += ["```json", json.dumps(section, indent=1, sort_keys=True), "```"]
        lines.append("")
    return lines
