"""Red-team suite for the SQL gate: no attack query gets past it, and defence in depth holds."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_env_support import SECRET, last_creat_task, make_tiny_db, missing_creat_task  # noqa: E402

from ehrgym.env.actions import SqlAction  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402
from ehrgym.env.gate import ALLOWED_TEXT, SqlGate  # noqa: E402
from ehrgym.errors import GateRejection  # noqa: E402

META = "base.ehrgym_meta.build_info"

ATTACKS: list[str] = [
    # other catalogs / schemas / the clean base / bookkeeping
    f"SELECT * FROM {META}",
    "SELECT * FROM ehrgym_meta.build_info",
    "SELECT * FROM build_info",
    'SELECT * FROM "base"."ehrgym_meta"."build_info"',
    "SELECT * FROM BASE.EHRGYM_META.BUILD_INFO",
    "SELECT * FROM base.mimiciv_hosp.labevents",
    "SELECT * FROM memory.mimiciv_hosp.labevents",
    "SELECT * FROM system.main.duckdb_tables",
    "SELECT * FROM temp.main.anything",
    'SELECT * FROM "base.ehrgym_meta.build_info"',
    "SELECT * FROM b\u0430se.ehrgym_meta.build_info",            # Cyrillic 'а' lookalike
    "SELECT * FROM \uff4c\uff41\uff42\uff45\uff56\uff45\uff4e\uff54\uff53",  # fullwidth 'labevents'
    "SELECT * FROM labevents_base",
    "SELECT * FROM mimiciv_icu.labevents",
    # multiple statements, comments, strings
    f"SELECT 1; SELECT * FROM {META}",
    "SELECT 1; DROP VIEW mimiciv_hosp.labevents",
    f"SELECT * FROM labevents /* x */ ; SELECT * FROM {META}",
    f"SELECT * FROM labevents -- c\n; SELECT * FROM {META}",
    f"SELECT 'x' /* ' */ FROM {META} --'",
    f"SELECT 'a\\' , v FROM (SELECT value AS v FROM {META}) --'",
    "SELECT * FROM labevents; ATTACH '/tmp/x.duckdb' AS y",
    # writes, DDL, session and file statements
    "DROP VIEW mimiciv_hosp.labevents",
    "CREATE TABLE x AS SELECT 1",
    "CREATE OR REPLACE VIEW mimiciv_hosp.labevents AS SELECT * FROM base.mimiciv_hosp.labevents",
    "CREATE MACRO m() AS 1",
    "INSERT INTO mimiciv_hosp.patients VALUES (9,'F',1,2150,'x',NULL)",
    "UPDATE labevents SET valuenum = 1",
    "DELETE FROM labevents",
    "SELECT 1 INTO t2",
    "ATTACH '/tmp/x.duckdb' AS y",
    "DETACH base",
    "COPY labevents TO '/tmp/out.csv'",
    f"COPY (SELECT * FROM {META}) TO '/tmp/leak.csv'",
    "EXPORT DATABASE '/tmp/exp'",
    "IMPORT DATABASE '/tmp/exp'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA database_list",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "SET VARIABLE x = 1",
    "CALL pragma_database_list()",
    "USE base",
    "CHECKPOINT",
    "VACUUM",
    "BEGIN TRANSACTION",
    f"EXPLAIN SELECT * FROM {META}",
    f"SUMMARIZE {META}",
    f"DESCRIBE {META}",
    "PIVOT base.mimiciv_hosp.labevents ON itemid USING avg(valuenum)",
    # table functions and replacement scans
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_parquet('x.parquet')",
    "SELECT * FROM read_json('x.json')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_duckdb('/tmp/x.duckdb')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM parquet_metadata('x.parquet')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM '/etc/passwd'",
    "FROM '/tmp/x.csv'",
    f"SELECT * FROM query('SELECT * FROM {META}')",
    f"SELECT * FROM query('SELECT * FROM ' || '{META}')",
    f"SELECT * FROM query_table('{META}')",
    f"SELECT * FROM query_table(['{META}'])",
    f"SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT * FROM {META}'))",
    "SELECT * FROM json_each('{}')",
    "SELECT * FROM duckdb_tables()",
    "SELECT * FROM duckdb_views()",
    "SELECT sql FROM duckdb_views",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_databases()",
    "SELECT * FROM pragma_table_info('labevents')",
    "SELECT * FROM information_schema.views",
    "SELECT * FROM information_schema.schemata",
    "SELECT * FROM sqlite_master",
    "SELECT * FROM pg_catalog.pg_views",
    "SELECT * FROM (SHOW ALL TABLES)",
    "SELECT * FROM (DESCRIBE base.ehrgym_meta.build_info)",
    # scalar functions reading settings, env, catalog, sequences
    "SELECT current_setting('memory_limit')",
    "SELECT getenv('HOME')",
    "SELECT getvariable('x')",
    "SELECT pg_get_viewdef('mimiciv_hosp.labevents')",
    "SELECT current_database()",
    "SELECT nextval('seq')",
    f"SELECT json_serialize_sql('SELECT * FROM {META}')",
    # nesting: CTEs, subqueries, lateral, set operations, lambdas
    f"WITH x AS (SELECT * FROM {META}) SELECT * FROM x",
    "WITH labevents AS (SELECT * FROM base.mimiciv_hosp.labevents) SELECT * FROM labevents",
    "WITH duckdb_views AS (SELECT 1) SELECT * FROM (SELECT * FROM duckdb_views)",
    "WITH sqlite_master AS (SELECT 1 AS a) SELECT * FROM labevents",
    "SELECT * FROM labevents WHERE subject_id IN (SELECT 1 FROM base.mimiciv_hosp.patients)",
    f"SELECT * FROM labevents, LATERAL (SELECT * FROM {META}) x",
    f"SELECT (SELECT value FROM {META} LIMIT 1)",
    f"SELECT * FROM (VALUES (1)) t(a), {META}",
    "SELECT * FROM labevents UNION ALL SELECT * FROM base.mimiciv_hosp.labevents",
    f"SELECT list_transform([1], x -> (SELECT value FROM {META} LIMIT 1))",
    "SELECT * FROM base.mimiciv_hosp.labevents PIVOT (avg(valuenum) FOR itemid IN (50912))",
    "SELECT base.mimiciv_hosp.labevents.valuenum FROM labevents",
    f"SELECT * FROM (FROM {META})",
    'SELECT * FROM U&"\\0062ase".ehrgym_meta.build_info',               # unicode-escaped identifier
    f"SELECT * FROM labevents WHERE value = '\\' UNION ALL SELECT * FROM {META} --'",  # backslash is no escape
    "",
    "   ;  ",
]

ALLOWED: list[str] = [
    "SELECT * FROM labevents LIMIT 5",
    "select count(*) from MIMICIV_HOSP.LABEVENTS",
    'SELECT "valuenum" FROM "mimiciv_hosp"."labevents"',
    "FROM labevents SELECT count(*)",
    "WITH x AS (SELECT subject_id, max(valuenum) m FROM labevents GROUP BY 1) SELECT * FROM x ORDER BY m DESC",
    "SELECT l.subject_id, a.hadm_id FROM labevents l JOIN admissions a USING (hadm_id) WHERE l.valuenum > 1",
    "SELECT subject_id FROM patients UNION SELECT subject_id FROM admissions",
    "SELECT *, row_number() OVER (PARTITION BY subject_id ORDER BY charttime) FROM labevents QUALIFY 1 = 1",
    "SELECT date_diff('hour', admittime, dischtime) FROM admissions",
    "SELECT try_cast(regexp_extract(value, '[0-9.]+') AS DOUBLE) FROM labevents",
    "SELECT * FROM labevents WHERE hadm_id IN (SELECT hadm_id FROM mimiciv_hosp.admissions)",
    "SHOW TABLES",
    "SHOW ALL TABLES",
    "DESCRIBE labevents",
    "DESCRIBE mimiciv_icu.icustays",
    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'labevents'",
    "SELECT table_schema, table_name FROM information_schema.tables",
    "SELECT * FROM range(3)",
    "SELECT unnest([1, 2, 3])",
    "SELECT 1; ",
]


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_db(tmp_path_factory.mktemp("gate") / "tiny.duckdb")


@pytest.fixture(scope="module")
def env(tiny_db: Path):
    with EhrEnv(tiny_db, EnvConfig(max_steps=1000, python=False)) as e:
        yield e


@pytest.fixture(scope="module")
def raw_con(tiny_db: Path):
    """The DuckDB connection an episode runs on (built in process here; the default env runs the same
    one in a child process), for checks that bypass the gate."""
    from ehrgym.env.engine import ConnectionSettings, EpisodeConnection

    conn = EpisodeConnection(tiny_db, ConnectionSettings(isolation="inprocess"))
    yield conn.con
    conn.close()


def test_red_team_suite_is_large_enough() -> None:
    assert len(ATTACKS) >= 40
    assert len(set(ATTACKS)) == len(ATTACKS)


@pytest.mark.parametrize("query", ATTACKS)
def test_attack_is_refused_by_the_gate(query: str) -> None:
    gate = SqlGate()
    with pytest.raises(GateRejection) as info:
        gate.check(query)
    assert "Allowed:" in str(info.value)  # every refusal says what is allowed


def test_no_attack_leaks_through_an_episode(env: EhrEnv) -> None:
    env.reset(missing_creat_task())
    for query in ATTACKS:
        result = env.step(SqlAction(query))
        assert SECRET not in result.observation.text
        assert result.info["error_kind"] == "gate", query
        assert result.observation.text.startswith("Query refused"), query
    # the episode's tables are intact: the overlay still hides patient 1's creatinine
    assert env.step("SELECT count(*) FROM labevents WHERE subject_id = 1").observation.rows == [(0,)]
    assert env.step("SELECT count(*) FROM labevents").observation.rows == [(2,)]


@pytest.mark.parametrize("query", ALLOWED)
def test_ordinary_queries_pass_and_run(env: EhrEnv, query: str) -> None:
    env.reset(last_creat_task())
    result = env.step(SqlAction(query))
    assert result.info["error"] is None, result.observation.text
    assert SECRET not in result.observation.text


def test_information_schema_shows_only_the_exposed_tables(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    obs = env.step("SELECT DISTINCT table_schema FROM information_schema.columns ORDER BY 1").observation
    assert obs.rows == [("mimiciv_hosp",), ("mimiciv_icu",)]
    obs = env.step("SELECT count(*) FROM information_schema.tables").observation
    assert obs.rows == [(31,)]


def test_describe_matches_the_episode_view(env: EhrEnv) -> None:
    env.reset(last_creat_task())
    described = env.step("DESCRIBE labevents").observation.rows
    actual = [(r[0], r[1]) for r in env.conn.raw("DESCRIBE mimiciv_hosp.labevents")]
    assert [(r[0], r[1]) for r in described] == actual


def test_defence_in_depth_on_the_episode_connection(raw_con: duckdb.DuckDBPyConnection, tiny_db: Path) -> None:
    """Even a query that skipped the gate could not reach files or change settings."""
    con = raw_con
    other = tiny_db.parent / "benchmark_answers.jsonl"
    other.write_text(SECRET)
    with pytest.raises(duckdb.Error, match="(?i)disabled|permission"):
        con.execute(f"SELECT * FROM read_text('{other}')").fetchall()
    with pytest.raises(duckdb.Error, match="(?i)disabled|permission"):
        con.execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
    with pytest.raises(duckdb.Error, match="(?i)locked"):
        con.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error, match="(?i)locked"):
        con.execute("SET memory_limit = '100GB'")
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO base.mimiciv_hosp.patients VALUES (9,'F',1,2150,'x',NULL)")
    settings = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN ('autoload_known_extensions', "
                                "'autoinstall_known_extensions', 'python_enable_replacements', "
                                "'enable_external_access', 'lock_configuration')").fetchall())
    assert settings == {"autoload_known_extensions": "false", "autoinstall_known_extensions": "false",
                        "python_enable_replacements": "false", "enable_external_access": "false",
                        "lock_configuration": "true"}


def test_rejections_are_cached_and_stay_rejections() -> None:
    gate = SqlGate(cache_size=2)
    for _ in range(3):
        with pytest.raises(GateRejection):
            gate.check(f"SELECT * FROM {META}")
    assert gate.check("SELECT 1").kind == "query"
    assert "SELECT" in ALLOWED_TEXT


def test_the_database_file_itself_is_only_guarded_by_the_gate(tiny_db: Path) -> None:
    """DuckDB exempts attached database files from enable_external_access=false, so reading
    the file with read_blob/read_text must be stopped by both gate parsers."""
    gate = SqlGate()
    for fn in ("read_blob", "read_text", "read_duckdb"):
        with pytest.raises(GateRejection):
            gate.check(f"SELECT * FROM {fn}('{tiny_db}')")
        with pytest.raises(GateRejection):
            gate.check_with_duckdb(f"SELECT * FROM {fn}('{tiny_db}')")
        with pytest.raises(GateRejection):
            gate.check_with_duckdb_tokens(f"SELECT * FROM {fn}('{tiny_db}')")


@pytest.mark.parametrize("query", ATTACKS)
def test_duckdb_parser_layer_alone_refuses_every_attack(query: str) -> None:
    """Mode ``ast`` of the second layer (DuckDB's own parser) holds even if sqlglot were fooled."""
    with pytest.raises(GateRejection):
        SqlGate().check_with_duckdb(query)


@pytest.mark.parametrize("query", ATTACKS)
def test_attack_is_refused_in_ast_mode_too(query: str) -> None:
    with pytest.raises(GateRejection):
        SqlGate(duckdb_check="ast").check(query)


def test_both_duckdb_modes_admit_the_same_queries_identically() -> None:
    tokens, ast = SqlGate(), SqlGate(duckdb_check="ast")
    try:
        for query in ALLOWED:
            a, b = tokens.check(query), ast.check(query)
            assert (a.kind, a.sql, a.tables, a.rewritten) == (b.kind, b.sql, b.tables, b.rewritten), query
    finally:
        tokens.close()
        ast.close()


def test_unknown_duckdb_check_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="tokens"):
        SqlGate(duckdb_check="regex")


