"""Closed vocabularies shared by every stage (docs/architecture.md §3)."""

from __future__ import annotations

INTENTS: tuple[str, ...] = ("encounters", "diagnoses", "labs", "medications", "vitals", "microbiology")
LEVELS: tuple[str, ...] = ("patient", "population")
VARIANTS: tuple[str, ...] = ("clean", "noise")
NOISE_LEVELS: tuple[str, ...] = ("record", "value", "query")
SPLITS: tuple[str, ...] = ("train", "dev", "test", "ood")

NOISE_SUBTYPES: dict[str, str] = {  # subtype -> noise level
    "missing_evidence": "record",
    "duplicate_records": "record",
    "out_of_window": "record",
    "conflicting_records": "record",
    "implausible_value": "value",
    "unit_mismatch": "value",
    "missing_value": "value",
    "encoding_corruption": "value",
    "nonexistent_entity": "query",
    "false_premise": "query",
    "temporal_mismatch": "query",
    "lexical_variation": "query",
    "out_of_scope": "query",
}

ABSTAIN_REASONS: tuple[str, ...] = (
    "insufficient_evidence",
    "conflicting_evidence",
    "implausible_value",
    "invalid_reference",
    "false_premise",
    "out_of_scope",
)

# How an episode ended (the runner's and the environment's one list) and why a scored episode failed
TERMINATIONS: tuple[str, ...] = (
    "answered", "abstained", "step_limit", "time_limit", "agent_error", "infrastructure_error",
)
FAILURES: tuple[str, ...] = (  # None on success
    "wrong_value", "wrong_type", "false_abstention", "missed_abstention", "wrong_reason",
    "no_answer",  # step/time limit or agent error before answering
)

ANSWER_TYPES: tuple[str, ...] = ("number", "integer", "string", "set", "list", "datetime", "date", "boolean")

# Reason equivalence under strict scoring. When the evidence an agent can see cannot tell two
# abstention reasons apart, both are correct: a noisy task of subtype S that expects reason R
# accepts every reason of ACCEPTED_REASONS[S] when R is in it (otherwise R alone). The one
# place this is defined; the verifier and the metrics read it through accepted_reasons().
ACCEPTED_REASONS: dict[str, frozenset[str]] = {
    # deleted evidence rows look exactly like an event that never happened (the entity itself
    # still leaves traces elsewhere, so invalid_reference stays wrong)
    "missing_evidence": frozenset({"insufficient_evidence", "false_premise"}),
    # the presupposed event leaves no rows: indistinguishable from rows that were lost
    "false_premise": frozenset({"false_premise", "insufficient_evidence"}),
    # a window with no records of the patient: a false premise, or simply no evidence in it
    "temporal_mismatch": frozenset({"false_premise", "insufficient_evidence"}),
    # the id is absent from every table: only an invalid reference explains that
    "nonexistent_entity": frozenset({"invalid_reference"}),
    # the schema has no place for it: missing evidence would misdescribe an unanswerable question
    # (one form of it accepts more: ACCEPTED_BY_FORM)
    "out_of_scope": frozenset({"out_of_scope"}),
    # two different values for one measurement are visible side by side
    "conflicting_records": frozenset({"conflicting_evidence"}),
    # the impossible value is visible; "no evidence" would hide what the records show
    "implausible_value": frozenset({"implausible_value"}),
    # the row exists (the event happened) but carries no value: nothing else fits
    "missing_value": frozenset({"insufficient_evidence"}),
    # recoverable subtypes expect an answer; an abstention on them has no equivalent reason
    "duplicate_records": frozenset(),
    "out_of_window": frozenset(),
    "unit_mismatch": frozenset(),
    "encoding_corruption": frozenset(),
    "lexical_variation": frozenset(),
}
# Where only one form of a subtype's twins leaves two reasons indistinguishable, that form alone accepts
# both: (subtype, form) -> reasons, replacing ACCEPTED_REASONS[subtype] for tasks whose noise names the form
# (NoiseSpec.form). Widening the whole subtype instead let false_premise earn the strict reward on 0.71 of
# the abstaining test twins of the `make reproduce` benchmark.
BEYOND_THE_COURSE = "beyond_the_course"  # an out-of-scope twin asking for the time before arrival or after discharge
QUESTION_FORMS: dict[str, str] = {  # form -> the twins it names, in words
    BEYOND_THE_COURSE: "twins asking for the time before the patient came or after they left",
}
ACCEPTED_BY_FORM: dict[tuple[str, str], frozenset[str]] = {
    # a twin asking for the time beyond the admission ("After the patient left for the skilled nursing
    # facility, …") asks, read as a window, about a time the admission does not cover: a false premise too
    ("out_of_scope", BEYOND_THE_COURSE): frozenset({"out_of_scope", "false_premise"}),
}
assert set(ACCEPTED_REASONS) == set(NOISE_SUBTYPES)
assert all(r in ABSTAIN_REASONS for group in (*ACCEPTED_REASONS.values(), *ACCEPTED_BY_FORM.values())
           for r in group)
assert all(ACCEPTED_REASONS[s] <= group and f in QUESTION_FORMS for (s, f), group in ACCEPTED_BY_FORM.items())


def accepted_reasons(subtype: str | None, expected: str, form: str | None = None) -> frozenset[str]:
    """The abstention reasons strict scoring accepts on a task of ``subtype`` (and question ``form``, see
    ACCEPTED_BY_FORM) that expects ``expected``."""
    group = ACCEPTED_BY_FORM.get((subtype or "", form or ""), ACCEPTED_REASONS.get(subtype or "", frozenset()))
    return group if expected in group else frozenset({expected})
