"""Cohort-definition templates in the style of the MIMIC code repository's derived concepts:
acute kidney injury by KDIGO creatinine criteria, vasopressor exposure, suspected infection and a
sepsis-like cohort (suspected infection plus organ dysfunction). Definitions: ``concept_sql``.

All templates here are tier 3 (cohort definitions with multi-step time logic).
"""

from __future__ import annotations

from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, Evidence, Template
from ehrgym.bench.templates.concept_sql import (AKI_CONDITION, CREATININE, ICU_UNIT_VALUES, KDIGO_WORDS,
                                                SUSPICION_AFTER_H, SUSPICION_BEFORE_H, SUSPICION_WORDS,
                                                VASOPRESSOR_IDS, VASOPRESSOR_WORDS, aki_condition, covered_hours_sql,
                                                antibiotic_predicate, icd_group_predicate, kdigo_flag_sql,
                                                kdigo_stage_case, organ_dysfunction_predicate)
from ehrgym.bench.templates.hard_common import (COUNT, HOURS, LAB_EVIDENCE, MEAN, PERIOD_WINDOW, WHEN, period_sampler)
from ehrgym.bench.templates.registry import register


CohortTemplate = Template  # (an alias for importers: unpickling any Template imports the template modules)


def _suspicion_sql(hadm: str) -> str:
    """Suspected-infection events per admission: (hadm_id, suspicion time). ``hadm`` restricts the
    admissions (a predicate on ``p.hadm_id``)."""
    return f"""SELECT p.hadm_id, least(p.starttime, min(m.charttime)) AS suspected_at
  FROM mimiciv_hosp.prescriptions p
  JOIN mimiciv_hosp.microbiologyevents m ON m.hadm_id = p.hadm_id
   AND m.charttime BETWEEN p.starttime - INTERVAL {SUSPICION_BEFORE_H} HOUR
                       AND p.starttime + INTERVAL {SUSPICION_AFTER_H} HOUR
  WHERE {hadm} AND {antibiotic_predicate('p')}
  GROUP BY p.hadm_id, p.starttime"""


# ---------------------------------------------------------------- AKI (labs)

AKI_ROWS = f"""SELECT e.subject_id, e.hadm_id, e.charttime, e.valuenum
  FROM mimiciv_hosp.labevents e
  WHERE e.itemid = {CREATININE} AND e.hadm_id IS NOT NULL AND e.valuenum IS NOT NULL"""

AKI_ADMISSIONS = f"""WITH cr AS (
  {AKI_ROWS}
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
)
SELECT DISTINCT subject_id, hadm_id, {CREATININE} AS itemid FROM flagged WHERE {AKI_CONDITION}"""

AKI_FIRST_GOLD = f"""WITH cr AS (
  SELECT e.hadm_id, e.charttime, e.valuenum
  FROM {{labevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND e.itemid = {{itemid}}
    AND e.valuenum IS NOT NULL
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
)
SELECT min(charttime) FROM flagged WHERE {AKI_CONDITION}"""

AKI_STAGE_GOLD = f"""WITH cr AS (
  SELECT e.hadm_id, e.charttime, e.valuenum
  FROM {{labevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND e.itemid = {{itemid}}
    AND e.valuenum IS NOT NULL
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
), staged AS (
  SELECT charttime, {kdigo_stage_case()} AS stage FROM flagged
)
SELECT max(stage) FROM staged"""

# ICU stays by first care unit: AKI within the first 7 days of the stay (creatinine of the admission)
ICU_AKI_MEMBERS = f"""SELECT s.stay_id, s.intime AS t, u.careunit AS unit,
         EXISTS (SELECT 1 FROM flagged f WHERE f.hadm_id = s.hadm_id AND {aki_condition('f')}
                 AND f.charttime BETWEEN s.intime AND s.intime + INTERVAL 7 DAY) AS positive
  FROM mimiciv_icu.icustays s
  JOIN ({ICU_UNIT_VALUES}) u(careunit, unit_name) ON u.careunit = s.first_careunit"""

ICU_AKI_SAMPLER = f"""WITH cr AS (
  {AKI_ROWS}
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
), rows AS (
  {ICU_AKI_MEMBERS}
), cand AS (
{period_sampler('SELECT * FROM rows', lo=3, hi=300, extra_cols='unit')}
)
SELECT cand.t0, cand.t1, u.unit_name AS unit_name, {CREATININE} AS itemid
FROM cand JOIN ({ICU_UNIT_VALUES}) u(careunit, unit_name) ON u.careunit = cand.unit"""

