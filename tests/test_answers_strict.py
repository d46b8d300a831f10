"""Strict answer parsing: the verifier is an RL reward, so no hedged or multi-valued answer may score.

Every case goes through :func:`ehrgym.env.verifier.verify` (what an agent is rewarded on). A
case marked ``True`` must score; ``False`` must not — neither by matching nor by accident.
"""

from __future__ import annotations

import pytest

from ehrgym.bench.answers import (MAX_SCALAR_CHARS, AnswerSpec, NotComparable, format_answer, normalise,
                                  parse_boolean, parse_number)
from ehrgym.bench.task import Expected, Task
from ehrgym.env.actions import AnswerAction
from ehrgym.env.verifier import verify


def answer_task(type_: str, gold) -> Task:
    return Task("t", "p", "clean", "labs", "patient", "tpl", "Q?", "SELECT 1", "SELECT 1",
                Expected("answer", AnswerSpec(type_), value=gold), None, "test")


def scored(type_: str, gold, given) -> bool:
    verdict = verify(answer_task(type_, gold), AnswerAction(given))
    assert verdict.success_strict == verdict.success_lenient == (verdict.reward == 1.0)
    return verdict.success_strict


NUMBER_CASES = [  # gold 2 (and 3 where the adversary hopes the first number counts)
    ("2", True), ("2.0", True), ("2 mg", True), ("2mg", True), ("2 patients", True), ("2.", True),
    ("The count is 2", True), ("**2**", True), ('"2"', True), ("2e0", True), ("+2", True), ("2 (n)", True),
    ("two-ish, maybe 2 or 3", False), ("2 or 3", False), ("3 or 2", False), ("not 3 but 2", False),
    ("2-3", False), ("2 – 3", False), ("2 to 3", False), ("between 2 and 3", False), ("2, 3", False),
    ("2; 3", False), ("[2, 3]", False), ("2,3", False), ("maybe 2", False), ("probably 2", False),
    ("approximately 2", False), ("about 2", False), ("around 2", False), ("~2", False), ("≈2", False),
    ("2?", False), ("2±1", False), ("2 +/- 1", False), (">2", False), ("<= 2", False), ("at least 2", False),
    ("2 or more", False), ("2+", False), ("more than 1", False), ("not 2", False), ("2ish", False),
    ("2 (two)", False), ("2 (three)", False), ("two", False), ("2 on 2150-01-02", False),
    ("2 in 2150", False), ("patient 10001: 2", False), ("2 x 10^0", False), ("I think 2", False),
    ("2 " + "padding " * 40, False), ("x" * MAX_SCALAR_CHARS + " 2", False), ("", False), ("none", False),
]


@pytest.mark.parametrize("given,ok", NUMBER_CASES)
def test_number_answers(given: str, ok: bool) -> None:
    assert scored("integer", 2, given) is ok
    assert scored("number", 2.0, given) is ok


@pytest.mark.parametrize("given,gold,ok", [
    ("-2", -2.0, True), ("−2", -2.0, True), ("- 2", -2.0, False), ("- 2", 2.0, False), ("2", -2.0, False), ("-2", 2.0, False),
    ("1.2e3", 1200.0, True), ("1.2E+3", 1200.0, True), ("1.2 x 10^3", 1200.0, False), ("1,234.5", 1234.5, True),
    ("1,234", 1234.0, True), ("1,5", 1.5, False), ("7.2 x10^9/L", 7.2, True), ("140 mEq/L", 140.0, True),
    ("37.5 °C", 37.5, True), ("12%", 12.0, True), ("0.005", 0.005, True), (".5", 0.5, True),
])
def test_signs_notation_separators_and_units(given: str, gold: float, ok: bool) -> None:
    assert scored("number", gold, given) is ok


@pytest.mark.parametrize("given,gold,ok", [
    ("yes", True, True), ("Yes.", True, True), ("true", True, True), ("Yes, the patient was married", True, True),
    ("no", False, True), ("No, not married", False, True), ("none", False, True),
    ("yes and no", True, False), ("yes and no", False, False), ("Yes, not married", True, False),
    ("yes, probably", True, False), ("probably yes", True, False), ("maybe", True, False), ("yes?", True, False),
    ("no, but present", False, False), ("no or yes", False, False), ("yes/no", True, False),
    ("yes " + "indeed " * 40, True, False), ("Yes, it isn't", True, False), ("either", True, False),
    ("y", True, True), ("1", True, True), ("n", False, True), ("0", False, True), ("n/a", False, False),
    ("N/A", False, False), ("0, 1", False, False), ("1 dose", True, False),
])
def test_yes_no_answers(given: str, gold: bool, ok: bool) -> None:
    assert scored("boolean", gold, given) is ok


