"""Laboratory questions (``labevents``): the reference example of a template module.

Every template reads its evidence table through the placeholder ``{labevents}`` so that the
builder can substitute the plain table (clean / naive SQL) or a cleaning sub-query (robust SQL of
recoverable noise). Questions name a lab as a clinician does ("serum potassium", "blood gas pH",
"hemoglobin"): ``{label}`` is the clinical name of a reviewed concept of ``ehrgym.bench.concepts``
(domain ``lab``), and the gold SQL matches the concept's full item set through the concept
relation filtered by that name (``cpt.concept = {label}``) — so the answer covers every item the
words mean (CBC and blood-gas hemoglobin), excludes what they do not (urine pH, whole-blood
potassium), and a misspelled or abbreviated name finds nothing in a credulous agent's query.
``{itemid}`` is the concept's primary item: its plausibility bounds and unit conversions apply.
"""

from __future__ import annotations

from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import primary_items, relation  # noqa: F401  (importable from here, as before)
from ehrgym.bench.templates.base import ADMISSION_WINDOW, Evidence, Premise, Template, TimeWindow  # noqa: F401
from ehrgym.bench.templates.families import ADMISSION_TYPE, LAB_EVENTS
from ehrgym.bench.templates.registry import register
from ehrgym.db.items import items_for_table

LABS = LAB_EVENTS  # the family: labevents rows of reviewed lab concepts, by hospital admission
LAB_CONCEPTS = LABS.concepts  # every reviewed lab concept and its items
LAB_PRIMARY = LABS.primary  # concept -> the item its bounds/units come from
CONCEPT_JOIN = LABS.join

NUMBER = AnswerSpec("number")
MEAN = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.01, decimals=2)
COUNT = AnswerSpec("integer")

ALL_VALUE = ("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
             "missing_value", "encoding_corruption", "nonexistent_entity", "false_premise", "lexical_variation",
             "out_of_scope")

# one (subject, admission, blood test) with at least two results
ADMISSION_ITEM_SAMPLER = LABS.entity_sampler(min_rows=2, require_stay=True)
ADMISSION_EVIDENCE: dict[str, Any] = LABS.evidence(join=CONCEPT_JOIN, where=LABS.entity_where())
# a lab concept of which the admission has no result at all (but other patients do)
ADMISSION_PREMISE = Premise(*LABS.missing_concept_premise("e2.subject_id = {subject_id} AND e2.hadm_id = {hadm_id}"))
ADMISSION_ITEM_FILTER = LABS.entity_filter()

PATIENT_SCOPE = ("SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions "
                 "WHERE subject_id = {subject_id}")
DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"

