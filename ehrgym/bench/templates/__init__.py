"""Question templates, one module per intent, all registered in ``registry.py``.

How to add a template (read ``labs.py`` first: it is the complete reference example)
===================================================================================

1. Create (or open) the intent's module ``ehrgym/bench/templates/<intent>.py`` — one of
   ``encounters``, ``diagnoses``, ``labs``, ``medications``, ``vitals``, ``microbiology``. The
   registry imports exactly these modules (``registry.TEMPLATE_MODULES``); a missing one is skipped.
2. Call ``register(Template(...))`` at import time. A :class:`~ehrgym.bench.templates.base.Template`:

   ``id``          ``"<intent>.<short_name>"``, unique and stable (pair ids and splits hash it).
   ``intent``      the intent; ``level``: ``"patient"`` (one subject/admission/stay) or ``"population"``.
   ``paraphrases`` >= 3 ``str.format`` questions over the parameters (``{subject_id}``, ``{label}`` …).
   ``sampler_sql`` SQL over the plain tables (``mimiciv_hosp.x``, ``mimiciv_icu.y``) returning one row per
                   candidate entity; its column names are the parameters. Set-based — one statement,
                   no per-entity loop; the builder draws from it with a seeded hash. Make it return only
                   entities that can carry a meaningful answer (e.g. ``HAVING count(*) >= 2``).
   ``gold_sql``    the clean answer, a ``str.format`` string: ``{param}`` is replaced by a SQL literal
                   (strings quoted, timestamps ``TIMESTAMP '…'``) and ``{<evidence table>}`` (e.g.
                   ``{labevents}``, ``{prescriptions}``) by the evidence relation: the plain table for
                   clean/naive SQL, a cleaning sub-query for the robust SQL of recoverable noise. Read the
                   evidence table ONLY through that placeholder, aliased ``e``; other tables directly.
                   If the question names something (a test, drug, condition, unit, specimen), name it as a
                   clinician does: sample a concept of ``ehrgym.bench.concepts`` (its clinical name is the
                   parameter), join the concept relation (``concepts.relation(domain)``) and filter it by
                   the NAME (``cpt.concept = {label}``), so the gold covers every item/spelling the words
                   mean and a misspelled or abbreviated name really breaks a credulous agent's query.
                   State in the question any restriction the SQL applies ("serum", "during hospital
                   admissions", "systemic").
                   Use ``extract(year FROM t)`` rather than ``year(t)`` in filters (much faster in DuckDB).
   ``answer``      :class:`~ehrgym.bench.answers.AnswerSpec`: ``number`` (``rel_tol``/``abs_tol``/
                   ``decimals`` — use ``abs_tol=0.01, decimals=2`` for means/rates: the stored gold is
                   rounded, so an exact answer may sit 0.005 away and a re-rounded one 0.01), ``integer``,
                   ``string``, ``set`` (first column of every row), ``list`` (ordered), ``date``,
                   ``datetime``, ``boolean``.
   ``evidence``    :class:`~ehrgym.bench.templates.base.Evidence` — the rows the answer rests on, for the
                   noise injectors: ``table``; ``where`` (predicate over alias ``e`` with ``{param}``
                   placeholders; rendered both with literals and set-based); ``key`` (natural key: one row
                   per key in clean data); ``id_col`` (unique id renumbered in inserted copies);
                   ``time_col``; ``value_col`` (numeric answer column) and ``text_col`` (its text twin);
                   ``unit_col``, ``item_col`` + ``item_param`` (item-specific bounds from
                   ``ehrgym.db.items`` and unit conversions from ``noise/units.py``) or ``bounds``;
                   ``window`` (``ADMISSION_WINDOW``/``ICU_WINDOW``: the stay rows must lie in);
                   ``category_col`` (categorical answer column: care unit, organism …, used for conflicts
                   and misplaced rows); ``focus`` — which row decides the answer (``first``, ``last``,
                   ``max``, ``min``, ``any``); ``aggregate`` (False when the answer is one row's value:
                   implausible/missing values then expect an abstention); ``extreme`` (``low`` for
                   minimum-type answers).
   ``noise``       the subtypes that make sense for the question (see ``ehrgym.vocab.NOISE_SUBTYPES``);
                   the injector also checks the evidence fields it needs. Do not list a subtype that can
                   never change the answer (duplicates do not change a max; a count of 0 is a valid answer,
                   so ``missing_evidence``/``false_premise`` do not fit count questions).
   ``entity_ref``  the parameter naming a ``subject_id``/``hadm_id``/``stay_id`` (nonexistent entity).
   ``lexical``     the parameter holding the name matched in SQL (lexical variation; a concept's clinician
                   variants — ``Concept.variants`` — reach the lexicon automatically; other names take
                   curated forms through ``noise.lexicon.add_variants``).
   ``premise``     :class:`~ehrgym.bench.templates.base.Premise` — SQL listing replacement values the
                   entity never had (false premise), columns named ``param`` and ``text``.
   ``time_window`` :class:`~ehrgym.bench.templates.base.TimeWindow` — the window/year parameters and the
                   SQL of the record's (first, last) time (temporal mismatch).
   A question over a concept-coded event table (labs, vital signs, urine output, infusions) takes its
   sampler, gold filter, evidence and false premise from the table's family in ``families.py``
   (``LAB_EVENTS.entity_sampler(...)``, ``.entity_filter()``, ``.evidence(...)``, ``.cohort_filter(...)``)
   instead of writing the SQL again.
3. ``Template`` validates itself when defined: an id outside its intent, fewer than 3 distinct paraphrases,
   a patient-level question without its entity, gold SQL that does not parse or is trivial, a listed noise
   subtype whose injector cannot corrupt the evidence … raise ``BenchmarkError`` naming the template.
4. Run ``pytest tests/test_bench_templates.py``: it exercises every template × applicable subtype on the
   small synthetic database and checks the verification properties.

Minimal example (patient level)::

    register(Template(
        id="labs.max_value_admission", intent="labs", level="patient",
        paraphrases=("What was the highest {label} of patient {subject_id} during admission {hadm_id}?", …),
        sampler_sql="SELECT e.subject_id, e.hadm_id, e.itemid, d.label FROM mimiciv_hosp.labevents e "
                    "JOIN mimiciv_hosp.d_labitems d ON d.itemid = e.itemid GROUP BY ALL HAVING count(*) >= 2",
        gold_sql="SELECT max(e.valuenum) FROM {labevents} e JOIN mimiciv_hosp.d_labitems d "
                 "ON d.itemid = e.itemid WHERE e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} "
                 "AND d.itemid = {itemid} AND d.label = {label}",
        answer=AnswerSpec("number"),
        evidence=Evidence(table="labevents", where="e.subject_id = {subject_id} AND e.hadm_id = {hadm_id} "
                          "AND e.itemid = {itemid}", key=("subject_id", "itemid", "charttime"),
                          id_col="labevent_id", time_col="charttime", value_col="valuenum", text_col="value",
                          unit_col="valueuom", item_col="itemid", item_param="itemid",
                          window=ADMISSION_WINDOW, store_col="storetime", focus="max", aggregate=True),
        noise=("missing_evidence", "out_of_window", "conflicting_records", "implausible_value", …),
        entity_ref="hadm_id", lexical="label", premise=Premise(...),
    ))
"""

from ehrgym.bench.templates.base import (ADMISSION_WINDOW, ICU_WINDOW, Evidence, Premise, Template, TimeWindow,
                                         Window)
from ehrgym.bench.templates.registry import all_templates, get_template, register

__all__ = ["ADMISSION_WINDOW", "ICU_WINDOW", "Evidence", "Premise", "Template", "TimeWindow", "Window",
           "all_templates", "get_template", "register"]
