"""Diagnosis questions: ICD diagnoses and procedures, DRGs (``diagnoses_icd``, ``procedures_icd``,
``drgcodes`` with their dictionaries ``d_icd_diagnoses`` / ``d_icd_procedures``).

Codes are always resolved to titles through the dictionary joined on BOTH ``icd_code`` and
``icd_version`` (MIMIC-IV mixes ICD-9 and ICD-10, and some code strings exist in both). Billing
codes carry no timestamps, so time-based record noise (out of window) does not apply here; the
value-level noise lives on the APR-DRG severity / mortality scores (1-4) and on patient ages.

Conditions are named as clinicians name them ("sepsis", "acute kidney injury", "heart failure"):
``{title}`` / ``{cohort}`` of the condition templates are concepts of ``ehrgym.bench.concepts``
(domain ``diagnosis``, ICD-9 and ICD-10 code prefixes) matched on every code of the concept
(``DX_CONCEPT_JOIN``), and admissions are counted once however many of its codes an admission
carries. Procedures and DRGs are still named by their dictionary titles.
"""

from __future__ import annotations

from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import relation
from ehrgym.bench.noise.lexicon import add_variants
from ehrgym.bench.templates.base import Evidence, Premise, Template, TimeWindow
from ehrgym.bench.templates.families import coded_admissions, coded_cohort, dx_join
from ehrgym.bench.templates.registry import register


DiagnosisTemplate = Template  # (an alias for importers: unpickling any Template imports the template modules)

COUNT = AnswerSpec("integer")
MEAN = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
TITLE = AnswerSpec("string")
CODES = AnswerSpec("set")
YES_NO = AnswerSpec("boolean")

APR_BOUNDS = (1.0, 4.0)  # APR-DRG severity of illness / risk of mortality subclasses
AGE_BOUNDS = (0.0, 91.0)  # MIMIC-IV anchor_age tops out at 91

# Conditions as concepts: every ICD-9/ICD-10 code under a concept's prefixes (alias ``dx``).
DX_CONCEPTS = relation("diagnosis") + " dx(concept, icd_version, prefix)"
DX_CONCEPT_JOIN = dx_join("e")
INFECTIONS = "('sepsis', 'pneumonia', 'urinary tract infection')"  # infection concepts (antibiotic cohorts)

DX_JOIN = "JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = e.icd_code AND d.icd_version = e.icd_version"
PX_JOIN = "JOIN mimiciv_hosp.d_icd_procedures d ON d.icd_code = e.icd_code AND d.icd_version = e.icd_version"

DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
YEAR_WINDOW = TimeWindow(DATABASE_SCOPE, year="year")

DX_EVIDENCE: dict[str, Any] = dict(table="diagnoses_icd", key=("hadm_id", "seq_num"))
PX_EVIDENCE: dict[str, Any] = dict(table="procedures_icd", key=("hadm_id", "seq_num"))

