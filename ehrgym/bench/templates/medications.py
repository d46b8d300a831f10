"""Medication questions: orders (``prescriptions``), administrations (``emar``) and ICU infusions
(``inputevents`` with ``d_items``).

Drugs are named as clinicians name them ("ceftriaxone", "metoprolol", "norepinephrine"): ``{drug}`` /
``{label}`` are concepts of ``ehrgym.bench.concepts`` (domains ``drug``, ``antibiotic``, ``infusion``)
and the SQL matches every database spelling of the concept through the concept relation filtered by
the name (``dc.concept = {drug}``), so a misspelled or brand name ("vancomicin", "Zosyn", "norepi")
finds nothing in a credulous agent's query. "Antibiotics" are the systemic antibacterial agents of
the ``antibiotic`` domain, counted by agent (not by spelling), eye/ear/skin routes excluded. Infusion amounts carry value-level noise: a dose recorded in mcg
instead of mg (with the unit column changed), a decimal slip, a contradictory re-charted segment.
"""

from __future__ import annotations

from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import concepts, primary_items, relation  # noqa: F401  (importable from here, as before)
from ehrgym.bench.noise.units import CONVERSIONS, UnitConversion
from ehrgym.bench.templates.concept_sql import DOSE_GIVEN_EVENTS, covered_hours_sql, dose_given_predicate, strings
from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, Evidence, Premise, Template, TimeWindow  # noqa: F401
from ehrgym.bench.templates.diagnoses import DX_CONCEPTS, INFECTIONS  # noqa: F401
from ehrgym.bench.templates.families import FIRST_CAREUNIT, INFUSIONS, coded_admissions, coded_cohort, dx_join
from ehrgym.bench.templates.registry import register


MedicationTemplate = Template  # (an alias for importers: unpickling any Template imports the template modules)

COUNT = AnswerSpec("integer")
HOURS = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
AMOUNT = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
WHEN = AnswerSpec("datetime")
NAME = AnswerSpec("string")
NAMES = AnswerSpec("set")
YES_NO = AnswerSpec("boolean")

# Drugs are named as a clinician names them ("ceftriaxone", "metoprolol"): ``{drug}`` is a concept of
# ``ehrgym.bench.concepts`` (domain ``drug``; antibiotics one by one in domain ``antibiotic``) and the
# SQL matches every spelling of it (``lower(trim(drug))``: "CefTRIAXone", "CeftriaXONE" …).
RX_DRUG = "JOIN " + relation("drug") + " dc(concept, spelling) ON dc.spelling = lower(trim(e.drug))"
EMAR_DRUG = "JOIN " + relation("drug") + " dc(concept, spelling) ON dc.spelling = lower(trim(e.medication))"
RX_ABX = "JOIN " + relation("antibiotic") + " dc(concept, spelling) ON dc.spelling = lower(trim(e.drug))"
EMAR_ABX = "JOIN " + relation("antibiotic") + " dc(concept, spelling) ON dc.spelling = lower(trim(e.medication))"
# routes that are not systemic (eye, ear, skin), excluded from "antibiotics" as in the MIMIC code repository
TOPICAL_ROUTES = ("OU", "OS", "OD", "AU", "AS", "AD", "TP", "BOTH EYES", "LEFT EYE", "RIGHT EYE", "BOTH EARS",
                  "LEFT EAR", "RIGHT EAR")
SYSTEMIC = "coalesce(e.route, '') NOT IN (" + ", ".join(f"'{r}'" for r in TOPICAL_ROUTES) + ")"
# ICU drips charted in mg in inputevents (norepinephrine, phenylephrine, propofol, epinephrine, dopamine)
DRIP_IDS = tuple(i for c in concepts("infusion") for i in c.itemids)
DRIPS = INFUSIONS  # the family: inputevents rows of the infusion concepts, by ICU stay
DRIP_CONCEPTS = DRIPS.concepts
DRIP_PRIMARY = DRIPS.primary
DRIP_JOIN = DRIPS.join
# an eMAR row recording a dose given (concept_sql.DOSE_GIVEN_EVENTS); with an infusion's start, the events that mean
# the drug reached the patient
DOSE_GIVEN = dose_given_predicate("e")
GIVEN = f"({strings(DOSE_GIVEN_EVENTS + ('Started',))})"

