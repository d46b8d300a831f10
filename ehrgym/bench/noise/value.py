"""Value-level noise: impossible values, other units, missing numbers, numbers stored as text."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from ehrgym.bench.noise import cleaning
from ehrgym.bench.noise.base import ROWID, InjectContext, Injection, Injector, batch_size, register_injector
from ehrgym.bench.noise.teaching import TeachingCard
from ehrgym.bench.templates.base import Template
from ehrgym.bench.noise.units import conversion_for
from ehrgym.bench.noise.values import (MISSING_PLACEHOLDERS, co_stored, decimals_of, derivable, finite,
                                       format_like, implausible, number_forms, on_the_hour, shift_times, typed_value,
                                       with_decimals)
from ehrgym.db.overlay import Overlay, TableEdit
from ehrgym.db.schema import table_spec


def _focus(ctx: InjectContext) -> dict[str, Any] | None:
    rows = ctx.evidence_rows(limit=1)
    if not rows or not finite(rows[0].get(ctx.evidence.value_col)):
        return None
    return rows[0]


def _focus_rows(ctx: InjectContext, patient_batch: bool = True) -> list[dict[str, Any]]:
    """The rows to corrupt: the deciding row, or for an aggregate over many values the 20 % (at
    most 50, :func:`~ehrgym.bench.noise.base.batch_size`) with the highest values (lowest for
    min-type answers), so that the corruption moves the aggregate one way and visibly (for one
    patient only with ``patient_batch``: a unit slip of one row already moves a patient's sum)."""
    ev = ctx.evidence
    if not ev.aggregate or ev.focus != "any" or (ctx.template.level == "patient" and not patient_batch):
        row = _focus(ctx)
        return [row] if row is not None else []
    n, rows = ctx.evidence_batch(order=ctx.one_sided_order(), finite_values=True)
    return rows[:batch_size(n)]


RANGE_COLUMNS = ("ref_range_lower", "ref_range_upper")


def _with_co_stored(ctx: InjectContext, row: dict[str, Any], changes: dict[str, Any], scale: bool) -> dict[str, Any]:
    """``changes`` to ``row`` plus those of the columns stored with its value (:func:`co_stored`)."""
    ev = ctx.evidence
    new = co_stored(ev.table, ev.value_col or "", row, {**row, **changes}, scale)
    return {k: v for k, v in new.items() if k in changes or v != row.get(k)}


def _replace_many(ctx: InjectContext, rows: list[dict[str, Any]], changes: list[dict[str, Any]]) -> TableEdit:
    """Rows edited in place: each edited copy takes the original's id and scan position."""
    new_rows = []
    for row, ch in zip(rows, changes):
        new = {k: v for k, v in row.items() if k != ROWID}
        new.update(ch)
        new_rows.append(new)
    rowids = tuple(r[ROWID] for r in rows)
    return ctx.table_edit(tuple(new_rows), rowids, rowids)


def _replace(ctx: InjectContext, row: dict[str, Any], changes: dict[str, Any]) -> TableEdit:
    return _replace_many(ctx, [row], [changes])


def _extra(ctx: InjectContext, row: dict[str, Any], changes: dict[str, Any]) -> TableEdit:
    """A new row next to ``row``: one minute earlier for first-type answers, later otherwise — or, in a series charted
    on the hour (:func:`_charted_on_the_hour`) and in a culture, at ``row``'s own time, a second entry of that slot."""
    ev = ctx.evidence
    # a culture's results all carry its collection time: an extra result a minute away was a culture of one
    # antibiotic (under a new specimen id) or a specimen collected at two times (under its own)
    same_time = _charted_on_the_hour(ctx) or ev.table == "microbiologyevents"
    minutes = 0 if same_time else -1 if ev.focus == "first" else 1
    new = shift_times({k: v for k, v in row.items() if k != ROWID}, ev.table, dt.timedelta(minutes=minutes))
    new.update(changes)
    own = ctx.anchor_for(row)
    place = ctx.before(*own) if minutes < 0 else own  # a minute apart: right before / after its source
    if ev.id_col:
        new[ev.id_col] = ctx.ids_after(place, 1)[0]
    return ctx.table_edit((new,), (place[0],), sources=(row,))


def _charted_on_the_hour(ctx: InjectContext) -> bool:
    """Whether every evidence row of the entity (two at least) is timed on the hour — vital signs on the charting grid.
    A row a minute off it would then be the only one of its series, and the storage judge reads exactly that: on the
    1k card the extra rows of missing and implausible values in chartevents were off the hour in 9 of 11 cases
    against none of the 33 rows beside them (balanced accuracy 0.91 in that table)."""
    ev = ctx.evidence
    if not ev.time_col:
        return False
    stamps = [r.get(ev.time_col) for r in ctx.evidence_rows()]
    if len(stamps) < 2 or any(v is None for v in stamps):
        return False
    return all(on_the_hour(v) for v in stamps)


def _base_texts(ctx: InjectContext, digits: bool) -> list[str]:
    """Text values the base stores where the number is missing, most frequent first: of the same
    item when the base has some, else of the whole table (``digits``: only number-bearing ones)."""
    ev = ctx.evidence
    if not (ev.text_col and ev.value_col):
        return []
    src = f"{ctx.base}.{table_spec(ev.table).qualified}"
    cond = f"{ev.value_col} IS NULL AND {ev.text_col} IS NOT NULL AND " + (
        "" if digits else "NOT ") + f"regexp_matches({ev.text_col}, '[0-9]')"
    scopes = []
    if ev.item_col and ev.item_param and ev.item_param in ctx.params:
        scopes.append(f"{ev.item_col} = {int(ctx.params[ev.item_param])} AND ")
    scopes.append("")
    for scope in scopes:
        key = ("texts", ev.table, scope, cond)  # one scan per table/item and build, not per pair
        if key not in ctx.max_ids:
            ctx.max_ids[key] = [r[0] for r in ctx.query(
                f"SELECT {ev.text_col}, count(*) AS n FROM {src} WHERE {scope}{cond} "
                f"GROUP BY 1 ORDER BY n DESC, 1 LIMIT 50")]
        if ctx.max_ids[key]:
            return list(ctx.max_ids[key])
    return []


MISSING_COLUMNS = ("comments", "flag", "dilution_comparison")
"""Columns a result without a number carries differently from a numeric one (the reason sits in the comments;
no abnormal flag): copied, with the text column, from the base's own results without a number."""


RESULT_ROWS = {"microbiologyevents": "ab_itemid IS NOT NULL"}
"""For tables without an item column: the rows that are results of the evidence's kind (susceptibility rows,
not organism or negative-culture rows), whose own missing numbers :func:`_base_missing` copies."""


def _base_missing(ctx: InjectContext) -> list[tuple[dict[str, Any], int]]:
    """How the base stores results of the same item without a number: ``({column: value}, rows)`` for the
    text column and :data:`MISSING_COLUMNS` the table has, most frequent first (empty: the item has none)."""
    ev = ctx.evidence
    if not ev.value_col:
        return []
    names = table_spec(ev.table).column_names
    cols = [c for c in ((ev.text_col,) if ev.text_col else ()) + MISSING_COLUMNS if c in names]
    if not cols:
        return []
    item = int(ctx.params[ev.item_param]) if ev.item_col and ev.item_param and ev.item_param in ctx.params else None
    key = ("missing", ev.table, item)
    if key not in ctx.max_ids:
        src = f"{ctx.base}.{table_spec(ev.table).qualified}"
        scope = f"{ev.item_col} = {item} AND " if item is not None else (
            f"{RESULT_ROWS[ev.table]} AND " if ev.table in RESULT_ROWS else "")
        # results whose text still carries a number are the base's own numbers stored as text, not missing ones
        numberless = f" AND NOT coalesce(regexp_matches({ev.text_col}, '[0-9]'), FALSE)" if ev.text_col else ""
        ctx.max_ids[key] = [(dict(zip(cols, r[:-1])), int(r[-1])) for r in ctx.query(
            f"SELECT {', '.join(cols)}, count(*) AS n FROM {src} WHERE {scope}{ev.value_col} IS NULL{numberless} "
            f"GROUP BY ALL ORDER BY n DESC, {', '.join(f'{c} NULLS FIRST' for c in cols)} LIMIT 50")]
    return list(ctx.max_ids[key])


def _item_decimals(ctx: InjectContext, itemid: int) -> int | None:
    """The most common number of decimals of the base's values of ``itemid`` (None: no values)."""
    ev = ctx.evidence
    key = ("decimals", ev.table, int(itemid))
    if key in ctx.max_ids:
        return ctx.max_ids[key]
    src = f"{ctx.base}.{table_spec(ev.table).qualified}"
    vals = [r[0] for r in ctx.query(f"SELECT {ev.value_col} FROM {src} WHERE {ev.item_col} = {int(itemid)} "
                                    f"AND {ev.value_col} IS NOT NULL LIMIT 500")]
    if not vals:
        ctx.max_ids[key] = None
        return None
    counts: dict[int, int] = {}
    for v in vals:
        counts[decimals_of(v)] = counts.get(decimals_of(v), 0) + 1
    ctx.max_ids[key] = max(sorted(counts), key=lambda d: counts[d])
    return ctx.max_ids[key]


def _unit_readable(ctx: InjectContext, bounds: tuple[float, float]):
    """True for a value that reads as a plausible value of the item in another unit it is
    recorded in (creatinine 80 = 80 µmol/L), so it cannot stand for an impossible one."""
    ev = ctx.evidence
    conv = conversion_for(ctx.params.get(ev.item_param)) if ev.item_param else None
    if conv is None:
        return None
    lo, hi = bounds
    return lambda v: lo <= (v - conv.offset) / conv.scale <= hi


def _value_changes(ctx: InjectContext, value: float | None, text: str | None) -> dict[str, Any]:
    ev = ctx.evidence
    out: dict[str, Any] = {ev.value_col: typed_value(ev.table, ev.value_col, value)}
    if ev.text_col:
        out[ev.text_col] = text
    return out


class _UnreadableValue(Injector):
    """A value that cannot be used: abstain when it alone decides the answer, answer without it in an
    aggregate; never on a column that other columns give back exactly."""

    def label_problem(self, template) -> str | None:
        ev = template.evidence
        if derivable(ev.table, ev.value_col):
            return f"{ev.table}.{ev.value_col} is recovered exactly from other columns"
        return super().label_problem(template)

    def expected(self, template) -> tuple[str, str | None]:
        return ("answer", None) if template.evidence.aggregate else ("abstain", self.reason)


@register_injector
class ImplausibleValue(_UnreadableValue):
    subtype = "implausible_value"
    teaching = TeachingCard(
        title="Implausible value",
        definition=("A value that cannot be physiologically true (a decimal slip such as 550 years, or a wrong sign), "
                    "and that is not a valid reading in another unit."),
        arises=("Typing errors in manual entry, a misplaced decimal point, device artefacts, or a unit dropped at an "
                "interface."),
        trap=("The credulous query returns the impossible number, or an aggregate that includes it, and the agent "
              "reports it as if it were real."),
        check=("Compare the value with a plausible range for the item (physiology, and the 0.1-99.9 % range of real "
               "data) before using it."),
        outcome=("When the impossible value alone decides the answer, abstain with `implausible_value`: the records "
                 "show an impossible value, not a missing one. When it is one of many values in an aggregate, answer "
                 "without it."),
    )
    requires = ("value_col",)
    description = "a physiologically impossible value (decimal slip or sign error)"
    outcome, reason = "abstain", "implausible_value"
    rationale = ("a value outside physiology and the real data's 0.1-99.9 % range, not readable in another unit: "
                 "one such row deciding the answer leaves nothing to answer with; an extra such row among "
                 "many is dropped by a plausibility filter")

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        bounds = cleaning.bounds_for(ev, ctx.params)
        row = _focus(ctx)
        if row is None or bounds is None:
            return None
        bad = implausible(row[ev.value_col], bounds, low=ev.extreme == "low", readable=_unit_readable(ctx, bounds))
        if bad is None:
            return None
        changes = _value_changes(ctx, bad, format_like(bad, row.get(ev.text_col) if ev.text_col else None))
        # an infusion's rate and original amount follow its amount (a mis-keyed rate), so that no other column of the
        # row gives the true value back
        changes = _with_co_stored(ctx, row, changes, scale=True)
        desc = f"{ev.value_col} {row[ev.value_col]!r} → {bad!r} (plausible {bounds[0]:g}–{bounds[1]:g})"
        kind, reason = self.expected(ctx.template)
        if kind == "abstain":
            return Injection(self.spec(Overlay((_replace(ctx, row, changes),)), description=desc), kind, reason)
        return Injection(self.spec(Overlay((_extra(ctx, row, changes),)), description="an extra row with " + desc),
                         kind, reason, cleaners=(cleaning.drop_implausible,))


@register_injector
class UnitMismatch(Injector):
    subtype = "unit_mismatch"
    teaching = TeachingCard(
        title="Unit mismatch",
        definition=("A value is recorded in another unit (g/L instead of g/dL, °F instead of °C), with the unit column"
                    " changed to match."),
        arises=("Different laboratories or devices report in different units; results from an outside hospital are "
                "imported as they are."),
        trap=("The credulous query reads the number and ignores the unit column, so it mixes units and answers a value"
              " ten times too large, or in the wrong scale."),
        check=("Look at the unit column of the evidence rows: more than one unit for one item means converting before "
               "comparing or aggregating."),
        outcome=("Answer, after converting every value to the unit the question asks for; the expected value is the "
                 "clean one."),
    )
    requires = ("value_col", "unit_col", "item_col", "item_param")
    description = "a value recorded in another unit, with the unit column changed accordingly"
    rationale = "the unit column says which unit the number is in: converting it back recovers the answer"

    def accepts(self, template, params) -> bool:
        conv = conversion_for(params.get(template.evidence.item_param))
        # a unit stored under another item (°C vs °F) is only unambiguous within one patient's stay:
        # a cohort may legitimately hold both items
        return conv is not None and (conv.alt_itemid is None or template.level == "patient")

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        conv = conversion_for(ctx.params.get(ev.item_param))
        rows = _focus_rows(ctx, patient_batch=False)
        if conv is None or not rows:
            return None
        # a row moved to the item of the other unit (°F → °C) is written like that item's values
        alt_decimals = _item_decimals(ctx, conv.alt_itemid) if conv.alt_itemid is not None else None
        changes = []
        for row in rows:
            # stored with the precision of the item's own values (a row in another unit looks like its
            # neighbours); rows whose answer cannot be recovered at that precision fail verification
            d = alt_decimals if alt_decimals is not None else decimals_of(row[ev.value_col])
            alt = with_decimals(conv.to_alt(row[ev.value_col], d), d)
            v0 = float(row[ev.value_col])
            if round((alt - conv.offset) / conv.scale, decimals_of(v0)) != v0:
                # the filled-in decimal would move the value back in its own unit (9.6 g/dL → 96.7 g/L → 9.67):
                # keep the plain conversion (96.0 g/L), as a whole number like many of the item's values
                alt = conv.to_alt(v0, d)
            ch = _value_changes(ctx, alt, format_like(alt, row.get(ev.text_col) if ev.text_col else None))
            ch[ev.unit_col] = conv.alt_unit
            for col in RANGE_COLUMNS:  # a result in another unit comes with its reference range in that unit
                if row.get(col) is not None:
                    ch[col] = conv.to_alt(float(row[col]))
            # the original amount in the row's new unit too (a rate per time keeps its own unit), and the flag its
            # number and range give
            ch = _with_co_stored(ctx, row, ch, scale=False)
            if conv.alt_itemid is not None:
                ch[ev.item_col] = conv.alt_itemid
            changes.append(ch)
        first = rows[0][ev.value_col]
        desc = (f"{first!r} {conv.unit} recorded as {changes[0][ev.value_col]!r} {conv.alt_unit}"
                + (f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""))
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((_replace_many(ctx, rows, changes),)), description=desc),
                         kind, reason, cleaners=(cleaning.convert_units,))


