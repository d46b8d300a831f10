"""``skeptic``: a generic careful analyst. It checks the evidence before it answers.

Entitled to the question and the task's draft SQL (the clean query a competent analyst would
write first) — never to overlays, templates or expected outcomes. It decides from what it reads
in the data only: it has no list of question cues and does not compare the draft with the
question's wording (so it cannot recognise an out-of-scope question: it scores what generic
checking of the evidence earns). Its script, one SQL step each:

1. **probe**: do the referenced patient, admission and ICU stay exist (and belong together)?
   → ``invalid_reference``; does the question's time window overlap the patient's record (the
   whole database for cohort questions)? → ``false_premise``; does every name the draft
   matches on (item label, drug, organism …) exist?
2. **names**: a name that does not exist is matched to the closest existing one (clinical
   abbreviations, misspellings) and the draft is corrected — or, when nothing fits,
   ``false_premise``;
3. **profile** each evidence table read by the draft (text values parsed, units converted):
   rows outside their stay, duplicates, contradictory rows for one measurement
   (→ ``conflicting_evidence`` when believing one side or the other changes the answer, else the answer both
   give), implausible values (item bounds from
   :func:`ehrgym.db.items.item_reference`), rows without a value; no evidence at all →
   ``insufficient_evidence``. The evidence is the rows the question is about: the draft's filters
   on values (a threshold) and its comparisons of a row with the entity's other rows (a move into
   another unit than the one before) do not count, so zero rows passing them is an answer of 0;
4. **answer** from cleaned relations (in window, deduplicated, parsed, converted): an
   aggregate ignores implausible and valueless rows; a single-value answer that rests on such
   a row abstains (``implausible_value`` / ``insufficient_evidence``).

Anything it cannot analyse, it runs as drafted (it is a baseline, not an oracle).
"""

from __future__ import annotations

from typing import Any, Generator

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement
from ehrgym.agents.registry import register_agent
from ehrgym.agents.scripted import plain, read_result, rows_to_value
from ehrgym.agents.skeptic_sql import (ENTITY_TABLES, TABLE_RULES, DraftAnalysis, analyse_draft, as_datetime,
                                       best_name, clean_relation, profile_query, replace_literal, rewrite_tables,
                                       sql_quote)
from ehrgym.db.schema import table_spec
from ehrgym.env.actions import Action, AnswerAction, SqlAction
from ehrgym.errors import AgentError

# where else a patient, admission or ICU stay leaves traces (its own row may be what is missing)
TRACE_TABLES: dict[str, tuple[str, ...]] = {
    "subject_id": ("admissions",),
    "hadm_id": ("diagnoses_icd", "labevents", "transfers"),
    "stay_id": ("chartevents", "inputevents"),
}


def _abstain(reason: str, why: str) -> AnswerAction:
    return AnswerAction(abstain=reason, explanation=f"skeptic: {why}")