# Attacks DuckDB's lexer layer does not refuse on its own: none names an object DuckDB could
# resolve on an episode connection (no such table, or a file, which external access blocks).
LEXER_ALONE_HARMLESS = [
    'SELECT * FROM "base.ehrgym_meta.build_info"',
    "SELECT * FROM \uff4c\uff41\uff42\uff45\uff56\uff45\uff4e\uff54\uff53",
    "SELECT * FROM labevents_base",
    "SELECT * FROM mimiciv_icu.labevents",
    "SELECT * FROM '/etc/passwd'",
    "FROM '/tmp/x.csv'",
]


@pytest.mark.parametrize("query", [q for q in ATTACKS if q not in LEXER_ALONE_HARMLESS])
def test_duckdb_lexer_layer_alone_refuses_every_attack(query: str) -> None:
    """Mode ``tokens`` of the second layer holds even if sqlglot's tree were fooled."""
    with pytest.raises(GateRejection):
        SqlGate().check_with_duckdb_tokens(query)


def test_what_the_lexer_layer_lets_through_fails_on_a_raw_episode_connection(
        raw_con: duckdb.DuckDBPyConnection) -> None:
    assert all(q in ATTACKS for q in LEXER_ALONE_HARMLESS)
    for query in LEXER_ALONE_HARMLESS:
        with pytest.raises(duckdb.Error):
            raw_con.execute(query).fetchall()


