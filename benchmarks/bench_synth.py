"""Synthetic-hospital build throughput (issue 2, item 7).

For ``--small`` patients (median of ``--runs`` builds) and ``--big`` patients (median of ``--big-runs``
builds) it prints the rows written to the DuckDB file, the end-to-end wall seconds of
``build_synthetic_database`` and rows/s of wall time, the CPU seconds of the process (all threads:
numpy generation, DuckDB's insert threads, hashing) and rows per CPU-second, and the CPU utilisation
(CPU s / wall s; at most the number of cores). It also prints the generation-only cost (numpy/pyarrow,
no DuckDB), hence DuckDB's share, the size of the big database on disk and the peak resident memory.

The *floor* is DuckDB's own writer: the built database's final rows are read back into Arrow and
bulk-loaded into a fresh file with the same schema (CREATE TABLE, INSERT ... SELECT * FROM the
Arrow table, one transaction, CHECKPOINT), timed as the median of the same number of runs. The
build / floor ratio (wall and CPU; the build's side holds everything it does: generation, DuckDB
casts and expressions, inserts, content hash, checkpoint) is the speed target: the build must stay
<= 1.5x the floor at 10k patients. On a loaded machine the CPU ratio is the meaningful one.

It also prints the chartevents volume of the big database per patient and per ICU stay (MIMIC-IV v3.1:
about 1,190 and 4,600). ``--tables`` adds a per-table profile of one sequential build of the big size
(no prefetch thread): generation and insert CPU seconds per table, the content hash and the final
checkpoint.

The load average is printed at start and end: on a shared machine wall time mostly measures the
other processes; rows per CPU-second is the load-independent figure (contention still inflates it
somewhat). Target (issue 2): >= 2 M rows/s of wall time on a 2-core machine.

    .venv/bin/python benchmarks/bench_synth.py [--runs 3] [--small 1000] [--big 10000] [--big-runs 1] [--seed 0]
                                               [--tables]        (--big 0: the small size only)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from ehrgym.db.schema import EXPOSED_SCHEMAS, mimic_schema
from ehrgym.db.synth import build_synthetic_database, generate_tables
from ehrgym.db.synth.writer import TableData

TARGET_ROWS_PER_S = 2e6
TARGET_FLOOR_RATIO = 1.5  # build wall time / DuckDB bulk-load floor, at the big size


@dataclass(frozen=True)
class Sample:
    wall: float
    cpu: float
    rows: int


def _build(path: Path, patients: int, seed: int) -> Sample:
    wall, cpu = time.perf_counter(), time.process_time()
    info = build_synthetic_database(path, patients=patients, seed=seed, progress=False, overwrite=True)
    return Sample(time.perf_counter() - wall, time.process_time() - cpu, sum(info["table_rows"].values()))


def _generate_only(patients: int, seed: int) -> Sample:
    wall, cpu = time.perf_counter(), time.process_time()
    rows = sum(table.arrow().num_rows for table in generate_tables(patients, seed))
    return Sample(time.perf_counter() - wall, time.process_time() - cpu, rows)


def _final_rows(path: Path) -> dict[str, pa.Table]:
    """Every table of a built database as Arrow, in stored order."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {name: con.sql(f"SELECT * FROM {spec.qualified}").to_arrow_table()
                for name, spec in mimic_schema().items()}
    finally:
        con.close()


def _floor(path: Path, tables: dict[str, pa.Table]) -> Sample:
    """DuckDB bulk-loading ``tables`` from Arrow into a fresh file with the kit schema: the speed floor."""
    for stale in (path, path.with_name(path.name + ".wal")):
        stale.unlink(missing_ok=True)
    wall, cpu = time.perf_counter(), time.process_time()
    con = duckdb.connect(str(path))
    con.execute("SET enable_progress_bar = false")
    con.execute("BEGIN TRANSACTION")
    for schema in EXPOSED_SCHEMAS:
        con.execute(f"CREATE SCHEMA {schema}")
    for name, spec in mimic_schema().items():
        con.execute(spec.create_sql())
        con.register("_floor_source", tables[name])
        con.execute(f"INSERT INTO {spec.qualified} SELECT * FROM _floor_source")
        con.unregister("_floor_source")
    con.execute("COMMIT")
    con.execute("CHECKPOINT")
    con.close()
    return Sample(time.perf_counter() - wall, time.process_time() - cpu, sum(t.num_rows for t in tables.values()))


def _floor_line(build: Sample, floor: Sample, runs: int) -> str:
    return (_line("  floor: DuckDB load from Arrow", floor, f"  (median of {runs})") +
            f"\n  build / floor: wall {build.wall / floor.wall:.2f}x  cpu {build.cpu / floor.cpu:.2f}x "
            f"(target <= {TARGET_FLOOR_RATIO}x at the big size)")


def _chart_density(path: Path) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows, patients, stays = con.execute(
            "SELECT (SELECT count(*) FROM mimiciv_icu.chartevents), (SELECT count(*) FROM mimiciv_hosp.patients), "
            "(SELECT count(*) FROM mimiciv_icu.icustays)").fetchone()
    finally:
        con.close()
    return (f"chartevents {rows:,} rows = {rows / patients:,.0f}/patient, {rows / max(stays, 1):,.0f}/ICU stay "
            f"(MIMIC-IV v3.1: 1,187/patient, 4,584/ICU stay)")


