"""Proofs that a query reads none of the rows a background edits, so that its result cannot change with it.

A pair's background (:mod:`ehrgym.bench.background`) deletes and re-stores rows of *other* patients. A query
whose every read of such a table is restricted to the question's own patient — an equality of the row's
``subject_id``, ``hadm_id`` or ``stay_id`` with one of the question's ids, directly or through equalities with
the same column of another restricted table of its scope — gives the same result with or without the
background, so the builder need not run it again to check (it does so for every other query).

The proof is syntactic and conservative (sqlglot, DuckDB dialect): a table read in a scope without such a
restriction (a derived table with no WHERE, a LEFT JOIN's preserved side, ``IN`` lists), anything whose result
depends on how tied rows are ordered (``ORDER BY``, ``LIMIT``, windows, aggregates other than count, min, max,
sum and avg — see ``ORDERED``), a dense row id (the background renumbers ``labevent_id``/``microevent_id``), a
``*`` over a table with such an id, or SQL sqlglot cannot parse — any of these and the query is not proven
local. It relies on one fact of MIMIC-IV: an admission or stay id names one patient's admission or stay, and
every row of the edited tables carries its patient's ``subject_id``.

:func:`row_filters` proves it for any question, from the rows a background actually changes: it names, for every
read of an edited table, the condition a row must meet to be read there at all (the scope's WHERE and inner joins'
ON terms over that table's columns alone, those linking it to an inner-joined ``VALUES`` list of a concept's
items, and where the table is read through a plain filter in a derived table — a robust SQL's cleaned relation —
the outer query's conditions on it); the background maker then counts the deleted and stored rows that meet one
(:meth:`ehrgym.bench.background.BackgroundMaker.reads_none`). The same refusals apply (order-dependent SQL, dense
row ids, RIGHT/FULL/ASOF/POSITIONAL joins, a read that is not a direct FROM/JOIN source).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp

KEYS: tuple[str, ...] = ("subject_id", "hadm_id", "stay_id")
ROW_IDS: dict[str, str] = {"labevents": "labevent_id", "microbiologyevents": "microevent_id"}
"""Ids that number a table's rows (1, 2, 3 … in scan order in the base), not the things rows are about."""
DENSE_IDS: frozenset[str] = frozenset(ROW_IDS.values())  # background.COPYABLE's dense ids
DENSE_TABLES: frozenset[str] = frozenset({"labevents", "microbiologyevents"})

Key = tuple[str, str]  # (source alias, column)
# Which of several tied rows an ORDER BY … LIMIT, a window or first()/string_agg() picks depends on how DuckDB
# runs the view, not only on the rows and their scan order: a view cut into more rowid ranges (another patient's
# rows deleted) can pick the other of two rows at one time (measured: a conflicting first care unit). Such queries
# are not proven; aggregates whose result does not depend on row order are.
ORDERED: tuple[type[exp.Expression], ...] = (exp.Order, exp.Limit, exp.Fetch, exp.Window, exp.Qualify)
EXACT_AGGREGATES: tuple[type[exp.Expression], ...] = (exp.Count, exp.Min, exp.Max, exp.Sum, exp.Avg)


PROOFS_KEPT = 4096
"""Proofs remembered per process, by SQL text (and tables, ids): a build proves a candidate's clean SQL again for
every subtype tried on it."""


def reads_only_patient(sql: str, tables: Iterable[str], ids: Mapping[str, Iterable[int]]) -> bool:
    """True when every read of ``tables`` in ``sql`` is restricted to rows whose ``subject_id``, ``hadm_id`` or
    ``stay_id`` is one of ``ids[column]`` (see the module docstring); False when that cannot be shown."""
    allowed = tuple((k, frozenset(int(v) for v in ids.get(k, ()))) for k in KEYS)
    return _reads_only_patient(sql, frozenset(t.lower() for t in tables), allowed)


