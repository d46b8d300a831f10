"""Medication questions: orders (``prescriptions``), administrations (``emar``) and ICU infusions
(``inputevents`` with ``d_items``).

Drug names the question mentions are matched in SQL (``drug = {drug}``, ``medication = {drug}``,
``d.label = {label}``), so a misspelled or brand name ("vancomicin", "Zosyn", "norepi") really
breaks a credulous agent's query. Infusion amounts carry value-level noise: a dose recorded in mcg
instead of mg (with the unit column changed), a decimal slip, a contradictory re-charted segment.
"""

from __future__ import annotations

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.noise.lexicon import add_variants
from ehrgym.bench.noise.units import CONVERSIONS, UnitConversion
from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, Evidence, Premise, Template, TimeWindow
from ehrgym.bench.templates.diagnoses import INFECTIONS_SQL
from ehrgym.bench.templates.registry import register


class MedicationTemplate(Template):
    """A template of this module. Unpickling one (build worker processes receive pickled templates)
    imports this module, so the curated names (lexicon) and infusion unit conversions registered here at import time exist there too."""

COUNT = AnswerSpec("integer")
HOURS = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
AMOUNT = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.005, decimals=2)
WHEN = AnswerSpec("datetime")
NAME = AnswerSpec("string")
NAMES = AnswerSpec("set")
YES_NO = AnswerSpec("boolean")

# MIMIC-IV prescription / eMAR names of systemic antibiotics
ANTIBIOTICS = ("Vancomycin", "Piperacillin-Tazobactam", "CefePIME", "Meropenem", "CefTRIAXone", "Azithromycin",
               "Ciprofloxacin HCl", "Nitrofurantoin Monohyd (MacroBID)")
# drugs whose timing or use a clinician asks about (antibiotics, vasoactives, anticoagulants, insulin …)
NOTABLE = ANTIBIOTICS + ("NORepinephrine", "PHENYLephrine", "Propofol", "Heparin", "Insulin", "Furosemide",
                         "Metoprolol Tartrate", "Apixaban", "Pantoprazole", "Octreotide Acetate", "Lactulose",
                         "Aspirin", "Atorvastatin", "LevETIRAcetam", "PredniSONE", "Sodium Bicarbonate")
# ICU drips charted in mg in inputevents: norepinephrine, phenylephrine, propofol
DRIP_IDS = (221906, 221749, 222168)


def _strings(names: tuple[str, ...]) -> str:
    return ", ".join("'" + n.replace("'", "''") + "'" for n in names)


ABX_SQL = _strings(ANTIBIOTICS)
NOTABLE_SQL = _strings(NOTABLE)
DRIPS_SQL = ", ".join(str(i) for i in DRIP_IDS)
GIVEN = "('Administered', 'Started')"  # eMAR events that mean the drug reached the patient

# A vasoactive or sedative drip charted in mcg instead of mg is the classic infusion unit error.
for _itemid in DRIP_IDS:
    CONVERSIONS.setdefault(_itemid, UnitConversion(_itemid, "mg", "mcg", 1000.0, decimals=1))

# misspellings and abbreviations people write (names shared with another module use the same forms,
# so the lexicon does not depend on which modules a process imported)
DRUG_VARIANTS: dict[str, tuple[str, ...]] = {
    "Vancomycin": ("vancomicin", "vanco", "vanc"),
    "Piperacillin-Tazobactam": ("pip-tazo", "Zosyn", "piperacilin-tazobactam"),
    "CefePIME": ("cefepim", "Maxipime", "cefapime"),
    "Meropenem": ("meropenum", "Merrem", "meropenam"),
    "CefTRIAXone": ("ceftriaxon", "Rocephin", "ceftriaxzone"),
    "Azithromycin": ("azithromicin", "Zithromax", "azithro"),
    "Ciprofloxacin HCl": ("cipro", "ciprofloxacin", "ciprofloxacine HCl"),
    "Nitrofurantoin Monohyd (MacroBID)": ("Macrobid", "nitrofurantoin", "nitrofurantion monohydrate"),
    "NORepinephrine": ("norepi", "Levophed", "norepinephrin"),
    "Norepinephrine": ("norepi", "Levophed", "noradrenaline"),
    "PHENYLephrine": ("phenylepherine", "Neo-Synephrine", "neo"),
    "Phenylephrine": ("phenylepherine", "Neo-Synephrine", "neo"),
    "Propofol": ("propafol", "Diprivan", "propofal"),
    "Heparin": ("heprin", "UFH", "heparine"),
    "Insulin": ("insuline", "insulin regular", "insluin"),
    "Furosemide": ("Lasix", "furosemid", "frusemide"),
    "Metoprolol Tartrate": ("metoprolol", "Lopressor", "metoprolol tartate"),
    "Apixaban": ("Eliquis", "apixiban"),
    "Pantoprazole": ("Protonix", "pantoprazol", "pantoprazle"),
    "Octreotide Acetate": ("octreotide", "Sandostatin", "octreotid acetate"),
    "Lactulose": ("lactulos", "Enulose"),
    "Aspirin": ("ASA", "asprin", "acetylsalicylic acid"),
    "Atorvastatin": ("Lipitor", "atorvastatine", "atorvastin"),
    "LevETIRAcetam": ("Keppra", "levetiracetem", "levetiracetam"),
    "PredniSONE": ("prednisone", "predisone", "Deltasone"),
    "Sodium Bicarbonate": ("bicarb", "NaHCO3", "sodium bicarb"),
}
for _name, _forms in DRUG_VARIANTS.items():
    add_variants(_name, *_forms)