# A vasoactive or sedative drip charted in mcg instead of mg is the classic infusion unit error.
for _itemid in DRIP_IDS:
    CONVERSIONS.setdefault(_itemid, UnitConversion(_itemid, "mg", "mcg", 1000.0, decimals=1))

PATIENT_SCOPE = ("SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions "
                 "WHERE subject_id = {subject_id}")
DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
ICU_SCOPE = "SELECT min(intime), max(outtime) FROM mimiciv_icu.icustays"

# ---------------------------------------------------------------- evidence shapes

RX_EVIDENCE: dict[str, Any] = dict(table="prescriptions", join=RX_DRUG, where="e.hadm_id = {hadm_id} AND dc.concept = {drug}",
                   key=("hadm_id", "drug", "starttime"), id_col="pharmacy_id", time_col="starttime",
                   window=ADMISSION_WINDOW)
EMAR_KEY = ("subject_id", "emar_seq")  # emar_id: a re-stored copy keeps it
EMAR_DOSES: dict[str, Any] = dict(table="emar", join=EMAR_DRUG,
                  where="e.hadm_id = {hadm_id} AND dc.concept = {drug} AND " + DOSE_GIVEN,
                  key=EMAR_KEY, time_col="charttime", window=ADMISSION_WINDOW, store_col="storetime")
DRIP_EVIDENCE: dict[str, Any] = DRIPS.evidence(values=False, join=DRIP_JOIN,
                                                where="e.stay_id = {stay_id} AND cpt.concept = {label}")
DRIP_VALUE: dict[str, Any] = dict(DRIPS.values)

# a drug (concept) the hospital ordered, but not in this admission
RX_PREMISE = Premise("drug", "drug", f"""
SELECT DISTINCT dc.concept, dc.concept FROM mimiciv_hosp.prescriptions e {RX_DRUG}
WHERE dc.concept NOT IN (
    SELECT dc.concept FROM mimiciv_hosp.prescriptions e {RX_DRUG} WHERE e.hadm_id = {{hadm_id}})
ORDER BY 1""")
ABX_EMAR_PREMISE = Premise("drug", "drug", f"""
SELECT DISTINCT dc.concept, dc.concept FROM mimiciv_hosp.emar e {EMAR_ABX}
WHERE dc.concept NOT IN (
    SELECT dc.concept FROM mimiciv_hosp.emar e {EMAR_ABX} WHERE e.hadm_id = {{hadm_id}})
ORDER BY 1""")
DRIP_PREMISE = Premise(*DRIPS.missing_concept_premise("e2.stay_id = {stay_id}"))

DRIP_SAMPLER = DRIPS.entity_sampler(min_rows=2, require_stay=True)
DRIP_FILTER = DRIPS.entity_filter()

# ---------------------------------------------------------------- patient level

