"""Gold SQL of ten medication templates (``templates/medications.py``) against independent pandas computations.

Each function below answers one template's question from its words over the raw tables (``emar``, ``prescriptions``,
``pharmacy``, ``admissions``, ``diagnoses_icd``, ``inputevents``, ``icustays``, ``d_items``): drugs are matched by
their generic name at the start of the spelling (case and salt suffixes ignored, eye/ear/skin preparations left out;
heparin, insulin and lactulose by the curated lists of ``ehrgym.bench.concepts``, which no text rule reproduces),
antibiotic agents by name stems, ICU infusion items from ``d_items`` by label, care units by their names, doses as the
eMAR events that say a dose was administered, infusion hours as the union of the charted segments. The gold SQL and
the concept relations are neither run nor copied here. The first candidates the builder draws are checked on the
200-patient synthetic hospital and on the MIMIC-IV demo (skipped without it); two demo checks pin the definitions the
gold SQL was corrected to (delayed administrations are doses, overlapping segments count once), and one plausible
wrong definition is shown to disagree with the pandas computation, so the check is not vacuous.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.answers import answers_match
from ehrgym.bench.builder import Builder
from ehrgym.bench.concepts import get_concept
from ehrgym.bench.templates.medications import DOSE_GIVEN
from ehrgym.bench.templates.registry import get_template
from tests.gold_checks import Frames, assert_gold_on_demo, assert_gold_on_synth, disagreements, gold_value
from tests.test_bench_templates_episodes import _has_condition

IDS = ("medications.cohort_count_doses", "medications.cohort_mean_drip_amount",
       "medications.cohort_mean_hours_to_dose", "medications.cohort_share_on_drip",
       "medications.cohort_top_antibiotic", "medications.cohort_unit_mean_segment", "medications.count_doses",
       "medications.drip_hours", "medications.max_drip_amount", "medications.route",
       "medications.total_drip_amount", "medications.was_given")
NEW = [get_template(i) for i in IDS]
H = pd.Timedelta(hours=1)

# ---------------------------------------------------------------- drugs by name

# eye, ear and skin routes: not systemic
LOCAL_ROUTES = {"OU", "OS", "OD", "BOTH EYES", "LEFT EYE", "RIGHT EYE", "AU", "AS", "AD", "BOTH EARS", "LEFT EAR",
                "RIGHT EAR", "TP"}
# eye, ear and skin preparations, desensitisation protocols: named so in the spelling
LOCAL_FORM = re.compile(r"ophth|otic|cream|ointment|\boint\b|\bgel\b|desensiti")

# Drugs as clinicians name them -> the generic name at the start of the spelling (salts, release forms and brand
# names in parentheses follow it).
DRUGS = {name: rf"^{name}\b" for name in (
    "vancomycin", "cefepime", "meropenem", "ceftriaxone", "azithromycin", "ciprofloxacin", "nitrofurantoin",
    "cefazolin", "metronidazole", "levofloxacin", "norepinephrine", "phenylephrine", "propofol", "furosemide",
    "metoprolol", "apixaban", "pantoprazole", "octreotide", "aspirin", "atorvastatin", "levetiracetam", "prednisone")}
DRUGS["piperacillin-tazobactam"] = r"^piperacillin.?tazobactam"
DRUGS["sodium bicarbonate"] = r"^sodium bicarbonate\b"  # every route: the name claims none
# Curated lists no text rule reproduces (ehrgym.bench.concepts): heparin without line flushes, dwells and circuit
# heparin; insulin without pumps, U-500 and two protocol preparations; lactulose without enemas.
CURATED = {name: set(get_concept("drug", name).values) for name in ("heparin", "insulin", "lactulose")}

# Systemic antibacterial agents -> a pattern on the spelling (agents named as in the questions).
ANTIBIOTICS = {
    "amoxicillin": r"^amoxicillin$", "amoxicillin-clavulanate": r"^amoxicillin.?clavulan",
    "ampicillin": r"^ampicillin( sodium)?$", "ampicillin-sulbactam": r"^ampicillin.*sulbactam",
    "azithromycin": r"^azithromycin\b", "aztreonam": r"^aztreonam\b", "cefazolin": r"^cefazolin\b",
    "cefepime": r"^cefepime\b", "cefpodoxime": r"^cefpodoxime\b", "ceftazidime": r"^ceftazidime\b",
    "ceftriaxone": r"^ceftriaxone\b", "cephalexin": r"^cephalexin\b", "ciprofloxacin": r"^ciprofloxacin\b",
    "clarithromycin": r"^clarithromycin\b", "clindamycin": r"^clindamycin\b", "daptomycin": r"^daptomycin\b",
    "doxycycline": r"^doxycycline\b", "ertapenem": r"\bertapenem\b", "erythromycin": r"^erythromycin\b",
    "gentamicin": r"^gentamicin\b", "levofloxacin": r"^levofloxacin\b", "linezolid": r"^linezolid\b",
    "meropenem": r"^meropenem\b", "metronidazole": r"^metronidazole\b", "nafcillin": r"^nafcillin\b",
    "nitrofurantoin": r"^nitrofurantoin\b", "oxacillin": r"^oxacillin\b", "penicillin G": r"^penicillin g\b",
    "piperacillin-tazobactam": r"^piperacillin.?tazobactam", "rifampin": r"^rifampin\b",
    "trimethoprim-sulfamethoxazole": r"sulfameth.*trimethoprim|trimethoprim.*sulfameth",
    "tobramycin": r"^tobramycin\b", "vancomycin": r"^vancomycin\b",
    # systemic antibacterials no question names, counted all the same
    "trimethoprim": r"^trimethoprim$", "tigecycline": r"^tigecycline\b", "neomycin": r"^neomycin( sulfate)?$",
    "moxifloxacin": r"^moxifloxacin\b", "minocycline": r"^minocycline\b", "cefuroxime": r"^cefuroxime\b",
    "amikacin": r"^amikacin\b", "cefoxitin": r"^cefoxitin\b", "ceftaroline": r"^ceftaroline\b",
}


def _spelling(s: pd.Series) -> pd.Series:
    return s.fillna("").astype(str).str.strip().str.lower()


def _is_drug(spelling: pd.Series, name: str) -> pd.Series:
    """Spellings (lower-case, trimmed) of the drug a question names, eye/ear/skin preparations left out."""
    if name in CURATED:
        return spelling.isin(CURATED[name])
    if name not in DRUGS:
        pytest.fail(f"no written-out pattern for drug {name!r}")
    return spelling.str.contains(DRUGS[name]) & ~spelling.str.contains(LOCAL_FORM)


def _orders(f: Frames, drug: str) -> pd.DataFrame:
    """Prescriptions of a drug."""
    rx = f.prescriptions
    return rx[_is_drug(_spelling(rx.drug), drug)]


@lru_cache(maxsize=None)
def _agent(spelling: str) -> str | None:
    """The systemic antibacterial agent of a spelling, None for other drugs and local preparations."""
    if LOCAL_FORM.search(spelling):
        return None
    hits = [agent for agent, pattern in ANTIBIOTICS.items() if re.search(pattern, spelling)]
    assert len(hits) <= 1, (spelling, hits)
    return hits[0] if hits else None


def _administered(emar: pd.DataFrame) -> pd.Series:
    """eMAR events that record a dose given: 'Administered' and its delayed, partial, elsewhere and bolus forms."""
    return emar.event_txt.fillna("").str.contains("Administered") & ~emar.event_txt.fillna("").str.contains("Not ")


def _doses(f: Frames, drug: str) -> pd.DataFrame:
    """Administered eMAR doses of a drug."""
    emar = f.emar
    return emar[_administered(emar) & _is_drug(_spelling(emar.medication), drug)]


def _antibiotic_doses(f: Frames, agent: str) -> pd.DataFrame:
    emar = f.emar
    agents = _spelling(emar.medication).map(_agent)  # (cached per spelling)
    return emar[_administered(emar) & (agents == agent)]


def _year(ts: pd.Series) -> pd.Series:
    return pd.to_datetime(ts).dt.year


# ---------------------------------------------------------------- ICU infusions by d_items label

def _infusion_items(f: Frames, label: str) -> set[int]:
    """inputevents items whose d_items label is the drug's name (any concentration), charted in mg."""
    d = f.d_items
    lab = d.label.fillna("").str.lower().str.strip()
    hit = (d.linksto == "inputevents") & lab.str.match(rf"{re.escape(label.lower())}\b") & (d.unitname == "mg")
    return set(d[hit].itemid.astype(int))


