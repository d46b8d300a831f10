"""The SQL gate: admits read-only queries over the episode's MIMIC-IV tables, nothing else.

Two independent readings of the query must both agree that it is safe (defence in depth):

1. **sqlglot** (DuckDB dialect) classifies the statement and answers schema exploration
   (``SHOW TABLES``, ``DESCRIBE t``) from the kit's static schema, rewrites
   ``information_schema.columns``/``.tables`` to a static copy holding only the 31 exposed
   tables, and checks every table, schema, catalog and function against allow-lists.
2. **DuckDB's own reading** of the *exact* text that will run, in one of two modes
   (``SqlGate(duckdb_check=...)``):

   ``"tokens"`` (default, ~0.05 ms): DuckDB's lexer must split the text into exactly the tokens
   sqlglot parsed (same offsets, same spans, same kind: word, string, number, operator; comments
   where sqlglot saw comments), so a difference between the two readers (comments, string
   escapes, quoting, unicode escapes, …) cannot hide code from layer 1. On DuckDB's tokens,
   no identifier may name a catalog, a system schema or a system view (``base``,
   ``ehrgym_meta``, ``sqlite_master``, …) and a word followed by ``(`` must be an allowed
   function (or an alias the query itself defines with a column list).

   ``"ast"`` (~0.6 ms more): DuckDB's parser (``json_serialize_sql`` on a private connection)
   parses the text and its full AST is checked again (base tables, table functions, functions).

   ``tokens`` is the default because a DuckDB round trip costs ~0.3 ms on its own, more than
   the rest of the gate; ``ast`` is there for those who want a second full parse.

On top of the gate, episode connections run with ``enable_external_access=false`` and
``lock_configuration=true`` (see :mod:`ehrgym.env.pool`). Every rejection raises
:class:`~ehrgym.errors.GateRejection` whose message says what *is* allowed.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Iterator

import duckdb
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from ehrgym.errors import GateRejection

INFO_SCHEMA = "ehrgym_info"  # static, public copy of information_schema.{columns,tables}
TABLE_FUNCTIONS_ALLOWED: frozenset[str] = frozenset({"range", "generate_series", "unnest"})

ALLOWED_TEXT = (
    "Allowed: exactly one read-only SELECT statement (WITH, UNION, subqueries, joins, window "
    "functions are fine) over the MIMIC-IV tables of schemas mimiciv_hosp and mimiciv_icu "
    "(write `labevents` or `mimiciv_hosp.labevents`); schema exploration with SHOW TABLES, "
    "DESCRIBE <table> or SELECT ... FROM information_schema.columns / information_schema.tables."
)

# Scalar/aggregate functions that touch settings, the catalog, sessions, sequences or files.
_DENY_FUNCTION_PREFIXES: tuple[str, ...] = (
    "__internal", "pg_", "has_", "current_", "duckdb_", "json_serialize", "json_deserialize",
    "json_execute", "inet_", "parse_duckdb_log", "txid_", "icu_collate_",
)
_DENY_FUNCTIONS: frozenset[str] = frozenset({
    "getvariable", "getenv", "col_description", "obj_description", "shobj_description", "nextval",
    "currval", "setval", "version", "write_log", "sleep_ms", "setseed", "in_search_path", "user",
    "session_user", "get_block_size", "invoke", "stats", "transaction_timestamp", "read_blob",
    "read_text", "current_setting", "query", "query_table", "glob", "alias", "format_pg_type",
    "format_type", "can_cast_implicitly", "finalize", "combine", "to_aggregate_state",
    "export_state", "error",
})
# sqlglot's typed function classes that stand for something outside the allow-list.
_DENY_SQLGLOT_CLASSES: tuple[str, ...] = (
    "ReadCSV", "ReadParquet", "ToFile", "NextValueFor", "SessionUser", "CurrentUser", "CurrentRole",
    "CurrentSchema", "CurrentSchemas", "CurrentCatalog", "CurrentDatabase", "CurrentSession",
    "CurrentVersion", "CurrentUserId", "CurrentStatement", "CurrentTransaction", "CurrentAccount",
    "CurrentClient", "CurrentIpAddress", "CurrentRegion", "CurrentWarehouse", "CurrentAvailableRoles",
    "CurrentSecondaryRoles", "CurrentRoleType", "CurrentOrganizationName", "CurrentOrganizationUser",
    "CurrentAccountName", "JSONTable", "XMLTable", "GenerateTable", "SplitToTable",
    "StrtokSplitToTable",
)
_CATALOG_LIKE: frozenset[str] = frozenset({"base", "memory", "system", "temp", "ehrgym_meta", "information_schema",
                                          "pg_catalog", "main", INFO_SCHEMA})
_ALLOWED_ROOTS: tuple[type[exp.Expression], ...] = (exp.Select, exp.SetOperation, exp.Subquery)
# DuckDB table-reference kinds an admitted query may contain (everything else is refused).
_DUCKDB_TABLEREFS: frozenset[str] = frozenset({"BASE_TABLE", "TABLE_FUNCTION", "SUBQUERY", "JOIN",
                                               "EXPRESSION_LIST", "EMPTY", "PIVOT",
                                               # query nodes carry a "sample" key, too
                                               "SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE",
                                               "CTE_NODE"})


def _fresh_duckdb_names(sql: str) -> frozenset[str]:
    """The first column of ``sql`` on a fresh in-memory DuckDB, lower-cased (catalog facts)."""
    con = duckdb.connect(":memory:")
    try:
        return frozenset(str(r[0]).lower() for r in con.execute(sql).fetchall())
    finally:
        con.close()


@lru_cache(maxsize=1)
def duckdb_function_allowlist() -> frozenset[str]:
    """Names of DuckDB's scalar, aggregate, window and macro functions minus the deny-list."""
    names = _fresh_duckdb_names("SELECT DISTINCT function_name FROM duckdb_functions() "
                                "WHERE function_type IN ('scalar', 'aggregate', 'window', 'macro')")
    return frozenset(n for n in names
                     if n not in _DENY_FUNCTIONS and not n.startswith(_DENY_FUNCTION_PREFIXES))


