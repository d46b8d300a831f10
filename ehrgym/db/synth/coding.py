"""Billing and coding tables: ``diagnoses_icd``, ``procedures_icd``, ``drgcodes``, ``hcpcsevents``,
their dictionaries (``d_icd_diagnoses``, ``d_icd_procedures``, ``d_hcpcs``) and ``omr``.

Codes follow the admission's ICD version (ICD-9 before October 2015 in real time, ICD-10 after);
the dictionaries list both versions of every concept the generator can use.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ehrgym.db.synth import catalog
from ehrgym.db.synth import dictionaries as D
from ehrgym.db.synth.common import DAY, HOUR, NAT, day_of, expand, lexorder, rank_within, uniform_int
from ehrgym.db.synth.conditions import CONDITIONS
from ehrgym.db.synth.timeline import Cohort
from ehrgym.db.synth.writer import TableData, cat, dates, floats, ints

FILLERS_PER_ADMISSION = 4.0
BACKGROUND_DIAGNOSES = 5.0
"""Mean background diagnosis codes per admission (demo catalog, by frequency), on top of the conditions' codes
and the comorbidity fillers."""
BACKGROUND_PROCEDURES = 1.1
DX_KEYS = tuple(D.DIAGNOSES)
PX_KEYS = tuple(D.PROCEDURES)
DRG_KEYS = tuple(D.DRGS)


def _code_labels(concepts: dict[str, D.IcdConcept]) -> tuple[list[str], list[int], list[str]]:
    """Codes, versions and titles of a concept table; concept ``i`` is at ``2i`` (ICD-10) and ``2i+1`` (ICD-9)."""
    codes, versions, titles = [], [], []
    for concept in concepts.values():
        codes += [concept.icd10, concept.icd9]
        versions += [10, 9]
        titles += [concept.title10, concept.title9]
    return codes, versions, titles


def _background_codes(vocab: catalog.CodeCatalog, reserved: Callable[[str, int], bool]
                      ) -> tuple[list[str], list[int], list[str], np.ndarray]:
    """The catalog's codes usable as background codes (not in a condition's family), with their weights."""
    keep = [i for i, (code, version) in enumerate(zip(vocab.code, vocab.version.tolist()))
            if not reserved(code, version)]
    return ([vocab.code[i] for i in keep], [int(vocab.version[i]) for i in keep], [vocab.title[i] for i in keep],
            vocab.weight[keep])


def background_diagnoses() -> tuple[list[str], list[int], list[str], np.ndarray]:
    return _background_codes(catalog.diagnoses(), lambda code, _: code[:3] in D.RESERVED_DIAGNOSIS_CATEGORIES)


def background_procedures() -> tuple[list[str], list[int], list[str], np.ndarray]:
    prefixes = D.reserved_procedure_prefixes()
    return _background_codes(catalog.procedures(),
                             lambda code, version: code[:4 if version == 10 else 3] in prefixes)


def _draw_background(rng: np.random.Generator, c: Cohort, mean: float, versions: list[int], weight: np.ndarray,
                     offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Poisson(mean) background codes per admission, of the admission's ICD version, by frequency.
    Returns (admission, label index = offset + background index)."""
    adm, _ = expand(rng.poisson(mean, c.n_admissions))
    version = np.array(versions)
    code = np.zeros(adm.size, dtype=np.int64)
    u = rng.random(adm.size)
    for v, rows in ((10, c.icd10[adm]), (9, ~c.icd10[adm])):
        pool = np.flatnonzero(version == v)
        cdf = np.cumsum(weight[pool])
        code[rows] = pool[np.minimum(np.searchsorted(cdf / cdf[-1], u[rows], side="right"), pool.size - 1)]
    return adm, offset + code


def dictionary_table(name: str, concepts: dict[str, D.IcdConcept],
                     extra: tuple[list[str], list[int], list[str], np.ndarray] | None = None) -> TableData:
    codes, versions, titles = _code_labels(concepts)
    if extra is not None:
        codes, versions, titles = codes + extra[0], versions + extra[1], titles + extra[2]
    pairs = sorted(set(zip(codes, versions, titles, strict=True)), key=lambda t: (t[1], t[0]))
    seen: set[tuple[str, int]] = set()
    unique = []
    for code, version, title in pairs:
        if (code, version) not in seen:
            seen.add((code, version))
            unique.append((code, version, title))
    n = len(unique)
    return TableData(name, {
        "icd_code": cat(np.arange(n), [u[0] for u in unique]),
        "icd_version": ints(np.array([u[1] for u in unique])),
        "long_title": cat(np.arange(n), [u[2] for u in unique]),
    })


