"""Record-level noise: rows deleted, re-stored, misplaced in time, contradicted."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from ehrgym.bench.noise import cleaning
from ehrgym.bench.noise.base import ROWID, InjectContext, Injection, Injector, register_injector
from ehrgym.bench.noise.values import (conflicting, finite, parse_stamp, shift_times, shifted, typed_value,
                                       value_text)
from ehrgym.db.overlay import Overlay, TableEdit

MAX_DELETED_ROWS = 400


def _copy(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != ROWID}


def _set_value(ctx: InjectContext, row: dict[str, Any], value: float | None) -> dict[str, Any]:
    ev = ctx.evidence
    out = dict(row)
    out[ev.value_col] = typed_value(ev.table, ev.value_col, value)
    if ev.text_col:
        out[ev.text_col] = value_text(value)
    return out


def _other_category(ctx: InjectContext, current: Any) -> Any:
    """Another value of the evidence's categorical column, as found in the database."""
    ev = ctx.evidence
    from ehrgym.db.schema import table_spec

    spec = table_spec(ev.table)
    values = [r[0] for r in ctx.query(f"SELECT DISTINCT {ev.category_col} FROM {ctx.base}.{spec.qualified} "
                                      f"WHERE {ev.category_col} IS NOT NULL ORDER BY 1 LIMIT 50")]
    values = [v for v in values if v != current]
    if not values:
        return None
    return values[int(ctx.rng.integers(0, len(values)))]


@register_injector
class MissingEvidence(Injector):
    subtype = "missing_evidence"
    description = "the rows the question presupposes were deleted"

    def inject(self, ctx: InjectContext) -> Injection | None:
        rows = ctx.evidence_rows(order="e.rowid", limit=MAX_DELETED_ROWS + 1)
        if not rows or len(rows) > MAX_DELETED_ROWS:
            return None
        edit = TableEdit(ctx.evidence.table, tuple(r[ROWID] for r in rows))
        return Injection(self.spec(Overlay((edit,)), description=f"{len(rows)} {ctx.evidence.table} rows deleted"),
                         "abstain", "insufficient_evidence")


@register_injector
class DuplicateRecords(Injector):
    subtype = "duplicate_records"
    description = "evidence rows stored twice (re-stored copies with new ids)"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        rows = ctx.evidence_rows(limit=None)
        if not rows:
            return None
        k = 1 if ctx.template.level == "patient" else min(max(1, math.ceil(0.1 * len(rows))), 25, len(rows))
        chosen = rows[:k]
        ids = ctx.new_ids(k)
        copies = []
        for i, row in enumerate(chosen):
            c = _copy(row)
            if ev.id_col:
                c[ev.id_col] = ids[i]
            if ev.store_col and c.get(ev.store_col) is not None:
                c[ev.store_col] = (parse_stamp(c[ev.store_col]) + dt.timedelta(minutes=7 + i)).isoformat(sep=" ")
            copies.append(c)
        edit = TableEdit(ev.table, (), tuple(copies))
        return Injection(self.spec(Overlay((edit,)), description=f"{k} {ev.table} rows stored twice"),
                         "answer", cleaners=(cleaning.deduplicate,))


@register_injector
class OutOfWindow(Injector):
    subtype = "out_of_window"
    requires = ("window", "time_col")
    description = "rows linked to the stay but timestamped outside it"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        rows = ctx.evidence_rows(limit=None)
        if not rows:
            return None
        focus = rows[0]
        window = ctx.window_of(focus)
        if window is None:
            return None
        start, end = window
        t = parse_stamp(focus[ev.time_col])
        hours_before = 24 + int(ctx.rng.integers(1, 48))
        hours_after = 24 + int(ctx.rng.integers(1, 48))
        before = shift_times(_copy(focus), ev.table, (start - dt.timedelta(hours=hours_before)) - t)
        after = shift_times(_copy(focus), ev.table, (end + dt.timedelta(hours=hours_after)) - t)
        if ev.value_col:
            values = [r[ev.value_col] for r in rows if finite(r.get(ev.value_col))]
            if not values:
                return None
            bounds = cleaning.bounds_for(ev, ctx.params)
            after = _set_value(ctx, after, shifted(max(values), True, bounds))
            before = _set_value(ctx, before, shifted(min(values), False, bounds))
        elif ev.category_col:
            other = _other_category(ctx, focus.get(ev.category_col))
            if other is None:
                return None
            before[ev.category_col] = other
            after[ev.category_col] = other
        ids = ctx.new_ids(2)
        if ev.id_col:
            before[ev.id_col], after[ev.id_col] = ids
        edit = TableEdit(ev.table, (), (before, after))
        return Injection(self.spec(Overlay((edit,)), description=(
            f"2 {ev.table} rows linked to {ev.window.key} {focus.get(ev.window.key)} but timestamped "
            f"{hours_before} h before and {hours_after} h after it")), "answer", cleaners=(cleaning.keep_in_window,))


@register_injector
class ConflictingRecords(Injector):
    subtype = "conflicting_records"
    description = "a contradictory row with the same natural key (same sample, other value)"

    def fits(self, template) -> bool:
        return bool(template.evidence.value_col or template.evidence.category_col)

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        rows = ctx.evidence_rows(limit=1)
        if not rows:
            return None
        focus = rows[0]
        c = _copy(focus)
        if ev.value_col:
            if not finite(focus.get(ev.value_col)):
                return None
            c = _set_value(ctx, c, conflicting(focus[ev.value_col], ctx.rng, cleaning.bounds_for(ev, ctx.params)))
            if c[ev.value_col] == focus[ev.value_col]:
                c = _set_value(ctx, c, focus[ev.value_col] + 1)
        else:
            other = _other_category(ctx, focus.get(ev.category_col))
            if other is None:
                return None
            c[ev.category_col] = other
        if ev.id_col:
            c[ev.id_col] = ctx.new_ids(1)[0]
        if ev.store_col and c.get(ev.store_col) is not None:
            c[ev.store_col] = (parse_stamp(c[ev.store_col]) + dt.timedelta(minutes=3)).isoformat(sep=" ")
        edit = TableEdit(ev.table, (), (c,))
        shown = c.get(ev.value_col) if ev.value_col else c.get(ev.category_col)
        was = focus.get(ev.value_col) if ev.value_col else focus.get(ev.category_col)
        return Injection(self.spec(Overlay((edit,)), description=(
            f"a second {ev.table} row with the same {', '.join(ev.key)} says {shown!r} instead of {was!r}")),
            "abstain", "conflicting_evidence")
