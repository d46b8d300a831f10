"""The episode server (ehrgym.serve): HTTP started the real way (uvicorn on a loopback port in a
thread), the Python client, WebSocket (OpenEnv messages), capacity, reaping, retries, bad input,
the no-leak rule of /tasks, and the MCP tools through the mcp package's in-process client."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from ehrgym.bench.build import build_benchmark  # noqa: E402
from ehrgym.bench.configs import BuildConfig  # noqa: E402
from ehrgym.bench.dataset import Benchmark, load_benchmark  # noqa: E402
from ehrgym.bench.task import Task  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402
from ehrgym.errors import EnvironmentStateError  # noqa: E402
from ehrgym.serve.client import EpisodeClient, scripted_actions  # noqa: E402
from ehrgym.serve.errors import (EpisodeOver, PayloadTooLarge, ServerFull,  # noqa: E402
                                 ServerUnavailable, SessionNotFound, UnknownTask)
from ehrgym.serve.sessions import PUBLIC_TASK_FIELDS, ServeConfig, SessionManager  # noqa: E402

ENV = EnvConfig(max_steps=6, python=False)


@pytest.fixture(scope="module")
def bench_dir(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serve") / "tiny"
    build_benchmark(synth_db, out, config=BuildConfig("tiny", 16, oversample=2.0, min_candidates=4), seed=5,
                    progress=False)
    return out


@pytest.fixture(scope="module")
def bench(bench_dir: Path) -> Benchmark:
    return load_benchmark(bench_dir)


class Server:
    """uvicorn serving a SessionManager on an ephemeral loopback port, in a thread."""

    def __init__(self, manager: SessionManager, port: int = 0) -> None:
        import uvicorn

        from ehrgym.serve.http import create_app

        self.manager = manager
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(manager), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def server(bench_dir: Path, synth_db: Path) -> Iterator[Server]:
    manager = SessionManager(bench_dir, synth_db, ServeConfig(max_sessions=3, warm_connections=1, env=ENV),
                             reaper=False)
    srv = Server(manager)
    yield srv
    srv.stop()


def picked(bench: Benchmark) -> list[Task]:
    clean = [t for t in bench.tasks if t.variant == "clean"][:2]
    noise = [t for t in bench.tasks if t.variant == "noise" and t.expected.is_abstain][:2]
    return clean + noise


def test_full_episodes_through_the_client_equal_in_process(server: Server, bench: Benchmark, bench_dir: Path,
                                                           synth_db: Path) -> None:
    tasks = picked(bench)
    with EhrEnv.from_benchmark(bench_dir, synth_db, ENV) as env, EpisodeClient(server.url) as client:
        for i, task in enumerate(tasks):
            actions = scripted_actions(task, wrong=(i == 3))
            local_obs, remote_obs = env.reset(task), client.reset(task.public_id)
            assert remote_obs.text == local_obs.text and remote_obs.task_id == task.public_id
            assert client.state()["step_count"] == 0
            for action in actions:
                local, remote = env.step(action), client.step(action)
                assert remote.observation.text == local.observation.text
                assert (remote.reward, remote.terminated, remote.truncated) == \
                       (local.reward, local.terminated, local.truncated)
            assert remote.done and remote.info["verdict"] == local.info["verdict"]
            assert remote.reward == (0.0 if i == 3 else 1.0)
            with pytest.raises(EpisodeOver, match="episode is over"):
                client.step({"tool": "sql", "query": "SELECT 1"})
    assert server.manager.health()["active_sessions"] == 0


def test_step_info_carries_no_timings_or_cache_hits(server: Server, bench: Benchmark) -> None:
    """Timings and result-cache hits tell whether a query read data an earlier episode read unchanged
    (an untouched table): the server strips them, and its sessions run without the cache."""
    from ehrgym.env.episode import PRIVATE_INFO_KEYS

    task = picked(bench)[0]
    with EpisodeClient(server.url) as client:
        for _ in range(2):   # the same query in two episodes: a cache would hit the second time
            client.reset(task.public_id)
            for action in scripted_actions(task, wrong=False):
                info = client.step(action).info
                assert not set(info) & set(PRIVATE_INFO_KEYS), info
    env = server.manager._new_env()
    try:
        assert env.config.result_cache == 0 and env.results.size == 0
    finally:
        env.close()


def test_429_when_full_with_a_clear_message(server: Server, bench: Benchmark) -> None:
    task = bench.tasks[0].public_id
    clients = [EpisodeClient(server.url) for _ in range(3)]
    try:
        for c in clients:
            c.reset(task)
        resp = httpx.post(f"{server.url}/reset", json={"task_id": task})
        assert resp.status_code == 429 and resp.headers["retry-after"]
        assert "full: 3 of 3 sessions" in resp.json()["detail"]
        with pytest.raises(ServerFull, match="close finished sessions"), EpisodeClient(server.url) as extra:
            extra.reset(task)
        clients[0].close()                       # a freed slot is usable at once
        with EpisodeClient(server.url) as again:
            assert again.reset(task).kind == "task"
    finally:
        for c in clients:
            c.close()


def test_idle_sessions_are_reaped_and_say_so(server: Server, bench: Benchmark) -> None:
    client = EpisodeClient(server.url)
    client.reset(bench.tasks[1].public_id)
    busy = EpisodeClient(server.url)
    busy.reset(bench.tasks[2].public_id)
    session = server.manager._sessions[busy.session_id]
    with session.lock:  # a session with a request in flight is never reaped
        reaped = server.manager.reap(now=time.time() + 10_000)
    assert reaped == [client.session_id]
    with pytest.raises(SessionNotFound, match="without requests; its episode is lost"):
        client.step({"tool": "sql", "query": "SELECT 1"})
    assert client.reset(bench.tasks[1].public_id).kind == "task"   # the client opens a new session
    for c in (client, busy):
        c.close()


def test_the_reaper_thread_closes_idle_sessions(bench_dir: Path, synth_db: Path, bench: Benchmark) -> None:
    cfg = ServeConfig(max_sessions=2, idle_timeout_s=0.2, reap_interval_s=0.05, warm_connections=1, env=ENV)
    with SessionManager(bench_dir, synth_db, cfg) as manager:
        sid = manager.reset(bench.tasks[0].public_id)["session_id"]
        deadline = time.time() + 10
        while manager.health()["active_sessions"] and time.time() < deadline:
            time.sleep(0.05)
        assert manager.health()["reaped"] == 1
        with pytest.raises(SessionNotFound, match="was closed after 0.2 s"):
            manager.step(sid, {"tool": "sql", "query": "SELECT 1"})


class DropFirstStepReply(httpx.HTTPTransport):
    """Delivers the first /step request, then loses its reply (as a timed-out connection would)."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path == "/step" and not self.dropped:
            response.read()
            self.dropped += 1
            raise httpx.ReadTimeout("reply lost", request=request)
        return response