@lru_cache(maxsize=1)
def callable_names() -> frozenset[str]:
    """Every function name DuckDB knows, of any kind (scalar, aggregate, table, pragma, macro)."""
    return _fresh_duckdb_names("SELECT DISTINCT function_name FROM duckdb_functions()")


@lru_cache(maxsize=1)
def duckdb_keywords() -> frozenset[str]:
    return _fresh_duckdb_names("SELECT keyword_name FROM duckdb_keywords()")


@lru_cache(maxsize=1)
def reachable_system_relations() -> frozenset[str]:
    """Views and tables a bare name reaches on any DuckDB connection (schemas ``main``, ``pg_catalog``)."""
    return _fresh_duckdb_names("SELECT view_name FROM duckdb_views() WHERE schema_name IN ('main', 'pg_catalog') "
                               "UNION SELECT table_name FROM duckdb_tables()")


@lru_cache(maxsize=1)
def system_object_names() -> frozenset[str]:
    """Names of every view/table a fresh DuckDB exposes (CTE names must not shadow them)."""
    return _fresh_duckdb_names("SELECT view_name FROM duckdb_views() UNION SELECT table_name FROM duckdb_tables() "
                               "UNION SELECT function_name FROM duckdb_functions() "
                               "WHERE function_type IN ('table', 'table_macro', 'pragma')"
                               ) | {"build_info", "base", "system", "temp", "memory"}


