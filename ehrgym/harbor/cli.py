"""``ehrgym export …``: the benchmark in other harnesses' formats (Harbor task directories)."""

from __future__ import annotations

import click


@click.group(name="export")
def group() -> None:
    """Export a benchmark for other harnesses (Harbor)."""


@group.command("harbor")
@click.option("--bench", "bench_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="benchmark directory (from `ehrgym bench build`)")
@click.option("--db", "db_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="the DuckDB database the benchmark was built on")
@click.option("--split", default="test", show_default=True, help="tasks of this split (train/dev/test/ood, or 'all')")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="dataset directory: one Harbor task directory per task (an earlier export there is replaced)")
@click.option("--limit", type=int, default=None, help="only the first N tasks (ordered by public id)")
@click.option("--task", "task_ids", multiple=True, help="only these task ids or public ids (repeatable)")
@click.option("--cpus", type=int, default=1, show_default=True, help="[environment].cpus of every task")
@click.option("--memory-mb", type=int, default=2048, show_default=True, help="[environment].memory_mb")
@click.option("--agent-timeout", type=float, default=1800.0, show_default=True, help="[agent].timeout_sec")
@click.option("--no-progress", is_flag=True, default=False)
def harbor_cmd(bench_dir: str, db_path: str, split: str, out_dir: str, limit: int | None, task_ids: tuple[str, ...],
               cpus: int, memory_mb: int, agent_timeout: float, no_progress: bool) -> None:
    """Write one Harbor task directory per task: instruction, task.toml, an image with the task's
    database (overlay materialised) and the gated `ehrgym-sql` command, the verifier and the oracle.

    Run it with `harbor run -p OUT -a oracle` (checks every task), then with your agent."""
    from ehrgym.harbor.export import HarborOptions, export_harbor

    opts = HarborOptions(cpus=cpus, memory_mb=memory_mb, agent_timeout_sec=agent_timeout)
    summary = export_harbor(bench_dir, db_path, out_dir, split=None if split == "all" else split, limit=limit,
                            task_ids=list(task_ids) or None, options=opts, progress=not no_progress)
    click.echo(f"exported {summary.tasks} tasks ({summary.benchmark}, split {summary.split}) to {summary.out_dir}: "
               f"{summary.files} files, {summary.bytes / 1e6:.1f} MB")
