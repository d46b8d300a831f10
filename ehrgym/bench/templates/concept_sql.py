"""Clinical concept sets used by the harder templates (``cohorts``, ``timing``, ``crossintent``).

Every concept the harder templates use lives here, once, with its source, so that it can be
reviewed (and later folded into a shared concept registry) in one place. Item ids and codes are
MIMIC-IV's; the definitions follow the MIMIC code repository's derived concepts
(github.com/MIT-LCP/mimic-code, ``mimic-iv/concepts``) where one exists:

========================  =====================================================================
concept                   source
========================  =====================================================================
vasopressors              ``concepts/medication/{norepinephrine,epinephrine,vasopressin,
                          phenylephrine,dopamine}.sql`` — one inputevents item id each
systemic antibiotics      ``concepts/medication/antibiotic.sql`` — drug-name stems matched
                          case-insensitively, topical/ophthalmic/otic routes excluded
KDIGO creatinine AKI      ``concepts/organfailure/kdigo_creatinine.sql`` + ``kdigo_stages.sql`` —
                          a creatinine >= 0.3 mg/dL above the lowest value of the previous 48 h,
                          or >= 1.5x the lowest value of the previous 7 days
suspected infection       ``concepts/sepsis/suspicion_of_infection.sql`` — an antibiotic with a
                          culture drawn up to 72 h before or 24 h after it; the suspicion time
                          is the earlier of the two
organ dysfunction         SOFA component thresholds for a score >= 2 (``concepts/score/sofa.sql``):
                          creatinine >= 2.0 mg/dL, platelets < 100 K/uL, bilirubin >= 2.0 mg/dL;
                          lactate >= 2 mmol/L (Sepsis-3 septic-shock criterion)
mean arterial pressure    ``concepts/measurement/vitalsign.sql`` — invasive 220052, non-invasive 220181
systolic blood pressure   ``concepts/measurement/vitalsign.sql`` — invasive 220050, non-invasive 220179
temperature               ``concepts/measurement/vitalsign.sql`` — 223761 (°F, converted) and 223762 (°C)
ICD code groups           ICD-9-CM / ICD-10-CM category prefixes (as in ``concepts/comorbidity/
                          charlson.sql``), MIMIC-IV stores codes without dots
intensive care units      MIMIC-IV ``icustays.first_careunit`` values (their clinical names below)
========================  =====================================================================

The SQL snippets are plain strings (no placeholders) meant to be pasted into a template's SQL.
"""

from __future__ import annotations

from ehrgym.bench.noise.lexicon import add_variants


