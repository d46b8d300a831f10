"""Microbiology questions (``microbiologyevents``): specimens, organisms, susceptibilities, MICs.

One row of ``microbiologyevents`` is one (specimen, organism, antibiotic) result; a negative
culture is one row without an organism. A specimen is identified by ``micro_specimen_id``, so
"how many cultures" counts distinct specimen ids — and a re-stored specimen copy (new id, same
collection time) really inflates a credulous count. Organism and antibiotic names are matched
in SQL (``org_name = {organism}``, ``ab_name = {antibiotic}``), so "E coli", "staph aureus" or
"pip-tazo" break a credulous agent's query. MICs carry value-level noise (decimal slips,
missing or text-only results such as ``"0,25"``).
"""

from __future__ import annotations

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.noise.lexicon import add_variants
from ehrgym.bench.templates.base import ADMISSION_WINDOW, Evidence, Premise, Template, TimeWindow
from ehrgym.bench.templates.registry import register


class MicrobiologyTemplate(Template):
    """A template of this module. Unpickling one (build worker processes receive pickled templates)
    imports this module, so the curated names (lexicon) registered here at import time exist there too."""

COUNT = AnswerSpec("integer")
RATE = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
MIC = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005)
WHEN = AnswerSpec("datetime")
NAMES = AnswerSpec("set")
NAME = AnswerSpec("string")
YES_NO = AnswerSpec("boolean")

MIC_BOUNDS = (0.001, 1024.0)  # µg/mL: broth-dilution panels span about 0.002-1024
SPECIMENS = ("BLOOD CULTURE", "URINE", "SPUTUM")  # cultures with organisms and susceptibilities
SPECIMENS_SQL = ", ".join(f"'{s}'" for s in SPECIMENS)

# One row per result: specimen, test, organism (isolate) and antibiotic identify it; a re-stored copy
# keeps them and only gets a new event id and a later store time.
RESULT_KEY = ("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid")
# Questions that count specimens renumber the specimen id of a copy, so they identify a result by
# what was collected when instead.
COLLECTED_KEY = ("hadm_id", "spec_itemid", "charttime", "test_itemid", "org_itemid", "isolate_num", "ab_itemid")
MICRO = dict(table="microbiologyevents", key=RESULT_KEY, time_col="charttime", window=ADMISSION_WINDOW,
             store_col="storetime")
MICRO_SPECIMENS = {**MICRO, "key": COLLECTED_KEY}

# misspellings and abbreviations people write (names shared with another module use the same forms,
# so the lexicon does not depend on which modules a process imported)
MICRO_VARIANTS: dict[str, tuple[str, ...]] = {
    # organisms
    "ESCHERICHIA COLI": ("E coli", "E. coli", "Escherichia coly"),
    "STAPH AUREUS COAG +": ("staph aureus", "S. aureus", "Staphylococcus aureus"),
    "KLEBSIELLA PNEUMONIAE": ("Klebsiella", "K. pneumoniae", "klebsiela pneumoniae"),
    "PSEUDOMONAS AERUGINOSA": ("Pseudomonas", "P. aeruginosa", "pseudomonas aeroginosa"),
    "PROTEUS MIRABILIS": ("Proteus", "P. mirabilis", "proteus mirabilus"),
    "ENTEROCOCCUS SP.": ("Enterococcus", "enterococus species", "enterococci"),
    "STAPHYLOCOCCUS, COAGULASE NEGATIVE": ("CoNS", "coag-negative staph", "coagulase negative staphylococcus"),
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
    # specimens
    "BLOOD CULTURE": ("blood cx", "bld culture", "blood cultures"),
    "URINE": ("urine cx", "urine culture", "UA culture"),
    "SPUTUM": ("sputum cx", "sputim", "sputum culture"),
    "MRSA SCREEN": ("MRSA swab", "MRSA nasal screen", "mrsa screening"),
}
for _name, _forms in MICRO_VARIANTS.items():
    add_variants(_name, *_forms)

DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
YEAR_WINDOW = TimeWindow(DATABASE_SCOPE, year="year")

# specimen types a question may wrongly presuppose (those present in the database are used)
PREMISE_SPECIMENS_SQL = ", ".join(f"'{s}'" for s in SPECIMENS + (
    "MRSA SCREEN", "STOOL", "CSF;SPINAL FLUID", "PLEURAL FLUID", "BRONCHOALVEOLAR LAVAGE", "CATHETER TIP-IV", "SWAB"))
