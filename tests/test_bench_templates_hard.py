"""The harder templates (``cohorts``, ``timing``, ``crossintent``): coverage, tiers, clinical wording,
verified pairs on the 200-patient synthetic hospital, and each gold SQL checked against an
independent pandas computation of the same clinical definition (synthetic database and, where
its tables hold data, the MIMIC-IV demo)."""

from __future__ import annotations

import datetime as dt
import re
from types import SimpleNamespace
from collections import Counter
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest

from ehrgym.bench.answers import answers_match
from ehrgym.bench.builder import Builder
from ehrgym.bench.complexity import complexity_by_tier, sql_complexity
from ehrgym.bench.configs import BuildConfig, plan_quotas, weighted_split
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.cleaning import plain_relation
from ehrgym.bench.sqlrender import render_sql, render_text
from ehrgym.bench.templates import Evidence, Template, all_templates, get_template
from ehrgym.bench.templates import concept_sql as cs
from ehrgym.bench.templates.base import TIERS, infer_tier
from ehrgym.bench.templates.registry import template_module
from ehrgym.errors import BenchmarkError
from ehrgym.vocab import INTENTS, LEVELS, NOISE_SUBTYPES
from tests.gold_checks import Frames

HARD_MODULES = ("cohorts", "timing", "crossintent")
EXPLICIT_TIER_MODULES = HARD_MODULES + ("episodes", "comorbidity", "disposition")  # modules whose templates state their tier
HARD = [t for t in all_templates() if template_module(t.id).rsplit(".", 1)[-1] in HARD_MODULES]
MIN_PAIRS = 4  # verified pairs every hard template yields on the 200-patient database
CHECKED = 3  # entities per template checked against pandas
H = pd.Timedelta(hours=1)


# ---------------------------------------------------------------- static properties

def test_at_least_20_hard_templates_cover_every_intent_and_level():
    assert len(HARD) >= 20
    cells = Counter((t.intent, t.level) for t in HARD)
    assert {(i, lv) for i in INTENTS for lv in LEVELS} <= set(cells), cells
    assert all(t.tier in (2, 3) for t in HARD)
    assert sum(t.tier == 3 for t in HARD) >= 15


def _variant(gold_sql: str, tier: int = 0) -> Template:
    base = get_template("labs.aki_onset_time")
    return Template(id="labs.tier_probe", intent="labs", level="patient", paraphrases=base.paraphrases,
                    sampler_sql="SELECT 1", gold_sql=gold_sql, answer=base.answer, evidence=base.evidence,
                    noise=base.noise[:1], entity_ref=base.entity_ref, tier=tier)


def test_every_template_has_a_tier_and_the_rule_is_applied():
    assert {t.tier for t in all_templates()} <= set(TIERS)
    for t in all_templates():
        if template_module(t.id).rsplit(".", 1)[-1] not in EXPLICIT_TIER_MODULES:
            assert t.tier == infer_tier(t), t.id
    lookup = ("SELECT max(e.valuenum) FROM {labevents} e JOIN mimiciv_hosp.d_labitems d ON d.itemid = e.itemid "
              "WHERE e.hadm_id = {hadm_id} AND d.label = {subject_id}")
    assert _variant(lookup).tier == 1  # one clinical table (+ its dictionary)
    joined = lookup.replace("JOIN mimiciv_hosp.d_labitems d ON d.itemid = e.itemid",
                            "JOIN mimiciv_hosp.admissions d ON d.hadm_id = e.hadm_id")
    assert _variant(joined).tier == 2  # two clinical tables
    windowed = "SELECT first(v) FROM (SELECT e.valuenum AS v, row_number() OVER () AS r FROM {labevents} e " \
               "WHERE e.hadm_id = {hadm_id} AND e.subject_id = {subject_id})"
    assert _variant(windowed).tier == 2  # several query blocks, a window function
    assert _variant(lookup, tier=3).tier == 3  # stated explicitly
    with pytest.raises(BenchmarkError, match="tier"):
        _variant(lookup, tier=4)


