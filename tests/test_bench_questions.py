"""Query-level noise looks like real questions: a text-only probe cannot tell clean from noisy
twins nor predict abstention, and each query-level injector writes its twin from the clean
question's own distribution (same frame, related names, windows next to the record)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

import pytest

from ehrgym.bench.answers import gold_from_rows
from ehrgym.bench.build import build_benchmark
from ehrgym.bench.configs import BuildConfig, balanced_subtypes, plan_quotas
from ehrgym.bench.noise.cleaning import plain_relation
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.lexicon import ALIAS_SHARE, CODES, LEXICON, aliases, is_misspelling, variants
from ehrgym.bench.noise.query import counts
from ehrgym.bench.context import admission_row, course_clauses, eligible, places_named, with_clause, with_context
from ehrgym.bench.noise.similar import group_of
from ehrgym.bench.sqlrender import render_sql, render_text
from ehrgym.bench.task import load_tasks_jsonl
from ehrgym.bench.templates.registry import all_templates, get_template
from ehrgym.bench.validity.text import text_validity
from ehrgym.bench.verify import PairVerifier

# large enough that the test split holds ~150 query-level questions (the small config's ~30 cannot
# resolve a 0.55 bound); 200 patients still build it in seconds
PROBE_CONFIG = BuildConfig("questions", 1500, oversample=4.0, min_candidates=24)


@pytest.fixture(scope="module")
def built(synth_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("questions") / "bench"
    # no card sections: the tests run the probes on the tasks themselves
    build_benchmark(synth_db, out, config=PROBE_CONFIG, seed=5, progress=False, validity=[])
    return load_tasks_jsonl(out / "tasks.jsonl")


@pytest.fixture(scope="module")
def validity(built):
    return text_validity(built)


@pytest.fixture(scope="module")
def con(synth_db):
    verifier = PairVerifier(synth_db)  # the clean views over the database, as the builder sees them
    yield verifier.con
    verifier.close()


def _pairs(tasks, subtype):
    clean = {t.pair_id: t for t in tasks if t.variant == "clean"}
    return [(clean[t.pair_id], t) for t in tasks if t.variant == "noise" and t.noise.subtype == subtype]


# ---------------------------------------------------------------- the text probe


# The targets: overall <= 0.55, query-level <= 0.60, answer-vs-abstain within 5 points of
# the majority rate (overall and on query-level pairs). On this build: overall 0.51, query-level
# 0.54 (interval 0.45-0.62; out of scope 0.63), answer-vs-abstain 0.59 against a 0.62 majority
# (query-level pairs: 0.86 against 0.86); 0.50, 0.56, 0.58 vs 0.59 and 0.81 vs 0.81 before templates
# without a name lost their out-of-scope twins.
# Before clean questions used clinicians' aliases and the plan balanced every template's outcomes:
# 0.54, 0.61 (lexical variation 0.72), 0.65 vs 0.51 (0.73 vs 0.75); before the query-level noise
# was rewritten: 0.55, 0.72, majority + 0.12 (query-level + 0.13). On the `paper` build (1k
# patients, seed 0) the query-level probe reads 0.539 (0.497-0.581; out of scope 0.58) since
# out-of-scope twins open with a clause of the course and ask beyond it; 0.603 (out of scope 0.79)
# before: see docs/history.md ("The text probe, design by design").


def test_question_text_does_not_reveal_the_variant(validity):
    overall, query = validity["clean_vs_noise"], validity["clean_vs_noise_query"]
    assert overall["n_test"] >= 200 and query["n_test"] >= 80
    assert overall["accuracy"] <= 0.55, overall
    # no query-level subtype is given away by its own wording (was: out of scope 0.86, temporal 0.71,
    # lexical variation 0.72)
    assert query["by_subtype"]["out_of_scope"] <= 0.78, query
    assert query["by_subtype"]["temporal_mismatch"] <= 0.68, query
    assert query["by_subtype"]["lexical_variation"] <= 0.65, query


def test_query_level_target(validity):
    assert validity["clean_vs_noise_query"]["accuracy"] <= 0.60, validity["clean_vs_noise_query"]
    for r in validity.values():  # every accuracy comes with the interval chance alone allows
        lo, hi = r["interval95"]
        assert lo <= r["accuracy"] <= hi and hi - lo < 0.3, r


def test_query_noise_does_not_reveal_the_expected_outcome(validity):
    probe = validity["answer_vs_abstain_query"]
    assert probe["n_test"] >= 50
    assert probe["accuracy"] <= probe["majority"] + 0.05, probe


def test_answer_vs_abstain_target(validity):
    probe = validity["answer_vs_abstain"]
    assert probe["n_test"] >= 100
    assert probe["accuracy"] <= probe["majority"] + 0.05, probe


def test_the_probes_give_the_same_numbers_in_worker_processes(built, validity):
    """The build runs the probes in its worker processes: the card must not depend on that."""
    assert text_validity(built, workers=2) == validity


def test_the_probe_catches_a_planted_shortcut(built):
    """The probe can fail: noisy twins that share a cue word are found at once (here every twin that
    expects an abstention; with outcomes balanced per template, a cue on query-level twins alone moves
    the overall answer-vs-abstain probe too little to be a fair check)."""
    planted = [replace(t, question=t.question + " (as noted in the chart)") if t.variant == "noise"
               and t.expected.is_abstain else t for t in built]
    probe = text_validity(planted)
    assert probe["clean_vs_noise_query"]["accuracy"] >= 0.75
    assert probe["answer_vs_abstain"]["accuracy"] >= probe["answer_vs_abstain"]["majority"] + 0.1


# ---------------------------------------------------------------- outcome balance per template


def test_plan_gives_every_template_half_answer_half_abstain():
    from ehrgym.vocab import NOISE_SUBTYPES

    applicable = {
        ("labs", "patient", "count"): ["duplicate_records", "missing_evidence", "out_of_scope"],
        ("labs", "patient", "value"): ["missing_value", "unit_mismatch", "lexical_variation", "out_of_scope"],
        ("labs", "patient", "only"): ["missing_evidence", "nonexistent_entity"],
    }
    outcomes = {("count", "duplicate_records"): "answer", ("count", "missing_evidence"): "abstain",
                ("count", "out_of_scope"): "abstain", ("value", "missing_value"): "abstain",
                ("value", "unit_mismatch"): "answer", ("value", "lexical_variation"): "answer",
                ("value", "out_of_scope"): "abstain", ("only", "missing_evidence"): "abstain",
                ("only", "nonexistent_entity"): "abstain"}
    plain = plan_quotas(301, applicable, NOISE_SUBTYPES)
    balanced = plan_quotas(301, applicable, NOISE_SUBTYPES, outcomes=outcomes)
    assert sum(balanced.values()) == 301
    for tid in ("count", "value", "only"):
        total = sum(q for (t, _), q in plain.items() if t == tid)
        assert sum(q for (t, _), q in balanced.items() if t == tid) == total  # template shares unchanged
        # out of scope (its words mark it) keeps its quota and stays out of the balance
        assert balanced.get((tid, "out_of_scope")) == plain.get((tid, "out_of_scope"))
        unmarked = total - plain.get((tid, "out_of_scope"), 0)
        answer = sum(q for (t, s), q in balanced.items() if t == tid and outcomes[(t, s)] == "answer")
        assert answer == (unmarked // 2 if tid != "only" else 0), (tid, balanced)
    assert plain[("count", "duplicate_records")] != balanced[("count", "duplicate_records")]
    # lexical variation: at most as many as the template's other unmarked query twins (none here)
    assert balanced.get(("value", "lexical_variation"), 0) == 0 < plain[("value", "lexical_variation")]


def test_built_templates_are_balanced_by_outcome(built):
    """The build keeps step 5 of the plan: in every template whose subtypes allow both outcomes,
    the noisy twins expecting an answer are half (rounded down) of them."""
    from collections import Counter

    from ehrgym.bench.builder import outcome_of
    from ehrgym.bench.noise import INJECTORS
    from ehrgym.vocab import NOISE_SUBTYPES

    pools = {t.id: balanced_subtypes(t.id, subs, {(t.id, s): outcome_of(t, s) for s in subs})
             for t in all_templates() for subs in [[s for s in NOISE_SUBTYPES if INJECTORS[s].applies(t)]]}
    made = Counter((t.template_id, t.expected.kind) for t in built
                   if t.variant == "noise" and t.noise.subtype in pools[t.template_id])
    both = [t for t in all_templates() if pools[t.id]]
    off = {t.id: (made[(t.id, "answer")], made[(t.id, "abstain")]) for t in both
           if made[(t.id, "abstain")] - made[(t.id, "answer")] not in (0, 1)}
    assert len(both) >= 60 and len(off) <= len(both) // 20, off
    assert all(abs(a - b) <= 2 for a, b in off.values()), off
    # inside the query level, lexical twins (answered) are at most the template's other unmarked ones —
    # except by a pair or two where lexical variation is the template's only answering subtype left
    sub = Counter((t.template_id, t.noise.subtype) for t in built if t.variant == "noise")
    over = {t.id: sub[(t.id, "lexical_variation")] - sum(sub[(t.id, s)] for s in
                                                         ("nonexistent_entity", "false_premise", "temporal_mismatch"))
            for t in both}
    over = {k: v for k, v in over.items() if v > 0}
    assert len(over) <= len(both) // 10 and all(v <= 2 for v in over.values()), over


# ---------------------------------------------------------------- out of scope


def _frame(question: str, values: list[str]) -> str:
    for v in sorted(values, key=len, reverse=True):
        question = question.replace(v, "§")
    return question


def test_out_of_scope_twins_reuse_the_clean_question(built):
    pairs = _pairs(built, "out_of_scope")
    assert len(pairs) >= 50
    for clean, noisy in pairs:
        t = get_template(clean.template_id)
        entity = _entity(clean.meta["entity"])
        assert noisy.question != clean.question
        # same patient / admission / stay / year as the clean twin
        for key in ("subject_id", "hadm_id", "stay_id", "year"):
            if key in entity and any("{" + key + "}" in p for p in t.paraphrases):
                assert str(entity[key]) in noisy.question, (clean.question, noisy.question)
        edit = noisy.noise.question_edit
        context = clean.meta.get("context", "")
        assert noisy.meta.get("context", "") == context  # both twins tell the same course
        question = noisy.question.removesuffix(" " + context) if context else noisy.question
        if edit["param"] is None:  # the clean question opening with the course's other edge: the test below
            continue
        # else always the clean paraphrase with only the named thing swapped (never a fixed question)
        assert edit["param"] == t.lexical, (clean.template_id, edit)
        frame = t.paraphrases[clean.meta["paraphrase"]]
        pieces = [render_text(p, entity) for p in frame.split("{" + edit["param"] + "}")]
        assert question.startswith(pieces[0]), (clean.question, noisy.question)
        assert question.endswith(pieces[-1]), (clean.question, noisy.question)
        assert all(p in question for p in pieces), (clean.question, noisy.question)


# ---------------------------------------------------------------- temporal mismatch


def test_temporal_windows_lie_next_to_the_record_and_presuppose_an_event(built, con):
    pairs = _pairs(built, "temporal_mismatch")
    assert len(pairs) >= 30
    lo, hi = con.execute("SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions").fetchone()
    for clean, noisy in pairs:
        t = get_template(clean.template_id)
        tw = t.time_window
        noisy_params = dict(clean.meta["entity"], **noisy.meta["noisy_entity"])
        if tw.year:
            old, new = int(clean.meta["entity"][tw.year]), int(noisy_params[tw.year])
            assert lo.year - 1 <= new <= hi.year + 1, noisy.question
            assert abs(new - old) <= 15
        else:
            start = dt.datetime.fromisoformat(str(noisy_params[tw.start]))
            end = dt.datetime.fromisoformat(str(noisy_params[tw.end]))
            assert lo <= start and end <= hi
            first, last = con.execute(render_sql(tw.scope_sql, clean.meta["entity"], {})).fetchone()
            assert first - dt.timedelta(days=40) <= start <= last + dt.timedelta(days=366)
        # the noisy window holds no answer: the question presupposes an event there
        params = {k: _typed(v) for k, v in noisy_params.items()}
        sql = render_sql(t.gold_sql, params, plain_relation(t))
        assert gold_from_rows(con.execute(sql).fetchall(), t.answer) is None, noisy.question
    # a count is an answer (zero) on an empty window, never a false premise
    assert not any(counts(get_template(clean.template_id)) for clean, _ in pairs)
    assert not any(INJECTORS["temporal_mismatch"].applies(t) for t in all_templates() if counts(t))
    assert any(counts(t) and t.time_window for t in all_templates())


WRONG_YEAR_DRAFTS = 100  # candidates drafted per cohort-year template (the build's own pairs are ~100 here: too few)


def test_a_wrong_year_does_not_name_its_twin(synth_db):
    # a year a policy has seen only in wrong-year twins names the noisy twin without reading any data: the years a
    # pair names, looked up over the other pairs, must stay near chance (every year as often wrong as asked about)
    import types

    from ehrgym.bench.builder import Builder
    from ehrgym.bench.configs import get_config
    from ehrgym.bench.validity.text import window_lookup

    inj = INJECTORS["temporal_mismatch"]
    temps = [t for t in all_templates() if inj.applies(t) and t.time_window is not None and t.time_window.year]
    b = Builder(synth_db, get_config("small"), seed=5, progress=False, templates=temps)
    twins = []
    try:
        for t in temps:
            b._draw(t, WRONG_YEAR_DRAFTS)
            for c in b.candidates.get(t.id, [])[:WRONG_YEAR_DRAFTS]:
                d = b.attempt(t, "temporal_mismatch", c)
                if d is None:
                    continue
                pair = f"{t.id}:{c.index}"
                twins.append(types.SimpleNamespace(pair_id=pair, variant="clean", noise=None, question=d.clean["question"]))
                twins.append(types.SimpleNamespace(pair_id=pair, variant="noise", noise=d.noise["noise"],
                                                   question=d.noise["question"]))
    finally:
        b.close()
    got = window_lookup(twins)
    assert got["pairs"] >= 300, got
    assert got["accuracy"] <= 0.57, got  # 0.52 when written (0.638 before wrong years were balanced)


def _typed(v):
    if isinstance(v, str) and re.fullmatch(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?", v):
        return dt.datetime.fromisoformat(v)
    return v


def _entity(params: dict) -> dict:
    """Task parameters as the builder held them (timestamps are JSON strings in the task file)."""
    return {k: _typed(v) for k, v in params.items()}


# ---------------------------------------------------------------- false premise


def test_false_premises_are_related_names_clean_questions_use(built, con):
    pairs = _pairs(built, "false_premise")
    assert len(pairs) >= 20
    sampled: dict[str, set] = {}
    related = 0
    for clean, noisy in pairs:
        prem = get_template(clean.template_id).premise
        old, new = clean.meta["entity"][prem.param], noisy.meta["noisy_entity"][prem.param]
        assert old != new
        g_old, g_new = group_of(prem.param, old), group_of(prem.param, new)
        if g_old is not None:
            broad = group_of(prem.param, old, level=1)
            assert g_new == g_old or (broad is not None and group_of(prem.param, new, level=1) == broad), \
                (clean.question, noisy.question)
            related += g_new == g_old
        # the wrong name is one clean questions of the template ask about (a sampled value)
        t = get_template(clean.template_id)
        if t.id not in sampled:
            sampled[t.id] = {r[0] for r in con.execute(f"SELECT s.{prem.param} FROM ({t.sampler_sql}) s").fetchall()}
        assert new in sampled[t.id], (clean.question, noisy.question)
    assert related >= len(pairs) // 3


def test_similarity_groups_are_clinical():
    assert group_of("itemid", 50912) == group_of("itemid", 51006)  # creatinine ~ urea nitrogen
    assert group_of("itemid", 50912) != group_of("itemid", 51222)  # creatinine vs hemoglobin
    assert group_of("drug", "Furosemide") == group_of("drug", "Metoprolol Tartrate")
    assert group_of("drug", "Vancomycin") == group_of("drug", "CefTRIAXone") != group_of("drug", "Heparin")
    assert group_of("organism", "ESCHERICHIA COLI") == group_of("organism", "KLEBSIELLA PNEUMONIAE")
    assert group_of("title", "x", code="0BH17EZ") == group_of("title", "y", code="0B110F4")


# ---------------------------------------------------------------- lexical variation


def test_lexical_variants_are_clinical_forms_not_typos_of_codes(built):
    pairs = _pairs(built, "lexical_variation")
    assert len(pairs) >= 50
    for _clean, noisy in pairs:
        edit = noisy.noise.question_edit
        assert edit["to"] in variants(edit["from"])
        if edit["from"].casefold() in CODES:
            assert edit["to"] in LEXICON[edit["from"].casefold()]
    for code in CODES:
        assert all(v in LEXICON.get(code, ()) for v in variants(code.upper())), code


def test_lexicon_holds_the_abbreviations_clinicians_use():
    expected = {"Hemoglobin": "Hgb", "Potassium": "K", "Urea Nitrogen": "BUN", "Platelet Count": "plt",
                "O2 saturation pulseoxymetry": "SpO2", "Heart Rate": "HR", "White Blood Cells": "WBC",
                "EW EMER.": "emergency", "Medical Intensive Care Unit (MICU)": "MICU"}
    for name, form in expected.items():
        assert form in variants(name), (name, variants(name))
    assert variants("EW EMER.") == list(LEXICON["ew emer."])  # a code: no typo forms


# ---------------------------------------------------------------- same phrasing distribution


def _told(question: str):
    """(preposition, clause) of the course clause a question opens with, or None."""
    from ehrgym.bench.context import ARRIVAL_CLAUSES, COHORT_CLAUSES, DEPARTURE_CLAUSES, CourseClause

    clauses = [*COHORT_CLAUSES, *(CourseClause("arrival", t) for ts in ARRIVAL_CLAUSES.values() for t in ts),
               *(CourseClause("departure", t) for ts in DEPARTURE_CLAUSES.values() for t in ts)]
    first, _, rest = question.partition(" ")
    if first not in ("After", "Before"):
        return None
    found = [c for c in clauses if rest.startswith(c.text + ", ")]
    return (first.lower(), max(found, key=lambda c: len(c.text))) if found else None


def _framed(text: str, told, context: str) -> str:
    return with_context(with_clause(text, told[0], told[1]) if told else text, context)


def test_other_query_twins_keep_the_clean_frame(built):
    """Wrong entity, premise, window or spelling: the noisy twin is the clean paraphrase with only
    the edited parameter changed — no wording of its own."""
    for sub in ("nonexistent_entity", "false_premise", "temporal_mismatch", "lexical_variation"):
        for clean, noisy in _pairs(built, sub):
            t = get_template(clean.template_id)
            frame = t.paraphrases[clean.meta["paraphrase"]]
            context = clean.meta.get("context", "")
            assert noisy.meta.get("context", "") == context
            told = _told(clean.question)  # a clause of the course, in both twins alike
            assert clean.question == _framed(render_text(frame, _entity({**clean.meta["entity"],
                                                                         **clean.meta.get("shown", {})})),
                                             told, context)
            params = _entity({**clean.meta["entity"], **noisy.meta.get("noisy_entity", {}),
                              **noisy.meta.get("shown", {})})
            if sub == "lexical_variation":
                params[noisy.noise.question_edit["param"]] = noisy.noise.question_edit["to"]
            else:  # the twin names the concept the way its clean question does
                assert noisy.meta.get("shown", {}).keys() == clean.meta.get("shown", {}).keys(), noisy.question
            assert noisy.question == _framed(render_text(frame, params), told, context), (sub, noisy.question)


def test_clean_questions_use_clinicians_aliases_too(built):
    """An alias is no cue for noise: clean questions name a concept by one for about half the
    entities, whatever the noise, and a lexical twin shows another alias where the name has one."""
    with_alias = [t for t in built if t.variant == "clean" and get_template(t.template_id).lexical
                  and aliases(str(t.meta["entity"][get_template(t.template_id).lexical]))]
    lexical_pairs = {t.pair_id for t in built if t.noise is not None and t.noise.subtype == "lexical_variation"}
    for group in ([t for t in with_alias if t.pair_id not in lexical_pairs],
                  [t for t in with_alias if t.pair_id in lexical_pairs]):
        share = sum("shown" in t.meta for t in group) / len(group)
        assert len(group) >= 30 and abs(share - ALIAS_SHARE) <= 0.15, share
    for clean, noisy in _pairs(built, "lexical_variation"):
        edit = noisy.noise.question_edit
        shown = clean.meta.get("shown", {}).get(edit["param"], edit["from"])
        assert edit["to"] != shown
        if set(aliases(edit["from"])) - {shown}:
            assert edit["to"] in aliases(edit["from"]), (clean.question, noisy.question)
    assert not is_misspelling("K", "serum potassium") and not is_misspelling("Lasix", "furosemide")
    assert is_misspelling("potasium", "serum potassium") and is_misspelling("hemoglobine", "hemoglobin")
    assert "potasium" not in aliases("serum potassium") and "Hgb" in aliases("Hemoglobin")


# ---------------------------------------------------------------- the admission's course


def test_context_sentences_are_true_of_the_admission(con):
    """Every phrase maps to the code it describes; the sentence and its places follow the row."""
    from ehrgym.bench.context import ARRIVAL, DEPARTURE, KIND, admission_row, context_sentence

    rows = con.execute("SELECT hadm_id, admission_location, discharge_location, admission_type "
                       "FROM mimiciv_hosp.admissions ORDER BY hadm_id LIMIT 300").fetchall()
    said = 0
    for hadm, arrival, departure, kind in rows:
        row = admission_row(con, {"hadm_id": hadm})
        assert row == (arrival, departure, kind)
        for pick in (0, 17, 4099, 123457):
            sentence, places = context_sentence(row, pick)
            told = {p: place for table, code in ((ARRIVAL, arrival), (DEPARTURE, departure))
                    for p, place in table.get(code or "", ())}
            # every verb phrase of the sentence belongs to this admission's own codes
            body = sentence.split(".")[0].removeprefix("The patient ") if sentence.startswith("The patient") else ""
            for part in filter(None, body.split(" and ")):
                assert part in told, (row, sentence)
            assert set(places) == {place for p, place in told.items() if place and p in sentence}
            for extra in KIND.values():
                for s in extra:
                    assert s not in sentence or s in KIND.get(kind or "", ()), (row, sentence)
            assert places_named(sentence) == places
            said += bool(sentence)
    assert said >= 600  # most admissions have a course to tell
    assert context_sentence(("TRANSFER FROM HOSPITAL", "DIED", "EW EMER."), 0) == (
        "The patient was an outside hospital transfer.", ("outside hospital",))
    assert context_sentence(None, 0) == ("", ())


def test_every_eligible_question_tells_its_course_and_both_twins_tell_the_same(built, con):
    from ehrgym.bench.builder import evidence_sql
    from ehrgym.bench.context import (ARRIVAL, COHORT_ARRIVAL, COHORT_DEPARTURE, COHORT_SUBJECT, DEPARTURE,
                                      admission_row, cohort_eligible, cohort_locations_sql, eligible)

    clean = {t.pair_id: t for t in built if t.variant == "clean"}
    told = cohorts = 0
    for t in built:
        context = t.meta.get("context", "")
        assert context == clean[t.pair_id].meta.get("context", "")  # whatever the noise
        template = get_template(t.template_id)
        if cohort_eligible(template):
            if t.variant == "clean":  # every phrase is a code some admission of the clean question's cohort has
                rows = con.execute(cohort_locations_sql(evidence_sql(template, _entity(t.meta["entity"])))).fetchall()
                phrases = ([p for code in sorted({a for a, _ in rows if a}) for p, _ in COHORT_ARRIVAL.get(code, ())]
                           + [p for code in sorted({d for _, d in rows if d})
                              for p, _ in COHORT_DEPARTURE.get(code, ())])
                assert bool(phrases) == bool(context), (t.question, rows)
                if context:
                    assert context.startswith(COHORT_SUBJECT) and context.endswith(".")
                    parts = context.removeprefix(COHORT_SUBJECT).removesuffix(".").split(", and some ")
                    assert all(p in phrases for p in parts), (context, rows)
            assert t.question.endswith(context)
            cohorts += bool(context)
            continue
        if not eligible(template, t.meta["entity"]):
            assert not context, t.question  # e.g. a question about the discharge location itself
            continue
        if t.variant == "clean":
            arrival, departure, _ = admission_row(con, t.meta["entity"])
            phrases = [p for p, _ in ARRIVAL.get(arrival or "", ()) + DEPARTURE.get(departure or "", ())]
            assert bool(phrases) <= bool(context), t.question  # a course to tell is told
            assert all(p in phrases for p in context.split(".")[0].removeprefix("The patient ").split(" and ")
                       if context.startswith("The patient ")), (context, arrival, departure)
        assert t.question.endswith(context)
        told += bool(context)
    assert told >= 300
    assert cohorts >= 300  # population questions tell their cohort's course too


def test_out_of_scope_twins_ask_about_the_place_their_context_names(built):
    """Where the course names a place this database holds nothing from and a phrase about it fits the slot, the
    out-of-scope twin asks about that place in the same words (a pool qualifier there marked half the twins that
    could link), and then no word of the swap but a preposition or verb is missing from the clean twin."""
    from ehrgym.bench.noise.scope import LINKED_PLACES, ends_clause, linked_phrases, slot_kind

    linked = could = 0
    for clean, noisy in _pairs(built, "out_of_scope"):
        places = places_named(clean.meta.get("context", ""))
        t = get_template(clean.template_id)
        kind = slot_kind(t.lexical, t.evidence.table) if t.lexical else None
        usable = [p for p in places if kind is None or p in LINKED_PLACES.get(kind, ())]
        if kind is not None and t.lexical is not None:  # a diagnosis or procedure takes a place only after it
            frame = t.paraphrases[clean.meta["paraphrase"]]
            if not linked_phrases(kind, "x", "{" + t.lexical + "}" in frame and ends_clause(frame, t.lexical), places):
                usable = []
        if not usable or noisy.noise.question_edit["param"] is None:  # no place, or the course's clause instead
            continue
        could += 1
        asked = noisy.question.removesuffix(" " + clean.meta["context"])
        if not any(p in asked for p in usable):
            continue
        extra = set(re.findall(r"[a-z]+", asked.lower())) - set(re.findall(r"[a-z]+", clean.question.lower()))
        if noisy.noise.question_edit["param"]:
            assert not extra - {"at", "the", "by", "in", "measured", "given", "done", "diagnosed", "recorded",
                                "taken", "staff", "team", "chart", "after", "discharge"}, extra
        linked += 1
    assert linked >= 1 and linked == could, (linked, could)  # most twins of timed kinds take the course clause


def test_out_of_scope_twins_ask_beyond_the_course_their_clean_twin_stays_within(built, con):
    """A twin of a timed kind whose admission's arrival or departure can be told in a clause (a cohort's: the
    hospital's own doors) asks for the time beyond it ("After the patient left for the rehab facility, …"); its clean
    twin opens with the same clause and the preposition that covers the admission's own rows. The twins differ in
    that one word, and which of the two is unrecordable depends on the clause's side: a reader of words and word
    pairs cannot weigh it (the preposition's neighbours are the same in every question)."""
    from ehrgym.bench.context import COHORT_CLAUSES
    from ehrgym.bench.noise.scope import CLAUSE_KINDS, slot_kind

    flip = {"After": "Before", "Before": "After"}
    sides: dict[tuple[str, str], int] = {}
    for clean, noisy in _pairs(built, "out_of_scope"):
        t = get_template(clean.template_id)
        entity = _entity(clean.meta["entity"])
        kind = slot_kind(t.lexical, t.evidence.table) if t.lexical else None
        clauses = (COHORT_CLAUSES if t.level == "population"
                   else course_clauses(admission_row(con, entity)) if eligible(t, entity) else ())
        told = kind in CLAUSE_KINDS and bool(clauses)
        assert (noisy.noise.question_edit["param"] is None) == told, (clean.question, noisy.question)
        assert (noisy.noise.form == "beyond_the_course") == told  # the form its accepted reasons depend on
        if not told:
            continue
        first, rest = clean.question.split(" ", 1)
        assert noisy.question == f"{flip[first]} {rest}", (clean.question, noisy.question)
        clause = next(c for c in clauses if rest.startswith(c.text + ", "))
        assert first.lower() == clause.recordable and flip[first].lower() == clause.unrecordable
        assert clause.recordable == ("after" if clause.side == "arrival" else "before")
        assert clean.gold_sql == render_sql(t.gold_sql, entity, plain_relation(t))  # the clause changes no answer
        sides[t.level, clause.side] = sides.get((t.level, clause.side), 0) + 1
    assert len(sides) == 4 and min(sides.values()) >= 3, sides


def test_a_course_clause_marks_no_pair_and_no_variant(built):
    """Clean questions of other pairs open with a clause of the course too (``CLAUSE_SHARE`` of those that could),
    always with the preposition that covers the admission's rows, and their noisy twins open with the same words: a
    clause tells neither that a pair's noisy twin is out of scope nor which twin is noisy."""
    from ehrgym.bench.context import CLAUSE_SHARE
    from ehrgym.bench.noise.query import opens_with_clause

    clean = {t.pair_id: t for t in built if t.variant == "clean"}
    could = told = told_cohorts = 0
    for noisy in built:
        if noisy.variant != "noise" or noisy.noise.subtype == "out_of_scope":
            continue
        twin = clean[noisy.pair_id]
        clause = _told(twin.question)
        could += opens_with_clause(get_template(twin.template_id)) and noisy.level == "population"
        if clause is None:
            assert _told(noisy.question) is None, noisy.question
            continue
        told += 1
        told_cohorts += noisy.level == "population"
        assert _told(noisy.question) == clause, (twin.question, noisy.question)
        assert clause[0] == clause[1].recordable, twin.question
    assert told >= 40 and could >= 40 and abs(told_cohorts / could - CLAUSE_SHARE) < 0.15, (told_cohorts, could)


def test_no_one_reason_is_right_on_most_abstentions(built):
    """Strict scoring checks the reason so that an abstention says what the evidence shows. Equivalences
    (``ehrgym.vocab.ACCEPTED_REASONS``, ``ACCEPTED_BY_FORM``) widen what each reason earns; a reason accepted on nearly
    every abstaining twin would let a policy earn the strict reward without reading why. Every out-of-scope twin
    accepting false premise took it from 0.53 to 0.71 of the abstaining test twins on the `make reproduce`
    benchmark; only the twins asking beyond the admission's course accepting it (where it fits) leave it at 0.65."""
    from ehrgym.vocab import ABSTAIN_REASONS

    abstaining = [t for t in built if t.variant == "noise" and t.expected.is_abstain]
    shares = {r: sum(r in t.accepted_reasons for t in abstaining) / len(abstaining) for r in ABSTAIN_REASONS}
    assert max(shares.values()) <= 0.75, shares
    assert shares["out_of_scope"] < 0.35, shares  # no equivalence takes it beyond its own twins
