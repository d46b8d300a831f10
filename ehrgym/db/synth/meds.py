"""Medications: the drug catalog, the per-admission medication plan, and the tables
``prescriptions``, ``pharmacy``, ``emar`` and ``emar_detail``.

A plan is a set of *orders* (admission, drug, start, stop); a drug given for a whole stay may be
re-ordered (dose changes), giving consecutive orders. Every administration (eMAR) lies inside its
order, hence inside its admission.

Besides the condition-driven, supportive and ICU drugs (:data:`CORE_KEYS`, written in the catalog's
spelling variants, e.g. 'CefTRIAXone' / 'CeftriaXONE'), each admission gets *background* orders of the
demo's drug catalog by frequency (never anticoagulants, insulin, vasoactives, sedation or antibiotics:
:data:`BACKGROUND_EXCLUDED`), charted in the eMAR at a share of the demo's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ehrgym.db.synth import catalog
from ehrgym.db.synth.common import DAY, HOUR, MINUTE, NAT, ceil_to, expand, lexorder, rank_within, uniform_int
from ehrgym.db.synth.conditions import CONDITION_KEYS, CONDITIONS
from ehrgym.db.synth.timeline import Cohort
from ehrgym.db.synth.writer import TableData, cat, const, floats, ints, ts


@dataclass(frozen=True)
class Med:
    drug: str
    formulary: str
    gsn: str
    ndc: str
    strength: str
    dose: str
    dose_unit: str
    form_val: str
    form_unit: str
    per_day: float          # scheduled doses per 24 h; 0 = PRN, -1 = continuous infusion
    frequency: str
    route: str
    proc_type: str
    p: float = 0.85         # probability the drug is given when indicated
    days: tuple[float, float] | None = None  # course length; None = until discharge
    start_h: tuple[float, float] = (0.5, 8.0)
    avoid_with: tuple[str, ...] = ()  # conditions that contraindicate it (e.g. bleeding → no anticoagulant)
    event: str = "Administered"


MEDS: dict[str, Med] = {
    # antibiotics
    "vancomycin": Med("Vancomycin", "VANC1F", "009331", "00338355248", "1g Frozen Bag", "1000", "mg", "1", "BAG",
                      2, "Q12H", "IV", "IV Piggyback", 0.85, (3, 7), (0.3, 3)),
    "piperacillin_tazobactam": Med("Piperacillin-Tazobactam", "ZOSY4FPB", "040819", "00206886202",
                                   "4.5 g Frozen Bag", "4.5", "g", "1", "BAG", 3, "Q8H", "IV", "IV Piggyback", 0.55,
                                   (3, 7), (0.3, 3)),
    "cefepime": Med("CefePIME", "CEFE2I", "024094", "60505614604", "2g Vial", "2", "g", "1", "VIAL", 2, "Q12H", "IV",
                    "IV Piggyback", 0.4, (3, 7), (0.3, 4)),
    "meropenem": Med("Meropenem", "MERO1I", "026489", "00310032165", "1g Vial", "1000", "mg", "1", "VIAL", 3, "Q8H",
                     "IV", "IV Piggyback", 0.15, (3, 7), (4, 30)),
    "ceftriaxone": Med("CefTRIAXone", "CEFX1F", "059424", "00338500241", "1g Vial", "1", "gm", "1", "VIAL", 1,
                       "Q24H", "IV", "IV Piggyback", 0.6, (2, 5), (0.5, 4)),
    "azithromycin": Med("Azithromycin", "AZIT500I", "026721", "68084027801", "500 mg Vial", "500", "mg", "1", "VIAL",
                        1, "Q24H", "IV", "IV Piggyback", 0.5, (3, 5), (0.5, 4)),
    "ciprofloxacin": Med("Ciprofloxacin HCl", "CIPR500", "009509", "00172531110", "500mg Tab", "500", "mg", "1",
                         "TAB", 2, "Q12H", "PO/NG", "Unit Dose", 0.3, (3, 7), (1, 8)),
    "nitrofurantoin": Med("Nitrofurantoin Monohyd (MacroBID)", "NITR100", "008993", "47781030601", "100mg Capsule",
                          "100", "mg", "1", "CAP", 2, "Q12H", "PO", "Unit Dose", 0.2, (3, 5), (1, 8)),
    # cardiovascular
    "metoprolol": Med("Metoprolol Tartrate", "METO25", "050631", "51079025520", "25mg Tablet", "25", "mg", "1", "TAB",
                      2, "BID", "PO/NG", "Unit Dose", 0.8),
    "metoprolol_succ": Med("Metoprolol Succinate XL", "TOPR25", "047586", "68084065901", "50mg XL Tab", "50", "mg",
                           "1", "TAB", 1, "DAILY", "PO", "Unit Dose", 0.5),
    "carvedilol": Med("Carvedilol", "CARV125", "022233", "51079093120", "12.5mg Tablet", "12.5", "mg", "1", "TAB",
                      2, "BID", "PO/NG", "Unit Dose", 0.35),
    "furosemide": Med("Furosemide", "FURO40I", "008208", "51079007220", "40mg/4mL Vial", "40", "mg", "1", "VIAL",
                      2, "BID", "IV", "Unit Dose", 0.9, (2, 5), (0.5, 6)),
    "spironolactone": Med("Spironolactone", "SPIR25", "006817", "68084020601", "25mg Tablet", "25", "mg", "1", "TAB",
                          1, "DAILY", "PO/NG", "Unit Dose", 0.5),
    "lisinopril": Med("Lisinopril", "LISI5", "000393", "51079098120", "5mg Tablet", "10", "mg", "2", "TAB", 1,
                      "DAILY", "PO/NG", "Unit Dose", 0.55, start_h=(6, 24), avoid_with=("aki", "sepsis")),
    "amlodipine": Med("amLODIPine", "AMLO5", "016926", "68084025901", "5mg Tablet", "5", "mg", "1", "TAB", 1,
                      "DAILY", "PO/NG", "Unit Dose", 0.5, start_h=(6, 24), avoid_with=("sepsis",)),
    "apixaban": Med("Apixaban", "APIX5", "066852", "00003089421", "5 mg Tablet", "5", "mg", "1", "TAB", 2, "BID",
                    "PO/NG", "Unit Dose", 0.6, start_h=(4, 24), avoid_with=("gi_bleed",)),
    "heparin_drip": Med("Heparin", "HEPAPREMIX", "060301", "00264958720", "25,000 unit Premix Bag", "25000", "UNIT",
                        "1", "BAG", -1, "ASDIR", "IV DRIP", "IV Large Volume", 0.25, (1, 3), (1, 12),
                        avoid_with=("gi_bleed",)),
    "aspirin": Med("Aspirin", "ASA81", "004380", "00904404073", "81mg Tab", "81", "mg", "1", "TAB", 1, "DAILY",
                   "PO/NG", "Unit Dose", 0.85, avoid_with=("gi_bleed",)),
    "atorvastatin": Med("Atorvastatin", "ATOR80", "029967", "63304082790", "80mg Tablet", "80", "mg", "1", "TAB", 1,
                        "DAILY", "PO/NG", "Unit Dose", 0.85, start_h=(4, 24)),
    # endocrine, respiratory, GI, neuro
    "insulin": Med("Insulin", "INRHI", "001723", "00002821501", "100 Units / mL - 10 mL Vial", "0", "UNIT", "1",
                   "VIAL", 4, "QACHS", "SC", "Unit Dose", 0.9, event="Administered"),
    "metformin": Med("MetFORMIN (Glucophage)", "METF500", "013318", "51079097220", "500mg Tablet", "500", "mg", "1",
                     "TAB", 2, "BID", "PO", "Unit Dose", 0.3, start_h=(12, 48), avoid_with=("aki", "sepsis")),
    "albuterol": Med("Albuterol 0.083% Neb Soln", "ALBU3H", "005039", "49502069724", "0.083%;3mL Vial", "1", "NEB",
                     "1", "VIAL", 4, "Q6H", "IH", "Unit Dose", 0.9),
    "ipratropium": Med("Ipratropium Bromide Neb", "IPRA2H", "021700", "00487980125", "2.5mL Vial", "1", "NEB", "1",
                       "VIAL", 4, "Q6H", "IH", "Unit Dose", 0.8),
    "prednisone": Med("PredniSONE", "PRED20", "006753", "00054872425", "20 mg Tablet", "40", "mg", "2", "TAB", 1,
                      "DAILY", "PO/NG", "Unit Dose", 0.5, (3, 5)),
    "tiotropium": Med("Tiotropium Bromide", "TIOT", "050714", "00597007575", "18mcg Capsule-Inhalation Device", "1",
                      "CAP", "1", "CAP", 1, "DAILY", "IH", "Unit Dose", 0.4),
    "lactulose": Med("Lactulose", "LACT30L", "068217", "00121457735", "20g/30mL Cup", "30", "mL", "1", "UDCUP", 3,
                     "TID", "PO/NG", "Unit Dose", 0.85),
    "rifaximin": Med("Rifaximin", "RIFA550", "063466", "65649030303", "550 mg Tablet", "550", "mg", "1", "TAB", 2,
                     "BID", "PO/NG", "Unit Dose", 0.6),
    "octreotide": Med("Octreotide Acetate", "OCTR100I", "053978", "00703331104", "100 mcg Vial", "100", "mcg", "1",
                      "mL", 3, "Q8H", "SC", "Unit Dose", 0.35, (2, 4), (0.5, 6)),
    "pantoprazole_iv": Med("Pantoprazole", "PANT40I", "027462", "00008092355", "40 mg Vial", "40", "mg", "1", "VIAL",
                           2, "Q12H", "IV", "Unit Dose", 0.95, (2, 4), (0.3, 3)),
    "levetiracetam": Med("LevETIRAcetam", "LEVE500", "044633", "50474059540", "500mg/5mL Vial", "500", "mg", "5",
                         "mL", 2, "Q12H", "IV", "Unit Dose", 0.2),
    "sodium_bicarbonate": Med("Sodium Bicarbonate", "SODB650", "002127", "00904200600", "650mg Tablet", "650", "mg",
                              "1", "TAB", 2, "BID", "PO/NG", "Unit Dose", 0.3, (2, 4), (2, 24)),
    "nacl_bolus": Med("Sodium Chloride 0.9%", "NSLV", "001210", "00338004904", "Floor Stock Bag", "1000", "mL",
                      "1000", "mL", 1, "ONCE", "IV", "IV Large Volume", 0.8, (1, 2), (0.2, 2)),
    # ICU infusions
    "norepinephrine": Med("NORepinephrine", "NORE8/250", "066452", "61553015311", "8 mg / 250 mL Premix Bag", "8",
                          "mg", "1", "BAG", -1, "ASDIR", "IV DRIP", "IV Large Volume", 1.0),
    "phenylephrine": Med("PHENYLephrine", "PHEN12SYR", "005066", "00409180001", "10mg/1mL Vial", "60", "mg", "6",
                         "VIAL", -1, "ASDIR", "IV DRIP", "IV Large Volume", 1.0),
    "propofol": Med("Propofol", "PROP100IG", "021541", "63323026965", "1000 mg / 100 mL Vial", "1000", "mg", "1",
                    "VIAL", -1, "ASDIR", "IV DRIP", "IV Large Volume", 1.0),
    # supportive care most inpatients get
    "heparin_sc": Med("Heparin", "HEPA5I", "006549", "63323026201", "5000 Units / mL- 1mL Vial", "5000", "UNIT", "1",
                      "mL", 3, "Q8H", "SC", "Unit Dose", 0.7, avoid_with=("gi_bleed",)),
    "acetaminophen": Med("Acetaminophen", "ACET325", "004489", "00904198261", "325mg Tablet", "650", "mg", "2", "TAB",
                         0, "Q6H:PRN", "PO/NG", "Unit Dose", 0.8),
    "docusate": Med("Docusate Sodium", "DOCU100", "003009", "00904224461", "100mg Capsule", "100", "mg", "1", "CAP",
                    2, "BID", "PO/NG", "Unit Dose", 0.6),
    "senna": Med("Senna", "SENN187", "002922", "57896045208", "8.6 mg Tablet", "8.6", "mg", "1", "TAB", 0, "BID:PRN",
                 "PO/NG", "Unit Dose", 0.6),
    "polyethylene_glycol": Med("Polyethylene Glycol", "PEG17", "060296", "00904693186", "17 g Powder Packet", "17",
                               "g", "1", "PKT", 0, "DAILY:PRN", "PO/NG", "Unit Dose", 0.4),
    "nacl_flush": Med("Sodium Chloride 0.9%  Flush", "NACLFLUSH", "", "0", "10 mL Syringe", "3", "mL", "0.3", "SYR",
                      3, "Q8H", "IV", "Unit Dose", 0.85, event="Flushed"),
    "ondansetron": Med("Ondansetron", "ONDA4I", "016392", "51079052420", "2mg/mL-2mL", "4", "mg", "1", "VIAL", 0,
                       "Q8H:PRN", "IV", "Unit Dose", 0.5),
    "potassium_chloride": Med("Potassium Chloride", "KCL20P", "001262", "76439034310", "10mEq ER Tablet", "40", "mEq",
                              "4", "TAB", 0, "PRN", "PO", "Unit Dose", 0.5),
    "magnesium_sulfate": Med("Magnesium Sulfate", "MAG2PM", "001310", "00409672924", "2 g / 50 mL Premix Bag", "2",
                             "gm", "1", "BAG", 0, "PRN", "IV", "IV Piggyback", 0.45),
    "pantoprazole": Med("Pantoprazole", "PANT40", "027462", "00904647461", "40 mg Tablet", "40", "mg", "1", "TAB", 1,
                        "Q24H", "PO", "Unit Dose", 0.35, avoid_with=("gi_bleed",)),
}

SUPPORTIVE: tuple[str, ...] = ("heparin_sc", "acetaminophen", "docusate", "senna", "polyethylene_glycol", "nacl_flush",
                               "ondansetron", "potassium_chloride", "magnesium_sulfate", "pantoprazole")
CORE_KEYS: tuple[str, ...] = tuple(MEDS)
"""The condition-driven, supportive and ICU drugs; the background drugs of the catalog follow them."""

BACKGROUND_EXCLUDED = (
    # drugs a condition or the ICU module decides (anticoagulants, insulin, vasoactives, sedation, antibiotics):
    # never background, so that they keep following their indication
    "heparin", "enoxaparin", "warfarin", "apixaban", "rivaroxaban", "dabigatran", "argatroban", "bivalirudin",
    "fondaparinux", "alteplase", "insulin", "norepinephrine", "epinephrine", "phenylephrine", "vasopressin",
    "dopamine", "dobutamine", "milrinone", "propofol", "cillin", "cef", "penem", "floxacin", "mycin", "vancomycin",
    "metronidazole", "sulfameth", "bactrim", "doxycycline", "linezolid", "daptomycin", "nitrofurantoin",
    "aztreonam", "tazobactam", "octreotide", "lactulose", "rifaximin",
)
BACKGROUND_PER_ADMISSION = 21.0
"""Mean background drug orders per admission (catalog drugs by demo frequency): MIMIC-IV has about 37
prescriptions per admission."""
MAX_BACKGROUND_DOSES_PER_DAY = 6.0
BACKGROUND_EMAR_SCALE = 0.4
"""The core drugs are always charted in the eMAR; background orders are charted at 0.4 × the demo's share of
their drug, which keeps eMAR rows per admission at MIMIC-IV's rate (about 78)."""


