"""The ICU module: ``chartevents``, ``inputevents``, ``ingredientevents``, ``outputevents``,
``procedureevents``, ``datetimeevents`` and ``d_items``.

Monitored vitals (heart rate, SpO2, respiratory rate, arterial pressure when an arterial line is in, the
ventilator's measured rate while ventilated) are charted hourly inside each stay, as in MIMIC-IV, every 15
minutes in shock; cuff pressure hourly (every four hours beside an arterial line), heart rhythm hourly, FiO2
and PEEP every one and two hours while ventilated, alarm limits every two hours, temperature and GCS every
four hours (hourly in shock, every two hours while ventilated)… about 1,300 rows per stay (MIMIC-IV v3.1:
about 4,600, from many more items); chartevents comes in chunks of stays. Infusions run as
contiguous segments inside their physiological window (vasopressors during shock, propofol during
ventilation); lines, catheters and ventilation appear as procedure events whose insertion times
are echoed by date-time events. Every row lies inside its ICU stay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ehrgym.db.items import ItemRef, item_reference
from ehrgym.db.synth import catalog
from ehrgym.db.synth.common import DAY, HOUR, MINUTE, NAT, ceil_to, expand, lexorder, uniform_int
from ehrgym.db.synth.conditions import CONDITIONS
from ehrgym.db.synth.timeline import Cohort
from ehrgym.db.synth.writer import TableData, cat, floats, ints, number_text, ts

HR, ABPS, ABPD, ABPM, NBPS, NBPD, NBPM = 220045, 220050, 220051, 220052, 220179, 220180, 220181
RR, SPO2, PEEP, GLU_SERUM, GCS_EYE, TEMP_F, TEMP_C = 220210, 220277, 220339, 220621, 220739, 223761, 223762
FIO2, GCS_VERBAL, GCS_MOTOR, DAILY_WEIGHT, RR_TOTAL, GLU_FS = 223835, 223900, 223901, 224639, 224690, 225664
ADM_WEIGHT, HEIGHT = 226512, 226730
D5W, PHENYLEPHRINE, NOREPINEPHRINE, PROPOFOL, NACL, VANCOMYCIN = 220949, 221749, 221906, 222168, 225158, 225798
FOLEY, VOID = 226559, 226560

# Items the reference does not list but the ICU tables need: (itemid, label, abbreviation, linksto, category,
# unitname, param_type)
EXTRA_ITEMS: tuple[tuple[int, str, str, str, str, str | None, str], ...] = (
    (220046, "Heart rate Alarm - High", "HR Alarm - High", "chartevents", "Alarms", "bpm", "Numeric"),
    (220047, "Heart Rate Alarm - Low", "HR Alarm - Low", "chartevents", "Alarms", "bpm", "Numeric"),
    (220048, "Heart Rhythm", "Heart Rhythm", "chartevents", "Routine Vital Signs", None, "Text"),
    (223751, "Non-Invasive Blood Pressure Alarm - High", "NBP Alarm - High", "chartevents", "Alarms", "mmHg", "Numeric"),
    (223752, "Non-Invasive Blood Pressure Alarm - Low", "NBP Alarm - Low", "chartevents", "Alarms", "mmHg", "Numeric"),
    (223769, "O2 Saturation Pulseoxymetry Alarm - High", "SpO2 Alarm - High", "chartevents", "Alarms", "%", "Numeric"),
    (223770, "O2 Saturation Pulseoxymetry Alarm - Low", "SpO2 Alarm - Low", "chartevents", "Alarms", "%", "Numeric"),
    (224161, "Resp Alarm - High", "Resp Alarm - High", "chartevents", "Alarms", "insp/min", "Numeric"),
    (224162, "Resp Alarm - Low", "Resp Alarm - Low", "chartevents", "Alarms", "insp/min", "Numeric"),
    (220490, "Water", "H2O", "ingredientevents", "Ingredients", "mL", "Ingredient"),
    (226060, "Calories", "Calories", "ingredientevents", "Ingredients", "Kcal", "Ingredient"),
    (224275, "20 Gauge", "20 Gauge", "procedureevents", "Access Lines - Peripheral", None, "Processes"),
    (224277, "18 Gauge", "18 Gauge", "procedureevents", "Access Lines - Peripheral", None, "Processes"),
    (225752, "Arterial Line", "Arterial Line", "procedureevents", "Access Lines - Invasive", None, "Processes"),
    (224263, "Multi Lumen", "Multi Lumen", "procedureevents", "Access Lines - Invasive", None, "Processes"),
    (225792, "Invasive Ventilation", "Invasive Ventilation", "procedureevents", "2-Ventilation", None, "Processes"),
    (225459, "Chest X-Ray", "Chest X-Ray", "procedureevents", "5-Imaging", None, "Processes"),
    (225402, "EKG", "EKG", "procedureevents", "4-Procedures", None, "Processes"),
    (225401, "Blood Cultured", "Blood Cultured", "procedureevents", "6-Cultures", None, "Processes"),
    (225454, "Urine Culture", "Urine Culture", "procedureevents", "6-Cultures", None, "Processes"),
    (229351, "Foley Catheter", "Indwelling Urinary Catheter", "procedureevents", "GI/GU", None, "Processes"),
    (225441, "Hemodialysis", "Hemodialysis", "procedureevents", "4-Procedures", None, "Processes"),
    (225754, "20 Gauge Insertion Date", "20 Gauge Insertion Date", "datetimeevents", "Access Lines - Peripheral", None,
     "Date and time"),
    (225755, "18 Gauge Insertion Date", "18 Gauge Insertion Date", "datetimeevents", "Access Lines - Peripheral", None,
     "Date and time"),
    (224288, "Arterial line Insertion Date", "Arterial line Insertion Date", "datetimeevents",
     "Access Lines - Invasive", None, "Date and time"),
    (224287, "Arterial Line Dressing Change", "Arterial Line Dressing Change", "datetimeevents",
     "Access Lines - Invasive", None, "Date and time"),
    (224280, "Multi Lumen Insertion Date", "Multi Lumen Insertion Date", "datetimeevents", "Access Lines - Invasive",
     None, "Date and time"),
    (224279, "Multi Lumen Dressing Change", "Multi Lumen Dressing Change", "datetimeevents",
     "Access Lines - Invasive", None, "Date and time"),
    (229352, "Foley Cath Insertion Date", "Indwelling Urinary Cath Insertion Date", "datetimeevents", "GI/GU", None,
     "Date and time"),
)

ABBREVIATIONS: dict[int, str] = {
    HR: "HR", ABPS: "ABPs", ABPD: "ABPd", ABPM: "ABPm", NBPS: "NBPs", NBPD: "NBPd", NBPM: "NBPm", RR: "RR",
    SPO2: "SpO2", GCS_EYE: "Eye Opening", TEMP_F: "Temperature F", TEMP_C: "Temperature C", FIO2: "FiO2",
    GCS_VERBAL: "Verbal Response", GCS_MOTOR: "Motor Response", GLU_FS: "Glucose FS (range 70 -100)",
}
PARAM_TYPES = {"chartevents": "Numeric", "inputevents": "Solution", "outputevents": "Numeric"}
NORMALS: dict[int, tuple[float, float]] = {ABPS: (90, 140), ABPD: (60, 90)}
TEXT_ITEMS = {GCS_EYE, GCS_VERBAL, GCS_MOTOR}
# Units the kit stores for reference items whose MIMIC unitname is missing or 'None'
UNIT_OVERRIDES: dict[int, str | None] = {GLU_SERUM: "mg/dL", GLU_FS: "mg/dL", FIO2: None}

GCS_TEXT: dict[int, tuple[str, ...]] = {  # index = score - 1
    GCS_EYE: ("No Response", "To Pain", "To Speech", "Spontaneously"),
    GCS_VERBAL: ("No Response", "Incomprehensible sounds", "Inappropriate Words", "Confused", "Oriented"),
    GCS_MOTOR: ("No response", "Abnormal extension", "Abnormal Flexion", "Flex-withdraws", "Localizes Pain",
                "Obeys Commands"),
}
RHYTHMS = ("SR (Sinus Rhythm)", "ST (Sinus Tachycardia)", "AF (Atrial Fibrillation)", "SB (Sinus Bradycardia)")


def item_unit(ref: ItemRef) -> str | None:
    if ref.itemid in UNIT_OVERRIDES:
        return UNIT_OVERRIDES[ref.itemid]
    return ref.unit if ref.unit.strip() and ref.unit != "None" else None


def item_decimals(itemid: int) -> int:
    return 1 if itemid in (TEMP_F, TEMP_C, DAILY_WEIGHT, ADM_WEIGHT) else 0


@dataclass
class Stays:
    """Per-ICU-stay arrays (length S) the generators share."""
    adm: np.ndarray
    stay_id: np.ndarray
    subject_id: np.ndarray
    hadm_id: np.ndarray
    intime: np.ndarray
    outtime: np.ndarray
    vent: np.ndarray
    vent_start: np.ndarray
    vent_end: np.ndarray
    shock: np.ndarray
    shock_start: np.ndarray
    shock_end: np.ndarray
    artline: np.ndarray
    foley: np.ndarray
    celsius: np.ndarray
    weight: np.ndarray
    height: np.ndarray
    base: dict[str, np.ndarray]     # healthy baseline per stay
    shift: dict[str, np.ndarray]    # conditions' shift per stay at ICU admission
    has: Callable[[str], np.ndarray]
    caregivers: np.ndarray
    cg_offset: np.ndarray


def _stays(rng: np.random.Generator, c: Cohort) -> Stays:
    a = c.stays
    S = a.size
    shifts = {key: np.zeros(S) for key in ("hr", "sbp", "dbp", "map", "rr", "spo2", "temp", "glucose", "gcs")}
    for k, cond in enumerate(CONDITIONS):
        on = c.cond[a, k]
        for key, v in cond.chart_shift.items():
            shifts[key] = shifts[key] + on * v
    # a healthy baseline per stay (typical adult ICU values) and the conditions' shifts, scaled by how sick
    # this patient is (acuity) and fading as treatment works (see _level)
    acuity = rng.uniform(0.25, 1.0, S)
    base = {
        "hr": rng.normal(77, 11, S), "sbp": rng.normal(120, 14, S), "dbp": rng.normal(64, 8, S),
        "rr": rng.normal(17.5, 2.5, S), "spo2": rng.normal(97.0, 1.2, S), "temp": rng.normal(36.75, 0.3, S),
        "glucose": rng.normal(122, 18, S), "gcs": rng.normal(14.6, 0.8, S),
    }
    shift = {
        "hr": shifts["hr"] * acuity, "sbp": (shifts["sbp"] + shifts["map"]) * acuity,
        "dbp": (shifts["dbp"] + shifts["map"] * 0.7) * acuity, "rr": shifts["rr"] * acuity,
        "spo2": shifts["spo2"] * acuity, "temp": shifts["temp"] * acuity, "glucose": shifts["glucose"],
        "gcs": shifts["gcs"] * acuity,
    }
    return Stays(
        adm=a, stay_id=c.stay_id[a], subject_id=c.subject_id[c.pat[a]], hadm_id=c.hadm_id[a],
        intime=c.icu_in[a], outtime=c.icu_out[a], vent=c.vent[a], vent_start=c.vent_start[a],
        vent_end=c.vent_end[a], shock=c.shock[a], shock_start=c.shock_start[a], shock_end=c.shock_end[a],
        artline=c.vent[a] | c.shock[a] | (rng.random(S) < 0.2), foley=rng.random(S) < 0.8,
        celsius=rng.random(S) < 0.2, weight=c.weight_kg[c.pat[a]], height=c.height_cm[c.pat[a]], base=base,
        shift=shift,
        has=lambda key: c.has(key)[a], caregivers=c.caregivers, cg_offset=rng.integers(0, c.caregivers.size, S),
    )


SHIFT_FADE = 36 * HOUR
"""Acute shifts fade with treatment: to 30 % of their size, with this time constant after ICU admission."""


def _level(st: Stays, key: str, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Expected value of vital ``key`` for stays ``s`` at times ``t``: baseline plus the fading shift."""
    fade = 0.3 + 0.7 * np.exp(-(t - st.intime[s]) / SHIFT_FADE)
    return st.base[key][s] + st.shift[key][s] * fade


