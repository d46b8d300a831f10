"""ehrgym.explore: dataset statistics, evidence diffs, the noise explorer and its widget (no kernel)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from ehrgym import explore
from ehrgym.bench.configs import BuildConfig
from ehrgym.vocab import NOISE_SUBTYPES

TINY = BuildConfig("tiny", 40, oversample=4.0, min_candidates=8)


@pytest.fixture(scope="module")
def tiny_bench(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ehrgym.bench.build import build_benchmark

    out = tmp_path_factory.mktemp("explore") / "bench"
    build_benchmark(synth_db, out, config=TINY, seed=1, progress=False)
    return out


@pytest.fixture(scope="module")
def tasks(tiny_bench: Path) -> list:
    return explore.load_tasks(tiny_bench)


@pytest.fixture(scope="module")
def explorer(synth_db: Path, tiny_bench: Path):
    ex = explore.NoiseExplorer(synth_db, tiny_bench)
    yield ex
    ex.close()


# ---------------------------------------------------------------------------------------------
# evidence_diff: hand-computed cases
# ---------------------------------------------------------------------------------------------
def test_evidence_diff_marks_removed_inserted_and_duplicated_rows() -> None:
    clean = pd.DataFrame({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]})
    noise = pd.DataFrame({"id": [1, 3, 3, 4], "v": [1.0, 3.0, 3.0, 900.0]})
    out = explore.evidence_diff(clean, noise)
    assert list(out.columns) == [explore.STATUS_COLUMN, "id", "v"]
    got = [(s, i, v) for s, i, v in out.itertuples(index=False, name=None)]
    assert got == [("both", 1, 1.0), ("clean only", 2, 2.0), ("both", 3, 3.0),
                   ("noisy only", 3, 3.0), ("noisy only", 4, 900.0)]


def test_evidence_diff_edited_cell_and_nulls() -> None:
    clean = pd.DataFrame({"id": [1, 2], "v": [5.0, None]})
    noise = pd.DataFrame({"id": [1, 2], "v": [None, None]})
    out = explore.evidence_diff(clean, noise)
    assert out[explore.STATUS_COLUMN].tolist() == ["clean only", "both", "noisy only"]
    assert out["id"].tolist() == [1, 2, 1]


def test_evidence_diff_of_empty_sides() -> None:
    clean = pd.DataFrame({"id": [7]})
    out = explore.evidence_diff(clean, clean.iloc[0:0])
    assert out[explore.STATUS_COLUMN].tolist() == ["clean only"]
    assert explore.evidence_diff(clean.iloc[0:0], clean)[explore.STATUS_COLUMN].tolist() == ["noisy only"]


# ---------------------------------------------------------------------------------------------
# dataset statistics
# ---------------------------------------------------------------------------------------------
def test_task_frame_and_counts_agree(tasks: list) -> None:
    frame = explore.task_frame(tasks)
    assert len(frame) == len(tasks)
    n_pairs = frame["pair_id"].nunique()
    assert n_pairs == len(tasks) // 2
    counts = explore.category_counts(frame)
    assert counts["pairs"].sum() == n_pairs
    assert set(counts["noise_subtype"]) <= set(NOISE_SUBTYPES)
    assert all(NOISE_SUBTYPES[s] == lvl for s, lvl in zip(counts["noise_subtype"], counts["noise_level"]))
    mat = explore.category_matrix(frame)
    assert int(mat.loc[("all", ""), ("all", "pairs")]) == n_pairs
    assert (mat.drop(index=("all", ""))[("all", "pairs")] ==
            mat.drop(index=("all", "")).drop(columns=("all", "pairs")).sum(axis=1)).all()
    overview = explore.dataset_overview(frame)
    total = overview[overview["split"] == "all"].iloc[0]
    assert total["pairs"] == n_pairs and total["tasks"] == len(tasks)
    assert overview[overview["split"] != "all"]["pairs"].sum() == n_pairs
    assert total["noise_expect_answer"] + total["noise_expect_abstain"] == n_pairs


def test_complexity_tables(tasks: list) -> None:
    frame = explore.task_frame(tasks)
    clean = frame[frame["variant"] == "clean"]
    assert clean["complexity"].notna().all() and (clean["complexity"] > 0).all()
    dist = explore.complexity_distribution(frame)
    assert int(dist.to_numpy().sum()) == len(clean)
    summary = explore.complexity_summary(frame)
    assert summary["tasks"].sum() == len(clean)
    assert (summary["complexity_max"] >= summary["complexity_mean"]).all()


def test_example_pairs_one_per_subtype(tasks: list) -> None:
    ex = explore.example_pairs(tasks, per_subtype=1)
    subtypes = {t.noise.subtype for t in tasks if t.noise}
    assert sorted(ex["noise_subtype"]) == sorted(subtypes)
    row = ex.iloc[0]
    clean = next(t for t in tasks if t.pair_id == row["pair_id"] and t.variant == "clean")
    assert row["clean_question"] == clean.question
    assert row["clean_expected"] == explore.expected_text(clean)
    assert explore.expected_text(clean).startswith("answer ")


# ---------------------------------------------------------------------------------------------
# the explorer
# ---------------------------------------------------------------------------------------------
def test_pairs_index_and_errors(explorer: explore.NoiseExplorer) -> None:
    index = explorer.pairs()
    assert len(index) == len(explorer.tasks) // 2
    assert index["pair_id"].is_unique
    one = index["noise_subtype"].iloc[0]
    assert set(explorer.pairs(noise_subtype=one)["noise_subtype"]) == {one}
    with pytest.raises(explore.ExploreError, match="no complete Clean–Noise pair"):
        explorer.pair("no-such-pair")
    with pytest.raises(explore.ExploreError, match="cannot filter"):
        explorer.pairs(colour="red")


def test_clean_evidence_is_the_base_data(explorer: explore.NoiseExplorer, synth_db: Path) -> None:
    clean, _ = explorer.pair(explorer.pairs()["pair_id"].iloc[0])
    got = explorer.evidence(clean)
    con = duckdb.connect(str(synth_db), read_only=True)
    try:
        con.execute("SET search_path = 'mimiciv_hosp,mimiciv_icu'")
        want = con.execute(clean.meta["evidence_sql"]).df()
    finally:
        con.close()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.head(explorer.max_rows).reset_index(drop=True),
                                  check_dtype=False)


def test_compare_shows_the_overlay_and_the_trap(explorer: explore.NoiseExplorer) -> None:
    index = explorer.pairs()
    seen = set()
    for row in index.itertuples():
        if row.noise_subtype in seen:
            continue
        seen.add(row.noise_subtype)
        view = explorer.compare(row.pair_id)
        edits = view.noise.overlay.merged()
        if any(e.delete_rowids for e in edits.values()):
            assert (view.evidence[explore.STATUS_COLUMN] == "clean only").any()
        if any(e.insert_rows for e in edits.values()) and row.noise_subtype in ("duplicate_records",
                                                                                "conflicting_records"):
            assert (view.evidence[explore.STATUS_COLUMN] == "noisy only").any()
        if view.noise.overlay.is_empty:       # query-level noise: same data, only the question changed
            pd.testing.assert_frame_equal(view.evidence_noise, explorer.query(view.noise.meta["evidence_sql"]))
        # the benchmark's verification: credulous is right on clean and trapped on noise
        out = view.outcome_table()
        assert out["credulous_correct"].tolist() == [True, False], (row.pair_id, out.to_dict("records"))
        assert out["expected"].tolist() == [explore.expected_text(view.clean), explore.expected_text(view.noise)]
        assert view.summary()["noise"] == f"{view.noise.noise.level} · {view.noise.noise.subtype}"
    assert len(seen) >= 5


def test_run_agent_live_matches_the_verifier(explorer: explore.NoiseExplorer) -> None:
    _, noise = explorer.pair(explorer.pairs()["pair_id"].iloc[0])
    run = explorer.run_agent(noise, "oracle")
    assert run.success is True and run.failure is None
    assert run.steps["tool"].tolist()[-1] == "answer"
    assert list(run.steps.columns) == ["step", "tool", "action", "observation"]
    again = explorer.run_agent(noise.task_id, "oracle")      # by id, reusing the warm worker
    assert again.summary() == run.summary()
    if noise.expected.is_abstain:
        assert run.said == f"abstain ({noise.expected.reason})"


def test_trap_table_covers_every_subtype(explorer: explore.NoiseExplorer) -> None:
    table = explorer_trap = explore.trap_table(explorer)
    assert sorted(table["noise_subtype"]) == sorted(set(explorer.pairs()["noise_subtype"]))
    assert explorer_trap["trapped"].all()


def test_task_without_evidence_sql_is_a_clear_error(explorer: explore.NoiseExplorer) -> None:
    import dataclasses

    clean, _ = explorer.pair(explorer.pairs()["pair_id"].iloc[0])
    bare = dataclasses.replace(clean, meta={})
    with pytest.raises(explore.ExploreError, match="evidence_sql"):
        explorer.evidence(bare)


def test_widget_callbacks(explorer: explore.NoiseExplorer) -> None:
    pytest.importorskip("ipywidgets")
    ui = explorer_ui = explore.explorer_widget(explorer, agents=("oracle", "credulous"))
    controls, pair, show, live = explorer_ui.children
    subtype, agent, button = controls.children
    last = subtype.options[-1]
    subtype.value = last                                  # refilters the pairs and re-renders
    assert all(value in set(explorer.pairs(noise_subtype=last)["pair_id"]) for _, value in pair.options)
    agent.value = "credulous"
    button.click()                                        # runs the agent live (no kernel: output is dropped)
    assert ui is explorer_ui


# ---------------------------------------------------------------------------------------------
# trajectories and report display
# ---------------------------------------------------------------------------------------------
def test_action_text_and_trajectory_frame() -> None:
    assert explore.action_text({"tool": "sql", "query": "SELECT 1"}) == "sql: SELECT 1"
    assert explore.action_text({"tool": "python", "code": "print(1)"}) == "python: print(1)"
    assert explore.action_text({"tool": "answer", "value": [1, 2]}) == "answer: [1, 2]"
    assert explore.action_text({"tool": "answer", "value": None, "abstain": "false_premise"}) == \
        "abstain: false_premise"
    traj = {"steps": [{"index": 1, "action": {"tool": "sql", "query": "SELECT " + "x, " * 100},
                       "observation": "a\n b"}]}
    df = explore.trajectory_frame(traj, limit=20)
    assert df["observation"].tolist() == ["a b"]
    assert len(df["action"].iloc[0]) == 20 and df["action"].iloc[0].endswith("…")
    assert explore.trajectory_frame(None).empty


def test_failure_gallery(synth_db: Path, tiny_bench: Path, tmp_path: Path) -> None:
    from ehrgym.eval.metrics import load_episodes
    from ehrgym.eval.runner import run_evaluation

    run_evaluation(tiny_bench, synth_db, "credulous", tmp_path / "run", k=1, workers=1, progress=False)
    with pytest.raises(explore.ExploreError, match="trajectories=True"):
        explore.failure_gallery(load_episodes(tmp_path / "run"))
    gallery = explore.failure_gallery(load_episodes(tmp_path / "run", trajectories=True), per_mode=1)
    assert gallery, "credulous fails on noisy tasks"
    modes = [g["header"]["failure_mode"] for g in gallery]
    assert len(modes) == len(set(modes))
    for g in gallery:
        assert g["header"]["variant"] == "noise"
        assert not g["steps"].empty and g["verdict"]
        assert g["title"].startswith(f"**credulous · {g['header']['failure_mode']}**") and g["verdict"] in g["title"]
    # a failure on a clean task has no noise subtype (NaN in the frame): the title must still render
    episodes = load_episodes(tmp_path / "run", trajectories=True)
    clean = episodes[episodes["variant"] == "clean"].head(1).assign(success_strict=False, success_lenient=False,
                                                                   failure="wrong_value")
    [one] = explore.failure_gallery(clean, per_mode=1)
    assert one["header"]["noise_subtype"] is None and "(trial 0, clean)" in one["title"]


def test_report_section(tmp_path: Path) -> None:
    from IPython.display import Image, Markdown
    from ehrgym.report import ReportManifest

    md = tmp_path / "clean_vs_noise.md"
    md.write_text("| a |\n|---|\n| 1 |\n")
    png = tmp_path / "clean_vs_noise.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.savefig(png)
    plt.close(fig)
    manifest = ReportManifest(tables={"clean_vs_noise": [tmp_path / "x.csv", md]},
                              figures={"clean_vs_noise": [png]},
                              skipped={"figure:pass_k": "no data for this figure"})
    items = explore.report_section(manifest, "clean_vs_noise")
    assert isinstance(items[0], Markdown) and "| 1 |" in items[0].data
    assert isinstance(items[1], Image)
    assert explore.report_section(manifest, "clean_vs_noise", figure=False)[0].data == items[0].data
    skipped = explore.report_section(manifest, "pass_k")
    assert len(skipped) == 1 and "no data" in skipped[0].data