register(
    Template(
        id="labs.first_value_admission", intent="labs", level="patient",
        paraphrases=(
            "What was the first {label} value of patient {subject_id} during hospital admission {hadm_id}?",
            "During admission {hadm_id}, what was patient {subject_id}'s initial {label} result?",
            "Patient {subject_id}, admission {hadm_id}: what did the first {label} measurement show?",
        ),
        sampler_sql=ADMISSION_ITEM_SAMPLER,
        # at one time, the lab's reference item before another item of the concept (a CBC's hemoglobin before a
        # blood gas's): the answer does not hang on which row a scan meets first
        gold_sql="SELECT e.valuenum\nFROM {labevents} e" + ADMISSION_ITEM_FILTER
                 + "\nORDER BY e.charttime ASC, e.itemid <> {itemid}\nLIMIT 1",
        answer=NUMBER,
        evidence=Evidence(**ADMISSION_EVIDENCE, focus="first", aggregate=False),
        noise=ALL_VALUE, entity_ref="hadm_id", lexical="label", premise=ADMISSION_PREMISE,
        description="first value of a lab test in an admission",
    ),
    Template(
        id="labs.last_value_admission", intent="labs", level="patient",
        paraphrases=(
            "What was the last {label} value recorded for patient {subject_id} during admission {hadm_id}?",
            "What was patient {subject_id}'s most recent {label} in hospital admission {hadm_id}?",
            "For admission {hadm_id} of patient {subject_id}, report the final {label} result.",
        ),
        sampler_sql=ADMISSION_ITEM_SAMPLER,
        gold_sql="SELECT e.valuenum\nFROM {labevents} e" + ADMISSION_ITEM_FILTER
                 + "\nORDER BY e.charttime DESC, e.itemid <> {itemid}\nLIMIT 1",
        answer=NUMBER,
        evidence=Evidence(**ADMISSION_EVIDENCE, focus="last", aggregate=False),
        noise=ALL_VALUE, entity_ref="subject_id", lexical="label", premise=ADMISSION_PREMISE,
        description="last value of a lab test in an admission",
    ),
    Template(
        id="labs.max_value_admission", intent="labs", level="patient",
        paraphrases=(
            "What was the highest {label} of patient {subject_id} during admission {hadm_id}?",
            "What was the peak {label} value for patient {subject_id} in hospital admission {hadm_id}?",
            "During admission {hadm_id}, what maximum {label} did patient {subject_id} reach?",
        ),
        sampler_sql=ADMISSION_ITEM_SAMPLER,
        gold_sql="SELECT max(e.valuenum)\nFROM {labevents} e" + ADMISSION_ITEM_FILTER,
        answer=NUMBER,
        evidence=Evidence(**ADMISSION_EVIDENCE, focus="max", aggregate=True),
        noise=tuple(s for s in ALL_VALUE if s != "missing_value"), entity_ref="hadm_id", lexical="label",
        premise=ADMISSION_PREMISE, description="maximum of a lab test in an admission",
    ),
    Template(
        id="labs.min_value_admission", intent="labs", level="patient",
        paraphrases=(
            "What was the lowest {label} of patient {subject_id} during admission {hadm_id}?",
            "What was the nadir of {label} for patient {subject_id} in hospital admission {hadm_id}?",
            "During admission {hadm_id}, how low did patient {subject_id}'s {label} go?",
        ),
        sampler_sql=ADMISSION_ITEM_SAMPLER,
        gold_sql="SELECT min(e.valuenum)\nFROM {labevents} e" + ADMISSION_ITEM_FILTER,
        answer=NUMBER,
        evidence=Evidence(**ADMISSION_EVIDENCE, focus="min", aggregate=True, extreme="low"),
        noise=tuple(s for s in ALL_VALUE if s != "missing_value"), entity_ref="hadm_id", lexical="label",
        premise=ADMISSION_PREMISE, description="minimum of a lab test in an admission",
    ),
    Template(
        id="labs.change_first_last", intent="labs", level="patient",
        paraphrases=(
            "By how much did patient {subject_id}'s {label} change from the first to the last measurement "
            "of admission {hadm_id} (last minus first)?",
            "What was the change in {label} between the first and the last result of admission {hadm_id} "
            "for patient {subject_id} (last − first)?",
            "For patient {subject_id} in admission {hadm_id}, compute the last {label} value minus the first one.",
        ),
        sampler_sql=ADMISSION_ITEM_SAMPLER,
        gold_sql="WITH v AS (\n  SELECT e.charttime, e.valuenum, e.itemid <> {itemid} AS other_item\n  FROM {labevents} e"
                 + ADMISSION_ITEM_FILTER
                 + "\n)\nSELECT (SELECT valuenum FROM v ORDER BY charttime DESC, other_item LIMIT 1)\n"
                   "     - (SELECT valuenum FROM v ORDER BY charttime ASC, other_item LIMIT 1)",
        answer=MEAN,
        evidence=Evidence(**ADMISSION_EVIDENCE, focus="last", aggregate=False),
        noise=ALL_VALUE, entity_ref="hadm_id", lexical="label", premise=ADMISSION_PREMISE,
        description="trend between the first and last value of a lab test",
    ),
    Template(
        id="labs.count_results_admission", intent="labs", level="patient",
        paraphrases=(
            "How many {label} results were reported for patient {subject_id} during admission {hadm_id}?",
            "How many times was {label} resulted for patient {subject_id} in hospital admission {hadm_id}?",
            "Count the {label} results of patient {subject_id} during admission {hadm_id}.",
        ),
        sampler_sql=ADMISSION_ITEM_SAMPLER,
        gold_sql="SELECT count(*)\nFROM {labevents} e" + ADMISSION_ITEM_FILTER,
        answer=COUNT,
        evidence=Evidence(**ADMISSION_EVIDENCE, focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "missing_value", "conflicting_records", "nonexistent_entity",
               "lexical_variation", "out_of_scope"),
        entity_ref="subject_id", lexical="label", description="number of results of a lab test",
    ),
    Template(
        id="labs.mean_first_72h", intent="labs", level="patient",
        paraphrases=(
            "What was the average {label} of patient {subject_id} between {t0} and {t1}?",
            "Average all {label} results of patient {subject_id} taken from {t0} to {t1}.",
            "Between {t0} and {t1}, what was patient {subject_id}'s average {label}?",
        ),
        sampler_sql=f"""
SELECT a.subject_id, p.itemid, cpt.concept AS label,
       date_trunc('minute', a.admittime) AS t0, date_trunc('minute', a.admittime) + INTERVAL 72 HOUR AS t1
FROM mimiciv_hosp.admissions a
JOIN mimiciv_hosp.labevents e ON e.hadm_id = a.hadm_id
{CONCEPT_JOIN}
JOIN {LAB_PRIMARY} ON p.concept = cpt.concept
WHERE e.charttime BETWEEN date_trunc('minute', a.admittime) AND date_trunc('minute', a.admittime) + INTERVAL 72 HOUR
GROUP BY ALL
HAVING count(*) >= 2""",
        gold_sql="""SELECT avg(e.valuenum)
FROM {labevents} e
""" + CONCEPT_JOIN + """
WHERE e.subject_id = {subject_id} AND cpt.concept = {label}
  AND e.charttime BETWEEN {t0} AND {t1}""",
        answer=MEAN,
        evidence=Evidence(**{**ADMISSION_EVIDENCE,
                             "where": "e.subject_id = {subject_id} AND cpt.concept = {label} "
                                      "AND e.charttime BETWEEN {t0} AND {t1}"}, focus="any", aggregate=True),
        noise=("duplicate_records", "conflicting_records", "implausible_value", "unit_mismatch", "encoding_corruption",
               "missing_evidence", "nonexistent_entity", "false_premise", "temporal_mismatch", "lexical_variation",
               "out_of_scope"),
        entity_ref="subject_id", lexical="label",
        premise=Premise(*LABS.missing_concept_premise(
            "e2.subject_id = {subject_id} AND e2.charttime BETWEEN {t0} AND {t1}")),
        time_window=TimeWindow(PATIENT_SCOPE, start="t0", end="t1"),
        description="mean of a lab test over the first 72 hours of an admission",
    ),
)