def test_a_retried_step_runs_once(server: Server, bench: Benchmark) -> None:
    task = bench.tasks[0]
    transport = DropFirstStepReply()
    with EpisodeClient(server.url, transport=transport, backoff_s=0.01) as client:
        client.reset(task.public_id)
        result = client.step({"tool": "sql", "query": task.gold_sql})
        assert transport.dropped == 1 and result.observation.step == 1
        assert client.state()["step_count"] == 1          # the retry did not cost a second step
    with EpisodeClient(server.url) as client:           # the same request id, sent twice by hand
        sid = client.reset(task.public_id) and client.session_id
        body = {"session_id": sid, "action": {"tool": "sql", "query": "SELECT 1"}, "request_id": "r-1"}
        first, second = (httpx.post(f"{server.url}/step", json=body) for _ in range(2))
        assert first.status_code == second.status_code == 200 and first.json() == second.json()
        assert client.state()["step_count"] == 1
        again = httpx.post(f"{server.url}/reset", json={"task_id": task.public_id, "request_id": "open-1"})
        twice = httpx.post(f"{server.url}/reset", json={"task_id": task.public_id, "request_id": "open-1"})
        assert again.json()["session_id"] == twice.json()["session_id"]     # one session, not two
        httpx.post(f"{server.url}/close", json={"session_id": again.json()["session_id"]})