@pytest.mark.parametrize("template", HARD, ids=lambda t: t.id)
def test_hard_gold_sql_is_complex(template):
    plain = render_sql(template.gold_sql, {p: 1 for p in template.params}, plain_relation(template))
    assert sql_complexity(plain) >= (20 if template.tier == 3 else 12)


def test_concepts_are_defined_once():
    assert set(cs.VASOPRESSORS) == {221906, 221289, 222315, 221749, 221662}
    assert "vancomycin" in cs.ANTIBIOTIC_STEMS and "cefazolin" in cs.ANTIBIOTIC_STEMS
    assert cs.KDIGO_RISE_48H == 0.3 and cs.KDIGO_RATIO_7D == 1.5
    pred = cs.icd_group_predicate("sepsis", "d")
    assert "d.icd_code LIKE 'A41%'" in pred and "d.icd_version = 9" in pred


def test_weighted_split_and_tier_weighted_quotas():
    assert weighted_split(10, {"a": 1.0, "b": 1.0, "c": 2.0}) == {"a": 3, "b": 2, "c": 5}
    assert sum(weighted_split(7, {"a": 1, "b": 3}).values()) == 7
    assert weighted_split(5, {"a": 0.0, "b": 0.0}) == {"a": 3, "b": 2}
    applicable = {("labs", "patient", "easy"): ["out_of_scope"], ("labs", "patient", "hard"): ["out_of_scope"],
                  ("vitals", "patient", "v"): ["out_of_scope"]}
    plain = plan_quotas(100, applicable, NOISE_SUBTYPES)
    tiered = plan_quotas(100, applicable, NOISE_SUBTYPES, {"easy": 1.0, "hard": 2.0})
    assert plain[("easy", "out_of_scope")] == plain[("hard", "out_of_scope")] == 25
    assert (tiered[("easy", "out_of_scope")], tiered[("hard", "out_of_scope")]) == (17, 33)
    assert tiered[("v", "out_of_scope")] == 50  # cells stay balanced


def test_complexity_by_tier_groups_tasks():
    def task(tid: str, variant: str, cx: int, tier: int | None) -> SimpleNamespace:
        meta = {"complexity": cx, **({"tier": tier} if tier else {})}
        return SimpleNamespace(template_id=tid, variant=variant, meta=meta)

    tasks = [task("labs.aki_onset_time", "clean", 40, 3), task("labs.aki_onset_time", "noise", 50, 3),
             task("labs.first_value_admission", "clean", 10, None), task("gone.template", "clean", 7, None)]
    out = complexity_by_tier(tasks)
    assert out["3"] == {"tasks": 2, "mean": 45.0, "median": 45.0, "clean_mean": 40.0}
    assert out["1"]["tasks"] == 1 and out["unknown"]["mean"] == 7.0


# ---------------------------------------------------------------- on the synthetic hospital

@pytest.fixture(scope="module")
def hard_builder(synth_db):
    b = Builder(synth_db, BuildConfig("t", 10, min_candidates=40), seed=5, progress=False, templates=HARD)
    for t in HARD:
        b._draw(t, 40)
    yield b
    b.close()


RAW_VOCAB_SQL = """
SELECT DISTINCT admission_type FROM mimiciv_hosp.admissions UNION
SELECT DISTINCT careunit FROM mimiciv_hosp.transfers WHERE careunit IS NOT NULL UNION
SELECT DISTINCT org_name FROM mimiciv_hosp.microbiologyevents WHERE org_name IS NOT NULL UNION
SELECT DISTINCT spec_type_desc FROM mimiciv_hosp.microbiologyevents UNION
SELECT DISTINCT ab_name FROM mimiciv_hosp.microbiologyevents WHERE ab_name IS NOT NULL UNION
SELECT DISTINCT drug FROM mimiciv_hosp.prescriptions WHERE regexp_matches(drug, '[a-z][A-Z]')"""


