"""Templates with multi-step time logic: a window anchored on another event (the first 48 hours of
an ICU stay, before the first vasopressor or antibiotic, after the first blood culture), and concept
sets spanning several items (both blood-pressure routes, both temperature units, all ICU units).
Definitions: ``concept_sql``."""

from __future__ import annotations

from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, Evidence, Premise, Template
from ehrgym.bench.templates.concept_sql import (EMERGENCY_ADMISSION_TYPES, ICU_PROCEDURE_VALUES, ICU_UNIT_VALUES,
                                                LAB_NAME_VALUES, MAP_BOUNDS, MAP_ITEMS, TEMP_BOUNDS, TEMP_C, TEMP_F,
                                                ICU_UNITS, VASOPRESSOR_IDS, VASOPRESSOR_WORDS, antibiotic_predicate,
                                                emar_antibiotic_predicate, ints, organism_grown_predicate, strings)
from ehrgym.bench.templates.hard_common import (CHART_EVIDENCE, COUNT, HOURS, LAB_EVIDENCE, MEAN, NAMES, NUMBER,
                                                PERIOD_WINDOW, period_sampler)
from ehrgym.bench.templates.registry import register


TimingTemplate = Template  # (an alias for importers: unpickling any Template imports the template modules)


MAP_IDS = ints(MAP_ITEMS)
TEMP_IDS = ints((TEMP_F, TEMP_C))
EMERGENCY = strings(EMERGENCY_ADMISSION_TYPES)

# ---------------------------------------------------------------- labs: first 48 h of an ICU stay

ICU48_SAMPLER = f"""SELECT s.subject_id, s.stay_id, e.itemid, n.lab
FROM mimiciv_icu.icustays s
JOIN mimiciv_hosp.labevents e ON e.hadm_id = s.hadm_id
 AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 48 HOUR
JOIN ({LAB_NAME_VALUES}) n(itemid, lab) ON n.itemid = e.itemid
GROUP BY ALL
HAVING count(*) >= 2"""

ICU48_GOLD = f"""WITH names(itemid, lab) AS ({LAB_NAME_VALUES}),
stay AS (
  SELECT hadm_id, intime FROM mimiciv_icu.icustays WHERE subject_id = {{subject_id}} AND stay_id = {{stay_id}}
)
SELECT min(e.valuenum)
FROM {{labevents}} e
JOIN stay s ON s.hadm_id = e.hadm_id
JOIN names n ON n.itemid = e.itemid
WHERE n.lab = {{lab}} AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 48 HOUR"""

ICU48_PREMISE = Premise("itemid", "lab", f"""
SELECT n.itemid, n.lab FROM ({LAB_NAME_VALUES}) n(itemid, lab)
WHERE n.itemid NOT IN (
  SELECT e.itemid FROM mimiciv_hosp.labevents e JOIN mimiciv_icu.icustays s ON s.hadm_id = e.hadm_id
  WHERE s.stay_id = {{stay_id}} AND e.charttime BETWEEN s.intime - INTERVAL 7 DAY AND s.outtime + INTERVAL 7 DAY)
ORDER BY n.itemid""")

# ---------------------------------------------------------------- vitals: MAP < 65 before the first vasopressor

FIRST_PRESSOR = (f"SELECT min(p.starttime) FROM mimiciv_icu.inputevents p "
                 f"WHERE p.stay_id = {{stay_id}} AND p.itemid IN ({VASOPRESSOR_IDS})")

MAP_SAMPLER = f"""WITH first_pressor AS (
  SELECT stay_id, min(starttime) AS t FROM mimiciv_icu.inputevents WHERE itemid IN ({VASOPRESSOR_IDS}) GROUP BY stay_id
)
SELECT c.subject_id, c.stay_id
FROM mimiciv_icu.chartevents c JOIN first_pressor f ON f.stay_id = c.stay_id
WHERE c.itemid IN ({MAP_IDS}) AND c.charttime < f.t AND c.valuenum < 65
GROUP BY ALL"""

