"""SQL analysis and rewriting for the ``skeptic`` agent: what a careful analyst does to a first draft.

Everything here is generic — it knows the MIMIC-IV tables, the item reference (plausible
bounds), standard unit conversions and clinical abbreviations, and it reads the draft query;
it never sees a template, an overlay or an expected outcome.

* :func:`analyse_draft` reads the draft with sqlglot: the tables, the referenced
  subject/admission/stay ids, item ids, name literals, the time window, whether the answer is
  an aggregate.
* :data:`TABLE_RULES` (one registry, one entry per evidence table) says how a table's rows are
  keyed, valued, timed and windowed; :func:`profile_relation` derives from it a relation with
  the table's columns normalised (text values parsed, units converted) plus flag columns
  (``_oow`` out of window, ``_implausible``, ``_valueless``), and :func:`clean_relation` the
  relation a careful analyst answers from (in window, deduplicated, optionally without
  implausible/valueless rows).
* :func:`rewrite_tables` swaps every evidence-table reference of the draft for such a relation.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import sqlglot
from sqlglot import exp

from ehrgym.bench.noise.units import CONVERSIONS
from ehrgym.db.items import item_reference
from ehrgym.db.schema import mimic_schema, table_spec

ENTITY_TABLES: dict[str, str] = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "icustays"}
NUMBER_REGEX = r"[-+]?[0-9]+(?:[.,][0-9]+)?|[-+]?[.,][0-9]+"
FLAGS = ("_num", "_oow", "_implausible", "_valueless", "_content")


# ---------------------------------------------------------------------------------------------
# table rules (one registry)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableRule:
    """How a careful analyst reads one evidence table.

    ``key`` is the natural key (one row per key in clean records); rows sharing a key are
    *duplicates* when their content agrees and *contradictory* when it does not. Content = every
    column except the key and ``ids`` (row ids and store times, which a re-stored copy changes).
    """

    table: str
    key: tuple[str, ...]
    time_col: str | None = None
    num_col: str | None = None            # numeric value
    text_col: str | None = None           # text twin of the value ("<0.3", "1,2", "15.4 H")
    unit_col: str | None = None
    item_col: str | None = None
    ids: tuple[str, ...] = ()             # row ids / store times: which copy of a duplicate to keep (first)
    window: str | None = None             # "admission" (hadm_id) | "icu" (stay_id)
    bounds: tuple[float, float] | None = None  # plausible range of num_col when it is not per item

    @property
    def qualified(self) -> str:
        return table_spec(self.table).qualified

    @property
    def content(self) -> tuple[str, ...]:
        skip = set(self.key) | set(self.ids)
        return tuple(c for c in table_spec(self.table).column_names if c not in skip)


TABLE_RULES: dict[str, TableRule] = {r.table: r for r in (
    TableRule("labevents", ("subject_id", "itemid", "charttime"), "charttime", "valuenum", "value", "valueuom",
              "itemid", ("storetime", "labevent_id"), "admission"),
    TableRule("chartevents", ("stay_id", "itemid", "charttime"), "charttime", "valuenum", "value", "valueuom",
              "itemid", ("storetime",), "icu"),
    TableRule("outputevents", ("stay_id", "itemid", "charttime"), "charttime", "value", None, "valueuom", "itemid",
              ("storetime",), "icu"),
    TableRule("inputevents", ("stay_id", "itemid", "starttime"), "starttime", "amount", None, "amountuom", "itemid",
              ("storetime", "orderid", "linkorderid"), "icu"),
    TableRule("ingredientevents", ("stay_id", "itemid", "starttime"), "starttime", "amount", None, "amountuom",
              "itemid", ("storetime", "orderid", "linkorderid"), "icu"),
    TableRule("procedureevents", ("stay_id", "itemid", "starttime"), "starttime", "value", None, "valueuom",
              "itemid", ("storetime", "orderid", "linkorderid"), "icu"),
    TableRule("datetimeevents", ("stay_id", "itemid", "charttime"), "charttime", None, None, None, "itemid",
              ("storetime",), "icu"),
    TableRule("prescriptions", ("hadm_id", "drug", "starttime"), "starttime", ids=("pharmacy_id", "poe_id", "poe_seq"),
              window="admission"),
    TableRule("pharmacy", ("hadm_id", "medication", "starttime"), "starttime", ids=("pharmacy_id", "poe_id",
                                                                                      "entertime", "verifiedtime"),
              window="admission"),
    TableRule("emar", ("hadm_id", "pharmacy_id", "charttime", "event_txt"), "charttime",
              ids=("emar_id", "emar_seq", "storetime"), window="admission"),
    # one result per specimen collection, test, isolate and antibiotic; the organism is what it reports (an isolate
    # reported as two organisms, or as growth and as no growth, is a contradiction)
    TableRule("microbiologyevents", ("hadm_id", "spec_itemid", "charttime", "test_itemid", "coalesce(isolate_num, 1)",
                                     "ab_itemid"), "charttime",
              "dilution_value", "dilution_text", ids=("microevent_id", "micro_specimen_id", "storedate", "storetime"),
              window="admission", bounds=(0.001, 1024.0)),
    TableRule("diagnoses_icd", ("hadm_id", "seq_num")),
    TableRule("procedures_icd", ("hadm_id", "seq_num")),
    TableRule("drgcodes", ("hadm_id", "drg_type")),  # one DRG of each type per admission
    TableRule("transfers", ("hadm_id", "intime"), "intime", ids=("transfer_id",), window="admission"),
    TableRule("services", ("hadm_id", "transfertime"), "transfertime", window="admission"),
    TableRule("icustays", ("subject_id", "intime"), "intime", "los", ids=("stay_id",), window="admission",
              bounds=(0.0, 365.0)),
    TableRule("admissions", ("subject_id", "admittime"), ids=("hadm_id",)),
    TableRule("patients", ("subject_id",), num_col="anchor_age", bounds=(0.0, 91.0)),
)}

# plausible ranges of coded values a careful analyst knows (column -> range), any table
COLUMN_BOUNDS: dict[str, tuple[float, float]] = {
    "drg_severity": (1.0, 4.0), "drg_mortality": (1.0, 4.0), "hospital_expire_flag": (0.0, 1.0),
    "anchor_age": (0.0, 91.0), "los": (0.0, 365.0),
}

# unit families: the factor of each unit in the family's base unit
UNIT_SCALES: tuple[dict[str, float], ...] = (
    {"g": 1000.0, "grams": 1000.0, "mg": 1.0, "mcg": 1e-3, "µg": 1e-3, "ug": 1e-3, "ng": 1e-6},
    {"l": 1000.0, "ml": 1.0, "ul": 1e-3, "µl": 1e-3},
)


# ---------------------------------------------------------------------------------------------
# the draft
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NameRef:
    """A string literal the draft compares a name column with (``d.label = 'Creatinine'``)."""

    table: str
    column: str
    literal: str
    like: bool = False
    others: str = ""   # the scope's other literal predicates on the same table, over alias ``t``


@dataclass
class DraftAnalysis:
    sql: str
    tree: exp.Expr
    tables: list[str] = field(default_factory=list)
    refs: dict[str, list[int]] = field(default_factory=dict)
    items: list[int] = field(default_factory=list)
    names: list[NameRef] = field(default_factory=list)
    window: tuple[dt.datetime | None, dt.datetime | None] = (None, None)
    aggregate: bool = False
    columns: dict[str, set[str]] = field(default_factory=dict)   # table -> columns the draft reads

    def uses_value(self, rule: "TableRule") -> bool:
        """Does the draft read the table's value (so bad values matter to the answer)?"""
        used = self.columns.get(rule.table, set())
        if rule.text_col is not None and rule.item_col is not None:
            return True  # a measurement table: a row without a usable value is no result at all
        return bool(used & {c for c in (rule.num_col, rule.text_col) if c}) or bool(used & set(COLUMN_BOUNDS))

    @property
    def evidence_tables(self) -> list[str]:
        return [t for t in self.tables if t in TABLE_RULES]


