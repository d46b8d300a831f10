"""The episode and comorbidity templates (``templates/episodes.py``, ``templates/comorbidity.py``):
tier and complexity, clinical wording, verified pairs on the 200-patient synthetic hospital, and each
gold SQL checked against an independent pandas computation written from the question's definition
(on the synthetic hospital and, where its tables hold data, the MIMIC-IV demo; skipped without it)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.builder import Builder
from ehrgym.bench.complexity import sql_complexity
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.cleaning import plain_relation
from ehrgym.bench.sqlrender import render_sql, render_text
from ehrgym.bench.templates import Template, all_templates
from ehrgym.bench.templates.registry import template_module
from tests.gold_checks import Frames, check_against, disagreements, gold_value

MODULES = ("episodes", "comorbidity")
NEW = [t for t in all_templates() if template_module(t.id).rsplit(".", 1)[-1] in MODULES]
H, DAY = pd.Timedelta(hours=1), pd.Timedelta(days=1)


def test_new_templates_are_tier_3_and_complex():
    assert {t.id for t in NEW} == set(PANDAS)
    assert {t.intent for t in NEW} == {"medications", "encounters", "diagnoses", "vitals"}
    for t in NEW:
        assert t.tier == 3, t.id
        plain = render_sql(t.gold_sql, {p: 1 for p in t.params}, plain_relation(t))
        assert sql_complexity(plain) >= 30, t.id
        assert all(INJECTORS[s].applies(t) for s in t.noise), t.id  # no subtype listed that can never apply


# ---------------------------------------------------------------- on the synthetic hospital

@pytest.fixture(scope="module")
def builder(synth_db):
    b = Builder(synth_db, BuildConfig("t", 10, min_candidates=40), seed=5, progress=False, templates=NEW)
    for t in NEW:
        b._draw(t, 40)
    yield b
    b.close()


RAW_VOCAB_SQL = """
SELECT DISTINCT admission_type FROM mimiciv_hosp.admissions UNION
SELECT DISTINCT careunit FROM mimiciv_hosp.transfers WHERE careunit IS NOT NULL UNION
SELECT DISTINCT long_title FROM mimiciv_hosp.d_icd_diagnoses"""


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_questions_speak_clinically(builder, template):
    raw = [r[0] for r in builder.verifier.con.execute(RAW_VOCAB_SQL).fetchall() if len(str(r[0])) > 12]
    cands = builder.candidates[template.id]
    assert cands
    for c in cands[:5]:
        for p in template.paraphrases:
            q = render_text(p, c.params)
            assert not re.search(r"\{|\}|itemid|icd_code|hadm_id =", q), q
            leaked = [w for w in raw if w.lower() in q.lower() and w.lower() != str(c.params.get("title", "")).lower()]
            assert not leaked, f"{q!r} quotes database strings {leaked}"


def verified_pairs(builder: Builder, template: Template, candidates: int = 30) -> Counter:
    """Pairs the builder verifies on the first candidates of ``template``, one per candidate, per subtype."""
    made, used = Counter(), set()
    for c in builder.candidates[template.id][:candidates]:
        for sub in sorted(template.noise, key=lambda s: made[s]):
            if c.index in used or not INJECTORS[sub].accepts(template, c.params):
                continue
            if builder.attempt(template, sub, c) is not None:
                made[sub] += 1
                used.add(c.index)
    return made


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_yields_verified_pairs(builder, template):
    made = verified_pairs(builder, template)
    assert sum(made.values()) >= 8, (template.id, dict(made))
    # several subtypes, not one (or every one a template lists, where it lists fewer: the Charlson index lists
    # two since questions that name nothing to swap get no out-of-scope twin)
    assert len(made) >= min(3, len(template.noise)), (template.id, dict(made))


# ---------------------------------------------------------------- independent pandas computations

def peak_norepinephrine_equivalent(f: Frames, p: dict) -> float | None:
    # norepinephrine and epinephrine 1:1, phenylephrine 1/10, dopamine 1/100, vasopressin units/min x 2.5
    weight = {221906: 1.0, 221289: 1.0, 221749: 0.1, 221662: 0.01}
    iv = f.inputevents
    iv = iv[(iv.stay_id == p["stay_id"]) & (iv.rate > 0) & (iv.endtime > iv.starttime)]
    doses = []
    for r in iv.itertuples():
        if r.itemid in weight:
            doses.append((r.starttime, r.endtime, r.rate * weight[r.itemid]))
        elif r.itemid == 222315:
            per_min = r.rate if r.rateuom == "units/min" else r.rate / 60
            doses.append((r.starttime, r.endtime, per_min * 2.5))
    if not doses:
        return None
    return max(sum(d for s, e, d in doses if s <= t < e) for t, _, _ in doses)


def icu_free_days_28(f: Frames, p: dict) -> float:
    adm = f.admissions.set_index("hadm_id").loc[p["hadm_id"]]
    start = adm.admittime
    end = start + 28 * DAY
    dod = f.patients.set_index("subject_id").loc[p["subject_id"], "dod"]
    died = adm.deathtime if pd.notna(adm.deathtime) else (pd.Timestamp(dod) if pd.notna(dod) else None)
    if died is not None and died < end:
        return 0.0
    icu = f.icustays[f.icustays.subject_id == p["subject_id"]]
    inside = sum((max(pd.Timedelta(0), min(r.outtime, end) - max(r.intime, start)) for r in icu.itertuples()
                  if r.intime < end and r.outtime > start), pd.Timedelta(0))
    return 28 - pd.Timedelta(inside).total_seconds() / 86400


def _has_condition(dx: pd.DataFrame, name: str) -> pd.Series:
    """ICD prefixes per condition, written out here (not read from the concept table)."""
    prefixes = {"acute kidney injury": {9: ("584",), 10: ("N17",)},
                "heart failure": {9: ("428",), 10: ("I50",)},
                "essential hypertension": {9: ("401",), 10: ("I10",)},
                "COPD": {9: ("491", "492", "496"), 10: ("J44",)},
                "chronic kidney disease": {9: ("585",), 10: ("N18",)},
                "sepsis": {9: ("038", "99591", "99592", "78552"), 10: ("A40", "A41", "R652")},
                "pneumonia": {9: tuple(str(c) for c in range(480, 487)), 10: tuple(f"J1{d}" for d in range(2, 9))},
                "atrial fibrillation": {9: ("42731",), 10: ("I480", "I481", "I482", "I4891")},
                "urinary tract infection": {9: ("5990",), 10: ("N390",)},
                "acute respiratory failure": {9: ("51881", "51884"), 10: ("J960", "J962")},
                "cirrhosis of the liver": {9: ("5712", "5715", "5716"), 10: ("K703", "K746")},
                "gastrointestinal hemorrhage": {9: ("578",), 10: ("K920", "K921", "K922")},
                "type 2 diabetes": {9: tuple(f"250{d}{t}" for d in range(10) for t in (0, 2)), 10: ("E11",)},
                "ischemic stroke": {9: tuple(f"43{a}{d}1" for a in (3, 4) for d in range(10)), 10: ("I63",)}}
    if name not in prefixes:
        pytest.fail(f"no written-out prefixes for {name!r}")
    code = dx.icd_code.astype(str)
    hit = pd.Series(False, index=dx.index)
    for version, pre in prefixes[name].items():
        hit |= (dx.icd_version == version) & code.str.startswith(pre)
    return hit


def days_to_readmission_after_condition(f: Frames, p: dict) -> float | None:
    dx = f.diagnoses_icd[f.diagnoses_icd.subject_id == p["subject_id"]]
    coded = set(dx[_has_condition(dx, p["title"])].hadm_id)
    adm = f.admissions[f.admissions.subject_id == p["subject_id"]].sort_values("admittime")
    first = adm[adm.hadm_id.isin(coded)].iloc[0]
    later = adm[adm.admittime > first.dischtime]
    return None if later.empty else (later.admittime.min() - first.dischtime).total_seconds() / 86400


def cohort_30day_readmission_rate(f: Frames, p: dict) -> float | None:
    adm = f.admissions
    coded = set(f.diagnoses_icd[_has_condition(f.diagnoses_icd, p["title"])].hadm_id)
    t0, t1 = pd.Timestamp(p["t0"]), pd.Timestamp(p["t1"])
    index = adm[adm.hadm_id.isin(coded) & (adm.admittime >= t0) & (adm.admittime < t1)
                & (adm.hospital_expire_flag == 0) & adm.dischtime.notna()]
    if index.empty:
        return None
    back = 0
    for r in index.itertuples():
        other = adm[(adm.subject_id == r.subject_id) & (adm.admittime > r.dischtime)
                    & (adm.admittime <= r.dischtime + 30 * DAY)]
        back += not other.empty
    return round(100 * back / len(index), 2)


def sirs_criteria_first_day(f: Frames, p: dict) -> int | None:
    stay = f.icustays.set_index("stay_id").loc[p["stay_id"]]
    ce = f.chartevents
    ce = ce[(ce.stay_id == p["stay_id"]) & ce.charttime.between(stay.intime, stay.intime + 24 * H)]
    hr = ce[ce.itemid == 220045].valuenum
    rr = ce[ce.itemid.isin([220210, 224690])].valuenum
    temp = pd.concat([ce[ce.itemid == 223762].valuenum, (ce[ce.itemid == 223761].valuenum - 32) * 5 / 9])
    if hr.dropna().empty and rr.dropna().empty and temp.dropna().empty:
        return None
    le = f.labevents
    le = le[(le.hadm_id == stay.hadm_id) & le.charttime.between(stay.intime - 6 * H, stay.intime + 24 * H)]
    wbc = le[le.itemid.isin([51300, 51301])].valuenum
    bands = le[le.itemid == 51144].valuenum
    paco2 = le[le.itemid == 50818].valuenum
    return int((temp > 38).any() or (temp < 36).any()) + int((hr > 90).any()) \
        + int((rr > 20).any() or (paco2 < 32).any()) + int((wbc > 12).any() or (wbc < 4).any() or (bands > 10).any())


# Charlson conditions (Quan 2005 as coded in the MIMIC code repository's charlson.sql), written as
# predicates on the code string: (icd9 rule, icd10 rule, weight, family)
def _in(code: str, n: int, *values: str) -> bool:
    return code[:n] in values


def _between(code: str, lo: str, hi: str) -> bool:
    return lo <= code[:len(lo)] <= hi


CHARLSON_RULES: dict[str, tuple[Callable[[str], bool], Callable[[str], bool], int, str]] = {
    "mi": (lambda c: _in(c, 3, "410", "412"), lambda c: _in(c, 3, "I21", "I22") or _in(c, 4, "I252"), 1, "mi"),
    "chf": (lambda c: _in(c, 3, "428") or _in(c, 5, "39891", "40201", "40211", "40291", "40401", "40403", "40411",
                                               "40413", "40491", "40493") or _between(c, "4254", "4259"),
            lambda c: _in(c, 3, "I43", "I50") or _in(c, 4, "I099", "I110", "I130", "I132", "I255", "I420", "I425",
                                                      "I426", "I427", "I428", "I429", "P290"), 1, "chf"),
    "pvd": (lambda c: _in(c, 3, "440", "441") or _in(c, 4, "0930", "4373", "4471", "5571", "5579", "V434")
            or _between(c, "4431", "4439"),
            lambda c: _in(c, 3, "I70", "I71") or _in(c, 4, "I731", "I738", "I739", "I771", "I790", "I792", "K551",
                                                      "K558", "K559", "Z958", "Z959"), 1, "pvd"),
    "cvd": (lambda c: _between(c, "430", "438") or _in(c, 5, "36234"),
            lambda c: _in(c, 3, "G45", "G46") or _between(c, "I60", "I69") or _in(c, 4, "H340"), 1, "cvd"),
    "dementia": (lambda c: _in(c, 3, "290") or _in(c, 4, "2941", "3312"),
                 lambda c: _in(c, 3, "F00", "F01", "F02", "F03", "G30") or _in(c, 4, "F051", "G311"), 1, "dementia"),
    "cpd": (lambda c: _between(c, "490", "505") or _in(c, 4, "4168", "4169", "5064", "5081", "5088"),
            lambda c: _between(c, "J40", "J47") or _between(c, "J60", "J67")
            or _in(c, 4, "I278", "I279", "J684", "J701", "J703"), 1, "cpd"),
    "rheum": (lambda c: _in(c, 3, "725") or _in(c, 4, "4465", "7100", "7101", "7102", "7103", "7104", "7140", "7141",
                                                 "7142", "7148"),
              lambda c: _in(c, 3, "M05", "M06", "M32", "M33", "M34") or _in(c, 4, "M315", "M351", "M353", "M360"),
              1, "rheum"),
    "pud": (lambda c: _in(c, 3, "531", "532", "533", "534"), lambda c: _in(c, 3, "K25", "K26", "K27", "K28"), 1, "pud"),
    "mild_liver": (lambda c: _in(c, 3, "570", "571") or _in(c, 4, "0706", "0709", "5733", "5734", "5738", "5739", "V427")
                   or _in(c, 5, "07022", "07023", "07032", "07033", "07044", "07054"),
                   lambda c: _in(c, 3, "B18", "K73", "K74") or _in(c, 4, "K700", "K701", "K702", "K703", "K709", "K713",
                                                                   "K714", "K715", "K717", "K760", "K762", "K763",
                                                                   "K764", "K768", "K769", "Z944"), 1, "liver"),
    "dm": (lambda c: _in(c, 4, "2500", "2501", "2502", "2503", "2508", "2509"),
           lambda c: c[:3] in ("E10", "E11", "E12", "E13", "E14") and c[3:4] in ("0", "1", "6", "8", "9"), 1, "dm"),
    "dm_cc": (lambda c: _in(c, 4, "2504", "2505", "2506", "2507"),
              lambda c: c[:3] in ("E10", "E11", "E12", "E13", "E14") and c[3:4] in ("2", "3", "4", "5", "7"), 2, "dm"),
    "plegia": (lambda c: _in(c, 3, "342", "343") or _in(c, 4, "3341", "3440", "3441", "3442", "3443", "3444", "3445",
                                                        "3446", "3449"),
               lambda c: _in(c, 3, "G81", "G82") or _in(c, 4, "G041", "G114", "G801", "G802", "G830", "G831", "G832",
                                                         "G833", "G834", "G839"), 2, "plegia"),
    "renal": (lambda c: _in(c, 3, "582", "585", "586", "V56") or _in(c, 4, "5880", "V420", "V451")
              or _between(c, "5830", "5837") or _in(c, 5, "40301", "40311", "40391", "40402", "40403", "40412",
                                                     "40413", "40492", "40493"),
              lambda c: _in(c, 3, "N18", "N19") or _in(c, 4, "I120", "I131", "N032", "N033", "N034", "N035", "N036",
                                                        "N037", "N052", "N053", "N054", "N055", "N056", "N057", "N250",
                                                        "Z490", "Z491", "Z492", "Z940", "Z992"), 2, "renal"),
    "cancer": (lambda c: _between(c, "140", "172") or _between(c, "1740", "1958") or _between(c, "200", "208")
               or _in(c, 4, "2386"),
               lambda c: _in(c, 3, "C43", "C88") or any(_between(c, lo, hi) for lo, hi in (
                   ("C00", "C26"), ("C30", "C34"), ("C37", "C41"), ("C45", "C58"), ("C60", "C76"), ("C81", "C85"),
                   ("C90", "C97"))), 2, "cancer"),
    "severe_liver": (lambda c: _in(c, 4, "4560", "4561", "4562") or _between(c, "5722", "5728"),
                     lambda c: _in(c, 4, "I850", "I859", "I864", "I982", "K704", "K711", "K721", "K729", "K765",
                                   "K766", "K767"), 3, "liver"),
    "metastatic": (lambda c: _in(c, 3, "196", "197", "198", "199"), lambda c: _in(c, 3, "C77", "C78", "C79", "C80"),
                   6, "cancer"),
    "aids": (lambda c: _in(c, 3, "042", "043", "044"), lambda c: _in(c, 3, "B20", "B21", "B22", "B24"), 6, "aids"),
}


def charlson_index(f: Frames, p: dict) -> int:
    dx = f.diagnoses_icd[f.diagnoses_icd.hadm_id == p["hadm_id"]]
    best: dict[str, int] = {}
    for r in dx.itertuples():
        for rule9, rule10, weight, family in CHARLSON_RULES.values():
            if (rule9 if r.icd_version == 9 else rule10)(str(r.icd_code)):
                best[family] = max(best.get(family, 0), weight)
    pat = f.patients.set_index("subject_id").loc[p["subject_id"]]
    admit = f.admissions.set_index("hadm_id").loc[p["hadm_id"], "admittime"]
    age = pat.anchor_age + admit.year - pat.anchor_year
    age_points = 0 if age <= 50 else 1 if age <= 60 else 2 if age <= 70 else 3 if age <= 80 else 4
    return age_points + sum(best.values())


def uncoded_kdigo_aki(f: Frames, p: dict) -> bool:
    le = f.labevents
    cr = le[(le.hadm_id == p["hadm_id"]) & (le.itemid == 50912) & le.valuenum.notna()]
    aki = False
    for r in cr.itertuples():
        before = cr[(cr.charttime < r.charttime) & (cr.charttime >= r.charttime - 7 * DAY)]
        recent = before[before.charttime >= r.charttime - 48 * H]
        aki |= (not recent.empty and r.valuenum >= recent.valuenum.min() + 0.3) or \
               (not before.empty and r.valuenum >= 1.5 * before.valuenum.min())
    dx = f.diagnoses_icd[f.diagnoses_icd.hadm_id == p["hadm_id"]]
    code = dx.icd_code.astype(str)
    coded = (((dx.icd_version == 9) & code.str.startswith("584")) | ((dx.icd_version == 10) & code.str.startswith("N17")))
    return bool(aki and not coded.any())


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "medications.peak_norepinephrine_equivalent": peak_norepinephrine_equivalent,
    "encounters.icu_free_days_28": icu_free_days_28,
    "diagnoses.days_to_readmission_after_condition": days_to_readmission_after_condition,
    "encounters.cohort_30day_readmission_rate": cohort_30day_readmission_rate,
    "vitals.sirs_criteria_first_day": sirs_criteria_first_day,
    "diagnoses.charlson_index": charlson_index,
    "diagnoses.uncoded_kdigo_aki": uncoded_kdigo_aki,
}


@pytest.fixture(scope="module")
def synth_frames(synth_db):
    f = Frames(synth_db)
    yield f
    f.con.close()


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(builder, synth_frames, template):
    seen = check_against(builder, synth_frames, template, 25, PANDAS[template.id])
    assert len(seen) >= 15
    if template.answer.type != "boolean":
        assert len({str(v) for v in seen}) >= 2, (template.id, seen)  # answers vary between entities


def test_boolean_answers_take_both_values(builder, synth_frames):
    t = next(t for t in NEW if t.id == "diagnoses.uncoded_kdigo_aki")
    values = [builder._clean(t, c)[0] for c in builder.candidates[t.id][:40]]
    assert {True, False} <= set(values), Counter(values)


@pytest.fixture(scope="module")
def demo_checks(demo_db):
    b = Builder(demo_db, BuildConfig("t", 10, min_candidates=12), seed=5, progress=False, templates=NEW)
    frames = Frames(demo_db)
    try:
        yield b, frames
    finally:
        frames.con.close()
        b.close()


@pytest.mark.parametrize("template", [t for t in NEW if t.evidence.table != "chartevents"], ids=lambda t: t.id)
def test_gold_matches_pandas_on_the_demo(demo_checks, template):
    """The real MIMIC-IV demo (no chartevents: the SIRS template is checked on the synthetic hospital only)."""
    b, frames = demo_checks
    b._draw(template, 12)
    assert b.candidates[template.id], f"{template.id}: no candidate on the demo"
    assert len(check_against(b, frames, template, 12, PANDAS[template.id])) >= 1


def test_icu_free_days_are_zero_after_an_early_death(builder, synth_frames):
    """Deaths within 28 days are among the checked stays (answer 0 although ICU days were fewer than 28)."""
    t = next(t for t in NEW if t.id == "encounters.icu_free_days_28")
    zero = [c for c in builder.candidates[t.id] if icu_free_days_28(synth_frames, c.params) == 0]
    assert zero
    for c in zero[:3]:
        assert builder._clean(t, c)[0] == 0, c.params


def _gold(builder: Builder, template: Template, params: dict) -> Any:
    return gold_value(builder, template, params)


def _families(f: Frames, hadm: int) -> Counter:
    dx = f.diagnoses_icd[f.diagnoses_icd.hadm_id == hadm]
    return Counter(name for r in dx.itertuples() for name, (r9, r10, _, _) in CHARLSON_RULES.items()
                   if (r9 if r.icd_version == 9 else r10)(str(r.icd_code)))


def _hierarchy_cases(frames: Frames) -> dict[tuple[str, str], list[dict]]:
    """Admissions coded with both conditions of a family (up to 3 per family)."""
    pairs = (("cancer", "metastatic"), ("dm", "dm_cc"), ("mild_liver", "severe_liver"))
    dx = frames.diagnoses_icd
    found: dict[tuple[str, str], list[dict]] = {pair: [] for pair in pairs}
    for hadm, subject in dx[["hadm_id", "subject_id"]].drop_duplicates().itertuples(index=False):
        fam = _families(frames, hadm)
        for a, b in pairs:
            if fam[a] and fam[b] and len(found[(a, b)]) < 3:
                found[(a, b)].append({"subject_id": int(subject), "hadm_id": int(hadm)})
    return found


def test_charlson_hierarchy_on_admissions_with_both_conditions(builder, synth_frames):
    """Admissions coded with both conditions of a family (cancer and metastases, diabetes with and
    without complications, mild and severe liver disease) count the family once, at the higher weight."""
    t = next(t for t in NEW if t.id == "diagnoses.charlson_index")
    found = _hierarchy_cases(synth_frames)
    assert any(found.values())
    for pair, params in found.items():
        for p in params:
            assert _gold(builder, t, p) == charlson_index(synth_frames, p), (pair, p)


def test_charlson_hierarchy_on_the_demo(demo_checks):
    b, frames = demo_checks
    t = next(t for t in NEW if t.id == "diagnoses.charlson_index")
    found = _hierarchy_cases(frames)
    assert sum(bool(v) for v in found.values()) >= 2, {k: len(v) for k, v in found.items()}
    for pair, params in found.items():
        for p in params:
            assert _gold(b, t, p) == charlson_index(frames, p), (pair, p)


def test_charlson_check_is_not_vacuous(builder, synth_frames):
    """Scores vary, and dropping the family rule (mild and severe liver disease both counted) or the
    age points changes the answer for some admission, so the pandas check can tell definitions apart."""
    t = next(t for t in NEW if t.id == "diagnoses.charlson_index")
    scores = [charlson_index(synth_frames, c.params) for c in builder.candidates[t.id][:40]]
    assert len(set(scores)) >= 3, scores
    no_age = t.gold_sql.replace("CASE WHEN age <= 50", "0 * CASE WHEN age <= 50")
    assert disagreements(builder, synth_frames, t, no_age, charlson_index, 40) >= 1


def test_ned_weights_matter(builder, synth_frames):
    """A peak computed without the phenylephrine weight disagrees with the definition somewhere."""
    t = next(t for t in NEW if t.id == "medications.peak_norepinephrine_equivalent")
    unweighted = t.gold_sql.replace("WHEN 221749 THEN e.rate / 10", "WHEN 221749 THEN e.rate")
    assert unweighted != t.gold_sql
    assert disagreements(builder, synth_frames, t, unweighted, peak_norepinephrine_equivalent, 40) >= 1
