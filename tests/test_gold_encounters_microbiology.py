"""Gold SQL of the encounter and microbiology templates listed in ``IDS`` against independent pandas computations.

Each template's clean gold answer (what ``Builder._clean`` gives) is compared, with ``answers_match`` under the
template's answer spec, with a pandas function written from the question's words over the raw tables (admissions,
patients, transfers, icustays, microbiologyevents) — never from the gold SQL or the concept relations. Clinical names
are mapped to database values by text rules written here: admission types by their words ("EMER", "OBSERVATION"),
ICU care units by the abbreviation in brackets ("(MICU)"), specimens by ``spec_type_desc`` and organisms by regular
expressions on ``org_name``. Checked on the 200-patient synthetic hospital (first 25 candidates) and on the MIMIC-IV
demo (first 12; skipped without it), plus one check that a plausible wrong definition (counting every transfer
event, bed moves within a unit included) disagrees with the pandas definition, so the comparison is not vacuous.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pandas as pd
import pytest

from ehrgym.bench.noise.cleaning import plain_relation
from ehrgym.bench.sqlrender import render_sql
from ehrgym.bench.templates.registry import get_template
from tests.gold_checks import Frames, assert_gold_on_demo, assert_gold_on_synth, disagreements

IDS = ("encounters.age_at_admission", "encounters.cohort_mean_icu_los", "encounters.cohort_mortality",
       "encounters.cohort_readmitted_patients", "encounters.cohort_top_careunit", "encounters.icu_los",
       "encounters.transfer_count", "microbiology.cohort_max_mic", "microbiology.cohort_top_organism",
       "microbiology.first_positive_time", "microbiology.organisms_grown", "microbiology.resistant_antibiotics",
       "microbiology.cohort_resistance_rate", "microbiology.mic_value", "microbiology.organism_isolated")
NEW = [get_template(i) for i in IDS]
DAY = pd.Timedelta(days=1)

# ---------------------------------------------------------------- clinical names as text rules

# admission types as a clinician names them, read off the words of admissions.admission_type
ADMISSION_TYPE_RULES: dict[str, Callable[[str], bool]] = {
    "emergency": lambda t: "EMER" in t,                      # ED (EW EMER.) and direct emergency admissions
    "urgent": lambda t: t == "URGENT",
    "elective": lambda t: t == "ELECTIVE" or t.startswith("SURGICAL SAME DAY"),  # scheduled, same-day surgery included
    "observation": lambda t: "OBSERVATION" in t,             # every kind of observation admission
}

# ICU care units by the abbreviation MIMIC-IV writes in brackets after the unit's name
CAREUNIT_ABBREVIATIONS = {"medical ICU": "MICU", "surgical ICU": "SICU", "cardiac surgery ICU": "CVICU",
                          "coronary care unit": "CCU", "trauma surgical ICU": "TSICU",
                          "mixed medical-surgical ICU": "MICU/SICU", "neurosurgical ICU": "Neuro SICU"}

# specimens: the spec_type_desc values a clinician's specimen word covers
SPECIMEN_RULES: dict[str, Callable[[str], bool]] = {
    "blood culture": lambda s: s.startswith("BLOOD CULTURE") and "NEONATE" not in s,  # aerobic/anaerobic, Myco/F
    "urine culture": lambda s: s == "URINE", "sputum culture": lambda s: s == "SPUTUM",
    "bronchoalveolar lavage culture": lambda s: s in ("BRONCHOALVEOLAR LAVAGE", "Mini-BAL"),
    "MRSA screening swab": lambda s: s == "MRSA SCREEN", "stool culture": lambda s: s == "STOOL",
    "CSF culture": lambda s: s.startswith("CSF"), "pleural fluid culture": lambda s: s == "PLEURAL FLUID",
    "peritoneal fluid culture": lambda s: s == "PERITONEAL FLUID",
}

# organisms as a clinician names them, as regular expressions on org_name
ORGANISM_RULES = {"Escherichia coli": r"^ESCHERICHIA COLI$", "Staphylococcus aureus": r"^STAPH(?:YLOCOCCUS)? AUREUS",
                  "Klebsiella pneumoniae": r"^KLEBSIELLA PNEUMONIAE$",
                  "Pseudomonas aeruginosa": r"^PSEUDOMONAS AERUGINOSA$", "Proteus mirabilis": r"^PROTEUS MIRABILIS$",
                  "Enterococcus species": r"^ENTEROCOCCUS", "coagulase-negative staphylococci": r"COAGULASE NEGATIVE",
                  "Enterobacter cloacae complex": r"^ENTEROBACTER CLOACAE", "yeast": r"^YEAST$"}

# org_name values that are no organism: a cancelled test grew nothing
NOT_GROWTH = {"CANCELLED"}


def _admission_type(adm: pd.DataFrame, name: str) -> pd.Series:
    return adm.admission_type.fillna("").map(ADMISSION_TYPE_RULES[name]).astype(bool)


def _careunit(units: pd.Series, name: str) -> pd.Series:
    return units.fillna("").str.extract(r"\(([^()]*)\)\s*$", expand=False) == CAREUNIT_ABBREVIATIONS[name]


def _specimen(m: pd.DataFrame, name: str) -> pd.Series:
    return m.spec_type_desc.fillna("").map(SPECIMEN_RULES[name]).astype(bool)


def _organism(m: pd.DataFrame, name: str) -> pd.Series:
    return m.org_name.fillna("").str.contains(ORGANISM_RULES[name], regex=True)


def _grew(m: pd.DataFrame) -> pd.Series:
    return m.org_name.notna() & ~m.org_name.isin(NOT_GROWTH)


def _inpatient_in_year(m: pd.DataFrame, year: int) -> pd.Series:
    """Specimens of hospital admissions collected in ``year`` (the collection time, else its date)."""
    collected = m.charttime.fillna(m.chartdate)
    return m.hadm_id.notna() & (collected.dt.year == year)


def _stay_days(stays: pd.DataFrame) -> pd.Series:
    return (stays.outtime - stays.intime) / DAY


# ---------------------------------------------------------------- encounters

def age_at_admission(f: Frames, p: dict) -> int:
    # MIMIC-IV ages: anchor_age in anchor_year, plus the years from anchor_year to the admission's year
    pat = f.patients.set_index("subject_id").loc[p["subject_id"]]
    adm = f.admissions.set_index("hadm_id").loc[p["hadm_id"]]
    assert adm.subject_id == p["subject_id"]
    return int(pat.anchor_age + adm.admittime.year - pat.anchor_year)


def icu_los(f: Frames, p: dict) -> float:
    stays = f.icustays
    stay = stays[(stays.stay_id == p["stay_id"]) & (stays.subject_id == p["subject_id"])]
    assert len(stay) == 1
    return float(_stay_days(stay).iloc[0])


def transfer_count(f: Frames, p: dict) -> int:
    """Moves from one care unit to another after admission: transfer events into a unit other than the one the
    patient was in (a bed move inside the same unit is a transfer event, not a move between units)."""
    tr = f.transfers
    tr = tr[(tr.hadm_id == p["hadm_id"]) & (tr.subject_id == p["subject_id"])
            & tr.eventtype.isin(["admit", "transfer"])].sort_values(["intime", "transfer_id"])
    units, events = tr.careunit.tolist(), tr.eventtype.tolist()
    return sum(events[i] == "transfer" and (i == 0 or units[i] != units[i - 1]) for i in range(len(units)))


def cohort_mortality(f: Frames, p: dict) -> float | None:
    adm = f.admissions
    year = adm[adm.admittime.dt.year == p["year"]]
    return None if year.empty else 100 * int((year.hospital_expire_flag == 1).sum()) / len(year)


def cohort_top_careunit(f: Frames, p: dict) -> list[str] | None:
    icu = f.icustays
    n = icu[icu.intime.dt.year == p["year"]].first_careunit.value_counts()
    return None if n.empty else sorted(n[n == n.max()].index)


def cohort_mean_icu_los(f: Frames, p: dict) -> float | None:
    icu = f.icustays
    sel = icu[(icu.intime.dt.year == p["year"]) & _careunit(icu.first_careunit, p["first_careunit"])]
    days = _stay_days(sel).dropna()
    return None if days.empty else float(days.mean())


def cohort_readmitted_patients(f: Frames, p: dict) -> int:
    adm = f.admissions
    sel = adm[(adm.admittime.dt.year == p["year"]) & _admission_type(adm, p["admission_type"])]
    per_patient = sel.groupby("subject_id").hadm_id.nunique()
    return int((per_patient > 1).sum())


# ---------------------------------------------------------------- microbiology

def organisms_grown(f: Frames, p: dict) -> list[str] | None:
    m = f.microbiologyevents
    sel = m[(m.hadm_id == p["hadm_id"]) & (m.subject_id == p["subject_id"]) & _specimen(m, p["specimen"]) & _grew(m)]
    return sorted(set(sel.org_name)) or None


def first_positive_time(f: Frames, p: dict) -> pd.Timestamp | None:
    m = f.microbiologyevents
    sel = m[(m.hadm_id == p["hadm_id"]) & (m.subject_id == p["subject_id"]) & _specimen(m, p["specimen"]) & _grew(m)]
    first = sel.charttime.min()
    return None if pd.isna(first) else first


def resistant_antibiotics(f: Frames, p: dict) -> list[str] | None:
    m = f.microbiologyevents
    sel = m[(m.hadm_id == p["hadm_id"]) & (m.subject_id == p["subject_id"]) & _organism(m, p["organism"])
            & (m.interpretation.str.strip() == "R") & m.ab_name.notna()]
    return sorted(set(sel.ab_name.str.lower())) or None


def cohort_resistance_rate(f: Frames, p: dict) -> float | None:
    """Percent of the organism's results against the antibiotic, in the specimen kind's inpatient isolates, read R."""
    m = f.microbiologyevents
    sel = m[m.hadm_id.notna() & _specimen(m, p["specimen"]) & _organism(m, p["organism"])
            & (m.ab_name.fillna("").str.lower() == p["antibiotic"])]
    return None if sel.empty else 100.0 * float((sel.interpretation.str.strip() == "R").mean())


def mic_value(f: Frames, p: dict) -> float | None:
    """The MIC of the antibiotic reported for the organism's isolate in the admission (one value: several isolates
    that disagree give no single answer)."""
    m = f.microbiologyevents
    sel = m[(m.hadm_id == p["hadm_id"]) & (m.subject_id == p["subject_id"]) & _organism(m, p["organism"])
            & (m.ab_name.fillna("").str.lower() == p["antibiotic"])]
    mics = {v for v in sel.dilution_text.map(_mic) if v is not None}
    return mics.pop() if len(mics) == 1 else None


def organism_isolated(f: Frames, p: dict) -> bool:
    """Whether the organism grew in any culture of the admission."""
    m = f.microbiologyevents
    return bool(((m.hadm_id == p["hadm_id"]) & (m.subject_id == p["subject_id"]) & _organism(m, p["organism"])).any())


def cohort_top_organism(f: Frames, p: dict) -> str | None:
    m = f.microbiologyevents
    sel = m[_inpatient_in_year(m, p["year"]) & _specimen(m, p["specimen"]) & _grew(m)]
    n = sel.groupby("org_name").micro_specimen_id.nunique()
    if n.empty:
        return None
    top = sorted(n[n == n.max()].index)
    return top[0] if len(top) == 1 else "; ".join(top)  # a tie is no single answer (and matches no single name)


def _mic(text: str | None) -> float | None:
    """The concentration of a reported MIC ("<=0.25", "=>32", ">256", "4")."""
    hit = re.search(r"\d+(?:\.\d+)?", str(text)) if text is not None and not pd.isna(text) else None
    return float(hit.group()) if hit else None


def cohort_max_mic(f: Frames, p: dict) -> float | None:
    m = f.microbiologyevents
    sel = m[_inpatient_in_year(m, p["year"]) & _organism(m, p["organism"])
            & (m.ab_name.fillna("").str.lower() == p["antibiotic"])]
    mics = [v for v in sel.dilution_text.map(_mic) if v is not None]
    return max(mics) if mics else None


PANDAS: dict[str, Callable[[Frames, dict], Any]] = {
    "encounters.age_at_admission": age_at_admission,
    "encounters.cohort_mean_icu_los": cohort_mean_icu_los,
    "encounters.cohort_mortality": cohort_mortality,
    "encounters.cohort_readmitted_patients": cohort_readmitted_patients,
    "encounters.cohort_top_careunit": cohort_top_careunit,
    "encounters.icu_los": icu_los,
    "encounters.transfer_count": transfer_count,
    "microbiology.cohort_max_mic": cohort_max_mic,
    "microbiology.cohort_top_organism": cohort_top_organism,
    "microbiology.first_positive_time": first_positive_time,
    "microbiology.organisms_grown": organisms_grown,
    "microbiology.resistant_antibiotics": resistant_antibiotics,
    "microbiology.cohort_resistance_rate": cohort_resistance_rate,
    "microbiology.mic_value": mic_value,
    "microbiology.organism_isolated": organism_isolated,
}


def test_every_listed_template_has_a_check():
    assert set(PANDAS) == set(IDS)
    assert len(IDS) == len(set(IDS)) == len(NEW)


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
    """Counting every transfer event (bed moves inside one unit included) disagrees with the number of moves
    between care units on some admission, so the pandas check tells the two definitions apart."""
    t = get_template("encounters.transfer_count")
    every_event = """SELECT count(*)
