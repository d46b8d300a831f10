"""Reviewed clinical concepts: the one home of "what a clinician's word means in the database".

Questions name clinical concepts the way a clinician says them ("serum potassium", "an
emergency admission", "ceftriaxone", "the medical ICU"); the database stores item ids, case- and
spelling-variant drug names, admission-type codes and care-unit strings. A :class:`Concept` is
one reviewed definition: its clinical ``name`` (rendered in questions), the database values it
covers (item ids, drug spellings, admission types, care units, specimen types, ICD code
prefixes) and the ``source`` of the definition. Templates sample a concept, put its name in the
question, and match the concept's FULL set in the gold SQL through a ``VALUES`` relation built
here (:func:`relation`), filtered by the concept's name: the answer is what the question's words
mean, and a misspelled or abbreviated name (lexical variation) finds nothing in a credulous
agent's copy of the gold SQL.

Definitions follow the MIMIC code repository's concepts (``mimic-iv/concepts``: ``measurement/
chemistry``, ``complete_blood_count``, ``bg``, ``vitalsign``, ``urine_output``,
``medication/antibiotic``, ``vasoactive_agent``) and the MIMIC-IV v2.2 dictionaries; every set
was checked against the MIMIC-IV demo (``tests/test_bench_gold_demo.py``). Drug spellings are
matched case-insensitively after trimming (``lower(trim(drug))``): MIMIC-IV writes one drug as
"CefTRIAXone", "CeftriaXONE" or "Ceftriaxone". Full MIMIC-IV holds more spellings than the demo;
extend a concept's ``values`` rather than matching with patterns in a template.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ehrgym.errors import BenchmarkError

DOMAINS: dict[str, str] = {
    "lab": "labevents.itemid",
    "vital": "chartevents.itemid",
    "urine": "outputevents.itemid",
    "infusion": "inputevents.itemid (amounts in mg)",
    "drug": "lower(trim(prescriptions.drug)) / lower(trim(emar.medication))",
    "antibiotic": "lower(trim(prescriptions.drug)) / lower(trim(emar.medication)): systemic antibacterials",
    "admission_type": "admissions.admission_type",
    "careunit": "icustays.first_careunit / transfers.careunit",
    "specimen": "microbiologyevents.spec_type_desc",
    "organism": "microbiologyevents.org_name",
    "diagnosis": "diagnoses_icd (icd_version, icd_code prefix)",
    "disposition": "admissions.discharge_location / admissions.admission_location",
}

MIMIC_CODE = "MIMIC code repository, mimic-iv/concepts/"
DICT = "MIMIC-IV v2.2 dictionary"


@dataclass(frozen=True)
class Concept:
    """One reviewed clinical concept (see the module docstring).

    ``itemids`` (item domains), ``values`` (exact database strings; lower-case for drugs, which
    are compared as ``lower(trim(x))``) or ``icd`` (``(icd_version, code prefix)`` pairs) hold what
    the concept covers; ``primary`` is the item whose plausibility bounds and unit conversions
    apply (all items of a concept share its unit). ``restriction`` says in words what the name
    restricts (specimen fluid, route) — the question states it through the name. ``variants`` are
    abbreviations, brand names and misspellings clinicians write (for lexical variation).
    """

    domain: str
    name: str
    source: str
    itemids: tuple[int, ...] = ()
    values: tuple[str, ...] = ()
    icd: tuple[tuple[int, str], ...] = ()
    restriction: str = ""
    variants: tuple[str, ...] = ()
    primary: int | None = field(default=None)

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise BenchmarkError(f"concept {self.name!r}: unknown domain {self.domain!r}; known: {sorted(DOMAINS)}")
        members = (self.itemids, self.values, self.icd)
        if sum(bool(m) for m in members) != 1:
            raise BenchmarkError(f"concept {self.name!r} must list exactly one of itemids, values, icd")
        for text in (self.name, *self.values, *(p for _, p in self.icd)):
            if "{" in text or "}" in text or "'" in text:
                raise BenchmarkError(f"concept {self.name!r}: {text!r} may not contain braces or quotes")
        if self.domain in ("drug", "antibiotic") and any(v != v.lower().strip() for v in self.values):
            raise BenchmarkError(f"drug concept {self.name!r}: spellings must be lower-case and trimmed")
        same = [v for v in self.variants if v.casefold() == self.name.casefold()]
        if same:
            raise BenchmarkError(f"concept {self.name!r}: variants {same} only differ from the name in case")
        if self.itemids and self.primary is None:
            object.__setattr__(self, "primary", self.itemids[0])


_REGISTRY: dict[str, dict[str, Concept]] = {d: {} for d in DOMAINS}


def define(*concepts: Concept) -> None:
    for c in concepts:
        known = _REGISTRY[c.domain]
        if c.name.casefold() in {k.casefold() for k in known} and known.get(c.name) != c:
            raise BenchmarkError(f"concept {c.name!r} is defined twice in domain {c.domain!r}")
        known[c.name] = c


def concepts(domain: str) -> tuple[Concept, ...]:
    """The concepts of a domain, in definition order."""
    if domain not in _REGISTRY:
        raise BenchmarkError(f"unknown concept domain {domain!r}; known: {sorted(DOMAINS)}")
    return tuple(_REGISTRY[domain].values())


def get_concept(domain: str, name: str) -> Concept:
    try:
        return _REGISTRY[domain][name]
    except KeyError:
        raise BenchmarkError(f"no concept {name!r} in domain {domain!r}; known: {sorted(_REGISTRY.get(domain, {}))}") \
            from None


def relation(domain: str) -> str:
    """A ``(VALUES …)`` relation of the domain's concepts: columns ``(concept, member)`` for item and
    value domains (``member`` an itemid or a database string), ``(concept, icd_version, prefix)``
    for diagnoses. Use as ``JOIN {relation} cpt(concept, itemid) ON cpt.itemid = e.itemid``."""
    rows: list[str] = []
    for c in concepts(domain):
        if c.itemids:
            rows += [f"('{c.name}', {i})" for i in c.itemids]
        elif c.values:
            rows += [f"('{c.name}', '{v}')" for v in c.values]
        else:
            rows += [f"('{c.name}', {v}, '{p}')" for v, p in c.icd]
    return "(VALUES " + ", ".join(rows) + ")"


def primary_items(domain: str) -> str:
    """``(VALUES (concept, primary itemid) …)``: the item whose bounds/conversions a concept uses."""
    return "(VALUES " + ", ".join(f"('{c.name}', {c.primary})" for c in concepts(domain)) + ")"


# ---------------------------------------------------------------- laboratory (labevents.itemid)
_CHEM = MIMIC_CODE + "measurement/chemistry.sql; d_labitems fluid 'Blood', category 'Chemistry'"
_CBC = MIMIC_CODE + "measurement/complete_blood_count.sql; d_labitems fluid 'Blood', category 'Hematology'"
_BG = MIMIC_CODE + "measurement/bg.sql; d_labitems fluid 'Blood', category 'Blood Gas' (urine/other-fluid pH excluded)"
_COAG = MIMIC_CODE + "measurement/coagulation.sql"
_ENZ = MIMIC_CODE + "measurement/enzyme.sql"
_CARD = MIMIC_CODE + "measurement/cardiac_marker.sql"
_INF = MIMIC_CODE + "measurement/inflammation.sql"

define(
    Concept("lab", "serum creatinine", _CHEM, itemids=(50912,), restriction="serum", variants=("Cr", "creat", "serum creatinin")),
    Concept("lab", "serum potassium", _CHEM, itemids=(50971, 52610), restriction="serum (not whole-blood gas)",
            variants=("K", "serum K", "potasium")),
    Concept("lab", "serum sodium", _CHEM, itemids=(50983,), restriction="serum (not whole-blood gas)",
            variants=("Na", "serum Na", "sodum")),
    Concept("lab", "serum chloride", _CHEM, itemids=(50902,), restriction="serum", variants=("Cl", "chlorid")),
    Concept("lab", "serum bicarbonate", _CHEM, itemids=(50882,), restriction="serum",
            variants=("HCO3", "bicarb", "serum CO2")),
    Concept("lab", "anion gap", _CHEM, itemids=(50868,), variants=("AG", "aniongap")),
    Concept("lab", "blood urea nitrogen", _CHEM, itemids=(51006,), variants=("BUN", "urea", "blood urea nitrogn")),
    Concept("lab", "serum glucose", _CHEM, itemids=(50931,), restriction="serum chemistry (not fingerstick, gas or urine)",
            variants=("serum glu", "serum glucoze", "chem glucose")),
    Concept("lab", "serum magnesium", _CHEM, itemids=(50960,), variants=("Mg", "mag", "magnesum")),
    Concept("lab", "serum phosphate", _CHEM, itemids=(50970,), variants=("phos", "PO4", "phosphorus")),
    Concept("lab", "total serum calcium", _CHEM, itemids=(50893,), variants=("Ca", "calcium", "total calcuim")),
    Concept("lab", "serum albumin", _CHEM, itemids=(50862,), variants=("alb", "albumine")),
    Concept("lab", "total serum protein", _CHEM, itemids=(50976,), variants=("total protein", "TP")),
    Concept("lab", "total bilirubin", _ENZ, itemids=(50885,), variants=("T bili", "tbili", "total bili")),
    Concept("lab", "ALT", _ENZ, itemids=(50861,), variants=("SGPT", "alanine transaminase", "alanine aminotransferase")),
    Concept("lab", "AST", _ENZ, itemids=(50878,), variants=("SGOT", "aspartate transaminase")),
    Concept("lab", "alkaline phosphatase", _ENZ, itemids=(50863,), variants=("alk phos", "ALP")),
    Concept("lab", "serum amylase", _ENZ, itemids=(50867,), variants=("amylase", "amylse")),
    Concept("lab", "creatine kinase", _CARD, itemids=(50910,), variants=("CK", "CPK")),
    Concept("lab", "LDH", _ENZ, itemids=(50954,), variants=("lactate dehydrogenase", "LD")),
    Concept("lab", "NT-proBNP", _CARD, itemids=(50963,), variants=("proBNP", "NT pro BNP", "NT-pro-BNP")),
    Concept("lab", "troponin T", _CARD, itemids=(51003,), variants=("trop T", "TnT", "troponin")),
    Concept("lab", "C-reactive protein", _INF, itemids=(50889,), variants=("CRP", "c reactive protien")),
    Concept("lab", "blood lactate", _BG, itemids=(50813,), restriction="blood", variants=("lactate", "lactic acid", "blood lactat")),
    Concept("lab", "blood gas pH", _BG, itemids=(50820,), restriction="blood (urine pH excluded)",
            variants=("ABG pH", "blood-gas pH", "VBG/ABG pH")),
    Concept("lab", "blood gas pCO2", _BG, itemids=(50818,), restriction="blood", variants=("PaCO2", "pCO2", "PCO2")),
    Concept("lab", "blood gas pO2", _BG, itemids=(50821,), restriction="blood", variants=("PaO2", "pO2", "PO2")),
    Concept("lab", "base excess", _BG, itemids=(50802,), restriction="blood", variants=("BE", "base excees")),
    Concept("lab", "hemoglobin", _CBC + "; blood-gas hemoglobin 50811 is the same measurement", itemids=(51222, 50811),
            variants=("Hgb", "Hb", "haemoglobin")),
    Concept("lab", "hematocrit", _CBC + "; blood-gas calculated hematocrit 50810 included", itemids=(51221, 50810),
            variants=("Hct", "haematocrit", "crit")),
    Concept("lab", "white blood cell count", _CBC + " (WBC 51301 and 51300)", itemids=(51301, 51300),
            variants=("WBC", "white count", "leukocyte count")),
    Concept("lab", "platelet count", _CBC, itemids=(51265,), variants=("PLT", "platelets", "plt count")),
    Concept("lab", "red blood cell count", _CBC, itemids=(51279,), variants=("RBC", "red cell count")),
    Concept("lab", "MCV", _CBC, itemids=(51250,), variants=("mean corpuscular volume", "mean cell volume")),
    Concept("lab", "neutrophil percentage", _CBC, itemids=(51256,), variants=("neut %", "PMN %", "neutrophils")),
    Concept("lab", "lymphocyte percentage", _CBC + " (Lymphocytes 51244 and 'Lymphocytes, Percent' 51245, both %, as the "
            "MIMIC code repository's blood_differential)", itemids=(51244, 51245), variants=("lymph %", "lymphs")),
    Concept("lab", "band neutrophils", _CBC, itemids=(51144,), variants=("bands", "band count")),
    Concept("lab", "INR", _COAG, itemids=(51237,), variants=("PT-INR", "INR(PT)", "international normalized ratio")),
    Concept("lab", "prothrombin time", _COAG, itemids=(51274,), variants=("PT", "pro time")),
    Concept("lab", "PTT", _COAG, itemids=(51275,), variants=("aPTT", "partial thromboplastin time")),
    Concept("lab", "fibrinogen", _COAG, itemids=(51214,), variants=("fib", "fibrinogin")),
)

# ---------------------------------------------------------------- vital signs (chartevents.itemid)
_VS = MIMIC_CODE + "measurement/vitalsign.sql"
define(
    Concept("vital", "heart rate", _VS, itemids=(220045,), variants=("HR", "pulse", "heart-rate")),
    Concept("vital", "respiratory rate", _VS + " (220210, 224690 total)", itemids=(220210, 224690),
            variants=("RR", "resp rate", "respiratory rat")),
    Concept("vital", "SpO2", _VS, itemids=(220277,), variants=("O2 sat", "pulse ox", "oxygen saturation")),
    Concept("vital", "systolic blood pressure", _VS + " (arterial 220050 and 225309, non-invasive 220179)",
            itemids=(220050, 220179, 225309), variants=("SBP", "systolic BP", "sys BP")),
    Concept("vital", "diastolic blood pressure", _VS + " (arterial 220051 and 225310, non-invasive 220180)",
            itemids=(220051, 220180, 225310), variants=("DBP", "diastolic BP")),
    Concept("vital", "mean arterial pressure", _VS + " (arterial 220052 and 225312, non-invasive 220181)",
            itemids=(220052, 220181, 225312), variants=("MAP", "mean BP", "mean arterial presure")),
    # the two temperature items are charted in different units, so they stay two concepts
    Concept("vital", "temperature in °F", _VS + " (223761; °C is a separate item)", itemids=(223761,),
            variants=("temp (F)", "temperature F", "temprature in °F")),
    Concept("vital", "temperature in °C", _VS + " (223762)", itemids=(223762,),
            variants=("temp (C)", "temperature C", "temprature in °C")),
)

# ---------------------------------------------------------------- urine output (outputevents.itemid)
_UO = MIMIC_CODE + "measurement/urine_output.sql (GU irrigant items 227488/227489 left out)"
define(
    Concept("urine", "urine output", _UO, itemids=(226559, 226560, 226561, 226584, 226563, 226564, 226565, 226567,
                                                    226557, 226558, 226627, 226631),
            variants=("UOP", "urine outpt", "urinary output")),
    Concept("urine", "Foley catheter urine output", DICT + " d_items 226559 'Foley'", itemids=(226559,),
            variants=("foley output", "Foley UOP", "folley urine output")),
    Concept("urine", "voided urine output", DICT + " d_items 226560 'Void'", itemids=(226560,),
            variants=("voids", "voided urine", "void output")),
)

# ---------------------------------------------------------------- ICU infusions (inputevents.itemid, mg)
_VA = MIMIC_CODE + "medication/vasoactive_agent.sql"
define(
    Concept("infusion", "norepinephrine", _VA, itemids=(221906,), variants=("norepi", "Levophed", "noradrenaline")),
    Concept("infusion", "phenylephrine", _VA, itemids=(221749,), variants=("neo", "Neo-Synephrine", "phenylepherine")),
    Concept("infusion", "propofol", DICT + " d_items 222168", itemids=(222168,), variants=("Diprivan", "propafol")),
    Concept("infusion", "epinephrine", _VA, itemids=(221289,), variants=("epi", "adrenaline", "epinephrin")),
    Concept("infusion", "dopamine", _VA, itemids=(221662,), variants=("dopa", "Intropin", "dopamin")),
)

# ---------------------------------------------------------------- systemic antibiotics (drug names)
_ABX = (MIMIC_CODE + "medication/antibiotic.sql (systemic antibacterials; eye/ear/skin preparations and "
        "desensitisation protocols excluded); spellings from the MIMIC-IV demo")
ANTIBIOTIC_AGENTS: tuple[Concept, ...] = (
    Concept("antibiotic", "amoxicillin", _ABX, values=("amoxicillin",), variants=("amox", "Amoxil")),
    Concept("antibiotic", "amoxicillin-clavulanate", _ABX, values=("amoxicillin-clavulanic acid",),
            variants=("Augmentin", "amox-clav")),
    Concept("antibiotic", "ampicillin", _ABX, values=("ampicillin", "ampicillin sodium"), variants=("amp", "ampicilin")),
    Concept("antibiotic", "ampicillin-sulbactam", _ABX, values=("ampicillin-sulbactam", "ampicillin sodium/sulbactam"),
            variants=("Unasyn", "amp-sulbactam")),
    Concept("antibiotic", "azithromycin", _ABX, values=("azithromycin",), variants=("azithro", "Zithromax", "Z-pak")),
    Concept("antibiotic", "aztreonam", _ABX, values=("aztreonam",), variants=("Azactam",)),
    Concept("antibiotic", "cefazolin", _ABX, values=("cefazolin",), variants=("Ancef", "cephazolin", "cefazoline")),
    Concept("antibiotic", "cefepime", _ABX, values=("cefepime",), variants=("Maxipime", "cefepim", "cefapime")),
    Concept("antibiotic", "cefpodoxime", _ABX, values=("cefpodoxime proxetil", "cefpodoxime"), variants=("Vantin",)),
    Concept("antibiotic", "ceftazidime", _ABX, values=("ceftazidime",), variants=("ceftaz", "Fortaz")),
    Concept("antibiotic", "ceftriaxone", _ABX, values=("ceftriaxone",), variants=("Rocephin", "ceftriaxon", "CTX")),
    Concept("antibiotic", "cephalexin", _ABX, values=("cephalexin",), variants=("Keflex", "cefalexin")),
    Concept("antibiotic", "ciprofloxacin", _ABX + "; oral (HCl) and IV forms",
            values=("ciprofloxacin hcl", "ciprofloxacin iv", "ciprofloxacin"), variants=("cipro", "Cipro XR", "ciprofloxacine")),
    Concept("antibiotic", "clarithromycin", _ABX, values=("clarithromycin",), variants=("Biaxin",)),
    Concept("antibiotic", "clindamycin", _ABX, values=("clindamycin",), variants=("clinda", "Cleocin")),
    Concept("antibiotic", "daptomycin", _ABX, values=("daptomycin",), variants=("dapto", "Cubicin")),
    Concept("antibiotic", "doxycycline", _ABX, values=("doxycycline hyclate", "doxycycline"), variants=("doxy",)),
    Concept("antibiotic", "ertapenem", _ABX, values=("*nf* ertapenem sodium", "ertapenem sodium", "ertapenem"),
            variants=("Invanz",)),
    Concept("antibiotic", "erythromycin", _ABX + " (systemic forms only)", values=("erythromycin",),
            variants=("erythro",)),
    Concept("antibiotic", "gentamicin", _ABX, values=("gentamicin", "gentamicin sulfate"), variants=("gent", "gentamycin")),
    Concept("antibiotic", "levofloxacin", _ABX, values=("levofloxacin",), variants=("levo", "Levaquin")),
    Concept("antibiotic", "linezolid", _ABX, values=("linezolid",), variants=("Zyvox",)),
    Concept("antibiotic", "meropenem", _ABX, values=("meropenem",), variants=("Merrem", "meropenum", "meropenam")),
    Concept("antibiotic", "metronidazole", _ABX, values=("metronidazole", "metronidazole (flagyl)"),
            variants=("Flagyl", "metro", "metronidazol")),
    Concept("antibiotic", "nafcillin", _ABX, values=("nafcillin",), variants=("nafcilin",)),
    Concept("antibiotic", "nitrofurantoin", _ABX, values=("nitrofurantoin monohyd (macrobid)",
                                                          "nitrofurantoin (macrodantin)", "nitrofurantoin"),
            variants=("Macrobid", "nitrofurantion")),
    Concept("antibiotic", "oxacillin", _ABX, values=("oxacillin",), variants=("oxacilin",)),
    Concept("antibiotic", "penicillin G", _ABX, values=("penicillin g potassium", "penicillin g benzathine"),
            variants=("pen G", "benzylpenicillin")),
    Concept("antibiotic", "piperacillin-tazobactam", _ABX, values=("piperacillin-tazobactam",),
            variants=("Zosyn", "pip-tazo", "pip/tazo")),
    Concept("antibiotic", "rifampin", _ABX, values=("rifampin",), variants=("rifampicin",)),
    Concept("antibiotic", "trimethoprim-sulfamethoxazole", _ABX,
            values=("sulfameth/trimethoprim ds", "sulfameth/trimethoprim ss", "sulfamethoxazole-trimethoprim",
                    "sulfameth/trimethoprim suspension"), variants=("Bactrim", "TMP-SMX", "co-trimoxazole")),
    Concept("antibiotic", "tigecycline", _ABX, values=("tigecycline",), variants=("Tygacil", "tigecyclin")),
    Concept("antibiotic", "tobramycin", _ABX, values=("tobramycin sulfate", "tobramycin"), variants=("tobra",)),
    Concept("antibiotic", "trimethoprim", _ABX + " (trimethoprim alone)", values=("trimethoprim",),
            variants=("Primsol", "trimethoprin")),
    Concept("antibiotic", "vancomycin", _ABX + "; IV, oral and enema forms",
            values=("vancomycin", "vancomycin oral liquid", "vancomycin enema"), variants=("vancomicin", "vanco", "vanc")),
)
define(*ANTIBIOTIC_AGENTS)

# ---------------------------------------------------------------- other drugs (drug names)
_RX = DICT + " prescriptions/emar spellings (MIMIC-IV demo), case-insensitive"
define(
    # antibiotics a question names one by one are the same definitions as the class members
    *(Concept("drug", a.name, a.source, values=a.values, variants=a.variants) for a in ANTIBIOTIC_AGENTS
      if a.name in ("vancomycin", "piperacillin-tazobactam", "cefepime", "meropenem", "ceftriaxone", "azithromycin",
                    "ciprofloxacin", "nitrofurantoin", "cefazolin", "metronidazole", "levofloxacin")),
    Concept("drug", "norepinephrine", _RX, values=("norepinephrine",), variants=("norepi", "Levophed")),
    Concept("drug", "phenylephrine", _RX, values=("phenylephrine",), variants=("neo", "Neo-Synephrine")),
    Concept("drug", "propofol", _RX, values=("propofol",), variants=("Diprivan", "propafol")),
    Concept("drug", "heparin", _RX + "; therapeutic/prophylactic heparin only: line flushes, dwells, CRRT priming "
            "and dialysis-circuit heparin excluded", values=("heparin", "heparin sodium"), variants=("UFH", "heprin")),
    Concept("drug", "insulin", _RX + "; pumps, syringes and U-500 excluded",
            values=("insulin", "insulin human regular", "insulin regular"), variants=("reg insulin", "insuline")),
    Concept("drug", "furosemide", _RX, values=("furosemide", "furosemide-heart failure"), variants=("Lasix", "frusemide")),
    Concept("drug", "metoprolol", _RX + "; tartrate and succinate", values=("metoprolol tartrate", "metoprolol succinate xl"),
            variants=("Lopressor", "Toprol", "metoprolol tartate")),
    Concept("drug", "apixaban", _RX, values=("apixaban",), variants=("Eliquis", "apixiban")),
    Concept("drug", "pantoprazole", _RX, values=("pantoprazole", "pantoprazole sodium"), variants=("Protonix", "pantoprazol")),
    Concept("drug", "octreotide", _RX, values=("octreotide acetate", "octreotide"), variants=("Sandostatin", "octreotid")),
    Concept("drug", "lactulose", _RX + "; oral (enemas excluded)", values=("lactulose",), variants=("Enulose", "lactulos")),
    Concept("drug", "aspirin", _RX, values=("aspirin", "aspirin ec", "aspirin (buffered)", "aspirin 81 mg"),
            variants=("ASA", "asprin")),
    Concept("drug", "atorvastatin", _RX, values=("atorvastatin",), variants=("Lipitor", "atorvastatine")),
    Concept("drug", "levetiracetam", _RX, values=("levetiracetam", "levetiracetam oral solution"),
            variants=("Keppra", "levetiracetem")),
    Concept("drug", "prednisone", _RX, values=("prednisone",), variants=("Deltasone", "predisone")),
    # every route: the spelling is ordered IV as often as by mouth (37 of 46 demo orders are IV), so the name
    # claims no route ("oral sodium bicarbonate" answered "IV" to "by which route was it ordered?")
    Concept("drug", "sodium bicarbonate", _RX + "; every route (tablets and IV orders)",
            values=("sodium bicarbonate",), variants=("bicarb", "NaHCO3")),
)

# ---------------------------------------------------------------- admission types
_ADM = DICT + " admissions.admission_type (9 values)"
define(
    Concept("admission_type", "emergency", _ADM + ": ED (EW EMER.) and direct emergency admissions",
            values=("EW EMER.", "DIRECT EMER."), variants=("emergent", "ER", "emergncy")),
    Concept("admission_type", "urgent", _ADM, values=("URGENT",), variants=("urgnet", "non-elective urgent")),
    Concept("admission_type", "elective", _ADM + ": scheduled admissions incl. same-day surgical admissions",
            values=("ELECTIVE", "SURGICAL SAME DAY ADMISSION"), variants=("planned", "scheduled", "elctive")),
    Concept("admission_type", "observation", _ADM + ": ambulatory, direct, emergency-unit and admit observation",
            values=("OBSERVATION ADMIT", "EU OBSERVATION", "DIRECT OBSERVATION", "AMBULATORY OBSERVATION"),
            variants=("obs", "observaton")),
)

# ---------------------------------------------------------------- care units
_CU = DICT + " icustays.first_careunit"
define(
    Concept("careunit", "medical ICU", _CU, values=("Medical Intensive Care Unit (MICU)",), variants=("MICU", "med ICU")),
    Concept("careunit", "surgical ICU", _CU, values=("Surgical Intensive Care Unit (SICU)",), variants=("SICU", "surg ICU")),
    Concept("careunit", "cardiac surgery ICU", _CU + " (Cardiac Vascular ICU)",
            values=("Cardiac Vascular Intensive Care Unit (CVICU)",), variants=("CVICU", "CSRU", "cardiothoracic ICU")),
    Concept("careunit", "coronary care unit", _CU, values=("Coronary Care Unit (CCU)",), variants=("CCU", "cardiac ICU")),
    Concept("careunit", "trauma surgical ICU", _CU, values=("Trauma SICU (TSICU)",), variants=("TSICU", "trauma ICU")),
    Concept("careunit", "mixed medical-surgical ICU", _CU, values=("Medical/Surgical Intensive Care Unit (MICU/SICU)",),
            variants=("MICU/SICU", "med-surg ICU")),
    Concept("careunit", "neurosurgical ICU", _CU, values=("Neuro Surgical Intensive Care Unit (Neuro SICU)",),
            variants=("Neuro SICU", "neuro ICU")),
)
# ---------------------------------------------------------------- where admissions came from and went to
_DISP = DICT + " admissions.discharge_location / admission_location (MIMIC-IV demo values)"
define(
    Concept("disposition", "post-acute care facility", _DISP + ": discharge to a skilled nursing facility, an inpatient "
            "rehabilitation facility or a long-term acute care hospital (the three post-acute settings)",
            values=("SKILLED NURSING FACILITY", "REHAB", "CHRONIC/LONG TERM ACUTE CARE")),
    Concept("disposition", "home", _DISP + ": discharge home, with or without home health care",
            values=("HOME", "HOME HEALTH CARE")),
    Concept("disposition", "transfer from another facility", _DISP + ": arrival as a transfer from another hospital "
            "or from a skilled nursing facility", values=("TRANSFER FROM HOSPITAL", "TRANSFER FROM SKILLED NURSING FACILITY")),
)

# transfers.careunit values that are the emergency department, not a ward or unit
ED_CAREUNITS: tuple[str, ...] = ("Emergency Department", "Emergency Department Observation")

# ---------------------------------------------------------------- microbiology specimens
_SPEC = DICT + " microbiologyevents.spec_type_desc"
define(
    Concept("specimen", "blood culture", _SPEC + " (aerobic/anaerobic and Myco/F lytic bottles)",
            values=("BLOOD CULTURE", "BLOOD CULTURE ( MYCO/F LYTIC BOTTLE)"),
            variants=("blood cx", "BCx", "bld culture")),
    Concept("specimen", "urine culture", _SPEC, values=("URINE",), variants=("urine cx", "UCx", "urine culure")),
    Concept("specimen", "sputum culture", _SPEC, values=("SPUTUM",), variants=("sputum cx", "sputim culture")),
    Concept("specimen", "bronchoalveolar lavage culture", _SPEC + " (BAL and mini-BAL)",
            values=("BRONCHOALVEOLAR LAVAGE", "Mini-BAL"), variants=("BAL", "BAL cx")),
    Concept("specimen", "MRSA screening swab", _SPEC, values=("MRSA SCREEN",), variants=("MRSA swab", "MRSA screen")),
    Concept("specimen", "stool culture", _SPEC, values=("STOOL",), variants=("stool cx", "stoll culture")),
    Concept("specimen", "CSF culture", _SPEC, values=("CSF;SPINAL FLUID",), variants=("LP culture", "spinal fluid cx")),
    Concept("specimen", "pleural fluid culture", _SPEC, values=("PLEURAL FLUID",), variants=("pleural cx",)),
    Concept("specimen", "peritoneal fluid culture", _SPEC, values=("PERITONEAL FLUID",),
            variants=("ascites culture", "peritoneal cx")),
)

# ---------------------------------------------------------------- organisms
_ORG = DICT + " microbiologyevents.org_name"
define(
    Concept("organism", "Escherichia coli", _ORG, values=("ESCHERICHIA COLI",), variants=("E. coli", "E coli")),
    Concept("organism", "Staphylococcus aureus", _ORG + " (coagulase-positive staphylococci)",
            values=("STAPH AUREUS COAG +", "STAPHYLOCOCCUS AUREUS"), variants=("S. aureus", "staph aureus", "SA")),
    Concept("organism", "Klebsiella pneumoniae", _ORG, values=("KLEBSIELLA PNEUMONIAE",),
            variants=("K. pneumoniae", "Klebsiella", "klebsiela")),
    Concept("organism", "Pseudomonas aeruginosa", _ORG, values=("PSEUDOMONAS AERUGINOSA",),
            variants=("P. aeruginosa", "pseudomonas", "pseudomonas aeroginosa")),
    Concept("organism", "Proteus mirabilis", _ORG, values=("PROTEUS MIRABILIS",), variants=("P. mirabilis", "proteus")),
    Concept("organism", "Enterococcus species", _ORG + " (unspeciated, E. faecalis, E. faecium)",
            values=("ENTEROCOCCUS SP.", "ENTEROCOCCUS FAECALIS", "ENTEROCOCCUS FAECIUM"),
            variants=("enterococcus", "enterococci", "enterococus")),
    Concept("organism", "coagulase-negative staphylococci", _ORG,
            values=("STAPHYLOCOCCUS, COAGULASE NEGATIVE",), variants=("CoNS", "coag-neg staph")),
    Concept("organism", "Enterobacter cloacae complex", _ORG, values=("ENTEROBACTER CLOACAE COMPLEX", "ENTEROBACTER CLOACAE"),
            variants=("E. cloacae", "enterobacter")),
    Concept("organism", "yeast", _ORG, values=("YEAST",), variants=("yeasts", "yeast isolate")),
)

# ---------------------------------------------------------------- diagnoses (ICD code prefixes)
_DX = (MIMIC_CODE + "comorbidity/charlson.sql style ICD-9/ICD-10 prefixes; codes stored without dots; "
       "checked against d_icd_diagnoses")
define(
    Concept("diagnosis", "sepsis", _DX + "; sepsis, severe sepsis, septic shock, septicemia",
            icd=((10, "A40"), (10, "A41"), (10, "R652"), (9, "038"), (9, "99591"), (9, "99592"), (9, "78552")),
            variants=("sepsis NOS", "sepis", "septicemia")),
    Concept("diagnosis", "acute kidney injury", _DX, icd=((10, "N17"), (9, "584")),
            variants=("AKI", "acute renal failure", "ARF (renal)")),
    Concept("diagnosis", "heart failure", _DX, icd=((10, "I50"), (9, "428")), variants=("CHF", "HF", "heart failur")),
    Concept("diagnosis", "pneumonia", _DX, icd=((10, "J12"), (10, "J13"), (10, "J14"), (10, "J15"), (10, "J16"),
                                                 (10, "J17"), (10, "J18"), (9, "480"), (9, "481"), (9, "482"),
                                                 (9, "483"), (9, "484"), (9, "485"), (9, "486")),
            variants=("PNA", "pnuemonia", "PNA (pneumonia)")),
    Concept("diagnosis", "type 2 diabetes", _DX + "; ICD-9 250.x0/250.x2", icd=((10, "E11"),) + tuple(
        (9, f"250{d}{t}") for d in range(10) for t in (0, 2)), variants=("T2DM", "DM2", "type II diabetes")),
    Concept("diagnosis", "COPD", _DX, icd=((10, "J44"), (9, "491"), (9, "492"), (9, "496")),
            variants=("chronic obstructive pulmonary disease", "emphysema/COPD", "COPD NOS")),
    Concept("diagnosis", "gastrointestinal hemorrhage", _DX, icd=((10, "K920"), (10, "K921"), (10, "K922"), (9, "578")),
            variants=("GI bleed", "GIB", "GI hemorrhage")),
    Concept("diagnosis", "ischemic stroke", _DX + "; ICD-9 433.x1/434.x1", icd=((10, "I63"),) + tuple(
        (9, f"43{a}{d}1") for a in (3, 4) for d in range(10)), variants=("CVA (ischemic)", "cerebral infarction", "ischaemic stroke")),
    Concept("diagnosis", "essential hypertension", _DX, icd=((10, "I10"), (9, "401")),
            variants=("HTN", "hypertension", "high blood pressure")),
    Concept("diagnosis", "atrial fibrillation", _DX + " (ICD-10 I48 without the atrial-flutter codes I48.3/I48.4/I48.92)",
            icd=((10, "I480"), (10, "I481"), (10, "I482"), (10, "I4891"), (9, "42731")),
            variants=("afib", "AF", "A-fib")),
    Concept("diagnosis", "urinary tract infection", _DX + " (site not specified)", icd=((10, "N390"), (9, "5990")),
            variants=("UTI", "urinary tract infecton")),
    Concept("diagnosis", "cirrhosis of the liver", _DX, icd=((10, "K703"), (10, "K746"), (9, "5712"), (9, "5715"),
                                                             (9, "5716")),
            variants=("cirrhosis", "liver cirrhosis", "cirrosis")),
    Concept("diagnosis", "acute respiratory failure", _DX, icd=((10, "J960"), (10, "J962"), (9, "51881"), (9, "51884")),
            variants=("ARF", "acute resp failure", "acute respiratory faliure")),
    Concept("diagnosis", "chronic kidney disease", _DX, icd=((10, "N18"), (9, "585")),
            variants=("CKD", "chronic renal disease", "chronic kidney diseas")),
)


def register_variants() -> None:
    """Register every concept's clinician variants with the lexical-variation lexicon."""
    from ehrgym.bench.noise.lexicon import add_variants

    for domain in DOMAINS:
        for c in concepts(domain):
            if c.variants:
                add_variants(c.name, *c.variants)


register_variants()
