"""``ehrgym serve …``: episodes over the network.

    ehrgym serve http --bench DIR --db PATH [--host 127.0.0.1 --port 8000 --max-sessions 64]
    ehrgym serve mcp  --bench DIR --db PATH [--http --host 127.0.0.1 --port 8001]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click



def _missing_extra(exc: ImportError) -> click.ClickException:
    return click.ClickException(f"the episode server needs the serve extra ({exc.name or exc} is not "
                                f"installed): pip install 'ehrgym[serve]'")


def _options(fn: Any) -> Any:
    for option in reversed([
        click.option("--bench", "bench_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                     required=True, help="a built benchmark directory"),
        click.option("--db", "db_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     required=True, help="the database the benchmark was built on"),
        click.option("--split", type=click.Choice(["train", "dev", "test"]), default=None,
                     help="serve only this split's tasks (default: all)"),
        click.option("--max-sessions", default=64, show_default=True, help="live sessions; one more gets 429"),
        click.option("--idle-timeout", default=300.0, show_default=True,
                     help="seconds without a request after which a session is closed (reaped)"),
        click.option("--max-steps", default=20, show_default=True, help="actions per episode"),
        click.option("--episode-timeout", type=float, default=None, help="wall-clock seconds per episode"),
        click.option("--no-python", is_flag=True, help="offer only the sql and answer tools"),
        click.option("--host", default="127.0.0.1", show_default=True,
                     help="address to bind (the default accepts local clients only)"),
    ]):
        fn = option(fn)
    return fn


def _manager(bench_dir: Path, db_path: Path, split: str | None, max_sessions: int, idle_timeout: float,
             max_steps: int, episode_timeout: float | None, no_python: bool) -> Any:
    from ehrgym.env.episode import EnvConfig
    from ehrgym.serve.sessions import ServeConfig, SessionManager

    env = EnvConfig(max_steps=max_steps, episode_timeout_s=episode_timeout, python=not no_python)
    try:
        return SessionManager(bench_dir, db_path, ServeConfig(max_sessions=max_sessions, idle_timeout_s=idle_timeout,
                                                              split=split, env=env))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.group()
def group() -> None:
    """Serve episodes: an HTTP/WebSocket episode server (OpenEnv-shaped) or an MCP server."""


@group.command()
@_options
@click.option("--port", default=8000, show_default=True)
def http(bench_dir: Path, db_path: Path, split: str | None, max_sessions: int, idle_timeout: float, max_steps: int,
         episode_timeout: float | None, no_python: bool, host: str, port: int) -> None:
    """Serve episodes over HTTP and WebSocket: /reset /step /state /close /ws /health /schema /tasks.

    Routes and payloads follow OpenEnv's (see README, "Episode server"); clients in Python use
    ehrgym.serve.client.EpisodeClient."""
    try:
        from ehrgym.serve.http import serve
    except ImportError as exc:
        raise _missing_extra(exc) from exc
    manager = _manager(bench_dir, db_path, split, max_sessions, idle_timeout, max_steps, episode_timeout, no_python)
    click.echo(f"serving {len(manager.tasks)} tasks of {bench_dir} on http://{host}:{port} "
               f"(max {max_sessions} sessions, run {manager.run_id})", err=True)
    serve(manager, host=host, port=port)


@group.command()
@_options
@click.option("--http", "over_http", is_flag=True, help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
@click.option("--port", default=8001, show_default=True)
def mcp(bench_dir: Path, db_path: Path, split: str | None, max_sessions: int, idle_timeout: float, max_steps: int,
        episode_timeout: float | None, no_python: bool, host: str, over_http: bool, port: int) -> None:
    """Serve episodes as MCP tools: list_tasks, start_episode, sql, python, answer, end_episode."""
    try:
        from ehrgym.serve.mcp import create_mcp_server
    except ImportError as exc:
        raise _missing_extra(exc) from exc
    manager = _manager(bench_dir, db_path, split, max_sessions, idle_timeout, max_steps, episode_timeout, no_python)
    try:
        server = create_mcp_server(manager)
        if over_http:
            click.echo(f"MCP over streamable HTTP at http://{host}:{port}/mcp", err=True)
            server.run("streamable-http", host=host, port=port)
        else:
            server.run("stdio")
    finally:
        manager.close()
