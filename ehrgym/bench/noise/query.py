"""Query-level noise: the question itself is wrong (no such patient, no such event, wrong time,
a name written as clinicians write it, or a question no EHR table can answer).

Every noisy question is drawn from the clean questions' own distribution: the same paraphrase of
the same template, with only the wrong part changed, and that part chosen like a clean value —

* ``false_premise``: a name the entity never had, of the same group as the true one (lab panel,
  drug class, Gram stain, ICD chapter) and weighted by how often it occurs in clean questions of
  the template (:mod:`ehrgym.bench.noise.similar`);
* ``temporal_mismatch``: a window inside the database's years and next to the entity's real
  record (days before the admission, months after the discharge, a nearby year without the
  cohort), written like a clean window; only where the question presupposes an event, i.e. the
  gold SQL on that window has no answer (a count of zero is an answer, not a false premise).
  A wrong year is accepted only as often as the same year would be a clean question's year with
  the twin's year as its wrong one (:func:`wrong_year_flows`): every year is then as often wrong
  as asked about, so a year learnt from other pairs names no twin. A cohort with data in every
  year clean questions name (every ICU stay of a year) gets no wrong year at all;
* ``lexical_variation``: an abbreviation, brand name or typo clinicians use for the name
  (:mod:`ehrgym.bench.noise.lexicon`), never a typo of a database code;
* ``out_of_scope``: the clean question about the same entity and topic, asking for something
  the schema cannot hold (:mod:`ehrgym.bench.noise.scope`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import sqlglot

from ehrgym.bench.answers import gold_from_rows
from ehrgym.bench.noise.base import InjectContext, Injection, Injector, register_injector
from ehrgym.bench.noise.cleaning import plain_relation
from ehrgym.bench.noise.lexicon import aliases, variants
from ehrgym.bench.context import CourseClause, pick_clause, with_clause
from ehrgym.bench.noise.scope import CLAUSE_KINDS, ends_clause, linked_phrases, slot_kind, swap_phrases
from ehrgym.bench.noise.similar import group_of
from ehrgym.bench.noise.teaching import TeachingCard
from ehrgym.bench.noise.values import parse_stamp
from ehrgym.bench.sqlrender import render_sql, render_text, sql_value, text_value
from ehrgym.bench.templates.base import Template
from ehrgym.db.schema import table_spec
from ehrgym.vocab import BEYOND_THE_COURSE

ENTITY_TABLES: dict[str, str] = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "icustays"}
ENTITY_WORDS: dict[str, str] = {"subject_id": "patient", "hadm_id": "admission", "stay_id": "ICU stay"}

def _edit(kind: str, param: str, old, new) -> dict:
    return {"kind": kind, "param": param, "from": text_value(old), "to": text_value(new)}


@register_injector
class NonexistentEntity(Injector):
    subtype = "nonexistent_entity"
    teaching = TeachingCard(
        title="Nonexistent entity",
        definition="The question names a patient, admission or ICU stay whose id does not exist in the database.",
        arises=("A mistyped or transposed identifier, an id from another system or another database, or a record that "
                "was merged away."),
        trap=("The credulous query finds no rows and the agent reports the empty result (null, 0, 'no') as a fact "
              "about a patient who does not exist."),
        check="Look the id up in its own table (patients, admissions, icustays) before querying the events.",
        outcome=("Abstain with `invalid_reference`: the question refers to something that is not there; it is not a "
                 "case of missing evidence about a real patient."),
    )
    outcome, reason, empty_is_trap = "abstain", "invalid_reference", True
    description = "the question names a patient/admission/stay that does not exist"

    def fits(self, template) -> bool:
        return template.entity_ref in ENTITY_TABLES

    def inject(self, ctx: InjectContext) -> Injection | None:
        param = ctx.template.entity_ref
        assert param is not None  # fits() admits only templates with an entity reference
        old = int(ctx.params[param])
        table = table_spec(ENTITY_TABLES[param]).qualified
        digits = len(str(old))
        for _ in range(25):
            tail = int(ctx.rng.integers(0, 1000))
            new = (old // 1000) * 1000 + tail
            if new == old or len(str(new)) != digits:
                continue
            exists = ctx.query(f"SELECT count(*) FROM {ctx.base}.{table} WHERE {param} = {new}")[0][0]
            if not exists:
                params = dict(ctx.params)
                params[param] = new
                return Injection(self.spec(question_edit=_edit("entity", param, old, new),
                                           description=f"{ENTITY_WORDS[param]} {new} does not exist (was {old})"),
                                 "abstain", "invalid_reference", params=params)
        return None


# per (connection, template, what): the template's sampled entities, and how often each value of a
# parameter occurs among them — the distribution clean questions draw that parameter from. The
# connection object is kept with its entry, so an id() can never be reused for another database
# while cached.
_FREQUENCY: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _cached(ctx: InjectContext, key: tuple[str, ...], compute):
    full = (id(ctx.con), ctx.template.id) + key
    hit = _FREQUENCY.get(full)
    if hit is not None and hit[0] is ctx.con:
        return hit[1]
    value = compute()
    if len(_FREQUENCY) > 512:
        _FREQUENCY.clear()
    _FREQUENCY[full] = (ctx.con, value)
    return value


def value_frequency(ctx: InjectContext, param: str) -> Counter:
    """How many of the template's candidate entities have each value of ``param`` (cached)."""
    def compute() -> Counter:
        rows = ctx.query(f"SELECT s.{param}, count(*) FROM ({ctx.template.sampler_sql}) s GROUP BY 1")
        return Counter({v: int(n) for v, n in rows if v is not None})

    return _cached(ctx, ("frequency", param), compute)


