"""The results store: append-only JSONL, torn-line repair, locking, resume keys, run.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ehrgym.eval.records import EpisodeRecord
from ehrgym.eval.store import EpisodeStore, RunStoreError, iter_episode_dicts, read_run_config, write_run_config


def record(task_id: str, trial: int, termination: str = "answered", ok: bool | None = True) -> EpisodeRecord:
    return EpisodeRecord(run_id="r", agent="credulous", model=None, task_id=task_id, pair_id="p" + task_id,
                         trial=trial, variant="clean", intent="labs", level="patient", template_id="tpl",
                         noise_level=None, noise_subtype=None, split="test", expected_kind="answer",
                         expected_reason=None, termination=termination, success_strict=ok, success_lenient=ok,
                         failure=None if ok else ("wrong_value" if ok is False else None), answered_value=1.5)


def test_append_and_read_back(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path) as store:
        assert store.append([record("a", 0), record("a", 1)]) == 2
        assert store.append([]) == 0
        store.append([record("b", 0).to_dict()])
    store = EpisodeStore(tmp_path)
    assert sorted(store.finished()) == [("a", 0), ("a", 1), ("b", 0)]
    assert [r.key for r in store.records()] == [("a", 0), ("a", 1), ("b", 0)]
    assert store.records()[0] == record("a", 0)


def test_torn_last_line_is_ignored_then_cut_on_open(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path) as store:
        store.append([record("a", 0), record("a", 1)])
    path = tmp_path / "episodes.jsonl"
    intact = path.read_bytes()
    torn = json.dumps(record("a", 2).to_dict())[:57]
    path.write_bytes(intact + torn.encode())
    assert [d["trial"] for d in iter_episode_dicts(path)] == [0, 1]  # readers ignore the torn line
    assert sorted(EpisodeStore(tmp_path).finished()) == [("a", 0), ("a", 1)]
    store = EpisodeStore(tmp_path)
    assert store.open() == len(torn)  # cut off when reopened for appending
    store.append([record("a", 2)])
    store.close()
    assert path.read_bytes().startswith(intact)  # earlier records never rewritten
    assert [d["trial"] for d in iter_episode_dicts(path)] == [0, 1, 2]


def test_torn_line_without_any_complete_record(tmp_path: Path) -> None:
    (tmp_path / "episodes.jsonl").write_bytes(b'{"run_id": "r", "task')
    store = EpisodeStore(tmp_path)
    assert store.open() > 0
    store.close()
    assert (tmp_path / "episodes.jsonl").read_bytes() == b""


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "episodes.jsonl").write_text(json.dumps(record("a", 0).to_dict()) + "\n{broken\n"
                                             + json.dumps(record("a", 1).to_dict()) + "\n")
    with pytest.raises(Exception, match="corrupt episode record"):
        EpisodeStore(tmp_path).records()


def test_second_writer_is_refused(tmp_path: Path) -> None:
    first = EpisodeStore(tmp_path)
    first.open()
    try:
        with pytest.raises(RunStoreError, match="another runner"):
            EpisodeStore(tmp_path).open()
    finally:
        first.close()
    second = EpisodeStore(tmp_path)
    second.open()
    second.close()


def test_retry_errors_and_last_record_wins(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path) as store:
        store.append([record("a", 0, "infrastructure_error", None), record("b", 0)])
    store = EpisodeStore(tmp_path)
    assert ("a", 0) in store.finished()
    assert ("a", 0) not in store.finished(retry_errors=True)
    with store:
        store.append([record("a", 0)])
    recs = {r.key: r for r in EpisodeStore(tmp_path).records()}
    assert recs[("a", 0)].termination == "answered" and len(recs) == 2


def test_run_config_roundtrip(tmp_path: Path) -> None:
    assert read_run_config(tmp_path) is None
    write_run_config(tmp_path, {"agent": "oracle", "k": 4})
    assert read_run_config(tmp_path) == {"agent": "oracle", "k": 4}
    assert not (tmp_path / "run.json.tmp").exists()
    (tmp_path / "run.json").write_text("{nope")
    with pytest.raises(RunStoreError, match="not valid JSON"):
        read_run_config(tmp_path)


def test_malformed_episode_record_is_a_results_error_naming_the_missing_fields():
    from ehrgym.errors import ResultsError
    from ehrgym.eval.records import EpisodeRecord

    with pytest.raises(ResultsError, match="missing: .*task_id"):
        EpisodeRecord.from_dict({"trial": 0})


def test_limit_pairs_spreads_over_intents_and_subtypes_in_a_fixed_order():
    from types import SimpleNamespace

    from ehrgym.eval.runner import select_tasks

    # template-id order puts every "diagnoses" pair first: a small limit must still reach every intent and subtype
    tasks = []
    for intent in ("diagnoses", "labs", "vitals"):
        for subtype in ("missing_value", "nonexistent_entity"):
            for i in range(50):
                pair = f"{intent}.t:{subtype}:{i}"
                tasks += [SimpleNamespace(task_id=f"{pair}:clean", pair_id=pair, intent=intent, noise=None),
                          SimpleNamespace(task_id=f"{pair}:noise", pair_id=pair, intent=intent,
                                          noise=SimpleNamespace(subtype=subtype))]
    kept = select_tasks(tasks, limit_pairs=6)
    pairs = list(dict.fromkeys(t.pair_id for t in kept))
    assert len(pairs) == 6 and len(kept) == 12
    assert {(p.split(".")[0], p.split(":")[1]) for p in pairs} == {(i, s) for i in ("diagnoses", "labs", "vitals")
                                                                   for s in ("missing_value", "nonexistent_entity")}
    # the order of the input does not matter, and a larger limit extends a smaller one
    assert {t.task_id for t in select_tasks(tasks[::-1], limit_pairs=6)} == {t.task_id for t in kept}
    assert {t.task_id for t in kept} < {t.task_id for t in select_tasks(tasks, limit_pairs=20)}
    # within a group the order is hashed, not the pair ids' own (which would take pairs 0, 1, 2, ... of a template)
    eight = {p.split(":")[2] for p in dict.fromkeys(t.pair_id for t in select_tasks(tasks, limit_pairs=48))}
    assert eight != {str(i) for i in range(8)}