def _background_meds() -> tuple[dict[str, Med], np.ndarray, np.ndarray]:
    """Catalog drugs usable as background orders (as Med entries), their weights and eMAR shares."""
    core = {catalog.drug_key(m.drug) for m in MEDS.values()}
    out: dict[str, Med] = {}
    weights, p_emar = [], []
    for r in catalog.drugs():
        key = catalog.drug_key(r["drug"])
        if key in core or any(word in key for word in BACKGROUND_EXCLUDED):
            continue
        per_day = min(float(r["doses_per_24_hrs"] or 0), MAX_BACKGROUND_DOSES_PER_DAY)
        days = max(float(r["median_days"] or 1.0), 0.2)
        out[f"catalog:{r['drug']}"] = Med(
            r["drug"], r["formulary_drug_cd"], r["gsn"], r["ndc"] or "0", r["prod_strength"], r["dose_val_rx"],
            r["dose_unit_rx"], r["form_val_disp"], r["form_unit_disp"], per_day, r["frequency"] or "ASDIR",
            r["route"] or "PO", r["proc_type"] or "Unit Dose", 1.0, (0.5 * days, min(1.5 * days, 10.0)),
            (0.5, 72.0))
        weights.append(float(r["rows"]))
        p_emar.append(float(r["p_emar"] or 0.0))
    return out, np.array(weights), np.array(p_emar)