def test_bad_requests_get_a_4xx_with_a_reason(server: Server, bench: Benchmark) -> None:
    url, task = server.url, bench.tasks[0].public_id
    cases = [
        ("post", "/reset", {"seed": -1}, 422, "seed"),
        ("post", "/reset", {"task_id": "task-0000000000000000"}, 404, "GET /tasks"),
        ("post", "/reset", {"task_id": 7}, 422, "task_id"),
        ("post", "/step", {"action": "SQL: SELECT 1"}, 422, "session_id"),
        ("post", "/step", {"session_id": "nope", "action": "SQL: SELECT 1"}, 404, "POST /reset"),
        ("post", "/step", {"session_id": "nope", "action": 3}, 422, "action"),
        ("post", "/close", {"session_id": "nope"}, 404, "POST /reset"),
        ("get", "/state", None, 422, "session_id"),
    ]
    for method, path, body, status, reason in cases:
        resp = httpx.request(method, url + path, json=body)
        assert resp.status_code == status, (path, body, resp.text)
        assert reason in resp.text, (path, body, resp.text)
    raw = httpx.post(f"{url}/step", content=b"{not json", headers={"content-type": "application/json"})
    assert raw.status_code == 422
    huge = httpx.post(f"{url}/step", content=b"x" * (8 << 20), headers={"content-type": "application/json"})
    assert huge.status_code == 413 and "request body" in huge.json()["detail"]
    with EpisodeClient(url) as client:
        client.reset(task)
        with pytest.raises(PayloadTooLarge):
            client.step("SQL: SELECT " + "1" * 300_000)
        resp = httpx.post(f"{url}/step", json={"session_id": client.session_id, "action": "x", "request_id": ""})
        assert resp.status_code == 400 and "request_id" in resp.json()["detail"]
        # unreadable action content is the agent's move, as in process: an invalid observation, one step
        assert client.step({"tool": "shell", "cmd": "ls"}).observation.kind == "invalid"
    with pytest.raises(UnknownTask), EpisodeClient(url) as client:
        client.reset("task-ffffffffffffffff")
    with pytest.raises(EnvironmentStateError, match="before step"), EpisodeClient(url) as client:
        client.step("SQL: SELECT 1")
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"


def test_an_openenv_plain_reset_draws_a_task(server: Server, bench: Benchmark) -> None:
    """OpenEnv clients reset with ``{}`` or ``{"seed": n}``: the same seed gives the same task."""
    opened = []
    try:
        plain = httpx.post(f"{server.url}/reset", json={}).json()
        seeded = [httpx.post(f"{server.url}/reset", json={"seed": 3}).json() for _ in range(2)]
        opened = [plain["session_id"]] + [r["session_id"] for r in seeded]
        assert plain["done"] is False and plain["info"]["task_id"] in {t.public_id for t in bench.tasks}
        assert seeded[0]["info"]["task_id"] == seeded[1]["info"]["task_id"]
    finally:
        for sid in opened:
            httpx.post(f"{server.url}/close", json={"session_id": sid})


def test_a_session_of_an_earlier_server_run_says_the_server_restarted(server: Server) -> None:
    resp = httpx.post(f"{server.url}/step", json={"session_id": "0badc0de-000001-12345678", "action": "SQL: SELECT 1"})
    assert resp.status_code == 404 and "the server restarted" in resp.json()["detail"]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerUnavailable, match="did not answer .* is it running"):
        EpisodeClient(f"http://127.0.0.1:{port}", retries=1, backoff_s=0.01).reset("task-x")


def test_a_restarted_server_tells_the_client_and_the_client_resumes(bench_dir: Path, synth_db: Path,
                                                                    bench: Benchmark) -> None:
    cfg = ServeConfig(max_sessions=2, warm_connections=1, env=ENV)
    first = Server(SessionManager(bench_dir, synth_db, cfg, reaper=False))
    port = int(first.url.rsplit(":", 1)[1])
    task = picked(bench)[0]
    client = EpisodeClient(first.url, retries=1, backoff_s=0.01)
    client.reset(task.public_id)
    client.step(scripted_actions(task)[0])
    first.stop()
    with pytest.raises(ServerUnavailable, match="is it running"):
        client.step(scripted_actions(task)[1])
    second = Server(SessionManager(bench_dir, synth_db, cfg, reaper=False), port=port)
    try:
        with pytest.raises(SessionNotFound, match="the server restarted"):
            client.step(scripted_actions(task)[1])
        client.reset(task.public_id)                       # resume: the episode again, in a new session
        for action in scripted_actions(task):
            result = client.step(action)
        assert result.reward == 1.0 and second.manager.health()["episodes_ended"] == 1
        client.close()
    finally:
        second.stop()


