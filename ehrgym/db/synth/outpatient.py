"""Encounters outside hospital stays (MIMIC-IV's rows without ``hadm_id``): clinic visits, when a patient
had blood drawn or a culture taken, and emergency-department visits that did not lead to an admission.
They fall between two years before the first admission and one year after the last discharge (never on
or after the day of death), and never within a day of a hospital stay (ED registration included)."""

from __future__ import annotations

import numpy as np

from ehrgym.db.synth.common import DAY, MINUTE, NAT, expand, lexorder, uniform_int
from ehrgym.db.synth.timeline import Cohort

VISITS_PER_PATIENT = 4.0
"""Mean clinic visits with blood work per patient over the observed window."""
ED_VISITS_PER_PATIENT = 0.25
"""Mean ED visits without admission per patient (MIMIC-IV demo: 4.5 % of transfers rows)."""


def clinic_visits(rng: np.random.Generator, c: Cohort) -> tuple[np.ndarray, np.ndarray]:
    """(patient index, time) of every clinic visit (07:00–16:00), sorted by patient and time."""
    return _outside_stays(rng, c, VISITS_PER_PATIENT, 7 * 60, 16 * 60)


def ed_visits(rng: np.random.Generator, c: Cohort) -> tuple[np.ndarray, np.ndarray]:
    """(patient index, arrival time) of every ED visit without admission (any hour), sorted."""
    return _outside_stays(rng, c, ED_VISITS_PER_PATIENT, 0, 24 * 60 - 1)


def _outside_stays(rng: np.random.Generator, c: Cohort, mean: float, first_minute: int, last_minute: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    n = c.n_patients
    last_adm = c.first_adm + c.n_adm - 1
    lo = c.admittime[c.first_adm] // DAY - 730
    hi = c.dischtime[last_adm] // DAY + 365
    hi = np.where(c.dod != NAT, np.minimum(hi, c.dod - 2), hi)  # visits (ED ones last hours) end before the day of death
    pat, _ = expand(rng.poisson(mean, n))
    day = uniform_int(rng, lo[pat], np.maximum(hi[pat], lo[pat]), pat.size)
    t = day * DAY + uniform_int(rng, first_minute, last_minute, pat.size) * MINUTE
    # drop visits within a day of a stay: the patient's last admission starting before t + 1 day
    arrival = np.where(c.edregtime != NAT, np.minimum(c.edregtime, c.admittime), c.admittime)
    key_adm = c.pat.astype(np.int64) * 10**10 + arrival  # admissions are sorted by (patient, time)
    j = np.searchsorted(key_adm, pat.astype(np.int64) * 10**10 + t + DAY, side="right") - 1
    same = (j >= 0) & (c.pat[np.maximum(j, 0)] == pat)
    inside = same & (t < c.dischtime[np.maximum(j, 0)] + DAY)
    pat, t = pat[~inside], t[~inside]
    order = lexorder((t, pat))
    pat, t = pat[order], t[order]
    keep = np.ones(pat.size, dtype=bool)
    keep[1:] = (pat[1:] != pat[:-1]) | (t[1:] // DAY != t[:-1] // DAY)  # one visit a day
    return pat[keep], t[keep]

