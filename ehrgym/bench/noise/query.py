"""Query-level noise: the question itself is wrong (no such patient, no such event, wrong time,
a misspelled name, or a question no EHR table can answer)."""

from __future__ import annotations

import datetime as dt

from ehrgym.bench.noise.base import InjectContext, Injection, Injector, register_injector
from ehrgym.bench.noise.lexicon import variants
from ehrgym.bench.noise.values import parse_stamp
from ehrgym.bench.sqlrender import placeholders, render_sql, render_text, text_value
from ehrgym.db.schema import table_spec

ENTITY_TABLES: dict[str, str] = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "icustays"}
ENTITY_WORDS: dict[str, str] = {"subject_id": "patient", "hadm_id": "admission", "stay_id": "ICU stay"}

OUT_OF_SCOPE_PATIENT: tuple[str, ...] = (
    "What is the home address of patient {subject_id}?",
    "What is the BRCA1 mutation status of patient {subject_id} according to their genome sequencing?",
    "Which blood type does patient {subject_id} prefer to receive in a transfusion?",
    "What is the phone number of the next of kin of patient {subject_id}?",
    "What was the annual household income of patient {subject_id}?",
    "How many steps did patient {subject_id}'s smartwatch record on the day before admission?",
    "What is the name of the primary-care physician patient {subject_id} sees outside the hospital?",
    "How many cigarettes a day did patient {subject_id}'s father smoke?",
)
OUT_OF_SCOPE_POPULATION: tuple[str, ...] = (
    "What was the average household income of the patients admitted in {year}?",
    "How many of the patients admitted in {year} owned a pet?",
    "What was the average commuting distance to the hospital of patients admitted in {year}?",
    "What fraction of the patients admitted in {year} had a genome sequenced by a consumer DNA test?",
    "What was the mean patient-satisfaction score reported by patients admitted in {year}?",
    "What share of the hospital's patients voted in the last national election?",
    "What is the average number of siblings of the hospital's patients?",
    "How many of the hospital's patients have a gym membership?",
)


def _edit(kind: str, param: str, old, new) -> dict:
    return {"kind": kind, "param": param, "from": text_value(old), "to": text_value(new)}


@register_injector
class NonexistentEntity(Injector):
    subtype = "nonexistent_entity"
    outcome, reason, empty_is_trap = "abstain", "invalid_reference", True
    description = "the question names a patient/admission/stay that does not exist"

    def fits(self, template) -> bool:
        return template.entity_ref in ENTITY_TABLES

    def inject(self, ctx: InjectContext) -> Injection | None:
        param = ctx.template.entity_ref
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


@register_injector
class FalsePremise(Injector):
    subtype = "false_premise"
    outcome, reason, empty_is_trap = "abstain", "false_premise", True
    description = "the question presupposes an event that never happened"

    def fits(self, template) -> bool:
        return template.premise is not None

    def inject(self, ctx: InjectContext) -> Injection | None:
        prem = ctx.template.premise
        rows = ctx.query(render_sql(prem.candidates_sql, ctx.params, {}))
        if not rows:
            return None
        new_value, new_text = rows[int(ctx.rng.integers(0, len(rows)))][:2]
        params = dict(ctx.params)
        params[prem.param] = new_value
        params[prem.text] = new_text
        return Injection(self.spec(question_edit=_edit("premise", prem.text, ctx.params[prem.text], new_text),
                                   description=f"{new_text!r} never happened for this entity"),
                         "abstain", "false_premise", params=params)


@register_injector
class TemporalMismatch(Injector):
    subtype = "temporal_mismatch"
    outcome, reason, empty_is_trap, presupposes_event = "abstain", "false_premise", True, True
    description = "the question's time window lies outside the record"

    def fits(self, template) -> bool:
        return template.time_window is not None

    def inject(self, ctx: InjectContext) -> Injection | None:
        tw = ctx.template.time_window
        got = ctx.query(render_sql(tw.scope_sql, ctx.params, {}))
        if not got or got[0][0] is None:
            return None
        first = parse_stamp(got[0][0])
        params = dict(ctx.params)
        if tw.year:
            new_year = first.year - int(ctx.rng.integers(3, 15))
            params[tw.year] = new_year
            edit = _edit("time_window", tw.year, ctx.params[tw.year], new_year)
            desc = f"year {new_year} lies before the first record ({first.year})"
        else:
            start, end = parse_stamp(ctx.params[tw.start]), parse_stamp(ctx.params[tw.end])
            new_start = (first - dt.timedelta(days=int(ctx.rng.integers(400, 2000)))).replace(
                hour=start.hour, minute=start.minute, second=0, microsecond=0)
            params[tw.start] = new_start
            params[tw.end] = new_start + (end - start)
            edit = {"kind": "time_window", "param": f"{tw.start},{tw.end}",
                    "from": f"{text_value(start)} – {text_value(end)}",
                    "to": f"{text_value(params[tw.start])} – {text_value(params[tw.end])}"}
            desc = f"window starts {text_value(new_start)}, before the first record ({text_value(first)})"
        return Injection(self.spec(question_edit=edit, description=desc), "abstain", "false_premise", params=params)


@register_injector
class LexicalVariation(Injector):
    subtype = "lexical_variation"
    description = "a misspelled or abbreviated name"

    def fits(self, template) -> bool:
        return template.lexical is not None

    def inject(self, ctx: InjectContext) -> Injection | None:
        param = ctx.template.lexical
        name = str(ctx.params[param])
        forms = variants(name)
        if not forms:
            return None
        new = forms[int(ctx.rng.integers(0, len(forms)))]
        params = dict(ctx.params)
        params[param] = new
        return Injection(self.spec(question_edit=_edit("lexical", param, name, new),
                                   description=f"{name!r} written as {new!r}"),
                         "answer", params=params, robust_params=dict(ctx.params))


@register_injector
class OutOfScope(Injector):
    subtype = "out_of_scope"
    outcome, reason = "abstain", "out_of_scope"
    description = "the question asks for something no EHR table holds"

    def inject(self, ctx: InjectContext) -> Injection | None:
        pool = OUT_OF_SCOPE_PATIENT if ctx.template.level == "patient" else OUT_OF_SCOPE_POPULATION
        usable = [q for q in pool if set(placeholders(q)) <= set(ctx.params)]
        if not usable:
            return None
        question = render_text(usable[int(ctx.rng.integers(0, len(usable)))], ctx.params)
        return Injection(self.spec(question_edit={"kind": "out_of_scope", "param": None, "from": None,
                                                  "to": question}, description="asks for data no table holds"),
                         "abstain", "out_of_scope", question=question)
