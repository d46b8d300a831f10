"""The noise-injector model and its one registry.

An injector is one small object per subtype of DESIGN.md's taxonomy. ``applies(template)`` says
whether it can corrupt a template at all; ``inject(ctx)`` returns an :class:`Injection` for one
sampled entity — the :class:`~ehrgym.bench.task.NoiseSpec` (overlay and/or question edit), the
expected outcome, and for recoverable noise the cleaners whose robust gold SQL recovers the
answer — or ``None`` when this entity cannot carry the noise.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

import duckdb
import numpy as np

from ehrgym.bench.noise.cleaning import Cleaner
from ehrgym.bench.sqlrender import render_sql
from ehrgym.bench.task import NoiseSpec
from ehrgym.bench.templates.base import Template
from ehrgym.db.overlay import to_json_value
from ehrgym.db.schema import table_spec
from ehrgym.errors import BenchmarkError
from ehrgym.vocab import NOISE_SUBTYPES

ROWID = "__rowid"


@dataclass(frozen=True)
class Injection:
    noise: NoiseSpec
    expected_kind: str  # answer | abstain
    reason: str | None = None
    params: dict[str, Any] | None = None  # parameters of the noisy question (None: unchanged)
    question: str | None = None  # a replacement question (out of scope)
    cleaners: tuple[Cleaner, ...] = ()  # robust gold SQL = gold SQL over these cleaners
    robust_params: dict[str, Any] | None = None  # parameters of the robust gold SQL (None: clean ones)


@dataclass
class InjectContext:
    """What an injector may look at: the clean database (through ``con``), the entity, its answer."""

    con: duckdb.DuckDBPyConnection  # clean views over the read-only base catalog ``base``
    template: Template
    params: dict[str, Any]
    clean_value: Any
    rng: np.random.Generator
    base: str = "base"
    max_ids: dict[tuple[str, str], int] = field(default_factory=dict)  # shared cache across contexts
    paraphrase: int = 0  # index of the paraphrase both twins are written in

    @property
    def evidence(self):
        return self.template.evidence

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql).fetchall()

    def where_sql(self, params: dict[str, Any] | None = None) -> str:
        return render_sql(self.evidence.where, params or self.params, {})

    def evidence_rows(self, order: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Evidence rows of the clean base with their base ``rowid`` (key ``__rowid``), JSON-ready."""
        ev = self.evidence
        spec = table_spec(ev.table)
        order_sql = order or self.focus_order()
        join = render_sql(ev.join, self.params, {}) + " " if ev.join else ""
        sql = (f"SELECT e.rowid AS {ROWID}, e.* FROM {self.base}.{spec.qualified} e {join}WHERE {self.where_sql()} "
               f"ORDER BY {order_sql}")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cur = self.con.execute(sql)
        names = [d[0] for d in cur.description]
        return [{n: (int(v) if n == ROWID else to_json_value(v)) for n, v in zip(names, rec)}
                for rec in cur.fetchall()]

    def focus_order(self, focus: str | None = None) -> str:
        """ORDER BY putting the row that decides the answer first (ties broken by rowid)."""
        ev = self.evidence
        focus = focus or ev.focus
        t, v = (f"e.{ev.time_col}" if ev.time_col else None), (f"e.{ev.value_col}" if ev.value_col else None)
        if focus == "first" and t:
            return f"{t} ASC, e.rowid"
        if focus == "last" and t:
            return f"{t} DESC, e.rowid"
        if focus == "max" and v:
            return f"{v} DESC NULLS LAST, {t or 'e.rowid'}, e.rowid"
        if focus == "min" and v:
            return f"{v} ASC NULLS LAST, {t or 'e.rowid'}, e.rowid"
        if v:
            return f"abs({v} - avg({v}) OVER ()) DESC NULLS LAST, e.rowid"
        return f"{t + ', ' if t else ''}e.rowid"

    def new_ids(self, k: int) -> list[int]:
        """``k`` unused values of the evidence table's id column."""
        ev = self.evidence
        if not ev.id_col:
            return []
        key = (ev.table, ev.id_col)
        if key not in self.max_ids:
            spec = table_spec(ev.table)
            top = self.con.execute(f"SELECT max({ev.id_col}) FROM {self.base}.{spec.qualified}").fetchone()[0]
            self.max_ids[key] = int(top or 0)
        start = self.max_ids[key] + 1 + int(self.rng.integers(1, 1000))
        return list(range(start, start + k))

    def window_of(self, row: dict[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
        """Start and end of the admission/stay an evidence row is linked to."""
        w = self.evidence.window
        if w is None or row.get(w.key) is None:
            return None
        spec = table_spec(w.table)
        got = self.con.execute(f"SELECT {w.start}, {w.end} FROM {self.base}.{spec.qualified} "
                               f"WHERE {w.key} = ?", [row[w.key]]).fetchone()
        if got is None or got[0] is None or got[1] is None:
            return None
        return got[0], got[1]


class Injector:
    """Base class: set ``subtype``; ``requires`` names Evidence attributes that must be set."""

    subtype: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    @property
    def level(self) -> str:
        return NOISE_SUBTYPES[self.subtype]

    def applies(self, template: Template) -> bool:
        if self.subtype not in template.noise:
            return False
        return all(getattr(template.evidence, a) for a in self.requires) and self.fits(template)

    def fits(self, template: Template) -> bool:
        """Extra static conditions (override)."""
        return True

    def accepts(self, template: Template, params: dict[str, Any]) -> bool:
        """Cheap per-entity pre-check before any SQL runs (override)."""
        return True

    def inject(self, ctx: InjectContext) -> Injection | None:
        raise NotImplementedError

    def spec(self, overlay=None, question_edit=None, description: str = "") -> NoiseSpec:
        from ehrgym.db.overlay import Overlay

        return NoiseSpec(self.level, self.subtype, overlay or Overlay(), question_edit,
                         description or self.description)


INJECTORS: dict[str, Injector] = {}


def register_injector(cls: type[Injector]) -> type[Injector]:
    """Class decorator: one instance per subtype in the one registry."""
    if cls.subtype not in NOISE_SUBTYPES:
        raise BenchmarkError(f"{cls.__name__}: unknown noise subtype {cls.subtype!r}")
    if cls.subtype in INJECTORS:
        raise BenchmarkError(f"noise subtype {cls.subtype!r} registered twice")
    INJECTORS[cls.subtype] = cls()
    return cls


def get_injector(subtype: str) -> Injector:
    from ehrgym.bench import noise  # noqa: F401  (registers the injectors)

    try:
        return INJECTORS[subtype]
    except KeyError:
        raise BenchmarkError(f"no injector for noise subtype {subtype!r}; known: {sorted(INJECTORS)}") from None
