"""Which wrong name a clinician would plausibly presuppose: groups of related labs, vitals, drugs,
organisms and antibiotics (same organ system, same drug class, same Gram stain).

A false premise swaps the name the question asks about for one the entity never had. Drawn from a
whole dictionary, that is an absurd question (a toxicology screen for a cardiac patient); drawn from
the same group as the true name and weighted by how often the name occurs in clean questions, it is
the confusion a clinician could make ("the troponin" of a patient who only had an NT-proBNP).
``group_of(param, value, name)`` returns the group key; names of one key are related.
"""

from __future__ import annotations

from typing import Any

from ehrgym.db.items import item_reference

# lab panels / organ systems (MIMIC-IV d_labitems itemids)
LAB_PANELS: dict[str, tuple[int, ...]] = {
    "electrolytes": (50983, 50971, 50902, 50882, 50868),  # Na, K, Cl, HCO3, anion gap
    "renal": (50912, 51006),  # creatinine, urea nitrogen
    "minerals": (50893, 50960, 50970),  # calcium, magnesium, phosphate
    "glucose": (50931,),
    "liver": (50861, 50878, 50863, 50885, 50862, 50976),  # ALT, AST, ALP, bilirubin, albumin, protein
    "pancreas_muscle": (50867, 50910, 50954),  # amylase, CK, LDH
    "cardiac": (51003, 50963),  # troponin T, NT-proBNP
    "inflammation": (50889,),  # CRP
    "blood_gas": (50820, 50821, 50818, 50802, 50813),  # pH, pO2, pCO2, base excess, lactate
    "red_cells": (51222, 51221, 51250, 51279),  # hemoglobin, hematocrit, MCV, RBC
    "white_cells": (51301, 51256, 51244, 51144),  # WBC, neutrophils, lymphocytes, bands
    "platelets_coag": (51265, 51237, 51274, 51275, 51214),  # platelets, INR, PT, PTT, fibrinogen
}
# charted vital signs and monitoring (d_items itemids)
CHART_GROUPS: dict[str, tuple[int, ...]] = {
    "blood_pressure": (220050, 220051, 220052, 220179, 220180, 220181),
    "heart_rhythm": (220045,),
    "respiration": (220210, 224690, 220277, 223835, 220339),
    "temperature": (223761, 223762),
    "neuro": (220739, 223900, 223901),
    "body_size": (224639, 226512, 226730),
    "glucose": (220621, 225664),
    "urine": (226559, 226560),
    "vasoactive_sedative": (221906, 221749, 222168),  # inputevents drips
}
# drug classes (names as the prescriptions / eMAR tables spell them, case-folded)
DRUG_CLASSES: dict[str, tuple[str, ...]] = {
    "antibiotic": ("vancomycin", "piperacillin-tazobactam", "cefepime", "meropenem", "ceftriaxone", "azithromycin",
                   "ciprofloxacin hcl", "nitrofurantoin monohyd (macrobid)"),
    "vasopressor": ("norepinephrine", "phenylephrine"),
    "sedative": ("propofol",),
    "anticoagulant": ("heparin", "apixaban", "aspirin"),
    "cardiovascular": ("metoprolol tartrate", "furosemide", "atorvastatin"),
    "gastrointestinal": ("pantoprazole", "octreotide acetate", "lactulose"),
    "endocrine_metabolic": ("insulin", "prednisone", "sodium bicarbonate"),
    "neurologic": ("levetiracetam",),
}
ORGANISM_GROUPS: dict[str, tuple[str, ...]] = {
    "gram_negative": ("escherichia coli", "klebsiella pneumoniae", "proteus mirabilis", "pseudomonas aeruginosa"),
    "gram_positive": ("staph aureus coag +", "enterococcus sp.", "staphylococcus, coagulase negative"),
}
ANTIBIOTIC_GROUPS: dict[str, tuple[str, ...]] = {
    "penicillins": ("penicillin g", "ampicillin", "ampicillin/sulbactam", "piperacillin/tazo", "oxacillin"),
    "cephalosporins_carbapenems": ("cefazolin", "ceftriaxone", "ceftazidime", "cefepime", "meropenem"),
    "aminoglycosides": ("gentamicin", "tobramycin", "amikacin"),
    "fluoroquinolones": ("ciprofloxacin", "levofloxacin"),
    "gram_positive_agents": ("vancomycin", "linezolid", "clindamycin", "erythromycin", "rifampin", "tetracycline"),
    "urinary_other": ("nitrofurantoin", "trimethoprim/sulfa"),
}
SPECIMEN_GROUPS: dict[str, tuple[str, ...]] = {
    "culture": ("blood culture", "urine", "sputum", "bronchoalveolar lavage", "pleural fluid", "csf;spinal fluid",
                "catheter tip-iv", "swab", "stool"),
    "screen": ("mrsa screen",),
}


def _invert(groups: dict[str, tuple[Any, ...]]) -> dict[Any, str]:
    return {member: key for key, members in groups.items() for member in members}


_BY_ITEM = {**_invert(LAB_PANELS), **_invert(CHART_GROUPS)}
_BY_NAME = {"drug": _invert(DRUG_CLASSES), "organism": _invert(ORGANISM_GROUPS),
            "antibiotic": _invert(ANTIBIOTIC_GROUPS), "specimen": _invert(SPECIMEN_GROUPS)}


def group_of(param: str, value: Any, code: str | None = None, level: int = 0) -> str | None:
    """The group key of a premise value (``None``: no known group at this level).

    Level 0: panel/organ system for an ``itemid``, class for a drug, organism, antibiotic or
    specimen name, and for an ICD title (``code`` given) the code's first two characters (ICD-10-PCS
    section and body system, ICD-9 chapter). Level 1, broader: the item's section in the item
    reference (``Blood / Chemistry``, ``Routine Vital Signs`` …) and an ICD code's first character.
    """
    if param == "itemid":
        try:
            item = int(value)
        except (TypeError, ValueError):
            return None
        if level == 0:
            return _BY_ITEM.get(item)
        ref = item_reference().get(item)
        return ref.group if ref else None
    if param in _BY_NAME:
        return _BY_NAME[param].get(str(value).casefold()) if level == 0 else None
    if code:
        return code[:2] if level == 0 else code[:1]
    return None
