"""Gold SQL of the laboratory templates (``templates/labs.py``) against independent pandas computations.

Each check is written from the question's words (every paraphrase, the description and the answer spec) over the
raw tables as pandas frames: ``labevents`` (rows of one admission by ``hadm_id``, of one patient by
``subject_id``), ``admissions`` (cohorts by admission type and the calendar year of ``admittime``) and
``d_labitems``. A clinical lab name ("serum potassium", "hemoglobin", "blood gas pH") is mapped to items by the
dictionary's label, fluid and category text in :data:`BLOOD_LABS` (not by the concept relation the gold SQL
joins): a "serum" test is the blood chemistry item (not the whole-blood gas one), a "blood gas" test is the
blood-gas item, and hemoglobin / hematocrit cover the CBC and the blood-gas measurement. Admission types are the
clinician's words over ``admission_type`` ("emergency" = every EMER. type). Where two items of one lab resulted
at the same minute ("the first hemoglobin" of a CBC and a blood gas drawn together), the first / last value is the
reference item's (the central laboratory test the item reference lists). The gold answer of the first candidates of
every template must equal the pandas answer under the template's answer spec, on the 200-patient synthetic hospital
and on the MIMIC-IV demo (skipped without it); admissions with such simultaneous results are checked on their own;
a plausible wrong definition (a 48-hour instead of a 72-hour window) is caught.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.answers import answers_match
from ehrgym.bench.builder import Builder
from ehrgym.bench.templates.registry import get_template
from ehrgym.db.items import items_for_table
from tests.gold_checks import Frames, assert_gold_on_demo, assert_gold_on_synth, disagreements, gold_value

IDS = ("labs.change_first_last", "labs.cohort_argmax_patient", "labs.cohort_max", "labs.cohort_mean",
       "labs.cohort_mean_first", "labs.cohort_rate_above", "labs.count_results_admission",
       "labs.last_value_admission", "labs.mean_first_72h", "labs.min_value_admission",
       "labs.first_value_admission")
NEW = [get_template(i) for i in IDS]


# ---------------------------------------------------------------- what the words mean in the dictionaries

# clinical name -> (d_labitems labels, categories the name restricts to; None: any), all of fluid 'Blood'
BLOOD_LABS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "serum creatinine": (("Creatinine",), ("Chemistry",)),  # not 'Creatinine, Whole Blood'
    "serum potassium": (("Potassium",), ("Chemistry",)),  # not 'Potassium, Whole Blood' (blood gas)
    "serum sodium": (("Sodium",), ("Chemistry",)),
    "serum chloride": (("Chloride",), ("Chemistry",)),
    "serum bicarbonate": (("Bicarbonate",), ("Chemistry",)),  # not the calculated whole-blood bicarbonate
    "anion gap": (("Anion Gap",), None),
    "blood urea nitrogen": (("Urea Nitrogen",), None),
    "serum glucose": (("Glucose",), ("Chemistry",)),  # not the blood-gas glucose
    "serum magnesium": (("Magnesium",), ("Chemistry",)),
    "serum phosphate": (("Phosphate",), ("Chemistry",)),
    "total serum calcium": (("Calcium, Total",), ("Chemistry",)),  # not free (ionised) calcium
    "serum albumin": (("Albumin",), ("Chemistry",)),
    "total serum protein": (("Protein, Total",), ("Chemistry",)),
    "total bilirubin": (("Bilirubin, Total",), None),
    "ALT": (("Alanine Aminotransferase (ALT)", "Alanine Aminotransferase"), None),
    "AST": (("Asparate Aminotransferase (AST)", "Asparate Aminotransferase"), None),
    "alkaline phosphatase": (("Alkaline Phosphatase",), ("Chemistry",)),
    "serum amylase": (("Amylase",), ("Chemistry",)),
    "creatine kinase": (("Creatine Kinase (CK)",), None),  # total CK, not an isoenzyme
    "LDH": (("Lactate Dehydrogenase (LD)",), None),
    "NT-proBNP": (("NTproBNP",), None),
    "troponin T": (("Troponin T",), None),
    "C-reactive protein": (("C-Reactive Protein",), None),
    "blood lactate": (("Lactate",), None),
    "blood gas pH": (("pH",), ("Blood Gas",)),
    "blood gas pCO2": (("pCO2",), ("Blood Gas",)),
    "blood gas pO2": (("pO2",), ("Blood Gas",)),
    "base excess": (("Base Excess",), ("Blood Gas",)),
    "hemoglobin": (("Hemoglobin",), None),  # CBC and blood-gas hemoglobin: one measurement
    "hematocrit": (("Hematocrit", "Hematocrit, Calculated"), None),
    "white blood cell count": (("White Blood Cells", "WBC Count"), None),
    "platelet count": (("Platelet Count",), None),
    "red blood cell count": (("Red Blood Cells",), None),
    "MCV": (("MCV",), None),
    "neutrophil percentage": (("Neutrophils",), ("Hematology",)),
    "lymphocyte percentage": (("Lymphocytes", "Lymphocytes, Percent"), ("Hematology",)),
    "band neutrophils": (("Bands",), None),
    "INR": (("INR(PT)",), None),
    "prothrombin time": (("PT",), None),
    "PTT": (("PTT",), None),
    "fibrinogen": (("Fibrinogen", "Fibrinogen, Functional"), None),
}

# admission types as a clinician says them, over admissions.admission_type
ADMISSION_TYPES: dict[str, Callable[[str], bool]] = {
    "emergency": lambda t: "EMER" in t,  # EW EMER. and DIRECT EMER.
    "urgent": lambda t: t == "URGENT",
    "elective": lambda t: t in ("ELECTIVE", "SURGICAL SAME DAY ADMISSION"),  # scheduled, same-day surgery included
    "observation": lambda t: "OBSERVATION" in t,
}


def _items(f: Frames, name: str) -> set[int]:
    if name not in BLOOD_LABS:
        pytest.fail(f"no dictionary rule for the lab {name!r}")
    labels, categories = BLOOD_LABS[name]
    d = f.d_labitems
    keep = (d.fluid == "Blood") & d.label.isin(labels)
    if categories is not None:
        keep &= d.category.isin(categories)
    return set(d[keep].itemid)


def _lab(f: Frames, name: str) -> pd.DataFrame:
    """Every result of the lab ``name``."""
    le = f.labevents
    return le[le.itemid.isin(_items(f, name))]


def _admission(f: Frames, p: dict) -> pd.DataFrame:
    """The results of the lab ``p['label']`` of the patient's hospital admission, in time order."""
    le = _lab(f, p["label"])
    return le[(le.subject_id == p["subject_id"]) & (le.hadm_id == p["hadm_id"])].sort_values("charttime")


