"""Misspellings and abbreviations a person would actually write, for lexical variation.

``variants(name)`` lists curated variants (abbreviations clinicians use, common misspellings)
for a known name, falling back to keyboard-typo forms (a dropped doubled letter, two adjacent
letters swapped, a dropped vowel) for any other name. Other intents add their names (drugs,
diagnoses, organisms) to ``LEXICON`` through :func:`add_variants`.
"""

from __future__ import annotations

import re

LEXICON: dict[str, tuple[str, ...]] = {}


def add_variants(name: str, *forms: str) -> None:
    key = name.casefold()
    LEXICON[key] = tuple(dict.fromkeys(LEXICON.get(key, ()) + forms))


for _name, _forms in {
    # labs
    "Creatinine": ("creatinin", "creatnine", "Cr"),
    "Hemoglobin": ("hemoglobine", "haemoglobin", "Hgb", "Hb"),
    "Urea Nitrogen": ("BUN", "blood urea nitrogen", "urea nitrogren"),
    "Glucose": ("glucoze", "glucos", "blood sugar"),
    "Potassium": ("potasium", "K+", "potassum"),
    "Sodium": ("sodum", "Na+", "soduim"),
    "Chloride": ("chlorid", "Cl-"),
    "Bicarbonate": ("bicarb", "HCO3", "bicarbonat"),
    "White Blood Cells": ("WBC", "white cell count", "white blood cell"),
    "Platelet Count": ("platelets", "PLT", "platelet cnt"),
    "Hematocrit": ("Hct", "haematocrit", "hematocrite"),
    "Lactate": ("lactat", "lactic acid", "lacate"),
    "Magnesium": ("magnesum", "Mg", "magnesiun"),
    "Phosphate": ("phosphorus", "phosphat", "PO4"),
    "Albumin": ("albumine", "albumen"),
    "Troponin T": ("trop T", "troponine T", "TnT"),
    "Anion Gap": ("aniongap", "AG"),
    "Alanine Aminotransferase (ALT)": ("ALT", "SGPT", "alanine transaminase"),
    "Asparate Aminotransferase (AST)": ("AST", "SGOT", "aspartate transaminase"),
    "Alkaline Phosphatase": ("alk phos", "ALP", "alkaline phosphatse"),
    "Bilirubin, Total": ("total bili", "T bili", "bilirubin totl"),
    "INR(PT)": ("INR", "inr pt"),
    "C-Reactive Protein": ("CRP", "c reactive protien"),
    "NTproBNP": ("NT-proBNP", "pro-BNP", "NT pro BNP"),
    "Calcium, Total": ("calcium", "Ca", "calcuim"),
    "pH": ("PH", "blood pH"),
    "pO2": ("PaO2", "po2"),
    "pCO2": ("PaCO2", "pco2"),
    "Base Excess": ("BE", "base excees"),
    "Neutrophils": ("neutrophil %", "neutrophills", "PMN"),
    "Lymphocytes": ("lymphs", "lymphocyte %", "lymphocites"),
    "MCV": ("mean corpuscular volume", "mcv"),
    "PTT": ("aPTT", "ptt"),
    "Red Blood Cells": ("RBC", "red cell count"),
    # vitals
    "Heart Rate": ("HR", "pulse", "heart-rate"),
    "Respiratory Rate": ("RR", "resp rate", "respiratory rat"),
    "O2 saturation pulseoxymetry": ("SpO2", "O2 sat", "pulse ox"),
    "Temperature Fahrenheit": ("temp (F)", "temprature fahrenheit", "temperature F"),
    "Temperature Celsius": ("temp (C)", "temprature celsius", "temperature C"),
    "Non Invasive Blood Pressure systolic": ("NIBP systolic", "systolic BP", "non-invasive SBP"),
    "Non Invasive Blood Pressure diastolic": ("NIBP diastolic", "diastolic BP"),
    "Non Invasive Blood Pressure mean": ("NIBP mean", "MAP (non invasive)"),
    "Arterial Blood Pressure systolic": ("ABP systolic", "arterial SBP", "art line systolic"),
    "Arterial Blood Pressure mean": ("ABP mean", "arterial MAP"),
    "Foley": ("foley catheter", "folley", "urine (Foley)"),
    "Void": ("voided urine", "voids"),
    # care units / encounter vocabulary
    "Medical Intensive Care Unit (MICU)": ("MICU", "medical ICU", "Medical Intensive Care Unit"),
    "Surgical Intensive Care Unit (SICU)": ("SICU", "surgical ICU"),
    "Cardiac Vascular Intensive Care Unit (CVICU)": ("CVICU", "cardiac surgery ICU"),
    "Medical/Surgical Intensive Care Unit (MICU/SICU)": ("MICU/SICU", "med/surg ICU"),
    "Coronary Care Unit (CCU)": ("CCU", "coronary care"),
    "Trauma SICU (TSICU)": ("TSICU", "trauma ICU"),
    "Neuro Surgical Intensive Care Unit (Neuro SICU)": ("Neuro SICU", "neurosurgical ICU"),
    "Emergency Department": ("ED", "emergency dept", "emergency room"),
    "EW EMER.": ("emergency", "EW EMERG", "ew emer"),
    "URGENT": ("urgnet", "urgent admission"),
    "ELECTIVE": ("elective admission", "electiv"),
    "OBSERVATION ADMIT": ("observation", "obs admit"),
    "SURGICAL SAME DAY ADMISSION": ("same day surgery", "surgical same-day"),
    "DIRECT EMER.": ("direct emergency", "direct emer"),
    "EU OBSERVATION": ("EU obs", "eu observaton"),
    "DIRECT OBSERVATION": ("direct obs", "direct observaton"),
    "AMBULATORY OBSERVATION": ("ambulatory obs", "ambulatory observaton"),
}.items():
    add_variants(_name, *_forms)

_VOWELS = "aeiou"


def typo_variants(name: str) -> list[str]:
    """Keyboard-typo forms of ``name`` (deterministic order)."""
    out: list[str] = []
    doubled = re.search(r"([a-z])\1", name)
    if doubled:
        i = doubled.start()
        out.append(name[:i] + name[i + 1:])
    letters = [i for i, ch in enumerate(name) if ch.isalpha()]
    for i in letters[2:-1]:
        if name[i + 1].isalpha() and name[i] != name[i + 1]:
            out.append(name[:i] + name[i + 1] + name[i] + name[i + 2:])
            break
    for i in letters[2:]:
        if name[i].lower() in _VOWELS and i < len(name) - 1:
            out.append(name[:i] + name[i + 1:])
            break
    return [v for v in dict.fromkeys(out) if v.casefold() != name.casefold() and len(v) >= 2]


def variants(name: str) -> list[str]:
    """Curated variants first, then typo forms; never ``name`` itself (case-insensitively)."""
    curated = [v for v in LEXICON.get(name.casefold(), ()) if v.casefold() != name.casefold()]
    return curated + [v for v in typo_variants(name) if v not in curated]