# ---------------------------------------------------------------- lexical variants
# misspellings and abbreviations people write (names shared with another module use the same forms,
# so the lexicon does not depend on which modules a process imported)
DIAGNOSIS_VARIANTS: dict[str, tuple[str, ...]] = {
    # procedures
    "Insertion of endotracheal tube": ("intubation", "ETT insertion", "insertion of endotrachial tube"),
    "Transfusion of packed cells": ("PRBC transfusion", "blood transfusion", "transfusion of packed red cells"),
    "Hemodialysis": ("HD", "dialysis", "haemodialysis"),
    "Magnetic Resonance Imaging (MRI) of Brain": ("brain MRI", "MRI head", "MRI of the brain"),
    "Venous catheterization, not elsewhere classified": ("venous catheterisation", "venous cath NEC"),
    "Atrial cardioversion": ("cardioversion", "DC cardioversion", "atrial cardioversoin"),
    "Percutaneous abdominal drainage": ("paracentesis", "percutaneous abdominal drain"),
    "Insertion of indwelling urinary catheter": ("Foley insertion", "foley catheter placement"),
    "Other endoscopy of small intestine": ("small bowel endoscopy", "enteroscopy"),
    "Injection or infusion of thrombolytic agent": ("thrombolysis", "tPA infusion"),
    # DRGs
    "SEPTICEMIA & DISSEMINATED INFECTIONS": ("septicemia and disseminated infections", "SEPTICEMIA & DISSEMINATED INF"),
    "HEART FAILURE": ("CHF", "heart failiure"),
    "RENAL FAILURE": ("kidney failure", "renal faliure"),
    "OTHER PNEUMONIA": ("pneumonia, other", "other pnuemonia"),
    "CVA & PRECEREBRAL OCCLUSION W INFARCT": ("CVA with infarct", "stroke w infarct"),
    "CHRONIC OBSTRUCTIVE PULMONARY DISEASE": ("COPD", "chronic obstructive pulmonary diseas"),
    "KIDNEY & URINARY TRACT INFECTIONS": ("UTI", "kidney and urinary tract infections"),
    "CARDIAC ARRHYTHMIA & CONDUCTION DISORDERS": ("arrhythmia", "cardiac arrythmia & conduction disorders"),
}
for _name, _forms in DIAGNOSIS_VARIANTS.items():
    add_variants(_name, *_forms)

# ---------------------------------------------------------------- patient level

ADMISSION_PX_PREMISE = Premise("title", "title", """
SELECT d.long_title, d.long_title FROM mimiciv_hosp.d_icd_procedures d
WHERE d.icd_version = (SELECT max(icd_version) FROM mimiciv_hosp.procedures_icd WHERE hadm_id = {hadm_id})
  AND d.long_title NOT IN (
    SELECT p.long_title FROM mimiciv_hosp.procedures_icd e
    JOIN mimiciv_hosp.d_icd_procedures p ON p.icd_code = e.icd_code AND p.icd_version = e.icd_version
    WHERE e.hadm_id = {hadm_id})
ORDER BY 1""")