_NAME_COLUMNS = {"label", "drug", "medication", "long_title", "org_name", "test_name", "spec_type_desc", "ab_name",
                 "curr_service", "careunit", "first_careunit", "last_careunit", "admission_type", "icd_code",
                 "abbreviation", "category", "eventtype", "interpretation", "race", "insurance", "gender"}
_VALUE_COLUMNS = {"valuenum", "value", "amount", "rate", "dose_val_rx"}
_TEMPORAL = ("TIMESTAMP", "TIMESTAMPNTZ", "TIMESTAMPTZ", "DATE", "DATETIME")



@lru_cache(maxsize=8192)
def _parse_cached(sql: str, read: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read=read)


def _parse(sql: str, read: str = "duckdb") -> exp.Expr:
    """``sqlglot.parse_one`` memoised by text (the k trials of a task re-read the same SQL); a copy,
    so callers may edit the tree."""
    return _parse_cached(sql, read).copy()

def _mimic_table(node: exp.Table) -> str | None:
    name = node.name.lower()
    return name if name in mimic_schema() else None


def _alias_map(tree: exp.Expr) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in tree.find_all(exp.Table):
        name = _mimic_table(t)
        if name:
            out[(t.alias or t.name).lower()] = name
            out.setdefault(name, name)
    return out


def _column_table(col: exp.Column, aliases: dict[str, str], tables: list[str]) -> str | None:
    if col.table:
        return aliases.get(col.table.lower())
    for t in tables:
        if col.name.lower() in {c.lower() for c in table_spec(t).column_names}:
            return t
    return None


def _literal_int(node: exp.Expr) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(str(node.this))
        except ValueError:
            return None
    if isinstance(node, exp.Neg):
        inner = _literal_int(node.this)
        return -inner if inner is not None else None
    return None


def _literal_time(node: exp.Expr) -> dt.datetime | None:
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        if node.to.this.name.upper() in _TEMPORAL or str(node.to.sql()).upper().startswith(("TIMESTAMP", "DATE")):
            return _parse_time(node.this.this)
    if isinstance(node, exp.Literal) and node.is_string:
        return _parse_time(node.this)
    return None


def _parse_time(text: str) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return value


def _is_time_column(col: exp.Expr, aliases: dict[str, str], tables: list[str]) -> bool:
    if not isinstance(col, exp.Column):
        return False
    t = _column_table(col, aliases, tables)
    if t is None:
        return False
    try:
        return table_spec(t).column(col.name).duckdb_type in ("TIMESTAMP", "DATE")
    except Exception:  # noqa: BLE001 - unknown column: not a time column
        return False


def _sibling_predicates(node: exp.Expr, col: exp.Column) -> str:
    """Other conjuncts of ``node``'s WHERE that only use literals and columns of the same alias (as ``t.``)."""
    where = node.find_ancestor(exp.Where)
    if where is None:
        return ""
    alias = (col.table or "").lower()
    out = []
    for p in _conjuncts(where.this):
        if p is node or not isinstance(p, (exp.EQ, exp.In)):
            continue
        cols = list(p.find_all(exp.Column))
        if not isinstance(p.this, exp.Column) or len(cols) != 1 or (cols[0].table or "").lower() != alias \
                or p.find(exp.Select):
            continue  # only plain ``t.col = literal`` identities (an item id, a code), no year filters
        q = p.copy()
        for c in q.find_all(exp.Column):
            c.set("table", exp.to_identifier("t"))
        out.append(q.sql(dialect="duckdb"))
    return " AND ".join(out)