def _infusion_rows(f: Frames, label: str) -> pd.DataFrame:
    """inputevents rows of the drug with their amount in mg (a mcg amount converted)."""
    iv = f.inputevents
    iv = iv[iv.itemid.isin(_infusion_items(f, label))].copy()
    per_mg = iv.amountuom.map({"mg": 1.0, "mcg": 0.001, "grams": 1000.0})
    iv["mg"] = iv.amount * per_mg
    return iv


def _hours_union(rows: pd.DataFrame) -> float:
    """Hours covered by the union of the rows' [starttime, endtime) intervals."""
    total, end = pd.Timedelta(0), None
    for r in rows.sort_values("starttime").itertuples():
        if r.endtime <= r.starttime:
            continue
        if end is None or r.starttime > end:
            total += r.endtime - r.starttime
            end = r.endtime
        elif r.endtime > end:
            total += r.endtime - end
            end = r.endtime
    return total / H


# ---------------------------------------------------------------- the questions

def was_given(f: Frames, p: dict) -> bool:
    """Whether the eMAR records a dose of the drug given in the admission, or an infusion of it started."""
    emar = f.emar
    given = _administered(emar) | (emar.event_txt == "Started")
    sel = emar[given & _is_drug(_spelling(emar.medication), p["drug"])]
    return bool(((sel.subject_id == p["subject_id"]) & (sel.hadm_id == p["hadm_id"])).any())