def _caregiver(st: Stays, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Nurses work 12-hour shifts: the same caregiver charts a stay within a shift."""
    return st.caregivers[(st.cg_offset[s] + (t // (12 * HOUR))) % st.caregivers.size]


def _stay_keys(st: Stays, s: np.ndarray, t: np.ndarray) -> dict[str, Any]:
    """The key columns every ICU event table starts with, for events at times ``t`` of stays ``s``."""
    return {
        "subject_id": ints(st.subject_id[s]),
        "hadm_id": ints(st.hadm_id[s]),
        "stay_id": ints(st.stay_id[s]),
        "caregiver_id": ints(_caregiver(st, s, t)),
    }


def _in_window(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return (start != NAT) & (t >= start) & (t < end)


# ------------------------------------------------------------------ chartevents

MONITOR_EVERY = HOUR
"""Monitored vitals (heart rate, SpO2, respiratory rate, arterial pressure) are validated hourly, as in
MIMIC-IV (about 1.1 heart-rate rows per ICU hour)…"""
SHOCK_EVERY = 15 * MINUTE
"""…and every 15 minutes in shock, while vasopressors are titrated."""


CHART_NO_NUMBER_SHARE = 0.001
"""Share of numeric charted rows stored without a number (value and valuenum NULL), and again of rows whose
number sits only in ``value`` (valuenum NULL). The demo ships no chartevents, so the rate cannot be measured
there; it is set conservatively at half the demo's rate of lab results without a number over the reference
items (0.2 %, see ``labs.MISSING_FLOOR``): charted vitals are validated by nurses, and the rate is kept low
because any such row makes its stay ineligible for a vitals question (the benchmark samples naturally clean
evidence), so a higher rate would thin the vitals templates."""


def chartevents(rng: np.random.Generator, st: Stays, lo: int = 0, hi: int | None = None) -> TableData:
    """The charted rows of stays ``lo`` to ``hi`` (all by default), in (stay, charttime, itemid) order."""
    hi = st.adm.size if hi is None else hi
    # the charting grid: every SHOCK_EVERY inside the stay, kept every MONITOR_EVERY (all of it in shock)
    first = ceil_to(st.intime, HOUR)
    n_ticks = np.maximum((st.outtime[lo:hi] - MINUTE - first[lo:hi]) // SHOCK_EVERY + 1, 0)
    s, k = expand(n_ticks)
    s += lo
    t = first[s] + k * SHOCK_EVERY
    shock_now = _in_window(t, st.shock_start[s], st.shock_end[s])
    keep = (t % MONITOR_EVERY == 0) | shock_now
    s, t, shock_now = s[keep], t[keep], shock_now[keep]
    vent_now = _in_window(t, st.vent_start[s], st.vent_end[s])
    hourly = t % HOUR == 0
    hod = (t // HOUR) % 24
    n = s.size
    rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = []  # (itemid, slots, values, text codes)

    def emit(mask: np.ndarray | None, itemid: int, values: np.ndarray, text: np.ndarray | None = None) -> None:
        """Chart ``itemid`` at the slots of ``mask`` (None: every slot); ``values`` are per slot or per chart."""
        if mask is None:
            rows.append((itemid, np.arange(n), values, text))
            return
        idx = np.flatnonzero(mask)
        if values.size == n:
            values = values[idx]
            text = None if text is None else text[idx]
        rows.append((itemid, idx, values, text))

    def noise(sd: float, mask: np.ndarray | None = None) -> np.ndarray:
        return rng.normal(0, sd, n if mask is None else int(np.count_nonzero(mask)))

    hr = np.clip(_level(st, "hr", s, t) + 10 * shock_now + noise(6), 35, 190).round()
    sbp = np.clip(_level(st, "sbp", s, t) - 22 * shock_now + noise(9), 60, 230)
    dbp = np.clip(np.minimum(_level(st, "dbp", s, t) - 12 * shock_now + noise(6), sbp - 20), 25, 140)
    rr = np.clip(_level(st, "rr", s, t) + noise(2.5), 6, 50).round()
    emit(None, HR, hr)
    emit(None, RR, rr)
    emit(None, SPO2, np.clip(_level(st, "spo2", s, t) + 1.5 * vent_now + noise(1.3), 82, 100).round())
    art = st.artline[s]
    emit(art, ABPS, sbp.round())
    emit(art, ABPD, dbp.round())
    emit(art, ABPM, ((sbp + 2 * dbp) / 3).round())
    # cuff pressure: hourly without an arterial line, every four hours beside one
    nbp = hourly & (~art | (hod % 4 == 0))
    nsbp = np.clip(sbp[nbp] + noise(4, nbp), 60, 230).round()
    ndbp = np.clip(dbp[nbp] + noise(3, nbp), 25, 140).round()
    emit(nbp, NBPS, nsbp)
    emit(nbp, NBPD, ndbp)
    emit(nbp, NBPM, ((nsbp + 2 * ndbp) / 3).round())
    # ventilator: measured rate with the vitals, FiO2 hourly, PEEP every two hours
    emit(vent_now, RR_TOTAL, np.clip(rr[vent_now] + rng.integers(0, 4, int(vent_now.sum())), 8, 45))
    fio2 = vent_now & hourly
    emit(fio2, FIO2, np.clip(40 + 5 * np.round(noise(2, fio2)) + 10 * shock_now[fio2], 30, 100))
    peep = fio2 & (hod % 2 == 0)
    emit(peep, PEEP, np.array([5.0, 8.0, 10.0, 12.0])[rng.integers(0, 4, int(peep.sum()))])
    # temperature every four hours, hourly in shock (one unit per item: a stay is charted in °F or in °C)
    temp = hourly & ((hod % 4 == 0) | shock_now)
    temp_c = np.clip(_level(st, "temp", s[temp], t[temp]) + noise(0.3, temp), 34.5, 41.5)
    fahrenheit = ~st.celsius[s[temp]]
    emit(temp & ~st.celsius[s], TEMP_F, np.round(temp_c[fahrenheit] * 9 / 5 + 32, 1))
    emit(temp & st.celsius[s], TEMP_C, np.round(temp_c[~fahrenheit], 1))
    # GCS every four hours, every two while ventilated; intubated patients' verbal score is 1
    gcs_slot = hourly & ((hod % 4 == 2) | (vent_now & (hod % 2 == 0)))
    gcs = np.clip(np.minimum(_level(st, "gcs", s[gcs_slot], t[gcs_slot]), 15) - 4 * vent_now[gcs_slot] + noise(0.7, gcs_slot), 3, 15)
    eye = np.clip(np.round(1 + (gcs - 3) / 12 * 3), 1, 4)
    motor = np.clip(np.round(1 + (gcs - 3) / 12 * 5 + 0.3), 1, 6)
    verbal = np.where(vent_now[gcs_slot], 1, np.clip(np.round(gcs - eye - motor), 1, 5))
    emit(gcs_slot, GCS_EYE, eye, eye.astype(np.int64) - 1)
    emit(gcs_slot, GCS_VERBAL, verbal, 4 + verbal.astype(np.int64) - 1)
    emit(gcs_slot, GCS_MOTOR, motor, 9 + motor.astype(np.int64) - 1)
    # heart rhythm hourly (text only)
    af = st.has("atrial_fibrillation")[s[hourly]]
    hr_h = hr[hourly]
    rhythm = np.where(af, 2, np.where(hr_h > 100, 1, np.where(hr_h < 55, 3, 0)))
    emit(hourly, 220048, np.full(rhythm.size, np.nan), 15 + rhythm)
    # glucose: finger sticks every six hours, serum twice a day
    fs = hourly & (hod % 6 == 5)
    emit(fs, GLU_FS, np.clip(_level(st, "glucose", s[fs], t[fs]) + noise(25, fs), 40, 600).round())
    serum = hourly & (hod % 12 == 4)
    emit(serum, GLU_SERUM, np.clip(_level(st, "glucose", s[serum], t[serum]) + noise(25, serum) + noise(8, serum), 40, 600).round())
    # alarm limits checked every two hours
    alarm = hourly & (hod % 2 == 1)
    n_alarm = int(alarm.sum())
    for itemid, alarm_value in ((220046, 120.0), (220047, 50.0), (223751, 160.0), (223752, 90.0), (223769, 100.0),
                          (223770, 90.0), (224161, 35.0), (224162, 8.0)):
        emit(alarm, itemid, np.full(n_alarm, alarm_value))
    # weights and height
    k_first = np.zeros(n, dtype=bool)
    k_first[np.searchsorted(s, lo + np.flatnonzero(n_ticks > 0))] = True
    emit(k_first, ADM_WEIGHT, np.round(st.weight[s[k_first]], 1))
    tall = k_first & (rng.random(n) < 0.6)
    emit(tall, HEIGHT, st.height[s[tall]])
    daily = hourly & (hod == 4) & ~k_first
    hours_in = (t[daily] - first[s[daily]]) / HOUR
    emit(daily, DAILY_WEIGHT, np.round(st.weight[s[daily]] * (1 + 0.002 * hours_in / 24) + noise(0.6, daily), 1))

    # rows in (stay, charttime, itemid) order: slots are in (stay, charttime) order, items sorted by id
    rows.sort(key=lambda r: r[0])
    item_ids = [r[0] for r in rows]
    slot = np.concatenate([idx for _, idx, _, _ in rows])
    item_pos = np.concatenate([np.full(idx.size, j, dtype=np.int32) for j, (_, idx, _, _) in enumerate(rows)])
    val = np.concatenate([values for _, _, values, _ in rows]).astype(np.float64, copy=False)
    text = np.concatenate([np.full(idx.size, -1) if codes is None else codes for _, idx, _, codes in rows])
    order = lexorder((item_pos, slot))
    slot, item_pos, val, text = slot[order], item_pos[order], val[order], text[order]
    m = slot.size
    ss, tt = s[slot], t[slot]
    refs = item_reference()
    decimals = np.array([item_decimals(i) for i in item_ids], dtype=np.int64)[item_pos]
    store = np.minimum(tt + uniform_int(rng, 0, 40, m) * MINUTE, st.outtime[ss])
    # value: the text of text items (GCS, rhythm), else the number as charted (integers without decimals)
    text_labels = list(GCS_TEXT[GCS_EYE] + GCS_TEXT[GCS_VERBAL] + GCS_TEXT[GCS_MOTOR] + RHYTHMS)
    number, num_labels = number_text(val, decimals)
    value = np.where(text >= 0, text, np.where(number < 0, number, number + len(text_labels)))
    missing = np.isnan(val)
    # numeric items: a few charted rows without a number (value and valuenum NULL) and a few whose number sits
    # only in the text column (valuenum NULL), each at CHART_NO_NUMBER_SHARE (see there)
    numeric = np.flatnonzero(~missing & (text < 0))
    draw = rng.random(numeric.size)
    blank = numeric[draw < CHART_NO_NUMBER_SHARE]
    text_only = numeric[(draw >= CHART_NO_NUMBER_SHARE) & (draw < 2 * CHART_NO_NUMBER_SHARE)]
    value = value.copy()
    value[blank] = -1
    missing = missing.copy()
    missing[blank] = True
    missing[text_only] = True
    return TableData("chartevents", {
        "subject_id": ints(st.subject_id[ss]),
        "hadm_id": ints(st.hadm_id[ss]),
        "stay_id": ints(st.stay_id[ss]),
        "caregiver_id": ints(_caregiver(st, s, t)[slot]),
        "charttime": ts(tt),
        "storetime": ts(store),
        "itemid": ints(np.array(item_ids, dtype=np.int64)[item_pos]),
        "value": cat(value, text_labels + num_labels),
        "valuenum": floats(np.where(missing, 0.0, val), null=missing),
        "valueuom": cat(item_pos, [item_unit(refs[i]) if i in refs else _extra_unit(i) for i in item_ids]),
        "warning": ints(np.zeros(m, dtype=np.int64)),
    })


def _extra_unit(itemid: int) -> str | None:
    for row in EXTRA_ITEMS:
        if row[0] == itemid:
            return row[5]
    raise KeyError(itemid)


# ------------------------------------------------------------------ inputevents / ingredientevents

@dataclass(frozen=True)
class Infusion:
    itemid: int
    window: str            # 'stay', 'shock', 'vent'
    p: float               # probability for an eligible stay
    segment_h: tuple[int, int]
    rate: tuple[float, float]
    rate_uom: str | None   # None: intermittent doses (amount only)
    amount_uom: str
    weight_based: bool
    ml_per_amount: float   # volume of the ingredient water per unit of amount
    category: str
    secondary: str | None
    description: str
    bag: float
    condition: str | None = None
    every_h: int = 0       # intermittent dosing interval


MAX_DOSING_WEIGHT = 120.0  # kg; weight-based drips are dosed on at most this weight


def max_amount(inf: Infusion) -> float:
    """Largest amount one row of this infusion can carry (checked against the item's plausible bounds)."""
    if inf.rate_uom is None:
        return 1.0
    hours = inf.segment_h[1]
    if inf.weight_based:
        return inf.rate[1] * MAX_DOSING_WEIGHT * hours * 60 / 1000
    return inf.rate[1] * hours


INFUSIONS: tuple[Infusion, ...] = (
    Infusion(NACL, "stay", 0.7, (2, 6), (50, 150), "mL/hour", "mL", False, 1.0, "02-Fluids (Crystalloids)", None,
             "Continuous IV", 1000),
    Infusion(D5W, "stay", 0.2, (3, 8), (20, 75), "mL/hour", "mL", False, 1.0, "02-Fluids (Crystalloids)", None,
             "Continuous IV", 1000),
    Infusion(NOREPINEPHRINE, "shock", 1.0, (1, 1), (0.02, 0.3), "mcg/kg/min", "mg", True, 31.25, "01-Drips",
             "02-Fluids (Crystalloids)", "Continuous Med", 250),
    Infusion(PHENYLEPHRINE, "shock", 0.35, (1, 1), (0.3, 2.0), "mcg/kg/min", "mg", True, 4.0, "01-Drips",
             "02-Fluids (Crystalloids)", "Continuous Med", 250),
    Infusion(PROPOFOL, "vent", 0.9, (1, 1), (10, 30), "mcg/kg/min", "mg", True, 0.1, "01-Drips", None,
             "Continuous Med", 100),
    Infusion(VANCOMYCIN, "stay", 0.9, (0, 0), (1, 1), None, "dose", False, 250.0, "08-Antibiotics (IV)",
             "02-Fluids (Crystalloids)", "Drug Push", 250, condition="sepsis", every_h=12),
)


@dataclass(frozen=True)
class InputItem:
    """A background ICU input of the demo catalog (given as the demo gives it: its usual units, categories,
    amount, rate and duration)."""
    itemid: int
    label: str
    category: str
    amount_uom: str
    rate_uom: str | None
    ordercategory: str
    secondary: str | None
    description: str
    amount: float
    rate: float
    minutes: float
    weight: float            # stays using the item in the demo
    rows_per_stay: float


BACKGROUND_INPUTS_PER_STAY = 7.0
"""Mean distinct background input items per ICU stay (MIMIC-IV: about 116 input rows per stay)."""


def background_inputs() -> list[InputItem]:
    from ehrgym.db.synth.meds import BACKGROUND_EXCLUDED

    core = {x.itemid for x in INFUSIONS}
    out = []
    for r in catalog.input_items():
        label = r["label"].lower()
        if (int(r["itemid"]) in core or any(w in label for w in BACKGROUND_EXCLUDED)
                or "antibiotic" in r["category"].lower() or "antibiotic" in r["ordercategoryname"].lower()):
            continue
        amount = float(r["amount_p50"] or 0)
        if amount <= 0 or not r["amountuom"]:
            continue
        has_rate = bool(r["rateuom"]) and float(r["p_rate"] or 0) >= 0.5 and float(r["rate_p50"] or 0) > 0
        out.append(InputItem(int(r["itemid"]), r["label"], r["category"], r["amountuom"],
                             r["rateuom"] if has_rate else None, r["ordercategoryname"] or "Continuous Med",
                             r["secondaryordercategoryname"] or None, r["ordercategorydescription"] or "Drug Push",
                             amount, float(r["rate_p50"] or 0) if has_rate else 0.0,
                             max(float(r["minutes_p50"] or 1), 1.0), float(r["stays"]),
                             float(r["rows"]) / max(float(r["stays"]), 1.0)))
    return out


def _background_input_rows(rng: np.random.Generator, st: Stays, items: list[InputItem]):
    """(stay, background item index, start, end, amount, rate) of the background inputs."""
    S = st.adm.size
    weight = np.array([x.weight for x in items])
    cdf = np.cumsum(weight) / weight.sum()
    s, _ = expand(rng.poisson(BACKGROUND_INPUTS_PER_STAY, S))
    item = np.minimum(np.searchsorted(cdf, rng.random(s.size), side="right"), len(items) - 1)
    o = lexorder((item, s))
    s, item = s[o], item[o]
    fresh = np.ones(s.size, dtype=bool)
    fresh[1:] = (s[1:] != s[:-1]) | (item[1:] != item[:-1])
    s, item = s[fresh], item[fresh]
    span_days = (st.outtime - st.intime)[s] / DAY
    per_stay = np.array([x.rows_per_stay for x in items])[item]
    n_rows = 1 + rng.poisson(np.clip((per_stay - 1) * np.minimum(span_days / 3.0, 3.0), 0, 40))
    j, _ = expand(n_rows)
    s, item = s[j], item[j]
    minutes = np.array([x.minutes for x in items])[item] * np.exp(rng.normal(0, 0.4, j.size))
    dur = np.maximum(np.round(minutes), 1).astype(np.int64) * MINUTE
    lo = st.intime[s] + 10 * MINUTE
    hi = st.outtime[s] - dur
    ok = hi > lo
    s, item, dur, lo, hi = s[ok], item[ok], dur[ok], lo[ok], hi[ok]
    start = lo + (rng.random(s.size) * (hi - lo)).astype(np.int64)
    start -= start % MINUTE
    end = start + dur
    o = lexorder((start, item, s))
    s, item, start, end = s[o], item[o], start[o], end[o]
    fresh = np.ones(s.size, dtype=bool)
    fresh[1:] = (s[1:] != s[:-1]) | (item[1:] != item[:-1]) | (start[1:] != start[:-1])
    s, item, start, end = s[fresh], item[fresh], start[fresh], end[fresh]
    amount = np.round(np.array([x.amount for x in items])[item] * np.exp(rng.normal(0, 0.3, s.size)), 4)
    base_rate = np.array([x.rate for x in items])[item]
    rate = np.where(base_rate > 0, np.round(base_rate * np.exp(rng.normal(0, 0.3, s.size)), 4), np.nan)
    return s, item, start, end, np.maximum(amount, 0.0001), rate


def inputevents(rng: np.random.Generator, st: Stays) -> tuple[TableData, TableData]:
    S = st.adm.size
    parts = []
    for inf_idx, infusion in enumerate(INFUSIONS):
        if infusion.window == "shock":
            w0, w1, ok = st.shock_start, st.shock_end, st.shock
        elif infusion.window == "vent":
            w0, w1, ok = st.vent_start, st.vent_end, st.vent
        else:
            w0 = st.intime + uniform_int(rng, 10, 120, S) * MINUTE
            w1 = st.outtime - uniform_int(rng, 0, 120, S) * MINUTE
            ok = w1 - w0 > HOUR
        eligible = ok & (rng.random(S) < infusion.p)
        if infusion.condition:
            eligible &= st.has(infusion.condition)
        sel = np.flatnonzero(eligible)
        if infusion.every_h:  # intermittent doses, one minute each
            step = np.full(sel.size, infusion.every_h * HOUR)
        else:
            step = uniform_int(rng, infusion.segment_h[0] * 60, infusion.segment_h[1] * 60, sel.size) * MINUTE
        n_seg = np.maximum((w1[sel] - w0[sel] - 1) // step + 1, 0)
        j, k = expand(n_seg)
        s = sel[j]
        start = w0[s] + k * step[j]
        end = start + MINUTE if infusion.every_h else np.minimum(start + step[j], w1[s])
        first_mask = k == 0
        rate_base = infusion.rate[0] + rng.random(S) * (infusion.rate[1] - infusion.rate[0])
        rate = np.clip(rate_base[s] * np.exp(rng.normal(0, 0.15, s.size)), infusion.rate[0], infusion.rate[1])
        hours = (end - start) / HOUR
        dosing_weight = np.minimum(st.weight[s], MAX_DOSING_WEIGHT)
        if infusion.rate_uom is None:
            amount = np.ones(s.size)
            rate_out = np.full(s.size, np.nan)
        elif infusion.weight_based:
            amount = rate * dosing_weight * hours * 60 / 1000
            rate_out = rate
        else:
            amount = rate * hours
            rate_out = rate
        rate_out = np.round(rate_out, 4)
        amount = np.round(amount, 4)
        last = np.zeros(s.size, dtype=bool)
        last[:-1] = j[1:] != j[:-1]
        if s.size:
            last[-1] = True
        parts.append((s, np.full(s.size, inf_idx), start, end, amount, rate_out, last, first_mask))
    bg_items = background_inputs()
    b_s, b_item, b_start, b_end, b_amount, b_rate = _background_input_rows(rng, st, bg_items)
    ones = np.ones(b_s.size, dtype=bool)
    parts.append((b_s, len(INFUSIONS) + b_item, b_start, b_end, b_amount, b_rate, ones, ones))
    s = np.concatenate([p[0] for p in parts])
    inf = np.concatenate([p[1] for p in parts])
    start = np.concatenate([p[2] for p in parts])
    end = np.concatenate([p[3] for p in parts])
    amount = np.concatenate([p[4] for p in parts])
    rate = np.concatenate([p[5] for p in parts])
    last = np.concatenate([p[6] for p in parts])
    first = np.concatenate([p[7] for p in parts])
    n = s.size
    orderid = rng.permutation(n) * 5 + 10_000_000 + rng.integers(0, 5, n)
    # linkorderid: the orderid of the first segment of the same (stay, infusion) run
    run = np.cumsum(first) - 1
    link = orderid[np.flatnonzero(first)][run]
    order = lexorder((inf, start, s))
    s, inf, start, end, amount, rate, last, orderid, link = (x[order] for x in (s, inf, start, end, amount, rate,
                                                                                  last, orderid, link))
    store = np.minimum(end + uniform_int(rng, 0, 30, n) * MINUTE, st.outtime[s])
    store = np.maximum(store, start)
    spec = INFUSIONS
    core_n = len(spec)
    status = np.where(np.array([x.every_h > 0 for x in spec] + [False] * len(bg_items))[inf] | last | (rate != rate),
                      0, 1)
    item = np.array([x.itemid for x in spec] + [x.itemid for x in bg_items])[inf]
    is_rate = ~np.isnan(rate)
    bags = np.array([x.bag for x in spec] + [0.0] * len(bg_items), dtype=float)[inf]
    inputs = TableData("inputevents", {
        **_stay_keys(st, s, start),
        "starttime": ts(start),
        "endtime": ts(end),
        "storetime": ts(store),
        "itemid": ints(item),
        "amount": floats(amount),
        "amountuom": cat(inf, [x.amount_uom for x in spec] + [x.amount_uom for x in bg_items]),
        "rate": floats(np.nan_to_num(rate), null=~is_rate),
        "rateuom": cat(inf, [x.rate_uom for x in spec] + [x.rate_uom for x in bg_items]),
        "orderid": ints(orderid),
        "linkorderid": ints(link),
        "ordercategoryname": cat(inf, [x.category for x in spec] + [x.ordercategory for x in bg_items]),
        "secondaryordercategoryname": cat(inf, [x.secondary for x in spec] + [x.secondary for x in bg_items]),
        "ordercomponenttypedescription": cat(np.zeros(n, dtype=np.int64), ["Main order parameter"]),
        "ordercategorydescription": cat(inf, [x.description for x in spec] + [x.description for x in bg_items]),
        "patientweight": floats(st.weight[s]),
        "totalamount": floats(np.where(inf < core_n, bags, amount)),
        "totalamountuom": cat(np.zeros(n, dtype=np.int64), ["ml"]),
        "isopenbag": ints(np.zeros(n, dtype=np.int64)),
        "continueinnextdept": ints(np.zeros(n, dtype=np.int64)),
        "statusdescription": cat(status, ["FinishedRunning", "ChangeDose/Rate"]),
        "originalamount": floats(amount),
        "originalrate": floats(np.nan_to_num(rate), null=~is_rate),
    })
    # ingredients: the water of every core input (the catalog's inputs carry none); dextrose bags also calories
    core_rows = np.flatnonzero(inf < core_n)
    water = np.round(amount * np.array([x.ml_per_amount for x in spec] + [0.0] * len(bg_items))[inf], 4)
    dextrose = item == D5W
    ing_idx = np.concatenate([core_rows, np.flatnonzero(dextrose)])
    ing_item = np.concatenate([np.full(core_rows.size, 220490), np.full(int(dextrose.sum()), 226060)])
    ing_amount = np.concatenate([water[core_rows], np.round(water[dextrose] * 0.17, 4)])
    hours = np.maximum((end - start) / HOUR, 1 / 60)
    ing_rate = np.where(ing_item == 220490, np.round(water[ing_idx] / hours[ing_idx], 4), np.nan)
    o = lexorder((ing_item, start[ing_idx], s[ing_idx]))
    ing_idx, ing_item, ing_amount, ing_rate = ing_idx[o], ing_item[o], ing_amount[o], ing_rate[o]
    is_water = ing_item == 220490
    ingredients = TableData("ingredientevents", {
        **_stay_keys(st, s[ing_idx], start[ing_idx]),
        "starttime": ts(start[ing_idx]),
        "endtime": ts(end[ing_idx]),
        "storetime": ts(store[ing_idx]),
        "itemid": ints(ing_item),
        "amount": floats(ing_amount),
        "amountuom": cat(np.where(is_water, 0, 1), ["ml", "Kcal"]),
        "rate": floats(np.nan_to_num(ing_rate), null=~is_water),
        "rateuom": cat(np.where(is_water, 0, -1), ["mL/hour"]),
        "orderid": ints(orderid[ing_idx]),
        "linkorderid": ints(link[ing_idx]),
        "statusdescription": cat(status[ing_idx], ["FinishedRunning", "ChangeDose/Rate"]),
        "originalamount": floats(ing_amount),
        "originalrate": floats(np.nan_to_num(ing_rate), null=~is_water),
    })
    return inputs, ingredients


# ------------------------------------------------------------------ outputevents

def outputevents(rng: np.random.Generator, st: Stays) -> TableData:
    every = np.where(st.foley, HOUR, 5 * HOUR)
    first = ceil_to(st.intime, HOUR) + every
    n = np.maximum((st.outtime - first) // every + 1, 0)
    j, k = expand(n)
    t = first[j] + k * every[j]
    aki = st.has("aki")[j]
    per_hour = np.exp(rng.normal(np.log(65), 0.45, j.size)) * np.where(aki, 0.4, 1.0)
    value = np.clip(np.round(per_hour * every[j] / HOUR), 0, 1500)
    item = np.where(st.foley[j], FOLEY, VOID)
    store = np.minimum(t + uniform_int(rng, 0, 30, j.size) * MINUTE, st.outtime[j])
    return TableData("outputevents", {
        **_stay_keys(st, j, t),
        "charttime": ts(t),
        "storetime": ts(store),
        "itemid": ints(item),
        "value": floats(value),
        "valueuom": cat(np.zeros(j.size, dtype=np.int64), ["mL"]),
    })


# ------------------------------------------------------------------ procedureevents / datetimeevents

# itemid -> (ordercategoryname, ordercategorydescription, is continuous, location category)
PROCEDURE_ITEMS: dict[int, tuple[str, str, bool, str | None]] = {
    224275: ("Peripheral Lines", "ContinuousProcess", True, "Peripheral"),
    224277: ("Peripheral Lines", "ContinuousProcess", True, "Peripheral"),
    225752: ("Invasive Lines", "ContinuousProcess", True, "Invasive Arterial"),
    224263: ("Invasive Lines", "ContinuousProcess", True, "Invasive Venous"),
    225792: ("Ventilation", "ContinuousProcess", True, None),
    229351: ("GI/GU", "ContinuousProcess", True, None),
    225441: ("Procedures", "ContinuousProcess", True, None),
    225459: ("Imaging", "Task", False, None),
    225402: ("Procedures", "Task", False, None),
    225401: ("Cultures", "Task", False, None),
    225454: ("Cultures", "Task", False, None),
}
LOCATIONS = ("Left Antecubital", "Right Antecubital", "Left Forearm", "Right Forearm", "Left Radial", "Right Radial",
             "Right Internal Jugular", "Left Subclavian")
# procedure item -> (insertion-date item, dressing-change item or 0)
LINE_DATES: dict[int, tuple[int, int]] = {224275: (225754, 0), 224277: (225755, 0), 225752: (224288, 224287),
                                          224263: (224280, 224279), 229351: (229352, 0)}


BACKGROUND_PROCEDURES_PER_STAY = 3.0
BACKGROUND_DATETIMES_PER_STAY = 10.0
DATETIME_EVERY = 4 * HOUR
# catalog items that belong to the core line, ventilation, dialysis, culture and event logic: never background
_CORE_WORDS = ("ventilat", "intubat", "extubat", "dialysis", "crrt", "culture", "line", "catheter", "gauge", "foley",
               "arterial", "multi lumen", "transfus", "significant", "death", "cordis", "picc", "port")


@lru_cache(maxsize=1)
def background_icu_items() -> tuple[tuple[dict[str, str], ...], tuple[dict[str, str], ...]]:
    """(procedure items, date-time items) of the catalog usable as background ICU events."""
    core = set(PROCEDURE_ITEMS) | {i for pair in LINE_DATES.values() for i in pair}
    proc: list[dict[str, str]] = []
    dt: list[dict[str, str]] = []
    for r in catalog.icu_event_items():
        text = f"{r['label']} {r['category']}".lower()
        if int(r["itemid"]) in core or any(w in text for w in _CORE_WORDS):
            continue
        (proc if r["linksto"] == "procedureevents" else dt).append(r)
    return tuple(proc), tuple(dt)


def _pick_items(rng: np.random.Generator, S: int, mean: float, items: tuple[dict[str, str], ...]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Poisson(mean) distinct items per stay, by the number of demo stays using them: (stay, item)."""
    w = np.array([float(r["stays"]) for r in items])
    s, _ = expand(rng.poisson(mean, S))
    item = np.minimum(np.searchsorted(np.cumsum(w) / w.sum(), rng.random(s.size), side="right"), w.size - 1)
    o = lexorder((item, s))
    s, item = s[o], item[o]
    fresh = np.ones(s.size, dtype=bool)
    fresh[1:] = (s[1:] != s[:-1]) | (item[1:] != item[:-1])
    return s[fresh], item[fresh]


def procedures(rng: np.random.Generator, st: Stays) -> tuple[TableData, TableData]:
    S = st.adm.size
    bg_proc, bg_dt = background_icu_items()
    proc_items = dict(PROCEDURE_ITEMS)
    for r in bg_proc:
        proc_items[int(r["itemid"])] = (r["ordercategory"] or "Procedures", r["orderdescription"] or "Task",
                                        r["orderdescription"] == "ContinuousProcess", None)
    span = st.outtime - st.intime
    rules: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(itemid: int, mask: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        start = np.clip(start, st.intime, st.outtime - 2 * MINUTE)
        end = np.clip(end, start + MINUTE, st.outtime)
        rules.append((itemid, mask, start - start % MINUTE, end - end % MINUTE))

    early = st.intime + uniform_int(rng, 5, 90, S) * MINUTE
    add(224275, np.ones(S, dtype=bool), early, early + uniform_int(rng, 24 * 60, 96 * 60, S) * MINUTE)
    add(224277, rng.random(S) < 0.5, early + 30 * MINUTE, st.outtime - uniform_int(rng, 0, 120, S) * MINUTE)
    add(225752, st.artline, early + 60 * MINUTE, st.outtime - uniform_int(rng, 30, 240, S) * MINUTE)
    central = np.where(st.shock, st.shock_start - 30 * MINUTE, early + 120 * MINUTE)
    add(224263, st.shock | (rng.random(S) < 0.15), central, st.outtime - uniform_int(rng, 30, 240, S) * MINUTE)
    add(225792, st.vent, np.where(st.vent, st.vent_start, st.intime), np.where(st.vent, st.vent_end, st.outtime))
    add(229351, st.foley, early + 15 * MINUTE, st.outtime - uniform_int(rng, 10, 120, S) * MINUTE)
    dialysis_t = st.intime + np.minimum(DAY, span // 2)
    add(225441, st.has("aki") & (rng.random(S) < 0.25) & (span > 8 * HOUR), dialysis_t, dialysis_t + 4 * HOUR)
    add(225459, st.vent | (rng.random(S) < 0.4), early + 20 * MINUTE, early + 21 * MINUTE)
    add(225402, rng.random(S) < 0.5, early + 40 * MINUTE, early + 41 * MINUTE)
    add(225401, st.has("sepsis"), early + 10 * MINUTE, early + 11 * MINUTE)
    add(225454, st.has("uti") | st.has("sepsis") & (rng.random(S) < 0.5), early + 25 * MINUTE, early + 26 * MINUTE)
    # background procedures of the catalog (imaging, communication, care tasks …), once per stay each
    b_s, b_item = _pick_items(rng, S, BACKGROUND_PROCEDURES_PER_STAY, bg_proc)
    b_start = st.intime + (rng.random(S) * (st.outtime - st.intime)).astype(np.int64)
    for proc_j, r in enumerate(bg_proc):
        mask = np.zeros(S, dtype=bool)
        mask[b_s[b_item == proc_j]] = True
        minutes = max(float(r["minutes_p50"] or 1), 1.0) if r["orderdescription"] == "ContinuousProcess" else 1.0
        add(int(r["itemid"]), mask, b_start, b_start + int(minutes) * MINUTE)

    s = np.concatenate([np.flatnonzero(r[1]) for r in rules])
    item = np.concatenate([np.full(int(r[1].sum()), r[0]) for r in rules])
    start = np.concatenate([r[2][r[1]] for r in rules])
    end = np.concatenate([r[3][r[1]] for r in rules])
    order = lexorder((item, start, s))
    s, item, start, end = s[order], item[order], start[order], end[order]
    n = s.size
    item_keys = sorted(proc_items)
    ii = np.searchsorted(np.array(item_keys), item)
    continuous = np.array([proc_items[i][2] for i in item_keys])[ii]
    value = np.where(continuous, (end - start) / MINUTE, 1.0)
    loc_cat = [proc_items[i][3] for i in item_keys]
    has_loc = np.array([x is not None for x in loc_cat])[ii]
    location = np.where(has_loc, np.where(item == 225752, 4 + rng.integers(0, 2, n),
                                          np.where(item == 224263, 6 + rng.integers(0, 2, n), rng.integers(0, 4, n))),
                        -1)
    orderid = rng.permutation(n) * 3 + 80_000_000 + rng.integers(0, 3, n)
    store = np.minimum(end + uniform_int(rng, 0, 60, n) * MINUTE, st.outtime[s])
    store = np.maximum(store, end)
    proc = TableData("procedureevents", {
        **_stay_keys(st, s, start),
        "starttime": ts(start),
        "endtime": ts(end),
        "storetime": ts(store),
        "itemid": ints(item),
        "value": floats(value),
        "valueuom": cat(np.where(continuous, 0, -1), ["min"]),
        "location": cat(location, LOCATIONS),
        "locationcategory": cat(np.where(has_loc, ii, -1), [x or "" for x in loc_cat]),
        "orderid": ints(orderid),
        "linkorderid": ints(orderid),
        "ordercategoryname": cat(ii, [proc_items[i][0] for i in item_keys]),
        "ordercategorydescription": cat(ii, [proc_items[i][1] for i in item_keys]),
        "patientweight": floats(st.weight[s]),
        "isopenbag": ints(np.zeros(n, dtype=np.int64)),
        "continueinnextdept": ints(np.zeros(n, dtype=np.int64)),
        "statusdescription": cat(np.zeros(n, dtype=np.int64), ["FinishedRunning"]),
        "ORIGINALAMOUNT": floats(value),
        "ORIGINALRATE": floats(np.ones(n)),
    })

    # datetimeevents: insertion dates re-charted every 12 h while the line is in; dressing changes daily
    line = np.isin(item, list(LINE_DATES))
    ls, litem, lstart, lend = s[line], item[line], start[line], end[line]
    first = ceil_to(lstart, 12 * HOUR) + 8 * HOUR
    first = np.where(first - 12 * HOUR >= lstart, first - 12 * HOUR, first)
    n_chart = np.maximum((lend - first) // (12 * HOUR) + 1, 0)
    j, k = expand(n_chart)
    chart = first[j] + k * 12 * HOUR
    ins_item = np.array([LINE_DATES[i][0] for i in litem.tolist()], dtype=np.int64)
    dress_item = np.array([LINE_DATES[i][1] for i in litem.tolist()], dtype=np.int64)
    dressing = (dress_item[j] > 0) & (k % 2 == 1)
    d_s = np.concatenate([ls[j], ls[j][dressing]])
    d_item = np.concatenate([ins_item[j], dress_item[j][dressing]])
    d_chart = np.concatenate([chart, chart[dressing]])
    d_value = np.concatenate([lstart[j], np.maximum(chart[dressing] - uniform_int(rng, 0, 180, int(dressing.sum()))
                                                    * MINUTE, lstart[j][dressing])])
    # background date-time items (dressing changes of wounds, drains …): charted every 4 h from a random
    # point of the stay, the value being when it was last done (before the first charting, inside the stay)
    g_s, g_item = _pick_items(rng, S, BACKGROUND_DATETIMES_PER_STAY, bg_dt)
    g_first = ceil_to(st.intime[g_s] + (rng.random(g_s.size) * (st.outtime - st.intime)[g_s] / 2).astype(np.int64),
                      HOUR)
    g_n = np.maximum((st.outtime[g_s] - g_first) // DATETIME_EVERY + 1, 0)
    gj, gk = expand(g_n)
    g_chart = g_first[gj] + gk * DATETIME_EVERY
    g_value = np.maximum(g_first - uniform_int(rng, 0, 180, g_s.size) * MINUTE, st.intime[g_s])[gj]
    d_s = np.concatenate([d_s, g_s[gj]])
    d_item = np.concatenate([d_item, np.array([int(r["itemid"]) for r in bg_dt], dtype=np.int64)[g_item[gj]]])
    d_chart = np.concatenate([d_chart, g_chart])
    d_value = np.concatenate([d_value, g_value])
    d_value = d_value - d_value % MINUTE
    o = lexorder((d_item, d_chart, d_s))
    d_s, d_item, d_chart, d_value = d_s[o], d_item[o], d_chart[o], d_value[o]
    nd = d_s.size
    dtev = TableData("datetimeevents", {
        **_stay_keys(st, d_s, d_chart),
        "charttime": ts(d_chart),
        "storetime": ts(np.minimum(d_chart + uniform_int(rng, 0, 20, nd) * MINUTE, st.outtime[d_s])),
        "itemid": ints(d_item),
        "value": ts(d_value),
        "valueuom": cat(np.zeros(nd, dtype=np.int64), ["Date and Time"]),
        "warning": ints(np.zeros(nd, dtype=np.int64)),
    })
    return proc, dtev


# ------------------------------------------------------------------ d_items

def d_items_table() -> TableData:
    rows = []
    for ref in item_reference().values():
        if ref.table in ("chartevents", "inputevents", "outputevents"):
            param = "Text" if ref.itemid in TEXT_ITEMS else PARAM_TYPES[ref.table]
            lo, hi = NORMALS.get(ref.itemid, (None, None))
            rows.append((ref.itemid, ref.label, ABBREVIATIONS.get(ref.itemid, ref.label), ref.table, ref.group,
                         item_unit(ref), param, lo, hi))
    for itemid, label, abbr, linksto, category, unit, param in EXTRA_ITEMS:
        rows.append((itemid, label, abbr, linksto, category, unit, param, None, None))
    for x in background_inputs():
        rows.append((x.itemid, x.label, x.label, "inputevents", x.category, x.amount_uom, "Solution", None, None))
    bg_proc, bg_dt = background_icu_items()
    for r in bg_proc:
        rows.append((int(r["itemid"]), r["label"], r["label"], "procedureevents", r["category"], None, "Processes",
                     None, None))
    for r in bg_dt:
        rows.append((int(r["itemid"]), r["label"], r["label"], "datetimeevents", r["category"], None, "Date and time",
                     None, None))
    rows.sort(key=lambda r: r[0])
    n = len(rows)
    idx = np.arange(n)
    low = np.array([np.nan if r[7] is None else r[7] for r in rows])
    high = np.array([np.nan if r[8] is None else r[8] for r in rows])
    return TableData("d_items", {
        "itemid": ints(np.array([r[0] for r in rows])),
        "label": cat(idx, [r[1] for r in rows]),
        "abbreviation": cat(idx, [r[2] for r in rows]),
        "linksto": cat(idx, [r[3] for r in rows]),
        "category": cat(idx, [r[4] for r in rows]),
        "unitname": cat(idx, [r[5] for r in rows]),
        "param_type": cat(idx, [r[6] for r in rows]),
        "lownormalvalue": floats(np.nan_to_num(low), null=np.isnan(low)),
        "highnormalvalue": floats(np.nan_to_num(high), null=np.isnan(high)),
    })


CHART_CHUNK_STAYS = 1000
"""chartevents is generated and written in chunks of this many stays (fixed, so the data never depend on
the machine): bounded memory for big cohorts, and DuckDB writes one chunk while numpy makes the next."""


def generate(rng: np.random.Generator, c: Cohort, chart_rng: np.random.Generator) -> Iterator[TableData]:
    """The ICU tables; chartevents (from its own stream ``chart_rng``) comes in chunks of stays."""
    st = _stays(rng, c)
    for lo in range(0, max(st.adm.size, 1), CHART_CHUNK_STAYS):  # an empty table when there is no stay
        yield chartevents(chart_rng, st, lo, min(lo + CHART_CHUNK_STAYS, st.adm.size))
    inputs, ingredients = inputevents(rng, st)
    proc, dtev = procedures(rng, st)
    yield from (d_items_table(), inputs, ingredients, outputevents(rng, st), proc, dtev)