def _cohort_key(ctx: InjectContext, param: str, names: list[str] | None = None,
                row: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """The cohort a candidate belongs to: its sampled parameters other than ``param`` (from ``ctx.params``, or from
    a sampler ``row`` with column ``names``)."""
    if row is not None and names is not None:
        return tuple(v for n, v in zip(names, row) if n != param and n in ctx.params)
    names = _cached(ctx, ("rows",), lambda: _sampler_rows(ctx))[0]
    return tuple(ctx.params[n] for n in names if n != param and n in ctx.params)


def _sampler_rows(ctx: InjectContext) -> tuple[list[str], list[tuple[Any, ...]]]:
    cur = ctx.con.execute(ctx.template.sampler_sql)
    return [d[0] for d in cur.description], cur.fetchall()


def without_having(sql: str) -> str:
    """``sql`` without its outermost HAVING clause: every cohort with any data, not only those of a sampler's size."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    having = tree.args.get("having")
    if having is None:
        return sql
    having.pop()
    return tree.sql(dialect="duckdb")


def cohort_years(ctx: InjectContext, param: str, *, any_data: bool = False) -> dict[tuple[Any, ...], frozenset[int]]:
    """For each cohort of the template's candidates, the years (values of ``param``) it is a candidate in, or with
    ``any_data`` the years it has any data in (the sampler without its size bounds: a cohort of one admission in a
    year is no candidate there, yet a question about that year has an answer) (cached)."""
    def compute() -> dict[tuple[Any, ...], frozenset[int]]:
        if any_data:
            cur = ctx.con.execute(without_having(ctx.template.sampler_sql))
            names, rows = [d[0] for d in cur.description], cur.fetchall()
        else:
            names, rows = _cached(ctx, ("rows",), lambda: _sampler_rows(ctx))
        at = names.index(param)
        out: dict[tuple[Any, ...], set[int]] = {}
        for r in rows:
            if r[at] is not None:
                out.setdefault(_cohort_key(ctx, param, names, r), set()).add(int(r[at]))
        return {k: frozenset(v) for k, v in out.items()}

    return _cached(ctx, ("cohort_years", param, str(any_data)), compute)


def wrong_year_proposals(ctx: InjectContext, param: str, cohort: tuple[Any, ...], year: int, lo: int,
                         hi: int) -> tuple[list[int], np.ndarray]:
    """The wrong years a candidate of ``cohort`` asking about ``year`` may get (within ``YEAR_SPAN``, inside
    ``lo``..``hi``, no data of the cohort in them) and the probability of proposing each: in proportion to how many
    candidates ask about that year (+1), so that most proposals are years clean questions name too."""
    known = cohort_years(ctx, param, any_data=True).get(cohort, frozenset())
    asked = _cached(ctx, ("asked_years", param), lambda: Counter(
        y for years in cohort_years(ctx, param).values() for y in years))
    near = [y for y in range(max(lo, year - YEAR_SPAN), min(hi, year + YEAR_SPAN) + 1) if y != year and y not in known]
    weight = np.array([asked.get(y, 0) + 1.0 for y in near])
    return near, weight / weight.sum() if near else weight


def wrong_year_flows(ctx: InjectContext, param: str, lo: int, hi: int) -> dict[tuple[int, int], float]:
    """``(a, b)`` -> how often a candidate asking about year ``a`` is proposed ``b`` as its wrong year
    (:func:`wrong_year_proposals`), summed over the template's candidates (cached)."""
    def compute() -> dict[tuple[int, int], float]:
        flow: dict[tuple[int, int], float] = defaultdict(float)
        # in a fixed order (a sampler's rows come in any order; float sums must not)
        for cohort, asked in sorted(cohort_years(ctx, param).items(), key=repr):
            for a in sorted(asked):
                near, p = wrong_year_proposals(ctx, param, cohort, a, lo, hi)
                for b, pb in zip(near, p):
                    flow[(a, b)] += float(pb)
        return dict(flow)

    return _cached(ctx, ("year_flows", param, str(lo), str(hi)), compute)


def _icd_codes(ctx: InjectContext, titles: list[str]) -> dict[str, str]:
    if not titles:
        return {}
    listed = ", ".join(sql_value(t) for t in titles)
    rows = ctx.query(f"SELECT long_title, min(icd_code) FROM mimiciv_hosp.d_icd_procedures "
                     f"WHERE long_title IN ({listed}) GROUP BY 1")
    return {str(t): str(c) for t, c in rows}


def _weighted(rng: np.random.Generator, items: list[Any], weights: list[float]) -> Any:
    p = np.asarray(weights, dtype=float)
    return items[int(rng.choice(len(items), p=p / p.sum()))]


@register_injector
class FalsePremise(Injector):
    subtype = "false_premise"
    teaching = TeachingCard(
        title="False premise",
        definition=("The question presupposes an event that never happened, e.g. asks for the dose of a drug the "
                    "patient never received."),
        arises="A clinician misremembers, confuses two patients, or copies a question template to the wrong case.",
        trap=("The credulous query returns nothing (or NULL) and the agent reports that as the answer instead of "
              "pointing out that the premise is false."),
        check=("Confirm that the event the question presupposes exists for this patient before computing anything "
               "about it."),
        outcome=("Abstain with `false_premise` (`insufficient_evidence` is accepted too: a never-happened event and "
                 "lost rows look the same)."),
    )
    outcome, reason, empty_is_trap = "abstain", "false_premise", True
    description = "the question presupposes an event that never happened"

    def fits(self, template) -> bool:
        return template.premise is not None

    def inject(self, ctx: InjectContext) -> Injection | None:
        prem = ctx.template.premise
        assert prem is not None  # fits() admits only templates with a premise
        rows = ctx.query(render_sql(prem.candidates_sql, ctx.params, {}))
        freq = value_frequency(ctx, prem.param)
        # only names clean questions of this template use, so the wrong name is not itself a cue
        cands = [(v, t) for v, t, *_ in rows if freq.get(v, 0) > 0 and v != ctx.params[prem.param]]
        if not cands:
            return None
        codes = (_icd_codes(ctx, [str(ctx.params[prem.text])] + [str(t) for _, t in cands])
                 if prem.param == "title" and ctx.evidence.table == "procedures_icd" else {})
        pool = cands
        for level in (0, 1):  # the same group; for items failing that, the same broad section
            own = group_of(prem.param, ctx.params[prem.param], codes.get(str(ctx.params[prem.text])), level)
            if own is None:
                continue
            pool = [c for c in cands if group_of(prem.param, c[0], codes.get(str(c[1])), level) == own]
            if pool:
                break
        if not pool:
            return None
        new_value, new_text = _weighted(ctx.rng, pool, [freq[v] for v, _ in pool])
        params = dict(ctx.params)
        params[prem.param] = new_value
        params[prem.text] = new_text
        return Injection(self.spec(question_edit=_edit("premise", prem.text, ctx.params[prem.text], new_text),
                                   description=f"{new_text!r} (related to {ctx.params[prem.text]!r}) never "
                                               f"happened for this entity"),
                         "abstain", "false_premise", params=params)


def counts(template) -> bool:
    """A count question: on an empty window its answer is zero, so it presupposes no event."""
    return template.answer.type == "integer" and re.search(r"\bcount\s*\(", template.gold_sql, re.I) is not None


# how far from the real record a wrong window is put (days): ending that long before the first
# admission, or starting that long after the last discharge
BEFORE_DAYS: tuple[int, ...] = (7, 3, 14, 10, 30, 5)
AFTER_DAYS: tuple[int, ...] = (30, 90, 180, 14, 365, 60)
MAX_TRIES = 10  # candidate windows checked against the gold SQL
YEAR_SPAN = 15  # a wrong year lies at most this far from the clean question's year


@register_injector
class TemporalMismatch(Injector):
    subtype = "temporal_mismatch"
    teaching = TeachingCard(
        title="Temporal mismatch",
        definition=("The question's time window (a year, a day of the stay) lies outside the record, so it asks about "
                    "events in a period with no data."),
        arises=("A wrong year or date in the question, a confusion between admissions, or shifted dates in a "
                "de-identified database."),
        trap=("The credulous query filters on the window, finds nothing and returns NULL, which the agent reports as "
              "the answer."),
        check=("Compare the question's window with the range of dates the record covers (the admissions, the stay) "
               "before querying inside it."),
        outcome=("Abstain with `false_premise` (`insufficient_evidence` is accepted too): there is no record in that "
                 "window to answer from."),
    )
    outcome, reason, empty_is_trap, presupposes_event = "abstain", "false_premise", True, True
    description = "the question's time window lies outside the record"

    def fits(self, template) -> bool:
        return template.time_window is not None and not counts(template)

    def _no_answer(self, ctx: InjectContext, params: dict[str, Any]) -> bool:
        """The gold SQL on these parameters has no answer: the question presupposes an event."""
        sql = render_sql(ctx.template.gold_sql, params, plain_relation(ctx.template))
        return gold_from_rows(ctx.query(sql), ctx.template.answer) is None

    def inject(self, ctx: InjectContext) -> Injection | None:
        tw = ctx.template.time_window
        assert tw is not None  # fits() admits only templates with a time window
        got = ctx.query(render_sql(tw.scope_sql, ctx.params, {}))
        if not got or got[0][0] is None or got[0][1] is None:
            return None
        first, last = parse_stamp(got[0][0]), parse_stamp(got[0][1])
        params = dict(ctx.params)
        if tw.year:
            old = int(ctx.params[tw.year])
            near, p = wrong_year_proposals(ctx, tw.year, _cohort_key(ctx, tw.year), old, first.year, last.year)
            if not near:
                return None
            new_year = near[int(ctx.rng.choice(len(near), p=p))]
            flow = wrong_year_flows(ctx, tw.year, first.year, last.year)
            # accept a move old -> new as often as the move back new -> old would be drawn (Metropolis): each year is
            # then as often a wrong year as a clean question's year, and a year names no twin
            if ctx.rng.random() * flow.get((old, new_year), 0.0) >= flow.get((new_year, old), 0.0):
                ctx.refused = "wrong_year_would_name_twin"
                return None
            params[tw.year] = new_year
            if self._no_answer(ctx, params):
                edit = _edit("time_window", tw.year, old, new_year)
                desc = f"no such record in {new_year} (inside the database's years {first.year}-{last.year})"
                return Injection(self.spec(question_edit=edit, description=desc), "abstain", "false_premise",
                                 params=params)
            return None
        # a window without a year is a start/end window (TimeWindow sets one or the other)
        assert tw.start is not None and tw.end is not None
        start, end = parse_stamp(ctx.params[tw.start]), parse_stamp(ctx.params[tw.end])
        lo, hi = self._database_range(ctx)
        before = [first - dt.timedelta(days=d) - (end - start) for d in BEFORE_DAYS]  # ends d days before
        after = [last + dt.timedelta(days=d) for d in AFTER_DAYS]
        starts = [s for pair in zip(before, after) for s in pair]
        if ctx.rng.random() < 0.5:
            starts = [s for pair in zip(after, before) for s in pair]
        for cand in starts[:MAX_TRIES]:
            new_start = cand.replace(hour=start.hour, minute=start.minute, second=start.second, microsecond=0)
            new_end = new_start + (end - start)
            if new_start < lo or new_end > hi:
                continue
            params[tw.start], params[tw.end] = new_start, new_end
            if self._no_answer(ctx, params):
                edit = {"kind": "time_window", "param": f"{tw.start},{tw.end}",
                        "from": f"{text_value(start)} – {text_value(end)}",
                        "to": f"{text_value(new_start)} – {text_value(new_end)}"}
                side = "before the first admission" if new_end <= first else "after the last discharge"
                desc = f"window {text_value(new_start)} – {text_value(new_end)} lies {side} (no record in it)"
                return Injection(self.spec(question_edit=edit, description=desc), "abstain", "false_premise",
                                 params=params)
        return None

    @staticmethod
    def _database_range(ctx: InjectContext) -> tuple[dt.datetime, dt.datetime]:
        got = ctx.query("SELECT min(admittime), max(dischtime) FROM mimiciv_hosp.admissions")[0]
        return parse_stamp(got[0]), parse_stamp(got[1])


@register_injector
class LexicalVariation(Injector):
    subtype = "lexical_variation"
    teaching = TeachingCard(
        title="Lexical variation",
        definition=("The question names a drug, lab or unit with a misspelling, an abbreviation or another common "
                    "form."),
        arises="Clinicians write as they speak: abbreviations (K for potassium), brand names, typos.",
        trap=("The credulous query matches the name literally, finds nothing (or the wrong thing) and answers from "
              "that."),
        check=("Map the name to the database's vocabulary (case-insensitive, the concept's known spellings) and look "
               "at what the vocabulary holds before filtering on it."),
        outcome="Answer, as for the correctly spelled name; the expected value is the clean one.",
    )
    description = "a misspelled or abbreviated name"

    def fits(self, template) -> bool:
        return template.lexical is not None

    def inject(self, ctx: InjectContext) -> Injection | None:
        param = ctx.template.lexical
        assert param is not None  # fits() admits only templates with a lexical slot
        if ctx.template.answer.type == "boolean" and not ctx.clean_value:
            return None  # a name nobody matches already gives "no": the variation cannot trap here
        name = str(ctx.params[param])
        # the clean twin shows the name or an alias (drawn per entity, as for every subtype); the twin
        # shows another alias where there is one — the forms clean questions use — else another variant
        shown = ctx.shown.get(param, name)
        forms = [f for f in aliases(name) if f.casefold() != shown.casefold()]
        forms = forms or [f for f in variants(name) if f.casefold() != shown.casefold()]
        if not forms:
            return None
        new = forms[int(ctx.rng.integers(0, len(forms)))]
        params = dict(ctx.params)
        params[param] = new
        return Injection(self.spec(question_edit=_edit("lexical", param, name, new),
                                   description=f"{name!r} written as {new!r}"),
                         "answer", params=params, robust_params=dict(ctx.params))


def named_kind(t: Template) -> str | None:
    """The kind of measured thing a template's questions name (None: they name none to swap)."""
    if not t.lexical or not any("{" + t.lexical + "}" in p for p in t.paraphrases):
        return None
    return slot_kind(t.lexical, t.evidence.table)


def opens_with_clause(t: Template) -> bool:
    """Whether the template's questions may open with a clause of the admission's course (its twins' out-of-scope
    form, :meth:`OutOfScope._beyond_the_course`)."""
    return named_kind(t) in CLAUSE_KINDS


@register_injector
class OutOfScope(Injector):
    subtype = "out_of_scope"
    reads_places = True
    teaching = TeachingCard(
        title="Out of scope",
        definition=("The question asks for something no EHR table holds (e.g. the potassium the referring hospital "
                    "measured, the heart rate after the patient left for a nursing facility, or the reason a doctor "
                    "chose a drug)."),
        arises="Users ask a data assistant about things the record never captures.",
        trap=("The credulous agent still runs a query (usually the one for a similar, answerable question) and reports"
              " its result."),
        check="Ask whether any table and column could hold the answer before writing SQL.",
        outcome=("Abstain with `out_of_scope`: the schema has no place for the answer, which is different from "
                 "evidence that is missing. On a question about the time before the patient came or after they left "
                 "`false_premise` is accepted too: it also asks about a window the admission does not cover."),
    )
    outcome, reason = "abstain", "out_of_scope"
    description = "the question asks for something no EHR table holds"

    def fits(self, template: Template) -> bool:
        # A question that names no measured thing has nothing to swap: its out-of-scope twin would be
        # a different question (a fixed frame about the same entity), and such frames were the
        # wording a text-only probe recognised every time (27 of 27 on the paper build).
        return named_kind(template) is not None

    def inject(self, ctx: InjectContext) -> Injection | None:
        t = ctx.template
        kind = named_kind(t)
        if kind is None or t.lexical is None:
            return None
        if opens_with_clause(t) and ctx.clauses:
            return self._beyond_the_course(ctx, ctx.clauses)
        frames = [p for p in t.paraphrases if "{" + t.lexical + "}" in p]
        frame = t.paraphrases[ctx.paraphrase] if t.paraphrases[ctx.paraphrase] in frames else frames[0]
        shown = ctx.shown.get(t.lexical, str(ctx.params[t.lexical]))  # as the clean twin names it
        at_end = ends_clause(frame, t.lexical)
        # the places the question's context names, in its own words, wherever one fits; else the pools. Each linked
        # twin names its place twice (context and question) where its clean twin names it once, yet linking only
        # half of them left the pools' qualifiers to mark the other half: on the `make reproduce` benchmark the
        # query-level text probe read 0.6175 with half linked (out of scope 0.80), 0.6026 with every one (0.79)
        linked = linked_phrases(kind, shown, at_end, ctx.places)
        phrases = linked or swap_phrases(kind, shown, at_end)
        phrase = phrases[int(ctx.rng.integers(0, len(phrases)))]
        question = render_text(frame, {**ctx.params, t.lexical: phrase})
        return Injection(self.spec(question_edit={"kind": "out_of_scope", "param": t.lexical, "from": None,
                                                  "to": question},
                                   description=f"asks for the {phrase!r}, which no table holds"),
                         "abstain", "out_of_scope", question=question)

    def _beyond_the_course(self, ctx: InjectContext, clauses: tuple[CourseClause, ...]) -> Injection:
        """Both twins open with a clause of the admission's course (:func:`ehrgym.bench.context.with_clause`): the
        clean one with the preposition that covers the admission's own rows, this one with the other, asking for
        what was measured or given before the patient came or after they left, which no table holds."""
        clause = pick_clause(clauses, ctx.rng)
        asked = render_text(ctx.template.paraphrases[ctx.paraphrase], {**ctx.params, **ctx.shown})
        clean, question = (with_clause(asked, clause.recordable, clause), with_clause(asked, clause.unrecordable,
                                                                                      clause))
        return Injection(self.spec(question_edit={"kind": "out_of_scope", "form": BEYOND_THE_COURSE, "param": None,
                                                  "from": clean, "to": question},
                                   description=f"asks for what lies {clause.unrecordable} {clause.text!r}, "
                                               "which no table holds"),
                         "abstain", "out_of_scope", question=question, clean_question=clean)