def analyse_draft(sql: str) -> DraftAnalysis:
    """Read the draft; raises ``sqlglot`` errors when it does not parse."""
    tree = _parse(sql, read="duckdb")
    tables: list[str] = []
    for t in tree.find_all(exp.Table):
        name = _mimic_table(t)
        if name and name not in tables:
            tables.append(name)
    aliases = _alias_map(tree)
    a = DraftAnalysis(sql=sql, tree=tree, tables=tables)
    lo: list[dt.datetime] = []
    hi: list[dt.datetime] = []

    def add_ref(col: exp.Column, value: int) -> None:
        name = col.name.lower()
        if name in ENTITY_TABLES:
            a.refs.setdefault(name, [])
            if value not in a.refs[name]:
                a.refs[name].append(value)
        elif name == "itemid" and value not in a.items:
            a.items.append(value)

    for node in tree.find_all(exp.EQ, exp.In, exp.Like, exp.ILike, exp.Between, exp.GT, exp.GTE, exp.LT, exp.LTE):
        if isinstance(node, exp.Between):
            if _is_time_column(node.this, aliases, tables):
                low, high = _literal_time(node.args["low"]), _literal_time(node.args["high"])
                if low:
                    lo.append(low)
                if high:
                    hi.append(high)
            continue
        if isinstance(node, exp.In):
            if isinstance(node.this, exp.Column):
                for e in node.expressions:
                    v = _literal_int(e)
                    if v is not None:
                        add_ref(node.this, v)
            continue
        left, right = node.this, node.expression
        node_cls: type[exp.Expr]
        if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
            left, right = right, left
            flipped: dict[type[exp.Expr], type[exp.Expr]] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT,
                                                             exp.LTE: exp.GTE}
            node_cls = flipped.get(type(node), type(node))
        else:
            node_cls = type(node)
        if isinstance(left, (exp.Year,)) or (isinstance(left, exp.Extract) and left.this.name.lower() == "year"):
            year = _literal_int(right)
            if year is not None and node_cls is exp.EQ:
                lo.append(dt.datetime(year, 1, 1))
                hi.append(dt.datetime(year, 12, 31, 23, 59, 59))
            continue
        if not isinstance(left, exp.Column):
            continue
        value_int = _literal_int(right)
        if value_int is not None and node_cls is exp.EQ:
            add_ref(left, value_int)
            continue
        when = _literal_time(right) if _is_time_column(left, aliases, tables) else None
        if when is not None:
            if node_cls in (exp.GT, exp.GTE, exp.EQ):
                lo.append(when)
            if node_cls in (exp.LT, exp.LTE, exp.EQ):
                hi.append(when)
            continue
        if isinstance(right, exp.Literal) and right.is_string and left.name.lower() in _NAME_COLUMNS:
            table = _column_table(left, aliases, tables)
            if table:
                a.names.append(NameRef(table, left.name.lower(), right.this, node_cls in (exp.Like, exp.ILike),
                                       _sibling_predicates(node, left)))
    a.window = (min(lo) if lo else None, max(hi) if hi else None)
    for col in tree.find_all(exp.Column):
        table = _column_table(col, aliases, tables)
        if table:
            a.columns.setdefault(table, set()).add(col.name.lower())
    top = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if top is not None:
        a.aggregate = any(p.find(exp.AggFunc) is not None for p in top.expressions)
    # ranking by value (ORDER BY valuenum DESC LIMIT 1: the maximum) is an aggregate over the
    # evidence; ranking by time (the first/last value) picks a single row
    for order in tree.find_all(exp.Order):
        if any(c.name.lower() in _VALUE_COLUMNS for c in order.find_all(exp.Column)):
            a.aggregate = True
    return a


# ---------------------------------------------------------------------------------------------
# relations
# ---------------------------------------------------------------------------------------------
def _parsed_value(rule: TableRule) -> str | None:
    """The numeric value, read from the text twin when the number is missing ("1,2", "<0.3", "15.4 H")."""
    if rule.num_col is None:
        return None
    if rule.text_col is None:
        return f"r.{rule.num_col}"
    parsed = f"TRY_CAST(replace(regexp_extract(r.{rule.text_col}, '{NUMBER_REGEX}'), ',', '.') AS DOUBLE)"
    return f"coalesce(r.{rule.num_col}, {parsed})"


