"""SQL structural complexity, counted on the sqlglot AST.

``sql_complexity(sql)`` is the number of AST nodes (sqlglot, DuckDB dialect) whose class is one
of the structural kinds below — each occurrence counts once:

* query blocks: ``SELECT``, set operations (``UNION``/``INTERSECT``/``EXCEPT``), sub-queries,
  CTEs (each ``WITH`` member), ``LATERAL``;
* relations: every table reference, every ``JOIN``;
* clauses: ``WHERE``, ``GROUP BY``, ``HAVING``, ``QUALIFY``, ``ORDER BY``, ``LIMIT``, ``DISTINCT``;
* predicates: comparisons (``= <> < <= > >=``), ``BETWEEN``, ``IN``, ``LIKE``/``ILIKE``,
  ``IS [NOT] NULL``, ``EXISTS``, and the connectives ``AND``/``OR``/``NOT``;
* expressions: ``CASE`` (and each ``WHEN``), window functions (``OVER``), aggregate functions,
  every other function call (scalar functions and casts), arithmetic operators (``+ - * /``).

Column references, literals, aliases and parentheses do not count. The EHR-Complex benchmark
reports 31.93 structural components per query on real MIMIC-IV; this is the same kind of count.
"""

from __future__ import annotations

import re
from functools import lru_cache

import sqlglot
from sqlglot import exp

STRUCTURAL: tuple[type[exp.Expr], ...] = (  # Expr: AggFunc and Func are mixins, not Expressions
    exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery, exp.CTE, exp.Lateral,
    exp.Table, exp.Join,
    exp.Where, exp.Group, exp.Having, exp.Qualify, exp.Order, exp.Limit, exp.Distinct,
    exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between, exp.In, exp.Like, exp.ILike,
    exp.Is, exp.Exists, exp.And, exp.Or, exp.Not,
    exp.Case, exp.If, exp.Window, exp.AggFunc, exp.Func, exp.Cast, exp.TryCast,
    exp.Add, exp.Sub, exp.Mul, exp.Div,
)


_STRING = re.compile(r"'(?:[^']|'')*'")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def _shape(sql: str) -> str:
    """``sql`` with its literals blanked: queries of one template share a shape (and a parse)."""
    return _NUMBER.sub("0", _STRING.sub("'?'", sql))


@lru_cache(maxsize=8192)
def _analyse(shape: str) -> tuple[int, tuple[str, ...]]:
    tree = sqlglot.parse_one(shape, read="duckdb")
    # exp.If is the node sqlglot uses for each WHEN branch; AggFunc is a Func (counted once).
    count = sum(1 for node in tree.walk() if isinstance(node, STRUCTURAL))
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    names = {t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name not in ctes}
    return count, tuple(sorted(names))


def sql_complexity(sql: str) -> int:
    """Structural-component count of ``sql`` (see the module docstring)."""
    return _analyse(_shape(sql))[0]


def sql_tables(sql: str) -> list[str]:
    """Sorted bare names of the MIMIC-IV tables ``sql`` reads (CTE names excluded)."""
    return list(_analyse(_shape(sql))[1])


def complexity_by_tier(tasks) -> dict[str, dict[str, float | int | None]]:
    """Gold-SQL complexity per difficulty tier over ``tasks`` (clean and noisy twins alike).

    The tier is read from the task's ``meta['tier']`` (recorded by the builder); tasks of older
    builds without it take their template's tier from the registry, and ``"unknown"`` when the
    template is no longer registered. Returns ``{tier: {"tasks", "mean", "median", "clean_mean"}}``
    with tiers as strings (JSON keys), sorted.
    """
    from statistics import mean, median

    from ehrgym.bench.templates.registry import all_templates

    known = {t.id: t.tier for t in all_templates()}
    groups: dict[str, list[tuple[int, bool]]] = {}
    for t in tasks:
        tier = t.meta.get("tier") or known.get(t.template_id)
        key = str(tier) if tier else "unknown"
        groups.setdefault(key, []).append((int(t.meta.get("complexity", 0)), t.variant == "clean"))
    out: dict[str, dict[str, float | int | None]] = {}
    for key in sorted(groups):
        vals = [c for c, _ in groups[key]]
        clean = [c for c, is_clean in groups[key] if is_clean]
        out[key] = {"tasks": len(vals), "mean": round(mean(vals), 2), "median": float(median(vals)),
                    "clean_mean": round(mean(clean), 2) if clean else None}
    return out