MAP_GOLD = f"""WITH first_pressor AS (
  SELECT min(p.starttime) AS t
  FROM mimiciv_icu.inputevents p
  WHERE p.stay_id = {{stay_id}} AND p.itemid IN ({VASOPRESSOR_IDS})
)
SELECT count(*)
FROM {{chartevents}} e
CROSS JOIN first_pressor f
WHERE e.subject_id = {{subject_id}} AND e.stay_id = {{stay_id}} AND e.itemid IN ({MAP_IDS})
  AND e.valuenum < 65 AND e.charttime < f.t"""

# ---------------------------------------------------------------- vitals: lowest MAP while a vasopressor runs

ON_PRESSOR = (f"EXISTS (SELECT 1 FROM mimiciv_icu.inputevents p WHERE p.stay_id = e.stay_id "
              f"AND p.itemid IN ({VASOPRESSOR_IDS}) AND e.charttime BETWEEN p.starttime AND p.endtime)")

MAP_ON_PRESSOR_SAMPLER = f"""SELECT e.subject_id, e.stay_id
FROM mimiciv_icu.chartevents e
WHERE e.itemid IN ({MAP_IDS}) AND {ON_PRESSOR}
GROUP BY ALL HAVING count(*) >= 2"""

MAP_ON_PRESSOR_GOLD = f"""WITH infusions AS (
  SELECT p.starttime, p.endtime
  FROM mimiciv_icu.inputevents p
  WHERE p.stay_id = {{stay_id}} AND p.itemid IN ({VASOPRESSOR_IDS}) AND p.endtime > p.starttime
)
SELECT min(e.valuenum)
FROM {{chartevents}} e
WHERE e.subject_id = {{subject_id}} AND e.stay_id = {{stay_id}} AND e.itemid IN ({MAP_IDS})
  AND EXISTS (SELECT 1 FROM infusions i WHERE e.charttime BETWEEN i.starttime AND i.endtime)"""

# ---------------------------------------------------------------- vitals: temperature in °C over both items

TEMP_SAMPLER = f"""SELECT c.subject_id, c.stay_id
FROM mimiciv_icu.chartevents c JOIN mimiciv_icu.icustays s ON s.stay_id = c.stay_id
WHERE c.itemid IN ({TEMP_IDS}) AND c.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR
GROUP BY ALL HAVING count(*) >= 2"""

TEMP_GOLD = f"""SELECT max(CASE WHEN e.itemid = {TEMP_F} THEN (e.valuenum - 32) / 1.8 ELSE e.valuenum END)
FROM {{chartevents}} e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
WHERE e.subject_id = {{subject_id}} AND e.stay_id = {{stay_id}} AND e.itemid IN ({TEMP_IDS})
  AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR"""

# ---------------------------------------------------------------- medications: blood culture -> first antibiotic dose

CULTURE_ABX_SAMPLER = f"""WITH culture AS (
  SELECT hadm_id, min(charttime) AS t FROM mimiciv_hosp.microbiologyevents
  WHERE spec_type_desc = 'BLOOD CULTURE' AND hadm_id IS NOT NULL GROUP BY hadm_id
)
SELECT DISTINCT m.subject_id, m.hadm_id
FROM mimiciv_hosp.emar m JOIN culture c ON c.hadm_id = m.hadm_id
WHERE m.charttime >= c.t AND {emar_antibiotic_predicate('m')}"""

CULTURE_ABX_GOLD = f"""WITH culture AS (
  SELECT min(e.charttime) AS t
  FROM {{microbiologyevents}} e
  WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND e.spec_type_desc = 'BLOOD CULTURE'
), first_dose AS (
  SELECT min(m.charttime) AS t
  FROM mimiciv_hosp.emar m CROSS JOIN culture c
  WHERE m.hadm_id = {{hadm_id}} AND m.charttime >= c.t AND {emar_antibiotic_predicate('m')}
)
SELECT date_diff('second', c.t, d.t) / 3600.0 FROM culture c CROSS JOIN first_dose d"""

# ---------------------------------------------------------------- microbiology: organisms before the first antibiotic