# the reference item of each lab (the central laboratory's test, whose units and plausible range the item reference
# lists): where a CBC and a blood-gas hemoglobin were drawn at the same minute, "the first hemoglobin" is the CBC's
REFERENCE_ITEMS = {r.itemid for r in items_for_table("labevents")}


def _at_end(rows: pd.DataFrame, last: bool) -> float | None:
    """The value at the first (last) result time, the reference item's where several items resulted at that time;
    None when that still leaves disagreeing values (no one value)."""
    rows = rows.dropna(subset=["valuenum"])
    if rows.empty:
        return None
    at = rows[rows.charttime == (rows.charttime.max() if last else rows.charttime.min())]
    if at.valuenum.nunique() > 1 and at.itemid.isin(REFERENCE_ITEMS).any():
        at = at[at.itemid.isin(REFERENCE_ITEMS)]
    values = at.valuenum.unique()
    return float(values[0]) if len(values) == 1 else None


def _cohort(f: Frames, p: dict, typed: bool = True) -> pd.DataFrame:
    """The admissions (of the admission type ``p['admission_type']``) that began in ``p['year']``."""
    adm = f.admissions
    keep = adm.admittime.dt.year == int(p["year"])
    if typed:
        keep &= adm.admission_type.map(ADMISSION_TYPES[p["admission_type"]]).astype(bool)
    return adm[keep]


