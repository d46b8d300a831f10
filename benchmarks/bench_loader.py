"""Benchmark: loading the MIMIC-IV demo (or any MIMIC-IV directory) with ``load_mimic``.

    .venv/bin/python benchmarks/bench_loader.py [SOURCE] [--repeat N]

Prints the median load time, rows/s, compressed MiB/s and the database size on disk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import warnings
from pathlib import Path

from ehrgym.db.mimic import MimicLoadWarning, load_mimic
from ehrgym.db.mimic_layout import scan_source

DEFAULT_SOURCE = Path(__file__).resolve().parents[1].parent / "shared" / "mimic-iv-demo-2.2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    input_bytes = scan_source(args.source).total_bytes
    seconds, rows, size = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            out = Path(tmp) / f"load{i}.duckdb"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MimicLoadWarning)
                meta = load_mimic(args.source, out, progress=False)
            seconds.append(meta["build_seconds"])
            rows = sum(meta["table_rows"].values())
            size = out.stat().st_size
    median = statistics.median(seconds)
    print(f"source          {args.source} ({input_bytes / 2**20:.1f} MiB compressed)")
    print(f"runs            {args.repeat}: {', '.join(f'{s:.2f}' for s in seconds)} s")
    print(f"median seconds  {median:.2f}")
    print(f"rows            {rows:,}")
    print(f"rows/s          {rows / median:,.0f}")
    print(f"input MiB/s     {input_bytes / 2**20 / median:.1f}")
    print(f"db size         {size / 2**20:.1f} MiB ({size / max(input_bytes, 1):.2f}x the compressed input)")


if __name__ == "__main__":
    main()
