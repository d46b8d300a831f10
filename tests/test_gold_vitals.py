"""Gold SQL of the vital-sign and urine-output templates (``templates/vitals.py``) checked against independent
pandas computations written from each question's words.

Each function below reads the raw tables as pandas frames (``chartevents``, ``outputevents``, ``icustays``,
``d_items``) and answers the question as a clinician reads it: the vital sign or urine route is found in
``d_items`` by its label and category (not from the concept relation the gold SQL joins), the care unit by the
unit abbreviation in ``icustays.first_careunit``, the cohort year from ``icustays.intime``. The gold of the first
candidates of every template is compared with it (``answers_match`` under the template's answer spec) on the
200-patient synthetic hospital and, for the urine templates, on the MIMIC-IV demo (which ships no
``chartevents``: the chartevents templates have no candidate there and are checked on the synthetic hospital
only). The last tests show the check is not vacuous: plausible wrong definitions (another threshold comparison,
one item instead of the sign's items, the former first-value gold that took an arbitrary one of two readings
charted at the same first minute) disagree with it somewhere.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.templates.registry import get_template
from ehrgym.bench.templates.vitals import STAY_ITEM_SAMPLER
from tests.gold_checks import Frames, assert_gold_on_demo, assert_gold_on_synth, disagreements

IDS = ("vitals.cohort_max", "vitals.cohort_mean", "vitals.cohort_mean_urine", "vitals.cohort_rate_high",
       "vitals.count_high_stay", "vitals.first_value_stay", "vitals.max_value_stay", "vitals.mean_first_24h",
       "vitals.min_value_stay", "vitals.urine_output_stay")
NEW = [get_template(i) for i in IDS]
CHART = {t.id for t in NEW if t.evidence.table == "chartevents"}


# ---------------------------------------------------------------- clinical names -> dictionary rows

def _numeric(d: pd.DataFrame, linksto: str) -> pd.DataFrame:
    return d[(d.linksto == linksto) & (d.param_type == "Numeric")]


# A vital sign is the bedside measurement of that name among the charted numeric items: routine vital signs
# (heart rate, blood pressures, temperatures) or the measured respiratory values (respiratory rate, SpO2).
# Alarm limits and ventilator settings carry the same words but are other categories / labels.
VITAL_RULES: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "heart rate": lambda d: (d.category == "Routine Vital Signs") & (d.label.str.lower() == "heart rate"),
    # the rate the patient breathes at (total, including ventilator breaths); not the set or spontaneous-only rate
    "respiratory rate": lambda d: (d.category == "Respiratory")
    & d.label.str.lower().isin(["respiratory rate", "respiratory rate (total)"]),
    "SpO2": lambda d: (d.category == "Respiratory") & (d.label.str.lower() == "o2 saturation pulseoxymetry"),
    # a blood pressure measured by any means: arterial line, cuff (non-invasive), manual
    "systolic blood pressure": lambda d: (d.category == "Routine Vital Signs")
    & d.label.str.contains(r"\bsystolic\b", case=False),
    "diastolic blood pressure": lambda d: (d.category == "Routine Vital Signs")
    & d.label.str.contains(r"\bdiastolic\b", case=False),
    "mean arterial pressure": lambda d: (d.category == "Routine Vital Signs")
    & d.label.str.contains(r"\b(?:blood pressure|BP) mean\b", case=False),
    "temperature in °F": lambda d: (d.category == "Routine Vital Signs") & (d.label == "Temperature Fahrenheit"),
    "temperature in °C": lambda d: (d.category == "Routine Vital Signs") & (d.label == "Temperature Celsius"),
}

# Urine leaves the body by these routes (outputevents labels). Volumes mixed with bladder irrigation fluid
# ("GU Irrigant/Urine Volume Out", "Urine and GU Irrigant Out") are not urine alone and stay out.
URINE_ROUTES = r"^(?:Foley|Void|Condom Cath|Straight Cath|Suprapubic|Ileoconduit|[RL] Nephrostomy|[RL] Ureteral Stent)$"
URINE_RULES: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "urine output": lambda d: (d.label.str.contains(URINE_ROUTES) | d.label.str.contains(r"\bUrine\b"))
    & ~d.label.str.contains("Irrigant"),
    "Foley catheter urine output": lambda d: d.label == "Foley",
    "voided urine output": lambda d: d.label == "Void",
}

# The ICU a stay began in, by the abbreviation its first_careunit string ends with.
CAREUNIT_ABBREVIATIONS = {"medical ICU": "MICU", "surgical ICU": "SICU", "cardiac surgery ICU": "CVICU",
                          "coronary care unit": "CCU", "trauma surgical ICU": "TSICU",
                          "mixed medical-surgical ICU": "MICU/SICU", "neurosurgical ICU": "Neuro SICU"}


def vital_items(f: Frames, name: str) -> set[int]:
    d = _numeric(f.d_items, "chartevents")
    items = set(d[VITAL_RULES[name](d)].itemid.astype(int))
    assert items, name
    return items


def urine_items(f: Frames, name: str) -> set[int]:
    d = _numeric(f.d_items, "outputevents")
    items = set(d[URINE_RULES[name](d)].itemid.astype(int))
    assert items, name
    return items


def _readings(f: Frames, name: str) -> pd.DataFrame:
    """The chartevents rows of a vital sign that hold a number."""
    ce = f.chartevents
    return ce[ce.itemid.isin(vital_items(f, name)) & ce.valuenum.notna()]


def _stay_readings(f: Frames, p: dict) -> pd.DataFrame:
    ce = _readings(f, p["label"])
    return ce[(ce.subject_id == p["subject_id"]) & (ce.stay_id == p["stay_id"])]


def _cohort_stays(f: Frames, year: Any, unit: str | None = None) -> pd.DataFrame:
    s = f.icustays
    keep = s.intime.dt.year == int(year)
    if unit is not None:
        keep &= s.first_careunit.fillna("").str.endswith(f"({CAREUNIT_ABBREVIATIONS[unit]})")
    return s[keep]


def _cohort_readings(f: Frames, p: dict) -> pd.Series:
    stays = _cohort_stays(f, p["year"], p["first_careunit"])
    ce = _readings(f, p["label"])
    return ce[ce.stay_id.isin(stays.stay_id)].valuenum


# ---------------------------------------------------------------- patient level: one ICU stay

def first_readings(f: Frames, p: dict) -> pd.Series:
    """The values charted at the stay's first charted time of the vital sign (NaN where a row has no number)."""
    ce = f.chartevents
    ce = ce[ce.itemid.isin(vital_items(f, p["label"])) & (ce.subject_id == p["subject_id"])
            & (ce.stay_id == p["stay_id"])]
    return ce[ce.charttime == ce.charttime.min()].valuenum


