"""Answer protocol parsing: structured and free text, reasons, synonyms, tool calls; tool schemas."""

from __future__ import annotations

import json

import pytest

from ehrgym.env.actions import AnswerAction, PythonAction, SqlAction
from ehrgym.env.protocol import ActionParseError, normalise_reason, parse_action, parse_answer, protocol_text
from ehrgym.env.tools import GYM_TOOLS, TOOLS, tool_descriptions, tool_schemas
from ehrgym.env.trajectory import Trajectory, TrajectoryStep
from ehrgym.errors import TaskFormatError
from ehrgym.vocab import ABSTAIN_REASONS


@pytest.mark.parametrize("text,reason", [
    ("insufficient_evidence", "insufficient_evidence"),
    ("Insufficient Evidence", "insufficient_evidence"),
    ("**insufficient-evidence**", "insufficient_evidence"),
    ("not enough data", "insufficient_evidence"),
    ("Contradictory records.", "conflicting_evidence"),
    ("CONFLICTING_EVIDENCE", "conflicting_evidence"),
    ("physiologically impossible", "implausible_value"),
    ("the patient does not exist", "invalid_reference"),
    ("Nonexistent admission", "invalid_reference"),
    ("false premise", "false_premise"),
    ("temporal mismatch", "false_premise"),
    ("Out of scope", "out_of_scope"),
    ("`out_of_scope`", "out_of_scope"),
    ("invalid value", "implausible_value"),  # the longest phrase wins: not an invalid reference
    ("no such patient", "invalid_reference"),
    # a hedge across reasons names none of them (taking the first named would reward listing them all)
    ("conflicting records or missing evidence", None),
    ("insufficient_evidence / conflicting_evidence", None),
    ("not missing evidence; the records conflict", None),
    ("out_of_scope, false_premise, implausible_value", None),
    ("banana", None),
    (None, None),
])
def test_normalise_reason(text, reason) -> None:
    assert normalise_reason(text) == reason


@pytest.mark.parametrize("text,expected", [
    ("ANSWER: 7.2", AnswerAction("7.2")),
    ("answer: 7.2 mg/dL", AnswerAction("7.2 mg/dL")),
    ("**ANSWER:** yes.", AnswerAction("yes")),
    ("Let me think.\n\nFinal Answer: 2150-03-04 10:00:00", AnswerAction("2150-03-04 10:00:00")),
    ("ANSWER: \"Emergency Room\"", AnswerAction("Emergency Room")),
    ("ANSWER:\n- Vancomycin\n- Cefepime\n\nDone.", AnswerAction("Vancomycin; Cefepime")),
    ('ANSWER: ["a", "b"]', AnswerAction(["a", "b"])),
    ("ABSTAIN: insufficient_evidence: no creatinine was measured",
     AnswerAction(None, "insufficient_evidence", "no creatinine was measured")),
    ("abstain: Conflicting evidence - two values at 10:00", AnswerAction(None, "conflicting_evidence", "two values at 10:00")),
    ("ABSTAIN: the patient does not exist", AnswerAction(None, "invalid_reference", "")),
    ('{"answer": 3}', AnswerAction(3)),
    ('```json\n{"abstain": "out of scope", "explanation": "no genome data"}\n```',
     AnswerAction(None, "out_of_scope", "no genome data")),
])
def test_parse_answers(text, expected) -> None:
    assert parse_action(text) == expected
    assert parse_answer(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("SQL: SELECT 1", SqlAction("SELECT 1")),
    ("```sql\nSELECT *\nFROM patients\n```", SqlAction("SELECT *\nFROM patients")),
    ("select count(*) from patients", SqlAction("select count(*) from patients")),
    ('{"tool": "sql", "query": "SELECT 2"}', SqlAction("SELECT 2")),
    ('{"name": "sql", "arguments": "{\\"query\\": \\"SELECT 3\\"}"}', SqlAction("SELECT 3")),
    ("PYTHON: print(1)", PythonAction("print(1)")),
    ("```python\nx = 1\nprint(x)\n```", PythonAction("x = 1\nprint(x)")),
    ('{"tool": "python", "code": "print(2)"}', PythonAction("print(2)")),
    ("I will look first.\nSQL: SELECT 1\nThen ANSWER: 5", AnswerAction("5")),  # the last directive wins
])
def test_parse_tool_calls(text, expected) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "hello there", '{"foo": 1}'])
def test_unreadable_text_says_what_to_do(text) -> None:
    with pytest.raises(ActionParseError, match="ANSWER:"):
        parse_action(text)
    assert parse_answer(text) is None


def test_unknown_reason_is_kept_for_the_verifier() -> None:
    action = parse_action("ABSTAIN: gut feeling")
    assert action.is_abstain and action.abstain not in ABSTAIN_REASONS


def test_protocol_text_lists_every_reason() -> None:
    text = protocol_text()
    for reason in ABSTAIN_REASONS:
        assert reason in text
    assert "ANSWER:" in text and "ABSTAIN:" in text


def test_tool_schemas_follow_the_action_dataclasses() -> None:
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == ["sql", "python", "answer"]
    sql = schemas[0]["function"]
    assert sql["parameters"]["required"] == ["query"]
    assert sql["parameters"]["properties"]["query"]["type"] == "string"
    assert sql["description"] == SqlAction.__doc__.strip()
    answer = schemas[2]["function"]["parameters"]["properties"]
    assert set(answer) == {"value", "abstain", "explanation"}
    assert answer["abstain"]["enum"] == list(ABSTAIN_REASONS)
    json.dumps(schemas)  # JSON-serialisable
    assert tool_schemas(("sql", "answer"))[1]["function"]["name"] == "answer"
    assert "python(code)" in tool_descriptions() and set(GYM_TOOLS) == {"sql", "python", "answer"} <= set(TOOLS)