@dataclass(frozen=True)
class StaticResult:
    """A result the gate answers itself (schema exploration), without touching the database."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class GateDecision:
    """An admitted query: either ``sql`` to run on the episode connection or a ``static`` answer."""

    kind: str                      # "query" | "static"
    sql: str = ""
    static: StaticResult | None = None
    tables: tuple[str, ...] = ()   # MIMIC-IV tables the query reads
    rewritten: bool = False        # True when ``sql`` differs from what the agent wrote


def reject(reason: str) -> GateRejection:
    return GateRejection(f"Query refused: {reason}. {ALLOWED_TEXT}")


# ---------------------------------------------------------------------------------------------
# Static schema exploration (answered from the kit's schema, never from the connection)
# ---------------------------------------------------------------------------------------------

def _profile(profile: Any = None) -> Any:
    from ehrgym.db.profile import mimic_profile

    return profile if profile is not None else mimic_profile()


def show_tables(_: exp.Expression | None = None, profile: Any = None) -> StaticResult:
    rows = tuple((spec.schema, spec.name) for spec in _profile(profile).tables)
    return StaticResult(("schema", "table"), rows)


def describe_table(name: str, profile: Any = None) -> StaticResult:
    profile = _profile(profile)
    try:
        spec = profile.table_spec(name)
    except KeyError:
        raise reject(f"DESCRIBE names unknown table {name!r}; SHOW TABLES lists the {len(profile.tables)} "
                     f"tables") from None
    rows = tuple((c.name, c.duckdb_type, "NO" if c.required else "YES") for c in spec.columns)
    return StaticResult(("column_name", "column_type", "null"), rows)


def info_schema_sql(profile: Any = None) -> list[str]:
    """DDL of the static ``ehrgym_info`` schema created on every episode connection."""
    cols = []
    tabs = []
    for spec in _profile(profile).tables:
        tabs.append(f"('memory', '{spec.schema}', '{spec.name}', 'VIEW')")
        for i, c in enumerate(spec.columns, 1):
            cols.append(f"('memory', '{spec.schema}', '{spec.name}', '{c.name}', {i}, '{c.duckdb_type}', "
                        f"'{'NO' if c.required else 'YES'}')")
    return [
        f"CREATE SCHEMA IF NOT EXISTS {INFO_SCHEMA}",
        f"CREATE OR REPLACE TABLE {INFO_SCHEMA}.columns AS SELECT * FROM (VALUES {', '.join(cols)}) "
        "AS t(table_catalog, table_schema, table_name, column_name, ordinal_position, data_type, is_nullable)",
        f"CREATE OR REPLACE TABLE {INFO_SCHEMA}.tables AS SELECT * FROM (VALUES {', '.join(tabs)}) "
        "AS t(table_catalog, table_schema, table_name, table_type)",
    ]


# ---------------------------------------------------------------------------------------------
# Statement handlers: one small object per admitted statement kind (a registry, not if/elif)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Parsed:
    """sqlglot's tokens of the query text (layer 2 compares DuckDB's lexer against them)."""

    tokens: list[Token]
    code: "list[DuckToken] | None" = None  # DuckDB's tokens of the same text, when already lexed


StatementHandler = Callable[["SqlGate", exp.Expression, str, Parsed], GateDecision]
STATEMENT_HANDLERS: dict[type[exp.Expression], StatementHandler] = {}


def statement_handler(*kinds: type[exp.Expression]) -> Callable[[StatementHandler], StatementHandler]:
    def register(fn: StatementHandler) -> StatementHandler:
        for kind in kinds:
            STATEMENT_HANDLERS[kind] = fn
        return fn
    return register


@statement_handler(exp.Show)
def _handle_show(gate: "SqlGate", stmt: exp.Expression, text: str, parsed: Parsed) -> GateDecision:
    what = str(stmt.this or "").upper()
    if what in ("TABLES", "ALL TABLES") or what.endswith("TABLES"):
        return GateDecision("static", static=show_tables(profile=gate.profile))
    raise reject(f"SHOW {what.lower()} is not available; use SHOW TABLES or DESCRIBE <table>")


@statement_handler(exp.Describe)
def _handle_describe(gate: "SqlGate", stmt: exp.Expression, text: str, parsed: Parsed) -> GateDecision:
    target = stmt.this
    if isinstance(target, exp.Table) and isinstance(target.this, exp.Identifier) and not target.catalog:
        if target.db and target.db.lower() not in gate.schemas:
            raise reject(f"schema {target.db!r} is not available")
        return GateDecision("static", static=describe_table(target.name, gate.profile),
                            tables=(gate.profile.table_spec(target.name).name,))
    raise reject("DESCRIBE takes one MIMIC-IV table name (e.g. DESCRIBE labevents)")


@statement_handler(*_ALLOWED_ROOTS)
def _handle_select(gate: "SqlGate", stmt: exp.Expression, text: str, parsed: Parsed) -> GateDecision:
    tables, rewritten, local_names = gate.check_select(stmt)
    sql = stmt.sql(dialect="duckdb", comments=False) if rewritten else text
    if gate.duckdb_check == "ast":
        gate.check_with_duckdb(sql)
    elif rewritten:  # the text that runs is sqlglot's: both lexers read it afresh
        gate.check_with_duckdb_tokens(sql, None, local_names)
    else:
        gate.check_with_duckdb_tokens(sql, parsed.tokens, local_names, parsed.code)
    return GateDecision("query", sql=sql, tables=tuple(sorted(tables)), rewritten=rewritten)


# ---------------------------------------------------------------------------------------------
# The gate
# ---------------------------------------------------------------------------------------------

@dataclass
class SqlGate:
    """Check a query; return a :class:`GateDecision` or raise :class:`GateRejection`.

    Decisions are cached by query text (``cache_size`` entries): the check is a pure function
    of the text, so a repeated query costs a dictionary lookup. In mode ``tokens`` admissions are
    also cached by *shape*: DuckDB's tokens of the text with every string and number literal
    replaced by a marker. A text of a known shape is DuckDB's reading of an admitted query with
    other literal values, and no check of either layer looks inside a literal: names come from
    words (a string in table position, ``FROM 'file'``, is refused, so never cached) and every
    function that reads a string as a name, a path or SQL (``query``, ``read_csv``,
    ``getvariable``, ``current_setting``, …) is outside the allow-list. The length limit applies
    before the lookup; rewritten queries (``information_schema``) and refusals are cached by
    exact text only.
    """

    cache_size: int = 4096
    max_query_chars: int = 100_000
    _cache: "OrderedDict[str, GateDecision | GateRejection]" = field(default_factory=OrderedDict, repr=False)
    _shapes: "OrderedDict[str, GateDecision]" = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _parser_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    duckdb_check: str = "tokens"  # layer 2: "tokens" (DuckDB's lexer) or "ast" (DuckDB's parser)
    _parser: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)
    profile: Any = None  # ehrgym.db.profile.SchemaProfile of the exposed tables (None: MIMIC-IV)

    def __post_init__(self) -> None:
        self.profile = _profile(self.profile)
        self.schemas = frozenset(self.profile.schemas)
        if self.duckdb_check not in DUCKDB_CHECKS:
            raise ValueError(f"duckdb_check must be one of {sorted(DUCKDB_CHECKS)}, got {self.duckdb_check!r}")
        self.functions = duckdb_function_allowlist() | TABLE_FUNCTIONS_ALLOWED | _PARSER_REWRITTEN_CALLS
        self.system_names = system_object_names()
        self.tables = frozenset(spec.name for spec in self.profile.tables)
        exposed = self.tables | {c.name for spec in self.profile.tables for c in spec.columns}
        self.forbidden_identifiers = (_FORBIDDEN_IDENTIFIERS | reachable_system_relations()) - exposed
        self.forbidden_calls = (callable_names() | _DENY_FUNCTIONS) - self.functions
        self.forbidden_keyword_calls = self.forbidden_calls & duckdb_keywords()

    # -- public -------------------------------------------------------------------------------
    def check(self, query: str) -> GateDecision:
        with self._lock:
            hit = self._cache.get(query)
            if hit is not None:
                self._cache.move_to_end(query)
        if hit is None:
            code, shape = (None, None)
            if self.duckdb_check == "tokens" and isinstance(query, str) and len(query) <= self.max_query_chars:
                code, shape = _lex(query)
            if shape is not None:
                with self._lock:
                    known = self._shapes.get(shape)
                    if known is not None:
                        self._shapes.move_to_end(shape)
                if known is not None:
                    hit = replace(known, sql=query)
            if hit is None:
                try:
                    hit = self._decide(query, code)
                except GateRejection as exc:
                    hit = exc
            with self._lock:
                self._cache[query] = hit
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
                if shape is not None and isinstance(hit, GateDecision) and hit.kind == "query" and not hit.rewritten:
                    self._shapes[shape] = hit
                    while len(self._shapes) > self.cache_size:
                        self._shapes.popitem(last=False)
        if isinstance(hit, GateRejection):
            raise GateRejection(self._allowed_here(str(hit)))
        return hit

    def _allowed_here(self, message: str) -> str:
        """A refusal names this gate's tables (an external benchmark's schema, not MIMIC-IV's)."""
        if self.profile.name == "mimic-iv":
            return message
        first = self.profile.tables[0]
        return message.replace(ALLOWED_TEXT, ALLOWED_TEXT.replace(
            "the MIMIC-IV tables of schemas mimiciv_hosp and mimiciv_icu", f"the tables of schema "
            f"{' and '.join(self.profile.schemas)}").replace(
            "`labevents` or `mimiciv_hosp.labevents`", f"`{first.name}` or `{first.qualified}`"))

    def close(self) -> None:
        with self._parser_lock:
            if self._parser is not None:
                self._parser.close()
                self._parser = None

    # -- layer 1: sqlglot ---------------------------------------------------------------------
    def clear_cache(self, shapes: bool = True) -> None:
        """Forget the decisions cached by exact text and (``shapes=True``) by shape."""
        with self._lock:
            self._cache.clear()
            if shapes:
                self._shapes.clear()

    def _decide(self, query: str, code: "list[DuckToken] | None" = None) -> GateDecision:
        try:
            return self._decide_text(query, code)
        except RecursionError:
            raise reject("it is nested too deeply to be read; flatten it (fewer nested parentheses or "
                         "subqueries)") from None

    def syntax_error(self, query: str) -> str | None:
        """DuckDB's own syntax error for ``query`` with its line and column, or None if DuckDB parses it."""
        try:
            tree = json.loads(self._serialize(query))
        except (duckdb.Error, ValueError, RecursionError):
            return None
        if not tree.get("error") or tree.get("error_type") != "parser":
            return None
        msg = str(tree.get("error_message", "syntax error")).splitlines()[0]
        try:
            pos = int(tree.get("position", -1))
        except (TypeError, ValueError):
            pos = -1
        if 0 <= pos <= len(query.encode("utf-8")):
            before = query.encode("utf-8")[:pos].decode("utf-8", "replace")
            line = before.count("\n") + 1
            col = len(before) - (before.rfind("\n") + 1) + 1
            msg += f" at line {line}, column {col}"
        return msg

    def _decide_text(self, query: str, code: "list[DuckToken] | None" = None) -> GateDecision:
        if not isinstance(query, str) or not query.strip():
            raise reject("the query is empty")
        if len(query) > self.max_query_chars:
            raise reject(f"the query is longer than {self.max_query_chars} characters")
        if "\x00" in query:
            raise reject("the query contains a NUL character")
        try:
            tokens = _DIALECT.tokenize(query)
            statements = [s for s in _DIALECT.parser().parse(tokens, query)
                          if s is not None and not isinstance(s, exp.Semicolon)]
        except (ParseError, TokenError) as exc:
            syntax = self.syntax_error(query)
            if syntax is not None:
                raise reject(syntax) from None
            first = str(exc).splitlines()[0] if str(exc) else "syntax error"
            raise reject(f"it could not be parsed ({first[:300]})") from None
        if len(statements) != 1:
            raise reject(f"it holds {len(statements)} statements; send one statement per call")
        stmt = statements[0]
        # sqlglot types parse() as returning Expr; every node it builds is an Expression
        assert isinstance(stmt, exp.Expression), type(stmt)
        handler = STATEMENT_HANDLERS.get(type(stmt))
        if handler is None:
            for kind, fn in STATEMENT_HANDLERS.items():
                if isinstance(stmt, kind):
                    handler = fn
                    break
        if handler is None:
            syntax = self.syntax_error(query)  # a typo (SELEC * FRM x) reads as some other statement
            if syntax is not None:
                raise reject(syntax)
            raise reject(f"{_statement_name(stmt)} statements are not allowed (read-only SELECT only)")
        return handler(self, stmt, query, Parsed(tokens, code))

    def check_select(self, stmt: exp.Expression) -> tuple[set[str], bool, frozenset[str]]:
        """Check a SELECT tree in place; returns the tables read, whether it was rewritten and the
        aliases it defines with a column list (``range(3) r(i)``: ``r`` looks like a call)."""
        tables: set[str] = set()
        rewritten = False
        cte_names: set[str] = set()
        local_names: set[str] = set()
        table_nodes: list[exp.Table] = []
        for node in list(stmt.walk()):
            kind = type(node)
            role = _ROLE_CACHE.get(kind)
            if role is None:
                role = _role(kind)
            if role == "skip":
                continue
            if role == "forbidden":
                raise reject(f"{_statement_name(node)} is not allowed inside a query")
            if role == "table":
                table_nodes.append(node)  # type: ignore[arg-type]
            elif role == "cte":
                cte_names.add(node.alias_or_name.lower())
            elif role == "alias":
                if node.args.get("columns") and node.this is not None:
                    local_names.add(node.name.lower())
            elif role == "func":
                self._check_function(node)  # type: ignore[arg-type]
            elif role == "column":
                for part in (node.args.get("catalog"), node.args.get("db")):
                    if part is not None and part.name.lower() not in self.schemas:
                        raise reject(f"the column reference {node.sql('duckdb')!r} names schema or catalog "
                                     f"{part.name!r}")
        for name in cte_names:
            if name in self.system_names:
                raise reject(f"the CTE name {name!r} shadows a system object; rename it")
        for table in table_nodes:
            if self._check_table(table, cte_names, tables):
                rewritten = True
        return tables, rewritten, frozenset(local_names)

    def _check_table(self, node: exp.Table, cte_names: set[str], tables: set[str]) -> bool:
        target = node.this
        if isinstance(target, exp.Func):  # table function in FROM
            fname = _function_name(target)
            if fname not in TABLE_FUNCTIONS_ALLOWED:
                raise reject(f"the table function {fname}() is not allowed; query the MIMIC-IV tables instead")
            return False
        if not isinstance(target, exp.Identifier):
            raise reject(f"the table reference {node.sql('duckdb')!r} is not a plain table name")
        name = target.name.lower()
        catalog = node.catalog.lower()
        schema = node.db.lower()
        if catalog:
            raise reject(f"catalog {node.catalog!r} is not available (only the episode's own tables are)")
        if schema == "information_schema" and name in ("columns", "tables"):
            node.set("db", exp.to_identifier(INFO_SCHEMA))
            return True
        if schema and schema not in self.schemas:
            raise reject(f"schema {node.db!r} is not available; use {' or '.join(self.profile.schemas)}")
        if name in self.tables:
            spec = self.profile.table_spec(name)
            if schema and schema != spec.schema:
                raise reject(f"table {name} lives in {spec.schema}, not {schema}")
            tables.add(spec.name)
            return False
        if not schema and name in cte_names and _cte_visible(node, name):
            return False
        raise reject(f"{node.sql('duckdb')!r} is not a MIMIC-IV table (SHOW TABLES lists them)")

    def _check_function(self, node: exp.Func) -> None:
        cls = type(node).__name__
        if cls in _DENY_SQLGLOT_CLASSES or cls.startswith("Read"):
            raise reject(f"the function {node.sql_name().lower()}() is not allowed")
        if isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            if "." in name or name not in self.functions:
                raise reject(f"the function {name}() is not allowed (it is unknown or touches files, "
                             f"settings or the catalog)")

    # -- layer 2: DuckDB's parser -------------------------------------------------------------
    def _serialize(self, sql: str) -> str:
        """DuckDB's own parse of ``sql`` as JSON (the text is embedded as a standard SQL string)."""
        with self._parser_lock:
            if self._parser is None:
                self._parser = duckdb.connect(":memory:")
            literal = "'" + sql.replace("'", "''") + "'"
            row = self._parser.execute(f"SELECT json_serialize_sql({literal})").fetchone()
            assert row is not None  # a scalar SELECT always returns one row
            return row[0]

    def check_with_duckdb(self, sql: str) -> None:
        """Parse ``sql`` with DuckDB itself and re-check what DuckDB will actually run (mode ``ast``)."""
        tree = json.loads(self._serialize(sql))
        if tree.get("error"):
            msg = tree.get("error_message", "parse error")
            raise reject(f"DuckDB cannot run it as a single SELECT ({msg})")
        statements = tree.get("statements", [])
        if len(statements) != 1:
            raise reject(f"it holds {len(statements)} statements; send one statement per call")
        ctes: set[str] = set()
        tables: list[dict[str, Any]] = []
        functions = self.functions
        for node in _walk_json(statements[0]):
            cls = node.get("class")
            if cls is None:
                cte_map = node.get("cte_map")
                if isinstance(cte_map, dict):
                    for entry in cte_map.get("map", []):
                        ctes.add(str(entry.get("key", "")).lower())
                kind = node.get("type")
                if "sample" in node and kind not in _DUCKDB_TABLEREFS:
                    raise reject(f"the table reference kind {str(kind).lower()} is not allowed")
                if kind == "BASE_TABLE":
                    tables.append(node)
                elif kind == "TABLE_FUNCTION":
                    fn = node.get("function") or {}
                    name = str(fn.get("function_name", "")).lower()
                    if name not in TABLE_FUNCTIONS_ALLOWED or fn.get("schema") or fn.get("catalog"):
                        raise reject(f"the table function {name}() is not allowed")
                elif isinstance(kind, str) and kind.endswith("_REF"):
                    raise reject(f"{kind.lower()} is not allowed")
            elif cls == "FUNCTION":
                name = str(node.get("function_name", "")).lower()
                if node.get("schema") or node.get("catalog"):
                    raise reject(f"the function {name}() may not be schema-qualified")
                if name not in functions:
                    raise reject(f"the function {name}() is not allowed")
            elif cls == "COLUMN_REF":
                parts = [str(p).lower() for p in node.get("column_names", [])]
                if len(parts) >= 4 or (len(parts) == 3 and parts[0] not in self.schemas
                                       and (parts[0] in _CATALOG_LIKE or parts[0] in self.system_names)):
                    raise reject(f"the column reference {'.'.join(parts)!r} names a schema or catalog")
        for name in ctes:
            if name in self.system_names:
                raise reject(f"the CTE name {name!r} shadows a system object; rename it")
        for node in tables:
            self._duckdb_table(node, ctes)

    def check_with_duckdb_tokens(self, sql: str, tokens: list[Token] | None = None,
                                 local_names: frozenset[str] = frozenset(),
                                 code: "list[DuckToken] | None" = None) -> None:
        """Layer 2, mode ``tokens``: DuckDB's lexer must read ``sql`` exactly as sqlglot did.

        ``tokens`` are sqlglot's tokens of ``sql`` (tokenised here when absent); ``local_names``
        are aliases the query defines with a column list (``t(a, b)``), which look like calls;
        ``code`` is DuckDB's reading of ``sql`` when the caller has lexed it already."""
        if tokens is None:
            try:
                tokens = _DIALECT.tokenize(sql)
            except TokenError:
                raise reject("it could not be tokenised") from None
        if code is None:
            code = _lex(sql)[0]
            if code is None:
                raise reject("DuckDB cannot tokenise it")
        if not _same_tokens(code, tokens):
            raise reject(_DIFFERENT_READING)
        last = len(code)
        while last and code[last - 1][1] == ";":
            last -= 1
        if not last or code[0][1].lower() not in _READ_STATEMENT_STARTS:
            raise reject("DuckDB does not read it as a SELECT statement")
        if any(span == ";" for _, span, _, _ in code[:last]):
            raise reject("it holds more than one statement; send one statement per call")
        for i, (_, span, kind, keyword) in enumerate(code):
            if kind != "word":
                continue
            if span[:2].lower() == "u&":
                raise reject("unicode-escaped identifiers and strings (U&...) are not allowed")
            name = _unquote(span)
            if keyword and name in _STATEMENT_KEYWORDS:
                raise reject(f"{name.upper()} is not allowed inside a query (read-only SELECT only)")
            calls = i + 1 < len(code) and code[i + 1][1] == "("
            if not keyword:
                if name in self.forbidden_identifiers:
                    raise reject(f"{name!r} names a catalog, schema or system object that is not available "
                                 f"(if it is your alias, rename it)")
                if calls and name not in self.functions and name not in local_names:
                    raise reject(f"the function {name}() is not allowed (it is unknown or touches files, "
                                 f"settings or the catalog)")
            elif calls and name in self.forbidden_keyword_calls:
                raise reject(f"the function {name}() is not allowed")

    def _duckdb_table(self, node: dict[str, Any], ctes: set[str]) -> None:
        catalog = str(node.get("catalog_name", "")).lower()
        schema = str(node.get("schema_name", "")).lower()
        name = str(node.get("table_name", "")).lower()
        if catalog:
            raise reject(f"catalog {catalog!r} is not available")
        if schema == INFO_SCHEMA and name in ("columns", "tables"):
            return
        if schema and schema not in self.schemas:
            raise reject(f"schema {schema!r} is not available; use {' or '.join(self.profile.schemas)}")
        if name in self.tables:
            expected = self.profile.table_spec(name).schema
            if schema and schema != expected:
                raise reject(f"table {name} lives in {expected}, not {schema}")
            return
        if not schema and name in ctes:
            return
        raise reject(f"{name!r} is not a MIMIC-IV table (SHOW TABLES lists them)")