def first_value_stay(f: Frames, p: dict) -> float | None:
    # The reading at the first charted time; two items of one vital sign charted at that minute (an arterial line
    # and a cuff) with different values leave it undefined (None), and such stays are not asked about.
    values = first_readings(f, p).dropna()
    return float(values.iloc[0]) if values.nunique() == 1 else None


def max_value_stay(f: Frames, p: dict) -> float | None:
    ce = _stay_readings(f, p)
    return None if ce.empty else float(ce.valuenum.max())


def min_value_stay(f: Frames, p: dict) -> float | None:
    ce = _stay_readings(f, p)
    return None if ce.empty else float(ce.valuenum.min())


def count_high_stay(f: Frames, p: dict) -> int:
    ce = _stay_readings(f, p)
    return int((ce.valuenum > float(p["threshold"])).sum())


def mean_first_24h(f: Frames, p: dict) -> float | None:
    # the patient's readings charted from t0 to t1 (both ends included), whichever stay they belong to
    ce = _readings(f, p["label"])
    t0, t1 = pd.Timestamp(p["t0"]), pd.Timestamp(p["t1"])
    ce = ce[(ce.subject_id == p["subject_id"]) & (ce.charttime >= t0) & (ce.charttime <= t1)]
    return None if ce.empty else float(ce.valuenum.mean())


def urine_output_stay(f: Frames, p: dict) -> float | None:
    oe = f.outputevents
    oe = oe[(oe.subject_id == p["subject_id"]) & (oe.stay_id == p["stay_id"])
            & oe.itemid.isin(urine_items(f, p["label"])) & oe.value.notna()]
    return None if oe.empty else float(oe.value.sum())


# ---------------------------------------------------------------- population level: stays of a year

def cohort_mean(f: Frames, p: dict) -> float | None:
    v = _cohort_readings(f, p)
    return None if v.empty else float(v.mean())


def cohort_max(f: Frames, p: dict) -> float | None:
    v = _cohort_readings(f, p)
    return None if v.empty else float(v.max())


def cohort_rate_high(f: Frames, p: dict) -> float | None:
    stays = _cohort_stays(f, p["year"])
    if stays.empty:
        return None
    ce = _readings(f, p["label"])
    high = set(ce[ce.stay_id.isin(stays.stay_id) & (ce.valuenum > float(p["threshold"]))].stay_id)
    return 100 * len(high) / len(stays)


