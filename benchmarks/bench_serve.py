"""Episode server load test (issue 16), loopback only and bounded.

The server runs the real way (``ehrgym serve http`` in a subprocess on a free loopback port).
Every episode is scripted: the task's gold SQL, then its expected answer or abstention (every
fifth episode a wrong answer), so each reward is known from an in-process run of the same actions.

S0  reference: the workload's distinct (task, script) episodes in process (``EhrEnv.step``
    latencies and rewards).
S1  overhead: one client runs episodes one after another over HTTP, each back to back with the
    same episode in a fresh in-process env; per step, the client-observed latency minus the
    in-process latency of the same action (paired); target p50 <= 2 ms. Also the bare
    ``GET /health`` round trip (HTTP + framework, no episode work).
S2  load: ``--clients`` threads × ``--episodes`` episodes each, one session per client reused
    across its episodes; episodes/s, p50/p99 step latency; every (client, episode) recorded
    exactly once, every reward equal to the in-process one, and the server's own episode
    counters equal to the clients' (a retried request never ran twice).
S3  a client process killed mid-episode: its session is reaped after ``--idle-timeout``.
S4  the server restarted mid-run: clients get a clear error (SessionNotFound/ServerUnavailable),
    re-run the interrupted episodes once the server is back (the runner's resume), and every
    episode still completes exactly once with the in-process reward.

    .venv/bin/python benchmarks/bench_serve.py [--bench DIR --db PATH] [--clients 32]
        [--episodes 50] [--idle-timeout 2] [--skip-chaos] [--json OUT]

Without ``--bench``/``--db`` a 200-patient synthetic database and a ``small`` benchmark are
built once under ``data/bench_serve/``. Reports the machine's load average next to the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

try:  # the serve extra; `make bench` installs only the dev extra
    import fastapi  # noqa: F401
    import httpx  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:
    print(f"bench_serve skipped: the serve extra is not installed ({exc.name}); pip install -e '.[serve]'")
    sys.exit(0)

from ehrgym.bench.task import Task  # noqa: E402
from ehrgym.env.episode import EhrEnv, EnvConfig  # noqa: E402
from ehrgym.serve.client import EpisodeClient, scripted_actions  # noqa: E402
from ehrgym.serve.errors import ServerUnavailable, SessionNotFound  # noqa: E402

DATA = REPO / "data" / "bench_serve"
MAX_STEPS = 6
ENV = EnvConfig(max_steps=MAX_STEPS, python=False)


def ensure_data() -> tuple[Path, Path]:
    from ehrgym.bench.build import build_benchmark
    from ehrgym.db.synth import build_synthetic_database

    db, bench = DATA / "synth200.duckdb", DATA / "bench-small"
    if not db.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        build_synthetic_database(db, patients=200, seed=7, progress=False)
    if not (bench / "manifest.json").exists():
        build_benchmark(db, bench, config="small", seed=5, progress=False)
    return bench, db


@dataclass(frozen=True)
class Episode:
    client: int
    index: int
    task: Task
    wrong: bool

    @property
    def key(self) -> tuple[str, bool]:
        return (self.task.public_id, self.wrong)


def workload(tasks: list[Task], clients: int, episodes: int) -> list[list[Episode]]:
    return [[Episode(c, j, tasks[(c * episodes + j) % len(tasks)], (c * episodes + j) % 5 == 4)
             for j in range(episodes)] for c in range(clients)]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


# -- the server subprocess --------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, bench: Path, db: Path, port: int, max_sessions: int, idle_timeout: float) -> None:
        self.args = [sys.executable, "-m", "ehrgym.cli", "serve", "http", "--bench", str(bench), "--db", str(db),
                     "--port", str(port), "--max-sessions", str(max_sessions), "--idle-timeout", str(idle_timeout),
                     "--max-steps", str(MAX_STEPS), "--no-python"]
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(self.args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        import httpx

        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.TransportError:
                pass
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("the server did not answer /health within 120 s")
            time.sleep(0.1)

    def health(self) -> dict[str, Any]:
        import httpx

        return httpx.get(self.url + "/health", timeout=10).json()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


# -- stages -----------------------------------------------------------------------------------
def reference(bench: Path, db: Path, keys: dict[tuple[str, bool], Episode]) -> tuple[dict, dict]:
    """In-process rewards and per-step latencies of every distinct episode."""
    rewards, latencies = {}, {}
    with EhrEnv.from_benchmark(bench, db, ENV) as env:
        for key, ep in keys.items():
            env.reset(ep.task)
            steps = []
            for action in scripted_actions(ep.task, ep.wrong):
                t0 = time.perf_counter()
                result = env.step(action)
                steps.append(time.perf_counter() - t0)
            rewards[key], latencies[key] = result.reward, steps
    return rewards, latencies


def run_episode(client: EpisodeClient, ep: Episode, lat: list[float]) -> float:
    client.reset(ep.task.public_id)
    for action in scripted_actions(ep.task, ep.wrong):
        t0 = time.perf_counter()
        result = client.step(action)
        lat.append(time.perf_counter() - t0)
    assert result.done, "the scripted episode did not end"
    return result.reward


@dataclass
class ClientLog:
    results: dict[int, float] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)
    lat: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def client_loop(url: str, episodes: list[Episode], log: ClientLog, resume_wait_s: float = 0.0) -> None:
    """Run ``episodes``; an episode cut by a lost session or an unreachable server is run again."""
    client = EpisodeClient(url, retries=2, backoff_s=0.05)
    pending = list(episodes)
    try:
        while pending:
            ep = pending[0]
            try:
                reward = run_episode(client, ep, log.lat)
            except (SessionNotFound, ServerUnavailable) as exc:
                log.errors.append(f"{type(exc).__name__}: {exc}")
                if len(log.errors) > 200:
                    raise
                time.sleep(max(0.2, resume_wait_s))
                continue          # resume: the same episode again, in a new session if needed
            log.runs[ep.index] = log.runs.get(ep.index, 0) + 1
            if ep.index in log.results:
                raise AssertionError(f"episode {ep.client}/{ep.index} completed twice")
            log.results[ep.index] = reward
            pending.pop(0)
    finally:
        client.close()


def run_load(url: str, plan: list[list[Episode]]) -> tuple[list[ClientLog], float]:
    logs = [ClientLog() for _ in plan]
    threads = [threading.Thread(target=client_loop, args=(url, eps, log)) for eps, log in zip(plan, logs, strict=True)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return logs, time.perf_counter() - t0


def check(plan: list[list[Episode]], logs: list[ClientLog], rewards: dict) -> dict[str, int]:
    lost = dup = mismatch = 0
    for eps, log in zip(plan, logs, strict=True):
        for ep in eps:
            if ep.index not in log.results:
                lost += 1
            elif rewards[ep.key] != log.results[ep.index]:
                mismatch += 1
        dup += sum(1 for n in log.runs.values() if n > 1)
    return {"lost": lost, "duplicated": dup, "reward_mismatches": mismatch}


KILLED_CLIENT = """
import sys, time
sys.path.insert(0, {repo!r})
from ehrgym.serve.client import EpisodeClient
c = EpisodeClient({url!r})
c.reset({task!r})
c.step({{"tool": "sql", "query": "SELECT 1"}})
print(c.session_id, flush=True)
time.sleep(600)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, default=None)
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=50, help="episodes per client")
    ap.add_argument("--overhead-episodes", type=int, default=60, help="sequential episodes for S1")
    ap.add_argument("--idle-timeout", type=float, default=2.0, help="the server's reaping timeout (S3)")
    ap.add_argument("--skip-chaos", action="store_true", help="skip S3 and S4")
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = ap.parse_args()
    bench, db = (args.bench, args.db) if args.bench and args.db else ensure_data()
    from ehrgym.bench.dataset import load_benchmark

    tasks = list(load_benchmark(bench).tasks)
    plan = workload(tasks, args.clients, args.episodes)
    keys = {ep.key: ep for eps in plan for ep in eps}
    report: dict[str, Any] = {"clients": args.clients, "episodes_per_client": args.episodes,
                              "distinct_episodes": len(keys), "cpus": os.cpu_count(),
                              "load_before": os.getloadavg()}
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {args.clients} clients × "
          f"{args.episodes} episodes over {len(keys)} distinct (task, script) episodes")

    t0 = time.perf_counter()
    rewards, local = reference(bench, db, keys)
    print(f"S0 reference in process: {len(keys)} episodes in {time.perf_counter() - t0:.1f} s; "
          f"step p50 {1e3 * statistics.median([x for v in local.values() for x in v]):.2f} ms")

    server = ServerProcess(bench, db, free_port(), max_sessions=args.clients + 4, idle_timeout=args.idle_timeout)
    print(f"server up in {server.start():.1f} s at {server.url}")
    try:
        # S1: sequential overhead, paired per step (and per tool), and the bare HTTP round trip. Each
        # episode runs in a fresh in-process env and over HTTP back to back (alternating which goes
        # first), so both see each query for the first time and under the same machine load.
        seq = list(keys.values())[:args.overhead_episodes]
        diffs: dict[str, list[float]] = {"sql": [], "answer": []}
        remote, paired_local = [], []
        with EpisodeClient(server.url) as client, EhrEnv.from_benchmark(bench, db, ENV) as env:
            for i, ep in enumerate(seq):
                lat: list[float] = []
                here: list[float] = []
                for side in ((0, 1) if i % 2 else (1, 0)):
                    if side:
                        run_episode(client, ep, lat)
                    else:
                        env.reset(ep.task)
                        for action in scripted_actions(ep.task, ep.wrong):
                            t0 = time.perf_counter()
                            env.step(action)
                            here.append(time.perf_counter() - t0)
                remote += lat
                paired_local += here
                for action, r, l in zip(scripted_actions(ep.task, ep.wrong), lat, here, strict=True):
                    diffs[action["tool"]].append(r - l)
            rtt = []
            for _ in range(200):
                t0 = time.perf_counter()
                client.health()
                rtt.append(time.perf_counter() - t0)
        every = diffs["sql"] + diffs["answer"]
        report["overhead_ms_p50"] = 1e3 * statistics.median(every)
        report["overhead_ms_p50_sql"] = 1e3 * statistics.median(diffs["sql"])
        report["overhead_ms_p50_answer"] = 1e3 * statistics.median(diffs["answer"])
        report["health_rtt_ms_p50"] = 1e3 * statistics.median(rtt)
        report["sequential_step_ms_p50"] = 1e3 * statistics.median(remote)
        report["in_process_step_ms_p50"] = 1e3 * statistics.median(paired_local)
        print(f"S1 overhead over in-process steps: p50 {report['overhead_ms_p50']:.2f} ms/step (target <= 2 ms; "
              f"{len(every)} paired steps: sql {report['overhead_ms_p50_sql']:.2f}, answer "
              f"{report['overhead_ms_p50_answer']:.2f}); HTTP step p50 {report['sequential_step_ms_p50']:.2f} ms, "
              f"in process {report['in_process_step_ms_p50']:.2f} ms; GET /health round trip p50 "
              f"{report['health_rtt_ms_p50']:.2f} ms; load {os.getloadavg()[0]:.2f}")

        # S2: load
        before = server.health()
        logs, wall = run_load(server.url, plan)
        after = server.health()
        lat = [x for log in logs for x in log.lat]
        n = sum(len(log.results) for log in logs)
        verdict = check(plan, logs, rewards)
        started = after["episodes_started"] - before["episodes_started"]
        ended = after["episodes_ended"] - before["episodes_ended"]
        report.update({"episodes": n, "wall_s": wall, "episodes_per_s": n / wall,
                       "step_ms_p50": 1e3 * pct(lat, 0.5), "step_ms_p99": 1e3 * pct(lat, 0.99),
                       "server_episodes_started": started, "server_episodes_ended": ended,
                       "client_errors": sum(len(log.errors) for log in logs), **verdict,
                       "load_during": os.getloadavg()})
        print(f"S2 load: {n} episodes in {wall:.1f} s = {n / wall:.1f} episodes/s; step p50 "
              f"{report['step_ms_p50']:.1f} ms, p99 {report['step_ms_p99']:.1f} ms; lost {verdict['lost']}, "
              f"duplicated {verdict['duplicated']}, reward mismatches {verdict['reward_mismatches']}; server counted "
              f"{started} started / {ended} ended; load {os.getloadavg()[0]:.2f}")
        ok = verdict == {"lost": 0, "duplicated": 0, "reward_mismatches": 0} and started == ended == n

        if not args.skip_chaos:
            # S3: a client killed mid-episode
            code = KILLED_CLIENT.format(repo=str(REPO), url=server.url, task=tasks[0].public_id)
            proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            sid = proc.stdout.readline().strip()
            active = server.health()["active_sessions"]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            t_kill, reaped_before = time.perf_counter(), server.health()["reaped"]
            while server.health()["active_sessions"] >= active and time.perf_counter() - t_kill < 10 * args.idle_timeout + 30:
                time.sleep(0.1)
            h = server.health()
            import httpx

            gone = httpx.post(server.url + "/step", json={"session_id": sid, "action": "SQL: SELECT 1"}).json()
            report["killed_client_reaped_s"] = time.perf_counter() - t_kill
            report["killed_client_reaped"] = h["reaped"] > reaped_before and h["active_sessions"] < active
            print(f"S3 killed client: session {sid[:22]}… reaped after {report['killed_client_reaped_s']:.1f} s "
                  f"(idle timeout {args.idle_timeout:g} s): {report['killed_client_reaped']}; a late request gets "
                  f"{gone.get('error')}: {gone.get('detail', '')[:90]}")
            ok = ok and report["killed_client_reaped"]

            # S4: restart mid-run
            clients = min(8, args.clients)
            plan4 = workload(tasks[::-1], clients, max(20, args.episodes // 2))
            total4 = sum(len(e) for e in plan4)
            logs4 = [ClientLog() for _ in plan4]
            threads = [threading.Thread(target=client_loop, args=(server.url, eps, log, 0.5))
                       for eps, log in zip(plan4, logs4, strict=True)]
            for t in threads:
                t.start()
            while sum(len(log.results) for log in logs4) < total4 // 4:   # kill it a quarter of the way in
                time.sleep(0.01)
            server.kill()
            done_at_kill = sum(len(log.results) for log in logs4)
            restart_s = server.start()
            for t in threads:
                t.join()
            rewards4, _ = reference(bench, db, {ep.key: ep for eps in plan4 for ep in eps})
            verdict4 = check(plan4, logs4, rewards4)
            errors = [e for log in logs4 for e in log.errors]
            kinds = sorted({e.split(":", 1)[0] for e in errors})
            report.update({"restart_s": restart_s, "restart_errors": len(errors), "restart_error_kinds": kinds,
                           **{f"restart_{k}": v for k, v in verdict4.items()}})
            print(f"S4 restart: server killed after {done_at_kill} of {total4} episodes, back in {restart_s:.1f} s; "
                  f"{len(errors)} client errors ({', '.join(kinds)}), e.g. {errors[0][:150] if errors else '-'}; "
                  f"after resume: lost {verdict4['lost']}, duplicated {verdict4['duplicated']}, reward mismatches "
                  f"{verdict4['reward_mismatches']} over {total4} episodes")
            ok = ok and verdict4 == {"lost": 0, "duplicated": 0, "reward_mismatches": 0} and bool(errors)
    finally:
        server.stop()
    report["ok"] = ok
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