ICU_AKI_GOLD = f"""WITH units(careunit, unit_name) AS ({ICU_UNIT_VALUES}),
cohort AS (
  SELECT s.stay_id, s.hadm_id, s.intime
  FROM mimiciv_icu.icustays s
  JOIN units u ON u.careunit = s.first_careunit
  WHERE u.unit_name = {{unit_name}} AND s.intime >= {{t0}} AND s.intime < {{t1}}
), cr AS (
  SELECT e.hadm_id, e.charttime, e.valuenum
  FROM {{labevents}} e
  WHERE e.itemid = {{itemid}} AND e.valuenum IS NOT NULL AND e.hadm_id IN (SELECT hadm_id FROM cohort)
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
), aki AS (
  SELECT DISTINCT c.stay_id
  FROM cohort c JOIN flagged f ON f.hadm_id = c.hadm_id
  WHERE f.charttime BETWEEN c.intime AND c.intime + INTERVAL 7 DAY
    AND {aki_condition('f')}
)
SELECT round(100.0 * (SELECT count(*) FROM aki) / count(*), 2) FROM cohort"""

# ---------------------------------------------------------------- vasopressors (medications)

PRESSOR_HOURS_GOLD = covered_hours_sql(f"""  SELECT e.starttime, e.endtime
  FROM {{inputevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.stay_id = {{stay_id}} AND e.itemid IN ({VASOPRESSOR_IDS})
    AND e.endtime > e.starttime""")

PRESSOR_DOSE_SAMPLER = f"""SELECT c.itemid, lower(d.label) AS drug, c.t0, c.t1 FROM (
{period_sampler(f'''  SELECT s.stay_id, s.intime AS t, v.itemid, TRUE AS positive
  FROM mimiciv_icu.icustays s
  JOIN mimiciv_hosp.diagnoses_icd dx ON dx.hadm_id = s.hadm_id
  JOIN (SELECT DISTINCT stay_id, itemid FROM mimiciv_icu.inputevents
        WHERE itemid IN ({VASOPRESSOR_IDS}) AND amount > 0) v ON v.stay_id = s.stay_id
  WHERE {icd_group_predicate("sepsis")}
  GROUP BY ALL''', lo=2, hi=150, extra_cols='itemid')}
) c JOIN mimiciv_icu.d_items d ON d.itemid = c.itemid"""

PRESSOR_DOSE_GOLD = f"""WITH septic AS (
  SELECT DISTINCT s.stay_id, s.intime
  FROM mimiciv_icu.icustays s
  JOIN mimiciv_hosp.diagnoses_icd dx ON dx.hadm_id = s.hadm_id
  WHERE {icd_group_predicate("sepsis")} AND s.intime >= {{t0}} AND s.intime < {{t1}}
), doses AS (
  SELECT c.stay_id, sum(e.amount) AS total
  FROM {{inputevents}} e
  JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
  JOIN septic c ON c.stay_id = e.stay_id
  WHERE d.itemid = {{itemid}} AND lower(d.label) = {{drug}}
    AND e.starttime >= c.intime AND e.starttime < c.intime + INTERVAL 24 HOUR
  GROUP BY c.stay_id
  HAVING sum(e.amount) > 0
)
SELECT avg(total) FROM doses"""

# ---------------------------------------------------------------- suspected infection (microbiology)

SUSPICION_SAMPLER = f"""SELECT DISTINCT a.subject_id, a.hadm_id
FROM ({_suspicion_sql('p.hadm_id IS NOT NULL')}) s
JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id"""

SUSPICION_GOLD = f"""WITH abx AS (
  SELECT p.starttime
  FROM mimiciv_hosp.prescriptions p
  WHERE p.hadm_id = {{hadm_id}} AND {antibiotic_predicate('p')}
), cultures AS (
  SELECT e.charttime
  FROM {{microbiologyevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND e.charttime IS NOT NULL
), suspicion AS (
  SELECT least(a.starttime, min(c.charttime)) AS suspected_at
  FROM abx a
  JOIN cultures c ON c.charttime BETWEEN a.starttime - INTERVAL {SUSPICION_BEFORE_H} HOUR
                                     AND a.starttime + INTERVAL {SUSPICION_AFTER_H} HOUR
  GROUP BY a.starttime
)
SELECT min(suspected_at) FROM suspicion"""

# ---------------------------------------------------------------- sepsis-like cohort (encounters)

