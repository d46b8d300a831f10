"""Templates over the course of an episode, each a definition from the MIMIC code repository's
derived concepts (``mimic-iv/concepts``) or a standard outcome measure:

* peak norepinephrine-equivalent dose of concurrent vasopressor infusions
  (``medication/norepinephrine_equivalent_dose.sql``, Goradia et al. 2020);
* ICU-free days at day 28 (a trial outcome: days alive and out of intensive care in the 28 days
  after hospital admission, 0 for a patient who dies within them);
* days from discharge of the first admission coded with a condition to the next admission, and
  the 30-day all-cause readmission rate after admissions coded with a condition;
* KDIGO creatinine acute kidney injury (``organfailure/kdigo_creatinine.sql``) without an acute
  kidney injury diagnosis code (under-coding);
* the number of SIRS criteria met on the first ICU day (``score/sirs.sql``: temperature, heart
  rate, respiratory rate or pCO2, white cell count or bands; the repository reads PaCO2 from
  arterial gases, the gold here every blood gas, and the question says "blood-gas pCO2").

All are tier 3 (multi-step time logic or a cohort-style definition over several items).
Shared definitions come from ``concept_sql`` and ``ehrgym.bench.concepts``; the few constants here
belong to these definitions only.
"""

from __future__ import annotations

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.concepts import relation
from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, Evidence, Premise, Template
from ehrgym.bench.templates.concept_sql import (AKI_CONDITION, CREATININE, HEART_RATE, KDIGO_WORDS, RESP_RATE_ITEMS,
                                                TEMP_C, TEMP_F, icd_group_predicate, ints, kdigo_flag_sql)
from ehrgym.bench.templates.hard_common import CHART_EVIDENCE, LAB_EVIDENCE, MEAN, PERIOD_WINDOW, period_sampler
from ehrgym.bench.templates.registry import register



# ---------------------------------------------------------------- medications: norepinephrine-equivalent dose

# rate multipliers to norepinephrine mcg/kg/min (norepinephrine_equivalent_dose.sql); vasopressin is
# charted in units/hour (units/min rows converted first) and weighs 2.5 per units/min
NED_FACTORS: dict[int, str] = {
    221906: "e.rate",  # norepinephrine, mcg/kg/min
    221289: "e.rate",  # epinephrine, mcg/kg/min
    221749: "e.rate / 10",  # phenylephrine, mcg/kg/min
    221662: "e.rate / 100",  # dopamine, mcg/kg/min
    222315: "(CASE WHEN e.rateuom = 'units/min' THEN e.rate * 60 ELSE e.rate END) * 2.5 / 60",  # vasopressin
}
NED_IDS = ints(sorted(NED_FACTORS))
NED_CASE = "CASE e.itemid " + " ".join(f"WHEN {i} THEN {f}" for i, f in NED_FACTORS.items()) + " END"
NED_WORDS = ("norepinephrine-equivalent dose (mcg/kg/min: norepinephrine + epinephrine + phenylephrine/10 + "
             "dopamine/100 + vasopressin in units/min x 2.5)")
NED_RATE_BOUNDS = (0.0, 50.0)  # mcg/kg/min (or units/hour): above every plausible vasopressor rate
NED_ANSWER = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.0005, decimals=4)

NED_SAMPLER = f"""SELECT subject_id, stay_id FROM mimiciv_icu.inputevents
WHERE itemid IN ({NED_IDS}) AND rate > 0 AND endtime > starttime
GROUP BY ALL HAVING count(*) >= 2"""

# the total of the infusions running at each moment peaks at an infusion's start
NED_GOLD = f"""WITH infusions AS (
  SELECT e.starttime, e.endtime, {NED_CASE} AS ned
  FROM {{inputevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.stay_id = {{stay_id}} AND e.itemid IN ({NED_IDS})
    AND e.rate > 0 AND e.endtime > e.starttime
), moments AS (
  SELECT DISTINCT starttime AS t FROM infusions
)
SELECT max(total) FROM (
  SELECT m.t, sum(i.ned) AS total
  FROM moments m
  JOIN infusions i ON i.starttime <= m.t AND i.endtime > m.t
  GROUP BY m.t
)"""

# ---------------------------------------------------------------- encounters: ICU-free days at day 28

ICU_FREE_SAMPLER = """SELECT DISTINCT s.subject_id, s.hadm_id FROM mimiciv_icu.icustays s
JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id
WHERE s.outtime > s.intime AND a.dischtime IS NOT NULL"""

