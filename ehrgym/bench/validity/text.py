"""Text-only shortcut probe: can the question text alone tell a clean question from its noisy twin,
or an answerable noisy question from one that must be abstained on?

A bag of word 1–2-grams and character 3–5-grams (TF-IDF, L2-normalised) feeds an L2-regularised
logistic regression (numpy/scipy, no other dependency). It is trained on the ``train`` split and
scored on the ``test`` split of a built benchmark; the regularisation strength is chosen by
cross-validation on ``train`` with folds grouped by pair, so twins never straddle a fold. A valid
benchmark keeps every accuracy near its chance level:

* ``clean_vs_noise``: every question of every pair, label clean/noisy (chance 0.5);
* ``clean_vs_noise_query``: the same, trained and tested on query-level pairs only (the noise
  lives in the question there, so this is the sharp test);
* ``answer_vs_abstain``: noisy questions only, label the expected outcome (chance: the majority
  rate, the share of the test split's more frequent outcome); ``answer_vs_abstain_query`` the
  same on query-level pairs only (lexical variation is answered, the other four abstained on).

``window_lookup``: the years a temporal-mismatch pair names, looked up over the other pairs (chance 0.5; see
:func:`window_lookup`).

``text_validity(tasks)`` returns all five with their test sizes and, for the two clean/noisy
probes, the accuracy on each subtype's pairs, and each accuracy's Wilson 95 % interval (``interval95``: with
~500 query-level test questions it is ±0.04 wide, so builds that differ in a few questions move the
accuracy by ±0.02). Deterministic: same tasks, same numbers.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from scipy import sparse
from scipy.optimize import minimize

from ehrgym.bench.task import Task

WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?|[^\sa-z0-9]")
C_GRID: tuple[float, ...] = (1.0, 10.0, 100.0)
FOLDS = 3


@lru_cache(maxsize=1 << 16)
def _features(text: str) -> tuple[str, ...]:
    """Word 1–2-grams and character 3–5-grams (inside word boundaries) of one question (cached: the probes
    read the same questions several times, and a record-level twin's question is its clean twin's)."""
    low = text.lower()
    words = WORD.findall(low)
    feats = [f"w:{w}" for w in words]
    feats += [f"b:{a} {b}" for a, b in zip(words, words[1:])]
    for w in low.split():
        padded = f" {w} "
        for n in range(3, 6):
            feats += [f"c:{padded[i:i + n]}" for i in range(len(padded) - n + 1)]
    return tuple(feats)


@dataclass
class TextModel:
    """A fitted TF-IDF vocabulary and logistic-regression weights."""

    vocab: dict[str, int]
    idf: np.ndarray
    weights: np.ndarray
    bias: float

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        x = _matrix([_features(t) for t in texts], self.vocab, self.idf)
        return (x @ self.weights + self.bias > 0).astype(int)


def _vocabulary(docs: Sequence[Sequence[str]]) -> tuple[dict[str, int], np.ndarray]:
    df = Counter(f for d in docs for f in set(d))
    names = sorted(f for f, n in df.items() if n >= 2)
    n = len(docs)
    return {f: i for i, f in enumerate(names)}, np.array([math.log((1 + n) / (1 + df[f])) + 1.0 for f in names])


def _unique_matrix(docs: Sequence[Sequence[str]], vocab: dict[str, int], idf: np.ndarray
                   ) -> tuple[sparse.csr_matrix, np.ndarray]:
    """One TF-IDF row per distinct document, and which row each document is (a record-level twin's question is
    its clean twin's: the same row)."""
    unique: dict[Sequence[str], int] = {}
    which = np.array([unique.setdefault(d, len(unique)) for d in docs], dtype=np.int64)
    ids = [np.array([vocab.get(f, -1) for f in d], dtype=np.int64) for d in unique]
    rows = np.repeat(np.arange(len(ids)), [len(i) for i in ids])
    cols = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    known = cols >= 0
    # duplicates summed: term counts, then sublinear TF × IDF
    x = sparse.csr_matrix((np.ones(int(known.sum())), (rows[known], cols[known])), shape=(len(unique), len(vocab)))
    x.sum_duplicates()
    x.data = (1.0 + np.log(x.data)) * idf[x.indices]
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sparse.csr_matrix(sparse.diags(1.0 / norms) @ x), which


def _matrix(docs: Sequence[Sequence[str]], vocab: dict[str, int], idf: np.ndarray) -> sparse.csr_matrix:
    x, which = _unique_matrix(docs, vocab, idf)
    return sparse.csr_matrix(x[which])


def _logreg(x: sparse.csr_matrix, total: np.ndarray, positive: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (``C`` as in the usual formulation), Newton-CG, on distinct rows:
    row i stands for ``total[i]`` examples of which ``positive[i]`` are labelled 1 (the same loss as the
    examples one by one, with fewer rows to multiply)."""
    d = x.shape[1]
    xt = sparse.csr_matrix(x.T)

    def sigmoid(z: np.ndarray) -> np.ndarray:
        return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        z = x @ w + b
        nll = float(np.sum(total * np.logaddexp(0.0, z) - positive * z))
        g = total * sigmoid(z) - positive
        grad = np.empty(d + 1)
        grad[:d] = c * (xt @ g) + w
        grad[d] = c * g.sum()
        return c * nll + 0.5 * float(w @ w), grad

    def hessp(theta: np.ndarray, v: np.ndarray) -> np.ndarray:
        p = sigmoid(x @ theta[:d] + theta[d])
        sv = total * p * (1.0 - p) * (x @ v[:d] + v[d])
        out = np.empty(d + 1)
        out[:d] = c * (xt @ sv) + v[:d]
        out[d] = c * sv.sum()
        return out

    res = minimize(loss, np.zeros(d + 1), jac=True, hessp=hessp, method="Newton-CG", options={"maxiter": 100})
    return res.x[:d], float(res.x[d])


def _fit_rows(xu: sparse.csr_matrix, which: np.ndarray, y: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    """``_logreg`` on the examples ``which`` (rows of ``xu``) labelled ``y``, identical rows merged."""
    used, inverse = np.unique(which, return_inverse=True)
    total = np.bincount(inverse, minlength=len(used)).astype(float)
    positive = np.bincount(inverse, weights=y, minlength=len(used))
    return _logreg(sparse.csr_matrix(xu[used]), total, positive, c)


def _group_folds(groups: Sequence[str], k: int) -> np.ndarray:
    import hashlib

    return np.array([int(hashlib.sha256(g.encode()).hexdigest()[:8], 16) % k for g in groups])


def fit_probe(texts: Sequence[str], labels: Sequence[int], groups: Sequence[str]) -> TextModel:
    """The model with the regularisation strength that cross-validates best (folds by ``groups``)."""
    vocab, idf = _vocabulary([_features(t) for t in texts])
    xu, which = _unique_matrix([_features(t) for t in texts], vocab, idf)
    y = np.asarray(labels, dtype=float)
    folds = _group_folds(groups, FOLDS)
    best_c, best = C_GRID[0], -1
    if len(set(labels)) > 1:
        for c in C_GRID:
            hits = 0
            for f in range(FOLDS):
                tr, te = np.flatnonzero(folds != f), np.flatnonzero(folds == f)
                if not len(te) or len(set(y[tr])) < 2:
                    continue
                w, b = _fit_rows(xu, which[tr], y[tr], c)
                hits += int(((xu[which[te]] @ w + b > 0).astype(float) == y[te]).sum())
            if hits > best:
                best_c, best = c, hits
    w, b = _fit_rows(xu, which, y, best_c)
    return TextModel(vocab, idf, w, b)


def interval95(hits: int, n: int) -> list[float]:
    """Wilson 95 % interval of an accuracy of ``hits`` of ``n`` test questions: how far another build of the
    same size could land by chance (twins are not independent questions, so it is if anything narrow)."""
    from scipy.stats import binomtest

    ci = binomtest(int(hits), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
    return [round(float(ci.low), 4), round(float(ci.high), 4)]


def _subtype(t: Task) -> str:
    return t.noise.subtype if t.noise else "clean"


def _clean_vs_noise(tasks: list[Task], keep: Callable[[str], bool]) -> dict[str, Any]:
    pair_sub = {t.pair_id: t.noise.subtype for t in tasks if t.noise is not None}
    chosen = [t for t in tasks if keep(pair_sub.get(t.pair_id, ""))]
    train = [t for t in chosen if t.split == "train"]
    test = [t for t in chosen if t.split == "test"]
    out: dict[str, Any] = {"n_train": len(train), "n_test": len(test), "chance": 0.5}
    if not train or not test or len({t.variant for t in train}) < 2:
        out["accuracy"] = None
        return out
    model = fit_probe([t.question for t in train], [int(t.variant == "noise") for t in train],
                      [t.pair_id for t in train])
    pred = model.predict([t.question for t in test])
    hit = pred == np.array([int(t.variant == "noise") for t in test])
    out["accuracy"] = round(float(hit.mean()), 4)
    out["interval95"] = interval95(int(hit.sum()), len(hit))
    by: dict[str, list[bool]] = defaultdict(list)
    for t, h in zip(test, hit):
        by[pair_sub[t.pair_id]].append(bool(h))
    out["by_subtype"] = {s: round(sum(v) / len(v), 4) for s, v in sorted(by.items())}
    return out


def _answer_vs_abstain(tasks: list[Task], keep: Callable[[str], bool]) -> dict[str, Any]:
    noisy = [t for t in tasks if t.variant == "noise" and t.noise is not None and keep(t.noise.subtype)]
    train = [t for t in noisy if t.split == "train"]
    test = [t for t in noisy if t.split == "test"]
    out: dict[str, Any] = {"n_train": len(train), "n_test": len(test)}
    if not train or not test:
        out["accuracy"] = out["majority"] = None
        return out
    y_train = [int(t.expected.is_abstain) for t in train]
    y_test = np.array([int(t.expected.is_abstain) for t in test])
    share = float(y_test.mean())
    out["majority"] = round(max(share, 1.0 - share), 4)  # the test split's majority-outcome rate
    if len(set(y_train)) < 2:
        hit = y_test == y_train[0]
        out["accuracy"] = round(float(hit.mean()), 4)
        out["interval95"] = interval95(int(hit.sum()), len(hit))
        return out
    model = fit_probe([t.question for t in train], y_train, [t.pair_id for t in train])
    hit = model.predict([t.question for t in test]) == y_test
    out["accuracy"] = round(float(hit.mean()), 4)
    out["interval95"] = interval95(int(hit.sum()), len(hit))
    return out


YEAR = re.compile(r"(?<![0-9])(2[0-9]{3})(?![0-9])")


def window_lookup(tasks: Iterable[Any]) -> dict[str, Any]:
    """Can the years a temporal-mismatch pair's questions name tell its twins apart, without reading anything else?

    Each year is counted over the other pairs' twins (noisy +1, clean −1; leave-one-pair-out, so a policy that has
    seen every other pair of the benchmark); a twin is called noisy when its years sum above 0, clean below, a coin
    at 0. Chance 0.5: wrong years must be the years clean questions ask about, not the quiet years a cohort happens to
    be empty in (what a policy trained on the benchmark would otherwise learn by heart)."""
    years: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for t in tasks:
        if t.variant == "clean" or (t.noise is not None and t.noise.subtype == "temporal_mismatch"):
            years[t.pair_id][t.variant] = set(YEAR.findall(t.question))
    pairs = {p: v for p, v in years.items() if set(v) == {"clean", "noise"}}
    votes: Counter = Counter()
    for v in pairs.values():
        votes.update({y: 1 for y in v["noise"]})
        votes.subtract({y: 1 for y in v["clean"]})
    hits = 0.0
    for v in pairs.values():
        own = Counter({y: 1 for y in v["noise"]})
        own.subtract({y: 1 for y in v["clean"]})
        for variant, ys in v.items():
            score = sum(votes[y] - own[y] for y in ys)
            hits += 0.5 if score == 0 else float((score > 0) == (variant == "noise"))
    n = 2 * len(pairs)
    out: dict[str, Any] = {"pairs": len(pairs), "questions": n, "chance": 0.5,
                           "accuracy": round(hits / n, 4) if n else None}
    if n:
        out["interval95"] = interval95(int(round(hits)), n)
    return out


def _every(subtype: str) -> bool:
    return True


def _any_noise(subtype: str) -> bool:
    return bool(subtype)


def _query_noise(subtype: str) -> bool:
    from ehrgym.vocab import NOISE_SUBTYPES

    return NOISE_SUBTYPES.get(subtype) == "query"


# name -> (probe, which pairs it reads); largest first (the order a process pool takes them in)
PROBES: dict[str, tuple[Callable[..., dict[str, Any]], Callable[[str], bool]]] = {
    "clean_vs_noise": (_clean_vs_noise, _any_noise),
    "answer_vs_abstain": (_answer_vs_abstain, _every),
    "clean_vs_noise_query": (_clean_vs_noise, _query_noise),
    "answer_vs_abstain_query": (_answer_vs_abstain, _query_noise),
}
REPORT_ORDER = ("clean_vs_noise", "clean_vs_noise_query", "answer_vs_abstain", "answer_vs_abstain_query")


def _slim(t: Task) -> Any:
    """What the probes read of a task (a small picklable stand-in for worker processes)."""
    from types import SimpleNamespace

    return SimpleNamespace(task_id=t.task_id, pair_id=t.pair_id, variant=t.variant, split=t.split,
                           question=t.question,
                           noise=SimpleNamespace(subtype=t.noise.subtype) if t.noise is not None else None,
                           expected=SimpleNamespace(is_abstain=bool(t.expected.is_abstain)))


def _run_probes(names: Sequence[str], tasks: list[Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in names:
        probe, keep = PROBES[name]
        out[name] = probe(tasks, keep)
    return out


def _probe_groups(tasks: list[Any], workers: int) -> list[list[str]]:
    """The probes split over ``workers`` processes, largest first onto the lightest (size: questions read)."""
    pair_sub = {t.pair_id: t.noise.subtype for t in tasks if t.noise is not None}
    size = {}
    for name, (probe, keep) in PROBES.items():
        if probe is _clean_vs_noise:
            size[name] = sum(1 for t in tasks if keep(pair_sub.get(t.pair_id, "")))
        else:
            size[name] = sum(1 for t in tasks if t.noise is not None and keep(t.noise.subtype))
    groups: list[list[str]] = [[] for _ in range(max(1, min(workers, len(PROBES))))]
    load = [0] * len(groups)
    for name in sorted(PROBES, key=lambda n: -size[n]):
        i = load.index(min(load))
        groups[i].append(name)
        load[i] += size[name]
    return [g for g in groups if g]


def text_validity(tasks: Iterable[Task], workers: int = 1) -> dict[str, Any]:
    """The four text-shortcut probes on a built benchmark's tasks (see the module docstring).

    ``workers`` > 1 fits the probes in that many worker processes (``python -m ehrgym.bench.worker``,
    as the build's); every probe is a pure function of the tasks, so the numbers do not depend on it.
    """
    slim = [_slim(t) for t in sorted(tasks, key=lambda t: t.task_id)]
    groups = _probe_groups(slim, workers)
    if len(groups) > 1:
        from ehrgym.bench.builder import run_worker_processes

        done: dict[str, dict[str, Any]] = {}
        for part in run_worker_processes([{"call": _run_probes, "args": (names, slim)} for names in groups]):
            done.update(part)
    else:
        done = _run_probes(list(PROBES), slim)
    return {**{name: done[name] for name in REPORT_ORDER}, "window_lookup": window_lookup(slim)}