BEFORE_ABX_SAMPLER = f"""WITH first_abx AS (
  SELECT p.hadm_id, min(p.starttime) AS t FROM mimiciv_hosp.prescriptions p
  WHERE p.hadm_id IS NOT NULL AND {antibiotic_predicate('p')} GROUP BY p.hadm_id
)
SELECT m.subject_id, m.hadm_id
FROM mimiciv_hosp.microbiologyevents m JOIN first_abx f ON f.hadm_id = m.hadm_id
WHERE {organism_grown_predicate('m')} AND m.charttime < f.t
GROUP BY ALL HAVING count(*) FILTER (WHERE m.org_name LIKE '%,%') = 0"""

BEFORE_ABX_GOLD = f"""WITH first_abx AS (
  SELECT min(p.starttime) AS t
  FROM mimiciv_hosp.prescriptions p
  WHERE p.hadm_id = {{hadm_id}} AND {antibiotic_predicate('p')}
)
SELECT DISTINCT e.org_name
FROM {{microbiologyevents}} e CROSS JOIN first_abx f
WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND {organism_grown_predicate('e')}
  AND e.charttime < f.t
ORDER BY e.org_name"""

# ---------------------------------------------------------------- encounters: ICU hours over transfers

ICU_HOURS_GOLD = f"""WITH units(careunit, unit_name) AS ({ICU_UNIT_VALUES})
SELECT sum(date_diff('second', e.intime, e.outtime)) / 3600.0
FROM {{transfers}} e
JOIN units u ON u.careunit = e.careunit
WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}} AND e.eventtype IN ('admit', 'transfer')
  AND e.outtime IS NOT NULL"""

ICU_CAREUNITS = strings(ICU_UNITS)

# ---------------------------------------------------------------- encounters: early ICU stays after emergency admission

EARLY_ICU_MEMBERS = f"""  SELECT s.stay_id, s.intime AS t, u.unit_name AS unit, TRUE AS positive
  FROM mimiciv_icu.icustays s
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = s.hadm_id
  JOIN ({ICU_UNIT_VALUES}) u(careunit, unit_name) ON u.careunit = s.first_careunit
  WHERE a.admission_type IN ({EMERGENCY}) AND s.intime <= a.admittime + INTERVAL 24 HOUR AND s.outtime IS NOT NULL"""

EARLY_ICU_GOLD = f"""WITH units(careunit, unit_name) AS ({ICU_UNIT_VALUES})
SELECT avg(date_diff('second', e.intime, e.outtime) / 86400.0)
FROM {{icustays}} e
JOIN units u ON u.careunit = e.first_careunit
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE u.unit_name = {{unit_name}} AND e.intime >= {{t0}} AND e.intime < {{t1}}
  AND a.admission_type IN ({EMERGENCY}) AND e.intime <= a.admittime + INTERVAL 24 HOUR"""

# ---------------------------------------------------------------- diagnoses (procedures): hours from ICU admission

PROC_SAMPLER = f"""SELECT e.subject_id, e.stay_id, e.itemid, n.procedure
FROM mimiciv_icu.procedureevents e
JOIN ({ICU_PROCEDURE_VALUES}) n(itemid, procedure) ON n.itemid = e.itemid
GROUP BY ALL"""

PROC_GOLD = f"""WITH names(itemid, procedure) AS ({ICU_PROCEDURE_VALUES})
SELECT date_diff('second', s.intime, min(e.starttime)) / 3600.0
FROM {{procedureevents}} e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
JOIN names n ON n.itemid = e.itemid
WHERE e.subject_id = {{subject_id}} AND e.stay_id = {{stay_id}} AND n.procedure = {{procedure}}
GROUP BY s.intime"""

PROC_PREMISE = Premise("itemid", "procedure", f"""
SELECT n.itemid, n.procedure FROM ({ICU_PROCEDURE_VALUES}) n(itemid, procedure)
WHERE n.itemid NOT IN (SELECT itemid FROM mimiciv_icu.procedureevents WHERE stay_id = {{stay_id}})
ORDER BY n.itemid""")