ICU_FREE_GOLD = """WITH adm AS (
  SELECT a.admittime, a.admittime + INTERVAL 28 DAY AS horizon,
         coalesce(a.deathtime, CAST(p.dod AS TIMESTAMP)) AS died
  FROM mimiciv_hosp.admissions a
  JOIN mimiciv_hosp.patients p ON p.subject_id = a.subject_id
  WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
), icu AS (
  SELECT coalesce(sum(date_diff('second', greatest(e.intime, d.admittime), least(e.outtime, d.horizon))), 0)
         / 86400.0 AS days
  FROM {icustays} e
  JOIN adm d ON e.intime < d.horizon AND e.outtime > d.admittime
  WHERE e.subject_id = {subject_id}
)
SELECT CASE WHEN d.died IS NOT NULL AND d.died < d.horizon THEN 0 ELSE 28 - i.days END
FROM adm d CROSS JOIN icu i"""

# ---------------------------------------------------------------- diagnoses: days to the next admission

CONDITIONS = relation("diagnosis") + " dx(concept, icd_version, prefix)"
CONDITION_JOIN = f"JOIN {CONDITIONS} ON dx.icd_version = e.icd_version AND starts_with(e.icd_code, dx.prefix)"

READMIT_SAMPLER = f"""WITH coded AS (
  SELECT e.subject_id, dx.concept AS title, min(a.admittime) AS first_admit
  FROM mimiciv_hosp.diagnoses_icd e
  {CONDITION_JOIN}
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
  GROUP BY ALL
)
SELECT c.subject_id, c.title
FROM coded c
JOIN mimiciv_hosp.admissions i ON i.subject_id = c.subject_id AND i.admittime = c.first_admit
WHERE EXISTS (SELECT 1 FROM mimiciv_hosp.admissions n WHERE n.subject_id = c.subject_id AND n.admittime > i.dischtime)"""

READMIT_GOLD = f"""WITH coded AS (
  SELECT DISTINCT e.hadm_id
  FROM {{diagnoses_icd}} e
  {CONDITION_JOIN}
  WHERE e.subject_id = {{subject_id}} AND dx.concept = {{title}}
), index_admission AS (
  SELECT a.dischtime
  FROM mimiciv_hosp.admissions a
  JOIN coded c ON c.hadm_id = a.hadm_id
  ORDER BY a.admittime
  LIMIT 1
)
SELECT date_diff('second', i.dischtime, min(n.admittime)) / 86400.0
FROM index_admission i
JOIN mimiciv_hosp.admissions n ON n.subject_id = {{subject_id}} AND n.admittime > i.dischtime
GROUP BY i.dischtime"""

READMIT_PREMISE = Premise("title", "title", f"""
SELECT DISTINCT dx.concept, dx.concept FROM {CONDITIONS}
WHERE dx.concept NOT IN (
  SELECT dx.concept FROM mimiciv_hosp.diagnoses_icd e {CONDITION_JOIN} WHERE e.subject_id = {{subject_id}})
ORDER BY 1""")

# ---------------------------------------------------------------- encounters: 30-day readmission after a condition

READMIT_DAYS = 30
CODED_ADMISSIONS = (f"(SELECT DISTINCT d.hadm_id, dx.concept FROM mimiciv_hosp.diagnoses_icd d "
                    f"JOIN {CONDITIONS} ON dx.icd_version = d.icd_version AND starts_with(d.icd_code, dx.prefix))")

READMIT_RATE_MEMBERS = f"""  SELECT a.admittime AS t, c.concept AS title,
         EXISTS (SELECT 1 FROM mimiciv_hosp.admissions n WHERE n.subject_id = a.subject_id
                 AND n.admittime > a.dischtime AND n.admittime <= a.dischtime + INTERVAL {READMIT_DAYS} DAY) AS positive
  FROM mimiciv_hosp.admissions a
  JOIN {CODED_ADMISSIONS} c ON c.hadm_id = a.hadm_id
  WHERE a.hospital_expire_flag = 0 AND a.dischtime IS NOT NULL"""

READMIT_RATE_GOLD = f"""WITH coded AS {CODED_ADMISSIONS},
index_admissions AS (
  SELECT e.subject_id, e.hadm_id, e.dischtime
  FROM {{admissions}} e
  JOIN coded c ON c.hadm_id = e.hadm_id
  WHERE c.concept = {{title}} AND e.admittime >= {{t0}} AND e.admittime < {{t1}}
    AND e.hospital_expire_flag = 0 AND e.dischtime IS NOT NULL
), readmitted AS (
  SELECT DISTINCT i.hadm_id
  FROM index_admissions i
  JOIN {{admissions}} e ON e.subject_id = i.subject_id
   AND e.admittime > i.dischtime AND e.admittime <= i.dischtime + INTERVAL {READMIT_DAYS} DAY
)
SELECT round(100.0 * (SELECT count(*) FROM readmitted) / count(*), 2) FROM index_admissions"""