SPECIMEN_PREMISE = Premise("specimen", "specimen", f"""
SELECT DISTINCT spec_type_desc, spec_type_desc FROM mimiciv_hosp.microbiologyevents
WHERE spec_type_desc IN ({PREMISE_SPECIMENS_SQL}) AND spec_type_desc NOT IN (
    SELECT spec_type_desc FROM mimiciv_hosp.microbiologyevents
    WHERE hadm_id = {{hadm_id}} AND spec_type_desc IS NOT NULL)
ORDER BY 1""")

# admissions × specimen type with at least one organism grown
GROWTH_SAMPLER = f"""SELECT subject_id, hadm_id, spec_type_desc AS specimen
FROM mimiciv_hosp.microbiologyevents
WHERE spec_type_desc IN ({SPECIMENS_SQL}) AND hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) FILTER (WHERE org_name IS NOT NULL) >= 1"""
# a listed answer must read back unambiguously: no organism name with a comma in the set
GROWTH_SET_SAMPLER = GROWTH_SAMPLER + " AND count(*) FILTER (WHERE org_name LIKE '%,%') = 0"

SPECIMEN_ROWS = "e.hadm_id = {hadm_id} AND e.spec_type_desc = {specimen}"

# ---------------------------------------------------------------- patient level

register(
    MicrobiologyTemplate(
        id="microbiology.organisms_grown", intent="microbiology", level="patient",
        paraphrases=(
            "Which organisms grew in the {specimen} specimens of patient {subject_id} during admission {hadm_id}?",
            "List the organisms isolated from {specimen} cultures of patient {subject_id} in hospital admission "
            "{hadm_id}.",
            "Patient {subject_id}, admission {hadm_id}: what grew in the {specimen} cultures?",
        ),
        sampler_sql=GROWTH_SET_SAMPLER,
        gold_sql="""SELECT DISTINCT e.org_name
FROM {microbiologyevents} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND e.spec_type_desc = {specimen} AND e.org_name IS NOT NULL
ORDER BY e.org_name""",
        answer=NAMES,
        # every culture of that type (negatives included): without them growth cannot be judged at all
        evidence=Evidence(**MICRO, where=SPECIMEN_ROWS, id_col="microevent_id", category_col="org_name",
                          focus="first"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "nonexistent_entity", "false_premise",
               "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="specimen", premise=SPECIMEN_PREMISE,
        description="organisms grown in the cultures of one specimen type in an admission",
    ),
    MicrobiologyTemplate(
        id="microbiology.first_positive_time", intent="microbiology", level="patient",
        paraphrases=(
            "When was the first {specimen} specimen that grew an organism collected from patient {subject_id} "
            "during admission {hadm_id}?",
            "At what time was the earliest positive {specimen} culture of patient {subject_id} in admission "
            "{hadm_id} drawn?",
            "Patient {subject_id}, hospital admission {hadm_id}: collection time of the first {specimen} culture "
            "with growth?",
        ),
        sampler_sql=GROWTH_SAMPLER,
        gold_sql="""SELECT min(e.charttime)
FROM {microbiologyevents} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
  AND e.spec_type_desc = {specimen} AND e.org_name IS NOT NULL""",
        answer=WHEN,
        evidence=Evidence(**MICRO, where=SPECIMEN_ROWS, id_col="microevent_id", category_col="org_name",
                          focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="subject_id", lexical="specimen", premise=SPECIMEN_PREMISE,
        description="collection time of the first positive culture",
    ),
    MicrobiologyTemplate(
        id="microbiology.resistant_antibiotics", intent="microbiology", level="patient",
        paraphrases=(
            "To which antibiotics was the {organism} isolated from patient {subject_id} during admission {hadm_id} "
            "resistant?",
            "List the antibiotics reported as resistant (R) for {organism} in admission {hadm_id} of patient "
            "{subject_id}.",
            "Patient {subject_id}, admission {hadm_id}: which antibiotics did the {organism} isolate resist?",
        ),
        sampler_sql="""SELECT subject_id, hadm_id, org_name AS organism
FROM mimiciv_hosp.microbiologyevents
WHERE org_name IS NOT NULL AND ab_name IS NOT NULL AND hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) FILTER (WHERE interpretation = 'R') >= 1""",
        gold_sql="""SELECT DISTINCT e.ab_name
FROM {microbiologyevents} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND e.org_name = {organism} AND e.interpretation = 'R'
ORDER BY e.ab_name""",
        answer=NAMES,
        evidence=Evidence(**MICRO, where="e.hadm_id = {hadm_id} AND e.org_name = {organism} AND e.ab_name IS NOT NULL",
                          id_col="microevent_id", category_col="interpretation", focus="first"),
        # (no out_of_window: a misplaced copy changes the set only when it happens to flip an S to R)
        noise=("missing_evidence", "conflicting_records", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="hadm_id", lexical="organism",
        premise=Premise("organism", "organism", """
SELECT DISTINCT org_name, org_name FROM mimiciv_hosp.microbiologyevents
WHERE org_name IS NOT NULL AND ab_name IS NOT NULL AND org_name NOT IN (
    SELECT org_name FROM mimiciv_hosp.microbiologyevents WHERE hadm_id = {hadm_id} AND org_name IS NOT NULL)
ORDER BY 1"""),
        description="antibiotics an isolate was resistant to",
    ),
    MicrobiologyTemplate(
        id="microbiology.count_cultures", intent="microbiology", level="patient",
        paraphrases=(
            "How many {specimen} specimens were sent for culture from patient {subject_id} during admission "
            "{hadm_id}?",
            "Count the {specimen} cultures (distinct specimens) of patient {subject_id} in hospital admission "
            "{hadm_id}.",
            "Patient {subject_id}, admission {hadm_id}: how many {specimen} cultures were collected?",
        ),
        sampler_sql=f"""SELECT DISTINCT subject_id, hadm_id, spec_type_desc AS specimen
FROM mimiciv_hosp.microbiologyevents
WHERE spec_type_desc IN ({SPECIMENS_SQL}, 'MRSA SCREEN') AND hadm_id IS NOT NULL""",
        gold_sql="""SELECT count(DISTINCT e.micro_specimen_id)
FROM {microbiologyevents} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.spec_type_desc = {specimen}""",
        answer=COUNT,
        evidence=Evidence(**MICRO_SPECIMENS, where=SPECIMEN_ROWS, id_col="micro_specimen_id"),
        noise=("duplicate_records", "out_of_window", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="specimen", description="number of cultures of one specimen type",
    ),
    MicrobiologyTemplate(
        id="microbiology.organism_isolated", intent="microbiology", level="patient",
        paraphrases=(
            "Was {organism} isolated from any culture of patient {subject_id} during admission {hadm_id}?",
            "Did any culture of patient {subject_id} in hospital admission {hadm_id} grow {organism}? "
            "Answer yes or no.",
            "Yes or no: was {organism} found in patient {subject_id}'s cultures during admission {hadm_id}?",
        ),
        # about as many 'no' (an organism that did not grow) as 'yes'
        sampler_sql="""
WITH adm AS (SELECT DISTINCT subject_id, hadm_id FROM mimiciv_hosp.microbiologyevents WHERE hadm_id IS NOT NULL),
orgs AS (SELECT DISTINCT org_name AS organism FROM mimiciv_hosp.microbiologyevents WHERE org_name IS NOT NULL),
grown AS (SELECT DISTINCT hadm_id, org_name AS organism FROM mimiciv_hosp.microbiologyevents WHERE org_name IS NOT NULL)
SELECT a.subject_id, a.hadm_id, o.organism
FROM adm a CROSS JOIN orgs o
LEFT JOIN grown g ON g.hadm_id = a.hadm_id AND g.organism = o.organism
WHERE g.hadm_id IS NOT NULL OR hash(a.hadm_id, o.organism) % 12 = 0""",
        gold_sql="""SELECT count(*) > 0
FROM {microbiologyevents} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.org_name = {organism}""",
        answer=YES_NO,
        # the admission's whole culture record: without it, "not isolated" cannot be told from "not cultured"
        evidence=Evidence(**MICRO, where="e.hadm_id = {hadm_id}", id_col="microevent_id"),
        noise=("missing_evidence", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="organism", description="whether an organism was isolated (yes/no)",
    ),
    MicrobiologyTemplate(
        id="microbiology.mic_value", intent="microbiology", level="patient",
        paraphrases=(
            "What MIC (µg/mL) of {antibiotic} was reported for the {organism} isolate of patient {subject_id} in "
            "admission {hadm_id}?",
            "For patient {subject_id}'s {organism} in hospital admission {hadm_id}, what was the {antibiotic} MIC?",
            "Patient {subject_id}, admission {hadm_id}: minimum inhibitory concentration of {antibiotic} against "
            "{organism}?",
        ),
        sampler_sql="""SELECT subject_id, hadm_id, org_name AS organism, ab_name AS antibiotic
FROM mimiciv_hosp.microbiologyevents
WHERE org_name IS NOT NULL AND ab_name IS NOT NULL AND dilution_value IS NOT NULL AND hadm_id IS NOT NULL
GROUP BY ALL
HAVING count(*) = 1""",
        gold_sql="""SELECT e.dilution_value
FROM {microbiologyevents} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND e.org_name = {organism} AND e.ab_name = {antibiotic}
ORDER BY e.dilution_value""",
        answer=MIC,
        evidence=Evidence(**MICRO,
                          where="e.hadm_id = {hadm_id} AND e.org_name = {organism} AND e.ab_name = {antibiotic}",
                          id_col="microevent_id", value_col="dilution_value", text_col="dilution_text",
                          bounds=MIC_BOUNDS, aggregate=False),
        noise=("missing_evidence", "conflicting_records", "implausible_value", "missing_value", "encoding_corruption",
               "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="antibiotic",
        premise=Premise("antibiotic", "antibiotic", """
SELECT DISTINCT ab_name, ab_name FROM mimiciv_hosp.microbiologyevents
WHERE ab_name IS NOT NULL AND ab_name NOT IN (
    SELECT ab_name FROM mimiciv_hosp.microbiologyevents
    WHERE hadm_id = {hadm_id} AND org_name = {organism} AND ab_name IS NOT NULL)
ORDER BY 1"""),
        description="MIC of an antibiotic for an isolate",
    ),
)

# ---------------------------------------------------------------- population level

# population questions are about cultures of hospital admissions (MIMIC-IV also holds outpatient ones)
IN_YEAR = "e.hadm_id IS NOT NULL AND extract(year FROM e.charttime) = {year}"

register(
    MicrobiologyTemplate(
        id="microbiology.cohort_top_organism", intent="microbiology", level="population",
        paraphrases=(
            "Which organism was isolated most often from {specimen} specimens collected in {year}?",
            "Among {specimen} cultures drawn in {year}, what was the most common organism (by number of specimens)?",
            "What organism grew in the largest number of {specimen} specimens in {year}?",
        ),
        sampler_sql=f"""SELECT year, specimen FROM (
  SELECT year, specimen, n, max(n) OVER (PARTITION BY year, specimen) AS top FROM (
    SELECT extract(year FROM charttime) AS year, spec_type_desc AS specimen, org_name,
           count(DISTINCT micro_specimen_id) AS n
    FROM mimiciv_hosp.microbiologyevents
    WHERE hadm_id IS NOT NULL AND org_name IS NOT NULL AND spec_type_desc IN ({SPECIMENS_SQL})
    GROUP BY ALL))
GROUP BY year, specimen
HAVING count(*) FILTER (WHERE n = top) = 1 AND sum(n) >= 2""",
        gold_sql="""WITH per_org AS (
  SELECT e.org_name, count(DISTINCT e.micro_specimen_id) AS n
  FROM {microbiologyevents} e
  WHERE e.hadm_id IS NOT NULL AND e.spec_type_desc = {specimen} AND extract(year FROM e.charttime) = {year}
    AND e.org_name IS NOT NULL
  GROUP BY e.org_name
)
SELECT org_name FROM per_org WHERE n = (SELECT max(n) FROM per_org) ORDER BY org_name""",
        answer=NAME,  # the sampler keeps (year, specimen) with a single most frequent organism
        evidence=Evidence(**MICRO_SPECIMENS,
                          where="e.spec_type_desc = {specimen} AND e.org_name IS NOT NULL AND " + IN_YEAR,
                          id_col="micro_specimen_id", category_col="org_name"),
        noise=("missing_evidence", "conflicting_records", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="specimen", time_window=YEAR_WINDOW,
        description="most frequent organism of a specimen type in a year",
    ),
    MicrobiologyTemplate(
        id="microbiology.cohort_resistance_rate", intent="microbiology", level="population",
        paraphrases=(
            "Of the {organism} isolates from {specimen} specimens tested against {antibiotic}, what percentage were "
            "resistant?",
            "What was the resistance rate (%) of {organism} to {antibiotic} among {specimen} isolates?",
            "Among {specimen} isolates of {organism} with a {antibiotic} result, what percent were reported R?",
        ),
        sampler_sql=f"""SELECT spec_type_desc AS specimen, org_name AS organism, ab_name AS antibiotic
FROM mimiciv_hosp.microbiologyevents
WHERE hadm_id IS NOT NULL AND org_name IS NOT NULL AND ab_name IS NOT NULL AND spec_type_desc IN ({SPECIMENS_SQL})
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 400 AND count(*) FILTER (WHERE interpretation = 'R') BETWEEN 1 AND count(*) - 1""",
        gold_sql="""SELECT 100.0 * count(*) FILTER (WHERE e.interpretation = 'R') / count(*)
FROM {microbiologyevents} e
WHERE e.hadm_id IS NOT NULL AND e.spec_type_desc = {specimen} AND e.org_name = {organism}
  AND e.ab_name = {antibiotic}""",
        answer=RATE,
        evidence=Evidence(**MICRO, where="e.hadm_id IS NOT NULL AND e.spec_type_desc = {specimen} "
                                         "AND e.org_name = {organism} AND e.ab_name = {antibiotic}",
                          id_col="microevent_id", category_col="interpretation"),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "lexical_variation",
               "out_of_scope"),
        lexical="organism", description="resistance rate of an organism to an antibiotic",
    ),
    MicrobiologyTemplate(
        id="microbiology.cohort_positivity_rate", intent="microbiology", level="population",
        paraphrases=(
            "What percentage of the {specimen} specimens collected in {year} grew at least one organism?",
            "In {year}, what share (%) of {specimen} cultures were positive?",
            "Positivity rate (%) of {specimen} cultures drawn in {year}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM charttime) AS year, spec_type_desc AS specimen
FROM mimiciv_hosp.microbiologyevents
WHERE hadm_id IS NOT NULL AND spec_type_desc IN ({SPECIMENS_SQL}, 'MRSA SCREEN')
GROUP BY ALL
HAVING count(DISTINCT micro_specimen_id) >= 2 AND count(*) <= 400
   AND count(*) FILTER (WHERE org_name IS NOT NULL) >= 1 AND count(*) FILTER (WHERE org_name IS NULL) >= 1""",
        gold_sql="""SELECT 100.0 * count(DISTINCT e.micro_specimen_id) FILTER (WHERE e.org_name IS NOT NULL)
       / count(DISTINCT e.micro_specimen_id)
FROM {microbiologyevents} e
WHERE e.hadm_id IS NOT NULL AND e.spec_type_desc = {specimen} AND extract(year FROM e.charttime) = {year}""",
        answer=RATE,
        evidence=Evidence(**MICRO_SPECIMENS, where="e.spec_type_desc = {specimen} AND " + IN_YEAR,
                          id_col="micro_specimen_id",
                          category_col="org_name"),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "temporal_mismatch",
               "lexical_variation", "out_of_scope"),
        lexical="specimen", time_window=YEAR_WINDOW, description="positivity rate of a culture type in a year",
    ),
    MicrobiologyTemplate(
        id="microbiology.cohort_count_isolates", intent="microbiology", level="population",
        paraphrases=(
            "How many specimens collected in {year} grew {organism}?",
            "In {year}, how many {organism} isolates (distinct specimens) were reported?",
            "Count the cultures drawn in {year} from which {organism} was isolated.",
        ),
        sampler_sql="""SELECT extract(year FROM charttime) AS year, org_name AS organism
FROM mimiciv_hosp.microbiologyevents
WHERE hadm_id IS NOT NULL AND org_name IS NOT NULL
GROUP BY ALL
HAVING count(*) <= 400""",
        gold_sql="""SELECT count(DISTINCT e.micro_specimen_id)
FROM {microbiologyevents} e
WHERE e.hadm_id IS NOT NULL AND e.org_name = {organism} AND extract(year FROM e.charttime) = {year}""",
        answer=COUNT,
        evidence=Evidence(**MICRO_SPECIMENS, where="e.org_name = {organism} AND " + IN_YEAR,
                          id_col="micro_specimen_id"),
        noise=("duplicate_records", "out_of_window", "lexical_variation", "out_of_scope"),
        lexical="organism", time_window=YEAR_WINDOW, description="number of isolates of an organism in a year",
    ),
    MicrobiologyTemplate(
        id="microbiology.cohort_mean_mic", intent="microbiology", level="population",
        paraphrases=(
            "What was the mean MIC (µg/mL) of {antibiotic} over the {organism} isolates from {specimen} specimens?",
            "Average {antibiotic} MIC among {specimen} isolates of {organism}?",
            "Across all {organism} isolates from {specimen} cultures, what was the mean minimum inhibitory "
            "concentration of {antibiotic}?",
        ),
        sampler_sql=f"""SELECT spec_type_desc AS specimen, org_name AS organism, ab_name AS antibiotic
FROM mimiciv_hosp.microbiologyevents
WHERE hadm_id IS NOT NULL AND org_name IS NOT NULL AND ab_name IS NOT NULL AND dilution_value IS NOT NULL
  AND spec_type_desc IN ({SPECIMENS_SQL})
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400 AND count(DISTINCT dilution_value) >= 2""",
        gold_sql="""SELECT round(avg(e.dilution_value), 6)
FROM {microbiologyevents} e
WHERE e.hadm_id IS NOT NULL AND e.spec_type_desc = {specimen} AND e.org_name = {organism}
  AND e.ab_name = {antibiotic}""",
        answer=RATE,
        evidence=Evidence(**MICRO, where="e.hadm_id IS NOT NULL AND e.spec_type_desc = {specimen} "
                                         "AND e.org_name = {organism} AND e.ab_name = {antibiotic}",
                          id_col="microevent_id", value_col="dilution_value", text_col="dilution_text",
                          bounds=MIC_BOUNDS),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "encoding_corruption", "lexical_variation", "out_of_scope"),
        lexical="antibiotic", description="mean MIC of an antibiotic for an organism",
    ),
    MicrobiologyTemplate(
        id="microbiology.cohort_max_mic", intent="microbiology", level="population",
        paraphrases=(
            "What was the highest {antibiotic} MIC (µg/mL) reported for {organism} isolates from specimens "
            "collected in {year}?",
            "Among {organism} isolates of {year}, what maximum minimum inhibitory concentration of {antibiotic} "
            "was reported?",
            "In {year}, what was the largest {antibiotic} MIC measured on any {organism} isolate?",
        ),
        # a single isolate holds the maximum (MICs are discrete dilutions: ties are common)
        sampler_sql="""SELECT year, organism, antibiotic FROM (
  SELECT extract(year FROM charttime) AS year, org_name AS organism, ab_name AS antibiotic, dilution_value,
         max(dilution_value) OVER (PARTITION BY extract(year FROM charttime), org_name, ab_name) AS top
  FROM mimiciv_hosp.microbiologyevents
  WHERE hadm_id IS NOT NULL AND org_name IS NOT NULL AND ab_name IS NOT NULL AND dilution_value IS NOT NULL)
GROUP BY year, organism, antibiotic
HAVING count(*) BETWEEN 2 AND 400 AND count(*) FILTER (WHERE dilution_value = top) = 1""",
        gold_sql="""SELECT max(e.dilution_value)
FROM {microbiologyevents} e
WHERE e.hadm_id IS NOT NULL AND e.org_name = {organism} AND e.ab_name = {antibiotic}
  AND extract(year FROM e.charttime) = {year}""",
        answer=MIC,
        evidence=Evidence(**MICRO, where="e.org_name = {organism} AND e.ab_name = {antibiotic} AND " + IN_YEAR,
                          id_col="microevent_id", value_col="dilution_value", text_col="dilution_text",
                          bounds=MIC_BOUNDS, focus="max"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", "encoding_corruption",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="antibiotic", time_window=YEAR_WINDOW, description="highest MIC of an antibiotic for an organism",
    ),
)
