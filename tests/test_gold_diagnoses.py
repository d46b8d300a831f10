"""Gold SQL of the diagnosis templates (``templates/diagnoses.py``) against independent pandas computations.

Each check is written from the question's words (every paraphrase, the description and the answer spec) over the
raw tables as pandas frames: ``diagnoses_icd`` / ``procedures_icd`` with their dictionaries joined on code AND
version, ``drgcodes`` by DRG type, ``admissions`` / ``patients`` / ``icustays``. Conditions ("sepsis", "heart
failure") are the ICD prefixes written out in ``tests.test_bench_templates_episodes._has_condition`` (not the
concept relation the gold SQL joins). The gold answer of the first candidates of every template must equal the
pandas answer under the template's answer spec, on the 200-patient synthetic hospital and on the MIMIC-IV demo
(skipped without it); a plausible wrong definition (age without the anchor-year shift) is caught.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.templates.registry import get_template
from tests.gold_checks import Frames, assert_gold_on_demo, assert_gold_on_synth, disagreements
from tests.test_bench_templates_episodes import _has_condition

IDS = ("diagnoses.apr_mortality_risk", "diagnoses.cohort_comorbidity_rate", "diagnoses.cohort_mean_age",
       "diagnoses.cohort_mean_apr_severity", "diagnoses.cohort_mean_los", "diagnoses.cohort_mortality",
       "diagnoses.cohort_top_diagnosis_icu", "diagnoses.count_diagnoses", "diagnoses.drg_description",
       "diagnoses.procedure_day", "diagnoses.procedures_admission", "diagnoses.primary_diagnosis",
       "diagnoses.apr_severity", "diagnoses.has_diagnosis", "diagnoses.cohort_count_admissions")
NEW = [get_template(i) for i in IDS]


# ---------------------------------------------------------------- independent pandas computations

def _one(rows: pd.Series) -> Any:
    """The single value a per-admission question reads (None when there is none, or several that disagree)."""
    values = list(rows.dropna().unique())
    if len(values) != 1:
        return None
    return values[0].item() if hasattr(values[0], "item") else values[0]


def _drg(f: Frames, p: dict, kind: str) -> pd.DataFrame:
    d = f.drgcodes
    return d[(d.subject_id == p["subject_id"]) & (d.hadm_id == p["hadm_id"]) & (d.drg_type == kind)]


def apr_mortality_risk(f: Frames, p: dict) -> int | None:
    """The APR-DRG risk-of-mortality subclass (1-4) of the admission."""
    value = _one(_drg(f, p, "APR").drg_mortality)
    return None if value is None else int(value)


def primary_diagnosis(f: Frames, p: dict) -> str | None:
    """The title of the diagnosis coded first (sequence number 1) for the admission; its code where the dictionary
    has no title."""
    dx = f.diagnoses_icd
    first = dx[(dx.subject_id == p["subject_id"]) & (dx.hadm_id == p["hadm_id"]) & (dx.seq_num == 1)]
    titled = first.merge(f.d_icd_diagnoses, on=["icd_code", "icd_version"], how="left")
    names = sorted({t if isinstance(t, str) else c for t, c in zip(titled.long_title, titled.icd_code)})
    return names[0] if len(names) == 1 else None


def apr_severity(f: Frames, p: dict) -> int | None:
    """The APR-DRG severity-of-illness subclass (1-4) of the admission."""
    value = _one(_drg(f, p, "APR").drg_severity)
    return None if value is None else int(value)


def has_diagnosis(f: Frames, p: dict) -> bool:
    """Whether any ICD code of the condition was billed for the admission."""
    dx = f.diagnoses_icd
    dx = dx[(dx.subject_id == p["subject_id"]) & (dx.hadm_id == p["hadm_id"])]
    return bool(_has_condition(dx, p["title"]).any())


def cohort_count_admissions(f: Frames, p: dict) -> int:
    """Hospital admissions that began in the year and were coded with the condition, each counted once."""
    return len(_coded_cohort(f, p, p["title"]))


def drg_description(f: Frames, p: dict) -> str | None:
    """The description of the admission's HCFA DRG."""
    return _one(_drg(f, p, "HCFA").description)


def count_diagnoses(f: Frames, p: dict) -> int:
    """Distinct ICD diagnosis codes (code and version) billed for the admission."""
    dx = f.diagnoses_icd
    dx = dx[(dx.subject_id == p["subject_id"]) & (dx.hadm_id == p["hadm_id"])]
    return len(dx[["icd_version", "icd_code"]].drop_duplicates())


def procedures_admission(f: Frames, p: dict) -> list[str] | None:
    """The set of ICD procedure codes billed for the admission."""
    px = f.procedures_icd
    codes = sorted(set(px[(px.subject_id == p["subject_id"]) & (px.hadm_id == p["hadm_id"])].icd_code.astype(str)))
    return codes or None


def procedure_day(f: Frames, p: dict) -> int | None:
    """Calendar days from the admission date to the first date the titled procedure was charted."""
    px = f.procedures_icd.merge(f.d_icd_procedures, on=["icd_code", "icd_version"])
    px = px[(px.subject_id == p["subject_id"]) & (px.hadm_id == p["hadm_id"]) & (px.long_title == p["title"])]
    if px.empty:
        return None
    admit = f.admissions.set_index("hadm_id").loc[p["hadm_id"], "admittime"]
    return int((pd.Timestamp(px.chartdate.min()).normalize() - pd.Timestamp(admit).normalize()).days)


