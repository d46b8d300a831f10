"""What ``notebooks/05_train.ipynb`` and ``benchmarks/bench_train.py`` call: export trajectories,
fine-tune, evaluate a model before and after on dev pairs, and plot the result (thin notebook,
logic here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ehrgym.train.data import ExportOptions, ExportStats, export_sft_data

SUCCESS_COLUMNS = ["system", "n_pairs", "clean", "clean_ci_low", "clean_ci_high", "noise", "noise_ci_low",
                   "noise_ci_high", "pair", "pair_ci_low", "pair_ci_high"]
# episodes as in the skeptic trajectories the model learns from (no schema listing), without python
EVAL_ENV = {"schema_summary": False, "python": False}


def train_runs(runs: list[str] | None, bench: str | Path, db: str | Path, out_dir: str | Path,
               train_pairs: int | None = None, seed: int = 0, progress: bool = True) -> list[Path]:
    """``runs`` when given; otherwise a skeptic run on the train split (resumable) in ``out_dir``."""
    if runs:
        return [Path(r) for r in runs]
    from ehrgym.eval.runner import run_evaluation

    out = Path(out_dir) / "run-skeptic-train"
    run_evaluation(bench, db, "skeptic", out, k=1, tasks={"split": "train"}, limit_pairs=train_pairs,
                   seed=seed, progress=progress)
    return [out]


def export(runs: list[Path], out_dir: str | Path, fmt: str = "text", max_chars: int | None = 6000,
           only_success: bool = True) -> tuple[Path, ExportStats]:
    path = Path(out_dir) / f"sft-{fmt}.jsonl"
    return path, export_sft_data(runs, path, ExportOptions(fmt, only_success, max_chars))


def base_model(model: str | None, out_dir: str | Path, gguf: str | None = None, seed: int = 0) -> str:
    """``model``; or a GGUF file converted once; or a tiny random model (pipeline check only)."""
    from ehrgym.train.models import convert_gguf, save_tiny_model

    if model:
        return str(model)
    if gguf:
        out = Path(out_dir) / "base-model"
        if not out.exists():
            convert_gguf(gguf, out)
        return str(out)
    out = Path(out_dir) / "tiny-model"
    if not out.exists():
        save_tiny_model(out, seed)
    return str(out)


def evaluate(bench: str | Path, db: str | Path, model: str, out: str | Path, dev_pairs: int, k: int = 1,
             env_steps: int = 8, max_tokens: int = 256, seed: int = 0, progress: bool = True) -> Path:
    """The ``hf`` agent with ``model`` on the first ``dev_pairs`` dev pairs (resumable run directory)."""
    from ehrgym.eval.runner import run_evaluation

    run_evaluation(bench, db, "hf", out, k=k, tasks={"split": "dev"}, limit_pairs=dev_pairs,
                   agent_kwargs={"model": model, "max_tokens": max_tokens},
                   env_config={**EVAL_ENV, "max_steps": env_steps}, seed=seed, progress=progress)
    return Path(out)


def before_after(before: Path, after: Path, seed: int = 0) -> Any:
    """Clean, Noise and pair success with 95 % CIs of the two runs (``ehrgym.eval.metrics``)."""
    from ehrgym.eval.metrics import load_episodes, summarize

    table = summarize(load_episodes([before, after]), tables=["clean_vs_noise"], seed=seed)["clean_vs_noise"]
    table = table[SUCCESS_COLUMNS].copy()
    return table


def plot(table: Any, path: str | Path) -> Path:
    """Grouped bars (Clean, Noise, pair) per system with their CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = ["clean", "noise", "pair"]
    width = 0.8 / max(1, len(table))
    for i, (_, row) in enumerate(table.iterrows()):
        x = np.arange(len(names)) + i * width
        est = [row[n] * 100 for n in names]
        err = [[(row[n] - row[f"{n}_ci_low"]) * 100 for n in names],
               [(row[f"{n}_ci_high"] - row[n]) * 100 for n in names]]
        ax.bar(x, est, width, yerr=err, capsize=3, label=str(row["system"])[-40:])
    ax.set_xticks(np.arange(len(names)) + width * (len(table) - 1) / 2, ["Clean", "Noise", "pair"])
    ax.set_ylabel("success (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