@pytest.mark.parametrize("template", HARD, ids=lambda t: t.id)
def test_questions_speak_clinically(hard_builder, template):
    raw = [r[0] for r in hard_builder.verifier.con.execute(RAW_VOCAB_SQL).fetchall() if len(str(r[0])) > 3]
    cands = hard_builder.candidates[template.id]
    assert cands
    for c in cands[:5]:
        for p in template.paraphrases:
            q = render_text(p, c.params)
            leaked = [w for w in raw if re.search(r"(?<![\w])" + re.escape(w) + r"(?![\w])", q)]
            assert not leaked, f"{q!r} quotes database strings {leaked}"


@pytest.mark.parametrize("template", HARD, ids=lambda t: t.id)
def test_hard_template_yields_verified_pairs(hard_builder, template):
    cands = hard_builder.candidates[template.id]
    subs = [s for s in template.noise if INJECTORS[s].applies(template)]
    made, used = Counter(), set()
    for c in cands[:24]:
        for sub in sorted(subs, key=lambda s: made[s]):
            if c.index in used or not INJECTORS[sub].accepts(template, c.params):
                continue
            if hard_builder.attempt(template, sub, c) is not None:
                made[sub] += 1
                used.add(c.index)
        if sum(made.values()) >= MIN_PAIRS + 2:
            break
    assert sum(made.values()) >= MIN_PAIRS, (template.id, dict(made))


# ---------------------------------------------------------------- independent pandas computations

def _ts(v: Any) -> pd.Timestamp:
    return pd.Timestamp(v)


def _abx_orders(f: Frames) -> pd.DataFrame:
    rx = f.prescriptions
    drug = rx["drug"].fillna("").str.lower()
    ok = (drug.str.contains(cs.ANTIBIOTIC_REGEX, regex=True)
          & ~drug.str.contains(cs.NON_SYSTEMIC_FORMS, regex=True)
          & ~rx["route"].fillna("").str.upper().isin(cs.NON_SYSTEMIC_ROUTES))
    return rx[ok & rx["hadm_id"].notna()]


def _suspected_at(f: Frames, hadm: int) -> pd.Timestamp | None:
    abx = _abx_orders(f)
    abx = abx[abx["hadm_id"] == hadm]
    micro = f.microbiologyevents
    cult = micro[(micro["hadm_id"] == hadm) & micro["charttime"].notna()]["charttime"]
    best = None
    for start in abx["starttime"]:
        near = cult[(cult >= start - cs.SUSPICION_BEFORE_H * H) & (cult <= start + cs.SUSPICION_AFTER_H * H)]
        if len(near):
            t = min(start, near.min())
            best = t if best is None else min(best, t)
    return best


def _kdigo(rows: pd.DataFrame) -> pd.DataFrame:
    """Per creatinine row: low48/low7d (previous rows of the same admission) and the KDIGO stage."""
    rows = rows.sort_values("charttime").reset_index(drop=True)
    low48, low7d = [], []
    for t in rows["charttime"]:
        prev = rows[(rows["charttime"] < t)]
        p7 = prev[prev["charttime"] >= t - pd.Timedelta(days=7)]["valuenum"]
        p48 = prev[prev["charttime"] >= t - 48 * H]["valuenum"]
        low7d.append(p7.min() if len(p7) else np.nan)
        low48.append(p48.min() if len(p48) else np.nan)
    rows = rows.assign(low48=low48, low7d=low7d)
    v = rows["valuenum"]
    aki = (v >= rows["low48"] + 0.3) | (v >= 1.5 * rows["low7d"])
    stage = np.where((v >= 3.0 * rows["low7d"]) | ((v >= 4.0) & ((rows["low48"] <= 3.7) | (v >= 1.5 * rows["low7d"]))),
                     3, np.where(v >= 2.0 * rows["low7d"], 2, np.where(aki, 1, 0)))
    return rows.assign(aki=aki, stage=stage)


def _creatinine(f: Frames, hadm: int) -> pd.DataFrame:
    lab = f.labevents
    return lab[(lab["hadm_id"] == hadm) & (lab["itemid"] == cs.CREATININE) & lab["valuenum"].notna()]


