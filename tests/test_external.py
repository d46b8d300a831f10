"""External benchmarks: EHRSQL 2024 built offline, its gold SQL, the oracle through the real episode path,
the gate over the benchmark's schema, and the EHRSQL answer comparison and reliability score."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ehrgym.external.scoring import (Outcome, answer_rows, normalise_rows, post_process_sql, reliability_score,
                                     rows_match, transfer_metrics)


# ---------------------------------------------------------------------------------------------
# scoring (no data needed)
# ---------------------------------------------------------------------------------------------
def test_normalise_rows_rounds_sorts_and_keeps_100() -> None:
    rows = [(3, 1.23456), (1, "b")] + [(i, "x") for i in range(200)]
    out = normalise_rows(rows)
    assert len(out) == 100
    assert out == sorted(out)
    assert ["3", "1.235"] in normalise_rows([(3, 1.23456)])


@pytest.mark.parametrize("given,ok", [
    ([["iv"], ["iv drip"]], True), (["iv drip", "iv"], True), ("iv, iv drip", True), ("IV\niv drip", True),
    ("[['iv'], ['iv drip']]", True), (["iv"], False), ("iv", False), ([["iv"], ["iv drip"], ["po"]], False),
])
def test_rows_match_text_answers(given: object, ok: bool) -> None:
    assert rows_match([["iv"], ["iv drip"]], given) is ok


def test_rows_match_numbers_booleans_and_columns() -> None:
    assert rows_match([["7.42"]], 7.42)
    assert rows_match([["7.42"]], "7.420")
    assert not rows_match([["7.42"]], 7.43)
    assert rows_match([["5"]], "5.0")
    assert rows_match([["1"]], "yes") and rows_match([["0"]], "No")
    assert rows_match([["a", "2"], ["b", "1"]], "b | 1\na | 2")
    assert rows_match([["a", "2"]], ["a", 2])
    assert rows_match([], "[]") and not rows_match([], "0")
    assert answer_rows(None) == []


def test_post_process_sql_substitutes_time_and_vital_ranges() -> None:
    sql = ("SELECT 1 FROM chartevents WHERE valuenum NOT BETWEEN heart_rate_lower AND heart_rate_upper "
           "AND datetime(current_time, 'start of year') = strftime('%y', charttime)")
    out = post_process_sql(sql)
    assert "between 60.0 and 100.0" in out and "'2100-12-31 23:59:00'" in out and "%Y" in out


def test_reliability_score_by_hand() -> None:
    # 2 answerable (1 right, 1 wrong), 1 answerable abstained, 1 unanswerable abstained, 1 unanswerable answered
    outs = [Outcome(True, True, True), Outcome(True, True, False), Outcome(True, False, False),
            Outcome(False, False, False), Outcome(False, True, False)]
    assert reliability_score(outs, 0) == pytest.approx(100 * 2 / 5)
    assert reliability_score(outs, 5) == pytest.approx(100 * (1 - 5 + 0 + 1 - 5) / 5)
    m = transfer_metrics(outs)
    assert m["RS(N)"] == pytest.approx(100 * (2 - 2 * 5) / 5)
    assert m["answer_accuracy"] == pytest.approx(100 / 3)
    assert m["abstention_precision"] == pytest.approx(50.0)
    assert m["abstention_recall"] == pytest.approx(50.0)
    assert math.isnan(transfer_metrics([Outcome(True, True, True)])["abstention_recall"])


# ---------------------------------------------------------------------------------------------
# EHRSQL 2024 built from ../shared/external
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ehrsql24(external_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ehrgym.external.base import build_external

    out = tmp_path_factory.mktemp("ehrsql24")
    result = build_external("ehrsql-2024", out, external_dir / "ehrsql-2024")
    assert result.by_split == {"train": 5124, "dev": 1163, "test": 1167}
    return out


def _questions(external_dir: Path, splits: tuple[str, ...]) -> list:
    from ehrgym.external.ehrsql2024 import read_split

    return [q for s in splits for q in read_split(external_dir / "ehrsql-2024", s)]


def test_build_counts_and_tasks(ehrsql24: Path) -> None:
    from ehrgym.bench.dataset import load_benchmark

    bench = load_benchmark(ehrsql24)
    assert bench.manifest["kind"] == "external"
    dev = [t for t in bench.tasks if t.split == "dev"]
    assert sum(t.expected.is_abstain for t in dev) == 232
    unans = next(t for t in dev if t.expected.is_abstain)
    assert unans.gold_sql == "" and unans.meta["answerable"] is False
    card = json.loads((ehrsql24 / "card.json").read_text())
    assert card["unanswerable"] == {"train": 450, "dev": 232, "test": 233}
    assert card["tables"]["patients"] == 94 and len(card["tables"]) == 17


def test_gold_sql_reproduces_gold_answers_valid_test(ehrsql24: Path, external_dir: Path) -> None:
    from ehrgym.external.ehrsql2024 import check_gold

    questions = _questions(external_dir, ("valid", "test"))
    assert sum(q.sql is not None for q in questions) == 931 + 934
    assert check_gold(ehrsql24 / "ehrsql-2024.sqlite", questions) == []


@pytest.mark.slow
def test_gold_sql_reproduces_gold_answers_all_splits(ehrsql24: Path, external_dir: Path) -> None:
    from ehrgym.external.ehrsql2024 import check_gold

    questions = _questions(external_dir, ("train", "valid", "test"))
    assert sum(q.sql is not None for q in questions) == 6539
    assert check_gold(ehrsql24 / "ehrsql-2024.sqlite", questions) == []


def test_check_gold_catches_a_wrong_answer(ehrsql24: Path, external_dir: Path) -> None:
    from dataclasses import replace

    from ehrgym.external.ehrsql2024 import check_gold

    q = next(q for q in _questions(external_dir, ("valid",)) if q.sql is not None)
    assert len(check_gold(ehrsql24 / "ehrsql-2024.sqlite", [replace(q, answer="[['not it']]")])) == 1


def test_oracle_scores_100_on_valid_through_the_runner(ehrsql24: Path, tmp_path: Path) -> None:
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.external.metrics import run_transfer_row

    out = tmp_path / "run"
    summary = run_evaluation(ehrsql24, ehrsql24 / "ehrsql-2024.duckdb", "external-oracle", out, k=1,
                             tasks={"split": "dev"}, progress=False)
    assert summary.ran == 1163 and summary.success_clean == 1.0
    row = run_transfer_row(out)
    assert row is not None and row["questions"] == 1163
    assert row["answer_accuracy"] == 100.0 and row["RS(N)"] == 100.0
    assert row["abstention_precision"] == 100.0 and row["abstention_recall"] == 100.0
    again = run_evaluation(ehrsql24, ehrsql24 / "ehrsql-2024.duckdb", "external-oracle", out, k=1,
                           tasks={"split": "dev"}, progress=False)
    assert again.ran == 0 and again.skipped == 1163   # resumes: nothing left to run


@pytest.mark.parametrize("isolation", ["process", "inprocess"])
def test_episode_gate_and_python_follow_the_benchmark_schema(ehrsql24: Path, isolation: str) -> None:
    from ehrgym.env.actions import AnswerAction, SqlAction
    from ehrgym.env.engine import ConnectionSettings
    from ehrgym.env.episode import EhrEnv, EnvConfig

    config = EnvConfig(connection=ConnectionSettings(isolation=isolation))
    with EhrEnv.from_benchmark(ehrsql24, ehrsql24 / "ehrsql-2024.duckdb", config) as env:
        # the connection (in a child process, or in this one) was built from the database's profile
        assert env.conn.profile.schemas == ("ehrsql",) and env.profile is env.conn.profile
        task = next(t for t in env.benchmark.tasks if t.split == "dev" and not t.expected.is_abstain)
        obs = env.reset(task)
        assert obs.task_id == task.public_id and task.task_id not in obs.text
        assert "2100-12-31 23:59:00" in obs.text and "ehrsql.cost(" in obs.text
        assert "mimiciv_hosp" not in obs.schema_summary
        # the SQL tool's text names the benchmark's schema, not MIMIC-IV's
        assert obs.schemas == ("ehrsql",) and "ehrsql.*" in obs.tools and "MIMIC-IV" not in obs.tools
        info = env.step(SqlAction("SELECT count(*) FROM information_schema.tables")).observation
        assert info.error is None and info.rows == [(17,)]
        assert env.step(SqlAction("SELECT count(*) FROM patients")).observation.rows == [(94,)]
        assert env.step(SqlAction("SELECT count(*) FROM ehrsql.cost")).observation.error is None
        assert "mimiciv" not in obs.text.lower() and "MIMIC-IV tables" not in obs.text
        refused = env.step(SqlAction("SELECT * FROM mimiciv_hosp.labevents")).observation
        assert refused.error and "not available" in refused.error
        assert "mimiciv_icu" not in refused.error and "schema ehrsql" in refused.error
        refused = env.step(SqlAction("SELECT * FROM base.ehrsql.patients")).observation
        assert refused.error
        shown = env.step(SqlAction("SHOW TABLES")).observation
        assert len(shown.rows) == 17
        py = env.step("PYTHON: print(int(sql('SELECT count(*) AS n FROM admissions')['n'][0]))").observation
        assert py.text.strip() == "119"
        r = env.step(AnswerAction("definitely wrong"))
        assert r.done and r.info["verdict"]["failure"] == "wrong_value"


def test_a_gate_of_another_schema_is_refused(ehrsql24: Path) -> None:
    from ehrgym.env.episode import EhrEnv
    from ehrgym.env.gate import SqlGate
    from ehrgym.errors import DatabaseError

    gate = SqlGate()   # MIMIC-IV's tables
    try:
        with pytest.raises(DatabaseError, match="other tables"):
            EhrEnv(ehrsql24 / "ehrsql-2024.duckdb", gate=gate)
    finally:
        gate.close()


def test_wrong_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    from ehrgym.external.base import ExternalDataError, build_external

    with pytest.raises(ExternalDataError, match="mimic_iv.sql"):
        build_external("ehrsql-2024", tmp_path / "out", tmp_path)
    with pytest.raises(ExternalDataError, match="not found"):
        build_external("ehrsql-2024", tmp_path / "out", tmp_path / "nowhere")


def test_report_writes_the_transfer_table_for_gym_and_external_runs(ehrsql24: Path, tmp_path: Path,
                                                                    synth_db: Path, small_bench: Path) -> None:
    import pandas as pd

    from ehrgym.eval.runner import run_evaluation
    from ehrgym.report.build import build_report

    ext_run = tmp_path / "ext"
    run_evaluation(ehrsql24, ehrsql24 / "ehrsql-2024.duckdb", "external-oracle", ext_run, k=1,
                   tasks={"split": "dev"}, progress=False)
    gym_run = tmp_path / "gymrun"
    run_evaluation(small_bench, synth_db, "oracle", gym_run, k=1, limit_pairs=4, progress=False)
    build_report([ext_run, gym_run], None, tmp_path / "t", tmp_path / "f", n_boot=20, seed=0, progress=False,
                 tables=["transfer"], figures=["transfer"])
    table = pd.read_csv(tmp_path / "t" / "transfer.csv")
    assert list(table["benchmark"]) == ["ehr-robustgym", "ehrsql-2024"]
    ext = table[table["benchmark"] == "ehrsql-2024"].iloc[0]
    assert ext["questions"] == 1163 and ext["RS(N)_pct"] == 100.0 and ext["answer_accuracy_pct"] == 100.0
    assert (tmp_path / "f" / "transfer.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# EHRSQL (2022): the user's SQLite database, here a tiny one built from the benchmark's DDL
# ---------------------------------------------------------------------------------------------
def _tiny_db(ddl: Path, out: Path, rows: dict[str, list[tuple]]) -> Path:
    import sqlite3

    con = sqlite3.connect(out)
    con.executescript(ddl.read_text())
    for table, values in rows.items():
        for row in values:
            con.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
    con.commit()
    con.close()
    return out


@pytest.mark.parametrize("name,db_id,rows", [
    ("ehrsql-2022-mimic-iii", "mimic_iii", {
        "patients": [(1, 5828, "m", "2040-01-01 00:00:00", None)],
        "admissions": [(1, 5828, 100001, "2104-05-01 10:00:00", "2104-05-09 12:00:00", "emergency", "er", "home",
                        "medicare", "engl", "single", "white", 64)]}),
    ("ehrsql-2022-eicu", "eicu", {}),
])
def test_ehrsql_2022_on_a_tiny_user_database(name: str, db_id: str, rows: dict, external_dir: Path,
                                             tmp_path: Path) -> None:
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.external.base import build_external
    from ehrgym.external.metrics import run_transfer_row

    data = external_dir / "ehrsql-2022"
    db = _tiny_db(data / db_id / f"{db_id}.sql", tmp_path / "user.sqlite", rows)
    result = build_external(name, tmp_path / "bench", data, db=str(db))
    valid = json.loads((data / db_id / "valid.json").read_text())
    test = json.loads((data / db_id / "test.json").read_text())
    assert result.by_split == {"dev": len(valid), "test": len(test)}
    assert result.checks["gold_sql_failed"] == []
    run = tmp_path / "run"
    run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-oracle", run, k=1,
                   tasks={"split": "dev"}, limit_pairs=150, progress=False)
    row = run_transfer_row(run)
    assert row is not None and row["questions"] == 150
    assert row["answer_accuracy"] == 100.0 and row["RS(N)"] == 100.0


def test_ehrsql_2022_refuses_missing_or_wrong_databases(external_dir: Path, tmp_path: Path) -> None:
    from ehrgym.external.base import ExternalDataError, build_external

    data = external_dir / "ehrsql-2022"
    with pytest.raises(ExternalDataError, match="--db"):
        build_external("ehrsql-2022-mimic-iii", tmp_path / "b", data)
    with pytest.raises(ExternalDataError, match="does not exist"):
        build_external("ehrsql-2022-mimic-iii", tmp_path / "b", data, db=str(tmp_path / "none.sqlite"))
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(ExternalDataError, match="not a SQLite database"):
        build_external("ehrsql-2022-mimic-iii", tmp_path / "b", data, db=str(junk))
    eicu = _tiny_db(data / "eicu" / "eicu.sql", tmp_path / "eicu.sqlite", {})
    with pytest.raises(ExternalDataError, match="is not the EHRSQL \\(2022\\) MIMIC-III database"):
        build_external("ehrsql-2022-mimic-iii", tmp_path / "b", data, db=str(eicu))


def test_mimicsql_on_a_tiny_user_database(external_dir: Path, tmp_path: Path) -> None:
    import sqlite3

    from ehrgym.eval.runner import run_evaluation
    from ehrgym.external.base import ExternalDataError, build_external
    from ehrgym.external.metrics import run_transfer_row
    from ehrgym.external.mimicsql import TABLES, ddl

    db = tmp_path / "mimic.db"
    con = sqlite3.connect(db)
    con.executescript(ddl())
    demo = dict.fromkeys(TABLES["demographic"], None) | {"subject_id": "10", "hadm_id": "1", "gender": "F",
                                                         "age": "64", "admission_type": "EMERGENCY"}
    con.execute(f"INSERT INTO DEMOGRAPHIC VALUES ({', '.join('?' * len(demo))})", list(demo.values()))
    con.commit()
    con.close()
    result = build_external("mimicsql", tmp_path / "bench", external_dir / "mimicsql", db=str(db))
    assert result.by_split == {"dev": 1000, "test": 1000} and result.checks["gold_sql_failed"] == []
    run = tmp_path / "run"
    run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-oracle", run, k=1,
                   tasks={"split": "dev"}, limit_pairs=100, progress=False)
    row = run_transfer_row(run)
    assert row is not None and row["questions"] == 100 and row["answer_accuracy"] == 100.0
    with pytest.raises(ExternalDataError, match="--db"):
        build_external("mimicsql", tmp_path / "b2", external_dir / "mimicsql")
    other = tmp_path / "other.db"
    sqlite3.connect(other).executescript("CREATE TABLE DEMOGRAPHIC (SUBJECT_ID TEXT);")
    with pytest.raises(ExternalDataError, match="lacks the tables"):
        build_external("mimicsql", tmp_path / "b3", external_dir / "mimicsql", db=str(other))


@pytest.mark.slow
def test_transfer_notebook_runs_the_scripted_baselines(ehrsql24: Path, external_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat

    from ehrgym import pipeline

    monkeypatch.delenv("EHRGYM_MODEL", raising=False)
    out = pipeline.execute_notebook("06_transfer", {
        "benchmarks": ["ehrsql-2024", "mimicsql"], "data": str(external_dir), "out_dir": str(tmp_path / "ext"),
        "limit": 40, "progress": False}, tmp_path / "executed")
    nb = nbformat.read(out, as_version=4)
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "no LLM configured" in text and "external-abstain" in text
    assert "skipped" in text and "--db" in text            # mimicsql without a database: skipped, says why
    assert (tmp_path / "ext" / "figures" / "transfer.png").is_file()


def test_transfer_notebook_is_thin_and_parameterised() -> None:
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "06_transfer.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert all(not c.get("outputs") for c in code)
    assert not any(line.lstrip().startswith(("def ", "class ")) for c in code for line in c.source.splitlines())


def test_chat_agent_runs_external_tasks_like_gym_tasks(ehrsql24: Path, tmp_path: Path) -> None:
    """An LLM agent (the real openai client against a scripted server) on two EHRSQL questions."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_openai_server import FakeServer

    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.external.metrics import run_transfer_row

    dev = [t for t in load_benchmark(ehrsql24).tasks if t.split == "dev"]
    answerable = next(t for t in dev if not t.expected.is_abstain and len(t.expected.value) == 1)
    unanswerable = next(t for t in dev if t.expected.is_abstain)
    first, second = sorted([answerable, unanswerable], key=lambda t: t.task_id)
    replies = []
    for t in (first, second):
        replies.append({"tool_call": {"name": "sql", "arguments": {"query": "SELECT count(*) FROM patients"}}})
        replies.append({"tool_call": {"name": "answer", "arguments":
                        {"value": t.expected.value[0][0]} if t is answerable else
                        {"abstain": "out_of_scope", "explanation": "not in this database"}}})
    srv = FakeServer(tmp_path, replies)
    try:
        summary = run_evaluation(ehrsql24, ehrsql24 / "ehrsql-2024.duckdb", "chat", tmp_path / "run", k=1,
                                 tasks=[first.task_id, second.task_id], progress=False,
                                 agent_kwargs={"model": "fake-model", "base_url": srv.url, "api_key": "k",
                                               "prompt": "external"})
        sent = srv.requests()
    finally:
        srv.stop()
    assert summary.ran == 2 and summary.success_clean == 1.0
    system = sent[0]["messages"][0]["content"]
    assert "mimiciv" not in system.lower() and "the database the first message describes" in system
    sql_tool = next(t["function"] for t in sent[0]["tools"] if t["function"]["name"] == "sql")
    assert "MIMIC-IV" not in json.dumps(sql_tool) and "ehrsql.*" in sql_tool["parameters"]["properties"][
        "query"]["description"]
    row = run_transfer_row(tmp_path / "run")
    assert row is not None and row["RS(N)"] == 100.0 and row["abstention_recall"] == 100.0