def _table_profile(path: Path, patients: int, seed: int) -> None:
    """One sequential build: CPU seconds of generation and of insert (its commits included) per table,
    then the content hash and the final checkpoint."""
    from ehrgym.db.connect import content_hash
    from ehrgym.db.synth.build import write_tables

    per_table: dict[str, list[float]] = {}  # name -> [rows, generation cpu, insert cpu]
    clock = [time.process_time()]

    def timed_generation() -> Iterator[TableData]:
        for data in generate_tables(patients, seed):
            now = time.process_time()
            per_table.setdefault(data.name, [0, 0.0, 0.0])[1] += now - clock[0]
            clock[0] = now
            yield data
            clock[0] = time.process_time()  # the consumer's insert is not generation

    def inserted(data: TableData, _: bool) -> None:
        entry = per_table[data.name]
        entry[0] += data.num_rows
        entry[2] += time.process_time() - clock[0]

    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    con.execute("SET enable_progress_bar = false")
    write_tables(con, timed_generation(), inserted)
    cpu = time.process_time()
    content_hash(con)
    hashing = time.process_time() - cpu
    cpu = time.process_time()
    con.execute("CHECKPOINT")
    con.close()
    checkpoint = time.process_time() - cpu
    print(f"per-table profile, {patients} patients (sequential; cpu-s; 'generation' is the time to produce the "
          f"table, shared stage work included)")
    for name, (rows, gen, ins) in sorted(per_table.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        if gen + ins >= 0.01:
            print(f"  {name:<20} {int(rows):>11,} rows  generation {gen:6.2f}  insert {ins:6.2f} "
                  f"({rows / max(ins, 1e-9) / 1e6:5.2f} M rows/insert-cpu-s)")
    total_gen = sum(v[1] for v in per_table.values())
    total_ins = sum(v[2] for v in per_table.values())
    print(f"  total: generation {total_gen:.2f}  insert and commits {total_ins:.2f}  content_hash {hashing:.2f}  "
          f"checkpoint {checkpoint:.2f}")


def _median(samples: list[Sample]) -> Sample:
    return Sample(statistics.median(s.wall for s in samples), statistics.median(s.cpu for s in samples),
                  samples[0].rows)


def _line(label: str, s: Sample, extra: str = "") -> str:
    return (f"{label:<30} {s.rows:>11,} rows  wall {s.wall:6.2f} s = {s.rows / s.wall / 1e6:5.2f} M rows/s  "
            f"cpu {s.cpu:6.2f} s = {s.rows / s.cpu / 1e6:5.2f} M rows/cpu-s  util {s.cpu / s.wall:4.2f}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="builds of the small database (median)")
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--big", type=int, default=10000)
    parser.add_argument("--big-runs", type=int, default=1, help="builds of the big database (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tables", action="store_true", help="also profile one sequential build per table")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}  load average at start: {os.getloadavg()[0]:.1f}")
    results: list[tuple[str, Sample, Sample]] = []  # (label, build, floor)
    with tempfile.TemporaryDirectory(prefix="ehrgym-bench-") as tmp:
        tmp_dir = Path(tmp)
        small_path = tmp_dir / "small.duckdb"
        small = _median([_build(small_path, args.small, args.seed) for _ in range(args.runs)])
        print(_line(f"build {args.small} patients", small, f"  (median of {args.runs})"))
        gen = _median([_generate_only(args.small, args.seed) for _ in range(args.runs)])
        print(_line("  generation only", gen, f"  -> DuckDB write+hash {small.cpu - gen.cpu:.2f} cpu-s "
                                               f"({(small.cpu - gen.cpu) / small.cpu:.0%} of the build)"))
        rows = _final_rows(small_path)
        floor = _median([_floor(tmp_dir / "floor.duckdb", rows) for _ in range(args.runs)])
        del rows
        print(_floor_line(small, floor, args.runs))
        results.append((f"{args.small} patients", small, floor))
        if args.big > 0:
            big_path = tmp_dir / "big.duckdb"
            big = _median([_build(big_path, args.big, args.seed) for _ in range(args.big_runs)])
            size = big_path.stat().st_size
            print(_line(f"build {args.big} patients", big,
                        f"  (median of {args.big_runs})  db {size / 2 ** 20:,.0f} MiB "
                        f"({size / args.big / 1024:.1f} KiB/patient)"))
            rows = _final_rows(big_path)
            big_floor = _median([_floor(tmp_dir / "floor.duckdb", rows) for _ in range(args.big_runs)])
            del rows
            print(_floor_line(big, big_floor, args.big_runs))
            print(f"  {_chart_density(big_path)}")
            results.append((f"{args.big} patients", big, big_floor))
            if args.tables:
                _table_profile(tmp_dir / "profile.duckdb", args.big, args.seed)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB   load average at end: {os.getloadavg()[0]:.1f}")
    for label, s, _fl in results:
        rate = s.rows / s.wall
        verdict = "met" if rate >= TARGET_ROWS_PER_S else "NOT met"
        print(f"target >= {TARGET_ROWS_PER_S / 1e6:.2f} M rows/s (wall), {label}: "
              f"{rate / 1e6:.2f} M rows/s -> {verdict}")
    label, s, fl = results[-1]
    ratio = s.wall / fl.wall
    verdict = "met" if ratio <= TARGET_FLOOR_RATIO else "NOT met"
    note = "" if args.big >= 10000 else " (the target applies at 10k patients)"
    print(f"target build <= {TARGET_FLOOR_RATIO}x the DuckDB load floor (wall), {label}: {ratio:.2f}x "
          f"(cpu {s.cpu / fl.cpu:.2f}x) -> {verdict}{note}")

if __name__ == "__main__":
    main()
