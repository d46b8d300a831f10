"""Harbor export: deterministic task directories, valid for the kit and for Harbor, no leaks, and the
verifier scripts run locally against the materialised database (oracle 1, wrong answers 0)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ehrgym.harbor.export import (EXPORT_FILE, agent_visible_files, check_task_dir, export_harbor,
                                  iter_task_dirs, oracle_answer)
from ehrgym.harbor.materialise import build_database, database_objects, table_file

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Path:
    return small_bench


@pytest.fixture(scope="module")
def chosen(bench: Path) -> dict[str, Any]:
    """Test-split tasks of every kind: clean answer (served its background), noisy answer with the noise's
    overlay, noisy abstention with one, noisy abstention from the question alone, a set answer when there is
    one. Every task is served an overlay (the pair's background); the kind reads the noise's own."""
    from ehrgym.bench.dataset import load_benchmark

    tasks = [t for t in load_benchmark(bench).tasks if t.split == "test"]
    picks: dict[str, Any] = {}
    for t in tasks:
        assert t.overlay.tables, t.task_id
        kind = (t.variant, t.expected.kind, bool(t.noise is not None and t.noise.overlay.tables))
        picks.setdefault(kind, t)
        if t.expected.answer.type == "set" and t.expected.kind == "answer":
            picks.setdefault(("set",), t)
    assert ("clean", "answer", False) in picks and ("noise", "answer", True) in picks
    assert ("noise", "abstain", True) in picks
    return {t.public_id: t for t in picks.values()}


@pytest.fixture(scope="module")
def exported(bench: Path, synth_db: Path, chosen: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("harbor") / "dataset"
    export_harbor(bench, synth_db, out, split="test", task_ids=list(chosen), progress=False)
    return out


def tree(root: Path) -> dict[str, tuple[str, int]]:
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_export_is_deterministic(bench: Path, synth_db: Path, chosen: dict[str, Any], exported: Path,
                                 tmp_path: Path) -> None:
    again = tmp_path / "again"
    export_harbor(bench, synth_db, again, split="test", task_ids=list(chosen), progress=False)
    first, second = tree(exported), tree(again)
    assert first == second
    assert sorted(json.loads((exported / EXPORT_FILE).read_text())["tasks"]) == sorted(chosen)
    # re-exporting into the same folder replaces the earlier export; a foreign folder is refused
    export_harbor(bench, synth_db, again, split="test", task_ids=list(chosen), progress=False)
    assert tree(again) == first
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="not empty"):
        export_harbor(bench, synth_db, foreign, split="test", task_ids=list(chosen), progress=False)


def test_every_task_dir_passes_the_kit_checks(exported: Path, chosen: dict[str, Any]) -> None:
    dirs = list(iter_task_dirs(exported))
    assert {d.name for d in dirs} == set(chosen)
    for d in dirs:
        assert check_task_dir(d, chosen[d.name]) == []
    # the checks can fail: a planted internal id and a missing script are reported
    d = dirs[0]
    task = chosen[d.name]
    text = (d / "instruction.md").read_text()
    (d / "instruction.md").write_text(text + f"\n{task.task_id}\n")
    try:
        assert any("names" in p for p in check_task_dir(d, task))
    finally:
        (d / "instruction.md").write_text(text)
    assert check_task_dir(d, task) == []


def test_no_agent_visible_file_reveals_the_task(exported: Path, chosen: dict[str, Any], synth_db: Path,
                                                tmp_path: Path) -> None:
    from ehrgym.db.overlay import Overlay
    from ehrgym.db.schema import table_spec
    from ehrgym.harbor.materialise import materialise_task_tables

    clean = tmp_path / "clean_tables"
    materialise_task_tables(synth_db, Overlay(), clean)
    clean_hashes = {p.name: hashlib.sha256(p.read_bytes()).digest() for p in clean.iterdir()}
    visible_text: dict[str, str] = {}
    for d in iter_task_dirs(exported):
        task = chosen[d.name]
        tables = d / "environment" / "tables"
        # only the tables the overlay touches differ from the clean base: the rest is the base, byte for byte
        changed = {p.name for p in tables.iterdir() if hashlib.sha256(p.read_bytes()).digest() != clean_hashes[p.name]}
        touched = {table_file(table_spec(t).schema, table_spec(t).name) for t in task.overlay.tables}
        assert changed <= touched
        if task.overlay.tables:
            assert changed, "an overlay (background or noise) left no trace in the data"
        # the built database holds the exposed tables only: no views, no bookkeeping, no overlay
        db = tmp_path / f"{d.name}.duckdb"
        build_database(tables, db)
        objects = database_objects(db)
        assert objects["schemas"] == ["mimiciv_hosp", "mimiciv_icu"] and objects["views"] == []
        assert all(t.split(".")[0] in ("mimiciv_hosp", "mimiciv_icu") for t in objects["tables"])
        # instruction.md and task.toml differ between tasks only by the public id and the question
        for path in agent_visible_files(d):
            if path.suffix in ("", ".md", ".toml") or path.name == "Dockerfile":
                text = path.read_text().replace(d.name, "ID").replace(task.question, "Q")
                visible_text.setdefault(path.relative_to(d).as_posix(), text)
                assert text == visible_text[path.relative_to(d).as_posix()], path
    # the kit archive is the same for every task
    assert len({(d / "environment" / "ehrgym-kit.tar.gz").read_bytes() for d in iter_task_dirs(exported)}) == 1


def test_materialised_tables_equal_the_episode_view(exported: Path, chosen: dict[str, Any], synth_db: Path,
                                                   tmp_path: Path) -> None:
    """What the agent reads in the container is what an episode shows: same rows, same order."""
    from ehrgym.db.connect import attach_base
    from ehrgym.db.overlay import OverlaySession
    from ehrgym.db.schema import table_spec

    task = next(t for t in chosen.values() if t.variant == "noise" and t.overlay.tables)
    db = tmp_path / "task.duckdb"
    build_database(exported / task.public_id / "environment" / "tables", db)
    con = duckdb.connect(":memory:")
    try:
        attach_base(con, synth_db, "base")
        OverlaySession(con, "base").apply(task.overlay)
        con.execute(f"ATTACH '{db.as_posix()}' AS t (READ_ONLY)")
        for name in task.overlay.tables:
            spec = table_spec(name)
            view = con.execute(f"SELECT * FROM memory.{spec.qualified}").fetchall()
            stored = con.execute(f"SELECT * FROM t.{spec.qualified}").fetchall()
            assert stored == view and len(view) > 0
            assert con.execute(f"DESCRIBE t.{spec.qualified}").fetchall() == \
                con.execute(f"DESCRIBE base.{spec.qualified}").fetchall()
    finally:
        con.close()


def _run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script)], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120, check=False)


def _score(task_dir: Path, answer: Path, reward_dir: Path) -> tuple[int, dict[str, Any]]:
    proc = _run(task_dir / "tests" / "test.sh", {"EHRGYM_ANSWER": str(answer), "EHRGYM_REWARD_DIR": str(reward_dir),
                                                 "EHRGYM_PYTHON": sys.executable, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads((reward_dir / "verdict.json").read_text())
    return int((reward_dir / "reward.txt").read_text().strip()), verdict


def test_oracle_scores_one_and_wrong_answers_zero(exported: Path, chosen: dict[str, Any], tmp_path: Path) -> None:
    for d in iter_task_dirs(exported):
        task = chosen[d.name]
        answer = tmp_path / d.name / "answer.txt"
        proc = _run(d / "solution" / "solve.sh", {"EHRGYM_ANSWER": str(answer)})
        assert proc.returncode == 0, proc.stderr
        reward, verdict = _score(d, answer, tmp_path / d.name / "oracle")
        assert reward == 1 and verdict["success_strict"], (d.name, verdict)
        # wrong: an abstention where an answer is due, an answer where an abstention is due
        if task.expected.is_abstain:
            answer.write_text("ANSWER: 42\n")
            want = "missed_abstention"
        else:
            answer.write_text("ABSTAIN: insufficient_evidence: no rows\n")
            want = "false_abstention"
        reward, verdict = _score(d, answer, tmp_path / d.name / "wrong")
        assert reward == 0 and verdict["failure"] == want
        if not task.expected.is_abstain and task.expected.answer.type in ("number", "integer"):
            answer.write_text(f"ANSWER: {float(task.expected.value) * 3 + 1000}\n")
            reward, verdict = _score(d, answer, tmp_path / d.name / "wrong_value")
            assert reward == 0 and verdict["failure"] == "wrong_value"
        # no answer file, or a file without an answer: 0 and a reason, never a crash
        answer.unlink()
        reward, verdict = _score(d, answer, tmp_path / d.name / "none")
        assert reward == 0 and "no answer file" in verdict["detail"]
        answer.write_text("I think the records are odd.\n")
        reward, verdict = _score(d, answer, tmp_path / d.name / "garbled")
        assert reward == 0 and verdict["failure"] == "no_answer"


def test_oracle_answer_round_trips_the_protocol(chosen: dict[str, Any]) -> None:
    from ehrgym.env.protocol import parse_action
    from ehrgym.env.verifier import verify

    for task in chosen.values():
        action = parse_action(json.dumps(oracle_answer(task)))
        assert verify(task, action).reward == 1.0


def test_gated_sql_command_on_the_task_database(exported: Path, chosen: dict[str, Any], tmp_path: Path) -> None:
    d = next(iter_task_dirs(exported))
    db = tmp_path / "task.duckdb"
    build_database(d / "environment" / "tables", db)
    env = {**os.environ, "PYTHONPATH": str(REPO), "EHRGYM_DB": str(db)}
    cmd = [sys.executable, "-m", "ehrgym.harbor.container", "sql"]
    ok = subprocess.run(cmd + ["SELECT count(*) AS n FROM patients"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0 and "(1 row)" in ok.stdout, ok.stderr
    refused = subprocess.run(cmd, input="DROP TABLE mimiciv_hosp.patients", env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 1 and "Query refused" in refused.stdout


def _harbor_python() -> str | None:
    """A Python with Harbor installed: this one, or EHRGYM_HARBOR_PYTHON (Harbor needs Python >= 3.12)."""
    try:
        import harbor.models.task.task  # noqa: F401

        return sys.executable
    except Exception:  # noqa: BLE001 - absent, or installed on a Python it does not support
        other = os.environ.get("EHRGYM_HARBOR_PYTHON")
        return other if other and Path(other).exists() else None


HARBOR_CHECK = """
import sys, warnings
from pathlib import Path
from harbor.models.task.task import Task
warnings.simplefilter("error", DeprecationWarning)
for d in sys.argv[1:]:
    assert Task.is_valid_dir(Path(d)), d
    task = Task(Path(d))
    cfg = task.config
    assert cfg.environment.network_mode.value == "no-network", cfg.environment.network_mode
    assert cfg.task.name == "ehrgym/" + Path(d).name
    assert cfg.environment.cpus == 1 and cfg.environment.memory_mb == 2048
    assert task.instruction.strip()
print("harbor ok", len(sys.argv) - 1)
"""


def test_task_dirs_parse_with_harbors_own_models(exported: Path) -> None:
    python = _harbor_python()
    if python is None:
        pytest.skip("harbor is not importable (pip install 'ehrgym[harbor]' on Python >= 3.12, or set "
                    "EHRGYM_HARBOR_PYTHON to a Python that has it)")
    dirs = [str(d) for d in iter_task_dirs(exported)]
    proc = subprocess.run([python, "-c", HARBOR_CHECK, *dirs], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"harbor ok {len(dirs)}" in proc.stdout
