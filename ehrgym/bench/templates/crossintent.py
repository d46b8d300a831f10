"""Templates that join intents: labs or vitals of a cohort defined by diagnoses or by suspected
infection, coding of a lab-defined condition, cultures and antibiotics of septic admissions,
comorbidity groups. Definitions: ``concept_sql``."""

from __future__ import annotations

from ehrgym.bench.templates.base import ADMISSION_WINDOW, Evidence, Template
from ehrgym.bench.templates.concept_sql import (CHRONIC_GROUPS, CREATININE, HEART_RATE, ICU_UNIT_VALUES, KDIGO_WORDS,
                                                SBP_ITEMS, SUSPICION_AFTER_H, SUSPICION_BEFORE_H, SUSPICION_WORDS,
                                                aki_condition, antibiotic_predicate, icd_group_predicate,
                                                icd_group_values, ints, kdigo_flag_sql, organism_grown_predicate)
from ehrgym.bench.templates.hard_common import (CHART_EVIDENCE, HOURS, LAB_EVIDENCE, MEAN, NAMES, PERIOD_WINDOW,
                                                period_sampler)
from ehrgym.bench.templates.registry import register


CrossIntentTemplate = Template  # (an alias for importers: unpickling any Template imports the template modules)


LACTATE = 50813
RESP_RATE = 220210
SBP_IDS = ints(SBP_ITEMS)
STAPH_AUREUS = "STAPH AUREUS COAG +"


def _suspicion_cte(hadm_filter: str = "") -> str:
    """CTEs ``abx`` and ``suspicion`` (hadm_id, suspected_at: the earliest qualifying pair per admission)."""
    extra = f" AND {hadm_filter}" if hadm_filter else ""
    return f"""abx AS (
  SELECT p.hadm_id, p.starttime
  FROM mimiciv_hosp.prescriptions p
  WHERE {antibiotic_predicate('p')}{extra}
), suspicion AS (
  SELECT a.hadm_id, min(least(a.starttime, m.charttime)) AS suspected_at
  FROM abx a
  JOIN mimiciv_hosp.microbiologyevents m ON m.hadm_id = a.hadm_id
   AND m.charttime BETWEEN a.starttime - INTERVAL {SUSPICION_BEFORE_H} HOUR
                       AND a.starttime + INTERVAL {SUSPICION_AFTER_H} HOUR
  GROUP BY a.hadm_id
)"""


# the antibiotic orders of admissions in the question's period (keeps the cohort CTEs small)
PERIOD_ABX = ("p.hadm_id IN (SELECT hadm_id FROM mimiciv_hosp.admissions "
              "WHERE admittime >= {t0} AND admittime < {t1})")

# ---------------------------------------------------------------- labs: peak lactate after suspected infection

LACTATE_MEMBERS = f"""  WITH {_suspicion_cte('p.hadm_id IS NOT NULL')}
  SELECT s.hadm_id, a.admittime AS t,
         EXISTS (SELECT 1 FROM mimiciv_hosp.labevents l WHERE l.hadm_id = s.hadm_id AND l.itemid = {LACTATE}
                 AND l.charttime BETWEEN s.suspected_at AND s.suspected_at + INTERVAL 24 HOUR) AS positive
  FROM suspicion s JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id"""

LACTATE_GOLD = f"""WITH {_suspicion_cte(PERIOD_ABX)}, cohort AS (
  SELECT s.hadm_id, s.suspected_at
  FROM suspicion s
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id
  WHERE a.admittime >= {{t0}} AND a.admittime < {{t1}}
), peaks AS (
  SELECT c.hadm_id, max(e.valuenum) AS peak
  FROM {{labevents}} e
  JOIN cohort c ON c.hadm_id = e.hadm_id
  WHERE e.itemid = {{itemid}} AND e.charttime BETWEEN c.suspected_at AND c.suspected_at + INTERVAL 24 HOUR
  GROUP BY c.hadm_id
)
SELECT avg(peak) FROM peaks"""

# evidence of a period cohort: rows of the admissions that began in [t0, t1) (a join, not a correlated
# sub-query, so that profiling many candidate periods at once stays a hash join)
PERIOD_JOIN = "JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id"
PERIOD_ADMISSIONS = "a.admittime >= {t0} AND a.admittime < {t1}"