register(
    Template(
        id="diagnoses.primary_diagnosis", intent="diagnoses", level="patient",
        paraphrases=(
            "What was the title of the primary diagnosis (sequence number 1) of patient {subject_id}'s admission {hadm_id}?",
            "Which diagnosis (its ICD title) was coded first for hospital admission {hadm_id} of patient {subject_id}?",
            "For patient {subject_id}, give the title of the principal ICD diagnosis of admission {hadm_id}.",
        ),
        sampler_sql="""SELECT DISTINCT e.subject_id, e.hadm_id
FROM mimiciv_hosp.diagnoses_icd e
""" + DX_JOIN + """
WHERE e.seq_num = 1 AND e.hadm_id IS NOT NULL""",
        # a LEFT JOIN: a code without a dictionary entry still shows up (as the bare code)
        gold_sql="""SELECT coalesce(d.long_title, e.icd_code)
FROM {diagnoses_icd} e
LEFT JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = e.icd_code AND d.icd_version = e.icd_version
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.seq_num = 1
ORDER BY 1""",
        answer=TITLE,
        evidence=Evidence(**DX_EVIDENCE, where="e.hadm_id = {hadm_id} AND e.seq_num = 1", category_col="icd_code",
                          aggregate=False),
        noise=("missing_evidence", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="principal (seq_num 1) diagnosis of an admission",
    ),
    Template(
        id="diagnoses.count_diagnoses", intent="diagnoses", level="patient",
        paraphrases=(
            "How many ICD diagnoses were coded for admission {hadm_id} of patient {subject_id}?",
            "Count the diagnosis codes recorded for patient {subject_id} during hospital admission {hadm_id}.",
            "Patient {subject_id}, admission {hadm_id}: how many billed diagnoses does the admission carry?",
        ),
        sampler_sql="""SELECT e.subject_id, e.hadm_id
FROM mimiciv_hosp.diagnoses_icd e
WHERE e.hadm_id IS NOT NULL
GROUP BY e.subject_id, e.hadm_id
HAVING count(*) >= 2""",
        gold_sql="""SELECT count(*)
FROM {diagnoses_icd} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}""",
        answer=COUNT,
        # every discharged admission is coded: zero diagnoses means the coding is missing, not absent
        evidence=Evidence(**DX_EVIDENCE, where="e.hadm_id = {hadm_id}", category_col="icd_code"),
        noise=("missing_evidence", "duplicate_records", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="number of coded diagnoses of an admission",
    ),
    Template(
        id="diagnoses.has_diagnosis", intent="diagnoses", level="patient",
        paraphrases=(
            "Was patient {subject_id} diagnosed with {title} during admission {hadm_id}?",
            "Does hospital admission {hadm_id} of patient {subject_id} carry a diagnosis of {title}? Answer yes or no.",
            "Yes or no: was {title} coded for patient {subject_id} in admission {hadm_id}?",
        ),
        # about as many 'no' (a condition of the admission's ICD version it does not carry) as 'yes'
        sampler_sql=f"""
WITH adm AS (
  SELECT DISTINCT subject_id, hadm_id FROM mimiciv_hosp.diagnoses_icd WHERE hadm_id IS NOT NULL
), present AS (
  SELECT DISTINCT e.hadm_id, dx.concept FROM mimiciv_hosp.diagnoses_icd e {DX_CONCEPT_JOIN}
), conditions AS (SELECT DISTINCT concept FROM present)
SELECT a.subject_id, a.hadm_id, c.concept AS title
FROM adm a CROSS JOIN conditions c
LEFT JOIN present p ON p.hadm_id = a.hadm_id AND p.concept = c.concept
WHERE p.hadm_id IS NOT NULL OR hash(a.hadm_id, c.concept) % 5 = 0""",
        gold_sql="""SELECT count(*) > 0
FROM {diagnoses_icd} e
""" + DX_CONCEPT_JOIN + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND dx.concept = {title}""",
        answer=YES_NO,
        # the evidence is the admission's whole code list: without it, "no" cannot be told from "not coded"
        evidence=Evidence(**DX_EVIDENCE, where="e.hadm_id = {hadm_id}"),
        noise=("missing_evidence", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="title", description="existence of a diagnosis in an admission (yes/no)",
    ),
    Template(
        id="diagnoses.procedures_admission", intent="diagnoses", level="patient",
        paraphrases=(
            "Which ICD procedure codes were recorded for patient {subject_id} during admission {hadm_id}?",
            "List the ICD procedure codes billed for hospital admission {hadm_id} of patient {subject_id}.",
            "Patient {subject_id}, admission {hadm_id}: which procedures (ICD codes) were done?",
        ),
        sampler_sql="""SELECT DISTINCT e.subject_id, e.hadm_id
FROM mimiciv_hosp.procedures_icd e
""" + PX_JOIN + """
WHERE e.hadm_id IS NOT NULL""",
        # codes, not titles: procedure titles contain commas, which make a listed answer ambiguous
        gold_sql="""SELECT DISTINCT e.icd_code
FROM {procedures_icd} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
ORDER BY e.icd_code""",
        answer=CODES,
        evidence=Evidence(**PX_EVIDENCE, where="e.hadm_id = {hadm_id}", category_col="icd_code"),
        noise=("missing_evidence", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="set of procedure codes of an admission",
    ),
    Template(
        id="diagnoses.procedure_day", intent="diagnoses", level="patient",
        paraphrases=(
            "How many calendar days after the admission date was {title} first performed for patient "
            "{subject_id} during admission {hadm_id}?",
            "How many days after the start of admission {hadm_id} did patient {subject_id} undergo {title}?",
            "Patient {subject_id}, admission {hadm_id}: how many days from the admission date to the procedure "
            "{title}?",
        ),
        sampler_sql="""SELECT DISTINCT e.subject_id, e.hadm_id, d.long_title AS title
FROM mimiciv_hosp.procedures_icd e
""" + PX_JOIN + """
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE e.chartdate >= CAST(a.admittime AS DATE)""",
        gold_sql="""SELECT date_diff('day', CAST(a.admittime AS DATE), min(e.chartdate))
FROM {procedures_icd} e
""" + PX_JOIN + """
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id} AND d.long_title = {title}
GROUP BY a.admittime""",
        answer=COUNT,
        evidence=Evidence(**PX_EVIDENCE,
                          where="e.hadm_id = {hadm_id} AND EXISTS (SELECT 1 FROM mimiciv_hosp.d_icd_procedures t "
                                "WHERE t.icd_code = e.icd_code AND t.icd_version = e.icd_version "
                                "AND t.long_title = {title})"),
        noise=("missing_evidence", "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="title", premise=ADMISSION_PX_PREMISE,
        description="days from admission to a procedure",
    ),
    Template(
        id="diagnoses.drg_description", intent="diagnoses", level="patient",
        paraphrases=(
            "Which HCFA DRG (description) was assigned to admission {hadm_id} of patient {subject_id}?",
            "What was the diagnosis-related group (HCFA DRG description) of patient {subject_id}'s admission "
            "{hadm_id}?",
            "Patient {subject_id}, hospital admission {hadm_id}: what HCFA DRG was billed (its description)?",
        ),
        sampler_sql="""SELECT subject_id, hadm_id FROM mimiciv_hosp.drgcodes
WHERE drg_type = 'HCFA' AND hadm_id IS NOT NULL AND description IS NOT NULL
GROUP BY subject_id, hadm_id HAVING count(*) = 1""",
        gold_sql="""SELECT e.description
FROM {drgcodes} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.drg_type = 'HCFA'
ORDER BY e.description""",
        answer=TITLE,
        evidence=Evidence(table="drgcodes", where="e.hadm_id = {hadm_id} AND e.drg_type = 'HCFA'",
                          key=("hadm_id", "drg_type"), category_col="description", aggregate=False),
        noise=("missing_evidence", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="HCFA DRG of an admission",
    ),
)

APR_SAMPLER = """SELECT subject_id, hadm_id FROM mimiciv_hosp.drgcodes
WHERE drg_type = 'APR' AND hadm_id IS NOT NULL AND {col} IS NOT NULL
GROUP BY subject_id, hadm_id HAVING count(*) = 1"""
APR_NOISE = ("missing_evidence", "implausible_value", "nonexistent_entity")

register(
    Template(
        id="diagnoses.apr_severity", intent="diagnoses", level="patient",
        paraphrases=(
            "What APR-DRG severity of illness subclass (1-4) was assigned to admission {hadm_id} of patient "
            "{subject_id}?",
            "How severe was patient {subject_id}'s illness in admission {hadm_id} according to the APR-DRG severity "
            "score (1-4)?",
            "Patient {subject_id}, admission {hadm_id}: report the APR-DRG severity of illness.",
        ),
        sampler_sql=APR_SAMPLER.format(col="drg_severity"),
        gold_sql="""SELECT e.drg_severity
FROM {drgcodes} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.drg_type = 'APR'""",
        answer=COUNT,
        evidence=Evidence(table="drgcodes", where="e.hadm_id = {hadm_id} AND e.drg_type = 'APR'",
                          key=("hadm_id", "drg_type"), value_col="drg_severity", bounds=APR_BOUNDS, aggregate=False),
        noise=APR_NOISE, entity_ref="hadm_id", description="APR-DRG severity of illness of an admission",
    ),
    Template(
        id="diagnoses.apr_mortality_risk", intent="diagnoses", level="patient",
        paraphrases=(
            "What APR-DRG risk-of-mortality subclass (1-4) was assigned to admission {hadm_id} of patient "
            "{subject_id}?",
            "According to the APR-DRG, what was patient {subject_id}'s risk of mortality (1-4) in admission {hadm_id}?",
            "Patient {subject_id}, hospital admission {hadm_id}: report the APR-DRG risk of mortality score.",
        ),
        sampler_sql=APR_SAMPLER.format(col="drg_mortality"),
        gold_sql="""SELECT e.drg_mortality
FROM {drgcodes} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id} AND e.drg_type = 'APR'""",
        answer=COUNT,
        evidence=Evidence(table="drgcodes", where="e.hadm_id = {hadm_id} AND e.drg_type = 'APR'",
                          key=("hadm_id", "drg_type"), value_col="drg_mortality", bounds=APR_BOUNDS, aggregate=False),
        noise=APR_NOISE, entity_ref="subject_id", description="APR-DRG risk of mortality of an admission",
    ),
)

# ---------------------------------------------------------------- population level

# (year, condition) with admissions coded; per admission once (an admission may carry several codes)
YEAR_TITLE_SAMPLER = f"""
SELECT extract(year FROM a.admittime) AS year, dx.concept AS title
FROM mimiciv_hosp.diagnoses_icd e
{DX_CONCEPT_JOIN}
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
GROUP BY ALL
HAVING count(DISTINCT a.hadm_id) BETWEEN {{lo}} AND 400{{extra}}"""

# the admissions of a year coded with a condition, each once
COHORT_ADMISSIONS = coded_cohort("title", codes="e", source="{diagnoses_icd}")

ADMISSION_JOIN = "JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id"
DX_COHORT_EVIDENCE = Evidence(**DX_EVIDENCE, join=f"{DX_CONCEPT_JOIN} {ADMISSION_JOIN}",
                              where="dx.concept = {title} AND extract(year FROM a.admittime) = {year}")

register(
    Template(
        id="diagnoses.cohort_top_diagnosis_icu", intent="diagnoses", level="population",
        paraphrases=(
            "Which diagnosis (ICD title) was coded most often among hospital admissions with an ICU stay that began in {year}?",
            "Among admissions of {year} that included an ICU stay, what was the most frequent ICD diagnosis (title)?",
            "What was the commonest diagnosis (by its title) of ICU patients' hospital admissions starting in {year}?",
        ),
        sampler_sql=f"""SELECT year FROM (
  SELECT year, n, max(n) OVER (PARTITION BY year) AS top FROM (
    SELECT extract(year FROM a.admittime) AS year, d.long_title, count(*) AS n
    FROM mimiciv_hosp.diagnoses_icd e
    {DX_JOIN}
    JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
    WHERE e.hadm_id IN (SELECT hadm_id FROM mimiciv_icu.icustays)
    GROUP BY ALL))
GROUP BY year
HAVING count(*) FILTER (WHERE n = top) = 1 AND sum(n) <= 400""",
        gold_sql=f"""WITH icu_admissions AS (
  SELECT DISTINCT s.hadm_id
  FROM mimiciv_icu.icustays s
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id
  WHERE extract(year FROM a.admittime) = {{year}}
), per_title AS (
  SELECT d.long_title, count(*) AS n
  FROM {{diagnoses_icd}} e
  {DX_JOIN}
  WHERE e.hadm_id IN (SELECT hadm_id FROM icu_admissions)
  GROUP BY d.long_title
)
SELECT long_title FROM per_title WHERE n = (SELECT max(n) FROM per_title) ORDER BY long_title""",
        answer=TITLE,  # the sampler keeps years with a single most frequent title
        evidence=Evidence(**DX_EVIDENCE, category_col="icd_code", join=ADMISSION_JOIN,
                          where="extract(year FROM a.admittime) = {year} "
                                "AND e.hadm_id IN (SELECT hadm_id FROM mimiciv_icu.icustays)"),
        noise=("missing_evidence", "conflicting_records", "temporal_mismatch"),
        time_window=YEAR_WINDOW, description="most frequent diagnosis among ICU admissions of a year",
    ),
    Template(
        id="diagnoses.cohort_count_admissions", intent="diagnoses", level="population",
        paraphrases=(
            "How many hospital admissions that began in {year} were coded with {title}?",
            "In {year}, how many admissions carried a diagnosis of {title}?",
            "Count the admissions starting in {year} with the ICD diagnosis {title}.",
        ),
        sampler_sql=YEAR_TITLE_SAMPLER.format(lo=2, extra=""),
        gold_sql="SELECT count(*) FROM (" + COHORT_ADMISSIONS + "\n)",
        answer=COUNT, evidence=DX_COHORT_EVIDENCE,
        # (no duplicate records: a re-stored code leaves the number of admissions unchanged; no temporal
        # mismatch: a count of zero is the answer for an empty year)
        noise=("lexical_variation", "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW, description="number of admissions with a diagnosis in a year",
    ),
    Template(
        id="diagnoses.cohort_mean_los", intent="diagnoses", level="population",
        paraphrases=(
            "What was the mean hospital length of stay (days) of admissions that began in {year} with a diagnosis "
            "of {title}?",
            "Among admissions of {year} coded with {title}, how many days did patients stay in hospital on average?",
            "Average length of stay in days for {title} admissions starting in {year}?",
        ),
        sampler_sql=YEAR_TITLE_SAMPLER.format(lo=2, extra=" AND count(DISTINCT a.dischtime - a.admittime) >= 2"),
        # whole seconds summed exactly (doubles below 2^53), so the same on any thread count
        gold_sql="SELECT avg(epoch(a.dischtime) - epoch(a.admittime)) / 86400.0\nFROM mimiciv_hosp.admissions a\n"
                 "WHERE a.hadm_id IN (" + COHORT_ADMISSIONS + "\n)",
        answer=MEAN, evidence=DX_COHORT_EVIDENCE,
        noise=("missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW, description="mean length of stay of admissions with a diagnosis",
    ),
    Template(
        id="diagnoses.cohort_mortality", intent="diagnoses", level="population",
        paraphrases=(
            "What percentage of admissions that began in {year} with a diagnosis of {title} ended in death in "
            "hospital?",
            "What was the in-hospital mortality (%) of {title} admissions starting in {year}?",
            "Among admissions of {year} coded with {title}, what percent had the patient die in hospital?",
        ),
        sampler_sql=YEAR_TITLE_SAMPLER.format(
            lo=2, extra=" AND sum(a.hospital_expire_flag) BETWEEN 1 AND count(*) - 1"),
        gold_sql="SELECT 100.0 * avg(a.hospital_expire_flag)\nFROM mimiciv_hosp.admissions a\n"
                 "WHERE a.hadm_id IN (" + COHORT_ADMISSIONS + "\n)",
        answer=MEAN, evidence=DX_COHORT_EVIDENCE,
        noise=("missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW, description="in-hospital mortality of admissions with a diagnosis",
    ),
    Template(
        id="diagnoses.cohort_comorbidity_rate", intent="diagnoses", level="population",
        paraphrases=(
            "Among admissions that began in {year} with a diagnosis of {cohort}, what percentage were also coded "
            "with {title}?",
            "Of the {year} admissions coded with {cohort}, what share (%) also had {title}?",
            "In {year}, what percent of {cohort} admissions also carried the diagnosis {title}?",
        ),
        sampler_sql=f"""
WITH coded AS (
  SELECT DISTINCT e.hadm_id, extract(year FROM a.admittime) AS year, dx.concept AS title
  FROM mimiciv_hosp.diagnoses_icd e
  {DX_CONCEPT_JOIN}
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
)
SELECT c.year, c.title AS cohort, o.title
FROM coded c
JOIN (SELECT year, title, count(DISTINCT hadm_id) AS n FROM coded GROUP BY ALL) size
  ON size.year = c.year AND size.title = c.title
JOIN coded o ON o.hadm_id = c.hadm_id AND o.title <> c.title
WHERE size.n >= 2
GROUP BY ALL
HAVING count(*) BETWEEN 1 AND 400""",
        gold_sql=f"""WITH cohort AS ({coded_cohort("cohort", codes="c", alias="cx")}
), also AS (
  SELECT DISTINCT e.hadm_id
  FROM {{diagnoses_icd}} e
  {DX_CONCEPT_JOIN}
  WHERE dx.concept = {{title}} AND e.hadm_id IN (SELECT hadm_id FROM cohort)
)
SELECT 100.0 * (SELECT count(*) FROM also) / (SELECT count(*) FROM cohort)""",
        answer=MEAN,
        evidence=Evidence(**DX_EVIDENCE, join=f"{DX_CONCEPT_JOIN}\nJOIN {coded_admissions('c', 'cx')} k ON k.hadm_id = e.hadm_id",
                          where="dx.concept = {title} AND k.concept = {cohort} AND k.year = {year}"),
        # (no duplicate records: admissions are counted once)
        noise=("temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW,
        description="share of a diagnosis cohort with a second diagnosis (e.g. AKI among sepsis)",
    ),
    Template(
        id="diagnoses.cohort_mean_apr_severity", intent="diagnoses", level="population",
        paraphrases=(
            "What was the mean APR-DRG severity of illness of admissions that began in {year} grouped under the "
            "APR-DRG {description}?",
            "Among {year} admissions with APR-DRG {description}, what was the average severity of illness (1-4)?",
            "Average APR-DRG severity score of the {description} admissions starting in {year}?",
        ),
        sampler_sql="""SELECT extract(year FROM a.admittime) AS year, e.description
FROM mimiciv_hosp.drgcodes e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE e.drg_type = 'APR' AND e.drg_severity IS NOT NULL
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400 AND count(DISTINCT e.drg_severity) >= 2""",
        gold_sql="""SELECT avg(e.drg_severity)
FROM {drgcodes} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE e.drg_type = 'APR' AND e.description = {description} AND extract(year FROM a.admittime) = {year}""",
        answer=MEAN,
        evidence=Evidence(table="drgcodes", join=ADMISSION_JOIN,
                          where="e.drg_type = 'APR' AND e.description = {description} "
                                "AND extract(year FROM a.admittime) = {year}",
                          key=("hadm_id", "drg_type"), value_col="drg_severity", bounds=APR_BOUNDS),
        noise=("missing_evidence", "duplicate_records", "implausible_value", "temporal_mismatch", "lexical_variation",
               "out_of_scope"),
        lexical="description", time_window=YEAR_WINDOW, description="mean APR-DRG severity of a DRG in a year",
    ),
    Template(
        id="diagnoses.cohort_mean_age", intent="diagnoses", level="population",
        paraphrases=(
            "What was the mean age at admission of the admissions that began in {year} with a diagnosis of {title}?",
            "How old, on average, were patients at the start of their {year} admissions coded with {title}?",
            "Average age (years, at admission) over the {title} admissions starting in {year}?",
        ),
        sampler_sql=YEAR_TITLE_SAMPLER.format(lo=2, extra=""),
        gold_sql=f"""SELECT avg(e.anchor_age + extract(year FROM a.admittime) - e.anchor_year)
FROM {{patients}} e
JOIN mimiciv_hosp.admissions a ON a.subject_id = e.subject_id
WHERE extract(year FROM a.admittime) = {{year}} AND a.hadm_id IN (
  SELECT di.hadm_id FROM mimiciv_hosp.diagnoses_icd di
  {dx_join("di")}
  WHERE dx.concept = {{title}})""",
        answer=MEAN,
        evidence=Evidence(table="patients", key=("subject_id",), value_col="anchor_age", bounds=AGE_BOUNDS,
                          join=f"""JOIN (
      SELECT DISTINCT a.subject_id, dx.concept, extract(year FROM a.admittime) AS year
      FROM mimiciv_hosp.admissions a
      JOIN mimiciv_hosp.diagnoses_icd di ON di.hadm_id = a.hadm_id
      {dx_join("di")}
     ) k ON k.subject_id = e.subject_id""",
                          where="k.concept = {title} AND k.year = {year}"),
        noise=("missing_evidence", "duplicate_records", "implausible_value", "temporal_mismatch", "lexical_variation",
               "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW, description="mean age at admission of a diagnosis cohort",
    ),
)