def _conversion_cases(rule: TableRule, items: tuple[int, ...]) -> list[tuple[str, str, str, str | None]]:
    """(condition, value expr, unit, itemid) of each known unit conversion for this table.

    Known conversions (:data:`ehrgym.bench.noise.units.CONVERSIONS`, e.g. glucose mmol/L →
    mg/dL) and metric prefixes (mcg → mg, L → mL) bring a row back to its item's reference unit.
    They apply to every item of the table (or only to ``items`` when the draft names them); a
    twin item stored under its own id (temperature °F/°C) is mapped onto the item the draft
    asks about, and only then.
    """
    if not (rule.num_col and rule.unit_col and rule.item_col):
        return []
    refs = item_reference()
    out = []
    done: set[tuple[int, str]] = set()
    for conv in CONVERSIONS.values():
        ref = refs.get(conv.itemid)
        if ref is not None and ref.table != rule.table:
            continue
        if (conv.alt_itemid is not None or items) and conv.itemid not in items:
            continue
        alt_item = conv.alt_itemid if conv.alt_itemid is not None else conv.itemid
        cond = f"r.{rule.item_col} = {alt_item} AND r.{rule.unit_col} = {sql_quote(conv.alt_unit)}"
        out.append((cond, conv.from_alt_sql(f"r.{rule.num_col}"), conv.unit,
                    str(conv.itemid) if conv.alt_itemid is not None else None))
        done.add((alt_item, conv.alt_unit.lower()))
    for ref in refs.values():
        if ref.table != rule.table or (items and ref.itemid not in items):
            continue
        family = next((f for f in UNIT_SCALES if ref.unit.lower() in f), None)
        if family is None:
            continue
        for unit, scale in family.items():
            if unit == ref.unit.lower() or (ref.itemid, unit) in done:
                continue
            factor = scale / family[ref.unit.lower()]
            cond = f"r.{rule.item_col} = {ref.itemid} AND lower(r.{rule.unit_col}) = {sql_quote(unit)}"
            out.append((cond, f"(r.{rule.num_col}) * {factor!r}", ref.unit, None))
    return out


def _bounds_case(rule: TableRule, value: str, items: tuple[int, ...]) -> str:
    if not rule.num_col:
        return "FALSE"
    fixed = COLUMN_BOUNDS.get(rule.num_col) or rule.bounds
    if fixed is not None and not rule.item_col:
        return f"coalesce(NOT ({value} BETWEEN {fixed[0]!r} AND {fixed[1]!r}), FALSE)"
    if not rule.item_col:
        return "FALSE"
    whens = [f"WHEN {ref.itemid} THEN NOT ({value} BETWEEN {ref.plausible_min!r} AND {ref.plausible_max!r})"
             for ref in item_reference().values() if ref.table == rule.table and (not items or ref.itemid in items)]
    if not whens:
        return "FALSE"
    return f"coalesce(CASE r.{rule.item_col} {' '.join(whens)} ELSE FALSE END, FALSE)"


def _window_expr(rule: TableRule) -> str:
    if rule.window is None or rule.time_col is None:
        return "FALSE"
    if rule.window == "icu":
        if "stay_id" not in table_spec(rule.table).column_names:
            return "FALSE"
        return (f"(r.stay_id IS NOT NULL AND r.{rule.time_col} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
                f"mimiciv_icu.icustays w WHERE w.stay_id = r.stay_id AND r.{rule.time_col} BETWEEN w.intime "
                f"AND w.outtime))")
    return (f"(r.hadm_id IS NOT NULL AND r.{rule.time_col} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
            f"mimiciv_hosp.admissions w WHERE w.hadm_id = r.hadm_id AND r.{rule.time_col} BETWEEN w.admittime "
            f"AND w.dischtime))")


def twin_items(items: tuple[int, ...]) -> tuple[int, ...]:
    """``items`` plus the ids their alternative unit is stored under (temperature °F/°C)."""
    out = list(items)
    for i in items:
        conv = CONVERSIONS.get(int(i))
        if conv is not None and conv.alt_itemid is not None and conv.alt_itemid not in out:
            out.append(conv.alt_itemid)
    return tuple(out)


def normalised_relation(rule: TableRule, items: tuple[int, ...] = (), where: str | None = None) -> str:
    """The table with text values parsed and known alternative units converted (same columns).

    ``where`` (over ``r.``) restricts the raw rows first: only predicates on key columns are
    pushed down, which commute with parsing, conversion and deduplication.
    """
    parsed = _parsed_value(rule)
    filt = f" WHERE {where}" if where else ""
    if parsed is None:
        return f"(SELECT r.* FROM {rule.qualified} r{filt})"
    inner = f"(SELECT r.* REPLACE ({parsed} AS {rule.num_col}) FROM {rule.qualified} r{filt})"
    cases = _conversion_cases(rule, items)
    if not cases:
        return inner
    value_whens = " ".join(f"WHEN {c} THEN round({v}, 6)" for c, v, _, _ in cases)
    unit_whens = " ".join(f"WHEN {c} THEN '{u}'" for c, _, u, _ in cases)
    repl = [f"CASE {value_whens} ELSE r.{rule.num_col} END AS {rule.num_col}",
            f"CASE {unit_whens} ELSE r.{rule.unit_col} END AS {rule.unit_col}"]
    item_whens = " ".join(f"WHEN {c} THEN {i}" for c, _, _, i in cases if i is not None)
    if item_whens:
        repl.append(f"CASE {item_whens} ELSE r.{rule.item_col} END AS {rule.item_col}")
    return f"(SELECT r.* REPLACE ({', '.join(repl)}) FROM {inner} r)"


def profile_relation(rule: TableRule, items: tuple[int, ...] = (), where: str | None = None,
                     used: frozenset[str] = frozenset()) -> str:
    """Normalised rows plus flag columns: ``_num``, ``_oow`` (outside its stay), ``_implausible``,
    ``_valueless`` and ``_content`` (what must agree between rows sharing the natural key).

    ``used`` names the columns the draft reads: coded columns with known ranges
    (:data:`COLUMN_BOUNDS`) count as implausible only when the draft reads them.
    """
    num = f"r.{rule.num_col}" if rule.num_col else "NULL::DOUBLE"
    valueless = f"r.{rule.num_col} IS NULL" if rule.num_col else "FALSE"
    checks = [_bounds_case(rule, num, items)]
    cols = set(table_spec(rule.table).column_names)
    for col, (lo, hi) in sorted(COLUMN_BOUNDS.items()):
        if col in cols and col != rule.num_col and col in used:
            checks.append(f"coalesce(NOT (r.{col} BETWEEN {lo!r} AND {hi!r}), FALSE)")
    implausible = " OR ".join(c for c in checks if c != "FALSE") or "FALSE"
    parts = []
    for c in rule.content:
        if c == rule.num_col:
            parts.append(f"round({num}, 6)::VARCHAR")
        elif rule.num_col and c in (rule.text_col, rule.unit_col):
            continue  # the normalised number stands for the value, its text and its unit
        else:
            parts.append(f"r.{c}::VARCHAR")
    content = "concat_ws('|', " + ", ".join(parts or ["''"]) + ")"
    return (f"(SELECT r.*, {num} AS _num, {_window_expr(rule)} AS _oow, ({implausible}) AS _implausible, "
            f"{valueless} AS _valueless, {content} AS _content FROM {normalised_relation(rule, items, where)} r)")