# ---------------------------------------------------------------- vitals: respiratory rate of pneumonia ICU stays

PNEUMONIA_STAYS = f"""SELECT DISTINCT s.stay_id, s.intime
  FROM mimiciv_icu.icustays s
  JOIN mimiciv_hosp.diagnoses_icd dx ON dx.hadm_id = s.hadm_id
  WHERE {icd_group_predicate('pneumonia')}"""

RR_MEMBERS = f"""  SELECT p.stay_id, p.intime AS t,
         EXISTS (SELECT 1 FROM mimiciv_icu.chartevents c WHERE c.stay_id = p.stay_id AND c.itemid = {RESP_RATE}
                 AND c.charttime BETWEEN p.intime AND p.intime + INTERVAL 24 HOUR) AS positive
  FROM ({PNEUMONIA_STAYS}) p"""

RR_GOLD = f"""WITH pneumonia AS (
  {PNEUMONIA_STAYS}
    AND s.intime >= {{t0}} AND s.intime < {{t1}}
), peaks AS (
  SELECT p.stay_id, max(e.valuenum) AS peak
  FROM {{chartevents}} e
  JOIN pneumonia p ON p.stay_id = e.stay_id
  WHERE e.itemid = {{itemid}} AND e.charttime BETWEEN p.intime AND p.intime + INTERVAL 24 HOUR
  GROUP BY p.stay_id
)
SELECT avg(peak) FROM peaks"""

# ---------------------------------------------------------------- vitals: shock index > 1 in the first ICU day

SI_MEMBERS = f"""  SELECT s.stay_id, s.intime AS t, u.unit_name AS unit,
         EXISTS (SELECT 1 FROM mimiciv_icu.chartevents h JOIN mimiciv_icu.chartevents b
                   ON b.stay_id = h.stay_id AND b.charttime = h.charttime AND b.itemid IN ({SBP_IDS})
                 WHERE h.stay_id = s.stay_id AND h.itemid = {HEART_RATE} AND b.valuenum > 0
                   AND h.valuenum / b.valuenum > 1.0
                   AND h.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR) AS positive
  FROM mimiciv_icu.icustays s
  JOIN ({ICU_UNIT_VALUES}) u(careunit, unit_name) ON u.careunit = s.first_careunit"""

SI_GOLD = f"""WITH units(careunit, unit_name) AS ({ICU_UNIT_VALUES}),
cohort AS (
  SELECT s.stay_id, s.intime
  FROM mimiciv_icu.icustays s
  JOIN units u ON u.careunit = s.first_careunit
  WHERE u.unit_name = {{unit_name}} AND s.intime >= {{t0}} AND s.intime < {{t1}}
), shocked AS (
  SELECT DISTINCT c.stay_id
  FROM {{chartevents}} e
  JOIN cohort c ON c.stay_id = e.stay_id
  JOIN mimiciv_icu.chartevents b ON b.stay_id = e.stay_id AND b.charttime = e.charttime
  WHERE e.itemid = {{itemid}} AND b.itemid IN ({SBP_IDS}) AND b.valuenum > 0
    AND e.valuenum / b.valuenum > 1.0
    AND e.charttime BETWEEN c.intime AND c.intime + INTERVAL 24 HOUR
)
SELECT round(100.0 * (SELECT count(*) FROM shocked) / count(*), 2) FROM cohort"""

# ---------------------------------------------------------------- diagnoses: chronic condition groups coded

GROUPS_GOLD = f"""WITH groups(condition, icd_version, prefix) AS ({icd_group_values(CHRONIC_GROUPS)})
SELECT DISTINCT g.condition
FROM {{diagnoses_icd}} e
JOIN groups g ON g.icd_version = e.icd_version AND starts_with(e.icd_code, g.prefix)
WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}}
ORDER BY g.condition"""

GROUPS_SAMPLER = f"""WITH groups(condition, icd_version, prefix) AS ({icd_group_values(CHRONIC_GROUPS)})
SELECT e.subject_id, e.hadm_id
FROM mimiciv_hosp.diagnoses_icd e
JOIN groups g ON g.icd_version = e.icd_version AND starts_with(e.icd_code, g.prefix)
GROUP BY ALL"""