def test_tasks_schema_and_health_leak_nothing(server: Server, bench: Benchmark) -> None:
    tasks = httpx.get(f"{server.url}/tasks").json()["tasks"]
    assert len(tasks) == len(bench.tasks) and all(tuple(t) == PUBLIC_TASK_FIELDS for t in tasks)
    assert {t["task_id"] for t in tasks} == {t.public_id for t in bench.tasks}
    assert [t["task_id"] for t in httpx.get(f"{server.url}/tasks", params={"split": "dev"}).json()["tasks"]] == \
           [t.public_id for t in bench.tasks if t.split == "dev"]
    by_id = {t["task_id"]: json.dumps(t).casefold() for t in tasks}
    whole = json.dumps(tasks).casefold()
    for word in ("noise", "clean", "variant", "subtype", "pair", "expected", "gold_sql", "naive_sql", "overlay"):
        assert word not in whole, word
    for task in bench.tasks:
        words = [task.task_id, task.pair_id, task.pair_id.rsplit(":", 1)[-1]]
        if task.noise is not None:
            words += [task.noise.subtype, task.noise.subtype.replace("_", " ")]
        if task.expected.reason:
            words += [task.expected.reason, task.expected.reason.replace("_", " ")]
        hits = [w for w in words if w.casefold() in by_id[task.public_id]]
        assert not hits, (task.task_id, hits)
    schema = httpx.get(f"{server.url}/schema").json()
    assert {"action", "observation", "state", "tools"} <= set(schema)
    assert [t["function"]["name"] for t in schema["tools"]] == ["sql", "answer"]   # python is off here
    assert "pair" not in json.dumps(httpx.get(f"{server.url}/health").json())


def test_websocket_speaks_openenv_messages(server: Server, bench: Benchmark, bench_dir: Path, synth_db: Path) -> None:
    ws_client = pytest.importorskip("websockets.sync.client")
    task = picked(bench)[2]
    with ws_client.connect(server.url.replace("http", "ws") + "/ws") as ws:
        def send(msg: Any) -> dict[str, Any]:
            ws.send(msg if isinstance(msg, str) else json.dumps(msg))
            return json.loads(ws.recv())

        assert send("{oops")["data"]["code"] == "INVALID_JSON"
        assert send({"type": "step", "data": {"tool": "sql", "query": "SELECT 1"}})["type"] == "error"
        first = send({"type": "reset", "data": {"task_id": task.public_id}})
        assert first["type"] == "observation" and first["data"]["done"] is False
        for action in scripted_actions(task):
            out = send({"type": "step", "data": action})
        assert out["type"] == "observation" and out["data"]["done"] and out["data"]["reward"] == 1.0
        assert send({"type": "state"})["data"]["step_count"] == 2
        assert send({"type": "dance"})["data"]["code"] == "VALIDATION_ERROR"
        assert send({"type": "close"})["type"] == "closed"
    deadline = time.time() + 5   # the socket's session is closed with it
    while server.manager.health()["active_sessions"] and time.time() < deadline:
        time.sleep(0.02)
    assert server.manager.health()["active_sessions"] == 0