def _in_group(dx: pd.DataFrame, group: str) -> pd.Series:
    hit = pd.Series(False, index=dx.index)
    for version, prefixes in cs.ICD_GROUPS[group].items():
        hit |= (dx["icd_version"] == version) & dx["icd_code"].str.startswith(tuple(prefixes))
    return hit


def _hadms_in_group(f: Frames, group: str) -> set[int]:
    dx = f.diagnoses_icd
    return set(dx[_in_group(dx, group)]["hadm_id"])


def _period(frame: pd.DataFrame, col: str, p: dict) -> pd.DataFrame:
    return frame[(frame[col] >= _ts(p["t0"])) & (frame[col] < _ts(p["t1"]))]


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def _units_named(name: str) -> set[str]:
    return {k for k, v in cs.ICU_UNITS.items() if v == name}


def _pressor_intervals(f: Frames, stay: int) -> pd.DataFrame:
    ie = f.inputevents
    return ie[(ie["stay_id"] == stay) & ie["itemid"].isin(cs.VASOPRESSORS) & (ie["endtime"] > ie["starttime"])]


def aki_onset_time(f, p):
    k = _kdigo(_creatinine(f, p["hadm_id"]))
    return k[k["aki"]]["charttime"].min()


def aki_max_kdigo_stage(f, p):
    return int(_kdigo(_creatinine(f, p["hadm_id"]))["stage"].max())


def cohort_icu_aki_rate(f, p):
    st = _period(f.icustays, "intime", p)
    st = st[st["first_careunit"].isin(_units_named(p["unit_name"]))]
    hits = 0
    for _, s in st.iterrows():
        k = _kdigo(_creatinine(f, s["hadm_id"]))
        k = k[k["aki"] & (k["charttime"] >= s["intime"]) & (k["charttime"] <= s["intime"] + pd.Timedelta(days=7))]
        hits += bool(len(k))
    return _pct(hits, len(st))


def vasopressor_hours(f, p):
    iv = _pressor_intervals(f, p["stay_id"]).sort_values(["starttime", "endtime"])
    total, cur_s, cur_e = 0.0, None, None
    for s, e in zip(iv["starttime"], iv["endtime"]):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += (cur_e - cur_s).total_seconds()
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    total += (cur_e - cur_s).total_seconds()
    return total / 3600


def cohort_septic_vasopressor_dose(f, p):
    st = _period(f.icustays, "intime", p)
    st = st[st["hadm_id"].isin(_hadms_in_group(f, "sepsis"))]
    ie = f.inputevents
    totals = []
    for _, s in st.iterrows():
        rows = ie[(ie["stay_id"] == s["stay_id"]) & (ie["itemid"] == p["itemid"])
                  & (ie["starttime"] >= s["intime"]) & (ie["starttime"] < s["intime"] + 24 * H)]
        if len(rows) and rows["amount"].sum() > 0:
            totals.append(rows["amount"].sum())
    return float(np.mean(totals)) if totals else None


def suspected_infection_time(f, p):
    return _suspected_at(f, p["hadm_id"])


def cohort_sepsis_like_mortality(f, p):
    adm = _period(f.admissions, "admittime", p)
    lab = f.labevents
    organ = pd.Series(False, index=lab.index)
    for item, (cmp, _) in cs.ORGAN_DYSFUNCTION.items():
        op, val = cmp.split()
        v = lab["valuenum"]
        organ |= (lab["itemid"] == item) & (v >= float(val) if op == ">=" else v < float(val))
    organ_labs = lab[organ]
    died = members = 0
    for _, a in adm.iterrows():
        s = _suspected_at(f, a["hadm_id"])
        if s is None:
            continue
        rows = organ_labs[(organ_labs["hadm_id"] == a["hadm_id"]) & (organ_labs["charttime"] >= s - 48 * H)
                          & (organ_labs["charttime"] <= s + 24 * H)]
        if len(rows):
            members += 1
            died += int(a["hospital_expire_flag"] == 1)
    return _pct(died, members)


