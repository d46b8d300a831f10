"""Encounter questions: admissions, ICU stays, transfers, length of stay, demographics.

Admission types and care units are named as clinicians name them ("emergency admissions", "the
medical ICU"): ``{admission_type}`` / ``{first_careunit}`` are concepts of ``ehrgym.bench.concepts``
and the SQL matches every database value of the concept ("emergency" = ``EW EMER.`` and ``DIRECT
EMER.``). Durations are exact to the second (``epoch`` differences), not counted in minute
boundaries; "first care unit" skips the emergency department (``ED_CAREUNITS``).
"""

from __future__ import annotations

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import ED_CAREUNITS, relation
from ehrgym.bench.templates.base import ADMISSION_WINDOW, Evidence, Template, TimeWindow
from ehrgym.bench.templates.registry import register

HOURS = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.01, decimals=2)
COUNT = AnswerSpec("integer")

ICU_LOS_BOUNDS = (0.0, 365.0)  # days; longer ICU stays do not happen
AGE_BOUNDS = (0.0, 91.0)  # MIMIC-IV anchor_age tops out at 91

ADMISSIONS_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
ICU_SCOPE = "SELECT min(intime), max(outtime) FROM mimiciv_icu.icustays"
ADM_TYPE_JOIN = ("JOIN " + relation("admission_type") + " adt(concept, admission_type) "
                 "ON adt.admission_type = e.admission_type")
UNIT_JOIN = "JOIN " + relation("careunit") + " cu(concept, careunit) ON cu.careunit = e.first_careunit"
NOT_ED = "e.careunit NOT IN (" + ", ".join(f"'{u}'" for u in ED_CAREUNITS) + ")"

