"""Verifier: hand-computed cases for every answer type and every failure kind."""

from __future__ import annotations

import json

import pytest

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.task import Expected, NoiseSpec, Task
from ehrgym.env.actions import AnswerAction
from ehrgym.env.verifier import Verdict, verify
from ehrgym.vocab import FAILURES


def task(expected: Expected, variant: str = "clean") -> Task:
    noise = NoiseSpec("record", "missing_evidence") if variant == "noise" else None
    return Task("t1", "p1", variant, "labs", "patient", "tpl", "Question?", "SELECT 1", "SELECT 1",
                expected, noise, "test")


def answer_task(type_: str, value, **spec) -> Task:
    return task(Expected("answer", AnswerSpec(type_, **spec), value=value))


# (answer type, gold value, spec kwargs, given value, success?)
CASES = [
    ("number", 7.25, {}, "7.25", True),
    ("number", 7.25, {}, 7.2507, True),             # |diff|/7.25 = 9.7e-5 < 1e-3
    ("number", 7.25, {}, "7.26", False),            # 1.4e-3 > 1e-3
    ("number", 7.25, {}, "7.25 mg/dL", True),       # a unit is allowed (and ignored)
    ("number", 100.0, {"rel_tol": 0.05}, 104, True),
    ("number", 1234.5, {}, "1,234.5", True),
    ("number", 0.0, {"abs_tol": 0.01}, "0.005", True),
    ("integer", 3, {}, "3", True),
    ("integer", 3, {}, "3.0", True),
    ("integer", 3, {}, "4", False),
    ("string", "Emergency Room", {}, "  emergency   ROOM ", True),
    ("string", "Emergency Room", {}, "ER", False),
    ("set", ["Vancomycin", "Cefepime"], {}, "cefepime, vancomycin", True),
    ("set", ["Vancomycin", "Cefepime"], {}, ["Vancomycin"], False),
    ("set", [10001, 10002], {}, "10002; 10001", True),
    ("list", ["a", "b", "c"], {}, "a, b, c", True),
    ("list", ["a", "b", "c"], {}, "c, b, a", False),
    ("datetime", "2150-01-02 10:00:00", {}, "2150-01-02T10:00", True),
    ("datetime", "2150-01-02 10:00:00", {}, "2150-01-02 10:01:00", False),
    ("date", "2150-01-02", {}, "2150-01-02 23:59:00", True),
    ("date", "2150-01-02", {}, "2150-01-03", False),
    ("boolean", True, {}, "Yes", True),
    ("boolean", True, {}, "true.", True),
    ("boolean", False, {}, "no", True),
    ("boolean", False, {}, "yes", False),
]


@pytest.mark.parametrize("type_,gold,spec,given,ok", CASES)
def test_answer_types(type_, gold, spec, given, ok) -> None:
    verdict = verify(answer_task(type_, gold, **spec), AnswerAction(given))
    assert verdict.success_strict is ok and verdict.success_lenient is ok
    assert verdict.reward == (1.0 if ok else 0.0)
    assert verdict.failure == (None if ok else "wrong_value")


def test_every_answer_type_is_covered() -> None:
    from ehrgym.vocab import ANSWER_TYPES

    assert {c[0] for c in CASES} == set(ANSWER_TYPES)


@pytest.mark.parametrize("type_,gold,given", [("number", 7.25, "unknown"), ("datetime", "2150-01-02 10:00:00", "soon"),
                                              ("boolean", True, "maybe"), ("number", 1.0, None)])
def test_wrong_type(type_, gold, given) -> None:
    verdict = verify(answer_task(type_, gold), AnswerAction(given))
    assert verdict.failure == "wrong_type" and verdict.reward == 0.0
    assert not verdict.success_lenient


ABSTAIN = task(Expected("abstain", AnswerSpec("number"), reason="insufficient_evidence"), variant="noise")


def test_correct_abstention() -> None:
    v = verify(ABSTAIN, AnswerAction(abstain="insufficient_evidence", explanation="no rows"))
    assert (v.success_strict, v.success_lenient, v.reward, v.failure) == (True, True, 1.0, None)


def test_wrong_reason_strict_vs_lenient() -> None:
    action = AnswerAction(abstain="conflicting_evidence")
    strict = verify(ABSTAIN, action)
    lenient = verify(ABSTAIN, action, scoring="lenient")
    assert (strict.success_strict, strict.success_lenient, strict.reward, strict.failure) == \
        (False, True, 0.0, "wrong_reason")
    assert lenient.reward == 1.0 and lenient.failure == "wrong_reason"


@pytest.mark.parametrize("text,strict", [
    ("ABSTAIN: insufficient_evidence: the rows are gone, nothing conflicts", True),  # the explanation is not scanned
    ("ABSTAIN: no data: the lab was never drawn", True),
    ("ABSTAIN: insufficient evidence or conflicting records", False),
    ("ABSTAIN: conflicting_evidence/insufficient_evidence: one of the two", False),
    ('{"abstain": "missing data, conflict, implausible value, out of scope"}', False),
])
def test_an_abstention_naming_several_reasons_is_a_hedge(text, strict) -> None:
    from ehrgym.env.protocol import parse_answer

    v = verify(ABSTAIN, parse_answer(text))
    assert (v.success_strict, v.success_lenient) == (strict, True)
    assert v.failure == (None if strict else "wrong_reason")