DUCKDB_CHECKS: frozenset[str] = frozenset({"tokens", "ast"})
_DIALECT = Dialect.get_or_raise("duckdb")
_FORBIDDEN_IDENTIFIERS: frozenset[str] = _CATALOG_LIKE - {INFO_SCHEMA} | {"build_info"}
# Calls DuckDB's parser rewrites into listed functions (``percentile_cont(…) WITHIN GROUP`` → quantile_cont).
_PARSER_REWRITTEN_CALLS: frozenset[str] = frozenset({"percentile_cont", "percentile_disc"})
_READ_STATEMENT_STARTS: frozenset[str] = frozenset({"select", "with", "from", "values", "("})
# Reserved DuckDB keywords of other statements that could nest inside a query (``FROM (SHOW ...)``,
# ``SELECT ... INTO``). Unreserved ones (``load``, ``start``, ``update``, …) are valid aliases; a second
# statement is excluded by the first-token and semicolon rules instead.
_STATEMENT_KEYWORDS: frozenset[str] = frozenset({"into", "create", "summarize", "describe", "show", "analyze"})
_DIFFERENT_READING = ("DuckDB and the gate's parser read it differently (quoting, escapes or comments); "
                      "write plain SQL with standard 'single-quoted' strings")
_STRING_TOKENS: frozenset[TokenType] = frozenset(
    getattr(TokenType, n) for n in ("STRING", "BIT_STRING", "HEX_STRING", "BYTE_STRING", "NATIONAL_STRING",
                                    "RAW_STRING", "HEREDOC_STRING", "UNICODE_STRING", "NATIONAL_RAW_STRING")
    if hasattr(TokenType, n))