def lowest_first_48h_icu(f, p):
    s = f.icustays.set_index("stay_id").loc[p["stay_id"]]
    item = {v: k for k, v in cs.LAB_NAMES.items()}[p["lab"]]
    lab = f.labevents
    rows = lab[(lab["hadm_id"] == s["hadm_id"]) & (lab["itemid"] == item) & (lab["charttime"] >= s["intime"])
               & (lab["charttime"] <= s["intime"] + 48 * H)]
    return rows["valuenum"].min()


def hypotension_before_vasopressor(f, p):
    ie = f.inputevents
    first = ie[(ie["stay_id"] == p["stay_id"]) & ie["itemid"].isin(cs.VASOPRESSORS)]["starttime"].min()
    ce = f.chartevents
    return int(((ce["stay_id"] == p["stay_id"]) & ce["itemid"].isin(cs.MAP_ITEMS) & (ce["valuenum"] < 65)
                & (ce["charttime"] < first)).sum())


def max_temperature_c_first_24h(f, p):
    s = f.icustays.set_index("stay_id").loc[p["stay_id"]]
    ce = f.chartevents
    rows = ce[(ce["stay_id"] == p["stay_id"]) & ce["itemid"].isin((cs.TEMP_F, cs.TEMP_C))
              & (ce["charttime"] >= s["intime"]) & (ce["charttime"] <= s["intime"] + 24 * H)]
    celsius = np.where(rows["itemid"] == cs.TEMP_F, (rows["valuenum"] - 32) / 1.8, rows["valuenum"])
    return float(np.nanmax(celsius))


def lowest_map_on_vasopressor(f, p):
    iv = _pressor_intervals(f, p["stay_id"])
    ce = f.chartevents
    rows = ce[(ce["stay_id"] == p["stay_id"]) & ce["itemid"].isin(cs.MAP_ITEMS)]
    during = rows[[any((t >= s) & (t <= e) for s, e in zip(iv["starttime"], iv["endtime"])) for t in rows["charttime"]]]
    return during["valuenum"].min()


def _dose_given(event: pd.Series) -> pd.Series:
    """eMAR events that say a dose was given: 'Administered' in any form (delayed, partial, elsewhere, a bolus from
    a drip), not 'Not Given' and not the truncated rows that do not say what happened."""
    text = event.fillna("")
    return text.str.contains("Administered") & ~text.str.contains("Not ")


def hours_blood_culture_to_antibiotic(f, p):
    micro = f.microbiologyevents
    first = micro[(micro["hadm_id"] == p["hadm_id"]) & (micro["spec_type_desc"] == "BLOOD CULTURE")]["charttime"].min()
    emar = f.emar
    med = emar["medication"].fillna("").str.lower()
    doses = emar[(emar["hadm_id"] == p["hadm_id"]) & med.str.contains(cs.ANTIBIOTIC_REGEX, regex=True)
                 & ~med.str.contains(cs.NON_SYSTEMIC_FORMS, regex=True) & _dose_given(emar["event_txt"])
                 & (emar["charttime"] >= first)]
    return (doses["charttime"].min() - first).total_seconds() / 3600


def organisms_before_antibiotic(f, p):
    abx = _abx_orders(f)
    first = abx[abx["hadm_id"] == p["hadm_id"]]["starttime"].min()
    micro = f.microbiologyevents
    rows = micro[(micro["hadm_id"] == p["hadm_id"]) & micro["org_name"].notna()
                 & ~micro["org_name"].isin(cs.NON_ORGANISM_RESULTS) & (micro["charttime"] < first)]
    return sorted(set(rows["org_name"]))


def icu_hours_admission(f, p):
    tr = f.transfers
    rows = tr[(tr["hadm_id"] == p["hadm_id"]) & tr["careunit"].isin(cs.ICU_UNITS)
              & tr["eventtype"].isin(("admit", "transfer")) & tr["outtime"].notna()]
    return (rows["outtime"] - rows["intime"]).dt.total_seconds().sum() / 3600