register(
    Template(
        id="encounters.icu_los", intent="encounters", level="patient",
        paraphrases=(
            "How many days did ICU stay {stay_id} of patient {subject_id} last?",
            "What was the length of stay, in days, of patient {subject_id}'s ICU stay {stay_id}?",
            "For patient {subject_id}, how long (days) was ICU stay {stay_id}?",
        ),
        sampler_sql="SELECT subject_id, hadm_id, stay_id FROM mimiciv_icu.icustays WHERE los IS NOT NULL",
        gold_sql="SELECT e.los\nFROM {icustays} e\nWHERE e.subject_id = {subject_id} AND e.stay_id = {stay_id}",
        answer=HOURS,
        evidence=Evidence(table="icustays", where="e.stay_id = {stay_id}", key=("stay_id",), time_col="intime",
                          value_col="los", bounds=ICU_LOS_BOUNDS, focus="any", aggregate=False),
        noise=("missing_evidence", "conflicting_records", "implausible_value", "missing_value", "nonexistent_entity"),
        entity_ref="stay_id", description="ICU length of stay",
    ),
    Template(
        id="encounters.hours_to_icu", intent="encounters", level="patient",
        paraphrases=(
            "How many hours after hospital admission {hadm_id} was patient {subject_id} first admitted to an ICU?",
            "For patient {subject_id}, how long (in hours) from the start of admission {hadm_id} until the first "
            "ICU admission?",
            "Time in hours between admission {hadm_id} of patient {subject_id} and the patient's first ICU in-time?",
        ),
        sampler_sql="SELECT DISTINCT subject_id, hadm_id FROM mimiciv_icu.icustays",
        gold_sql="""SELECT (epoch(min(e.intime)) - epoch(a.admittime)) / 3600.0
FROM mimiciv_hosp.admissions a
JOIN {icustays} e ON e.hadm_id = a.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
GROUP BY a.admittime""",
        answer=HOURS,
        evidence=Evidence(table="icustays", where="e.hadm_id = {hadm_id}", key=("hadm_id", "intime"),
                          id_col="stay_id", time_col="intime", window=ADMISSION_WINDOW, category_col="first_careunit",
                          focus="first", aggregate=False),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity"),
        entity_ref="hadm_id", description="time from hospital admission to ICU admission",
    ),
    Template(
        id="encounters.first_careunit", intent="encounters", level="patient",
        paraphrases=(
            "To which care unit was patient {subject_id} first admitted after the emergency department during "
            "admission {hadm_id}?",
            "What was the first ward or unit (not the emergency department or its observation unit) of patient "
            "{subject_id}'s hospital admission {hadm_id}?",
            "In admission {hadm_id}, where was patient {subject_id} first placed (care unit, not the ED)?",
        ),
        sampler_sql=f"""SELECT DISTINCT subject_id, hadm_id FROM mimiciv_hosp.transfers e
WHERE eventtype IN ('admit', 'transfer') AND hadm_id IS NOT NULL AND careunit IS NOT NULL AND {NOT_ED}""",
        gold_sql=f"""SELECT e.careunit
FROM {{transfers}} e
WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}}
  AND e.eventtype IN ('admit', 'transfer') AND e.careunit IS NOT NULL AND {NOT_ED}
ORDER BY e.intime
LIMIT 1""",
        answer=AnswerSpec("string"),
        evidence=Evidence(table="transfers", where="e.hadm_id = {hadm_id} AND e.eventtype IN ('admit', 'transfer') "
                                                   f"AND e.careunit IS NOT NULL AND {NOT_ED}",
                          key=("hadm_id", "intime"), id_col="transfer_id", time_col="intime",
                          window=ADMISSION_WINDOW, category_col="careunit", focus="first", aggregate=False),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="first care unit of an admission",
    ),
    Template(
        id="encounters.transfer_count", intent="encounters", level="patient",
        paraphrases=(
            "How many times was patient {subject_id} moved between care units during admission {hadm_id}?",
            "Count the unit-to-unit transfers of patient {subject_id} in hospital admission {hadm_id}.",
            "During admission {hadm_id}, how many transfers from one unit to another did patient {subject_id} have?",
        ),
        sampler_sql="""SELECT subject_id, hadm_id FROM mimiciv_hosp.transfers
WHERE eventtype = 'transfer' AND hadm_id IS NOT NULL GROUP BY ALL""",
        # a move between units is a transfer event into another unit than the one the patient was in (MIMIC-IV
        # also records bed moves inside one unit as transfer events). The unit left is the latest strictly earlier
        # admit/transfer row of the admission in the table itself: a re-stored copy of a move still counts twice
        # for a credulous query, and an admit row timed before admittime (20 in the demo) still names the unit.
        gold_sql="""SELECT count(*)
FROM {transfers} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id} AND e.eventtype = 'transfer'
  AND e.careunit IS DISTINCT FROM (
    SELECT p.careunit
    FROM mimiciv_hosp.transfers p
    WHERE p.hadm_id = e.hadm_id AND p.eventtype IN ('admit', 'transfer') AND p.intime < e.intime
    ORDER BY p.intime DESC, p.transfer_id DESC
    LIMIT 1)""",
        answer=COUNT,
        evidence=Evidence(table="transfers", where="e.hadm_id = {hadm_id} AND e.eventtype = 'transfer'",
                          key=("hadm_id", "intime"), id_col="transfer_id", time_col="intime",
                          window=ADMISSION_WINDOW, category_col="careunit", focus="any", aggregate=True),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "nonexistent_entity"),
        entity_ref="subject_id", description="number of transfers in an admission",
    ),
    Template(
        id="encounters.age_at_admission", intent="encounters", level="patient",
        paraphrases=(
            "How old was patient {subject_id} at the start of admission {hadm_id}?",
            "What was patient {subject_id}'s age (years) when admission {hadm_id} began?",
            "At admission {hadm_id}, what age was patient {subject_id}?",
        ),
        sampler_sql="SELECT subject_id, hadm_id FROM mimiciv_hosp.admissions",
        gold_sql="""SELECT e.anchor_age + (extract(year FROM a.admittime) - e.anchor_year)
FROM {patients} e
JOIN mimiciv_hosp.admissions a ON a.subject_id = e.subject_id
WHERE e.subject_id = {subject_id} AND a.hadm_id = {hadm_id}""",
        answer=COUNT,
        evidence=Evidence(table="patients", where="e.subject_id = {subject_id}", key=("subject_id",),
                          value_col="anchor_age", bounds=AGE_BOUNDS, focus="any", aggregate=False),
        # no missing_evidence: a deleted patients row is indistinguishable from a nonexistent patient
        noise=("conflicting_records", "implausible_value", "nonexistent_entity"),
        entity_ref="hadm_id", description="age at admission from the anchor fields",
    ),
)

