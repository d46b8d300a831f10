"""Metrics and report throughput on a paper-sized results store.

    .venv/bin/python benchmarks/bench_report.py [--pairs 5486] [--k 4] [--agents 3] [--repeats 3]

Writes a synthetic results store (per agent: PAIRS Clean–Noise pairs x 2 tasks x K trials of
seeded random outcomes over the 13 noise subtypes; the records are valid EpisodeRecords, the
outcomes mean nothing) into a temporary directory, then times ``load_episodes``,
``summarize`` (1,000 bootstrap replicates) and ``build_report`` (all tables and figures).
Prints the median of --repeats runs and the per-episode cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def write_store(run_dir: Path, agent: str, pairs: int, k: int, seed: int) -> int:
    import numpy as np

    from ehrgym.eval.records import EpisodeRecord
    from ehrgym.vocab import INTENTS, LEVELS, NOISE_SUBTYPES

    rng = np.random.default_rng(seed)
    subtypes = list(NOISE_SUBTYPES)
    run_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(run_dir / "episodes.jsonl", "w", encoding="utf-8") as fh:
        for i in range(pairs):
            sub = subtypes[i % len(subtypes)]
            abstain = i % 3 == 0
            for variant, p in (("clean", 0.7), ("noise", 0.4)):
                noisy = variant == "noise"
                kind = "abstain" if noisy and abstain else "answer"
                for trial in range(k):
                    u = rng.random()
                    infra = u > 0.995
                    ok = u < p
                    term = "infrastructure_error" if infra else (
                        ("abstained" if kind == "abstain" else "answered") if ok else
                        ("step_limit" if u > 0.95 else "answered"))
                    rec = EpisodeRecord(
                        run_id=f"bench-{agent}", agent=agent, model=None, task_id=f"t{i}-{variant}", pair_id=f"p{i}",
                        trial=trial, variant=variant, intent=INTENTS[i % 6], level=LEVELS[(i // 6) % 2],
                        template_id=f"tpl{i % 40}", noise_level=NOISE_SUBTYPES[sub] if noisy else None,
                        noise_subtype=sub if noisy else None, split="test", expected_kind=kind,
                        expected_reason="insufficient_evidence" if kind == "abstain" else None, termination=term,
                        success_strict=None if infra else ok, success_lenient=None if infra else ok,
                        failure=None if ok or infra else ("missed_abstention" if kind == "abstain" else "wrong_value"),
                        abstain_reason="insufficient_evidence" if term == "abstained" else None, steps=3,
                        sql_errors=int(u * 10) % 2, wall_seconds=float(u), prompt_tokens=500, completion_tokens=50,
                        trajectory={"steps": [{"action": "sql", "query": "SELECT 1"}]})
                    fh.write(json.dumps(rec.to_dict(), separators=(",", ":")) + "\n")
                    n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5486)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-boot", type=int, default=1000)
    args = ap.parse_args()

    from ehrgym.eval.metrics import load_episodes, summarize
    from ehrgym.report import build_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runs = [root / "runs" / f"agent{a}" for a in range(args.agents)]
        episodes = sum(write_store(r, r.name, args.pairs, args.k, seed=a) for a, r in enumerate(runs))
        print(f"results store: {args.agents} agents x {args.pairs} pairs x 2 x k={args.k} = {episodes} episodes")
        timings: dict[str, list[float]] = {"load_episodes": [], "summarize": [], "build_report": []}
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            df = load_episodes(runs)
            t1 = time.perf_counter()
            summarize(df, n_boot=args.n_boot, seed=0)
            t2 = time.perf_counter()
            build_report(runs, None, root / f"tables{rep}", root / f"figures{rep}", n_boot=args.n_boot,
                         progress=False)
            t3 = time.perf_counter()
            timings["load_episodes"].append(t1 - t0)
            timings["summarize"].append(t2 - t1)
            timings["build_report"].append(t3 - t2)
        for name, values in timings.items():
            med = statistics.median(values)
            print(f"{name:14s} median {med:7.2f} s  ({1e6 * med / episodes:6.1f} µs/episode; runs: "
                  + ", ".join(f"{v:.2f}" for v in values) + ")")
        same = all((root / "tables0" / p.name).read_bytes() == p.read_bytes() for p in (root / "tables1").iterdir()) \
            if args.repeats > 1 else True
        print(f"tables byte-identical across repeats: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