# ---------------------------------------------------------------- population level

# admission types as a clinician says them ("emergency" = EW EMER. + DIRECT EMER.)
ADM_TYPES = relation("admission_type") + " adt(concept, admission_type)"
ADM_TYPE_JOIN = ADMISSION_TYPE.join

COHORT_SAMPLER = LABS.cohort_sampler(ADMISSION_TYPE, "admission_type", lo=3, hi=600)
COHORT_EVIDENCE: dict[str, Any] = LABS.evidence(join=LABS.cohort_join(ADMISSION_TYPE),
                                                where=LABS.cohort_where(ADMISSION_TYPE, "admission_type"))
COHORT_FILTER = LABS.cohort_filter(ADMISSION_TYPE, "admission_type")

POP_NOISE = ("duplicate_records", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
             "encoding_corruption", "missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope")

# thresholds clinicians use to call a result high
THRESHOLDS = {50912: 2.0, 50971: 5.5, 50931: 200.0, 51301: 12.0, 50813: 2.0, 51006: 40.0, 50885: 2.0,
              51237: 1.5, 50889: 100.0, 51003: 0.1, 50983: 145.0, 50882: 30.0, 50960: 2.6, 50970: 4.5,
              51265: 450.0, 50868: 16.0}
_UNITS = {r.itemid: r.unit for r in items_for_table("labevents")}
THRESHOLD_VALUES = ", ".join(f"({i}, {v!r}, '{_UNITS[i]}')" for i, v in sorted(THRESHOLDS.items()))