NEVER_NULL: dict[tuple[str, str], str] = {  # where missing_value does not go (MissingValue.fits)
    ("patients", "anchor_age"): "0 of the demo's 100 patients; MIMIC-IV defines it for every patient",
    ("drgcodes", "drg_severity"): "0 of the demo's 221 APR rows (NULL only on HCFA rows, which have none)",
    ("drgcodes", "drg_mortality"): "0 of the demo's 221 APR rows (NULL only on HCFA rows, which have none)",
}
"""Evidence columns MIMIC-IV never leaves NULL on the evidence rows (measured on the demo). The base matches the
demo, so a missing value there would be the only NULL of its kind, told from the base by its NULL alone: the
subtype does not go there (tests/test_bench_artifacts.py)."""


@register_injector
class MissingValue(_UnreadableValue):
    subtype = "missing_value"
    teaching = TeachingCard(
        title="Missing value",
        definition=("The row is there (the test was done) but its numeric value is empty, with the text the database "
                    "uses for that ('___', 'ERROR', a comment)."),
        arises="A specimen was haemolysed or insufficient, a result was cancelled, or only a comment was filed.",
        trap=("The credulous query returns NULL for the deciding value, or silently skips it, and the agent reports "
              "'null' or a value from another row as the answer."),
        check="Check the value column of the deciding rows for NULLs and read the text column next to it.",
        outcome=("When the valueless row alone decides the answer, abstain with `insufficient_evidence`: the event "
                 "happened but carries no number. When it is one of many rows in an aggregate, answer without it."),
    )
    requires = ("value_col",)
    description = "the numeric result is missing (NULL, with the text the database uses for that)"
    outcome, reason, empty_is_trap = "abstain", "insufficient_evidence", True
    rationale = ("the deciding result has no number: nothing gives the answer; an extra valueless row among many "
                 "is simply not counted")

    def fits(self, template: Template) -> bool:
        return (template.evidence.table, template.evidence.value_col) not in NEVER_NULL

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        row = _focus(ctx)
        if row is None:
            return None
        own = _base_missing(ctx)
        if own:
            # written as the hospital writes this item's results without a number (a weighted draw of its forms)
            w = np.array([n for _, n in own], dtype=float)
            k = int(np.searchsorted(np.cumsum(w) / w.sum(), ctx.rng.random(), side="right"))
            form = own[min(k, len(own) - 1)][0]
            changes = {ev.value_col: None, **form}
            placeholder = form.get(ev.text_col) if ev.text_col else None
            desc = f"{ev.value_col} NULL" + "".join(f", {c} {v!r}" for c, v in form.items())
        else:
            forms = list(_base_texts(ctx, digits=False)) or list(MISSING_PLACEHOLDERS)
            placeholder = forms[int(ctx.rng.integers(0, min(len(forms), 5)))] if ev.text_col else None
            changes = _value_changes(ctx, None, placeholder)
            desc = f"{ev.value_col} NULL" + (f", {ev.text_col} {placeholder!r}" if ev.text_col else "")
        kind, reason = self.expected(ctx.template)
        if kind == "abstain":
            return Injection(self.spec(Overlay((_replace(ctx, row, changes),)), description=desc), kind, reason)
        return Injection(self.spec(Overlay((_extra(ctx, row, changes),)), description="an extra row with " + desc),
                         kind, reason, cleaners=(cleaning.drop_valueless,))


