"""Value-level noise: impossible values, other units, missing numbers, numbers stored as text."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from ehrgym.bench.noise import cleaning
from ehrgym.bench.noise.base import ROWID, InjectContext, Injection, Injector, register_injector
from ehrgym.bench.noise.units import conversion_for
from ehrgym.bench.noise.values import (MISSING_PLACEHOLDERS, corrupted_text, finite, implausible, shift_times,
                                       typed_value, value_text)
from ehrgym.db.overlay import Overlay, TableEdit


def _focus(ctx: InjectContext) -> dict[str, Any] | None:
    rows = ctx.evidence_rows(limit=1)
    if not rows or not finite(rows[0].get(ctx.evidence.value_col)):
        return None
    return rows[0]


def _focus_rows(ctx: InjectContext) -> list[dict[str, Any]]:
    """The rows to corrupt: the deciding row, or for a population aggregate over many rows the
    most influential 10 % (at most 25) so that the corruption is visible in the aggregate."""
    ev = ctx.evidence
    if ctx.template.level == "patient" or not ev.aggregate or ev.focus != "any":
        row = _focus(ctx)
        return [row] if row is not None else []
    rows = [r for r in ctx.evidence_rows(limit=None) if finite(r.get(ev.value_col))]
    k = min(max(1, math.ceil(0.1 * len(rows))), 25)
    return rows[:k]


def _replace_many(ctx: InjectContext, rows: list[dict[str, Any]], changes: list[dict[str, Any]]) -> TableEdit:
    new_rows = []
    for row, ch in zip(rows, changes):
        new = {k: v for k, v in row.items() if k != ROWID}
        new.update(ch)
        new_rows.append(new)
    return TableEdit(ctx.evidence.table, tuple(r[ROWID] for r in rows), tuple(new_rows))


def _replace(ctx: InjectContext, row: dict[str, Any], changes: dict[str, Any]) -> TableEdit:
    new = {k: v for k, v in row.items() if k != ROWID}
    new.update(changes)
    return TableEdit(ctx.evidence.table, (row[ROWID],), (new,))


def _extra(ctx: InjectContext, row: dict[str, Any], changes: dict[str, Any]) -> TableEdit:
    """A new row next to ``row`` (one minute earlier for first-type answers, later otherwise)."""
    ev = ctx.evidence
    minutes = -1 if ev.focus == "first" else 1
    new = shift_times({k: v for k, v in row.items() if k != ROWID}, ev.table, dt.timedelta(minutes=minutes))
    new.update(changes)
    if ev.id_col:
        new[ev.id_col] = ctx.new_ids(1)[0]
    return TableEdit(ev.table, (), (new,))


def _value_changes(ctx: InjectContext, value: float | None, text: str | None) -> dict[str, Any]:
    ev = ctx.evidence
    out: dict[str, Any] = {ev.value_col: typed_value(ev.table, ev.value_col, value)}
    if ev.text_col:
        out[ev.text_col] = text
    return out


@register_injector
class ImplausibleValue(Injector):
    subtype = "implausible_value"
    requires = ("value_col",)
    description = "a physiologically impossible value (decimal slip or sign error)"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        bounds = cleaning.bounds_for(ev, ctx.params)
        row = _focus(ctx)
        if row is None or bounds is None:
            return None
        bad = implausible(row[ev.value_col], bounds, low=ev.extreme == "low")
        if bad is None:
            return None
        changes = _value_changes(ctx, bad, value_text(bad))
        desc = f"{ev.value_col} {row[ev.value_col]!r} → {bad!r} (plausible {bounds[0]:g}–{bounds[1]:g})"
        if not ev.aggregate:
            return Injection(self.spec(Overlay((_replace(ctx, row, changes),)), description=desc),
                             "abstain", "implausible_value")
        return Injection(self.spec(Overlay((_extra(ctx, row, changes),)), description="an extra row with " + desc),
                         "answer", cleaners=(cleaning.drop_implausible,))


@register_injector
class UnitMismatch(Injector):
    subtype = "unit_mismatch"
    requires = ("value_col", "unit_col", "item_col", "item_param")
    description = "a value recorded in another unit, with the unit column changed accordingly"

    def accepts(self, template, params) -> bool:
        conv = conversion_for(params.get(template.evidence.item_param))
        # a unit stored under another item (°C vs °F) is only unambiguous within one patient's stay:
        # a cohort may legitimately hold both items
        return conv is not None and (conv.alt_itemid is None or template.level == "patient")

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        conv = conversion_for(ctx.params.get(ev.item_param))
        rows = _focus_rows(ctx)
        if conv is None or not rows:
            return None
        changes = []
        for row in rows:
            alt = conv.to_alt(row[ev.value_col])
            ch = _value_changes(ctx, alt, value_text(alt))
            ch[ev.unit_col] = conv.alt_unit
            if conv.alt_itemid is not None:
                ch[ev.item_col] = conv.alt_itemid
            changes.append(ch)
        first = rows[0][ev.value_col]
        desc = (f"{first!r} {conv.unit} recorded as {changes[0][ev.value_col]!r} {conv.alt_unit}"
                + (f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""))
        return Injection(self.spec(Overlay((_replace_many(ctx, rows, changes),)), description=desc),
                         "answer", cleaners=(cleaning.convert_units,))


@register_injector
class MissingValue(Injector):
    subtype = "missing_value"
    requires = ("value_col",)
    description = "the numeric result is missing (NULL, text placeholder)"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        row = _focus(ctx)
        if row is None:
            return None
        placeholder = MISSING_PLACEHOLDERS[int(ctx.rng.integers(0, len(MISSING_PLACEHOLDERS)))]
        changes = _value_changes(ctx, None, placeholder)
        desc = f"{ev.value_col} NULL" + (f", {ev.text_col} {placeholder!r}" if ev.text_col else "")
        if not ev.aggregate:
            return Injection(self.spec(Overlay((_replace(ctx, row, changes),)), description=desc),
                             "abstain", "insufficient_evidence")
        return Injection(self.spec(Overlay((_extra(ctx, row, changes),)), description="an extra row with " + desc),
                         "answer", cleaners=(cleaning.drop_valueless,))


@register_injector
class EncodingCorruption(Injector):
    subtype = "encoding_corruption"
    requires = ("value_col", "text_col")
    description = "the number stored only as text ('1,2', '<0.3', '15.4 H')"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        rows = _focus_rows(ctx)
        if not rows:
            return None
        changes = []
        for row in rows:
            unit = row.get(ev.unit_col) if ev.unit_col else None
            text = corrupted_text(row[ev.value_col], ctx.rng, row.get("ref_range_upper"), row.get("ref_range_lower"),
                                  unit if unit and unit not in ("None", "units") else None)
            changes.append(_value_changes(ctx, None, text))
        desc = (f"{ev.value_col} {rows[0][ev.value_col]!r} stored only as text {changes[0][ev.text_col]!r}"
                + (f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""))
        return Injection(self.spec(Overlay((_replace_many(ctx, rows, changes),)), description=desc),
                         "answer", cleaners=(cleaning.parse_text,))
