"""The EHRSQL shared task's own scoring: predicted SQL (or ``null``) run on the benchmark's SQLite build."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ehrgym.bench.dataset import load_benchmark
from ehrgym.external.base import ExternalDataError
from ehrgym.external.scoring import EHRSQL_CURRENT_TIME, Outcome, transfer_metrics


def score_sql_predictions(bench_dir: str | Path, predictions: dict[str, str], split: str | None = None) -> dict[str, Any]:
    """RS(c) etc. of ``{source question id: SQL | "null"}`` over the benchmark's questions.

    A predicted SQL that fails to run counts as a wrong answer (as in the shared task); a missing
    prediction is an error."""
    from ehrgym.external.ehrsql2024 import run_official

    bench = load_benchmark(bench_dir)
    official = bench.manifest.get("official_db")
    if not official or not Path(official).exists():
        raise ExternalDataError(f"{bench_dir} has no SQLite build (manifest official_db={official!r}); rebuild it "
                                f"with `ehrgym external build`")
    tasks = [t for t in bench.tasks if split is None or t.split == split]
    missing = [t.meta["source_id"] for t in tasks if t.meta.get("source_id") not in predictions]
    if missing:
        raise ExternalDataError(f"{len(missing)} questions have no prediction, e.g. {missing[:3]}")
    con = sqlite3.connect(f"file:{official}?mode=ro", uri=True)
    outcomes = []
    try:
        for t in tasks:
            pred = predictions[t.meta["source_id"]]
            answered = bool(pred) and pred.strip().lower() != "null"
            correct = False
            if answered and not t.expected.is_abstain:
                try:
                    correct = run_official(con, pred, t.meta.get("current_time") or EHRSQL_CURRENT_TIME) \
                        == t.expected.value
                except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError):
                    correct = False
            outcomes.append(Outcome(not t.expected.is_abstain, answered, correct))
    finally:
        con.close()
    return transfer_metrics(outcomes)
