"""``ehrgym train``: SFT data from runs, supervised fine-tuning, GRPO in the gym, model preparation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click


def _overrides(max_steps: int | None, output_dir: str | None, model: str | None) -> dict:
    out: dict = {}
    if max_steps is not None:
        out["trl"] = {"max_steps": max_steps}
    if output_dir is not None:
        out["output_dir"] = output_dir
    if model is not None:
        out["model"] = model
    return out


def _print_result(result: object) -> None:
    for entry in getattr(result, "logs", []):
        if "loss" in entry:
            shown = {k: entry[k] for k in ("step", "loss", "reward", "rewards/strict_success/mean") if k in entry}
            click.echo("  " + json.dumps(shown))
    click.echo(json.dumps(result.to_dict()))  # type: ignore[attr-defined]


@click.group(name="train")
def group() -> None:
    """Train agents in the gym: trajectories → SFT data → SFT, and GRPO with the verifier as reward.

    Needs the train extra: pip install -e ".[train]". Only the train split is ever used."""


@group.command("sft-data")
@click.option("--runs", "runs", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="run directory of `ehrgym eval run --split train` (repeat for several)")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="output JSONL")
@click.option("--format", "fmt", type=click.Choice(["tools", "text"]), default="tools", show_default=True,
              help="tools: native tool calls + the environment's tool schemas; text: the plain-text protocol")
@click.option("--only-success", is_flag=True, default=False, help="keep only strictly successful episodes")
@click.option("--max-chars", type=int, default=None,
              help="compact mode: clip observations so an example fits this many characters (≈ 4 per token); "
                   "examples that still do not fit are dropped")
@click.option("--prompt", default="neutral", show_default=True, help="system prompt variant")
@click.option("--tokenizer", default=None, type=click.Path(exists=True, file_okay=False),
              help="a local model directory: count tokens exactly in the statistics")
@click.option("--stats-json", default=None, type=click.Path(dir_okay=False), help="also write the statistics here")
def sft_data_cmd(runs: tuple[str, ...], out: str, fmt: str, only_success: bool, max_chars: int | None, prompt: str,
                 tokenizer: str | None, stats_json: str | None) -> None:
    """Export the train-split episodes of RUNS as chat examples for SFT (held-out splits are refused)."""
    from ehrgym.train.data import ExportOptions, export_sft_data

    tok = None
    if tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    stats = export_sft_data(runs, out, ExportOptions(fmt, only_success, max_chars, prompt), tok)
    click.echo(f"wrote {out}")
    click.echo(stats.render())
    if stats_json:
        Path(stats_json).write_text(json.dumps(stats.to_dict(), indent=2) + "\n", encoding="utf-8")


@group.command("sft")
@click.option("--config", "config", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML/TOML config (configs/train/sft-*.yaml)")
@click.option("--max-steps", type=int, default=None, help="override trl.max_steps")
@click.option("--output-dir", default=None, help="override output_dir")
@click.option("--model", default=None, help="override model (a local directory)")
@click.option("--data", default=None, help="override data (SFT JSONL)")
def sft_cmd(config: str, max_steps: int | None, output_dir: str | None, model: str | None,
            data: str | None) -> None:
    """Supervised fine-tuning with TRL's SFTTrainer; writes a model directory the hf agent loads."""
    from ehrgym.train.config import SftSettings, load_settings
    from ehrgym.train.sft import run_sft

    overrides = _overrides(max_steps, output_dir, model)
    if data is not None:
        overrides["data"] = data
    _print_result(run_sft(load_settings(SftSettings, config, overrides)))


@group.command("grpo")
@click.option("--config", "config", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML/TOML config (configs/train/grpo-*.yaml)")
@click.option("--max-steps", type=int, default=None, help="override trl.max_steps")
@click.option("--output-dir", default=None, help="override output_dir")
@click.option("--model", default=None, help="override model (a local directory)")
@click.option("--reward", type=click.Choice(["strict", "lenient", "shaped"]), default=None,
              help="override the reward variant")
@click.option("--bench", default=None, help="override bench")
@click.option("--db", default=None, help="override db")
def grpo_cmd(config: str, max_steps: int | None, output_dir: str | None, model: str | None, reward: str | None,
             bench: str | None, db: str | None) -> None:
    """GRPO with the episode as environment and the verifier's verdict as reward (train split only)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from ehrgym.train.config import GrpoSettings, load_settings
    from ehrgym.train.grpo import run_grpo

    overrides = _overrides(max_steps, output_dir, model)
    for key, value in (("reward", reward), ("bench", bench), ("db", db)):
        if value is not None:
            overrides[key] = value
    _print_result(run_grpo(load_settings(GrpoSettings, config, overrides)))


@group.command("convert-gguf")
@click.option("--gguf", required=True, type=click.Path(exists=True, dir_okay=False), help="a .gguf file")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="model directory to write")
def convert_gguf_cmd(gguf: str, out: str) -> None:
    """Turn a GGUF model into a normal model directory (dequantised) for the trainers and the hf agent."""
    from ehrgym.train.models import convert_gguf

    click.echo(f"wrote {convert_gguf(gguf, out)}")


@group.command("tiny-model")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="model directory to write")
@click.option("--seed", type=int, default=0, show_default=True)
def tiny_model_cmd(out: str, seed: int) -> None:
    """Write a tiny randomly initialised model (Qwen2 architecture, offline tokenizer) for smoke runs."""
    from ehrgym.train.models import save_tiny_model

    click.echo(f"wrote {save_tiny_model(out, seed)}")
