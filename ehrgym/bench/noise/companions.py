"""Columns that travel with a category: what a row holding another category must hold beside it.

Noise that gives a row another category (a conflicting organism, an out-of-window copy in another care unit) must
write a row the hospital could have stored. Changing the category column alone wrote rows no base row looks like —
an organism name under another organism's ``org_itemid`` (or none), a DRG description under another DRG's code, an
ICD-9 code marked version 10, a single-unit ICU stay whose first and last units differ, cefepime given per rectum —
and one query for such a pair found every one of them, in noisy twins only (a 1k `paper` build: 302 organism rows,
all 19 conflicting DRG rows, 7 of 19 diagnosis rows, 38 of 70 ICU stays).

A :class:`Companions` entry says, for one (table, category column), which columns the new category must share with
the row (``shared``: it is drawn among base rows that agree with the row there) and which it brings along from the
base row it is drawn from (``carried``). :func:`coherent_pairs` lists the (category, companion) pairs a test checks
every inserted row against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from ehrgym.bench.noise.base import LINK_IDS, LINK_TIMES
from ehrgym.db.overlay import to_json_value
from ehrgym.db.schema import table_spec

PRODUCT_COLUMNS = ("drug_type", "formulary_drug_cd", "gsn", "ndc", "prod_strength", "form_rx", "dose_val_rx",
                   "dose_unit_rx", "form_val_disp", "form_unit_disp", "doses_per_24_hrs")


@dataclass(frozen=True)
class Companions:
    shared: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()


COMPANIONS: dict[tuple[str, str], Companions] = {
    # an organism is reported by its item and isolate number (and a comment of its own, not "NO GROWTH."), on a test
    # of the specimen and, for a susceptibility row, against an antibiotic the base tests that organism with
    ("microbiologyevents", "org_name"): Companions(shared=("spec_itemid", "test_itemid", "ab_itemid"),
                                                   carried=("org_itemid", "isolate_num", "comments")),
    ("microbiologyevents", "spec_type_desc"): Companions(shared=("org_itemid", "ab_itemid"),
                                                         carried=("spec_itemid", "test_itemid", "test_name", "comments")),
    ("drgcodes", "description"): Companions(shared=("drg_type",), carried=("drg_code", "drg_severity", "drg_mortality")),
    ("diagnoses_icd", "icd_code"): Companions(shared=("icd_version",)),
    ("procedures_icd", "icd_code"): Companions(shared=("icd_version",)),
    ("transfers", "careunit"): Companions(shared=("eventtype",)),
    ("icustays", "first_careunit"): Companions(carried=("last_careunit",)),
    ("prescriptions", "drug"): Companions(carried=(*PRODUCT_COLUMNS, "route")),
    ("prescriptions", "route"): Companions(shared=("drug",), carried=PRODUCT_COLUMNS),
}


def donor(con: duckdb.DuckDBPyConnection, base: str, table: str, column: str, row: dict[str, Any],
          keep: Any, rng: np.random.Generator, cache: dict[Any, Any] | None = None) -> dict[str, Any] | None:
    """The category ``column`` and its carried companions from a base row that agrees with ``row`` on the shared
    ones and whose category passes ``keep`` (None: the base has none). The category is drawn uniformly among those
    the base stores so, its companions as often as the base stores each with it."""
    tie = COMPANIONS[(table, column)]
    names = set(table_spec(table).column_names)
    shared = [c for c in tie.shared if c in names]
    carried = [c for c in tie.carried if c in names]
    args = [row.get(c) for c in shared]
    key = ("companions", table, column, tuple(shared), tuple(map(str, args)))
    got = cache.get(key) if cache is not None else None
    if got is None:
        where = " AND ".join([f"{column} IS NOT NULL", *(f"{c} IS NOT DISTINCT FROM ?" for c in shared)])
        cols = ", ".join([column, *carried])
        got = con.execute(f"SELECT {cols}, count(*) FROM {base}.{table_spec(table).qualified} WHERE {where} "
                          f"GROUP BY ALL ORDER BY ALL", args).fetchall()
        if cache is not None:
            cache[key] = got
    fit = [g for g in got if keep(g[0])]
    categories = sorted({g[0] for g in fit}, key=str)
    if not categories:
        return None
    chosen = categories[int(rng.integers(0, len(categories)))]
    tuples = [g for g in fit if g[0] == chosen]
    if len(tuples) > 1:
        w = np.array([g[-1] for g in tuples], dtype=float)
        pick = tuples[int(rng.choice(len(tuples), p=w / w.sum()))]
    else:
        pick = tuples[0]
    return dict(zip([column, *carried], (to_json_value(v) for v in pick[:-1])))


# carried values that value noise corrupts on purpose (an APR severity of 20 is an implausible value, not a storage
# artifact): carried along with a category, not checked against it
VALUE_COLUMNS = frozenset({"drg_severity", "drg_mortality", "dose_val_rx", "form_val_disp", "doses_per_24_hrs"})


def coherent_pairs() -> list[tuple[str, str, str]]:
    """(table, category column, companion column) pairs: an inserted row must hold a pair of values the base holds."""
    return [(table, column, other) for (table, column), tie in sorted(COMPANIONS.items())
            for other in (*tie.shared, *tie.carried) if other not in VALUE_COLUMNS]


# Ids the base gives to groups of rows (a specimen's organism and susceptibility rows), with the columns whose values
# over the group's rows make its make-up: a copied group must be made up as some base group is (a culture's organisms,
# each with its own antibiotic panel; not one susceptibility row, nor one organism's panel under another organism; a
# draw's panel of tests, not one result of it).
GROUP_IDS: dict[str, tuple[str, tuple[str, ...]]] = {"microbiologyevents": ("micro_specimen_id",
                                                                           ("org_itemid", "ab_itemid")),
                                                     "labevents": ("specimen_id", ("itemid",))}


def _make_up(rows: list[tuple[Any, ...]]) -> tuple[tuple[str, ...], ...]:
    return tuple(sorted(tuple(str(to_json_value(v)) for v in r) for r in rows))


def incoherent_rows(con: duckdb.DuckDBPyConnection, overlay: Any, base: str = "base",
                    cache: dict[Any, Any] | None = None) -> list[str]:
    """What no base row looks like among the rows ``overlay`` inserts: a category beside a companion value the base
    never stores with it (:func:`coherent_pairs`), a link id at a time the base never gives it
    (:data:`~ehrgym.bench.noise.base.LINK_IDS`: a specimen drawn at two times), a time's day column on another day
    (``chartdate`` beside ``charttime``), or a new group id (:data:`GROUP_IDS`) whose rows are made up as no base
    group's are. Empty when every inserted row could have been stored by the hospital."""
    cache = {} if cache is None else cache
    out: list[str] = []
    for table, edit in overlay.merged().items():
        rows = edit.insert_rows
        if not rows:
            continue
        qualified = f"{base}.{table_spec(table).qualified}"
        for t, column, other in coherent_pairs():
            if t != table:
                continue
            key: tuple[str, ...] = ("pairs", table, column, other)
            if key not in cache:
                cache[key] = {(to_json_value(a), to_json_value(b)) for a, b in con.execute(
                    f"SELECT DISTINCT {column}, {other} FROM {qualified}").fetchall()}
            for r in rows:
                pair = (r.get(column), r.get(other))
                if pair[0] is not None and pair not in cache[key]:
                    out.append(f"{table}: {column}={pair[0]!r} with {other}={pair[1]!r}, which no base row holds")
        for col in LINK_IDS.get(table, ()):
            time_col = LINK_TIMES[table]
            ids = sorted({r[col] for r in rows if r.get(col) is not None})
            if not ids:
                continue
            times: dict[Any, set[str]] = {}
            for link, stamp in con.execute(f"SELECT DISTINCT {col}, {time_col} FROM {qualified} WHERE {col} IN "
                                           f"({', '.join('?' for _ in ids)})", ids).fetchall():
                times.setdefault(link, set()).add(str(to_json_value(stamp)))
            for r in rows:
                if r.get(col) in times and str(r.get(time_col)) not in times[r[col]]:
                    out.append(f"{table}: {col} {r[col]} at {r.get(time_col)}, where the base has it only at "
                               f"{sorted(times[r[col]])[:2]}")
        for name in sorted({c for r in rows for c in r if c.endswith("time")}):
            day = name[:-4] + "date"
            for r in rows:
                if r.get(name) is not None and r.get(day) is not None and str(r[day])[:10] != str(r[name])[:10]:
                    out.append(f"{table}: {day} {r[day]} beside {name} {r[name]}, another day")
        if table in GROUP_IDS:
            id_col, parts = GROUP_IDS[table]
            key = ("make-ups", table)
            if key not in cache:
                got = con.execute(f"SELECT list({id_col}) FROM (SELECT DISTINCT {id_col} FROM {qualified})").fetchone()
                make_ups = con.execute(f"SELECT list(row({', '.join(parts)})) FROM {qualified} "
                                       f"WHERE {id_col} IS NOT NULL GROUP BY {id_col}").fetchall()
                cache[key] = (set(got[0] or []) if got else set(),
                              {_make_up([tuple(m) for m in g[0]]) for g in make_ups})
            known, made = cache[key]
            groups: dict[Any, list[dict[str, Any]]] = {}
            for r in rows:
                if r.get(id_col) is not None and r[id_col] not in known:
                    groups.setdefault(r[id_col], []).append(r)
            for gid, members in groups.items():
                if _make_up([tuple(m.get(p) for p in parts) for m in members]) not in made:
                    out.append(f"{table}: new {id_col} {gid} holds {len(members)} rows of {parts} made up as no "
                               f"base {id_col} is")
    return out