CHRONIC_WORDS = ", ".join(CHRONIC_GROUPS[:-1]) + " or " + CHRONIC_GROUPS[-1]

# ---------------------------------------------------------------- diagnoses: how often lab-defined AKI is coded

AKI_CODING_MEMBERS = f"""  WITH cr AS (
    SELECT e.hadm_id, e.charttime, e.valuenum FROM mimiciv_hosp.labevents e
    WHERE e.itemid = {CREATININE} AND e.hadm_id IS NOT NULL AND e.valuenum IS NOT NULL
  ), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
  ), aki AS (SELECT DISTINCT hadm_id FROM flagged WHERE {aki_condition()})
  SELECT a.hadm_id, a.admittime AS t,
         EXISTS (SELECT 1 FROM mimiciv_hosp.diagnoses_icd dx WHERE dx.hadm_id = a.hadm_id
                 AND {icd_group_predicate('acute kidney failure')}) AS positive
  FROM aki k JOIN mimiciv_hosp.admissions a ON a.hadm_id = k.hadm_id"""

AKI_CODING_GOLD = f"""WITH cr AS (
  SELECT e.hadm_id, e.charttime, e.valuenum
  FROM {{labevents}} e
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
  WHERE e.itemid = {{itemid}} AND e.valuenum IS NOT NULL AND a.admittime >= {{t0}} AND a.admittime < {{t1}}
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
), aki AS (
  SELECT DISTINCT hadm_id FROM flagged WHERE {aki_condition()}
), coded AS (
  SELECT DISTINCT dx.hadm_id
  FROM mimiciv_hosp.diagnoses_icd dx
  WHERE dx.hadm_id IN (SELECT hadm_id FROM aki) AND {icd_group_predicate('acute kidney failure')}
)
SELECT round(100.0 * (SELECT count(*) FROM coded) / count(*), 2) FROM aki"""

# ---------------------------------------------------------------- diagnoses: ventilation among pneumonia admissions

VENT_MEMBERS = f"""  SELECT a.hadm_id, a.admittime AS t,
         EXISTS (SELECT 1 FROM mimiciv_icu.procedureevents v WHERE v.hadm_id = a.hadm_id AND v.itemid = 225792)
           AS positive
  FROM mimiciv_hosp.admissions a
  WHERE EXISTS (SELECT 1 FROM mimiciv_hosp.diagnoses_icd dx WHERE dx.hadm_id = a.hadm_id
                AND {icd_group_predicate('pneumonia')})"""

VENT_GOLD = f"""WITH pneumonia AS (
  SELECT DISTINCT e.hadm_id
  FROM {{diagnoses_icd}} e
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
  WHERE {icd_group_predicate('pneumonia', 'e')} AND a.admittime >= {{t0}} AND a.admittime < {{t1}}
), ventilated AS (
  SELECT DISTINCT v.hadm_id
  FROM mimiciv_icu.procedureevents v
  JOIN pneumonia p ON p.hadm_id = v.hadm_id
  WHERE v.itemid = 225792
)
SELECT round(100.0 * (SELECT count(*) FROM ventilated) / count(*), 2) FROM pneumonia"""

# ---------------------------------------------------------------- microbiology: positive blood cultures on suspicion

BCX_MEMBERS = f"""  WITH {_suspicion_cte('p.hadm_id IS NOT NULL')}
  SELECT s.hadm_id, a.admittime AS t,
         EXISTS (SELECT 1 FROM mimiciv_hosp.microbiologyevents m WHERE m.hadm_id = s.hadm_id
                 AND m.spec_type_desc = 'BLOOD CULTURE' AND {organism_grown_predicate('m')}) AS positive
  FROM suspicion s JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id"""

BCX_GOLD = f"""WITH {_suspicion_cte(PERIOD_ABX)}, cohort AS (
  SELECT s.hadm_id, s.suspected_at
  FROM suspicion s
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id
  WHERE a.admittime >= {{t0}} AND a.admittime < {{t1}}
), positive AS (
  SELECT DISTINCT c.hadm_id
  FROM {{microbiologyevents}} e
  JOIN cohort c ON c.hadm_id = e.hadm_id
  WHERE e.spec_type_desc = 'BLOOD CULTURE' AND {organism_grown_predicate('e')}
    AND e.charttime BETWEEN c.suspected_at - INTERVAL 24 HOUR AND c.suspected_at + INTERVAL 72 HOUR
)
SELECT round(100.0 * (SELECT count(*) FROM positive) / count(*), 2) FROM cohort"""

