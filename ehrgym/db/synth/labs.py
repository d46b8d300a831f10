"""``labevents`` and ``d_labitems``: panels drawn on admission, every morning, in the evening on the
ward and every six hours in the ICU; values from a latent z-score per (admission, item) shifted by
the admission's conditions, trending over the stay, mapped through a two-piece (log-)normal fitted
to the MIMIC-IV demo quantiles (p01, p50, p99) and clipped inside the plausible bounds (condition
shifts partly centred, so that the cohort keeps the demo's medians).

On top of the panels: *background* items of the demo catalog (:mod:`.catalog`), drawn per draw by
frequency, valued through the demo's quantiles, with MIMIC's text results (NULL ``valuenum``),
comments and reference-range gaps; and clinic visits (:mod:`.outpatient`) with panels and background
items, without ``hadm_id``. The reference items (the ones benchmark questions ask about) are always
numeric. Rows come in chunks of patients.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ehrgym.db.items import ItemRef, items_for_table
from ehrgym.db.synth import catalog
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
    Panel("diff", (C.NEUTRO, C.LYMPH, C.BANDS), (0.6, 0.35, 0.05, 0.1), {"sepsis": 1.4}),
    Panel("coag", (C.PT, C.INR, C.PTT, C.FIBRINOGEN), (0.6, 0.3, 0.2, 0.1),
          {"atrial_fibrillation": 2.5, "cirrhosis": 2.5, "gi_bleed": 2.0}, {C.INR: "inr"}),
    Panel("lft", (C.ALT, C.AST, C.ALP, C.BILI, C.ALBUMIN, C.PROTEIN), (0.5, 0.15, 0.05, 0.05), {"cirrhosis": 4.0}),
    Panel("gas", (C.PH, C.PCO2, C.PO2, C.BASE_EXCESS, C.LACTATE), (0.3, 0.05, 0.45, 0.02),
          {"sepsis": 2.5, "copd": 2.0}),
    Panel("cardiac", (C.TROPONIN, C.NTPROBNP, C.CK), (0.45, 0.05, 0.1, 0.02),
          {"heart_failure": 2.0, "atrial_fibrillation": 1.6, "stroke": 1.6}),
    Panel("misc", (C.CRP, C.LDH, C.AMYLASE), (0.3, 0.08, 0.05, 0.02), {"sepsis": 1.6, "pneumonia": 1.6}),
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
    for draw_kind, lo, hi, p in ((MORNING, 4 * 60, 6 * 60, 1.0), (EVENING, 15 * 60, 19 * 60, 0.25)):
        keep = rng.random(adm.size) < p
        adm_parts.append(adm[keep])
        t_parts.append(base[keep] + uniform_int(rng, lo, hi, int(keep.sum())) * MINUTE)
        k_parts.append(np.full(int(keep.sum()), draw_kind))
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


@dataclass
class LabRows:
    """Lab rows before they become a table; ``item`` indexes the d_labitems list of :func:`generate`."""
    pat: np.ndarray
    adm: np.ndarray          # -1: outpatient (no hadm_id)
    t: np.ndarray
    item: np.ndarray
    val: np.ndarray          # NaN: a text result
    text: np.ndarray         # index into the text results (value, comments) of text rows, else -1
    spec: np.ndarray         # specimen number
    priority: np.ndarray     # index into PRIORITY_LABELS, -1 = NULL

    def __post_init__(self) -> None:
        # narrow integer columns: labevents is the biggest generated table, and memory traffic is its cost
        for name in ("pat", "adm", "item", "text", "spec"):
            setattr(self, name, np.asarray(getattr(self, name)).astype(np.int32, copy=False))
        self.priority = np.asarray(self.priority).astype(np.int8, copy=False)


PRIORITY_LABELS = ("STAT", "ROUTINE")
BACKGROUND_PER_DRAW = (22.0, 10.0, 3.5, 6.0)
"""Mean background (non-panel) results per blood draw of each kind (ADMISSION, MORNING, ICU, EVENING)."""
OUTPATIENT_PANELS = ((0.75, "bmp"), (0.6, "cbc"), (0.15, "lft"), (0.15, "coag"))
OUTPATIENT_BACKGROUND = 16.0
"""Mean background results per clinic visit (drawn by the demo's outpatient frequency)."""


def _catalog_items(refs: list[ItemRef]) -> tuple[np.ndarray, np.ndarray]:
    """Catalog rows (``catalog.labs()``) of the background items (those not in the reference list), and the
    d_labitems position of every catalog row (reference items keep their position in ``refs``)."""
    cat_ = catalog.labs()
    ref_pos = {r.itemid: j for j, r in enumerate(refs)}
    background = np.array([i for i, itemid in enumerate(cat_.itemid) if int(itemid) not in ref_pos
                           and (cat_.numeric[i] or catalog.lab_texts().has(np.array([i]))[0])], dtype=np.int64)
    position = np.full(cat_.itemid.size, -1, dtype=np.int64)
    for i, itemid in enumerate(cat_.itemid):
        if int(itemid) in ref_pos:
            position[i] = ref_pos[int(itemid)]
    position[background] = len(refs) + np.arange(background.size)
    return background, position


def _background(rng: np.random.Generator, mean: np.ndarray, weight: np.ndarray,
                items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Background results for each owner (a draw or a visit): Poisson(mean) items drawn by ``weight``,
    without repeats inside an owner. Returns (owner position, catalog row)."""
    n = rng.poisson(mean)
    o, _ = expand(n)
    cdf = np.cumsum(weight)
    pick_ = items[np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(o.size), side="right"), items.size - 1)]
    order = lexorder((pick_, o))
    o, pick_ = o[order], pick_[order]
    keep = np.ones(o.size, dtype=bool)
    keep[1:] = (o[1:] != o[:-1]) | (pick_[1:] != pick_[:-1])
    return o[keep], pick_[keep]


MISSING_FLOOR = 0.002
"""Share of results without a number for reference items that have none in the demo (the demo's pooled rate
over the reference items, troponin T left out: 130 of 65,172 rows), written as MIMIC's de-identified '___'."""
MISSING_CAP = 0.05
"""At most this share of a reference item's results is without a number (troponin T: 52 % in the demo, mostly
the censored '<0.01.' — capped so that troponin questions keep patients with complete evidence)."""


@lru_cache(maxsize=1)
def _missing_tables(n_ref: int, rows: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    cat_ = catalog.labs()
    texts = catalog.lab_texts()
    row = np.array(rows, dtype=np.int64)
    own = (row >= 0) & texts.has(np.maximum(row, 0))
    p_own = np.where(row >= 0, cat_.p_text[np.maximum(row, 0)], 0.0)
    p = np.where(own & (p_own > 0), np.minimum(p_own, MISSING_CAP), MISSING_FLOOR)
    redacted = next(k for k, (v, c) in enumerate(zip(texts.labels, texts.extra)) if v is None and c == "___")
    return p, np.where(own & (p_own > 0), row, -1), redacted


def _reference_missing(n_ref: int, catalog_row: np.ndarray):
    """(probability of a result without a number per reference position, a function drawing the text index
    of such results): the item's demo text forms where the demo has some, else the de-identified '___'."""
    p, row, redacted = _missing_tables(n_ref, tuple(int(x) for x in catalog_row[:n_ref]))
    texts = catalog.lab_texts()

    def draw(rng: np.random.Generator, item: np.ndarray) -> np.ndarray:
        out = np.full(item.size, redacted, dtype=np.int64)
        own = row[item] >= 0
        if own.any():
            out[own] = texts.draw(rng, row[item[own]])
        return out

    return p, draw


TEXT_ONLY_SHARE = 0.002
"""Share of reference-item results whose number sits only in the text column (``value`` '4.2', ``valuenum``
NULL, no flag; unit, reference range and comments as for any number): MIMIC-IV's everyday text results that carry
a number without a parsed ``valuenum`` ('>300', '0-2', '35/.': 442 of the demo's 107,727 results, 0.41 %; like
every MIMIC-IV result without ``valuenum`` they carry no abnormal flag) are
kept at the conservative rate of its results without a number over the reference items (MISSING_FLOOR), so
that a number stored as text is not the only odd thing in a reference item's rows."""
RECENTRE = 0.5
"""Share of the average condition shift taken off every draw (see ``generate``)."""
LAB_CHUNK_PATIENTS = 2000
"""labevents is generated and written in chunks of this many patients (fixed, so the data never depend on the
machine): bounded memory, reused buffers, and DuckDB writes one chunk while numpy makes the next."""


def generate(rng: np.random.Generator, c: Cohort, visits: tuple[np.ndarray, np.ndarray],
             draws_out: list[tuple[np.ndarray, np.ndarray]]) -> Iterator[TableData]:
    """labevents (in chunks of patients), then d_labitems; the (admission, time) of every inpatient blood draw
    (for lab orders) is appended to ``draws_out``.

    Rows: the reference panels (condition-driven values) on each draw; background items of the demo's
    catalog on top, drawn by frequency (with MIMIC's text results, comments and reference-range gaps);
    clinic-visit (outpatient, no ``hadm_id``) panels and background items at ``visits``."""
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
    all_adm, all_t, all_kind = _draw_times(rng, c)
    # the demo's quantiles describe the tested population, sick patients included: partly centre each item's
    # condition shifts on their average over blood draws, so that the cohort's medians stay near the demo's and
    # the conditions still separate sick from healthy (a healthy majority, sick tails)
    draws_per_adm = np.bincount(all_adm, minlength=c.n_admissions).astype(float)
    mean_shift = (draws_per_adm @ (c.cond.astype(float) @ shift)) / max(draws_per_adm.sum(), 1.0)
    all_v_pat, all_v_t = visits
    p_kind = np.array([p.p for p in PANELS])  # (P, 4)
    cat_ = catalog.labs()
    comments = catalog.lab_comments()
    background, position = _catalog_items(refs)
    # the d_labitems list: reference items, then the background items of the catalog
    n_ref = len(refs)
    item_ids = np.concatenate([np.array([x.itemid for x in refs]), cat_.itemid[background]])
    labels = [x.label for x in refs] + [cat_.label[i] for i in background]
    fluids = [x.group.split(" / ")[0] for x in refs] + [cat_.fluid[i] for i in background]
    categories = [x.group.split(" / ")[-1] for x in refs] + [cat_.category[i] for i in background]
    units = [x.unit if x.unit.strip() else None for x in refs] + [cat_.unit[i] for i in background]
    decimals_of = np.concatenate([np.array([LAB_FORMAT[x.itemid][0] for x in refs]), cat_.decimals[background]])
    # per-d_labitems-position attribute tables (small), gathered once per row
    n_items = item_ids.size
    catalog_row = np.full(n_items, -1, dtype=np.int64)  # each d_labitems entry's row in the catalog, if any
    found = np.searchsorted(cat_.itemid, item_ids)
    in_catalog = cat_.itemid[np.minimum(found, cat_.itemid.size - 1)] == item_ids
    catalog_row[in_catalog] = found[in_catalog]
    safe_row = np.maximum(catalog_row, 0)
    range_lo = np.concatenate([np.array([LAB_FORMAT[x.itemid][1] for x in refs], dtype=float),
                               cat_.ref_lower[background]])
    range_hi = np.concatenate([np.array([LAB_FORMAT[x.itemid][2] for x in refs], dtype=float),
                               cat_.ref_upper[background]])
    # reference ranges: always for the reference items, as often as in the demo for the others
    p_no_range = np.where(np.arange(n_items) < n_ref, 0.0, np.where(np.isnan(range_lo), 1.0,
                                                                   cat_.p_no_range[safe_row]))
    commentable = in_catalog & comments.has(safe_row)
    p_comment = np.where(commentable, cat_.p_comment[safe_row], 0.0)
    inpatient_w = cat_.weight[background] * (1 - cat_.p_outpatient[background])
    outpatient_w = cat_.weight[background] * cat_.p_outpatient[background]
    first_id = 1
    spec_offset = 0
    for p0 in range(0, c.n_patients, LAB_CHUNK_PATIENTS):
        p1 = min(p0 + LAB_CHUNK_PATIENTS, c.n_patients)
        a0, a1 = int(c.first_adm[p0]), int(c.first_adm[p1 - 1] + c.n_adm[p1 - 1])
        d0, d1 = np.searchsorted(all_adm, [a0, a1])
        v0, v1 = np.searchsorted(all_v_pat, [p0, p1])
        adm, t, kind = all_adm[d0:d1], all_t[d0:d1], all_kind[d0:d1]
        v_pat, v_t = all_v_pat[v0:v1], all_v_t[v0:v1]
        condf = c.cond[a0:a1].astype(float)
        base_rows = rng.normal(-0.15, 0.75, (a1 - a0, L)) + condf @ shift - RECENTRE * mean_shift
        slope_rows = condf @ trend
        healthy_rows = rng.normal(-0.15, 0.75, (p1 - p0, L))
        chunk, draws, n_spec = _chunk(rng, c, refs, col, models, p_kind, adm, t, kind, v_pat, v_t, a0, p0,
                                      base_rows, slope_rows, healthy_rows, background, position, inpatient_w,
                                      outpatient_w, first_id, spec_offset, item_ids, units, decimals_of,
                                      catalog_row, range_lo, range_hi, p_no_range, p_comment)
        first_id += chunk.num_rows
        spec_offset += n_spec
        draws_out.append(draws)
        yield chunk
    item_k = np.arange(item_ids.size)
    yield TableData("d_labitems", {
        "itemid": ints(item_ids),
        "label": cat(item_k, labels),
        "fluid": cat(item_k, fluids),
        "category": cat(item_k, categories),
    })


def _chunk(rng: np.random.Generator, c: Cohort, refs: list[ItemRef], col: dict[int, int],
           models: dict[int, ValueModel], p_kind: np.ndarray, adm: np.ndarray, t: np.ndarray, kind: np.ndarray,
           v_pat: np.ndarray, v_t: np.ndarray, a0: int, p0: int, base_rows: np.ndarray, slope_rows: np.ndarray,
           healthy_rows: np.ndarray, background: np.ndarray, position: np.ndarray, inpatient_w: np.ndarray,
           outpatient_w: np.ndarray, first_id: int, spec_offset: int, item_ids: np.ndarray,
           units: list[str | None], decimals_of: np.ndarray, catalog_row: np.ndarray, range_lo: np.ndarray,
           range_hi: np.ndarray, p_no_range: np.ndarray, p_comment: np.ndarray
           ) -> tuple[TableData, tuple[np.ndarray, np.ndarray], int]:
    """The labevents rows of one chunk of patients (admissions from ``a0``, patients from ``p0``); returns the
    table chunk, its inpatient draws and the number of specimens it used."""
    cat_ = catalog.labs()
    texts = catalog.lab_texts()
    comments = catalog.lab_comments()
    progress = np.clip((t - c.admittime[adm]) / np.maximum(c.dischtime[adm] - c.admittime[adm], 1), 0, 1)
    parts: list[LabRows] = []
    spec_counter = 0

    def panel_rows(panel: Panel, who: np.ndarray, pat: np.ndarray, a: np.ndarray, tt: np.ndarray,
                   z_of: dict[int, np.ndarray], prio: np.ndarray) -> None:
        nonlocal spec_counter
        cols: dict[int, np.ndarray] = {itemid: models[itemid].value(z_of[itemid]) for itemid in panel.items}
        for itemid, fname in panel.derived.items():
            ref = refs[col[itemid]]
            cols[itemid] = np.clip(_DERIVED[fname](cols, rng), max(ref.plausible_min, models[itemid].lo),
                                   min(ref.plausible_max, models[itemid].hi))
        spec_ids = spec_counter + np.arange(who.size)
        spec_counter += who.size
        for itemid in panel.items:
            dec, _, _ = LAB_FORMAT[itemid]
            parts.append(LabRows(pat, a, tt, np.full(who.size, col[itemid]),
                                 _round_inside(cols[itemid], dec, models[itemid].lo, models[itemid].hi),
                                 np.full(who.size, -1), spec_ids, prio))

    for pi, panel in enumerate(PANELS):
        p = p_kind[pi][kind]
        for key, mult in panel.boosts.items():
            p = np.where(c.cond[adm, CONDITION_KEYS.index(key)], p * mult, p)
        take = np.flatnonzero(rng.random(adm.size) < np.minimum(p, 0.98))
        if take.size == 0:
            continue
        rel = adm[take] - a0
        z_of = {itemid: base_rows[rel, col[itemid]] + slope_rows[rel, col[itemid]] * progress[take]
                + rng.normal(0, 0.3, take.size) for itemid in panel.items}
        panel_rows(panel, take, c.pat[adm[take]], adm[take], t[take], z_of, np.array([0, 1, 0, 1])[kind[take]])
    by_key = {p.key: p for p in PANELS}
    for p_visit, key in OUTPATIENT_PANELS:
        panel = by_key[key]
        take = np.flatnonzero(rng.random(v_pat.size) < p_visit)
        z_of = {itemid: healthy_rows[v_pat[take] - p0, col[itemid]] + rng.normal(0, 0.3, take.size)
                for itemid in panel.items}
        panel_rows(panel, take, v_pat[take], np.full(take.size, -1), v_t[take], z_of, np.full(take.size, 1))

    # background items of the catalog: inpatient draws and clinic visits
    for owner_n, mean, weight, owner_pat, owner_adm, owner_t, prio in (
            (adm.size, np.array(BACKGROUND_PER_DRAW)[kind], inpatient_w, c.pat[adm], adm, t,
             np.array([0, 1, 0, 1])[kind]),
            (v_pat.size, np.full(v_pat.size, OUTPATIENT_BACKGROUND), outpatient_w, v_pat,
             np.full(v_pat.size, -1), v_t, np.full(v_pat.size, 1))):
        o, ci = _background(rng, mean, weight, background)
        n = o.size
        is_text = (rng.random(n) < cat_.p_text[ci]) | ~cat_.numeric[ci]
        is_text &= texts.has(ci)
        z = rng.normal(0, 1, n)
        scale = 10.0 ** cat_.decimals[ci]
        val = np.where(is_text, np.nan, np.round(cat_.value(ci, z) * scale) / scale)
        text = np.full(n, -1, dtype=np.int64)
        if is_text.any():
            text[is_text] = texts.draw(rng, ci[is_text])
        # one specimen per owner for its background results
        spec_ids = spec_counter + o
        spec_counter += owner_n
        parts.append(LabRows(owner_pat[o], owner_adm[o], owner_t[o], position[ci], val, text, spec_ids, prio[o]))

    rows = LabRows(*(np.concatenate([getattr(p, f) for p in parts]) for f in LabRows.__dataclass_fields__))
    order = lexorder((rows.item, rows.t, rows.pat))
    r = LabRows(*(getattr(rows, f)[order] for f in LabRows.__dataclass_fields__))
    n = r.t.size

    # reference items: MIMIC's results without a number (NULL value and valuenum, the reason in the comments —
    # '___', 'UNABLE TO REPORT.', '<0.2.' …), at the item's demo rate with its demo forms (see _reference_missing)
    n_ref = len(refs)
    p_missing, missing_text = _reference_missing(n_ref, catalog_row)
    is_ref = r.item < n_ref
    cand = np.flatnonzero(is_ref)
    gone = cand[rng.random(cand.size) < p_missing[r.item[cand]]]
    if gone.size:
        r.val[gone] = np.nan
        r.text[gone] = missing_text(rng, r.item[gone])
    numeric = ~np.isnan(r.val)
    # reference items: a few results keep their number only in the text column (see TEXT_ONLY_SHARE)
    cand = np.flatnonzero(is_ref & numeric)
    text_only = np.zeros(n, dtype=bool)
    text_only[cand[rng.random(cand.size) < TEXT_ONLY_SHARE]] = True
    # text results of the reference items keep the item's unit and reference range, as in MIMIC-IV
    ref_text = is_ref & ~numeric
    has_range = numeric | ref_text
    maybe_gap = np.flatnonzero(numeric & (p_no_range[r.item] > 0))
    has_range[maybe_gap] = rng.random(maybe_gap.size) >= p_no_range[r.item[maybe_gap]]
    ref_lo = np.where(has_range, range_lo[r.item], 0.0)
    ref_hi = np.where(has_range, range_hi[r.item], 0.0)
    abnormal = has_range & ((r.val < ref_lo) | (r.val > ref_hi)) & ~text_only  # no valuenum, no flag (as in MIMIC)
    # comments: the text results' own comments; the demo's usual comments on some numeric results
    comment = np.full(n, -1, dtype=np.int64)
    may = np.flatnonzero(numeric & (p_comment[r.item] > 0))
    commented = may[rng.random(may.size) < p_comment[r.item[may]]]
    if commented.size:
        comment[commented] = comments.draw(rng, catalog_row[r.item[commented]])
    text_rows = np.flatnonzero(r.text >= 0)
    n_comment_labels = len(comments.labels)
    comment[text_rows] = n_comment_labels + r.text[text_rows]
    comment_labels = comments.labels + texts.extra
    number, num_labels = number_text(r.val, decimals_of[r.item])
    value = number
    value[text_rows] = len(num_labels) + r.text[text_rows]
    value_labels = num_labels + texts.labels

    # specimen ids: random-looking, unique across chunks (each chunk permutes its own block of numbers)
    spec_ids = (spec_offset + rng.permutation(spec_counter)) * 7 + 1_000_000 + rng.integers(0, 7, spec_counter)
    inpatient = r.adm >= 0
    a = np.maximum(r.adm, 0)
    store = r.t + uniform_int(rng, 20, 150, n) * MINUTE
    store = np.where(inpatient, np.minimum(store, c.dischtime[a]), store + uniform_int(rng, 0, 240, n) * MINUTE)
    provider = np.where(rng.random(n) < 0.5, rng.integers(0, len(c.providers), n), -1)

    lab = TableData("labevents", {
        "labevent_id": ints(np.arange(first_id, first_id + n)),
        "subject_id": ints(c.subject_id[r.pat]),
        "hadm_id": ints(c.hadm_id[a], null=~inpatient),
        "specimen_id": ints(spec_ids[r.spec]),
        "itemid": ints(item_ids[r.item]),
        "order_provider_id": cat(provider, c.providers),
        "charttime": ts(r.t),
        "storetime": ts(store),
        "value": cat(value, value_labels),
        "valuenum": floats(np.nan_to_num(r.val), null=~numeric | text_only),
        "valueuom": cat(np.where(numeric | ref_text, r.item, -1), units),
        "ref_range_lower": floats(ref_lo, null=~has_range),
        "ref_range_upper": floats(ref_hi, null=~has_range),
        "flag": cat(np.where(abnormal, 0, -1), ["abnormal"]),
        "priority": cat(r.priority, PRIORITY_LABELS),
        "comments": cat(comment, comment_labels),
    })
    # rows are in (patient, time) order and a patient's admissions in time order: draws are in (admission, time)
    ia, it = r.adm[inpatient], r.t[inpatient]
    new_draw = np.ones(ia.size, dtype=bool)
    new_draw[1:] = (ia[1:] != ia[:-1]) | (it[1:] != it[:-1])
    return lab, (ia[new_draw], it[new_draw]), spec_counter
