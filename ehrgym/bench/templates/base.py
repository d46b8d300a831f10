"""The template model: one frozen, declarative object per question type.

See ``ehrgym/bench/templates/__init__.py`` for how to write one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.sqlrender import placeholders
from ehrgym.db.schema import table_spec
from ehrgym.errors import BenchmarkError
from ehrgym.vocab import INTENTS, LEVELS, NOISE_SUBTYPES

FOCUS_KINDS = ("first", "last", "max", "min", "any")
TIERS: tuple[int, ...] = (1, 2, 3)
"""Difficulty tiers. 1: a lookup in one clinical table (dictionary joins to resolve a name allowed);
2: joins across clinical tables or a multi-block query (CTE, sub-query, window function);
3: multi-step time logic or a cohort definition (set explicitly on the template)."""


@dataclass(frozen=True)
class Window:
    """The stay an evidence row belongs to: rows timestamped outside it are out of window."""

    table: str  # admissions | icustays
    key: str  # join column shared with the evidence table: hadm_id | stay_id
    start: str  # admittime | intime
    end: str  # dischtime | outtime


ADMISSION_WINDOW = Window("admissions", "hadm_id", "admittime", "dischtime")
ICU_WINDOW = Window("icustays", "stay_id", "intime", "outtime")


@dataclass(frozen=True)
class Evidence:
    """The rows a question's answer rests on, and what the noise injectors may touch.

    ``where`` is a predicate over the evidence table aliased ``e`` with ``{param}`` placeholders,
    e.g. ``"e.hadm_id = {hadm_id} AND e.itemid = {itemid}"``. It is rendered with literals
    (evidence SQL of one task) and with column references (set-based profiling of candidates).
    """

    table: str
    where: str
    key: tuple[str, ...]  # natural key: one row per key in clean data (duplicates/conflicts)
    join: str = ""  # joins after ``FROM <table> e`` the predicate needs (other aliases than e, w, b)
    id_col: str | None = None  # unique row id, renumbered in inserted copies
    time_col: str | None = None
    value_col: str | None = None  # numeric value the answer is computed from
    text_col: str | None = None  # text twin of the value (labevents.value, chartevents.value)
    unit_col: str | None = None
    item_col: str | None = None  # itemid column: plausibility bounds and unit conversions by item
    item_param: str | None = None  # the entity parameter holding that item id
    bounds: tuple[float, float] | None = None  # plausible range when there is no item
    window: Window | None = None
    focus: str = "any"  # which evidence row decides the answer: first|last|max|min|any
    aggregate: bool = True  # False: the answer is one row's value (first/last value …)
    store_col: str | None = None  # a store/update time shifted on re-stored copies
    extreme: str = "high"  # which corrupted extreme moves the answer: high | low (min-type answers)
    category_col: str | None = None  # categorical answer column (care unit …) for conflicts/moves
    # concept domain (ehrgym.bench.concepts) of the concept ``{label}`` names: its item ids select, by the table's
    # ``itemid`` column (every concept-event table names it so), the rows the answer reads, so a robust relation
    # cleans those rows only (see ``cleaning.concept_rows``)
    item_concepts: str | None = None

    def __post_init__(self) -> None:
        spec = table_spec(self.table)
        cols = set(spec.column_names)
        for name in (*self.key, self.id_col, self.time_col, self.value_col, self.text_col, self.unit_col,
                     self.item_col, self.store_col, self.category_col):
            if name is not None and name not in cols:
                raise BenchmarkError(f"evidence column {name!r} is not a column of {spec.qualified}")
        if self.extreme not in ("high", "low"):
            raise BenchmarkError(f"evidence extreme {self.extreme!r} must be 'high' or 'low'")
        if self.focus not in FOCUS_KINDS:
            raise BenchmarkError(f"evidence focus {self.focus!r} not in {FOCUS_KINDS}")

    @property
    def qualified(self) -> str:
        return table_spec(self.table).qualified


@dataclass(frozen=True)
class Premise:
    """How to make a false premise: swap ``param`` (and its question text ``text``) for a value
    the entity never had. ``candidates_sql`` (literals filled from the entity) returns columns
    named ``param`` and ``text``: the values for which the evidence is empty."""

    param: str
    text: str
    candidates_sql: str


@dataclass(frozen=True)
class TimeWindow:
    """Parameters holding the question's time window, for temporal mismatch.

    Either ``start``/``end`` (timestamps) or ``year`` (an integer) is set. ``scope_sql`` (literals
    filled from the entity) returns one row (first, last) timestamp of the record the window must
    lie in (the patient's record, or the whole database for population questions).
    """

    scope_sql: str
    start: str | None = None
    end: str | None = None
    year: str | None = None


@dataclass(frozen=True)
class Template:
    id: str
    intent: str
    level: str
    paraphrases: tuple[str, ...]
    sampler_sql: str
    gold_sql: str
    answer: AnswerSpec
    evidence: Evidence
    noise: tuple[str, ...]
    entity_ref: str | None = None  # parameter naming a subject/admission/stay (nonexistent entity)
    lexical: str | None = None  # parameter holding a name the SQL matches on (lexical variation)
    premise: Premise | None = None
    time_window: TimeWindow | None = None
    description: str = ""
    tier: int = 0  # difficulty tier (TIERS); 0: inferred from the gold SQL by ``infer_tier`` (1 or 2)
    params: tuple[str, ...] = field(default=())  # filled by __post_init__: question + SQL params

    def __post_init__(self) -> None:
        """Validate the definition: a broken template fails here, naming itself and the invariants it
        breaks, rather than later as a confusing failure of a build or a test. The checks that need
        the gold SQL rendered (it parses, it is not trivial, the listed noise can corrupt it) run once
        the others pass."""
        problems = []
        if self.intent not in INTENTS:
            problems.append(f"intent {self.intent!r} not in {INTENTS}")
        elif not self.id.startswith(self.intent + "."):
            problems.append(f"id must start with its intent ({self.intent + '.'!r})")
        if self.level not in LEVELS:
            problems.append(f"level {self.level!r} not in {LEVELS}")
        if len(set(self.paraphrases)) < 3:
            problems.append("needs at least 3 distinct paraphrases")
        if not self.noise:
            problems.append("lists no noise subtype (list the subtypes that make sense for the question)")
        unknown = [s for s in self.noise if s not in NOISE_SUBTYPES]
        if unknown:
            problems.append(f"unknown noise subtypes {unknown}")
        gold_names = set(placeholders(self.gold_sql))
        if self.evidence.table not in gold_names:
            problems.append(f"gold_sql must read the evidence through the placeholder {{{self.evidence.table}}}")
        needed = set()
        for p in self.paraphrases:
            needed |= set(placeholders(p))
        needed |= gold_names - {self.evidence.table}
        needed |= set(placeholders(self.evidence.where)) | set(placeholders(self.evidence.join))
        if self.lexical and self.lexical not in gold_names:
            problems.append(f"lexical parameter {self.lexical!r} must appear in gold_sql (the SQL matches on the name)")
        if self.tier not in (0, *TIERS):
            problems.append(f"tier {self.tier!r} not in {TIERS} (or 0 to infer it)")
        if self.level == "patient":
            if self.entity_ref not in ENTITY_REFS:
                problems.append(f"a patient-level template needs entity_ref in {ENTITY_REFS}, got {self.entity_ref!r}")
            if "subject_id" not in needed:
                problems.append("a patient-level template needs the parameter subject_id")
        if self.entity_ref:
            silent = [p for p in self.paraphrases if "{" + self.entity_ref + "}" not in p and "{subject_id}" not in p]
            if silent:
                problems.append(f"paraphrases must name the entity ({{{self.entity_ref}}} or {{subject_id}}): {silent}")
        if not problems:
            object.__setattr__(self, "params", tuple(sorted(needed)))
            problems += _sql_and_noise_problems(self)
        if problems:
            raise BenchmarkError(f"template {self.id!r}: " + "; ".join(problems))
        if self.tier == 0:
            object.__setattr__(self, "tier", infer_tier(self))

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling (build workers receive pickled templates) first imports the template modules:
        they register the curated names (lexicon) and unit conversions the noise injectors read."""
        from ehrgym.bench.templates.registry import import_template_modules

        import_template_modules()
        self.__dict__.update(state)


ENTITY_REFS = ("subject_id", "hadm_id", "stay_id")
MIN_GOLD_COMPLEXITY = 5  # sql_complexity of the clean gold SQL: a template is more than a single lookup


def _sql_and_noise_problems(t: Template) -> list[str]:
    """Invariants that need the noise package: the clean gold SQL parses and is not trivial, and
    every listed noise subtype is one its injector can apply (the evidence fields it needs exist)."""
    import sqlglot

    from ehrgym.bench.complexity import sql_complexity
    from ehrgym.bench.noise import INJECTORS
    from ehrgym.bench.noise.cleaning import plain_relation
    from ehrgym.bench.sqlrender import render_sql

    problems = []
    plain = render_sql(t.gold_sql, {p: 1 for p in t.params}, plain_relation(t))
    try:
        sqlglot.parse_one(plain, read="duckdb")
    except sqlglot.errors.ParseError as exc:
        problems.append(f"gold_sql does not parse: {str(exc).splitlines()[0]}")
    else:
        if sql_complexity(plain) < MIN_GOLD_COMPLEXITY:
            problems.append(f"gold_sql complexity {sql_complexity(plain)} < {MIN_GOLD_COMPLEXITY}")
    idle = [s for s in t.noise if not INJECTORS[s].can_corrupt(t)]
    if idle:
        problems.append(f"noise subtypes {idle} cannot corrupt this template (evidence fields they need are missing)")
    return problems


def infer_tier(t: Template) -> int:
    """The documented default tier of a template whose ``tier`` is not set explicitly.

    Tier 1 when the clean gold SQL reads one clinical table (any further tables are dictionaries,
    ``d_*``, joined to resolve a name) in a single query block without a window function; tier 2
    otherwise (joins across clinical tables, CTEs, sub-queries, window functions). Tier 3 —
    multi-step time logic or a cohort definition — is never inferred: the template states it.
    """
    import sqlglot
    from sqlglot import exp

    from ehrgym.bench.sqlrender import render_sql

    sql = render_sql(t.gold_sql, {p: 1 for p in t.params}, {t.evidence.table: table_spec(t.evidence.table).qualified})
    tree = sqlglot.parse_one(sql, read="duckdb")
    clinical = {tb.name.lower() for tb in tree.find_all(exp.Table) if not tb.name.lower().startswith("d_")}
    blocks = sum(1 for _ in tree.find_all(exp.Select))
    windows = any(True for _ in tree.find_all(exp.Window))
    return 1 if len(clinical) <= 1 and blocks == 1 and not windows else 2
