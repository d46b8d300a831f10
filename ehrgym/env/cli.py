"""``ehrgym env …``: play an episode by hand, or ask the SQL gate about a query.

    ehrgym env play --bench DIR --db PATH [--task ID]   # actions from stdin, one per line/block
    ehrgym env gate "SELECT * FROM labevents"          # admitted (and how) or refused (and why)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.group()
def group() -> None:
    """Episodes: play a task interactively, check queries against the SQL gate."""


@group.command()
@click.option("--bench", "bench_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--db", "db_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--task", "task_id", default=None, help="task id or public id (default: the first task of the benchmark)")
@click.option("--max-steps", default=20, show_default=True)
@click.option("--no-python", is_flag=True, help="offer only the sql and answer tools")
def play(bench_dir: Path, db_path: Path, task_id: str | None, max_steps: int, no_python: bool) -> None:
    """Play one episode; type actions (SQL: …, PYTHON: …, ANSWER: …, ABSTAIN: reason: …).

    An action ends at an empty line (so multi-line SQL works); end of input aborts."""
    from ehrgym.env.episode import EhrEnv, EnvConfig

    with EhrEnv.from_benchmark(bench_dir, db_path, EnvConfig(max_steps=max_steps, python=not no_python)) as env:
        task = task_id or env.benchmark.tasks[0].task_id
        click.echo(env.reset(task).text)
        while not env.done:
            click.echo("\n> ", nl=False)
            lines: list[str] = []
            for line in sys.stdin:
                if not line.strip() and lines:
                    break
                if line.strip():
                    lines.append(line.rstrip("\n"))
            if not lines:
                env.abort("agent_error")
                click.echo("\n(no more input; episode aborted)")
                break
            result = env.step("\n".join(lines))
            click.echo(result.observation.text)
        click.echo(f"\nverdict: {env.verdict}")


@group.command()
@click.argument("query")
@click.option("--duckdb-check", type=click.Choice(["tokens", "ast"]), default="tokens", show_default=True,
              help="the gate's second layer: DuckDB's lexer (tokens) or DuckDB's full parser (ast)")
def gate(query: str, duckdb_check: str) -> None:
    """Say whether QUERY passes the SQL gate, and what runs if it does."""
    from ehrgym.env.gate import SqlGate
    from ehrgym.errors import GateRejection

    g = SqlGate(duckdb_check=duckdb_check)
    try:
        decision = g.check(query)
    except GateRejection as exc:
        click.echo(str(exc))
        sys.exit(1)
    finally:
        g.close()
    if decision.kind == "static":
        click.echo("admitted: answered by the gate from the kit's schema")
    else:
        click.echo(f"admitted; tables read: {', '.join(decision.tables) or '(none)'}")
        if decision.rewritten:
            click.echo(f"runs as: {decision.sql}")