_TOKEN_KINDS: dict[TokenType, str] = {**{t: "string" for t in _STRING_TOKENS}, TokenType.NUMBER: "number",
                                      TokenType.VAR: "word", TokenType.IDENTIFIER: "word"}
# DuckDB's token types → (kind, is a keyword); comments map to None
_DUCKDB_KINDS: dict[Any, tuple[str, bool] | None] = {
    duckdb.token_type.identifier: ("word", False), duckdb.token_type.keyword: ("word", True),
    duckdb.token_type.string_const: ("string", False), duckdb.token_type.numeric_const: ("number", False),
    duckdb.token_type.operator: ("operator", False), duckdb.token_type.comment: None,
}


def _token_kind(token: Token) -> str:
    """sqlglot token → the coarse kind DuckDB's lexer reports (word, string, number, operator)."""
    kind = _TOKEN_KINDS.get(token.token_type)
    if kind is not None:
        return kind
    first = token.text[:1]
    return "word" if first.isalpha() or first == "_" else "operator"


DuckToken = tuple[int, str, str, bool]  # character offset, text, kind, is a keyword
_LITERAL_MARKERS = {"string": "\x00S", "number": "\x00N"}


def _lex(sql: str) -> tuple[list[DuckToken] | None, str | None]:
    """DuckDB's reading of ``sql`` and its shape key (``(None, None)`` if DuckDB cannot lex it)."""
    if not isinstance(sql, str) or "\x00" in sql:
        return None, None
    try:
        lexed = duckdb.tokenize(sql)
    except Exception:  # duckdb raises its own error types for malformed text
        return None, None
    code = _duckdb_code_tokens(sql, lexed)
    return code, "\x1f".join(_LITERAL_MARKERS.get(kind, span) for _, span, kind, _ in code)


