"""ehrgym.explore: dataset statistics, evidence diffs, the noise explorer and its widget (no kernel)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from ehrgym import explore
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.noise.teaching import subtype_title
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
        edits = view.noise.noise.overlay.merged()  # the noise's own edits, not the pair's background
        if any(e.delete_rowids for e in edits.values()):
            assert (view.evidence[explore.STATUS_COLUMN] == "clean only").any()
        if any(e.insert_rows for e in edits.values()) and row.noise_subtype in ("duplicate_records",
                                                                                "conflicting_records"):
            assert (view.evidence[explore.STATUS_COLUMN] == "noisy only").any()
        if view.noise.noise.overlay.is_empty:  # query-level noise: same data, only the question changed
            pd.testing.assert_frame_equal(view.evidence_noise, explorer.query(view.noise.meta["evidence_sql"]))
        # the benchmark's verification: credulous is right on clean and trapped on noise
        out = view.outcome_table()
        assert out["credulous_correct"].tolist() == [True, False], (row.pair_id, out.to_dict("records"))
        assert out["expected"].tolist() == [explore.expected_text(view.clean), explore.expected_text(view.noise)]
        assert view.noise_label == f"{view.noise.noise.level} · {view.noise.noise.subtype}"
        assert view.summary()["noise"] == f"{subtype_title(view.noise.noise.subtype)} ({view.noise.noise.level})"
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


def test_widget_callbacks_predict_then_reveal(explorer: explore.NoiseExplorer) -> None:
    """The widget's own callbacks, driven as a click would: filter, search, next/random, check, run."""
    pytest.importorskip("ipywidgets")
    from ehrgym import lesson

    ui = explore.ExplorerUI(explorer, agents=("oracle", "credulous"))
    assert len(ui.pair.options) == len(explorer.pairs())
    sub = ui.filters["noise_subtype"]
    assert all("_" not in label for label, value in sub.options), "subtypes are shown by readable name"
    label, last = sub.options[-1]
    sub.value = last                                       # refilters the pair list
    want = set(explorer.pairs(noise_subtype=last)["pair_id"])
    assert {v for _, v in ui.pair.options} == want and ui.pair.value in want
    assert ui.count.value.startswith(f"{len(want)} of ")
    ui.filters["expected"].value = ui.filters["expected"].options[-1][1]
    assert all(v in want for _, v in ui.pair.options)
    for dd in ui.filters.values():
        dd.value = explore.ALL
    first = ui.pair.value
    ui.next_button.click()
    assert ui.pair.value != first or len(ui.pair.options) == 1
    ui.random_button.click()
    assert ui.pair.value in {v for _, v in ui.pair.options}
    word = explorer.pairs()["noisy_question"].iloc[0].split()[-1]
    ui.search.value = word
    assert all(word.casefold() in explorer.pairs().set_index("pair_id").loc[v, "noisy_question"].casefold()
               or word.casefold() in explorer.pairs().set_index("pair_id").loc[v, "question"].casefold()
               for _, v in ui.pair.options)
    ui.search.value = ""
    # nothing is revealed before a prediction
    assert ui.revealed is None and ui.prediction is None
    _, noise = explorer.pair(ui.pair.value)
    key = lesson.protocol_line(noise)
    ui.answer.value = key
    ui.check_button.click()
    assert ui.prediction is not None and ui.prediction.correct, ui.prediction.summary()
    assert ui.revealed is not None and ui.revealed.expected == lesson.expected_words(noise)
    assert ui.revealed.credulous_correct is False                  # the trap is shown
    # a wrong prediction is scored wrong by the same verifier
    ui.choice.value = "answer" if noise.expected.is_abstain else "abstain: out_of_scope"
    ui.answer.value = "123456" if noise.expected.is_abstain else ""
    ui.check_button.click()
    assert not ui.prediction.correct and ui.prediction.verdict.failure in ("missed_abstention", "false_abstention")
    ui.next_button.click()                                 # a new pair hides the reveal again
    assert ui.revealed is None and ui.answer.value == ""
    ui.agent.value = "oracle"
    ui.run_button.click()
    assert ui.last_run is not None and ui.last_run.success
    bundle = ui._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "Static snapshot" in bundle["text/html"]
    assert explore.explorer_widget(explorer).widget is not None


