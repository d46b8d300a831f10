"""Record-level noise: rows deleted, re-stored, misplaced in time, contradicted."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np

from ehrgym.bench.noise import cleaning
from ehrgym.bench.noise.base import (EVENT_CATEGORIES, EVENT_GROUPS, EVENT_OWNER, LINK_TIMES, ROWID, InjectContext,
                                     Injection, Injector, batch_size, register_injector)
from ehrgym.bench.noise.companions import COMPANIONS, donor
from ehrgym.bench.noise.teaching import TeachingCard
from ehrgym.bench.noise.values import (conflicting, derivable, finite, parse_stamp, restamped, shift_times,
                                       shifted, with_value)
from ehrgym.db.overlay import Overlay, TableEdit
from ehrgym.db.schema import table_spec

MAX_DELETED_ROWS = 400


def _copy(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != ROWID}


@dataclass(frozen=True)
class Steps:
    """A value that comes in steps per item, stored together with the columns read off it: a susceptibility's MIC (a
    doubling dilution) with its interpretation, comparison and text. ``columns[0]`` is the number."""

    item_col: str
    columns: tuple[str, ...]


MIC_STEPS = Steps("ab_itemid", ("dilution_value", "interpretation", "dilution_comparison", "dilution_text"))
STEPPED: dict[tuple[str, str], Steps] = {
    ("microbiologyevents", "dilution_value"): MIC_STEPS,
    ("microbiologyevents", "interpretation"): MIC_STEPS,  # a contradicting "R" comes with an MIC the base reports as R
}


def _base_step(ctx: InjectContext, row: dict[str, Any], steps: Steps, column: str,
               keep: Any) -> dict[str, Any] | None:
    """One of the tuples of ``steps.columns`` the base stores for the row's item whose ``column`` passes ``keep``,
    drawn as often as the base stores each (None: there is none). Drawn by frequency, not the nearest step: the
    neighbouring step of a susceptible MIC is mostly a rare uncensored intermediate one ('4', 'I'), while the base's
    resistant readings are mostly censored ('=>16'); nearest steps made contradicting MICs a text form of their own."""
    src = f"{ctx.base}.{table_spec(ctx.evidence.table).qualified}"
    cols = ", ".join(steps.columns)
    got = ctx.con.execute(
        f"SELECT {cols}, count(*) FROM {src} WHERE {steps.item_col} = ? AND {steps.columns[0]} IS NOT NULL "
        f"GROUP BY ALL ORDER BY ALL", [row[steps.item_col]]).fetchall()
    at = steps.columns.index(column)
    fit = [g for g in got if keep(g[at])]
    if not fit:
        return None
    w = np.array([g[-1] for g in fit], dtype=float)
    pick = fit[int(ctx.rng.choice(len(fit), p=w / w.sum()))]
    return dict(zip(steps.columns, pick[:-1]))


def _set_value(ctx: InjectContext, row: dict[str, Any], value: float | None) -> dict[str, Any]:
    """``row`` holding ``value``; for a stepped value (:data:`STEPPED`), a step the base stores for the row's item on
    the same side of the row's own value, with what the base stores with it (a contradicting MIC of 156 with the first
    reading's 'R' was in no base row: 61 of 77 conflicting susceptibility rows on a 1k `paper` build). Without such a
    step the row keeps its value (the caller sees that nothing changed)."""
    ev = ctx.evidence
    steps = STEPPED.get((ev.table, ev.value_col or ""))
    old: Any = row.get(ev.value_col) if ev.value_col else None
    if steps is None or value is None or not finite(old) or row.get(steps.item_col) is None:
        return with_value(ev, row, value)
    up = value > float(old)
    step = _base_step(ctx, row, steps, steps.columns[0],
                      lambda x: x is not None and (float(x) > float(old) if up else float(x) < float(old)))
    if step is None:
        return with_value(ev, row, old)
    return {**with_value(ev, row, step[steps.columns[0]]), **step}


def _set_category(ctx: InjectContext, row: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """``row`` with ``value`` in the evidence's category column and, where the category is read off a stepped value
    (:data:`STEPPED`), a step the base stores with that category for the row's item (a row without a number keeps its
    own; None: the base never reports the row's item so). A category with companions (:data:`COMPANIONS`) comes
    with them, as a base row agreeing with ``row`` stores them (None: no base row does)."""
    col = ctx.evidence.category_col or ""
    if (ctx.evidence.table, col) in COMPANIONS:
        moved = donor(ctx.con, ctx.base, ctx.evidence.table, col, row, lambda x: x == value, ctx.rng, ctx.max_ids)
        return {**row, **moved} if moved is not None else None
    out = {**row, col: value}
    steps = STEPPED.get((ctx.evidence.table, col))
    if steps is None or row.get(steps.item_col) is None or row.get(steps.columns[0]) is None:
        return out
    step = _base_step(ctx, row, steps, col, lambda x: x == value)
    return {**out, **step} if step is not None else None


def _event_of_category(ctx: InjectContext, event: list[dict[str, Any]], value: Any) -> list[dict[str, Any]] | None:
    """The rows, in scan order, of a base event (:data:`~ehrgym.bench.noise.base.EVENT_GROUPS`) whose category is
    ``value`` and which agrees with ``event`` on the columns the category shares (:data:`COMPANIONS`: a culture of the
    same specimen and test) where all of ``event``'s rows agree on them (None: the base has none). Drawn uniformly
    among the admissions' events: relabelling each row of a culture with another organism kept the first organism's
    susceptibility panel, which the new one is not tested with."""
    ev = ctx.evidence
    col, group = ev.category_col or "", EVENT_GROUPS[ev.table]
    tie = COMPANIONS.get((ev.table, col))
    same = [c for c in (tie.shared if tie else ()) if len({str(r.get(c)) for r in event}) == 1]
    src = f"{ctx.base}.{table_spec(ev.table).qualified}"
    args = [value, *(event[0].get(c) for c in same)]
    key = ("events_of", ev.table, col, tuple(same), tuple(map(str, args)))
    if key not in ctx.max_ids:
        where = " AND ".join([f"{col} = ?", "hadm_id IS NOT NULL", *(f"{c} IS NOT DISTINCT FROM ?" for c in same)])
        ctx.max_ids[key] = [r[0] for r in ctx.con.execute(f"SELECT DISTINCT {group} FROM {src} WHERE {where} "
                                                          f"ORDER BY 1", args).fetchall()]
    ids = ctx.max_ids[key]
    if not ids:
        return None
    return ctx.event_of(int(ids[int(ctx.rng.integers(0, len(ids)))])) or None


def _stood_in(table: str, row: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    """Base ``row`` of another event standing in for ``like``'s: at ``like``'s time (its own store lag kept), owned
    by ``like``'s patient, admission and orderer (:data:`~ehrgym.bench.noise.base.EVENT_OWNER`) under ``like``'s
    event id (which :meth:`~ehrgym.bench.noise.base.InjectContext.relink` renews at another time)."""
    time_col = LINK_TIMES[table]
    out = shift_times(_copy(row), table, parse_stamp(like[time_col]) - parse_stamp(row[time_col]))  # days kept
    for col in (*EVENT_OWNER, EVENT_GROUPS[table]):
        if col in out:
            out[col] = like.get(col)
    return out


def _other_category(ctx: InjectContext, row: dict[str, Any]) -> dict[str, Any] | None:
    """``row`` with another value in the evidence's categorical column (None: there is none). A category read off a
    stepped value (:data:`STEPPED`) comes with a tuple the base stores for the row's item with another category,
    drawn as often as the base stores each: drawn uniformly over S, I and R, the rare uncensored intermediate
    readings were a third to half of the contradictions, and their text form told the decoys of conflicting records
    from the rows beside them (0.561 on the 1k card). A category with companions (:data:`COMPANIONS`): one a base row
    agreeing with ``row`` stores, with its companions. Other categories: one found in the database, uniformly."""
    ev = ctx.evidence
    col = ev.category_col or ""
    current = row.get(col)
    steps = STEPPED.get((ev.table, col))
    if steps is not None and row.get(steps.item_col) is not None and row.get(steps.columns[0]) is not None:
        step = _base_step(ctx, row, steps, col, lambda x: x is not None and x != current)
        return {**row, **step} if step is not None else None
    if (ev.table, col) in COMPANIONS:
        moved = donor(ctx.con, ctx.base, ev.table, col, row, lambda x: x != current, ctx.rng, ctx.max_ids)
        return {**row, **moved} if moved is not None else None
    spec = table_spec(ev.table)
    values = [r[0] for r in ctx.query(f"SELECT DISTINCT {col} FROM {ctx.base}.{spec.qualified} "
                                      f"WHERE {col} IS NOT NULL ORDER BY 1 LIMIT 50")]
    values = [v for v in values if v != current]
    if not values:
        return None
    return {**row, col: values[int(ctx.rng.integers(0, len(values)))]}


@register_injector
class MissingEvidence(Injector):
    subtype = "missing_evidence"
    teaching = TeachingCard(
        title="Missing evidence",
        definition=("The rows the question is about are not in the database: the lab, the medication or the transfer "
                    "was never stored, although the patient and the admission are."),
        arises=("Interfaces between a lab or pharmacy system and the EHR drop messages; results arrive after the data "
                "extract; a record is filed under another admission or another patient."),
        trap=("The obvious query runs without error and returns nothing (or NULL); the credulous agent reports that as"
              " the answer, e.g. 'null' or 'no value', as if the empty result were a fact about the patient."),
        check=("Before trusting an empty result, confirm that the patient and admission exist and count the evidence "
               "rows: zero rows for an entity that exists means the record is missing."),
        outcome=("Abstain with `insufficient_evidence`: nothing in the database gives the answer. `false_premise` is "
                 "accepted too, because deleted rows look exactly like an event that never happened."),
    )
    description = "the rows the question presupposes were deleted"
    outcome, reason, empty_is_trap = "abstain", "insufficient_evidence", True
    rationale = "the record the question is about is absent: nothing in the database gives the answer"

    def inject(self, ctx: InjectContext) -> Injection | None:
        rows = ctx.evidence_rows(order="e.rowid", limit=MAX_DELETED_ROWS + 1)
        if not rows or len(rows) > MAX_DELETED_ROWS:
            return None
        # ids numbered densely by the base are renumbered around the gap, as the base would have
        edit = ctx.table_edit((), (), tuple(r[ROWID] for r in rows))
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((edit,)), description=f"{len(rows)} {ctx.evidence.table} rows deleted"),
                         kind, reason)


@register_injector
class DuplicateRecords(Injector):
    subtype = "duplicate_records"
    teaching = TeachingCard(
        title="Duplicate records",
        definition=("Some evidence rows are stored twice: a copy with the same content (same patient, time and value) "
                    "but a new row id."),
        arises=("An interface re-sends a batch after a time-out, a result is re-filed after a correction, or two feeds"
                " deliver the same event."),
        trap=("Counts and sums include every copy, and a mean over a re-sent batch leans towards the copied values: "
              "the credulous answer is too high or shifted."),
        check=("Group the evidence by its natural key (patient, time, item, value) and look for groups with more than "
               "one row; keep one row per group."),
        outcome="Answer, computed on the deduplicated rows; the expected value is the clean one.",
    )
    description = "evidence rows stored twice (re-stored copies with new ids)"
    rationale = "a re-stored copy has the same natural key and a later store time: dropping it recovers the answer"
    # a copy has its original's content: what could give it away is how it is stored (id, scan position) beside
    # that original; beside other rows the judge would learn which patients a cohort copies (who died, who is old)
    artifact_reference = "originals"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        n, rows = ctx.evidence_batch(order=ctx.one_sided_order())
        if not rows:
            return None
        # one re-stored row changes a count; a mean over many values needs a re-sent batch
        many = ctx.template.level == "population" or (ev.value_col is not None and ev.focus == "any")
        groups = ctx.id_groups(rows)
        if not groups:
            return None
        # a re-sent batch is a share of the evidence's ids (specimens where rows share one); past the rows read,
        # their number is estimated from the rows read
        n_ids = len(groups) if n <= len(rows) else max(len(groups), round(n * len(groups) / len(rows)))
        groups = groups[:batch_size(n_ids) if many else 1]
        copies, anchors = [], []
        given: set[int] = set()
        for i, group in enumerate(groups):
            last = group[-1]  # a group's copy follows it, as a re-sent specimen follows the first
            new_id = ctx.ids_after(ctx.anchor_for(last), 1, given)[0] if ev.id_col else None
            for row in group:
                c = _copy(row)
                if ev.id_col:
                    c[ev.id_col] = new_id
                if ev.store_col and c.get(ev.store_col) is not None:
                    c.update(restamped(c, ev.store_col, parse_stamp(c[ev.store_col]) + dt.timedelta(minutes=7 + i)))
                copies.append(c)
                anchors.append(last[ROWID])
        k = len(copies)
        edit = ctx.table_edit(tuple(copies), tuple(anchors))
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((edit,)), description=f"{k} {ev.table} rows stored twice"),
                         kind, reason, cleaners=(cleaning.deduplicate,))


@register_injector
class OutOfWindow(Injector):
    subtype = "out_of_window"
    teaching = TeachingCard(
        title="Out-of-window records",
        definition=("Rows are linked to the admission or ICU stay the question asks about, but their timestamps lie "
                    "outside that stay."),
        arises=("A result is attached to the wrong encounter, a pre-admission or outpatient test is carried into the "
                "stay, or a clock or time-zone error moves a timestamp."),
        trap=("The credulous query filters by the stay's id only, so the rows from outside the stay enter the count, "
              "the first/last value or the average."),
        check="Join the stay's start and end times and keep only rows timestamped inside the window.",
        outcome="Answer, computed without the rows outside the stay; the expected value is the clean one.",
    )
    requires = ("window", "time_col")
    description = "rows linked to the stay but timestamped outside it"
    rationale = "rows timestamped outside the stay they are linked to are dropped by a window check"

    def inject(self, ctx: InjectContext) -> Injection | None:
        ev = ctx.evidence
        if ev.value_col and ev.aggregate and ev.focus == "any":
            return self._batch(ctx)
        rows = ctx.evidence_rows(limit=None)
        if not rows:
            return None
        focus = rows[0]
        window = ctx.window_of(focus)
        if window is None:
            return None
        start, end = window
        t = parse_stamp(focus[ev.time_col])
        # whole days keep the time of day and the precision of the base's timestamps
        days_before = (t - start).days + 2 + int(ctx.rng.integers(0, 2))
        days_after = (end - t).days + 2 + int(ctx.rng.integers(0, 2))
        before = shift_times(_copy(focus), ev.table, -dt.timedelta(days=days_before))
        after = shift_times(_copy(focus), ev.table, dt.timedelta(days=days_after))
        hours_before = round((start - parse_stamp(before[ev.time_col])).total_seconds() / 3600)
        hours_after = round((parse_stamp(after[ev.time_col]) - end).total_seconds() / 3600)
        if ev.value_col:
            values = [r[ev.value_col] for r in rows if finite(r.get(ev.value_col))]
            if not values:
                return None
            bounds = cleaning.bounds_for(ev, ctx.params)
            after = _set_value(ctx, after, shifted(max(values), True, bounds))
            before = _set_value(ctx, before, shifted(min(values), False, bounds))
        elif ev.category_col:
            moved_before = _other_category(ctx, before)
            if moved_before is None:
                return None
            moved_after = _set_category(ctx, after, moved_before[ev.category_col])
            if moved_after is None:
                return None
            before, after = moved_before, moved_after
        # the rest of the focus row's event (its specimen, ctx.event_rows) moves with it; an event of another
        # category is another base event of that category (its organism's own panel), standing in for this one
        event = ctx.event_rows(focus)
        if ev.category_col and len(event) > 1 and ev.category_col in EVENT_CATEGORIES.get(ev.table, ()):
            culture = _event_of_category(ctx, event, before[ev.category_col])
            if culture is None:
                return None
            sides = ([_stood_in(ev.table, r, before) for r in culture], [_stood_in(ev.table, r, after) for r in culture])
            sources = (focus,) * len(culture)
        else:
            sides = ([before if r[ROWID] == focus[ROWID] else
                      shift_times(_copy(r), ev.table, -dt.timedelta(days=days_before)) for r in event],
                     [after if r[ROWID] == focus[ROWID] else
                      shift_times(_copy(r), ev.table, dt.timedelta(days=days_after)) for r in event])
            sources = tuple(event)
        places = (ctx.anchor_for(focus, before[ev.time_col]), ctx.anchor_for(focus, after[ev.time_col]))
        given: set[int] = set()
        for side in (0, 1):
            ctx.give_ids(sides[side], places[side], given)
        n = len(sources)
        edit = ctx.table_edit((*sides[0], *sides[1]), (places[0][0],) * n + (places[1][0],) * n,
                              sources=sources + sources)
        rows_out = edit.insert_rows
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((edit,)), description=(
            f"{len(rows_out)} {ev.table} rows linked to {ev.window.key} {focus.get(ev.window.key)} but timestamped "
            f"{hours_before} h before and {hours_after} h after it")), kind, reason,
            cleaners=(cleaning.keep_in_window,))

    def _batch(self, ctx: InjectContext) -> Injection | None:
        """For an aggregate over many values: copies of the highest (lowest, for min-type answers)
        20 % of the rows, each timestamped whole days after the end of its own stay, with a value
        shifted further the same way, so the aggregate moves by a meaningful margin."""
        ev = ctx.evidence
        n, rows = ctx.evidence_batch(order=ctx.one_sided_order(), finite_values=True)
        if not rows:
            return None
        bounds = cleaning.bounds_for(ev, ctx.params)
        up = ev.extreme != "low"
        copies, anchors, sources = [], [], []
        given: set[int] = set()
        chosen = rows[:batch_size(n)]
        picked = {r[ROWID] for r in chosen}
        moved: dict[int, int] = {}  # an event's first row -> the days it moves (its rows move together)
        done: set[int] = set()
        for row in chosen:
            window = ctx.window_of(row)
            if window is None:
                continue
            days = (window[1] - parse_stamp(row[ev.time_col])).days + 2 + int(ctx.rng.integers(0, 2))
            event = ctx.event_rows(row)
            days = moved.setdefault(event[0][ROWID], days)
            c = _set_value(ctx, shift_times(_copy(row), ev.table, dt.timedelta(days=days)),
                           shifted(row[ev.value_col], up, bounds))
            # the event's other rows move along unchanged (those of the batch are moved in their own turn)
            extra = [(shift_times(_copy(r), ev.table, dt.timedelta(days=days)), r) for r in event
                     if r[ROWID] != row[ROWID] and r[ROWID] not in picked and r[ROWID] not in done]
            news = [c, *(new for new, _ in extra)]
            place = ctx.anchor_for(row, c[ev.time_col])  # the event's rows: one patient, one time
            ctx.give_ids(news, place, given)
            copies += news
            anchors += [place[0]] * len(news)
            sources += [row, *(src for _, src in extra)]
            done.update(r[ROWID] for r in (row, *(src for _, src in extra)))
        if not copies:
            return None
        edit = ctx.table_edit(tuple(copies), tuple(anchors), sources=tuple(sources))
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((edit,)), description=(
            f"{len(copies)} {ev.table} rows linked to their {ev.window.key} but timestamped days after it")),
            kind, reason, cleaners=(cleaning.keep_in_window,))


@register_injector
class ConflictingRecords(Injector):
    subtype = "conflicting_records"
    teaching = TeachingCard(
        title="Conflicting records",
        definition=("Two records of the same measurement (same patient, same time, same item) disagree, and nothing in"
                    " the data says which one is right."),
        arises=("A result is corrected without the old value being retracted, two devices or systems report the same "
                "sample, or a manual entry disagrees with an interfaced one."),
        trap=("The credulous query takes whichever row comes first (or averages both) and answers confidently with a "
              "value that may be the wrong one."),
        check="Group by the natural key of the measurement and look for groups whose values differ.",
        outcome=("Abstain with `conflicting_evidence`: believing the other record would change the answer, so no "
                 "single value is supported."),
    )
    description = "a contradictory row with the same natural key (same sample, other value)"
    outcome, reason = "abstain", "conflicting_evidence"
    rationale = ("two records of the same measurement disagree and nothing in the data says which is right; "
                 "kept only where believing the other record changes the answer")
    # tables where several rows per key are ordinary practice (co-ordering, repeated or parallel
    # administrations), not a contradiction of one measurement
    ORDERING_TABLES: frozenset[str] = frozenset({"prescriptions", "pharmacy", "emar", "emar_detail", "poe",
                                                 "poe_detail", "inputevents"})

    def fits(self, template) -> bool:
        return bool(template.evidence.value_col or template.evidence.category_col)

    def label_problem(self, template) -> str | None:
        ev = template.evidence
        if ev.table in self.ORDERING_TABLES:
            return f"several {ev.table} rows per key are ordinary co-ordering, not a contradiction"
        if derivable(ev.table, ev.value_col):
            return f"{ev.table}.{ev.value_col} is recovered exactly from other columns"
        if template.answer.type in ("integer", "boolean"):
            return "a count does not depend on which of two contradicting records is right"
        if ev.aggregate and ev.focus == "any":
            return "one contradicting record among the many an aggregate sums up does not change it meaningfully"
        return super().label_problem(template)

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
            # the direction that changes the answer: a higher reading of the maximum changes a maximum,
            # a lower one changes which row is the maximum (argmax answers); mirrored for minima. A decoy's
            # contradiction goes either way, as harmless ones do: sent the noise's way, only the readings
            # that stayed under the maximum were kept, and a susceptibility's MIC there is mostly a rare
            # uncensored intermediate step ('4', 'I'; 15 of 15 decoy MICs with a text on the 1k card,
            # against 1 of 43 base rows beside them)
            numeric = ctx.template.answer.type == "number"
            up = None if ctx.harmless else {"max": numeric, "min": not numeric}.get(ev.focus)
            c = _set_value(ctx, c, conflicting(focus[ev.value_col], ctx.rng, cleaning.bounds_for(ev, ctx.params), up))
            if c[ev.value_col] == focus[ev.value_col]:
                return None
        else:
            recat = _other_category(ctx, c)
            if recat is None:
                return None
            c = recat
        if ev.store_col and c.get(ev.store_col) is not None:
            c[ev.store_col] = (parse_stamp(c[ev.store_col]) + dt.timedelta(minutes=3)).isoformat(sep=" ")
        # the world where the contradicting record is the true one: it must give another answer
        alternative = Overlay((TableEdit(ev.table, (focus[ROWID],), (dict(c),), (focus[ROWID],)),))
        if ev.id_col:
            c[ev.id_col] = ctx.ids_after(ctx.anchor_for(focus), 1)[0]
        edit = ctx.table_edit((c,), (focus[ROWID],))
        shown = c.get(ev.value_col) if ev.value_col else c.get(ev.category_col)
        was = focus.get(ev.value_col) if ev.value_col else focus.get(ev.category_col)
        kind, reason = self.expected(ctx.template)
        return Injection(self.spec(Overlay((edit,)), description=(
            f"a second {ev.table} row with the same {', '.join(k for k in ev.key if c.get(k) == focus.get(k))} says "
            f"{shown!r} instead of {was!r}")),
            kind, reason, alternative=alternative)
