"""The benchmark's episodes as MCP tools (the official ``mcp`` package, 2.x ``MCPServer``).

Tools: ``list_tasks`` (public ids and public metadata only), ``start_episode`` (→ an ``episode_id``
and the first observation), ``sql``, ``python`` (each one step of that episode), ``answer`` (the
final answer or an abstention → the verdict and reward) and ``end_episode``. Episodes are sessions
of a :class:`~ehrgym.serve.sessions.SessionManager`, so the limits, reaping and capacity of the
HTTP server apply; several episodes may run at once through one MCP connection.

    ehrgym serve mcp --bench DIR --db PATH            # stdio (Claude Desktop, agent frameworks)
    ehrgym serve mcp --bench DIR --db PATH --http     # streamable HTTP at http://HOST:PORT/mcp
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ehrgym.serve.errors import ServeError
from ehrgym.serve.sessions import SessionManager

INSTRUCTIONS = (
    "EHR-RobustGym episodes: call list_tasks, then start_episode(task_id) and read the question and "
    "the answer protocol in the observation. Explore the hospital database with sql(episode_id, query) "
    "and python(episode_id, code), then finish with answer(episode_id, value=...) or, when the records "
    "do not support an answer, answer(episode_id, abstain=<reason code>, explanation=...).")


def _step_view(out: dict[str, Any]) -> dict[str, Any]:
    """What a tool returns for one step: the observation text and the episode's status."""
    obs = out["observation"]
    view = {"episode_id": out["session_id"], "observation": obs["text"], "done": out["done"],
            "steps_left": obs.get("steps_left", 0)}
    if out["done"]:
        info = out.get("info") or {}
        view.update({"reward": out["reward"], "terminated": out["terminated"], "truncated": out["truncated"],
                     "termination": info.get("termination"), "verdict": info.get("verdict")})
    return view


def create_mcp_server(manager: SessionManager) -> MCPServer:
    """An MCP server whose tools run episodes of ``manager``'s benchmark."""
    server = MCPServer("ehrgym", instructions=INSTRUCTIONS)

    def call(fn: Any, *args: Any) -> dict[str, Any]:
        try:
            return fn(*args)
        except ServeError as exc:  # an MCP tool error with the server's reason
            raise ToolError(f"{exc.code}: {exc.message}") from None

    @server.tool()
    def list_tasks(split: str | None = None, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """List the served tasks: their public ids, questions, intents, levels and splits."""
        tasks = manager.public_tasks(split)
        offset, limit = max(0, int(offset)), max(1, min(int(limit), 500))
        return {"total": len(tasks), "offset": offset, "tasks": tasks[offset:offset + limit]}

    @server.tool()
    def start_episode(task_id: str) -> dict[str, Any]:
        """Start an episode on a task (its public id from list_tasks); returns its episode_id and the
        first observation: the question, the tools, the answer protocol and the tables."""
        out = call(manager.reset, task_id)
        return {"episode_id": out["session_id"], "observation": out["observation"]["text"],
                "steps_left": out["observation"]["steps_left"], "max_steps": out["info"]["max_steps"]}

    @server.tool()
    def sql(episode_id: str, query: str) -> dict[str, Any]:
        """Run one read-only DuckDB SELECT in the episode (one step); returns the result as text."""
        return _step_view(call(manager.step, episode_id, {"tool": "sql", "query": query}))

    @server.tool()
    def python(episode_id: str, code: str) -> dict[str, Any]:
        """Run Python in the episode's persistent worker (one step): pandas as pd, numpy as np,
        sql(query) returns a DataFrame. Print what you want to see."""
        return _step_view(call(manager.step, episode_id, {"tool": "python", "code": code}))

    @server.tool()
    def answer(episode_id: str, value: str | float | int | bool | list[str | float | int] | None = None,
               abstain: str | None = None, explanation: str = "") -> dict[str, Any]:
        """Finish the episode with the final answer (value) or an abstention (abstain: a reason code
        from the answer protocol, with an explanation); returns the verdict and the reward."""
        action: dict[str, Any] = {"tool": "answer", "value": value, "explanation": explanation}
        if abstain is not None:
            action["abstain"] = abstain
        return _step_view(call(manager.step, episode_id, action))

    @server.tool()
    def end_episode(episode_id: str) -> dict[str, Any]:
        """Close an episode early (it ends without an answer) and free its slot."""
        return call(manager.close_session, episode_id)

    return server
