"""Template families: the sampler / filter / evidence SQL one concept-coded event table shares.

A question about "the first serum potassium of admission 123", "the peak systolic blood pressure
of ICU stay 456" or "the total norepinephrine of ICU stay 789" is one shape over different
tables: an event table whose rows a reviewed concept (:mod:`ehrgym.bench.concepts`) selects by
item id, events that belong to a stay (a hospital admission or an ICU stay), and questions that
name the concept by its clinical name. :class:`ConceptEvents` describes such a family once —
table, concept domain, stay, evidence columns — and writes every SQL piece its templates share:

* patient level: :meth:`ConceptEvents.entity_sampler` (one row per subject, stay and concept
  with enough results), :meth:`~ConceptEvents.entity_filter` (the gold SQL's joins and
  ``WHERE`` after ``FROM {<table>} e``), :meth:`~ConceptEvents.entity_where` and
  :meth:`~ConceptEvents.evidence` (the noise injectors' view of the same rows) and
  :meth:`~ConceptEvents.missing_concept_premise` (concepts the stay never had);
* population level: a cohort is the stays that began in a year, optionally of one
  :class:`Grouping` (a concept of a stay column: "emergency" admissions, "medical ICU" stays):
  :meth:`~ConceptEvents.cohort_sampler`, :meth:`~ConceptEvents.cohort_filter`,
  :meth:`~ConceptEvents.cohort_join` and :meth:`~ConceptEvents.cohort_where`.

The SQL is the one the modules wrote by hand before (``labs``, ``vitals``, ``medications``):
the same text, so the built benchmark does not change. Diagnoses are coded by ICD prefix rather
than item id; :func:`dx_join` and :func:`coded_admissions` write their shared pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ehrgym.bench.concepts import primary_items, relation
from ehrgym.bench.templates.base import ADMISSION_WINDOW, ICU_WINDOW, Window
from ehrgym.db.schema import table_spec


@dataclass(frozen=True)
class Stays:
    """The stays events belong to and cohorts are drawn from, under a fixed alias.

    ``window`` names the table, its key (shared with the event table) and its start/end times."""

    window: Window
    alias: str  # a (admissions) | s (icustays)

    @property
    def table(self) -> str:
        return table_spec(self.window.table).qualified

    @property
    def key(self) -> str:
        return self.window.key

    @property
    def join(self) -> str:
        """Join the event rows ``e`` to their stay."""
        return f"JOIN {self.table} {self.alias} ON {self.alias}.{self.key} = e.{self.key}"

    @property
    def year(self) -> str:
        """The calendar year the stay began in (``extract``: much faster than ``year()`` in DuckDB)."""
        return f"extract(year FROM {self.alias}.{self.window.start})"


ADMISSIONS = Stays(ADMISSION_WINDOW, "a")
ICU_STAYS = Stays(ICU_WINDOW, "s")


@dataclass(frozen=True)
class Grouping:
    """A concept of a stay column that splits a cohort as a clinician does ("emergency"
    admissions: EW EMER. and DIRECT EMER.; the "medical ICU"), joined under ``alias``."""

    domain: str  # concept domain (ehrgym.bench.concepts)
    alias: str
    value: str  # the relation's value column
    stays: Stays
    column: str  # the stays column the value matches

    @property
    def join(self) -> str:
        return (f"JOIN {relation(self.domain)} {self.alias}(concept, {self.value}) "
                f"ON {self.alias}.{self.value} = {self.stays.alias}.{self.column}")


ADMISSION_TYPE = Grouping("admission_type", "adt", "admission_type", ADMISSIONS, "admission_type")
FIRST_CAREUNIT = Grouping("careunit", "cu", "careunit", ICU_STAYS, "first_careunit")


@dataclass(frozen=True)
class ConceptEvents:
    """One family: an event table (alias ``e``) whose rows a concept domain selects by item id.

    The concept relation is joined as ``cpt(concept, itemid)``, the concept's primary item (its
    plausibility bounds and unit conversions) as ``p(concept, itemid)``; questions name the
    concept as ``{label}`` and carry its primary item as ``{itemid}``. ``rows`` are the
    :class:`~ehrgym.bench.templates.base.Evidence` fields of the table (key, id, time, store
    time, window); ``values`` the fields of its numeric answer column (value, text twin, unit,
    item), left out by questions that do not read the value (durations, shares).
    """

    table: str  # evidence table name (ehrgym.db.schema): labevents, chartevents …
    domain: str  # concept domain: lab, vital, urine, infusion
    stays: Stays
    rows: Mapping[str, Any] = field(compare=False)
    values: Mapping[str, Any] = field(compare=False, default_factory=dict)

    @property
    def qualified(self) -> str:
        return table_spec(self.table).qualified

    @property
    def concepts(self) -> str:
        """Every reviewed concept of the domain and its items, as ``cpt(concept, itemid)``."""
        return relation(self.domain) + " cpt(concept, itemid)"

    @property
    def primary(self) -> str:
        """Concept -> the item its bounds and units come from, as ``p(concept, itemid)``."""
        return primary_items(self.domain) + " p(concept, itemid)"

    @property
    def join(self) -> str:
        """Join the event rows ``e`` to their concepts."""
        return "JOIN " + self.concepts + " ON cpt.itemid = e.itemid"

    def evidence(self, values: bool = True, **fields: Any) -> dict[str, Any]:
        """Evidence fields of a question over the family: ``rows`` (+ ``values``) + ``fields``
        (``where``, ``join``, ``focus`` …)."""
        return {"table": self.table, **self.rows, **(self.values if values else {}), "item_concepts": self.domain,
                **fields}

    # ------------------------------------------------------------ patient level: one stay

    def entity_sampler(self, min_rows: int, require_stay: bool = False) -> str:
        """One row (subject_id, stay key, itemid, label) per stay and concept with ``min_rows``
        results or more; ``require_stay`` drops rows without a stay (outpatient labs)."""
        where = f"WHERE e.{self.stays.key} IS NOT NULL\n" if require_stay else ""
        return f"""
