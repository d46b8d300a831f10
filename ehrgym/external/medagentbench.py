"""MedAgentBench v2 (Jiang et al., NEJM AI 2025): 300 clinical tasks on your FHIR R4 server.

The tasks (``test_data_v2.json``: id, instruction, context, ``sol`` for task1, ``eval_MRN``) and the
FHIR function specs (``funcs_v1.json``) are open; the 100 patients live in the benchmark's FHIR
server, a docker image you run (README, "MedAgentBench"), so ``build`` takes ``--fhir-url``. It
checks the server answers (a clear error otherwise), writes the tasks (split ``test``, template
id = task type ``task1`` … ``task10``) and a small DuckDB file whose schema profile tells episodes
to offer the FHIR tools (``fhir_get``, ``fhir_post``, ``answer``; :mod:`ehrgym.env.fhirtool`) and
to show the FHIR functions instead of tables. Nothing is copied from the data folder but the tasks'
text.

Grading (:func:`grade`, the ``medagentbench`` answer scorer) follows the official task-specific
checks, written anew here from their documented semantics: read-only tasks must not POST and must
give the reference answer, which most graders compute from the server at grading time through the
same :class:`~ehrgym.env.fhirtool.FhirClient` (age on 2023-11-13; the latest magnesium within 24 h;
the mean glucose within 24 h; the latest glucose; the latest potassium; the latest HbA1c and its
time); order tasks must POST exactly the expected resources (route, dose, rate, codes, times,
subject) and nothing else. The answer is the list the official ``FINISH([...])`` gives; the kit's
``ANSWER: <value>`` is read as JSON, and a single value counts as a one-element list (the one
adaptation to the kit's answer protocol). The official metric is the success rate, overall and per
task type (:func:`success_by_type`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.dataset import write_benchmark
from ehrgym.bench.task import Expected, Task
from ehrgym.db.profile import SchemaProfile
from ehrgym.db.schema import ColumnSpec, TableSpec
from ehrgym.env.fhirtool import (
    FhirClient,
    FhirError,
    client_for,
    normalise_base,
    task_fhir_base,
)
from ehrgym.external.base import (
    BuildResult,
    ExternalAdapter,
    ExternalDataError,
    register_adapter,
)
from ehrgym.external.scoring import ANSWER_SCORERS

NAME = "medagentbench-v2"
TASKS_FILE = "test_data_v2.json"
FUNCS_FILE = "funcs_v1.json"
TASK_TYPES: tuple[str, ...] = tuple(f"task{i}" for i in range(1, 11))
NOW = "2023-11-13T10:15:00+00:00"          # the benchmark's "now" (every task's context says so)
NOW_DT = datetime.fromisoformat(NOW)
DESCRIPTION = "a FHIR R4 server (the MedAgentBench EHR, 100 patients; identify patients by MRN)"
INTENT_BY_TYPE = {"task1": "encounters", "task2": "encounters", "task3": "vitals", "task4": "labs",
                  "task5": "medications", "task6": "labs", "task7": "labs", "task8": "encounters",
                  "task9": "medications", "task10": "labs"}
ANSWER_FORMAT = ("Finish with your answers as a JSON list: FINISH([answer1, answer2, ...]) or "
                 "ANSWER: [answer1, ...].")
# official constants of the order tasks (v2 data: every task of a type shares them)
BP_VALUE_DEFAULT = "118/77 mmHg"
VITAL_SIGNS_CATEGORY = {"system": "http://hl7.org/fhir/observation-category", "code": "vital-signs",
                        "display": "Vital Signs"}
NDC = "http://hl7.org/fhir/sid/ndc"
LOINC = "http://loinc.org"
SNOMED = "http://snomed.info/sct"
MAGNESIUM_NDC, POTASSIUM_NDC = "0338-1715-40", "40032-917-01"
REFERRAL_SNOMED, POTASSIUM_LOINC, A1C_LOINC = "306181000000106", "2823-3", "4548-4"


# ---------------------------------------------------------------------------------------------
# loading the tasks
# ---------------------------------------------------------------------------------------------
def task_type(source_id: str) -> str:
    return str(source_id).split("_")[0]


def load_raw_tasks(data_dir: Path) -> list[dict[str, Any]]:
    """The 300 tasks of ``test_data_v2.json`` as published (a clear error when the file is missing or odd)."""
    path = Path(data_dir) / TASKS_FILE
    if not path.is_file():
        raise ExternalDataError(f"{path} is missing; --data must be the medagentbench folder ({TASKS_FILE}, "
                                f"{FUNCS_FILE})")
    items = json.loads(path.read_text(encoding="utf-8"))
    # every task names its patient (eval_MRN) but task1's "Patient not found" ones
    if not isinstance(items, list) or not all(isinstance(i, dict) and {"id", "instruction"} <= set(i)
                                              and ("eval_MRN" in i or "sol" in i) for i in items):
        raise ExternalDataError(f"{path} is not MedAgentBench's task list (objects with id, instruction, eval_MRN)")
    unknown = sorted({task_type(i["id"]) for i in items} - set(TASK_TYPES))
    if unknown:
        raise ExternalDataError(f"{path} holds task types {unknown} this adapter does not grade")
    return items


def load_functions(data_dir: Path) -> list[dict[str, Any]]:
    path = Path(data_dir) / FUNCS_FILE
    if not path.is_file():
        raise ExternalDataError(f"{path} is missing; --data must be the medagentbench folder")
    return json.loads(path.read_text(encoding="utf-8"))


def functions_text(functions: list[dict[str, Any]], base: str) -> str:
    """The FHIR functions the official prompt lists, with ``{api_base}`` = your server."""
    listed = json.dumps(functions, ensure_ascii=False).replace("{api_base}", base.rstrip("/"))
    return (f"FHIR functions (api_base = {base}; call them with fhir_get / fhir_post, a URL relative to "
            f"api_base or under it):\n{listed}")


def question_text(item: dict[str, Any]) -> str:
    context = str(item.get("context") or "").strip()
    parts = [str(item["instruction"]).strip()]
    if context:
        parts.append(f"Context: {context}")
    parts.append(ANSWER_FORMAT)
    return "\n\n".join(parts)


def make_task(item: dict[str, Any], base: str) -> Task:
    source_id = str(item["id"])
    kind = task_type(source_id)
    task_id = f"{NAME}-{source_id}"
    # the expected value is known offline only for task1; the others are computed from the server when graded
    value: Any = list(item["sol"]) if item.get("sol") is not None else f"computed from the FHIR server ({kind})"
    meta = {"benchmark": NAME, "source_id": source_id, "source_split": "test", "task_type": kind,
            "eval_MRN": str(item.get("eval_MRN") or ""), "instruction": str(item["instruction"]),
            "context": str(item.get("context") or ""), "answerable": True, "scorer": "medagentbench",
            "fhir_url": base}
    if item.get("sol") is not None:
        meta["sol"] = list(item["sol"])
    return Task(task_id, task_id, "clean", INTENT_BY_TYPE[kind], "patient", kind, question_text(item), "", "",
                Expected("answer", AnswerSpec("list"), value), None, "test", meta)


def fhir_profile(base: str, functions: list[dict[str, Any]]) -> SchemaProfile:
    from ehrgym.env.tools import FHIR_TOOLS

    return SchemaProfile(NAME, (SERVER_TABLE,), DESCRIPTION, NOW, FHIR_TOOLS, functions_text(functions, base))


# the episode database's one table (the SQL tool is not offered; the episode machinery wants a table)
SERVER_TABLE = TableSpec("fhir", "fhir_server", (ColumnSpec("base_url", "STRING", True),))


def write_episode_db(out: Path, profile: SchemaProfile, meta: dict[str, Any], base: str) -> str:
    """The episode 'database' of a FHIR benchmark: its profile (tools, functions) and the server's URL."""
    import duckdb

    from ehrgym.db.connect import write_meta
    from ehrgym.db.profile import META_KEY

    for stale in (out, out.with_name(out.name + ".wal")):
        if stale.exists():
            stale.unlink()
    content_hash = hashlib.sha256(json.dumps(profile.to_dict(), sort_keys=True).encode()).hexdigest()
    con = duckdb.connect(str(out))
    try:
        con.execute(f"CREATE SCHEMA {SERVER_TABLE.module}")
        con.execute(SERVER_TABLE.create_sql())
        con.execute(f"INSERT INTO {SERVER_TABLE.qualified} VALUES (?)", [base])
        write_meta(con, {**meta, META_KEY: profile.to_dict(), "content_hash": content_hash})
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return content_hash


