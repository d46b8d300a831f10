"""Where the build's verification time goes: the overlaid queries a build runs, replayed three ways.

Builds a config (``small`` by default, one process) on a database while recording every query the pair verifier
runs on an overlay (the noise check, the background check, the decoy check), then replays them on the verifier's
connections: re-pointing the views (apply), the query on the overlaid views (for a query no row order can change,
those serving inserted rows last, as the verifier reads it), and the same query on the base tables. The last is
the floor no view design can go under: what per-pair verification costs with a free overlay. Prints the sums per
caller and the ratios, and the floor scaled to the ``paper`` config's pairs against the 120 s target (2 cores).

    python benchmarks/bench_verify_floor.py --db data/bench/synth10k.duckdb
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from synthdb import ensure_synthetic

CALLERS = {"check_noise": "noise check", "make": "background check", "make_decoy": "decoy check", "value": "conflict"}


def record(db: Path, config: str) -> tuple[list[tuple[str, str, Any]], int]:
    """Build ``config`` on ``db`` in one process; the overlaid (caller, sql, overlay) queries and the pairs kept."""
    from ehrgym.bench import verify
    from ehrgym.bench.build import build_benchmark
    from ehrgym.bench.configs import get_config

    log: list[tuple[str, str, Any]] = []
    original = verify.PairVerifier.rows

    def rows(self: Any, sql: str, overlay: Any = None) -> Any:
        if overlay is not None and not overlay.is_empty:
            caller = sys._getframe(1).f_code.co_name
            if caller == "<genexpr>":
                caller = sys._getframe(2).f_code.co_name
            log.append((CALLERS.get(caller, caller), sql, overlay))
        return original(self, sql, overlay)

    verify.PairVerifier.rows = rows  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = build_benchmark(db, Path(tmp) / "b", config=replace(get_config(config), workers=1), seed=0,
                                     progress=False)
    finally:
        verify.PairVerifier.rows = original  # type: ignore[method-assign]
    return log, int(result.report["kept_pairs"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=Path("data/bench/synth10k.duckdb"))
    ap.add_argument("--config", default="small")
    ap.add_argument("--repeat", type=int, default=3, help="replays; medians are reported")
    args = ap.parse_args()
    ensure_synthetic(args.db, 10_000)  # as bench_build.py builds it (again for a new generator)

    from ehrgym.bench.configs import get_config
    from ehrgym.bench.verify import PairVerifier
    from ehrgym.db.overlay import Overlay

    log, pairs = record(args.db, args.config)
    # the verifier's own connections: ordered views, views serving inserted rows last (for order-free queries, as
    # the verifier reads them) and the base tables
    verifier = PairVerifier(args.db)
    runs: list[dict[str, list[float]]] = []
    for _ in range(args.repeat):
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
        for caller, sql, overlay in log:
            s = sums[caller]
            session, con = verifier.views_for(sql)
            start = time.perf_counter()
            session.apply(overlay)
            s[0] += time.perf_counter() - start
            for i, cur in ((1, con), (2, verifier.clean_con)):
                start = time.perf_counter()
                try:
                    cur.execute(sql).fetchall()
                except Exception:  # noqa: BLE001 — a naive SQL that fails fails on both
                    pass
                s[i] += time.perf_counter() - start
            s[3] += 1
        verifier.session.apply(Overlay())
        verifier.free_session.apply(Overlay())
        runs.append(dict(sums))
    verifier.close()

    def med(caller: str, i: int) -> float:
        return statistics.median(r[caller][i] for r in runs)

    print(f"{len(log)} overlaid queries of a {args.config!r} build ({pairs} pairs) on {args.db}; medians of "
          f"{args.repeat} replays (s)")
    print(f"{'caller':18s} {'queries':>7s} {'apply':>7s} {'overlaid':>9s} {'base':>7s} {'overlaid/base':>14s}")
    total = [0.0, 0.0, 0.0]
    for caller in sorted(runs[0], key=lambda k: -med(k, 1)):
        row = [med(caller, i) for i in range(3)]
        total = [t + r for t, r in zip(total, row)]
        print(f"{caller:18s} {int(runs[0][caller][3]):7d} {row[0]:7.2f} {row[1]:9.2f} {row[2]:7.2f} "
              f"{(row[0] + row[1]) / max(row[2], 1e-9):14.2f}")
    print(f"{'all':18s} {len(log):7d} {total[0]:7.2f} {total[1]:9.2f} {total[2]:7.2f} "
          f"{(total[0] + total[1]) / max(total[2], 1e-9):14.2f}")
    scale = get_config("paper").pairs / max(pairs, 1)
    print(f"scaled to the paper config ({get_config('paper').pairs} pairs, ×{scale:.1f}): overlaid "
          f"{(total[0] + total[1]) * scale:.0f} CPU-s, base-table floor {total[2] * scale:.0f} CPU-s "
          f"(= {total[2] * scale / 2:.0f} s on 2 cores, against the 120 s target for the whole build)")


if __name__ == "__main__":
    main()