def cohort_early_icu_los(f, p):
    st = _period(f.icustays, "intime", p)
    st = st[st["first_careunit"].isin(_units_named(p["unit_name"]))].merge(
        f.admissions[["hadm_id", "admittime", "admission_type"]], on="hadm_id")
    st = st[st["admission_type"].isin(cs.EMERGENCY_ADMISSION_TYPES) & (st["intime"] <= st["admittime"] + 24 * H)]
    return float(((st["outtime"] - st["intime"]).dt.total_seconds() / 86400).mean())


def icu_procedure_hours(f, p):
    item = {v: k for k, v in cs.ICU_PROCEDURES.items()}[p["procedure"]]
    pe = f.procedureevents
    first = pe[(pe["stay_id"] == p["stay_id"]) & (pe["itemid"] == item)]["starttime"].min()
    intime = f.icustays.set_index("stay_id").loc[p["stay_id"], "intime"]
    return (first - intime).total_seconds() / 3600


def cohort_peak_lactate_suspected_infection(f, p):
    adm = _period(f.admissions, "admittime", p)
    lab = f.labevents
    peaks = []
    for h in adm["hadm_id"]:
        s = _suspected_at(f, h)
        if s is None:
            continue
        rows = lab[(lab["hadm_id"] == h) & (lab["itemid"] == p["itemid"]) & (lab["charttime"] >= s)
                   & (lab["charttime"] <= s + 24 * H)]
        if rows["valuenum"].notna().any():
            peaks.append(rows["valuenum"].max())
    return float(np.mean(peaks)) if peaks else None


def cohort_pneumonia_peak_resp_rate(f, p):
    st = _period(f.icustays, "intime", p)
    st = st[st["hadm_id"].isin(_hadms_in_group(f, "pneumonia"))]
    ce = f.chartevents
    peaks = []
    for _, s in st.iterrows():
        rows = ce[(ce["stay_id"] == s["stay_id"]) & (ce["itemid"] == p["itemid"]) & (ce["charttime"] >= s["intime"])
                  & (ce["charttime"] <= s["intime"] + 24 * H)]
        if rows["valuenum"].notna().any():
            peaks.append(rows["valuenum"].max())
    return float(np.mean(peaks)) if peaks else None


def cohort_shock_index_rate(f, p):
    st = _period(f.icustays, "intime", p)
    st = st[st["first_careunit"].isin(_units_named(p["unit_name"]))]
    ce = f.chartevents
    hr = ce[ce["itemid"] == cs.HEART_RATE][["stay_id", "charttime", "valuenum"]]
    sbp = ce[ce["itemid"].isin(cs.SBP_ITEMS) & (ce["valuenum"] > 0)][["stay_id", "charttime", "valuenum"]]
    pairs = hr.merge(sbp, on=["stay_id", "charttime"], suffixes=("_hr", "_sbp"))
    pairs = pairs[pairs["valuenum_hr"] / pairs["valuenum_sbp"] > 1.0]
    hits = 0
    for _, s in st.iterrows():
        rows = pairs[(pairs["stay_id"] == s["stay_id"]) & (pairs["charttime"] >= s["intime"])
                     & (pairs["charttime"] <= s["intime"] + 24 * H)]
        hits += bool(len(rows))
    return _pct(hits, len(st))


def chronic_condition_groups(f, p):
    dx = f.diagnoses_icd
    dx = dx[dx["hadm_id"] == p["hadm_id"]]
    return sorted(g for g in cs.CHRONIC_GROUPS if _in_group(dx, g).any())


def cohort_aki_coding_rate(f, p):
    adm = _period(f.admissions, "admittime", p)
    coded_set = _hadms_in_group(f, "acute kidney failure")
    aki = [h for h in adm["hadm_id"] if _kdigo(_creatinine(f, h))["aki"].any()]
    return _pct(sum(h in coded_set for h in aki), len(aki))


def cohort_pneumonia_ventilation_rate(f, p):
    adm = _period(f.admissions, "admittime", p)
    pna = set(adm["hadm_id"]) & _hadms_in_group(f, "pneumonia")
    pe = f.procedureevents
    vent = set(pe[pe["itemid"] == 225792]["hadm_id"])
    return _pct(len(pna & vent), len(pna))


