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
from typing import Any, Callable, Iterable

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


# the built-in sections by the time they take at the paper config, longest first: the order in which section
# processes claim them. Measured on 2 cores, two processes (1k patients / 10k): anomaly profiles 55 / 97 s,
# artifacts 42 / 136, text probes 27 / 31, literal baseline 14 / 26, the rest ~2-4. Anomaly first: at 1k the other
# process then runs artifacts and text (the card ~70 s from those times, against 85 measured with artifacts, text
# and anomaly claimed in that order); at 10k both orders come to ~155 s.
SECTION_ORDER = ("evidence_anomaly", "artifact_classifier", "text_classifier", "literal_baseline", "database_state",
                 "answer_prior", "trap_margins")


def section_names(wanted: Iterable[str] | None = None) -> list[str]:
    """The registered sections named in ``wanted`` (None: all of them), sorted; an unknown name is an error that
    lists the known ones."""
    from ehrgym.bench import validity_sections  # noqa: F401  (registers the sections)

    known = sorted(SECTIONS)
    if wanted is None:
        return known
    wanted = sorted(set(wanted))
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise BenchmarkError(f"unknown validity section(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return wanted


def validity_report(ctx: ValidityContext, seconds: dict[str, float] | None = None,
                    sections: Iterable[str] | None = None) -> dict[str, Any]:
    """Each registered section's result by name (``sections``: only those; None: all); ``seconds`` (when given)
    receives each section's wall time, which the build reports beside its other timings (never in the card: the
    card is the same on every run)."""
    names = section_names(sections)
    if ctx.workers <= 1 or len(names) < 2:
        timed = _timed_sections(ctx, names, lambda i: True)
    else:
        timed = _sections_in_workers(ctx, names)
    if seconds is not None:
        seconds.update({name: round(timed[name][1], 3) for name in names})
    return {name: timed[name][0] for name in names}


def _timed_sections(ctx: ValidityContext, order: list[str], mine: Callable[[int], bool]
                    ) -> dict[str, tuple[Any, float]]:
    import time

    out: dict[str, tuple[Any, float]] = {}
    for i, name in enumerate(order):
        if mine(i):
            start = time.perf_counter()
            out[name] = (SECTIONS[name](ctx), time.perf_counter() - start)
    return out


def _sections_in_workers(ctx: ValidityContext, names: list[str]) -> dict[str, tuple[Any, float]]:
    """The sections in ``ctx.workers`` processes, each taking the longest one nobody holds, one process per section
    (a section's numbers do not depend on its workers): several sections each split over the processes in turn
    left them waiting on each other's slowest part and on the sequential parts in between."""
    import tempfile
    from dataclasses import replace

    from ehrgym.bench.builder import run_worker_processes

    order = sorted(names, key=lambda n: (SECTION_ORDER.index(n) if n in SECTION_ORDER else len(SECTION_ORDER), n))
    alone = replace(ctx, workers=1)
    with tempfile.TemporaryDirectory(prefix="ehrgym-sections-") as claims:
        parts = run_worker_processes([{"call": run_claimed_sections, "args": (order, alone, claims)}] * ctx.workers)
    done: dict[str, tuple[Any, float]] = {}
    for part in parts:
        done.update(part)
    return {name: done[name] for name in names}


def run_claimed_sections(order: list[str], ctx: ValidityContext, claims: str) -> dict[str, tuple[Any, float]]:
    """The sections of ``order`` this process claims first, each with its wall time (a worker process's job; see
    ``validity_report``)."""
    from ehrgym.bench import validity_sections  # noqa: F401  (registers the sections)
    from ehrgym.bench.builder import _claim

    return _timed_sections(ctx, order, lambda i: _claim(claims, i))


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
