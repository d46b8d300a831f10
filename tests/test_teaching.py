"""Teaching cards: one per noise subtype, on its injector; docs/noise.md and the benchmark card use them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.teaching import (CARD_FIELDS, TeachingCard, expected_outcomes, subtype_title, teaching_card,
                                         teaching_cards, teaching_markdown)
from ehrgym.errors import BenchmarkError
from ehrgym.vocab import ABSTAIN_REASONS, NOISE_SUBTYPES

REPO = Path(__file__).resolve().parents[1]


def test_every_registered_subtype_has_a_complete_card_on_its_injector() -> None:
    assert set(INJECTORS) == set(NOISE_SUBTYPES)
    cards = teaching_cards()
    assert list(cards) == list(NOISE_SUBTYPES)
    for sub, card in cards.items():
        assert card is type(INJECTORS[sub]).teaching            # one home: the injector class
        assert all(len(getattr(card, f).split()) >= 3 for f in CARD_FIELDS[1:]), sub
        assert card.title and "_" not in card.title
    assert len({c.title for c in cards.values()}) == len(cards)
    assert subtype_title("unit_mismatch") == "Unit mismatch" and subtype_title(None) == "clean"


def test_card_outcome_names_the_expected_reason() -> None:
    for sub, card in teaching_cards().items():
        inj = INJECTORS[sub]
        if inj.outcome == "abstain":
            assert f"`{inj.reason}`" in card.outcome, sub
            assert expected_outcomes(sub).find(f"abstain ({inj.reason}") >= 0
        else:
            assert card.outcome.startswith("Answer") and expected_outcomes(sub) == "answer"
            assert not any(r in card.outcome for r in ABSTAIN_REASONS), sub


def test_empty_card_field_is_an_error() -> None:
    with pytest.raises(BenchmarkError, match="empty field"):
        TeachingCard("X", "a b c", " ", "a b c", "a b c", "a b c")
    with pytest.raises(BenchmarkError, match="unknown noise injector"):
        teaching_card("no_such_subtype")


def test_docs_noise_md_is_the_generated_page() -> None:
    text = teaching_markdown()
    assert (REPO / "docs" / "noise.md").read_text(encoding="utf-8") == text, \
        "docs/noise.md is stale: run `ehrgym bench teaching-cards --out docs/noise.md`"
    for card in teaching_cards().values():
        assert f"### {card.title} (`" in text and card.check in text


def test_teaching_cards_cli(tmp_path: Path) -> None:
    from ehrgym.cli import cli as main

    out = tmp_path / "noise.md"
    runner = CliRunner()
    assert runner.invoke(main, ["bench", "teaching-cards", "--out", str(out), "--check"]).exit_code == 1
    assert runner.invoke(main, ["bench", "teaching-cards", "--out", str(out)]).exit_code == 0
    done = runner.invoke(main, ["bench", "teaching-cards", "--out", str(out), "--check"])
    assert done.exit_code == 0 and "up to date" in done.output
    printed = runner.invoke(main, ["bench", "teaching-cards"])
    assert printed.output == out.read_text(encoding="utf-8")


def test_benchmark_card_shows_the_cards() -> None:
    from ehrgym.bench.card import card_markdown

    card = {"pairs": 1, "tasks": 2, "templates": 1, "sql_complexity": {"mean_all_gold": 1, "mean_clean_gold": 1,
                                                                        "by_intent": {}, "by_tier": {}},
            "by_intent_level": {}, "by_subtype": {"unit_mismatch": 1}, "by_noise_level": {"value": 1},
            "by_expected": {}, "by_abstain_reason": {}, "by_split": {}, "by_answer_type": {}, "counts": {},
            "by_template": {}}
    md = card_markdown(card)
    tc = teaching_card("unit_mismatch")
    assert f"| value | {tc.title} (`unit_mismatch`) | 1 | {tc.definition} | {tc.check} | answer |" in md
