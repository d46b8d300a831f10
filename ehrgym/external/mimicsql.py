"""MIMICSQL natural v2 (Wang et al., WWW 2020, TREQS): your ``mimic.db``, the benchmark's questions.

MIMICSQL runs on ``mimic.db``, five tables TREQS derives from credentialed MIMIC-III; its question
files are open but it publishes no DDL, so the tables and columns the gold SQL uses are listed
here (:data:`TABLES`) and your ``--db`` is checked against them (a clear error otherwise). The
tables are copied into DuckDB for episodes; each question's gold answer is its gold SQL's result
on your file (normalised as in EHRSQL: values rounded to 3 decimals, rows sorted, first 100). Every
question is answerable; the official metric is execution accuracy (= answer accuracy here).
Splits: dev → dev, test → test.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.dataset import write_benchmark
from ehrgym.bench.task import Expected, Task
from ehrgym.db.profile import SchemaProfile
from ehrgym.external.base import BuildResult, ExternalAdapter, ExternalDataError, register_adapter
from ehrgym.external.ehrsql2024 import _intent
from ehrgym.external.scoring import normalise_rows
from ehrgym.external.sqlitedb import copy_sqlite_to_duckdb, sqlite_tables

NAME = "mimicsql"
SPLITS: dict[str, str] = {"dev": "dev", "test": "test"}
# the five tables of TREQS' mimic.db and their columns
TABLES: dict[str, tuple[str, ...]] = {
    "demographic": ("subject_id", "hadm_id", "name", "marital_status", "age", "dob", "gender", "language",
                    "religion", "admission_type", "days_stay", "insurance", "ethnicity", "expire_flag",
                    "admission_location", "discharge_location", "diagnosis", "dod", "dob_year", "dod_year",
                    "admittime", "dischtime", "admityear"),
    "diagnoses": ("subject_id", "hadm_id", "icd9_code", "short_title", "long_title"),
    "procedures": ("subject_id", "hadm_id", "icd9_code", "short_title", "long_title"),
    "prescriptions": ("subject_id", "hadm_id", "icustay_id", "drug_type", "drug", "formulary_drug_cd", "route",
                      "drug_dose"),
    "lab": ("subject_id", "hadm_id", "itemid", "charttime", "flag", "value_unit", "label", "fluid", "category"),
}
DESCRIPTION = "the MIMICSQL database (five tables TREQS derives from MIMIC-III: demographic, diagnoses, " \
              "procedures, prescriptions, lab)"


def ddl() -> str:
    """SQLite DDL of the five tables (all columns TEXT, as in TREQS' mimic.db)."""
    return "\n".join(f"CREATE TABLE {t.upper()} ({', '.join(f'{c.upper()} TEXT' for c in cols)});"
                     for t, cols in TABLES.items())


def user_profile(db: Path) -> SchemaProfile:
    """The profile of your ``mimic.db`` (its declared column types), after checking its tables and columns."""
    if not db.is_file():
        raise ExternalDataError(f"--db {db} does not exist; pass the mimic.db TREQS builds from MIMIC-III")
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            found = {spec.name: spec for spec in sqlite_tables(con, NAME)}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise ExternalDataError(f"--db {db} is not a SQLite database ({exc}); MIMICSQL needs TREQS' mimic.db") from exc
    missing = [t for t in TABLES if t not in found]
    if missing:
        raise ExternalDataError(f"--db {db} is not MIMICSQL's mimic.db: it lacks the tables {missing} "
                                f"(found {sorted(found)})")
    specs = []
    for table, cols in TABLES.items():
        spec = found[table]
        lacking = [c for c in cols if c not in spec.column_names]
        if lacking:
            raise ExternalDataError(f"--db {db}: table {table} lacks the columns {lacking}")
        specs.append(spec)
    return SchemaProfile(NAME, tuple(specs), DESCRIPTION, None)


def build(data_dir: Path, out_dir: Path, db: str | None = None, splits: tuple[str, ...] = tuple(SPLITS),
          **_: Any) -> BuildResult:
    start = time.perf_counter()
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ExternalDataError(f"unknown MIMICSQL splits {unknown}; choose from {list(SPLITS)}")
    if not db:
        raise ExternalDataError("MIMICSQL runs on your mimic.db (TREQS, from MIMIC-III): pass --db FILE")
    user_db = Path(db).resolve()
    profile = user_profile(user_db)
    files = {s: data_dir / f"{s}.json" for s in splits}
    for path in files.values():
        if not path.exists():
            raise ExternalDataError(f"{path} is missing; --data must be the mimicsql folder (dev.json, test.json)")
    out_dir.mkdir(parents=True, exist_ok=True)
    duck_db = (out_dir / f"{NAME}-episodes.duckdb").resolve()  # a file stem equal to the schema clashes in DuckDB
    source = {"benchmark": NAME, "data_dir": str(data_dir.resolve()), "user_db": str(user_db)}
    db_hash = copy_sqlite_to_duckdb(user_db, duck_db, profile, {"source": source, "created_by": "ehrgym external"})
    con = sqlite3.connect(f"file:{user_db}?mode=ro", uri=True)
    tasks, failed = [], []
    try:
        for split, path in files.items():
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                item = json.loads(line)
                sql = str(item["sql"])
                try:
                    gold = normalise_rows(con.execute(sql).fetchall())
                except sqlite3.Error as exc:
                    failed.append(f"{split}:{lineno}: {exc}")
                    continue
                task_id = f"{NAME}-{SPLITS[split]}-{item['key']}"
                tasks.append(Task(task_id, task_id, "clean", _intent(sql.lower()), "population", NAME,
                                  str(item["question_refine"]), sql, "", Expected("answer", AnswerSpec("list"), gold),
                                  None, SPLITS[split],
                                  {"benchmark": NAME, "source_id": str(item["key"]), "source_split": split,
                                   "answerable": True, "scorer": "ehrsql", "sql_dialect": "sqlite",
                                   "official_db": str(user_db), "raw_sql": True}))
    finally:
        con.close()
    total = len(tasks) + len(failed)
    if failed and len(failed) * 2 > total:
        raise ExternalDataError(f"{len(failed)} of {total} gold SQL queries fail on --db {user_db} (e.g. {failed[0]}); "
                                f"is it MIMICSQL's mimic.db?")
    tasks.sort(key=lambda t: t.task_id)
    by_split = {SPLITS[s]: sum(1 for t in tasks if t.meta["source_split"] == s) for s in splits}
    card = {"benchmark": NAME, "title": "MIMICSQL natural v2 (TREQS)", "license": "MIT",
            "official_metric": "execution accuracy", "splits": by_split, "gold_sql_failed": len(failed)}
    manifest = {"format_version": 1, "kind": "external", "benchmark": NAME, "config": {"splits": list(splits)},
                "seed": 0, "db_path": str(duck_db), "db_content_hash": db_hash, "db_source": source,
                "official_db": str(user_db)}
    write_benchmark(out_dir, tasks, card, f"# MIMICSQL\n\nQuestions: {by_split}.\n",
                    {"gold_sql_failed": failed, "seconds": round(time.perf_counter() - start, 3)}, manifest)
    return BuildResult(out_dir, len(tasks), by_split, time.perf_counter() - start,
                       {"episode_db": str(duck_db), "official_db": str(user_db)}, {"gold_sql_failed": failed})


ADAPTER = register_adapter(ExternalAdapter(NAME, "MIMICSQL (TREQS)", "execution accuracy", "mimicsql", ("db",), build))