def cohort_positive_blood_culture_suspected(f, p):
    adm = _period(f.admissions, "admittime", p)
    micro = f.microbiologyevents
    pos = micro[(micro["spec_type_desc"] == "BLOOD CULTURE") & micro["org_name"].notna()
                & ~micro["org_name"].isin(cs.NON_ORGANISM_RESULTS)]
    members = hits = 0
    for h in adm["hadm_id"]:
        s = _suspected_at(f, h)
        if s is None:
            continue
        members += 1
        rows = pos[(pos["hadm_id"] == h) & (pos["charttime"] >= s - 24 * H) & (pos["charttime"] <= s + 72 * H)]
        hits += bool(len(rows))
    return _pct(hits, members)


def cohort_mrsa_share(f, p):
    adm = _period(f.admissions, "admittime", p)
    micro = f.microbiologyevents
    rows = micro[(micro["org_name"] == "STAPH AUREUS COAG +") & (micro["ab_name"] == "OXACILLIN")
                 & micro["hadm_id"].isin(adm["hadm_id"])]
    per = rows.groupby("subject_id")["interpretation"].apply(lambda s: (s == "R").any())
    return _pct(int(per.sum()), len(per))


def cohort_sepsis_hours_to_antibiotic(f, p):
    adm = _period(f.admissions, "admittime", p)
    adm = adm[adm["hadm_id"].isin(_hadms_in_group(f, "sepsis"))]
    abx = _abx_orders(f)
    hours = []
    for _, a in adm.iterrows():
        first = abx[abx["hadm_id"] == a["hadm_id"]]["starttime"].min()
        if pd.notna(first):
            hours.append((first - a["admittime"]).total_seconds() / 3600)
    return float(np.mean(hours)) if hours else None


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "labs.aki_onset_time": aki_onset_time,
    "labs.aki_max_kdigo_stage": aki_max_kdigo_stage,
    "labs.cohort_icu_aki_rate": cohort_icu_aki_rate,
    "labs.lowest_first_48h_icu": lowest_first_48h_icu,
    "labs.cohort_peak_lactate_suspected_infection": cohort_peak_lactate_suspected_infection,
    "medications.vasopressor_hours": vasopressor_hours,
    "medications.cohort_septic_vasopressor_dose": cohort_septic_vasopressor_dose,
    "medications.hours_blood_culture_to_antibiotic": hours_blood_culture_to_antibiotic,
    "medications.cohort_sepsis_hours_to_antibiotic": cohort_sepsis_hours_to_antibiotic,
    "microbiology.suspected_infection_time": suspected_infection_time,
    "microbiology.organisms_before_antibiotic": organisms_before_antibiotic,
    "microbiology.cohort_positive_blood_culture_suspected": cohort_positive_blood_culture_suspected,
    "microbiology.cohort_mrsa_share": cohort_mrsa_share,
    "encounters.cohort_sepsis_like_mortality": cohort_sepsis_like_mortality,
    "encounters.icu_hours_admission": icu_hours_admission,
    "encounters.cohort_early_icu_los": cohort_early_icu_los,
    "vitals.hypotension_before_vasopressor": hypotension_before_vasopressor,
    "vitals.max_temperature_c_first_24h": max_temperature_c_first_24h,
    "vitals.lowest_map_on_vasopressor": lowest_map_on_vasopressor,
    "vitals.cohort_pneumonia_peak_resp_rate": cohort_pneumonia_peak_resp_rate,
    "vitals.cohort_shock_index_rate": cohort_shock_index_rate,
    "diagnoses.icu_procedure_hours": icu_procedure_hours,
    "diagnoses.chronic_condition_groups": chronic_condition_groups,
    "diagnoses.cohort_aki_coding_rate": cohort_aki_coding_rate,
    "diagnoses.cohort_pneumonia_ventilation_rate": cohort_pneumonia_ventilation_rate,
}


