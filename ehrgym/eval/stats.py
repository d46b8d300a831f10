"""Pure statistical estimators used by the metrics (docs/architecture.md §5).

Everything here is a pure function of its arguments: no I/O, no global state, randomness only
from an explicit ``seed`` (``numpy.random.Generator``).

- :func:`pass_at_k`, :func:`pass_hat_k`: the unbiased estimators over ``n`` trials with ``c``
  successes (``nan`` — *undefined*, not zero — when ``n < k``).
- :func:`reliability_scores`: per-episode scores of the EHRSQL-2024 reliability score RS(c).
- :func:`mcnemar`: McNemar's test on discordant pair counts (exact binomial and chi² with
  continuity correction), via ``scipy.stats``.
- :func:`cluster_bootstrap`: seeded percentile bootstrap that resamples *clusters* (tasks or
  Clean–Noise pairs), never episodes, for any statistic built from per-cluster sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
from scipy import stats as _st

__all__ = [
    "pass_at_k", "pass_hat_k", "pass_at_k_array", "pass_hat_k_array", "mean_defined",
    "reliability_scores", "McNemarResult", "mcnemar", "cluster_bootstrap", "percentile_ci",
]


# --------------------------------------------------------------------------------------------
# pass@k / pass^k
# --------------------------------------------------------------------------------------------

def _check_counts(n: int, c: int, k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k trials drawn without replacement from n succeeds) = 1 − C(n−c,k)/C(n,k).

    ``nan`` (undefined) when ``n < k``.
    """
    _check_counts(n, c, k)
    if n < k:
        return math.nan
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: P(all of k trials drawn without replacement from n succeed) = C(c,k)/C(n,k).

    ``nan`` (undefined) when ``n < k``.
    """
    _check_counts(n, c, k)
    if n < k:
        return math.nan
    return math.comb(c, k) / math.comb(n, k)


def _vectorise(fn: Callable[[int, int, int], float], n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if n.shape != c.shape:
        raise ValueError(f"n and c must have the same shape, got {n.shape} and {c.shape}")
    out = np.empty(n.shape, dtype=float)
    if n.size == 0:
        return out
    pairs, inverse = np.unique(np.stack([n.ravel(), c.ravel()], axis=1), axis=0, return_inverse=True)
    values = np.array([fn(int(a), int(b), k) for a, b in pairs], dtype=float)
    out.ravel()[:] = values[inverse.ravel()]
    return out


def pass_at_k_array(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Element-wise :func:`pass_at_k` (``nan`` where ``n < k``)."""
    return _vectorise(pass_at_k, n, c, k)


def pass_hat_k_array(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Element-wise :func:`pass_hat_k` (``nan`` where ``n < k``)."""
    return _vectorise(pass_hat_k, n, c, k)


def mean_defined(values: np.ndarray) -> tuple[float, int, int]:
    """Mean over the defined (non-nan) values: ``(mean, n_defined, n_undefined)``; mean is nan if none."""
    values = np.asarray(values, dtype=float)
    defined = ~np.isnan(values)
    n_def = int(defined.sum())
    mean = float(values[defined].mean()) if n_def else math.nan
    return mean, n_def, int(values.size - n_def)


# --------------------------------------------------------------------------------------------
# Reliability score RS(c) (EHRSQL-2024)
# --------------------------------------------------------------------------------------------

def reliability_scores(success: np.ndarray, answered: np.ndarray, penalty: float) -> np.ndarray:
    """Per-episode RS(c) score: +1 a success (correct answer or correct abstention); −c a wrong
    *answer* (including answering an unanswerable task); 0 otherwise (abstaining on an answerable
    task, or no answer at all). RS(c) of a system is the mean of these scores over tasks.
    """
    success = np.asarray(success, dtype=bool)
    answered = np.asarray(answered, dtype=bool)
    if penalty < 0:
        raise ValueError(f"the penalty c must be >= 0, got {penalty}")
    return np.where(success, 1.0, np.where(answered, -float(penalty), 0.0))


# --------------------------------------------------------------------------------------------
# McNemar
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class McNemarResult:
    b: int              # discordant: first condition correct, second wrong (e.g. Clean only)
    c: int              # discordant: second condition correct, first wrong (e.g. Noise only)
    statistic: float    # chi² with continuity correction, (|b−c|−1)²/(b+c); 0 when b+c = 0
    p_chi2: float       # chi²(1) upper tail of ``statistic``
    p_exact: float      # two-sided exact binomial test of b ~ Binomial(b+c, 1/2)


def mcnemar(b: int, c: int) -> McNemarResult:
    """McNemar's test from the two discordant counts (p = 1 when there is no discordant pair)."""
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return McNemarResult(b, c, 0.0, 1.0, 1.0)
    statistic = max(abs(b - c) - 1, 0) ** 2 / n
    p_chi2 = float(_st.chi2.sf(statistic, df=1))
    p_exact = float(_st.binomtest(b, n, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(b, c, float(statistic), p_chi2, min(p_exact, 1.0))


# --------------------------------------------------------------------------------------------
# Cluster bootstrap
# --------------------------------------------------------------------------------------------

def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the finite bootstrap samples (nan, nan when there are none)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    samples = np.asarray(samples, dtype=float)
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return math.nan, math.nan
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def cluster_bootstrap(
    sums: Mapping[str, np.ndarray],
    statistic: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    chunk: int = 250,
) -> dict[str, tuple[float, float, float]]:
    """Percentile bootstrap over clusters.

    ``sums`` maps names to per-cluster arrays of shape ``(P,)`` (e.g. the summed success rates
    and the task counts of each Clean–Noise pair). Each replicate draws ``P`` clusters with
    replacement; ``statistic`` receives the replicate totals (arrays of shape ``(B,)``) and
    returns named statistics of the same shape. Returns ``{name: (estimate, ci_low, ci_high)}``
    where the estimate is ``statistic`` on the original sample. Deterministic for a ``seed``.
    """
    arrays = {name: np.asarray(v, dtype=float) for name, v in sums.items()}
    sizes = {a.shape for a in arrays.values()}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1:
        raise ValueError(f"all per-cluster arrays must be 1-D and of the same length, got {sizes}")
    n_clusters = next(iter(sizes))[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        point = {k: float(np.asarray(v).reshape(-1)[0])
                 for k, v in statistic({n: a.sum(keepdims=True) for n, a in arrays.items()}).items()}
    if n_clusters == 0 or n_boot <= 0:
        return {k: (v, math.nan, math.nan) for k, v in point.items()}
    rng = np.random.default_rng(seed)
    matrix = np.stack([arrays[n] for n in arrays], axis=1)  # (P, m)
    names = list(arrays)
    collected: dict[str, list[np.ndarray]] = {k: [] for k in point}
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        idx = rng.integers(0, n_clusters, size=(b, n_clusters))
        # how often each cluster was drawn in each replicate, then one matrix product
        flat = (idx + (np.arange(b) * n_clusters)[:, None]).ravel()
        counts = np.bincount(flat, minlength=b * n_clusters).reshape(b, n_clusters).astype(float)
        totals = counts @ matrix  # (b, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = statistic({n: totals[:, j] for j, n in enumerate(names)})
        for k in collected:
            collected[k].append(np.asarray(out[k], dtype=float))
        done += b
    result = {}
    for k, v in point.items():
        lo, hi = percentile_ci(np.concatenate(collected[k]), level)
        result[k] = (v, lo, hi)
    return result
