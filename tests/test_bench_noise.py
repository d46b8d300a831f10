"""Unit tests of the noise building blocks: values, lexicon, units, cleaning SQL, quotas, splits, complexity."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ehrgym.bench.answers import AnswerSpec, answers_match
from ehrgym.bench.complexity import sql_complexity, sql_tables
from ehrgym.bench.configs import even_split, plan_quotas
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.cleaning import NUMBER_REGEX
from ehrgym.bench.noise.lexicon import typo_variants, variants
from ehrgym.bench.noise.units import CONVERSIONS
from ehrgym.bench.noise.values import conflicting, decimals_of, implausible, number_forms, value_text
from ehrgym.bench.splits import ood_templates, split_of, unit_hash
from ehrgym.bench.sqlrender import render_sql, render_text, sql_value
from ehrgym.bench.templates.registry import all_templates
from ehrgym.db.items import item_reference
from ehrgym.errors import BenchmarkError
from ehrgym.vocab import NOISE_SUBTYPES

CON = duckdb.connect()


def test_every_subtype_has_exactly_one_injector():
    assert set(INJECTORS) == set(NOISE_SUBTYPES)
    for subtype, inj in INJECTORS.items():
        assert inj.subtype == subtype and inj.level == NOISE_SUBTYPES[subtype]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(item_reference())), st.floats(0, 1), st.booleans())
def test_implausible_values_leave_the_physiologic_range(itemid, frac, low):
    ref = item_reference()[itemid]
    value = round(ref.plausible_min + frac * (ref.plausible_max - ref.plausible_min), 2)
    bad = implausible(value, (ref.plausible_min, ref.plausible_max), low=low)
    if bad is not None:
        assert not ref.plausible_min <= bad <= ref.plausible_max
        assert decimals_of(bad) <= max(decimals_of(value), 1)  # never more decimals than the row (a slip up fills one)


def test_implausible_values_are_decimal_slips():
    assert implausible(90, (0, 350)) == 900  # integers stay integers
    assert implausible(37.2, (20, 46)) == 372.4  # the decimal slip keeps the precision of the item
    # a slip down keeps the row's precision too: more decimals than the item's values (138 → 13.8, 0.6 → 0.006)
    # would let storage alone tell the row from the base's (decimals, a text that disagrees with the number)
    assert implausible(138, (90, 200), low=True) == 14
    assert implausible(7.4, (6.8, 7.8), low=True) == 0.7
    assert implausible(0.6, (0.1, 20), low=True) == -0.6  # 0.06 rounds back into range, 0.006 to nothing: a sign slip


def test_implausible_values_are_far_out_and_not_another_unit():
    # creatinine 0.9 mg/dL: 90 and 900 read as µmol/L (1.0 and 10.2 mg/dL), so neither may be used
    readable = lambda v: 0.05 <= v / 88.4 <= 25  # noqa: E731
    bad = implausible(0.9, (0.05, 25), readable=readable)
    assert bad is not None and not readable(bad) and (bad < 0 or bad > 50)
    # a value just past the bound is a tail, not an error: the slip leaves it by a factor of 2
    assert implausible(30, (0, 350)) == 3000


def test_number_forms_come_from_the_texts_and_parse_back():
    forms = number_forms(["___", ">300", "7.4", "0-2", "16/.", "<0.5", ">50", "12 mg/dL"])
    assert forms == [">{v}", "{v}", "<{v}", "{v} mg/dL"]
    for form in forms:
        text = form.format(v=value_text(12.34))
        parsed = CON.execute(f"SELECT TRY_CAST(replace(regexp_extract(?, '{NUMBER_REGEX}'), ',', '.') AS DOUBLE)",
                             [text]).fetchone()[0]
        assert parsed == pytest.approx(12.34)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 3000).map(lambda v: round(v, 1)), st.integers(0, 1000))
def test_conflicting_value_differs(value, seed):
    got = conflicting(value, np.random.default_rng(seed), None)
    assert got != value
    assert decimals_of(got) <= max(decimals_of(value), 1)  # stored with the precision of the item's values


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CONVERSIONS)), st.floats(0, 1))
def test_unit_conversions_round_trip_within_answer_tolerance(itemid, frac):
    conv = CONVERSIONS[itemid]
    ref = item_reference().get(itemid)
    lo, hi = (ref.plausible_min, ref.plausible_max) if ref else (0.0, 300.0)
    lo = max(lo, hi * 0.01)  # values near zero are not what the builder converts
    value = round(lo + frac * (hi - lo), 2)
    alt = conv.to_alt(value)
    back = CON.execute(f"SELECT round({conv.from_alt_sql('x')}, 6) FROM (SELECT ?::DOUBLE AS x)", [alt]).fetchone()[0]
    assert answers_match(value, back, AnswerSpec("number", rel_tol=2e-3))


def test_lexical_variants_are_credible():
    assert "creatinin" in variants("Creatinine")
    assert "Hgb" in variants("Hemoglobin")
    assert "BUN" in variants("Urea Nitrogen")
    assert "MICU" in variants("Medical Intensive Care Unit (MICU)")


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=4, max_size=30))
def test_typo_variants_never_return_the_name(name):
    for v in typo_variants(name):
        assert v.casefold() != name.casefold()


def test_render_sql_quotes_and_rejects_unknown_placeholders():
    import datetime as dt

    sql = render_sql("SELECT * FROM {labevents} e WHERE e.x = {a} AND e.t < {t}",
                     {"a": "O'Brien", "t": dt.datetime(2150, 1, 2, 3, 4)}, {"labevents": "mimiciv_hosp.labevents"})
    assert "'O''Brien'" in sql and "TIMESTAMP '2150-01-02 03:04:00'" in sql
    with pytest.raises(BenchmarkError, match="placeholder"):
        render_sql("SELECT {nope}", {}, {})
    assert sql_value(3) == "3" and render_text("{x} at {t}", {"x": 1.0, "t": dt.datetime(2150, 1, 1, 8, 0)}) == \
        "1 at 2150-01-01 08:00"


def test_complexity_counts_structural_components():
    assert sql_complexity("SELECT a FROM t") == 2  # SELECT + table
    # SELECT, table, WHERE, '=', AND, '>', max(), ORDER, LIMIT … counted once each
    sql = "SELECT max(v) FROM t WHERE a = 1 AND b > 2 GROUP BY c ORDER BY c LIMIT 1"
    assert sql_complexity(sql) == 10
    joined = "SELECT avg(e.v) FROM x e JOIN y d ON d.i = e.i WHERE d.l = 'a'"
    assert sql_complexity(joined) == sql_complexity("SELECT avg(e.v) FROM x e WHERE e.l = 'a'") + 3
    assert sql_tables("WITH c AS (SELECT * FROM mimiciv_hosp.admissions) SELECT * FROM c JOIN "
                      "mimiciv_hosp.labevents l ON true") == ["admissions", "labevents"]


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 20000), st.integers(1, 40))
def test_even_split_is_exact_and_even(total, n):
    out = even_split(total, range(n))
    assert sum(out.values()) == total and max(out.values()) - min(out.values()) <= 1


def test_plan_quotas_balances_cells_levels_and_subtypes():
    applicable = {
        ("labs", "patient", "a"): ["missing_evidence", "implausible_value", "out_of_scope", "lexical_variation"],
        ("labs", "patient", "b"): ["duplicate_records", "unit_mismatch", "out_of_scope"],
        ("labs", "population", "c"): ["missing_evidence", "temporal_mismatch"],
        ("vitals", "patient", "d"): ["conflicting_records", "missing_value", "nonexistent_entity"],
    }
    quotas = plan_quotas(5486, applicable, NOISE_SUBTYPES)
    assert sum(quotas.values()) == 5486
    cells = {}
    for (tid, _), q in quotas.items():
        cell = {"a": "lp", "b": "lp", "c": "lq", "d": "vp"}[tid]
        cells[cell] = cells.get(cell, 0) + q
    assert max(cells.values()) - min(cells.values()) <= 1
    record = sum(q for (t, s), q in quotas.items() if t in "ab" and NOISE_SUBTYPES[s] == "record")
    value = sum(q for (t, s), q in quotas.items() if t in "ab" and NOISE_SUBTYPES[s] == "value")
    query = sum(q for (t, s), q in quotas.items() if t in "ab" and NOISE_SUBTYPES[s] == "query")
    assert max(record, value, query) - min(record, value, query) <= 1


def test_splits_are_deterministic_and_by_patient():
    assert 0 <= unit_hash("x", 1) < 1 and unit_hash("x", 1) == unit_hash("x", 1)
    fr = (0.7, 0.15, 0.15)
    a = split_of("patient", 10001, "labs.a", {"hadm_id": 1}, 0, fr)
    b = split_of("patient", 10001, "vitals.b", {"stay_id": 9}, 0, fr)
    assert a == b  # same patient, same split whatever the question
    counts = {s: 0 for s in ("train", "dev", "test")}
    for sid in range(2000):
        counts[split_of("patient", sid, "t", {}, 0, fr)] += 1
    assert 1200 < counts["train"] < 1600 and counts["dev"] > 200 and counts["test"] > 200
    held = ood_templates({"a.1": "labs", "a.2": "labs", "b.1": "vitals"}, 0, 1)
    assert len(held & {"a.1", "a.2"}) == 1 and "b.1" not in held  # a lone template is never held out


def test_templates_that_name_nothing_to_swap_get_no_out_of_scope_twin():
    oos = INJECTORS["out_of_scope"]
    for t in all_templates():
        names = bool(t.lexical) and any("{" + t.lexical + "}" in p for p in t.paraphrases)
        assert oos.applies(t) == (names and "out_of_scope" in t.noise), t.id
    assert sum(oos.applies(t) for t in all_templates()) >= 50


def test_out_of_scope_measurements_name_only_places_whose_records_the_database_cannot_hold():
    # labevents, microbiologyevents and omr hold the hospital's own outpatient results: a "primary care potassium"
    # or a "community clinic urine culture" may well be in the database, so an out-of-scope label would be wrong
    from ehrgym.bench.noise.scope import swap_phrases

    clinics = ("primary care", "community clinic", "urgent care")
    for kind in ("lab", "vital", "output", "specimen", "organism", "antibiotic"):
        for phrase in swap_phrases(kind, "X", at_clause_end=True):
            assert not any(c in phrase for c in clinics), (kind, phrase)
    # names keep the clean twin's spelling: only the qualifier differs
    assert all("Potassium" in p for p in swap_phrases("lab", "Potassium", False)[:5])


def test_susceptibility_twins_name_a_result_another_laboratory_or_an_intent_would_give():
    # "home vancomycin MIC", "planned vancomycin MIC" or "vancomycin taken before admission" name no susceptibility
    # result; a referring hospital's result or the MIC of a drug the team intended to switch to do
    from ehrgym.bench.noise.scope import linked_phrases, swap_phrases

    phrases = swap_phrases("antibiotic", "vancomycin", at_clause_end=True)
    phrases += linked_phrases("antibiotic", "vancomycin", True, ("home", "outside hospital", "hospice"))
    assert "outside hospital vancomycin" in phrases
    for bad in ("home", "planned", "intended", "recommended"):  # before the name: "planned vancomycin MIC"
        assert not any(re.search(rf"\b{bad}\b", p.split("vancomycin")[0]) for p in phrases if "vancomycin" in p), bad
    for bad in ("taken", "given"):
        assert not any(re.search(rf"\b{bad}\b", p) for p in phrases), (bad, phrases)


def test_cohort_sentences_tell_only_places_some_admission_of_the_cohort_has():
    from ehrgym.bench.context import (COHORT_ARRIVAL, COHORT_DEPARTURE, COHORT_SUBJECT, cohort_sentence,
                                      places_named)

    assert cohort_sentence([], 7) == ("", ())
    assert cohort_sentence([("EMERGENCY ROOM", "DIED"), (None, None)], 7) == ("", ())  # no place to name
    cohort = [("EMERGENCY ROOM", "HOME"), ("TRANSFER FROM HOSPITAL", "HOSPICE"), ("PHYSICIAN REFERRAL", "REHAB")]
    seen = set()
    for pick in range(0, 1 << 14, 37):
        sentence, places = cohort_sentence(cohort, pick)
        parts = sentence.removeprefix(COHORT_SUBJECT).removesuffix(".").split(", and some ")
        arrivals = [p for p, _ in COHORT_ARRIVAL["TRANSFER FROM HOSPITAL"]]
        departures = [p for code in ("HOME", "HOSPICE", "REHAB") for p, _ in COHORT_DEPARTURE[code]]
        assert sentence.startswith(COHORT_SUBJECT) and parts[0] in arrivals and parts[1] in departures, sentence
        assert places_named(sentence) == places and len(places) == 2
        seen.add(sentence)
        # a place is followed by a word, as in the twins that ask about it (not only ever by a full stop)
        for place in places:
            assert re.search(rf"\b{place} \w", sentence), sentence
    assert len(seen) >= 6  # the draw varies the wording and the departure named
    assert cohort_sentence(cohort, 0) == cohort_sentence(cohort, 0)


def test_population_questions_that_read_a_location_tell_no_cohort_course():
    from ehrgym.bench.context import cohort_eligible
    from ehrgym.bench.templates.registry import get_template

    assert cohort_eligible(get_template("labs.cohort_mean"))
    assert not cohort_eligible(get_template("encounters.cohort_post_acute_discharge_rate"))  # reads the discharge
    assert not cohort_eligible(get_template("encounters.cohort_transfer_in_mortality"))  # reads the arrival
    assert not cohort_eligible(get_template("diagnoses.cohort_mean_age"))  # evidence rows name no admission
    assert not cohort_eligible(get_template("labs.first_value_admission"))  # a patient question


def test_only_injectors_that_declare_reads_places_read_the_places_of_the_context():
    """The builder reads a question's context before injecting only for ``reads_places`` injectors
    (others get no places): a ``.places`` read anywhere else in the noise package would silently see none."""
    import ast
    import inspect

    import ehrgym.bench.noise as noise_pkg

    by_name = {type(inj).__name__: inj for inj in INJECTORS.values()}
    readers: set[str] = set()
    for path in sorted(Path(inspect.getfile(noise_pkg)).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                reads = any(isinstance(n, ast.Attribute) and n.attr == "places" and isinstance(n.ctx, ast.Load)
                            for n in ast.walk(node))
                if reads:
                    readers.add(node.name)
        outside = [n for n in tree.body if not isinstance(n, ast.ClassDef)
                   and any(isinstance(a, ast.Attribute) and a.attr == "places" for a in ast.walk(n))]
        assert not outside, f"{path.name}: a function outside an injector reads .places"
    assert readers <= set(by_name), readers - set(by_name)
    assert {n for n, inj in by_name.items() if inj.reads_places} == readers
    assert readers == {"OutOfScope"}


def test_every_place_a_context_names_is_followed_by_a_word():
    # "was discharged home." put "home" only ever before a full stop in clean twins and before a noun
    # ("home furosemide") in out-of-scope twins: the character n-gram "home " was the probe's strongest cue
    from ehrgym.bench.context import ARRIVAL, COHORT_ARRIVAL, COHORT_DEPARTURE, DEPARTURE

    for table in (ARRIVAL, DEPARTURE, COHORT_ARRIVAL, COHORT_DEPARTURE):
        for code, phrases in table.items():
            for phrase, place in phrases:
                if place is not None:
                    assert re.search(rf"\b{re.escape(place)} \w", phrase), (code, phrase)
    # and so is every place an out-of-scope twin names ("home furosemide", "… given by the hospice staff")
    from ehrgym.bench.noise.scope import LINKED_PLACES, linked_phrases

    for kind, places in LINKED_PLACES.items():
        for place in places:
            phrases = linked_phrases(kind, "X", True, (place,))
            assert phrases, (kind, place)
            for phrase in phrases:
                assert re.search(rf"\b{re.escape(place)} \w", phrase), (kind, phrase)


def test_out_of_scope_phrases_carry_no_hyphen_a_clean_question_lacks():
    # a hyphen is a word to a text reader; clean questions have them in dates and ranges only
    from ehrgym.bench.noise.scope import LINKED_PLACES, SWAPS, linked_phrases, swap_phrases

    for kind in SWAPS:
        for phrase in swap_phrases(kind, "X", at_clause_end=True):
            assert "-" not in phrase, (kind, phrase)
        places = tuple(p for p in LINKED_PLACES.get(kind, ()) if "-" not in p)
        for phrase in linked_phrases(kind, "X", True, places):
            assert "-" not in phrase, (kind, phrase)


def test_without_having_drops_only_the_outer_size_bound():
    from ehrgym.bench.noise.query import without_having

    sql = ("SELECT y, c FROM (SELECT y, c, count(*) AS n FROM t GROUP BY ALL HAVING count(*) > 0) "
           "GROUP BY ALL HAVING count(*) BETWEEN 2 AND 300")
    out = without_having(sql)
    assert "BETWEEN" not in out and "HAVING COUNT(*) > 0" in out.upper()
    assert without_having("SELECT 1 AS y") == "SELECT 1 AS y"


def test_moved_and_restored_times_keep_their_day_columns_on_their_day():
    """A culture keeps each time's day beside it (chartdate = charttime's day at midnight): a copy moved by part of a
    day, or re-stored 7 minutes later past midnight, must move the day too (no base row has another)."""
    from ehrgym.bench.noise.values import restamped, shift_times

    row = {"charttime": "2150-03-01 20:03:00", "chartdate": "2150-03-01 00:00:00",
           "storetime": "2150-03-02 23:58:00", "storedate": "2150-03-02 00:00:00", "org_name": None}
    moved = shift_times(row, "microbiologyevents", dt.timedelta(days=2, hours=5))
    assert moved["charttime"] == "2150-03-04 01:03:00" and moved["chartdate"] == "2150-03-04 00:00:00"
    assert moved["storedate"] == "2150-03-05 00:00:00"
    assert restamped(row, "storetime", dt.datetime(2150, 3, 3, 0, 5)) == {
        "storetime": "2150-03-03 00:05:00", "storedate": "2150-03-03 00:00:00"}
    assert restamped({"charttime": None}, "charttime", dt.datetime(2150, 3, 3)) == {"charttime": "2150-03-03 00:00:00"}
