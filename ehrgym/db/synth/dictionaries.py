"""Code dictionaries of the synthetic hospital: ICD-9/ICD-10 diagnoses and procedures (real codes,
stored without dots as MIMIC-IV does, with their official titles), DRGs, HCPCS, care units,
services and the categorical vocabularies of admissions.

A *concept* pairs the ICD-10 and ICD-9 code of one clinical idea; an admission is coded in ICD-9
before October 2015 (real time) and in ICD-10 after, as in MIMIC-IV.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IcdConcept:
    key: str
    icd10: str
    title10: str
    icd9: str
    title9: str


def _concepts(rows: list[tuple[str, str, str, str, str]]) -> dict[str, IcdConcept]:
    return {r[0]: IcdConcept(*r) for r in rows}


DIAGNOSES: dict[str, IcdConcept] = _concepts([
    # condition-driven codes
    ("sepsis", "A419", "Sepsis, unspecified organism", "0389", "Unspecified septicemia"),
    ("severe_sepsis", "R6520", "Severe sepsis without septic shock", "99592", "Severe sepsis"),
    ("septic_shock", "R6521", "Severe sepsis with septic shock", "78552", "Septic shock"),
    ("aki", "N179", "Acute kidney failure, unspecified", "5849", "Acute kidney failure, unspecified"),
    ("hf_acute", "I5023", "Acute on chronic systolic (congestive) heart failure", "4280",
     "Congestive heart failure, unspecified"),
    ("hf", "I509", "Heart failure, unspecified", "4280", "Congestive heart failure, unspecified"),
    ("pneumonia", "J189", "Pneumonia, unspecified organism", "486", "Pneumonia, organism unspecified"),
    ("dm", "E119", "Type 2 diabetes mellitus without complications", "25000",
     "Diabetes mellitus without mention of complication, type II or unspecified type, not stated as uncontrolled"),
    ("dm_hyper", "E1165", "Type 2 diabetes mellitus with hyperglycemia", "25000",
     "Diabetes mellitus without mention of complication, type II or unspecified type, not stated as uncontrolled"),
    ("insulin_use", "Z794", "Long term (current) use of insulin", "V5867", "Long-term (current) use of insulin"),
    ("copd", "J449", "Chronic obstructive pulmonary disease, unspecified", "496",
     "Chronic airway obstruction, not elsewhere classified"),
    ("gi_bleed", "K922", "Gastrointestinal hemorrhage, unspecified", "5789",
     "Hemorrhage of gastrointestinal tract, unspecified"),
    ("blood_loss_anemia", "D62", "Acute posthemorrhagic anemia", "2851", "Acute posthemorrhagic anemia"),
    ("stroke", "I639", "Cerebral infarction, unspecified", "43491",
     "Cerebral artery occlusion, unspecified with cerebral infarction"),
    ("htn", "I10", "Essential (primary) hypertension", "4019", "Unspecified essential hypertension"),
    ("afib", "I4891", "Unspecified atrial fibrillation", "42731", "Atrial fibrillation"),
    ("afib_parox", "I480", "Paroxysmal atrial fibrillation", "42731", "Atrial fibrillation"),
    ("anticoag_use", "Z7901", "Long term (current) use of anticoagulants", "V5861",
     "Long-term (current) use of anticoagulants"),
    ("uti", "N390", "Urinary tract infection, site not specified", "5990",
     "Urinary tract infection, site not specified"),
    ("cirrhosis", "K7469", "Other cirrhosis of liver", "5715", "Cirrhosis of liver without mention of alcohol"),
    ("alc_cirrhosis", "K7030", "Alcoholic cirrhosis of liver without ascites", "5712", "Alcoholic cirrhosis of liver"),
    ("hepatic_enceph", "K7682", "Hepatic encephalopathy", "5722", "Hepatic encephalopathy"),
    ("resp_failure", "J9601", "Acute respiratory failure with hypoxia", "51881", "Acute respiratory failure"),
    ("chest_pain", "R0789", "Other chest pain", "78659", "Other chest pain"),
    # comorbidity fillers
    ("hyperlipidemia", "E785", "Hyperlipidemia, unspecified", "2724", "Other and unspecified hyperlipidemia"),
    ("ckd", "N189", "Chronic kidney disease, unspecified", "5859", "Chronic kidney disease, unspecified"),
    ("anemia", "D649", "Anemia, unspecified", "2859", "Anemia, unspecified"),
    ("hypokalemia", "E876", "Hypokalemia", "2768", "Hypopotassemia"),
    ("hyponatremia", "E871", "Hypo-osmolality and hyponatremia", "2761", "Hyposmolality and/or hyponatremia"),
    ("obesity", "E669", "Obesity, unspecified", "27800", "Obesity, unspecified"),
    ("depression", "F329", "Major depressive disorder, single episode, unspecified", "311",
     "Depressive disorder, not elsewhere classified"),
    ("gerd", "K219", "Gastro-esophageal reflux disease without esophagitis", "53081", "Esophageal reflux"),
    ("hypothyroid", "E039", "Hypothyroidism, unspecified", "2449", "Unspecified acquired hypothyroidism"),
    ("tobacco_hx", "Z87891", "Personal history of nicotine dependence", "V1582", "Personal history of tobacco use"),
    ("cad", "I2510", "Atherosclerotic heart disease of native coronary artery without angina pectoris", "41401",
     "Coronary atherosclerosis of native coronary artery"),
    ("osa", "G4733", "Obstructive sleep apnea (adult) (pediatric)", "32723", "Obstructive sleep apnea (adult)(pediatric)"),
    ("anxiety", "F419", "Anxiety disorder, unspecified", "30000", "Anxiety state, unspecified"),
    ("thrombocytopenia", "D696", "Thrombocytopenia, unspecified", "2875", "Thrombocytopenia, unspecified"),
    ("acidosis", "E872", "Acidosis", "2762", "Acidosis"),
    ("dehydration", "E860", "Dehydration", "27651", "Dehydration"),
    ("encephalopathy", "G9341", "Metabolic encephalopathy", "34831", "Metabolic encephalopathy"),
    ("dnr", "Z66", "Do not resuscitate", "V4986", "Do not resuscitate status"),
    ("tia_hx", "Z8673", "Personal history of transient ischemic attack (TIA), and cerebral infarction without residual deficits",
     "V1254", "Personal history of transient ischemic attack (TIA), and cerebral infarction without residual deficits"),
    ("hypotension", "I959", "Hypotension, unspecified", "4589", "Hypotension, unspecified"),
])

# Codes any admission may carry besides its conditions (chosen at random, no repeats).
FILLER_DIAGNOSES: tuple[str, ...] = (
    "hyperlipidemia", "ckd", "anemia", "hypokalemia", "hyponatremia", "obesity", "depression", "gerd",
    "hypothyroid", "tobacco_hx", "cad", "osa", "anxiety", "thrombocytopenia", "acidosis", "dehydration",
    "encephalopathy", "dnr", "tia_hx", "hypotension",
)

PROCEDURES: dict[str, IcdConcept] = _concepts([
    ("vent_long", "5A1955Z", "Respiratory Ventilation, Greater than 96 Consecutive Hours", "9672",
     "Continuous invasive mechanical ventilation for 96 consecutive hours or more"),
    ("vent_short", "5A1935Z", "Respiratory Ventilation, Less than 24 Consecutive Hours", "9671",
     "Continuous invasive mechanical ventilation for less than 96 consecutive hours"),
    ("intubation", "0BH17EZ", "Insertion of Endotracheal Airway into Trachea, Via Natural or Artificial Opening",
     "9604", "Insertion of endotracheal tube"),
    ("hemodialysis", "5A1D70Z", "Performance of Urinary Filtration, Intermittent, Less than 6 Hours Per Day",
     "3995", "Hemodialysis"),
    ("central_line", "02HV33Z", "Insertion of Infusion Device into Superior Vena Cava, Percutaneous Approach",
     "3893", "Venous catheterization, not elsewhere classified"),
    ("egd", "0DJ08ZZ", "Inspection of Upper Intestinal Tract, Via Natural or Artificial Opening Endoscopic",
     "4513", "Other endoscopy of small intestine"),
    ("transfusion", "30233N1", "Transfusion of Nonautologous Red Blood Cells into Peripheral Vein, Percutaneous Approach",
     "9904", "Transfusion of packed cells"),
    ("paracentesis", "0W9G3ZZ", "Drainage of Peritoneal Cavity, Percutaneous Approach", "5491",
     "Percutaneous abdominal drainage"),
    ("thrombolysis", "3E03317", "Introduction of Other Thrombolytic into Peripheral Vein, Percutaneous Approach",
     "9910", "Injection or infusion of thrombolytic agent"),
    ("cardioversion", "5A2204Z", "Restoration of Cardiac Rhythm, Single", "9961", "Atrial cardioversion"),
    ("bronchoscopy", "0BJ08ZZ", "Inspection of Tracheobronchial Tree, Via Natural or Artificial Opening Endoscopic",
     "3324", "Closed [endoscopic] biopsy of bronchus"),
    ("mri_brain", "B030ZZZ", "Magnetic Resonance Imaging (MRI) of Brain", "8703",
     "Computerized axial tomography of head"),
    ("foley", "0T9B70Z", "Drainage of Bladder with Drainage Device, Via Natural or Artificial Opening", "5794",
     "Insertion of indwelling urinary catheter"),
])


@dataclass(frozen=True)
class Drg:
    hcfa_code: str
    hcfa_description: str
    apr_code: str
    apr_description: str


DRGS: dict[str, Drg] = {
    "sepsis": Drg("871", "SEPTICEMIA OR SEVERE SEPSIS W/O MV >96 HOURS W MCC", "720", "SEPTICEMIA & DISSEMINATED INFECTIONS"),
    "aki": Drg("682", "RENAL FAILURE W MCC", "460", "RENAL FAILURE"),
    "heart_failure": Drg("291", "HEART FAILURE & SHOCK W MCC", "194", "HEART FAILURE"),
    "pneumonia": Drg("193", "SIMPLE PNEUMONIA & PLEURISY W MCC", "139", "OTHER PNEUMONIA"),
    "diabetes": Drg("638", "DIABETES W CC", "420", "DIABETES"),
    "copd": Drg("190", "CHRONIC OBSTRUCTIVE PULMONARY DISEASE W MCC", "140", "CHRONIC OBSTRUCTIVE PULMONARY DISEASE"),
    "gi_bleed": Drg("378", "G.I. HEMORRHAGE W CC", "253", "OTHER & UNSPECIFIED GASTROINTESTINAL HEMORRHAGE"),
    "stroke": Drg("065", "INTRACRANIAL HEMORRHAGE OR CEREBRAL INFARCTION W CC OR TPA IN 24 HRS", "045",
                  "CVA & PRECEREBRAL OCCLUSION W INFARCT"),
    "hypertension": Drg("305", "HYPERTENSION W/O MCC", "199", "HYPERTENSION"),
    "atrial_fibrillation": Drg("308", "CARDIAC ARRHYTHMIA & CONDUCTION DISORDERS W MCC", "201",
                               "CARDIAC ARRHYTHMIA & CONDUCTION DISORDERS"),
    "uti": Drg("690", "KIDNEY & URINARY TRACT INFECTIONS W/O MCC", "463", "KIDNEY & URINARY TRACT INFECTIONS"),
    "cirrhosis": Drg("432", "CIRRHOSIS & ALCOHOLIC HEPATITIS W MCC", "279", "HEPATIC COMA & OTHER MAJOR ACUTE LIVER DISORDERS"),
    "none": Drg("313", "CHEST PAIN", "203", "CHEST PAIN"),
}

# HCPCS/CPT codes billed during stays: (code, category, long_description, short_description)
HCPCS: tuple[tuple[str, int, str, str], ...] = (
    ("99223", 1, "Initial hospital inpatient care, high complexity", "Hospital inpatient services"),
    ("99291", 1, "Critical care, evaluation and management, first 30-74 minutes", "Critical care services"),
    ("31500", 1, "Intubation, endotracheal, emergency procedure", "Respiratory system"),
    ("94002", 1, "Ventilation assist and management, initiation, hospital inpatient", "Pulmonary"),
    ("90935", 1, "Hemodialysis procedure with single evaluation", "Dialysis"),
    ("36556", 1, "Insertion of non-tunneled centrally inserted central venous catheter, age 5 years or older",
     "Cardiovascular system"),
    ("43239", 1, "Esophagogastroduodenoscopy, flexible, transoral; with biopsy, single or multiple", "Digestive system"),
    ("71045", 1, "Radiologic examination, chest; single view", "Diagnostic imaging"),
    ("93306", 1, "Echocardiography, transthoracic, complete, with spectral and color flow Doppler", "Cardiovascular"),
    ("G0378", 0, "Hospital observation service, per hour", "Hospital observation per hr"),
)

ADMISSION_TYPES = ("EW EMER.", "URGENT", "DIRECT EMER.", "OBSERVATION ADMIT", "EU OBSERVATION", "ELECTIVE",
                   "SURGICAL SAME DAY ADMISSION")
ADMISSION_TYPE_P = (0.46, 0.14, 0.06, 0.12, 0.1, 0.08, 0.04)
ADMISSION_VIA_ED = (True, True, False, True, True, False, False)
ADMISSION_LOCATIONS_ED = ("EMERGENCY ROOM", "WALK-IN/SELF REFERRAL", "TRANSFER FROM HOSPITAL")
ADMISSION_LOCATIONS_ED_P = (0.8, 0.12, 0.08)
ADMISSION_LOCATIONS_OTHER = ("PHYSICIAN REFERRAL", "TRANSFER FROM HOSPITAL", "CLINIC REFERRAL", "PROCEDURE SITE")
ADMISSION_LOCATIONS_OTHER_P = (0.5, 0.25, 0.15, 0.1)
DISCHARGE_LOCATIONS = ("HOME", "HOME HEALTH CARE", "SKILLED NURSING FACILITY", "REHAB",
                       "CHRONIC/LONG TERM ACUTE CARE", "HOSPICE", "AGAINST ADVICE")
DISCHARGE_LOCATIONS_P = (0.42, 0.28, 0.16, 0.05, 0.03, 0.03, 0.03)
DIED = "DIED"
INSURANCES = ("Medicare", "Medicaid", "Other")
LANGUAGES = ("ENGLISH", "?")
LANGUAGES_P = (0.9, 0.1)
MARITAL = ("MARRIED", "SINGLE", "WIDOWED", "DIVORCED")
MARITAL_P = (0.45, 0.33, 0.13, 0.09)
RACES = ("WHITE", "BLACK/AFRICAN AMERICAN", "HISPANIC/LATINO - PUERTO RICAN", "ASIAN", "OTHER", "UNKNOWN",
         "WHITE - OTHER EUROPEAN", "ASIAN - CHINESE")
RACES_P = (0.6, 0.14, 0.05, 0.04, 0.05, 0.05, 0.04, 0.03)
ANCHOR_YEAR_GROUPS = ("2008 - 2010", "2011 - 2013", "2014 - 2016", "2017 - 2019", "2020 - 2022")

ED_UNIT = "Emergency Department"
WARD_UNITS = ("Medicine", "Med/Surg", "Medicine/Cardiology", "Cardiology", "Neurology", "Transplant",
              "Hematology/Oncology")
ICU_UNITS = ("Medical Intensive Care Unit (MICU)", "Medical/Surgical Intensive Care Unit (MICU/SICU)",
             "Coronary Care Unit (CCU)", "Cardiac Vascular Intensive Care Unit (CVICU)",
             "Neuro Surgical Intensive Care Unit (Neuro SICU)", "Surgical Intensive Care Unit (SICU)")
SERVICES = ("MED", "CMED", "NMED", "OMED", "SURG")

CODE_STATUS = ("Resuscitate (Full code)", "DNR / DNI")

# Code families that belong to the condition registry (3-character ICD categories; 4 characters for ICD-10-PCS
# and ICD-9 procedure subcategories): background codes (:mod:`.catalog`) never come from these, so that a
# condition's codes appear exactly when the condition does (and with its labs, drugs and cultures).
RESERVED_DIAGNOSIS_CATEGORIES: frozenset[str] = frozenset({
    # ICD-10: sepsis/shock, kidney failure, heart failure, pneumonia, diabetes, long-term drug use, COPD,
    # GI bleeding and ulcers, anaemia of blood loss, stroke, hypertension, AF, UTI, liver disease, resp. failure
    "A40", "A41", "R65", "R57", "N17", "I50", "I11", "I13", "J12", "J13", "J14", "J15", "J16", "J17", "J18",
    "E08", "E09", "E10", "E11", "E13", "Z79", "J43", "J44", "K92", "K25", "K26", "K27", "K28", "D62", "I60",
    "I61", "I63", "I10", "I12", "I15", "I16", "I48", "N39", "K70", "K72", "K74", "K76", "J96",
    # ICD-9: the same families
    "038", "995", "785", "584", "428", "402", "404", "480", "481", "482", "483", "484", "485", "486", "487",
    "249", "250", "V58", "491", "492", "496", "578", "531", "532", "533", "534", "285", "430", "431", "433",
    "434", "436", "401", "403", "405", "427", "599", "571", "572", "518",
})


def reserved_procedure_prefixes() -> frozenset[str]:
    """ICD-10-PCS codes' first 4 and ICD-9 procedure codes' first 3 characters of the condition procedures."""
    return frozenset({c.icd10[:4] for c in PROCEDURES.values()} | {c.icd9[:3] for c in PROCEDURES.values()})
