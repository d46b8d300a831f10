"""The condition registry: what each clinical condition does to a synthetic admission.

One :class:`Condition` = one object in :data:`CONDITIONS`. A condition drives the admission's
ICD codes, its lab trajectories (shifts of a latent z-score per lab item, plus a trend over the
stay), its medications, its cultures, its procedures, its DRG and its chance of an ICU stay.
Adding a condition means adding one entry here (and, if it uses new codes or drugs, entries in
:mod:`dictionaries` / :mod:`meds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# MIMIC-IV lab item ids used by the effects below (all in ehrgym.db.items.item_reference()).
BASE_EXCESS, LACTATE, PCO2, PH, PO2 = 50802, 50813, 50818, 50820, 50821
ALT, ALBUMIN, ALP, AMYLASE, ANION_GAP, AST = 50861, 50862, 50863, 50867, 50868, 50878
BICARB, BILI, CRP, CALCIUM, CHLORIDE, CK, CREAT = 50882, 50885, 50889, 50893, 50902, 50910, 50912
GLUCOSE, LDH, MAGNESIUM, NTPROBNP, PHOSPHATE, POTASSIUM = 50931, 50954, 50960, 50963, 50970, 50971
PROTEIN, SODIUM, TROPONIN, BUN = 50976, 50983, 51003, 51006
BANDS, FIBRINOGEN, HCT, HGB, INR, LYMPH, MCV, NEUTRO = 51144, 51214, 51221, 51222, 51237, 51244, 51250, 51256
PLATELETS, PT, PTT, RBC, WBC = 51265, 51274, 51275, 51279, 51301


@dataclass(frozen=True)
class Condition:
    key: str
    chronic: bool                       # chronic: a patient trait coded in most admissions
    prob: float                         # per patient (chronic) or per admission (acute), at age 60
    age_logit_per_decade: float = 0.0
    boosts: tuple[tuple[str, float], ...] = ()  # odds multipliers when an earlier condition is present
    diagnoses: tuple[tuple[str, float], ...] = ()  # (dictionaries.DIAGNOSES key, probability coded)
    principal_rank: int = 99            # lower = more likely to be the principal (seq_num 1) diagnosis
    drg: str = "none"
    icu_logit: float = 0.0              # added to the admission's ICU log-odds
    vent_logit: float = 0.0             # added to an ICU stay's ventilation log-odds
    shock_logit: float = 0.0            # added to an ICU stay's vasopressor log-odds
    los_factor: float = 1.0
    death_logit: float = 0.0
    lab_shift: dict[int, float] = field(default_factory=dict)   # latent z shift at admission
    lab_trend: dict[int, float] = field(default_factory=dict)   # z change from admission to discharge
    chart_shift: dict[str, float] = field(default_factory=dict)  # vital-sign shifts (icu.VITALS keys)
    meds: tuple[str, ...] = ()          # meds.MEDS keys prescribed during the admission
    cultures: tuple[tuple[str, float], ...] = ()  # (micro.SPECIMENS key, probability the culture grows)
    procedures: tuple[tuple[str, float], ...] = ()  # (dictionaries.PROCEDURES key, probability)
    ward: str = "Medicine"
    icu_unit: str = "Medical Intensive Care Unit (MICU)"
    service: str = "MED"


CONDITIONS: tuple[Condition, ...] = (
    # chronic conditions first: acute conditions' boosts may refer to them
    Condition("hypertension", True, 0.45, 0.35, diagnoses=(("htn", 0.95),), principal_rank=12, drg="hypertension",
              lab_shift={CREAT: 0.15}, chart_shift={"sbp": 14.0, "dbp": 6.0},
              meds=("lisinopril", "amlodipine")),
    Condition("diabetes", True, 0.27, 0.15, diagnoses=(("dm", 0.7), ("dm_hyper", 0.3), ("insulin_use", 0.5)),
              principal_rank=10, drg="diabetes", lab_shift={GLUCOSE: 1.4}, lab_trend={GLUCOSE: -0.4},
              chart_shift={"glucose": 70.0}, meds=("insulin", "metformin")),
    Condition("copd", True, 0.12, 0.3, diagnoses=(("copd", 0.95),), principal_rank=7, drg="copd",
              icu_logit=0.4, vent_logit=0.6, lab_shift={PCO2: 1.1, PH: -0.3, BICARB: 0.8, PO2: -0.5},
              chart_shift={"spo2": -3.0, "rr": 3.0},
              meds=("albuterol", "ipratropium", "prednisone", "tiotropium")),
    Condition("heart_failure", True, 0.14, 0.45, boosts=(("hypertension", 1.8),),
              diagnoses=(("hf_acute", 0.6), ("hf", 0.4)), principal_rank=4, drg="heart_failure",
              icu_logit=0.5, los_factor=1.2, death_logit=0.4,
              lab_shift={NTPROBNP: 1.0, SODIUM: -0.4, CREAT: 0.3, TROPONIN: 0.3, BUN: 0.4},
              lab_trend={NTPROBNP: -0.5}, chart_shift={"hr": 6.0, "rr": 2.0, "spo2": -1.5},
              meds=("furosemide", "metoprolol_succ", "carvedilol", "spironolactone"), ward="Medicine/Cardiology",
              icu_unit="Coronary Care Unit (CCU)", service="CMED"),
    Condition("atrial_fibrillation", True, 0.13, 0.5, boosts=(("heart_failure", 2.0), ("hypertension", 1.3)),
              diagnoses=(("afib", 0.75), ("afib_parox", 0.25), ("anticoag_use", 0.6)), principal_rank=8,
              drg="atrial_fibrillation", icu_logit=0.2,
              lab_shift={INR: 0.7, PT: 0.7, TROPONIN: 0.1, NTPROBNP: 0.4},
              chart_shift={"hr": 18.0}, meds=("metoprolol", "apixaban", "heparin_drip"),
              procedures=(("cardioversion", 0.08),), ward="Cardiology", icu_unit="Coronary Care Unit (CCU)",
              service="CMED"),
    Condition("cirrhosis", True, 0.04, 0.0, diagnoses=(("cirrhosis", 0.6), ("alc_cirrhosis", 0.4), ("hepatic_enceph", 0.3)),
              principal_rank=6, drg="cirrhosis", icu_logit=0.4, los_factor=1.3, death_logit=0.7,
              lab_shift={BILI: 1.5, INR: 1.3, PT: 1.3, ALBUMIN: -1.4, PLATELETS: -1.2, AST: 0.9, ALT: 0.5,
                         SODIUM: -0.7, ALP: 0.6, HGB: -0.5, HCT: -0.5, AMYLASE: 0.3},
              chart_shift={"map": -6.0}, meds=("lactulose", "rifaximin", "spironolactone", "octreotide"),
              procedures=(("paracentesis", 0.45),), ward="Transplant", service="MED"),
    # acute conditions
    Condition("sepsis", False, 0.10, 0.25, boosts=(("cirrhosis", 2.0), ("diabetes", 1.3)),
              diagnoses=(("sepsis", 1.0), ("severe_sepsis", 0.35)), principal_rank=0, drg="sepsis",
              icu_logit=2.2, vent_logit=0.5, shock_logit=1.6, los_factor=1.5, death_logit=1.4,
              lab_shift={LACTATE: 1.6, WBC: 1.3, BANDS: 1.2, NEUTRO: 0.9, LYMPH: -0.9, CRP: 1.0, BICARB: -0.9,
                         PLATELETS: -0.6, PH: -0.6, BASE_EXCESS: -0.9, ANION_GAP: 0.9, CREAT: 0.3},
              lab_trend={LACTATE: -1.2, WBC: -0.7, CRP: -0.5},
              chart_shift={"hr": 22.0, "temp": 1.3, "map": -12.0, "sbp": -18.0, "dbp": -9.0, "rr": 5.0, "spo2": -1.5},
              meds=("vancomycin", "piperacillin_tazobactam", "cefepime", "meropenem", "nacl_bolus"),
              cultures=(("blood", 0.45), ("urine", 0.3)), procedures=(("central_line", 0.5),),
              ward="Medicine", service="MED"),
    Condition("pneumonia", False, 0.09, 0.3, boosts=(("copd", 2.5),), diagnoses=(("pneumonia", 1.0),),
              principal_rank=2, drg="pneumonia", icu_logit=0.8, vent_logit=1.0, los_factor=1.2, death_logit=0.6,
              lab_shift={WBC: 1.0, CRP: 0.8, NEUTRO: 0.8, PO2: -0.9, PCO2: 0.3, LYMPH: -0.5},
              lab_trend={WBC: -0.6, CRP: -0.6},
              chart_shift={"temp": 0.9, "rr": 5.0, "spo2": -4.0, "hr": 10.0},
              meds=("ceftriaxone", "azithromycin", "vancomycin", "cefepime"),
              cultures=(("sputum", 0.5), ("blood", 0.12)), procedures=(("bronchoscopy", 0.04),)),
    Condition("uti", False, 0.08, 0.3, boosts=(("diabetes", 1.5),), diagnoses=(("uti", 1.0),), principal_rank=5,
              drg="uti", icu_logit=-0.2, lab_shift={WBC: 0.7, CRP: 0.9}, lab_trend={WBC: -0.5},
              chart_shift={"temp": 0.6, "hr": 6.0},
              meds=("ceftriaxone", "ciprofloxacin", "nitrofurantoin"), cultures=(("urine", 0.75), ("blood", 0.1)),
              procedures=(("foley", 0.1),)),
    Condition("aki", False, 0.10, 0.3, boosts=(("sepsis", 3.5), ("heart_failure", 1.8), ("diabetes", 1.3)),
              diagnoses=(("aki", 1.0),), principal_rank=3, drg="aki", icu_logit=0.5, los_factor=1.2,
              death_logit=0.5,
              lab_shift={CREAT: 0.8, BUN: 0.8, POTASSIUM: 0.6, BICARB: -0.5, PHOSPHATE: 0.8, ANION_GAP: 0.5},
              lab_trend={CREAT: 1.1, BUN: 1.0, POTASSIUM: 0.3},
              meds=("sodium_bicarbonate", "nacl_bolus"), procedures=(("hemodialysis", 0.12),)),
    Condition("gi_bleed", False, 0.05, 0.25, boosts=(("cirrhosis", 4.0), ("atrial_fibrillation", 1.5)),
              diagnoses=(("gi_bleed", 1.0), ("blood_loss_anemia", 0.6)), principal_rank=1, drg="gi_bleed",
              icu_logit=1.4, shock_logit=0.3, los_factor=1.1, death_logit=0.5,
              lab_shift={HGB: -1.5, HCT: -1.5, BUN: 0.9, PLATELETS: -0.2, RBC: -1.2},
              lab_trend={HGB: 0.3, HCT: 0.3},
              chart_shift={"hr": 15.0, "map": -8.0, "sbp": -12.0, "dbp": -6.0},
              meds=("pantoprazole_iv", "octreotide"), procedures=(("egd", 0.8), ("transfusion", 0.6)),
              icu_unit="Medical/Surgical Intensive Care Unit (MICU/SICU)"),
    Condition("stroke", False, 0.045, 0.5, boosts=(("atrial_fibrillation", 2.5), ("hypertension", 1.5)),
              diagnoses=(("stroke", 1.0),), principal_rank=1, drg="stroke", icu_logit=1.5, vent_logit=0.3,
              los_factor=1.3, death_logit=0.8, lab_shift={GLUCOSE: 0.3},
              chart_shift={"gcs": -4.0, "sbp": 18.0, "dbp": 8.0},
              meds=("aspirin", "atorvastatin", "levetiracetam"),
              procedures=(("mri_brain", 0.7), ("thrombolysis", 0.12)), ward="Neurology",
              icu_unit="Neuro Surgical Intensive Care Unit (Neuro SICU)", service="NMED"),
)

CONDITION_KEYS: tuple[str, ...] = tuple(c.key for c in CONDITIONS)


def condition_index(key: str) -> int:
    try:
        return CONDITION_KEYS.index(key)
    except ValueError:
        raise KeyError(f"unknown condition {key!r}; known: {', '.join(CONDITION_KEYS)}") from None