def clean_relation(rule: TableRule, drop_bad_values: bool, items: tuple[int, ...] = (),
                   where: str | None = None, used: frozenset[str] = frozenset(), resolve: str | None = None) -> str:
    """In-window rows without re-stored copies (and, when ``drop_bad_values``, without implausible or
    valueless rows). A copy is a row equal to another in everything but row ids and store times.
    ``resolve`` (``ASC`` | ``DESC``): of rows sharing the natural key but not their content (a contradiction),
    keep one only — the first or the last by content: two readings that between them believe each side."""
    if resolve not in (None, "ASC", "DESC"):
        raise ValueError(f"resolve is ASC, DESC or None, not {resolve!r}")
    cond = "NOT _oow" + (" AND NOT _implausible AND NOT _valueless" if drop_bad_values else "")
    cols = set(table_spec(rule.table).column_names)
    order = ", ".join(c for c in rule.ids if c in cols) or ", ".join(rule.key)
    partition = ", ".join(rule.key) + ("" if resolve else ", _content")
    order = f"_content {resolve}, {order}" if resolve else order
    return (f"(SELECT * EXCLUDE ({', '.join(FLAGS)}) FROM {profile_relation(rule, items, where, used)} "
            f"WHERE {cond} QUALIFY row_number() OVER (PARTITION BY {partition} "
            f"ORDER BY {order}) = 1)")


Relation = Callable[[TableRule, "str | None"], str]


def _conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def _scope_of(table: exp.Table) -> exp.Select | None:
    node = table.parent
    while node is not None and not isinstance(node, exp.Select):
        node = node.parent
    return node


def _literal_value(node: exp.Expr) -> Any:
    """A string or integer literal's value (``_NOT_LITERAL`` for anything else)."""
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    v = _literal_int(node)
    return _NOT_LITERAL if v is None else v


_NOT_LITERAL = object()


def _values_rows(values: exp.Values, columns: list[str]) -> list[dict[str, Any]] | None:
    """The rows of a literal ``VALUES`` list as ``{column: value}`` (None when a cell is not a literal)."""
    rows = []
    for tup in values.expressions:
        cells = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        if len(cells) != len(columns):
            return None
        row = {}
        for col, cell in zip(columns, cells):
            v = _literal_value(cell)
            if v is _NOT_LITERAL:
                return None
            row[col] = v
        rows.append(row)
    return rows


def _constant_rows(src: exp.Expr, root: exp.Expr) -> list[dict[str, Any]] | None:
    """Rows of a literal table the scope reads: ``(VALUES …) AS t(a, b)``, or a CTE that is such a
    list (``WITH t(a, b) AS (SELECT * FROM (VALUES …))``); None for anything else."""
    if isinstance(src, exp.Values):
        alias = src.args.get("alias")
        cols = [c.name.lower() for c in alias.columns] if alias is not None and alias.columns else []
        return _values_rows(src, cols) if cols else None
    if not isinstance(src, exp.Table) or src.args.get("db"):
        return None
    name = src.name.lower()
    for cte in root.find_all(exp.CTE):
        if (cte.alias or "").lower() != name:
            continue
        body, cols = cte.this, [c.name.lower() for c in (cte.args["alias"].columns or [])]
        if isinstance(body, exp.Select) and len(body.expressions) == 1 and isinstance(body.expressions[0], exp.Star) \
                and not any(body.args.get(k) for k in ("where", "joins", "group", "having", "limit", "qualify")):
            from_ = body.args.get("from") or body.args.get("from_")
            body = from_.this if from_ is not None else None
        if isinstance(body, exp.Subquery):
            body = body.this
        if not isinstance(body, exp.Values):
            return None
        if not cols:
            alias = body.args.get("alias")
            cols = [c.name.lower() for c in alias.columns] if alias is not None and alias.columns else []
        return _values_rows(body, cols) if cols else None
    return None


