"""``ehrgym eval``: run agents on a benchmark (``run``) and summarise run directories (``summarize``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def _parse_agent_args(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--agent-arg")
        key, raw = pair.split("=", 1)
        try:
            out[key.strip().replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip().replace("-", "_")] = raw
    return out


@click.group(name="eval")
def group() -> None:
    """Run agents on a benchmark (k trials, resumable) and summarise the results."""


@group.command("run")
@click.option("--bench", "bench_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="benchmark directory (from `ehrgym bench build`)")
@click.option("--db", "db_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="the DuckDB database the benchmark was built on")
@click.option("--agent", required=True, help="agent name: oracle, credulous, skeptic, chat, hf, …")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="run directory (created; rerun the same command to resume)")
@click.option("--k", default=4, show_default=True, type=int, help="trials per task")
@click.option("--workers", default=1, show_default=True, type=int,
              help="concurrent episodes (processes for scripted agents, threads for API agents)")
@click.option("--model", default=None, help="model name (chat: or EHRGYM_MODEL; hf: a local path)")
@click.option("--base-url", default=None, help="OpenAI-compatible server URL (or OPENAI_BASE_URL)")
@click.option("--prompt", default=None, help="system prompt variant: neutral (default) or noise_aware")
@click.option("--no-tools", is_flag=True, default=False, help="plain-text protocol instead of native tool calls")
@click.option("--temperature", type=float, default=None)
@click.option("--top-p", type=float, default=None)
@click.option("--max-tokens", type=int, default=None)
@click.option("--model-seed", type=int, default=None, help="sampling seed sent to the server (+ trial index)")
@click.option("--agent-arg", "agent_args", multiple=True, help="extra agent option KEY=VALUE (JSON value)")
@click.option("--split", default=None, help="only tasks of this split (train/dev/test/ood)")
@click.option("--intent", default=None, help="only tasks of this intent")
@click.option("--variant", default=None, type=click.Choice(["clean", "noise"]), help="only this variant")
@click.option("--limit-pairs", type=int, default=None, help="only N Clean–Noise pairs, spread over intents and noise subtypes "
              "(a fixed order: a larger N extends a smaller one)")
@click.option("--max-steps", type=int, default=None, help="episode step limit (environment default otherwise)")
@click.option("--time-limit", type=float, default=None, help="episode wall-clock limit in seconds")
@click.option("--seed", type=int, default=0, show_default=True, help="run seed (per-episode seeds derive from it)")
@click.option("--retry-errors", is_flag=True, default=False, help="re-run episodes recorded as infrastructure errors")
@click.option("--no-python", is_flag=True, default=False, help="episodes without the python tool")
@click.option("--python-unsafe", is_flag=True, default=False,
              help="run the python tool even without OS isolation (UNSAFE; labelled in run.json and every record)")
@click.option("--backend", default="local", show_default=True, type=click.Choice(["local", "ray"]),
              help="where episodes run: local processes/threads, or Ray actors (--workers of them)")
@click.option("--address", default=None,
              help="Ray cluster address (e.g. auto, or ray://HEAD:10001); default: a local Ray instance")
@click.option("--result-store", default=None, type=click.Path(file_okay=False),
              help="directory of query results shared with other runs on this database (created; episodes are the "
                   "same, only faster; reuse shows in timings, so meant for scripted agents)")
@click.option("--no-progress", is_flag=True, default=False)
def run_cmd(bench_dir: str, db_path: str, agent: str, out_dir: str, k: int, workers: int, model: str | None,
            base_url: str | None, prompt: str | None, no_tools: bool, temperature: float | None,
            top_p: float | None, max_tokens: int | None, model_seed: int | None, agent_args: tuple[str, ...],
            split: str | None, intent: str | None, variant: str | None, limit_pairs: int | None,
            max_steps: int | None, time_limit: float | None, seed: int, retry_errors: bool,
            no_python: bool, python_unsafe: bool, backend: str, address: str | None, result_store: str | None,
            no_progress: bool) -> None:
    """Run AGENT on every task of the benchmark K times; episodes are appended to OUT/episodes.jsonl.

    With --backend ray the episodes run on Ray actors (a local instance, or the cluster at --address);
    every node needs the kit and the database at the same path. Only this process writes OUT."""
    from ehrgym.eval.runner import run_evaluation

    kwargs: dict[str, Any] = {"model": model, "base_url": base_url, "prompt": prompt,
                              "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
                              "seed": model_seed}
    kwargs = {key: v for key, v in kwargs.items() if v is not None}
    if no_tools:
        kwargs["tools"] = False
    kwargs.update(_parse_agent_args(agent_args))
    task_filter = {key: v for key, v in {"split": split, "intent": intent, "variant": variant}.items() if v}
    env_config: dict[str, Any] = {}
    if max_steps is not None:
        env_config["max_steps"] = max_steps
    if no_python:
        env_config["python"] = False
    if python_unsafe:
        env_config["python_unsafe"] = True
    summary = run_evaluation(bench_dir, db_path, agent, out_dir, k=k, workers=workers, agent_kwargs=kwargs,
                             tasks=task_filter or None, limit_pairs=limit_pairs, env_config=env_config,
                             seed=seed, episode_time_limit=time_limit, retry_errors=retry_errors,
                             progress=not no_progress, backend=backend, address=address,
                             result_store=result_store)
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    click.echo(f"run {summary.run_id} in {summary.run_dir}: {summary.ran} episodes run, {summary.skipped} already "
               f"done, {summary.wall_seconds:.1f} s ({summary.episodes_per_second:.1f} ep/s)")
    click.echo(f"success (strict): clean {pct(summary.success_clean)}, noise {pct(summary.success_noise)}; "
               f"terminations {summary.terminations}")
    if summary.infrastructure_errors:
        click.echo(f"{summary.infrastructure_errors} infrastructure errors (excluded from success rates); rerun "
                   f"with --retry-errors to try them again", err=True)


@group.command("summarize")
@click.argument("rundirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--lenient", is_flag=True, default=False, help="lenient abstention scoring (any reason)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="also write the summary (markdown) to this file")
def summarize_cmd(rundirs: tuple[str, ...], lenient: bool, out_path: str | None) -> None:
    """Success on Clean/Noise, drop, breakdowns, pass^k, RS(c), CIs, McNemar for RUNDIRS."""
    from ehrgym.eval.metrics import load_episodes, render_summary, summarize

    df = load_episodes([Path(r) for r in rundirs])
    tables = summarize(df, strict=not lenient)
    text = render_summary(tables)
    click.echo(text)
    if out_path:
        Path(out_path).write_text(text + "\n", encoding="utf-8")