SEPSIS_LIKE_MEMBERS = f"""SELECT a.hadm_id, a.admittime AS t, a.hospital_expire_flag = 1 AS positive
  FROM mimiciv_hosp.admissions a
  JOIN (SELECT hadm_id, min(suspected_at) AS suspected_at
        FROM ({_suspicion_sql('p.hadm_id IS NOT NULL')}) GROUP BY hadm_id) s ON s.hadm_id = a.hadm_id
  WHERE EXISTS (SELECT 1 FROM mimiciv_hosp.labevents l
                WHERE l.hadm_id = a.hadm_id AND {organ_dysfunction_predicate('l')}
                  AND l.charttime BETWEEN s.suspected_at - INTERVAL 48 HOUR AND s.suspected_at + INTERVAL 24 HOUR)"""

SEPSIS_LIKE_GOLD = f"""WITH abx AS (
  SELECT p.hadm_id, p.starttime
  FROM mimiciv_hosp.prescriptions p
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = p.hadm_id
  WHERE {antibiotic_predicate('p')} AND a.admittime >= {{t0}} AND a.admittime < {{t1}}
), suspicion AS (
  SELECT a.hadm_id, min(least(a.starttime, m.charttime)) AS suspected_at
  FROM abx a
  JOIN mimiciv_hosp.microbiologyevents m ON m.hadm_id = a.hadm_id
   AND m.charttime BETWEEN a.starttime - INTERVAL {SUSPICION_BEFORE_H} HOUR
                       AND a.starttime + INTERVAL {SUSPICION_AFTER_H} HOUR
  GROUP BY a.hadm_id
), cohort AS (
  SELECT e.hadm_id, e.hospital_expire_flag
  FROM {{admissions}} e
  JOIN suspicion s ON s.hadm_id = e.hadm_id
  WHERE e.admittime >= {{t0}} AND e.admittime < {{t1}}
    AND EXISTS (SELECT 1 FROM mimiciv_hosp.labevents l
                WHERE l.hadm_id = e.hadm_id AND {organ_dysfunction_predicate('l')}
                  AND l.charttime BETWEEN s.suspected_at - INTERVAL 48 HOUR AND s.suspected_at + INTERVAL 24 HOUR)
)
SELECT round(100.0 * count(*) FILTER (WHERE hospital_expire_flag = 1) / count(*), 2) FROM cohort"""

ORGAN_WORDS = ("organ dysfunction (creatinine >= 2.0 mg/dL, platelets < 100 K/uL, total bilirubin >= 2.0 mg/dL or "
               "lactate >= 2 mmol/L) from 48 hours before to 24 hours after the suspicion")

