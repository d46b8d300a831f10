"""The text probe's arithmetic: identical questions share one matrix row, and the logistic regression on
merged rows is the one on the questions one by one (the probe on a build is in test_bench_questions.py)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from ehrgym.bench.validity.text import _features, _fit_rows, _logreg, _matrix, _unique_matrix, _vocabulary, fit_probe, \
    interval95

QUESTIONS = ["What was the first potassium of patient 1?", "What was the target potassium of patient 1?",
             "What was the first potassium of patient 1?", "How many ICU stays did patient 2 have?",
             "How many ICU stays did patient 2 have?", "What was the home potassium of patient 3?"]


def test_identical_questions_share_one_row():
    docs = [_features(q) for q in QUESTIONS]
    vocab, idf = _vocabulary(docs)
    xu, which = _unique_matrix(docs, vocab, idf)
    assert xu.shape[0] == 4 and which.tolist() == [0, 1, 0, 2, 2, 3]
    x = _matrix(docs, vocab, idf).toarray()
    assert np.allclose(x, xu.toarray()[which])
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0)
    # TF × IDF: two words seen once in a question weigh in the ratio of their IDFs
    a, b = vocab["w:potassium"], vocab["w:patient"]
    assert np.isclose(x[1][b] / x[1][a], idf[b] / idf[a])


def test_merged_rows_fit_the_same_model_as_one_by_one():
    rng = np.random.default_rng(0)
    xu = sparse.csr_matrix(rng.random((12, 30)) * (rng.random((12, 30)) < 0.3))
    which = rng.integers(0, 12, size=80)
    y = rng.integers(0, 2, size=80).astype(float)
    merged = _fit_rows(xu, which, y, 10.0)
    one_by_one = _logreg(sparse.csr_matrix(xu[which]), np.ones(80), y, 10.0)
    assert np.allclose(merged[0], one_by_one[0], atol=1e-5) and np.isclose(merged[1], one_by_one[1], atol=1e-5)


def test_the_probe_learns_a_cue_word():
    texts = [f"What was the first potassium of patient {i}?" for i in range(40)]
    texts += [f"What was the target potassium of patient {i}?" for i in range(40)]
    labels = [0] * 40 + [1] * 40
    model = fit_probe(texts, labels, [str(i % 40) for i in range(80)])
    assert model.predict(["What was the target potassium of patient 99?",
                          "What was the first potassium of patient 99?"]).tolist() == [1, 0]


def test_the_interval_says_how_far_chance_moves_an_accuracy():
    lo, hi = interval95(314, 504)  # 0.623 on the paper build's 504 query-level test questions
    assert lo < 0.623 < hi and 0.57 < lo < 0.59 and 0.66 < hi < 0.67
    assert interval95(0, 10)[0] == 0.0 and interval95(10, 10)[1] == 1.0
    wide, narrow = interval95(30, 50), interval95(600, 1000)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]