def cohort_mean_urine(f: Frames, p: dict) -> float | None:
    stays = _cohort_stays(f, p["year"])
    oe = f.outputevents
    oe = oe[oe.stay_id.isin(stays.stay_id) & oe.itemid.isin(urine_items(f, p["label"])) & oe.value.notna()]
    return None if oe.empty else float(oe.groupby("stay_id").value.sum().mean())


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "vitals.cohort_max": cohort_max,
    "vitals.cohort_mean": cohort_mean,
    "vitals.cohort_mean_urine": cohort_mean_urine,
    "vitals.cohort_rate_high": cohort_rate_high,
    "vitals.count_high_stay": count_high_stay,
    "vitals.first_value_stay": first_value_stay,
    "vitals.max_value_stay": max_value_stay,
    "vitals.mean_first_24h": mean_first_24h,
    "vitals.min_value_stay": min_value_stay,
    "vitals.urine_output_stay": urine_output_stay,
}


def test_every_listed_template_has_a_check():
    assert set(PANDAS) == set(IDS)


# ---------------------------------------------------------------- on the synthetic hospital

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(gold_builder, gold_frames, template):
    assert_gold_on_synth(gold_builder, gold_frames, template, PANDAS[template.id])


# ---------------------------------------------------------------- on the MIMIC-IV demo

@pytest.mark.parametrize("template", [t for t in NEW if t.id not in CHART], ids=lambda t: t.id)
def test_gold_matches_pandas_on_the_demo(gold_demo, template):
    """The urine templates on the real MIMIC-IV demo. The demo ships no chartevents, so the eight chartevents
    templates (``CHART``) have no candidate there and are checked on the synthetic hospital only."""
    assert_gold_on_demo(gold_demo, template, PANDAS[template.id])


def test_the_demo_has_no_chartevents_candidates(gold_demo):
    """The exclusion above is because the demo has no chartevents, not because a sampler broke."""
    b, frames = gold_demo
    assert frames.con.execute("SELECT count(*) FROM mimiciv_icu.chartevents").fetchone()[0] == 0
    assert CHART == set(IDS) - {"vitals.urine_output_stay", "vitals.cohort_mean_urine"}


# ---------------------------------------------------------------- the check is not vacuous

def test_a_wrong_definition_is_caught(gold_builder, gold_frames):
    """The pandas check is not vacuous: counting readings at or above the threshold (>=, not "above") disagrees
    with it on some stay, and so does counting the sign's primary item only (a systolic pressure count without
    the arterial line, a respiratory rate without the ventilator's total)."""
    t = get_template("vitals.count_high_stay")
    at_or_above = t.gold_sql.replace("e.valuenum > {threshold}", "e.valuenum >= {threshold}")
    one_item = t.gold_sql.replace("cpt.concept = {label}", "cpt.concept = {label} AND e.itemid = {itemid}")
    assert at_or_above != t.gold_sql and one_item != t.gold_sql
    assert disagreements(gold_builder, gold_frames, t, at_or_above, count_high_stay, 40) >= 1
    assert disagreements(gold_builder, gold_frames, t, one_item, count_high_stay, 40) >= 1


def test_stays_whose_first_readings_disagree_are_not_asked_about(gold_builder, gold_frames):
    """Two items of the vital sign charted at the stay's first minute with different values (arterial and cuff
    pressure) leave "the first reading" undefined: no such stay is a candidate, although the hospital has them
    (the stay-and-concept sampler the other templates use draws them)."""
    t = get_template("vitals.first_value_stay")
    drawn = gold_builder.candidates[t.id]
    assert drawn and all(first_readings(gold_frames, c.params).dropna().nunique() == 1 for c in drawn)
    former = gold_builder.verifier.clean_con.execute(STAY_ITEM_SAMPLER).df().head(300)
    undefined = [r for r in former.itertuples()
                 if first_readings(gold_frames, {"label": r.label, "subject_id": r.subject_id,
                                                  "stay_id": r.stay_id}).dropna().nunique() >= 2]
    assert undefined, "the hospital has no stay whose first readings disagree: the exclusion is not exercised"


def test_rules_find_the_dictionary_items(gold_frames):
    """The label rules pick the bedside items, not alarm limits or settings that share their words."""
    f = gold_frames
    assert {220045} <= vital_items(f, "heart rate") and not vital_items(f, "heart rate") & {220046, 220047}
    assert {220050, 220179} <= vital_items(f, "systolic blood pressure")
    assert vital_items(f, "respiratory rate") >= {220210, 224690}
    assert not any(re.search("alarm", lbl, re.I) for lbl in
                   f.d_items[f.d_items.itemid.isin(set().union(*(vital_items(f, n) for n in VITAL_RULES)))].label)
    assert urine_items(f, "Foley catheter urine output") == {226559}