@functools.lru_cache(maxsize=PROOFS_KEPT)
def _reads_only_patient(sql: str, edited: frozenset[str], ids: tuple[tuple[str, frozenset[int]], ...]) -> bool:
    tree = _parsed(sql)
    if not isinstance(tree, exp.Query):
        return False
    if not _order_free(tree) or not _no_dense_ids(tree):
        return False
    allowed = {k: set(v) for k, v in ids}
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in (t for t in tree.find_all(exp.Table) if t.name.lower() not in ctes):
        if table.name.lower() in edited and not _restricted(table, allowed):
            return False
    return True


@functools.lru_cache(maxsize=PROOFS_KEPT)
def order_free(sql: str) -> bool:
    """True when ``sql``'s result cannot depend on the order its tables' rows are read in, but for a float sum's
    last bit: no ``ORDERED`` construct, ``DISTINCT ON`` or function sqlglot does not know (an aggregate such as
    ``mode()`` may pick among ties), aggregates only count, min, max, sum and avg, and one result row at most (an
    aggregate over the whole query, no GROUP BY, set operation or row source at the top), so not even the order of
    its result rows can move. False when that cannot be shown (the pair verifier then serves rows in scan order)."""
    tree = _parsed(sql)
    if not isinstance(tree, exp.Select) or not _order_free(tree):
        return False
    if any(True for _ in tree.find_all(exp.Anonymous)) or any(d.args.get("on") for d in tree.find_all(exp.Distinct)):
        return False
    if tree.args.get("group") or not tree.expressions:
        return False
    if not (tree.args.get("from") or tree.args.get("from_")):
        return True  # scalar subqueries only: one row
    return all(any(f.find_ancestor(exp.Select) is tree for f in e.find_all(exp.AggFunc)) for e in tree.expressions)


@functools.lru_cache(maxsize=512)
def _parsed(sql: str) -> Any:
    """``sql``'s tree (None: sqlglot cannot parse it), shared by both proofs of a check; never changed in place."""
    try:
        return sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.SqlglotError:
        return None


def _sources(select: exp.Select) -> list[tuple[str, exp.Expression, str]]:
    """(alias, source node, join side) of each FROM/JOIN source of ``select`` ("" for FROM and inner joins)."""
    out = []
    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is not None:
        out.append((from_.this.alias_or_name.lower(), from_.this, ""))
    for join in select.args.get("joins") or []:
        out.append((join.this.alias_or_name.lower(), join.this, (join.side or "").upper()))
    return out


def _conjuncts(node: Any) -> list[Any]:
    """The AND-ed terms of a condition (sqlglot nodes)."""
    if node is None:
        return []
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


def _restricted(table: exp.Table, allowed: dict[str, set[int]]) -> bool:
    select = table.find_ancestor(exp.Select)
    if select is None:
        return False
    sources = _sources(select)
    me = next((alias for alias, node, _ in sources if node is table), None)
    if me is None:  # not a direct source of its SELECT (a table function's argument, …): not shown
        return False
    joins = select.args.get("joins") or []
    if any(_join_kind(j) is None for j in joins):
        return False  # which side a RIGHT/FULL join preserves is not worth proving here
    # what filters rows of the scope's inner part: WHERE and inner joins' ON; a LEFT (SEMI, ANTI) join's ON filters
    # only the joined (right) table's rows, so it counts for that table alone
    where = select.args.get("where")
    conds = _conjuncts(where.this if where is not None else None)
    for join in joins:
        alias = join.this.alias_or_name.lower()
        if _join_kind(join) == "inner" or alias == me:
            conds += _conjuncts(join.args.get("on"))
    only = sources[0][0] if len(sources) == 1 else None
    parent: dict[Key, Key] = {}

    def find(k: Key) -> Key:
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    def key(col: exp.Column) -> Key | None:
        qualifier = col.table.lower() if col.table else only
        return (qualifier, col.name.lower()) if qualifier else None

    bound: dict[Key, set[tuple[str, int]]] = {}
    literal_of: list[tuple[Key, str, int]] = []
    for c in conds:
        if not isinstance(c, exp.EQ):
            continue
        left, right = c.this, c.expression
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            a, b = key(left), key(right)
            if a and b and a[1] == b[1] and a[1] in KEYS:  # only the same id column is the same id
                parent[find(a)] = find(b)
        for col, lit in ((left, right), (right, left)):
            if isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and not lit.is_string:
                k = key(col)
                if k and k[1] in KEYS:
                    try:
                        literal_of.append((k, k[1], int(lit.this)))
                    except ValueError:
                        continue
    for k, name, value in literal_of:
        bound.setdefault(find(k), set()).add((name, value))
    # a source is restricted when one of its id columns equals one of the question's ids, directly or through the
    # same column of other sources, or equals the same id column of a restricted source (an admission, stay or
    # patient id names one patient's rows); CTE and derived-table sources restrict what they contain themselves
    restricted: set[str] = set()
    changed = True
    while changed:
        changed = False
        held = {find((a, n)) for a in restricted for n in KEYS}
        for alias, _, _ in sources:
            if alias in restricted:
                continue
            for name in KEYS:
                cls = find((alias, name))
                values = bound.get(cls, set())
                if any(n != name or v not in allowed[name] for n, v in values):
                    continue  # equal to an id that is not the question's: not shown
                if values or cls in held:
                    restricted.add(alias)
                    changed = True
                    break
    return me in restricted