SELECT e.subject_id, e.{self.stays.key}, p.itemid, cpt.concept AS label
FROM {self.qualified} e
{self.join}
JOIN {self.primary} ON p.concept = cpt.concept
{where}GROUP BY ALL
HAVING count(*) >= {min_rows}"""

    def entity_where(self) -> str:
        """The evidence predicate of one subject's stay and one concept."""
        key = self.stays.key
        return f"e.subject_id = {{subject_id}} AND e.{key} = {{{key}}} AND cpt.concept = {{label}}"

    def entity_filter(self) -> str:
        """What follows ``FROM {<table>} e`` in a gold SQL over one subject's stay and one concept."""
        key = self.stays.key
        return f"""
{self.join}
WHERE e.subject_id = {{subject_id}} AND e.{key} = {{{key}}}
  AND cpt.concept = {{label}}"""

    def missing_concept_premise(self, scope: str) -> tuple[str, str, str]:
        """Arguments of a :class:`~ehrgym.bench.templates.base.Premise`: the concepts (with their
        primary item) of which the rows ``e2`` that satisfy ``scope`` hold no result."""
        return ("itemid", "label", f"""
SELECT p.itemid, p.concept FROM {self.primary}
WHERE p.concept NOT IN (
    SELECT c2.concept FROM {self.qualified} e2 JOIN {relation(self.domain)} c2(concept, itemid) ON c2.itemid = e2.itemid
    WHERE {scope})
ORDER BY p.concept""")

    # ------------------------------------------------------------ population level: a cohort

    def cohort_sampler(self, grouping: Grouping, param: str, lo: int, hi: int, where: str = "") -> str:
        """One row (year, ``param``, itemid, label) per year, group and concept with ``lo`` to ``hi``
        results in the stays of the group that began in that year."""
        s = self.stays
        cond = f"WHERE {where}\n" if where else ""
        return f"""
SELECT {s.year} AS year, {grouping.alias}.concept AS {param}, p.itemid, cpt.concept AS label
FROM {s.table} {s.alias}
{grouping.join}
JOIN {self.qualified} e ON e.{s.key} = {s.alias}.{s.key}
{self.join}
JOIN {self.primary} ON p.concept = cpt.concept
{cond}GROUP BY ALL
HAVING count(*) BETWEEN {lo} AND {hi}"""

    def cohort_join(self, grouping: Grouping | None = None) -> str:
        """The evidence joins of a cohort (stays of a year, optionally of one group)."""
        return " ".join(j for j in (self.join, self.stays.join, grouping.join if grouping else "") if j)

    def cohort_where(self, grouping: Grouping | None = None, param: str = "") -> str:
        """The evidence predicate of a cohort and one concept."""
        group = f"{grouping.alias}.concept = {{{param}}} AND " if grouping else ""
        return f"cpt.concept = {{label}} AND {group}{self.stays.year} = {{year}}"

    def cohort_filter(self, grouping: Grouping, param: str) -> str:
        """What follows ``FROM {<table>} e`` in a gold SQL over a cohort of a group and a year."""
        return f"""
{self.stays.join}
{grouping.join}
{self.join}
WHERE cpt.concept = {{label}}
  AND {grouping.alias}.concept = {{{param}}} AND {self.stays.year} = {{year}}"""