def _cohort_results(f: Frames, p: dict, typed: bool = True) -> pd.DataFrame:
    le = _lab(f, p["label"])
    return le[le.hadm_id.isin(set(_cohort(f, p, typed).hadm_id))]


# ---------------------------------------------------------------- patient level: one admission

def first_value_admission(f: Frames, p: dict) -> float | None:
    """The first (initial) result of the lab in the admission."""
    return _at_end(_admission(f, p), last=False)


def last_value_admission(f: Frames, p: dict) -> float | None:
    """The last (most recent, final) result of the lab in the admission."""
    return _at_end(_admission(f, p), last=True)


def min_value_admission(f: Frames, p: dict) -> float | None:
    """The lowest result (nadir) of the lab in the admission."""
    values = _admission(f, p).valuenum.dropna()
    return None if values.empty else float(values.min())


def change_first_last(f: Frames, p: dict) -> float | None:
    """The last result minus the first result of the lab in the admission."""
    rows = _admission(f, p)
    first, last = _at_end(rows, last=False), _at_end(rows, last=True)
    return None if first is None or last is None else last - first


def count_results_admission(f: Frames, p: dict) -> int:
    """How many results of the lab the admission has (every reported result row)."""
    return len(_admission(f, p))


def mean_first_72h(f: Frames, p: dict) -> float | None:
    """The mean of every result of the lab of the patient taken from t0 to t1 (both included), whatever the
    admission the result is filed under."""
    le = _lab(f, p["label"])
    t0, t1 = pd.Timestamp(p["t0"]), pd.Timestamp(p["t1"])
    values = le[(le.subject_id == p["subject_id"]) & (le.charttime >= t0) & (le.charttime <= t1)].valuenum.dropna()
    return None if values.empty else float(values.mean())


# ---------------------------------------------------------------- population level: a cohort of admissions

def cohort_mean(f: Frames, p: dict) -> float | None:
    """The mean over every result of the lab from the cohort's admissions."""
    values = _cohort_results(f, p).valuenum.dropna()
    return None if values.empty else float(values.mean())


def cohort_max(f: Frames, p: dict) -> float | None:
    """The highest result of the lab recorded during the cohort's admissions."""
    values = _cohort_results(f, p).valuenum.dropna()
    return None if values.empty else float(values.max())


def cohort_mean_first(f: Frames, p: dict) -> float | None:
    """The mean, over the cohort's admissions with a result, of each admission's first result."""
    rows = _cohort_results(f, p).dropna(subset=["valuenum"])
    firsts = [_at_end(g, last=False) for _, g in rows.groupby("hadm_id")]
    if not firsts or any(v is None for v in firsts):
        return None
    return sum(firsts) / len(firsts)


def cohort_rate_above(f: Frames, p: dict) -> float | None:
    """The percentage of the cohort's admissions (all of them, tested or not) with at least one result of the lab
    strictly above the threshold."""
    cohort = _cohort(f, p)
    if cohort.empty:
        return None
    rows = _cohort_results(f, p)
    high = set(rows[rows.valuenum > float(p["threshold"])].hadm_id)
    return 100 * len(high) / len(cohort)


def cohort_argmax_patient(f: Frames, p: dict) -> int | None:
    """The subject_id of the highest result of the lab among all admissions that began in the year (None when
    several patients share the top value)."""
    rows = _cohort_results(f, p, typed=False).dropna(subset=["valuenum"])
    if rows.empty:
        return None
    top = rows[rows.valuenum == rows.valuenum.max()]
    subjects = set(top.subject_id)
    return int(subjects.pop()) if len(subjects) == 1 else None


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "labs.first_value_admission": first_value_admission,
    "labs.change_first_last": change_first_last,
    "labs.cohort_argmax_patient": cohort_argmax_patient,
    "labs.cohort_max": cohort_max,
    "labs.cohort_mean": cohort_mean,
    "labs.cohort_mean_first": cohort_mean_first,
    "labs.cohort_rate_above": cohort_rate_above,
    "labs.count_results_admission": count_results_admission,
    "labs.last_value_admission": last_value_admission,
    "labs.mean_first_72h": mean_first_72h,
    "labs.min_value_admission": min_value_admission,
}


