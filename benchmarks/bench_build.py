"""Benchmark of the Clean–Noise builder: the paper config from a 10k-patient synthetic database.

Target (issue 3): <= 120 s on a 2-core machine. Prints the time split (sampling, gold execution,
verification, writing — summed over worker processes — and the wall-clock pairs and card/validity
phases), CPU seconds, the median over ``--repeat`` runs and the ratio to the target, plus the
machine's load average (the shared development machine is often busy: compare CPU seconds).

    python benchmarks/bench_build.py                       # builds data/bench/synth10k.duckdb once (again for a new generator)
    python benchmarks/bench_build.py --db my.duckdb --config small --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from synthdb import ensure_synthetic

TARGET_SECONDS = 120.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=Path("data/bench/synth10k.duckdb"))
    ap.add_argument("--patients", type=int, default=10_000)
    ap.add_argument("--config", default="paper")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None, help="override the config's worker processes")
    ap.add_argument("--keep", type=Path, default=None, help="write the (last) benchmark here instead of a temp dir")
    args = ap.parse_args()

    from dataclasses import replace

    from ehrgym.bench.build import build_benchmark
    from ehrgym.bench.configs import get_config

    config = get_config(args.config)
    if args.workers:
        config = replace(config, workers=args.workers)

    ensure_synthetic(args.db, args.patients)

    totals, splits = [], []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            load = os.getloadavg()[0]
            t = time.perf_counter()
            out = args.keep if args.keep else Path(tmp) / "bench"
            result = build_benchmark(args.db, out, config=config, seed=args.seed, progress=False)
            total = time.perf_counter() - t
        totals.append(total)
        ts = result.report["timings_seconds"]
        splits.append(ts)
        print(f"run {i + 1} (workers {config.workers}): {total:7.1f} s  pairs {result.report['kept_pairs']}/{result.report['target_pairs']}  "
              f"sampling {ts['sampling']:.1f}  gold {ts['gold_execution']:.1f}  verification {ts['verification']:.1f}"
              f"  decoys {ts.get('decoys') or 0:.1f}  writing {ts['writing']:.1f}  cpu {ts.get('cpu', 0):.1f}  (load avg at start {load:.1f})")
    med = statistics.median(totals)
    cpu = statistics.median(s.get("cpu", 0) for s in splits)
    print(f"median CPU seconds      {cpu:7.1f} s   (this process + workers: the load-independent work)")
    for key in ("sampling", "gold_execution", "verification", "decoys", "writing"):
        print(f"median {key:15s} {statistics.median(s.get(key) or 0 for s in splits):7.1f} s")
    # wall-clock phases: pairs (sampling + the workers + deficit passes), then card (validity report) and files
    card = [s["total"] - s["pairs"] - s["writing"] for s in splits]
    print(f"median pairs phase     {statistics.median(s['pairs'] for s in splits):7.1f} s   (wall)")
    for name in splits[-1].get("pairs_phases", {}):  # sampling (this process), first pass (workers), deficits
        print(f"  median {name:22s} {statistics.median(s['pairs_phases'].get(name, 0) for s in splits):7.1f} s")
    print(f"median card + validity {statistics.median(card):7.1f} s   (wall)")
    for name in splits[-1].get("card_sections", {}):  # each section's wall time, in its own process
        print(f"  median {name:22s} {statistics.median(s['card_sections'].get(name, 0) for s in splits):7.1f} s")
    print(f"median total           {med:7.1f} s   ratio to the {TARGET_SECONDS:.0f} s target: {med / TARGET_SECONDS:.2f}")


if __name__ == "__main__":
    main()