PATIENT_SCOPE = ("SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions "
                 "WHERE subject_id = {subject_id}")
DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
ICU_SCOPE = "SELECT min(intime), max(outtime) FROM mimiciv_icu.icustays"

# ---------------------------------------------------------------- evidence shapes

RX_EVIDENCE = dict(table="prescriptions", where="e.hadm_id = {hadm_id} AND e.drug = {drug}",
                   key=("hadm_id", "drug", "starttime"), id_col="pharmacy_id", time_col="starttime",
                   window=ADMISSION_WINDOW)
EMAR_KEY = ("subject_id", "emar_seq")  # emar_id: a re-stored copy keeps it
EMAR_DOSES = dict(table="emar",
                  where="e.hadm_id = {hadm_id} AND e.medication = {drug} AND e.event_txt = 'Administered'",
                  key=EMAR_KEY, time_col="charttime", window=ADMISSION_WINDOW, store_col="storetime")
DRIP_EVIDENCE = dict(table="inputevents", where="e.stay_id = {stay_id} AND e.itemid = {itemid}",
                     key=("stay_id", "itemid", "starttime"), id_col="orderid", time_col="starttime",
                     window=ICU_WINDOW, store_col="storetime")
DRIP_VALUE = dict(value_col="amount", unit_col="amountuom", item_col="itemid", item_param="itemid")

RX_PREMISE = Premise("drug", "drug", f"""
SELECT DISTINCT drug, drug FROM mimiciv_hosp.prescriptions
WHERE drug IN ({NOTABLE_SQL}) AND drug NOT IN (SELECT drug FROM mimiciv_hosp.prescriptions WHERE hadm_id = {{hadm_id}})
ORDER BY 1""")
ABX_EMAR_PREMISE = Premise("drug", "drug", f"""
SELECT DISTINCT medication, medication FROM mimiciv_hosp.emar
WHERE medication IN ({ABX_SQL})
  AND medication NOT IN (
    SELECT medication FROM mimiciv_hosp.emar WHERE hadm_id = {{hadm_id}} AND medication IS NOT NULL)
ORDER BY 1""")
DRIP_PREMISE = Premise("itemid", "label", f"""
SELECT d.itemid, d.label FROM mimiciv_icu.d_items d
WHERE d.itemid IN ({DRIPS_SQL})
  AND d.itemid NOT IN (SELECT itemid FROM mimiciv_icu.inputevents WHERE stay_id = {{stay_id}})
ORDER BY d.itemid""")

DRIP_SAMPLER = f"""
SELECT e.subject_id, e.stay_id, e.itemid, d.label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
WHERE e.itemid IN ({DRIPS_SQL}) AND e.stay_id IS NOT NULL
GROUP BY ALL
HAVING count(*) >= 2"""
DRIP_FILTER = """
JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
WHERE e.subject_id = {subject_id} AND e.stay_id = {stay_id}
  AND d.itemid = {itemid} AND d.label = {label}"""

# ---------------------------------------------------------------- patient level

