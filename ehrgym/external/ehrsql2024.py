"""EHRSQL 2024 (Lee et al., ClinicalNLP 2024 shared task), fully offline.

``build`` loads the benchmark's 17 tables (``database/*.csv.gz``, its ``mimic_iv.sql`` DDL) into
SQLite (``ehrsql-2024.sqlite``: the official SQL-level scoring runs the gold and predicted SQL
there) and DuckDB (``ehrsql-2024.duckdb``: episodes; its bookkeeping carries the benchmark's
schema profile and "current time" 2100-12-31 23:59:00), and writes every question of the chosen
splits as a task: answerable questions expect the gold answer of ``answer.json`` (compared with
the benchmark's normalisation, :mod:`ehrgym.external.scoring`), unanswerable ones (gold SQL
``null``) expect an abstention. Splits: ``train`` → train, ``valid`` → dev, ``test`` → test.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.dataset import write_benchmark
from ehrgym.bench.task import Expected, Task
from ehrgym.db.profile import SchemaProfile
from ehrgym.external.base import BuildResult, ExternalAdapter, ExternalDataError, register_adapter
from ehrgym.external.scoring import EHRSQL_CURRENT_TIME, normalise_rows, parse_gold, post_process_sql
from ehrgym.external.sqlitedb import build_sqlite, copy_sqlite_to_duckdb

NAME = "ehrsql-2024"
SCHEMA = "ehrsql"
SPLITS: dict[str, str] = {"train": "train", "valid": "dev", "test": "test"}   # benchmark split -> kit split
ABSTAIN_REASON = "out_of_scope"   # the benchmark has no reasons: any abstention is right on an unanswerable one
DESCRIPTION = ("the EHRSQL 2024 hospital database (17 tables built from the MIMIC-IV demo, MIMIC-III-style "
               "names; strings are lower-case, ICD codes look like 'icd10|i10'; times are shifted into the "
               "years 2100-2105)")

# intent of a question from the tables its gold SQL reads (the kit's closed vocabulary)
_INTENT_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("microbiology", ("microbiologyevents",)),
    ("labs", ("labevents", "d_labitems")),
    ("vitals", ("chartevents",)),
    ("medications", ("prescriptions", "inputevents")),
    ("diagnoses", ("diagnoses_icd", "d_icd_diagnoses", "procedures_icd", "d_icd_procedures")),
)


@dataclass(frozen=True)
class Question:
    source_id: str
    split: str          # the benchmark's split name
    question: str
    sql: str | None     # None: unanswerable
    answer: str | None  # the gold answer text of answer.json


def read_split(data_dir: Path, split: str) -> list[Question]:
    folder = data_dir / split
    files = {name: folder / f"{name}.json" for name in ("data", "label", "answer")}
    for _name, path in files.items():
        if not path.exists():
            raise ExternalDataError(f"{path} is missing: the EHRSQL 2024 {split} split needs data.json, "
                                    f"label.json and answer.json (GitHub glee4810/ehrsql-2024, data/mimic_iv/)")
    try:
        data = json.loads(files["data"].read_text(encoding="utf-8"))["data"]
        labels = json.loads(files["label"].read_text(encoding="utf-8"))
        answers = json.loads(files["answer"].read_text(encoding="utf-8"))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ExternalDataError(f"{folder} does not hold EHRSQL 2024 files: {exc}") from exc
    out = []
    for item in data:
        qid = str(item["id"])
        if qid not in labels:
            raise ExternalDataError(f"{files['label']} has no gold SQL for question {qid}")
        sql = labels[qid]
        answerable = sql != "null"
        if answerable and qid not in answers:
            raise ExternalDataError(f"{files['answer']} has no gold answer for question {qid}")
        out.append(Question(qid, split, str(item["question"]), sql if answerable else None,
                            answers.get(qid) if answerable else None))
    return out


def _intent(sql: str | None) -> str:
    tables = set(re.findall(r"\b([a-z_]+)\.", (sql or "").lower())) | \
        set(re.findall(r"\bfrom\s+([a-z_]+)", (sql or "").lower()))
    for intent, names in _INTENT_TABLES:
        if tables & set(names):
            return intent
    return "encounters"


def make_task(q: Question, sqlite_db: Path | None = None) -> Task:
    spec = AnswerSpec("list")
    if q.sql is None:
        expected = Expected("abstain", spec, reason=ABSTAIN_REASON)
    else:
        expected = Expected("answer", spec, value=parse_gold(q.answer or "[]"))
    meta: dict[str, Any] = {"benchmark": NAME, "source_id": q.source_id, "source_split": q.split,
                            "answerable": q.sql is not None, "scorer": "ehrsql",
                            "current_time": EHRSQL_CURRENT_TIME}
    if sqlite_db is not None:
        meta["official_db"] = str(sqlite_db)
    task_id = f"ehrsql24-{SPLITS[q.split]}-{q.source_id}"
    level = "patient" if q.sql and "subject_id =" in q.sql else "population"
    return Task(task_id=task_id, pair_id=task_id, variant="clean", intent=_intent(q.sql), level=level,
                template_id=NAME, question=q.question, gold_sql=q.sql or "", naive_sql="",
                expected=expected, noise=None, split=SPLITS[q.split], meta=meta)


def run_official(con: sqlite3.Connection, sql: str, current_time: str = EHRSQL_CURRENT_TIME) -> list[list[str]]:
    """A (gold or predicted) SQL's result in the benchmark's normalised form, run on SQLite."""
    return normalise_rows(con.execute(post_process_sql(sql, current_time)).fetchall())


def check_gold(sqlite_db: Path, questions: list[Question]) -> list[str]:
    """Answerable questions whose gold SQL does not reproduce the gold answer (should be none)."""
    con = sqlite3.connect(f"file:{sqlite_db}?mode=ro", uri=True)
    problems = []
    try:
        for q in questions:
            if q.sql is None:
                continue
            try:
                got = run_official(con, q.sql)
            except sqlite3.Error as exc:
                problems.append(f"{q.split}/{q.source_id}: gold SQL fails on SQLite: {exc}")
                continue
            if got != parse_gold(q.answer or "[]"):
                problems.append(f"{q.split}/{q.source_id}: gold SQL gives {str(got)[:120]}, answer.json "
                                f"has {str(q.answer)[:120]}")
    finally:
        con.close()
    return problems


def build(data_dir: Path, out_dir: Path, splits: tuple[str, ...] = tuple(SPLITS), check: bool = False,
          **_: Any) -> BuildResult:
    """Build the SQLite and DuckDB databases and the task set of ``splits`` under ``out_dir``."""
    start = time.perf_counter()
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ExternalDataError(f"unknown EHRSQL 2024 splits {unknown}; choose from {list(SPLITS)}")
    for need in ("mimic_iv.sql", "database"):
        if not (data_dir / need).exists():
            raise ExternalDataError(f"{data_dir / need} is missing; --data must be the ehrsql-2024 folder "
                                    f"(questions, mimic_iv.sql, database/*.csv.gz)")
    questions = [q for split in splits for q in read_split(data_dir, split)]
    out_dir.mkdir(parents=True, exist_ok=True)
    sqlite_db = (out_dir / f"{NAME}.sqlite").resolve()
    duck_db = (out_dir / f"{NAME}.duckdb").resolve()
    specs, counts = build_sqlite(data_dir / "mimic_iv.sql", data_dir / "database", sqlite_db, SCHEMA)
    profile = SchemaProfile(NAME, specs, DESCRIPTION, EHRSQL_CURRENT_TIME)
    source = {"benchmark": NAME, "data_dir": str(data_dir.resolve()), "row_counts": counts}
    db_hash = copy_sqlite_to_duckdb(sqlite_db, duck_db, profile, {"source": source, "created_by": "ehrgym external"})
    checks: dict[str, Any] = {}
    if check:
        problems = check_gold(sqlite_db, questions)
        checks = {"gold_sql_checked": sum(q.sql is not None for q in questions), "gold_sql_mismatches": problems}
        if problems:
            raise ExternalDataError(f"{len(problems)} gold SQL results differ from answer.json, e.g. {problems[0]}")
    tasks = sorted((make_task(q, sqlite_db) for q in questions), key=lambda t: t.task_id)
    by_split = {SPLITS[s]: sum(1 for q in questions if q.split == s) for s in splits}
    card = {"benchmark": NAME, "title": "EHRSQL 2024 (ClinicalNLP 2024 shared task), v1.1.1",
            "license": "questions CC BY 4.0; database ODbL", "official_metric": "RS(c), c = 0, 5, 10, N",
            "splits": by_split, "unanswerable": {SPLITS[s]: sum(1 for q in questions if q.split == s and q.sql is None)
                                                 for s in splits},
            "current_time": EHRSQL_CURRENT_TIME, "tables": counts}
    manifest = {"format_version": 1, "kind": "external", "benchmark": NAME,
                "config": {"splits": list(splits)}, "seed": 0, "db_path": str(duck_db), "db_content_hash": db_hash,
                "db_source": source, "official_db": str(sqlite_db)}
    card_md = (f"# {card['title']}\n\nQuestions: {by_split}; unanswerable: {card['unanswerable']}.\n"
               f"Official metric: {card['official_metric']}. License: {card['license']}.\n")
    report = {"checks": checks, "seconds": round(time.perf_counter() - start, 3)}
    write_benchmark(out_dir, tasks, card, card_md, report, manifest)
    return BuildResult(out_dir, len(tasks), by_split, time.perf_counter() - start,
                       {"episode_db": str(duck_db), "official_db": str(sqlite_db)}, checks)


ADAPTER = register_adapter(ExternalAdapter(NAME, "EHRSQL 2024", "RS(c), c = 0, 5, 10, N", "ehrsql-2024", (), build))
