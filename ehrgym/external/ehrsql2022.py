"""EHRSQL (Lee et al., NeurIPS 2022 Datasets) on MIMIC-III and eICU: your database, the benchmark's questions.

The question files (``{valid,test}.json``: question, gold SQL, ``is_impossible``) and the DDL are
open; the databases are built from credentialed PhysioNet data, so ``build`` takes your SQLite
build (``--db``, made by the benchmark's preprocessing). It checks the file is a SQLite database
holding every table and column of the benchmark's DDL (a clear error otherwise), copies those
tables into DuckDB for episodes (with the benchmark's schema profile and "current time"
2105-12-31 23:59:00), and computes each answerable question's gold answer by running its gold
SQL on your SQLite file (post-processed and normalised as in EHRSQL 2024). Impossible questions
expect an abstention. Scored with RS(c). Splits: valid → dev, test → test.
"""

from __future__ import annotations

import json
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
from ehrgym.external.ehrsql2024 import ABSTAIN_REASON, _intent, run_official
from ehrgym.external.sqlitedb import copy_sqlite_to_duckdb, sqlite_tables

CURRENT_TIME = "2105-12-31 23:59:00"
SPLITS: dict[str, str] = {"valid": "dev", "test": "test"}


@dataclass(frozen=True)
class Variant:
    name: str          # adapter name
    db_id: str         # folder and DDL stem
    title: str
    description: str


VARIANTS = (
    Variant("ehrsql-2022-mimic-iii", "mimic_iii", "EHRSQL (2022) MIMIC-III",
            "an EHRSQL MIMIC-III hospital database (17 tables, lower-case strings; times shifted into the 2100s)"),
    Variant("ehrsql-2022-eicu", "eicu", "EHRSQL (2022) eICU",
            "an EHRSQL eICU intensive-care database (10 tables, lower-case strings; times shifted into the 2100s)"),
)


def ddl_profile(ddl: Path, variant: Variant) -> SchemaProfile:
    """The schema profile the benchmark's DDL defines (tables and columns, in order)."""
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(ddl.read_text(encoding="utf-8"))
        specs = sqlite_tables(con, variant.db_id)
    finally:
        con.close()
    return SchemaProfile(variant.name, specs, variant.description, CURRENT_TIME)


def check_user_db(db: Path, profile: SchemaProfile, variant: Variant) -> None:
    """Raise a clear :class:`ExternalDataError` unless ``db`` is a SQLite file with the DDL's tables/columns."""
    if not db.is_file():
        raise ExternalDataError(f"--db {db} does not exist; pass your SQLite build of the {variant.title} database")
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            found = {spec.name: set(spec.column_names) for spec in sqlite_tables(con, variant.db_id)}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise ExternalDataError(f"--db {db} is not a SQLite database ({exc}); {variant.title} needs the SQLite "
                                f"file the benchmark's preprocessing builds") from exc
    missing = [spec.name for spec in profile.tables if spec.name not in found]
    if missing:
        raise ExternalDataError(f"--db {db} is not the {variant.title} database: it lacks the tables {missing} "
                                f"(found {sorted(found)})")
    for spec in profile.tables:
        lacking = [c for c in spec.column_names if c not in found[spec.name]]
        if lacking:
            raise ExternalDataError(f"--db {db}: table {spec.name} lacks the columns {lacking} of the "
                                    f"{variant.title} DDL")