def test_sql_tool_text_follows_the_episode_schemas() -> None:
    """MIMIC-IV's schemas (or none given) keep the text; an external profile's schemas replace it."""
    mimic = ("mimiciv_hosp", "mimiciv_icu")
    assert tool_descriptions(None, mimic) == tool_descriptions() and tool_schemas(schemas=mimic) == tool_schemas()
    assert "MIMIC-IV tables (mimiciv_hosp.*, mimiciv_icu.*)" in tool_descriptions()
    text = tool_descriptions(None, ("ehrsql",))
    assert "MIMIC-IV" not in text and "the episode's tables (ehrsql.*)" in text
    sql = tool_schemas(("sql",), schemas=("ehrsql",))[0]["function"]
    assert "MIMIC-IV" not in sql["description"] and "MIMIC-IV" not in sql["parameters"]["properties"]["query"][
        "description"]
    assert "ehrsql.*" in sql["parameters"]["properties"]["query"]["description"]
    assert "MIMIC-IV" in tool_schemas(("sql",))[0]["function"]["description"]   # the cached default untouched


def test_trajectory_round_trip() -> None:
    traj = Trajectory("t1", "Question?", [TrajectoryStep(1, {"tool": "sql", "query": "SELECT 1"}, "1 row", 0.0, False,
                                                         0.01, {"rows": 1}, {"prompt_tokens": 10, "completion_tokens": 3}),
                                          TrajectoryStep(2, {"tool": "answer", "value": 1}, "done", 1.0, True, 0.0, {},
                                                         {"prompt_tokens": 12, "completion_tokens": 2})],
                      {"reward": 1.0}, "answered", 0.001, 0.5)
    data = json.loads(json.dumps(traj.to_dict()))
    assert data["prompt_tokens"] == 22 and data["completion_tokens"] == 5 and data["version"] == 1
    assert Trajectory.from_dict(data) == traj
    with pytest.raises(TaskFormatError):
        Trajectory.from_dict({**data, "version": 99})


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ehrgym.bench.answers import AnswerSpec  # noqa: E402
from ehrgym.bench.task import Expected, Task  # noqa: E402
from ehrgym.env.verifier import verify  # noqa: E402

_EXPLANATION = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\n\r:—–(-"),
                       max_size=60)


@settings(max_examples=150, deadline=None)
@given(reason=st.sampled_from(ABSTAIN_REASONS), explanation=_EXPLANATION,
       style=st.sampled_from(["{r}", "{R}", "{spaced}", "**{r}**", "`{r}`"]))
def test_any_abstention_line_round_trips(reason: str, explanation: str, style: str) -> None:
    shown = style.format(r=reason, R=reason.upper(), spaced=reason.replace("_", " "))
    action = parse_action(f"ABSTAIN: {shown}: {explanation}")
    assert action.abstain == reason and action.explanation == explanation.strip()


@settings(max_examples=150, deadline=None)
@given(value=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).filter(lambda v: abs(v) > 1e-6))
def test_any_number_answer_verifies(value: float) -> None:
    task = Task("t", "p", "clean", "labs", "patient", "tpl", "Q?", "SELECT 1", "SELECT 1",
                Expected("answer", AnswerSpec("number"), value=value), None, "test")
    action = parse_action(f"The result is in.\nANSWER: {value!r}")
    assert verify(task, action).reward == 1.0


@pytest.mark.parametrize("text, expected", [
    ("answer(2)", AnswerAction(2)),
    ("answer(value='3.5 mg/dL')", AnswerAction("3.5 mg/dL")),
    ("Checked.\n**answer([1, 2])**", AnswerAction([1, 2])),
    ("answer(abstain='insufficient evidence', explanation='no rows')",
     AnswerAction(None, "insufficient_evidence", "no rows")),
    ("abstain('false_premise', 'no such stay')", AnswerAction(None, "false_premise", "no such stay")),
    ('sql("SELECT count(*) FROM x WHERE a IN (1, 2)")', SqlAction("SELECT count(*) FROM x WHERE a IN (1, 2)")),
    ("python(code='print(1)')", PythonAction("print(1)")),
])
def test_tool_calls_written_as_the_tool_help_shows_them(text: str, expected: object) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", [
    'PYTHON: x = sql("SELECT 1")\nprint(x)',
    'PYTHON:\ndf = sql("SELECT 1")\nsql("SELECT 2")',
    '```python\nsql("SELECT 1")\n```',
    '{"tool": "python", "code": "sql(\\"SELECT 1\\")"}',
])
def test_python_code_calling_sql_stays_python(text: str) -> None:
    assert isinstance(parse_action(text), PythonAction)


def test_calls_that_are_not_literal_are_not_actions() -> None:
    assert parse_action("The answer (roughly) is ANSWER: 7") == AnswerAction("7")
    with pytest.raises(ActionParseError):
        parse_action("answer(x + 1)")
    with pytest.raises(ActionParseError):
        parse_action("answer(" + "(" * 600 + "1" + ")" * 600 + ")")