register(
    MedicationTemplate(
        id="medications.first_order_time", intent="medications", level="patient",
        paraphrases=(
            "When was {drug} first ordered to start for patient {subject_id} during admission {hadm_id}?",
            "At what date and time did the first {drug} prescription of patient {subject_id} in admission {hadm_id} "
            "start?",
            "Patient {subject_id}, hospital admission {hadm_id}: give the start time of the earliest {drug} order.",
        ),
        sampler_sql=f"""SELECT DISTINCT subject_id, hadm_id, drug FROM mimiciv_hosp.prescriptions
WHERE drug IN ({NOTABLE_SQL}) AND hadm_id IS NOT NULL""",
        gold_sql="""SELECT min(e.starttime)
FROM {prescriptions} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.drug = {drug}""",
        answer=WHEN,
        evidence=Evidence(**RX_EVIDENCE, focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", premise=RX_PREMISE, description="start time of the first order of a drug",
    ),
    MedicationTemplate(
        id="medications.hours_to_first_dose", intent="medications", level="patient",
        paraphrases=(
            "How many hours after the start of admission {hadm_id} did patient {subject_id} receive the first dose "
            "of {drug}?",
            "Time in hours from hospital admission {hadm_id} to patient {subject_id}'s first administered {drug} dose?",
            "For patient {subject_id}, how long (hours) after admission {hadm_id} began was {drug} first given?",
        ),
        sampler_sql=f"""SELECT DISTINCT subject_id, hadm_id, medication AS drug FROM mimiciv_hosp.emar
WHERE medication IN ({ABX_SQL}) AND event_txt = 'Administered' AND hadm_id IS NOT NULL""",
        gold_sql="""SELECT date_diff('minute', a.admittime, min(e.charttime)) / 60.0
FROM {emar} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id}
  AND e.medication = {drug} AND e.event_txt = 'Administered'
GROUP BY a.admittime""",
        answer=HOURS,
        evidence=Evidence(**EMAR_DOSES, focus="first"),
        noise=("missing_evidence", "out_of_window", "nonexistent_entity", "false_premise", "lexical_variation",
               "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", premise=ABX_EMAR_PREMISE,
        description="time from admission to the first antibiotic dose",
    ),
    MedicationTemplate(
        id="medications.count_doses", intent="medications", level="patient",
        paraphrases=(
            "How many doses of {drug} were administered to patient {subject_id} during admission {hadm_id}?",
            "Count the {drug} administrations charted in the eMAR for patient {subject_id} in admission {hadm_id}.",
            "During hospital admission {hadm_id}, how many times was {drug} given to patient {subject_id}?",
        ),
        sampler_sql=f"""SELECT DISTINCT subject_id, hadm_id, medication AS drug FROM mimiciv_hosp.emar
WHERE medication IN ({NOTABLE_SQL}) AND event_txt = 'Administered' AND hadm_id IS NOT NULL""",
        gold_sql="""SELECT count(*)
FROM {emar} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id}
  AND e.medication = {drug} AND e.event_txt = 'Administered'""",
        answer=COUNT,
        evidence=Evidence(**EMAR_DOSES, focus="any"),
        noise=("duplicate_records", "out_of_window", "nonexistent_entity", "lexical_variation", "out_of_scope"),
        entity_ref="subject_id", lexical="drug", description="number of administered doses of a drug",
    ),
    MedicationTemplate(
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
    MedicationTemplate(
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
    MedicationTemplate(
        id="medications.drip_hours", intent="medications", level="patient",
        paraphrases=(
            "For how many hours in total did patient {subject_id} receive {label} during ICU stay {stay_id}?",
            "What was the total infusion time (hours) of {label} for patient {subject_id} in ICU stay {stay_id}?",
            "Patient {subject_id}, ICU stay {stay_id}: how many hours was the {label} drip running?",
        ),
        sampler_sql=DRIP_SAMPLER,
        gold_sql="SELECT sum(date_diff('minute', e.starttime, e.endtime)) / 60.0\nFROM {inputevents} e" + DRIP_FILTER,
        answer=HOURS,
        evidence=Evidence(**DRIP_EVIDENCE, focus="any"),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "nonexistent_entity", "false_premise",
               "lexical_variation", "out_of_scope"),
        entity_ref="subject_id", lexical="label", premise=DRIP_PREMISE,
        description="duration of a vasopressor/sedative infusion in an ICU stay",
    ),
    MedicationTemplate(
        id="medications.count_antibiotics", intent="medications", level="patient",
        paraphrases=(
            "How many different antibiotics were ordered for patient {subject_id} during admission {hadm_id}?",
            "Count the distinct antibiotics prescribed to patient {subject_id} in hospital admission {hadm_id}.",
            "Patient {subject_id}, admission {hadm_id}: how many distinct antibiotic drugs were prescribed?",
        ),
        sampler_sql=f"""SELECT DISTINCT subject_id, hadm_id FROM mimiciv_hosp.prescriptions
WHERE drug IN ({ABX_SQL}) AND hadm_id IS NOT NULL""",
        gold_sql=f"""SELECT count(DISTINCT e.drug)
FROM {{prescriptions}} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {{subject_id}} AND a.hadm_id = {{hadm_id}} AND e.drug IN ({ABX_SQL})""",
        answer=COUNT,
        evidence=Evidence(**{**RX_EVIDENCE, "where": f"e.hadm_id = {{hadm_id}} AND e.drug IN ({ABX_SQL})"},
                          category_col="drug", focus="first"),
        # duplicates and misplaced copies of an order do not change a count of DISTINCT drugs
        noise=("conflicting_records", "nonexistent_entity", "out_of_scope"),
        entity_ref="hadm_id", description="number of distinct antibiotics of an admission",
    ),
    MedicationTemplate(
        id="medications.route", intent="medications", level="patient",
        paraphrases=(
            "By which route was {drug} ordered for patient {subject_id} during admission {hadm_id}?",
            "What administration route did the {drug} orders of patient {subject_id} in admission {hadm_id} specify?",
            "Patient {subject_id}, hospital admission {hadm_id}: how was {drug} to be given (route)?",
        ),
        sampler_sql=f"""SELECT subject_id, hadm_id, drug FROM mimiciv_hosp.prescriptions
WHERE drug IN ({NOTABLE_SQL}) AND hadm_id IS NOT NULL AND route IS NOT NULL
GROUP BY ALL HAVING count(DISTINCT route) = 1""",
        gold_sql="""SELECT DISTINCT e.route
FROM {prescriptions} e
WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} AND e.drug = {drug}
ORDER BY e.route""",
        answer=NAME,
        evidence=Evidence(**RX_EVIDENCE, category_col="route", focus="first", aggregate=False),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "nonexistent_entity", "false_premise",
               "lexical_variation", "out_of_scope"),
        entity_ref="hadm_id", lexical="drug", premise=RX_PREMISE, description="route of a drug order",
    ),
    MedicationTemplate(
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
drugs AS (SELECT DISTINCT medication AS drug FROM mimiciv_hosp.emar WHERE medication IN ({NOTABLE_SQL})),
given AS (SELECT DISTINCT hadm_id, medication AS drug FROM mimiciv_hosp.emar
          WHERE event_txt IN {GIVEN} AND medication IN ({NOTABLE_SQL}))
SELECT a.subject_id, a.hadm_id, d.drug
FROM adm a CROSS JOIN drugs d
LEFT JOIN given g ON g.hadm_id = a.hadm_id AND g.drug = d.drug
WHERE g.hadm_id IS NOT NULL OR hash(a.hadm_id, d.drug) % 6 = 0""",
        gold_sql=f"""SELECT count(*) > 0
FROM {{emar}} e
WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}}
  AND e.medication = {{drug}} AND e.event_txt IN {GIVEN}""",
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

register(
    MedicationTemplate(
        id="medications.cohort_top_antibiotic", intent="medications", level="population",
        paraphrases=(
            "Which antibiotic was ordered most often in admissions that began in {year} with a diagnosis of {title}?",
            "Among {year} admissions coded with {title}, which antibiotic had the most prescriptions?",
            "What was the most frequently prescribed antibiotic (number of orders) for {title} admissions of {year}?",
        ),
        sampler_sql=f"""
SELECT year, title FROM (
  SELECT year, title, n, max(n) OVER (PARTITION BY year, title) AS top FROM (
    SELECT extract(year FROM a.admittime) AS year, d.long_title AS title, e.drug, count(*) AS n
    FROM mimiciv_hosp.prescriptions e
    JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
    JOIN mimiciv_hosp.diagnoses_icd di ON di.hadm_id = e.hadm_id
    JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version
    WHERE e.drug IN ({ABX_SQL}) AND di.icd_code IN ({INFECTIONS_SQL})
    GROUP BY ALL))
GROUP BY year, title
HAVING count(*) FILTER (WHERE n = top) = 1 AND sum(n) BETWEEN 2 AND 400""",
        gold_sql=f"""WITH cohort AS (
  SELECT DISTINCT di.hadm_id
  FROM mimiciv_hosp.diagnoses_icd di
  JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = di.hadm_id
  WHERE d.long_title = {{title}} AND extract(year FROM a.admittime) = {{year}}
), per_drug AS (
  SELECT e.drug, count(*) AS n
  FROM {{prescriptions}} e
  WHERE e.drug IN ({ABX_SQL}) AND e.hadm_id IN (SELECT hadm_id FROM cohort)
  GROUP BY e.drug
)
SELECT drug FROM per_drug WHERE n = (SELECT max(n) FROM per_drug) ORDER BY drug""",
        answer=NAMES,
        evidence=Evidence(table="prescriptions", key=("hadm_id", "drug", "starttime"), id_col="pharmacy_id",
                          time_col="starttime", window=ADMISSION_WINDOW, category_col="drug",
                          join="""JOIN (SELECT DISTINCT di.hadm_id, d.long_title, extract(year FROM a.admittime) AS year
      FROM mimiciv_hosp.diagnoses_icd di
      JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version
      JOIN mimiciv_hosp.admissions a ON a.hadm_id = di.hadm_id) k ON k.hadm_id = e.hadm_id""",
                          where=f"e.drug IN ({ABX_SQL}) AND k.long_title = {{title}} AND k.year = {{year}}"),
        noise=("missing_evidence", "conflicting_records", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=YEAR_WINDOW,
        description="most prescribed antibiotic in an infection cohort (top-1, ties as a set)",
    ),
    MedicationTemplate(
        id="medications.cohort_mean_drip_amount", intent="medications", level="population",
        paraphrases=(
            "Among ICU stays that began in {year} and received {label}, what was the mean total amount (mg) per stay?",
            "For {year} ICU stays on {label}, how many mg were given per stay on average?",
            "Average total {label} dose (mg) per ICU stay, over stays starting in {year} that received it?",
        ),
        sampler_sql=f"""SELECT extract(year FROM s.intime) AS year, e.itemid, d.label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
WHERE e.itemid IN ({DRIPS_SQL})
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400""",
        gold_sql="""WITH per_stay AS (
  SELECT e.stay_id, sum(e.amount) AS total
  FROM {inputevents} e
  JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
  JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
  WHERE d.itemid = {itemid} AND d.label = {label} AND extract(year FROM s.intime) = {year}
  GROUP BY e.stay_id
)
SELECT round(avg(total), 6) FROM per_stay""",
        answer=AMOUNT,
        evidence=Evidence(**{**DRIP_EVIDENCE, "where": "e.itemid = {itemid} AND " + STAY_IN_YEAR}, join=STAY_JOIN,
                          **DRIP_VALUE),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "unit_mismatch", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=ICU_YEAR_WINDOW, description="mean total infusion amount per ICU stay in a year",
    ),
    MedicationTemplate(
        id="medications.cohort_unit_mean_segment", intent="medications", level="population",
        paraphrases=(
            "Among ICU stays that began in {year} in the {careunit}, what was the mean {label} amount (mg) per "
            "charted infusion entry?",
            "For {careunit} stays of {year}, what was the average amount of {label} (mg) in one inputevents entry?",
            "Average mg of {label} per charted segment over ICU stays starting in {year} whose first unit was the "
            "{careunit}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM s.intime) AS year, s.first_careunit AS careunit, e.itemid, d.label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
WHERE e.itemid IN ({DRIPS_SQL}) AND s.first_careunit IS NOT NULL
GROUP BY ALL
HAVING count(*) BETWEEN 3 AND 400 AND count(DISTINCT e.amount) >= 2""",
        gold_sql="""SELECT round(avg(e.amount), 6)
FROM {inputevents} e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
WHERE d.itemid = {itemid} AND d.label = {label}
  AND s.first_careunit = {careunit} AND extract(year FROM s.intime) = {year}""",
        answer=AMOUNT,
        evidence=Evidence(**{**DRIP_EVIDENCE, "where": "e.itemid = {itemid} AND s.first_careunit = {careunit} AND "
                                                       + STAY_IN_YEAR}, join=STAY_JOIN, **DRIP_VALUE),
        noise=("missing_evidence", "duplicate_records", "out_of_window", "conflicting_records", "implausible_value",
               "unit_mismatch", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=ICU_YEAR_WINDOW,
        description="mean charted infusion amount in a care unit and year",
    ),
    MedicationTemplate(
        id="medications.cohort_share_on_drip", intent="medications", level="population",
        paraphrases=(
            "What percentage of the ICU stays that began in {year} received {label}?",
            "Of all ICU stays starting in {year}, what share (%) had a {label} infusion?",
            "In {year}, what percent of ICU stays were on {label}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM s.intime) AS year, e.itemid, d.label
FROM mimiciv_icu.inputevents e
JOIN mimiciv_icu.icustays s ON s.stay_id = e.stay_id
JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
WHERE e.itemid IN ({DRIPS_SQL})
GROUP BY ALL
HAVING count(*) BETWEEN 1 AND 400""",
        gold_sql="""WITH stays AS (
  SELECT stay_id FROM mimiciv_icu.icustays WHERE extract(year FROM intime) = {year}
), treated AS (
  SELECT DISTINCT e.stay_id
  FROM {inputevents} e
  JOIN mimiciv_icu.d_items d ON d.itemid = e.itemid
  WHERE d.itemid = {itemid} AND d.label = {label} AND e.stay_id IN (SELECT stay_id FROM stays)
)
SELECT 100.0 * (SELECT count(*) FROM treated) / (SELECT count(*) FROM stays)""",
        answer=AMOUNT,
        evidence=Evidence(**{**DRIP_EVIDENCE, "where": "e.itemid = {itemid} AND " + STAY_IN_YEAR}, join=STAY_JOIN),
        noise=("temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="label", time_window=ICU_YEAR_WINDOW, description="share of ICU stays on a vasopressor/sedative",
    ),
    MedicationTemplate(
        id="medications.cohort_count_doses", intent="medications", level="population",
        paraphrases=(
            "How many {drug} administrations were charted in the eMAR for admissions that began in {year}?",
            "Across all admissions starting in {year}, how many doses of {drug} were given?",
            "Count the administered {drug} doses over admissions of {year}.",
        ),
        sampler_sql=f"""SELECT extract(year FROM a.admittime) AS year, e.medication AS drug
FROM mimiciv_hosp.emar e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE e.medication IN ({NOTABLE_SQL}) AND e.event_txt = 'Administered'
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400""",
        gold_sql="""SELECT count(*)
FROM {emar} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE e.medication = {drug} AND e.event_txt = 'Administered' AND extract(year FROM a.admittime) = {year}""",
        answer=COUNT,
        evidence=Evidence(**{**EMAR_DOSES, "where": "e.medication = {drug} AND e.event_txt = 'Administered' AND "
                                                    + ADM_IN_YEAR}, join=ADM_JOIN),
        noise=("duplicate_records", "out_of_window", "lexical_variation", "out_of_scope"),
        lexical="drug", time_window=YEAR_WINDOW, description="number of eMAR administrations of a drug in a year",
    ),
    MedicationTemplate(
        id="medications.cohort_mean_hours_to_dose", intent="medications", level="population",
        paraphrases=(
            "Among admissions that began in {year} and received {drug}, what was the mean time (hours) from "
            "admission to the first dose?",
            "On average, how many hours after admission was the first {drug} dose given, over {year} admissions "
            "that received it?",
            "Mean admission-to-first-{drug} time in hours for admissions starting in {year}?",
        ),
        sampler_sql=f"""SELECT extract(year FROM a.admittime) AS year, e.medication AS drug
FROM mimiciv_hosp.emar e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE e.medication IN ({ABX_SQL}) AND e.event_txt = 'Administered'
GROUP BY ALL
HAVING count(*) BETWEEN 2 AND 400""",
        gold_sql="""WITH firsts AS (
  SELECT e.hadm_id, min(e.charttime) AS first_dose
  FROM {emar} e
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
  WHERE e.medication = {drug} AND e.event_txt = 'Administered' AND extract(year FROM a.admittime) = {year}
  GROUP BY e.hadm_id
)
SELECT avg(date_diff('minute', a.admittime, f.first_dose)) / 60.0
FROM firsts f
JOIN mimiciv_hosp.admissions a ON a.hadm_id = f.hadm_id""",
        answer=HOURS,
        evidence=Evidence(**{**EMAR_DOSES, "where": "e.medication = {drug} AND e.event_txt = 'Administered' AND "
                                                    + ADM_IN_YEAR}, join=ADM_JOIN, focus="first"),
        noise=("missing_evidence", "out_of_window", "temporal_mismatch", "lexical_variation", "out_of_scope"),
        lexical="drug", time_window=YEAR_WINDOW, description="mean time from admission to the first antibiotic dose",
    ),
)