@pytest.mark.parametrize("type_,gold,given,ok", [
    ("date", "2150-01-02", "2150-01-02", True), ("date", "2150-01-02", "2150-01-02 or 2150-01-03", False),
    ("date", "2150-01-02", "about 2150-01-02", False), ("datetime", "2150-01-02 10:00:00", "2150-01-02 10:00", True),
    ("datetime", "2150-01-02 10:00:00", "2150-01-02 10:00 maybe", False),
    ("string", "Emergency Room", "emergency room", True), ("string", "Emergency Room", "maybe Emergency Room", False),
    ("string", "Emergency Room", "Emergency Room or ICU", False),
    ("set", ["Cefepime", "Vancomycin"], "vancomycin, cefepime", True),
    ("set", ["Cefepime", "Vancomycin"], "vancomycin, cefepime, aspirin", False),  # an extra
    ("set", ["Cefepime", "Vancomycin"], "vancomycin, maybe cefepime", False),
    ("set", ["Cefepime", "Vancomycin"], "vancomycin", False),
    ("set", [1, 2], "1, 2, 3", False), ("set", [1, 2], ["1", "2"], True),
    ("list", ["a", "b"], "a, b, c", False), ("list", ["a", "b"], "a, b", True),
])
def test_dates_text_sets_and_lists(type_: str, gold, given, ok: bool) -> None:
    assert scored(type_, gold, given) is ok


def test_rejections_say_why_and_typed_values_still_read() -> None:
    with pytest.raises(NotComparable, match="candidate numbers"):
        parse_number("3, 2")
    with pytest.raises(NotComparable, match="hedged"):
        parse_number("maybe 2")
    with pytest.raises(NotComparable, match="both yes and no"):
        parse_boolean("yes and no")
    assert parse_number(2) == 2.0 and parse_number(-0.5) == -0.5 and parse_boolean(False) is False
    # whatever the kit writes as an answer reads back as itself (scripted agents, the oracle)
    for spec, value in [(AnswerSpec("number", decimals=2), 1.4), (AnswerSpec("number"), -3.25),
                        (AnswerSpec("integer"), 12345), (AnswerSpec("boolean"), True), (AnswerSpec("boolean"), False),
                        (AnswerSpec("datetime"), "2150-01-02 10:00:00"), (AnswerSpec("set"), ["a", "b"])]:
        assert normalise(format_answer(value, spec), spec) == normalise(value, spec)


def through_the_protocol(task: Task, text: str) -> bool:
    """Whether ``text``, written as an LLM agent writes its final answer, scores on ``task``."""
    from ehrgym.env.protocol import parse_answer

    return verify(task, parse_answer(text)).success_strict


@pytest.mark.parametrize("type_,gold,written", [
    ("string", "ENTEROCOCCUS SP.", "ANSWER: ENTEROCOCCUS SP."),  # the protocol drops a sentence's final period
    ("string", "ENTEROCOCCUS SP.", "ANSWER: enterococcus sp"),
    ("set", ["ENTEROCOCCUS SP.", "YEAST"], "ANSWER: YEAST, ENTEROCOCCUS SP."),
    ("list", ["YEAST", "ENTEROCOCCUS SP."], "ANSWER: YEAST, ENTEROCOCCUS SP."),
])
def test_a_database_string_ending_in_a_period_is_answerable_in_text(type_: str, gold, written: str) -> None:
    task = answer_task(type_, gold)
    assert through_the_protocol(task, written)
    assert not through_the_protocol(task, written.replace("YEAST", "CANDIDA") if "YEAST" in written
                                    else written + " OR YEAST")


def _hedges(text: str, spec: AnswerSpec) -> list[str]:
    """The right answer hedged, bounded or offered with another candidate."""
    other = {"boolean": "no" if text == "yes" else "yes", "datetime": "2150-01-01 00:00:00",
             "date": "2150-01-01"}.get(spec.type, "7" if spec.type in ("number", "integer") else "something else")
    forms = [f"{text} or {other}", f"{other} or {text}", f"maybe {text}"]
    if spec.type in ("number", "integer", "datetime", "date"):
        forms += [f"about {text}", f"{text}?", f"at least {text}"]
    if spec.type in ("set", "list"):
        forms += [f"{text}, maybe others"]
    return forms


def test_every_gold_of_a_build_scores_as_written_and_never_when_hedged(small_build) -> None:
    """On every task of a real build that expects an answer: the gold value written as the protocol asks (text and
    JSON) scores, and hedged forms of it do not — the answer types, values and spellings the templates really
    produce, not only the hand-written cases above."""
    import json

    answers = [t for t in small_build.tasks if not t.expected.is_abstain]
    assert len(answers) > 100
    failed, leaked = [], []
    for task in answers:
        text = format_answer(task.expected.value, task.expected.answer)
        for written in (f"ANSWER: {text}", json.dumps({"answer": text})):
            if not through_the_protocol(task, written):
                failed.append((task.template_id, written))
        for hedge in _hedges(text, task.expected.answer):
            if through_the_protocol(task, f"ANSWER: {hedge}"):
                leaked.append((task.template_id, hedge))
    assert not failed, failed[:5]
    assert not leaked, leaked[:5]
