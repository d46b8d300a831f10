"""The episode server over HTTP and WebSocket (FastAPI), shaped like OpenEnv's protocol.

=====================  ===========================================================================
Route                  What it does
=====================  ===========================================================================
``GET /health``        ``{"status": "healthy", "active_sessions", "max_sessions", "server_run", …}``
``GET /metadata``      name, description, version (OpenEnv's ``EnvironmentMetadata``)
``GET /schema``        ``{"action", "observation", "state"}`` JSON schemas (as OpenEnv) plus ``tools``:
                       the tools' function-calling schemas (:func:`ehrgym.env.tools.tool_schemas`)
``GET /tasks``         ``{"tasks": [{"task_id", "question", "intent", "level", "split"}]}`` (``?split=``);
                       public ids and public metadata only
``POST /reset``        ``{"task_id"?, "seed"?, "session_id"?, "request_id"?}`` → ``{"session_id", "observation",
                       "reward": null, "done": false, "info"}``; without ``session_id`` opens a session
``POST /step``         ``{"session_id", "action", "request_id"?}`` → ``{"observation", "reward", "done",
                       "terminated", "truncated", "info"}``; ``action`` is a tool call
                       (``{"tool": "sql", "query": …}``, ``{"name": …, "arguments": …}``) or action text
``GET /state``         ``?session_id=`` → OpenEnv's ``State`` (``episode_id``, ``step_count``) and more
``POST /close``        ``{"session_id"}`` → ends the session (an unfinished episode is aborted)
``WS /ws``             OpenEnv's messages: ``{"type": "reset"|"step"|"state"|"close", "data": {…}}`` →
                       ``{"type": "observation"|"state"|"error", "data": {…}}``; one session per socket
=====================  ===========================================================================

Errors are JSON ``{"error": code, "detail": reason}`` with a 4xx status: 400 bad request, 404 unknown
task or session (closed, reaped, or from before a restart), 409 episode over, 413 action too long,
422 malformed body, 429 server full (with ``Retry-After``); an unexpected failure is a 500 with the
reason and never stops the server.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ehrgym import __version__
from ehrgym.serve.errors import BadRequest, ServeError, ServerFull, SessionNotFound
from ehrgym.serve.sessions import SessionManager


class ResetRequest(BaseModel):
    """OpenEnv's ResetRequest (``seed``, ``episode_id``) plus the task and the session."""

    model_config = ConfigDict(extra="allow")
    task_id: str | None = Field(None, max_length=255, description="a task's public id (GET /tasks); without it "
                                "the task is drawn by seed, or the served tasks are taken in turn")
    session_id: str | None = Field(None, max_length=255, description="start the next episode in this session")
    request_id: str | None = Field(None, max_length=255, description="retry key: a repeated id is answered once")
    seed: int | None = Field(None, ge=0, description="draws the task when task_id is absent (same seed, same task)")
    episode_id: str | None = Field(None, max_length=255, description="accepted for OpenEnv clients; ignored")


class StepRequest(BaseModel):
    """OpenEnv's StepRequest (``action``, ``request_id``) plus the session."""

    model_config = ConfigDict(extra="allow")
    session_id: str = Field(..., max_length=255)
    action: dict[str, Any] | str = Field(..., description="a tool call object or action text (GET /schema)")
    request_id: str | None = Field(None, max_length=255)
    timeout_s: float | None = Field(None, gt=0, description="accepted for OpenEnv clients; the env's limits apply")


class CloseRequest(BaseModel):
    session_id: str = Field(..., max_length=255)


def action_schema() -> dict[str, Any]:
    """The JSON schema of a step's ``action``: one of the tools' calls, tagged by ``tool``."""
    from ehrgym.env.tools import TOOLS

    variants = []
    for name, tool in TOOLS.items():
        params = tool.parameters()
        props = {"tool": {"const": name}, **params["properties"]}
        variants.append({"type": "object", "title": name, "description": tool.description,
                         "properties": props, "required": ["tool", *params["required"]],
                         "additionalProperties": False})
    return {"oneOf": [*variants, {"type": "string", "description": "action text: SQL: …, PYTHON: …, ANSWER: …, "
                                                                   "ABSTAIN: reason: …"}]}


