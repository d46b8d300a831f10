"""Every template's gold SQL is checked against an independent computation.

The checks live with their templates' tests (the ``PANDAS`` dicts of the modules below: pandas functions written
from the question's words over the raw tables, run on the synthetic hospital and on the MIMIC-IV demo where its
tables hold data; ``tests/test_bench_gold_demo.py`` checks its templates on the demo only). A template added
without one fails here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ehrgym.bench.templates import all_templates

CHECK_MODULES = ("test_bench_templates_hard", "test_bench_templates_episodes", "test_bench_templates_disposition",
                 *sorted(p.stem for p in Path(__file__).parent.glob("test_gold_*.py") if p.stem != Path(__file__).stem))


def checked_templates() -> dict[str, str]:
    """Template id -> the test module holding its independent check."""
    out: dict[str, str] = {}
    for name in CHECK_MODULES:
        module = importlib.import_module(f"tests.{name}")
        for tid in module.PANDAS:
            assert tid not in out, f"{tid} is checked in both {out[tid]} and {name}"
            out[tid] = name
    demo_only = importlib.import_module("tests.test_bench_gold_demo")
    for tid in demo_only.IDS:
        out.setdefault(tid, "test_bench_gold_demo")
    return out


def test_every_template_has_an_independent_gold_check():
    checked = checked_templates()
    missing = sorted({t.id for t in all_templates()} - set(checked))
    assert not missing, f"templates with no independent check of their gold SQL: {missing}"
    assert not set(checked) - {t.id for t in all_templates()}, "a check names a template that does not exist"


def test_the_check_modules_are_the_ones_written_for_it():
    assert {"test_gold_labs", "test_gold_vitals", "test_gold_medications", "test_gold_diagnoses",
            "test_gold_encounters_microbiology"} <= set(CHECK_MODULES)