_BACKGROUND, BACKGROUND_WEIGHT, BACKGROUND_P_EMAR = _background_meds()
MEDS.update(_BACKGROUND)
MED_KEYS: tuple[str, ...] = tuple(MEDS)
N_CORE = len(CORE_KEYS)


def _variants() -> tuple[list[str], list[tuple[np.ndarray, np.ndarray]]]:
    """Drug strings and, per drug of MED_KEYS, (name indices, cumulative weights) of its spellings: a core
    drug is written as in the catalog's spelling variants of it ('CefTRIAXone', 'CeftriaXONE'), by frequency."""
    by_key: dict[str, list[tuple[str, float]]] = {}
    for r in catalog.drugs():
        by_key.setdefault(catalog.drug_key(r["drug"]), []).append((r["drug"], float(r["rows"])))
    names: list[str] = []
    index: dict[str, int] = {}
    choices = []
    for k in MED_KEYS:
        drug = MEDS[k].drug
        spellings = by_key.get(catalog.drug_key(drug), []) if k in CORE_KEYS else []
        if drug not in {s for s, _ in spellings}:
            spellings = [(drug, max([w for _, w in spellings], default=1.0))] + spellings
        ids = np.array([index.setdefault(s, len(index)) for s, _ in spellings])
        w = np.cumsum([w for _, w in spellings])
        choices.append((ids, w / w[-1]))
    names = list(index)
    return names, choices


