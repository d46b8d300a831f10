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
from ehrgym.bench.concepts import primary_items, relation
from ehrgym.bench.templates.base import ICU_WINDOW, Evidence, Premise, Template, TimeWindow
from ehrgym.bench.templates.registry import register
from ehrgym.db.items import items_for_table

VITAL_CONCEPTS = relation("vital") + " cpt(concept, itemid)"
VITAL_PRIMARY = primary_items("vital") + " p(concept, itemid)"
VITAL_JOIN = "JOIN " + VITAL_CONCEPTS + " ON cpt.itemid = e.itemid"
URINE_CONCEPTS = relation("urine") + " cpt(concept, itemid)"
URINE_PRIMARY = primary_items("urine") + " p(concept, itemid)"
URINE_JOIN = "JOIN " + URINE_CONCEPTS + " ON cpt.itemid = e.itemid"
UNIT_JOIN = "JOIN " + relation("careunit") + " cu(concept, careunit) ON cu.careunit = s.first_careunit"

NUMBER = AnswerSpec("number")
MEAN = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.01, decimals=2)
COUNT = AnswerSpec("integer")

STAY_ITEM_SAMPLER = f"""
SELECT e.subject_id, e.stay_id, p.itemid, cpt.concept AS label
FROM mimiciv_icu.chartevents e
{VITAL_JOIN}
JOIN {VITAL_PRIMARY} ON p.concept = cpt.concept
GROUP BY ALL
HAVING count(*) >= 3
"""

CHART_EVIDENCE: dict[str, Any] = dict(
    table="chartevents", join=VITAL_JOIN,
    where="e.subject_id = {subject_id} AND e.stay_id = {stay_id} AND cpt.concept = {label}",
    key=("stay_id", "itemid", "charttime"), time_col="charttime", value_col="valuenum", text_col="value",
    unit_col="valueuom", item_col="itemid", item_param="itemid", window=ICU_WINDOW, store_col="storetime",
)

STAY_FILTER = """
""" + VITAL_JOIN + """
WHERE e.subject_id = {subject_id} AND e.stay_id = {stay_id}
  AND cpt.concept = {label}"""

STAY_PREMISE = Premise("itemid", "label", f"""
SELECT p.itemid, p.concept FROM {VITAL_PRIMARY}
WHERE p.concept NOT IN (
    SELECT c2.concept FROM mimiciv_icu.chartevents e2 JOIN {relation("vital")} c2(concept, itemid) ON c2.itemid = e2.itemid
    WHERE e2.stay_id = {{stay_id}})
ORDER BY p.concept""")

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
        sampler_sql=STAY_ITEM_SAMPLER,
        gold_sql="SELECT e.valuenum\nFROM {chartevents} e" + STAY_FILTER + "\nORDER BY e.charttime ASC\nLIMIT 1",
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
            "What was patient {subject_id}'s mean {label} between {t0} and {t1}?",
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
        sampler_sql=f"""
SELECT e.subject_id, e.stay_id, p.itemid, cpt.concept AS label
FROM mimiciv_icu.outputevents e
{URINE_JOIN}
JOIN {URINE_PRIMARY} ON p.concept = cpt.concept
GROUP BY ALL
HAVING count(*) >= 2""",
        gold_sql="""SELECT sum(e.value)
FROM {outputevents} e
""" + URINE_JOIN + """
WHERE e.subject_id = {subject_id} AND e.stay_id = {stay_id}
  AND cpt.concept = {label}""",
        answer=NUMBER,
        evidence=Evidence(table="outputevents", join=URINE_JOIN,
                          where="e.subject_id = {subject_id} AND e.stay_id = {stay_id} AND cpt.concept = {label}",
                          key=("stay_id", "itemid", "charttime"), time_col="charttime", value_col="value",
                          unit_col="valueuom", item_col="itemid", item_param="itemid", window=ICU_WINDOW,
                          store_col="storetime", focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value", "missing_evidence",
               "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="stay_id", lexical="label",
        premise=Premise("itemid", "label", f"""
SELECT p.itemid, p.concept FROM {URINE_PRIMARY}
WHERE p.concept NOT IN (
    SELECT c2.concept FROM mimiciv_icu.outputevents e2 JOIN {relation("urine")} c2(concept, itemid) ON c2.itemid = e2.itemid
    WHERE e2.stay_id = {{stay_id}})
ORDER BY p.concept"""),
        description="total urine output of an ICU stay",
    ),
)

# ---------------------------------------------------------------- population level

COHORT_SAMPLER = f"""
SELECT extract(year FROM s.intime) AS year, cu.concept AS first_careunit, p.itemid, cpt.concept AS label
FROM mimiciv_icu.icustays s
{UNIT_JOIN}
JOIN mimiciv_icu.chartevents e ON e.stay_id = s.stay_id
{VITAL_JOIN}
JOIN {VITAL_PRIMARY} ON p.concept = cpt.concept
WHERE {NO_TEMPERATURE}
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 1500
"""

COHORT_EVIDENCE: dict[str, Any] = dict(
    CHART_EVIDENCE,
    join=VITAL_JOIN + " JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id " + UNIT_JOIN,
    where="cpt.concept = {label} AND cu.concept = {first_careunit} AND extract(year FROM s.intime) = {year}",
)

COHORT_FILTER = """
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
""" + UNIT_JOIN + """
""" + VITAL_JOIN + """
WHERE cpt.concept = {label}
  AND cu.concept = {first_careunit} AND extract(year FROM s.intime) = {year}"""

DB_SCOPE = "SELECT min(intime), max(outtime) FROM mimiciv_icu.icustays"

register(
    Template(
        id="vitals.cohort_mean", intent="vitals", level="population",
        paraphrases=(
            "What was the mean {label} over all readings of ICU stays that started in {year} in the "
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
        evidence=Evidence(**{**COHORT_EVIDENCE, "join": VITAL_JOIN + " JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id",
                                "where": "cpt.concept = {label} AND extract(year FROM s.intime) = {year}"},
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
        evidence=Evidence(table="outputevents",
                          join=URINE_JOIN + " JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id",
                          where="cpt.concept = {label} AND extract(year FROM s.intime) = {year}",
                          key=("stay_id", "itemid", "charttime"), time_col="charttime", value_col="value",
                          unit_col="valueuom", item_col="itemid", item_param="itemid", window=ICU_WINDOW,
                          store_col="storetime", focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value", "missing_evidence",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=TimeWindow(DB_SCOPE, year="year"),
        description="cohort mean of total urine output per ICU stay",
    ),
)
