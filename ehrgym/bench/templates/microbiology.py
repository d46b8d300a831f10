"""Microbiology questions (``microbiologyevents``): specimens, organisms, susceptibilities, MICs.

One row of ``microbiologyevents`` is one (specimen, organism, antibiotic) result; a negative
culture is one row without an organism. A specimen is identified by ``micro_specimen_id``, so
"how many cultures" counts distinct specimen ids — and a re-stored specimen copy (new id, same
collection time) really inflates a credulous count. Organism and antibiotic names are matched
in SQL (organisms through their concept, ``og.concept = {organism}``; susceptibility antibiotics in
lower case, ``lower(ab_name) = {antibiotic}``), so "E coli", "staph aureus" or "pip-tazo" break a
credulous agent's query. MICs carry value-level noise (decimal slips,
missing or text-only results such as ``"0,25"``).

Specimens are named as clinicians name them ("blood culture", "urine culture"): ``{specimen}`` is a
concept of ``ehrgym.bench.concepts`` (domain ``specimen``) matched on every ``spec_type_desc`` it
covers (aerobic/anaerobic and Myco/F lytic blood-culture bottles). Population questions count
specimens of hospital admissions only (MIMIC-IV also holds outpatient specimens with no
``hadm_id``) and say so in the question. MICs are censored dilutions ("<=0.5", "=>32"), so no
template averages them; the population statistic is the MIC50, the lowest tested dilution that
inhibits at least half of the isolates (a censored-high "=>" result never counts as inhibited).
"""

from __future__ import annotations

from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import relation
from ehrgym.bench.noise.lexicon import add_variants
from ehrgym.bench.templates.base import ADMISSION_WINDOW, Evidence, Premise, Template, TimeWindow
from ehrgym.bench.templates.concept_sql import culture_reported_predicate, organism_grown_predicate
from ehrgym.bench.templates.registry import register


# a row whose culture grew an organism ("CANCELLED" reports a test never done), and a row that reports a result
GREW = organism_grown_predicate("e")
REPORTED = culture_reported_predicate("e")

MicrobiologyTemplate = Template  # (an alias for importers: unpickling any Template imports the template modules)

COUNT = AnswerSpec("integer")
RATE = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
MIC = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005)
WHEN = AnswerSpec("datetime")
NAMES = AnswerSpec("set")
NAME = AnswerSpec("string")
YES_NO = AnswerSpec("boolean")

MIC_BOUNDS = (0.001, 1024.0)  # µg/mL: broth-dilution panels span about 0.002-1024
SPEC_JOIN = "JOIN " + relation("specimen") + " sp(concept, spec_type_desc) ON sp.spec_type_desc = e.spec_type_desc"
# cultures that grow organisms with susceptibility panels
# organisms as clinicians name them ("Staphylococcus aureus" = STAPH AUREUS COAG + …), domain ``organism``
ORG_JOIN = "JOIN " + relation("organism") + " og(concept, org_name) ON og.org_name = e.org_name"
GROWTH_SPECIMENS = "sp.concept IN ('blood culture', 'urine culture', 'sputum culture', 'bronchoalveolar lavage culture')"

# One row per result: specimen, test, organism (isolate) and antibiotic identify it; a re-stored copy
# keeps them and only gets a new event id and a later store time.
RESULT_KEY = ("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid")
# Questions that count specimens renumber the specimen id of a copy, so they identify a result by
# what was collected when instead.
COLLECTED_KEY = ("hadm_id", "spec_itemid", "charttime", "test_itemid", "org_itemid", "isolate_num", "ab_itemid")
MICRO: dict[str, Any] = dict(table="microbiologyevents", key=RESULT_KEY, time_col="charttime", window=ADMISSION_WINDOW,
             store_col="storetime")
MICRO_SPECIMENS = {**MICRO, "key": COLLECTED_KEY}