@register_agent("skeptic")
class SkepticAgent(Agent):
    """Generic careful analyst: checks references, time windows, names, duplicates, units, plausibility."""

    entitlement = Entitlement.DRAFT
    concurrency = Concurrency.PROCESS
    env_defaults = {"schema_summary": False}

    def __init__(self) -> None:
        super().__init__()
        self._gen: Generator[Action, Any, None] | None = None
        self._briefing: Briefing | None = None
        self.notes: list[str] = []
        # SQL this agent generated, by (draft, name fixes, step): rewriting is a pure function of
        # them, and the k trials of a task (or twins sharing a draft) would otherwise redo it
        self._generated: dict[tuple[Any, ...], str | None] = {}

    def reset(self, observation: Any, briefing: Briefing) -> None:
        super().reset(observation, briefing)
        if briefing.draft_sql is None:
            raise AgentError("the skeptic needs the draft SQL (DRAFT briefing)")
        self._briefing = briefing
        self._gen = None
        self.notes = []

    def act(self, observation: Any) -> Action:
        if self._briefing is None:
            raise AgentError("act() before reset()")
        try:
            if self._gen is None:
                self._gen = self._script(self._briefing)
                return next(self._gen)
            return self._gen.send(observation)
        except StopIteration:
            raise AgentError("the skeptic's script ended without an answer") from None

    def transcript(self) -> list[dict[str, Any]]:
        return [{"role": "note", "content": n} for n in self.notes]

    # -- the script ----------------------------------------------------------------------------
    def _script(self, b: Briefing) -> Generator[Action, Any, None]:
        try:
            a = analyse_draft(b.draft_sql or "")
        except Exception as exc:  # noqa: BLE001 - an unreadable draft is run as is
            self.notes.append(f"draft not analysable ({exc}); running it as drafted")
            yield from self._run_as_drafted(b.draft_sql or "")
            return
        tree = a.tree
        fixes: list[tuple[str, str]] = []

        def generated(step: tuple[Any, ...], make: Any) -> str | None:
            key = (b.draft_sql, tuple(fixes), *step)
            if key not in self._generated:
                if len(self._generated) >= 4096:
                    self._generated.pop(next(iter(self._generated)))
                self._generated[key] = make()
            return self._generated[key]

        # 1. probe: references, time window, names
        verdict, missing_names = yield from self._probe(a)
        if verdict is not None:
            yield verdict
            return
        # 2. names
        for ref in missing_names:
            where = f"t.{ref.column} IS NOT NULL" + (f" AND {ref.others}" if ref.others else "")
            obs = yield SqlAction(f"SELECT list(DISTINCT t.{ref.column}) AS names FROM "
                                  f"{table_spec(ref.table).qualified} t WHERE {where}")
            res = read_result(obs)
            names = list(res.rows[0][0] or []) if res.ok and res.rows else []
            fixed = best_name(ref.literal, [str(n) for n in names])
            if fixed is None and len(names) == 1 and ref.others:
                fixed = str(names[0])  # the draft pins the entity (e.g. by item id); only the name was off
            if fixed is None:
                yield _abstain("false_premise", f"no {ref.column} like {ref.literal!r} exists")
                return
            self.notes.append(f"{ref.literal!r} read as {fixed!r}")
            tree = replace_literal(tree, ref.literal, fixed)
            fixes.append((ref.literal, fixed))
        items = tuple(a.items)

        # 3. profile the evidence
        bad_values = False
        contradicted: list[str] = []
        empty = bool(a.evidence_tables)
        for table in a.evidence_tables:
            try:
                query = generated(("profile", table), lambda table=table: profile_query(
                    tree, table, items, frozenset(a.columns.get(table, ()))))
            except Exception as exc:  # noqa: BLE001 - a draft shape the profiler does not handle
                self.notes.append(f"no profile of {table}: {exc}")
                query = None
            if query is None:
                empty = False
                continue
            obs = yield SqlAction(query)
            res = read_result(obs)
            if not res.ok or not res.rows:
                self.notes.append(f"profile of {table} failed: {res.error}")
                empty = False
                continue
            prof = dict(zip(res.columns, res.rows[0]))
            self.notes.append(f"{table}: {prof}")
            if (prof.get("n_conflict") or 0) > 0:
                contradicted.append(table)
            if (prof.get("n") or 0) - (prof.get("n_oow") or 0) > 0:
                empty = False
            if a.uses_value(TABLE_RULES[table]) and (prof.get("n_implausible") or 0) + (prof.get("n_valueless") or 0) > 0:
                bad_values = True
        if empty:
            yield _abstain("insufficient_evidence", "no evidence rows for the question")
            return

        # 4. answer from cleaned relations
        def used(rule: Any) -> frozenset[str]:
            return frozenset(a.columns.get(rule.table, ()))

        def drafted() -> str:
            return generated(("drafted",), lambda: tree.sql(dialect="duckdb")) or ""

        def cleaned(drop_values: bool) -> str:
            return generated(("cleaned", drop_values), lambda: rewrite_tables(tree, lambda r, w: clean_relation(
                r, drop_values and a.uses_value(r), items, w, used(r)))) or ""

        if contradicted:  # believe each side in turn: only a contradiction that changes the answer stops it
            readings = []
            for side in ("ASC", "DESC"):
                sql = generated(("resolved", side), lambda side=side: rewrite_tables(tree, lambda r, w: clean_relation(
                    r, a.aggregate and a.uses_value(r), items, w, used(r), resolve=side))) or ""
                readings.append((yield from self._value(sql)))
            (first, ok1), (second, ok2) = readings
            if ok1 and ok2 and first is not None and first == second:
                self.notes.append(f"contradictory rows in {', '.join(contradicted)} give the same answer either way")
                yield AnswerAction(first, explanation="skeptic: the same answer whichever contradictory record is right")
            else:
                yield _abstain("conflicting_evidence", f"{', '.join(contradicted)} holds contradictory rows for one "
                                                       f"measurement, and which one is right changes the answer")
            return
        rules_used = [t for t in a.evidence_tables if t in TABLE_RULES]
        if not rules_used:
            yield from self._run_as_drafted(drafted())
            return
        if a.aggregate:
            value, ok = yield from self._value(cleaned(True))
            if not ok:
                yield from self._run_as_drafted(drafted())
                return
            if value is None:
                yield _abstain("insufficient_evidence", "no usable values once the evidence is cleaned")
                return
            yield AnswerAction(value, explanation="skeptic: aggregate over cleaned evidence")
            return
        keep, ok = yield from self._value(cleaned(False))
        if not ok:
            yield from self._run_as_drafted(drafted())
            return
        if bad_values:
            drop, ok2 = yield from self._value(cleaned(True))
            if ok2 and drop != keep:
                if keep is None or (isinstance(keep, list) and None in keep):
                    yield _abstain("insufficient_evidence", "the value the question asks for is missing")
                else:
                    yield _abstain("implausible_value", f"the value the question asks for ({keep}) is "
                                                        f"physiologically implausible")
                return
        if keep is None:
            yield _abstain("insufficient_evidence", "the query over cleaned evidence returns nothing")
            return
        yield AnswerAction(keep, explanation="skeptic: value from cleaned evidence")

    def _value(self, sql: str) -> Generator[Action, Any, tuple[Any, bool]]:
        obs = yield SqlAction(sql)
        res = read_result(obs)
        if not res.ok:
            self.notes.append(f"cleaned query failed: {res.error}")
            return None, False
        return rows_to_value(res.rows, self._briefing.answer_type if self._briefing else None), True

    def _run_as_drafted(self, sql: str) -> Generator[Action, Any, None]:
        obs = yield SqlAction(sql)
        res = read_result(obs)
        value = rows_to_value(res.rows, self._briefing.answer_type if self._briefing else None) if res.ok else None
        if value is None:
            yield _abstain("insufficient_evidence", "the query returns nothing")
        else:
            yield AnswerAction(value, explanation="skeptic: as drafted")

    def _probe(self, a: DraftAnalysis) -> Generator[Action, Any, tuple[AnswerAction | None, list[Any]]]:
        parts: list[tuple[str, tuple[Any, ...]]] = []
        for col, values in a.refs.items():
            spec = table_spec(ENTITY_TABLES[col])
            for v in values:
                parts.append((f"(SELECT count(*) FROM {spec.qualified} WHERE {col} = {int(v)})", ("exists", col, v)))
                traces = " + ".join(f"(SELECT count(*) FROM {table_spec(t).qualified} WHERE {col} = {int(v)})"
                                    for t in TRACE_TABLES[col])
                parts.append((f"({traces})", ("traces", col, v)))
        subjects, hadms, stays = a.refs.get("subject_id", []), a.refs.get("hadm_id", []), a.refs.get("stay_id", [])
        if subjects and hadms:
            parts.append((f"(SELECT count(*) FROM mimiciv_hosp.admissions WHERE hadm_id = {int(hadms[0])} "
                          f"AND subject_id = {int(subjects[0])})", ("belongs",)))
        lo, hi = a.window
        if lo is not None or hi is not None:
            if subjects:
                scope = f"WHERE subject_id = {int(subjects[0])}"
            elif hadms:
                scope = (f"WHERE subject_id = (SELECT any_value(subject_id) FROM mimiciv_hosp.admissions "
                         f"WHERE hadm_id = {int(hadms[0])})")
            elif stays:
                scope = (f"WHERE subject_id = (SELECT any_value(subject_id) FROM mimiciv_icu.icustays "
                         f"WHERE stay_id = {int(stays[0])})")
            else:
                scope = ""
            parts.append((f"(SELECT min(admittime) FROM mimiciv_hosp.admissions {scope})", ("span_lo",)))
            parts.append((f"(SELECT max(dischtime) FROM mimiciv_hosp.admissions {scope})", ("span_hi",)))
        for ref in a.names:
            op = "ILIKE" if ref.like else "="
            extra = f" AND {ref.others}" if ref.others else ""
            parts.append((f"(SELECT count(*) FROM {table_spec(ref.table).qualified} t WHERE t.{ref.column} {op} "
                          f"{sql_quote(ref.literal)}{extra})", ("name", ref)))
        if not parts:
            return None, []
        obs = yield SqlAction("SELECT " + ", ".join(f"{sql} AS p{i}" for i, (sql, _) in enumerate(parts)))
        res = read_result(obs)
        if not res.ok or not res.rows:
            self.notes.append(f"probe failed: {res.error}")
            return None, []
        values = [plain(v) for v in res.rows[0]]
        span: dict[str, Any] = {}
        missing = []
        found = {(tag[1], tag[2]): value for (_, tag), value in zip(parts, values) if tag[0] == "traces"}
        for (_, tag), value in zip(parts, values):
            if tag[0] == "exists" and not value:
                if found.get((tag[1], tag[2])):
                    # other tables know this patient/admission/stay: its own row is what is missing
                    return _abstain("insufficient_evidence", f"the {ENTITY_TABLES[tag[1]]} row of {tag[1]} "
                                                             f"{tag[2]} is missing"), []
                return _abstain("invalid_reference", f"{tag[1]} {tag[2]} does not exist"), []
            if tag[0] == "belongs" and not value:
                return _abstain("invalid_reference", "the admission does not belong to the patient"), []
            if tag[0] in ("span_lo", "span_hi"):
                span[tag[0]] = as_datetime(value)
            if tag[0] == "name" and not value and tag[1] not in missing:
                missing.append(tag[1])
        s_lo, s_hi = span.get("span_lo"), span.get("span_hi")
        if (lo is not None and s_hi is not None and lo > s_hi) or (hi is not None and s_lo is not None and hi < s_lo):
            return _abstain("false_premise", "the question's time window lies outside the record"), []
        return None, missing
