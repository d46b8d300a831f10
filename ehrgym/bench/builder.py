"""The Clean–Noise benchmark builder: sample entities, inject noise, verify pairs, write the dataset.

``build_benchmark(db, out, config="small", seed=0)`` is deterministic: the same database,
config and seed give byte-identical ``tasks.jsonl``, ``tasks.parquet``, ``card.json``,
``card.md`` and ``manifest.json`` (``build_report.json`` also holds wall-clock timings).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from tqdm import tqdm

from ehrgym.bench.background import BackgroundMaker
from ehrgym.bench.answers import NotComparable, answer_key, answers_match, format_answer, gold_from_rows
from ehrgym.bench.complexity import sql_complexity, sql_tables
from ehrgym.bench.decoys import DECOYED, Decoy, make_decoy
from ehrgym.bench.context import (CLAUSE_SHARE, COHORT_CLAUSES, CourseClause, admission_row, cohort_eligible, cohort_locations_sql,
                                  cohort_sentence, context_sentence, course_clauses, eligible, pick_clause,
                                  with_clause, with_context)
from ehrgym.bench.configs import (LEXICAL, MARKED_SUBTYPES, QUERY_ABSTAIN, BuildConfig, answer_allowed,
                                  balanced_subtypes, plan_quotas, spread_groups)
from ehrgym.bench.noise import INJECTORS, InjectContext, Injection
from ehrgym.bench.noise.base import EvidenceReads
from ehrgym.bench.noise.cleaning import plain_relation, relation
from ehrgym.bench.noise.lexicon import shown_name
from ehrgym.bench.noise.query import opens_with_clause
from ehrgym.bench.sampling import Candidate, sample_candidates
from ehrgym.bench.sqlrender import json_value, render_sql, render_text, text_value
from ehrgym.bench.task import Expected, Task
from ehrgym.bench.templates.base import Template
from ehrgym.bench.templates.registry import all_templates
from ehrgym.bench.verify import PairVerifier
from ehrgym.db.connect import read_meta
from ehrgym.db.overlay import Overlay
from ehrgym.errors import BenchmarkError, DatabaseError
from ehrgym.vocab import NOISE_SUBTYPES

BENCHMARK_FORMAT_VERSION = 1
SUBTYPE_ORDER = list(NOISE_SUBTYPES)


# candidate sampling runs in the building process before any worker starts: its queries (whole-database sampler
# results, totally ordered, and counts) may use every core, whatever their scan order
SAMPLING_THREADS = os.cpu_count() or 1


class BenchmarkBuildWarning(UserWarning):
    """Something in the database limits the build (skipped templates or intents, a shortfall)."""


def _stable_int(*parts: Any) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:15], 16)


AttemptKey = tuple[str, str, int]  # (template id, subtype, candidate index)


@dataclass
class Draft:
    """One verified pair before splits are assigned."""

    template: Template
    subtype: str
    params: dict[str, Any]
    clean: dict[str, Any]
    noise: dict[str, Any]

    @property
    def answer_key(self) -> str:
        """The clean answer as the gold writes it: what the answer spread (step 6) counts."""
        return answer_key(self.clean["expected"].value)

    @property
    def spread_groups(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """The groups whose answers step 6 spreads: the template, and the template with the concepts it names."""
        return spread_groups(self.template.id, self.params)


@dataclass
class BuildStats:
    candidates: Counter = field(default_factory=Counter)  # drawn per template
    ineligible: Counter = field(default_factory=Counter)  # reason -> count
    attempts: Counter = field(default_factory=Counter)  # subtype -> attempts
    discarded: Counter = field(default_factory=Counter)  # reason -> count
    discarded_by_subtype: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    timings: Counter = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    # template -> pairs verified, then dropped to keep its answer/abstain balance (step 5 of the plan)
    balance_dropped: Counter = field(default_factory=Counter)

    def merge(self, other: "BuildStats") -> None:
        for name in ("candidates", "ineligible", "attempts", "discarded", "timings", "balance_dropped"):
            getattr(self, name).update(getattr(other, name))
        for sub, counter in other.discarded_by_subtype.items():
            self.discarded_by_subtype[sub].update(counter)
        self.warnings.extend(w for w in other.warnings if w not in self.warnings)

    def replay(self, effects: "BuildStats") -> None:
        """Add what one attempt recorded elsewhere (``Builder.memo``), as if it had run here: warnings in order,
        none dropped as a repeat (unlike :meth:`merge`)."""
        for name in ("candidates", "ineligible", "attempts", "discarded", "timings", "balance_dropped"):
            getattr(self, name).update(getattr(effects, name))
        for sub, counter in effects.discarded_by_subtype.items():
            self.discarded_by_subtype[sub].update(counter)
        self.warnings.extend(effects.warnings)

    def discard(self, subtype: str, reason: str) -> None:
        self.discarded[reason] += 1
        self.discarded_by_subtype[subtype][reason] += 1


class _Clock:
    def __init__(self, stats: BuildStats, key: str) -> None:
        self.stats, self.key = stats, key

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        # the timings Counter holds float seconds; typeshed types Counter values as int
        self.stats.timings[self.key] += time.perf_counter() - self.t0  # type: ignore[assignment]


class _Slot:
    def __init__(self, template: Template, subtype: str, quota: int) -> None:
        self.template, self.subtype, self.quota = template, subtype, quota
        self.made = 0
        self.pointer = 0
        self.failures = 0
        self.exhausted = False


@dataclass
class _Sides:
    """Per template: its balanced subtypes (``pool``), their slots by expected outcome (``sides``), the
    templates with both outcomes (``both``) and the pairs made per (template, outcome) and with an abstaining
    query-level subtype."""

    pool: dict[str, set[str]]
    sides: dict[str, dict[str, list[_Slot]]]
    both: list[str]
    made: Counter
    query_abstain: Counter


class Builder:
    def __init__(self, db_path: str | Path, config: BuildConfig, seed: int, progress: bool = True,
                 templates: Iterable[Template] | None = None) -> None:
        self.db_path = Path(db_path)
        if not self.db_path.exists():
            raise DatabaseError(f"database {self.db_path} does not exist; build one with `ehrgym db synth` "
                                f"or `ehrgym db load-mimic`")
        self.config, self.seed, self.progress = config, int(seed), progress
        self.templates = list(templates) if templates is not None else all_templates()
        self.stats = BuildStats()
        self.verifier = PairVerifier(self.db_path)
        self.backgrounds = BackgroundMaker(self.verifier)
        self.candidates: dict[str, list[Candidate]] = {}
        self.used: dict[str, set[int]] = defaultdict(set)
        # step 6 of the plan: how many pairs each clean answer of a template is the gold of
        self.answers: dict[tuple[str, tuple[tuple[str, str], ...]], Counter[str]] = defaultdict(Counter)
        self.clean_cache: dict[tuple[str, int], tuple[Any, str] | None] = {}
        self.context_rows: dict[tuple[Any, ...], Any] = {}  # (entity column, id) or cohort -> admissions rows
        self.max_ids: dict[tuple[Any, ...], Any] = {}
        self.evidence_reads = EvidenceReads()  # the clean base's evidence rows, read once per build process
        self._ineligible: dict[str, Counter] = {}
        self.clean_problem: dict[tuple[str, int], str] = {}
        self._all_drawn: dict[str, bool] = {}
        # (template id, subtype, candidate index) -> an attempt's draft (or None) and the stats it recorded, made
        # ahead in a helper process (:class:`_Speculator`): an attempt depends on nothing else, so it is taken
        # from here instead of being made again
        self.memo: dict[AttemptKey, tuple[Draft | None, BuildStats]] = {}
        self.recorded: dict[AttemptKey, tuple[Draft | None, BuildStats]] | None = None  # a helper's attempts
        self.plan: dict[tuple[str, str], int] = {}  # (template id, subtype) -> planned pairs, once run() sampled
        self.phase_seconds: dict[str, float] = {}  # wall time of run()'s phases: sampling, first pass, deficit passes

    # ---------------------------------------------------------------- planning
    def applicable(self, t: Template) -> list[str]:
        return [s for s in SUBTYPE_ORDER if INJECTORS[s].applies(t)]

    def _plan(self, templates: list[Template]) -> dict[tuple[str, str], int]:
        table = {(t.intent, t.level, t.id): self.applicable(t) for t in templates}
        weights = {t.id: float(self.config.tier_weights[t.tier - 1]) for t in templates}
        outcomes = {(t.id, s): outcome_of(t, s) for t in templates for s in self.applicable(t)}
        return plan_quotas(self.config.pairs, table, NOISE_SUBTYPES, weights, outcomes)

    def _draw(self, t: Template, need: int) -> None:
        """Draw candidates until ``need`` are eligible (real data has naturally noisy entities)."""
        cap = self.config.max_candidates
        n = int(min(max(need, self.config.min_candidates), cap))
        # the samplers run on the overlaid connection: whatever pair was verified last must not choose the entities
        self.verifier.clean()
        while True:
            with _Clock(self.stats, "sampling"):
                cands = sample_candidates(self.verifier.con, t, n, self.seed)
            eligible = [c for c in cands if c.ineligible_reason is None]
            if len(eligible) >= need or len(cands) < n or n >= cap:
                break
            n = int(min(cap, max(2 * n, math.ceil(1.2 * need * len(cands) / max(len(eligible), 1)))))
        self.stats.candidates[t.id] = len(cands)
        self._all_drawn[t.id] = len(cands) < n or n >= cap
        self._ineligible[t.id] = Counter(c.ineligible_reason for c in cands if c.ineligible_reason)
        self.stats.ineligible = sum(self._ineligible.values(), Counter())
        self.candidates[t.id] = eligible

    def sample(self) -> dict[tuple[str, str], int]:
        first = self._plan(self.templates)
        per_template: Counter[str] = Counter()
        for (tid, _), q in first.items():
            per_template[tid] += q
        bar = tqdm(self.templates, desc="sampling", disable=not self.progress, leave=False)
        with self.verifier.threads(SAMPLING_THREADS):  # no worker runs yet: the samplers may take every core
            for t in bar:
                self._draw(t, math.ceil(per_template[t.id] * self.config.oversample))
        usable = [t for t in self.templates if self.candidates.get(t.id)]
        skipped = [t.id for t in self.templates if not self.candidates.get(t.id)]
        for tid in skipped:
            self.stats.warnings.append(f"template {tid} skipped: no eligible entity in this database")
        if skipped:
            warnings.warn(f"{len(skipped)} templates skipped (their tables are empty or hold no naturally clean "
                          f"evidence in this database): {', '.join(skipped)}", BenchmarkBuildWarning, stacklevel=2)
        for intent in sorted({t.intent for t in self.templates} - {t.intent for t in usable}):
            msg = f"intent {intent!r} skipped: its tables hold no eligible evidence in this database"
            self.stats.warnings.append(msg)
            warnings.warn(msg, BenchmarkBuildWarning, stacklevel=2)
        plan = self._plan(usable)
        again: Counter[str] = Counter()
        for (tid, _), q in plan.items():
            again[tid] += q
        with self.verifier.threads(SAMPLING_THREADS):
            for t in usable:  # a re-plan can raise a template's share: draw more if needed
                need = math.ceil(again[t.id] * self.config.oversample)
                if need > len(self.candidates[t.id]) and not self._all_drawn[t.id]:
                    self._draw(t, need)
        return plan

    # ---------------------------------------------------------------- one pair
    def _clean(self, t: Template, c: Candidate) -> tuple[Any, str] | None:
        key = (t.id, c.index)
        if key not in self.clean_cache:
            sql = render_sql(t.gold_sql, c.params, plain_relation(t))
            with _Clock(self.stats, "gold_execution"):
                try:
                    value = gold_from_rows(self.verifier.rows(sql), t.answer)
                except Exception as exc:  # noqa: BLE001 — a template bug must not abort a build
                    self.stats.warnings.append(f"template {t.id}: clean gold failed: {exc}")
                    value = None
            if value is not None and not _round_trips(value, t.answer):
                self.clean_problem[key] = "answer_not_round_trippable"
                value = None
            self.clean_cache[key] = (value, sql) if value is not None else None
        return self.clean_cache[key]

    def attempt(self, t: Template, subtype: str, c: Candidate) -> Draft | None:
        key = (t.id, subtype, c.index)
        known = self.memo.pop(key, None)
        if known is not None:
            draft, effects = known
            self.stats.replay(effects)
            return draft
        if self.recorded is None:
            return self._attempt_now(t, subtype, c)
        kept, self.stats = self.stats, BuildStats()
        try:
            draft = self._attempt_now(t, subtype, c)
        finally:
            effects, self.stats = self.stats, kept
        self.stats.replay(effects)
        self.recorded[key] = (draft, effects)
        return draft

    def _attempt_now(self, t: Template, subtype: str, c: Candidate) -> Draft | None:
        if not INJECTORS[subtype].accepts(t, c.params):
            self.stats.discard(subtype, "entity_not_applicable")
            return None
        self.stats.attempts[subtype] += 1
        clean = self._clean(t, c)
        if clean is None:
            self.stats.discard(subtype, self.clean_problem.get((t.id, c.index), "clean_no_answer"))
            return None
        clean_value, clean_sql = clean
        rng = np.random.default_rng([self.seed, _stable_int(t.id), c.index, SUBTYPE_ORDER.index(subtype)])
        paraphrase = int(rng.integers(0, len(t.paraphrases)))
        shown = shown_params(t, c.params, self._display_draw(t, c))
        reads_places = INJECTORS[subtype].reads_places
        with _Clock(self.stats, "verification"):
            context, places = self._context(t, c) if reads_places else ("", ())
            clauses = self._clauses(t, c) if reads_places else ()
            ctx = InjectContext(self.verifier.clean_con, t, dict(c.params), clean_value, rng, max_ids=self.max_ids,
                               paraphrase=paraphrase, shown=shown, places=places, clauses=clauses,
                               reads=self.evidence_reads)
            try:
                inj = INJECTORS[subtype].inject(ctx)
            except Exception as exc:  # noqa: BLE001
                self.stats.warnings.append(f"{t.id} × {subtype}: injector failed: {exc}")
                inj = None
            if inj is None:
                self.stats.discard(subtype, ctx.refused or "not_injectable")
                return None
            noisy_params = inj.params or c.params
            naive_sql = render_sql(t.gold_sql, noisy_params, plain_relation(t))
            robust_sql = None
            if inj.expected_kind == "answer":
                robust_sql = render_sql(t.gold_sql, inj.robust_params or c.params,
                                        relation(t, c.params, inj.cleaners))
            outcome = self.verifier.check_noise(
                subtype=subtype, overlay=inj.noise.overlay, spec=t.answer, expected_kind=inj.expected_kind,
                expected_value=clean_value, naive_sql=naive_sql, robust_sql=robust_sql, alternative=inj.alternative)
        if not outcome.ok:
            self.stats.discard(subtype, outcome.reason or "unknown")
            return None
        with _Clock(self.stats, "verification"):
            if not reads_places:  # the same per-entity context, read for kept pairs only
                context, _ = self._context(t, c)
        decoy = None
        if self.config.decoys and subtype in DECOYED:
            with _Clock(self.stats, "decoys"):
                decoy = make_decoy(self.verifier, t, subtype, ctx, inj.noise.overlay, clean_sql,
                                   _stable_int(self.seed, t.id, "decoy", c.index, subtype))
        with _Clock(self.stats, "verification"):
            background = self._background(t, c, subtype, inj, clean_sql, naive_sql, robust_sql, decoy)
        draft = self._draft(t, subtype, c, clean_value, clean_sql, paraphrase, inj, naive_sql, robust_sql,
                            outcome.naive_value, outcome.margin, context)
        draft.clean["background"] = draft.noise["background"] = background[0]
        draft.clean["background_kind"] = background[1]
        if decoy is not None:
            draft.clean["decoy"] = decoy.overlay
            draft.clean["meta"]["decoy"] = {"subtype": decoy.subtype, "description": decoy.description,
                                            "readings": decoy.readings}
        return draft

    def _background(self, t: Template, c: Candidate, subtype: str, inj: Injection, clean_sql: str, naive_sql: str,
                    robust_sql: str | None, decoy: Decoy | None = None) -> tuple[Overlay, str]:
        """The pair's background overlay, served to both twins (:mod:`ehrgym.bench.background`), verified with the
        clean twin's decoy (:mod:`ehrgym.bench.decoys`) under it."""
        subjects = {int(p["subject_id"]) for p in (c.params, inj.params or {})
                    if isinstance(p.get("subject_id"), int)}
        last = self.verifier.last_rows
        own = decoy.overlay if decoy is not None else Overlay()
        clean_rows = decoy.rows if decoy is not None else self.verifier.rows(clean_sql)
        checks = [(clean_sql, own, clean_rows), (naive_sql, inj.noise.overlay, last["naive"])]
        if robust_sql is not None and "robust" in last:
            checks.append((robust_sql, inj.noise.overlay, last["robust"]))
        reads = {name for sql in (clean_sql, naive_sql, robust_sql) if sql for name in sql_tables(sql)}
        seed = [self.seed, _stable_int(t.id, "background"), c.index, SUBTYPE_ORDER.index(subtype)]
        patient = None
        if t.level == "patient":  # the clean question's ids (a nonexistent entity's id is checked, not proven)
            patient = {k: {int(c.params[k])} if isinstance(c.params.get(k), int) else set()
                       for k in ("subject_id", "hadm_id", "stay_id")}
        edited = Overlay(inj.noise.overlay.edits + own.edits)  # rows the background leaves alone
        return self.backgrounds.make(seed, t.evidence.table, subjects, edited, checks, reads, t.answer,
                                     None if t.level == "patient" else evidence_sql(t, c.params), patient)

    def _draft(self, t: Template, subtype: str, c: Candidate, clean_value: Any, clean_sql: str, paraphrase: int,
               inj: Injection, naive_sql: str, robust_sql: str | None, trap_value: Any,
               trap_margin: float | None = None, context: str = "") -> Draft:
        entity = {k: json_value(v) for k, v in sorted(c.params.items())}
        draw = self._display_draw(t, c)
        shown = shown_params(t, c.params, draw)
        clause = None if inj.clean_question else self._told_clause(t, c)
        question = inj.clean_question or render_text(t.paraphrases[paraphrase], {**c.params, **shown})
        noisy_params = inj.params or c.params
        noisy_shown = shown
        if t.lexical and noisy_params.get(t.lexical) != c.params.get(t.lexical):
            # a lexical twin shows its own form; a false premise names the other concept the same way
            noisy_shown = {} if subtype == "lexical_variation" else shown_params(t, noisy_params, draw)
        noisy_question = inj.question or render_text(t.paraphrases[paraphrase], {**noisy_params, **noisy_shown})
        if clause is not None:  # both twins, covering the admission's own rows
            question, noisy_question = (with_clause(q, clause.recordable, clause) for q in (question, noisy_question))
        question, noisy_question = with_context(question, context), with_context(noisy_question, context)
        subjects = [int(c.params["subject_id"])] if t.level == "patient" and "subject_id" in c.params else []
        base_meta = {"answer_type": t.answer.type, "subject_ids": subjects, "entity": entity,
                     "paraphrase": paraphrase, "template_description": t.description, "tier": t.tier,
                     **({"context": context} if context else {})}
        clean = {"question": question, "gold_sql": clean_sql, "naive_sql": clean_sql,
                 "expected": Expected("answer", t.answer, clean_value),
                 "meta": {**base_meta, "evidence_sql": evidence_sql(t, c.params),
                          **({"shown": shown} if shown else {})}}
        gold_sql = robust_sql if inj.expected_kind == "answer" else naive_sql
        expected = (Expected("answer", t.answer, clean_value) if inj.expected_kind == "answer"
                    else Expected("abstain", t.answer, None, inj.reason))
        noise_meta = {**base_meta, "evidence_sql": evidence_sql(t, noisy_params), "trap_value": trap_value}
        if noisy_shown and not inj.question:
            noise_meta["shown"] = noisy_shown
        if trap_margin is not None:
            noise_meta["trap_margin"] = round(float(trap_margin), 6)
        if inj.params is not None:
            noise_meta["noisy_entity"] = {k: json_value(v) for k, v in sorted(noisy_params.items())}
        noise = {"question": noisy_question, "gold_sql": gold_sql, "naive_sql": naive_sql, "expected": expected,
                 "noise": inj.noise, "meta": noise_meta}
        return Draft(t, subtype, dict(c.params), clean, noise)

    def _context(self, t: Template, c: Candidate) -> tuple[str, tuple[str, ...]]:
        """Per entity, whatever the noise: the admission's (or the cohort's) course the questions
        mention, if any (:mod:`ehrgym.bench.context`); read from the clean database."""
        pick = int(np.random.default_rng([self.seed, _stable_int(t.id, "context"), c.index]).integers(0, 1 << 30))
        if cohort_eligible(t):
            cohort = ("cohort", t.id, c.index)
            if cohort not in self.context_rows:
                sql = cohort_locations_sql(evidence_sql(t, c.params))
                self.context_rows[cohort] = tuple(self.verifier.clean_con.execute(sql).fetchall())
            return cohort_sentence(self.context_rows[cohort], pick)
        if not eligible(t, c.params):
            return "", ()
        return context_sentence(self._admission_row(c), pick)

    def _admission_row(self, c: Candidate) -> Any:
        key = ("hadm_id", c.params["hadm_id"]) if "hadm_id" in c.params else ("stay_id", c.params["stay_id"])
        if key not in self.context_rows:
            self.context_rows[key] = admission_row(self.verifier.clean_con, c.params)
        return self.context_rows[key]

    def _clauses(self, t: Template, c: Candidate) -> tuple[CourseClause, ...]:
        """The admission's arrival and departure in clause form, for a question whose course may be told; a
        population question's cohort passed the hospital's own doors."""
        if t.level == "population":
            return COHORT_CLAUSES
        if not eligible(t, c.params):
            return ()
        return course_clauses(self._admission_row(c))

    def _told_clause(self, t: Template, c: Candidate) -> CourseClause | None:
        """Per entity, whatever the noise: the clause of the course a question opens with, if any (``CLAUSE_SHARE``
        of those an out-of-scope twin could ask beyond; :mod:`ehrgym.bench.context`)."""
        if not opens_with_clause(t):
            return None
        clauses = self._clauses(t, c)
        rng = np.random.default_rng([self.seed, _stable_int(t.id, "clause"), c.index])
        if not clauses or rng.random() >= CLAUSE_SHARE:
            return None
        return pick_clause(clauses, rng)

    def _display_draw(self, t: Template, c: Candidate) -> tuple[float, int]:
        """Per entity, whatever the noise: whether and which alias its questions name the concept by."""
        rng = np.random.default_rng([self.seed, _stable_int(t.id, "display"), c.index])
        return float(rng.random()), int(rng.integers(0, 1 << 30))

    # ---------------------------------------------------------------- filling slots
    def _fill(self, slot: _Slot, wanted: int, drafts: list[Draft], bar: Any) -> int:
        """Try to make ``wanted`` more pairs in ``slot``; returns how many were made."""
        made = 0
        cands = self.candidates.get(slot.template.id, [])
        used = self.used[slot.template.id]
        while made < wanted and not slot.exhausted:
            while slot.pointer < len(cands) and cands[slot.pointer].index in used:
                slot.pointer += 1
            if slot.pointer >= len(cands) or slot.failures >= self.config.max_failures_per_slot:
                slot.exhausted = True
                break
            cand = cands[slot.pointer]
            slot.pointer += 1
            if not INJECTORS[slot.subtype].accepts(slot.template, cand.params):
                continue
            if not self._spread_allows(slot.template, cand):
                # not a failed attempt (nothing was injected): the candidate stays for a later slot
                self.stats.discard(slot.subtype, "answer_share_cap")
                continue
            draft = self.attempt(slot.template, slot.subtype, cand)
            if draft is None:
                slot.failures += 1
                continue
            slot.failures = 0
            used.add(cand.index)
            self._count(draft, 1)
            drafts.append(draft)
            slot.made += 1
            made += 1
            bar.update(1)
        return made

    def _spread_allows(self, t: Template, c: Candidate) -> bool:
        """Step 6: whether the candidate's clean answer is under its share in each of its spread groups (a
        candidate without a clean answer is left to :meth:`attempt` to discard)."""
        clean = self._clean(t, c)
        if clean is None:
            return True
        key = answer_key(clean[0])
        return all(answer_allowed(self.answers[g][key], sum(self.answers[g].values()), self.config.max_answer_share)
                   for g in spread_groups(t.id, c.params))

    def _count(self, draft: Draft, n: int) -> None:
        """Count a made pair's clean answer in its spread groups (``n`` = 1), or a dropped one's out (-1)."""
        for group in draft.spread_groups:
            self.answers[group][draft.answer_key] += n

    def _forget(self, draft: Draft) -> None:
        self._count(draft, -1)

    def run(self) -> list[Draft]:
        started = time.perf_counter()
        plan = self.sample()
        self.plan = plan
        self.phase_seconds["sampling"] = time.perf_counter() - started
        by_id = {t.id: t for t in self.templates}
        slots = [_Slot(by_id[tid], sub, q) for (tid, sub), q in sorted(
            plan.items(), key=lambda kv: (kv[0][0], SUBTYPE_ORDER.index(kv[0][1])))]
        drafts: list[Draft] = []
        bar = tqdm(total=self.config.pairs, desc="pairs", disable=not self.progress, leave=False)
        if self.config.workers > 1 and len({s.template.id for s in slots}) > 1:
            self._fill_parallel(slots, drafts, bar)  # the workers balance their own templates
        else:
            for slot in slots:
                self._fill(slot, slot.quota, drafts, bar)
            self._balance(slots, drafts, bar)
        self.phase_seconds["first_pass"] = time.perf_counter() - started - self.phase_seconds["sampling"]
        remaining = self._settle(slots, drafts, bar)
        self.phase_seconds["deficit_passes"] = time.perf_counter() - started - sum(self.phase_seconds.values())
        bar.close()
        if remaining:
            msg = (f"only {len(drafts)} of {self.config.pairs} pairs could be verified on this database "
                   f"(shortfall {remaining}); see build_report.json for discard reasons")
            self.stats.warnings.append(msg)
            warnings.warn(msg, BenchmarkBuildWarning, stacklevel=2)
        return drafts

    def _sides(self, slots: list[_Slot], drafts: list[Draft]) -> "_Sides":
        """The answer and abstain slots of each template (its balanced subtypes) and what they made so far."""
        pool = {t.id: set(balanced_subtypes(t.id, self.applicable(t), {(t.id, s): outcome_of(t, s)
                                                                        for s in self.applicable(t)}))
                for t in {slot.template.id: slot.template for slot in slots}.values()}
        sides: dict[str, dict[str, list[_Slot]]] = defaultdict(lambda: {"answer": [], "abstain": []})
        for slot in slots:
            if slot.subtype in pool[slot.template.id]:
                sides[slot.template.id][outcome_of(slot.template, slot.subtype)].append(slot)
        both = sorted(tid for tid, ss in sides.items() if ss["answer"] and ss["abstain"])
        made = Counter((d.template.id, d.noise["expected"].kind) for d in drafts if d.subtype in pool[d.template.id])
        query_abstain = Counter(d.template.id for d in drafts if d.subtype in QUERY_ABSTAIN)
        return _Sides(pool, sides, both, made, query_abstain)

    def _balance(self, slots: list[_Slot], drafts: list[Draft], bar: Any) -> None:
        """Steps 0 and 1 of the settling after the first pass: each template's lexical twins capped and its
        short side topped up from its own slots. Both read and change one template's slots, candidates and
        drafts only, so the workers run them on their own templates (``_fill_worker``) with the result the
        sequential build gets; the deficit passes that mix templates follow in :meth:`_settle`."""
        st = self._sides(slots, drafts)
        for tid in st.both:  # 0. lexical variation: at most the template's other unmarked query twins (as planned)
            lexical = [s for s in st.sides[tid]["answer"] if s.subtype == LEXICAL]
            surplus = sum(s.made for s in lexical) - st.query_abstain[tid]
            if lexical and surplus > 0:
                at = [i for i, d in enumerate(drafts) if d.template.id == tid and d.subtype == LEXICAL]
                for i in reversed(at[len(at) - surplus:]):
                    self._forget(drafts.pop(i))
                self.stats.balance_dropped[tid] += min(surplus, len(at))
                st.made[(tid, "answer")] -= surplus
                lexical[0].made -= surplus
                bar.update(-surplus)
        # (from here on ``fill`` skips a lexical slot that has reached the template's abstaining query twins)
        for tid in st.both:  # 1. top up a template's short side from its own slots; drop what stays unmatched
            gap = st.made[(tid, "answer")] - st.made[(tid, "abstain")]
            if gap > 0:
                self._fill_side(st, tid, "abstain", gap, drafts, bar)
                self._drop(st, tid, "answer", st.made[(tid, "answer")] - st.made[(tid, "abstain")], drafts, bar)
            elif gap < -1:
                self._fill_side(st, tid, "answer", -gap - 1, drafts, bar)
                self._drop(st, tid, "abstain", st.made[(tid, "abstain")] - st.made[(tid, "answer")] - 1, drafts, bar)

    def _fill_side(self, st: "_Sides", tid: str, side: str, n: int, drafts: list[Draft], bar: Any) -> int:
        """Make ``n`` more pairs on one side of a template; returns how many are still missing."""
        start = len(drafts)
        open_slots = [s for s in st.sides[tid][side] if not s.exhausted
                      and not (s.subtype == LEXICAL and s.made >= st.query_abstain[tid])]
        got = self._round_robin(open_slots, n, drafts, bar) if open_slots else n
        st.made.update((d.template.id, d.noise["expected"].kind) for d in drafts[start:])
        st.query_abstain.update(d.template.id for d in drafts[start:] if d.subtype in QUERY_ABSTAIN)
        return n - got

    def _drop(self, st: "_Sides", tid: str, side: str, n: int, drafts: list[Draft], bar: Any) -> None:
        """Drop a template's last ``n`` pairs on one side."""
        at = [i for i, d in enumerate(drafts) if d.template.id == tid and d.noise["expected"].kind == side
              and d.subtype in st.pool[tid]]
        for i in reversed(at[len(at) - n:] if n > 0 else []):
            d = drafts.pop(i)
            self._forget(d)
            self.stats.balance_dropped[tid] += 1
            st.made[(tid, side)] -= 1
            st.query_abstain[tid] -= d.subtype in QUERY_ABSTAIN
            for slot in st.sides[tid][side]:
                if slot.subtype == d.subtype:
                    slot.made -= 1
        bar.update(-max(n, 0))

    def _settle(self, slots: list[_Slot], drafts: list[Draft], bar: Any) -> int:
        """After the first pass and :meth:`_balance`: keep every template at half answer / half abstain (step 5
        of the plan, ``ehrgym.bench.configs``) and make the pairs still missing; returns the shortfall."""
        st = self._sides(slots, drafts)
        both = st.both
        cell_of = {slot.template.id: (slot.template.intent, slot.template.level) for slot in slots}

        quota: Counter = Counter()
        for slot in slots:
            quota[(slot.template.intent, slot.template.level)] += slot.quota
        have = Counter((d.template.intent, d.template.level) for d in drafts)
        deficit = {cell: quota[cell] - have[cell] for cell in sorted(quota)}
        closed: set[str] = set()

        def couples(tids: list[str], n: int) -> int:
            """Make ``n`` pairs as answer/abstain couples of one template, round robin."""
            while n > 0:
                open_tids = [tid for tid in tids if tid not in closed]
                if not open_tids:
                    break
                for i, tid in enumerate(open_tids):
                    if n <= 0:
                        break
                    if speculator is not None:
                        speculator.before(st, tid, open_tids[i + 1] if i + 1 < len(open_tids) else None, n)
                    made_couple, size = self._couple(st, tid, n, drafts, bar)
                    if not made_couple:
                        closed.add(tid)
                        continue
                    n -= size
            return n

        speculator = _Speculator.start(self) if self.config.workers > 1 and both else None
        try:
            for cell in sorted(deficit):  # 2. the cell's missing pairs in couples, then with abstain-only slots
                if deficit[cell] > 0:
                    deficit[cell] = couples([tid for tid in both if cell_of[tid] == cell], deficit[cell])
            remaining = sum(max(d, 0) for d in deficit.values())
            remaining = couples(both, remaining)  # 3. anywhere in couples
        finally:
            if speculator is not None:
                speculator.close()
        single = [s for s in slots if s.template.id not in both and s.subtype not in MARKED_SUBTYPES
                  and outcome_of(s.template, s.subtype) == "abstain"]
        if remaining:  # 4. one-outcome templates (abstain-only keep the balance), then any slot
            remaining = self._round_robin(single, remaining, drafts, bar)
        if remaining:
            remaining = self._round_robin(slots, remaining, drafts, bar)
        return remaining

    def _couple(self, st: "_Sides", tid: str, n: int, drafts: list[Draft], bar: Any) -> tuple[bool, int]:
        """One answer/abstain couple of a template while ``n`` pairs are missing (one pair, on the short side, when
        ``n`` < 2); returns whether it was made and how many pairs it is. Half a couple is dropped again: it would
        tip the template."""
        a, b = st.made[(tid, "answer")], st.made[(tid, "abstain")]
        order = ("answer", "abstain") if n >= 2 else ("answer",) if b > a else ("abstain",)
        got = [self._fill_side(st, tid, side, 1, drafts, bar) for side in order]
        if all(got):
            return True, len(order)
        for side, g in zip(order, got):
            if g:
                self._drop(st, tid, side, 1, drafts, bar)
        return False, len(order)

    def _round_robin(self, slots: list[_Slot], deficit: int, drafts: list[Draft], bar: tqdm) -> int:
        while deficit > 0:
            open_slots = [s for s in slots if not s.exhausted]
            if not open_slots:
                break
            for s in open_slots:
                if deficit <= 0:
                    break
                deficit -= self._fill(s, 1, drafts, bar)
        return deficit

    def _fill_parallel(self, slots: list[_Slot], drafts: list[Draft], bar: tqdm) -> None:
        """First pass (and :meth:`_balance`) over the slots in worker processes, a whole template at a time.

        A template's slots only read and consume that template's candidates, and every draw is seeded by the
        template, entity and subtype, so a template gives the same pairs in whichever worker runs it. The
        workers therefore take templates from one shared list, longest expected first, each claiming the next
        one nobody holds (``_claim``): a worker that drew cheap templates takes more instead of waiting for
        the other (a fixed split by quota left one of two workers idle 67 s of 281 s at 10k patients). The
        results are merged in template order, as the sequential build makes them; the deficit passes that
        mix templates then run here, sequentially, on the merged state.
        """
        import tempfile

        by_template: dict[str, list[_Slot]] = defaultdict(list)
        for slot in slots:
            by_template[slot.template.id].append(slot)
        load = {tid: sum(s.quota for s in ss) * (3 if ss[0].template.level == "population" else 1)
                for tid, ss in by_template.items()}
        order = sorted(load, key=lambda k: (-load[k], k))  # longest first: the last claims are short
        job = [(by_template[tid][0].template, [(s.subtype, s.quota) for s in by_template[tid]],
                self.candidates.get(tid, [])) for tid in order]
        workers = min(self.config.workers, len(job))
        with tempfile.TemporaryDirectory(prefix="ehrgym-claims-") as claims:
            results = _run_workers([(str(self.db_path), self.config, self.seed, job, claims)] * workers, bar)
        made: dict[str, dict[str, Any]] = {}
        for res in results:
            made.update(res["templates"])
            self.clean_cache.update(res["clean_cache"])
            self.clean_problem.update(res["clean_problem"])
            self.max_ids.update(res["max_ids"])
        if set(made) != set(by_template):
            raise BenchmarkError(f"build workers left templates unmade: {sorted(set(by_template) - set(made))}")
        index = {(s.template.id, s.subtype): s for s in slots}
        for tid in sorted(made):
            for key, (n, pointer, failures, exhausted) in made[tid]["slots"].items():
                slot = index[key]
                slot.made, slot.pointer, slot.failures, slot.exhausted = n, pointer, failures, exhausted
            self.used[tid] |= made[tid]["used"]
            self.stats.merge(made[tid]["stats"])
            drafts.extend(made[tid]["first"])
        for tid in sorted(made):  # the balancing pass's pairs after every first pass, as sequentially
            drafts.extend(made[tid]["balance"])
        for d in drafts:
            self._count(d, 1)
        bar.n = len(drafts)  # the live count from the workers' progress files, made exact
        bar.refresh()

    def close(self) -> None:
        self.verifier.close()