# misspellings and abbreviations people write for susceptibility-panel antibiotics (organisms and specimens
# are concepts: their variants live in ehrgym.bench.concepts)
MICRO_VARIANTS: dict[str, tuple[str, ...]] = {
    # antibiotics (susceptibility panel names)
    "VANCOMYCIN": ("vancomicin", "vanco", "vanc"),
    "PIPERACILLIN/TAZO": ("pip-tazo", "pip/tazo", "Zosyn"),
    "TRIMETHOPRIM/SULFA": ("Bactrim", "TMP-SMX", "co-trimoxazole"),
    "CIPROFLOXACIN": ("cipro", "ciprofloxacine", "ciprofloxacin HCl"),
    "LEVOFLOXACIN": ("levo", "Levaquin", "levofloxacine"),
    "CEFTRIAXONE": ("ceftriaxon", "Rocephin", "ceftriaxzone"),
    "CEFTAZIDIME": ("ceftaz", "Fortaz", "ceftazadime"),
    "CEFEPIME": ("cefepim", "Maxipime", "cefapime"),
    "CEFAZOLIN": ("Ancef", "cephazolin", "cefazoline"),
    "MEROPENEM": ("meropenum", "Merrem", "meropenam"),
    "AMPICILLIN": ("ampicilin", "amp", "ampicillen"),
    "AMPICILLIN/SULBACTAM": ("Unasyn", "amp-sulbactam", "ampicillin sulbactam"),
    "GENTAMICIN": ("gent", "gentamycin", "gentamicine"),
    "TOBRAMYCIN": ("tobra", "tobramycine", "tobramicin"),
    "AMIKACIN": ("amikacine", "amikacyn"),
    "NITROFURANTOIN": ("Macrobid", "nitrofurantion", "nitrofurantoine"),
    "OXACILLIN": ("oxacilin", "oxa", "oxacillin (methicillin)"),
    "CLINDAMYCIN": ("clinda", "clindamycine", "Cleocin"),
    "ERYTHROMYCIN": ("erythromicin", "erythro", "erythromycine"),
    "TETRACYCLINE": ("tetracyclin", "tetra", "tetracycine"),
    "RIFAMPIN": ("rifampicin", "rifampin (RIF)", "rifampine"),
    "LINEZOLID": ("Zyvox", "linezolide", "linezolid (LZD)"),
    "PENICILLIN G": ("pen G", "penicillin", "benzylpenicillin"),
}
for _name, _forms in MICRO_VARIANTS.items():
    add_variants(_name, *_forms)

DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
YEAR_WINDOW = TimeWindow(DATABASE_SCOPE, year="year")

# specimen kinds a question may wrongly presuppose: those of the database the admission never sent
SPECIMEN_PREMISE = Premise("specimen", "specimen", f"""
SELECT DISTINCT sp.concept, sp.concept FROM mimiciv_hosp.microbiologyevents e {SPEC_JOIN}
WHERE sp.concept NOT IN (
    SELECT sp.concept FROM mimiciv_hosp.microbiologyevents e {SPEC_JOIN} WHERE e.hadm_id = {{hadm_id}})
ORDER BY 1""")

# admissions × specimen kind with at least one organism grown
GROWTH_SAMPLER = f"""SELECT e.subject_id, e.hadm_id, sp.concept AS specimen
FROM mimiciv_hosp.microbiologyevents e
{SPEC_JOIN}
WHERE {GROWTH_SPECIMENS} AND e.hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) FILTER (WHERE {GREW}) >= 1"""
# a listed answer must read back unambiguously: no organism name with a comma in the set
GROWTH_SET_SAMPLER = GROWTH_SAMPLER + " AND count(*) FILTER (WHERE e.org_name LIKE '%,%') = 0"

SPECIMEN_ROWS = "e.hadm_id = {hadm_id} AND sp.concept = {specimen}"

# ---------------------------------------------------------------- patient level