DRUG_NAMES, _SPELLINGS = _variants()


def _col(attr: str) -> list:
    return [getattr(MEDS[k], attr) for k in MED_KEYS]


@dataclass
class MedPlan:
    """One row per order."""
    adm: np.ndarray
    med: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    last: np.ndarray       # last order of its (admission, drug) course
    ordertime: np.ndarray  # when the order was entered (poe.ordertime = pharmacy.entertime)
    pharmacy_id: np.ndarray
    provider: np.ndarray
    name: np.ndarray       # index into DRUG_NAMES: the drug string written on the order
    charted: np.ndarray    # the order's administrations are charted in the eMAR


def plan(rng: np.random.Generator, c: Cohort) -> MedPlan:
    m = c.n_admissions
    n_med = N_CORE
    indicated = np.zeros((m, n_med), dtype=bool)
    for k, cond in enumerate(CONDITIONS):
        for key in cond.meds:
            indicated[:, MED_KEYS.index(key)] |= c.cond[:, k]
    for key in SUPPORTIVE:
        indicated[:, MED_KEYS.index(key)] = True
    indicated[:, MED_KEYS.index("norepinephrine")] = c.shock
    indicated[:, MED_KEYS.index("phenylephrine")] = c.shock & (rng.random(m) < 0.35)
    indicated[:, MED_KEYS.index("propofol")] = c.vent
    for j, key in enumerate(CORE_KEYS):
        for avoid in MEDS[key].avoid_with:
            indicated[:, j] &= ~c.cond[:, CONDITION_KEYS.index(avoid)]
    given = indicated & (rng.random((m, n_med)) < np.array(_col("p")[:N_CORE])[None, :])
    adm, med = np.nonzero(given)
    # background drugs of the catalog, by frequency, no repeats within an admission
    adm_b, _ = expand(rng.poisson(BACKGROUND_PER_ADMISSION, m))
    cdf = np.cumsum(BACKGROUND_WEIGHT)
    med_b = N_CORE + np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(adm_b.size), side="right"),
                                cdf.size - 1)
    o = lexorder((med_b, adm_b))
    adm_b, med_b = adm_b[o], med_b[o]
    fresh = np.ones(adm_b.size, dtype=bool)
    fresh[1:] = (adm_b[1:] != adm_b[:-1]) | (med_b[1:] != med_b[:-1])
    adm, med = np.concatenate([adm, adm_b[fresh]]), np.concatenate([med, med_b[fresh]])
    n = adm.size
    start_lo = np.array([MEDS[k].start_h[0] for k in MED_KEYS])[med]
    start_hi = np.array([MEDS[k].start_h[1] for k in MED_KEYS])[med]
    start = c.admittime[adm] + np.floor((start_lo + rng.random(n) * (start_hi - start_lo)) * 60).astype(np.int64) * MINUTE
    # ICU infusions follow their physiological window
    icu_windows = {"norepinephrine": (c.shock_start, c.shock_end), "phenylephrine": (c.shock_start, c.shock_end),
                   "propofol": (c.vent_start, c.vent_end)}
    course = np.array([np.nan if MEDS[k].days is None else 1.0 for k in MED_KEYS])[med]
    days = [MEDS[k].days for k in MED_KEYS]
    d_lo = np.array([0 if d is None else d[0] for d in days])[med]
    d_hi = np.array([0 if d is None else d[1] for d in days])[med]
    end_of_stay = c.dischtime[adm] - uniform_int(rng, 0, 180, n) * MINUTE
    course_end = start + np.floor((d_lo + rng.random(n) * (d_hi - d_lo)) * 24 * 60).astype(np.int64) * MINUTE
    stop = np.where(np.isnan(course), end_of_stay, np.minimum(course_end, end_of_stay))
    for key, (w0, w1) in icu_windows.items():
        sel = med == MED_KEYS.index(key)
        start = np.where(sel, w0[adm] + 10 * MINUTE, start)
        stop = np.where(sel, w1[adm], stop)
    ok = stop - start >= HOUR
    adm, med, start, stop = adm[ok], med[ok], start[ok], stop[ok]
    # re-orders: split long courses into consecutive orders
    long_course = (stop - start) > 2 * DAY
    n_orders = np.where(long_course, 1 + np.minimum(rng.poisson(1.0, adm.size), 3), 1)
    parent, pos = expand(n_orders)
    cuts = np.sort(rng.random((adm.size, 3)), axis=1)
    frac_lo = np.where(pos == 0, 0.0, cuts[parent, np.maximum(pos - 1, 0)])
    frac_hi = np.where(pos == n_orders[parent] - 1, 1.0, cuts[parent, np.minimum(pos, 2)])
    # keep fractions increasing within a course (cuts beyond n_orders-1 are ignored)
    dur = stop[parent] - start[parent]
    o_start = start[parent] + (np.floor(frac_lo * dur / MINUTE)).astype(np.int64) * MINUTE
    o_stop = start[parent] + (np.floor(frac_hi * dur / MINUTE)).astype(np.int64) * MINUTE
    o_stop = np.where(pos == n_orders[parent] - 1, stop[parent], o_stop)
    good = o_stop - o_start >= 30 * MINUTE
    parent, pos, o_start, o_stop = parent[good], pos[good], o_start[good], o_stop[good]
    last = np.ones(parent.size, dtype=bool)
    last[:-1] = parent[1:] != parent[:-1]
    a = adm[parent]
    order = lexorder((med[parent], o_start, a))
    a, md, o_start, o_stop, last = a[order], med[parent][order], o_start[order], o_stop[order], last[order]
    pharmacy_id = rng.permutation(np.arange(a.size)) * 11 + 10_000_000 + rng.integers(0, 11, a.size)
    provider = rng.integers(0, len(c.providers), a.size)
    ordertime = np.maximum(o_start - uniform_int(rng, 5, 60, a.size) * MINUTE, c.admittime[a])
    # order entry is stamped to the second in MIMIC-IV (poe.ordertime, pharmacy.entertime), unlike charting
    ordertime += np.minimum(rng.integers(0, 60, a.size), np.maximum(o_start - ordertime - 1, 0))
    # the drug string: one spelling per (admission, drug) course, by the catalog's frequencies
    name = np.zeros(a.size, dtype=np.int64)
    u = (rng.random(m)[a] + md * 0.6180339887) % 1.0  # one draw per (admission, drug)
    for j in np.unique(md):
        sel = md == j
        ids, cdf = _SPELLINGS[j]
        name[sel] = ids[np.minimum(np.searchsorted(cdf, u[sel], side="right"), ids.size - 1)]
    p_emar = np.concatenate([np.ones(N_CORE), BACKGROUND_P_EMAR * BACKGROUND_EMAR_SCALE])
    charted = rng.random(a.size) < p_emar[md]
    return MedPlan(a, md, o_start, o_stop, last, ordertime, pharmacy_id, provider, name, charted)


