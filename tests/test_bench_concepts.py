"""The concept registry, and that questions name concepts rather than database strings."""

from __future__ import annotations

import duckdb
import pytest

from ehrgym.bench.concepts import DOMAINS, Concept, concepts, define, get_concept, relation
from ehrgym.errors import BenchmarkError

# domains whose members must belong to one concept only (a member in two concepts would be counted twice
# by "distinct agents" or make two names mean the same rows); item domains nest on purpose
# ("urine output" ⊃ "Foley catheter urine output")
EXCLUSIVE = ("drug", "antibiotic", "admission_type", "careunit", "specimen", "organism", "lab", "vital", "infusion",
             "disposition")


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_relation_is_valid_sql_with_one_row_per_member(domain):
    rows = duckdb.connect().execute(f"SELECT * FROM {relation(domain)}").fetchall()
    members = sum(len(c.itemids) + len(c.values) + len(c.icd) for c in concepts(domain))
    assert len(rows) == members and {r[0] for r in rows} == {c.name for c in concepts(domain)}


@pytest.mark.parametrize("domain", EXCLUSIVE)
def test_members_belong_to_one_concept(domain):
    seen: dict[object, str] = {}
    for c in concepts(domain):
        for member in c.itemids or c.values:
            assert seen.setdefault(member, c.name) == c.name, (domain, member, seen[member], c.name)


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_no_variant_is_another_concepts_name(domain):
    """A lexical variant that named another concept would make the credulous query find other rows."""
    names = {c.name.casefold() for c in concepts(domain)}
    for c in concepts(domain):
        assert not [v for v in c.variants if v.casefold() in names], c.name


def test_every_concept_records_its_source():
    for domain in DOMAINS:
        for c in concepts(domain):
            assert c.source and len(c.source) > 20, (domain, c.name)


def test_definitions_are_validated():
    with pytest.raises(BenchmarkError, match="unknown domain"):
        Concept("labz", "x", "src", itemids=(1,))
    with pytest.raises(BenchmarkError, match="exactly one"):
        Concept("lab", "x", "src", itemids=(1,), values=("a",))
    with pytest.raises(BenchmarkError, match="lower-case"):
        Concept("drug", "x", "src", values=("CefTRIAXone",))
    with pytest.raises(BenchmarkError, match="only differ"):
        Concept("lab", "INR", "src", itemids=(1,), variants=("inr",))
    with pytest.raises(BenchmarkError, match="braces or quotes"):
        Concept("admission_type", "o'brien", "src", values=("X",))
    with pytest.raises(BenchmarkError, match="defined twice"):
        define(Concept("lab", "Serum Potassium", "another source", itemids=(1,)))
    with pytest.raises(BenchmarkError, match="no concept"):
        get_concept("lab", "potassium please")


def test_known_bugs_stay_fixed():
    """The definitions behind the demo bugs the concepts were introduced for."""
    assert get_concept("lab", "blood gas pH").itemids == (50820,)  # not urine pH 51491/51094
    assert "ceftriaxone" in get_concept("antibiotic", "ceftriaxone").values  # every case spelling via lower()
    cipro = get_concept("antibiotic", "ciprofloxacin").values
    assert {"ciprofloxacin hcl", "ciprofloxacin iv"} <= set(cipro)
    agents = {c.name for c in concepts("antibiotic")}
    assert {"cefazolin", "metronidazole"} <= agents
    assert set(get_concept("admission_type", "emergency").values) == {"EW EMER.", "DIRECT EMER."}


# ---------------------------------------------------------------- questions speak clinically

NAMED_PARAMS = {"label": ("lab", "vital", "urine", "infusion"), "drug": ("drug", "antibiotic"),
                "admission_type": ("admission_type",), "first_careunit": ("careunit",), "careunit": ("careunit",),
                "specimen": ("specimen",), "organism": ("organism",), "title": ("diagnosis",),
                "cohort": ("diagnosis",)}
# parameters still named by their dictionary text (procedure titles, DRG descriptions)
DICTIONARY_NAMED = {"diagnoses.procedure_day": "title", "diagnoses.cohort_mean_apr_severity": "description"}


@pytest.fixture(scope="module")
def drawn(synth_db):
    from ehrgym.bench.builder import Builder
    from ehrgym.bench.configs import get_config
    from ehrgym.bench.templates import all_templates

    b = Builder(synth_db, get_config("small"), seed=3, progress=False)
    for t in all_templates():
        b._draw(t, 8)
    yield b
    b.close()


def test_questions_name_concepts_not_database_strings(drawn):
    from ehrgym.bench.templates import all_templates

    checked = 0
    for t in all_templates():
        for c in drawn.candidates.get(t.id, [])[:8]:
            for param, domains in NAMED_PARAMS.items():
                if param not in c.params or DICTIONARY_NAMED.get(t.id) == param:
                    continue
                names = {x.name for d in domains for x in concepts(d)}
                assert c.params[param] in names, (t.id, param, c.params[param])
                checked += 1
    assert checked >= 200
