"""Patients, admissions and their nested timelines (ED → ward → ICU → ward → discharge).

Everything downstream (labs, vitals, medications, cultures, codes) hangs off the :class:`Cohort`
built here. All times are int64 seconds at whole minutes; admissions of a patient never overlap;
the ICU stay, ventilation and vasopressor windows lie inside their admission.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ehrgym.db.synth import dictionaries as D
from ehrgym.db.synth.common import (DAY, MINUTE, NAT, expand, lexorder, pick, rank_within, sigmoid, uniform_int,
                                    year_start)
from ehrgym.db.synth.conditions import CONDITION_KEYS, CONDITIONS
from ehrgym.db.synth.writer import TableData, cat, dates, floats, ints, ts

ICD10_SWITCH = 2015.75  # real time (years) from which admissions are coded in ICD-10
MIN_YEAR_REAL, MAX_YEAR_REAL = 2008.0, 2020.0
SHIFTED_YEAR_LOW, SHIFTED_YEAR_HIGH = 2110, 2200


@dataclass
class Cohort:
    # ---- patients (n) ----
    subject_id: np.ndarray
    male: np.ndarray
    anchor_age: np.ndarray
    anchor_year: np.ndarray
    anchor_group: np.ndarray
    dod: np.ndarray            # days since epoch or NAT
    race: np.ndarray
    language: np.ndarray
    marital: np.ndarray
    insurance: np.ndarray
    weight_kg: np.ndarray
    height_cm: np.ndarray
    first_adm: np.ndarray      # index of the patient's first admission
    n_adm: np.ndarray
    # ---- admissions (m) ----
    pat: np.ndarray            # patient index of each admission
    hadm_id: np.ndarray
    admittime: np.ndarray
    dischtime: np.ndarray
    edregtime: np.ndarray      # NAT when not via the ED
    edouttime: np.ndarray
    age: np.ndarray
    adm_type: np.ndarray
    adm_location: np.ndarray   # index into admission_location_labels()
    disch_location: np.ndarray  # index into discharge_location_labels()
    expire: np.ndarray
    icd10: np.ndarray
    cond: np.ndarray           # (m, K) bool
    principal: np.ndarray      # condition index of the principal diagnosis, -1 = none
    severity: np.ndarray       # latent acuity (float)
    admit_provider: np.ndarray  # provider index
    ward1: np.ndarray
    ward2: np.ndarray          # -1 = no second ward segment
    split: np.ndarray          # start of the second ward segment (non-ICU admissions), NAT otherwise
    service1: np.ndarray
    service2: np.ndarray       # -1 = no service change
    # ---- ICU (per admission; icu False → NAT / -1) ----
    icu: np.ndarray
    stay_id: np.ndarray
    icu_in: np.ndarray
    icu_out: np.ndarray
    icu_unit: np.ndarray
    vent: np.ndarray
    vent_start: np.ndarray
    vent_end: np.ndarray
    shock: np.ndarray
    shock_start: np.ndarray
    shock_end: np.ndarray
    # ---- staff pools ----
    providers: list[str]
    caregivers: np.ndarray

    @property
    def n_patients(self) -> int:
        return int(self.subject_id.size)

    @property
    def n_admissions(self) -> int:
        return int(self.hadm_id.size)

    @property
    def stays(self) -> np.ndarray:
        """Admission indices that have an ICU stay (in stay order)."""
        return np.flatnonzero(self.icu)

    def has(self, key: str) -> np.ndarray:
        return self.cond[:, CONDITION_KEYS.index(key)]

    def subject(self) -> np.ndarray:
        """subject_id of each admission."""
        return self.subject_id[self.pat]


def admission_location_labels() -> tuple[str, ...]:
    return D.ADMISSION_LOCATIONS_ED + tuple(x for x in D.ADMISSION_LOCATIONS_OTHER if x not in D.ADMISSION_LOCATIONS_ED)


def discharge_location_labels() -> tuple[str, ...]:
    return D.DISCHARGE_LOCATIONS + (D.DIED,)


def _unique_sorted_ids(rng: np.random.Generator, n: int, low: int, span: int) -> np.ndarray:
    """``n`` increasing unique ids in ``[low, low + span)``."""
    step = max(span // max(n, 1), 2)
    return low + np.cumsum(rng.integers(1, step, size=n))


def _providers(rng: np.random.Generator, n: int) -> list[str]:
    alphabet = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    raw = np.unique(rng.integers(0, 36 ** 5, size=n * 2 + 16))
    chosen = np.sort(rng.permutation(raw)[:n])
    digits = np.stack([(chosen // 36 ** k) % 36 for k in range(4, -1, -1)], axis=1)
    letters = alphabet[digits]
    return ["P" + "".join(row) for row in letters.tolist()]


def _lognormal(rng: np.random.Generator, median: np.ndarray | float, sigma: float, size: int) -> np.ndarray:
    return np.asarray(median) * np.exp(sigma * rng.standard_normal(size))


def build_cohort(rng: np.random.Generator, n: int) -> Cohort:
    K = len(CONDITIONS)
    # ---------------- patients ----------------
    subject_id = _unique_sorted_ids(rng, n, 10_000_000, 9_000_000)
    male = rng.random(n) < 0.48
    age0 = np.clip(np.round(rng.normal(63.0, 17.0, n)), 18, 97).astype(np.int64)
    real_first = MIN_YEAR_REAL + rng.random(n) * (MAX_YEAR_REAL - MIN_YEAR_REAL - 0.01)
    real_year = np.floor(real_first).astype(np.int64)
    anchor_year = rng.integers(SHIFTED_YEAR_LOW, SHIFTED_YEAR_HIGH + 1, size=n)
    anchor_group = np.minimum((real_year - 2008) // 3, len(D.ANCHOR_YEAR_GROUPS) - 1)
    anchor_age = np.where(age0 > 89, 91, age0)
    race = pick(rng, D.RACES_P, n)
    language = pick(rng, D.LANGUAGES_P, n)
    marital = pick(rng, D.MARITAL_P, n)
    insurance = np.where(age0 >= 65, np.where(rng.random(n) < 0.85, 0, 2),
                         np.where(rng.random(n) < 0.35, 1, 2))
    height_cm = np.round(np.where(male, rng.normal(176, 7, n), rng.normal(162, 7, n)), 0)
    bmi = np.clip(rng.normal(28.0, 5.5, n), 16, 55)
    weight_kg = np.round(bmi * (height_cm / 100) ** 2, 1)

    n_adm = np.minimum(rng.geometric(0.63, size=n), 8).astype(np.int64)
    pat, adm_pos = expand(n_adm)
    m = pat.size
    first_adm = np.cumsum(n_adm) - n_adm
    last = adm_pos == n_adm[pat] - 1

    # ---------------- conditions ----------------
    age = age0[pat].astype(float)  # age at the patient's first admission drives condition risks
    cond = np.zeros((m, K), dtype=bool)
    logit_age = (age - 60.0) / 10.0
    for k, c in enumerate(CONDITIONS):
        base = np.log(c.prob / (1 - c.prob)) + c.age_logit_per_decade * logit_age
        for other, mult in c.boosts:
            base = base + np.log(mult) * cond[:, CONDITION_KEYS.index(other)]
        if c.chronic:
            # a patient trait: decided once (on the first admission's covariates), coded in ~92% of stays
            trait = rng.random(n) < sigmoid(base[first_adm])
            cond[:, k] = trait[pat] & (rng.random(m) < 0.92)
        else:
            cond[:, k] = rng.random(m) < sigmoid(base)
    ranks = np.array([c.principal_rank for c in CONDITIONS], dtype=float)
    rank_matrix = np.where(cond, ranks[None, :] + np.arange(K)[None, :] / 100.0, np.inf)
    principal = np.where(cond.any(axis=1), rank_matrix.argmin(axis=1), -1)

    icu_logit = -2.6 + cond @ np.array([c.icu_logit for c in CONDITIONS]) + 0.01 * (age - 60)
    icu = rng.random(m) < sigmoid(icu_logit)
    vent = icu & (rng.random(m) < sigmoid(-1.3 + cond @ np.array([c.vent_logit for c in CONDITIONS])))
    shock = icu & (rng.random(m) < sigmoid(-2.2 + cond @ np.array([c.shock_logit for c in CONDITIONS])))
    severity = (cond @ np.array([c.death_logit for c in CONDITIONS]) + 1.0 * icu + 0.8 * shock + 0.6 * vent
                + 0.03 * (age - 65))
    expire = last & (rng.random(m) < sigmoid(-4.6 + severity))

    # ---------------- durations (minutes) ----------------
    adm_type = pick(rng, D.ADMISSION_TYPE_P, m)
    adm_type = np.where(icu & ~np.isin(adm_type, [0, 1, 2]), 0, adm_type)  # ICU patients arrive emergently
    via_ed = np.array(D.ADMISSION_VIA_ED)[adm_type]
    ed_before = np.where(via_ed, uniform_int(rng, 60, 420, m), 0)
    ed_after = np.where(via_ed, uniform_int(rng, 20, 240, m), 0)
    los_factor = np.exp(cond @ np.log(np.array([c.los_factor for c in CONDITIONS])))
    ward_los = np.clip(_lognormal(rng, 3.0 * DAY / MINUTE * los_factor, 0.65, m), 0.4 * DAY / MINUTE,
                       30 * DAY / MINUTE).astype(np.int64)
    direct_icu = rng.random(m) < 0.5
    pre_icu = np.where(direct_icu, 0, uniform_int(rng, 120, 36 * 60, m))
    icu_len = np.clip(_lognormal(rng, 2.2 * DAY / MINUTE * np.where(vent, 1.6, 1.0), 0.7, m),
                      0.5 * DAY / MINUTE, 21 * DAY / MINUTE).astype(np.int64)
    died_in_icu = expire & icu & (rng.random(m) < 0.7)
    post_icu = np.where(died_in_icu, 0, np.clip(_lognormal(rng, 2.5 * DAY / MINUTE, 0.6, m), 0.4 * DAY / MINUTE,
                                                 20 * DAY / MINUTE)).astype(np.int64)
    los = np.where(icu, ed_after + pre_icu + icu_len + post_icu, np.maximum(ward_los, ed_after + 8 * 60))
    gap = np.clip(_lognormal(rng, 150 * DAY / MINUTE, 1.0, m), 2 * DAY / MINUTE, 1500 * DAY / MINUTE).astype(np.int64)
    # admission start offsets within the patient: previous stays + gaps (+ ED lead time of this stay)
    span = los + gap + ed_before
    excl = np.cumsum(span) - span
    offset = excl - excl[first_adm][pat] + ed_before

    first_time = year_start(anchor_year) + np.floor((real_first - real_year) * 364 * 24 * 60).astype(np.int64) * MINUTE
    admittime = first_time[pat] + offset * MINUTE
    dischtime = admittime + los * MINUTE
    edregtime = np.where(via_ed, admittime - ed_before * MINUTE, NAT)
    edouttime = np.where(via_ed, admittime + ed_after * MINUTE, NAT)
    real_adm_year = real_first[pat] + (admittime - first_time[pat]) / (365.25 * DAY)
    icd10 = real_adm_year >= ICD10_SWITCH
    age_at = age0[pat] + np.floor((admittime - first_time[pat]) / (365.25 * DAY)).astype(np.int64)

    icu_in_all = admittime + (ed_after + pre_icu) * MINUTE
    icu_out_all = icu_in_all + icu_len * MINUTE
    vent_start_all = icu_in_all + np.floor(rng.random(m) * 0.2 * icu_len).astype(np.int64) * MINUTE
    vent_end_all = vent_start_all + np.floor((0.45 + 0.45 * rng.random(m)) * (icu_out_all - vent_start_all)
                                             / MINUTE).astype(np.int64) * MINUTE
    shock_start_all = icu_in_all + np.floor(rng.random(m) * 0.15 * icu_len).astype(np.int64) * MINUTE
    shock_end_all = shock_start_all + np.floor((0.3 + 0.4 * rng.random(m)) * (icu_out_all - shock_start_all)
                                               / MINUTE).astype(np.int64) * MINUTE
    icu_in = np.where(icu, icu_in_all, NAT)
    icu_out = np.where(icu, icu_out_all, NAT)
    vent_start = np.where(vent, vent_start_all, NAT)
    vent_end = np.where(vent, vent_end_all, NAT)
    shock_start = np.where(shock, shock_start_all, NAT)
    shock_end = np.where(shock, shock_end_all, NAT)

    # ---------------- locations, units, services ----------------
    loc_labels = admission_location_labels()
    ed_loc = pick(rng, D.ADMISSION_LOCATIONS_ED_P, m)
    other_loc = np.array([loc_labels.index(x) for x in D.ADMISSION_LOCATIONS_OTHER])[
        pick(rng, D.ADMISSION_LOCATIONS_OTHER_P, m)]
    adm_location = np.where(via_ed, ed_loc, other_loc)
    disch_location = np.where(expire, len(D.DISCHARGE_LOCATIONS), pick(rng, D.DISCHARGE_LOCATIONS_P, m))

    cond_ward = np.array([D.WARD_UNITS.index(c.ward) for c in CONDITIONS] + [0])
    cond_icu = np.array([D.ICU_UNITS.index(c.icu_unit) for c in CONDITIONS] + [0])
    cond_service = np.array([D.SERVICES.index(c.service) for c in CONDITIONS] + [0])
    ward1 = np.where(rng.random(m) < 0.8, cond_ward[principal], pick(rng, [0.5, 0.5], m))
    second_ward = icu | (rng.random(m) < 0.3)
    ward2 = np.where(second_ward, np.where(rng.random(m) < 0.7, ward1, pick(rng, [0.6, 0.4], m)), -1)
    ward2 = np.where(died_in_icu, -1, ward2)
    split = np.where(~icu & second_ward,
                     admittime + (ed_after + np.floor((0.3 + 0.4 * rng.random(m)) * (los - ed_after))).astype(np.int64)
                     * MINUTE, NAT)
    icu_unit = np.where(icu, np.where(rng.random(m) < 0.75, cond_icu[principal], pick(rng, [0.7, 0.3], m)), -1)
    service1 = np.where(principal >= 0, cond_service[principal], pick(rng, [0.8, 0.0, 0.0, 0.1, 0.1], m))
    service2 = np.where((ward2 >= 0) & (rng.random(m) < 0.25), np.where(service1 == 0, 1, 0), -1)

    stay_id = np.full(m, -1, dtype=np.int64)
    stay_id[icu] = _unique_sorted_ids(rng, int(icu.sum()), 30_000_000, 9_000_000)
    hadm_id = _unique_sorted_ids(rng, m, 20_000_000, 9_000_000)
    hadm_id = rng.permutation(hadm_id)  # MIMIC hadm_ids are not chronological

    providers = _providers(rng, max(20, n // 9 + 20))
    caregivers = np.sort(rng.choice(np.arange(1, 100_000), size=max(10, n // 20 + 10), replace=False))

    # ---------------- death after discharge ----------------
    last_adm = first_adm + n_adm - 1
    dod = np.full(n, NAT, dtype=np.int64)
    died_inside = expire[last_adm]
    dod[died_inside] = np.floor_divide(dischtime[last_adm][died_inside], DAY)
    later = ~died_inside & (rng.random(n) < sigmoid(-2.6 + 0.04 * (age0 - 65) + 0.5 * severity[last_adm]))
    dod[later] = np.floor_divide(dischtime[last_adm][later], DAY) + rng.integers(1, 366, size=int(later.sum()))

    return Cohort(
        subject_id=subject_id, male=male, anchor_age=anchor_age, anchor_year=anchor_year, anchor_group=anchor_group,
        dod=dod, race=race, language=language, marital=marital, insurance=insurance, weight_kg=weight_kg,
        height_cm=height_cm, first_adm=first_adm, n_adm=n_adm,
        pat=pat, hadm_id=hadm_id, admittime=admittime, dischtime=dischtime, edregtime=edregtime, edouttime=edouttime,
        age=age_at, adm_type=adm_type, adm_location=adm_location, disch_location=disch_location, expire=expire,
        icd10=icd10, cond=cond, principal=principal, severity=severity,
        admit_provider=rng.integers(0, len(providers), size=m),
        ward1=ward1, ward2=ward2, split=split, service1=service1, service2=service2,
        icu=icu, stay_id=stay_id, icu_in=icu_in, icu_out=icu_out, icu_unit=icu_unit,
        vent=vent, vent_start=vent_start, vent_end=vent_end, shock=shock, shock_start=shock_start,
        shock_end=shock_end, providers=providers, caregivers=caregivers,
    )


# ---------------------------------------------------------------- tables

def patients_table(c: Cohort) -> TableData:
    return TableData("patients", {
        "subject_id": ints(c.subject_id),
        "gender": cat(c.male.astype(np.int64), ["F", "M"]),
        "anchor_age": ints(c.anchor_age),
        "anchor_year": ints(c.anchor_year),
        "anchor_year_group": cat(c.anchor_group, D.ANCHOR_YEAR_GROUPS),
        "dod": dates(c.dod),
    })


def admissions_table(c: Cohort) -> TableData:
    p = c.pat
    return TableData("admissions", {
        "subject_id": ints(c.subject_id[p]),
        "hadm_id": ints(c.hadm_id),
        "admittime": ts(c.admittime),
        "dischtime": ts(c.dischtime),
        "deathtime": ts(np.where(c.expire, c.dischtime, NAT)),
        "admission_type": cat(c.adm_type, D.ADMISSION_TYPES),
        "admit_provider_id": cat(c.admit_provider, c.providers),
        "admission_location": cat(c.adm_location, admission_location_labels()),
        "discharge_location": cat(c.disch_location, discharge_location_labels()),
        "insurance": cat(c.insurance[p], D.INSURANCES),
        "language": cat(c.language[p], D.LANGUAGES),
        "marital_status": cat(c.marital[p], D.MARITAL),
        "race": cat(c.race[p], D.RACES),
        "edregtime": ts(c.edregtime),
        "edouttime": ts(c.edouttime),
        "hospital_expire_flag": ints(c.expire.astype(np.int64)),
    })


# transfer segment kinds
_ED, _WARD1, _ICU, _WARD2, _DISCH = range(5)


def _segments(c: Cohort) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattened transfer segments: (admission, kind, careunit label index, intime, outtime)."""
    m = c.n_admissions
    via_ed = c.edregtime != NAT
    start_inpatient = np.where(via_ed, c.edouttime, c.admittime)
    ward1_end = np.where(c.icu, c.icu_in, np.where(c.split != NAT, c.split, c.dischtime))
    ward2_start = np.where(c.icu, c.icu_out, c.split)
    present = np.stack([
        via_ed,
        ward1_end > start_inpatient,
        c.icu,
        (c.ward2 >= 0) & (c.dischtime > np.where(ward2_start == NAT, c.dischtime, ward2_start)),
        np.ones(m, dtype=bool),
    ], axis=1)
    starts = np.stack([c.edregtime, start_inpatient, c.icu_in, ward2_start, c.dischtime], axis=1)
    ends = np.stack([c.edouttime, ward1_end, c.icu_out, c.dischtime, np.full(m, NAT)], axis=1)
    n_ward = len(D.WARD_UNITS)
    units = np.stack([
        np.full(m, 0),
        1 + c.ward1,
        1 + n_ward + np.maximum(c.icu_unit, 0),
        1 + np.maximum(c.ward2, 0),
        np.full(m, -1),
    ], axis=1)
    adm, kind = np.nonzero(present)
    return adm, kind, units[adm, kind], starts[adm, kind], ends[adm, kind]