def _administrations(rng: np.random.Generator, p: MedPlan):
    """(order index, scheduled time or NAT, charttime, event code) of every eMAR event."""
    per_day = np.array(_col("per_day"), dtype=float)[p.med]
    per_day = np.where(p.charted, per_day, np.nan)  # NaN: no eMAR rows for this order
    dur = p.stop - p.start
    # scheduled doses
    sched = per_day > 0
    interval = np.where(sched, np.floor(24 * HOUR / np.where(sched, per_day, 1)), DAY).astype(np.int64)
    first = ceil_to(p.start, HOUR)
    n_sched = np.where(sched & (first <= p.stop), (p.stop - first) // interval + 1, 0)
    n_sched = np.minimum(n_sched, 84)
    o1, k1 = expand(n_sched)
    sched_t = first[o1] + k1 * interval[o1]
    # PRN doses
    prn = per_day == 0
    n_prn = np.where(prn, rng.poisson(np.maximum(dur / DAY, 0.2) * 1.2), 0)
    o2, _ = expand(n_prn)
    prn_t = p.start[o2] + (rng.random(o2.size) * dur[o2]).astype(np.int64)
    # infusions: started and stopped
    infusion = per_day < 0
    o3 = np.repeat(np.flatnonzero(infusion), 2)
    inf_t = np.where(np.arange(o3.size) % 2 == 0, p.start[o3], p.stop[o3])
    inf_ev = np.where(np.arange(o3.size) % 2 == 0, 3, 4)  # Started, Stopped

    order_idx = np.concatenate([o1, o2, o3])
    scheduled = np.concatenate([sched_t, np.full(o2.size, NAT), inf_t])
    base_t = np.concatenate([sched_t + uniform_int(rng, -20, 45, o1.size) * MINUTE, prn_t, inf_t])
    chart = np.clip(floor_to_minute(base_t), p.start[order_idx], p.stop[order_idx])
    u = rng.random(order_idx.size)
    default_event = np.array([0 if MEDS[k].event == "Administered" else 5 for k in MED_KEYS])[p.med[order_idx]]
    sliding = p.med[order_idx] == MED_KEYS.index("insulin")
    event = np.where(u < 0.05, 1, default_event)                        # Not Given
    event = np.where(sliding & (u > 0.75), 2, event)                     # Not Given per Sliding Scale
    event = np.concatenate([event[: o1.size + o2.size], inf_ev])
    return order_idx, scheduled, chart, event


def floor_to_minute(t: np.ndarray) -> np.ndarray:
    return t - np.mod(t, MINUTE)


EVENTS = ("Administered", "Not Given", "Not Given per Sliding Scale", "Started", "Stopped", "Flushed")


def generate(rng: np.random.Generator, c: Cohort, p: MedPlan, poe_seq: np.ndarray) -> list[TableData]:
    """prescriptions, pharmacy, emar, emar_detail for a plan whose orders got ``poe_seq`` numbers."""
    n = p.adm.size
    subj = c.subject_id[c.pat[p.adm]]
    status = np.where(p.last & (p.stop >= c.dischtime[p.adm] - 3 * HOUR), 0, np.where(p.last, 1, 2))
    entertime = p.ordertime
    verified = np.minimum(entertime + uniform_int(rng, 60, 30 * 60, n), p.stop)
    per_day = np.array(_col("per_day"), dtype=float)[p.med]
    prescriptions = TableData("prescriptions", {
        "subject_id": ints(subj),
        "hadm_id": ints(c.hadm_id[p.adm]),
        "pharmacy_id": ints(p.pharmacy_id),
        "poe_seq": ints(poe_seq),
        "order_provider_id": cat(p.provider, c.providers),
        "starttime": ts(p.start),
        "stoptime": ts(p.stop),
        "drug_type": const("MAIN", n),
        "drug": cat(p.name, DRUG_NAMES),
        "formulary_drug_cd": cat(p.med, _col("formulary")),
        "gsn": cat(p.med, [g or None for g in _col("gsn")]),
        "ndc": cat(p.med, _col("ndc")),
        "prod_strength": cat(p.med, _col("strength")),
        "dose_val_rx": cat(p.med, _col("dose")),
        "dose_unit_rx": cat(p.med, _col("dose_unit")),
        "form_val_disp": cat(p.med, _col("form_val")),
        "form_unit_disp": cat(p.med, _col("form_unit")),
        "doses_per_24_hrs": floats(np.maximum(per_day, 0), null=per_day <= 0),
        "route": cat(p.med, _col("route")),
    }, exprs={"poe_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(poe_seq AS VARCHAR)"})
    pharmacy = TableData("pharmacy", {
        "subject_id": ints(subj),
        "hadm_id": ints(c.hadm_id[p.adm]),
        "pharmacy_id": ints(p.pharmacy_id),
        "poe_seq": ints(poe_seq),
        "starttime": ts(p.start),
        "stoptime": ts(p.stop),
        "medication": cat(p.name, DRUG_NAMES),
        "proc_type": cat(p.med, _col("proc_type")),
        "status": cat(status, ["Discontinued via patient discharge", "Discontinued",
                               "Inactive (Due to a change order)"]),
        "entertime": ts(entertime),
        "verifiedtime": ts(verified),
        "route": cat(p.med, _col("route")),
        "frequency": cat(p.med, _col("frequency")),
        "disp_sched": cat(p.med, ["08, 20" if f in ("BID", "Q12H") else None for f in _col("frequency")]),
        "sliding_scale": cat(np.where(p.med == MED_KEYS.index("insulin"), 0, -1), ["Y"]),
        "doses_per_24_hrs": floats(np.maximum(per_day, 0), null=per_day <= 0),
        "dispensation": cat((p.pharmacy_id % 3 == 0).astype(np.int64), ["Omnicell", "Floor Stock Item"]),
    }, exprs={"poe_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(poe_seq AS VARCHAR)"})

    o, scheduled, chart, event = _administrations(rng, p)
    store = np.minimum(chart + uniform_int(rng, 0, 15, o.size) * MINUTE, c.dischtime[p.adm[o]])
    e_subj = subj[o]
    order = lexorder((p.med[o], chart, e_subj))
    o, scheduled, chart, event, store, e_subj = (o[order], scheduled[order], chart[order], event[order],
                                                 store[order], e_subj[order])
    emar_seq = rank_within(e_subj) + 1
    n_e = o.size
    emar = TableData("emar", {
        "subject_id": ints(e_subj),
        "hadm_id": ints(c.hadm_id[p.adm[o]]),
        "emar_seq": ints(emar_seq),
        "poe_seq": ints(poe_seq[o]),
        "pharmacy_id": ints(p.pharmacy_id[o]),
        "enter_provider_id": cat(np.where(rng.random(n_e) < 0.3, rng.integers(0, len(c.providers), n_e), -1),
                                 c.providers),
        "charttime": ts(chart),
        "medication": cat(p.name[o], DRUG_NAMES),
        "event_txt": cat(event, EVENTS),
        "scheduletime": ts(scheduled),
        "storetime": ts(store),
    }, exprs={"emar_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(emar_seq AS VARCHAR)",
              "poe_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(poe_seq AS VARCHAR)"})

    # emar_detail: a parent row (administration) and a child row '1.1' (the dose given)
    e_idx = np.repeat(np.arange(n_e), 2)
    child = np.tile(np.array([False, True]), n_e)
    med = p.med[o][e_idx]
    given = np.isin(event[e_idx], [0, 3, 5])
    infusion = np.array(_col("per_day"))[med] < 0
    detail = TableData("emar_detail", {
        "subject_id": ints(e_subj[e_idx]),
        "emar_seq": ints(emar_seq[e_idx]),
        "parent_field_ordinal": cat(np.where(child, 0, -1), ["1.1"]),
        "administration_type": cat(np.where(child, -1, np.where(infusion, 1, 0)), ["Standard", "IV Infusion"]),
        "pharmacy_id": ints(p.pharmacy_id[o][e_idx]),
        "barcode_type": cat(np.where(child, -1, 0), ["if"]),
        "complete_dose_not_given": cat(np.where(child | given, -1, 0), ["Yes"]),
        "dose_due": cat(np.where(child, -1, med), _col("dose")),
        "dose_due_unit": cat(np.where(child, -1, med), _col("dose_unit")),
        "dose_given": cat(np.where(child, np.where(given, med, len(MED_KEYS)), -1), _col("dose") + ["0"]),
        "dose_given_unit": cat(np.where(child, med, -1), _col("dose_unit")),
        "product_amount_given": cat(np.where(child & given, med, -1), _col("form_val")),
        "product_unit": cat(np.where(child, med, -1), _col("form_unit")),
        "product_code": cat(np.where(child, med, -1), _col("formulary")),
        "product_description": cat(np.where(child, med, -1), _col("strength")),
        "route": cat(np.where(child, -1, med), _col("route")),
    }, exprs={"emar_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(emar_seq AS VARCHAR)"})
    return [prescriptions, pharmacy, emar, detail]