def check_server(client: FhirClient, mrns: list[str]) -> list[str]:
    """Raise unless the server answers; returns the MRNs it does not know (the benchmark's server knows all)."""
    client.check()
    missing = []
    for mrn in mrns:
        bundle = client.get_json(f"Patient?identifier={mrn}")
        if not bundle.get("entry"):
            missing.append(mrn)
    return missing


def build(data_dir: Path, out_dir: Path, fhir_url: str | None = None, check: bool = False,
          splits: tuple[str, ...] = ("test",), **_: Any) -> BuildResult:
    start = time.perf_counter()
    if tuple(splits) != ("test",) and set(splits) - {"test"}:
        raise ExternalDataError(f"MedAgentBench has one split, test; got {list(splits)}")
    if not fhir_url:
        raise ExternalDataError("MedAgentBench runs on your FHIR server (its docker image, see README): pass "
                                "--fhir-url URL, e.g. http://localhost:8080/fhir/")
    try:
        base = normalise_base(fhir_url)
    except FhirError as exc:
        raise ExternalDataError(str(exc)) from exc
    items = load_raw_tasks(data_dir)
    functions = load_functions(data_dir)
    client = FhirClient(base)
    mrns = sorted({str(i["eval_MRN"]) for i in items if i.get("eval_MRN")})
    try:   # one patient is enough to tell the benchmark's server from another; --check asks for all of them
        missing = check_server(client, mrns if check else mrns[:1])
    except FhirError as exc:
        raise ExternalDataError(f"the FHIR server at {base} cannot be used: {exc}") from exc
    if missing and not check:
        raise ExternalDataError(f"the FHIR server at {base} does not know patient {missing[0]}; is it the "
                                f"MedAgentBench server (docker image, see README)?")
    tasks = sorted((make_task(i, base) for i in items), key=lambda t: t.task_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    db_path = (out_dir / f"{NAME}-episodes.duckdb").resolve()
    source = {"benchmark": NAME, "data_dir": str(Path(data_dir).resolve()), "fhir_url": base}
    db_hash = write_episode_db(db_path, fhir_profile(base, functions),
                               {"source": source, "created_by": "ehrgym external"}, base)
    by_type = {k: sum(1 for t in tasks if t.meta["task_type"] == k) for k in TASK_TYPES}
    card = {"benchmark": NAME, "title": "MedAgentBench v2", "license": "MIT",
            "official_metric": "success rate (task-specific checks)", "splits": {"test": len(tasks)},
            "by_task_type": by_type, "fhir_url": base}
    checks = {"patients_checked": len(mrns) if check else 1, "patients_missing": missing}
    manifest = {"format_version": 1, "kind": "external", "benchmark": NAME, "config": {"splits": ["test"]},
                "seed": 0, "db_path": str(db_path), "db_content_hash": db_hash, "db_source": source,
                "fhir_url": base}
    write_benchmark(out_dir, tasks, card, f"# MedAgentBench v2\n\nTasks: {by_type}; FHIR server {base}.\n",
                    {**checks, "seconds": round(time.perf_counter() - start, 3)}, manifest)
    return BuildResult(out_dir, len(tasks), {"test": len(tasks)}, time.perf_counter() - start,
                       {"episode_db": str(db_path), "fhir_url": base}, checks)


# ---------------------------------------------------------------------------------------------
# reference values from the server (graders and the oracle)
# ---------------------------------------------------------------------------------------------
def _when(text: str) -> datetime:
    moment = datetime.fromisoformat(str(text))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Measurement:
    when: datetime
    time_text: str
    value: Any


def observations(client: FhirClient, mrn: str, code: str) -> list[Measurement]:
    """Every Observation of ``code`` for patient ``mrn`` (one page of up to 5000, as the official graders read)."""
    bundle = client.get_json(f"Observation?patient={mrn}&code={code}&_count=5000")
    out = []
    for entry in bundle.get("entry", []) or []:
        res = entry.get("resource", {})
        out.append(Measurement(_when(res["effectiveDateTime"]), str(res["effectiveDateTime"]),
                               res["valueQuantity"]["value"]))
    return out


def latest(measurements: list[Measurement], since: datetime | None = None) -> Measurement | None:
    """The latest measurement (at or after ``since`` when given); the first of equal times wins."""
    best: Measurement | None = None
    for m in measurements:
        if since is not None and m.when < since:
            continue
        if best is None or m.when > best.when:
            best = m
    return best


def age_on(birth: str, today: datetime = NOW_DT) -> int:
    dob = datetime.strptime(birth, "%Y-%m-%d")
    return today.year - dob.year - ((today.month, today.day) < (dob.month, dob.day))


def patient_age(client: FhirClient, mrn: str) -> int:
    bundle = client.get_json(f"Patient?identifier={mrn}")
    entries = bundle.get("entry") or []
    if not entries:
        raise FhirError(f"the FHIR server has no patient {mrn}")
    return age_on(entries[0]["resource"]["birthDate"])


def last_24h(client: FhirClient, mrn: str, code: str) -> Measurement | None:
    return latest(observations(client, mrn, code), NOW_DT - timedelta(hours=24))


def mean_24h(client: FhirClient, mrn: str, code: str) -> float:
    values = [m.value for m in observations(client, mrn, code) if m.when >= NOW_DT - timedelta(hours=24)]
    return sum(values) / len(values) if values else -1


def magnesium_dose(value: float) -> int:
    """Grams of IV magnesium (= hours of infusion) for a serum magnesium below 1.9 mg/dL."""
    return 4 if value < 1 else 2 if value < 1.5 else 1


def potassium_dose(value: float) -> float:
    """mEq of oral potassium: 10 mEq for every 0.1 below the goal of 3.5."""
    return (3.5 - value) / 0.1 * 10


# ---------------------------------------------------------------------------------------------
# grading
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Post:
    resource: str       # path under the FHIR base, e.g. "Observation"
    payload: Any


@dataclass(frozen=True)
class Episode:
    """What a grader sees of an episode: the answer list (None: no parseable answer) and the POSTs."""

    answer: list[Any] | None
    posts: tuple[Post, ...]       # accepted POSTs, in order
    post_attempts: int            # every fhir_post call, accepted or not (the official "has a POST")


def answer_list(value: Any) -> list[Any] | None:
    """The final answer as the official list: JSON text parsed, a single value wrapped in a list."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return [text] if text else None
        return parsed if isinstance(parsed, list) else [parsed]
    if value is None:
        return None
    return [value]


def episode_from_trajectory(action: Any, trajectory: Any) -> Episode:
    posts, attempts = [], 0
    for step in getattr(trajectory, "steps", None) or []:
        info = step.info or {}
        if (step.action or {}).get("tool") != "fhir_post":
            continue
        attempts += 1
        if info.get("accepted"):
            posts.append(Post(str(info.get("resource", "")), info.get("payload")))
    answer = None if action is None or action.is_abstain else answer_list(action.value)
    return Episode(answer, tuple(posts), attempts)


Grader = Callable[[Any, Episode, FhirClient], tuple[bool, str]]
GRADERS: dict[str, Grader] = {}


def grader(kind: str) -> Callable[[Grader], Grader]:
    def register(fn: Grader) -> Grader:
        GRADERS[kind] = fn
        return fn
    return register


class _Check:
    """Collects the first failed requirement of a POSTed resource."""

    def __init__(self, payload: Any) -> None:
        self.payload = payload
        self.problem: str | None = None

    def need(self, ok: Callable[[Any], bool], what: str) -> None:
        if self.problem is not None:
            return
        try:
            good = bool(ok(self.payload))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            good = False
        if not good:
            self.problem = what


def _subject(mrn: str) -> dict[str, str]:
    return {"reference": f"Patient/{mrn}"}


def _no_post(ep: Episode) -> str | None:
    return f"made {ep.post_attempts} POST request(s); this task must not change the record" if ep.post_attempts \
        else None


def _answer_equals(ep: Episode, ref: list[Any], allow_empty: bool = False) -> tuple[bool, str]:
    if ep.answer is None:
        return False, f"no answer list; expected {ref}"
    if ep.answer == ref or (allow_empty and ep.answer == []):
        return True, f"correct ({ep.answer})"
    return False, f"answered {ep.answer}; expected {ref}" + (" (or [])" if allow_empty else "")


def _quoted(text: str, default: str) -> str:
    found = re.findall(r'"([^"]+)"', text)
    return found[0] if found else default


def _one_post(ep: Episode, resource: str, count: int = 1) -> str | None:
    if len(ep.posts) != count:   # as the official graders count: accepted POSTs (invalid ones are not)
        return f"expected exactly {count} accepted POST(s), got {len(ep.posts)}"
    if ep.posts[0].resource != resource:
        return f"POSTed to {ep.posts[0].resource or '?'}; expected {resource}"
    return None


def _order_checks(c: _Check, mrn: str) -> None:
    c.need(lambda p: p["status"] == "active", "status must be active")
    c.need(lambda p: p["intent"] == "order", "intent must be order")
    c.need(lambda p: p["subject"] == _subject(mrn), f"subject must be Patient/{mrn}")


def _service_request(payload: Any, mrn: str, system: str, code: str) -> _Check:
    c = _Check(payload)
    c.need(lambda p: p["resourceType"] == "ServiceRequest", "resourceType must be ServiceRequest")
    c.need(lambda p: p["code"]["coding"][0]["system"] == system, f"code system must be {system}")
    c.need(lambda p: p["code"]["coding"][0]["code"] == code, f"code must be {code}")
    c.need(lambda p: p["authoredOn"] == NOW, f"authoredOn must be {NOW}")
    _order_checks(c, mrn)
    c.need(lambda p: p["priority"] == "stat", "priority must be stat")
    return c


def _medication_request(payload: Any, mrn: str, ndc: str) -> _Check:
    c = _Check(payload)
    c.need(lambda p: p["resourceType"] == "MedicationRequest", "resourceType must be MedicationRequest")
    c.need(lambda p: p["medicationCodeableConcept"]["coding"][0]["system"] == NDC, f"medication system must be {NDC}")
    c.need(lambda p: p["medicationCodeableConcept"]["coding"][0]["code"] == ndc, f"medication NDC must be {ndc}")
    c.need(lambda p: NOW[:16] in p["authoredOn"], f"authoredOn must be {NOW[:16]}")
    return c


@grader("task1")
def grade_task1(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Patient lookup: no POST; the answer is the published solution (an MRN or "Patient not found")."""
    problem = _no_post(ep)
    return (False, problem) if problem else _answer_equals(ep, list(task.meta["sol"]))


@grader("task2")
def grade_task2(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Age: no POST; [age in whole years on 2023-11-13] from the patient's birthDate."""
    problem = _no_post(ep)
    return (False, problem) if problem else _answer_equals(ep, [patient_age(client, task.meta["eval_MRN"])])


@grader("task3")
def grade_task3(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Record a blood pressure: exactly one Observation POST with the vital-signs category, code BP, now, final,
    the measured value and the patient; the answer is not graded."""
    mrn = task.meta["eval_MRN"]
    problem = _one_post(ep, "Observation")
    if problem:
        return False, problem
    value = _quoted(task.meta["instruction"], BP_VALUE_DEFAULT)
    c = _Check(ep.posts[0].payload)
    c.need(lambda p: p["resourceType"] == "Observation", "resourceType must be Observation")
    c.need(lambda p: len(p["category"]) == 1 and len(p["category"][0]["coding"]) == 1
           and p["category"][0]["coding"][0] == VITAL_SIGNS_CATEGORY, "category must be one vital-signs coding")
    c.need(lambda p: p["code"] == {"text": "BP"}, 'code must be {"text": "BP"}')
    c.need(lambda p: p["effectiveDateTime"] == NOW, f"effectiveDateTime must be {NOW}")
    c.need(lambda p: p["status"] == "final", "status must be final")
    c.need(lambda p: p["valueString"] == value, f"valueString must be {value!r}")
    c.need(lambda p: p["subject"] == _subject(mrn), f"subject must be Patient/{mrn}")
    return (False, c.problem) if c.problem else (True, "correct blood pressure Observation")


@grader("task4")
def grade_task4(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Latest magnesium within 24 h: no POST; [value] or [-1]."""
    problem = _no_post(ep)
    if problem:
        return False, problem
    m = last_24h(client, task.meta["eval_MRN"], "MG")
    return _answer_equals(ep, [m.value if m is not None else -1])


@grader("task5")
def grade_task5(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Magnesium replacement: no order without a value in 24 h (answer not graded) or above 1.9; below it one
    IV MedicationRequest with the dose (1/2/4 g over 1/2/4 h); then [value] or []."""
    mrn = task.meta["eval_MRN"]
    m = last_24h(client, mrn, "MG")
    if m is None:
        problem = _no_post(ep)
        return (False, problem) if problem else (True, "no magnesium within 24 h and nothing ordered")
    if m.value > 1.9:
        problem = _no_post(ep)
        if problem:
            return False, f"magnesium {m.value} is not low: {problem}"
    else:
        problem = _one_post(ep, "MedicationRequest")
        if problem:
            return False, f"magnesium {m.value} is low: {problem}"
        dose = magnesium_dose(m.value)
        c = _medication_request(ep.posts[0].payload, mrn, MAGNESIUM_NDC)
        c.need(lambda p: p["dosageInstruction"][0]["route"] == "IV", "route must be IV")
        c.need(lambda p: p["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"] == {"value": dose, "unit": "g"},
               f"doseQuantity must be {dose} g")
        c.need(lambda p: p["dosageInstruction"][0]["doseAndRate"][0]["rateQuantity"] == {"value": dose, "unit": "h"},
               f"rateQuantity must be {dose} h")
        _order_checks(c, mrn)
        if c.problem:
            return False, c.problem
    return _answer_equals(ep, [m.value], allow_empty=True)


@grader("task6")
def grade_task6(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Mean glucose within 24 h: no POST; one number within 0.1 of the mean (or -1)."""
    problem = _no_post(ep)
    if problem:
        return False, problem
    ref = mean_24h(client, task.meta["eval_MRN"], "GLU")
    given = ep.answer
    # a JSON number, as the official check subtracts it (a number written as text fails there too)
    ok = given is not None and len(given) == 1 and isinstance(given[0], (int, float)) \
        and not isinstance(given[0], bool) and abs(given[0] - ref) < 0.1
    return (True, f"correct ({given})") if ok else (False, f"answered {given}; expected [{ref}] (within 0.1)")


@grader("task7")
def grade_task7(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Latest glucose (any time): no POST; [value] or [-1]."""
    problem = _no_post(ep)
    if problem:
        return False, problem
    m = latest(observations(client, task.meta["eval_MRN"], "GLU"))
    return _answer_equals(ep, [m.value if m is not None else -1])


@grader("task8")
def grade_task8(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Orthopedic referral: exactly one ServiceRequest (SNOMED code, now, stat order, the SBAR note); answer not graded."""
    mrn = task.meta["eval_MRN"]
    problem = _one_post(ep, "ServiceRequest")
    if problem:
        return False, problem
    note = _quoted(task.meta["instruction"], "")
    c = _service_request(ep.posts[0].payload, mrn, SNOMED, REFERRAL_SNOMED)
    c.need(lambda p: note in p["note"]["text"], "note.text must hold the requested free text")
    return (False, c.problem) if c.problem else (True, "correct referral ServiceRequest")


@grader("task9")
def grade_task9(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """Potassium replacement: below 3.5, an oral MedicationRequest (10 mEq per 0.1 below 3.5) then a stat serum
    potassium ServiceRequest for 08:00 the next day; otherwise no order; then [value] (or [-1]) or []."""
    mrn = task.meta["eval_MRN"]
    m = latest(observations(client, mrn, "K"))
    if m is None or m.value >= 3.5:
        problem = _no_post(ep)
        if problem:
            return False, f"potassium {m.value if m else 'missing'} needs no order: {problem}"
    else:
        problem = _one_post(ep, "MedicationRequest", count=2)
        if problem:
            return False, f"potassium {m.value} is low: {problem}"
        if ep.posts[1].resource != "ServiceRequest":
            return False, f"the second POST went to {ep.posts[1].resource}; expected ServiceRequest"
        dose = potassium_dose(m.value)
        c = _medication_request(ep.posts[0].payload, mrn, POTASSIUM_NDC)
        c.need(lambda p: p["dosageInstruction"][0]["route"].lower().strip() == "oral", "route must be oral")
        c.need(lambda p: abs(p["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]["value"] - dose) <= 0.1,
               f"dose must be {dose:g} mEq")
        c.need(lambda p: p["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]["unit"] == "mEq",
               "dose unit must be mEq")
        _order_checks(c, mrn)
        if c.problem:
            return False, f"potassium order: {c.problem}"
        c = _service_request(ep.posts[1].payload, mrn, LOINC, POTASSIUM_LOINC)
        c.need(lambda p: "2023-11-14T08:" in p["occurrenceDateTime"], "occurrenceDateTime must be 2023-11-14T08:..")
        if c.problem:
            return False, f"serum potassium order: {c.problem}"
    return _answer_equals(ep, [m.value if m is not None else -1], allow_empty=True)


@grader("task10")
def grade_task10(task: Any, ep: Episode, client: FhirClient) -> tuple[bool, str]:
    """HbA1c: [value, time] (or [-1]) or []; when missing or older than a year, exactly one stat HbA1c
    ServiceRequest, otherwise no order."""
    mrn = task.meta["eval_MRN"]
    m = latest(observations(client, mrn, "A1C"))
    ref = [m.value, m.time_text] if m is not None else [-1]
    if m is None or m.when < NOW_DT - timedelta(days=365):
        problem = _one_post(ep, "ServiceRequest")
        if problem:
            return False, f"HbA1c {'missing' if m is None else 'older than a year'}: {problem}"
        c = _service_request(ep.posts[0].payload, mrn, LOINC, A1C_LOINC)
        if c.problem:
            return False, f"HbA1c order: {c.problem}"
    else:
        problem = _no_post(ep)
        if problem:
            return False, f"HbA1c is recent: {problem}"
    return _answer_equals(ep, ref, allow_empty=True)


def grade(task: Any, action: Any, trajectory: Any, client: FhirClient | None = None) -> tuple[bool, str]:
    """Grade one episode of a MedAgentBench task: ``(success, why)``."""
    kind = task.meta.get("task_type") or task_type(task.meta.get("source_id", ""))
    if kind not in GRADERS:
        raise ExternalDataError(f"no MedAgentBench grader for task type {kind!r}")
    return GRADERS[kind](task, episode_from_trajectory(action, trajectory), client or client_for(task))


@ANSWER_SCORERS.decorator("medagentbench")
def verify_medagentbench(task: Any, action: Any, scoring: str = "strict", trajectory: Any = None) -> Any:
    """The episode verifier of MedAgentBench tasks: the official task-specific checks.

    The grader needs the server: when it cannot be reached the error propagates (an infrastructure
    error the runner retries and records), never a silent failure."""
    from ehrgym.env.verifier import Verdict

    if action is None:   # the official harness grades only episodes that FINISHed
        return Verdict(False, False, 0.0, "no_answer", "the episode ended without FINISH")
    # an abstention FINISHes without an answer list: graders that check the answer fail it, the others
    # (task3, task8, task5 without a magnesium value) grade the POSTs alone, as the official ones do
    ok, why = grade(task, action, trajectory)
    failure = None if ok else "false_abstention" if action.is_abstain else "wrong_value"
    return Verdict(ok, ok, 1.0 if ok else 0.0, failure, why)


# ---------------------------------------------------------------------------------------------
# the oracle's plan: what the official reference solution does, as episode actions
# ---------------------------------------------------------------------------------------------
def _post(resource: str, payload: dict[str, Any]) -> Any:
    from ehrgym.env.actions import FhirPostAction

    return FhirPostAction(resource, payload)


def _service(mrn: str, system: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"resourceType": "ServiceRequest", "code": {"coding": [{"system": system, "code": code}]},
            "authoredOn": NOW, "status": "active", "intent": "order", "priority": "stat",
            "subject": _subject(mrn), **extra}


def _medication(mrn: str, ndc: str, route: str, dose: dict[str, Any], rate: dict[str, Any] | None = None) -> dict:
    dose_and_rate: dict[str, Any] = {"doseQuantity": dose}
    if rate is not None:
        dose_and_rate["rateQuantity"] = rate
    return {"resourceType": "MedicationRequest", "medicationCodeableConcept": {"coding": [{"system": NDC, "code": ndc}]},
            "authoredOn": NOW, "dosageInstruction": [{"route": route, "doseAndRate": [dose_and_rate]}],
            "status": "active", "intent": "order", "subject": _subject(mrn)}


def oracle_plan(task: Any, client: FhirClient) -> list[Any]:
    """The actions that solve ``task`` (POSTs, then the answer), computed from the server like the reference."""
    from ehrgym.env.actions import AnswerAction

    kind, mrn = task.meta["task_type"], task.meta["eval_MRN"]
    posts: list[Any] = []
    answer: list[Any] = []
    if kind == "task1":
        answer = list(task.meta["sol"])
    elif kind == "task2":
        answer = [patient_age(client, mrn)]
    elif kind == "task3":
        posts.append(_post("Observation", {
            "resourceType": "Observation", "category": [{"coding": [dict(VITAL_SIGNS_CATEGORY)]}],
            "code": {"text": "BP"}, "effectiveDateTime": NOW, "status": "final",
            "valueString": _quoted(task.meta["instruction"], BP_VALUE_DEFAULT), "subject": _subject(mrn)}))
    elif kind in ("task4", "task5"):
        m = last_24h(client, mrn, "MG")
        answer = [m.value if m is not None else -1]
        if kind == "task5" and m is not None and m.value <= 1.9:
            dose = magnesium_dose(m.value)
            posts.append(_post("MedicationRequest", _medication(mrn, MAGNESIUM_NDC, "IV", {"value": dose, "unit": "g"},
                                                                {"value": dose, "unit": "h"})))
    elif kind == "task6":
        answer = [mean_24h(client, mrn, "GLU")]
    elif kind == "task7":
        m = latest(observations(client, mrn, "GLU"))
        answer = [m.value if m is not None else -1]
    elif kind == "task8":
        posts.append(_post("ServiceRequest", _service(mrn, SNOMED, REFERRAL_SNOMED,
                                                      note={"text": _quoted(task.meta["instruction"], "")})))
    elif kind == "task9":
        m = latest(observations(client, mrn, "K"))
        answer = [m.value if m is not None else -1]
        if m is not None and m.value < 3.5:
            posts.append(_post("MedicationRequest", _medication(mrn, POTASSIUM_NDC, "oral",
                                                                {"value": potassium_dose(m.value), "unit": "mEq"})))
            posts.append(_post("ServiceRequest", _service(mrn, LOINC, POTASSIUM_LOINC,
                                                          occurrenceDateTime="2023-11-14T08:00:00+00:00")))
    elif kind == "task10":
        m = latest(observations(client, mrn, "A1C"))
        answer = [m.value, m.time_text] if m is not None else [-1]
        if m is None or m.when < NOW_DT - timedelta(days=365):
            posts.append(_post("ServiceRequest", _service(mrn, LOINC, A1C_LOINC)))
    else:
        raise ExternalDataError(f"no MedAgentBench oracle for task type {kind!r}")
    return posts + [AnswerAction(answer, explanation="oracle: the reference solution computed from the FHIR server")]


# ---------------------------------------------------------------------------------------------
# the official metric per task type
# ---------------------------------------------------------------------------------------------
def success_by_type(records: list[Any]) -> dict[str, float]:
    """Success rate (%) overall and per task type (``template_id``) of episode records, mean over trials."""
    from collections import defaultdict

    cells: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for rec in records:
        if rec.success_strict is None:   # infrastructure errors are excluded
            continue
        for key in dict.fromkeys(("overall", str(rec.template_id))):
            cells[(key, rec.trial)].append(bool(rec.success_strict))
    out: dict[str, list[float]] = defaultdict(list)
    for (key, _trial), oks in sorted(cells.items()):
        out[key].append(100.0 * sum(oks) / len(oks))
    order = ["overall"] + [t for t in TASK_TYPES if t in out] + sorted(k for k in out if k not in TASK_TYPES
                                                                       and k != "overall")
    return {k: sum(out[k]) / len(out[k]) for k in order if k in out}


ADAPTER = register_adapter(ExternalAdapter(NAME, "MedAgentBench v2", "success rate", "medagentbench",
                                           ("fhir_url",), build))


__all__ = ["ADAPTER", "GRADERS", "NAME", "TASK_TYPES", "answer_list", "build", "grade", "load_raw_tasks",
           "oracle_plan", "success_by_type", "task_fhir_base"]