def count_doses(f: Frames, p: dict) -> int:
    sel = _doses(f, p["drug"])
    return int(((sel.subject_id == p["subject_id"]) & (sel.hadm_id == p["hadm_id"])).sum())


def cohort_count_doses(f: Frames, p: dict) -> int:
    adm = f.admissions
    in_year = set(adm[_year(adm.admittime) == p["year"]].hadm_id)
    return int(_doses(f, p["drug"]).hadm_id.isin(in_year).sum())


def cohort_mean_hours_to_dose(f: Frames, p: dict) -> float | None:
    adm = f.admissions.set_index("hadm_id")
    doses = _antibiotic_doses(f, p["drug"])
    doses = doses[doses.hadm_id.isin(adm.index[_year(adm.admittime) == p["year"]])]
    if doses.empty:
        return None
    first = doses.groupby("hadm_id").charttime.min()
    return float(((first - adm.admittime.reindex(first.index)) / H).mean())


def cohort_top_antibiotic(f: Frames, p: dict) -> list[str] | None:
    adm = f.admissions
    dx = f.diagnoses_icd
    coded = set(dx[_has_condition(dx, p["title"])].hadm_id)
    cohort = set(adm[adm.hadm_id.isin(coded) & (_year(adm.admittime) == p["year"])].hadm_id)
    rx = f.prescriptions
    rx = rx[rx.hadm_id.isin(cohort) & ~rx.route.isin(LOCAL_ROUTES)]
    agents = _spelling(rx.drug).map(_agent).dropna()
    if agents.empty:
        return None
    n = agents.value_counts()
    return sorted(n[n == n.max()].index)


def cohort_mean_drip_amount(f: Frames, p: dict) -> float | None:
    icu = f.icustays
    stays = set(icu[_year(icu.intime) == p["year"]].stay_id)
    iv = _infusion_rows(f, p["label"])
    iv = iv[iv.stay_id.isin(stays)]
    return None if iv.empty else float(iv.groupby("stay_id").mg.sum().mean())


# care units as clinicians name them -> icustays.first_careunit
CAREUNITS = {"medical ICU": "Medical Intensive Care Unit (MICU)",
             "surgical ICU": "Surgical Intensive Care Unit (SICU)",
             "cardiac surgery ICU": "Cardiac Vascular Intensive Care Unit (CVICU)",
             "coronary care unit": "Coronary Care Unit (CCU)", "trauma surgical ICU": "Trauma SICU (TSICU)",
             "mixed medical-surgical ICU": "Medical/Surgical Intensive Care Unit (MICU/SICU)",
             "neurosurgical ICU": "Neuro Surgical Intensive Care Unit (Neuro SICU)"}


def cohort_unit_mean_segment(f: Frames, p: dict) -> float | None:
    icu = f.icustays
    stays = set(icu[(_year(icu.intime) == p["year"]) & (icu.first_careunit == CAREUNITS[p["careunit"]])].stay_id)
    iv = _infusion_rows(f, p["label"])
    iv = iv[iv.stay_id.isin(stays)]
    return None if iv.empty else float(iv.mg.mean())


def cohort_share_on_drip(f: Frames, p: dict) -> float | None:
    icu = f.icustays
    stays = set(icu[_year(icu.intime) == p["year"]].stay_id)
    if not stays:
        return None
    treated = set(_infusion_rows(f, p["label"]).stay_id) & stays
    return 100 * len(treated) / len(stays)


def _stay_infusion(f: Frames, p: dict) -> pd.DataFrame:
    iv = _infusion_rows(f, p["label"])
    return iv[(iv.subject_id == p["subject_id"]) & (iv.stay_id == p["stay_id"])]


def max_drip_amount(f: Frames, p: dict) -> float | None:
    iv = _stay_infusion(f, p)
    return None if iv.mg.dropna().empty else float(iv.mg.max())


def total_drip_amount(f: Frames, p: dict) -> float | None:
    iv = _stay_infusion(f, p)
    return None if iv.mg.dropna().empty else float(iv.mg.sum())


