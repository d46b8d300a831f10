"""Shared machinery of the independent gold checks (``tests/test_gold_*.py`` and the template test modules).

A check module lists its templates (``NEW``) and a ``PANDAS`` dict of independent computations
``(frames, params) -> answer``; the module-scoped fixtures ``gold_builder``, ``gold_frames`` and ``gold_demo``
(``tests/conftest.py``) draw the module's candidates on the synthetic hospital and the MIMIC-IV demo, and
:func:`assert_gold_on_synth` / :func:`assert_gold_on_demo` compare the gold answers with the computations.
"""

from __future__ import annotations

from typing import Any, Callable

import duckdb
import pandas as pd

from ehrgym.bench.answers import answers_match
from ehrgym.bench.builder import Builder
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.templates import Template

SYNTH_CANDIDATES = 40  # drawn per template on the synthetic hospital
SYNTH_CHECKED = 25  # compared per template there
DEMO_CANDIDATES = 12  # drawn and compared per template on the demo


class Frames:
    """The tables the checks read, as pandas frames (lazily)."""

    ICU = ("icustays", "chartevents", "inputevents", "outputevents", "procedureevents", "datetimeevents",
           "ingredientevents", "d_items", "caregiver")

    def __init__(self, db) -> None:
        self.con = duckdb.connect(str(db), read_only=True)
        self._cache: dict[str, pd.DataFrame] = {}

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_") or name == "con":
            raise AttributeError(name)
        if name not in self._cache:
            schema = "mimiciv_icu" if name in self.ICU else "mimiciv_hosp"
            self._cache[name] = self.con.execute(f"SELECT * FROM {schema}.{name}").df()
        return self._cache[name]


def check_against(builder: Builder, frames: Frames, template: Template, n: int,
                  compute: Callable[[Frames, dict], Any]) -> list[Any]:
    """The gold answer of the first ``n`` candidates equals ``compute`` (an independent pandas computation)."""
    seen = []
    for c in builder.candidates[template.id][:n]:
        clean = builder._clean(template, c)
        assert clean is not None, f"{template.id}: no clean answer for {c.params}"
        expected = compute(frames, c.params)
        assert expected is not None and answers_match(clean[0], expected, template.answer), \
            f"{template.id} {c.params}: SQL {clean[0]!r} vs pandas {expected!r}"
        seen.append(expected)
    return seen


def drawn_builder(db, templates: list[Template], candidates: int) -> Builder:
    """A builder over ``db`` that has drawn ``candidates`` of each template (seed 5)."""
    b = Builder(db, BuildConfig("t", 10, min_candidates=candidates), seed=5, progress=False, templates=templates)
    for t in templates:
        b._draw(t, candidates)
    return b


def assert_gold_on_synth(builder: Builder, frames: Frames, template: Template,
                         compute: Callable[[Frames, dict], Any]) -> list[Any]:
    """The first candidates' gold answers equal ``compute``: most of them checked (all of a population template
    with few candidates), and not all the same answer (a yes/no question gets both)."""
    drawn = builder.candidates[template.id]
    seen = check_against(builder, frames, template, SYNTH_CHECKED, compute)
    assert seen and len(seen) >= min(15, len(drawn)), (template.id, len(seen), len(drawn))
    assert len({str(v) for v in seen}) >= 2, (template.id, seen)
    return seen


def assert_gold_on_demo(demo: tuple[Builder, Frames], template: Template,
                        compute: Callable[[Frames, dict], Any]) -> list[Any]:
    """The template has candidates on the demo, and their gold answers equal ``compute``."""
    builder, frames = demo
    assert builder.candidates[template.id], f"{template.id}: no candidate on the demo"
    return check_against(builder, frames, template, DEMO_CANDIDATES, compute)


def gold_value(builder: Builder, template: Template, params: dict, sql: str | None = None) -> Any:
    """The answer ``sql`` (default: the template's gold SQL) gives for ``params`` on the builder's clean database."""
    from ehrgym.bench.noise.cleaning import plain_relation
    from ehrgym.bench.sqlrender import render_sql

    return builder.verifier.value(render_sql(sql or template.gold_sql, params, plain_relation(template)),
                                  template.answer)


def disagreements(builder: Builder, frames: Frames, template: Template, sql: str,
                  compute: Callable[[Frames, dict], Any], n: int) -> int:
    """Of the first ``n`` candidates, how many a changed gold SQL (``sql``, a wrong definition) answers otherwise
    than ``compute``: at least one shows that the independent check tells the definitions apart."""
    answers = ((gold_value(builder, template, c.params, sql), compute(frames, c.params))
               for c in builder.candidates[template.id][:n])
    return sum(got is None or not answers_match(got, expected, template.answer) for got, expected in answers)