def _constant_table_values(select: exp.Select) -> dict[tuple[str, str], set[int]]:
    """Integer columns of the literal tables an inner join of ``select`` reads, restricted by the
    scope's literal equalities on them: ``JOIN (VALUES ('fibrinogen', 51214), …) AS cpt(concept,
    itemid) … WHERE cpt.concept = 'fibrinogen'`` gives ``{("cpt", "itemid"): {51214}}``.

    Only WHERE conjuncts and the ON conjuncts of inner joins are read (they filter every row of
    the scope), so joining on such a column restricts the other side to these values.
    """
    root: exp.Expr = select
    while root.parent is not None:
        root = root.parent
    from_ = select.args.get("from") or select.args.get("from_")
    sources = [from_.this] if from_ is not None else []
    preds = _conjuncts((select.args.get("where") or exp.Where()).this)
    for j in select.args.get("joins") or []:
        if (j.side or "").upper() or (j.kind or "").upper() not in ("", "INNER", "CROSS"):
            continue  # outer joins do not filter the scope
        sources.append(j.this)
        preds += _conjuncts(j.args.get("on"))
    out: dict[tuple[str, str], set[int]] = {}
    for src in sources:
        rows = _constant_rows(src, root)
        if not rows:
            continue
        alias = (src.alias or (src.name if isinstance(src, exp.Table) else "")).lower()
        if not alias:
            continue
        for p in preds:  # literal equalities on the literal table's columns filter its rows
            if isinstance(p, exp.EQ):
                col, lit = (p.this, p.expression) if isinstance(p.this, exp.Column) else (p.expression, p.this)
                if not isinstance(col, exp.Column) or (col.table or "").lower() != alias:
                    continue
                v = _literal_value(lit)
                name = col.name.lower()
                if v is _NOT_LITERAL or name not in rows[0]:
                    continue
                rows = [r for r in rows if r[name] == v]
        for name in (rows[0] if rows else {}):
            vals = {r[name] for r in rows}
            if vals and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
                out[(alias, name)] = set(vals)
    return out


