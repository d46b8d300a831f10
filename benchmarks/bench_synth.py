"""Synthetic-hospital build throughput (issue 2, item 7).

Prints, for 1k patients (median of ``--runs`` builds) and 10k patients (one build): rows, wall
seconds, rows/s of wall time, CPU seconds of the process (all threads) and rows per CPU-second,
plus the generation-only share (numpy/pyarrow, no DuckDB) and the 10k database's size on disk.
The machine's load average is printed too: on a shared machine wall time overstates the cost,
rows per CPU-second does not. Target: >= 2 M rows/s on a 2-core machine.

    .venv/bin/python benchmarks/bench_synth.py [--runs 3] [--small 1000] [--big 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from ehrgym.db.synth import build_synthetic_database, generate_tables


def _build(path: Path, patients: int, seed: int) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    info = build_synthetic_database(path, patients=patients, seed=seed, progress=False, overwrite=True)
    return time.perf_counter() - wall, time.process_time() - cpu, sum(info["table_rows"].values())


def _generate_only(patients: int, seed: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for table in generate_tables(patients, seed):
        table.arrow()
    return time.perf_counter() - wall, time.process_time() - cpu


def _line(label: str, rows: int, wall: float, cpu: float, extra: str = "") -> str:
    return (f"{label:<28} {rows:>11,} rows  wall {wall:6.2f} s = {rows / wall / 1e6:5.2f} M rows/s  "
            f"cpu {cpu:6.2f} s = {rows / cpu / 1e6:5.2f} M rows/cpu-s{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--big", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}  load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="ehrgym-bench-") as tmp:
        tmp_dir = Path(tmp)
        small = [_build(tmp_dir / "small.duckdb", args.small, args.seed) for _ in range(args.runs)]
        rows = small[0][2]
        print(_line(f"build {args.small} patients", rows, statistics.median(s[0] for s in small),
                    statistics.median(s[1] for s in small), f"  (median of {args.runs})"))
        gen = [_generate_only(args.small, args.seed) for _ in range(args.runs)]
        print(_line(f"  generation only", rows, statistics.median(g[0] for g in gen),
                    statistics.median(g[1] for g in gen)))
        big_path = tmp_dir / "big.duckdb"
        wall, cpu, rows = _build(big_path, args.big, args.seed)
        size = big_path.stat().st_size
        print(_line(f"build {args.big} patients", rows, wall, cpu,
                    f"  db {size / 2 ** 20:,.0f} MiB ({size / args.big / 1024:.1f} KiB/patient)"))
    print(f"load average at end: {os.getloadavg()[0]:.1f}   target: >= 2.00 M rows/s")


if __name__ == "__main__":
    main()
