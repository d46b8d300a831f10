"""ehrgym.pipeline: sources, paths, reuse of databases and benchmarks, kernel check, CLI errors.

The end-to-end papermill run of the notebooks is in tests/test_notebooks.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ehrgym import pipeline
from ehrgym.bench.build import builder_code_hash
from ehrgym.bench.configs import BuildConfig
from ehrgym.pipeline import PipelineConfig, PipelineError

sys.path.insert(0, str(Path(__file__).parent))
from mimic_fakes import make_source  # noqa: E402

TINY = BuildConfig("tiny", 12, oversample=4.0, min_candidates=8)


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
def test_paths_and_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EHRGYM_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    cfg = PipelineConfig(patients=300, seed=5, config="small", data=str(tmp_path / "d"), k=3, workers=1)
    assert cfg.db_path == (tmp_path / "d" / "synthetic-p300-s5.duckdb").resolve()
    assert cfg.bench_dir == (tmp_path / "d" / "bench" / "synthetic-p300-s5-small-s5").resolve()
    assert cfg.runs_dir == (tmp_path / "d" / "runs" / "synthetic-p300-s5-small-s5").resolve()
    assert cfg.agent_list == ["oracle", "credulous", "literal", "skeptic"]
    params = cfg.notebook_parameters()
    assert list(params) == list(pipeline.ALL_NOTEBOOKS)
    for teaching in pipeline.TEACHING_NOTEBOOKS:        # the explorer and the exercises follow the same paths
        assert params[teaching]["db_path"] == str(cfg.db_path) and params[teaching]["bench_dir"] == str(cfg.bench_dir)
    assert params["00_build_database"]["db_path"] == str(cfg.db_path)
    assert params["01_build_benchmark"]["bench_dir"] == str(cfg.bench_dir)
    assert params["02_run_evaluation"]["k"] == 3 and params["02_run_evaluation"]["agents"] == cfg.agent_list
    assert params["03_robustness_analysis"]["run_dirs"] == [str(cfg.runs_dir / a) for a in cfg.agent_list]
    json.dumps(params)                                    # papermill parameters are JSON values
    # the notebooks derive the same defaults from the same helpers
    assert pipeline.benchmark_path(cfg.db_path, "small", 5) == cfg.bench_dir
    assert pipeline.runs_path(cfg.bench_dir) == cfg.runs_dir


def test_other_sources_never_overwrite_the_committed_synthetic_results(tmp_path: Path) -> None:
    synthetic = PipelineConfig(data=str(tmp_path))
    demo = PipelineConfig(source="demo", data=str(tmp_path))
    assert Path(synthetic.tables) == pipeline.REPO_ROOT / "tables"
    assert Path(synthetic.figures) == pipeline.REPO_ROOT / "figures"
    assert Path(demo.tables) == pipeline.REPO_ROOT / "tables" / "demo"
    assert Path(demo.figures) == pipeline.REPO_ROOT / "figures" / "demo"
    assert PipelineConfig(source="demo", tables=str(tmp_path / "t")).tables == str(tmp_path / "t")


def test_chat_joins_when_an_endpoint_is_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("EHRGYM_MODEL", "qwen2.5:7b")
    cfg = PipelineConfig(data=str(tmp_path))
    assert cfg.agent_list == ["oracle", "credulous", "literal", "skeptic", "chat"]
    run_dirs = cfg.notebook_parameters()["03_robustness_analysis"]["run_dirs"]
    assert run_dirs[-1].endswith("chat-qwen2.5_7b")
    cfg = PipelineConfig(data=str(tmp_path), model="m", base_url="http://127.0.0.1:9/v1", agents=("credulous",))
    assert cfg.agent_list == ["credulous", "chat"]
    assert cfg.notebook_parameters()["02_run_evaluation"]["base_url"] == "http://127.0.0.1:9/v1"


def test_invalid_configurations() -> None:
    with pytest.raises(PipelineError, match="unknown data source 'bogus'"):
        PipelineConfig(source="bogus")
    with pytest.raises(PipelineError, match="--patients"):
        PipelineConfig(patients=0)
    with pytest.raises(PipelineError, match="--k"):
        PipelineConfig(k=0)
    with pytest.raises(PipelineError, match="registered twice"):
        pipeline.register_source(pipeline.SyntheticSource("synthetic", "again"))


# ---------------------------------------------------------------------------------------------
# sources
# ---------------------------------------------------------------------------------------------
def test_mimic_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="needs MIMIC_DIR"):
        pipeline.ensure_database("mimic", tmp_path / "m.duckdb", mimic_dir=None)
    with pytest.raises(PipelineError, match="is not a directory"):
        pipeline.ensure_database("mimic", tmp_path / "m.duckdb", mimic_dir=tmp_path / "absent")
    demo = make_source(tmp_path / "demo", demo=True)
    with pytest.raises(PipelineError, match="SOURCE=demo"):
        pipeline.ensure_database("mimic", tmp_path / "m.duckdb", mimic_dir=demo)
    assert not (tmp_path / "m.duckdb").exists()


@pytest.mark.filterwarnings("ignore")
def test_demo_source_builds_then_reuses(tmp_path: Path) -> None:
    demo = make_source(tmp_path / "demo-a", rows={"patients": 3, "admissions": 4}, demo=True)
    db = tmp_path / "demo.duckdb"
    first = pipeline.ensure_database("demo", db, mimic_dir=demo, progress=False)
    assert first.built and first.info["patients"] == 3
    again = pipeline.ensure_database("demo", db, mimic_dir=demo, progress=False)
    assert not again.built and again.note == "reused"
    other = make_source(tmp_path / "demo-b", rows={"patients": 2}, demo=True)
    moved = pipeline.ensure_database("demo", db, mimic_dir=other, progress=False)
    assert moved.built and "loaded from" in moved.note and moved.info["patients"] == 2


def test_synthetic_database_reuse_and_rebuild(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    first = pipeline.ensure_database("synthetic", db, patients=12, seed=1, progress=False)
    assert first.built and first.info["patients"] == 12
    mtime = db.stat().st_mtime_ns
    again = pipeline.ensure_database("synthetic", db, patients=12, seed=1, progress=False)
    assert not again.built and db.stat().st_mtime_ns == mtime
    assert again.info["content_hash"] == first.info["content_hash"]
    reseeded = pipeline.ensure_database("synthetic", db, patients=12, seed=2, progress=False)
    assert reseeded.built and "seed" in reseeded.note
    assert reseeded.info["content_hash"] != first.info["content_hash"]
    forced = pipeline.ensure_database("synthetic", db, patients=12, seed=2, force=True, progress=False)
    assert forced.built and forced.info["content_hash"] == reseeded.info["content_hash"]


def test_foreign_file_is_rebuilt(tmp_path: Path) -> None:
    db = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    result = pipeline.ensure_database("synthetic", db, patients=5, seed=0, progress=False)
    assert result.built and "not a kit database" in result.note


# ---------------------------------------------------------------------------------------------
# benchmark reuse
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_bench(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pipeline.StageResult]:
    bench = tmp_path_factory.mktemp("pipeline") / "bench"
    return bench, pipeline.ensure_benchmark(synth_db, bench, config=TINY, seed=0, progress=False)


def test_benchmark_reuse_and_rebuild(synth_db: Path, tiny_bench: tuple[Path, pipeline.StageResult],
                                     tmp_path: Path) -> None:
    import shutil

    built_dir, first = tiny_bench
    assert first.built and first.info["task_counts"]["pairs"] > 0
    bench = tmp_path / "bench"
    shutil.copytree(built_dir, bench)
    assert pipeline.benchmark_mismatch(bench, synth_db, TINY, 0) is None
    digest = (bench / "tasks.jsonl").read_bytes()
    again = pipeline.ensure_benchmark(synth_db, bench, config=TINY, seed=0, progress=False)
    assert not again.built and again.info["content_hash"] == first.info["content_hash"]
    assert "seed" in pipeline.benchmark_mismatch(bench, synth_db, TINY, 1)
    assert "config" in pipeline.benchmark_mismatch(bench, synth_db, "small", 0)
    manifest = json.loads((bench / "manifest.json").read_text())
    assert manifest["builder_code_hash"] == builder_code_hash()
    stale = {**manifest, "builder_code_hash": "0" * 64}  # built before templates or noise changed
    (bench / "manifest.json").write_text(json.dumps(stale))
    assert "builder code" in pipeline.benchmark_mismatch(bench, synth_db, TINY, 0)
    (bench / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "builder_code_hash"}))
    assert "builder code" in pipeline.benchmark_mismatch(bench, synth_db, TINY, 0)
    (bench / "manifest.json").unlink()                  # an interrupted build is rebuilt
    assert pipeline.benchmark_mismatch(bench, synth_db, TINY, 0) == "no readable manifest.json"
    rebuilt = pipeline.ensure_benchmark(synth_db, bench, config=TINY, seed=0, progress=False)
    assert rebuilt.built and (bench / "tasks.jsonl").read_bytes() == digest


def test_benchmark_of_another_database_is_rebuilt(tiny_bench: tuple[Path, pipeline.StageResult],
                                                  tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    pipeline.ensure_database("synthetic", other, patients=5, seed=9, progress=False)
    assert "db_content_hash" in pipeline.benchmark_mismatch(tiny_bench[0], other, TINY, 0)


# ---------------------------------------------------------------------------------------------
# kernel, notebooks, CLI
# ---------------------------------------------------------------------------------------------
def test_kernel_runs_this_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Path(pipeline.check_kernel()).resolve() == Path(sys.executable).resolve()

    class Spec:
        argv = ["/opt/elsewhere/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]

    from jupyter_client import kernelspec

    monkeypatch.setattr(kernelspec.KernelSpecManager, "get_kernel_spec", lambda self, name: Spec())
    with pytest.raises(PipelineError, match="ipykernel install --sys-prefix"):
        pipeline.check_kernel()


def test_missing_notebook_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="does not exist"):
        pipeline.execute_notebook("99_nothing", {}, tmp_path, notebooks=tmp_path)


def test_cli_reports_errors_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        pipeline.main(["--source", "mimic", "--mimic-dir", str(tmp_path / "nope"), "--data", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "is not a directory" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        pipeline.main(["--source", "nonsense"])
    assert exc.value.code == 2


def test_cli_help_lists_the_makefile_flags(capsys: pytest.CaptureFixture[str]) -> None:
    pipeline.main(["--help"])
    text = capsys.readouterr().out
    for flag in ("--source", "--patients", "--seed", "--config", "--k", "--workers", "--mimic-dir", "--data"):
        assert flag in text


def test_runs_of_another_build_are_kept_aside_and_the_run_starts_afresh(
        tiny_bench: tuple[Path, pipeline.StageResult], synth_db: Path, tmp_path: Path) -> None:
    import json

    runs = tmp_path / "runs"
    pipeline.run_agents(synth_db, tiny_bench[0], runs, ["credulous"], k=1, workers=1, limit_pairs=2,
                        progress=False)
    run_dir = runs / "credulous"
    config = json.loads((run_dir / "run.json").read_text())
    assert pipeline.retire_stale_run(run_dir, tiny_bench[0], synth_db) is None     # same build: resumed
    config["bench_content_hash"] = "0123456789abcdef"                              # a run of an older build
    (run_dir / "run.json").write_text(json.dumps(config))
    pipeline.run_agents(synth_db, tiny_bench[0], runs, ["credulous"], k=1, workers=1, limit_pairs=2,
                        progress=False)
    kept = runs / ".stale" / "credulous-0123456789ab"
    assert kept.is_dir() and (kept / "episodes.jsonl").exists()
    assert json.loads((run_dir / "run.json").read_text())["bench_content_hash"] != "0123456789abcdef"
    import glob

    assert [Path(p).name for p in glob.glob(str(runs / "*"))] == ["credulous"]  # out of a shell's runs/* glob


def test_the_baselines_share_query_results_and_their_episodes_do_not_change(
        tiny_bench: tuple[Path, pipeline.StageResult], synth_db: Path, tmp_path: Path) -> None:
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.eval.store import EpisodeStore

    timing = {"wall_seconds", "seconds", "gate_seconds", "db_seconds", "format_seconds", "cached", "run_id",
              "reset_seconds"}

    def without_timings(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: without_timings(v) for k, v in x.items() if k not in timing}
        return [without_timings(v) for v in x] if isinstance(x, list) else x

    def episodes(run_dir: Path) -> dict[tuple[str, int], Any]:
        return {r.key: without_timings(r.to_dict()) for r in EpisodeStore(run_dir).records()}

    runs = tmp_path / "runs"
    pipeline.run_agents(synth_db, tiny_bench[0], runs, ["credulous", "literal"], k=2, workers=1, limit_pairs=4,
                        progress=False)
    assert list((runs / pipeline.RESULT_STORE).glob("*/*.pkl"))  # the credulous run's results, kept for the next
    literal = EpisodeStore(runs / "literal").records()
    sql_steps = [s for r in literal for s in r.trajectory["steps"] if s["info"].get("tool") == "sql"]
    # the literal agent runs the credulous agent's draft SQL on the same twins: every result comes from the store
    assert sql_steps and all(s["info"]["cached"] for s in sql_steps)
    alone = tmp_path / "alone"
    run_evaluation(tiny_bench[0], synth_db, "literal", alone, k=2, workers=1, limit_pairs=4, progress=False)
    trial0 = [s for r in EpisodeStore(alone).records() if r.trial == 0 for s in r.trajectory["steps"]
              if s["info"].get("tool") == "sql"]
    assert trial0 and not any(s["info"]["cached"] for s in trial0)
    assert episodes(alone) == episodes(runs / "literal")