def pushdown(table: exp.Table, rule: TableRule) -> str | None:
    """Literal predicates of the table's scope on its key columns, as SQL over ``r.`` (or None).

    Equalities reach the table through join conditions too (``d.itemid = e.itemid AND
    d.itemid = 51006`` restricts ``e.itemid``); item ids are widened to their twin items.
    """
    select = _scope_of(table)
    if select is None:
        return None
    alias = (table.alias or table.name).lower()
    preds = _conjuncts((select.args.get("where") or exp.Where()).this)
    for j in select.args.get("joins") or []:
        preds += _conjuncts(j.args.get("on"))
    equal: dict[tuple[str, str], set[tuple[str, str]]] = {}
    values: dict[tuple[str, str], set[int]] = _constant_table_values(select)
    for p in preds:
        if isinstance(p, exp.EQ) and isinstance(p.this, exp.Column) and isinstance(p.expression, exp.Column):
            a = ((p.this.table or "").lower(), p.this.name.lower())
            b = ((p.expression.table or "").lower(), p.expression.name.lower())
            equal.setdefault(a, set()).add(b)
            equal.setdefault(b, set()).add(a)
        elif isinstance(p, exp.EQ):
            col, lit = (p.this, p.expression) if isinstance(p.this, exp.Column) else (p.expression, p.this)
            v = _literal_int(lit) if isinstance(col, exp.Column) else None
            if v is not None:
                values.setdefault(((col.table or "").lower(), col.name.lower()), set()).add(v)
        elif isinstance(p, exp.In) and isinstance(p.this, exp.Column) and not p.args.get("query"):
            vs = [_literal_int(e) for e in p.expressions]
            if vs and all(v is not None for v in vs):
                values.setdefault(((p.this.table or "").lower(), p.this.name.lower()), set()).update(
                    int(v) for v in vs if v is not None)
    keycols = set(table_spec(rule.table).column_names) & {"subject_id", "hadm_id", "stay_id"}
    if rule.item_col:
        keycols.add(rule.item_col)
    out = []
    for col in sorted(keycols):
        found: set[int] = set()
        for ref in ((alias, col), ("", col)):
            seen, todo = {ref}, [ref]
            while todo:
                cur = todo.pop()
                found |= values.get(cur, set())
                for nxt in equal.get(cur, ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            if found:
                break
        if found:
            ids = sorted(found)
            if col == "itemid":
                ids = sorted(twin_items(tuple(ids)))
            out.append(f"r.{col} IN ({', '.join(str(i) for i in ids)})")
    return " AND ".join(out) or None


_PLACEHOLDER = "__ehrgym_relation_"


@lru_cache(maxsize=4096)
def _relation_sql(relation_sql: str) -> str:
    """``(<relation>)`` as sqlglot writes it inside a query (parsed once per text, the parse not copied)."""
    from_node = _parse_cached(f"SELECT * FROM {relation_sql} AS __r", "duckdb").find(exp.From)
    assert from_node is not None  # a SELECT … FROM we just wrote
    text = from_node.this.sql(dialect="duckdb")
    if not text.endswith(" AS __r"):
        raise ValueError(f"unexpected relation text {text[-40:]!r}")
    return text[: -len(" AS __r")]


def rewrite_tables(tree: exp.Expr, relation: Relation, only: str | None = None) -> str:
    """The draft with evidence-table references (all, or only ``only``) replaced by ``relation``. Each reference
    becomes a placeholder table under its alias whose name is then replaced by the relation's text, as sqlglot
    writes the relation's subtree (generation is compositional): no relation's parsed tree is copied into the
    draft's for every trial. The draft's tree is edited in place and restored before returning."""
    taken = {t.name for t in tree.find_all(exp.Table)}
    parts: dict[str, str] = {}
    swapped: list[tuple[exp.Expr, exp.Table]] = []
    try:
        for t in list(tree.find_all(exp.Table)):
            name = _mimic_table(t)
            rule = TABLE_RULES.get(name or "")
            if rule is None or (only is not None and name != only):
                continue
            alias = t.alias or t.name
            key = f"{_PLACEHOLDER}{len(parts)}__"  # delimited: no key is the start of another
            if key in taken:
                raise ValueError(f"the draft already names a table {key}")
            parts[key] = _relation_sql(relation(rule, pushdown(t, rule)))
            placeholder = exp.to_table(key).as_(alias)  # the alias as the relation would carry it
            t.replace(placeholder)
            swapped.append((placeholder, t))
        text = tree.sql(dialect="duckdb")
    finally:
        for placeholder, t in reversed(swapped):
            placeholder.replace(t)
    for key, sql in parts.items():
        if text.count(key) != 1:
            raise ValueError(f"placeholder {key} appears {text.count(key)} times in {text!r}")
        text = text.replace(key, sql)
    return text


def evidence_select(tree: exp.Expr, table: str) -> exp.Select | None:
    """``SELECT <alias>.* FROM … WHERE …`` of the draft's scope that reads ``table`` (its evidence rows)."""
    for select in tree.find_all(exp.Select):
        from_ = select.args.get("from") or select.args.get("from_")
        sources = [from_.this] if from_ is not None else []
        sources += [j.this for j in select.args.get("joins") or []]
        for src in sources:
            if isinstance(src, exp.Table) and _mimic_table(src) == table:
                alias = src.alias or src.name
                ev = select.copy()
                for key in ("group", "having", "order", "limit", "offset", "qualify", "distinct"):
                    ev.set(key, None)
                rule = TABLE_RULES.get(table)
                value_cols = {c for c in (rule.num_col, rule.text_col, rule.unit_col) if c} if rule else set()
                where = ev.args.get("where")
                if where is not None:
                    # the evidence is what the question is about, not what passes a value threshold, nor which of
                    # its rows pass a comparison with the entity's other rows (a move into another unit than the
                    # one before: none is a count of 0 over records that exist, not missing records)
                    kept = [p for p in _conjuncts(where.this)
                            if not any(c.name.lower() in value_cols and (c.table or "").lower() in ("", alias.lower())
                                       for c in p.find_all(exp.Column))
                            and not _relative_to_other_rows(p, alias)]
                    ev.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
                ev.set("expressions", [_parse(f"{alias}.*", read="duckdb")])
                with_key = "with_" if "with_" in tree.args else "with"
                ctes = tree.args.get(with_key)
                if ctes is not None and select is not tree:
                    ev.set(with_key, ctes.copy())  # the scope may read the draft's CTEs
                return ev
    return None


def _relative_to_other_rows(predicate: exp.Expr, alias: str) -> bool:
    """Whether ``predicate`` holds a subquery correlated with the evidence row ``alias`` (it reads the row's own
    columns); an uncorrelated subquery (a cohort's ids) still says which rows the question is about."""
    for sub in predicate.find_all(exp.Select):
        inner = {(t.alias or t.name).lower() for t in sub.find_all(exp.Table)}
        if alias.lower() in inner:
            continue
        if any((c.table or "").lower() == alias.lower() for c in sub.find_all(exp.Column)):
            return True
    return False


def profile_query(tree: exp.Expr, table: str, items: tuple[int, ...] = (),
                  used: frozenset[str] = frozenset()) -> str | None:
    """One-row profile of the draft's evidence rows in ``table`` (on the normalised, flagged relation)."""
    rule = TABLE_RULES[table]
    ev = evidence_select(tree, table)
    if ev is None:
        return None
    ev_sql = rewrite_tables(ev, lambda r, w: profile_relation(r, items, w, used), only=table)
    key = ", ".join(rule.key)
    return (f"WITH ev AS ({ev_sql}) SELECT count(*) AS n, count(*) FILTER (WHERE _oow) AS n_oow, "
            f"count(*) FILTER (WHERE _implausible AND NOT _oow) AS n_implausible, "
            f"count(*) FILTER (WHERE _valueless AND NOT _oow) AS n_valueless, "
            f"(SELECT count(*) FROM (SELECT {key} FROM ev WHERE NOT _oow AND NOT _implausible GROUP BY {key} "
            f"HAVING count(DISTINCT _content) > 1)) AS n_conflict, "
            f"count(*) - (SELECT count(*) FROM (SELECT DISTINCT {key}, _content FROM ev)) AS n_dup FROM ev")


# ---------------------------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------------------------
ABBREVIATIONS: dict[str, str] = {
    # standard clinical abbreviations a careful analyst expands (lower case)
    "bun": "urea nitrogen", "cr": "creatinine", "hgb": "hemoglobin", "hb": "hemoglobin", "hct": "hematocrit",
    "wbc": "white blood cells", "rbc": "red blood cells", "plt": "platelet count", "platelets": "platelet count",
    "k": "potassium", "k+": "potassium", "na": "sodium", "na+": "sodium", "cl": "chloride", "cl-": "chloride",
    "hco3": "bicarbonate", "bicarb": "bicarbonate", "mg": "magnesium", "po4": "phosphate",
    "phosphorus": "phosphate", "ca": "calcium, total", "calcium": "calcium, total", "alt": "alanine aminotransferase (alt)",
    "sgpt": "alanine aminotransferase (alt)", "ast": "asparate aminotransferase (ast)",
    "sgot": "asparate aminotransferase (ast)", "alp": "alkaline phosphatase", "alk phos": "alkaline phosphatase",
    "t bili": "bilirubin, total", "total bili": "bilirubin, total", "inr": "inr(pt)", "crp": "c-reactive protein",
    "nt-probnp": "ntprobnp", "pro-bnp": "ntprobnp", "tnt": "troponin t", "trop t": "troponin t",
    "ag": "anion gap", "be": "base excess", "pao2": "po2", "paco2": "pco2", "pmn": "neutrophils",
    "lymphs": "lymphocytes", "aptt": "ptt", "lactic acid": "lactate", "blood sugar": "glucose",
    "hr": "heart rate", "pulse": "heart rate", "rr": "respiratory rate", "resp rate": "respiratory rate",
    "spo2": "o2 saturation pulseoxymetry", "o2 sat": "o2 saturation pulseoxymetry",
    "pulse ox": "o2 saturation pulseoxymetry", "sbp": "non invasive blood pressure systolic",
    "dbp": "non invasive blood pressure diastolic", "map": "non invasive blood pressure mean",
    "temp": "temperature celsius", "gcs": "gcs - eye opening",
    "pip-tazo": "piperacillin-tazobactam", "pip/tazo": "piperacillin-tazobactam", "zosyn": "piperacillin-tazobactam",
    "vanc": "vancomycin", "vanco": "vancomycin", "asa": "aspirin", "apap": "acetaminophen", "tylenol": "acetaminophen",
    "lasix": "furosemide", "kcl": "potassium chloride", "ns": "sodium chloride 0.9%", "heparin sq": "heparin",
    "mrsa": "staph aureus coag +", "e. coli": "escherichia coli", "e coli": "escherichia coli",
    "s. aureus": "staph aureus coag +", "ecoli": "escherichia coli",
    # diagnoses (expanded to the start of an ICD long title)
    "chf": "congestive heart failure", "hf": "heart failure", "ckd": "chronic kidney disease",
    "copd": "chronic obstructive pulmonary disease", "afib": "atrial fibrillation", "a-fib": "atrial fibrillation",
    "af": "atrial fibrillation", "htn": "hypertension", "hypertension": "essential (primary) hypertension",
    "dm": "diabetes mellitus", "t2dm": "type 2 diabetes mellitus", "dm2": "type 2 diabetes mellitus",
    "cad": "coronary atherosclerosis", "aki": "acute kidney failure", "arf": "acute kidney failure",
    "uti": "urinary tract infection", "pna": "pneumonia", "mi": "acute myocardial infarction",
    "ami": "acute myocardial infarction", "gerd": "gastro-esophageal reflux disease", "osa": "obstructive sleep apnea",
    "esrd": "end stage renal disease", "hld": "hyperlipidemia", "hlp": "hyperlipidemia", "dvt": "deep vein thrombosis",
    "pe": "pulmonary embolism", "sepsis": "sepsis, unspecified organism", "anemia": "anemia, unspecified",
    # drugs and organisms
    "pip tazo": "piperacillin-tazobactam", "piptazo": "piperacillin-tazobactam", "cipro": "ciprofloxacin",
    "levo": "levofloxacin", "ctx": "ceftriaxone", "abx": "antibiotic", "norepi": "norepinephrine",
    "levophed": "norepinephrine", "epi": "epinephrine", "neo": "phenylephrine", "insulin drip": "insulin",
    "coag neg staph": "staphylococcus, coagulase negative", "cons": "staphylococcus, coagulase negative",
    "staph aureus": "staph aureus coag +", "mssa": "staph aureus coag +", "pseudomonas": "pseudomonas aeruginosa",
    "klebsiella": "klebsiella pneumoniae", "enterococcus": "enterococcus faecalis", "e.coli": "escherichia coli",
    "bcx": "blood culture", "ucx": "urine", "blood cx": "blood culture", "urine cx": "urine",
}


_SYNONYM_TOKENS = {"nos": "unspecified", "unspec": "unspecified", "w": "with", "wo": "without", "w/o": "without"}


def _tokens(text: str) -> frozenset[str]:
    words = re.findall(r"[a-z0-9/]+", text.casefold())
    return frozenset(_SYNONYM_TOKENS.get(w, w) for w in words)


def _squeeze(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.casefold())


def best_name(literal: str, candidates: list[str], cutoff: float = 0.72) -> str | None:
    """The candidate a misspelled or abbreviated ``literal`` most plausibly means (None when nothing fits).

    In order: case-insensitive equality; a clinical abbreviation expanded (exactly, or as the
    start of a longer name); equality ignoring punctuation; the same words in another order
    ("NOS" read as "unspecified"); the closest spelling (difflib); a unique name it starts.
    """
    by_fold = {c.casefold(): c for c in candidates if isinstance(c, str)}
    key = literal.strip().casefold().strip("%")
    if key in by_fold:
        return by_fold[key]
    squeezed = {_squeeze(k): v for k, v in by_fold.items()}
    expanded = ABBREVIATIONS.get(key)
    if expanded:
        if expanded in by_fold:
            return by_fold[expanded]
        starting = sorted((k for k in by_fold if k.startswith(expanded)), key=len)
        if starting:
            return by_fold[starting[0]]
        se = _squeeze(expanded)
        prefix = sorted((k for k in squeezed if len(k) >= 6 and (se.startswith(k) or k.startswith(se))), key=len)
        if prefix:
            return squeezed[prefix[0]]
    if _squeeze(key) in squeezed:
        return squeezed[_squeeze(key)]
    tokens = _tokens(key)
    same = [v for k, v in by_fold.items() if _tokens(k) == tokens]
    if len(same) == 1:
        return same[0]
    close = difflib.get_close_matches(key, list(by_fold), n=1, cutoff=cutoff)
    if close:
        return by_fold[close[0]]
    prefixed = [v for k, v in by_fold.items() if k.startswith(key) and len(key) >= 4]
    if len(prefixed) == 1:
        return prefixed[0]
    return None


def replace_literal(tree: exp.Expr, old: str, new: str) -> exp.Expr:
    """The draft with every string literal ``old`` replaced by ``new``."""
    out = tree.copy()
    for lit in list(out.find_all(exp.Literal)):
        if lit.is_string and lit.this == old:
            lit.replace(exp.Literal.string(new))
    return out


def sql_quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def as_datetime(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    return _parse_time(str(value))
