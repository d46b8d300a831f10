"""How clinicians write the names a question mentions: abbreviations, synonyms, brand names, typos.

``variants(name)`` lists curated forms of a database name first — the abbreviations, synonyms and
brand names clinicians use ("Hgb", "K", "BUN", "CHF", "Lasix", "vanc", "E. coli", "MICU") and the
misspellings they make — then keyboard-typo forms of its longest clinical word. Database codes
(admission types such as ``EW EMER.``) get only their curated clinical phrasings ("emergency
admission"): nobody types a misspelled internal code. Every curated form below was reviewed for
being in real clinical use for exactly that name; template modules add the names they sample
(drugs, diagnoses, organisms) through :func:`add_variants`.

Clean questions speak the same way. The curated forms of a name that are not misspellings
(:func:`aliases`: "Hgb", "K", "HR", "Lasix", "MICU", "E. coli") are names of the concept, so a
clean question names the concept by one of them for a share ``ALIAS_SHARE`` of entities
(:func:`shown_name`, drawn per entity, whatever the noise); the question's gold SQL matches the
concept either way, and the choice does not depend on the noise. A lexical-variation twin shows
another alias than its clean twin where the name has one (the forms clean questions use), else
another variant (a misspelling): "has an abbreviation" is then no cue for noise. (Forcing an
alias on the lexical pair's clean side made the alias itself a cue for "clean" wherever the name
has only one: measured on a `paper` build, lexical variation 0.70.)
"""

from __future__ import annotations

import re
from functools import lru_cache

LEXICON: dict[str, tuple[str, ...]] = {}


def add_variants(name: str, *forms: str) -> None:
    key = name.casefold()
    LEXICON[key] = tuple(dict.fromkeys(LEXICON.get(key, ()) + forms))