def _duckdb_code_tokens(sql: str, lexed: list[tuple[int, Any]]) -> list[DuckToken]:
    """DuckDB's non-comment tokens as (character offset, text, kind, is a keyword); a token runs to the
    next one, trailing blanks excluded."""
    if sql.isascii():
        starts = [offset for offset, _ in lexed]
    else:  # DuckDB reports UTF-8 byte offsets
        raw = sql.encode("utf-8")
        starts = [len(raw[:offset].decode("utf-8")) for offset, _ in lexed]
    starts.append(len(sql))
    out = []
    for i, (_, duck_kind) in enumerate(lexed):
        kind = _DUCKDB_KINDS.get(duck_kind, ("unknown", False))
        if kind is not None:
            out.append((starts[i], sql[starts[i]:starts[i + 1]].rstrip(), kind[0], kind[1]))
    return out


def _runs(tokens: list[tuple[int, int, str, bool]]) -> list[tuple[int, int, str, bool]]:
    """Merge adjacent operator and number tokens into one run: the two lexers split ``!~~`` or ``.5``
    differently, which is harmless; words, strings and comments must still line up exactly."""
    out: list[tuple[int, int, str, bool]] = []
    for start, end, kind, keyword in tokens:
        if kind in ("operator", "number"):
            if out and out[-1][2] == "opnum":
                out[-1] = (out[-1][0], end, "opnum", False)
                continue
            kind = "opnum"
        out.append((start, end, kind, keyword))
    return out