def _make_build(variant: Variant):  # noqa: ANN202 - a closure per variant
    def build(data_dir: Path, out_dir: Path, db: str | None = None, splits: tuple[str, ...] = tuple(SPLITS),
              check: bool = False, **_: Any) -> BuildResult:
        start = time.perf_counter()
        folder = data_dir / variant.db_id
        ddl = folder / f"{variant.db_id}.sql"
        if not ddl.exists():
            raise ExternalDataError(f"{ddl} is missing; --data must be the ehrsql-2022 folder "
                                    f"(mimic_iii/, eicu/ with DDL and questions)")
        unknown = [s for s in splits if s not in SPLITS]
        if unknown:
            raise ExternalDataError(f"unknown {variant.title} splits {unknown}; choose from {list(SPLITS)}")
        if not db:
            raise ExternalDataError(f"{variant.title} runs on your SQLite build of its database: pass --db FILE")
        user_db = Path(db).resolve()
        profile = ddl_profile(ddl, variant)
        check_user_db(user_db, profile, variant)
        out_dir.mkdir(parents=True, exist_ok=True)
        duck_db = (out_dir / f"{variant.name}.duckdb").resolve()
        source = {"benchmark": variant.name, "data_dir": str(data_dir.resolve()), "user_db": str(user_db)}
        db_hash = copy_sqlite_to_duckdb(user_db, duck_db, profile, {"source": source, "created_by": "ehrgym external"})
        con = sqlite3.connect(f"file:{user_db}?mode=ro", uri=True)
        tasks, failed = [], []
        try:
            for split in splits:
                path = folder / f"{split}.json"
                if not path.exists():
                    raise ExternalDataError(f"{path} is missing")
                for item in json.loads(path.read_text(encoding="utf-8")):
                    impossible = bool(item.get("is_impossible"))
                    task_id = f"{variant.name}-{SPLITS[split]}-{item['id']}"
                    if impossible:
                        expected = Expected("abstain", AnswerSpec("list"), reason=ABSTAIN_REASON)
                    else:
                        try:
                            gold = run_official(con, item["query"], CURRENT_TIME)
                        except sqlite3.Error as exc:
                            failed.append(f"{item['id']}: {exc}")
                            continue
                        expected = Expected("answer", AnswerSpec("list"), value=gold)
                    sql = "" if impossible else str(item["query"])
                    tasks.append(Task(task_id, task_id, "clean", _intent(sql), "patient" if "subject_id =" in sql
                                      or "uniquepid =" in sql else "population", variant.name,
                                      str(item["question"]), sql, "", expected, None, SPLITS[split],
                                      {"benchmark": variant.name, "source_id": str(item["id"]), "source_split": split,
                                       "answerable": not impossible, "scorer": "ehrsql", "current_time": CURRENT_TIME,
                                       "official_db": str(user_db)}))
        finally:
            con.close()
        answerable = sum(not t.expected.is_abstain for t in tasks) + len(failed)
        if failed and len(failed) * 2 > answerable:
            raise ExternalDataError(f"{len(failed)} of {answerable} gold SQL queries fail on --db {user_db} (e.g. "
                                    f"{failed[0]}); is it the {variant.title} database?")
        tasks.sort(key=lambda t: t.task_id)
        by_split = {SPLITS[s]: sum(1 for t in tasks if t.meta["source_split"] == s) for s in splits}
        card = {"benchmark": variant.name, "title": variant.title, "license": "CC BY 4.0 (questions)",
                "official_metric": "RS(c), c = 0, 5, 10, N", "splits": by_split, "gold_sql_failed": len(failed)}
        manifest = {"format_version": 1, "kind": "external", "benchmark": variant.name,
                    "config": {"splits": list(splits)}, "seed": 0, "db_path": str(duck_db), "db_content_hash": db_hash,
                    "db_source": source, "official_db": str(user_db)}
        report = {"gold_sql_failed": failed, "seconds": round(time.perf_counter() - start, 3)}
        write_benchmark(out_dir, tasks, card, f"# {variant.title}\n\nQuestions: {by_split}.\n", report, manifest)
        return BuildResult(out_dir, len(tasks), by_split, time.perf_counter() - start,
                           {"episode_db": str(duck_db), "official_db": str(user_db)}, {"gold_sql_failed": failed})

    return build


ADAPTERS_2022 = tuple(register_adapter(ExternalAdapter(v.name, v.title, "RS(c), c = 0, 5, 10, N", "ehrsql-2022",
                                                       ("db",), _make_build(v))) for v in VARIANTS)