def observation_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {
        "text": {"type": "string", "description": "what the agent reads"},
        "kind": {"type": "string", "enum": ["task", "sql", "python", "answer", "invalid", "limit"]},
        "task_id": {"type": "string"}, "step": {"type": "integer"}, "steps_left": {"type": "integer"},
        "question": {"type": "string"}, "protocol": {"type": "string"}, "tools": {"type": "string"},
        "schema_summary": {"type": "string"}, "schemas": {"type": "array", "items": {"type": "string"}},
        "columns": {"type": "array", "items": {"type": "string"}}, "rows": {"type": "array"},
        "row_count": {"type": ["integer", "null"]}, "truncated": {"type": "boolean"},
        "error": {"type": ["string", "null"]}}, "required": ["text", "kind"]}


def state_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {
        "episode_id": {"type": "string"}, "session_id": {"type": "string"}, "step_count": {"type": "integer"},
        "task_id": {"type": ["string", "null"]}, "done": {"type": "boolean"}, "steps_left": {"type": "integer"},
        "episodes": {"type": "integer"}, "idle_s": {"type": "number"}}, "required": ["episode_id", "step_count"]}


class BodyLimit:
    """Pure ASGI middleware: a request whose Content-Length is over ``limit`` bytes gets 413."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for name, value in scope.get("headers", ()):
                if name == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                    response = JSONResponse({"error": "payload_too_large",
                                             "detail": f"the request body is over {self.limit} bytes"},
                                            status_code=413)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _error(exc: ServeError) -> JSONResponse:
    headers = {"Retry-After": "1"} if isinstance(exc, ServerFull) else None
    return JSONResponse(exc.to_dict(), status_code=exc.status, headers=headers)


def create_app(manager: SessionManager, *, close_manager: bool = True) -> FastAPI:
    """The FastAPI app serving ``manager``'s sessions (closed with the app when ``close_manager``)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        import anyio.to_thread

        # sync routes run in a thread pool: room for every session plus the light routes
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(40, manager.config.max_sessions + 8)
        yield
        if close_manager:
            await run_in_threadpool(manager.close)

    app = FastAPI(title="EHR-RobustGym episode server", version=__version__, lifespan=lifespan,
                  description="Episodes of an EHR-RobustGym benchmark over HTTP and WebSocket (OpenEnv-shaped).")
    app.state.manager = manager

    limit = max(1 << 20, 4 * manager.config.max_action_chars + 65536)  # bytes of a request body
    app.add_middleware(BodyLimit, limit=limit)

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": "internal", "detail": f"{type(exc).__name__}: {str(exc)[:500]}"},
                            status_code=500)

    # Routes are async and answer with ready JSON: the light ones never leave the event loop, the
    # session ones hop to a worker thread once (a step may wait on its query process or the
    # session's lock), instead of FastAPI's several hops for a sync route and its response model.
    public_tasks: dict[str | None, bytes] = {}

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse(manager.health())

    @app.get("/metadata")
    async def metadata() -> JSONResponse:
        return JSONResponse({"name": "ehrgym", "description": "EHR-RobustGym: answer or abstain on questions over "
                             "a noisy MIMIC-IV-shaped EHR with SQL and Python tools", "version": __version__,
                             "benchmark": manager.bench_dir.name, "tasks": len(manager.tasks)})

    @app.get("/schema")
    async def schema() -> JSONResponse:
        from ehrgym.env.tools import tool_schemas

        return JSONResponse({"action": action_schema(), "observation": observation_schema(), "state": state_schema(),
                             "tools": tool_schemas(manager.config.env.tools)})

    @app.get("/tasks")
    async def tasks(split: str | None = None) -> Response:
        if split not in public_tasks:
            public_tasks[split] = json.dumps({"tasks": manager.public_tasks(split)}).encode()
        return Response(public_tasks[split], media_type="application/json")

    @app.post("/reset")
    async def reset(request: ResetRequest) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(manager.reset, request.task_id, request.session_id,
                                                    request.request_id, request.seed))

    @app.post("/step")
    async def step(request: StepRequest) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(manager.step, request.session_id, request.action,
                                                    request.request_id))

    @app.get("/state")
    async def state(session_id: str) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(manager.state, session_id))

    @app.post("/close")
    async def close(request: CloseRequest) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(manager.close_session, request.session_id))

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        session_id: str | None = None
        try:
            while True:
                raw = await websocket.receive_text()
                reply, session_id, stop = await _ws_message(manager, raw, session_id)
                await websocket.send_text(json.dumps(reply))
                if stop:
                    break
        except WebSocketDisconnect:
            pass
        finally:
            if session_id is not None:
                try:
                    await run_in_threadpool(manager.close_session, session_id)
                except Exception:  # noqa: BLE001 - reaped or closed already
                    pass
            try:
                await websocket.close()
            except Exception:  # noqa: BLE001 - the client is gone
                pass

    return app