ROW = "__row"  # the alias row_filters' conditions read a row of their table as


def row_filters(sql: str, tables: Iterable[str]) -> dict[str, list[str]] | None:
    """Every read of ``tables`` in ``sql``: table -> [condition], the condition (DuckDB SQL over the table's own
    columns, read as ``ROW``; ``TRUE`` where none is known) that a row of the table must meet to be read there at all.
    A row meeting none of its table's conditions is never read: deleting it, or storing a copy of it, leaves the
    query's result as it is. None when that cannot be shown (see :func:`reads_only_patient`: order-dependent SQL,
    a dense row id, a RIGHT/FULL join, a read that is not a direct FROM/JOIN source, SQL sqlglot cannot parse)."""
    found = _row_filters(sql, frozenset(t.lower() for t in tables))
    return None if found is None else {table: list(conditions) for table, conditions in found.items()}


@functools.lru_cache(maxsize=PROOFS_KEPT)
def _row_filters(sql: str, edited: frozenset[str]) -> dict[str, tuple[str, ...]] | None:
    """:func:`row_filters`, remembered (callers get a copy)."""
    from ehrgym.db.schema import table_spec

    tree = _parsed(sql)
    if not isinstance(tree, exp.Query) or not _order_free(tree) or not _no_dense_ids(tree):
        return None
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    out: dict[str, list[str]] = {}
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes or name not in edited:
            continue
        try:
            columns = {c.name.lower() for c in table_spec(name).columns}
        except Exception:  # noqa: BLE001 — a table the schema does not know: no condition is its own
            columns = set()
        select = table.find_ancestor(exp.Select)
        me = _alias_in(select, table) if select is not None else None
        if select is None or me is None:
            return None
        terms = _scope_terms(select, table, me, columns)
        if terms is None:
            return None
        # a plain filter of the table in a derived table (``(SELECT * FROM t WHERE …) e``): the outer query's
        # conditions on ``e`` are conditions on the same rows
        node: Any = select
        while _plain_filter(node) and isinstance(node.parent, exp.Subquery):
            derived = node.parent
            outer = derived.find_ancestor(exp.Select)
            alias = _alias_in(outer, derived) if outer is not None else None
            if outer is None or alias is None:
                break
            columns = _projected(node, columns)
            more = _scope_terms(outer, derived, alias, columns)
            if more is None:
                return None
            terms += more
            node = outer
        out.setdefault(name, []).append(" AND ".join(terms) or "TRUE")
    return {table: tuple(conditions) for table, conditions in out.items()}


def _alias_in(select: Any, node: Any) -> str | None:
    """The alias of ``node`` as a direct FROM/JOIN source of ``select`` (None when it is not one)."""
    return next((alias for alias, source, _ in _sources(select) if source is node), None)


def _plain_filter(select: Any) -> bool:
    """``SELECT *`` or plain columns of one source, filtered by WHERE only: its rows are the source's rows."""
    if not isinstance(select, exp.Select) or select.args.get("joins") or len(_sources(select)) != 1:
        return False
    if any(select.args.get(k) for k in ("group", "having", "distinct", "qualify", "limit", "order", "windows")):
        return False
    return all(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and not isinstance(e.this, exp.Star))
               for e in select.expressions)