register(
    Template(
        id="labs.cohort_mean", intent="labs", level="population",
        paraphrases=(
            "What was the average {label} over all results from {admission_type} admissions that began in {year}?",
            "Across every {label} result of {admission_type} admissions starting in {year}, what was "
            "the average value?",
            "Average {label} among {admission_type} admissions admitted in {year}: what was it?",
        ),
        sampler_sql=COHORT_SAMPLER,
        gold_sql="SELECT avg(e.valuenum)\nFROM {labevents} e" + COHORT_FILTER,
        answer=MEAN,
        evidence=Evidence(**COHORT_EVIDENCE, focus="any", aggregate=True),
        noise=POP_NOISE, lexical="label",
        time_window=TimeWindow(DATABASE_SCOPE, year="year"),
        description="cohort mean of a lab test",
    ),
    Template(
        id="labs.cohort_max", intent="labs", level="population",
        paraphrases=(
            "What was the highest {label} recorded during {admission_type} admissions that began in {year}?",
            "Among {admission_type} admissions starting in {year}, what was the maximum {label}?",
            "Report the peak {label} value across {admission_type} admissions admitted in {year}.",
        ),
        sampler_sql=COHORT_SAMPLER,
        gold_sql="SELECT max(e.valuenum)\nFROM {labevents} e" + COHORT_FILTER,
        answer=NUMBER,
        evidence=Evidence(**COHORT_EVIDENCE, focus="max", aggregate=True),
        noise=tuple(s for s in POP_NOISE if s != "duplicate_records"), lexical="label",
        time_window=TimeWindow(DATABASE_SCOPE, year="year"),
        description="cohort maximum of a lab test",
    ),
    Template(
        id="labs.cohort_rate_above", intent="labs", level="population",
        paraphrases=(
            "Among {admission_type} admissions that began in {year}, what percentage had at least one "
            "{label} above {threshold} {unit}?",
            "What share (in %) of the {admission_type} admissions starting in {year} had a {label} "
            "result over {threshold} {unit}?",
            "Of all {admission_type} admissions in {year}, what percent had any {label} > {threshold} {unit}?",
        ),
        sampler_sql=f"""
SELECT extract(year FROM a.admittime) AS year, adt.concept AS admission_type, p.itemid, cpt.concept AS label,
       t.threshold, t.unit
FROM mimiciv_hosp.admissions a
{ADM_TYPE_JOIN}
JOIN mimiciv_hosp.labevents e ON e.hadm_id = a.hadm_id
{CONCEPT_JOIN}
JOIN {LAB_PRIMARY} ON p.concept = cpt.concept
JOIN (VALUES {THRESHOLD_VALUES}) t(itemid, threshold, unit) ON t.itemid = p.itemid
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 600 AND count(*) FILTER (WHERE e.valuenum > t.threshold) >= 1""",
        gold_sql="""WITH cohort AS (
  SELECT a.hadm_id FROM mimiciv_hosp.admissions a
  """ + ADM_TYPE_JOIN + """
  WHERE adt.concept = {admission_type} AND extract(year FROM a.admittime) = {year}
), high AS (
  SELECT DISTINCT e.hadm_id
  FROM {labevents} e
  """ + CONCEPT_JOIN + """
  WHERE cpt.concept = {label} AND e.valuenum > {threshold}
    AND e.hadm_id IN (SELECT hadm_id FROM cohort)
)
SELECT 100.0 * (SELECT count(*) FROM high) / (SELECT count(*) FROM cohort)""",
        answer=MEAN,
        evidence=Evidence(**COHORT_EVIDENCE, focus="min", aggregate=True),
        noise=("out_of_window", "conflicting_records", "implausible_value", "unit_mismatch", "missing_evidence",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DATABASE_SCOPE, year="year"),
        description="rate of admissions with a high lab value in a cohort",
    ),
    Template(
        id="labs.cohort_mean_first", intent="labs", level="population",
        paraphrases=(
            "Across {admission_type} admissions that began in {year}, what was the average of the first {label} "
            "measured in each admission?",
            "Taking each {admission_type} admission of {year} and its first {label} result, what is the mean "
            "of those first values?",
            "What was the mean admission (first) {label} of {admission_type} admissions in {year}?",
        ),
        sampler_sql=COHORT_SAMPLER,
        gold_sql="""WITH firsts AS (
  SELECT e.hadm_id, e.valuenum,
         row_number() OVER (PARTITION BY e.hadm_id ORDER BY e.charttime, e.itemid <> {itemid}, e.valuenum) AS rn
  FROM {labevents} e""" + COHORT_FILTER.replace("\n", "\n  ") + """
)
SELECT avg(valuenum) FROM firsts WHERE rn = 1""",
        answer=MEAN,
        evidence=Evidence(**COHORT_EVIDENCE, focus="first", aggregate=True),
        noise=("out_of_window", "conflicting_records", "implausible_value", "unit_mismatch", "missing_value",
               "encoding_corruption", "missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DATABASE_SCOPE, year="year"),
        description="cohort mean of the first value per admission (window function)",
    ),
    Template(
        id="labs.cohort_argmax_patient", intent="labs", level="population",
        paraphrases=(
            "Which patient (subject_id) had the highest {label} among admissions that began in {year}?",
            "Among all admissions starting in {year}, whose {label} result was the highest? Give the subject_id.",
            "Identify the subject_id with the maximum {label} value recorded in admissions of {year}.",
        ),
        sampler_sql=f"""
SELECT year, itemid, label FROM (
  SELECT extract(year FROM a.admittime) AS year, p.itemid, cpt.concept AS label, e.valuenum,
         max(e.valuenum) OVER (PARTITION BY extract(year FROM a.admittime), cpt.concept) AS top
  FROM mimiciv_hosp.admissions a
  JOIN mimiciv_hosp.labevents e ON e.hadm_id = a.hadm_id
  {CONCEPT_JOIN}
  JOIN {LAB_PRIMARY} ON p.concept = cpt.concept
)
GROUP BY year, itemid, label
HAVING count(*) FILTER (WHERE valuenum = top) = 1 AND count(*) BETWEEN 3 AND 1500""",
        gold_sql="""SELECT e.subject_id
FROM {labevents} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
""" + CONCEPT_JOIN + """
WHERE cpt.concept = {label} AND extract(year FROM a.admittime) = {year}
ORDER BY e.valuenum DESC NULLS LAST, e.subject_id
LIMIT 1""",
        answer=COUNT,
        evidence=Evidence(**LABS.evidence(join=LABS.cohort_join(), where=LABS.cohort_where()),
                          focus="min", aggregate=True),
        noise=("out_of_window", "conflicting_records", "implausible_value", "unit_mismatch", "missing_evidence",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DATABASE_SCOPE, year="year"),
        description="the patient with the highest lab value in a year (top-1)",
    ),
)
