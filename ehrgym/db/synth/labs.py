"""``labevents`` and ``d_labitems``: panels drawn on admission, every morning, in the evening on the
ward and every six hours in the ICU; values from a latent z-score per (admission, item) shifted by
the admission's conditions, trending over the stay, mapped through a two-piece (log-)normal fitted
to the MIMIC-IV demo quantiles (p01, p50, p99) and clipped inside the plausible bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ehrgym.db.items import ItemRef, items_for_table
from ehrgym.db.synth import conditions as C
from ehrgym.db.synth.common import DAY, HOUR, MINUTE, expand, floor_to, lexorder, uniform_int
from ehrgym.db.synth.conditions import CONDITION_KEYS, CONDITIONS
from ehrgym.db.synth.timeline import Cohort
from ehrgym.db.synth.writer import TableData, cat, floats, ints, number_text, ts
from ehrgym.errors import SchemaError

# itemid -> (decimals, reference-range lower, reference-range upper)
LAB_FORMAT: dict[int, tuple[int, float, float]] = {
    C.BASE_EXCESS: (0, -3, 3), C.LACTATE: (1, 0.5, 2.0), C.PCO2: (0, 35, 45), C.PH: (2, 7.35, 7.45),
    C.PO2: (0, 85, 105), C.ALT: (0, 0, 40), C.ALBUMIN: (1, 3.5, 5.2), C.ALP: (0, 35, 105),
    C.AMYLASE: (0, 0, 100), C.ANION_GAP: (0, 8, 20), C.AST: (0, 0, 40), C.BICARB: (0, 22, 32),
    C.BILI: (1, 0, 1.5), C.CRP: (1, 0, 5), C.CALCIUM: (1, 8.4, 10.3), C.CHLORIDE: (0, 96, 108),
    C.CK: (0, 47, 322), C.CREAT: (1, 0.4, 1.1), C.GLUCOSE: (0, 70, 100), C.LDH: (0, 94, 250),
    C.MAGNESIUM: (1, 1.6, 2.6), C.NTPROBNP: (0, 0, 353), C.PHOSPHATE: (1, 2.7, 4.5), C.POTASSIUM: (1, 3.3, 5.1),
    C.PROTEIN: (1, 6.4, 8.3), C.SODIUM: (0, 133, 145), C.TROPONIN: (2, 0, 0.01), C.BUN: (0, 6, 20),
    C.BANDS: (0, 0, 5), C.FIBRINOGEN: (0, 180, 450), C.HCT: (1, 36, 48), C.HGB: (1, 12, 16),
    C.INR: (1, 0.9, 1.1), C.LYMPH: (1, 18, 42), C.MCV: (0, 82, 98), C.NEUTRO: (1, 34, 71),
    C.PLATELETS: (0, 150, 400), C.PT: (1, 9.4, 12.5), C.PTT: (1, 25, 36.5), C.RBC: (2, 4.2, 5.4),
    C.WBC: (1, 4.0, 11.0),
}

# draw kinds
ADMISSION, MORNING, ICU, EVENING = range(4)
PRIORITY = ("STAT", "ROUTINE", "STAT", "ROUTINE")


@dataclass(frozen=True)
class Panel:
    key: str
    items: tuple[int, ...]
    p: tuple[float, float, float, float]  # inclusion probability per draw kind
    boosts: dict[str, float] = field(default_factory=dict)
    derived: dict[int, str] = field(default_factory=dict)  # itemid -> name of a function in _DERIVED


PANELS: tuple[Panel, ...] = (
    Panel("bmp", (C.SODIUM, C.POTASSIUM, C.CHLORIDE, C.BICARB, C.BUN, C.CREAT, C.GLUCOSE, C.ANION_GAP, C.CALCIUM,
                  C.MAGNESIUM, C.PHOSPHATE), (1.0, 0.97, 0.6, 0.75), {"aki": 1.3},
          {C.ANION_GAP: "anion_gap"}),
    Panel("cbc", (C.WBC, C.HGB, C.HCT, C.PLATELETS, C.MCV, C.RBC), (0.97, 0.92, 0.35, 0.55), {"gi_bleed": 2.0},
          {C.HCT: "hematocrit"}),
    Panel("diff", (C.NEUTRO, C.LYMPH, C.BANDS), (0.6, 0.25, 0.05, 0.1), {"sepsis": 2.0}),
    Panel("coag", (C.PT, C.INR, C.PTT, C.FIBRINOGEN), (0.6, 0.3, 0.2, 0.1),
          {"atrial_fibrillation": 2.5, "cirrhosis": 2.5, "gi_bleed": 2.0}, {C.INR: "inr"}),
    Panel("lft", (C.ALT, C.AST, C.ALP, C.BILI, C.ALBUMIN, C.PROTEIN), (0.5, 0.15, 0.05, 0.05), {"cirrhosis": 4.0}),
    Panel("gas", (C.PH, C.PCO2, C.PO2, C.BASE_EXCESS, C.LACTATE), (0.15, 0.05, 0.8, 0.02),
          {"sepsis": 4.0, "copd": 2.0}),
    Panel("cardiac", (C.TROPONIN, C.NTPROBNP, C.CK), (0.3, 0.05, 0.1, 0.02),
          {"heart_failure": 3.0, "atrial_fibrillation": 2.0, "stroke": 2.0}),
    Panel("misc", (C.CRP, C.LDH, C.AMYLASE), (0.2, 0.05, 0.05, 0.02), {"sepsis": 2.5, "pneumonia": 2.5}),
)


@dataclass(frozen=True)
class ValueModel:
    """Two-piece (log-)normal through p01/p50/p99: ``value = inv(center + z * scale_side)``."""
    log: bool
    center: float
    scale_low: float
    scale_high: float
    lo: float
    hi: float

    @classmethod
    def fit(cls, ref: ItemRef) -> ValueModel:
        if ref.demo_p01 is None or ref.demo_p50 is None or ref.demo_p99 is None:
            raise SchemaError(f"lab item {ref.itemid} ({ref.label}) has no demo quantiles to fit")
        p01, p50, p99 = ref.demo_p01, ref.demo_p50, ref.demo_p99
        log = p01 > 0 and p99 / p01 > 5
        f = np.log if log else (lambda x: x)
        z99 = 2.3263
        scale_low = (f(p50) - f(p01)) / z99
        scale_high = (f(p99) - f(p50)) / z99
        inv = np.exp if log else (lambda x: x)
        lo = max(ref.plausible_min, float(inv(f(p50) - 3.2 * scale_low)))
        hi = min(ref.plausible_max, float(inv(f(p50) + 3.0 * scale_high)))
        return cls(log, float(f(p50)), float(scale_low), float(scale_high), lo, hi)

    def value(self, z: np.ndarray) -> np.ndarray:
        x = self.center + z * np.where(z < 0, self.scale_low, self.scale_high)
        return np.clip(np.exp(x) if self.log else x, self.lo, self.hi)


def _round_inside(values: np.ndarray, decimals: int, lo: float, hi: float) -> np.ndarray:
    q = 10.0 ** decimals
    lo_r, hi_r = np.ceil(lo * q) / q, np.floor(hi * q) / q
    return np.clip(np.round(values, decimals), lo_r, hi_r)


def _anion_gap(cols: dict[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    return cols[C.SODIUM] - cols[C.CHLORIDE] - cols[C.BICARB]


def _hematocrit(cols: dict[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    return cols[C.HGB] * 3.0 + rng.normal(0.0, 0.8, cols[C.HGB].size)


def _inr(cols: dict[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    return cols[C.PT] / 10.8 + rng.normal(0.0, 0.03, cols[C.PT].size)


_DERIVED = {"anion_gap": _anion_gap, "hematocrit": _hematocrit, "inr": _inr}


def lab_items() -> list[ItemRef]:
    refs = items_for_table("labevents")
    missing = [r.itemid for r in refs if r.itemid not in LAB_FORMAT]
    if missing:
        raise SchemaError(f"lab items {missing} have no format in ehrgym.db.synth.labs.LAB_FORMAT")
    return refs


def _draw_times(rng: np.random.Generator, c: Cohort) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(admission, time, kind) of every blood draw, sorted, at least 30 minutes apart within an admission."""
    m = c.n_admissions
    adm_parts, t_parts, k_parts = [], [], []
    # admission draw
    adm_parts.append(np.arange(m))
    t_parts.append(c.admittime + uniform_int(rng, 10, 90, m) * MINUTE)
    k_parts.append(np.full(m, ADMISSION))
    # mornings and evenings of each hospital day
    first_day = floor_to(c.admittime, DAY) + DAY
    n_days = np.maximum((c.dischtime - first_day) // DAY + 1, 0)
    adm, day = expand(n_days)
    base = first_day[adm] + day * DAY
    for kind, lo, hi, p in ((MORNING, 4 * 60, 6 * 60, 1.0), (EVENING, 15 * 60, 19 * 60, 0.6)):
        keep = rng.random(adm.size) < p
        adm_parts.append(adm[keep])
        t_parts.append(base[keep] + uniform_int(rng, lo, hi, int(keep.sum())) * MINUTE)
        k_parts.append(np.full(int(keep.sum()), kind))
    # ICU: every six hours
    s = c.stays
    n_icu = np.maximum((c.icu_out[s] - c.icu_in[s] - 2 * HOUR) // (6 * HOUR), 0)
    sidx, k = expand(n_icu)
    adm_parts.append(s[sidx])
    t_parts.append(c.icu_in[s][sidx] + 2 * HOUR + k * 6 * HOUR + uniform_int(rng, 0, 30, sidx.size) * MINUTE)
    k_parts.append(np.full(sidx.size, ICU))

    adm = np.concatenate(adm_parts)
    t = np.concatenate(t_parts)
    kind = np.concatenate(k_parts)
    keep = (t >= c.admittime[adm]) & (t <= c.dischtime[adm] - 2 * HOUR)
    adm, t, kind = adm[keep], t[keep], kind[keep]
    order = lexorder((t, adm))
    adm, t, kind = adm[order], t[order], kind[order]
    close = np.zeros(adm.size, dtype=bool)
    close[1:] = (adm[1:] == adm[:-1]) & (t[1:] - t[:-1] < 30 * MINUTE)
    return adm[~close], t[~close], kind[~close]


def generate(rng: np.random.Generator, c: Cohort) -> tuple[TableData, TableData, tuple[np.ndarray, np.ndarray]]:
    """labevents, d_labitems and the (admission, time) of every blood draw (for lab orders)."""
    refs = lab_items()
    col = {r.itemid: j for j, r in enumerate(refs)}
    models = {r.itemid: ValueModel.fit(r) for r in refs}
    K, L = len(CONDITIONS), len(refs)
    shift = np.zeros((K, L))
    trend = np.zeros((K, L))
    for k, cond in enumerate(CONDITIONS):
        for itemid, v in cond.lab_shift.items():
            shift[k, col[itemid]] = v
        for itemid, v in cond.lab_trend.items():
            trend[k, col[itemid]] = v
    condf = c.cond.astype(float)
    base = rng.normal(-0.15, 0.75, (c.n_admissions, L)) + condf @ shift
    slope = condf @ trend

    adm, t, kind = _draw_times(rng, c)
    progress = np.clip((t - c.admittime[adm]) / np.maximum(c.dischtime[adm] - c.admittime[adm], 1), 0, 1)
    p_kind = np.array([p.p for p in PANELS])  # (P, 4)

    out_adm, out_t, out_item, out_val, out_kind, out_spec = [], [], [], [], [], []
    spec_counter = 0
    for pi, panel in enumerate(PANELS):
        p = p_kind[pi][kind]
        for key, mult in panel.boosts.items():
            p = np.where(c.cond[adm, CONDITION_KEYS.index(key)], p * mult, p)
        take = np.flatnonzero(rng.random(adm.size) < np.minimum(p, 0.98))
        if take.size == 0:
            continue
        cols: dict[int, np.ndarray] = {}
        for itemid in panel.items:
            j = col[itemid]
            z = base[adm[take], j] + slope[adm[take], j] * progress[take] + rng.normal(0, 0.3, take.size)
            cols[itemid] = models[itemid].value(z)
        for itemid, fname in panel.derived.items():
            ref = refs[col[itemid]]
            cols[itemid] = np.clip(_DERIVED[fname](cols, rng), max(ref.plausible_min, models[itemid].lo),
                                   min(ref.plausible_max, models[itemid].hi))
        spec_ids = spec_counter + np.arange(take.size)
        spec_counter += take.size
        for itemid in panel.items:
            dec, _, _ = LAB_FORMAT[itemid]
            out_adm.append(adm[take])
            out_t.append(t[take])
            out_item.append(np.full(take.size, itemid))
            out_val.append(_round_inside(cols[itemid], dec, models[itemid].lo, models[itemid].hi))
            out_kind.append(kind[take])
            out_spec.append(spec_ids)

    a = np.concatenate(out_adm)
    tt = np.concatenate(out_t)
    item = np.concatenate(out_item)
    val = np.concatenate(out_val)
    knd = np.concatenate(out_kind)
    spec = np.concatenate(out_spec)
    order = lexorder((item, tt, a))
    a, tt, item, val, knd, spec = a[order], tt[order], item[order], val[order], knd[order], spec[order]
    n = a.size

    item_ids = np.array([r.itemid for r in refs])
    item_pos = np.searchsorted(item_ids, item) if np.all(np.diff(item_ids) > 0) else None
    if item_pos is None:
        sorter = np.argsort(item_ids)
        item_pos = sorter[np.searchsorted(item_ids, item, sorter=sorter)]
    decimals = np.array([LAB_FORMAT[r.itemid][0] for r in refs])[item_pos]
    ref_lo = np.array([LAB_FORMAT[r.itemid][1] for r in refs])[item_pos]
    ref_hi = np.array([LAB_FORMAT[r.itemid][2] for r in refs])[item_pos]
    abnormal = (val < ref_lo) | (val > ref_hi)
    units = [r.unit if r.unit.strip() else None for r in refs]
    # specimen ids: random-looking but unique, labevent ids: sequential
    # every specimen number 0 .. spec_counter-1 is used (each taken draw of a panel gets one), so they
    # index the specimen-id table directly
    spec_ids = rng.permutation(spec_counter) * 7 + 1_000_000 + rng.integers(0, 7, spec_counter)
    specimen_id = spec_ids[spec]
    storetime = np.minimum(tt + uniform_int(rng, 20, 150, n) * MINUTE, c.dischtime[a])
    provider = np.where(rng.random(n) < 0.5, rng.integers(0, len(c.providers), n), -1)

    lab = TableData("labevents", {
        "labevent_id": ints(np.arange(1, n + 1)),
        "subject_id": ints(c.subject_id[c.pat[a]]),
        "hadm_id": ints(c.hadm_id[a]),
        "specimen_id": ints(specimen_id),
        "itemid": ints(item),
        "order_provider_id": cat(provider, c.providers),
        "charttime": ts(tt),
        "storetime": ts(storetime),
        "value": cat(*number_text(val, decimals)),
        "valuenum": floats(val),
        "valueuom": cat(item_pos, units),
        "ref_range_lower": floats(ref_lo),
        "ref_range_upper": floats(ref_hi),
        "flag": cat(np.where(abnormal, 0, -1), ["abnormal"]),
        "priority": cat(knd, PRIORITY),
    })
    d_lab = TableData("d_labitems", {
        "itemid": ints(item_ids),
        "label": cat(np.arange(len(refs)), [r.label for r in refs]),
        "fluid": cat(np.arange(len(refs)), [r.group.split(" / ")[0] for r in refs]),
        "category": cat(np.arange(len(refs)), [r.group.split(" / ")[-1] for r in refs]),
    })
    new_draw = np.ones(n, dtype=bool)
    new_draw[1:] = (a[1:] != a[:-1]) | (tt[1:] != tt[:-1])
    return lab, d_lab, (a[new_draw], tt[new_draw])