def _projected(select: exp.Select, columns: set[str]) -> set[str]:
    """The columns a plain filter passes on (all of ``columns`` under ``*``)."""
    if any(isinstance(e, exp.Star) for e in select.expressions):
        return set(columns)
    return {e.name.lower() for e in select.expressions if isinstance(e, exp.Column)} & columns


def _scope_terms(select: exp.Select, node: Any, me: str, columns: set[str]) -> list[str] | None:
    """The conditions ``select`` puts on the rows of its source ``node`` (alias ``me``, columns ``columns``), as
    SQL over the row ``ROW``; None when a join of the scope is not proven (:func:`_join_kind`)."""
    sources = _sources(select)
    joins = select.args.get("joins") or []
    if any(_join_kind(j) is None for j in joins):
        return None
    joined = next((j for j in joins if j.this is node), None)
    own_only = joined is not None and _join_kind(joined) == "own"
    # a row is read only where every condition that filters rows of this source holds: WHERE and inner joins'
    # ON; a LEFT (SEMI, ANTI) join's own ON alone for the table it joins (its rows failing WHERE may still
    # leave a null-extended row, or none, behind)
    where = select.args.get("where")
    conds = [] if own_only else _conjuncts(where.this if where is not None else None)
    for join in joins:
        if (_join_kind(join) == "inner" and not own_only) or join is joined:
            conds += _conjuncts(join.args.get("on"))

    def text(cond: exp.Expression) -> str:
        cond = cond.transform(lambda n: exp.Column(this=n.this.copy(), table=exp.to_identifier(ROW))
                              if isinstance(n, exp.Column) and (n.table or "").lower() == me else n)
        return f"({cond.sql(dialect='duckdb')})"
    own = [c for c in conds if _reads_only(c, me, columns, single=len(sources) == 1)]
    terms = [text(c) for c in own]
    # an inner-joined VALUES list (a concept's items) filters through its rows: the conditions over this
    # source and such lists alone hold for some row of the lists
    lists = {alias: source for alias, source, _ in sources if isinstance(source, exp.Values) and (
        source is sources[0][1] or (isinstance(source.parent, exp.Join) and _join_kind(source.parent) == "inner"))}
    linked = [(c, used) for c in conds if c not in own and (used := _list_reads(c, me, columns, lists))]
    if any(me in used for _, used in linked):
        names = {a for _, used in linked for a in used} - {me}
        inner = " AND ".join(text(c) for c, used in linked if used <= names | {me})
        froms = ", ".join(lists[a].sql(dialect="duckdb") for a in sorted(names))
        terms.append(f"EXISTS (SELECT 1 FROM {froms} WHERE {inner})")
    return terms


def _join_kind(join: exp.Join) -> str | None:
    """"inner" (its ON filters the rows of every source), "own" (its ON filters only the joined table's rows: LEFT,
    SEMI, ANTI) or None (RIGHT, FULL, ASOF, POSITIONAL and anything else: not proven here)."""
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    method = (join.args.get("method") or "").upper()
    if side in ("RIGHT", "FULL") or method in ("ASOF", "POSITIONAL"):
        return None
    if side == "LEFT" or kind in ("SEMI", "ANTI"):
        return "own"
    return "inner" if side == "" and kind in ("", "INNER", "CROSS") else None


def _order_free(tree: Any) -> bool:
    """No construct whose result depends on how tied rows are ordered (``ORDERED``, inexact aggregates)."""
    return not any(True for _ in tree.find_all(*ORDERED)) and not any(
        isinstance(f, exp.AggFunc) and not isinstance(f, EXACT_AGGREGATES) for f in tree.find_all(exp.Func))


