"""External benchmarks (issue 15): EHRSQL 2024 build time and oracle episode throughput.

E1  ``ehrgym external build ehrsql-2024`` (17 tables into SQLite and DuckDB, all three splits'
    tasks), wall-clock seconds.
E2  the gold-SQL check (every answerable question of valid+test re-run on SQLite), seconds.
E3  ``external-oracle`` over the valid split through ``ehrgym eval run`` (k=1): episodes per second,
    and its answer accuracy / RS(N) (must be 100).
E4  with ``--fhir-url`` (the MedAgentBench server you run, see README): ``build medagentbench-v2
    --check`` (all 300 tasks, every patient looked up) and ``external-oracle`` over the 300 tasks:
    seconds, episodes per second, success rate overall and per task type (must be 100: the oracle
    and the graders read the same server). Skipped without a server.

    EHRGYM_EXTERNAL_DIR=/work/shared/external .venv/bin/python benchmarks/bench_external.py [--out DIR] [--workers 1]
        [--fhir-url http://localhost:8080/fhir/]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ehrgym.eval.runner import run_evaluation  # noqa: E402
from ehrgym.external.base import build_external, default_external_dir  # noqa: E402
from ehrgym.external.ehrsql2024 import check_gold, read_split  # noqa: E402
from ehrgym.external.metrics import run_transfer_row  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_external_dir() / "ehrsql-2024")
    parser.add_argument("--out", type=Path, default=None, help="build directory (default: a temporary one)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fhir-url", default=None, help="MedAgentBench's FHIR server (E4; skipped without)")
    parser.add_argument("--skip-ehrsql", action="store_true", help="only E4")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_external_"))
    try:
        if not args.skip_ehrsql:
            ehrsql(args, out)
        medagentbench(args, out)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


def medagentbench(args: argparse.Namespace, out: Path) -> None:
    from ehrgym.eval.store import EpisodeStore
    from ehrgym.external.medagentbench import success_by_type

    if not args.fhir_url:
        print("E4 MedAgentBench: skipped (pass --fhir-url of the benchmark's FHIR server)")
        return
    t0 = time.perf_counter()
    result = build_external("medagentbench-v2", out / "mab", default_external_dir() / "medagentbench",
                            fhir_url=args.fhir_url, check=True)
    print(f"E4 build + check: {result.tasks} tasks in {time.perf_counter() - t0:.1f} s, patients missing: "
          f"{result.checks['patients_missing']}")
    summary = run_evaluation(out / "mab", result.files["episode_db"], "external-oracle", out / "mab-run", k=1,
                             workers=args.workers, progress=False)
    rates = success_by_type(list(EpisodeStore(out / "mab-run").records()))
    print(f"E4 oracle: {summary.ran} episodes in {summary.wall_seconds:.1f} s ({summary.episodes_per_second:.1f} "
          f"ep/s); success rate " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items()))


def ehrsql(args: argparse.Namespace, out: Path) -> None:
    t0 = time.perf_counter()
    result = build_external("ehrsql-2024", out / "bench", args.data)
    build_s = time.perf_counter() - t0
    print(f"E1 build: {result.tasks} tasks {result.by_split} in {build_s:.1f} s")
    questions = [q for s in ("valid", "test") for q in read_split(args.data, s)]
    t0 = time.perf_counter()
    problems = check_gold(Path(result.files["official_db"]), questions)
    print(f"E2 gold SQL check (valid+test, {sum(q.sql is not None for q in questions)} answerable): "
          f"{time.perf_counter() - t0:.1f} s, {len(problems)} mismatches")
    summary = run_evaluation(out / "bench", result.files["episode_db"], "external-oracle", out / "run", k=1,
                             workers=args.workers, tasks={"split": "dev"}, progress=False)
    row = run_transfer_row(out / "run") or {}
    print(f"E3 oracle, valid split: {summary.ran} episodes in {summary.wall_seconds:.1f} s "
          f"({summary.episodes_per_second:.1f} ep/s, workers={args.workers}); answer accuracy "
          f"{row.get('answer_accuracy')}, RS(N) {row.get('RS(N)')}")


if __name__ == "__main__":
    main()