def strings(values) -> str:
    """A SQL list of string literals."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


def ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


# ---------------------------------------------------------------- vasopressors (inputevents)
VASOPRESSORS: dict[int, str] = {
    221906: "norepinephrine",
    221289: "epinephrine",
    222315: "vasopressin",
    221749: "phenylephrine",
    221662: "dopamine",
}
VASOPRESSOR_IDS = ints(sorted(VASOPRESSORS))
VASOPRESSOR_WORDS = "a vasopressor (norepinephrine, epinephrine, vasopressin, phenylephrine or dopamine)"

# ---------------------------------------------------------------- systemic antibiotics (prescriptions)
ANTIBIOTIC_STEMS: tuple[str, ...] = (
    "amikacin", "amoxicillin", "ampicillin", "azithromycin", "aztreonam", "bactrim", "cefazolin", "cefepime",
    "cefotaxime", "cefotetan", "cefoxitin", "cefpodoxime", "ceftaroline", "ceftazidime", "ceftriaxone",
    "cefuroxime", "cephalexin", "ciprofloxacin", "clarithromycin", "clindamycin", "daptomycin", "doxycycline",
    "ertapenem", "erythromycin", "gentamicin", "imipenem", "levofloxacin", "linezolid", "meropenem",
    "metronidazole", "minocycline", "moxifloxacin", "nafcillin", "nitrofurantoin", "oxacillin", "penicillin",
    "piperacillin", "rifampin", "sulfamethoxazole", "tetracycline", "tigecycline", "tobramycin", "trimethoprim",
    "vancomycin",
)
ANTIBIOTIC_REGEX = "|".join(ANTIBIOTIC_STEMS)
NON_SYSTEMIC_ROUTES: tuple[str, ...] = ("OU", "OS", "OD", "AU", "AS", "AD", "TP", "TOPICAL", "OPHTHALMIC", "EAR")
NON_SYSTEMIC_FORMS = "cream|ointment|oint|gel|desensitization|eye drop|ophth"


def antibiotic_predicate(alias: str = "p") -> str:
    """Predicate on a ``prescriptions`` row (alias ``alias``): a systemic antibiotic order."""
    return (f"regexp_matches(lower({alias}.drug), '{ANTIBIOTIC_REGEX}') "
            f"AND NOT regexp_matches(lower({alias}.drug), '{NON_SYSTEMIC_FORMS}') "
            f"AND coalesce(upper({alias}.route), '') NOT IN ({strings(NON_SYSTEMIC_ROUTES)})")


# eMAR events that record a dose given: 'Administered' and its delayed, partial, other-location and from-a-drip forms
# (the MIMIC-IV demo charts 'Delayed Administered' for vancomycin, cefepime, metoprolol … doses); not the truncated
# ' in Other Location' and 'Delayed ' rows, which do not say what happened
DOSE_GIVEN_EVENTS: tuple[str, ...] = ("Administered", "Delayed Administered", "Partial Administered",
                                      "Administered in Other Location", "Administered Bolus from IV Drip")


def dose_given_predicate(alias: str = "m") -> str:
    """Predicate on an ``emar`` row: the event records a dose given to the patient."""
    return f"{alias}.event_txt IN ({strings(DOSE_GIVEN_EVENTS)})"


def emar_antibiotic_predicate(alias: str = "m") -> str:
    """Predicate on an ``emar`` row: a systemic antibiotic dose given to the patient."""
    return (f"regexp_matches(lower({alias}.medication), '{ANTIBIOTIC_REGEX}') "
            f"AND NOT regexp_matches(lower({alias}.medication), '{NON_SYSTEMIC_FORMS}') "
            f"AND {dose_given_predicate(alias)}")


def covered_hours_sql(segments: str) -> str:
    """Hours covered by the union of ``segments`` (a SELECT of ``starttime, endtime`` rows with endtime > starttime):
    overlapping or nested segments (several drugs at once, a bolus inside a running drip) count once."""
    return f"""WITH iv AS (
{segments}
), ordered AS (
  SELECT starttime, endtime,
         max(endtime) OVER (ORDER BY starttime, endtime ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM iv
), islands AS (
  SELECT starttime, endtime,
         sum(CASE WHEN prev_end IS NULL OR starttime > prev_end THEN 1 ELSE 0 END)
           OVER (ORDER BY starttime, endtime) AS island
  FROM ordered
)
SELECT sum(hours) FROM (
  SELECT island, date_diff('second', min(starttime), max(endtime)) / 3600.0 AS hours
  FROM islands GROUP BY island
)"""


# ---------------------------------------------------------------- KDIGO creatinine criteria
CREATININE = 50912
KDIGO_RISE_48H = 0.3  # mg/dL above the lowest value of the previous 48 hours
KDIGO_RATIO_7D = 1.5  # times the lowest value of the previous 7 days
KDIGO_WORDS = ("acute kidney injury by KDIGO creatinine criteria (a serum creatinine at least 0.3 mg/dL above "
               "the lowest value of the previous 48 hours, or at least 1.5 times the lowest value of the "
               "previous 7 days)")


def kdigo_flag_sql(rel: str, partition: str) -> str:
    """SELECT over ``rel`` (columns ``{partition}``, charttime, valuenum) adding ``low48``/``low7d``,
    the lowest earlier creatinine of the previous 48 h / 7 days, and ``aki`` (KDIGO met at that row)."""
    return (f"SELECT c.*, "
            f"min(p.valuenum) FILTER (WHERE p.charttime >= c.charttime - INTERVAL 48 HOUR) AS low48, "
            f"min(p.valuenum) AS low7d\n"
            f"  FROM {rel} c\n"
            f"  LEFT JOIN {rel} p ON p.{partition} = c.{partition} AND p.charttime < c.charttime\n"
            f"   AND p.charttime >= c.charttime - INTERVAL 7 DAY\n"
            f"  GROUP BY ALL")


def aki_condition(alias: str = "") -> str:
    """Predicate on a row of ``kdigo_flag_sql``: the creatinine meets the KDIGO criteria."""
    a = f"{alias}." if alias else ""
    return f"({a}valuenum >= {a}low48 + {KDIGO_RISE_48H} OR {a}valuenum >= {KDIGO_RATIO_7D} * {a}low7d)"


AKI_CONDITION = aki_condition()


def kdigo_stage_case(alias: str = "") -> str:
    """KDIGO creatinine stage (0-3) of a row of ``kdigo_flag_sql``, as in ``kdigo_stages.sql``:
    3 = >= 3x the 7-day low, or >= 4.0 mg/dL with an acute rise (48-h low <= 3.7 or >= 1.5x the
    7-day low); 2 = >= 2x the 7-day low; 1 = the AKI criteria above."""
    a = f"{alias}." if alias else ""
    v, l48, l7 = f"{a}valuenum", f"{a}low48", f"{a}low7d"
    return (f"CASE WHEN {v} >= 3.0 * {l7} OR ({v} >= 4.0 AND ({l48} <= 3.7 OR {v} >= 1.5 * {l7})) THEN 3 "
            f"WHEN {v} >= 2.0 * {l7} THEN 2 WHEN {aki_condition(alias)} THEN 1 ELSE 0 END")

# ---------------------------------------------------------------- suspected infection
SUSPICION_BEFORE_H = 72  # culture up to 72 h before the antibiotic
SUSPICION_AFTER_H = 24  # or up to 24 h after it
SUSPICION_WORDS = ("suspected infection (a systemic antibiotic ordered with a culture drawn up to 72 hours before "
                   "or 24 hours after it)")

# ---------------------------------------------------------------- organisms grown (microbiologyevents)
NON_ORGANISM_RESULTS: tuple[str, ...] = ("CANCELLED",)  # org_name values that report no growth at all


def organism_grown_predicate(alias: str = "m") -> str:
    """Predicate on a ``microbiologyevents`` row: the culture grew an organism."""
    return f"{alias}.org_name IS NOT NULL AND {alias}.org_name NOT IN ({strings(NON_ORGANISM_RESULTS)})"


def culture_reported_predicate(alias: str = "m") -> str:
    """Predicate on a ``microbiologyevents`` row: a culture result (growth or none), not a cancelled test."""
    return f"({alias}.org_name IS NULL OR {alias}.org_name NOT IN ({strings(NON_ORGANISM_RESULTS)}))"


# ---------------------------------------------------------------- organ dysfunction (SOFA-style thresholds)
ORGAN_DYSFUNCTION: dict[int, tuple[str, str]] = {  # itemid -> (comparison, clinical name)
    50912: (">= 2.0", "creatinine >= 2.0 mg/dL"),
    51265: ("< 100", "platelets < 100 K/uL"),
    50885: (">= 2.0", "total bilirubin >= 2.0 mg/dL"),
    50813: (">= 2.0", "lactate >= 2 mmol/L"),
}


def organ_dysfunction_predicate(alias: str = "l") -> str:
    """Predicate on a ``labevents`` row: a result meeting one organ-dysfunction threshold."""
    return "(" + " OR ".join(f"({alias}.itemid = {i} AND {alias}.valuenum {cmp})"
                             for i, (cmp, _) in sorted(ORGAN_DYSFUNCTION.items())) + ")"


# ---------------------------------------------------------------- vital-sign item groups (chartevents)
MAP_ITEMS = (220052, 220181)  # invasive, non-invasive mean arterial pressure
SBP_ITEMS = (220050, 220179)  # invasive, non-invasive systolic blood pressure
HEART_RATE = 220045
RESP_RATE_ITEMS = (220210, 224690)
TEMP_F, TEMP_C = 223761, 223762
MAP_BOUNDS = (0.0, 300.0)  # mmHg, the items' plausible range (ehrgym.db.items)
TEMP_BOUNDS = (20.0, 115.0)  # raw chart values, °C (20–46) and °F (70–115) together

# ---------------------------------------------------------------- ICD code groups (prefixes, no dots)
ICD_GROUPS: dict[str, dict[int, tuple[str, ...]]] = {
    "sepsis": {9: ("038", "99591", "99592", "78552"), 10: ("A40", "A41", "R652")},
    "acute kidney failure": {9: ("584",), 10: ("N17",)},
    "pneumonia": {9: ("480", "481", "482", "483", "484", "485", "486"), 10: ("J12", "J13", "J14", "J15", "J16",
                                                                              "J17", "J18")},
    "heart failure": {9: ("428",), 10: ("I50",)},
    "chronic obstructive pulmonary disease": {9: ("490", "491", "492", "496"), 10: ("J41", "J42", "J43", "J44")},
    "diabetes mellitus": {9: ("250",), 10: ("E10", "E11", "E13")},
    "chronic kidney disease": {9: ("585",), 10: ("N18",)},
    "cirrhosis": {9: ("5712", "5715", "5716"), 10: ("K703", "K717", "K74")},
    "atrial fibrillation": {9: ("42731",), 10: ("I48",)},
    "urinary tract infection": {9: ("5990",), 10: ("N390",)},
}
CHRONIC_GROUPS: tuple[str, ...] = ("heart failure", "chronic obstructive pulmonary disease", "diabetes mellitus",
                                   "chronic kidney disease", "cirrhosis", "atrial fibrillation")


def icd_group_values(groups) -> str:
    """``VALUES`` rows (group, icd_version, prefix) of the named ICD groups."""
    rows = [f"('{g}', {v}, '{p}')" for g in groups for v, prefixes in sorted(ICD_GROUPS[g].items())
            for p in prefixes]
    return "VALUES " + ", ".join(rows)


def icd_group_predicate(group: str, alias: str = "dx") -> str:
    """Predicate on a ``diagnoses_icd`` row: its code belongs to ``group``."""
    parts = []
    for version, prefixes in sorted(ICD_GROUPS[group].items()):
        likes = " OR ".join(f"{alias}.icd_code LIKE '{p}%'" for p in prefixes)
        parts.append(f"({alias}.icd_version = {version} AND ({likes}))")
    return "(" + " OR ".join(parts) + ")"


# ---------------------------------------------------------------- intensive care units
ICU_UNITS: dict[str, str] = {  # icustays.first_careunit -> how a clinician names it
    "Medical Intensive Care Unit (MICU)": "medical ICU",
    "Surgical Intensive Care Unit (SICU)": "surgical ICU",
    "Medical/Surgical Intensive Care Unit (MICU/SICU)": "combined medical/surgical ICU",
    "Cardiac Vascular Intensive Care Unit (CVICU)": "cardiac surgery ICU",
    "Coronary Care Unit (CCU)": "coronary care unit",
    "Neuro Surgical Intensive Care Unit (Neuro SICU)": "neurosurgical ICU",
    "Trauma SICU (TSICU)": "trauma ICU",
}
ICU_UNIT_VALUES = "VALUES " + ", ".join(f"({strings([k])}, {strings([v])})" for k, v in ICU_UNITS.items())

# ---------------------------------------------------------------- clinical lab names
LAB_NAMES: dict[int, str] = {
    50912: "serum creatinine", 50971: "serum potassium", 50983: "serum sodium", 51222: "hemoglobin",
    51265: "platelet count", 51301: "white blood cell count", 50813: "lactate", 50931: "blood glucose",
    51006: "blood urea nitrogen", 50882: "serum bicarbonate", 50885: "total bilirubin", 50960: "serum magnesium",
}
LAB_NAME_VALUES = "VALUES " + ", ".join(f"({i}, {strings([n])})" for i, n in sorted(LAB_NAMES.items()))

# abbreviations and misspellings clinicians write for these names (lexical variation)
CONCEPT_VARIANTS: dict[str, tuple[str, ...]] = {
    "serum creatinine": ("Cr", "creat", "serum creatinin"),
    "serum potassium": ("K", "K+", "serum potasium"),
    "serum sodium": ("Na", "Na+", "serum sodum"),
    "hemoglobin": ("Hgb", "Hb", "haemoglobin"),
    "platelet count": ("plts", "PLT", "platelet cnt"),
    "white blood cell count": ("WBC", "white count", "white blood cel count"),
    "lactate": ("lactic acid", "lac", "lactat"),
    "blood glucose": ("BG", "blood sugar", "blood glucoze"),
    "blood urea nitrogen": ("BUN", "urea", "blood urea nitrogren"),
    "serum bicarbonate": ("bicarb", "HCO3", "serum bicarbonat"),
    "total bilirubin": ("T bili", "bili", "total bilirubine"),
    "serum magnesium": ("Mg", "mag", "serum magnesum"),
    "medical ICU": ("MICU", "med ICU", "medical intensive care"),
    "surgical ICU": ("SICU", "surg ICU"),
    "combined medical/surgical ICU": ("MICU/SICU", "med-surg ICU"),
    "cardiac surgery ICU": ("CVICU", "cardiac ICU"),
    "coronary care unit": ("CCU", "cardiac care unit"),
    "neurosurgical ICU": ("Neuro SICU", "neuro ICU"),
    "trauma ICU": ("TSICU", "trauma SICU"),
}
for _name, _forms in CONCEPT_VARIANTS.items():
    add_variants(_name, *_forms)

# ---------------------------------------------------------------- ICU procedures (procedureevents)
ICU_PROCEDURES: dict[int, str] = {  # d_items item id -> clinical name
    225792: "invasive mechanical ventilation",
    225752: "arterial line placement",
    225441: "hemodialysis",
    224263: "multi-lumen central venous catheter placement",
    229351: "Foley catheter placement",
}
ICU_PROCEDURE_VALUES = "VALUES " + ", ".join(f"({i}, {strings([n])})" for i, n in sorted(ICU_PROCEDURES.items()))
for _name, _forms in {
    "invasive mechanical ventilation": ("intubation", "mech vent", "invasive mechanical ventilaton"),
    "arterial line placement": ("art line", "A-line placement", "arterial line"),
    "hemodialysis": ("HD", "dialysis", "haemodialysis"),
    "multi-lumen central venous catheter placement": ("central line", "CVC placement", "triple-lumen catheter"),
    "Foley catheter placement": ("Foley", "urinary catheter", "foley catheter insertion"),
}.items():
    add_variants(_name, *_forms)

# ---------------------------------------------------------------- admissions
EMERGENCY_ADMISSION_TYPES: tuple[str, ...] = ("EW EMER.", "DIRECT EMER.")  # MIMIC-IV emergency admission types