def test_a_different_reading_by_the_two_lexers_is_refused() -> None:
    """Hand DuckDB's lexer layer sqlglot's tokens of another text, as a lexer bug would."""
    from ehrgym.env.gate import _DIALECT

    gate = SqlGate()
    shown = f"SELECT 1 FROM labevents /* FROM {META} */"
    for seen_by_sqlglot in ("SELECT 1 FROM labevents", "SELECT 1 FROM labevents /* x */ WHERE 1 = 1",
                            "SELECT '1 FROM labevents /* x */'"):
        with pytest.raises(GateRejection, match="read it differently"):
            gate.check_with_duckdb_tokens(f"SELECT 1 FROM labevents, {META}", _DIALECT.tokenize(seen_by_sqlglot))
    gate.check_with_duckdb_tokens(shown, _DIALECT.tokenize(shown))  # comments are no code for either


@pytest.mark.parametrize("query", [
    "SELECT * FROM labevents WHERE valueuom = 'µg/dL' AND comments <> 'é' LIMIT 1",  # byte vs char offsets
    "SELECT subject_id FROM labevents GROUP BY subject_id ORDER BY subject_id NULLS LAST",
    "SELECT subject_id FROM patients UNION ALL SELECT subject_id FROM admissions",
    "SELECT a.subject_id FROM admissions a LEFT OUTER JOIN patients p ON a.subject_id = p.subject_id",
    "SELECT i FROM range(3) r(i)",
    "WITH x(a) AS (SELECT 1) SELECT a FROM x",
    "SELECT count(*) FILTER (WHERE valuenum > 1) FROM labevents",
    "SELECT COLUMNS('value.*') FROM labevents",
    "SELECT CAST(valuenum AS DECIMAL(10, 2)), valuenum::VARCHAR FROM labevents",
    "SELECT list_transform([1, 2], x -> x + 1), {'a': 1}, [1, 2][1]",
    "SELECT subject_id -- trailing comment",
    "SELECT 1;;",
    "SELECT min(charttime) AS start, max(charttime) AS load, 1 AS update FROM labevents",
])
def test_lexer_layer_admits_ordinary_sql(query: str) -> None:
    decision = SqlGate().check(query)
    assert decision.kind == "query"