class _FileProgress:
    """A worker's progress bar: one byte per verified pair appended to a file the parent polls."""

    def __init__(self, path: str | None) -> None:
        self.fh = open(path, "ab", buffering=0) if path else None

    def update(self, n: int = 1) -> None:
        if self.fh is not None and n > 0:
            self.fh.write(b"." * n)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def _run_workers(jobs: list[Any], bar: Any | None = None, poll_seconds: float = 0.25) -> list[dict[str, Any]]:
    """Run ``_fill_worker`` on each job in its own ``python -m ehrgym.bench.worker`` process.

    While they run, ``bar`` shows the pairs verified so far (each worker appends to a progress file).
    """
    return run_worker_processes(jobs, bar, poll_seconds)


def run_worker_processes(jobs: list[Any], bar: Any | None = None, poll_seconds: float = 0.25) -> list[Any]:
    """Each job in its own ``python -m ehrgym.bench.worker`` process, all at once; their results in order.

    A job is a ``_fill_worker`` job or ``{"call": module_level_function, "args": (...)}``."""
    import os
    import pickle
    import subprocess
    import sys
    import tempfile
    import time

    procs = []
    with tempfile.TemporaryDirectory(prefix="ehrgym-build-") as tmp:
        progress_files = [os.path.join(tmp, f"worker{i}.progress") for i in range(len(jobs))]
        for job, progress_file in zip(jobs, progress_files):
            out, err_file = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            proc = subprocess.Popen([sys.executable, "-m", "ehrgym.bench.worker"], stdin=subprocess.PIPE,
                                    stdout=out, stderr=err_file, env=_worker_env(len(jobs)))
            assert proc.stdin is not None
            proc.stdin.write(pickle.dumps((job, progress_file), protocol=pickle.HIGHEST_PROTOCOL))
            proc.stdin.close()
            procs.append((proc, out, err_file))
        def show_progress() -> None:
            if bar is not None:
                done = sum(os.path.getsize(f) for f in progress_files if os.path.exists(f))
                if done != bar.n:
                    bar.n = done
                    bar.refresh()

        while any(proc.poll() is None for proc, _, _ in procs):
            show_progress()
            time.sleep(poll_seconds)
        show_progress()
        results = []
        for proc, out, err_file in procs:
            code = proc.wait()
            err_file.seek(0)
            err = err_file.read().decode(errors="replace")
            err_file.close()
            if code != 0:
                raise BenchmarkError(f"a build worker failed (exit {proc.returncode}); rerun with workers=1 to see "
                                     f"the error in-process. Worker stderr:\n{err[-3000:]}")
            out.seek(0)
            results.append(pickle.load(out))
            out.close()
    return results


