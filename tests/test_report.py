"""ehrgym.report: files, hand-checked table values, byte-identical reruns, the CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.task import Expected, NoiseSpec, Task, write_tasks_jsonl
from ehrgym.report import build_report
from ehrgym.report.figures import REPORT_FIGURES
from ehrgym.report.tables import REPORT_TABLES, latex_escape
from test_metrics import PAIRS, hand_built_runs


def bench_dir(root: Path) -> Path:
    """A benchmark dir whose tasks.jsonl holds the three hand-built pairs."""
    tasks = []
    for i, (pair, (intent, level, nlevel, subtype, kind, reason)) in enumerate(PAIRS.items(), 1):
        number = AnswerSpec("number")
        split = "ood" if pair == "p3" else "test"
        tasks.append(Task(f"{pair}-clean", pair, "clean", intent, level, f"{intent}_{level}", "How many?",
                          "SELECT 1", "SELECT 1", Expected("answer", number, 1), None, split,
                          meta={"complexity": 10 * i}))
        expected = Expected("answer", number, 1) if kind == "answer" else Expected("abstain", number, reason=reason)
        tasks.append(Task(f"{pair}-noise", pair, "noise", intent, level, f"{intent}_{level}", "How many?",
                          "SELECT 1", "SELECT 1", expected, NoiseSpec(nlevel, subtype), split,
                          meta={"complexity": 10 * i + 2}))
    root.mkdir(parents=True, exist_ok=True)
    write_tasks_jsonl(tasks, root / "tasks.jsonl")
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("report")
    runs = hand_built_runs(root / "runs")
    bench = bench_dir(root / "bench")
    first = build_report(runs, bench, root / "t1", root / "f1", n_boot=200, seed=0, progress=False)
    second = build_report(runs, bench, root / "t2", root / "f2", n_boot=200, seed=0, progress=False)
    return root, first, second


def csv(root: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(root / "t1" / f"{name}.csv", keep_default_na=False, na_values=[""])


def test_every_table_and_figure_is_written(report) -> None:
    root, manifest, _ = report
    assert manifest.skipped == {} and manifest.dataset_source == "benchmark"
    assert set(manifest.tables) == set(REPORT_TABLES) and set(manifest.figures) == set(REPORT_FIGURES)
    for name in REPORT_TABLES:
        for ext in ("csv", "md", "tex"):
            assert (root / "t1" / f"{name}.{ext}").stat().st_size > 0
    for name in REPORT_FIGURES:
        png, pdf = root / "f1" / f"{name}.png", root / "f1" / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:5] == b"%PDF-"
    from PIL import Image

    with Image.open(root / "f1" / "clean_vs_noise.png") as im:
        assert round(im.info["dpi"][0]) == 200


def test_outputs_are_byte_identical_across_runs(report) -> None:
    root, first, second = report
    for a, b in zip(first.paths, second.paths):
        assert a.name == b.name
        assert a.read_bytes() == b.read_bytes(), a.name


def test_clean_vs_noise_table_values(report) -> None:
    root, _, _ = report
    df = csv(root, "clean_vs_noise").set_index("system")
    a = df.loc["alpha"]
    assert (a["clean_pct"], a["noise_pct"], a["pair_pct"], a["drop_abs_pct"], a["drop_rel_pct"]) == \
        pytest.approx((83.33, 50.0, 16.67, 33.33, 40.0))
    assert a["mcnemar_p"] == 1.0 and a["n_pairs"] == 3
    assert a["clean_ci_low_pct"] <= a["clean_pct"] <= a["clean_ci_high_pct"]
    md = (root / "t1" / "clean_vs_noise.md").read_text()
    assert "| alpha " in md and "83.3 [" in md and "drop_abs (pts)" in md
    tex = (root / "t1" / "clean_vs_noise.tex").read_text()
    assert r"\begin{tabular}" in tex and r"clean (\%)" in tex and r"\label{tab:clean_vs_noise}" in tex


def test_breakdown_and_analysis_tables(report) -> None:
    root, _, _ = report
    sub = csv(root, "by_subtype")
    assert list(sub[sub["system"] == "alpha"]["noise_subtype"]) == [
        "missing_evidence", "duplicate_records", "false_premise"]  # taxonomy order, not alphabetical
    fm = csv(root, "failure_modes").set_index(["system", "variant"])
    row = fm.loc[("alpha", "all")]
    assert (row["false abstention"], row["missed abstention"], row["wrong abstention reason"], row["SQL error"],
            row["wrong value"], row["failed"]) == (1, 1, 1, 1, 0, 4)
    assert fm.loc[("beta (m1)", "all")]["step/time limit"] == 1
    pk = csv(root, "pass_k")
    alpha = pk[(pk["system"] == "alpha") & (pk["variant"] == "all")].set_index("k")
    assert list(alpha.index) == [1, 2, 3, 4]
    assert alpha.loc[2, "pass_hat_k_pct"] == pytest.approx(40.0) and alpha.loc[2, "n_undefined"] == 1
    assert pd.isna(alpha.loc[3, "pass_hat_k_pct"]) and alpha.loc[3, "n_undefined"] == 6
    assert "undefined" in (root / "t1" / "pass_k.md").read_text()
    rs = csv(root, "reliability").set_index(["system", "variant"]).loc[("alpha", "all")]
    assert (rs["RS(0)_pct"], rs["RS(10)_pct"], rs["RS(N)_pct"]) == pytest.approx((66.67, -100.0, -33.33))
    ab = csv(root, "abstention").set_index(["system", "variant"]).loc[("alpha", "clean")]
    assert ab["over_abstention_pct"] == pytest.approx(16.67)


def test_dataset_tables_from_benchmark(report) -> None:
    root, _, _ = report
    counts = csv(root, "dataset_counts")
    assert counts.iloc[-1]["intent"] == "total" and counts.iloc[-1]["tasks"] == 6
    labs_noise = counts[(counts["intent"] == "labs") & (counts["variant"] == "noise")]
    assert dict(zip(labs_noise["noise_subtype"], labs_noise["tasks"])) == {"duplicate_records": 1, "false_premise": 1}
    comp = csv(root, "dataset_composition").set_index("noise_subtype")
    assert comp.loc["clean", "labs"] == 2 and comp.loc["clean", "total"] == 3
    assert comp.loc["missing_evidence", "vitals"] == 1 and comp.loc["missing_evidence", "population"] == 1
    assert comp.loc["all noise", "total"] == 3
    cx = csv(root, "dataset_complexity").set_index(["intent", "level"])
    labs = cx.loc[("labs", "patient")]  # p1 (10, 12) and p3 (30, 32)
    assert (labs["tasks"], labs["mean"], labs["median"], labs["min"], labs["max"], labs["clean_mean"]) == \
        (4, 21.0, 21.0, 10, 32, 20.0)
    assert cx.iloc[-1]["tasks"] == 6 and cx.index[-1][0] == "all"
    sp = csv(root, "dataset_splits").set_index("split")
    assert list(sp.index) == ["test", "ood"] and (sp.loc["ood", "clean"], sp.loc["test", "tasks"]) == (1, 4)


def test_restricting_items_and_unknown_names(tmp_path: Path) -> None:
    runs = hand_built_runs(tmp_path / "runs")
    m = build_report(runs, None, tmp_path / "t", tmp_path / "f", n_boot=50, tables=["mcnemar"], figures=[],
                     progress=False)
    assert set(m.tables) == {"mcnemar"} and m.figures == {} and m.dataset_source == "episodes"
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["mcnemar.csv", "mcnemar.md", "mcnemar.tex"]
    m = build_report(runs, None, tmp_path / "t", tmp_path / "f", n_boot=50, tables=["dataset_complexity"],
                     figures=[], progress=False)
    assert m.tables == {} and "table:dataset_complexity" in m.skipped  # SQL complexity needs --bench
    from ehrgym.errors import EhrGymError

    with pytest.raises(EhrGymError, match="unknown report figures"):
        build_report(runs, None, tmp_path / "t", tmp_path / "f", figures=["nope"], progress=False)
    with pytest.raises(EhrGymError, match="ehrgym bench build"):
        build_report(runs, tmp_path, tmp_path / "t", tmp_path / "f", progress=False)


def test_cli(tmp_path: Path) -> None:
    from ehrgym.cli import cli

    runs = hand_built_runs(tmp_path / "runs")
    result = CliRunner().invoke(cli, ["report", *map(str, runs), "--out", str(tmp_path / "out"), "--n-boot", "50",
                                      "--no-progress", "--lenient"])
    assert result.exit_code == 0, result.output
    assert "tables ->" in result.output
    assert (tmp_path / "out" / "tables" / "clean_vs_noise.csv").exists()
    assert (tmp_path / "out" / "figures" / "pass_k.pdf").exists()
    # lenient: alpha's wrong-reason abstention counts
    df = pd.read_csv(tmp_path / "out" / "tables" / "clean_vs_noise.csv").set_index("system")
    assert df.loc["alpha", "noise_pct"] == pytest.approx(66.67)
    bad = CliRunner().invoke(cli, ["report", str(runs[0]), "--out", "x", "--tables-out", "y"])
    assert bad.exit_code != 0 and "either --out" in bad.output


def test_latex_escape() -> None:
    assert latex_escape("a_b & 5% #1 {x}") == r"a\_b \& 5\% \#1 \{x\}"
    assert latex_escape("Clean→Noise") == r"Clean$\rightarrow$Noise"


def test_run_dependent_latencies_stay_out_of_committed_tables(report) -> None:
    import subprocess

    root, _, _ = report
    assert not [c for c in csv(root, "cost").columns if "seconds" in c]
    assert "wall_seconds_median" in csv(root, "latency").columns
    repo = Path(__file__).resolve().parents[1]
    for name in ("tables/latency.csv", "tables/latency.md", "tables/demo/latency.tex"):
        ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=repo)
        assert ignored.returncode == 0, f"{name} must be git-ignored (it changes on every run)"


def test_failure_modes_figure_is_normalised_per_agent(report) -> None:
    import matplotlib.patches

    from ehrgym.report.build import report_data

    root, _, _ = report
    fig = REPORT_FIGURES["failure_modes"].build(report_data(hand_built_runs(root / "runs2"), n_boot=50))
    ax = fig.axes[0]
    ends: dict[float, float] = {}
    for bar in ax.patches:
        if isinstance(bar, matplotlib.patches.Rectangle) and bar.get_width() > 0:
            y = round(bar.get_y(), 6)
            ends[y] = max(ends.get(y, 0.0), bar.get_x() + bar.get_width())
    assert ends and all(v == pytest.approx(100.0) for v in ends.values())
    colors = [tuple(h.get_facecolor()) for h in fig.legends[0].legend_handles]
    assert len(set(colors)) == len(colors)