_WS_CODES = {"server_full": "CAPACITY_REACHED", "bad_request": "VALIDATION_ERROR", "payload_too_large":
             "VALIDATION_ERROR", "unknown_task": "VALIDATION_ERROR", "session_not_found": "SESSION_ERROR",
             "episode_over": "EXECUTION_ERROR"}


async def _ws_message(manager: SessionManager, raw: str, session_id: str | None
                      ) -> tuple[dict[str, Any], str | None, bool]:
    """One OpenEnv WebSocket message → (reply, the socket's session id, whether to close)."""
    try:
        msg = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {"type": "error", "data": {"message": f"Invalid JSON: {exc}", "code": "INVALID_JSON"}}, session_id, False
    if not isinstance(msg, dict):
        return _ws_error(BadRequest("a message is a JSON object {\"type\": ..., \"data\": ...}")), session_id, False
    kind, data = msg.get("type"), msg.get("data") or {}
    try:
        if not isinstance(data, (dict, str)):
            raise BadRequest("data must be a JSON object")
        if kind == "reset":
            if not isinstance(data, dict):
                raise BadRequest("reset data must be an object with task_id")
            args = (data.get("task_id"), data.get("request_id"), data.get("seed"))
            try:
                out = await run_in_threadpool(manager.reset, args[0], session_id, *args[1:])
            except SessionNotFound:  # the socket's session was reaped: open another
                out = await run_in_threadpool(manager.reset, args[0], None, *args[1:])
            return {"type": "observation", "data": out}, out["session_id"], False
        if kind == "step":
            if session_id is None:
                raise BadRequest("send a reset message with a task_id before step")
            action = data.get("action", data) if isinstance(data, dict) and "action" in data else data
            request_id = data.get("request_id") if isinstance(data, dict) and "action" in data else None
            out = await run_in_threadpool(manager.step, session_id, action, request_id)
            return {"type": "observation", "data": out}, session_id, False
        if kind == "state":
            if session_id is None:
                return {"type": "state", "data": {"episode_id": None, "step_count": 0}}, session_id, False
            return {"type": "state", "data": await run_in_threadpool(manager.state, session_id)}, session_id, False
        if kind == "close":
            return {"type": "closed", "data": {"session_id": session_id}}, session_id, True
        raise BadRequest(f"Unknown message type: {str(kind)[:50]!r}; use reset, step, state or close")
    except ServeError as exc:
        return _ws_error(exc), session_id, False
    except Exception as exc:  # noqa: BLE001 - the socket stays open
        return {"type": "error", "data": {"message": f"{type(exc).__name__}: {str(exc)[:500]}",
                                          "code": "EXECUTION_ERROR"}}, session_id, False


def _ws_error(exc: ServeError) -> dict[str, Any]:
    return {"type": "error", "data": {"message": exc.message, "code": _WS_CODES.get(exc.code, "EXECUTION_ERROR"),
                                      "error": exc.code, **exc.extra}}


def serve(manager: SessionManager, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning") -> None:
    """Run the server in the foreground (``ehrgym serve http``)."""
    import uvicorn

    uvicorn.run(create_app(manager), host=host, port=port, log_level=log_level)
