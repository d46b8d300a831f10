"""Vital-sign and ICU-monitoring questions (``chartevents``, ``outputevents``, ``icustays``).

Questions name a vital sign, a urine output or a care unit as a clinician does ("systolic blood
pressure", "urine output", "the medical ICU"); ``{label}`` / ``{first_careunit}`` are clinical
names of reviewed concepts (``ehrgym.bench.concepts`` domains ``vital``, ``urine``, ``careunit``)
and the gold SQL matches each concept's full item / value set (arterial and non-invasive systolic
pressure; every urine route) through the concept relation filtered by the name.
"""

from __future__ import annotations

from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import primary_items, relation  # noqa: F401  (importable from here, as before)
from ehrgym.bench.templates.base import ICU_WINDOW, Evidence, Premise, Template, TimeWindow  # noqa: F401
from ehrgym.bench.templates.families import FIRST_CAREUNIT, URINE_OUTPUT, VITAL_SIGNS
from ehrgym.bench.templates.registry import register
from ehrgym.db.items import items_for_table

VITALS = VITAL_SIGNS  # the family: chartevents rows of reviewed vital-sign concepts, by ICU stay
URINE = URINE_OUTPUT  # outputevents rows of the urine-output concepts, by ICU stay
VITAL_CONCEPTS = VITALS.concepts
VITAL_PRIMARY = VITALS.primary
VITAL_JOIN = VITALS.join
URINE_CONCEPTS = URINE.concepts
URINE_PRIMARY = URINE.primary
URINE_JOIN = URINE.join
UNIT_JOIN = FIRST_CAREUNIT.join

NUMBER = AnswerSpec("number")
MEAN = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.01, decimals=2)
COUNT = AnswerSpec("integer")

STAY_ITEM_SAMPLER = VITALS.entity_sampler(min_rows=3)
CHART_EVIDENCE: dict[str, Any] = VITALS.evidence(join=VITAL_JOIN, where=VITALS.entity_where())
STAY_FILTER = VITALS.entity_filter()
# stays whose first charted reading of the concept is one value: two items of one concept charted at that minute
# with different values (arterial and cuff pressure) leave "the first" reading undefined, so they are not asked about
FIRST_READING_SAMPLER = f"""
SELECT subject_id, stay_id, itemid, label
FROM (
  SELECT e.subject_id, e.stay_id, p.itemid, cpt.concept AS label, e.charttime, e.valuenum,
         min(e.charttime) OVER (PARTITION BY e.stay_id, cpt.concept) AS first_time
  FROM {VITALS.qualified} e
  {VITALS.join}
  JOIN {VITALS.primary} ON p.concept = cpt.concept) r
GROUP BY ALL
HAVING count(*) >= 3 AND count(DISTINCT valuenum) FILTER (WHERE charttime = first_time) = 1"""
STAY_PREMISE = Premise(*VITALS.missing_concept_premise("e2.stay_id = {stay_id}"))

SINGLE = ("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
          "missing_value", "encoding_corruption", "nonexistent_entity", "false_premise", "lexical_variation",
          "out_of_scope")
EXTREME = tuple(s for s in SINGLE if s != "missing_value")

# (population templates list no unit mismatch: the only vital-sign conversion, °F/°C, moves a row to
# another item, which is ambiguous in a cohort that legitimately charts both items; for the same reason
# they leave the two unit-specific temperature concepts out)
NO_TEMPERATURE = "cpt.concept NOT LIKE 'temperature%'"

# vital-sign thresholds that define a clinically notable reading
HIGH = {220045: 120.0, 220210: 30.0, 223761: 100.4, 220179: 180.0, 220050: 180.0, 223762: 38.0}
_UNITS = {r.itemid: r.unit for r in items_for_table("chartevents")}
HIGH_VALUES = ", ".join(f"({i}, {v!r}, '{_UNITS[i]}')" for i, v in sorted(HIGH.items()))