@pytest.mark.parametrize("query, why", [
    ("SELECT lower(x).getenv('HOME')", "getenv"),
    ("SELECT main.lower('A')", "main"),
    ("SELECT * FROM labevents l, sqlite_master", "sqlite_master"),
    ('SELECT 1 AS "base"', "base"),
    ("SELECT 1 INTO t2", "INTO"),
    ("SELECT * FROM (SHOW ALL TABLES)", "SHOW"),
    ("SELECT * FROM (SUMMARIZE labevents)", "SUMMARIZE"),
    ("SELECT 1; SELECT 2", "more than one statement"),
    ("VALUES (1); DROP VIEW labevents", "more than one statement"),
])
def test_lexer_layer_explains_its_refusals(query: str, why: str) -> None:
    with pytest.raises(GateRejection, match=why):
        SqlGate().check_with_duckdb_tokens(query)


def test_episode_connections_do_not_scan_python_objects(raw_con: duckdb.DuckDBPyConnection) -> None:
    import pandas as pd

    leaked_frame = pd.DataFrame({"secret": [SECRET]})  # noqa: F841  (a name DuckDB could resolve)
    with pytest.raises(duckdb.Error):
        raw_con.execute("SELECT * FROM leaked_frame").fetchall()


def test_shape_cache_admits_the_same_query_with_other_literals_without_reparsing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = SqlGate()
    first = gate.check("SELECT valuenum FROM labevents WHERE subject_id = 1 AND value = 'a' LIMIT 5")

    def no_parse(*_: object) -> None:
        raise AssertionError("a query of a known shape was parsed again")

    monkeypatch.setattr(gate, "_decide", no_parse)
    other = "SELECT valuenum FROM labevents WHERE subject_id = 987654 AND value = 'it''s -- not /* code' LIMIT 50"
    decision = gate.check(other)
    assert decision.sql == other and decision.tables == first.tables == ("labevents",)


