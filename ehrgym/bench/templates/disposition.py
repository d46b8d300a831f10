"""Where admissions came from and where the patients went: outcome questions on the course MIMIC-IV records.

``admissions.admission_location`` and ``discharge_location`` hold the course a clinician summarises
("transferred from an outside hospital", "discharged to a skilled nursing facility"), and
``patients.dod`` holds deaths up to one year after a patient's last discharge (from state records).
Post-acute care use, mortality of inter-facility transfers and one-year mortality are standard
outcome measures on them. Their questions use the words of places and times outside the hospital
(a nursing facility, home, one year after discharge) for what the record does hold — the same words
the out-of-scope questions (:mod:`ehrgym.bench.noise.scope`) use for what it does not.

Destinations and arrivals are concepts (``ehrgym.bench.concepts``, domain ``disposition``); cohorts
of a condition use the coded-admission concept of the episode templates. Admissions without a
recorded destination are left out of a destination's denominator (the question says so).
"""

from __future__ import annotations

from typing import Any

from ehrgym.bench.concepts import relation
from ehrgym.bench.templates.base import Evidence, Template
from ehrgym.bench.templates.episodes import CODED_ADMISSIONS
from ehrgym.bench.templates.hard_common import MEAN, PERIOD_WINDOW, period_sampler
from ehrgym.bench.templates.registry import register

DISPOSITION = relation("disposition")
POST_ACUTE_WORDS = "a skilled nursing facility, a rehab facility or a long-term acute care hospital"
ONE_YEAR = "INTERVAL 1 YEAR"

# ---------------------------------------------------------------- post-acute care after a condition

POST_ACUTE_MEMBERS = f"""  SELECT a.admittime AS t, c.concept AS title,
         EXISTS (SELECT 1 FROM {DISPOSITION} d(concept, location)
                 WHERE d.concept = 'post-acute care facility' AND d.location = a.discharge_location) AS positive
  FROM mimiciv_hosp.admissions a
  JOIN {CODED_ADMISSIONS} c ON c.hadm_id = a.hadm_id
  WHERE a.hospital_expire_flag = 0 AND a.discharge_location IS NOT NULL"""

POST_ACUTE_GOLD = f"""WITH coded AS {CODED_ADMISSIONS},
destinations AS (
  SELECT d.location FROM {DISPOSITION} d(concept, location) WHERE d.concept = 'post-acute care facility'
), index_admissions AS (
  SELECT e.hadm_id, e.discharge_location
  FROM {{admissions}} e
  JOIN coded c ON c.hadm_id = e.hadm_id
  WHERE c.concept = {{title}} AND e.admittime >= {{t0}} AND e.admittime < {{t1}}
    AND e.hospital_expire_flag = 0 AND e.discharge_location IS NOT NULL
)
SELECT round(100.0 * count(*) FILTER (WHERE i.discharge_location IN (SELECT location FROM destinations))
             / count(*), 2)
FROM index_admissions i"""

# ---------------------------------------------------------------- one-year mortality after a condition

ONE_YEAR_MEMBERS = f"""  SELECT a.admittime AS t, c.concept AS title,
         coalesce(p.dod <= CAST(a.dischtime + {ONE_YEAR} AS DATE), FALSE) AS positive
  FROM mimiciv_hosp.admissions a
  JOIN {CODED_ADMISSIONS} c ON c.hadm_id = a.hadm_id
  JOIN mimiciv_hosp.patients p ON p.subject_id = a.subject_id
  WHERE a.hospital_expire_flag = 0 AND a.dischtime IS NOT NULL"""

ONE_YEAR_GOLD = f"""WITH coded AS {CODED_ADMISSIONS},
index_admissions AS (
  SELECT e.subject_id, e.hadm_id, e.dischtime
  FROM {{admissions}} e
  JOIN coded c ON c.hadm_id = e.hadm_id
  WHERE c.concept = {{title}} AND e.admittime >= {{t0}} AND e.admittime < {{t1}}
    AND e.hospital_expire_flag = 0 AND e.dischtime IS NOT NULL
), outcome AS (
  SELECT i.hadm_id, p.dod IS NOT NULL AND p.dod <= CAST(i.dischtime + {ONE_YEAR} AS DATE) AS died_within_year
  FROM index_admissions i
  JOIN mimiciv_hosp.patients p ON p.subject_id = i.subject_id
)
SELECT round(100.0 * count(*) FILTER (WHERE died_within_year) / count(*), 2) FROM outcome"""

# ---------------------------------------------------------------- mortality of inter-facility transfers

TRANSFER_MEMBERS = f"""  SELECT a.admittime AS t, a.hospital_expire_flag = 1 AS positive
  FROM mimiciv_hosp.admissions a
  JOIN {DISPOSITION} d(concept, location)
    ON d.concept = 'transfer from another facility' AND d.location = a.admission_location"""