def _no_dense_ids(tree: Any) -> bool:
    """No read of a dense row id a background renumbers: not the column by name, not a ``*`` that carries it to the
    query's result (a ``*`` over a dense table, or over a derived table or CTE whose own ``*`` carries it), not a
    table alias read as a whole row. A ``*`` of an inner query that the outer one reads column by column carries
    the id nowhere (``count(*)`` reads none): within it the renumbering only relabels the same rows one to one."""
    ctes = {cte.alias_or_name.lower(): cte.this for cte in tree.find_all(exp.CTE)}
    if not any(t.name.lower() in DENSE_TABLES for t in tree.find_all(exp.Table) if t.name.lower() not in ctes):
        return True
    if any(c.name.lower() in DENSE_IDS for c in tree.find_all(exp.Column)):
        return False
    memo: dict[int, bool] = {}
    carriers: set[str] = set()

    def source_carries(node: Any) -> bool:
        if isinstance(node, exp.Table):
            name = node.name.lower()
            return carries(ctes[name]) if name in ctes else name in DENSE_TABLES
        if isinstance(node, exp.Subquery):
            return carries(node.this)
        return not isinstance(node, exp.Values)

    def carries(query: Any) -> bool:
        """Whether ``query``'s result has a column holding a dense id."""
        if isinstance(query, exp.SetOperation):
            return carries(query.left) or carries(query.right)
        if isinstance(query, exp.Subquery):
            return carries(query.this)
        if not isinstance(query, exp.Select):
            return True
        if id(query) not in memo:
            memo[id(query)] = False
            sources = _sources(query)
            carriers.update(alias for alias, node, _ in sources if source_carries(node))
            found = False
            for item in query.expressions:
                star = item.this if isinstance(item, exp.Column) and isinstance(item.this, exp.Star) else item
                if not isinstance(star, exp.Star):
                    continue
                over = item.table.lower() if isinstance(item, exp.Column) and item.table else None
                found = found or any((over is None or alias == over) and source_carries(node)
                                     for alias, node, _ in sources)
            memo[id(query)] = found
        return memo[id(query)]

    if carries(tree):
        return False
    for star in tree.find_all(exp.Star):  # a * anywhere but a projection or count(*): not shown
        item = star.parent if isinstance(star.parent, exp.Column) else star
        if not isinstance(star.parent, exp.Count) and not isinstance(item.parent, exp.Select):
            return False
    for select in tree.find_all(exp.Select):
        carries(select)
    return not any(not c.table and c.name.lower() in carriers for c in tree.find_all(exp.Column))


def _list_reads(cond: exp.Expression, alias: str, columns: set[str], lists: dict[str, exp.Values]) -> set[str]:
    """The sources ``cond`` reads when it reads only ``alias``'s own columns and the columns of the VALUES lists
    ``lists`` (alias -> list), at least one list's; empty otherwise."""
    if not lists or any(True for _ in cond.find_all(exp.Select, exp.Subquery, exp.Placeholder, exp.Parameter)):
        return set()
    used: set[str] = set()
    for col in cond.find_all(exp.Column):
        table = col.table.lower() if col.table else ""
        if col.args.get("db") or col.args.get("catalog") or not table:
            return set()
        if table == alias and col.name.lower() in columns:
            used.add(alias)
        elif table in lists and col.name.lower() in {c.name.lower() for c in _list_columns(lists[table])}:
            used.add(table)
        else:
            return set()
    return used if used - {alias} else set()


def _list_columns(values: exp.Values) -> list[exp.Identifier]:
    alias = values.args.get("alias")
    return list(alias.columns) if alias is not None else []


def _reads_only(cond: exp.Expression, alias: str, columns: set[str], single: bool) -> bool:
    """Whether ``cond`` is a plain row condition on ``alias``'s columns alone: no subquery, every column qualified
    by the alias (or, in a scope of one source, unqualified and one of the table's own columns)."""
    if any(True for _ in cond.find_all(exp.Select, exp.Subquery, exp.Placeholder, exp.Parameter)):
        return False
    cols = list(cond.find_all(exp.Column))
    if not cols:
        return False
    for col in cols:
        if col.args.get("db") or col.args.get("catalog"):
            return False
        if col.table:
            if col.table.lower() != alias or col.name.lower() not in columns:
                return False
        elif not (single and col.name.lower() in columns):
            return False
    return True