# ---------------------------------------------------------------- diagnoses: KDIGO acute kidney injury left uncoded

UNCODED_AKI_SAMPLER = f"""SELECT e.subject_id, e.hadm_id, {CREATININE} AS itemid
FROM mimiciv_hosp.labevents e
WHERE e.itemid = {CREATININE} AND e.hadm_id IS NOT NULL AND e.valuenum IS NOT NULL
GROUP BY ALL HAVING count(*) >= 2"""

UNCODED_AKI_GOLD = f"""WITH cr AS (
  SELECT e.hadm_id, e.charttime, e.valuenum
  FROM {{labevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND e.itemid = {{itemid}}
    AND e.valuenum IS NOT NULL
), flagged AS (
  {kdigo_flag_sql('cr', 'hadm_id')}
)
SELECT count(*) > 0
   AND NOT EXISTS (SELECT 1 FROM mimiciv_hosp.diagnoses_icd dx
                   WHERE dx.hadm_id = {{hadm_id}} AND {icd_group_predicate('acute kidney failure')})
FROM flagged
WHERE {AKI_CONDITION}"""

# ---------------------------------------------------------------- vitals: SIRS criteria on the first ICU day

WBC_ITEMS = (51301, 51300)  # white blood cell count (complete_blood_count.sql)
BANDS, PACO2 = 51144, 50818  # band forms (%), blood-gas pCO2 (mm Hg)
SIRS_CHART_IDS = ints((HEART_RATE, *RESP_RATE_ITEMS, TEMP_F, TEMP_C))
SIRS_LAB_IDS = ints((*WBC_ITEMS, BANDS, PACO2))
TEMP_CELSIUS = f"CASE WHEN e.itemid = {TEMP_C} THEN e.valuenum WHEN e.itemid = {TEMP_F} THEN (e.valuenum - 32) / 1.8 END"
SIRS_CHART_BOUNDS = (0.0, 300.0)  # one range over heart rate, respiratory rate and both temperature units
SIRS_WORDS = ("SIRS criteria (temperature > 38 °C or < 36 °C; heart rate > 90/min; respiratory rate > 20/min or "
              "blood-gas pCO2 < 32 mmHg; white cell count > 12 or < 4 K/uL or bands > 10 %)")

SIRS_SAMPLER = f"""SELECT s.subject_id, s.stay_id
FROM mimiciv_icu.icustays s
JOIN mimiciv_icu.chartevents c ON c.stay_id = s.stay_id
WHERE c.itemid IN ({SIRS_CHART_IDS}) AND c.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR
GROUP BY ALL
HAVING count(DISTINCT c.itemid) >= 3"""

SIRS_GOLD = f"""WITH stay AS (
  SELECT hadm_id, intime FROM mimiciv_icu.icustays WHERE subject_id = {{subject_id}} AND stay_id = {{stay_id}}
), vitals AS (
  SELECT max(CASE WHEN e.itemid = {HEART_RATE} THEN e.valuenum END) AS hr_max,
         max(CASE WHEN e.itemid IN ({ints(RESP_RATE_ITEMS)}) THEN e.valuenum END) AS rr_max,
         min({TEMP_CELSIUS}) AS temp_min,
         max({TEMP_CELSIUS}) AS temp_max
  FROM {{chartevents}} e
  JOIN stay s ON e.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR
  WHERE e.stay_id = {{stay_id}} AND e.itemid IN ({SIRS_CHART_IDS})
), labs AS (
  SELECT min(CASE WHEN l.itemid = {PACO2} THEN l.valuenum END) AS paco2_min,
         min(CASE WHEN l.itemid IN ({ints(WBC_ITEMS)}) THEN l.valuenum END) AS wbc_min,
         max(CASE WHEN l.itemid IN ({ints(WBC_ITEMS)}) THEN l.valuenum END) AS wbc_max,
         max(CASE WHEN l.itemid = {BANDS} THEN l.valuenum END) AS bands_max
  FROM mimiciv_hosp.labevents l
  JOIN stay s ON l.hadm_id = s.hadm_id
  WHERE l.itemid IN ({SIRS_LAB_IDS})
    AND l.charttime BETWEEN s.intime - INTERVAL 6 HOUR AND s.intime + INTERVAL 24 HOUR
)
SELECT CASE WHEN v.temp_max > 38 OR v.temp_min < 36 THEN 1 ELSE 0 END
     + CASE WHEN v.hr_max > 90 THEN 1 ELSE 0 END
     + CASE WHEN v.rr_max > 20 OR l.paco2_min < 32 THEN 1 ELSE 0 END
     + CASE WHEN l.wbc_max > 12 OR l.wbc_min < 4 OR l.bands_max > 10 THEN 1 ELSE 0 END
FROM vitals v CROSS JOIN labs l
WHERE v.hr_max IS NOT NULL OR v.rr_max IS NOT NULL OR v.temp_max IS NOT NULL"""

