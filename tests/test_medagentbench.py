"""MedAgentBench v2: the loader, the FHIR tools in an episode, every task type's grader on a right and a
wrong episode, the oracle through the runner, and clear errors without or with an unreachable server.

The FHIR server is a tiny stdlib server on loopback (tests/fake_fhir_server.py) with hand-written
patients; the benchmark's own server (a docker image) is never needed.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_fhir_server import FakeFhirServer

from ehrgym.env.actions import AnswerAction, FhirGetAction, FhirPostAction
from ehrgym.env.fhirtool import FhirClient, FhirError
from ehrgym.external import medagentbench as mab
from ehrgym.external.base import ExternalDataError, build_external, default_external_dir

NOW = mab.NOW
BP = ('I just measured the blood pressure for patient with MRN of {mrn}, and it is "118/77 mmHg". '
      'Help me record it.')
NOTE = ("Situation: acute left knee injury, Background: radiology report indicates ACL tear. Assessment: ACL "
        "tear grade II. Recommendation: request for Orthopedic service to evaluate and provide management "
        "recommendations.")
REFERRAL = f'Order orthopedic surgery referral for patient {{mrn}}. Specify within the free text of the referral, "{NOTE}"'


@pytest.fixture(scope="module")
def fhir() -> Any:
    with FakeFhirServer() as base:
        yield base


def _item(kind: str, n: int, mrn: str, sol: list[Any] | None = None) -> dict[str, Any]:
    instruction = {"task3": BP, "task8": REFERRAL}.get(kind, "Task {mrn}").format(mrn=mrn)
    item = {"id": f"{kind}_{n}", "instruction": instruction, "context": f"It's {NOW} now.", "eval_MRN": mrn}
    if sol is not None:
        item["sol"] = sol
    return item


def _task(fhir: str, kind: str, mrn: str, sol: list[Any] | None = None) -> Any:
    return mab.make_task(_item(kind, 1, mrn, sol), fhir)


def _grade(fhir: str, task: Any, answer: Any, posts: list[tuple[str, Any]] = (), invalid_posts: int = 0) -> bool:
    ep = mab.Episode(None if answer is None else mab.answer_list(answer),
                     tuple(mab.Post(r, p) for r, p in posts), len(posts) + invalid_posts)
    ok, _why = mab.GRADERS[task.meta["task_type"]](task, ep, FhirClient(fhir))
    return ok


def _service(mrn: str, system: str, code: str, **extra: Any) -> dict[str, Any]:
    return mab._service(mrn, system, code, **extra)


# ---------------------------------------------------------------------------------------------
# the loader over the shared data
# ---------------------------------------------------------------------------------------------
def test_loader_counts_300_tasks_30_per_type() -> None:
    data = default_external_dir() / "medagentbench"
    if not (data / mab.TASKS_FILE).is_file():
        pytest.skip("../shared/external/medagentbench is not here")
    items = mab.load_raw_tasks(data)
    assert len(items) == 300
    counts = {k: sum(1 for i in items if mab.task_type(i["id"]) == k) for k in mab.TASK_TYPES}
    assert counts == {k: 30 for k in mab.TASK_TYPES}
    tasks = [mab.make_task(i, "http://localhost:8080/fhir/") for i in items]
    assert {t.template_id for t in tasks} == set(mab.TASK_TYPES) and all(t.split == "test" for t in tasks)
    assert sum(1 for t in tasks if "sol" in t.meta) == 30     # only task1 publishes its solution
    assert len(mab.load_functions(data)) == 9


# ---------------------------------------------------------------------------------------------
# graders: each task type on a right and a wrong episode
# ---------------------------------------------------------------------------------------------
def test_task1_and_task2(fhir: str) -> None:
    t1 = _task(fhir, "task1", "S1000001", ["S1000001"])
    assert _grade(fhir, t1, ["S1000001"]) and _grade(fhir, t1, '["S1000001"]') and _grade(fhir, t1, "S1000001")
    assert not _grade(fhir, t1, ["S1000002"])
    assert not _grade(fhir, t1, ["S1000001"], posts=[("Observation", {})])      # a read-only task must not POST
    t2 = _task(fhir, "task2", "S1000002")
    assert _grade(fhir, t2, [42]) and not _grade(fhir, t2, [43])
    assert _grade(fhir, _task(fhir, "task2", "S1000003"), [33])                 # birthday on "today"
    assert not _grade(fhir, t2, [42], invalid_posts=1)                          # any POST attempt counts


def test_task3_blood_pressure(fhir: str) -> None:
    task = _task(fhir, "task3", "S1000001")
    good = {"resourceType": "Observation", "category": [{"coding": [dict(mab.VITAL_SIGNS_CATEGORY)]}],
            "code": {"text": "BP"}, "effectiveDateTime": NOW, "status": "final", "valueString": "118/77 mmHg",
            "subject": {"reference": "Patient/S1000001"}}
    assert _grade(fhir, task, [], posts=[("Observation", good)])
    assert not _grade(fhir, task, [], posts=[("Observation", {**good, "valueString": "120/80 mmHg"})])
    assert not _grade(fhir, task, [], posts=[("Observation", good), ("Observation", good)])
    assert not _grade(fhir, task, [], posts=[("Condition", good)])
    assert not _grade(fhir, task, [])


def test_task4_magnesium_within_24h(fhir: str) -> None:
    assert _grade(fhir, _task(fhir, "task4", "S1000001"), [1.3])
    assert not _grade(fhir, _task(fhir, "task4", "S1000001"), [2.5])     # the older value
    assert _grade(fhir, _task(fhir, "task4", "S1000002"), [-1])          # nothing within 24 h
    assert not _grade(fhir, _task(fhir, "task4", "S1000002"), [1.0])


def test_task5_magnesium_replacement(fhir: str) -> None:
    low = _task(fhir, "task5", "S1000001")       # 1.3 mg/dL: moderate, 2 g over 2 h
    order = mab._medication("S1000001", mab.MAGNESIUM_NDC, "IV", {"value": 2, "unit": "g"}, {"value": 2, "unit": "h"})
    assert _grade(fhir, low, [1.3], posts=[("MedicationRequest", order)])
    assert _grade(fhir, low, [], posts=[("MedicationRequest", order)])
    wrong_dose = mab._medication("S1000001", mab.MAGNESIUM_NDC, "IV", {"value": 1, "unit": "g"}, {"value": 1, "unit": "h"})
    assert not _grade(fhir, low, [1.3], posts=[("MedicationRequest", wrong_dose)])
    assert not _grade(fhir, low, [1.3])                                  # low but nothing ordered
    assert _grade(fhir, _task(fhir, "task5", "S1000002"), None)          # no value in 24 h, nothing ordered
    assert not _grade(fhir, _task(fhir, "task5", "S1000002"), [], posts=[("MedicationRequest", order)])
    normal = _task(fhir, "task5", "S1000003")                            # 2.1: not low
    assert _grade(fhir, normal, [2.1]) and not _grade(fhir, normal, [2.1], posts=[("MedicationRequest", order)])


def test_task6_and_task7_glucose(fhir: str) -> None:
    t6 = _task(fhir, "task6", "S1000001")        # mean of 100 and 121 within 24 h
    assert _grade(fhir, t6, [110.5]) and _grade(fhir, t6, [110.55]) and not _grade(fhir, t6, [173.67])
    assert _grade(fhir, t6, "110.5") and not _grade(fhir, t6, ["110.5"]) and not _grade(fhir, t6, [110.5, 1])
    assert _grade(fhir, _task(fhir, "task6", "S1000002"), [-1])
    t7 = _task(fhir, "task7", "S1000001")        # the latest of any time
    assert _grade(fhir, t7, [100.0]) and not _grade(fhir, t7, [121.0])
    assert _grade(fhir, _task(fhir, "task7", "S1000002"), [-1])


def test_task8_referral(fhir: str) -> None:
    task = _task(fhir, "task8", "S1000001")
    good = _service("S1000001", mab.SNOMED, mab.REFERRAL_SNOMED, note={"text": NOTE})
    assert _grade(fhir, task, [], posts=[("ServiceRequest", good)])
    assert not _grade(fhir, task, [], posts=[("ServiceRequest", {**good, "priority": "routine"})])
    assert not _grade(fhir, task, [], posts=[("ServiceRequest", {**good, "note": {"text": "knee"}})])


def test_task9_potassium(fhir: str) -> None:
    low = _task(fhir, "task9", "S1000001")       # 3.1: 40 mEq oral, then a serum potassium at 8 am tomorrow
    med = mab._medication("S1000001", mab.POTASSIUM_NDC, "oral", {"value": 40, "unit": "mEq"})
    lab = _service("S1000001", mab.LOINC, mab.POTASSIUM_LOINC, occurrenceDateTime="2023-11-14T08:00:00+00:00")
    assert _grade(fhir, low, [3.1], posts=[("MedicationRequest", med), ("ServiceRequest", lab)])
    assert not _grade(fhir, low, [3.1], posts=[("ServiceRequest", lab), ("MedicationRequest", med)])
    assert not _grade(fhir, low, [3.1], posts=[("MedicationRequest", {**med, "dosageInstruction": [
        {"route": "oral", "doseAndRate": [{"doseQuantity": {"value": 30, "unit": "mEq"}}]}]}), ("ServiceRequest", lab)])
    assert not _grade(fhir, low, [3.1], posts=[("MedicationRequest", med)])
    normal = _task(fhir, "task9", "S1000002")    # 4.0: nothing to order
    assert _grade(fhir, normal, [4.0]) and not _grade(fhir, normal, [4.0], posts=[("MedicationRequest", med)])
    assert not _grade(fhir, normal, [3.1])


def test_task10_hba1c(fhir: str) -> None:
    old = _task(fhir, "task10", "S1000001")      # 2021: order a new test
    order = _service("S1000001", mab.LOINC, mab.A1C_LOINC)
    assert _grade(fhir, old, [6.5, "2021-01-05T10:00:00+00:00"], posts=[("ServiceRequest", order)])
    assert not _grade(fhir, old, [6.5, "2021-01-05T10:00:00+00:00"])
    assert not _grade(fhir, old, [6.4, "2021-01-05T10:00:00+00:00"], posts=[("ServiceRequest", order)])
    recent = _task(fhir, "task10", "S1000002")
    assert _grade(fhir, recent, [7.1, "2023-06-01T10:00:00+00:00"]) and _grade(fhir, recent, [])
    assert not _grade(fhir, recent, [7.1, "2023-06-01T10:00:00+00:00"], posts=[("ServiceRequest", order)])
    none = _task(fhir, "task10", "S1000003")     # never measured: [-1] and an order
    order3 = _service("S1000003", mab.LOINC, mab.A1C_LOINC)
    assert _grade(fhir, none, [-1], posts=[("ServiceRequest", order3)]) and not _grade(fhir, none, [-1])


def test_every_task_type_has_a_grader() -> None:
    assert set(mab.GRADERS) == set(mab.TASK_TYPES)


# ---------------------------------------------------------------------------------------------
# episodes, the oracle through the runner, errors
# ---------------------------------------------------------------------------------------------
def _data_dir(tmp: Path) -> Path:
    data = tmp / "data"
    data.mkdir()
    items = [_item("task1", 1, "S1000001", ["S1000001"]), _item("task2", 1, "S1000002"), _item("task3", 1, "S1000001"),
             _item("task4", 1, "S1000001"), _item("task5", 1, "S1000001"), _item("task5", 2, "S1000002"),
             _item("task6", 1, "S1000001"), _item("task7", 1, "S1000003"), _item("task8", 1, "S1000002"),
             _item("task9", 1, "S1000001"), _item("task9", 2, "S1000002"), _item("task10", 1, "S1000001"),
             _item("task10", 2, "S1000002")]
    (data / mab.TASKS_FILE).write_text(json.dumps(items), encoding="utf-8")
    (data / mab.FUNCS_FILE).write_text(json.dumps([{"name": "GET {api_base}/Patient", "description": "Patient.Search",
                                                    "parameters": {"type": "object", "properties": {}}}]))
    return data


def test_episode_offers_the_fhir_tools_and_records_posts(fhir: str, tmp_path: Path) -> None:
    from ehrgym.env.episode import EhrEnv

    result = build_external(mab.NAME, tmp_path / "bench", _data_dir(tmp_path), fhir_url=fhir)
    with EhrEnv.from_benchmark(tmp_path / "bench", result.files["episode_db"]) as env:
        task = env.benchmark.task(f"{mab.NAME}-task5_1")
        obs = env.reset(task)
        assert obs.tool_names == ("fhir_get", "fhir_post", "answer") and "FINISH(" in obs.text
        assert f"GET {fhir.rstrip('/')}/Patient" in obs.text          # the functions, with api_base = the server
        r = env.step(FhirGetAction("Observation?patient=S1000001&code=MG"))
        assert "2023-11-13T08:00:00+00:00" in r.observation.text and not r.info.get("error")
        assert "not offered" in env.step("SQL: SELECT 1").observation.text
        assert "not on this episode's FHIR server" in env.step(FhirGetAction("http://example.org/Patient")).observation.text
        assert env.step("POST MedicationRequest\nnot json").info["accepted"] is False
        order = mab._medication("S1000001", mab.MAGNESIUM_NDC, "IV", {"value": 2, "unit": "g"}, {"value": 2, "unit": "h"})
        r = env.step("POST MedicationRequest\n" + json.dumps(order))
        assert r.info["accepted"] and r.info["resource"] == "MedicationRequest"
        r = env.step("FINISH([1.3])")
        assert r.terminated and r.reward == 1.0, r.info["verdict"]


def test_oracle_scores_100_through_the_runner(fhir: str, tmp_path: Path) -> None:
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.eval.store import EpisodeStore
    from ehrgym.external.metrics import run_transfer_row, task_type_rows

    result = build_external(mab.NAME, tmp_path / "bench", _data_dir(tmp_path), fhir_url=fhir, check=True)
    assert result.tasks == 13 and result.checks["patients_missing"] == []
    summary = run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-oracle", tmp_path / "run",
                             k=1, progress=False)
    records = list(EpisodeStore(tmp_path / "run").records())
    assert summary.ran == 13 and all(r.success_strict for r in records), [(r.task_id, r.error) for r in records]
    assert run_transfer_row(tmp_path / "run")["success_rate"] == 100.0
    rows = {r["task_type"]: r["success_rate"] for r in task_type_rows(tmp_path / "run")}
    assert rows["overall"] == 100.0 and set(rows) == {"overall", *mab.TASK_TYPES}
    from click.testing import CliRunner

    from ehrgym.external.cli import group

    scored = CliRunner().invoke(group, ["score", str(tmp_path / "run")])
    assert scored.exit_code == 0 and "| medagentbench-v2 | external-oracle | task10 | 100.0 |" in scored.output
    abstain = run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-abstain", tmp_path / "floor",
                             k=1, progress=False)
    assert abstain.success_clean == pytest.approx(1 / 13)   # task5_2: no magnesium in 24 h, nothing to order


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_clear_errors_without_or_with_an_unreachable_server(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    with pytest.raises(ExternalDataError, match="--fhir-url"):
        build_external(mab.NAME, tmp_path / "b", data)
    with pytest.raises(ExternalDataError, match="not an http"):
        build_external(mab.NAME, tmp_path / "b", data, fhir_url="localhost:8080")
    with pytest.raises(ExternalDataError, match="cannot reach the FHIR server"):
        build_external(mab.NAME, tmp_path / "b", data, fhir_url=f"http://127.0.0.1:{_free_port()}/fhir/")
    task = mab.make_task(_item("task4", 1, "S1000001"), f"http://127.0.0.1:{_free_port()}/fhir/")
    with pytest.raises(FhirError, match="cannot reach"):      # a grader never fails an episode silently
        mab.grade(task, AnswerAction([1.3]), None)


def test_cli_build_needs_a_fhir_url(fhir: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ehrgym.external.cli import group

    data = str(_data_dir(tmp_path))
    out = CliRunner().invoke(group, ["build", mab.NAME, "--data", data, "--out", str(tmp_path / "o")])
    assert out.exit_code != 0 and "--fhir-url" in str(out.exception or out.output)
    out = CliRunner().invoke(group, ["build", mab.NAME, "--data", data, "--out", str(tmp_path / "o"),
                                     "--fhir-url", fhir, "--check"])
    assert out.exit_code == 0, out.output
    assert "13 tasks" in out.output and "patients looked up on the server: 3, missing: 0" in out.output
    assert "ehrgym eval run --bench" in out.output


def test_text_protocol_reads_the_official_calls() -> None:
    from ehrgym.env.protocol import parse_action

    assert parse_action("GET Patient?identifier=S1") == FhirGetAction("Patient?identifier=S1")
    post = parse_action('POST Observation\n{"resourceType": "Observation"}')
    assert isinstance(post, FhirPostAction) and json.loads(post.payload) == {"resourceType": "Observation"}
    assert parse_action('FINISH(["S1", 2])') == AnswerAction(["S1", 2])
    assert parse_action('{"name": "fhir_get", "arguments": {"url": "Patient"}}') == FhirGetAction("Patient")
    assert mab.answer_list("[1, 2]") == [1, 2] and mab.answer_list(5) == [5] and mab.answer_list("x") == ["x"]


def test_chat_agent_runs_a_fhir_task_with_native_tools_and_text(fhir: str, tmp_path: Path) -> None:
    """An LLM agent (the real openai client against a scripted server): native fhir_get/fhir_post/answer
    calls on one task, the official text lines (GET, POST + JSON, FINISH) on another."""
    from fake_openai_server import FakeServer

    from ehrgym.eval.runner import run_evaluation
    from ehrgym.eval.store import EpisodeStore

    result = build_external(mab.NAME, tmp_path / "bench", _data_dir(tmp_path), fhir_url=fhir)
    order = mab._medication("S1000001", mab.MAGNESIUM_NDC, "IV", {"value": 2, "unit": "g"}, {"value": 2, "unit": "h"})
    referral = _service("S1000002", mab.SNOMED, mab.REFERRAL_SNOMED, note={"text": NOTE})
    replies = [  # task5_1 (native tools), then task8_1 (text protocol): the runner's task order
        {"tool_call": {"name": "fhir_get", "arguments": {"url": "Observation?patient=S1000001&code=MG"}}},
        {"tool_call": {"name": "fhir_post", "arguments": {"url": "MedicationRequest", "payload": order}}},
        {"tool_call": {"name": "answer", "arguments": {"value": [1.3]}}},
        {"text": "GET Patient?identifier=S1000002"},
        {"text": "POST ServiceRequest\n" + json.dumps(referral)},
        {"text": "FINISH([])"},
    ]
    srv = FakeServer(tmp_path, replies)
    try:
        tasks = [f"{mab.NAME}-task5_1", f"{mab.NAME}-task8_1"]
        first = run_evaluation(tmp_path / "bench", result.files["episode_db"], "chat", tmp_path / "run", k=1,
                               tasks=tasks[:1], progress=False,
                               agent_kwargs={"model": "m", "base_url": srv.url, "api_key": "k", "prompt": "fhir"})
        second = run_evaluation(tmp_path / "bench", result.files["episode_db"], "chat", tmp_path / "run2", k=1,
                                tasks=tasks[1:], progress=False,
                                agent_kwargs={"model": "m", "base_url": srv.url, "api_key": "k", "prompt": "fhir",
                                              "tools": False})
        sent = srv.requests()
    finally:
        srv.stop()
    records = list(EpisodeStore(tmp_path / "run").records()) + list(EpisodeStore(tmp_path / "run2").records())
    assert first.ran == second.ran == 1 and all(r.success_strict for r in records), [r.error for r in records]
    assert {t["function"]["name"] for t in sent[0]["tools"]} == {"fhir_get", "fhir_post", "answer"}
    assert "FHIR" in sent[0]["messages"][0]["content"] and "FINISH(" in sent[-1]["messages"][0]["content"]


def test_transfer_notebook_helpers_run_medagentbench(fhir: str, tmp_path: Path) -> None:
    """What notebook 06 calls: MedAgentBench (test split only) runs whole under split="dev", is skipped with
    the reason without a server, and its per-task-type success rates reach the report tables."""
    import pandas as pd

    from ehrgym.external.notebook import build_and_run
    from ehrgym.report.build import build_report

    ext = tmp_path / "ext"
    ext.mkdir()
    _data_dir(ext).rename(ext / "medagentbench")
    skipped = build_and_run([mab.NAME], ["external-oracle"], tmp_path / "none", data=ext, progress=False)
    assert "--fhir-url" in skipped.skipped[mab.NAME]
    result = build_and_run([mab.NAME], ["external-oracle"], tmp_path / "out", data=ext, split="dev",
                           resources={mab.NAME: {"fhir_url": fhir}}, progress=False)
    build_report(result.run_dirs, None, tmp_path / "out" / "tables", tmp_path / "out" / "figures",
                 tables=["transfer", "transfer_by_task_type"], figures=[], progress=False)   # the notebook's tables
    table = pd.read_csv(tmp_path / "out" / "tables" / "transfer.csv")
    assert table.loc[0, "benchmark"] == mab.NAME and table.loc[0, "success_rate_pct"] == pytest.approx(100.0)
    by_type = pd.read_csv(tmp_path / "out" / "tables" / "transfer_by_task_type.csv")
    assert list(by_type["task_type"]) == ["overall", *mab.TASK_TYPES] and (by_type["success_rate_pct"] == 100.0).all()
    assert by_type.loc[0, "tasks"] == 13


def test_oracle_scores_100_on_all_300_published_tasks(tmp_path: Path) -> None:
    """The published tasks (their own wording: quoted values, codes) against a synthetic server that holds every
    task's patient: the oracle's reference solutions pass every grader, and the abstaining floor passes only
    where doing nothing is right and the answer is not graded (task5 without a magnesium value in 24 h)."""
    from fake_fhir_server import synthetic_records

    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.eval.store import EpisodeStore

    data = default_external_dir() / "medagentbench"
    if not (data / mab.TASKS_FILE).is_file():
        pytest.skip("../shared/external/medagentbench is not here")
    mrns = sorted({str(i["eval_MRN"]) for i in mab.load_raw_tasks(data) if i.get("eval_MRN")})
    with FakeFhirServer(*synthetic_records(mrns)) as base:
        result = build_external(mab.NAME, tmp_path / "bench", data, fhir_url=base)
        assert result.tasks == 300
        run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-oracle", tmp_path / "run", k=1,
                       progress=False)
        records = list(EpisodeStore(tmp_path / "run").records())
        rates = mab.success_by_type(records)
        assert rates == {k: 100.0 for k in ("overall", *mab.TASK_TYPES)}, [(r.task_id, r.error) for r in records
                                                                            if not r.success_strict][:5]
        posts = sum(1 for r in records for s in r.trajectory["steps"] if s["action"]["tool"] == "fhir_post")
        assert posts > 60        # every BP and referral task, and the orders the synthetic values call for
        tasks = {t.task_id: t for t in load_benchmark(tmp_path / "bench").tasks}
        client = FhirClient(base)
        nothing_to_do = {tid for tid, t in tasks.items() if t.meta["task_type"] == "task5"
                         and mab.last_24h(client, t.meta["eval_MRN"], "MG") is None}
        run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-abstain", tmp_path / "floor", k=1,
                       progress=False)
        passed = {r.task_id for r in EpisodeStore(tmp_path / "floor").records() if r.success_strict}
        assert passed == nothing_to_do and nothing_to_do


def test_a_fhir_run_needs_no_python_sandbox(fhir: str, tmp_path: Path) -> None:
    """The episode offers no Python tool, so the runner turns it off (no sandbox probe, no refusal)."""
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.eval.store import read_run_config

    result = build_external(mab.NAME, tmp_path / "bench", _data_dir(tmp_path), fhir_url=fhir)
    run_evaluation(tmp_path / "bench", result.files["episode_db"], "external-oracle", tmp_path / "run", k=1,
                   tasks=[f"{mab.NAME}-task1_1"], env_config={"python": True}, progress=False)
    config = read_run_config(tmp_path / "run")
    assert config["env_config"]["python"] is False and config["python_sandbox"] is None