register(
    Template(
        id="labs.aki_onset_time", intent="labs", level="patient", tier=3,
        paraphrases=(
            f"During hospital admission {{hadm_id}}, when did patient {{subject_id}} first meet {KDIGO_WORDS}? "
            "Give the time of that creatinine result.",
            f"Patient {{subject_id}}, admission {{hadm_id}}: at what time did a creatinine result first fulfil "
            f"{KDIGO_WORDS}?",
            f"Using {KDIGO_WORDS}, report the time of the first creatinine of admission {{hadm_id}} (patient "
            "{subject_id}) that qualifies as acute kidney injury.",
        ),
        sampler_sql=AKI_ADMISSIONS,
        gold_sql=AKI_FIRST_GOLD,
        answer=WHEN,
        evidence=Evidence(**LAB_EVIDENCE, where="e.hadm_id = {hadm_id} AND e.itemid = {itemid}", focus="first",
                          aggregate=True, extreme="low"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
               "encoding_corruption", "nonexistent_entity"),
        entity_ref="hadm_id", description="onset of acute kidney injury by KDIGO creatinine criteria",
    ),
    Template(
        id="labs.cohort_icu_aki_rate", intent="labs", level="population", tier=3,
        paraphrases=(
            "Among ICU stays that began in the {unit_name} on or after {t0} and before {t1}, what percentage "
            f"developed {KDIGO_WORDS} within the first 7 days after ICU admission?",
            "For patients admitted to the {unit_name} between {t0} (inclusive) and {t1} (exclusive), what share "
            f"of ICU stays (in %) met {KDIGO_WORDS} during their first week in the ICU?",
            f"What percent of {{unit_name}} stays starting from {{t0}} up to {{t1}} had {KDIGO_WORDS} within 7 "
            "days of ICU admission?",
        ),
        sampler_sql=ICU_AKI_SAMPLER,
        gold_sql=ICU_AKI_GOLD,
        answer=MEAN,
        evidence=Evidence(**LAB_EVIDENCE, join="JOIN mimiciv_icu.icustays s ON s.hadm_id = e.hadm_id JOIN ("
                          + ICU_UNIT_VALUES + ") u(careunit, unit_name) ON u.careunit = s.first_careunit",
                          where="e.itemid = {itemid} AND u.unit_name = {unit_name} AND s.intime >= {t0} "
                                "AND s.intime < {t1}",
                          focus="min", aggregate=True, extreme="low"),
        noise=("out_of_window", "conflicting_records", "implausible_value", "missing_evidence", "lexical_variation"),
        lexical="unit_name", time_window=PERIOD_WINDOW,
        description="rate of KDIGO acute kidney injury in the first ICU week of a care unit's stays",
    ),
    Template(
        id="medications.vasopressor_hours", intent="medications", level="patient", tier=3,
        paraphrases=(
            f"During ICU stay {{stay_id}} of patient {{subject_id}}, for how many hours in total was "
            f"{VASOPRESSOR_WORDS} infusing? Count overlapping infusions once.",
            f"How many hours of ICU stay {{stay_id}} (patient {{subject_id}}) were spent on at least one infusion of "
            f"{VASOPRESSOR_WORDS}? Periods with several drugs running at once count once.",
            "Patient {subject_id}, ICU stay {stay_id}: total vasopressor time in hours, where a vasopressor is "
            "norepinephrine, epinephrine, vasopressin, phenylephrine or dopamine and overlapping infusions count once.",
        ),
        sampler_sql=f"""SELECT subject_id, stay_id FROM mimiciv_icu.inputevents
WHERE itemid IN ({VASOPRESSOR_IDS}) AND endtime > starttime GROUP BY ALL""",
        gold_sql=PRESSOR_HOURS_GOLD,
        answer=HOURS,
        evidence=Evidence(table="inputevents", where=f"e.stay_id = {{stay_id}} AND e.itemid IN ({VASOPRESSOR_IDS})",
                          key=("stay_id", "itemid", "starttime"), id_col="orderid", time_col="starttime",
                          window=ICU_WINDOW, store_col="storetime", value_col="amount", bounds=(0.0, 1e6),
                          focus="first", aggregate=True),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity"),
        entity_ref="stay_id", description="total vasopressor hours of an ICU stay (overlaps merged)",
    ),
    Template(
        id="medications.cohort_septic_vasopressor_dose", intent="medications", level="population", tier=3,
        paraphrases=(
            "Among ICU stays beginning on or after {t0} and before {t1} in hospital admissions coded with sepsis or "
            "septic shock, and counting only stays that received {drug}, what was the mean total {drug} amount "
            "(mg) given per stay in the first 24 hours after ICU admission?",
            "For septic patients (sepsis or septic shock coded in the admission) admitted to an ICU from {t0} up to "
            "{t1}, average the total {drug} dose in mg infused during each stay's first 24 ICU hours, over the "
            "stays that received it.",
            "What was the mean first-24-hour {drug} amount (mg per ICU stay) among ICU stays starting between {t0} "
            "(inclusive) and {t1} (exclusive) whose admission carried a sepsis or septic-shock code, over stays "
            "given {drug}?",
        ),
        sampler_sql=PRESSOR_DOSE_SAMPLER,
        gold_sql=PRESSOR_DOSE_GOLD,
        answer=MEAN,
        evidence=Evidence(table="inputevents",
                          # the rows the gold reads: the drug in the first 24 h of septic stays of the period
                          join="JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id",
                          where="e.itemid = {itemid} AND s.intime >= {t0} AND s.intime < {t1} "
                                "AND e.starttime >= s.intime AND e.starttime < s.intime + INTERVAL 24 HOUR "
                                "AND s.hadm_id IN (SELECT dx.hadm_id FROM mimiciv_hosp.diagnoses_icd dx WHERE "
                                + icd_group_predicate("sepsis") + ")",
                          key=("stay_id", "itemid", "starttime"), id_col="orderid", time_col="starttime",
                          window=ICU_WINDOW, store_col="storetime", value_col="amount", unit_col="amountuom",
                          item_col="itemid", item_param="itemid", focus="any", aggregate=True),
        noise=("duplicate_records", "conflicting_records", "implausible_value", "unit_mismatch", "missing_evidence",
               "lexical_variation", "out_of_scope"),
        lexical="drug", time_window=PERIOD_WINDOW,
        description="mean first-day vasopressor dose of septic ICU stays",
    ),
    Template(
        id="microbiology.suspected_infection_time", intent="microbiology", level="patient", tier=3,
        paraphrases=(
            f"During admission {{hadm_id}} of patient {{subject_id}}, when was there first {SUSPICION_WORDS}? "
            "Report the earlier of the culture and the antibiotic time.",
            f"Patient {{subject_id}}, admission {{hadm_id}}: give the onset time of {SUSPICION_WORDS}, i.e. the "
            "earlier of the two events of the first qualifying antibiotic-culture pair.",
            f"By the Sepsis-3 rule for {SUSPICION_WORDS}, when was infection first suspected in admission "
            "{hadm_id} (patient {subject_id})? Use the earlier time of the pair.",
        ),
        sampler_sql=SUSPICION_SAMPLER,
        gold_sql=SUSPICION_GOLD,
        answer=WHEN,
        evidence=Evidence(table="microbiologyevents", where="e.hadm_id = {hadm_id} AND e.charttime IS NOT NULL",
                          key=("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid"),
                          id_col="microevent_id", time_col="charttime", window=ADMISSION_WINDOW,
                          store_col="storetime", category_col="spec_type_desc", focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity"),
        entity_ref="hadm_id", description="time of suspected infection (antibiotic + culture, Sepsis-3)",
    ),
    Template(
        id="encounters.cohort_sepsis_like_mortality", intent="encounters", level="population", tier=3,
        paraphrases=(
            f"Among hospital admissions beginning on or after {{t0}} and before {{t1}} with {SUSPICION_WORDS} and "
            f"{ORGAN_WORDS}, what percentage died in hospital?",
            f"What was the in-hospital mortality (%) of a sepsis-like cohort — admissions from {{t0}} up to {{t1}} "
            f"with {SUSPICION_WORDS} plus {ORGAN_WORDS}?",
            f"Define sepsis-like admissions as {SUSPICION_WORDS} together with {ORGAN_WORDS}. Of those admitted "
            "between {t0} (inclusive) and {t1} (exclusive), what percent died before discharge?",
        ),
        sampler_sql=period_sampler(SEPSIS_LIKE_MEMBERS, lo=3, hi=400),
        gold_sql=SEPSIS_LIKE_GOLD,
        answer=MEAN,
        evidence=Evidence(table="admissions", where="e.admittime >= {t0} AND e.admittime < {t1}",
                          key=("subject_id", "admittime"), id_col="hadm_id", time_col="admittime",
                          category_col="hospital_expire_flag", focus="any"),
        noise=("conflicting_records", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="in-hospital mortality of a sepsis-like cohort (suspected infection + organ dysfunction)",
    ),
    Template(
        id="labs.aki_max_kdigo_stage", intent="labs", level="patient", tier=3,
        paraphrases=(
            "What was the highest KDIGO creatinine stage of acute kidney injury (0-3) reached by patient "
            "{subject_id} during admission {hadm_id}? Stage 1: creatinine >= 0.3 mg/dL above the 48-hour low or "
            ">= 1.5x the 7-day low; stage 2: >= 2x the 7-day low; stage 3: >= 3x the 7-day low, or >= 4.0 mg/dL "
            "after an acute rise.",
            "Patient {subject_id}, admission {hadm_id}: peak AKI stage by the KDIGO creatinine criteria (1 = rise "
            ">= 0.3 mg/dL within 48 h or >= 1.5x baseline over 7 days, 2 = >= 2x baseline, 3 = >= 3x baseline or "
            "creatinine >= 4.0 mg/dL with an acute rise; baseline = lowest value of the previous 7 days).",
            "Staging acute kidney injury by KDIGO creatinine criteria against the lowest creatinine of the "
            "previous 48 hours / 7 days (stage 1: +0.3 mg/dL or 1.5x, stage 2: 2x, stage 3: 3x or >= 4.0 mg/dL "
            "with an acute rise), what maximum stage did admission {hadm_id} of patient {subject_id} reach?",
        ),
        sampler_sql=AKI_ADMISSIONS,
        gold_sql=AKI_STAGE_GOLD,
        answer=COUNT,
        evidence=Evidence(**LAB_EVIDENCE, where="e.hadm_id = {hadm_id} AND e.itemid = {itemid}", focus="min",
                          aggregate=True, extreme="low"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", "unit_mismatch",
               "nonexistent_entity"),
        entity_ref="subject_id", description="peak KDIGO creatinine stage of an admission",
    ),
)