register(
    Template(
        id="vitals.first_value_stay", intent="vitals", level="patient",
        paraphrases=(
            "What was the first {label} charted for patient {subject_id} during ICU stay {stay_id}?",
            "On arrival in ICU stay {stay_id}, what was patient {subject_id}'s initial {label}?",
            "Patient {subject_id}, ICU stay {stay_id}: what was the first recorded {label}?",
        ),
        sampler_sql=FIRST_READING_SAMPLER,
        # the reading at the first charted time: where two items of one concept (arterial and cuff pressure, the
        # respiratory rate and its total) are charted at that minute they agree (FIRST_READING_SAMPLER), and their
        # mean (the MIMIC code repository's vitalsign table) is that value, not an arbitrary row of a LIMIT 1
        gold_sql="SELECT avg(valuenum)\nFROM (\n"
                 "  SELECT e.valuenum, e.charttime, min(e.charttime) OVER () AS first_time\n"
                 "  FROM {chartevents} e" + STAY_FILTER.replace("\n", "\n  ") + "\n) first_rows\n"
                 "WHERE charttime = first_time",
        answer=NUMBER, evidence=Evidence(**CHART_EVIDENCE, focus="first", aggregate=False),
        noise=SINGLE, entity_ref="stay_id", lexical="label", premise=STAY_PREMISE,
        description="first vital sign of an ICU stay",
    ),
    Template(
        id="vitals.max_value_stay", intent="vitals", level="patient",
        paraphrases=(
            "What was the highest {label} of patient {subject_id} during ICU stay {stay_id}?",
            "During ICU stay {stay_id}, what maximum {label} was charted for patient {subject_id}?",
            "Report patient {subject_id}'s peak {label} in ICU stay {stay_id}.",
        ),
        sampler_sql=STAY_ITEM_SAMPLER,
        gold_sql="SELECT max(e.valuenum)\nFROM {chartevents} e" + STAY_FILTER,
        answer=NUMBER, evidence=Evidence(**CHART_EVIDENCE, focus="max", aggregate=True),
        noise=EXTREME, entity_ref="stay_id", lexical="label", premise=STAY_PREMISE,
        description="maximum vital sign of an ICU stay",
    ),
    Template(
        id="vitals.min_value_stay", intent="vitals", level="patient",
        paraphrases=(
            "What was the lowest {label} of patient {subject_id} during ICU stay {stay_id}?",
            "How low did patient {subject_id}'s {label} drop during ICU stay {stay_id}?",
            "During ICU stay {stay_id}, what minimum {label} was charted for patient {subject_id}?",
        ),
        sampler_sql=STAY_ITEM_SAMPLER,
        gold_sql="SELECT min(e.valuenum)\nFROM {chartevents} e" + STAY_FILTER,
        answer=NUMBER, evidence=Evidence(**CHART_EVIDENCE, focus="min", aggregate=True, extreme="low"),
        noise=EXTREME, entity_ref="subject_id", lexical="label", premise=STAY_PREMISE,
        description="minimum vital sign of an ICU stay",
    ),
    Template(
        id="vitals.mean_first_24h", intent="vitals", level="patient",
        paraphrases=(
            "What was patient {subject_id}'s average {label} between {t0} and {t1}?",
            "Average the {label} readings of patient {subject_id} charted from {t0} to {t1}.",
            "Between {t0} and {t1}, what was the average {label} of patient {subject_id}?",
        ),
        sampler_sql=f"""
SELECT s.subject_id, p.itemid, cpt.concept AS label,
       date_trunc('minute', s.intime) AS t0, date_trunc('minute', s.intime) + INTERVAL 24 HOUR AS t1
FROM mimiciv_icu.icustays s
JOIN mimiciv_icu.chartevents e ON e.stay_id = s.stay_id
{VITAL_JOIN}
JOIN {VITAL_PRIMARY} ON p.concept = cpt.concept
WHERE e.charttime BETWEEN date_trunc('minute', s.intime) AND date_trunc('minute', s.intime) + INTERVAL 24 HOUR
GROUP BY ALL
HAVING count(*) >= 3""",
        gold_sql="""SELECT avg(e.valuenum)
FROM {chartevents} e
""" + VITAL_JOIN + """
WHERE e.subject_id = {subject_id} AND cpt.concept = {label}
  AND e.charttime BETWEEN {t0} AND {t1}""",
        answer=MEAN,
        evidence=Evidence(**{**CHART_EVIDENCE, "where": "e.subject_id = {subject_id} AND cpt.concept = {label} "
                                                         "AND e.charttime BETWEEN {t0} AND {t1}"},
                          focus="any", aggregate=True),
        noise=("duplicate_records", "conflicting_records", "implausible_value", "unit_mismatch",
               "encoding_corruption", "missing_evidence", "nonexistent_entity", "temporal_mismatch",
               "lexical_variation", "out_of_scope"),
        entity_ref="subject_id", lexical="label",
        time_window=TimeWindow("SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions "
                               "WHERE subject_id = {subject_id}", start="t0", end="t1"),
        description="mean vital sign over the first 24 hours of an ICU stay",
    ),
    Template(
        id="vitals.count_high_stay", intent="vitals", level="patient",
        paraphrases=(
            "How many {label} readings above {threshold} {unit} were charted for patient {subject_id} "
            "during ICU stay {stay_id}?",
            "During ICU stay {stay_id}, how many times was patient {subject_id}'s {label} over {threshold} {unit}?",
            "Count the {label} values greater than {threshold} {unit} of patient {subject_id} in ICU stay {stay_id}.",
        ),
        sampler_sql=f"""
SELECT e.subject_id, e.stay_id, p.itemid, cpt.concept AS label, t.threshold, t.unit
FROM mimiciv_icu.chartevents e
{VITAL_JOIN}
JOIN {VITAL_PRIMARY} ON p.concept = cpt.concept
JOIN (VALUES {HIGH_VALUES}) t(itemid, threshold, unit) ON t.itemid = p.itemid
GROUP BY ALL
HAVING count(*) FILTER (WHERE e.valuenum > t.threshold) >= 1""",
        gold_sql="SELECT count(*)\nFROM {chartevents} e" + STAY_FILTER + "\n  AND e.valuenum > {threshold}",
        answer=COUNT, evidence=Evidence(**CHART_EVIDENCE, focus="max", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="stay_id", lexical="label", description="number of abnormal vital-sign readings",
    ),
    Template(
        id="vitals.urine_output_stay", intent="vitals", level="patient",
        paraphrases=(
            "What was the total {label} (mL) of patient {subject_id} during ICU stay {stay_id}?",
            "How many mL of {label} were recorded for patient {subject_id} in ICU stay {stay_id}?",
            "Sum the {label} volumes charted for patient {subject_id} over ICU stay {stay_id} (mL).",
        ),
        sampler_sql=URINE.entity_sampler(min_rows=2),
        gold_sql="SELECT sum(e.value)\nFROM {outputevents} e" + URINE.entity_filter(),
        answer=NUMBER,
        evidence=Evidence(**URINE.evidence(join=URINE_JOIN, where=URINE.entity_where()), focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value", "missing_evidence",
               "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="stay_id", lexical="label",
        premise=Premise(*URINE.missing_concept_premise("e2.stay_id = {stay_id}")),
        description="total urine output of an ICU stay",
    ),
)

# ---------------------------------------------------------------- population level

COHORT_SAMPLER = VITALS.cohort_sampler(FIRST_CAREUNIT, "first_careunit", lo=3, hi=1500, where=NO_TEMPERATURE)
COHORT_EVIDENCE: dict[str, Any] = VITALS.evidence(join=VITALS.cohort_join(FIRST_CAREUNIT),
                                                  where=VITALS.cohort_where(FIRST_CAREUNIT, "first_careunit"))
COHORT_FILTER = VITALS.cohort_filter(FIRST_CAREUNIT, "first_careunit")

DB_SCOPE = "SELECT min(intime), max(outtime) FROM mimiciv_icu.icustays"

register(
    Template(
        id="vitals.cohort_mean", intent="vitals", level="population",
        paraphrases=(
            "What was the average {label} over all readings of ICU stays that started in {year} in the "
            "{first_careunit}?",
            "Across ICU stays beginning in {year} whose first unit was the {first_careunit}, what was the average "
            "{label}?",
            "Average {label} of the {first_careunit} stays admitted in {year}: what was it?",
        ),
        sampler_sql=COHORT_SAMPLER,
        gold_sql="SELECT avg(e.valuenum)\nFROM {chartevents} e" + COHORT_FILTER,
        answer=MEAN, evidence=Evidence(**COHORT_EVIDENCE, focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "encoding_corruption", "missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DB_SCOPE, year="year"),
        description="cohort mean of a vital sign",
    ),
    Template(
        id="vitals.cohort_max", intent="vitals", level="population",
        paraphrases=(
            "What was the highest {label} charted in ICU stays that started in {year} in the {first_careunit}?",
            "Among the {first_careunit} stays beginning in {year}, what was the maximum {label}?",
            "Report the peak {label} across ICU stays of {year} whose first unit was the {first_careunit}.",
        ),
        sampler_sql=COHORT_SAMPLER,
        gold_sql="SELECT max(e.valuenum)\nFROM {chartevents} e" + COHORT_FILTER,
        answer=NUMBER, evidence=Evidence(**COHORT_EVIDENCE, focus="max", aggregate=True),
        noise=("out_of_window", "conflicting_records", "implausible_value", "encoding_corruption",
               "missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DB_SCOPE, year="year"),
        description="cohort maximum of a vital sign",
    ),
    Template(
        id="vitals.cohort_rate_high", intent="vitals", level="population",
        paraphrases=(
            "What percentage of ICU stays that started in {year} had at least one {label} above {threshold} {unit}?",
            "Among ICU stays beginning in {year}, what share (%) recorded a {label} over {threshold} {unit}?",
            "Of all ICU stays in {year}, what percent had any {label} > {threshold} {unit}?",
        ),
        sampler_sql=f"""
SELECT extract(year FROM s.intime) AS year, p.itemid, cpt.concept AS label, t.threshold, t.unit
FROM mimiciv_icu.icustays s
JOIN mimiciv_icu.chartevents e ON e.stay_id = s.stay_id
{VITAL_JOIN}
JOIN {VITAL_PRIMARY} ON p.concept = cpt.concept
JOIN (VALUES {HIGH_VALUES}) t(itemid, threshold, unit) ON t.itemid = p.itemid
WHERE {NO_TEMPERATURE}
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 3000 AND count(*) FILTER (WHERE e.valuenum > t.threshold) >= 1""",
        gold_sql="""WITH stays AS (
  SELECT stay_id FROM mimiciv_icu.icustays WHERE extract(year FROM intime) = {year}
), high AS (
  SELECT DISTINCT e.stay_id
  FROM {chartevents} e
  """ + VITAL_JOIN + """
  WHERE cpt.concept = {label} AND e.valuenum > {threshold}
    AND e.stay_id IN (SELECT stay_id FROM stays)
)
SELECT 100.0 * (SELECT count(*) FROM high) / (SELECT count(*) FROM stays)""",
        answer=MEAN,
        evidence=Evidence(**VITALS.evidence(join=VITALS.cohort_join(), where=VITALS.cohort_where()),
                          focus="min", aggregate=True),
        noise=("out_of_window", "conflicting_records", "implausible_value", "missing_evidence",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DB_SCOPE, year="year"),
        description="rate of ICU stays with an abnormal vital sign",
    ),
    Template(
        id="vitals.cohort_mean_urine", intent="vitals", level="population",
        paraphrases=(
            "Across ICU stays that started in {year} with any {label} charted, what was the mean total {label} "
            "per stay (mL)?",
            "What was the average per-stay sum of {label} (mL) for ICU stays beginning in {year} that recorded it?",
            "For ICU stays of {year} with {label} recorded, what was the mean total volume per stay in mL?",
        ),
        sampler_sql=f"""
SELECT extract(year FROM s.intime) AS year, p.itemid, cpt.concept AS label
FROM mimiciv_icu.icustays s
JOIN mimiciv_icu.outputevents e ON e.stay_id = s.stay_id
{URINE_JOIN}
JOIN {URINE_PRIMARY} ON p.concept = cpt.concept
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 3000""",
        gold_sql="""WITH per_stay AS (
  SELECT e.stay_id, sum(e.value) AS total
  FROM {outputevents} e
  JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
  """ + URINE_JOIN + """
  WHERE cpt.concept = {label} AND extract(year FROM s.intime) = {year}
  GROUP BY e.stay_id
)
SELECT avg(total) FROM per_stay""",
        answer=MEAN,
        evidence=Evidence(**URINE.evidence(join=URINE.cohort_join(), where=URINE.cohort_where()),
                          focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value", "missing_evidence",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DB_SCOPE, year="year"),
        description="cohort mean of total urine output per ICU stay",
    ),
)
