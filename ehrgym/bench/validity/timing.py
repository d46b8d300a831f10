"""Timing side channel: can an agent tell a clean episode from a noisy one by timing its own queries?

Nothing an agent reads carries a query's duration, but a Python cell can time its own ``sql()`` calls. An
episode's tables are views over the base (``ehrgym.db.overlay``) whose cost grows with what they filter
out and add: a noisy twin's view holds the pair's background *and* the noise's edits, its clean twin the
background alone. A policy that learned each table's usual scan time could read the difference instead of
the evidence.

The probe times, per episode, what such a policy would time without looking at any row: the first
whole-table count of the question's evidence table after the episode starts (it binds the view) and the
best of ``repeats`` more, on one DuckDB thread as episodes are served. Twins of a pair are timed back to
back, in random order, so the machine's load falls on both alike (the probe is stronger than an agent,
which never sees both twins). It then fits the depth-3 tree of :mod:`ehrgym.bench.artifacts` on the train
pairs' timings (features: the two times, their logarithms, the table and each time over the table's usual
time, the constant a policy learns per table) and scores clean vs noisy on the
test pairs — at chance (balanced accuracy ≤ ``BAR``) there is nothing to read — and reports how often the
noisy twin was the slower one (a sign test against one half).

Only pairs whose twins are served different data are timed: a query-level twin (out of scope, temporal
mismatch …) is served its clean twin's overlay and is timing-identical by construction. Timings depend on
the machine, so the probe is a benchmark (``benchmarks/bench_timing_channel.py``), not part of the
deterministic card.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ehrgym.bench.task import Task

BAR = 0.55
PROBE_SQL = "SELECT count(*) FROM {table}"


@dataclass(frozen=True)
class EpisodeTiming:
    """One episode's timings of ``PROBE_SQL`` on its evidence table, in milliseconds."""

    pair_id: str
    split: str
    noisy: bool
    subtype: str | None
    table: str
    first_ms: float
    best_ms: float


def _in_random_order(rng: np.random.Generator, clean: Task, noisy: Task) -> list[Task]:
    """The twins in a seeded random order, so neither is always timed first (on a warmer machine)."""
    return [clean, noisy] if rng.random() < 0.5 else [noisy, clean]


def _timing(task: Task, table: str, first_ms: float, best_ms: float) -> EpisodeTiming:
    return EpisodeTiming(task.pair_id, task.split, task.variant == "noise", task.noise.subtype if task.noise else None,
                         table, round(first_ms, 4), round(best_ms, 4))


def timed_pairs(tasks: Sequence[Task], splits: Sequence[str] = ("train", "test"),
                per_split: int = 300, seed: int = 0) -> list[tuple[Task, Task]]:
    """(clean, noisy) twins whose served overlays differ, at most ``per_split`` drawn per split."""
    by_pair: dict[str, dict[str, Task]] = defaultdict(dict)
    for t in tasks:
        by_pair[t.pair_id][t.variant] = t
    rng = np.random.default_rng(seed)
    out: list[tuple[Task, Task]] = []
    for split in splits:
        pairs = [(p["clean"], p["noise"]) for _, p in sorted(by_pair.items())
                 if "clean" in p and "noise" in p and p["noise"].split == split
                 and p["noise"].overlay != p["clean"].overlay]
        if len(pairs) > per_split:
            keep = sorted(rng.choice(len(pairs), size=per_split, replace=False).tolist())
            pairs = [pairs[i] for i in keep]
        out += pairs
    return out


def evidence_table(task: Task) -> str:
    """The qualified table the task's question is about (its template's evidence table)."""
    from ehrgym.bench.templates.registry import get_template
    from ehrgym.db.schema import table_spec

    return table_spec(get_template(task.template_id).evidence.table).qualified


