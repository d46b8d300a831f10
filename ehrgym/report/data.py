"""What every report table and figure is built from: episodes, their summary and the dataset."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ehrgym.errors import BenchmarkError
from ehrgym.eval.metrics import VOCAB_ORDER, vocab_sort  # noqa: F401  (re-exported for report modules)

TASKS_FILE = "tasks.jsonl"

DATASET_COLUMNS = ("task_id", "pair_id", "variant", "intent", "level", "template_id", "split", "noise_level",
                   "noise_subtype", "expected_kind", "expected_reason", "answer_type", "complexity")


@dataclass(frozen=True)
class ReportData:
    episodes: pd.DataFrame                 # ehrgym.eval.metrics.load_episodes
    summary: dict[str, pd.DataFrame]       # ehrgym.eval.metrics.summarize
    dataset: pd.DataFrame                  # one row per task (DATASET_COLUMNS)
    dataset_source: str                    # "benchmark" (tasks.jsonl) or "episodes" (tasks seen in the runs)
    strict: bool


def dataset_from_benchmark(bench_dir: str | Path) -> pd.DataFrame:
    """One row per task of ``BENCH/tasks.jsonl``."""
    from ehrgym.bench.task import load_tasks_jsonl

    path = Path(bench_dir) / TASKS_FILE
    if not path.is_file():
        raise BenchmarkError(f"{bench_dir} has no {TASKS_FILE}; build a benchmark with `ehrgym bench build` "
                             f"or leave out --bench to describe the tasks seen in the runs")
    rows = []
    for t in load_tasks_jsonl(path):
        rows.append({
            "task_id": t.task_id, "pair_id": t.pair_id, "variant": t.variant, "intent": t.intent,
            "level": t.level, "template_id": t.template_id, "split": t.split,
            "noise_level": t.noise.level if t.noise else None, "noise_subtype": t.noise.subtype if t.noise else None,
            "expected_kind": t.expected.kind, "expected_reason": t.expected.reason,
            "answer_type": t.expected.answer.type, "complexity": t.meta.get("complexity"),
        })
    return pd.DataFrame(rows, columns=list(DATASET_COLUMNS))


def dataset_from_episodes(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct task seen in the runs (used when no benchmark directory is given)."""
    cols = [c for c in DATASET_COLUMNS if c in episodes.columns]
    out = episodes[cols].drop_duplicates("task_id").sort_values("task_id", kind="mergesort").reset_index(drop=True)
    for c in DATASET_COLUMNS:
        if c not in out.columns:
            out[c] = None  # not recorded in episodes (answer type, SQL complexity): needs --bench
    return out[list(DATASET_COLUMNS)]
