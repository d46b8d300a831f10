"""Closed vocabularies shared by every stage (DESIGN.md §2)."""

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

ANSWER_TYPES: tuple[str, ...] = ("number", "integer", "string", "set", "list", "datetime", "date", "boolean")