# ---------------------------------------------------------------- population level

register(
    Template(
        id="encounters.cohort_mean_los", intent="encounters", level="population",
        paraphrases=(
            "What was the mean hospital length of stay, in days, of {admission_type} admissions that began in {year}?",
            "Average length of stay (days) of the {admission_type} admissions starting in {year}?",
            "For {admission_type} admissions admitted in {year}, how many days did patients stay on average?",
        ),
        sampler_sql=f"""SELECT extract(year FROM e.admittime) AS year, adt.concept AS admission_type
FROM mimiciv_hosp.admissions e {ADM_TYPE_JOIN}
GROUP BY ALL HAVING count(*) BETWEEN 2 AND 300""",
        # whole seconds summed exactly (doubles below 2^53), so the same on any thread count
        gold_sql="""SELECT avg(epoch(e.dischtime) - epoch(e.admittime)) / 86400.0
FROM {admissions} e
""" + ADM_TYPE_JOIN + """
WHERE adt.concept = {admission_type} AND extract(year FROM e.admittime) = {year}""",
        answer=HOURS,
        evidence=Evidence(table="admissions", join=ADM_TYPE_JOIN,
                          where="adt.concept = {admission_type} AND extract(year FROM e.admittime) = {year}",
                          key=("subject_id", "admittime"), id_col="hadm_id", time_col="admittime", focus="last",
                          aggregate=True),
        noise=("duplicate_records", "missing_evidence", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="admission_type", time_window=TimeWindow(ADMISSIONS_SCOPE, year="year"),
        description="mean hospital length of stay of a cohort",
    ),
    Template(
        id="encounters.cohort_mortality", intent="encounters", level="population",
        paraphrases=(
            "What percentage of admissions that began in {year} ended with the patient dying in hospital?",
            "What was the in-hospital mortality (%) of admissions starting in {year}?",
            "Of all hospital admissions in {year}, what percent had hospital_expire_flag set (died in hospital)?",
        ),
        sampler_sql="""SELECT extract(year FROM admittime) AS year FROM mimiciv_hosp.admissions
GROUP BY ALL HAVING count(*) BETWEEN 2 AND 1000 AND sum(hospital_expire_flag) >= 1""",
        gold_sql="""SELECT 100.0 * count(*) FILTER (WHERE e.hospital_expire_flag = 1) / count(*)
FROM {admissions} e
WHERE extract(year FROM e.admittime) = {year}""",
        answer=HOURS,
        evidence=Evidence(table="admissions", where="extract(year FROM e.admittime) = {year}", key=("subject_id", "admittime"),
                          id_col="hadm_id", time_col="admittime", value_col="hospital_expire_flag",
                          bounds=(0.0, 1.0), focus="max", aggregate=True),
        noise=("duplicate_records", "missing_evidence", "temporal_mismatch"),
        time_window=TimeWindow(ADMISSIONS_SCOPE, year="year"),
        description="in-hospital mortality rate of a year",
    ),
    Template(
        id="encounters.cohort_top_careunit", intent="encounters", level="population",
        paraphrases=(
            "Which first care unit received the most ICU stays that began in {year}?",
            "Among ICU stays starting in {year}, which first care unit was the most common?",
            "What was the busiest ICU (by number of stays with that first care unit) in {year}?",
        ),
        sampler_sql="""SELECT year FROM (
  SELECT year, n, max(n) OVER (PARTITION BY year) AS top FROM (
    SELECT extract(year FROM intime) AS year, first_careunit, count(*) AS n
    FROM mimiciv_icu.icustays GROUP BY extract(year FROM intime), first_careunit)
) GROUP BY year
HAVING count(*) FILTER (WHERE n = top) = 1 AND sum(n) BETWEEN 2 AND 400""",
        gold_sql="""WITH per_unit AS (
  SELECT e.first_careunit, count(*) AS n
  FROM {icustays} e
  WHERE extract(year FROM e.intime) = {year}
  GROUP BY e.first_careunit
)
SELECT first_careunit FROM per_unit WHERE n = (SELECT max(n) FROM per_unit)""",
        answer=AnswerSpec("set"),
        evidence=Evidence(table="icustays", where="extract(year FROM e.intime) = {year}", key=("subject_id", "intime"),
                          id_col="stay_id", time_col="intime", window=ADMISSION_WINDOW,
                          category_col="first_careunit", focus="any", aggregate=True),
        noise=("duplicate_records", "missing_evidence", "conflicting_records", "temporal_mismatch"),
        time_window=TimeWindow(ICU_SCOPE, year="year"),
        description="most frequent first ICU care unit in a year (top-1 with ties as a set)",
    ),
    Template(
        id="encounters.cohort_mean_icu_los", intent="encounters", level="population",
        paraphrases=(
            "What was the mean ICU length of stay (days) of stays that began in {year} in the {first_careunit}?",
            "Average ICU LOS in days for the {first_careunit} stays starting in {year}?",
            "For ICU stays of {year} whose first care unit was the {first_careunit}, what was the mean length of stay "
            "in days?",
        ),
        sampler_sql=f"""SELECT extract(year FROM e.intime) AS year, cu.concept AS first_careunit
FROM mimiciv_icu.icustays e {UNIT_JOIN}
WHERE e.los IS NOT NULL GROUP BY ALL HAVING count(*) BETWEEN 2 AND 300""",
        gold_sql="""SELECT avg(e.los)
FROM {icustays} e
""" + UNIT_JOIN + """
WHERE cu.concept = {first_careunit} AND extract(year FROM e.intime) = {year}""",
        answer=HOURS,
        evidence=Evidence(table="icustays", join=UNIT_JOIN,
                          where="cu.concept = {first_careunit} AND extract(year FROM e.intime) = {year}",
                          key=("subject_id", "intime"), id_col="stay_id", time_col="intime", value_col="los",
                          bounds=ICU_LOS_BOUNDS, focus="any", aggregate=True),
        noise=("duplicate_records", "conflicting_records", "implausible_value", "missing_evidence",
               "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="first_careunit", time_window=TimeWindow(ICU_SCOPE, year="year"),
        description="mean ICU length of stay of a care unit in a year",
    ),
    Template(
        id="encounters.cohort_readmitted_patients", intent="encounters", level="population",
        paraphrases=(
            "How many distinct patients had more than one {admission_type} admission beginning in {year}?",
            "In {year}, how many patients had at least two {admission_type} admissions?",
            "Count the patients with two or more {admission_type} admissions that started in {year}.",
        ),
        sampler_sql=f"""SELECT extract(year FROM e.admittime) AS year, adt.concept AS admission_type
FROM mimiciv_hosp.admissions e {ADM_TYPE_JOIN}
GROUP BY ALL HAVING count(*) BETWEEN 2 AND 300""",
        gold_sql="""SELECT count(*) FROM (
  SELECT e.subject_id
  FROM {admissions} e
  """ + ADM_TYPE_JOIN + """
  WHERE adt.concept = {admission_type} AND extract(year FROM e.admittime) = {year}
  GROUP BY e.subject_id
  HAVING count(*) > 1
)""",
        answer=COUNT,
        evidence=Evidence(table="admissions", join=ADM_TYPE_JOIN,
                          where="adt.concept = {admission_type} AND extract(year FROM e.admittime) = {year}",
                          key=("subject_id", "admittime"), id_col="hadm_id", time_col="admittime", focus="first",
                          aggregate=True),
        noise=("duplicate_records", "lexical_variation", "out_of_scope"),
        lexical="admission_type", time_window=TimeWindow(ADMISSIONS_SCOPE, year="year"),
        description="patients with repeated admissions of one type in a year",
    ),
)