FROM {transfers} e
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id
WHERE a.subject_id = {subject_id} AND a.hadm_id = {hadm_id} AND e.eventtype = 'transfer'"""
    assert disagreements(gold_builder, gold_frames, t, every_event, transfer_count, 30) >= 1


@pytest.mark.parametrize("template_id", ["microbiology.organisms_grown", "microbiology.first_positive_time"])
def test_a_cancelled_culture_is_no_growth(gold_builder, template_id):
    """``org_name = 'CANCELLED'`` (frequent in MIMIC-IV, absent from the synthetic hospital) reports a test never
    done: a cancelled specimen added before the first growth changes neither what grew nor when."""
    from ehrgym.db.overlay import Overlay, TableEdit

    t = get_template(template_id)
    con = gold_builder.verifier.clean_con
    for c in gold_builder.candidates[t.id][:5]:
        sql = render_sql(t.gold_sql, c.params, plain_relation(t))
        clean = gold_builder.verifier.value(sql, t.answer)
        cur = con.execute("SELECT * FROM mimiciv_hosp.microbiologyevents WHERE hadm_id = ? ORDER BY charttime, rowid "
                          "LIMIT 1", [c.params["hadm_id"]])
        row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
        kind = con.execute("SELECT spec_type_desc FROM mimiciv_hosp.microbiologyevents e WHERE hadm_id = ? "
                           "AND spec_type_desc IS NOT NULL ORDER BY charttime LIMIT 1", [c.params["hadm_id"]]).fetchone()
        assert kind is not None
        rows = con.execute(f"SELECT DISTINCT e.spec_type_desc FROM mimiciv_hosp.microbiologyevents e "
                           f"{_spec_join()} WHERE sp.concept = ?", [c.params["specimen"]]).fetchall()
        cancelled = {**row, "spec_type_desc": rows[0][0], "org_name": "CANCELLED", "org_itemid": None,
                     "ab_name": None, "ab_itemid": None, "interpretation": None,
                     "charttime": row["charttime"] - pd.Timedelta(days=1), "chartdate": None,
                     "micro_specimen_id": row["micro_specimen_id"] + 10_000_000,
                     "microevent_id": row["microevent_id"] + 10_000_000}
        cancelled = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in cancelled.items()}
        overlay = Overlay((TableEdit("microbiologyevents", insert_rows=(cancelled,)),))
        assert gold_builder.verifier.value(sql, t.answer, overlay) == clean, c.params
        naive = sql.replace("AND e.org_name NOT IN ('CANCELLED')", "")
        assert naive != sql
        assert gold_builder.verifier.value(naive, t.answer, overlay) != clean, "the cancelled row is not exercised"


def _spec_join() -> str:
    from ehrgym.bench.templates.microbiology import SPEC_JOIN

    return SPEC_JOIN