def drip_hours(f: Frames, p: dict) -> float | None:
    iv = _stay_infusion(f, p)
    return None if iv.empty else _hours_union(iv)


def route(f: Frames, p: dict) -> str | None:
    rx = _orders(f, p["drug"])
    rx = rx[(rx.subject_id == p["subject_id"]) & (rx.hadm_id == p["hadm_id"])]
    routes = set(rx.route.dropna())
    return routes.pop() if len(routes) == 1 else None


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "medications.total_drip_amount": total_drip_amount,
    "medications.was_given": was_given,
    "medications.cohort_count_doses": cohort_count_doses,
    "medications.cohort_mean_drip_amount": cohort_mean_drip_amount,
    "medications.cohort_mean_hours_to_dose": cohort_mean_hours_to_dose,
    "medications.cohort_share_on_drip": cohort_share_on_drip,
    "medications.cohort_top_antibiotic": cohort_top_antibiotic,
    "medications.cohort_unit_mean_segment": cohort_unit_mean_segment,
    "medications.count_doses": count_doses,
    "medications.drip_hours": drip_hours,
    "medications.max_drip_amount": max_drip_amount,
    "medications.route": route,
}


def test_every_listed_template_has_a_check():
    assert set(PANDAS) == set(IDS)


# ---------------------------------------------------------------- on the synthetic hospital

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(gold_builder, gold_frames, template):
    assert_gold_on_synth(gold_builder, gold_frames, template, PANDAS[template.id])


# ---------------------------------------------------------------- on the MIMIC-IV demo

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_the_demo(gold_demo, template):
    assert_gold_on_demo(gold_demo, template, PANDAS[template.id])


def _gold(gold_builder: Builder, template_id: str, params: dict) -> Any:
    return gold_value(gold_builder, get_template(template_id), params)


def test_delayed_and_partial_administrations_are_doses(gold_demo):
    """The demo charts doses as 'Delayed Administered' (vancomycin, cefepime, metoprolol …): they are counted."""
    b, frames = gold_demo
    emar = frames.emar
    late = emar[emar.event_txt.isin(["Delayed Administered", "Partial Administered", "Administered in Other Location"])
                & emar.hadm_id.notna()]
    cases = []
    for drug in ("vancomycin", "cefepime", "metoprolol", "heparin", "insulin"):
        hit = late[_is_drug(_spelling(late.medication), drug)]
        cases += [{"subject_id": int(r.subject_id), "hadm_id": int(r.hadm_id), "drug": drug}
                  for r in hit.drop_duplicates("hadm_id").head(2).itertuples()]
    assert len(cases) >= 5, cases
    for p in cases:
        assert _gold(b, "medications.count_doses", p) == count_doses(frames, p), p


def test_overlapping_infusion_segments_count_once(gold_demo):
    """Propofol boluses charted inside a running drip and overlapping norepinephrine segments (demo) add no hours:
    where summing the segments' durations gives another answer than their union, the gold is the union."""
    b, frames = gold_demo
    t = get_template("medications.drip_hours")
    overlapping = []
    for label in ("propofol", "norepinephrine"):
        iv = _infusion_rows(frames, label)
        for (subject, stay), rows in iv.groupby(["subject_id", "stay_id"]):
            summed = float(((rows.endtime - rows.starttime) / H).sum())
            if not answers_match(_hours_union(rows), summed, t.answer):
                overlapping.append(({"subject_id": int(subject), "stay_id": int(stay), "label": label}, summed))
    assert {p["label"] for p, _ in overlapping} == {"propofol", "norepinephrine"}, overlapping
    for p, summed in overlapping:
        got = _gold(b, t.id, p)
        assert answers_match(got, drip_hours(frames, p), t.answer), (p, got, summed)


def test_sodium_bicarbonate_names_no_route(gold_demo):
    """The demo orders sodium bicarbonate IV more often than by mouth: the concept's name claims no route, so
    "by which route" may truly be answered IV (the concept was once named "oral sodium bicarbonate")."""
    b, _ = gold_demo
    p = {"subject_id": 10005817, "hadm_id": 28661809, "drug": "sodium bicarbonate"}
    assert _gold(b, "medications.route", p) == "IV"


# ---------------------------------------------------------------- the check is not vacuous

def test_a_wrong_definition_is_caught(gold_builder, gold_frames):
    """Counting every charted eMAR event of the drug (held, flushed, not given per sliding scale) instead of the
    administrations disagrees with the pandas count somewhere (heparin, insulin)."""
    t = get_template("medications.count_doses")
    every_event = t.gold_sql.replace("AND " + DOSE_GIVEN, "")
    assert every_event != t.gold_sql
    assert disagreements(gold_builder, gold_frames, t, every_event, count_doses, 30) >= 1