LAB_EVENTS = ConceptEvents(
    "labevents", "lab", ADMISSIONS,
    rows=dict(key=("subject_id", "itemid", "charttime"), id_col="labevent_id", time_col="charttime",
              window=ADMISSION_WINDOW, store_col="storetime"),
    values=dict(value_col="valuenum", text_col="value", unit_col="valueuom", item_col="itemid", item_param="itemid"))
VITAL_SIGNS = ConceptEvents(
    "chartevents", "vital", ICU_STAYS,
    rows=dict(key=("stay_id", "itemid", "charttime"), time_col="charttime", window=ICU_WINDOW, store_col="storetime"),
    values=dict(value_col="valuenum", text_col="value", unit_col="valueuom", item_col="itemid", item_param="itemid"))
URINE_OUTPUT = ConceptEvents(
    "outputevents", "urine", ICU_STAYS,
    rows=dict(key=("stay_id", "itemid", "charttime"), time_col="charttime", window=ICU_WINDOW, store_col="storetime"),
    values=dict(value_col="value", unit_col="valueuom", item_col="itemid", item_param="itemid"))
INFUSIONS = ConceptEvents(
    "inputevents", "infusion", ICU_STAYS,
    rows=dict(key=("stay_id", "itemid", "starttime"), id_col="orderid", time_col="starttime", window=ICU_WINDOW,
              store_col="storetime"),
    values=dict(value_col="amount", unit_col="amountuom", item_col="itemid", item_param="itemid"))


# ---------------------------------------------------------------- diagnoses: concepts by ICD prefix

def dx_join(codes: str = "e", alias: str = "dx") -> str:
    """Join ICD codes ``codes`` (``diagnoses_icd`` rows) to the diagnosis concepts whose prefixes
    cover them, as ``alias(concept, icd_version, prefix)``."""
    return (f"JOIN {relation('diagnosis')} {alias}(concept, icd_version, prefix) "
            f"ON {alias}.icd_version = {codes}.icd_version AND starts_with({codes}.icd_code, {alias}.prefix)")


def coded_admissions(codes: str = "di", alias: str = "dx", source: str = "mimiciv_hosp.diagnoses_icd") -> str:
    """The sub-query (hadm_id, concept, year) of admissions coded with a diagnosis concept, each once."""
    return f"""(SELECT DISTINCT {codes}.hadm_id, {alias}.concept, extract(year FROM a.admittime) AS year
      FROM {source} {codes}
      {dx_join(codes, alias)}
      JOIN mimiciv_hosp.admissions a ON a.hadm_id = {codes}.hadm_id)"""


def coded_cohort(param: str, codes: str = "di", alias: str = "dx", source: str = "mimiciv_hosp.diagnoses_icd") -> str:
    """The admissions that began in ``{year}`` coded with the diagnosis concept ``{param}``, each once."""
    return f"""
  SELECT DISTINCT {codes}.hadm_id
  FROM {source} {codes}
  {dx_join(codes, alias)}
  JOIN mimiciv_hosp.admissions a ON a.hadm_id = {codes}.hadm_id
  WHERE {alias}.concept = {{{param}}} AND extract(year FROM a.admittime) = {{year}}"""
