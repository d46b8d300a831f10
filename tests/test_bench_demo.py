"""Building on real data: the MIMIC-IV demo (skipped when the demo is absent)."""

from __future__ import annotations

import pytest

from ehrgym.bench.build import build_benchmark
from ehrgym.bench.builder import BenchmarkBuildWarning
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.templates import all_templates

pytestmark = [pytest.mark.demo, pytest.mark.slow]


def test_demo_build_excludes_natural_noise_and_skips_empty_tables(demo_db, tmp_path):
    templates = [t for t in all_templates() if t.intent in ("labs", "vitals", "encounters")]
    with pytest.warns(BenchmarkBuildWarning, match="vitals.max_value_stay"):
        result = build_benchmark(demo_db, tmp_path / "demo", config=BuildConfig("demo", 60, min_candidates=30),
                                 seed=1, progress=False, templates=templates)
    report = result.report
    assert report["kept_pairs"] == 60
    # real data carries its own noise: some drawn candidates must have been excluded for it
    assert sum(report["candidates_ineligible"].values()) > 0
    assert set(report["candidates_ineligible"]) <= {
        "no_evidence", "natural_duplicates_or_conflicts", "natural_missing_values", "natural_implausible_values",
        "natural_mixed_units", "natural_out_of_window"}
    # the demo copy has no chartevents: those vitals templates are skipped with a warning
    skipped = [w for w in report["warnings"] if "skipped" in w]
    assert any("vitals.max_value_stay" in w for w in skipped)
    # ... and the card says so, not only the build report
    assert any("vitals.max_value_stay" in w for w in result.card["limitations"])
    assert "## Limitations of this build" in (result.out / "card.md").read_text()
    assert {t.intent for t in result.tasks} == {"labs", "vitals", "encounters"}  # outputevents keeps vitals alive
    assert result.manifest["db_source"] == "mimic-iv-demo"
