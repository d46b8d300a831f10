"""Benchmark the Python tool's worker (issue 4, P3: trivial step p50 <= 20 ms).

Prints medians (p50) and p90 in milliseconds:
  * acquire() with a warm pool (the next worker is already forked);
  * acquire() with warm=0 (fork on demand: the cost of a fresh sandboxed worker);
  * a trivial ``print(1)`` step on a live worker;
  * a step that calls ``sql()`` once and gets a 1,000-row DataFrame back;
  * for comparison, a fresh ``python -c "import pandas, duckdb"`` (what a step would cost
    without the warm fork server).

Usage: ``python benchmarks/bench_pyworker.py [--n 200]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np
import pandas as pd

from ehrgym.env.pyworker import PythonLimits, PythonWorkerPool


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000.0, q))


def report(name: str, xs: list[float]) -> float:
    p50 = pct(xs, 50)
    print(f"{name:<44} p50 {p50:8.3f} ms   p90 {pct(xs, 90):8.3f} ms   (n={len(xs)})")
    return p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="repetitions per measurement")
    args = ap.parse_args()
    n = args.n

    t0 = time.perf_counter()
    pool = PythonWorkerPool(PythonLimits(), warm=2)
    print(f"pool start (fork server imports pandas once): {time.perf_counter() - t0:.3f} s; sandbox={pool.sandbox}")

    warm_acq: list[float] = []
    for _ in range(n):
        time.sleep(0.01)  # an episode's worth of idle time lets the pool refill
        t = time.perf_counter()
        w = pool.acquire()
        warm_acq.append(time.perf_counter() - t)
        w.close()
    p_acq = report("acquire() warm pool", warm_acq)

    cold = PythonWorkerPool(PythonLimits(), warm=0)
    cold_acq: list[float] = []
    for _ in range(max(20, n // 5)):
        t = time.perf_counter()
        w = cold.acquire()
        cold_acq.append(time.perf_counter() - t)
        w.close()
    report("acquire() warm=0 (fork + sandbox on demand)", cold_acq)
    cold.close()

    frame = pd.DataFrame({"subject_id": np.arange(1000), "label": ["Glucose"] * 1000,
                          "valuenum": np.linspace(50, 150, 1000)})
    w = pool.acquire()
    step: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        r = w.run("print(1)", lambda q: frame)
        step.append(time.perf_counter() - t)
        assert r.output == "1\n", r
    p_step = report("run('print(1)')", step)
    sqls: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        r = w.run("df = sql('SELECT * FROM labevents')\nlen(df)", lambda q: frame)
        sqls.append(time.perf_counter() - t)
        assert r.output == "1000\n", r
    report("run(sql() -> 1,000-row DataFrame)", sqls)
    w.close()
    pool.close()

    fresh: list[float] = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import pandas, duckdb"], check=True)
        fresh.append(time.perf_counter() - t)
    p_fresh = report("fresh python -c 'import pandas, duckdb'", fresh)

    print(f"\nP3 trivial Python step p50 = {p_step:.3f} ms (target <= 20 ms): {'PASS' if p_step <= 20 else 'FAIL'}")
    print(f"acquire() p50 = {p_acq:.3f} ms (target < 20 ms): {'PASS' if p_acq < 20 else 'FAIL'}")
    print(f"fresh interpreter / warm step = {p_fresh / p_step:.0f}x; median fresh = {statistics.median(fresh):.3f} s")


if __name__ == "__main__":
    main()