def test_mcp_tools_run_an_episode(bench_dir: Path, synth_db: Path, bench: Benchmark) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from ehrgym.serve.mcp import create_mcp_server

    task = picked(bench)[0]
    with EhrEnv.from_benchmark(bench_dir, synth_db, ENV) as env:
        env.reset(task)
        for action in scripted_actions(task):
            local = env.step(action)

    def data(result: Any) -> dict[str, Any]:
        assert not result.is_error, result.content
        return json.loads(result.content[0].text)

    async def run(manager: SessionManager) -> dict[str, Any]:
        async with Client(create_mcp_server(manager)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"list_tasks", "start_episode", "sql", "python", "answer", "end_episode"} <= names
            listed = data(await client.call_tool("list_tasks", {"limit": 500}))
            assert listed["total"] == len(bench.tasks) and "noise" not in json.dumps(listed).casefold()
            started = data(await client.call_tool("start_episode", {"task_id": task.public_id}))
            assert task.question in started["observation"]
            eid = started["episode_id"]
            sql = data(await client.call_tool("sql", {"episode_id": eid, "query": task.gold_sql}))
            assert sql["done"] is False and sql["steps_left"] == ENV.max_steps - 1
            final = scripted_actions(task)[1]
            args = {"episode_id": eid, **{k: v for k, v in final.items() if k != "tool"}}
            verdict = data(await client.call_tool("answer", args))
            bad = await client.call_tool("sql", {"episode_id": eid, "query": "SELECT 1"})
            assert bad.is_error and "episode is over" in bad.content[0].text
            return verdict

    with SessionManager(bench_dir, synth_db, ServeConfig(max_sessions=2, warm_connections=1, env=ENV),
                        reaper=False) as manager:
        verdict = anyio.run(run, manager)
    assert verdict["done"] and verdict["reward"] == local.reward == 1.0
    assert verdict["verdict"] == local.info["verdict"] and verdict["termination"] == "answered"


def test_the_serve_commands_are_registered() -> None:
    from click.testing import CliRunner

    from ehrgym.cli import cli

    out = CliRunner().invoke(cli, ["serve", "--help"])
    assert out.exit_code == 0 and "http" in out.output and "mcp" in out.output
    out = CliRunner().invoke(cli, ["serve", "http", "--help"])
    assert out.exit_code == 0 and "--max-sessions" in out.output and "--idle-timeout" in out.output


def test_mcp_over_stdio_the_real_way(bench_dir: Path, synth_db: Path, bench: Benchmark) -> None:
    """`ehrgym serve mcp` as a subprocess, driven by the mcp package's stdio client."""
    pytest.importorskip("mcp")
    import os
    import sys

    import anyio
    from mcp import Client, StdioServerParameters

    task = picked(bench)[2]   # a noisy task whose answer is an abstention
    repo = Path(__file__).resolve().parents[1]
    params = StdioServerParameters(command=sys.executable, args=["-m", "ehrgym.cli", "serve", "mcp", "--bench",
                                                                 str(bench_dir), "--db", str(synth_db), "--no-python"],
                                   env={**os.environ, "PYTHONPATH": str(repo)}, cwd=str(repo))

    async def run() -> dict[str, Any]:
        async with Client(params) as client:
            started = json.loads((await client.call_tool("start_episode", {"task_id": task.public_id})).content[0].text)
            args = {"episode_id": started["episode_id"], "abstain": task.expected.reason, "explanation": "scripted"}
            return json.loads((await client.call_tool("answer", args)).content[0].text)

    out = anyio.run(run)
    assert out["done"] and out["reward"] == 1.0 and out["termination"] == "abstained"


def test_python_state_is_per_session_over_the_shared_worker_pool(bench_dir: Path, synth_db: Path,
                                                                  bench: Benchmark) -> None:
    cfg = ServeConfig(max_sessions=2, warm_connections=1, env=EnvConfig(max_steps=6))
    with SessionManager(bench_dir, synth_db, cfg, reaper=False) as manager:
        if manager.python_pool is None:
            pytest.skip("no Python sandbox on this host")
        a = manager.reset(bench.tasks[0].public_id)["session_id"]
        b = manager.reset(bench.tasks[1].public_id)["session_id"]
        out = manager.step(a, {"tool": "python", "code": "x = sql('SELECT count(*) AS n FROM patients').n[0]\nprint(x)"})
        assert out["observation"]["text"].strip() == "200"
        assert "NameError" in manager.step(b, {"tool": "python", "code": "print(x)"})["observation"]["text"]
        assert manager.step(a, {"tool": "python", "code": "print(x + 1)"})["observation"]["text"].strip() == "201"