def time_episodes(db: str | Path, pairs: Sequence[tuple[Task, Task]], repeats: int = 5, seed: int = 0,
                  progress: bool = False) -> list[EpisodeTiming]:
    """Time ``PROBE_SQL`` in each twin's served database (one connection, views re-pointed per episode as the
    environment's connection pool does; one thread)."""
    from tqdm.auto import tqdm

    from ehrgym.db.overlay import overlay_connection

    con, session = overlay_connection(db)
    rng = np.random.default_rng(seed)
    out: list[EpisodeTiming] = []
    try:
        for clean, noisy in tqdm(pairs, desc="timing twins", disable=not progress, leave=False):
            table = evidence_table(noisy)
            sql = PROBE_SQL.format(table=table)
            for task in _in_random_order(rng, clean, noisy):
                session.clear()
                con.execute(sql).fetchall()  # the base's cost warm in both twins' runs alike
                session.apply(task.overlay)
                t0 = time.perf_counter()
                con.execute(sql).fetchall()
                first = time.perf_counter() - t0
                best = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    con.execute(sql).fetchall()
                    best = min(best, time.perf_counter() - t0)
                out.append(_timing(task, table, first * 1e3, best * 1e3))
        session.clear()
    finally:
        con.close()
    return out


# what a policy's Python cell runs: the first call after the episode starts, then the best of the rest
ENV_PROBE_CODE = """import time
_probe = []
for _ in range({calls}):
    _start = time.perf_counter()
    sql({sql!r})
    _probe.append((time.perf_counter() - _start) * 1000)
print(_probe[0], min(_probe[1:]))
"""


def time_episodes_env(db: str | Path, pairs: Sequence[tuple[Task, Task]], repeats: int = 5,
                      quantum_ms: float | None = None, seed: int = 0, progress: bool = False) -> list[EpisodeTiming]:
    """The same timings as :func:`time_episodes`, taken as an agent takes them: a Python cell of a real episode
    (``EhrEnv``) timing its own ``sql()`` calls. ``quantum_ms``: the Python tool's reply quantum
    (``PythonLimits.sql_time_quantum_ms``; None: its default, 0: replies as soon as ready)."""
    from tqdm.auto import tqdm

    from ehrgym.env.actions import PythonAction
    from ehrgym.env.episode import EhrEnv, EnvConfig
    from ehrgym.env.pyworker import PythonLimits

    limits = PythonLimits() if quantum_ms is None else PythonLimits(sql_time_quantum_ms=quantum_ms)
    rng = np.random.default_rng(seed)
    out: list[EpisodeTiming] = []
    with EhrEnv(db, EnvConfig(max_steps=4, python_limits=limits)) as env:
        for clean, noisy in tqdm(pairs, desc="timing twins (env)", disable=not progress, leave=False):
            table = evidence_table(noisy)
            code = ENV_PROBE_CODE.format(calls=repeats + 1, sql=PROBE_SQL.format(table=table))
            for task in _in_random_order(rng, clean, noisy):
                env.reset(task)
                text = env.step(PythonAction(code)).observation.text.split()
                if len(text) != 2:
                    raise RuntimeError(f"the timing cell failed in {task.task_id}: {' '.join(text)[:300]}")
                out.append(_timing(task, table, float(text[0]), float(text[1])))
    return out


def _features(rows: Sequence[EpisodeTiming], tables: dict[str, int],
              usual: dict[str, tuple[float, float]]) -> np.ndarray:
    """The two times, their logarithms, the table, and each time over the table's usual time (its median over the
    train episodes of both variants: the constant a policy that times many episodes learns per table)."""
    def ratio(value: float, table: str, k: int) -> float:
        base = usual.get(table, (1.0, 1.0))[k]
        return value / base if base > 0 else 1.0
    return np.array([[r.first_ms, r.best_ms, np.log(max(r.first_ms, 1e-6)), np.log(max(r.best_ms, 1e-6)),
                      tables.get(r.table, -1), ratio(r.first_ms, r.table, 0), ratio(r.best_ms, r.table, 1)]
                     for r in rows], dtype=float).reshape(-1, 7)