def careunit_labels() -> tuple[str, ...]:
    return (D.ED_UNIT,) + D.WARD_UNITS + D.ICU_UNITS


def transfers_table(rng: np.random.Generator, c: Cohort) -> TableData:
    """The transfers of every admission, then the ED visits that ended without admission (one 'ED' row each,
    NULL ``hadm_id``, as in MIMIC-IV)."""
    from ehrgym.db.synth.outpatient import ed_visits

    adm, kind, unit, intime, outtime = _segments(c)
    first_inpatient = rank_within(adm) == np.where(c.edregtime[adm] != NAT, 1, 0)
    eventtype = np.where(kind == _ED, 0, np.where(kind == _DISCH, 3, np.where(first_inpatient, 1, 2)))
    ed_pat, ed_in = ed_visits(rng, c)
    ed_out = ed_in + uniform_int(rng, 90, 10 * 60, ed_pat.size) * MINUTE
    n_adm_rows = adm.size
    transfer_id = rng.permutation(_unique_sorted_ids(rng, n_adm_rows + ed_pat.size, 30_000_000, 9_000_000))
    ed_unit = careunit_labels().index(D.ED_UNIT)
    return TableData("transfers", {
        "subject_id": ints(np.concatenate([c.subject_id[c.pat[adm]], c.subject_id[ed_pat]])),
        "hadm_id": ints(np.concatenate([c.hadm_id[adm], np.zeros(ed_pat.size, dtype=np.int64)]),
                        null=np.arange(n_adm_rows + ed_pat.size) >= n_adm_rows),
        "transfer_id": ints(transfer_id),
        "eventtype": cat(np.concatenate([eventtype, np.zeros(ed_pat.size, dtype=np.int64)]),
                         ["ED", "admit", "transfer", "discharge"]),
        "careunit": cat(np.concatenate([unit, np.full(ed_pat.size, ed_unit)]), careunit_labels()),
        "intime": ts(np.concatenate([intime, ed_in])),
        "outtime": ts(np.concatenate([outtime, ed_out])),
    })