TRANSFER_GOLD = f"""WITH transferred AS (
  SELECT e.hadm_id, e.hospital_expire_flag
  FROM {{admissions}} e
  JOIN {DISPOSITION} d(concept, location)
    ON d.concept = 'transfer from another facility' AND d.location = e.admission_location
  WHERE e.admittime >= {{t0}} AND e.admittime < {{t1}}
)
SELECT round(100.0 * count(*) FILTER (WHERE hospital_expire_flag = 1) / count(*), 2) FROM transferred"""

CONDITION_EVIDENCE: dict[str, Any] = dict(
    table="admissions", join=f"JOIN {CODED_ADMISSIONS} c ON c.hadm_id = e.hadm_id",
    # a re-stored copy keeps its hadm_id (and so its diagnoses)
    key=("subject_id", "admittime"), time_col="admittime", focus="any")

register(
    Template(
        id="encounters.cohort_post_acute_discharge_rate", intent="encounters", level="population", tier=3,
        paraphrases=(
            "Of the hospital admissions coded with {title} that began on or after {t0} and before {t1} and ended "
            f"with the patient alive and a recorded discharge destination, what percentage were discharged to "
            f"{POST_ACUTE_WORDS}?",
            "What share (%) of patients discharged alive after an admission with a diagnosis of {title} (admitted "
            f"from {{t0}} up to {{t1}}, discharge destination recorded) went to {POST_ACUTE_WORDS} rather than home "
            "or elsewhere?",
            "Among admissions with {title} starting between {t0} inclusive and {t1} exclusive, counting only "
            "patients discharged alive with a recorded destination, what percent went on to post-acute care (a "
            "skilled nursing facility, a rehab facility or a long-term acute care hospital)?",
        ),
        sampler_sql=period_sampler(POST_ACUTE_MEMBERS, lo=3, hi=400, extra_cols="title"),
        gold_sql=POST_ACUTE_GOLD,
        answer=MEAN,
        evidence=Evidence(**CONDITION_EVIDENCE,
                          where="c.concept = {title} AND e.admittime >= {t0} AND e.admittime < {t1} "
                                "AND e.hospital_expire_flag = 0 AND e.discharge_location IS NOT NULL"),
        noise=("duplicate_records", "missing_evidence", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=PERIOD_WINDOW,
        description="share of admissions with a condition discharged to post-acute care",
    ),
    Template(
        id="encounters.cohort_one_year_mortality", intent="encounters", level="population", tier=3,
        paraphrases=(
            "Of the hospital admissions coded with {title} that began on or after {t0} and before {t1} and ended "
            "with the patient discharged alive, what percentage were followed by the patient's death within one "
            "year after discharge?",
            "What was the one-year post-discharge mortality (%) after admissions with a diagnosis of {title} "
            "starting from {t0} up to {t1}, counting only patients discharged alive?",
            "Among patients discharged alive from an admission coded with {title} (admitted between {t0} inclusive "
            "and {t1} exclusive), in what percent of those admissions did the patient die within one year of "
            "discharge?",
        ),
        sampler_sql=period_sampler(ONE_YEAR_MEMBERS, lo=3, hi=400, extra_cols="title"),
        gold_sql=ONE_YEAR_GOLD,
        answer=MEAN,
        evidence=Evidence(**CONDITION_EVIDENCE,
                          where="c.concept = {title} AND e.admittime >= {t0} AND e.admittime < {t1} "
                                "AND e.hospital_expire_flag = 0 AND e.dischtime IS NOT NULL"),
        noise=("duplicate_records", "missing_evidence", "lexical_variation", "out_of_scope"),
        lexical="title", time_window=PERIOD_WINDOW,
        description="one-year mortality after discharge from admissions with a condition",
    ),
    Template(
        id="encounters.cohort_transfer_in_mortality", intent="encounters", level="population", tier=2,
        paraphrases=(
            "Among hospital admissions that began on or after {t0} and before {t1} with the patient transferred in "
            "from another hospital or from a skilled nursing facility, what was the in-hospital mortality (%)?",
            "What percentage of admissions from {t0} up to {t1} that came as transfers from an outside hospital or "
            "a nursing facility ended with the patient dying in hospital?",
            "In-hospital mortality (%) of inter-facility transfer admissions (from another hospital or a skilled "
            "nursing facility) admitted between {t0} inclusive and {t1} exclusive?",
        ),
        sampler_sql=period_sampler(TRANSFER_MEMBERS, lo=3, hi=400),
        gold_sql=TRANSFER_GOLD,
        answer=MEAN,
        evidence=Evidence(table="admissions", where="e.admittime >= {t0} AND e.admittime < {t1}",
                          join=f"JOIN {DISPOSITION} d(concept, location) ON d.concept = 'transfer from another "
                               "facility' AND d.location = e.admission_location",
                          key=("subject_id", "admittime"), id_col="hadm_id", time_col="admittime",
                          value_col="hospital_expire_flag", bounds=(0.0, 1.0), focus="any", aggregate=True),
        # no out-of-scope twin (the question names no measured thing to swap, no year to frame), no temporal
        # mismatch (its period is the whole database's), no conflict (one record among a cohort's does not decide)
        noise=("duplicate_records", "missing_evidence"),
        time_window=PERIOD_WINDOW,
        description="in-hospital mortality of admissions transferred in from another facility",
    ),
)
