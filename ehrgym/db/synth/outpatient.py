"""Outpatient clinic visits: the days a patient had blood drawn or a culture taken outside any hospital
stay (MIMIC-IV's rows without ``hadm_id``). Visits fall between two years before the first admission
and one year after the last discharge (never after death), in clinic hours, and never within a day of
a hospital stay (ED registration included)."""

from __future__ import annotations

import numpy as np

from ehrgym.db.synth.common import DAY, MINUTE, NAT, expand, lexorder, uniform_int
from ehrgym.db.synth.timeline import Cohort

VISITS_PER_PATIENT = 4.0
"""Mean clinic visits with blood work per patient over the observed window."""


def clinic_visits(rng: np.random.Generator, c: Cohort) -> tuple[np.ndarray, np.ndarray]:
    """(patient index, time) of every clinic visit, sorted by patient and time."""
    n = c.n_patients
    last_adm = c.first_adm + c.n_adm - 1
    lo = c.admittime[c.first_adm] // DAY - 730
    hi = c.dischtime[last_adm] // DAY + 365
    hi = np.where(c.dod != NAT, np.minimum(hi, c.dod - 1), hi)
    pat, _ = expand(rng.poisson(VISITS_PER_PATIENT, n))
    day = uniform_int(rng, lo[pat], np.maximum(hi[pat], lo[pat]), pat.size)
    t = day * DAY + uniform_int(rng, 7 * 60, 16 * 60, pat.size) * MINUTE
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

