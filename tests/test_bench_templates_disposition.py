"""The disposition templates (``templates/disposition.py``): post-acute care, one-year mortality and transfer-in
mortality. Clinical wording, verified pairs on the 200-patient synthetic hospital, each gold SQL checked against an
independent pandas computation written from the question's definition (synthetic hospital and MIMIC-IV demo), and
the reason they exist: clean questions that use the place words out-of-scope twins use."""

from __future__ import annotations

import re
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.builder import Builder
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.scope import FACILITIES, HOSPITALS
from ehrgym.bench.sqlrender import render_text
from ehrgym.bench.templates import all_templates
from ehrgym.bench.templates.registry import template_module
from tests.test_bench_templates_episodes import RAW_VOCAB_SQL, Frames, _has_condition, check_against, verified_pairs

NEW = [t for t in all_templates() if template_module(t.id).endswith(".disposition")]
POST_ACUTE = {"SKILLED NURSING FACILITY", "REHAB", "CHRONIC/LONG TERM ACUTE CARE"}
TRANSFER_IN = {"TRANSFER FROM HOSPITAL", "TRANSFER FROM SKILLED NURSING FACILITY"}


def _index(f: Frames, p: dict, *, destination: bool) -> pd.DataFrame:
    adm = f.admissions
    coded = set(f.diagnoses_icd[_has_condition(f.diagnoses_icd, p["title"])].hadm_id)
    t0, t1 = pd.Timestamp(p["t0"]), pd.Timestamp(p["t1"])
    keep = adm.hadm_id.isin(coded) & (adm.admittime >= t0) & (adm.admittime < t1) & (adm.hospital_expire_flag == 0)
    keep &= adm.discharge_location.notna() if destination else adm.dischtime.notna()
    return adm[keep]


def post_acute_rate(f: Frames, p: dict) -> float | None:
    index = _index(f, p, destination=True)
    return None if index.empty else round(100 * index.discharge_location.isin(POST_ACUTE).sum() / len(index), 2)


def one_year_mortality(f: Frames, p: dict) -> float | None:
    index = _index(f, p, destination=False)
    if index.empty:
        return None
    dod = f.patients.set_index("subject_id").dod
    died = 0
    for r in index.itertuples():
        d = dod.get(r.subject_id)
        died += bool(pd.notna(d) and pd.Timestamp(d) <= (r.dischtime + pd.DateOffset(years=1)).normalize())
    return round(100 * died / len(index), 2)


def transfer_in_mortality(f: Frames, p: dict) -> float | None:
    adm = f.admissions
    t0, t1 = pd.Timestamp(p["t0"]), pd.Timestamp(p["t1"])
    cohort = adm[adm.admission_location.isin(TRANSFER_IN) & (adm.admittime >= t0) & (adm.admittime < t1)]
    return None if cohort.empty else round(100 * (cohort.hospital_expire_flag == 1).sum() / len(cohort), 2)


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "encounters.cohort_post_acute_discharge_rate": post_acute_rate,
    "encounters.cohort_one_year_mortality": one_year_mortality,
    "encounters.cohort_transfer_in_mortality": transfer_in_mortality,
}


def test_templates_are_registered_with_their_tiers():
    assert {t.id for t in NEW} == set(PANDAS)
    assert {t.id: t.tier for t in NEW} == {"encounters.cohort_post_acute_discharge_rate": 3,
                                           "encounters.cohort_one_year_mortality": 3,
                                           "encounters.cohort_transfer_in_mortality": 2}
    for t in NEW:
        assert all(INJECTORS[s].applies(t) for s in t.noise), t.id


def test_clean_questions_use_the_place_words_out_of_scope_twins_use():
    words = " ".join(p.lower() for t in NEW for p in t.paraphrases)
    used = [w for w in HOSPITALS + FACILITIES + ("home", "one year", "after discharge") if w in words]
    assert len(used) >= 5, used


@pytest.fixture(scope="module")
def builder(synth_db):
    b = Builder(synth_db, BuildConfig("t", 10, min_candidates=40), seed=5, progress=False, templates=NEW)
    for t in NEW:
        b._draw(t, 40)
    yield b
    b.close()


@pytest.fixture(scope="module")
def synth_frames(synth_db):
    f = Frames(synth_db)
    yield f
    f.con.close()


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_questions_speak_clinically(builder, template):
    raw = [r[0] for r in builder.verifier.con.execute(RAW_VOCAB_SQL).fetchall() if len(str(r[0])) > 12]
    raw += sorted(POST_ACUTE | TRANSFER_IN)
    for c in builder.candidates[template.id][:5]:
        for p in template.paraphrases:
            q = render_text(p, c.params)
            assert not re.search(r"\{|\}|_location|hospital_expire_flag|dod\b", q), q
            leaked = [w for w in raw if w in q and w.lower() != str(c.params.get("title", "")).lower()]
            assert not leaked, f"{q!r} quotes database strings {leaked}"


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_yields_verified_pairs(builder, template):
    made = verified_pairs(builder, template)
    assert sum(made.values()) >= 8, (template.id, dict(made))
    assert len(made) >= min(3, len(template.noise)), (template.id, dict(made))  # several subtypes, not one


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_synth(builder, synth_frames, template):
    seen = check_against(builder, synth_frames, template, 25, PANDAS[template.id])
    assert len(seen) >= 15
    assert len({str(v) for v in seen}) >= 2, (template.id, seen)
    assert any(0 < float(v) < 100 for v in seen), (template.id, seen)  # not only all-or-nothing cohorts


@pytest.fixture(scope="module")
def demo_checks(demo_db):
    b = Builder(demo_db, BuildConfig("t", 10, min_candidates=12), seed=5, progress=False, templates=NEW)
    frames = Frames(demo_db)
    try:
        yield b, frames
    finally:
        frames.con.close()
        b.close()


@pytest.mark.parametrize("template", NEW, ids=lambda t: t.id)
def test_gold_matches_pandas_on_the_demo(demo_checks, template):
    b, frames = demo_checks
    b._draw(template, 12)
    assert b.candidates[template.id], f"{template.id}: no candidate on the demo"
    assert len(check_against(b, frames, template, 12, PANDAS[template.id])) >= 1
