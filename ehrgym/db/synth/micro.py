"""``microbiologyevents``: cultures ordered for infections (sepsis → blood and urine, pneumonia →
sputum, UTI → urine), fever work-ups and ICU MRSA screens; positive cultures carry an organism and,
when tested, one row per antibiotic with an MIC and an S/I/R interpretation. On top: negative
background cultures of the demo's other specimen types and tests, by frequency, during stays and at
clinic visits (outpatient, no ``hadm_id``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ehrgym.db.synth import catalog
from ehrgym.db.synth.common import DAY, HOUR, MINUTE, expand, floor_to, lexorder, pick_rows, uniform_int
from ehrgym.db.synth.conditions import CONDITIONS
from ehrgym.db.synth.timeline import Cohort
from ehrgym.db.synth.writer import TableData, cat, floats, ints, ts


@dataclass(frozen=True)
class Specimen:
    spec_itemid: int
    spec_type_desc: str
    test_itemid: int
    test_name: str
    organisms: tuple[tuple[int, float], ...]  # (org_itemid, weight)
    negative_comment: str
    sets: int = 1
    susceptibility: bool = True


SPECIMENS: dict[str, Specimen] = {
    "blood": Specimen(70012, "BLOOD CULTURE", 90201, "Blood Culture, Routine",
                      ((80002, 0.3), (80023, 0.3), (80004, 0.15), (80053, 0.1), (80155, 0.15)), "NO GROWTH.", sets=2),
    "urine": Specimen(70079, "URINE", 90039, "URINE CULTURE",
                      ((80002, 0.55), (80004, 0.2), (80017, 0.1), (80053, 0.1), (80026, 0.05)), "NO GROWTH."),
    "sputum": Specimen(70062, "SPUTUM", 90055, "RESPIRATORY CULTURE",
                       ((80023, 0.35), (80026, 0.25), (80004, 0.2), (80002, 0.1), (80017, 0.1)),
                       "SPARSE GROWTH COMMENSAL RESPIRATORY FLORA."),
    "mrsa": Specimen(70091, "MRSA SCREEN", 90189, "MRSA SCREEN", ((80023, 1.0),), "No MRSA isolated.",
                     susceptibility=False),
}

ORGANISMS: dict[int, str] = {
    80002: "ESCHERICHIA COLI", 80004: "KLEBSIELLA PNEUMONIAE", 80017: "PROTEUS MIRABILIS",
    80023: "STAPH AUREUS COAG +", 80026: "PSEUDOMONAS AERUGINOSA", 80053: "ENTEROCOCCUS SP.",
    80155: "STAPHYLOCOCCUS, COAGULASE NEGATIVE",
}

# ab_itemid -> (ab_name, MIC reported when susceptible, MIC reported when resistant)
ANTIBIOTICS: dict[int, tuple[str, float, float]] = {
    90003: ("PENICILLIN G", 0.06, 8), 90004: ("AMPICILLIN", 2, 32), 90005: ("CEFAZOLIN", 4, 64),
    90006: ("ERYTHROMYCIN", 0.25, 8), 90007: ("CLINDAMYCIN", 0.25, 8), 90008: ("TRIMETHOPRIM/SULFA", 1, 16),
    90010: ("NITROFURANTOIN", 16, 512), 90011: ("TETRACYCLINE", 1, 16), 90012: ("GENTAMICIN", 1, 16),
    90013: ("TOBRAMYCIN", 1, 16), 90014: ("AMIKACIN", 2, 64), 90015: ("VANCOMYCIN", 1, 32),
    90016: ("OXACILLIN", 0.25, 4), 90017: ("CEFTAZIDIME", 1, 64), 90018: ("CEFTRIAXONE", 1, 64),
    90019: ("CIPROFLOXACIN", 0.25, 4), 90022: ("AMPICILLIN/SULBACTAM", 2, 32), 90025: ("LEVOFLOXACIN", 0.12, 8),
    90026: ("PIPERACILLIN/TAZO", 4, 128), 90027: ("RIFAMPIN", 0.5, 4), 90028: ("CEFEPIME", 1, 64),
    90029: ("MEROPENEM", 0.25, 16), 90031: ("LINEZOLID", 2, 8),
}

_GRAM_NEG = {90004: 0.5, 90022: 0.35, 90005: 0.25, 90018: 0.15, 90017: 0.12, 90028: 0.1, 90019: 0.25,
             90012: 0.1, 90013: 0.1, 90029: 0.01, 90026: 0.05, 90008: 0.3, 90010: 0.05}
# org_itemid -> {ab_itemid: probability of resistance}
SUSCEPTIBILITY: dict[int, dict[int, float]] = {
    80002: _GRAM_NEG,
    80004: {**_GRAM_NEG, 90004: 1.0, 90022: 0.25, 90005: 0.2, 90018: 0.12, 90019: 0.12, 90010: 0.4},
    80017: {**_GRAM_NEG, 90004: 0.25, 90022: 0.1, 90018: 0.05, 90010: 1.0, 90008: 0.25},
    80026: {90017: 0.15, 90028: 0.15, 90019: 0.25, 90012: 0.15, 90013: 0.1, 90029: 0.15, 90026: 0.15, 90014: 0.05},
    80023: {90016: 0.35, 90015: 0.0, 90007: 0.3, 90006: 0.5, 90012: 0.03, 90025: 0.35, 90027: 0.01, 90011: 0.05,
            90008: 0.03},
    80053: {90004: 0.2, 90015: 0.2, 90010: 0.05, 90031: 0.01, 90011: 0.6},
    80155: {},
}

SPEC_KEYS = tuple(SPECIMENS)
REPEAT_PER_DAY: dict[str, float] = {"blood": 0.2, "urine": 0.12, "sputum": 0.05}
"""Mean further work-ups of a specimen per day of the stay, once a first was sent (negative but for the fever
work-up's 4 %), so that cultures repeat as in the MIMIC-IV demo: there, among admissions with a culture of the
kind, 4.0 blood-culture specimens on average (1 to 18; 35 % exactly two), 1.7 urine (1 to 7) and 1.3 sputum
(1 to 4) — the first work-up alone gave 2 or 4 blood cultures and one of anything else."""
SINGLE_BOTTLE = 0.15
"""Share of blood-culture work-ups whose second set was not sent (the demo has odd counts: 11 of 83 admissions with
a blood culture have exactly one)."""
BACKGROUND_PER_ADMISSION = 0.6
OUTPATIENT_PER_VISIT = 1.0
"""Mean background cultures (the demo's other specimen types and tests, by frequency; reported negative) per
admission and per clinic visit (outpatient, no ``hadm_id``)."""


def background_specimens() -> tuple[list[Specimen], np.ndarray, np.ndarray]:
    """The catalog's (specimen type, test) pairs other than the core specimens, with their inpatient and
    outpatient weights."""
    core = {s.spec_itemid for s in SPECIMENS.values()}
    out, w_in, w_out = [], [], []
    for r in catalog.specimens():
        if int(r["spec_itemid"]) in core:
            continue
        out.append(Specimen(int(r["spec_itemid"]), r["spec_type_desc"], int(r["test_itemid"]), r["test_name"], (),
                            (r["negative_comment"] or "NO GROWTH.").strip() or "NO GROWTH.", susceptibility=False))
        rows, p_out = float(r["rows"]), float(r["p_outpatient"] or 0.0)
        w_in.append(rows * (1 - p_out))
        w_out.append(rows * p_out)
    return out, np.array(w_in), np.array(w_out)


def _draw(rng: np.random.Generator, counts: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    owner, _ = expand(counts)
    cdf = np.cumsum(weight)
    return owner, np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(owner.size), side="right"), cdf.size - 1)
ORG_IDS = tuple(sorted(ORGANISMS))
AB_IDS = tuple(sorted(ANTIBIOTICS))


def _specimens(rng: np.random.Generator, c: Cohort, visits: tuple[np.ndarray, np.ndarray]):
    """Ordered specimens: (patient, admission or -1, spec index, time, grows, organism index); spec indices
    past the core SPEC_KEYS are background specimens (:func:`background_specimens`)."""
    m = c.n_admissions
    parts = []
    early = c.admittime + uniform_int(rng, 15, 240, m) * MINUTE
    fever = rng.random(m) < 0.15
    for si, key in enumerate(SPEC_KEYS):
        if key == "mrsa":
            continue
        p_grow = np.zeros(m)
        ordered = np.zeros(m, dtype=bool)
        for k, cond in enumerate(CONDITIONS):
            for spec_key, p in cond.cultures:
                if spec_key == key:
                    ordered |= c.cond[:, k]
                    p_grow = np.where(c.cond[:, k], np.maximum(p_grow, p), p_grow)
        if key in ("blood", "urine"):
            workup = fever & ~ordered
            ordered |= workup
            p_grow = np.where(workup, 0.04, p_grow)
        idx = np.flatnonzero(ordered)
        grows = rng.random(idx.size) < p_grow[idx]
        spec = SPECIMENS[key]
        weights = np.tile(np.array([w for _, w in spec.organisms]), (idx.size, 1))
        org = np.array([ORG_IDS.index(o) for o, _ in spec.organisms])[pick_rows(rng, weights)]
        for s in range(spec.sets):
            set_grows = grows if s == 0 else grows & (rng.random(idx.size) < 0.8)
            sent = np.ones(idx.size, dtype=bool) if s == 0 else rng.random(idx.size) >= SINGLE_BOTTLE
            parts.append((idx[sent], np.full(int(sent.sum()), si), early[idx][sent] + s * 10 * MINUTE + si * MINUTE,
                          set_grows[sent], org[sent]))
        # further work-ups during the stay, each one more specimen (blood: one more work-up of its sets)
        stay_days = (c.dischtime[idx] - early[idx]) / DAY
        again, _ = expand(rng.poisson(REPEAT_PER_DAY[key] * np.maximum(stay_days, 0.0)))
        rep = idx[again]
        t = early[rep] + HOUR + (rng.random(rep.size) * np.maximum(c.dischtime[rep] - early[rep] - 2 * HOUR, 0)
                                 ).astype(np.int64)
        t -= t % MINUTE
        rep_grows = rng.random(rep.size) < 0.04
        rep_org = org[again]
        for s in range(spec.sets):
            sent = np.ones(rep.size, dtype=bool) if s == 0 else rng.random(rep.size) >= SINGLE_BOTTLE
            parts.append((rep[sent], np.full(int(sent.sum()), si), t[sent] + s * 10 * MINUTE,
                          rep_grows[sent] if s == 0 else rep_grows[sent] & (rng.random(int(sent.sum())) < 0.8),
                          rep_org[sent]))
        if key == "blood":  # repeat (clearance) cultures on day two or three, negative
            rep = idx[(rng.random(idx.size) < 0.4) & c.has("sepsis")[idx]]
            t = c.admittime[rep] + uniform_int(rng, 30, 60, rep.size) * HOUR
            ok = t < c.dischtime[rep] - HOUR
            rep, t = rep[ok], t[ok]
            for s in range(spec.sets):
                parts.append((rep, np.full(rep.size, si), t + s * 10 * MINUTE, np.zeros(rep.size, dtype=bool),
                              np.zeros(rep.size, dtype=np.int64)))
    stays = c.stays
    screen_t = c.icu_in[stays] + uniform_int(rng, 20, 180, stays.size) * MINUTE
    ok = screen_t < c.icu_out[stays]
    si = SPEC_KEYS.index("mrsa")
    parts.append((stays[ok], np.full(int(ok.sum()), si), screen_t[ok], rng.random(int(ok.sum())) < 0.08,
                  np.full(int(ok.sum()), ORG_IDS.index(80023))))
    # background cultures: other specimen types, negative, during the stay or at a clinic visit
    _, w_in, w_out = background_specimens()
    a_b, s_b = _draw(rng, rng.poisson(BACKGROUND_PER_ADMISSION, c.n_admissions), w_in)
    t_b = c.admittime[a_b] + (rng.random(a_b.size) * (c.dischtime[a_b] - c.admittime[a_b])).astype(np.int64)
    parts.append((a_b, len(SPEC_KEYS) + s_b, t_b - t_b % MINUTE, np.zeros(a_b.size, dtype=bool),
                  np.zeros(a_b.size, dtype=np.int64)))
    v_pat, v_t = visits
    v_i, s_o = _draw(rng, rng.poisson(OUTPATIENT_PER_VISIT, v_pat.size), w_out)
    adm = np.concatenate([p[0] for p in parts])
    spec_idx = np.concatenate([p[1] for p in parts] + [len(SPEC_KEYS) + s_o])
    t = np.minimum(np.concatenate([p[2] for p in parts]), c.dischtime[adm] - MINUTE)
    t = np.concatenate([t, v_t[v_i] + uniform_int(rng, 0, 20, v_i.size) * MINUTE])
    grows = np.concatenate([p[3] for p in parts] + [np.zeros(v_i.size, dtype=bool)])
    org = np.concatenate([p[4] for p in parts] + [np.zeros(v_i.size, dtype=np.int64)])
    pat = np.concatenate([c.pat[adm], v_pat[v_i]])
    adm = np.concatenate([adm, np.full(v_i.size, -1)])
    order = lexorder((spec_idx, t, pat))
    return pat[order], adm[order], spec_idx[order], t[order], grows[order], org[order]


NO_MIC_SHARE = 38 / 1036
"""Share of susceptibility rows with an interpretation but no MIC (dilution comparison, value and text NULL):
38 of the MIMIC-IV demo's 1,036 rows with an antibiotic (3.7 %)."""


def generate(rng: np.random.Generator, c: Cohort, visits: tuple[np.ndarray, np.ndarray]) -> list[TableData]:
    pat, adm, spec, t, grows, org = _specimens(rng, c, visits)
    n_spec = adm.size
    spec_labels = [SPECIMENS[k] for k in SPEC_KEYS] + background_specimens()[0]
    has_panel = np.array([s.susceptibility for s in spec_labels])[spec]
    panel_size = np.array([len(SUSCEPTIBILITY[o]) for o in ORG_IDS])[org]
    rows_per = np.where(grows & has_panel & (panel_size > 0), panel_size, 1)
    sp, pos = expand(rows_per)
    n = sp.size
    tested = (grows & has_panel & (panel_size > 0))[sp]
    ab_table = np.full((len(ORG_IDS), max(len(v) for v in SUSCEPTIBILITY.values())), -1)
    p_res = np.zeros(ab_table.shape)
    for oi, o in enumerate(ORG_IDS):
        for j, (ab_id, pr) in enumerate(sorted(SUSCEPTIBILITY[o].items())):
            ab_table[oi, j] = AB_IDS.index(ab_id)
            p_res[oi, j] = pr
    ab = np.where(tested, ab_table[org[sp], np.where(tested, pos, 0)], -1)
    u = rng.random(n)
    pr = p_res[org[sp], np.where(tested, pos, 0)]
    interp = np.where(u < pr, 2, np.where(u < pr + 0.04 * (1 - pr), 1, 0))  # 0 S, 1 I, 2 R
    s_mic = np.array([ANTIBIOTICS[a][1] for a in AB_IDS])[np.maximum(ab, 0)]
    r_mic = np.array([ANTIBIOTICS[a][2] for a in AB_IDS])[np.maximum(ab, 0)]
    mic = np.select([interp == 0, interp == 1], [s_mic, np.minimum(s_mic * 4, r_mic / 2)], r_mic)

    specimen_ids = rng.permutation(n_spec) * 3 + 1_000_000 + rng.integers(0, 3, n_spec)
    charttime = t[sp]
    inpatient = adm[sp] >= 0
    storetime = charttime + uniform_int(rng, 40, 96, n) * HOUR
    storetime = np.where(inpatient, np.minimum(storetime, c.dischtime[np.maximum(adm[sp], 0)]), storetime)
    storetime = np.maximum(storetime, charttime)
    org_code = np.where(grows[sp], org[sp], -1)
    comment = np.where(grows[sp], -1, spec[sp])
    provider = np.where(rng.random(n) < 0.6, rng.integers(0, len(c.providers), n), -1)
    # a few susceptibility results carry the interpretation only (no MIC: comparison, value and text NULL)
    no_mic = (ab >= 0) & (rng.random(n) < NO_MIC_SHARE)
    data = TableData("microbiologyevents", {
        "microevent_id": ints(np.arange(1, n + 1)),
        "subject_id": ints(c.subject_id[pat[sp]]),
        "hadm_id": ints(c.hadm_id[np.maximum(adm[sp], 0)], null=~inpatient),
        "micro_specimen_id": ints(specimen_ids[sp]),
        "order_provider_id": cat(provider, c.providers),
        "chartdate": ts(floor_to(charttime, DAY)),
        "charttime": ts(charttime),
        "spec_itemid": ints(np.array([s.spec_itemid for s in spec_labels])[spec[sp]]),
        "spec_type_desc": cat(spec[sp], [s.spec_type_desc for s in spec_labels]),
        "test_seq": ints(np.ones(n, dtype=np.int64)),
        "storedate": ts(floor_to(storetime, DAY)),
        "storetime": ts(storetime),
        "test_itemid": ints(np.array([s.test_itemid for s in spec_labels])[spec[sp]]),
        "test_name": cat(spec[sp], [s.test_name for s in spec_labels]),
        "org_itemid": ints(np.array(ORG_IDS)[np.maximum(org_code, 0)], null=org_code < 0),
        "org_name": cat(org_code, [ORGANISMS[o] for o in ORG_IDS]),
        "isolate_num": ints(np.ones(n, dtype=np.int64), null=org_code < 0),
        "ab_itemid": ints(np.array(AB_IDS)[np.maximum(ab, 0)], null=ab < 0),
        "ab_name": cat(ab, [ANTIBIOTICS[a][0] for a in AB_IDS]),
        "dilution_comparison": cat(np.where((ab < 0) | no_mic, -1, interp), ["<=", "=", "=>"]),
        "dilution_value": floats(mic, null=(ab < 0) | no_mic),
        "interpretation": cat(np.where(ab < 0, -1, interp), ["S", "I", "R"]),
        "comments": cat(comment, [s.negative_comment for s in spec_labels]),
    })
    # dilution_text like MIMIC: '<=0.25', '=>64', '4'
    data.exprs["dilution_text"] = (
        "CASE WHEN dilution_value IS NULL THEN NULL ELSE "
        "(CASE WHEN dilution_comparison = '=' THEN '' ELSE CAST(dilution_comparison AS VARCHAR) END) || "
        "(CASE WHEN dilution_value = floor(dilution_value) THEN CAST(CAST(dilution_value AS BIGINT) AS VARCHAR) "
        "ELSE CAST(dilution_value AS VARCHAR) END) END")
    return [data]
