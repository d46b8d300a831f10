"""Decoys: one harmless anomaly in a clean twin's own evidence.

A clean twin is drawn among entities whose evidence is naturally clean (:mod:`ehrgym.bench.sampling`), so without
more every copy, contradiction, NULL, impossible value, second unit or out-of-stay row among the rows a question is
about would be the noise's: "abstain (or clean up) whenever the evidence looks odd" would tell the twins apart
perfectly (measured on the paper build: 1.0, :mod:`ehrgym.bench.validity.anomaly`) without judging whether the
oddity matters. Real MIMIC-IV evidence is messy in harmless ways too, and telling a harmless oddity from one that
changes the answer is the skill the benchmark measures.

So the clean twin of a record- or value-level pair whose noise leaves something to see (every such subtype but
``missing_evidence``) is served a *decoy*: the pair's own noise injector, run on the clean entity but aimed at an
evidence row that does not decide the answer (:class:`DecoyContext` puts it first where the injector looks for the
deciding row). Its rows are written exactly as that subtype's noise writes them. It is kept only if the clean answer
holds under every reading of it (:func:`readings`):

* the rows as served, read by the clean gold SQL (it sets no trap) and, for a subtype whose noise is answered after a
  clean-up, by the gold SQL over that clean-up (the careful analyst's reading);
* for a contradiction, the world where the other record is the true one (the injector's ``alternative``);
* for a value made unreadable in place (NULL, impossible), the row holding either end of the item's plausible range.

The noisy twin gets no decoy: each twin then shows one anomaly (or none) of the same kind, on a row that decides the
answer in the noisy twin and on one that does not in the clean twin. The decoy is verified together with the pair's
background (:mod:`ehrgym.bench.background`), which is drawn around its rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ehrgym.bench.background import same_answer
from ehrgym.bench.noise import INJECTORS, cleaning
from ehrgym.bench.noise.base import InjectContext, Injection
from ehrgym.bench.noise.values import finite, on_the_hour, parse_stamp, shift_times, with_value
from ehrgym.bench.sqlrender import render_sql
from ehrgym.bench.templates.base import Template
from ehrgym.db.overlay import Overlay, TableEdit
from ehrgym.db.schema import table_spec
from ehrgym.vocab import NOISE_SUBTYPES

TRIES = 2  # evidence rows tried per pair (a decoy on a row that turns out to matter is dropped, not moved)
POOL = 64  # non-deciding rows drawn (hashed) to pick from, so a cohort's thousands of rows are never all read
DECOYED: frozenset[str] = frozenset(s for s, level in NOISE_SUBTYPES.items()
                                    if level in ("record", "value") and s != "missing_evidence")
UNREADABLE = frozenset({"missing_value", "implausible_value"})  # in place: the row's true value is unknown


@dataclass(frozen=True)
class Decoy:
    subtype: str
    overlay: Overlay
    description: str
    readings: int  # readings verified to give the clean answer
    rows: list[tuple[Any, ...]] = field(default_factory=list, compare=False)  # the clean gold SQL's, as served


@dataclass
class DecoyContext(InjectContext):
    """An :class:`InjectContext` whose 'deciding row' is ``target``, and whose new ids avoid ``taken_ids``."""

    target: int = -1
    taken_ids: frozenset[int] = field(default_factory=frozenset)
    harmless: ClassVar[bool] = True

    def focus_order(self, focus: str | None = None) -> str:
        return f"(e.rowid = {int(self.target)}) DESC, {super().focus_order(focus)}"

    def ids_after(self, anchor: tuple[int, Any], k: int, taken_by_edit: set[int] | None = None) -> list[int]:
        given = set(self.taken_ids) | set(taken_by_edit or ())
        out = super().ids_after(anchor, k, given)
        if taken_by_edit is not None:
            taken_by_edit.update(out)
        return out


TIMED_LIKE_DECIDING = UNREADABLE
"""Subtypes whose decoy goes first to rows timed like the deciding row (on the hour or not). Their noise empties (or
makes impossible) the deciding row in place and their decoy another row, so the two differ only in which row they
touch: in chartevents the deciding row is mostly a stay's first charted slot, always on the hour, and decoys on any
row were off the hour in 5 of 27 chart pairs of the 1k card against none of their noise rows (missing-value noise
told from its decoys at 0.579). Not every subtype: sent there too, encoding-corruption decoys moved away from the
base rows beside them (0.533 -> 0.585-0.602 over four judge seeds)."""


def targets(ctx: InjectContext, avoid: set[int], seed: int, timed_like_deciding: bool = False) -> list[int]:
    """Up to :data:`TRIES` base rowids of evidence rows that do not decide the answer and that ``avoid`` (the rows the
    noise edits) does not name, in a seeded order — with ``timed_like_deciding``, those timed like the deciding row
    (on the hour or not) first (:data:`TIMED_LIKE_DECIDING`)."""
    deciding = ctx.evidence_rows(limit=1)
    skip = set(avoid) | {int(r["__rowid"]) for r in deciding}
    ev = ctx.evidence
    join = render_sql(ev.join, ctx.params, {}) + " " if ev.join else ""
    like = ""
    stamp = deciding[0].get(ev.time_col) if timed_like_deciding and deciding and ev.time_col else None
    if stamp is not None:
        on = on_the_hour(stamp)
        like = f"(date_trunc('hour', e.{ev.time_col}) = e.{ev.time_col}) IS NOT DISTINCT FROM {str(on).upper()} DESC, "
    rows = ctx.query(f"SELECT e.rowid FROM {ctx.base}.{table_spec(ev.table).qualified} e {join}WHERE "
                     f"{ctx.where_sql()} ORDER BY {like}hash(e.rowid, {int(seed)}), e.rowid LIMIT {POOL + len(skip)}")
    return [int(r[0]) for r in rows if int(r[0]) not in skip][:TRIES]


def stray_copy(ctx: DecoyContext) -> Injection | None:
    """An out-of-window decoy: the target row stored again, linked to its stay but timestamped whole days outside
    it — after the stay when the answer is a first event, before it when a last, else either — with its own value
    (:class:`~ehrgym.bench.noise.record.OutOfWindow` writes its rows the same way, but moves their value past the
    answer to set a trap)."""
    ev = ctx.evidence
    if ev.window is None or not ev.time_col:
        return None
    rows = ctx.evidence_rows(limit=1)
    if not rows or rows[0]["__rowid"] != ctx.target:
        return None
    row = rows[0]
    window = ctx.window_of(row)
    if window is None or row.get(ev.time_col) is None:
        return None
    start, end = window
    t = parse_stamp(row[ev.time_col])
    after = {"first": True, "last": False}.get(ev.focus, bool(ctx.rng.integers(0, 2)))
    days = ((end - t).days if after else -((t - start).days)) + (2 + int(ctx.rng.integers(0, 2))) * (1 if after else -1)
    event = ctx.event_rows(row)  # a culture or draw moves whole (its other rows unchanged), as the noise moves it
    copies = [shift_times({k: v for k, v in src.items() if k != "__rowid"}, ev.table, dt.timedelta(days=days))
              for src in event]
    place = ctx.anchor_for(row, copies[0][ev.time_col])  # the event's rows: one patient, one time
    ctx.give_ids(copies, place, set())
    edit = ctx.table_edit(tuple(copies), (place[0],) * len(copies), sources=tuple(event))
    side = "after" if after else "before"
    return Injection(INJECTORS["out_of_window"].spec(Overlay((edit,)), description=(
        f"{len(copies)} {ev.table} row(s) linked to {ev.window.key} {row.get(ev.window.key)} but timestamped "
        f"{abs(days)} days {side} its {'start' if not after else 'time'}")), "answer", None,
        cleaners=(cleaning.keep_in_window,))


def readings(t: Template, subtype: str, inj: Injection, params: dict[str, Any]) -> list[tuple[Overlay, bool]]:
    """(evidence as it may truly be, read over the subtype's clean-up) — see the module docstring."""
    served = inj.noise.overlay
    out = [(served, False)]
    if inj.expected_kind == "answer" and inj.cleaners:
        out.append((served, True))
    if inj.alternative is not None:
        out.append((inj.alternative, False))
    if subtype in UNREADABLE and inj.expected_kind == "abstain":
        ev = t.evidence
        bounds = cleaning.bounds_for(ev, params)
        if bounds is None or ev.value_col is None:
            return []  # nothing says what the row may have held: not verifiable
        for end in bounds:
            edits = []
            for e in served.edits:
                rows = tuple(with_value(ev, r, end) if r.get(ev.value_col) is None or not _plausible(r, ev, bounds)
                             else r for r in e.insert_rows)
                edits.append(TableEdit(e.table, e.delete_rowids, rows, e.insert_after, e.dense_id))
            out.append((Overlay(tuple(edits)), False))
    return out


def _plausible(row: dict[str, Any], ev: Any, bounds: tuple[float, float]) -> bool:
    v = row.get(ev.value_col)
    return v is not None and finite(v) and bounds[0] <= float(v) <= bounds[1]


def make_decoy(verifier: Any, t: Template, subtype: str, ctx: InjectContext, noise: Overlay, clean_sql: str,
               seed: int) -> Decoy | None:
    """The clean twin's decoy for a pair of ``subtype`` (None: the subtype takes none, or no row took one that every
    reading leaves at the clean answer). ``ctx`` is the pair's injection context (its rng is not touched); ``noise``
    the pair's noise, whose rows and ids the decoy avoids."""
    if subtype not in DECOYED:
        return None
    injector = INJECTORS[subtype]
    if not injector.can_corrupt(t) or not injector.accepts(t, ctx.params):
        return None
    avoid = {r for e in noise.edits if e.table == t.evidence.table for r in (*e.delete_rowids, *e.insert_after)}
    id_col = t.evidence.id_col
    taken = frozenset(int(r[id_col]) for e in noise.edits for r in e.insert_rows
                      if id_col and isinstance(r.get(id_col), int))
    clean_rows = verifier.rows(clean_sql)
    for i, target in enumerate(targets(ctx, avoid, seed, subtype in TIMED_LIKE_DECIDING)):
        dctx = DecoyContext(con=ctx.con, template=t, params=dict(ctx.params), clean_value=ctx.clean_value,
                            rng=np.random.default_rng([seed, i]), base=ctx.base, max_ids=ctx.max_ids, reads=ctx.reads,
                            paraphrase=ctx.paraphrase, shown=ctx.shown, places=ctx.places, target=target,
                            taken_ids=taken)
        try:
            inj = stray_copy(dctx) if subtype == "out_of_window" else injector.inject(dctx)
        except Exception:  # noqa: BLE001 — a decoy that cannot be made is simply not served
            inj = None
        if inj is None or inj.params is not None or inj.noise.overlay.is_empty:
            continue
        worlds = readings(t, subtype, inj, ctx.params)
        if not worlds:
            continue
        robust = render_sql(t.gold_sql, inj.robust_params or ctx.params, cleaning.relation(t, ctx.params, inj.cleaners)) \
            if inj.cleaners else clean_sql
        got = []
        for world, cleaned in worlds:  # the first reading is the rows as served, read by the clean gold SQL
            got.append(verifier.rows(robust if cleaned else clean_sql, world))
            if not same_answer(got[-1], clean_rows, t.answer):
                break
        else:
            return Decoy(subtype, inj.noise.overlay, inj.noise.description, len(worlds), got[0])
    return None


def decoy_counts(drafts: list[Any]) -> dict[str, dict[str, int]]:
    """Per decoyed subtype: kept pairs whose clean twin has a decoy (``served``) and whose has none (``none``)."""
    out: dict[str, dict[str, int]] = {}
    for d in drafts:
        if d.subtype in DECOYED:
            got = out.setdefault(d.subtype, {"served": 0, "none": 0})
            got["served" if "decoy" in d.clean else "none"] += 1
    return dict(sorted(out.items()))