register(
    Template(
        id="labs.lowest_first_48h_icu", intent="labs", level="patient", tier=3,
        paraphrases=(
            "What was the lowest {lab} of patient {subject_id} in the first 48 hours after admission to ICU "
            "stay {stay_id}?",
            "Within 48 hours of the start of ICU stay {stay_id}, how low did patient {subject_id}'s {lab} go?",
            "Patient {subject_id}, ICU stay {stay_id}: report the minimum {lab} drawn from ICU admission to 48 "
            "hours later.",
        ),
        sampler_sql=ICU48_SAMPLER,
        gold_sql=ICU48_GOLD,
        answer=NUMBER,
        evidence=Evidence(**LAB_EVIDENCE, join="JOIN mimiciv_icu.icustays s ON s.hadm_id = e.hadm_id",
                          where="s.stay_id = {stay_id} AND e.itemid = {itemid} "
                                "AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 48 HOUR",
                          focus="min", aggregate=True, extreme="low"),
        noise=("missing_evidence", "conflicting_records", "implausible_value", "unit_mismatch", "encoding_corruption",
               "nonexistent_entity", "lexical_variation"),
        entity_ref="stay_id", lexical="lab", premise=ICU48_PREMISE,
        description="lowest lab value in the first 48 hours of an ICU stay",
    ),
    Template(
        id="vitals.hypotension_before_vasopressor", intent="vitals", level="patient", tier=3,
        paraphrases=(
            "During ICU stay {stay_id} of patient {subject_id}, how many mean arterial pressure readings below 65 "
            f"mmHg (invasive and non-invasive readings each count) were charted before {VASOPRESSOR_WORDS} was "
            "first started?",
            "Patient {subject_id}, ICU stay {stay_id}: count the MAP values under 65 mmHg, arterial-line and cuff "
            "alike, recorded before the first vasopressor infusion (norepinephrine, epinephrine, vasopressin, "
            "phenylephrine or dopamine).",
            "How many hypotensive mean arterial pressures (< 65 mmHg, invasive or non-invasive) were charted for "
            "patient {subject_id} in ICU stay {stay_id} before any vasopressor was started?",
        ),
        sampler_sql=MAP_SAMPLER,
        gold_sql=MAP_GOLD,
        answer=COUNT,
        evidence=Evidence(**CHART_EVIDENCE, where=f"e.stay_id = {{stay_id}} AND e.itemid IN ({MAP_IDS}) "
                          f"AND e.charttime < ({FIRST_PRESSOR})", bounds=MAP_BOUNDS, focus="min", aggregate=True,
                          extreme="low"),
        noise=("duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "encoding_corruption", "nonexistent_entity"),
        entity_ref="stay_id", description="hypotensive MAP readings before the first vasopressor",
    ),
    Template(
        id="vitals.max_temperature_c_first_24h", intent="vitals", level="patient", tier=3,
        paraphrases=(
            "What was patient {subject_id}'s highest body temperature, in °C, during the first 24 hours of ICU "
            "stay {stay_id}? Temperatures charted in °F count too (convert them).",
            "In the first 24 hours of ICU stay {stay_id}, what was the peak temperature of patient {subject_id} "
            "in degrees Celsius, taking both Celsius and Fahrenheit charting into account?",
            "Patient {subject_id}, ICU stay {stay_id}: maximum temperature (°C) from ICU admission to 24 hours "
            "later, over readings charted in either unit.",
        ),
        sampler_sql=TEMP_SAMPLER,
        gold_sql=TEMP_GOLD,
        answer=MEAN,
        evidence=Evidence(**CHART_EVIDENCE, join="JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id",
                          where=f"e.stay_id = {{stay_id}} AND e.itemid IN ({TEMP_IDS}) "
                                "AND e.charttime BETWEEN s.intime AND s.intime + INTERVAL 24 HOUR",
                          bounds=TEMP_BOUNDS, focus="max", aggregate=True),
        noise=("missing_evidence", "conflicting_records", "implausible_value", "encoding_corruption",
               "nonexistent_entity"),
        entity_ref="stay_id", description="peak temperature in °C over both temperature items, first ICU day",
    ),
    Template(
        id="medications.hours_blood_culture_to_antibiotic", intent="medications", level="patient", tier=3,
        paraphrases=(
            "In admission {hadm_id}, how many hours after patient {subject_id}'s first blood culture was drawn "
            "was the first dose of a systemic antibiotic given (as recorded in the medication administration "
            "record)?",
            "Patient {subject_id}, admission {hadm_id}: time in hours from the first blood culture to the first "
            "systemic antibiotic dose administered at or after it.",
            "How long (hours) after the first blood culture of admission {hadm_id} did patient {subject_id} "
            "receive the first administered dose of a systemic antibiotic?",
        ),
        sampler_sql=CULTURE_ABX_SAMPLER,
        gold_sql=CULTURE_ABX_GOLD,
        answer=HOURS,
        evidence=Evidence(table="microbiologyevents",
                          where="e.hadm_id = {hadm_id} AND e.spec_type_desc = 'BLOOD CULTURE'",
                          key=("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid"),
                          id_col="microevent_id", time_col="charttime", window=ADMISSION_WINDOW,
                          store_col="storetime", category_col="org_name", focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity"),
        entity_ref="hadm_id", description="hours from the first blood culture to the first antibiotic dose",
    ),
    Template(
        id="microbiology.organisms_before_antibiotic", intent="microbiology", level="patient", tier=3,
        paraphrases=(
            "Which organisms grew in cultures collected from patient {subject_id} during admission {hadm_id} "
            "before the first systemic antibiotic was ordered?",
            "List the organisms isolated from any specimen drawn in admission {hadm_id} (patient {subject_id}) "
            "before antibiotic therapy was first ordered.",
            "Patient {subject_id}, admission {hadm_id}: what grew in cultures taken before the first systemic "
            "antibiotic order?",
        ),
        sampler_sql=BEFORE_ABX_SAMPLER,
        gold_sql=BEFORE_ABX_GOLD,
        answer=NAMES,
        evidence=Evidence(table="microbiologyevents", where="e.hadm_id = {hadm_id} AND "
                          + organism_grown_predicate("e"),
                          key=("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid"),
                          id_col="microevent_id", time_col="charttime", window=ADMISSION_WINDOW,
                          store_col="storetime", category_col="org_name", focus="first"),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="organisms grown in cultures drawn before the first antibiotic",
    ),
    Template(
        id="encounters.icu_hours_admission", intent="encounters", level="patient", tier=2,
        paraphrases=(
            "How many hours in total did patient {subject_id} spend in intensive care units during hospital "
            "admission {hadm_id}? Sum every ICU ward stay.",
            "Patient {subject_id}, admission {hadm_id}: total time in hours on any intensive care unit (medical, "
            "surgical, cardiac, coronary, neurosurgical or trauma ICU), over all ward movements.",
            "Summing all transfers into intensive care units, how many ICU hours did admission {hadm_id} of "
            "patient {subject_id} include?",
        ),
        sampler_sql=f"""SELECT subject_id, hadm_id FROM mimiciv_hosp.transfers
WHERE careunit IN ({ICU_CAREUNITS}) AND eventtype IN ('admit', 'transfer') AND outtime IS NOT NULL GROUP BY ALL""",
        gold_sql=ICU_HOURS_GOLD,
        answer=HOURS,
        evidence=Evidence(table="transfers", where=f"e.hadm_id = {{hadm_id}} AND e.careunit IN ({ICU_CAREUNITS}) "
                          "AND e.eventtype IN ('admit', 'transfer')", key=("hadm_id", "intime"),
                          id_col="transfer_id", time_col="intime", window=ADMISSION_WINDOW, category_col="careunit",
                          focus="first"),
        noise=("missing_evidence", "duplicate_records", "nonexistent_entity"),
        entity_ref="hadm_id", description="total hours in intensive care units over the transfers of an admission",
    ),
    Template(
        id="encounters.cohort_early_icu_los", intent="encounters", level="population", tier=3,
        paraphrases=(
            "Among {unit_name} stays beginning on or after {t0} and before {t1} that started within 24 hours of "
            "an emergency hospital admission, what was the mean ICU length of stay in days (ICU admission to ICU "
            "discharge)?",
            "For emergency admissions that reached the {unit_name} within 24 hours, with the ICU stay starting "
            "from {t0} up to {t1}, what was the average ICU length of stay (days)?",
            "What was the mean length (days, from ICU in to ICU out) of {unit_name} stays starting between {t0} "
            "(inclusive) and {t1} (exclusive) that began no later than 24 hours after an emergency admission?",
        ),
        sampler_sql=period_sampler(EARLY_ICU_MEMBERS, lo=2, hi=300, extra_cols="unit").replace(
            "SELECT make_date(p.y, 1, 1) AS t0, make_date(p.y + p.span, 1, 1) AS t1, unit",
            "SELECT make_date(p.y, 1, 1) AS t0, make_date(p.y + p.span, 1, 1) AS t1, unit AS unit_name"),
        gold_sql=EARLY_ICU_GOLD,
        answer=MEAN,
        evidence=Evidence(table="icustays",
                          join=f"JOIN ({ICU_UNIT_VALUES}) u(careunit, unit_name) ON u.careunit = e.first_careunit",
                          where="u.unit_name = {unit_name} AND e.intime >= {t0} AND e.intime < {t1}",
                          key=("subject_id", "intime"), id_col="stay_id", time_col="intime",
                          window=ADMISSION_WINDOW, category_col="first_careunit", focus="any"),
        # (no conflicting records: a copy of a stay in another unit leaves the unit's stay, and the answer)
        noise=("duplicate_records", "missing_evidence", "lexical_variation"),
        lexical="unit_name", time_window=PERIOD_WINDOW,
        description="mean ICU length of stay of a unit's early ICU admissions after emergency admission",
    ),
    Template(
        id="diagnoses.icu_procedure_hours", intent="diagnoses", level="patient", tier=2,
        paraphrases=(
            "How many hours after the start of ICU stay {stay_id} did patient {subject_id} first undergo "
            "{procedure}?",
            "Patient {subject_id}, ICU stay {stay_id}: time in hours from ICU admission to the first {procedure}.",
            "In ICU stay {stay_id}, how long after ICU admission (hours) was {procedure} first started for "
            "patient {subject_id}?",
        ),
        sampler_sql=PROC_SAMPLER,
        gold_sql=PROC_GOLD,
        answer=HOURS,
        evidence=Evidence(table="procedureevents", where="e.stay_id = {stay_id} AND e.itemid = {itemid}",
                          key=("stay_id", "itemid", "starttime"), id_col="orderid", time_col="starttime",
                          window=ICU_WINDOW, store_col="storetime", value_col="value", focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation"),
        entity_ref="stay_id", lexical="procedure", premise=PROC_PREMISE,
        description="hours from ICU admission to the first ICU procedure of a kind",
    ),
    Template(
        id="vitals.lowest_map_on_vasopressor", intent="vitals", level="patient", tier=3,
        paraphrases=(
            "During ICU stay {stay_id} of patient {subject_id}, what was the lowest mean arterial pressure "
            f"(invasive or non-invasive) charted while {VASOPRESSOR_WORDS} was infusing?",
            "Patient {subject_id}, ICU stay {stay_id}: minimum MAP in mmHg, arterial line or cuff, over the "
            "readings taken during a running vasopressor infusion (norepinephrine, epinephrine, vasopressin, "
            "phenylephrine or dopamine).",
            "While on vasopressors (norepinephrine, epinephrine, vasopressin, phenylephrine or dopamine) in ICU "
            "stay {stay_id}, how low did patient {subject_id}'s mean arterial pressure go (either measurement "
            "route)?",
        ),
        sampler_sql=MAP_ON_PRESSOR_SAMPLER,
        gold_sql=MAP_ON_PRESSOR_GOLD,
        answer=NUMBER,
        evidence=Evidence(**CHART_EVIDENCE, where=f"e.stay_id = {{stay_id}} AND e.itemid IN ({MAP_IDS}) AND "
                          + ON_PRESSOR, bounds=MAP_BOUNDS, focus="min", aggregate=True, extreme="low"),
        noise=("missing_evidence", "conflicting_records", "implausible_value", "encoding_corruption",
               "nonexistent_entity"),
        entity_ref="stay_id", description="lowest MAP during vasopressor infusions",
    ),
)