def test_prediction_is_read_by_the_agents_protocol(explorer: explore.NoiseExplorer) -> None:
    from ehrgym import lesson

    read = lesson.read_prediction
    assert read("7.2").value == "7.2" and not read("7.2").is_abstain
    assert read("ANSWER: 7.2", "abstain: false_premise").value == "7.2"          # a protocol line wins
    got = read("ABSTAIN: contradictory records: two values")
    assert got.abstain == "conflicting_evidence" and got.explanation == "two values"
    assert read("", "abstain: out_of_scope").abstain == "out_of_scope"
    assert read("nobody records that", "abstain: out_of_scope").explanation == "nobody records that"
    assert read('{"abstain": "insufficient evidence"}').abstain == "insufficient_evidence"
    assert read("") is None and read(None) is None
    with pytest.raises(lesson.LessonError, match="unknown choice"):
        read("1", "abstain: because")
    _, noise = explorer.pair(explorer.pairs()["pair_id"].iloc[0])
    empty = explorer.predict(noise, "")
    assert not empty.correct and empty.verdict.failure == "no_answer"
    hedged = explorer.predict(noise, "2 or 3")
    assert not hedged.correct                              # the verifier's strictness applies to students too


def test_every_subtype_predict_then_reveal(explorer: explore.NoiseExplorer) -> None:
    from ehrgym import lesson
    from ehrgym.bench.noise.teaching import teaching_card

    index = explorer.pairs()
    for pair_id in index.drop_duplicates("noise_subtype")["pair_id"]:
        clean, noise = explorer.pair(pair_id)
        right = explorer.predict(pair_id, lesson.protocol_line(noise))      # a pair id means its noisy twin
        assert right.correct, (pair_id, right.summary())
        trap = explorer.run_agent(noise, "credulous")       # the credulous answer, given by a student
        if trap.answer is not None:
            assert not explorer.predict(pair_id, f"ANSWER: {trap.answer}").correct, pair_id
        if noise.expected.is_abstain:
            assert not explorer.predict(pair_id, lesson.protocol_line(clean)).correct, pair_id
        reveal = explorer.reveal(pair_id, right)
        card = teaching_card(noise.noise.subtype)
        assert reveal.card is card and reveal.credulous_correct is False
        page = reveal.html()
        assert card.title in page and card.check in page.replace("&#x27;", "'")
        assert "✔ correct" in page and "Expected:" in page
        assert reveal.robust_steps is not None and reveal.robust_steps["tool"].tolist()[-1] == "answer"
        full_sql = reveal.robust_steps["action"].iloc[0]
        assert full_sql == "sql: " + noise.gold_sql                         # the full query, not cut
        view = explorer.compare(pair_id, credulous=False)
        assert view.comparison is not None
        statuses = set(view.comparison.table[lesson.STATUS])
        if noise.overlay.is_empty:                         # question-level: no row is "removed by the noise"
            assert statuses <= {lesson.BOTH_Q, lesson.CLEAN_Q, lesson.NOISY_Q}
            assert not view.comparison.data_changed
        else:
            assert statuses - {lesson.UNCHANGED}, (pair_id, statuses)
        if noise.question != clean.question:
            assert "<ins" in view.comparison_html() and "<del" in view.comparison_html()
        assert noise.question in view.student_html().replace("&#x27;", "'")


def test_compare_evidence_hand_cases() -> None:
    from ehrgym import lesson

    clean = pd.DataFrame({"labevent_id": [1, 2, 3], "item": ["K", "K", "Na"], "valuenum": [4.0, 4.2, 140.0],
                          "valueuom": ["mEq/L", "mEq/L", "mEq/L"]})
    noise = pd.DataFrame({"labevent_id": [1, 3, 9], "item": ["K", "Na", "K"], "valuenum": [4.0, 1.4, 4.0],
                          "valueuom": ["mEq/L", "g/L", "mEq/L"]})
    comp = lesson.compare_evidence(clean, noise, sql="SELECT valuenum FROM t WHERE item = 'K'")
    t = comp.table
    assert list(t.columns)[:3] == [lesson.STATUS, "valuenum", "valueuom"]   # changed columns first
    assert t[lesson.STATUS].tolist() == [lesson.UNCHANGED, lesson.REMOVED, lesson.EDITED, lesson.INSERTED]
    edited = t.iloc[2]
    assert edited["valuenum"] == "140 → 1.4" and edited["valueuom"] == "mEq/L → g/L" and edited["labevent_id"] == 3
    assert comp.changed == {(2, "valuenum"), (2, "valueuom")}
    page = comp.html()
    assert page.count(lesson.CHANGED_CELL) == 2 and "140 → 1.4" in page
    # a re-stored copy (new row id) is inserted; rows after it whose dense id was renumbered are unchanged
    dup = lesson.compare_evidence(pd.DataFrame({"transfer_id": [10, 11], "unit": ["MICU", "Ward"]}),
                                  pd.DataFrame({"transfer_id": [10, 11, 12], "unit": ["MICU", "MICU", "Ward"]}))
    assert dup.table[lesson.STATUS].tolist() == [lesson.UNCHANGED, lesson.UNCHANGED, lesson.INSERTED]
    # rounding as the answer spec says
    r = lesson.compare_evidence(pd.DataFrame({"v": [0.5999999999999996]}), pd.DataFrame({"v": [0.6]}), decimals=2)
    assert r.table[lesson.STATUS].tolist() == [lesson.UNCHANGED]
    # question-level noise: the same data, rows each question reads
    q = lesson.compare_evidence(clean.head(1), clean.iloc[0:0], data_changed=False)
    assert q.table[lesson.STATUS].tolist() == [lesson.CLEAN_Q] and "Only the question changed" in q.note