for _name, _forms in {
    # labs (MIMIC-IV d_labitems labels)
    "Creatinine": ("Cr", "creat", "serum creatinine", "creatinin", "creatnine"),
    "Hemoglobin": ("Hgb", "Hb", "haemoglobin", "hemoglobine", "hemoglbin"),
    "Urea Nitrogen": ("BUN", "blood urea nitrogen", "urea", "urea nitrogren"),
    "Glucose": ("blood glucose", "blood sugar", "glucoze", "glucos"),
    "Potassium": ("K", "K+", "serum potassium", "potasium", "potassum"),
    "Sodium": ("Na", "Na+", "serum sodium", "sodum", "soduim"),
    "Chloride": ("Cl", "serum chloride", "chlorid"),
    "Bicarbonate": ("bicarb", "HCO3", "serum bicarbonate", "bicarbonat"),
    "White Blood Cells": ("WBC", "white count", "white cell count", "leukocytes", "white blood cell"),
    "Platelet Count": ("platelets", "plt", "PLT count", "platelet cnt", "platlets"),
    "Hematocrit": ("Hct", "crit", "haematocrit", "hematocrite"),
    "Lactate": ("lactic acid", "lactate level", "lactat", "lacate"),
    "Magnesium": ("Mg", "mag", "serum magnesium", "magnesum"),
    "Phosphate": ("phos", "phosphorus", "PO4", "phosphat"),
    "Albumin": ("alb", "serum albumin", "albumine"),
    "Troponin T": ("trop T", "TnT", "troponin", "trop", "troponine T"),
    "Anion Gap": ("AG", "gap", "aniongap"),
    "Alanine Aminotransferase (ALT)": ("ALT", "SGPT", "alanine transaminase"),
    "Asparate Aminotransferase (AST)": ("AST", "SGOT", "aspartate aminotransferase", "aspartate transaminase"),
    "Alkaline Phosphatase": ("alk phos", "ALP", "alkaline phos", "alkaline phosphatse"),
    "Bilirubin, Total": ("T bili", "total bili", "bili", "total bilirubin", "bilirubin totl"),
    "INR(PT)": ("INR", "PT/INR"),
    "PT": ("prothrombin time", "pro time"),
    "PTT": ("aPTT", "partial thromboplastin time"),
    "C-Reactive Protein": ("CRP", "c reactive protien"),
    "NTproBNP": ("NT-proBNP", "proBNP", "NT pro BNP"),
    "Calcium, Total": ("Ca", "calcium", "serum calcium", "calcuim"),
    "pH": ("arterial pH", "blood pH", "ABG pH"),
    "pO2": ("PaO2", "arterial pO2", "PO2"),
    "pCO2": ("PaCO2", "arterial pCO2", "PCO2"),
    "Base Excess": ("BE", "base excees"),
    "Neutrophils": ("neuts", "PMN", "neutrophil %", "neutrophills"),
    "Lymphocytes": ("lymphs", "lymphocyte %", "lymphocites"),
    "Bands": ("bandemia", "band forms", "band %"),
    "MCV": ("mean corpuscular volume", "mean cell volume"),
    "Red Blood Cells": ("RBC", "RBC count", "red cell count"),
    "Creatine Kinase (CK)": ("CK", "CPK", "creatine phosphokinase"),
    "Lactate Dehydrogenase (LD)": ("LDH", "LD", "lactate dehydrogenase"),
    "Amylase": ("serum amylase", "amylse"),
    "Protein, Total": ("total protein", "TP"),
    "Fibrinogen, Functional": ("fibrinogen", "fibrinogin"),
    # vitals and ICU monitoring (d_items labels)
    "Heart Rate": ("HR", "pulse", "heart-rate", "pulse rate"),
    "Respiratory Rate": ("RR", "resp rate", "respirations", "respiratory rat"),
    "Respiratory Rate (Total)": ("total RR", "total resp rate"),
    "O2 saturation pulseoxymetry": ("SpO2", "O2 sat", "sats", "pulse ox", "oxygen saturation"),
    "Temperature Fahrenheit": ("temp (F)", "temperature F", "temp F", "temprature fahrenheit"),
    "Temperature Celsius": ("temp (C)", "temperature C", "temp C", "temprature celsius"),
    "Non Invasive Blood Pressure systolic": ("NIBP systolic", "cuff systolic", "non-invasive SBP", "noninvasive systolic BP"),
    "Non Invasive Blood Pressure diastolic": ("NIBP diastolic", "cuff diastolic", "non-invasive DBP"),
    "Non Invasive Blood Pressure mean": ("NIBP mean", "cuff MAP", "non-invasive MAP"),
    "Arterial Blood Pressure systolic": ("art line SBP", "arterial SBP", "ABP systolic", "a-line systolic"),
    "Arterial Blood Pressure diastolic": ("art line DBP", "arterial DBP", "ABP diastolic"),
    "Arterial Blood Pressure mean": ("art line MAP", "arterial MAP", "ABP mean", "a-line MAP"),
    "Inspired O2 Fraction": ("FiO2", "fraction of inspired oxygen"),
    "PEEP set": ("PEEP", "set PEEP"),
    "Daily Weight": ("daily wt", "daily body weight"),
    "Foley": ("Foley catheter", "indwelling catheter", "foley cath", "folley"),
    "Void": ("voided urine", "voids", "spontaneous void"),
    # ICU drips (inputevents labels)
    "Dextrose 5%": ("D5W", "D5"),
    "NaCl 0.9%": ("normal saline", "NS", "0.9% saline"),
    # care units
    "Medical Intensive Care Unit (MICU)": ("MICU", "medical ICU", "the MICU"),
    "Surgical Intensive Care Unit (SICU)": ("SICU", "surgical ICU"),
    "Cardiac Vascular Intensive Care Unit (CVICU)": ("CVICU", "cardiac surgery ICU", "CSRU"),
    "Medical/Surgical Intensive Care Unit (MICU/SICU)": ("MICU/SICU", "med/surg ICU", "mixed ICU"),
    "Coronary Care Unit (CCU)": ("CCU", "cardiac ICU", "coronary care"),
    "Trauma SICU (TSICU)": ("TSICU", "trauma ICU"),
    "Neuro Surgical Intensive Care Unit (Neuro SICU)": ("Neuro SICU", "neurosurgical ICU", "neuro ICU"),
    "Neuro Intermediate": ("neuro step-down", "neuro IMU"),
    "Emergency Department": ("ED", "ER", "emergency room", "emergency dept"),
    # admission types (database codes: clinical phrasings only)
    "EW EMER.": ("emergency", "ED", "emergency-department"),
    "URGENT": ("urgent (non-elective)", "urgent-type"),
    "ELECTIVE": ("planned", "scheduled"),
    "OBSERVATION ADMIT": ("observation", "obs"),
    "SURGICAL SAME DAY ADMISSION": ("same-day surgery", "day-surgery", "same-day surgical"),
    "DIRECT EMER.": ("direct emergency", "direct-emergency"),
    "EU OBSERVATION": ("ED observation", "emergency-unit observation"),
    "DIRECT OBSERVATION": ("direct obs", "direct-observation"),
    "AMBULATORY OBSERVATION": ("ambulatory obs", "outpatient observation"),
}.items():
    add_variants(_name, *_forms)