def _same_tokens(code: list[DuckToken], tokens: list[Token]) -> bool:
    """True when DuckDB's tokens and sqlglot's cover the same spans with the same kinds. sqlglot merges
    multi-word keywords (``GROUP BY``, ``UNION ALL``) that DuckDB reports word by word."""
    duck = _runs([(start, start + len(span), kind, keyword) for start, span, kind, keyword in code])
    glot = _runs([(t.start, t.end + 1, _token_kind(t), False) for t in tokens])
    j, n = 0, len(duck)
    for start, end, kind, _ in glot:
        if j >= n:
            return False
        d_start, d_end, d_kind, keyword = duck[j]
        if d_start != start or d_kind != kind:
            return False
        if d_end != end:
            if kind != "word" or not keyword or d_end > end:
                return False
            while d_end < end:  # the next DuckDB keywords must tile the merged keyword exactly
                j += 1
                if j >= n:
                    return False
                _, d_end, d_kind, keyword = duck[j]
                if d_kind != "word" or not keyword or d_end > end:
                    return False
        j += 1
    return j == n


def _unquote(span: str) -> str:
    if len(span) >= 2 and span[0] == '"' and span[-1] == '"':
        return span[1:-1].replace('""', '"').lower()
    return span.lower()


_FORBIDDEN_NODES: tuple[type[exp.Expression], ...] = (
    exp.Into, exp.Command, exp.Create, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Alter, exp.Copy, exp.Set,
    exp.Pragma, exp.Attach, exp.Detach, exp.Use, exp.Merge, exp.TruncateTable, exp.Transaction)
