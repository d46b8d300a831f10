"""Set-based entity sampling: one SQL statement per template draws and profiles its candidates.

The template's ``sampler_sql`` lists every candidate entity; a seeded hash orders them (the same
seed gives the same draw on the same database), and a LATERAL sub-query profiles each drawn
candidate's evidence in the same statement. A candidate is *eligible* only if its evidence is
naturally clean — real data has its own noise: no evidence, duplicated or conflicting natural
keys, missing numbers, values outside the physiologic range, mixed units, or rows timestamped
outside their stay all exclude it (counted by reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from ehrgym.bench.sqlrender import render_columns, render_sql
from ehrgym.bench.templates.base import Template
from ehrgym.db.connect import one_row
from ehrgym.db.items import item_reference
from ehrgym.db.schema import table_spec
from ehrgym.errors import BenchmarkError

PROFILE_COLUMNS = ("__n", "__nkey", "__nnull", "__nbad", "__nunit", "__noow")


@dataclass(frozen=True)
class Candidate:
    template_id: str
    index: int  # position in the seeded draw
    params: dict[str, Any]
    profile: dict[str, int]

    @property
    def ineligible_reason(self) -> str | None:
        return evidence_anomaly(self.profile)


def evidence_anomaly(profile: dict[str, int]) -> str | None:
    """What is odd about one entity's evidence (a profile of ``profile_sql``), the first of: no evidence, duplicated
    or conflicting natural keys, missing numbers, implausible values, mixed units, rows outside the stay; None if
    nothing."""
    p = profile
    if p["__n"] == 0:
        return "no_evidence"
    if p["__nkey"] != p["__n"]:
        return "natural_duplicates_or_conflicts"
    if p["__nnull"]:
        return "natural_missing_values"
    if p["__nbad"]:
        return "natural_implausible_values"
    if p["__nunit"] > 1:
        return "natural_mixed_units"
    if p["__noow"]:
        return "natural_out_of_window"
    return None


def _bounds_join(t: Template) -> tuple[str, str]:
    """(join clause, 'value is implausible' predicate) for the profile."""
    ev = t.evidence
    if not ev.value_col:
        return "", "FALSE"
    if ev.item_col and ev.item_param:
        rows = ", ".join(f"({r.itemid}, {r.plausible_min!r}, {r.plausible_max!r})"
                         for r in sorted(item_reference().values(), key=lambda r: r.itemid))
        join = f" LEFT JOIN (VALUES {rows}) b(itemid, lo, hi) ON b.itemid = e.{ev.item_col}"
        return join, f"e.{ev.value_col} < b.lo OR e.{ev.value_col} > b.hi"
    if ev.bounds:
        lo, hi = ev.bounds
        return "", f"e.{ev.value_col} < {lo!r} OR e.{ev.value_col} > {hi!r}"
    return "", "FALSE"


def profile_sql(t: Template, pick: str, params: dict[str, Any] | None = None) -> str:
    """Profile every drawn candidate of relation ``pick`` in one join (no per-candidate query); with ``params``,
    the one entity they name (its predicate rendered with literals; ``pick`` then any one-row relation)."""
    ev = t.evidence
    spec = table_spec(ev.table)
    if params is None:
        where = render_columns(ev.where, "pick")
        join = f" {render_columns(ev.join, 'pick')}" if ev.join else ""
    else:
        where = render_sql(ev.where, params, {})
        join = f" {render_sql(ev.join, params, {})}" if ev.join else ""
    bjoin, bad = _bounds_join(t)
    wjoin, oow = "", "FALSE"
    if ev.window and ev.time_col:
        w = ev.window
        wjoin = f" LEFT JOIN {table_spec(w.table).qualified} w ON w.{w.key} = e.{w.key}"
        oow = f"w.{w.start} IS NULL OR e.{ev.time_col} < w.{w.start} OR e.{ev.time_col} > w.{w.end}"
    rel = f"({spec.qualified} e{join})" if join else f"{spec.qualified} e"
    k0 = f"e.{ev.key[0]}"
    key = ", ".join(f"e.{k}" for k in ev.key)
    nnull = f"count({k0}) - count(e.{ev.value_col})" if ev.value_col else "0"
    nunit = f"count(DISTINCT e.{ev.unit_col})" if ev.unit_col else "0"
    return (f"SELECT pick.*, count({k0}) AS __n, count(DISTINCT CASE WHEN {k0} IS NOT NULL THEN row({key}) END) "
            f"AS __nkey, {nnull} AS __nnull, count(*) FILTER (WHERE {k0} IS NOT NULL AND ({bad})) AS __nbad, "
            f"{nunit} AS __nunit, count(*) FILTER (WHERE {k0} IS NOT NULL AND ({oow})) AS __noow "
            f"FROM {pick} pick LEFT JOIN {rel} ON {where}{wjoin}{bjoin} GROUP BY ALL")


def candidate_table(con: duckdb.DuckDBPyConnection, t: Template) -> str:
    """A temp table holding the template's sampler result (shared by templates with the same sampler)."""
    import hashlib

    name = "ehrgym_cand_" + hashlib.sha256(t.sampler_sql.encode()).hexdigest()[:16]
    exists = one_row(con, "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [name])[0]
    if not exists:
        con.execute(f"CREATE TEMP TABLE {name} AS {t.sampler_sql}")
    return f"temp.main.{name}"


def sample_sql(t: Template, n: int, seed: int, source: str | None = None) -> str:
    source = source or f"({t.sampler_sql})"
    pick = (f"(SELECT * FROM {source} cand ORDER BY hash(cand, {int(seed)}), cand::VARCHAR LIMIT {int(n)})")
    return profile_sql(t, pick)


def sample_candidates(con: duckdb.DuckDBPyConnection, t: Template, n: int, seed: int) -> list[Candidate]:
    """Draw up to ``n`` candidates of ``t`` (profiled), in a seeded order."""
    try:
        source = candidate_table(con, t)
        cur = con.execute(sample_sql(t, n, seed, source))
    except duckdb.Error as exc:
        raise BenchmarkError(f"sampler of template {t.id!r} failed: {exc}") from exc
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    out = []
    for rec in rows:
        data = dict(zip(names, rec))
        profile = {k: int(data.pop(k) or 0) for k in PROFILE_COLUMNS}
        out.append((data, profile))
    missing = set(t.params) - set(names)
    if out and missing:
        raise BenchmarkError(f"sampler of template {t.id!r} does not return parameters {sorted(missing)}")
    keyed = sorted(out, key=lambda dp: _order_key(dp[0], seed))
    return [Candidate(t.id, i, d, p) for i, (d, p) in enumerate(keyed)]


def _order_key(params: dict[str, Any], seed: int) -> tuple:
    import hashlib

    text = repr((seed, sorted((k, str(v)) for k, v in params.items())))
    return (hashlib.sha256(text.encode()).hexdigest(),)