def test_missed_and_false_abstention_and_no_answer() -> None:
    assert verify(ABSTAIN, AnswerAction(1.4)).failure == "missed_abstention"
    clean = answer_task("number", 1.4)
    v = verify(clean, AnswerAction(abstain="insufficient_evidence"))
    assert v.failure == "false_abstention" and not v.success_lenient
    for t in (clean, ABSTAIN):
        v = verify(t, None)
        assert v.failure == "no_answer" and v.reward == 0.0 and not v.success_lenient


def test_failures_are_from_the_record_vocabulary_and_round_trip() -> None:
    v = verify(ABSTAIN, AnswerAction(1.4))
    assert v.failure in FAILURES
    assert Verdict.from_dict(v.to_dict()) == v
    with pytest.raises(ValueError):
        Verdict(False, False, 0.0, "bogus", "")
    with pytest.raises(ValueError):
        verify(ABSTAIN, None, scoring="generous")


def noisy_abstain(subtype: str, reason: str, form: str | None = None) -> Task:
    from ehrgym.vocab import NOISE_SUBTYPES

    edit = {"kind": subtype, "form": form} if form else None
    return Task("t2", "p2", "noise", "labs", "patient", "tpl", "Question?", "SELECT 1", "SELECT 1",
                Expected("abstain", AnswerSpec("number"), reason=reason),
                NoiseSpec(NOISE_SUBTYPES[subtype], subtype, question_edit=edit), "test")


@pytest.mark.parametrize("subtype,expected,given,ok", [
    ("missing_evidence", "insufficient_evidence", "insufficient_evidence", True),
    ("missing_evidence", "insufficient_evidence", "false_premise", True),     # deleted rows = never happened
    ("missing_evidence", "insufficient_evidence", "invalid_reference", False),
    ("temporal_mismatch", "false_premise", "insufficient_evidence", True),
    ("temporal_mismatch", "false_premise", "out_of_scope", False),
    ("false_premise", "false_premise", "insufficient_evidence", True),
    ("nonexistent_entity", "invalid_reference", "false_premise", False),
    ("nonexistent_entity", "invalid_reference", "insufficient_evidence", False),
    ("out_of_scope", "out_of_scope", "insufficient_evidence", False),
    ("out_of_scope", "out_of_scope", "false_premise", False),  # "the patient-reported weight" presupposes nothing
    ("conflicting_records", "conflicting_evidence", "implausible_value", False),
    ("implausible_value", "implausible_value", "insufficient_evidence", False),
    ("missing_value", "insufficient_evidence", "false_premise", False),
    # an expected reason outside the subtype's group accepts only itself
    ("unit_mismatch", "implausible_value", "implausible_value", True),
    ("unit_mismatch", "implausible_value", "insufficient_evidence", False),
])
def test_reason_equivalence_under_strict_scoring(subtype, expected, given, ok) -> None:
    v = verify(noisy_abstain(subtype, expected), AnswerAction(abstain=given))
    assert v.success_strict is ok and v.success_lenient
    assert v.failure == (None if ok else "wrong_reason")


def test_accepted_reasons_are_one_table_over_every_subtype() -> None:
    from ehrgym.vocab import ABSTAIN_REASONS, ACCEPTED_REASONS, NOISE_SUBTYPES, accepted_reasons

    assert set(ACCEPTED_REASONS) == set(NOISE_SUBTYPES)
    for subtype, group in ACCEPTED_REASONS.items():
        assert group <= set(ABSTAIN_REASONS)
        for reason in group:
            assert accepted_reasons(subtype, reason) == group
    assert accepted_reasons(None, "out_of_scope") == {"out_of_scope"}  # a clean task: the expected reason


@pytest.mark.parametrize("form,given,ok", [
    ("beyond_the_course", "false_premise", True),  # the time beyond the admission is a window it does not cover
    ("beyond_the_course", "out_of_scope", True),
    ("beyond_the_course", "insufficient_evidence", False),
    (None, "false_premise", False),
    ("some_other_form", "false_premise", False),  # a form without an entry keeps the subtype's group
])
def test_a_question_form_widens_only_its_own_twins(form, given, ok) -> None:
    from ehrgym.vocab import ACCEPTED_BY_FORM

    task = noisy_abstain("out_of_scope", "out_of_scope", form)
    assert task.noise is not None and task.noise.form == form
    v = verify(task, AnswerAction(abstain=given))
    assert v.success_strict is ok and v.failure == (None if ok else "wrong_reason")
    again = Task.from_dict(json.loads(json.dumps(task.to_dict())))  # the form travels with the task file
    assert verify(again, AnswerAction(abstain=given)).success_strict is ok
    assert ("out_of_scope", "beyond_the_course") in ACCEPTED_BY_FORM