SideSlots = list[tuple[str, str, int, int, int, int, bool]]  # (side, subtype, quota, made, pointer, failures, exhausted)
CoupleJob = tuple[str, set[str], SideSlots, set[int], dict[Any, Counter], int, int, int, int]


class _Speculator:
    """A helper process that makes a template's next couple (:meth:`Builder._couple`) while this process makes the
    one before it, in the settling passes that otherwise run here alone after the workers.

    The helper runs the couple on a copy of the template's state (its slots, used entities, answer counts) and sends
    back every attempt it made (:attr:`Builder.recorded`). An attempt depends only on its template, subtype and
    entity, so this process then takes them from :attr:`Builder.memo` as it runs the same couple: what it makes is
    what it would make alone. A guess that turns out wrong (the couple before changed how many pairs are missing)
    only leaves attempts unused; a helper that fails only stops the speeding up.
    """

    def __init__(self, builder: "Builder", proc: Any, err_file: Any) -> None:
        self.builder, self.proc, self.err_file = builder, proc, err_file
        self.pending: str | None = None  # the template whose couple the helper is making

    @classmethod
    def start(cls, builder: "Builder") -> "_Speculator | None":
        import pickle
        import subprocess
        import sys
        import tempfile

        err_file = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "ehrgym.bench.worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err_file, env=_worker_env(2))
            assert proc.stdin is not None
            state = (str(builder.db_path), builder.config, builder.seed, builder.templates, builder.candidates,
                     builder.clean_cache, builder.clean_problem, builder.max_ids)
            pickle.dump(({"serve": state}, None), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            proc.stdin.flush()
        except OSError:
            err_file.close()
            return None
        return cls(builder, proc, err_file)

    def before(self, st: "_Sides", tid: str, next_tid: str | None, n: int) -> None:
        """Called before this process makes ``tid``'s couple with ``n`` pairs missing: take the helper's attempts
        if it made that couple, else hand it ``next_tid``'s couple (guessing this one is made) and go on."""
        if self.proc is None:
            return
        if self.pending is not None:
            ahead = self.pending == tid
            self._collect()
            if ahead:
                return  # this couple comes from the memo; the helper takes the one after the next
        left = n - (2 if n >= 2 else 1)
        if next_tid is not None and left > 0:
            self._send(st, next_tid, left)

    def _send(self, st: "_Sides", tid: str, n: int) -> None:
        import pickle

        b = self.builder
        slots = [(side, s.subtype, s.quota, s.made, s.pointer, s.failures, s.exhausted)
                 for side in ("answer", "abstain") for s in st.sides[tid][side]]
        answers = {g: Counter(c) for g, c in b.answers.items() if g[0] == tid}
        job: CoupleJob = (tid, set(st.pool[tid]), slots, set(b.used[tid]), answers, st.made[(tid, "answer")],
                          st.made[(tid, "abstain")], st.query_abstain[tid], n)
        try:
            assert self.proc.stdin is not None
            pickle.dump(job, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            self.pending = tid
        except OSError:
            self._stop()

    def _collect(self) -> None:
        import pickle

        self.pending = None
        try:
            assert self.proc.stdout is not None
            self.builder.memo.update(pickle.load(self.proc.stdout))
        except (OSError, EOFError, pickle.UnpicklingError):
            self._stop()

    def _stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        self.pending = None

    def close(self) -> None:
        import pickle
        import subprocess

        if self.proc is not None and self.pending is not None:
            self._collect()
        if self.proc is not None:
            try:
                pickle.dump(None, self.proc.stdin)
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._stop()
            self.proc = None
        self.err_file.close()
        self.builder.memo.clear()  # attempts the settling never asked for


def serve_couples(state: tuple[Any, ...], requests: Any, replies: Any) -> None:
    """The helper of :class:`_Speculator`: reads couple jobs until None, answers each with the attempts it made."""
    import pickle

    db_path, config, seed, templates, candidates, clean_cache, clean_problem, max_ids = state
    b = Builder(db_path, config, seed, progress=False, templates=templates)
    b.candidates, b.clean_cache, b.clean_problem, b.max_ids = candidates, clean_cache, clean_problem, max_ids
    by_id = {t.id: t for t in templates}
    bar = _FileProgress(None)
    try:
        while True:
            job = pickle.load(requests)
            if job is None:
                return
            pickle.dump(_speculate_couple(b, by_id, job, bar), replies, protocol=pickle.HIGHEST_PROTOCOL)
            replies.flush()
    finally:
        b.close()


def _speculate_couple(b: "Builder", by_id: dict[str, Template], job: CoupleJob,
                      bar: Any) -> dict[AttemptKey, tuple[Draft | None, BuildStats]]:
    tid, pool, slots, used, answers, made_answer, made_abstain, query_abstain, n = job
    t = by_id[tid]
    sides: dict[str, list[_Slot]] = {"answer": [], "abstain": []}
    for side, subtype, quota, made, pointer, failures, exhausted in slots:
        slot = _Slot(t, subtype, quota)
        slot.made, slot.pointer, slot.failures, slot.exhausted = made, pointer, failures, exhausted
        sides[side].append(slot)
    b.used[tid] = set(used)
    b.answers = defaultdict(Counter, answers)
    st = _Sides({tid: pool}, {tid: sides}, [tid],
                Counter({(tid, "answer"): made_answer, (tid, "abstain"): made_abstain}), Counter({tid: query_abstain}))
    b.recorded = {}
    try:
        b._couple(st, tid, n, [], bar)
        return b.recorded
    finally:
        b.recorded = None


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _worker_env(workers: int) -> dict[str, str]:
    """The environment of a worker process: BLAS libraries get one thread each when several workers run
    (unless the user set them). Each worker's numpy otherwise starts a spinning thread per core, and on the 2-core
    machine the text probes in two workers took 43 s against 32 s in one process (20 s capped)."""
    import os

    env = os.environ.copy()
    if workers > 1:
        for name in BLAS_THREAD_VARIABLES:
            env.setdefault(name, "1")
    return env


WorkerJob = tuple[str, BuildConfig, int, list[tuple[Template, list[tuple[str, int]], list[Candidate]]], str]


def _claim(claims: str, i: int) -> bool:
    """Whether this worker takes job ``i``: the first to create its claim file does (atomic on one machine)."""
    import os

    try:
        os.close(os.open(os.path.join(claims, f"{i}.claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _fill_worker(args: tuple[WorkerJob, str | None]) -> dict[str, Any]:
    """Fill and balance the templates this process claims from a shared list (see ``Builder._fill_parallel``).

    Returns per template its first-pass and balancing pairs, slot states, used entities and build stats."""
    (db_path, config, seed, job, claims), progress_file = args
    b = Builder(db_path, config, seed, progress=False, templates=[t for t, _, _ in job])
    bar = _FileProgress(progress_file)
    made: dict[str, dict[str, Any]] = {}
    try:
        for i, (t, subs, cands) in enumerate(job):
            if not _claim(claims, i):
                continue
            b.stats = BuildStats()
            b.candidates[t.id] = cands
            drafts: list[Draft] = []
            slots = []
            for sub, quota in subs:
                slot = _Slot(t, sub, quota)
                b._fill(slot, quota, drafts, bar)
                slots.append(slot)
            first = {id(d) for d in drafts}
            b._balance(slots, drafts, bar)
            made[t.id] = {"first": [d for d in drafts if id(d) in first],
                          "balance": [d for d in drafts if id(d) not in first],
                          "slots": {(s.template.id, s.subtype): (s.made, s.pointer, s.failures, s.exhausted)
                                    for s in slots},
                          "used": set(b.used[t.id]), "stats": b.stats}
        return {"templates": made, "clean_cache": b.clean_cache, "clean_problem": b.clean_problem,
                "max_ids": b.max_ids}
    finally:
        bar.close()
        b.close()


def shown_params(t: Template, params: dict[str, Any], draw: tuple[float, int], force: bool = False) -> dict[str, str]:
    """The alias a question shows for the template's name parameter (empty: the name itself); see
    :func:`ehrgym.bench.noise.lexicon.shown_name`."""
    if not t.lexical or t.lexical not in params:
        return {}
    name = text_value(params[t.lexical])
    form = shown_name(name, draw[0], draw[1], force=force)
    return {t.lexical: form} if form != name else {}


def outcome_of(t: Template, subtype: str) -> str:
    """The expected outcome (answer | abstain) of a noisy twin of ``t`` with ``subtype``."""
    return INJECTORS[subtype].expected(t)[0]


def _round_trips(value: Any, spec) -> bool:
    """The gold value written as an agent writes it (``format_answer``) must read back as itself —
    e.g. a set of names that themselves contain ", " cannot be answered unambiguously."""
    try:
        return answers_match(value, format_answer(value, spec), spec)
    except NotComparable:
        return False


def evidence_sql(t: Template, params: dict[str, Any]) -> str:
    """SQL listing the evidence rows of one question (run it on clean and noisy views alike)."""
    ev = t.evidence
    order = f"\nORDER BY e.{ev.time_col}" if ev.time_col else ""
    join = f"\n{render_sql(ev.join, params, {})}" if ev.join else ""
    return (f"SELECT e.*\nFROM {ev.qualified} e{join}\nWHERE {render_sql(ev.where, params, {})}{order}")


def make_tasks(drafts: list[Draft], splits: dict[str, str]) -> list[Task]:
    tasks = []
    for d in drafts:
        pair_id = pair_id_of(d)
        for variant, data in (("clean", d.clean), ("noise", d.noise)):
            gold = data["gold_sql"]
            meta = dict(data["meta"])
            meta["complexity"] = sql_complexity(gold)
            meta["tables"] = sql_tables(gold)
            tasks.append(Task(
                task_id=f"{pair_id}:{variant}", pair_id=pair_id, variant=variant, intent=d.template.intent,
                level=d.template.level, template_id=d.template.id, question=data["question"], gold_sql=gold,
                naive_sql=data["naive_sql"], expected=data["expected"], noise=data.get("noise"),
                split=splits[pair_id], meta=meta, background=data.get("background") or Overlay(),
                decoy=data.get("decoy") or Overlay()))
    return sorted(tasks, key=lambda t: t.task_id)


def pair_id_of(d: Draft) -> str:
    entity = {k: json_value(v) for k, v in sorted(d.params.items())}
    digest = hashlib.sha256(json.dumps([d.template.id, d.subtype, entity], sort_keys=True,
                                       default=str).encode()).hexdigest()[:12]
    return f"{d.template.id}:{d.subtype}:{digest}"


def database_bookkeeping(verifier: PairVerifier) -> dict[str, Any]:
    try:
        return read_meta(verifier.con, "base")
    except DatabaseError:
        return {}


def ensure_out_dir(out: str | Path) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BenchmarkError(f"output {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out
