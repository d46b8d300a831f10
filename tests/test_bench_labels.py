"""Every expected outcome must be what a careful clinician-analyst would say (record/value noise)."""

from __future__ import annotations

import pytest

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.bounds import compute_bounds, plausible_range
from ehrgym.bench.noise.cleaning import bounds_for
from ehrgym.bench.templates import all_templates
from ehrgym.bench.verify import TRAP_MARGINS, moves_enough
from ehrgym.resources import resource_path
from ehrgym.vocab import ABSTAIN_REASONS

TEMPLATES = {t.id: t for t in all_templates()}


def test_each_injector_carries_its_label():
    for subtype, inj in INJECTORS.items():
        for t in TEMPLATES.values():
            if subtype in t.noise and inj.applies(t):
                kind, reason = inj.expected(t)
                assert kind in ("answer", "abstain"), subtype
                assert (reason in ABSTAIN_REASONS) if kind == "abstain" else reason is None, subtype
        if inj.empty_is_trap:
            assert inj.outcome == "abstain" and inj.reason, subtype


def test_plausibility_bounds_include_the_real_tails_and_name_their_source():
    propofol = plausible_range(222168)
    assert propofol is not None and propofol.upper > 313 * 3 and propofol.upper_source == "demo p99.9"
    for itemid in (220045, 50912, 222168, 221906):
        got = plausible_range(itemid)
        assert got.lower_source in ("physiology", "demo p0.1") and got.upper_source in ("physiology", "demo p99.9")
    # the cleaner and the injector read the same bounds
    drip = next(t for t in TEMPLATES.values() if t.evidence.table == "inputevents" and t.evidence.item_param)
    assert bounds_for(drip.evidence, {drip.evidence.item_param: 222168}) == (propofol.lower, propofol.upper)


def test_plausibility_bounds_file_is_what_the_demo_gives(demo_dir):
    assert compute_bounds(demo_dir) == resource_path("plausibility_bounds.csv").read_text()


def test_conflicts_only_where_a_contradiction_can_change_the_answer():
    conflict = INJECTORS["conflicting_records"]
    for t in TEMPLATES.values():
        if "conflicting_records" not in t.noise:
            continue
        problem = conflict.label_problem(t)
        if t.evidence.table in ("prescriptions", "emar", "inputevents", "pharmacy"):
            assert problem, f"{t.id}: several orders at one time are co-ordering, not a conflict"
        if t.answer.type in ("integer", "boolean"):
            assert problem, f"{t.id}: a count does not depend on which record is right"


def test_no_value_noise_where_other_columns_give_the_answer():
    icu_los = [t for t in TEMPLATES.values() if t.evidence.table == "icustays" and t.evidence.value_col == "los"]
    assert icu_los
    for t in icu_los:
        for sub in ("implausible_value", "missing_value", "conflicting_records"):
            assert not INJECTORS[sub].applies(t), (t.id, sub)


def test_temporal_mismatch_only_where_none_is_not_an_answer():
    tm = INJECTORS["temporal_mismatch"]
    counts = [t for t in TEMPLATES.values() if "temporal_mismatch" in t.noise and t.answer.type == "integer"]
    assert counts, "no count template lists temporal_mismatch: the rule is untested"
    assert not any(tm.applies(t) for t in counts)


@pytest.mark.parametrize("gold,trap,kind,moves", [
    (100.0, 101.5, "number", False),  # within 2 %: not a trap
    (100.0, 104.0, "number", False),  # 4 %: below the 5 % margin
    (100.0, 106.0, "number", True),
    (0.0, 0.2, "number", True),
    (10, 11, "integer", True),
    (100, 102, "integer", False),  # 2 of 100 events
    (100, 105, "integer", True),
    ("2150-01-01 10:00:00", "2150-01-01 10:30:00", "datetime", False),
    ("2150-01-01 10:00:00", "2150-01-01 12:00:00", "datetime", True),
    ("A", "B", "string", True),
    ("A", "A", "string", False),
])
def test_trap_margins(gold, trap, kind, moves):
    assert moves_enough(gold, trap, AnswerSpec(kind)) is moves
    assert set(TRAP_MARGINS) <= {"number", "integer", "datetime", "date"}
