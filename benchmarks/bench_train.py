"""Does training in the gym help? A small model before vs after SFT on skeptic trajectories (not CI).

Pipeline: a skeptic run on the benchmark's ``train`` split → compact text-protocol SFT data
(``--max-chars``, successful episodes only) → ``--sft-steps`` SFT steps (``ehrgym.train.sft``) →
the ``hf`` agent evaluated before and after on ``--dev-pairs`` Clean–Noise pairs of the ``dev``
split through the runner → Clean, Noise and pair success with 95 % cluster-bootstrap CIs
(``ehrgym.eval.metrics``), printed and written to ``WORK/bench_train.json``, whatever they are.

The model: ``--model DIR`` (e.g. Gemma 3 270M from ``ehrgym train convert-gguf``), ``--gguf FILE``
(converted here), or by default a tiny random model (only shows that the pipeline works: its
success is 0 before and after). The full measurement (270M model, ≥ 40 dev pairs, as many SFT
steps as fit in about an hour on 2 CPU cores) is

    python benchmarks/bench_train.py --full --gguf gemma-3-270m.gguf

and without ``--full`` (what ``make bench`` runs) a quick check of the pipeline: 6 train pairs,
2 dev pairs, 2 SFT steps, 2-step episodes, 16-token replies.

Episodes run with ``schema_summary`` off, as in the skeptic trajectories the model is trained on.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def _ensure_data(args: argparse.Namespace) -> tuple[Path, Path]:
    from ehrgym.bench.build import build_benchmark
    from ehrgym.db.synth import build_synthetic_database

    db = args.db or args.work / "synth.duckdb"
    bench = args.bench or args.work / "bench"
    if not db.exists():
        build_synthetic_database(db, patients=args.patients, seed=args.seed, progress=False)
    if not bench.exists():
        build_benchmark(db, bench, config="small", seed=args.seed, progress=False)
    return db, bench


def reply_lengths(model: str, data: Path) -> list[int]:
    """Sorted token counts of the exported data's assistant turns, in the model's own tokenizer."""
    from transformers import AutoTokenizer

    from ehrgym.train.data import assistant_turn_tokens, read_examples

    return sorted(assistant_turn_tokens(read_examples(data), AutoTokenizer.from_pretrained(model)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("data/bench-train"))
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--bench", type=Path, default=None)
    ap.add_argument("--patients", type=int, default=200)
    ap.add_argument("--model", default=None, help="a local model directory")
    ap.add_argument("--gguf", type=Path, default=None, help="a GGUF file, converted with convert_gguf")
    ap.add_argument("--full", action="store_true",
                    help="the measurement: all train pairs, 40 dev pairs, 60 SFT steps (about an hour on 2 cores "
                         "with the 270M model); without it a quick check of the pipeline (make bench)")
    ap.add_argument("--train-pairs", type=int, default=None, help="pairs of the skeptic's train run")
    ap.add_argument("--dev-pairs", type=int, default=None)
    ap.add_argument("--sft-steps", type=int, default=None)
    ap.add_argument("--max-chars", type=int, default=6000)
    ap.add_argument("--max-length", type=int, default=1536)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--env-steps", type=int, default=None, help="episode step limit (8; quick: 2)")
    ap.add_argument("--max-tokens", type=int, default=None, help="tokens per reply (256; quick: 16)")
    ap.add_argument("--allow-cut-replies", action="store_true",
                    help="evaluate even when --max-tokens is below most of the trained replies (they come out cut)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    quick = {"train_pairs": 6, "dev_pairs": 2, "sft_steps": 2, "env_steps": 2, "max_tokens": 16}
    full = {"train_pairs": None, "dev_pairs": 40, "sft_steps": 60, "env_steps": 8, "max_tokens": 256}
    for key, value in (full if args.full else quick).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    from ehrgym.train import notebook as nb
    from ehrgym.train.config import SftSettings
    from ehrgym.train.sft import run_sft

    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    db, bench = _ensure_data(args)
    model = nb.base_model(args.model, args.work, str(args.gguf) if args.gguf else None, args.seed)
    timings: dict[str, float] = {}
    progress = not args.quiet

    start = time.perf_counter()
    runs = nb.train_runs(None, bench, db, args.work, args.train_pairs, args.seed, progress)
    data, stats = nb.export(runs, args.work, "text", args.max_chars, only_success=True)
    print(stats.render())
    timings["data_s"] = time.perf_counter() - start
    replies = reply_lengths(model, data)
    print(f"assistant turns: {len(replies)}, tokens median {replies[len(replies) // 2]}, "
          f"90th percentile {replies[int(0.9 * (len(replies) - 1))]}, max {replies[-1]}")
    if replies and args.max_tokens < replies[int(0.9 * (len(replies) - 1))] and not args.allow_cut_replies:
        raise SystemExit(f"--max-tokens {args.max_tokens} is below the 90th percentile of the trained replies "
                         f"({replies[int(0.9 * (len(replies) - 1))]} tokens): the tuned model's actions would be cut "
                         "before their closing fence and read as no action. Raise --max-tokens (or pass "
                         "--allow-cut-replies).")

    def evaluate(which: str, path: str) -> Path:
        start = time.perf_counter()
        out = nb.evaluate(bench, db, path, args.work / f"run-{which}", args.dev_pairs, args.k, args.env_steps,
                          args.max_tokens, args.seed, progress)
        timings[f"eval_{which}_s"] = time.perf_counter() - start
        return out

    before = evaluate("before", model)
    start = time.perf_counter()
    tuned = args.work / "sft-model"
    result = run_sft(SftSettings(model=model, data=str(data), output_dir=str(tuned), seed=args.seed,
                                 trl={"max_steps": args.sft_steps, "max_length": args.max_length,
                                      "learning_rate": args.lr, "per_device_train_batch_size": 1}))
    timings["sft_s"] = time.perf_counter() - start
    print(f"SFT: {result.steps} steps, loss {result.losses[0]:.3f} → {result.losses[-1]:.3f}; "
          f"what the loss saw: {result.coverage}")
    after = evaluate("after", str(tuned))

    table = nb.before_after(before, after, args.seed)
    print(table.to_string(index=False))
    nb.plot(table, args.work / "bench_train.png")
    report = {"model": model, "sft_model": str(tuned), "dev_pairs": args.dev_pairs, "k": args.k,
              "sft_steps": result.steps, "sft_losses": result.losses,
              "sft_coverage": result.coverage, "max_length": args.max_length, "max_tokens": args.max_tokens, "data": stats.to_dict(),
              "timings": {k: round(v, 1) for k, v in timings.items()},
              "total_s": round(time.perf_counter() - t0, 1),
              "clean_vs_noise": json.loads(table.to_json(orient="records"))}
    (args.work / "bench_train.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.work / 'bench_train.json'} ({report['total_s']} s)")


if __name__ == "__main__":
    main()