# ---------------------------------------------------------------- microbiology: MRSA share among S. aureus patients

MRSA_MEMBERS = f"""  SELECT m.subject_id, min(a.admittime) AS t,
         bool_or(m.ab_name = 'OXACILLIN' AND m.interpretation = 'R') AS positive
  FROM mimiciv_hosp.microbiologyevents m JOIN mimiciv_hosp.admissions a ON a.hadm_id = m.hadm_id
  WHERE m.org_name = '{STAPH_AUREUS}' AND m.ab_name = 'OXACILLIN'
  GROUP BY m.subject_id, a.hadm_id"""

MRSA_GOLD = f"""WITH tested AS (
  SELECT e.subject_id, e.interpretation
  FROM {{microbiologyevents}} e
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
  WHERE e.org_name = '{STAPH_AUREUS}' AND e.ab_name = 'OXACILLIN'
    AND a.admittime >= {{t0}} AND a.admittime < {{t1}}
), per_patient AS (
  SELECT subject_id, bool_or(interpretation = 'R') AS resistant
  FROM tested GROUP BY subject_id
)
SELECT round(100.0 * count(*) FILTER (WHERE resistant) / count(*), 2) FROM per_patient"""

# ---------------------------------------------------------------- medications: time to antibiotics in sepsis

SEPSIS_ABX_MEMBERS = f"""  SELECT a.hadm_id, a.admittime AS t, TRUE AS positive
  FROM mimiciv_hosp.admissions a
  WHERE EXISTS (SELECT 1 FROM mimiciv_hosp.diagnoses_icd dx WHERE dx.hadm_id = a.hadm_id
                AND {icd_group_predicate('sepsis')})
    AND EXISTS (SELECT 1 FROM mimiciv_hosp.prescriptions p
                WHERE p.hadm_id = a.hadm_id AND {antibiotic_predicate('p')})"""

SEPSIS_ABX_GOLD = f"""WITH septic AS (
  SELECT DISTINCT a.hadm_id, a.admittime
  FROM mimiciv_hosp.admissions a
  JOIN mimiciv_hosp.diagnoses_icd dx ON dx.hadm_id = a.hadm_id
  WHERE {icd_group_predicate('sepsis')} AND a.admittime >= {{t0}} AND a.admittime < {{t1}}
), first_abx AS (
  SELECT s.hadm_id, date_diff('second', s.admittime, min(e.starttime)) / 3600.0 AS hours
  FROM {{prescriptions}} e
  JOIN septic s ON s.hadm_id = e.hadm_id
  WHERE {antibiotic_predicate('e')}
  GROUP BY s.hadm_id, s.admittime
)
SELECT avg(hours) FROM first_abx"""

SEPSIS_PERIOD = (PERIOD_ADMISSIONS + " AND e.hadm_id IN (SELECT dx.hadm_id FROM mimiciv_hosp.diagnoses_icd dx WHERE "
                 + icd_group_predicate('sepsis') + ")")