def test_every_listed_template_has_a_check():
    assert set(PANDAS) == set(IDS)


# ---------------------------------------------------------------- on the synthetic hospital

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(gold_builder, gold_frames, template):
    assert_gold_on_synth(gold_builder, gold_frames, template, PANDAS[template.id])


# ---------------------------------------------------------------- on the MIMIC-IV demo

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)  # every template reads labevents, which the demo has
def test_gold_matches_pandas_on_the_demo(gold_demo, template):
    assert_gold_on_demo(gold_demo, template, PANDAS[template.id])


# ---------------------------------------------------------------- the check tells definitions apart

def test_a_wrong_definition_is_caught(gold_builder, gold_frames):
    """The pandas check is not vacuous: a mean over 48 instead of 72 hours disagrees with it somewhere."""
    t = get_template("labs.mean_first_72h")
    changed = replace(t, gold_sql=t.gold_sql.replace("BETWEEN {t0} AND {t1}", "BETWEEN {t0} AND {t1} - INTERVAL 24 HOUR"))
    assert changed.gold_sql != t.gold_sql
    assert disagreements(gold_builder, gold_frames, t, changed.gold_sql, mean_first_72h, 30) >= 1


# ---------------------------------------------------------------- results of two items of one lab at one time

def _tied_edges(f: Frames, last: bool) -> list[dict]:
    """Admissions whose first (last) result time of a two-item lab (hemoglobin, hematocrit, WBC) holds results of
    both items that disagree (a CBC and a blood-gas hemoglobin drawn at the same minute), as template parameters."""
    adm = f.admissions.set_index("hadm_id")
    found = []
    for name in ("hemoglobin", "hematocrit", "white blood cell count"):
        rows = _lab(f, name).dropna(subset=["hadm_id"])
        if rows.valuenum.isna().any():
            rows = rows[~rows.hadm_id.isin(set(rows[rows.valuenum.isna()].hadm_id))]
        edge = rows.groupby("hadm_id").charttime.transform("max" if last else "min")
        at = rows[rows.charttime == edge].groupby("hadm_id").agg(items=("itemid", "nunique"), values=("valuenum", "nunique"),
                                                                 subject_id=("subject_id", "first"))
        (reference,) = _items(f, name) & REFERENCE_ITEMS
        for hadm, r in at[(at["items"] > 1) & (at["values"] > 1)].iterrows():
            a = adm.loc[hadm]
            kind = next((k for k, rule in ADMISSION_TYPES.items() if rule(a.admission_type)), None)
            found.append({"subject_id": int(r.subject_id), "hadm_id": int(hadm), "label": name, "itemid": reference,
                          "year": int(a.admittime.year), "admission_type": kind})
    return found


def _gold(b: Builder, template_id: str, params: dict) -> Any:
    return gold_value(b, get_template(template_id), params)


def test_simultaneous_results_of_two_items_read_the_reference_item(gold_builder, gold_frames):
    """Where a CBC and a blood-gas hemoglobin (hematocrit) were drawn at the same minute and disagree, "the first
    (last) hemoglobin" is the CBC's, in the patient questions and in the cohort mean of first values alike (the
    cohort gold took the lower of the two before)."""
    f = gold_frames
    cases = {"labs.change_first_last": _tied_edges(f, last=False)[:5],
             "labs.last_value_admission": _tied_edges(f, last=True)[:5],
             "labs.cohort_mean_first": [p for p in _tied_edges(f, last=False) if p["admission_type"]][:5]}
    for template_id, params in cases.items():
        assert params, template_id
        spec = get_template(template_id).answer
        for p in params:
            assert answers_match(_gold(gold_builder, template_id, p), PANDAS[template_id](f, p), spec), (template_id, p)