def _dedupe_and_sequence(adm: np.ndarray, code: np.ndarray, priority: np.ndarray,
                         labels: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keep the first (lowest ``priority``) row of each code string within an admission, order rows by
    priority and number them from 1. Returns (admission, code, seq_num, priority)."""
    label_id = np.unique(np.array(labels), return_inverse=True)[1]
    order = lexorder((priority, label_id[code], adm))
    adm, code, priority = adm[order], code[order], priority[order]
    dup = np.zeros(adm.size, dtype=bool)
    dup[1:] = (adm[1:] == adm[:-1]) & (label_id[code][1:] == label_id[code][:-1])
    adm, code, priority = adm[~dup], code[~dup], priority[~dup]
    order = lexorder((code, priority, adm))
    adm, code, priority = adm[order], code[order], priority[order]
    return adm, code, rank_within(adm) + 1, priority


def diagnoses(rng: np.random.Generator, c: Cohort) -> TableData:
    m = c.n_admissions
    adm_parts, concept_parts, prio_parts = [], [], []

    def add(mask: np.ndarray, key: str, priority: np.ndarray | float) -> None:
        idx = np.flatnonzero(mask)
        adm_parts.append(idx)
        concept_parts.append(np.full(idx.size, DX_KEYS.index(key)))
        prio_parts.append(np.broadcast_to(np.asarray(priority, dtype=float), mask.shape)[idx])

    for k, cond in enumerate(CONDITIONS):
        active = c.cond[:, k]
        prio = np.where(c.principal == k, 0.0, 10.0 + k)
        chosen_any = np.zeros(m, dtype=bool)
        for j, (key, p) in enumerate(cond.diagnoses):
            take = active & (rng.random(m) < p)
            add(take, key, prio + j / 10.0)
            chosen_any |= take
        add(active & ~chosen_any, cond.diagnoses[0][0], prio)
    add(c.principal < 0, "chest_pain", 0.0)
    add(c.shock & c.has("sepsis"), "septic_shock", 5.0)
    add(c.vent, "resp_failure", 6.0)
    add(c.expire & (rng.random(m) < 0.5), "dnr", 40.0)
    # comorbidity fillers: a random subset per admission, no repeats
    n_fill = np.minimum(rng.poisson(FILLERS_PER_ADMISSION, m), len(D.FILLER_DIAGNOSES))
    order = np.argsort(rng.random((m, len(D.FILLER_DIAGNOSES))), axis=1)
    adm_f, pos = expand(n_fill)
    filler_idx = np.array([DX_KEYS.index(k) for k in D.FILLER_DIAGNOSES])[order[adm_f, pos]]
    adm_parts.append(adm_f)
    concept_parts.append(filler_idx)
    prio_parts.append(50.0 + pos)

    adm = np.concatenate(adm_parts)
    concept = np.concatenate(concept_parts)
    prio = np.concatenate(prio_parts)
    code = concept * 2 + np.where(c.icd10[adm], 0, 1)
    codes, versions, _ = _code_labels(D.DIAGNOSES)
    # background codes of the demo's catalog, by frequency, after the condition codes and fillers
    bg_codes, bg_versions, _, bg_weight = background_diagnoses()
    adm_b, code_b = _draw_background(rng, c, BACKGROUND_DIAGNOSES, bg_versions, bg_weight, len(codes))
    adm = np.concatenate([adm, adm_b])
    code = np.concatenate([code, code_b])
    prio = np.concatenate([prio, 60.0 + rng.random(adm_b.size)])
    codes, versions = codes + bg_codes, versions + bg_versions
    adm, code, seq, _ = _dedupe_and_sequence(adm, code, prio, codes)
    return TableData("diagnoses_icd", {
        "subject_id": ints(c.subject_id[c.pat[adm]]),
        "hadm_id": ints(c.hadm_id[adm]),
        "seq_num": ints(seq),
        "icd_code": cat(code, codes),
        "icd_version": ints(np.array(versions)[code]),
    })


def procedures(rng: np.random.Generator, c: Cohort) -> TableData:
    m = c.n_admissions
    los = c.dischtime - c.admittime
    adm_parts, concept_parts, time_parts = [], [], []

    def add(mask: np.ndarray, key: str, when: np.ndarray) -> None:
        idx = np.flatnonzero(mask)
        adm_parts.append(idx)
        concept_parts.append(np.full(idx.size, PX_KEYS.index(key)))
        time_parts.append(when[idx])

    anytime = c.admittime + (rng.random(m) * los).astype(np.int64)
    early = c.admittime + (rng.random(m) * np.minimum(los, 2 * DAY)).astype(np.int64)
    for k, cond in enumerate(CONDITIONS):
        for key, p in cond.procedures:
            add(c.cond[:, k] & (rng.random(m) < p), key, early if key in ("egd", "thrombolysis", "mri_brain") else anytime)
    long_vent = (c.vent_end - c.vent_start) >= 96 * HOUR
    add(c.vent & long_vent, "vent_long", c.vent_start)
    add(c.vent & ~long_vent, "vent_short", c.vent_start)
    add(c.vent, "intubation", c.vent_start)
    add(c.shock & (rng.random(m) < 0.8), "central_line", c.shock_start)

    adm = np.concatenate(adm_parts)
    concept = np.concatenate(concept_parts)
    when = np.concatenate(time_parts)
    code = concept * 2 + np.where(c.icd10[adm], 0, 1)
    codes, versions, _ = _code_labels(D.PROCEDURES)
    bg_codes, bg_versions, _, bg_weight = background_procedures()
    adm_b, code_b = _draw_background(rng, c, BACKGROUND_PROCEDURES, bg_versions, bg_weight, len(codes))
    adm = np.concatenate([adm, adm_b])
    code = np.concatenate([code, code_b])
    when = np.concatenate([when, c.admittime[adm_b] + (rng.random(adm_b.size) * los[adm_b]).astype(np.int64)])
    codes, versions = codes + bg_codes, versions + bg_versions
    # one row per (admission, code), the earliest; numbered in time order
    adm, code, seq, when = _dedupe_and_sequence(adm, code, when, codes)
    return TableData("procedures_icd", {
        "subject_id": ints(c.subject_id[c.pat[adm]]),
        "hadm_id": ints(c.hadm_id[adm]),
        "seq_num": ints(seq),
        "chartdate": dates(day_of(when)),
        "icd_code": cat(code, codes),
        "icd_version": ints(np.array(versions)[code]),
    })


def drgcodes(rng: np.random.Generator, c: Cohort) -> TableData:
    m = c.n_admissions
    drg_idx = np.array([DRG_KEYS.index(cond.drg) for cond in CONDITIONS] + [DRG_KEYS.index("none")])[c.principal]
    hcfa_codes = [D.DRGS[k].hcfa_code for k in DRG_KEYS]
    hcfa_desc = [D.DRGS[k].hcfa_description for k in DRG_KEYS]
    apr_codes = [D.DRGS[k].apr_code for k in DRG_KEYS]
    apr_desc = [D.DRGS[k].apr_description for k in DRG_KEYS]
    apr = rng.random(m) < 0.4  # MIMIC-IV: about 1.4 DRG rows per admission (HCFA, sometimes APR)
    sev = np.clip(np.round(1.5 + 0.8 * c.severity + rng.normal(0, 0.6, m)), 1, 4).astype(np.int64)
    mort = np.clip(sev + rng.integers(-1, 2, m), 1, 4)
    adm = np.concatenate([np.arange(m), np.flatnonzero(apr)])
    is_apr = np.concatenate([np.zeros(m, dtype=bool), np.ones(int(apr.sum()), dtype=bool)])
    order = lexorder((is_apr, adm))
    adm, is_apr = adm[order], is_apr[order]
    n_drg = len(DRG_KEYS)
    label = np.where(is_apr, n_drg + drg_idx[adm], drg_idx[adm])
    return TableData("drgcodes", {
        "subject_id": ints(c.subject_id[c.pat[adm]]),
        "hadm_id": ints(c.hadm_id[adm]),
        "drg_type": cat(is_apr.astype(np.int64), ["HCFA", "APR"]),
        "drg_code": cat(label, hcfa_codes + apr_codes),
        "description": cat(label, hcfa_desc + apr_desc),
        "drg_severity": ints(sev[adm], null=~is_apr),
        "drg_mortality": ints(mort[adm], null=~is_apr),
    })


def hcpcs(rng: np.random.Generator, c: Cohort) -> tuple[TableData, TableData]:
    codes = [h[0] for h in D.HCPCS]
    rules = [
        ("99291", c.icu & (rng.random(c.n_admissions) < 0.55), c.icu_in),
        ("94002", c.vent, c.vent_start),
        ("31500", c.vent & (rng.random(c.n_admissions) < 0.6), c.vent_start),
        ("36556", c.shock & (rng.random(c.n_admissions) < 0.5), c.shock_start),
        ("43239", c.has("gi_bleed") & (rng.random(c.n_admissions) < 0.3), c.admittime + DAY // 2),
        ("93306", c.has("heart_failure") & (rng.random(c.n_admissions) < 0.1), c.admittime + DAY // 2),
        ("G0378", np.isin(c.adm_type, [3, 4]) & (rng.random(c.n_admissions) < 0.3), c.admittime),
    ]
    adm_parts, code_parts, time_parts = [], [], []
    for hcpcs, mask, when in rules:
        idx = np.flatnonzero(mask)
        adm_parts.append(idx)
        code_parts.append(np.full(idx.size, codes.index(hcpcs)))
        time_parts.append(np.minimum(when[idx], c.dischtime[idx]))
    adm = np.concatenate(adm_parts)
    code = np.concatenate(code_parts)
    when = np.concatenate(time_parts)
    order = lexorder((code, when, adm))
    adm, code, when = adm[order], code[order], when[order]
    events = TableData("hcpcsevents", {
        "subject_id": ints(c.subject_id[c.pat[adm]]),
        "hadm_id": ints(c.hadm_id[adm]),
        "chartdate": dates(day_of(when)),
        "hcpcs_cd": cat(code, codes),
        "seq_num": ints(rank_within(adm) + 1),
        "short_description": cat(code, [h[3] for h in D.HCPCS]),
    })
    n = len(D.HCPCS)
    dictionary = TableData("d_hcpcs", {
        "code": cat(np.arange(n), codes),
        "category": ints(np.array([h[1] for h in D.HCPCS]), null=np.array([h[1] == 0 for h in D.HCPCS])),
        "long_description": cat(np.arange(n), [h[2] for h in D.HCPCS]),
        "short_description": cat(np.arange(n), [h[3] for h in D.HCPCS]),
    })
    return events, dictionary


OMR_NAMES = ("Blood Pressure", "Weight (Lbs)", "BMI (kg/m2)", "Height (Inches)")


def omr(rng: np.random.Generator, c: Cohort) -> TableData:
    """Outpatient measurements on clinic-visit dates between two years before the first admission and
    one year after the last discharge (never after death)."""
    n = c.n_patients
    last_adm = c.first_adm + c.n_adm - 1
    lo = day_of(c.admittime[c.first_adm]) - 730
    hi = day_of(c.dischtime[last_adm]) + 365
    hi = np.where(c.dod != NAT, np.minimum(hi, c.dod), hi)
    n_visits = 1 + rng.poisson(4.5, n)
    pat, _ = expand(n_visits)
    day = uniform_int(rng, lo[pat], hi[pat], pat.size)
    order = lexorder((day, pat))
    pat, day = pat[order], day[order]
    keep = np.ones(pat.size, dtype=bool)
    keep[1:] = (pat[1:] != pat[:-1]) | (day[1:] != day[:-1])
    pat, day = pat[keep], day[keep]
    v = pat.size
    with_height = rng.random(v) < 0.35
    kinds = np.stack([np.ones(v, bool), np.ones(v, bool), rng.random(v) < 0.85, with_height], axis=1)
    visit, kind = np.nonzero(kinds)
    p = pat[visit]
    weight_lbs = np.round(c.weight_kg[p] * 2.20462 * (1 + rng.normal(0, 0.03, visit.size)))
    height_in = np.round(c.height_cm[p] / 2.54)
    bmi = np.round(c.weight_kg[p] * (1 + rng.normal(0, 0.03, visit.size)) / (c.height_cm[p] / 100) ** 2, 1)
    sbp = np.round(np.clip(rng.normal(128, 16, visit.size), 85, 200))
    dbp = np.round(np.clip(sbp * 0.6 + rng.normal(0, 7, visit.size), 45, 120))
    v1 = np.select([kind == 0, kind == 1, kind == 2], [sbp, weight_lbs, bmi], height_in)
    return TableData("omr", {
        "subject_id": ints(c.subject_id[p]),
        "chartdate": dates(day[visit]),
        "seq_num": ints(np.ones(visit.size, dtype=np.int64)),
        "result_name": cat(kind, OMR_NAMES),
        "v1": floats(v1),
        "v2": floats(dbp),
        "kind": ints(kind),
    }, exprs={"result_value": "CASE WHEN kind = 0 THEN CAST(CAST(v1 AS BIGINT) AS VARCHAR) || '/' || "
                              "CAST(CAST(v2 AS BIGINT) AS VARCHAR) WHEN kind = 2 THEN CAST(v1 AS VARCHAR) "
                              "ELSE CAST(CAST(v1 AS BIGINT) AS VARCHAR) END"})


def generate(rng: np.random.Generator, c: Cohort) -> list[TableData]:
    events, d_hcpcs = hcpcs(rng, c)
    return [
        dictionary_table("d_icd_diagnoses", D.DIAGNOSES, background_diagnoses()),
        dictionary_table("d_icd_procedures", D.PROCEDURES, background_procedures()),
        diagnoses(rng, c),
        procedures(rng, c),
        drgcodes(rng, c),
        events,
        d_hcpcs,
        omr(rng, c),
    ]