register(
    Template(
        id="labs.cohort_peak_lactate_suspected_infection", intent="labs", level="population", tier=3,
        paraphrases=(
            f"Among hospital admissions beginning on or after {{t0}} and before {{t1}} with {SUSPICION_WORDS}, "
            "what was the mean of each admission's highest lactate within 24 hours after infection was first "
            "suspected (admissions with a lactate in that window)?",
            "For admissions from {t0} up to {t1} where infection was suspected (antibiotic plus a culture 72 h "
            "before to 24 h after it), average the peak lactate (mmol/L) of the first 24 hours after suspicion, "
            "over admissions that had one.",
            "What was the average highest lactate in the 24 hours following suspected infection (a systemic "
            "antibiotic with a culture drawn up to 72 hours before or 24 hours after it), across admissions "
            "starting between {t0} (inclusive) and {t1} (exclusive) that had a lactate then?",
        ),
        sampler_sql=f"SELECT t0, t1, {LACTATE} AS itemid FROM (\n{period_sampler(LACTATE_MEMBERS, lo=2, hi=400)}\n)",
        gold_sql=LACTATE_GOLD,
        answer=MEAN,
        evidence=Evidence(**LAB_EVIDENCE, join=PERIOD_JOIN, where="e.itemid = {itemid} AND " + PERIOD_ADMISSIONS,
                          focus="max",
                          aggregate=True),
        noise=("conflicting_records", "implausible_value", "unit_mismatch", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="mean peak lactate in the 24 hours after suspected infection",
    ),
    Template(
        id="vitals.cohort_pneumonia_peak_resp_rate", intent="vitals", level="population", tier=3,
        paraphrases=(
            "Among ICU stays beginning on or after {t0} and before {t1} in hospital admissions coded with "
            "pneumonia, what was the mean of each stay's highest respiratory rate in the first 24 hours of the "
            "stay?",
            "For pneumonia patients (pneumonia coded in the admission) whose ICU stay started from {t0} up to "
            "{t1}, average the peak respiratory rate (breaths/min) of each stay's first ICU day.",
            "What was the average first-24-hour maximum respiratory rate over ICU stays starting between {t0} "
            "(inclusive) and {t1} (exclusive) whose admission carried a pneumonia diagnosis?",
        ),
        sampler_sql=f"SELECT t0, t1, {RESP_RATE} AS itemid FROM (\n{period_sampler(RR_MEMBERS, lo=2, hi=300)}\n)",
        gold_sql=RR_GOLD,
        answer=MEAN,
        evidence=Evidence(**CHART_EVIDENCE, item_col="itemid", item_param="itemid",
                          join="JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id",
                          where="e.itemid = {itemid} AND s.intime >= {t0} AND s.intime < {t1} "
                                "AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR "
                                "AND s.hadm_id IN (SELECT dx.hadm_id FROM mimiciv_hosp.diagnoses_icd dx WHERE "
                                + icd_group_predicate('pneumonia') + ")",
                          focus="max", aggregate=True),
        noise=("conflicting_records", "implausible_value", "encoding_corruption", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="mean first-day peak respiratory rate of pneumonia ICU stays",
    ),
    Template(
        id="vitals.cohort_shock_index_rate", intent="vitals", level="population", tier=3,
        paraphrases=(
            "Among {unit_name} stays beginning on or after {t0} and before {t1}, what percentage had a shock index "
            "(heart rate divided by systolic blood pressure, invasive or non-invasive, charted at the same time) "
            "above 1.0 during the first 24 hours of the stay?",
            "What share (%) of ICU stays in the {unit_name} starting from {t0} up to {t1} reached a shock index "
            "over 1 (HR / SBP from simultaneous readings, arterial line or cuff) within 24 hours of ICU admission?",
            "For {unit_name} stays that started between {t0} (inclusive) and {t1} (exclusive), what percent had a "
            "heart rate exceeding the systolic pressure charted at the same moment (shock index > 1.0) during the "
            "first ICU day?",
        ),
        sampler_sql=f"SELECT t0, t1, unit AS unit_name, {HEART_RATE} AS itemid FROM (\n"
                    f"{period_sampler(SI_MEMBERS, lo=3, hi=300, extra_cols='unit')}\n)",
        gold_sql=SI_GOLD,
        answer=MEAN,
        evidence=Evidence(**CHART_EVIDENCE, item_col="itemid", item_param="itemid",
                          join="JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id "
                               "JOIN (" + ICU_UNIT_VALUES + ") u(careunit, unit_name) ON u.careunit = s.first_careunit",
                          where="e.itemid = {itemid} AND u.unit_name = {unit_name} AND s.intime >= {t0} "
                                "AND s.intime < {t1} AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR",
                          focus="max", aggregate=True),
        noise=("conflicting_records", "lexical_variation"),
        lexical="unit_name", time_window=PERIOD_WINDOW,
        description="share of a unit's ICU stays with a shock index above 1 on the first day",
    ),
    Template(
        id="diagnoses.chronic_condition_groups", intent="diagnoses", level="patient", tier=2,
        paraphrases=(
            f"Which of these chronic conditions were coded for patient {{subject_id}} in hospital admission "
            f"{{hadm_id}}: {CHRONIC_WORDS}? Count any ICD-9 or ICD-10 code of each condition.",
            f"Patient {{subject_id}}, admission {{hadm_id}}: list the chronic condition groups ({CHRONIC_WORDS}) "
            "with at least one diagnosis code in that admission.",
            f"Of {CHRONIC_WORDS}, which appear among the diagnosis codes (either ICD version) of admission "
            "{hadm_id} of patient {subject_id}?",
        ),
        sampler_sql=GROUPS_SAMPLER,
        gold_sql=GROUPS_GOLD,
        answer=NAMES,
        evidence=Evidence(table="diagnoses_icd", where="e.hadm_id = {hadm_id}", key=("hadm_id", "seq_num"),
                          category_col="icd_code"),
        noise=("missing_evidence", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="chronic condition groups (ICD-9/ICD-10 code sets) of an admission",
    ),
    Template(
        id="diagnoses.cohort_aki_coding_rate", intent="diagnoses", level="population", tier=3,
        paraphrases=(
            f"Among hospital admissions beginning on or after {{t0}} and before {{t1}} that met {KDIGO_WORDS}, "
            "what percentage had acute kidney failure coded (ICD-9 584.x or ICD-10 N17.x)?",
            f"For admissions from {{t0}} up to {{t1}} with {KDIGO_WORDS}, how often (in %) was acute kidney "
            "failure among the diagnosis codes?",
            f"What share (%) of admissions starting between {{t0}} (inclusive) and {{t1}} (exclusive) with "
            f"{KDIGO_WORDS} carried an acute kidney failure diagnosis code (584.x / N17.x)?",
        ),
        sampler_sql=f"SELECT t0, t1, {CREATININE} AS itemid FROM (\n"
                    f"{period_sampler(AKI_CODING_MEMBERS, lo=3, hi=400)}\n)",
        gold_sql=AKI_CODING_GOLD,
        answer=MEAN,
        evidence=Evidence(**LAB_EVIDENCE, join=PERIOD_JOIN, where="e.itemid = {itemid} AND " + PERIOD_ADMISSIONS,
                          focus="min",
                          aggregate=True, extreme="low"),
        noise=("out_of_window", "conflicting_records", "implausible_value", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="share of KDIGO (creatinine) acute kidney injury admissions with an AKI diagnosis code",
    ),
    Template(
        id="diagnoses.cohort_pneumonia_ventilation_rate", intent="diagnoses", level="population", tier=2,
        paraphrases=(
            "Among hospital admissions beginning on or after {t0} and before {t1} that were coded with pneumonia "
            "(ICD-9 480-486, ICD-10 J12-J18), what percentage received invasive mechanical ventilation in the "
            "ICU?",
            "What share (%) of pneumonia admissions (any pneumonia code) admitted from {t0} up to {t1} had an "
            "invasive ventilation episode charted in the ICU?",
            "For admissions starting between {t0} (inclusive) and {t1} (exclusive) with a pneumonia diagnosis "
            "code, what percent were invasively ventilated in intensive care?",
        ),
        sampler_sql=period_sampler(VENT_MEMBERS, lo=2, hi=400),
        gold_sql=VENT_GOLD,
        answer=MEAN,
        evidence=Evidence(table="diagnoses_icd", join=PERIOD_JOIN, where=icd_group_predicate('pneumonia', 'e')
                          + " AND " + PERIOD_ADMISSIONS, key=("hadm_id", "seq_num"), category_col="icd_code"),
        # (no conflicting records: a second code at the same position leaves the pneumonia code, and the answer)
        noise=("missing_evidence",),
        time_window=PERIOD_WINDOW,
        description="share of pneumonia admissions with invasive ventilation",
    ),
    Template(
        id="microbiology.cohort_positive_blood_culture_suspected", intent="microbiology", level="population",
        tier=3,
        paraphrases=(
            f"Among hospital admissions beginning on or after {{t0}} and before {{t1}} with {SUSPICION_WORDS}, "
            "what percentage had a blood culture that grew an organism, drawn from 24 hours before to 72 hours "
            "after infection was first suspected?",
            "For admissions from {t0} up to {t1} where infection was suspected (antibiotic plus a culture 72 h "
            "before to 24 h after it), what share (%) had a positive blood culture collected between 24 h before "
            "and 72 h after the suspicion time?",
            "What percent of suspected-infection admissions (a systemic antibiotic with a culture drawn up to 72 "
            "hours before or 24 hours after it) starting between {t0} (inclusive) and {t1} (exclusive) had an "
            "organism grow in a blood culture taken from 24 hours before to 72 hours after suspicion?",
        ),
        sampler_sql=period_sampler(BCX_MEMBERS, lo=3, hi=400),
        gold_sql=BCX_GOLD,
        answer=MEAN,
        evidence=Evidence(table="microbiologyevents",
                          join=PERIOD_JOIN, where="e.spec_type_desc = 'BLOOD CULTURE' AND " + PERIOD_ADMISSIONS,
                          key=("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid"),
                          id_col="microevent_id", time_col="charttime", window=ADMISSION_WINDOW,
                          store_col="storetime", category_col="org_name", focus="first"),
        noise=("out_of_window", "conflicting_records", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="share of suspected-infection admissions with a positive blood culture around suspicion",
    ),
    Template(
        id="microbiology.cohort_mrsa_share", intent="microbiology", level="population", tier=2,
        paraphrases=(
            "Among patients with a Staphylococcus aureus isolate tested against oxacillin during admissions "
            "beginning on or after {t0} and before {t1}, what percentage had at least one oxacillin-resistant "
            "isolate (MRSA)?",
            "What share (%) of patients whose S. aureus was tested for oxacillin susceptibility in admissions from "
            "{t0} up to {t1} had methicillin-resistant S. aureus (oxacillin resistant) at least once?",
            "For admissions starting between {t0} (inclusive) and {t1} (exclusive), what percent of patients with "
            "an oxacillin-tested Staphylococcus aureus isolate had MRSA (an oxacillin-resistant result)?",
        ),
        sampler_sql=period_sampler(MRSA_MEMBERS, lo=2, hi=400),
        gold_sql=MRSA_GOLD,
        answer=MEAN,
        evidence=Evidence(table="microbiologyevents",
                          join=PERIOD_JOIN,
                          where=f"e.org_name = '{STAPH_AUREUS}' AND e.ab_name = 'OXACILLIN' AND " + PERIOD_ADMISSIONS,
                          key=("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid"),
                          id_col="microevent_id", time_col="charttime", window=ADMISSION_WINDOW,
                          store_col="storetime", category_col="interpretation", focus="first"),
        noise=("conflicting_records", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="MRSA share among patients with an oxacillin-tested S. aureus",
    ),
    Template(
        id="medications.cohort_sepsis_hours_to_antibiotic", intent="medications", level="population", tier=3,
        paraphrases=(
            "Among hospital admissions beginning on or after {t0} and before {t1} that were coded with sepsis or "
            "septic shock and had a systemic antibiotic ordered, what was the mean time in hours from hospital "
            "admission to the first antibiotic order?",
            "For septic admissions (sepsis or septic shock coded) from {t0} up to {t1} with any systemic "
            "antibiotic order, what was the average number of hours from admission to the first such order?",
            "What was the mean admission-to-first-antibiotic time (hours) over admissions starting between {t0} "
            "(inclusive) and {t1} (exclusive) carrying a sepsis or septic-shock code and a systemic antibiotic "
            "order?",
        ),
        sampler_sql=period_sampler(SEPSIS_ABX_MEMBERS, lo=2, hi=400),
        gold_sql=SEPSIS_ABX_GOLD,
        answer=HOURS,
        evidence=Evidence(table="prescriptions", join=PERIOD_JOIN,
                          where=antibiotic_predicate('e') + " AND " + SEPSIS_PERIOD,
                          key=("hadm_id", "drug", "starttime"), id_col="pharmacy_id", time_col="starttime",
                          window=ADMISSION_WINDOW, focus="first"),
        noise=("out_of_window", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="mean hours from admission to the first antibiotic in sepsis-coded admissions",
    ),
)
