"""Evaluation throughput: ``credulous`` on the paper config (5,486 pairs = 10,972 tasks) with k = 4.

    .venv/bin/python benchmarks/bench_eval.py [--patients 2000] [--workers 2] [--k 4]

Target (issue 5): the 43,888 episodes in <= 120 s on the 2-core development machine. The
synthetic database and the paper benchmark are built once and cached under
``data/bench_eval/`` (their build time is reported but not counted); each measurement runs
into a fresh run directory. Prints episodes/s, the time split (setup = worker start-up and
benchmark loading, run loop, store writes, summed episode time) and the Clean/Noise split.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patients", type=int, default=2000, help="synthetic database size")
    ap.add_argument("--config", default="paper")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--agent", default="credulous")
    ap.add_argument("--data", default=str(REPO / "data" / "bench_eval"))
    ap.add_argument("--target", type=float, default=120.0, help="seconds allowed for the run")
    ap.add_argument("--db", default=None, help="use this database instead of building one")
    ap.add_argument("--bench", default=None, help="use this benchmark directory (built on --db)")
    args = ap.parse_args()

    from ehrgym.bench.build import build_benchmark
    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.db.synth import build_synthetic_database
    from ehrgym.eval.runner import run_evaluation

    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    db = Path(args.db) if args.db else data / f"synth{args.patients}.duckdb"
    bench = Path(args.bench) if args.bench else data / f"bench_{args.config}_{args.patients}"
    if not db.exists():
        t = time.perf_counter()
        build_synthetic_database(db, patients=args.patients, seed=0, progress=False)
        print(f"built {db.name} in {time.perf_counter() - t:.1f} s (not counted)")
    if not (bench / "tasks.jsonl").exists():
        t = time.perf_counter()
        build_benchmark(db, bench, config=args.config, seed=0, progress=False)
        print(f"built {bench.name} in {time.perf_counter() - t:.1f} s (not counted)")
    n_tasks = len(load_benchmark(bench).tasks)
    run_dir = data / f"run_{args.agent}"
    if run_dir.exists():
        shutil.rmtree(run_dir)

    def cpu() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    s = run_evaluation(bench, db, args.agent, run_dir, k=args.k, workers=args.workers, progress=False)
    total = time.perf_counter() - t0
    cpu_s = cpu() - c0  # main process + worker processes (reaped when the pool closes)
    size_mb = (run_dir / "episodes.jsonl").stat().st_size / 1e6
    from ehrgym.db.connect import open_database, read_meta

    con = open_database(db)
    patients = read_meta(con).get("patients", args.patients)
    con.close()
    print(f"agent={args.agent} db={db.name} ({patients} patients) config={args.config} tasks={n_tasks} "
          f"k={args.k} workers={args.workers} cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    print(f"episodes: {s.ran}  wall: {total:.1f} s  episodes/s: {s.ran / total:.0f}  (target <= {args.target:.0f} s: "
          f"{'OK' if total <= args.target else 'MISSED'})")
    t = s.timings
    print(f"split: setup {t.get('setup_s', 0):.1f} s | run loop {t.get('run_s', 0):.1f} s "
          f"(store writes {t.get('store_write_s', 0):.1f} s) | summed episode time {t.get('episodes_sum_s', 0):.1f} s "
          f"= {1000 * t.get('episodes_sum_s', 0) / max(1, s.ran):.2f} ms/episode in workers")
    print(f"cpu: {cpu_s:.1f} s = {1000 * cpu_s / max(1, s.ran):.2f} ms/episode; on {args.workers} idle cores that is "
          f"about {cpu_s / args.workers:.0f} s of wall time (this run shared the machine at load "
          f"{os.getloadavg()[0]:.1f})")
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    print(f"success (strict): clean {pct(s.success_clean)}  noise {pct(s.success_noise)}  "
          f"terminations {s.terminations}")
    print(f"store: {size_mb:.1f} MB ({1000 * size_mb / max(1, s.ran):.2f} kB/episode)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