_ROLE_CACHE: dict[type, str] = {}


def _role(kind: type) -> str:
    """How the sqlglot walk treats a node class (cached per class)."""
    if issubclass(kind, _FORBIDDEN_NODES):
        role = "forbidden"
    elif issubclass(kind, exp.Table):
        role = "table"
    elif issubclass(kind, exp.Func):
        role = "func"
    elif issubclass(kind, exp.Column):
        role = "column"
    elif issubclass(kind, exp.CTE):
        role = "cte"
    elif issubclass(kind, exp.TableAlias):
        role = "alias"
    else:
        role = "skip"
    _ROLE_CACHE[kind] = role
    return role


def _walk_json(node: Any) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            yield cur
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)


def _cte_visible(node: exp.Expression, name: str) -> bool:
    """True when a WITH clause enclosing ``node`` defines ``name``."""
    parent = node.parent
    while parent is not None:
        with_ = parent.args.get("with_") if "with_" in parent.args else parent.args.get("with")
        if isinstance(with_, exp.With):
            if any(cte.alias_or_name.lower() == name for cte in with_.expressions):
                return True
        parent = parent.parent
    return False


def _function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.GenerateSeries):
        return "range"
    if isinstance(node, (exp.Unnest, exp.Explode)):
        return "unnest"
    return node.sql_name().lower()


def _statement_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    return type(node).__name__.upper()
