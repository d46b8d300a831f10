"""The embedded synthetic hospital: a coherent, clean, MIMIC-IV-shaped DuckDB database built
deterministically from ``(patients, seed)``.

>>> from ehrgym.db.synth import build_synthetic_database
>>> info = build_synthetic_database("data/synth.duckdb", patients=1000, seed=0)  # doctest: +SKIP
>>> info["content_hash"], info["table_rows"]["labevents"]                          # doctest: +SKIP

What is inside (all 31 tables of ``mimiciv_hosp`` / ``mimiciv_icu``, exact v2.2 schema):

* **Patients and timelines** (:mod:`.timeline`): 1–8 non-overlapping admissions per patient; ED →
  ward → ICU → ward → discharge transfers that cover each admission (ED rows start at
  ``edregtime``, before ``admittime``, as in MIMIC-IV); services; ICU stays with ventilation and
  vasopressor windows; in-hospital deaths (``deathtime = dischtime``) and deaths within a year of
  the last discharge (``dod``); ``anchor_year`` = shifted year of the first admission (2110–2200),
  ``anchor_age`` = age then (> 89 → 91), ``anchor_year_group`` = real 3-year window.
* **Conditions** (:mod:`.conditions`, one registry entry each): hypertension, diabetes, COPD, heart
  failure, atrial fibrillation, cirrhosis, sepsis, pneumonia, UTI, acute kidney injury, GI bleeding,
  stroke. They drive ICD-9 (before Oct 2015, real time) or ICD-10 codes (:mod:`.dictionaries`), DRGs,
  procedures, lab shifts and trends (:mod:`.labs`), medications (:mod:`.meds`), cultures with
  organisms and susceptibilities (:mod:`.micro`), ICU admission, ventilation, shock and vitals
  (:mod:`.icu`).
* **Items**: real MIMIC-IV item ids, labels and units from :func:`ehrgym.db.items.item_reference`
  (lab values fitted to the demo quantiles, clipped to the plausible bounds), plus a few extra
  real ICU items (alarms, heart rhythm, lines, ventilation, date-time items, ingredients).
  Glucose chart items are stored in mg/dL and FiO2 without unit (the reference says 'None').
* **Breadth** (:mod:`.catalog`, vocabulary derived from the MIMIC-IV demo by :mod:`.derive`, ODbL —
  ``ehrgym/resources/synth/LICENSE.md``): on top of the condition-driven rows, *background* lab items
  (with the demo's value quantiles, text results, comments and reference-range gaps), ICD codes outside
  the conditions' code families, drugs (core drugs written in MIMIC's spelling variants, e.g.
  'CefTRIAXone' / 'CeftriaXONE'), specimen types, ICU inputs, procedures and date-time items, each
  drawn by its demo frequency (long-tailed). Anticoagulants, insulin, vasoactives, sedation and
  antibiotics are never background: they follow their indication.
* **Volumes**: rows per admission (hosp) and per ICU stay (icu) within ±30 % of MIMIC-IV v3.1 for every
  event table except chartevents (about 1,300 rows per stay against 4,600: fewer items are charted, to
  keep the build fast).
* **Everyday messiness** (not benchmark noise): outpatient labs and cultures at clinic visits and ED visits
  without admission (:mod:`.outpatient`), all with NULL ``hadm_id`` and never during a stay, text lab results with NULL ``valuenum`` (for the reference items
  too: 0.35 % of their rows against the demo's 0.42 %, NULL ``value`` and the reason — '___', 'UNABLE TO
  REPORT.', '<0.2.' — in ``comments``, as MIMIC-IV stores them), comments, results without reference range (and so without flag), spelling variants of drugs,
  order entry stamped to the second (charting to the minute).
* **Clean**: unique natural keys and ids, no duplicate rows, every event inside the admission or
  ICU stay it is linked to, whole-minute timestamps, one unit per item.

Every invariant is an SQL query in ``tests/test_synth_invariants.py``.
"""

from ehrgym.db.synth.build import RELEASE, build_synthetic_database, generate_tables

__all__ = ["RELEASE", "build_synthetic_database", "generate_tables"]