NEVER_TEXT_ONLY: dict[tuple[str, str], str] = {  # where encoding_corruption does not go (EncodingCorruption.fits)
    ("microbiologyevents", "dilution_value"): "1 of the demo's 999 MIC texts ('>256'), 0 of the base's 5,739 on 1k",
}
"""Evidence columns whose number MIMIC-IV almost never keeps only in the text column. A susceptibility stored as
'<=0.25' with no MIC beside it was a row of no base kind: on the 1k card its NULL pattern told encoding-corruption
rows from base rows at 0.64 once the tree no longer counted lab flags (with them, a lab row's count matched it by
accident: 0.43)."""


@register_injector
class EncodingCorruption(Injector):
    subtype = "encoding_corruption"
    teaching = TeachingCard(
        title="Encoding corruption",
        definition="The number is stored only in the text column ('>300', '7.4') and the numeric column is empty.",
        arises=("Results outside the analyser's reportable range, values typed as text, or an interface that fails to "
                "parse the number."),
        trap=("The credulous query reads only the numeric column, so the value is missing from its result or "
              "aggregate."),
        check="When the numeric column is empty, read the text column and parse the number from it.",
        outcome="Answer, with the number read from the text column; the expected value is the clean one.",
    )
    requires = ("value_col", "text_col")
    description = "the number stored only in the text column, in a form the database uses ('>300', '7.4')"
    rationale = "the number is still in the text column: reading it from there recovers the answer"

    def fits(self, template: Template) -> bool:
        return (template.evidence.table, template.evidence.value_col) not in NEVER_TEXT_ONLY

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        rows = _focus_rows(ctx)
        if not rows:
            return None
        forms = number_forms(_base_texts(ctx, digits=True)) or ["{v}"]
        form = "{v}" if "{v}" in forms else forms[int(ctx.rng.integers(0, len(forms)))]
        changes = [_value_changes(ctx, None, form.format(v=format_like(row[ev.value_col], row.get(ev.text_col))))
                   for row in rows]
        if "flag" in table_spec(ev.table).column_names:
            for ch in changes:  # a result without valuenum carries no abnormal flag (MIMIC-IV, and the base's own)
                ch["flag"] = None
        desc = (f"{ev.value_col} {rows[0][ev.value_col]!r} stored only as text {changes[0][ev.text_col]!r}"
                + (f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""))
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((_replace_many(ctx, rows, changes),)), description=desc),
                         kind, reason, cleaners=(cleaning.parse_text,))
