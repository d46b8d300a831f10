"""Estimators of ehrgym.eval.stats against brute force and hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ehrgym.eval import stats


def brute_force(outcomes: list[bool], k: int) -> tuple[float, float]:
    """pass@k and pass^k by enumerating every k-subset of the trials."""
    subsets = list(itertools.combinations(outcomes, k))
    at = sum(any(s) for s in subsets) / len(subsets)
    hat = sum(all(s) for s in subsets) / len(subsets)
    return at, hat


@pytest.mark.parametrize("n", range(1, 8))
def test_estimators_equal_brute_force_enumeration(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            at, hat = brute_force(outcomes, k)
            assert stats.pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12)
            assert stats.pass_hat_k(n, c, k) == pytest.approx(hat, abs=1e-12)


def test_estimators_undefined_when_fewer_trials_than_k() -> None:
    assert math.isnan(stats.pass_at_k(3, 2, 4))
    assert math.isnan(stats.pass_hat_k(3, 3, 4))
    arr = stats.pass_hat_k_array(np.array([4, 3, 4]), np.array([4, 3, 2]), 4)
    assert arr[0] == 1.0 and math.isnan(arr[1]) and arr[2] == 0.0
    assert stats.mean_defined(arr) == (0.5, 2, 1)
    mean, n_def, n_undef = stats.mean_defined(np.array([math.nan]))
    assert math.isnan(mean) and (n_def, n_undef) == (0, 1)


def test_estimators_hand_values() -> None:
    # n=4, c=2, k=2: C(2,2)/C(4,2) = 1/6 ; 1 - C(2,2)/C(4,2) = 5/6
    assert stats.pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert stats.pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert stats.pass_at_k(4, 0, 3) == 0.0 and stats.pass_hat_k(4, 4, 4) == 1.0


def test_invalid_counts_raise() -> None:
    with pytest.raises(ValueError):
        stats.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        stats.pass_hat_k(3, 1, 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 8)), min_size=1, max_size=20))
def test_pass_k_properties(tasks: list[tuple[int, int]]) -> None:
    n = np.array([a for a, _ in tasks])
    c = np.array([min(b, a) for a, b in tasks])
    prev_at, prev_hat = -1.0, 2.0
    for k in range(1, int(n.min()) + 1):  # every task defined
        at = stats.pass_at_k_array(n, c, k).mean()
        hat = stats.pass_hat_k_array(n, c, k).mean()
        assert 0.0 <= hat <= at + 1e-12 <= 1.0 + 1e-12
        assert at >= prev_at - 1e-12 and hat <= prev_hat + 1e-12  # pass@k grows, pass^k shrinks with k
        prev_at, prev_hat = at, hat
    assert stats.pass_at_k_array(n, c, 1) == pytest.approx(c / n)


def test_reliability_scores() -> None:
    success = np.array([True, False, False, False, True])
    answered = np.array([True, True, False, True, False])
    assert stats.reliability_scores(success, answered, 0).tolist() == [1, 0, 0, 0, 1]
    assert stats.reliability_scores(success, answered, 10).tolist() == [1, -10, 0, -10, 1]
    with pytest.raises(ValueError):
        stats.reliability_scores(success, answered, -1)


def test_mcnemar_hand_computed() -> None:
    r = stats.mcnemar(10, 2)
    # exact: 2 * P(X <= 2 | Binomial(12, 1/2)) = 2 * (1 + 12 + 66) / 4096
    assert r.p_exact == pytest.approx(158 / 4096)
    assert r.statistic == pytest.approx(49 / 12)  # (|10-2|-1)^2 / 12
    assert r.p_chi2 == pytest.approx(0.0433, abs=1e-4)
    assert stats.mcnemar(3, 3).p_exact == 1.0 and stats.mcnemar(3, 3).statistic == 0.0
    none = stats.mcnemar(0, 0)
    assert (none.p_exact, none.p_chi2, none.statistic) == (1.0, 1.0, 0.0)
    assert stats.mcnemar(0, 6).p_exact == pytest.approx(2 / 64)


def _mean_stat(t):
    return {"mean": t["x"] / t["n"]}


def test_cluster_bootstrap_deterministic_and_seed_dependent() -> None:
    rng = np.random.default_rng(1)
    x = rng.random(50)  # continuous values: intervals of different seeds cannot coincide by grid effects
    sums = {"x": x, "n": np.ones_like(x)}
    a = stats.cluster_bootstrap(sums, _mean_stat, n_boot=500, seed=3)
    b = stats.cluster_bootstrap(sums, _mean_stat, n_boot=500, seed=3)
    c = stats.cluster_bootstrap(sums, _mean_stat, n_boot=500, seed=4)
    assert a == b and a != c
    est, lo, hi = a["mean"]
    assert est == pytest.approx(x.mean()) and lo < est < hi
    # chunking must not change the draws' distribution shape enough to break the interval
    d = stats.cluster_bootstrap(sums, _mean_stat, n_boot=500, seed=3, chunk=500)
    assert d["mean"][0] == est


def test_cluster_bootstrap_degenerate_cases() -> None:
    ones = stats.cluster_bootstrap({"x": np.ones(5), "n": np.ones(5)}, _mean_stat, n_boot=200, seed=0)
    assert ones["mean"] == (1.0, 1.0, 1.0)
    # two clusters 0 and 1: replicate means are 0, .5, 1 -> 95% interval [0, 1]
    two = stats.cluster_bootstrap({"x": np.array([0.0, 1.0]), "n": np.ones(2)}, _mean_stat, n_boot=2000, seed=0)
    assert two["mean"] == (0.5, 0.0, 1.0)
    empty = stats.cluster_bootstrap({"x": np.zeros(0), "n": np.zeros(0)}, _mean_stat, n_boot=100, seed=0)
    assert all(math.isnan(v) for v in empty["mean"])
    with pytest.raises(ValueError):
        stats.cluster_bootstrap({"x": np.ones(3), "n": np.ones(4)}, _mean_stat)


def test_percentile_ci_ignores_nan() -> None:
    assert stats.percentile_ci(np.array([np.nan, 1.0, 1.0])) == (1.0, 1.0)
    assert all(math.isnan(v) for v in stats.percentile_ci(np.array([np.nan])))
    with pytest.raises(ValueError):
        stats.percentile_ci(np.array([1.0]), level=1.5)