def services_table(c: Cohort) -> TableData:
    m = c.n_admissions
    second = c.service2 >= 0
    ward2_start = np.where(c.icu, c.icu_out, c.split)
    adm = np.concatenate([np.arange(m), np.flatnonzero(second)])
    time = np.concatenate([c.admittime, ward2_start[second]])
    prev = np.concatenate([np.full(m, -1), c.service1[second]])
    curr = np.concatenate([c.service1, c.service2[second]])
    order = lexorder((time, adm))
    adm, time, prev, curr = adm[order], time[order], prev[order], curr[order]
    return TableData("services", {
        "subject_id": ints(c.subject_id[c.pat[adm]]),
        "hadm_id": ints(c.hadm_id[adm]),
        "transfertime": ts(time),
        "prev_service": cat(prev, D.SERVICES),
        "curr_service": cat(curr, D.SERVICES),
    })


def icustays_table(c: Cohort) -> TableData:
    s = c.stays
    unit = c.icu_unit[s]
    return TableData("icustays", {
        "subject_id": ints(c.subject_id[c.pat[s]]),
        "hadm_id": ints(c.hadm_id[s]),
        "stay_id": ints(c.stay_id[s]),
        "first_careunit": cat(unit, D.ICU_UNITS),
        "last_careunit": cat(unit, D.ICU_UNITS),
        "intime": ts(c.icu_in[s]),
        "outtime": ts(c.icu_out[s]),
        "los": floats((c.icu_out[s] - c.icu_in[s]) / DAY),
    })


def provider_table(c: Cohort) -> TableData:
    return TableData("provider", {"provider_id": cat(np.arange(len(c.providers)), c.providers)})


def caregiver_table(c: Cohort) -> TableData:
    return TableData("caregiver", {"caregiver_id": ints(c.caregivers)})