# database codes: only their curated clinical phrasings are variants, never typos of the code
CODES: frozenset[str] = frozenset(n.casefold() for n in (
    "EW EMER.", "URGENT", "ELECTIVE", "OBSERVATION ADMIT", "SURGICAL SAME DAY ADMISSION", "DIRECT EMER.",
    "EU OBSERVATION", "DIRECT OBSERVATION", "AMBULATORY OBSERVATION", "HCFA", "APR"))


def clinical_case(name: str) -> str:
    """A name as a clinician writes it: all-caps words of a database string lowered ("BLOOD
    CULTURE" → "blood culture") and tall-man lettering undone ("CefTRIAXone" → "ceftriaxone");
    abbreviations of up to four letters ("MICU", "ALT") kept."""

    letters = [c for c in name if c.isalpha()]
    if len(letters) > 4 and all(c.isupper() for c in letters):
        return name.lower()

    def word(m: re.Match) -> str:
        w = m.group(0)
        return w.lower() if re.search(r"[A-Z]{2}", w) and re.search(r"[a-z]", w) else w

    return re.sub(r"[A-Za-z]+", word, name)


def is_code(name: str) -> bool:
    """A database code rather than a clinical name (an admission type, an abbreviation with a dot)."""
    return name.casefold() in CODES or bool(re.fullmatch(r"[A-Z0-9 /&-]*[A-Z]\.", name.strip()))


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
    """Curated forms first, then typo forms of the longest clinical word (none for database codes);
    never ``name`` itself (case-insensitively)."""
    curated = [v for v in LEXICON.get(name.casefold(), ()) if v.casefold() != name.casefold()]
    if is_code(name):
        return curated
    shown = clinical_case(name)
    words = [w for w in re.findall(r"[A-Za-z]+", shown) if len(w) >= 5]
    typos: list[str] = []
    if words:
        word = max(words, key=len)
        i = shown.find(word)
        typos = [shown[:i] + t + shown[i + len(word):] for t in typo_variants(word)]
    return curated + [v for v in typos if v not in curated and v.casefold() != name.casefold()]


# share of entities whose clean questions name the concept by an alias rather than its name
ALIAS_SHARE = 0.5


def _distance(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


@lru_cache(maxsize=65536)  # a pure function of two strings, asked again for every candidate of a template
def is_misspelling(form: str, name: str) -> bool:
    """A form that misspells a word of ``name`` (within two edits of it) rather than naming it
    another way ("potasium", "creatnine"; not "K", "serum K", "heart-rate", "Lasix")."""
    f, n = form.casefold(), name.casefold()
    if (f in n or n in f) and abs(len(f) - len(n)) > 2:  # a word added or left out
        return False
    name_words = [w for w in re.findall(r"[a-z]+", n) if len(w) >= 4]
    return any(w != v and _distance(w, v) <= 2 for w in re.findall(r"[a-z]+", f) for v in name_words)


def aliases(name: str) -> list[str]:
    """Curated forms of ``name`` that name it another way (no misspellings), in lexicon order."""
    return [v for v in LEXICON.get(name.casefold(), ()) if v.casefold() != name.casefold()
            and not is_misspelling(v, name)]


def shown_name(name: str, draw: float, pick: int, force: bool = False) -> str:
    """How a clean question names ``name``: an alias (the ``pick``-th, cyclically) when ``draw`` <
    ``ALIAS_SHARE`` or ``force`` and the name has one, else the name itself."""
    forms = aliases(name)
    if forms and (force or draw < ALIAS_SHARE):
        return forms[pick % len(forms)]
    return name
