"""Shared helpers for the environment tests: a tiny hand-made kit database and tasks on it.

(No tests here; the env tests import these so they do not depend on the synthetic generator.)
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.task import Expected, NoiseSpec, Task
from ehrgym.db.connect import content_hash, write_meta
from ehrgym.db.overlay import Overlay, TableEdit
from ehrgym.db.schema import create_mimic_schema

SECRET = "TOP-SECRET-ANSWER-42"


def make_tiny_db(path: Path, extra_patients: int = 0) -> Path:
    """3 patients, 3 admissions, creatinine labs; ``extra_patients`` adds bulk rows (size tests)."""
    con = duckdb.connect(str(path))
    create_mimic_schema(con)
    con.execute("INSERT INTO mimiciv_hosp.patients VALUES (1,'F',60,2150,'2008 - 2010',NULL),"
                "(2,'M',70,2150,'2008 - 2010',NULL),(3,'F',45,2150,'2008 - 2010',NULL)")
    con.execute("""INSERT INTO mimiciv_hosp.admissions (subject_id, hadm_id, admittime, dischtime, admission_type)
                   VALUES (1, 100, '2150-01-01 08:00', '2150-01-05 12:00', 'URGENT'),
                          (2, 200, '2150-02-01 08:00', '2150-02-03 08:00', 'ELECTIVE'),
                          (3, 300, '2150-03-01 08:00', '2150-03-02 08:00', 'URGENT')""")
    con.execute("INSERT INTO mimiciv_hosp.d_labitems VALUES (50912,'Creatinine','Blood','Chemistry')")
    con.execute("""INSERT INTO mimiciv_hosp.labevents (labevent_id, subject_id, hadm_id, itemid, charttime,
                   value, valuenum, valueuom) VALUES
                   (1, 1, 100, 50912, '2150-01-01 10:00', '1.1', 1.1, 'mg/dL'),
                   (2, 1, 100, 50912, '2150-01-02 10:00', '1.4', 1.4, 'mg/dL'),
                   (3, 2, 200, 50912, '2150-02-01 10:00', '0.9', 0.9, 'mg/dL'),
                   (4, 3, 300, 50912, '2150-03-01 10:00', '2.0', 2.0, 'mg/dL')""")
    if extra_patients:
        con.execute(f"""INSERT INTO mimiciv_hosp.labevents (labevent_id, subject_id, hadm_id, itemid, charttime,
                        valuenum, valueuom)
                        SELECT 1000 + i, 1000 + i // 50, 10000 + i // 50, 50912,
                               TIMESTAMP '2150-01-01' + INTERVAL (i % 50) HOUR, (i % 30) / 10.0, 'mg/dL'
                        FROM range({extra_patients * 50}) t(i)""")
    write_meta(con, {"source": "test", "content_hash": content_hash(con), "secret_answer": SECRET})
    con.close()
    return path


SPEC = AnswerSpec("number", decimals=2)


def last_creat_task(task_id: str = "t-clean", subject: int = 1) -> Task:
    sql = (f"SELECT valuenum FROM mimiciv_hosp.labevents WHERE subject_id = {subject} AND itemid = 50912 "
           f"ORDER BY charttime DESC LIMIT 1")
    return Task(task_id=task_id, pair_id="p1", variant="clean", intent="labs", level="patient",
                template_id="lab_last", question=f"What was the last creatinine of patient {subject}?",
                gold_sql=sql, naive_sql=sql, expected=Expected("answer", SPEC, value={1: 1.4, 2: 0.9, 3: 2.0}[subject]),
                noise=None, split="test")


def missing_creat_task() -> Task:
    """Noise: both creatinine rows of patient 1 are deleted by the overlay (rowids 0 and 1)."""
    sql = ("SELECT valuenum FROM mimiciv_hosp.labevents WHERE subject_id = 1 AND itemid = 50912 "
           "ORDER BY charttime DESC LIMIT 1")
    overlay = Overlay((TableEdit("labevents", delete_rowids=(0, 1)),))
    return Task(task_id="t-noise", pair_id="p1", variant="noise", intent="labs", level="patient",
                template_id="lab_last", question="What was the last creatinine of patient 1?",
                gold_sql=sql, naive_sql=sql,
                expected=Expected("abstain", SPEC, reason="insufficient_evidence"),
                noise=NoiseSpec("record", "missing_evidence", overlay), split="test")


def implausible_task() -> Task:
    """Noise: an inserted creatinine of 95 mg/dL at a later time for patient 1."""
    row = {"labevent_id": 99, "subject_id": 1, "hadm_id": 100, "itemid": 50912, "charttime": "2150-01-03 10:00:00",
           "value": "95", "valuenum": 95.0, "valueuom": "mg/dL"}
    overlay = Overlay((TableEdit("labevents", insert_rows=(row,)),))
    sql = ("SELECT valuenum FROM mimiciv_hosp.labevents WHERE subject_id = 1 AND itemid = 50912 "
           "ORDER BY charttime DESC LIMIT 1")
    return Task(task_id="t-implausible", pair_id="p2", variant="noise", intent="labs", level="patient",
                template_id="lab_last", question="What was the last creatinine of patient 1?",
                gold_sql=sql, naive_sql=sql,
                expected=Expected("abstain", SPEC, reason="implausible_value"),
                noise=NoiseSpec("value", "implausible_value", overlay), split="test")