register(
    Template(
        id="medications.first_order_time", intent="medications", level="patient",
        paraphrases=(
            "When was {drug} first ordered to start for patient {subject_id} during admission {hadm_id}?",
            "At what date and time did the first {drug} prescription of patient {subject_id} in admission {hadm_id} "
            "start?",
            "Patient {subject_id}, hospital admission {hadm_id}: give the start time of the earliest {drug} order.",
        ),
        sampler_sql=f"""SELECT DISTINCT e.subject_id, e.hadm_id, dc.concept AS drug FROM mimiciv_hosp.prescriptions e
{RX_DRUG}
WHERE e.hadm_id IS NOT NULL""",
        gold_sql="""SELECT min(e.starttime)
FROM {prescriptions} e
""" + RX_DRUG + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND dc.concept = {drug}""",
        answer=WHEN,
        evidence=Evidence(**RX_EVIDENCE, focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", premise=RX_PREMISE, description="start time of the first order of a drug",
    ),
    Template(
        id="medications.hours_to_first_dose", intent="medications", level="patient",
        paraphrases=(
            "How many hours after the start of admission {hadm_id} did patient {subject_id} receive the first dose "
            "of {drug}?",
            "Time in hours from hospital admission {hadm_id} to patient {subject_id}'s first administered {drug} dose?",
            "For patient {subject_id}, how long (hours) after admission {hadm_id} began was {drug} first given?",
        ),
        sampler_sql=f"""SELECT DISTINCT e.subject_id, e.hadm_id, dc.concept AS drug FROM mimiciv_hosp.emar e
{EMAR_ABX}
WHERE {DOSE_GIVEN} AND e.hadm_id IS NOT NULL""",
        # exact to the second (epoch), not counted in minute boundaries
        gold_sql="""SELECT (epoch(min(e.charttime)) - epoch(a.admittime)) / 3600.0
FROM {emar} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
""" + EMAR_ABX + """
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
  AND dc.concept = {drug} AND """ + DOSE_GIVEN + """
GROUP BY a.admittime""",
        answer=HOURS,
        evidence=Evidence(**{**EMAR_DOSES, "join": EMAR_ABX}, focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", premise=ABX_EMAR_PREMISE,
        description="time from admission to the first antibiotic dose",
    ),
    Template(
        id="medications.count_doses", intent="medications", level="patient",
        paraphrases=(
            "How many doses of {drug} were administered to patient {subject_id} during admission {hadm_id}?",
            "Count the {drug} administrations charted in the eMAR for patient {subject_id} in admission {hadm_id}.",
            "During hospital admission {hadm_id}, how many times was {drug} given to patient {subject_id}?",
        ),
        sampler_sql=f"""SELECT DISTINCT e.subject_id, e.hadm_id, dc.concept AS drug FROM mimiciv_hosp.emar e
{EMAR_DRUG}
WHERE {DOSE_GIVEN} AND e.hadm_id IS NOT NULL""",
        gold_sql="""SELECT count(*)
FROM {emar} e
""" + EMAR_DRUG + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND dc.concept = {drug} AND """ + DOSE_GIVEN,
        answer=COUNT,
        evidence=Evidence(**EMAR_DOSES, focus="any"),
        noise=("duplicate_records", "out_of_window", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="subject_id", lexical="drug", description="number of administered doses of a drug",
    ),
    Template(
        id="medications.total_drip_amount", intent="medications", level="patient",
        paraphrases=(
            "What total amount of {label} (mg) did patient {subject_id} receive during ICU stay {stay_id}?",
            "How many mg of {label} were infused in total for patient {subject_id} in ICU stay {stay_id}?",
            "Patient {subject_id}, ICU stay {stay_id}: sum the {label} amounts given (mg).",
        ),
        sampler_sql=DRIP_SAMPLER,
        # rounded in SQL: a float sum's last bits depend on the order DuckDB's threads add in
        gold_sql="SELECT round(sum(e.amount), 6)\nFROM {inputevents} e" + DRIP_FILTER,
        answer=AMOUNT,
        evidence=Evidence(**DRIP_EVIDENCE, **DRIP_VALUE, focus="any"),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "unit_mismatch", "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="stay_id", lexical="label", premise=DRIP_PREMISE,
        description="total amount of a vasoactive/sedative infusion in an ICU stay",
    ),
    Template(
        id="medications.max_drip_amount", intent="medications", level="patient",
        paraphrases=(
            "What was the largest single charted amount (mg) of {label} for patient {subject_id} during ICU stay "
            "{stay_id}?",
            "In ICU stay {stay_id}, what was the highest {label} amount (mg) recorded in one infusion entry for "
            "patient {subject_id}?",
            "Patient {subject_id}, ICU stay {stay_id}: maximum amount of {label} (mg) in a single charted segment?",
        ),
        sampler_sql=DRIP_SAMPLER,
        gold_sql="SELECT max(e.amount)\nFROM {inputevents} e" + DRIP_FILTER,
        answer=AMOUNT,
        evidence=Evidence(**DRIP_EVIDENCE, **DRIP_VALUE, focus="max"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
               "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="stay_id", lexical="label", premise=DRIP_PREMISE,
        description="largest charted amount of an infusion in an ICU stay",
    ),
    Template(
        id="medications.drip_hours", intent="medications", level="patient",
        paraphrases=(
            "For how many hours in total did patient {subject_id} receive {label} during ICU stay {stay_id}?",
            "What was the total infusion time (hours) of {label} for patient {subject_id} in ICU stay {stay_id}?",
            "Patient {subject_id}, ICU stay {stay_id}: how many hours was the {label} drip running?",
        ),
        sampler_sql=DRIP_SAMPLER,
        # hours the drug ran: the union of the charted segments (a bolus charted inside a running drip, or two
        # overlapping segments, count once)
        gold_sql=covered_hours_sql("  SELECT e.starttime, e.endtime\n  FROM {inputevents} e"
                                   + DRIP_FILTER.replace("\n", "\n  ") + "\n    AND e.endtime > e.starttime"),
        answer=HOURS,
        evidence=Evidence(**DRIP_EVIDENCE, focus="any"),
        # a re-stored copy of a segment covers the same hours: no duplicate_records trap for a union of intervals
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="subject_id", lexical="label", premise=DRIP_PREMISE,
        description="duration of a vasopressor/sedative infusion in an ICU stay",
    ),
    Template(
        id="medications.count_antibiotics", intent="medications", level="patient",
        paraphrases=(
            "How many different systemic antibiotics (not eye, ear or skin preparations) were ordered for patient "
            "{subject_id} during admission {hadm_id}?",
            "Count the distinct systemic antibiotic agents prescribed to patient {subject_id} in hospital admission "
            "{hadm_id} (topical, eye and ear preparations excluded).",
            "Patient {subject_id}, admission {hadm_id}: how many distinct antibiotic agents were prescribed for "
            "systemic use?",
        ),
        sampler_sql=f"""SELECT DISTINCT e.subject_id, e.hadm_id FROM mimiciv_hosp.prescriptions e
{RX_ABX}
WHERE e.hadm_id IS NOT NULL AND {SYSTEMIC}""",
        # agents, not spellings: "CefTRIAXone" and "CeftriaXONE" are one antibiotic
        gold_sql=f"""SELECT count(DISTINCT dc.concept)
FROM {{prescriptions}} e
{RX_ABX}
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {{subject_id}} AND a.hadm_id = {{hadm_id}} AND {SYSTEMIC}""",
        answer=COUNT,
        evidence=Evidence(**{**RX_EVIDENCE, "join": RX_ABX, "where": f"e.hadm_id = {{hadm_id}} AND {SYSTEMIC}"},
                          category_col="drug", focus="first"),
        # duplicates and misplaced copies of an order do not change a count of DISTINCT drugs
        noise=("conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="number of distinct antibiotics of an admission",
    ),
    Template(
        id="medications.route", intent="medications", level="patient",
        paraphrases=(
            "By which route was {drug} ordered for patient {subject_id} during admission {hadm_id}?",
            "What administration route did the {drug} orders of patient {subject_id} in admission {hadm_id} specify?",
            "Patient {subject_id}, hospital admission {hadm_id}: how was {drug} to be given (route)?",
        ),
        sampler_sql=f"""SELECT e.subject_id, e.hadm_id, dc.concept AS drug FROM mimiciv_hosp.prescriptions e
{RX_DRUG}
WHERE e.hadm_id IS NOT NULL AND e.route IS NOT NULL
GROUP BY ALL HAVING count(DISTINCT e.route) = 1""",
        gold_sql="""SELECT DISTINCT e.route
FROM {prescriptions} e
""" + RX_DRUG + """
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND dc.concept = {drug}
ORDER BY e.route""",
        answer=NAME,
        evidence=Evidence(**RX_EVIDENCE, category_col="route", focus="first", aggregate=False),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "nonexistent_entity", "false_premise",
               "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", premise=RX_PREMISE, description="route of a drug order",
    ),
    Template(
        id="medications.was_given", intent="medications", level="patient",
        paraphrases=(
            "Was patient {subject_id} given {drug} during hospital admission {hadm_id}?",
            "Did patient {subject_id} receive any {drug} (charted as given in the eMAR) in admission {hadm_id}? "
            "Answer yes or no.",
            "Yes or no: was {drug} administered to patient {subject_id} during admission {hadm_id}?",
        ),
        # about as many 'no' (a drug the admission never received) as 'yes'
        sampler_sql=f"""
WITH adm AS (SELECT DISTINCT subject_id, hadm_id FROM mimiciv_hosp.emar WHERE hadm_id IS NOT NULL),
drugs AS (SELECT DISTINCT dc.concept AS drug FROM mimiciv_hosp.emar e {EMAR_DRUG}),
given AS (SELECT DISTINCT e.hadm_id, dc.concept AS drug FROM mimiciv_hosp.emar e {EMAR_DRUG}
          WHERE e.event_txt IN {GIVEN})
SELECT a.subject_id, a.hadm_id, d.drug
FROM adm a CROSS JOIN drugs d
LEFT JOIN given g ON g.hadm_id = a.hadm_id AND g.drug = d.drug
WHERE g.hadm_id IS NOT NULL OR hash(a.hadm_id, d.drug) % 6 = 0""",
        gold_sql=f"""SELECT count(*) > 0
FROM {{emar}} e
{EMAR_DRUG}
WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}}
  AND dc.concept = {{drug}} AND e.event_txt IN {GIVEN}""",
        answer=YES_NO,
        # the evidence is the admission's whole eMAR: without it, "not given" cannot be told from "not charted"
        evidence=Evidence(table="emar", where="e.hadm_id = {hadm_id}", key=EMAR_KEY, time_col="charttime",
                          window=ADMISSION_WINDOW, store_col="storetime"),
        noise=("missing_evidence", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", description="whether a drug was administered (yes/no)",
    ),
)

# ---------------------------------------------------------------- population level

YEAR_WINDOW = TimeWindow(DATABASE_SCOPE, year="year")
ICU_YEAR_WINDOW = TimeWindow(ICU_SCOPE, year="year")
# cohort membership as equi-joins (fast set-based profiling), not correlated sub-queries
ADM_JOIN = "JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id"
ADM_IN_YEAR = "extract(year FROM a.admittime) = {year}"
STAY_JOIN = "JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id"
STAY_IN_YEAR = "extract(year FROM s.intime) = {year}"
# admissions coded with an infection concept (sepsis, pneumonia, urinary tract infection)
INFECTION_ADMISSIONS = (f"(SELECT DISTINCT di.hadm_id, dx.concept FROM mimiciv_hosp.diagnoses_icd di {dx_join('di')} "
                        f"WHERE dx.concept IN {INFECTIONS})")
UNIT_JOIN = FIRST_CAREUNIT.join

register(
    Template(
        id="medications.cohort_top_antibiotic", intent="medications", level="population",
        paraphrases=(
            "Which systemic antibiotic was ordered most often in admissions that began in {year} with a diagnosis of "
            "{title}?",
            "Among {year} admissions coded with {title}, which systemic antibiotic agent had the most prescriptions?",
            "What was the most frequently prescribed systemic antibiotic (number of orders) for {title} admissions "
            "of {year}?",
        ),
        sampler_sql=f"""
SELECT year, title FROM (
  SELECT year, title, n, max(n) OVER (PARTITION BY year, title) AS top FROM (
    SELECT extract(year FROM a.admittime) AS year, k.concept AS title, dc.concept AS drug, count(*) AS n
    FROM mimiciv_hosp.prescriptions e
    {RX_ABX}
    JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
    JOIN {INFECTION_ADMISSIONS} k ON k.hadm_id = e.hadm_id
    WHERE {SYSTEMIC}
    GROUP BY ALL))
GROUP BY year, title
HAVING count(*) FILTER (WHERE n = top) = 1 AND sum(n) BETWEEN 2 AND 400""",
        gold_sql=f"""WITH cohort AS ({coded_cohort("title")}
), per_drug AS (
  SELECT dc.concept AS drug, count(*) AS n
  FROM {{prescriptions}} e
  {RX_ABX}
  WHERE {SYSTEMIC} AND e.hadm_id IN (SELECT hadm_id FROM cohort)
  GROUP BY dc.concept
)
SELECT drug FROM per_drug WHERE n = (SELECT max(n) FROM per_drug) ORDER BY drug""",
        answer=NAMES,
        evidence=Evidence(table="prescriptions", key=("hadm_id", "drug", "starttime"), id_col="pharmacy_id",
                          time_col="starttime", window=ADMISSION_WINDOW, category_col="drug",
                          join=f"{RX_ABX} JOIN {coded_admissions()} k ON k.hadm_id = e.hadm_id",
                          where=f"{SYSTEMIC} AND k.concept = {{title}} AND k.year = {{year}}"),
        noise=("missing_evidence", "conflicting_records", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW,
        description="most prescribed antibiotic in an infection cohort (top-1, ties as a set)",
    ),
    Template(
        id="medications.cohort_mean_drip_amount", intent="medications", level="population",
        paraphrases=(
            "Among ICU stays that began in {year} and received {label}, what was the mean total amount (mg) per stay?",
            "For {year} ICU stays on {label}, how many mg were given per stay on average?",
            "Average total {label} dose (mg) per ICU stay, over stays starting in {year} that received it?",
        ),
        sampler_sql=f"""SELECT extract(year FROM s.intime) AS year, p.itemid, cpt.concept AS label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
{DRIP_JOIN}
JOIN {DRIP_PRIMARY} ON p.concept = cpt.concept
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400""",
        gold_sql="""WITH per_stay AS (
  SELECT e.stay_id, sum(e.amount) AS total
  FROM {inputevents} e
  JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
  """ + DRIP_JOIN + """
  WHERE cpt.concept = {label} AND extract(year FROM s.intime) = {year}
  GROUP BY e.stay_id
)
SELECT round(avg(total), 6) FROM per_stay""",
        answer=AMOUNT,
        evidence=Evidence(**DRIPS.evidence(join=DRIPS.cohort_join(), where=DRIPS.cohort_where())),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "unit_mismatch", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=ICU_YEAR_WINDOW, description="mean total infusion amount per ICU stay in a year",
    ),
    Template(
        id="medications.cohort_unit_mean_segment", intent="medications", level="population",
        paraphrases=(
            "Among ICU stays that began in {year} in the {careunit}, what was the mean {label} amount (mg) per "
            "charted infusion entry?",
            "For the {careunit} stays of {year}, what was the average amount of {label} (mg) in one charted infusion "
            "entry?",
            "Average mg of {label} per charted segment over ICU stays starting in {year} whose first unit was the "
            "{careunit}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM s.intime) AS year, cu.concept AS careunit, p.itemid, cpt.concept AS label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
{UNIT_JOIN}
{DRIP_JOIN}
JOIN {DRIP_PRIMARY} ON p.concept = cpt.concept
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 400 AND count(DISTINCT e.amount) >= 2""",
        gold_sql="SELECT round(avg(e.amount), 6)\nFROM {inputevents} e" + DRIPS.cohort_filter(FIRST_CAREUNIT, "careunit"),
        answer=AMOUNT,
        evidence=Evidence(**DRIPS.evidence(join=DRIPS.cohort_join(FIRST_CAREUNIT),
                                           where=DRIPS.cohort_where(FIRST_CAREUNIT, "careunit"))),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "unit_mismatch", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=ICU_YEAR_WINDOW,
        description="mean charted infusion amount in a care unit and year",
    ),
    Template(
        id="medications.cohort_share_on_drip", intent="medications", level="population",
        paraphrases=(
            "What percentage of the ICU stays that began in {year} received {label}?",
            "Of all ICU stays starting in {year}, what share (%) had a {label} infusion?",
            "In {year}, what percent of ICU stays were on {label}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM s.intime) AS year, p.itemid, cpt.concept AS label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
{DRIP_JOIN}
JOIN {DRIP_PRIMARY} ON p.concept = cpt.concept
GROUP BY ALL
HAVING count(*) BETWEEN 1 AND 400""",
        gold_sql="""WITH stays AS (
  SELECT stay_id FROM mimiciv_icu.icustays WHERE extract(year FROM intime) = {year}
), treated AS (
  SELECT DISTINCT e.stay_id
  FROM {inputevents} e
  """ + DRIP_JOIN + """
  WHERE cpt.concept = {label} AND e.stay_id IN (SELECT stay_id FROM stays)
)
SELECT 100.0 * (SELECT count(*) FROM treated) / (SELECT count(*) FROM stays)""",
        answer=AMOUNT,
        evidence=Evidence(**DRIPS.evidence(values=False, join=DRIPS.cohort_join(), where=DRIPS.cohort_where())),
        noise=("temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=ICU_YEAR_WINDOW, description="share of ICU stays on a vasopressor/sedative",
    ),
    Template(
        id="medications.cohort_count_doses", intent="medications", level="population",
        paraphrases=(
            "How many {drug} administrations were charted in the eMAR for admissions that began in {year}?",
            "Across all admissions starting in {year}, how many doses of {drug} were given?",
            "Count the administered {drug} doses over admissions of {year}.",
        ),
        sampler_sql=f"""SELECT extract(year FROM a.admittime) AS year, dc.concept AS drug
FROM mimiciv_hosp.emar e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
{EMAR_DRUG}
WHERE {DOSE_GIVEN}
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400""",
        gold_sql="""SELECT count(*)
FROM {emar} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
""" + EMAR_DRUG + """
WHERE dc.concept = {drug} AND """ + DOSE_GIVEN + """ AND extract(year FROM a.admittime) = {year}""",
        answer=COUNT,
        evidence=Evidence(**{**EMAR_DOSES, "where": "dc.concept = {drug} AND " + DOSE_GIVEN + " AND "
                                                    + ADM_IN_YEAR, "join": EMAR_DRUG + " " + ADM_JOIN}),
        noise=("duplicate_records", "out_of_window", "lexical_variation", "out_of_scope"),
        lexical="drug", time_window=YEAR_WINDOW, description="number of eMAR administrations of a drug in a year",
    ),
    Template(
        id="medications.cohort_mean_hours_to_dose", intent="medications", level="population",
        paraphrases=(
            "Among admissions that began in {year} and received {drug}, what was the mean time (hours) from "
            "admission to the first dose?",
            "On average, how many hours after admission was the first {drug} dose given, over {year} admissions "
            "that received it?",
            "Mean admission-to-first-{drug} time in hours for admissions starting in {year}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM a.admittime) AS year, dc.concept AS drug
FROM mimiciv_hosp.emar e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
{EMAR_ABX}
WHERE {DOSE_GIVEN}
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400""",
        gold_sql="""WITH firsts AS (
  SELECT e.hadm_id, min(e.charttime) AS first_dose
  FROM {emar} e
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
  """ + EMAR_ABX + """
  WHERE dc.concept = {drug} AND """ + DOSE_GIVEN + """ AND extract(year FROM a.admittime) = {year}
  GROUP BY e.hadm_id
)
SELECT avg(epoch(f.first_dose) - epoch(a.admittime)) / 3600.0
FROM firsts f
JOIN mimiciv_hosp.admissions a ON a.hadm_id = f.hadm_id""",
        answer=HOURS,
        evidence=Evidence(**{**EMAR_DOSES, "where": "dc.concept = {drug} AND " + DOSE_GIVEN + " AND "
                                                    + ADM_IN_YEAR, "join": EMAR_ABX + " " + ADM_JOIN}, focus="first"),
        noise=("missing_evidence", "out_of_window", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="drug", time_window=YEAR_WINDOW, description="mean time from admission to the first antibiotic dose",
    ),
)
