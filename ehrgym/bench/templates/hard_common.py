"""Shared pieces of the harder template modules (``cohorts``, ``timing``, ``crossintent``): answer
specs, record scopes for temporal mismatch, evidence shapes and the period sampler of population
cohorts. Clinical definitions live in :mod:`ehrgym.bench.templates.concept_sql`."""

from __future__ import annotations

from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, TimeWindow  # noqa: F401  (importable from here, as before)
from ehrgym.bench.templates.families import LAB_EVENTS, VITAL_SIGNS

COUNT = AnswerSpec("integer")
HOURS = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.01, decimals=2)
MEAN = AnswerSpec("number", rel_tol=1e-3, abs_tol=0.01, decimals=2)
NUMBER = AnswerSpec("number")
WHEN = AnswerSpec("datetime")
NAMES = AnswerSpec("set")

DATABASE_SCOPE = "SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions"
PERIOD_WINDOW = TimeWindow(DATABASE_SCOPE, start="t0", end="t1")

# record noise a population question over a cohort period supports
SPANS = (1, 2, 3, 5, 10, 20)  # candidate period lengths in years


def period_sampler(rows_sql: str, lo: int = 3, hi: int = 400, extra_cols: str = "", having: str = "") -> str:
    """Candidate cohort periods ``[t0, t1)`` (whole years) for a population question.

    ``rows_sql`` returns one row per cohort member with columns ``t`` (the timestamp that places the
    member in a period), ``positive`` (whether the member counts towards the answer) and any
    ``extra_cols`` (cohort parameters such as a care unit). A period qualifies when it holds between
    ``lo`` and ``hi`` members and at least one positive one (and ``having`` holds).
    """
    group = f", {extra_cols}" if extra_cols else ""
    cond = f" AND ({having})" if having else ""
    spans = ", ".join(str(s) for s in SPANS)
    return f"""WITH members AS (
{rows_sql}
), periods AS (
  SELECT DISTINCT CAST(extract(year FROM t) AS INTEGER) AS y, s.span
  FROM members, (SELECT unnest([{spans}]) AS span) s
)
SELECT make_date(p.y, 1, 1) AS t0, make_date(p.y + p.span, 1, 1) AS t1{group}
FROM periods p
JOIN members m ON m.t >= make_date(p.y, 1, 1) AND m.t < make_date(p.y + p.span, 1, 1)
GROUP BY p.y, p.span{group}
HAVING count(*) BETWEEN {lo} AND {hi} AND count(*) FILTER (WHERE m.positive) >= 1{cond}"""


# evidence shapes of the families (the hard templates write their own where/join; their chart
# evidence names the item per template)
LAB_EVIDENCE: dict[str, Any] = LAB_EVENTS.evidence()
CHART_EVIDENCE: dict[str, Any] = {k: v for k, v in VITAL_SIGNS.evidence().items() if k not in ("item_col", "item_param")}
