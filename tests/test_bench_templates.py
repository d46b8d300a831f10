"""Every template × applicable noise subtype, exercised on the small synthetic database."""

from __future__ import annotations

from collections import Counter

import pytest
import sqlglot

from ehrgym.bench.answers import answers_match
from ehrgym.bench.builder import Builder
from ehrgym.bench.complexity import sql_complexity
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.cleaning import ALL_CLEANERS, plain_relation, relation
from ehrgym.bench.sqlrender import render_sql
from ehrgym.bench.templates import all_templates

from ehrgym.vocab import NOISE_SUBTYPES

TEMPLATES = all_templates()
MY_INTENTS = ("labs", "vitals", "encounters")
MAX_TRIES = 12
DRAW = 60


@pytest.mark.parametrize("intent", MY_INTENTS)
def test_each_intent_has_enough_templates(intent):
    levels = Counter(t.level for t in TEMPLATES if t.intent == intent)
    assert levels["patient"] >= 4 and levels["population"] >= 4, levels


def test_every_subtype_is_used_by_some_template():
    used = {s for t in TEMPLATES for s in NOISE_SUBTYPES if INJECTORS[s].applies(t)}
    assert used == set(NOISE_SUBTYPES)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_template_is_well_formed(template):
    assert len(set(template.paraphrases)) >= 3
    plain = render_sql(template.gold_sql, {p: 1 for p in template.params}, plain_relation(template))
    sqlglot.parse_one(plain, read="duckdb")
    assert sql_complexity(plain) >= 5
    assert template.noise, "a template must list the noise subtypes that apply"
    assert [s for s in template.noise if not INJECTORS[s].can_corrupt(template)] == [], \
        "listed subtypes whose injector cannot apply (missing evidence fields)"


# discards by the label rules (a trap must move the answer meaningfully; a conflict must change it)
LABEL_DISCARDS = {"trap_too_small", "conflict_does_not_change_answer"}
# (template, subtype) whose trap needs a larger hospital than this 200-patient fixture: a median (MIC50)
# moves only when several isolates leave the window, and the fixture's cohorts are small since
# susceptibilities without an MIC make entities ineligible (synthetic release 5). The 1k `paper` build
# has such pairs (3 in this release).
FIXTURE_TOO_SMALL = {("microbiology.cohort_mic50", "out_of_window")}


@pytest.fixture(scope="module")
def builder(synth_db):
    b = Builder(synth_db, BuildConfig("t", 10, min_candidates=DRAW), seed=11, progress=False)
    for t in b.templates:
        b._draw(t, DRAW)
    yield b
    b.close()


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_template_pairs_verify_for_every_applicable_subtype(builder, template):
    cands = builder.candidates[template.id]
    assert cands, f"{template.id}: no eligible entity on the synthetic database"
    # clean gold equals the fully cleaned ("robust") gold on clean, synthetic data
    for c in cands[:3]:
        clean = builder._clean(template, c)
        assert clean is not None, f"clean gold gives no answer for {c.params}"
        robust = render_sql(template.gold_sql, c.params, relation(template, c.params, ALL_CLEANERS))
        assert answers_match(clean[0], builder.verifier.value(robust, template.answer), template.answer)
    failures = {}
    for subtype in template.noise:
        if INJECTORS[subtype].label_problem(template):
            continue  # listed, but the label would be disputable here: no pairs of it (tested in test_bench_noise)
        made = None
        before = Counter(builder.stats.discarded_by_subtype[subtype])
        accepted = [c for c in cands if INJECTORS[subtype].accepts(template, c.params)]
        for c in accepted[:MAX_TRIES]:
            made = builder.attempt(template, subtype, c)
            if made is not None:
                break
        if made is None:
            seen = dict(Counter(builder.stats.discarded_by_subtype[subtype]) - before)
            if set(seen) & LABEL_DISCARDS and set(seen) <= LABEL_DISCARDS | {"no_trap"}:
                continue  # no candidate's trap moved the answer meaningfully: rightly no pair
            if (template.id, subtype) in FIXTURE_TOO_SMALL and "no_trap" in seen:
                continue
            failures[subtype] = seen
            continue
        noise = made.noise
        assert noise["noise"].subtype == subtype
        if noise["expected"].kind == "abstain":
            assert noise["expected"].reason
            if not INJECTORS[subtype].empty_is_trap:
                assert noise["meta"]["trap_value"] is not None
        else:
            assert noise["gold_sql"] != noise["naive_sql"] or noise["noise"].overlay.edits
    assert not failures, f"{template.id}: no verified pair for {failures}"
