"""Metrics over hand-built runs whose values are computed by hand in the comments."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ehrgym.eval.metrics import (FAILURE_MODES, ResultsError, classify_failures, failure_examples,
                                 load_episodes, render_summary, summarize)
from ehrgym.eval.records import EpisodeRecord

# pair -> (intent, level, noise level, subtype, noisy task's expected kind, expected reason)
PAIRS: dict[str, tuple[str, str, str, str, str, str | None]] = {
    "p1": ("labs", "patient", "record", "duplicate_records", "answer", None),
    "p2": ("vitals", "population", "record", "missing_evidence", "abstain", "insufficient_evidence"),
    "p3": ("labs", "patient", "query", "false_premise", "abstain", "false_premise"),
}


def episode(run_id: str, agent: str, model: str | None, pair: str, variant: str, trial: int, outcome: str,
            spec: tuple | None = None, **extra: Any) -> EpisodeRecord:
    """One record. ``outcome``: ok | wrong | abstain:<reason> | step_limit | time_limit | agent_error | infra.
    ``spec`` overrides ``PAIRS[pair]``."""
    intent, level, nlevel, subtype, kind, reason = spec or PAIRS[pair]
    noisy = variant == "noise"
    exp_kind, exp_reason = (kind, reason) if noisy else ("answer", None)
    term, abst, ok = "answered", None, False
    if outcome == "ok":
        term, ok = ("abstained", True) if exp_kind == "abstain" else ("answered", True)
        abst = exp_reason if exp_kind == "abstain" else None
    elif outcome.startswith("abstain:"):
        term, abst = "abstained", outcome.split(":", 1)[1]
        ok = exp_kind == "abstain" and abst == exp_reason
    elif outcome in ("step_limit", "time_limit", "agent_error"):
        term = outcome
    elif outcome == "infra":
        term = "infrastructure_error"
    elif outcome != "wrong":
        raise ValueError(outcome)
    lenient = ok or (term == "abstained" and exp_kind == "abstain")
    infra = term == "infrastructure_error"
    failure = None
    if not ok and not infra:
        failure = {"abstained": "false_abstention" if exp_kind == "answer" else "wrong_reason",
                   "answered": "missed_abstention" if exp_kind == "abstain" else "wrong_value"}.get(term, "no_answer")
    fields = dict(
        run_id=run_id, agent=agent, model=model, task_id=f"{pair}-{variant}", pair_id=pair, trial=trial,
        template_id=f"{intent}_{level}",
        variant=variant, intent=intent, level=level, noise_level=nlevel if noisy else None,
        noise_subtype=subtype if noisy else None, split="test", expected_kind=exp_kind,
        expected_reason=exp_reason, termination=term, success_strict=None if infra else ok,
        success_lenient=None if infra else lenient, failure=failure, abstain_reason=abst, steps=3,
    )
    fields.update(extra)
    return EpisodeRecord(**fields)


def alpha_records() -> list[EpisodeRecord]:
    """System 'alpha': 3 pairs x 2 trials (see the hand computations in the tests)."""
    a = ("runA", "alpha", None)
    return [
        episode(*a, "p1", "clean", 0, "ok", prompt_tokens=100, completion_tokens=10, cost_usd=0.01, wall_seconds=1.0),
        episode(*a, "p1", "clean", 1, "ok", prompt_tokens=100, completion_tokens=10, cost_usd=0.01, wall_seconds=2.0),
        episode(*a, "p1", "noise", 0, "wrong", sql_errors=1, wall_seconds=3.0),
        episode(*a, "p1", "noise", 1, "ok", wall_seconds=4.0),
        episode(*a, "p2", "clean", 0, "ok", wall_seconds=5.0),
        episode(*a, "p2", "clean", 1, "ok", wall_seconds=6.0),
        episode(*a, "p2", "noise", 0, "wrong", wall_seconds=7.0),                     # missed abstention
        episode(*a, "p2", "noise", 1, "abstain:conflicting_evidence", wall_seconds=8.0),  # wrong reason
        episode(*a, "p3", "clean", 0, "abstain:insufficient_evidence", wall_seconds=9.0),  # false abstention
        episode(*a, "p3", "clean", 1, "ok", wall_seconds=10.0),
        episode(*a, "p3", "noise", 0, "ok", wall_seconds=11.0),
        episode(*a, "p3", "noise", 1, "infra", error="HTTP 500 after 5 retries", wall_seconds=12.0),
    ]


def beta_records() -> list[EpisodeRecord]:
    b = ("runB", "beta", "m1")
    return [
        episode(*b, "p1", "clean", 0, "step_limit"),
        episode(*b, "p1", "noise", 0, "agent_error"),
        episode(*b, "p2", "clean", 0, "ok"),
        episode(*b, "p2", "noise", 0, "ok"),
        episode(*b, "p3", "clean", 0, "ok"),
        episode(*b, "p3", "noise", 0, "infra"),
    ]


def write_run(directory: Path, records: list[EpisodeRecord], torn: str = "", config: dict | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "episodes.jsonl", "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec.to_dict()) + "\n")
        fh.write(torn)
    if config is not None:
        (directory / "run.json").write_text(json.dumps(config))
    return directory


def hand_built_runs(root: Path) -> list[Path]:
    """Two run directories (alpha with a torn last line, beta with run.json)."""
    return [write_run(root / "alpha", alpha_records(), torn='{"run_id": "runA", "agent": "al'),
            write_run(root / "beta", beta_records(), config={"agent": "beta", "k": 1})]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return hand_built_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def tables(runs: list[Path]) -> dict[str, pd.DataFrame]:
    return summarize(load_episodes(runs), strict=True, n_boot=300, seed=0)


def row(df: pd.DataFrame, **where: Any) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for k, v in where.items():
        mask &= df[k] == v
    hits = df[mask]
    assert len(hits) == 1, (where, hits)
    return hits.iloc[0]


# ------------------------------------------------------------------------------------------

def test_load_episodes(runs: list[Path]) -> None:
    df = load_episodes(runs)
    assert len(df) == 18  # the torn last line of alpha is ignored
    assert sorted(df["system"].unique()) == ["alpha", "beta (m1)"]
    assert "trajectory" not in df.columns and "trajectory" in load_episodes(runs, trajectories=True).columns
    assert df.attrs["runs"][str(runs[1])] == {"agent": "beta", "k": 1}
    assert df.attrs["runs"][str(runs[0])] is None


def test_load_episodes_last_record_wins_and_labels_unique(tmp_path: Path) -> None:
    recs = alpha_records()
    retried = episode("runA", "alpha", None, "p3", "noise", 1, "ok")
    d1 = write_run(tmp_path / "a1", recs + [retried])
    d2 = write_run(tmp_path / "a2", [episode("runX", "alpha", None, "p1", "clean", 0, "ok")])
    df = load_episodes([d1, d2])
    got = df[(df["task_id"] == "p3-noise") & (df["trial"] == 1)]
    assert len(got) == 1 and got.iloc[0]["termination"] == "abstained"
    assert sorted(df["system"].unique()) == ["alpha [runA]", "alpha [runX]"]


def test_load_episodes_errors_are_actionable(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="ehrgym eval run"):
        load_episodes(tmp_path / "empty")
    with pytest.raises(ResultsError, match="does not exist"):
        load_episodes(tmp_path / "nope")
    with pytest.raises(ResultsError):
        load_episodes([])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "episodes.jsonl").write_text('{"run_id": "x"}\n')
    with pytest.raises(ResultsError, match="record 1"):
        load_episodes(bad)


def test_overview_counts_infrastructure_errors(tables: dict[str, pd.DataFrame]) -> None:
    a = row(tables["overview"], system="alpha")
    assert (a["episodes"], a["valid_episodes"], a["infra_errors"], a["tasks"], a["pairs"], a["max_trials"]) == \
        (12, 11, 1, 6, 3, 2)
    b = row(tables["overview"], system="beta (m1)")
    assert (b["episodes"], b["infra_errors"], b["model"]) == (6, 1, "m1")


def test_clean_noise_pair_and_drop(tables: dict[str, pd.DataFrame]) -> None:
    a = row(tables["clean_vs_noise"], system="alpha")
    # task rates: clean p1 1, p2 1, p3 .5 ; noise p1 .5, p2 0, p3 1 (trial 1 was an infra error)
    assert a["clean"] == pytest.approx(2.5 / 3)
    assert a["noise"] == pytest.approx(1.5 / 3)
    # pairs: p1 both right on trial 1 only (.5), p2 never, p3 trial 0 only counts (clean wrong) -> 0
    assert a["pair"] == pytest.approx(0.5 / 3)
    assert a["drop_abs"] == pytest.approx(1 / 3)
    assert a["drop_rel"] == pytest.approx(0.4)
    assert (a["n_pairs"], a["n_clean"], a["n_noise"]) == (3, 3, 3)
    for name in ("clean", "noise", "pair", "drop_abs"):
        assert a[f"{name}_ci_low"] <= a[name] + 1e-12 <= a[f"{name}_ci_high"] + 2e-12
    b = row(tables["clean_vs_noise"], system="beta (m1)")
    # clean: step limit, ok, ok ; noise: agent error, ok, (infra: excluded) ; pairs defined: p1 (0), p2 (1)
    assert (b["clean"], b["noise"], b["pair"]) == pytest.approx((2 / 3, 0.5, 0.5))
    assert b["n_noise"] == 2


def test_breakdowns(tables: dict[str, pd.DataFrame]) -> None:
    sub = tables["by_subtype"]
    dup = row(sub, system="alpha", noise_subtype="duplicate_records")
    assert (dup["clean"], dup["noise"], dup["pair"], dup["drop_abs"]) == pytest.approx((1, .5, .5, .5))
    fp = row(sub, system="alpha", noise_subtype="false_premise")
    assert (fp["clean"], fp["noise"], fp["drop_abs"], fp["drop_rel"]) == pytest.approx((.5, 1, -.5, -1))
    rec = row(tables["by_noise_level"], system="alpha", noise_level="record")
    assert (rec["clean"], rec["noise"], rec["pair"]) == pytest.approx((1, .25, .25))
    labs = row(tables["by_intent"], system="alpha", intent="labs")
    assert (labs["clean"], labs["noise"], labs["pair"], labs["n_pairs"]) == pytest.approx((.75, .75, .25, 2))
    pop = row(tables["by_level"], system="alpha", level="population")
    assert (pop["clean"], pop["noise"]) == (1.0, 0.0)


def test_strict_vs_lenient(tables: dict[str, pd.DataFrame], runs: list[Path]) -> None:
    n = row(tables["strict_vs_lenient"], system="alpha", variant="noise")
    # p2-noise trial 1 abstained with the wrong reason: lenient success
    assert (n["strict"], n["lenient"]) == pytest.approx((0.5, 2 / 3))
    lenient = summarize(load_episodes(runs), strict=False, n_boot=50, seed=0, tables=["clean_vs_noise"])
    assert row(lenient["clean_vs_noise"], system="alpha")["noise"] == pytest.approx(2 / 3)


def test_abstention(tables: dict[str, pd.DataFrame]) -> None:
    a = row(tables["abstention"], system="alpha", variant="all")
    # abstain-expected valid episodes: p2n x2, p3n x1 ; abstentions: p3c t0, p2n t1, p3n t0 ; correct: p2n t1, p3n t0
    assert (a["abstain_expected"], a["abstentions"], a["correct_abstentions"]) == (3, 3, 2)
    assert (a["precision"], a["recall"], a["f1"]) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert a["reason_accuracy"] == pytest.approx(0.5)
    assert a["over_abstention"] == pytest.approx(1 / 8)
    c = row(tables["abstention"], system="alpha", variant="clean")
    assert c["over_abstention"] == pytest.approx(1 / 6) and math.isnan(c["precision"] * 0 + c["recall"])


def test_pass_k(tables: dict[str, pd.DataFrame]) -> None:
    pk = tables["pass_k"]
    k1 = row(pk, system="alpha", variant="all", k=1)
    assert (k1["pass_at_k"], k1["pass_hat_k"], k1["n_undefined"]) == pytest.approx((4 / 6, 4 / 6, 0))
    k2 = row(pk, system="alpha", variant="all", k=2)
    # p3-noise has one valid trial: undefined at k=2 and left out
    assert (k2["pass_at_k"], k2["pass_hat_k"], k2["n_defined"], k2["n_undefined"]) == pytest.approx((.8, .4, 5, 1))
    assert set(pk[pk["system"] == "beta (m1)"]["k"]) == {1}
    b = row(pk, system="beta (m1)", variant="noise", k=1)
    assert (b["pass_at_k"], b["n_undefined"]) == pytest.approx((0.5, 1))


@pytest.mark.parametrize("c,expected", [("0", 4 / 6), ("5", -1 / 6), ("10", -1.0), ("N", -2 / 6)])
def test_reliability_score(tables: dict[str, pd.DataFrame], c: str, expected: float) -> None:
    # per task mean score: p1c 1, p1n (1-c)/2, p2c 1, p2n -c/2, p3c .5, p3n 1 -> (4 - c)/6 ; N = 6 tasks
    assert row(tables["reliability"], system="alpha", variant="all", c=c)["rs"] == pytest.approx(expected)


def test_trials_and_variance(tables: dict[str, pd.DataFrame]) -> None:
    t = tables["trials"]
    assert row(t, system="alpha", variant="all", trial=0)["success"] == pytest.approx(0.5)
    assert row(t, system="alpha", variant="all", trial=1)["success"] == pytest.approx(0.8)
    v = row(tables["trial_variance"], system="alpha", variant="all")
    assert (v["mean"], v["std"], v["n_trials"]) == pytest.approx((0.65, 0.3 / math.sqrt(2), 2))
    assert math.isnan(row(tables["trial_variance"], system="beta (m1)", variant="all")["std"])


def test_mcnemar(tables: dict[str, pd.DataFrame]) -> None:
    m = row(tables["mcnemar"], system="alpha")
    # majority outcomes: p1 clean only, p2 clean only, p3 noise only
    assert (m["n_pairs"], m["clean_only"], m["noise_only"], m["both_correct"], m["both_wrong"]) == (3, 2, 1, 0, 0)
    assert (m["p_exact"], m["statistic"]) == (1.0, 0.0)


def test_failure_modes(tables: dict[str, pd.DataFrame], runs: list[Path]) -> None:
    fm = tables["failure_modes"]
    got = {r["mode"]: r["count"] for _, r in fm[(fm["system"] == "alpha") & (fm["variant"] == "all")].iterrows()}
    assert got == {"false_abstention": 1, "missed_abstention": 1, "wrong_reason": 1, "step_limit": 0,
                   "agent_error": 0, "sql_error": 1, "wrong_value": 0}
    assert list(got) == list(FAILURE_MODES)
    beta = fm[(fm["system"] == "beta (m1)") & (fm["variant"] == "all") & (fm["count"] > 0)]
    assert dict(zip(beta["mode"], beta["count"])) == {"step_limit": 1, "agent_error": 1}
    assert row(fm, system="alpha", variant="all", mode="sql_error")["share_of_failures"] == pytest.approx(0.25)
    df = load_episodes(runs, trajectories=True)
    modes = classify_failures(df)
    assert modes.notna().sum() == 6 and modes[df["termination"] == "infrastructure_error"].isna().all()
    ex = failure_examples(df, per_mode=1)
    assert len(ex) == 6 and "trajectory" in ex.columns


def test_terminations_and_cost(tables: dict[str, pd.DataFrame]) -> None:
    t = tables["terminations"]
    assert row(t, system="alpha", termination="infrastructure_error")["count"] == 1
    assert row(t, system="beta (m1)", termination="step_limit")["count"] == 1
    c = row(tables["cost"], system="alpha")
    assert (c["prompt_tokens"], c["completion_tokens"], c["cost_usd"]) == pytest.approx((200, 20, 0.02))
    assert (c["wall_seconds_median"], c["wall_seconds_total"]) == pytest.approx((6.5, 78.0))


def test_bootstrap_is_seeded(tmp_path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(5)
    recs = []
    spec = ("labs", "patient", "value", "unit_mismatch", "answer", None)
    for i in range(40):
        for variant, p in (("clean", 0.8), ("noise", 0.4)):
            recs.append(episode("runR", "rand", None, f"q{i}", variant, 0, "ok" if rng.random() < p else "wrong",
                                spec=spec))
    df = load_episodes(write_run(tmp_path / "r", recs))
    a = summarize(df, n_boot=200, seed=11, tables=["clean_vs_noise", "by_subtype"])
    b = summarize(df, n_boot=200, seed=11, tables=["clean_vs_noise", "by_subtype"])
    c = summarize(df, n_boot=200, seed=12, tables=["clean_vs_noise"])
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name])
    ci = ["clean_ci_low", "clean_ci_high", "noise_ci_low", "noise_ci_high", "drop_abs_ci_low", "drop_abs_ci_high"]
    assert a["clean_vs_noise"][ci].to_numpy().tolist() != c["clean_vs_noise"][ci].to_numpy().tolist()
    r = a["clean_vs_noise"].iloc[0]
    assert r["noise_ci_low"] < r["noise"] < r["noise_ci_high"] and r["drop_abs_ci_low"] < r["drop_abs"]


def test_summarize_errors(runs: list[Path]) -> None:
    df = load_episodes(runs)
    with pytest.raises(ResultsError, match="unknown summary tables"):
        summarize(df, tables=["nope"])
    with pytest.raises(ResultsError, match="no episodes"):
        summarize(df.iloc[0:0])


def test_render_summary(tables: dict[str, pd.DataFrame]) -> None:
    text = render_summary(tables)
    assert "## clean_vs_noise" in text and "83.3 [" in text  # alpha clean 83.3%
    assert "undefined" in text  # beta's trial std and pass^k undefined cases are shown as such
    assert text == render_summary(tables)


# ------------------------------------------------------------------------------------------
# Property tests on random runs
# ------------------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

OUTCOMES = ("ok", "wrong", "abstain:insufficient_evidence", "step_limit", "infra")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(sorted(PAIRS)), st.lists(st.sampled_from(OUTCOMES), min_size=2, max_size=4),
                          st.lists(st.sampled_from(OUTCOMES), min_size=2, max_size=4)), min_size=1, max_size=6,
                unique_by=lambda t: t[0]))
def test_summary_invariants_on_random_runs(tmp_path_factory: pytest.TempPathFactory, spec) -> None:
    recs = [episode("r", "x", None, pair, variant, trial, o)
            for pair, clean, noise in spec for variant, outs in (("clean", clean), ("noise", noise))
            for trial, o in enumerate(outs)]
    df = load_episodes(write_run(tmp_path_factory.mktemp("rand"), recs))
    t = summarize(df, n_boot=30, seed=0, tables=["clean_vs_noise", "pass_k", "reliability", "abstention"])
    valid = df[df["termination"] != "infrastructure_error"]
    for variant in ("clean", "noise"):
        per_task = valid[valid["variant"] == variant].groupby("task_id")["success_strict"].mean()
        got = t["clean_vs_noise"].iloc[0][variant]
        assert (math.isnan(got) and per_task.empty) or got == pytest.approx(per_task.mean())
    row_ = t["clean_vs_noise"].iloc[0]
    if not math.isnan(row_["drop_abs"]):
        assert row_["drop_abs"] == pytest.approx(row_["clean"] - row_["noise"])
    for name in ("clean", "noise", "pair"):
        if not math.isnan(row_[name]) and not math.isnan(row_[f"{name}_ci_low"]):
            assert row_[f"{name}_ci_low"] - 1e-12 <= row_[name] <= row_[f"{name}_ci_high"] + 1e-12
    pk = t["pass_k"]
    for _, g in pk.groupby("variant"):
        g = g.sort_values("k").dropna(subset=["pass_at_k"])
        assert ((g["pass_hat_k"] >= -1e-12) & (g["pass_hat_k"] <= g["pass_at_k"] + 1e-12) & (g["pass_at_k"] <= 1 + 1e-12)).all()
    rs = t["reliability"].set_index(["variant", "c"])["rs"]
    assert rs[("all", "0")] >= rs[("all", "5")] >= rs[("all", "10")]  # larger penalties never raise RS
    ab = t["abstention"].set_index("variant")
    for v in ("clean", "noise", "all"):
        for col in ("precision", "recall", "over_abstention"):
            x = ab.loc[v, col]
            assert math.isnan(x) or 0 <= x <= 1
