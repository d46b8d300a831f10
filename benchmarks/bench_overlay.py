"""Overlay views: the cost of an overlay's deleted rows in the queries an episode runs.

An overlay hides deleted base rows behind a filter on ``rowid``. DuckDB compares a literal
``rowid NOT IN (…)`` list value by value for every row scanned, so a background or a noise that
deletes hundreds of rows made every query over a large table pay hundreds of comparisons per row.
Views now filter through a search tree of CASE branches (``ehrgym.db.overlay.DELETION_LEAF`` rowids
per leaf). This prints, for the noisy twins of a benchmark built on a 10k-patient database, the
gold SQL's time on its overlay with one list per view (the old form) and with the tree, as medians
and the ratio of totals, by question level and by the most rowids one of its views deletes (results
must be identical); and, where a view deletes 400 rowids or more, an agent's look at that whole table
(``count(*)``, ``count(DISTINCT subject_id)``), which no other filter narrows first.

    .venv/bin/python benchmarks/bench_overlay.py [--db data/bench/synth10k.duckdb] [--bench DIR] [--tasks 300]

``--segments N`` instead compares how views place inserted rows: with up to ``N`` anchors as rowid ranges with the
new rows between (the form before ``ehrgym.db.overlay.SEGMENTS`` was lowered, N = 64), against the current
``SEGMENTS``, timing what serving a twin costs — re-pointing the views to its overlay and running its gold SQL
once, as the builder's verifier and an episode do — for clean and noisy twins (results must be identical).

Without ``--bench`` a ``small`` benchmark is built once on the database under ``data/bench/``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ehrgym.db.overlay as overlay_module  # noqa: E402
from ehrgym.bench.task import load_tasks_jsonl  # noqa: E402
from ehrgym.bench.verify import PairVerifier  # noqa: E402
from ehrgym.db.schema import table_spec  # noqa: E402
from synthdb import ensure_synthetic  # noqa: E402

LIST_FORM = 10**9
SIZES = ((0, 100), (100, 400), (400, 10**9))  # groups by the most rowids one view of the task deletes  # a leaf this large: one NOT IN list per view, as before the tree


def timed(verifier: PairVerifier, sql: str, overlay: overlay_module.Overlay, leaf: int, repeats: int
          ) -> tuple[float, list[tuple[object, ...]]]:
    overlay_module.DELETION_LEAF = leaf
    verifier.clean()  # back to the base, so that the overlay's views are re-pointed in this form
    verifier.use(overlay)
    rows = verifier.con.execute(sql).fetchall()  # warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        verifier.con.execute(sql).fetchall()
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def served(verifier: PairVerifier, sql: str, overlay: overlay_module.Overlay, segments: int, repeats: int
           ) -> tuple[float, list[tuple[object, ...]]]:
    """Median seconds to re-point the views to ``overlay`` (placing inserted rows with ``segments``) and run ``sql``."""
    overlay_module.SEGMENTS = segments
    times, rows = [], []
    for _ in range(repeats):
        verifier.clean()
        t = time.perf_counter()
        verifier.use(overlay)
        rows = verifier.con.execute(sql).fetchall()
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def compare_segments(verifier: PairVerifier, tasks: list, old: int, repeats: int) -> None:
    new = overlay_module.SEGMENTS
    by_level: dict[str, list[tuple[float, float]]] = {}
    for task in tasks:
        overlay = task.overlay
        if overlay.is_empty:
            continue
        before, rows_before = served(verifier, task.gold_sql, overlay, old, repeats)
        after, rows_after = served(verifier, task.gold_sql, overlay, new, repeats)
        if not _same_numbers(rows_before, rows_after):
            raise SystemExit(f"{task.task_id}: the two forms returned different rows")
        anchors = max((len(set(e.insert_after)) for e in overlay.merged().values()), default=0)
        for group in (f"{task.variant} {task.level}", f"{'> ' if anchors > new else '<='}{new} anchors"):
            by_level.setdefault(group, []).append((before, after))
    overlay_module.SEGMENTS = new
    for name, pairs in sorted(by_level.items()):
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        print(f"{name:22s} n={len(pairs):4d}  median SEGMENTS={old} {1000 * statistics.median(a):7.2f} ms  "
              f"SEGMENTS={new} {1000 * statistics.median(b):7.2f} ms  total ratio {sum(a) / sum(b):5.2f}x  "
              f"worst {1000 * max(a):7.1f} / {1000 * max(b):7.1f} ms")
    a = [x for pairs in by_level.values() for x, _ in pairs]
    b = [y for pairs in by_level.values() for _, y in pairs]
    print(f"all (each twin twice)  total {sum(a) / 2:.2f} s against {sum(b) / 2:.2f} s: {sum(a) / sum(b):.2f}x")


def _same_numbers(a: list[tuple[object, ...]], b: list[tuple[object, ...]]) -> bool:
    """Equal rows up to the last bits of floats (a join's output order regroups a float sum)."""
    import math

    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        if len(ra) != len(rb):
            return False
        for x, y in zip(ra, rb):
            if isinstance(x, float) and isinstance(y, float):
                if not (math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))):
                    return False
            elif x != y:
                return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=REPO / "data/bench/synth10k.duckdb")
    ap.add_argument("--patients", type=int, default=10_000)
    ap.add_argument("--bench", type=Path, default=None)
    ap.add_argument("--tasks", type=int, default=300, help="noisy twins timed (every k-th, spread over the build)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--segments", type=int, default=None,
                    help="compare views placing inserted rows with this SEGMENTS against the current one")
    args = ap.parse_args()

    rebuilt = ensure_synthetic(args.db, args.patients)
    bench = args.bench or args.db.with_name(args.db.stem + "-small")
    if rebuilt and args.bench is None and bench.exists():
        shutil.rmtree(bench)  # built on the database just replaced
    if not (bench / "tasks.jsonl").exists():
        from ehrgym.bench.build import build_benchmark

        build_benchmark(args.db, bench, config="small", seed=0, progress=True)

    every = load_tasks_jsonl(bench / "tasks.jsonl")
    noisy = [t for t in every if t.variant == "noise"]
    step = max(1, len(noisy) // args.tasks)
    tasks = noisy[::step][: args.tasks]
    verifier = PairVerifier(args.db)
    if args.segments is not None:
        twins = every[::max(1, len(every) // (2 * args.tasks))][: 2 * args.tasks]
        compare_segments(verifier, twins, args.segments, args.repeats)
        verifier.close()
        return
    default_leaf = overlay_module.DELETION_LEAF
    by_level: dict[str, list[tuple[float, float]]] = {}
    deleted: list[int] = []
    deleted_by_level: dict[str, list[int]] = {}
    for task in tasks:
        listed, rows_listed = timed(verifier, task.gold_sql, task.overlay, LIST_FORM, args.repeats)
        tree, rows_tree = timed(verifier, task.gold_sql, task.overlay, default_leaf, args.repeats)
        if repr(rows_listed) != repr(rows_tree):  # repr: a NaN result equals itself
            raise SystemExit(f"{task.task_id}: the two filters returned different rows")
        by_level.setdefault(task.level, []).append((listed, tree))
        # an agent's look at the whole table (no filter the scan could use first), on the view deleting the most
        table, edit = max(task.overlay.merged().items(), key=lambda kv: len(kv[1].delete_rowids))
        if len(edit.delete_rowids) >= SIZES[-1][0]:
            scan = f"SELECT count(*), count(DISTINCT subject_id) FROM {table_spec(table).qualified}"
            scan_listed, _ = timed(verifier, scan, task.overlay, LIST_FORM, args.repeats)
            scan_tree, _ = timed(verifier, scan, task.overlay, default_leaf, args.repeats)
            by_level.setdefault("whole-table scan", []).append((scan_listed, scan_tree))
        deleted.append(max((len(e.delete_rowids) for e in task.overlay.merged().values()), default=0))
        deleted_by_level.setdefault(task.level, []).append(deleted[-1])
    overlay_module.DELETION_LEAF = default_leaf
    verifier.close()
    print(f"{len(tasks)} noisy twins of {bench} on {args.db.name}; deleted rowids per view: median "
          f"{statistics.median(deleted):.0f}, max {max(deleted)}")
    groups = {f"{level} (all)": pairs for level, pairs in sorted(by_level.items())}
    for lo, hi in SIZES:
        for level, pairs in sorted(by_level.items()):
            if level not in deleted_by_level:
                continue
            chosen = [p for p, d in zip(pairs, deleted_by_level[level]) if lo <= d < hi]
            if chosen:
                groups[f"{level} {lo}-{hi - 1 if hi < 10**9 else ''} deleted"] = chosen
    for name, pairs in groups.items():
        listed = [a for a, _ in pairs]
        tree = [b for _, b in pairs]
        print(f"{name:28s} n={len(pairs):4d}  median list {1000 * statistics.median(listed):7.2f} ms  "
              f"tree {1000 * statistics.median(tree):7.2f} ms  total list/tree {sum(listed) / sum(tree):5.2f}x  "
              f"worst list {1000 * max(listed):8.1f} ms  tree {1000 * max(tree):7.1f} ms")


if __name__ == "__main__":
    main()