def test_every_hard_template_has_a_pandas_check():
    assert set(PANDAS) == {t.id for t in HARD}


def _check_against_pandas(builder: Builder, frames: Frames, template: Template, n: int) -> int:
    checked = 0
    for c in builder.candidates[template.id][:n]:
        clean = builder._clean(template, c)
        assert clean is not None, f"{template.id}: no clean answer for {c.params}"
        expected = PANDAS[template.id](frames, c.params)
        if isinstance(expected, (pd.Timestamp, dt.datetime)):
            expected = pd.Timestamp(expected).to_pydatetime()
        assert expected is not None and answers_match(clean[0], expected, template.answer), \
            f"{template.id} {c.params}: SQL {clean[0]!r} vs pandas {expected!r}"
        checked += 1
    return checked


@pytest.fixture(scope="module")
def synth_frames(synth_db):
    f = Frames(synth_db)
    yield f
    f.con.close()


@pytest.mark.parametrize("template", HARD, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(hard_builder, synth_frames, template):
    assert _check_against_pandas(hard_builder, synth_frames, template, CHECKED) >= 1


def test_gold_matches_pandas_on_the_demo(demo_db):
    """On the real MIMIC-IV demo (no chartevents), every hard template whose tables hold data."""
    b = Builder(demo_db, BuildConfig("t", 10, min_candidates=8), seed=5, progress=False, templates=HARD)
    frames = Frames(demo_db)
    try:
        checked = Counter()
        for t in HARD:
            b._draw(t, 8)
            if b.candidates[t.id]:
                checked[t.id] = _check_against_pandas(b, frames, t, 2)
        charted = {t.id for t in HARD if t.evidence.table == "chartevents"}
        assert set(checked) == {t.id for t in HARD} - charted, set(PANDAS) - set(checked) - charted
    finally:
        frames.con.close()
        b.close()


def test_a_wrong_definition_is_caught(hard_builder, synth_frames):
    """The pandas check is not vacuous: a KDIGO rule with another threshold disagrees somewhere."""
    t = get_template("labs.aki_max_kdigo_stage")
    changed = Template(**{**{f: getattr(t, f) for f in ("id", "intent", "level", "paraphrases", "sampler_sql",
                                                      "answer", "evidence", "noise", "entity_ref", "tier")},
                          "gold_sql": t.gold_sql.replace("2.0 * low7d", "2.5 * low7d").replace("3.0 * low7d",
                                                                                            "3.5 * low7d")})
    assert isinstance(changed.evidence, Evidence)
    disagree = 0
    for c in hard_builder.candidates[t.id][:30]:
        sql = render_sql(changed.gold_sql, c.params, plain_relation(changed))
        got = hard_builder.verifier.value(sql, t.answer)
        disagree += not answers_match(got, aki_max_kdigo_stage(synth_frames, c.params), t.answer)
    assert disagree >= 1


def test_card_reports_complexity_by_tier(synth_db):
    from ehrgym.bench.builder import make_tasks
    from ehrgym.bench.card import card_markdown, make_card

    templates = [get_template("labs.first_value_admission"), get_template("labs.aki_onset_time"),
                 get_template("labs.cohort_icu_aki_rate")]
    b = Builder(synth_db, BuildConfig("t", 12, min_candidates=16, tier_weights=(1.0, 1.0, 2.0)), seed=3,
                progress=False, templates=templates)
    try:
        drafts = b.run()
    finally:
        b.close()
    tasks = make_tasks(drafts, _AnySplit())
    assert {t.meta["tier"] for t in tasks} == {1, 3}
    card = make_card(tasks, {})
    tiers = card["sql_complexity"]["by_tier"]
    assert set(tiers) == {"1", "3"} and tiers["3"]["mean"] > tiers["1"]["mean"]
    assert sum(card["by_tier"].values()) == card["pairs"] and card["by_tier"]["3"] > card["by_tier"]["1"]
    assert "## Difficulty tiers" in card_markdown(card)


class _AnySplit(dict):
    """Every pair in the train split."""

    def __missing__(self, key):
        return "train"