@pytest.mark.parametrize("first, second", [
    ("SELECT 1 FROM labevents", "SELECT subject_id FROM labevents"),           # a literal became a word
    ("SELECT 1 FROM labevents", "SELECT 1 FROM labevents, base.mimiciv_hosp.labevents"),
    ("SELECT 'a' FROM labevents", "SELECT 'a' /* c */ FROM labevents; DROP VIEW labevents"),
    ("SELECT count(*) FROM labevents", "SELECT COUNT(*) FROM labevents"),        # words match exactly
])
def test_shape_cache_does_not_reuse_across_different_structures(first: str, second: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    gate = SqlGate()
    gate.check(first)
    calls = []
    decide = gate._decide
    monkeypatch.setattr(gate, "_decide", lambda q, code=None: calls.append(q) or decide(q, code))
    try:
        gate.check(second)
    except GateRejection:
        pass
    assert calls == [second]


def test_rewritten_queries_and_refusals_are_not_cached_by_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = SqlGate()
    gate.check("SELECT column_name FROM information_schema.columns WHERE table_name = 'labevents'")
    with pytest.raises(GateRejection):
        gate.check("SELECT * FROM '/etc/passwd'")
    calls = []
    decide = gate._decide
    monkeypatch.setattr(gate, "_decide", lambda q, code=None: calls.append(q) or decide(q, code))
    rewritten = gate.check("SELECT column_name FROM information_schema.columns WHERE table_name = 'patients'")
    assert "'patients'" in rewritten.sql and rewritten.rewritten
    with pytest.raises(GateRejection):
        gate.check("SELECT * FROM '/etc/shadow'")
    assert len(calls) == 2


def test_a_warm_shape_cache_still_refuses_every_attack() -> None:
    gate = SqlGate()
    for query in ALLOWED:
        gate.check(query)
    for query in ATTACKS:
        with pytest.raises(GateRejection):
            gate.check(query)
    gate.clear_cache(shapes=False)
    assert gate._shapes and not gate._cache
    gate.clear_cache()
    assert not gate._shapes


def test_shape_cache_does_not_bypass_the_length_limit() -> None:
    gate = SqlGate(max_query_chars=200)
    gate.check("SELECT 'short' FROM labevents")
    with pytest.raises(GateRejection, match="longer than 200"):
        gate.check("SELECT '" + "x" * 300 + "' FROM labevents")