def timing_report(timings: Sequence[EpisodeTiming]) -> dict[str, Any]:
    """Clean vs noisy from the timings (depth-3 tree, train → test) and the noisy-slower share per pair."""
    from scipy.stats import binomtest

    from ehrgym.bench.validity.state import _fit

    tables = {t: i for i, t in enumerate(sorted({r.table for r in timings}))}
    train = [r for r in timings if r.split == "train"]
    test = [r for r in timings if r.split == "test"]
    report: dict[str, Any] = {"bar": BAR, "pairs_timed": len({r.pair_id for r in timings})}
    per_table: dict[str, list[EpisodeTiming]] = defaultdict(list)
    for r in train:
        per_table[r.table].append(r)
    usual = {t: (float(np.median([r.first_ms for r in rs])), float(np.median([r.best_ms for r in rs])))
             for t, rs in per_table.items()}
    report["clean_vs_noise"] = _fit(_features(train, tables, usual), [int(r.noisy) for r in train],
                                    _features(test, tables, usual), [int(r.noisy) for r in test])
    twins: dict[str, dict[bool, EpisodeTiming]] = defaultdict(dict)
    for r in timings:
        twins[r.pair_id][r.noisy] = r
    for key in ("first_ms", "best_ms"):
        diffs = [getattr(p[True], key) - getattr(p[False], key) for p in twins.values() if len(p) == 2]
        slower = sum(d > 0 for d in diffs)
        ties = sum(d == 0 for d in diffs)
        n = len(diffs) - ties
        report[f"noisy_slower_{key.removesuffix('_ms')}"] = {
            "share": round(slower / n, 4) if n else None,
            "p_value": round(float(binomtest(slower, n, 0.5).pvalue), 4) if n else None,
            "median_difference_ms": round(float(np.median(diffs)), 4) if diffs else None,
            "median_clean_ms": round(float(np.median([getattr(p[False], key) for p in twins.values()
                                                      if False in p])), 4) if twins else None}
    subtypes: dict[str, list[tuple[EpisodeTiming, EpisodeTiming]]] = defaultdict(list)
    for p in twins.values():
        subtype = p[True].subtype if len(p) == 2 else None
        if subtype:
            subtypes[subtype].append((p[False], p[True]))
    report["noisy_slower_best_by_subtype"] = {
        s: round(sum(n.best_ms > c.best_ms for c, n in ps) / len(ps), 4) for s, ps in sorted(subtypes.items())}
    acc = report["clean_vs_noise"].get("balanced_accuracy")
    report["passes"] = acc is not None and acc <= BAR
    return report


def probe_benchmark(path: str | Path, db: str | Path | None = None, per_split: int = 300, repeats: int = 5,
                    seed: int = 0, progress: bool = False, through_env: bool = False,
                    quantum_ms: float | None = None) -> dict[str, Any]:
    """:func:`timing_report` of a built benchmark, on ``db`` (default: the database it was built from): timed on a
    bare connection (the channel's upper bound) or, ``through_env``, from Python cells of real episodes."""
    import json

    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.errors import BenchmarkError

    path = Path(path)
    bench = load_benchmark(path)
    db = Path(db) if db is not None else Path(json.loads((path / "manifest.json").read_text())["db_path"])
    if not db.exists():
        raise BenchmarkError(f"database {db} does not exist; pass --db with the database {path} was built from")
    pairs = timed_pairs(bench.tasks, per_split=per_split, seed=seed)
    if through_env:
        rows = time_episodes_env(db, pairs, repeats=repeats, quantum_ms=quantum_ms, seed=seed, progress=progress)
    else:
        rows = time_episodes(db, pairs, repeats=repeats, seed=seed, progress=progress)
    report = timing_report(rows)
    report["timed"] = "python cells of episodes" if through_env else "bare connection"
    if through_env:
        from ehrgym.env.pyworker import PythonLimits

        report["sql_time_quantum_ms"] = PythonLimits().sql_time_quantum_ms if quantum_ms is None else quantum_ms
    return report


def report_lines(report: dict[str, Any]) -> list[str]:
    cvn = report["clean_vs_noise"]
    how = report.get("timed", "bare connection")
    if "sql_time_quantum_ms" in report:
        how += f", sql() reply quantum {report['sql_time_quantum_ms']} ms"
    lines = [f"pairs timed: {report['pairs_timed']} (twins served different data; train + test) on a {how}",
             f"clean vs noisy from timings: balanced accuracy {cvn.get('balanced_accuracy')} (accuracy "
             f"{cvn.get('accuracy')}, 95% {cvn.get('interval95')}, n_test {cvn.get('n_test')}); "
             f"bar <= {report['bar']}: {'pass' if report['passes'] else 'FAIL'}"]
    for key in ("first", "best"):
        s = report[f"noisy_slower_{key}"]
        lines.append(f"noisy twin slower ({key} call): {s['share']} of pairs (sign test p {s['p_value']}); "
                     f"median difference {s['median_difference_ms']} ms on a median clean "
                     f"{s['median_clean_ms']} ms")
    lines.append("noisy twin slower (best call) by subtype: " + ", ".join(
        f"{k} {v}" for k, v in report["noisy_slower_best_by_subtype"].items()))
    return lines