def test_question_diff_and_observation_tables() -> None:
    from ehrgym import lesson

    a = "Average ICU LOS in days for the medical ICU stays starting in 2196?"
    b = "Average ICU LOS in days for the medical ICU stays starting in 2197?"
    assert lesson.question_diff_text(a, b).endswith("starting in [-2196?-] {+2197?+}")
    page = lesson.question_diff_html(a, b)
    assert "<del style='background:#ffe3e3'>2196?</del>" in page and "2197?</ins>" in page
    assert a[:40] in page                                   # both questions in full
    assert "the same in both twins" in lesson.question_diff_html(a, a)
    obs = "p0 | p1\n---+--------\n1  | 2196-01-01\n2  | NULL\n(2 rows)"
    df = lesson.observation_table(obs)
    assert df.columns.tolist() == ["p0", "p1"] and df.values.tolist() == [["1", "2196-01-01"], ["2", "NULL"]]
    assert lesson.observation_table("error: no such table") is None
    steps = pd.DataFrame([{"step": 1, "tool": "sql", "action": "sql: SELECT 1 AS p0,\n 2 AS p1", "observation": obs},
                          {"step": 2, "tool": "answer", "action": "answer: 1", "observation": "done"}])
    page = lesson.steps_html(steps)
    assert "<details>" in page and "SELECT 1 AS p0,\n 2 AS p1" in page and "<table" in page
    from ehrgym.bench.answers import AnswerSpec

    spec = AnswerSpec("number", decimals=2)
    assert lesson.said_text(1.8254629629629628, None, "answered", spec) == "answer 1.83"
    assert lesson.said_text(None, None, "answered", spec).startswith("answer null — the query returned no value")
    assert lesson.said_text(None, "false_premise", "answered", spec) == "abstain (false_premise)"


def test_exercise_lesson(explorer: explore.NoiseExplorer) -> None:
    from ehrgym import lesson

    steps = lesson.lesson_pairs(explorer, seed=0)
    assert steps["step"].tolist() == list(range(1, len(steps) + 1))
    assert steps["noise_level"].is_unique and set(steps["noise_level"]) <= {"record", "value", "query"}
    assert steps.equals(lesson.lesson_pairs(explorer, seed=0))              # deterministic
    first = lesson.exercise_html(explorer, steps, 1)
    assert "Exercise 1 of" in first and "Expected" not in first             # nothing revealed yet
    waiting = lesson.check_answer(explorer, steps, 1, None)
    assert "answer_1" in waiting and "Expected" not in waiting
    key = lesson.answer_key(explorer, steps)
    assert key["step"].tolist() == steps["step"].tolist()
    right = lesson.check_answer(explorer, steps, 1, key["answer"].iloc[0])
    assert "✔ correct" in right and "Expected:" in right and "Clean vs noisy" in right
    assert "✔ correct" in lesson.check_answer(explorer, steps, 1, None, use_key=True)
    wrong = lesson.check_answer(explorer, steps, 1, "ABSTAIN: out_of_scope" if "ANSWER" in key["answer"].iloc[0]
                                else "ANSWER: 1")
    assert "✘ not correct" in wrong
    with pytest.raises(lesson.LessonError, match="steps"):
        lesson.check_answer(explorer, steps, 99, "ANSWER: 1")
    failures = lesson.agent_failures(explorer, "credulous", limit=5)       # credulous falls for every trap
    assert len(failures) == 5 and failures["noise"].is_unique
    assert list(failures.columns) == ["pair_id", "noise", "question", "credulous said", "expected", "failure",
                                      "verdict"]


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