register(
    Template(
        id="microbiology.organisms_grown", intent="microbiology", level="patient",
        paraphrases=(
            "Which organisms grew in the {specimen} specimens of patient {subject_id} during admission {hadm_id}?",
            "List the organisms isolated from the {specimen} specimens of patient {subject_id} in hospital "
            "admission {hadm_id}.",
            "Patient {subject_id}, admission {hadm_id}: what grew in the {specimen} specimens?",
        ),
        sampler_sql=GROWTH_SET_SAMPLER,
        gold_sql="""SELECT DISTINCT e.org_name
FROM {microbiologyevents} e
""" + SPEC_JOIN + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND sp.concept = {specimen} AND """ + GREW + """
ORDER BY e.org_name""",
        answer=NAMES,
        # every culture of that type (negatives included): without them growth cannot be judged at all
        evidence=Evidence(**MICRO, join=SPEC_JOIN, where=SPECIMEN_ROWS, id_col="microevent_id",
                          category_col="org_name", focus="first"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "nonexistent_entity", "false_premise",
               "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="specimen", premise=SPECIMEN_PREMISE,
        description="organisms grown in the cultures of one specimen type in an admission",
    ),
    Template(
        id="microbiology.first_positive_time", intent="microbiology", level="patient",
        paraphrases=(
            "When was the first {specimen} specimen that grew an organism collected from patient {subject_id} "
            "during admission {hadm_id}?",
            "At what time was the earliest positive {specimen} specimen of patient {subject_id} in admission "
            "{hadm_id} drawn?",
            "Patient {subject_id}, hospital admission {hadm_id}: collection time of the first {specimen} specimen "
            "with growth?",
        ),
        sampler_sql=GROWTH_SAMPLER,
        gold_sql="""SELECT min(e.charttime)
FROM {microbiologyevents} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
""" + SPEC_JOIN + """
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
  AND sp.concept = {specimen} AND """ + GREW,
        answer=WHEN,
        evidence=Evidence(**MICRO, join=SPEC_JOIN, where=SPECIMEN_ROWS, id_col="microevent_id",
                          category_col="org_name", focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="subject_id", lexical="specimen", premise=SPECIMEN_PREMISE,
        description="collection time of the first positive culture",
    ),
    Template(
        id="microbiology.resistant_antibiotics", intent="microbiology", level="patient",
        paraphrases=(
            "To which antibiotics was the {organism} isolated from patient {subject_id} during admission {hadm_id} "
            "resistant?",
            "List the antibiotics reported as resistant (R) for {organism} in admission {hadm_id} of patient "
            "{subject_id}.",
            "Patient {subject_id}, admission {hadm_id}: which antibiotics did the {organism} isolate resist?",
        ),
        sampler_sql=f"""SELECT e.subject_id, e.hadm_id, og.concept AS organism
FROM mimiciv_hosp.microbiologyevents e
{ORG_JOIN}
WHERE e.ab_name IS NOT NULL AND e.hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) FILTER (WHERE e.interpretation = 'R') >= 1""",
        gold_sql="""SELECT DISTINCT lower(e.ab_name)
FROM {microbiologyevents} e
""" + ORG_JOIN + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND og.concept = {organism} AND e.interpretation = 'R'
ORDER BY 1""",
        answer=NAMES,
        evidence=Evidence(**MICRO, join=ORG_JOIN,
                          where="e.hadm_id = {hadm_id} AND og.concept = {organism} AND e.ab_name IS NOT NULL",
                          id_col="microevent_id", category_col="interpretation", focus="first"),
        # (no out_of_window: a misplaced copy changes the set only when it happens to flip an S to R)
        noise=("missing_evidence", "conflicting_records", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="hadm_id", lexical="organism",
        premise=Premise("organism", "organism", f"""
SELECT DISTINCT og.concept, og.concept FROM mimiciv_hosp.microbiologyevents e {ORG_JOIN}
WHERE e.ab_name IS NOT NULL AND og.concept NOT IN (
    SELECT og.concept FROM mimiciv_hosp.microbiologyevents e {ORG_JOIN} WHERE e.hadm_id = {{hadm_id}})
ORDER BY 1"""),
        description="antibiotics an isolate was resistant to",
    ),
    Template(
        id="microbiology.count_cultures", intent="microbiology", level="patient",
        paraphrases=(
            "How many {specimen} specimens were sent from patient {subject_id} during admission {hadm_id}?",
            "Count the {specimen} specimens (distinct specimens) of patient {subject_id} in hospital admission "
            "{hadm_id}.",
            "Patient {subject_id}, admission {hadm_id}: how many {specimen} specimens were collected?",
        ),
        sampler_sql=f"""SELECT DISTINCT e.subject_id, e.hadm_id, sp.concept AS specimen
FROM mimiciv_hosp.microbiologyevents e
{SPEC_JOIN}
WHERE e.hadm_id IS NOT NULL""",
        gold_sql="""SELECT count(DISTINCT e.micro_specimen_id)
FROM {microbiologyevents} e
""" + SPEC_JOIN + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND sp.concept = {specimen}""",
        answer=COUNT,
        evidence=Evidence(**MICRO_SPECIMENS, join=SPEC_JOIN, where=SPECIMEN_ROWS, id_col="micro_specimen_id"),
        noise=("duplicate_records", "out_of_window", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="specimen", description="number of cultures of one specimen type",
    ),
    Template(
        id="microbiology.organism_isolated", intent="microbiology", level="patient",
        paraphrases=(
            "Was {organism} isolated from any culture of patient {subject_id} during admission {hadm_id}?",
            "Did any culture of patient {subject_id} in hospital admission {hadm_id} grow {organism}? "
            "Answer yes or no.",
            "Yes or no: was {organism} found in patient {subject_id}'s cultures during admission {hadm_id}?",
        ),
        # about as many 'no' as 'yes': every organism an admission grew, plus one organism commonly grown
        # elsewhere that it did not grow (however long the database's organism list is)
        sampler_sql=f"""
WITH adm AS (SELECT DISTINCT subject_id, hadm_id FROM mimiciv_hosp.microbiologyevents WHERE hadm_id IS NOT NULL),
grown AS (SELECT DISTINCT e.hadm_id, og.concept AS organism FROM mimiciv_hosp.microbiologyevents e {ORG_JOIN}),
orgs AS (SELECT organism FROM grown GROUP BY organism HAVING count(*) >= 3),
absent AS (
    SELECT a.subject_id, a.hadm_id, o.organism,
           row_number() OVER (PARTITION BY a.hadm_id ORDER BY hash(a.hadm_id, o.organism), o.organism) AS pick
    FROM adm a CROSS JOIN orgs o
    LEFT JOIN grown g ON g.hadm_id = a.hadm_id AND g.organism = o.organism
    WHERE g.hadm_id IS NULL)
SELECT a.subject_id, g.hadm_id, g.organism FROM grown g JOIN adm a ON a.hadm_id = g.hadm_id
UNION ALL
SELECT subject_id, hadm_id, organism FROM absent WHERE pick = 1""",
        gold_sql="""SELECT count(*) > 0
FROM {microbiologyevents} e
""" + ORG_JOIN + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND og.concept = {organism}""",
        answer=YES_NO,
        # the admission's whole culture record: without it, "not isolated" cannot be told from "not cultured"
        evidence=Evidence(**MICRO, where="e.hadm_id = {hadm_id}", id_col="microevent_id"),
        noise=("missing_evidence", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="organism", description="whether an organism was isolated (yes/no)",
    ),
    Template(
        id="microbiology.mic_value", intent="microbiology", level="patient",
        paraphrases=(
            "What MIC (µg/mL) of {antibiotic} was reported for the {organism} isolate of patient {subject_id} in "
            "admission {hadm_id}?",
            "For patient {subject_id}'s {organism} in hospital admission {hadm_id}, what was the {antibiotic} MIC?",
            "Patient {subject_id}, admission {hadm_id}: minimum inhibitory concentration of {antibiotic} against "
            "{organism}?",
        ),
        sampler_sql=f"""SELECT e.subject_id, e.hadm_id, og.concept AS organism, lower(e.ab_name) AS antibiotic
FROM mimiciv_hosp.microbiologyevents e
{ORG_JOIN}
WHERE e.ab_name IS NOT NULL AND e.dilution_value IS NOT NULL AND e.hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) = 1""",
        gold_sql="""SELECT e.dilution_value
FROM {microbiologyevents} e
""" + ORG_JOIN + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND og.concept = {organism} AND lower(e.ab_name) = {antibiotic}
ORDER BY e.dilution_value""",
        answer=MIC,
        evidence=Evidence(**MICRO, join=ORG_JOIN,
                          where="e.hadm_id = {hadm_id} AND og.concept = {organism} AND lower(e.ab_name) = {antibiotic}",
                          id_col="microevent_id", value_col="dilution_value", text_col="dilution_text",
                          bounds=MIC_BOUNDS, aggregate=False),
        noise=("missing_evidence", "conflicting_records", "implausible_value", "missing_value",
               "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="antibiotic",
        premise=Premise("antibiotic", "antibiotic", f"""
SELECT DISTINCT lower(ab_name), lower(ab_name) FROM mimiciv_hosp.microbiologyevents
WHERE ab_name IS NOT NULL AND lower(ab_name) NOT IN (
    SELECT lower(e.ab_name) FROM mimiciv_hosp.microbiologyevents e {ORG_JOIN}
    WHERE e.hadm_id = {{hadm_id}} AND og.concept = {{organism}} AND e.ab_name IS NOT NULL)
ORDER BY 1"""),
        description="MIC of an antibiotic for an isolate",
    ),
)

# ---------------------------------------------------------------- population level

# population questions are about cultures of hospital admissions (MIMIC-IV also holds outpatient ones)
IN_YEAR = "e.hadm_id IS NOT NULL AND extract(year FROM e.charttime) = {year}"

register(
    Template(
        id="microbiology.cohort_top_organism", intent="microbiology", level="population",
        paraphrases=(
            "Which organism was isolated most often from {specimen} specimens collected during hospital admissions "
            "in {year}?",
            "Among {specimen} specimens drawn from hospitalised patients in {year}, what was the most common organism "
            "(by number of specimens)?",
            "What organism grew in the largest number of inpatient {specimen} specimens in {year}?",
        ),
        sampler_sql=f"""SELECT year, specimen FROM (
  SELECT year, specimen, n, max(n) OVER (PARTITION BY year, specimen) AS top FROM (
    SELECT extract(year FROM e.charttime) AS year, sp.concept AS specimen, e.org_name,
           count(DISTINCT e.micro_specimen_id) AS n
    FROM mimiciv_hosp.microbiologyevents e
    {SPEC_JOIN}
    WHERE e.hadm_id IS NOT NULL AND {GREW} AND {GROWTH_SPECIMENS}
    GROUP BY ALL))
GROUP BY year, specimen
HAVING count(*) FILTER (WHERE n = top) = 1 AND sum(n) >= 2""",
        gold_sql="""WITH per_org AS (
  SELECT e.org_name, count(DISTINCT e.micro_specimen_id) AS n
  FROM {microbiologyevents} e
  """ + SPEC_JOIN + """
  WHERE e.hadm_id IS NOT NULL AND sp.concept = {specimen} AND extract(year FROM e.charttime) = {year}
    AND """ + GREW + """
  GROUP BY e.org_name
)
SELECT org_name FROM per_org WHERE n = (SELECT max(n) FROM per_org) ORDER BY org_name""",
        answer=NAME,  # the sampler keeps (year, specimen) with a single most frequent organism
        evidence=Evidence(**MICRO_SPECIMENS, join=SPEC_JOIN,
                          where="sp.concept = {specimen} AND " + GREW + " AND " + IN_YEAR,
                          id_col="micro_specimen_id", category_col="org_name"),
        noise=("missing_evidence", "conflicting_records", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="specimen", time_window=YEAR_WINDOW,
        description="most frequent organism of a specimen type in a year",
    ),
    Template(
        id="microbiology.cohort_resistance_rate", intent="microbiology", level="population",
        paraphrases=(
            "Of the {organism} isolates from {specimen} specimens of hospital admissions tested against {antibiotic}, "
            "what percentage were resistant?",
            "What was the resistance rate (%) of {organism} to {antibiotic} among inpatient {specimen} isolates?",
            "Among {specimen} isolates of {organism} collected during hospital admissions with a {antibiotic} result, "
            "what percent were reported resistant?",
        ),
        sampler_sql=f"""SELECT sp.concept AS specimen, og.concept AS organism, lower(e.ab_name) AS antibiotic
FROM mimiciv_hosp.microbiologyevents e
{SPEC_JOIN}
{ORG_JOIN}
WHERE e.hadm_id IS NOT NULL AND e.ab_name IS NOT NULL AND {GROWTH_SPECIMENS}
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 400 AND count(*) FILTER (WHERE e.interpretation = 'R') BETWEEN 1 AND count(*) - 1""",
        gold_sql="""SELECT 100.0 * count(*) FILTER (WHERE e.interpretation = 'R') / count(*)
FROM {microbiologyevents} e
""" + SPEC_JOIN + """
""" + ORG_JOIN + """
WHERE e.hadm_id IS NOT NULL AND sp.concept = {specimen} AND og.concept = {organism}
  AND lower(e.ab_name) = {antibiotic}""",
        answer=RATE,
        evidence=Evidence(**MICRO, join=SPEC_JOIN + " " + ORG_JOIN,
                          where="e.hadm_id IS NOT NULL AND sp.concept = {specimen} "
                                "AND og.concept = {organism} AND lower(e.ab_name) = {antibiotic}",
                          id_col="microevent_id", category_col="interpretation"),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "lexical_variation",
               "out_of_scope"),
        lexical="organism", description="resistance rate of an organism to an antibiotic",
    ),
    Template(
        id="microbiology.cohort_positivity_rate", intent="microbiology", level="population",
        paraphrases=(
            "What percentage of the {specimen} specimens collected during hospital admissions in {year} grew at least "
            "one organism?",
            "In {year}, what share (%) of inpatient {specimen} specimens were positive?",
            "Positivity rate (%) of {specimen} specimens drawn from hospitalised patients in {year}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM e.charttime) AS year, sp.concept AS specimen
FROM mimiciv_hosp.microbiologyevents e
{SPEC_JOIN}
WHERE e.hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(DISTINCT e.micro_specimen_id) >= 2 AND count(*) <= 400
   AND count(*) FILTER (WHERE {GREW}) >= 1 AND count(*) FILTER (WHERE e.org_name IS NULL) >= 1""",
        # a cancelled test is neither a positive nor a negative specimen
        gold_sql="""SELECT 100.0 * count(DISTINCT e.micro_specimen_id) FILTER (WHERE """ + GREW + """)
       / count(DISTINCT e.micro_specimen_id)
FROM {microbiologyevents} e
""" + SPEC_JOIN + """
WHERE e.hadm_id IS NOT NULL AND sp.concept = {specimen} AND extract(year FROM e.charttime) = {year}
  AND """ + REPORTED,
        answer=RATE,
        evidence=Evidence(**MICRO_SPECIMENS, join=SPEC_JOIN, where="sp.concept = {specimen} AND " + IN_YEAR,
                          id_col="micro_specimen_id",
                          category_col="org_name"),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "temporal_mismatch",
               "lexical_variation", "out_of_scope"),
        lexical="specimen", time_window=YEAR_WINDOW, description="positivity rate of a culture type in a year",
    ),
    Template(
        id="microbiology.cohort_count_isolates", intent="microbiology", level="population",
        paraphrases=(
            "How many specimens collected during hospital admissions in {year} grew {organism}?",
            "In {year}, how many inpatient {organism} isolates (distinct specimens) were reported?",
            "Count the specimens drawn from hospitalised patients in {year} from which {organism} was isolated.",
        ),
        sampler_sql=f"""SELECT extract(year FROM e.charttime) AS year, og.concept AS organism
FROM mimiciv_hosp.microbiologyevents e
{ORG_JOIN}
WHERE e.hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) <= 400""",
        gold_sql="""SELECT count(DISTINCT e.micro_specimen_id)
FROM {microbiologyevents} e
""" + ORG_JOIN + """
WHERE e.hadm_id IS NOT NULL AND og.concept = {organism} AND extract(year FROM e.charttime) = {year}""",
        answer=COUNT,
        evidence=Evidence(**MICRO_SPECIMENS, join=ORG_JOIN, where="og.concept = {organism} AND " + IN_YEAR,
                          id_col="micro_specimen_id"),
        noise=("duplicate_records", "out_of_window", "lexical_variation", "out_of_scope"),
        lexical="organism", time_window=YEAR_WINDOW, description="number of isolates of an organism in a year",
    ),
    Template(
        id="microbiology.cohort_mic50", intent="microbiology", level="population",
        paraphrases=(
            "What was the MIC50 (µg/mL) of {antibiotic} for {organism} isolates from {specimen} specimens of "
            "hospital admissions (the lowest tested concentration inhibiting at least half of the isolates)?",
            "For inpatient {specimen} isolates of {organism}, what {antibiotic} MIC inhibited at least 50 % of them "
            "(MIC50, µg/mL)?",
            "Across {organism} isolates from {specimen} specimens of hospitalised patients, what was the {antibiotic} "
            "MIC50 — the lowest dilution at or below which half of the isolates' MICs lie?",
        ),
        sampler_sql=f"""SELECT sp.concept AS specimen, og.concept AS organism, lower(e.ab_name) AS antibiotic
FROM mimiciv_hosp.microbiologyevents e
{SPEC_JOIN}
{ORG_JOIN}
WHERE e.hadm_id IS NOT NULL AND e.ab_name IS NOT NULL AND e.dilution_value IS NOT NULL
  AND {GROWTH_SPECIMENS}
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 400 AND count(DISTINCT e.dilution_value) >= 2
  -- a finite MIC50: at least half the isolates were inhibited at some tested dilution (not all "=>")
  AND 2 * count(*) FILTER (WHERE trim(coalesce(e.dilution_comparison, '=')) <> '=>') >= count(*)""",
        # "<=0.5" is inhibited at 0.5 and above; "=>32" is never known to be inhibited
        gold_sql="""WITH iso AS (
  SELECT e.dilution_value AS mic, trim(coalesce(e.dilution_comparison, '=')) AS cmp
  FROM {microbiologyevents} e
  """ + SPEC_JOIN + """
  """ + ORG_JOIN + """
  WHERE e.hadm_id IS NOT NULL AND sp.concept = {specimen} AND og.concept = {organism}
    AND lower(e.ab_name) = {antibiotic} AND e.dilution_value IS NOT NULL
), steps AS (
  SELECT DISTINCT mic FROM iso
)
SELECT min(s.mic)
FROM steps s
WHERE 2 * (SELECT count(*) FROM iso i WHERE i.mic <= s.mic AND i.cmp <> '=>') >= (SELECT count(*) FROM iso)""",
        answer=MIC,
        # the isolates tested by dilution, as the gold reads them: a susceptibility reported without an MIC (an
        # interpretation only) is not an isolate of this statistic, and counting it as a natural missing value left
        # no eligible cohort on 10k patients (105 of 105 held one; 90 of 133 on 1k, 2 of 30 on the demo)
        evidence=Evidence(**MICRO, join=SPEC_JOIN + " " + ORG_JOIN,
                          where="e.hadm_id IS NOT NULL AND sp.concept = {specimen} "
                                "AND og.concept = {organism} AND lower(e.ab_name) = {antibiotic} "
                                "AND e.dilution_value IS NOT NULL",
                          id_col="microevent_id", value_col="dilution_value", text_col="dilution_text",
                          bounds=MIC_BOUNDS),
        # (a median-type statistic: one duplicated, corrupted or implausible row rarely moves it, so those
        # subtypes would give no trap)
        noise=("missing_evidence", "out_of_window", "conflicting_records", "lexical_variation", "out_of_scope"),
        lexical="antibiotic", description="MIC50 of an antibiotic for an organism (censored dilutions handled)",
    ),
    Template(
        id="microbiology.cohort_max_mic", intent="microbiology", level="population",
        paraphrases=(
            "What was the highest {antibiotic} MIC (µg/mL) reported for {organism} isolates from specimens "
            "collected during hospital admissions in {year}?",
            "Among inpatient {organism} isolates of {year}, what maximum minimum inhibitory concentration of "
            "{antibiotic} was reported?",
            "In {year}, what was the largest {antibiotic} MIC reported on any {organism} isolate of a hospitalised "
            "patient?",
        ),
        # a single isolate holds the maximum (MICs are discrete dilutions: ties are common)
        sampler_sql=f"""SELECT year, organism, antibiotic FROM (
  SELECT extract(year FROM e.charttime) AS year, og.concept AS organism, lower(e.ab_name) AS antibiotic,
         e.dilution_value,
         max(e.dilution_value) OVER (PARTITION BY extract(year FROM e.charttime), og.concept, lower(e.ab_name)) AS top
  FROM mimiciv_hosp.microbiologyevents e
  {ORG_JOIN}
  WHERE e.hadm_id IS NOT NULL AND e.ab_name IS NOT NULL AND e.dilution_value IS NOT NULL)
GROUP BY year, organism, antibiotic
HAVING count(*) BETWEEN 2 AND 400 AND count(*) FILTER (WHERE dilution_value = top) = 1""",
        gold_sql="""SELECT max(e.dilution_value)
FROM {microbiologyevents} e
""" + ORG_JOIN + """
WHERE e.hadm_id IS NOT NULL AND og.concept = {organism} AND lower(e.ab_name) = {antibiotic}
  AND extract(year FROM e.charttime) = {year}""",
        answer=MIC,
        evidence=Evidence(**MICRO, join=ORG_JOIN,
                          where="og.concept = {organism} AND lower(e.ab_name) = {antibiotic} AND " + IN_YEAR,
                          id_col="microevent_id", value_col="dilution_value", text_col="dilution_text",
                          bounds=MIC_BOUNDS, focus="max"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "implausible_value",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="antibiotic", time_window=YEAR_WINDOW, description="highest MIC of an antibiotic for an organism",
    ),
)
