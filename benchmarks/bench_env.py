"""Environment performance (issue 4, item 9): prints medians and ratios.

P1  noisy-episode ``reset`` p50 on a 1k- and a 20k-patient synthetic database and their ratio
    (targets: p50 <= 5 ms, ratio <= 1.3).
P2  gate + formatting overhead per query (p50, target <= 1 ms) and total env time / raw DuckDB
    time over all gold SQL of a built benchmark (target <= 1.15; raw runs in this process, the env's
    connection in its child query process, so the ratio includes that round trip), in three regimes: cold (every
    gate cache cleared before each query), first sight (a text never seen, the shape cache as a
    running env has it) and repeated (decision cached).
P3  ``print(1)`` Python step p50 (target <= 20 ms).

    .venv/bin/python benchmarks/bench_env.py [--small-patients 1000] [--large-patients 20000]
        [--bench DIR --bench-db PATH] [--repeats 300] [--skip-python]

Databases and a ``small`` benchmark on each are built once under ``data/bench_env/``
(``build_synthetic_database``, ``build_benchmark``). P1 resets the noisy tasks of each
database's own benchmark (their real overlays), interleaving the two databases so that machine
load hits both alike; ``--synthetic-overlays`` uses heavier hand-made overlays instead (cell
replacements, deleted evidence and inserted duplicates on 1-3 tables). P2 runs every gold SQL
of the large database's benchmark (or of ``--bench``) on the task's own evidence.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ehrgym.bench.answers import AnswerSpec  # noqa: E402
from ehrgym.bench.task import Expected, NoiseSpec, Task  # noqa: E402
from ehrgym.db.overlay import Overlay, TableEdit, fetch_rows, replace_cells  # noqa: E402
from ehrgym.env.actions import PythonAction  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402
from ehrgym.env.sqltool import format_outcome, run_query  # noqa: E402

DATA = REPO / "data" / "bench_env"


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def ensure_db(patients: int, seed: int = 11) -> Path:
    from ehrgym.db.synth import build_synthetic_database

    path = DATA / f"synth{patients}.duckdb"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        build_synthetic_database(path, patients=patients, seed=seed, progress=False)
        print(f"built {path.name} in {time.perf_counter() - t0:.1f} s")
    return path


def noisy_tasks(db: Path, n: int = 8) -> list[Task]:
    """Tasks whose overlays edit 1-3 tables, like the noise injectors (resolved on ``db``)."""
    con = duckdb.connect(str(db), read_only=True)
    tables = [t for t in ("labevents", "chartevents", "prescriptions", "admissions", "microbiologyevents")
              if con.execute(f"SELECT count(*) > 10 FROM {_qual(t)}").fetchone()[0]]
    tasks = []
    spec = AnswerSpec("number")
    for i in range(n):
        edits = []
        for j, table in enumerate(tables[: 1 + i % 3]):
            total = con.execute(f"SELECT count(*) FROM {_qual(table)}").fetchone()[0]
            rowids = [(i * 7919 + j * 104729 + k * 15485863) % total for k in range(3)]
            col = next(c for c in ("valuenum", "dose_val_rx", "admission_type", "org_name")
                       if c in _columns(con, table))
            value = 900.0 if col == "valuenum" else "900"
            edits.append(replace_cells(con, table, {rowids[0]: {col: value}}))
            edits.append(TableEdit(table, delete_rowids=(rowids[1],)))
            dup = fetch_rows(con, table, [rowids[2]])[rowids[2]]
            edits.append(TableEdit(table, insert_rows=(dup, dup)))
        tasks.append(Task(f"noise-{i}", f"p{i}", "noise", "labs", "patient", "bench", "Benchmark question?",
                          "SELECT 1", "SELECT 1", Expected("abstain", spec, reason="implausible_value"),
                          NoiseSpec("value", "implausible_value", Overlay(tuple(edits))), "test"))
    con.close()
    return tasks


def _qual(table: str) -> str:
    from ehrgym.db.schema import table_spec

    return table_spec(table).qualified


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    from ehrgym.db.schema import table_spec

    return table_spec(table).column_names


def ensure_bench(db: Path, seed: int = 0) -> Path:
    from ehrgym.bench.build import build_benchmark

    out = DATA / f"bench_small_{db.stem}"
    if not (out / "manifest.json").exists():
        t0 = time.perf_counter()
        build_benchmark(db, out, config="small", seed=seed, progress=False)
        print(f"built the small benchmark on {db.name} in {time.perf_counter() - t0:.1f} s")
    return out


def benchmark_noisy_tasks(bench_dir: Path) -> list[Task]:
    from ehrgym.bench.dataset import load_benchmark

    return [t for t in load_benchmark(bench_dir).tasks if t.variant == "noise" and not t.overlay.is_empty]


def bench_resets(dbs: list[Path], task_sets: list[list[Task]], repeats: int) -> list[float]:
    """Interleaved noisy resets on each database; p50 seconds per database."""
    envs = [EhrEnv(db, EnvConfig(python=False)) for db in dbs]
    try:
        for env, tasks in zip(envs, task_sets):
            for t in tasks[:20]:  # warm-up
                env.reset(t)
        samples: list[list[float]] = [[] for _ in dbs]
        for i in range(repeats):
            for k, (env, tasks) in enumerate(zip(envs, task_sets)):
                task = tasks[i % len(tasks)]
                t0 = time.perf_counter()
                env.reset(task)
                samples[k].append(time.perf_counter() - t0)
    finally:
        for env in envs:
            env.close()
    return [p50(x) for x in samples]


REPRESENTATIVE_SQL = [
    "SELECT valuenum FROM mimiciv_hosp.labevents WHERE subject_id = {sid} AND itemid = 50912 "
    "ORDER BY charttime DESC LIMIT 1",
    "SELECT round(avg(valuenum), 2) FROM labevents l JOIN d_labitems d USING (itemid) "
    "WHERE d.label = 'Creatinine' AND l.hadm_id IN (SELECT hadm_id FROM admissions WHERE subject_id = {sid})",
    "SELECT count(*) FROM admissions WHERE admission_type LIKE '%EMER%'",
    "SELECT a.hadm_id, date_diff('hour', a.admittime, a.dischtime) AS los FROM admissions a "
    "WHERE a.subject_id = {sid} ORDER BY los DESC",
    "WITH x AS (SELECT subject_id, max(valuenum) m FROM labevents WHERE itemid = 50912 GROUP BY 1) "
    "SELECT count(*) FROM x WHERE m > 1.5",
    "SELECT itemid, count(*) n FROM labevents GROUP BY itemid ORDER BY n DESC LIMIT 5",
    "SELECT * FROM patients ORDER BY subject_id LIMIT 60",
]


def gold_queries(db: Path, bench_dir: Path | None) -> tuple[list[tuple[Task | None, str]], str]:
    if bench_dir is not None:
        from ehrgym.bench.dataset import load_benchmark

        bench = load_benchmark(bench_dir)
        return [(t, t.gold_sql) for t in bench.tasks], f"gold SQL of {len(bench.tasks)} tasks in {bench_dir}"
    con = duckdb.connect(str(db), read_only=True)
    sids = [r[0] for r in con.execute("SELECT subject_id FROM mimiciv_hosp.patients ORDER BY subject_id LIMIT 20")
            .fetchall()]
    con.close()
    queries = [(None, q.format(sid=s)) for s in sids for q in REPRESENTATIVE_SQL]
    return queries, f"{len(queries)} representative queries (no --bench given)"


def bench_queries(db: Path, bench_dir: Path | None, gate_check: str = "tokens") -> None:
    """Three passes over the queries, each timing a raw DuckDB run and an env run of every query
    (after an untimed warm-up run, so both find warm caches): ``cold`` clears every gate cache
    before each query; ``first sight`` clears the exact-text cache only, so the shape cache holds
    what earlier, different queries taught it, as in a running env; ``repeated`` clears nothing."""
    from ehrgym.env.gate import SqlGate

    from ehrgym.env.engine import ConnectionSettings, EpisodeConnection

    queries, label = gold_queries(db, bench_dir)
    passes = {"cold": (True, True), "first sight": (True, False), "repeated": (False, False)}
    results: dict[str, dict[str, list[float]]] = {}
    # raw: DuckDB in this process on a connection with the same overlay; env: the default env, whose
    # connection runs in a child process (the ratio includes that round trip)
    raw_conn = EpisodeConnection(db, ConnectionSettings(isolation="inprocess"))
    con = raw_conn.con
    with EhrEnv(db, EnvConfig(python=False, max_steps=10**9), gate=SqlGate(duckdb_check=gate_check)) as env:
        for name, (clear_texts, clear_shapes) in passes.items():
            env.gate.clear_cache()
            res = results[name] = {"raw": [], "env": [], "raw_cpu": [], "env_cpu": [], "overhead": []}
            last_task = None
            for task, sql in queries:
                if task is not None and task is not last_task:
                    env.reset(task)  # the gold SQL runs on the task's own (noisy) evidence
                    raw_conn.apply(task.overlay)
                    last_task = task
                if name != "repeated":
                    con.execute(sql).fetchall()
                    env.conn.raw(sql)  # warm the env's connection alike
                else:
                    env.gate.check(sql)
                c0, t0 = time.process_time(), time.perf_counter()
                con.execute(sql).fetchall()
                res["raw"].append(time.perf_counter() - t0)
                res["raw_cpu"].append(time.process_time() - c0)
                if clear_texts:
                    env.gate.clear_cache(shapes=clear_shapes)
                k1 = _child_cpu(env)
                c1, t1 = time.process_time(), time.perf_counter()
                out = run_query(env.gate, env.conn, env.pool.watchdog, sql, env.config.sql)
                format_outcome(out, env.config.sql)
                res["env"].append(time.perf_counter() - t1)
                res["env_cpu"].append(time.process_time() - c1 + _child_cpu(env) - k1)
                res["overhead"].append(out.gate_seconds + out.format_seconds)
                if out.error:
                    print(f"  query failed in the env: {out.error.splitlines()[0][:120]}")
        cpu = []  # CPU time of a cold gate check alone
        for _, sql in queries:
            env.gate.clear_cache()
            t0 = time.process_time()
            env.gate.check(sql)
            cpu.append(time.process_time() - t0)
    raw_conn.close()
    print(f"P2  over {label} on {db.name} (gate's DuckDB layer: {gate_check})")
    print(f"    gate check alone, all caches cleared, CPU time p50: {p50(cpu) * 1e3:.3f} ms")
    for name, res in results.items():
        print(f"    {name:<12} gate+format overhead p50 {p50(res['overhead']) * 1e3:6.3f} ms (target <= 1 ms); "
              f"env/raw time {sum(res['env']) / sum(res['raw']):.3f} (target <= 1.15), "
              f"in CPU time (env process + its query process) {sum(res['env_cpu']) / sum(res['raw_cpu']):.3f}; raw total {sum(res['raw']) * 1e3:.0f} ms")


def _child_cpu(env: EhrEnv) -> float:
    """CPU seconds used so far by the env's query process (0 for an in-process connection); tick
    resolution, so only sums over many queries mean something."""
    pid = getattr(env.conn, "pid", None)
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def bench_python(db: Path, repeats: int) -> None:
    with EhrEnv(db, EnvConfig(max_steps=10**9)) as env:
        env.reset(noisy_tasks(db, 1)[0])
        env.step(PythonAction("print(0)"))  # starts the worker pool
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = env.step(PythonAction("print(1)"))
            times.append(time.perf_counter() - t0)
            assert r.observation.text.strip() == "1", r.observation.text
        sql_times = []
        for _ in range(max(10, repeats // 5)):
            t0 = time.perf_counter()
            env.step(PythonAction("sql('SELECT count(*) AS n FROM patients')"))
            sql_times.append(time.perf_counter() - t0)
    print(f"P3  python print(1) step p50: {p50(times) * 1e3:.2f} ms   (target <= 20 ms); "
          f"python step with one sql() call p50: {p50(sql_times) * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small-patients", type=int, default=1000)
    ap.add_argument("--large-patients", type=int, default=20000)
    ap.add_argument("--bench", type=Path, default=None, help="a built benchmark dir (its gold SQL for P2)")
    ap.add_argument("--bench-db", type=Path, default=None, help="the database that benchmark was built on")
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--skip-python", action="store_true")
    ap.add_argument("--small-db", type=Path, default=None, help="use this database instead of a synthetic one")
    ap.add_argument("--large-db", type=Path, default=None, help="use this database instead of a synthetic one")
    ap.add_argument("--synthetic-overlays", action="store_true", help="hand-made overlays instead of benchmarks")
    args = ap.parse_args()
    if args.bench is not None and args.bench_db is None:
        ap.error("--bench needs --bench-db (the database the benchmark was built on)")

    small = args.small_db or ensure_db(args.small_patients)
    large = args.large_db or ensure_db(args.large_patients)
    if args.synthetic_overlays:
        task_sets, what = [noisy_tasks(small), noisy_tasks(large)], "hand-made 1-3 table overlays"
    else:
        benches = [ensure_bench(small), ensure_bench(large)]
        task_sets = [benchmark_noisy_tasks(b) for b in benches]
        what = f"noisy tasks of each database's small benchmark ({len(task_sets[0])} / {len(task_sets[1])})"
    r_small, r_large = bench_resets([small, large], task_sets, args.repeats)
    print(f"P1  noisy reset p50 over {what}:")
    print(f"    {small.name}: {r_small * 1e3:.3f} ms, {large.name}: {r_large * 1e3:.3f} ms, "
          f"ratio {r_large / r_small:.3f}   (targets <= 5 ms, ratio <= 1.3)")
    if args.bench is not None:
        qdb, qbench = args.bench_db, args.bench
    elif not args.synthetic_overlays:
        qdb, qbench = large, ensure_bench(large)
    else:
        qdb, qbench = large, None
    bench_queries(large, None)  # short, agent-like queries
    bench_queries(qdb, qbench)
    bench_queries(qdb, qbench, gate_check="ast")
    if not args.skip_python:
        bench_python(small, max(50, args.repeats // 3))
    try:
        print(f"(load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    except OSError:
        pass


if __name__ == "__main__":
    main()