def _admissions_of_year(f: Frames, year: Any) -> pd.DataFrame:
    adm = f.admissions
    return adm[adm.admittime.dt.year == int(year)]


def _coded_cohort(f: Frames, p: dict, name: str) -> pd.DataFrame:
    """Admissions that began in the year and carry at least one code of the condition, each once."""
    dx = f.diagnoses_icd
    coded = set(dx[_has_condition(dx, name)].hadm_id)
    adm = _admissions_of_year(f, p["year"])
    return adm[adm.hadm_id.isin(coded)]


def cohort_mean_los(f: Frames, p: dict) -> float | None:
    """Mean hospital length of stay in days (discharge minus admission time) of the condition's admissions."""
    cohort = _coded_cohort(f, p, p["title"])
    days = ((cohort.dischtime - cohort.admittime).dt.total_seconds() / 86400).dropna()
    return None if days.empty else float(days.mean())


def cohort_mortality(f: Frames, p: dict) -> float | None:
    """Percentage of the condition's admissions that ended in death in hospital."""
    cohort = _coded_cohort(f, p, p["title"])
    return None if cohort.empty else 100 * float((cohort.hospital_expire_flag == 1).mean())


def cohort_comorbidity_rate(f: Frames, p: dict) -> float | None:
    """Of the year's admissions coded with the cohort condition, the percentage also coded with the other one."""
    cohort = _coded_cohort(f, p, p["cohort"])
    if cohort.empty:
        return None
    dx = f.diagnoses_icd
    also = set(dx[_has_condition(dx, p["title"])].hadm_id)
    return 100 * cohort.hadm_id.isin(also).sum() / len(cohort)


def cohort_mean_age(f: Frames, p: dict) -> float | None:
    """Mean age at admission over the condition's admissions of the year (one term per admission); MIMIC-IV's age
    at admission is anchor_age shifted by the years between anchor_year and the admission."""
    cohort = _coded_cohort(f, p, p["title"]).merge(f.patients, on="subject_id")
    if cohort.empty:
        return None
    return float((cohort.anchor_age + cohort.admittime.dt.year - cohort.anchor_year).mean())


def cohort_mean_apr_severity(f: Frames, p: dict) -> float | None:
    """Mean APR-DRG severity of illness over the year's admissions grouped under the named APR-DRG."""
    d = f.drgcodes
    d = d[(d.drg_type == "APR") & (d.description == p["description"]) & d.drg_severity.notna()]
    d = d[d.hadm_id.isin(_admissions_of_year(f, p["year"]).hadm_id)]
    if d.empty:
        return None
    return float(d.groupby("hadm_id").drg_severity.mean().mean())  # each admission once


def cohort_top_diagnosis_icu(f: Frames, p: dict) -> str | None:
    """The diagnosis title carried by the most hospital admissions that began in the year and had an ICU stay."""
    adm = _admissions_of_year(f, p["year"])
    icu = adm[adm.hadm_id.isin(set(f.icustays.hadm_id))]
    dx = f.diagnoses_icd.merge(f.d_icd_diagnoses, on=["icd_code", "icd_version"])
    dx = dx[dx.hadm_id.isin(icu.hadm_id)]
    if dx.empty:
        return None
    n = dx.groupby("long_title").hadm_id.nunique()
    top = sorted(n[n == n.max()].index)
    return top[0] if len(top) == 1 else f"tie between {top}"


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "diagnoses.apr_mortality_risk": apr_mortality_risk,
    "diagnoses.cohort_comorbidity_rate": cohort_comorbidity_rate,
    "diagnoses.cohort_mean_age": cohort_mean_age,
    "diagnoses.cohort_mean_apr_severity": cohort_mean_apr_severity,
    "diagnoses.cohort_mean_los": cohort_mean_los,
    "diagnoses.cohort_mortality": cohort_mortality,
    "diagnoses.cohort_top_diagnosis_icu": cohort_top_diagnosis_icu,
    "diagnoses.count_diagnoses": count_diagnoses,
    "diagnoses.drg_description": drg_description,
    "diagnoses.procedure_day": procedure_day,
    "diagnoses.procedures_admission": procedures_admission,
    "diagnoses.primary_diagnosis": primary_diagnosis,
    "diagnoses.apr_severity": apr_severity,
    "diagnoses.has_diagnosis": has_diagnosis,
    "diagnoses.cohort_count_admissions": cohort_count_admissions,
}


def test_every_listed_template_has_a_check():
    assert set(PANDAS) == set(IDS)
    assert all(t is not None for t in NEW)


# ---------------------------------------------------------------- on the synthetic hospital

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(gold_builder, gold_frames, template):
    assert_gold_on_synth(gold_builder, gold_frames, template, PANDAS[template.id])


# ---------------------------------------------------------------- on the MIMIC-IV demo

@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_the_demo(gold_demo, template):
    assert_gold_on_demo(gold_demo, template, PANDAS[template.id])


# ---------------------------------------------------------------- the check is not vacuous

def test_a_wrong_definition_is_caught(gold_builder, gold_frames):
    """Age at admission read as the bare anchor_age (without the years between anchor_year and the admission)
    disagrees with the pandas definition on some cohort."""
    t = get_template("diagnoses.cohort_mean_age")
    shifted = "e.anchor_age + extract(year FROM a.admittime) - e.anchor_year"
    assert shifted in t.gold_sql
    changed = replace(t, gold_sql=t.gold_sql.replace(shifted, "e.anchor_age"))
    assert disagreements(gold_builder, gold_frames, t, changed.gold_sql, cohort_mean_age, 25) >= 1
