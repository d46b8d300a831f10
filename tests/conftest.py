"""Shared fixtures: the MIMIC-IV demo location and small synthetic databases."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# EHRGYM_DEMO_DIR points elsewhere (e.g. from a git worktree whose parent holds no shared/)
DEMO_DIR = Path(os.environ.get("EHRGYM_DEMO_DIR", REPO.parent / "shared" / "mimic-iv-demo-2.2"))
# external benchmarks' question sets (EHRSQL 2024 …): $EHRGYM_EXTERNAL_DIR, else ../shared/external
EXTERNAL_DIR = Path(os.environ.get("EHRGYM_EXTERNAL_DIR") or REPO.parent / "shared" / "external")


# The suite is hermetic, whatever the shell that starts it: no model endpoint a run would call (tests that
# exercise the chat agent set their own local server), no hub download or telemetry from the libraries the
# training, Ray and notebook tests start. Set here, at import, so worker processes, kernels and
# subprocesses inherit it.
for _name in ("EHRGYM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
    os.environ.pop(_name, None)
os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                   "RAY_USAGE_STATS_ENABLED": "0", "DO_NOT_TRACK": "1"})


# The slow end-to-end cases, in one place: `make test` deselects them (-m "not slow") so the
# default stays quick; `make test-slow` runs them and CI (.ci/run) runs both. A module maps to None
# (all of it, usually because its fixture builds a large benchmark) or to the names of its slow tests.
SLOW_TESTS: dict[str, tuple[str, ...] | None] = {
    "test_bench_questions.py": None,     # text probes on a build large enough to train them
    "test_bench_artifacts.py": None,     # artifact trees per subtype on a large build
    "test_bench_demo.py": None,
    "test_env_replay.py": None,          # every task of a build replayed through the environment
    "test_eval_ray.py": None,            # starts a local Ray instance
    "test_harbor.py": None,              # exports, materialises and scores Harbor task directories
    "test_browser.py": None,             # headless Chromium driving JupyterLab
    "test_notebooks.py": ("test_executed_explorer_keeps_a_static_fallback",
                          "test_pipeline_regenerates_tables_and_figures", "test_pipeline_is_cheap_to_redo",
                          "test_nbval_reexecutes_every_notebook_deterministically",
                          "test_readme_snippet_and_commands_run_after_a_reproduce"),
    "test_external.py": ("test_gold_sql_reproduces_gold_answers_all_splits",
                         "test_report_writes_the_transfer_table_for_gym_and_external_runs",
                         "test_oracle_scores_100_on_valid_through_the_runner",
                         "test_transfer_notebook_runs_the_scripted_baselines"),
    "test_plugins.py": ("test_eval_run_runs_a_plugin_agent",),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = SLOW_TESTS.get(item.path.name, ())
        if names is None or item.originalname in names:  # type: ignore[attr-defined]
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def external_dir() -> Path:
    if not (EXTERNAL_DIR / "ehrsql-2024" / "database").is_dir():
        pytest.skip(f"external benchmark data not found at {EXTERNAL_DIR} (set EHRGYM_EXTERNAL_DIR)")
    return EXTERNAL_DIR


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    if not (DEMO_DIR / "hosp").is_dir():
        pytest.skip(f"MIMIC-IV demo not found at {DEMO_DIR}")
    return DEMO_DIR


@pytest.fixture(scope="session")
def synth_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic hospital (200 patients, seed 7), built once per test session."""
    from ehrgym.db.synth import build_synthetic_database

    path = tmp_path_factory.mktemp("synth") / "synth200.duckdb"
    build_synthetic_database(path, patients=200, seed=7, progress=False)
    return path


@pytest.fixture(scope="session")
def small_bench(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The "small" benchmark (seed 0) on the synthetic hospital, built once per test run: the first
    pytest-xdist worker to ask builds it under a file lock in the run's shared temporary directory,
    the others read it. Tests only read it; those that need a benchmark of their own build one."""
    from ehrgym.bench.build import build_benchmark

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent                     # the directory every worker's base temp lies in
    out, done = root / "shared-bench-small-s0", root / "shared-bench-small-s0.done"
    with open(root / "shared-bench-small-s0.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)   # a build another worker began and did not finish
            build_benchmark(synth_db, out, config="small", seed=0, progress=False)
            done.touch()
    return out


@pytest.fixture(scope="session")
def small_build(small_bench: Path):
    """The shared "small" benchmark as ``build_benchmark`` returns it (tasks, manifest, report, card), read back
    from its files."""
    import json

    from ehrgym.bench.build import BuildResult
    from ehrgym.bench.task import load_tasks_jsonl

    def read(name: str) -> dict:
        return json.loads((small_bench / name).read_text())

    return BuildResult(small_bench, load_tasks_jsonl(small_bench / "tasks.jsonl"), read("manifest.json"),
                       read("build_report.json"), read("card.json"))


@pytest.fixture(scope="session")
def demo_db(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MIMIC-IV demo loaded by the kit's loader, once per test session."""
    from ehrgym.db.mimic import load_mimic

    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    load_mimic(demo_dir, path, progress=False)
    return path


# The independent gold checks (tests/gold_checks.py): a check module lists its templates as ``NEW``.
@pytest.fixture(scope="module")
def gold_builder(request: pytest.FixtureRequest, synth_db: Path):
    """The module's templates, their candidates drawn on the synthetic hospital."""
    from tests.gold_checks import SYNTH_CANDIDATES, drawn_builder

    b = drawn_builder(synth_db, request.module.NEW, SYNTH_CANDIDATES)
    yield b
    b.close()


@pytest.fixture(scope="module")
def gold_frames(synth_db: Path):
    """The synthetic hospital's tables as pandas frames."""
    from tests.gold_checks import Frames

    frames = Frames(synth_db)
    yield frames
    frames.con.close()


@pytest.fixture(scope="module")
def gold_demo(request: pytest.FixtureRequest, demo_db: Path):
    """The module's templates drawn on the MIMIC-IV demo, and the demo's tables as pandas frames."""
    from tests.gold_checks import DEMO_CANDIDATES, Frames, drawn_builder

    b = drawn_builder(demo_db, request.module.NEW, DEMO_CANDIDATES)
    frames = Frames(demo_db)
    yield b, frames
    frames.con.close()
    b.close()
