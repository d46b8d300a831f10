"""The notebooks: structure (papermill parameters, thin, stored without outputs), a papermill run of
the whole pipeline with a small injected parameter set, and nbval re-executing every executed
notebook to check that it runs clean and that its outputs are deterministic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ehrgym import pipeline

NOTEBOOKS = pipeline.NOTEBOOK_DIR
# outputs that legitimately differ between two executions: absolute temporary paths, object ids
SANITIZE = r"""
[regex1]
regex: /tmp/[^\s'"]*
replace: TMPPATH

[regex2]
regex: 0x[0-9a-f]{6,}
replace: 0xADDRESS
"""


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


# ---------------------------------------------------------------------------------------------
# structure (fast)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", pipeline.ALL_NOTEBOOKS)
def test_notebook_structure(name: str) -> None:
    nb = _read(name)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == pipeline.KERNEL_NAME
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters' (papermill)"
    assert code.index(tagged[0]) == 0, "the parameters cell comes before any code"
    for cell in code:
        assert not cell.get("outputs") and cell.get("execution_count") is None, "store notebooks without outputs"
        for line in cell.source.splitlines():
            stripped = line.lstrip()
            assert not stripped.startswith(("def ", "class ", "async def ")), \
                f"{name}: notebooks stay thin — move `{stripped[:40]}` into an ehrgym module"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    if name in ("03_robustness_analysis",) + pipeline.TEACHING_NOTEBOOKS:
        assert "**Learning goal.**" in nb.cells[0].source and "**How to read the output.**" in nb.cells[0].source


def test_exercise_notebook_asks_before_it_reveals_and_hides_its_key() -> None:
    nb = _read(pipeline.EXERCISE_NOTEBOOK)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    asks = [i for i, src in enumerate(code) if src.startswith("answer_")]
    assert len(asks) == 3, "one 'what would you answer?' cell per noise level"
    for i in asks:
        step = code[i].split("=")[0].strip().removeprefix("answer_")
        assert f"lesson.check_answer(ex, steps, {step}, answer_{step}" in code[i]
        assert f"lesson.exercise_html(ex, steps, {step})" in code[i - 1]     # the question comes first
    [key] = [c for c in nb.cells if "answer-key" in c.metadata.get("tags", [])]
    assert key.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
    assert nb.cells.index(key) == len(nb.cells) - 1
    assert any("agent_failures" in src for src in code)


def test_executed_explorer_keeps_a_static_fallback(executed: tuple[pipeline.PipelineConfig, dict[str, Path]]) -> None:
    """A shared executed copy shows something without a kernel: the widget state and a static snapshot."""
    _, paths = executed
    nb = nbformat.read(paths[pipeline.EXPLORE_NOTEBOOK], as_version=4)
    widget_out = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widget_out) == 1 and "Static snapshot" in widget_out[0]["data"]["text/html"]
    assert "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {})
    ex = nbformat.read(paths[pipeline.EXERCISE_NOTEBOOK], as_version=4)
    html = "".join(o.get("data", {}).get("text/html", "") for c in ex.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert html.count("Write your answer to exercise") == 3 and "Expected:" not in html   # nothing revealed


def test_pipeline_parameters_match_the_notebooks() -> None:
    """Every parameter the pipeline injects is declared in the notebook's parameters cell."""
    import ast

    params = pipeline.PipelineConfig().notebook_parameters()
    for name, injected in params.items():
        cell = next(c for c in _read(name).cells if "parameters" in c.metadata.get("tags", []))
        declared = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
        assert set(injected) <= declared, f"{name}: undeclared parameters {set(injected) - declared}"


# ---------------------------------------------------------------------------------------------
# execution: papermill, then nbval
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[pipeline.PipelineConfig, dict[str, Path]]:
    root = tmp_path_factory.mktemp("reproduce")
    cfg = pipeline.PipelineConfig(source="synthetic", patients=100, seed=3, config="small", k=2, workers=1,
                                  data=str(root / "data"), tables=str(root / "tables"),
                                  figures=str(root / "figures"), split="test", limit_pairs=24, n_boot=50,
                                  progress=False, agents=pipeline.BASELINES)
    log: list[str] = []
    report = pipeline.run_pipeline(cfg, log=log.append)      # the stages, then the teaching notebooks
    paths = {name: Path(p) for name, p in report.notebooks.items()}
    assert any("finished in" in line for line in log)
    return cfg, paths


def test_pipeline_regenerates_tables_and_figures(executed: tuple[pipeline.PipelineConfig, dict[str, Path]]) -> None:
    cfg, paths = executed
    assert sorted(paths) == sorted(pipeline.ALL_NOTEBOOKS)
    tables = Path(cfg.tables)
    figures = Path(cfg.figures)
    for name in ("clean_vs_noise", "by_subtype", "pass_k", "abstention", "mcnemar", "failure_modes"):
        for ext in ("csv", "md", "tex"):
            assert (tables / f"{name}.{ext}").is_file(), f"{name}.{ext}"
    for name in ("clean_vs_noise", "subtype_heatmap", "pass_k", "failure_modes"):
        for ext in ("png", "pdf"):
            assert (figures / f"{name}.{ext}").stat().st_size > 0
    record = json.loads((cfg.executed_dir / "pipeline.json").read_text())
    assert list(record["notebooks"]) == list(pipeline.ALL_NOTEBOOKS)
    for path in paths.values():
        nb = nbformat.read(path, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.output_type == "error"]
        assert not errors
        injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert len(injected) == 1


def test_pipeline_is_cheap_to_redo(executed: tuple[pipeline.PipelineConfig, dict[str, Path]]) -> None:
    """A second run reuses the database and the benchmark and resumes the runs (nothing new to run)."""
    cfg, _ = executed
    db = pipeline.ensure_database(cfg.source, cfg.db_path, patients=cfg.patients, seed=cfg.seed, progress=False)
    bench = pipeline.ensure_benchmark(cfg.db_path, cfg.bench_dir, config=cfg.config, seed=cfg.seed, progress=False)
    assert not db.built and not bench.built
    summaries = pipeline.run_agents(cfg.db_path, cfg.bench_dir, cfg.runs_dir, cfg.agent_list, k=cfg.k, workers=1,
                                    seed=cfg.seed, split=cfg.split, limit_pairs=cfg.limit_pairs, progress=False)
    assert [s.ran for s in summaries] == [0] * len(pipeline.BASELINES) and \
        all(s.skipped == s.planned > 0 for s in summaries)
    by_agent = {s.agent: s for s in summaries}
    assert by_agent["oracle"].success_clean == by_agent["oracle"].success_noise == 1.0
    assert by_agent["credulous"].success_noise < by_agent["credulous"].success_clean
    assert by_agent["credulous"].success_noise <= by_agent["literal"].success_noise < by_agent["literal"].success_clean


def test_nbval_reexecutes_every_notebook_deterministically(
        executed: tuple[pipeline.PipelineConfig, dict[str, Path]], tmp_path: Path) -> None:
    _, paths = executed
    sanitize = tmp_path / "nbval_sanitize.cfg"
    sanitize.write_text(SANITIZE)
    cmd = [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "--nbval-sanitize-with", str(sanitize),
           "-p", "no:cacheprovider", "-q", "-o", "addopts=",
           # its own basetemp: a nested pytest must not prune the numbered temp dirs this session uses
           f"--basetemp={tmp_path / 'nbval-basetemp'}", *[str(paths[n]) for n in pipeline.ALL_NOTEBOOKS]]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_notebooks_equal_what_the_generator_writes(tmp_path: Path) -> None:
    """notebooks/*.ipynb are generated by scripts/make_notebooks.py: a hand edit is lost on the next run."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(repo / "scripts" / "make_notebooks.py"), str(tmp_path)], check=True,
                   capture_output=True)
    generated = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    committed = sorted(p.name for p in (repo / "notebooks").glob("*.ipynb"))
    assert generated == committed
    for name in generated:
        assert (tmp_path / name).read_text() == (repo / "notebooks" / name).read_text(), (
            f"notebooks/{name} differs from scripts/make_notebooks.py's output: edit the script and rerun it")


def test_readme_snippet_and_commands_run_after_a_reproduce(
        executed: tuple[pipeline.PipelineConfig, dict[str, Path]]) -> None:
    """The README's Python snippet and evaluation/report commands, as written, on the layout `make reproduce`
    leaves — only the size of this small reproduce (and its benchmark name) is substituted."""
    import re
    import subprocess
    import sys

    cfg, _ = executed
    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text()
    default = pipeline.PipelineConfig(data="data")
    subs = {default.bench_dir.name: cfg.bench_dir.name, default.db_path.stem: cfg.db_path.stem}

    def localise(text: str) -> str:
        for a, b in subs.items():
            text = text.replace(a, b)
        return text

    root = cfg.data_dir.parent
    snippet = re.search(r"```python\n(from ehrgym.bench.dataset import load_benchmark.*?)```", readme, re.S)
    assert snippet, "the README's episode snippet is gone"
    code = localise(snippet.group(1))
    assert "data/bench/" in code
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verdict" not in done.stderr
    exe = Path(sys.executable).parent / "ehrgym"
    for line in readme.splitlines():
        if line.startswith(("ehrgym eval summarize", "ehrgym report data/runs")):
            command = localise(line.split("#")[0]).replace("ehrgym ", f"{exe} ", 1)
            done = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, text=True, env=env)
            assert done.returncode == 0, (command, done.stderr[-2000:])
    assert (root / "tables" / "clean_vs_noise.csv").is_file() and (root / "figures" / "pass_k.png").is_file()
