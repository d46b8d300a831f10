"""Timing side channel of a built benchmark (``ehrgym.bench.validity.timing``; the same as ``ehrgym bench
timing-probe``): can a policy that times its own queries tell a noisy episode from a clean one? Times a
whole-table count of each twin's evidence table (first call after the episode starts, best of --repeats)
for up to --per-split pairs of train and test, fits the depth-3 tree on train and prints clean-vs-noisy
balanced accuracy on test (bar <= 0.55) and how often the noisy twin was the slower one (sign test) —
on a bare connection (the channel's upper bound) and through real episodes' Python cells (what an agent
can time, with the Python tool's sql() reply quantum).

    python benchmarks/bench_timing_channel.py                  # the `make reproduce` benchmark (else a small one)
    python benchmarks/bench_timing_channel.py BENCH --mode env --quantum-ms 0   # episodes without the quantum
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPRODUCE_BENCH = Path("data/bench/synthetic-p1000-s0-paper-s0")


def _default_bench() -> Path:
    """The `make reproduce` benchmark if it was built, else a `small` build of a 1k-patient hospital."""
    if (REPRODUCE_BENCH / "manifest.json").exists():
        return REPRODUCE_BENCH
    out = Path("data/bench/timing-small-p1000-s0")
    if not (out / "manifest.json").exists():
        from ehrgym.bench.build import build_benchmark
        from ehrgym.db.synth import build_synthetic_database

        db = Path("data/synthetic-p1000-s0.duckdb")
        if not db.exists():
            build_synthetic_database(db, patients=1000, seed=0, progress=True)
        build_benchmark(db, out, config="small", seed=0, progress=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", type=Path, nargs="?", default=None)
    ap.add_argument("--db", type=Path, default=None, help="default: the database the benchmark was built from")
    ap.add_argument("--per-split", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", choices=("bare", "env", "both"), default="both")
    ap.add_argument("--quantum-ms", type=float, default=None, help="episodes' sql() reply quantum (default: the "
                    "Python tool's own)")
    args = ap.parse_args()

    from ehrgym.bench.validity.timing import probe_benchmark, report_lines

    bench = args.bench or _default_bench()
    print(f"benchmark {bench}")
    for through_env in {"bare": [False], "env": [True], "both": [False, True]}[args.mode]:
        report = probe_benchmark(bench, args.db, per_split=args.per_split, repeats=args.repeats, seed=args.seed,
                                 progress=True, through_env=through_env, quantum_ms=args.quantum_ms)
        print("\n".join(report_lines(report)))


if __name__ == "__main__":
    main()