register(
    Template(
        id="medications.peak_norepinephrine_equivalent", intent="medications", level="patient", tier=3,
        paraphrases=(
            f"During ICU stay {{stay_id}} of patient {{subject_id}}, what was the peak {NED_WORDS}, adding up the "
            "vasopressor infusions running at the same time?",
            "Patient {subject_id}, ICU stay {stay_id}: highest total vasopressor dose expressed as norepinephrine "
            "equivalents in mcg/kg/min, summing concurrent infusions (phenylephrine counts one tenth, dopamine one "
            "hundredth, vasopressin 2.5 per unit/min, epinephrine one to one).",
            f"What maximum {NED_WORDS} did patient {{subject_id}} reach in ICU stay {{stay_id}}, counting every "
            "vasopressor infusing at that moment?",
        ),
        sampler_sql=NED_SAMPLER,
        gold_sql=NED_GOLD,
        answer=NED_ANSWER,
        evidence=Evidence(table="inputevents", where=f"e.stay_id = {{stay_id}} AND e.itemid IN ({NED_IDS})",
                          key=("stay_id", "itemid", "starttime"), id_col="orderid", time_col="starttime",
                          window=ICU_WINDOW, store_col="storetime", value_col="rate", bounds=NED_RATE_BOUNDS,
                          focus="max", aggregate=True),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "implausible_value", "nonexistent_entity"),
        entity_ref="stay_id", description="peak norepinephrine-equivalent dose of concurrent vasopressor infusions",
    ),
    Template(
        id="encounters.icu_free_days_28", intent="encounters", level="patient", tier=3,
        paraphrases=(
            "How many ICU-free days at day 28 did patient {subject_id} have after hospital admission {hadm_id}, "
            "i.e. days alive and outside an intensive care unit during the 28 days from admission (0 if the "
            "patient died within those 28 days)?",
            "Patient {subject_id}, admission {hadm_id}: ICU-free days at day 28 — 28 minus the days spent in any "
            "ICU stay in the 28 days after hospital admission, or 0 when the patient died within 28 days.",
            "Counting every ICU stay of patient {subject_id} in the 28 days after the start of admission {hadm_id}, "
            "how many days of those 28 were spent alive and out of intensive care (0 for death within 28 days)?",
        ),
        sampler_sql=ICU_FREE_SAMPLER,
        gold_sql=ICU_FREE_GOLD,
        answer=MEAN,
        evidence=Evidence(table="icustays", where="e.hadm_id = {hadm_id}", key=("subject_id", "intime"),
                          id_col="stay_id", time_col="intime", window=ADMISSION_WINDOW, focus="any"),
        noise=("duplicate_records", "out_of_window", "nonexistent_entity"),
        entity_ref="hadm_id", description="ICU-free days at day 28 after hospital admission",
    ),
    Template(
        id="diagnoses.days_to_readmission_after_condition", intent="diagnoses", level="patient", tier=3,
        paraphrases=(
            "How many days after discharge from patient {subject_id}'s first hospital admission with a diagnosis "
            "of {title} was the patient next admitted to hospital?",
            "Patient {subject_id}: from the discharge of the earliest admission coded with {title}, how many days "
            "passed until the next hospital admission?",
            "Take the first admission in which {title} was coded for patient {subject_id}; how long (days) after "
            "its discharge did the next hospital admission begin?",
        ),
        sampler_sql=READMIT_SAMPLER,
        gold_sql=READMIT_GOLD,
        answer=MEAN,
        evidence=Evidence(table="diagnoses_icd", join=CONDITION_JOIN,
                          where="e.subject_id = {subject_id} AND dx.concept = {title}", key=("hadm_id", "seq_num")),
        noise=("missing_evidence", "nonexistent_entity", "false_premise", "lexical_variation", "out_of_scope"),
        entity_ref="subject_id", lexical="title", premise=READMIT_PREMISE,
        description="days from discharge of the first admission coded with a condition to the next admission",
    ),
    Template(
        id="vitals.sirs_criteria_first_day", intent="vitals", level="patient", tier=3,
        paraphrases=(
            f"How many of the four {SIRS_WORDS} did patient {{subject_id}} meet in the first 24 hours of ICU stay "
            "{stay_id}? Use vital signs charted in the ICU and laboratory results from 6 hours before ICU "
            "admission onwards.",
            "Patient {subject_id}, ICU stay {stay_id}: number of SIRS criteria (0-4) fulfilled on the first ICU day "
            "— temperature above 38 or below 36 °C (Fahrenheit charting converted), heart rate above 90, "
            "respiratory rate above 20 or blood-gas pCO2 below 32 mmHg, white count above 12 or below 4 K/uL or "
            "bands above 10 % (labs from 6 hours before ICU admission).",
            f"Scoring the {SIRS_WORDS} over the first 24 hours of ICU stay {{stay_id}} (labs drawn up to 6 hours "
            "before ICU admission count), how many criteria did patient {subject_id} meet?",
        ),
        sampler_sql=SIRS_SAMPLER,
        gold_sql=SIRS_GOLD,
        answer=AnswerSpec("integer"),
        # several items with their own units: no single unit column to compare
        evidence=Evidence(**{**CHART_EVIDENCE, "unit_col": None},
                          join="JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id",
                          where=f"e.stay_id = {{stay_id}} AND e.itemid IN ({SIRS_CHART_IDS}) "
                                "AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR",
                          bounds=SIRS_CHART_BOUNDS, focus="max", aggregate=True),
        noise=("missing_evidence", "implausible_value", "nonexistent_entity"),
        entity_ref="stay_id", description="number of SIRS criteria met on the first ICU day",
    ),
    Template(
        id="encounters.cohort_30day_readmission_rate", intent="encounters", level="population", tier=3,
        paraphrases=(
            "Of the hospital admissions coded with {title} that began on or after {t0} and before {t1} and ended "
            "with the patient discharged alive, what percentage were followed by another hospital admission of the "
            "same patient within 30 days of discharge?",
            "What was the 30-day all-cause readmission rate (%) after admissions with a diagnosis of {title} "
            "starting from {t0} up to {t1}, counting only patients discharged alive?",
            "Among patients discharged alive from an admission coded with {title} (admitted between {t0} inclusive "
            "and {t1} exclusive), what percent of those admissions saw the patient readmitted to hospital within "
            "30 days?",
        ),
        sampler_sql=period_sampler(READMIT_RATE_MEMBERS, lo=3, hi=400, extra_cols="title"),
        gold_sql=READMIT_RATE_GOLD,
        answer=MEAN,
        evidence=Evidence(table="admissions", join=f"JOIN {CODED_ADMISSIONS} c ON c.hadm_id = e.hadm_id",
                          where="c.concept = {title} AND e.admittime >= {t0} AND e.admittime < {t1} "
                                "AND e.hospital_expire_flag = 0",
                          # a re-stored copy keeps its hadm_id (and so its diagnoses)
                          key=("subject_id", "admittime"), time_col="admittime", focus="any"),
        noise=("duplicate_records", "missing_evidence", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=PERIOD_WINDOW,
        description="30-day all-cause readmission rate after admissions coded with a condition",
    ),
    Template(
        id="diagnoses.uncoded_kdigo_aki", intent="diagnoses", level="patient", tier=3,
        paraphrases=(
            f"During hospital admission {{hadm_id}}, did patient {{subject_id}} meet {KDIGO_WORDS} without any "
            "acute kidney injury (acute renal failure) diagnosis being coded for the admission? Answer yes or no.",
            f"Yes or no: was there unrecognised acute kidney injury in admission {{hadm_id}} of patient "
            f"{{subject_id}} — {KDIGO_WORDS} met, but no acute kidney failure ICD code in the admission?",
            f"Patient {{subject_id}}, admission {{hadm_id}}: do the serum creatinine results show {KDIGO_WORDS} "
            "while the admission's diagnoses carry no acute kidney injury code? Answer yes or no.",
        ),
        sampler_sql=UNCODED_AKI_SAMPLER,
        gold_sql=UNCODED_AKI_GOLD,
        answer=AnswerSpec("boolean"),
        evidence=Evidence(**LAB_EVIDENCE, where="e.hadm_id = {hadm_id} AND e.itemid = {itemid}", focus="any",
                          aggregate=True),
        noise=("missing_evidence", "implausible_value", "unit_mismatch", "encoding_corruption", "nonexistent_entity"),
        entity_ref="hadm_id", description="KDIGO creatinine AKI without an AKI diagnosis code (under-coding)",
    ),
)
