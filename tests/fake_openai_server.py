"""A scripted OpenAI-compatible chat server for tests (stdlib only; run as its own process).

    python tests/fake_openai_server.py --script replies.json [--log requests.jsonl]

It binds 127.0.0.1 on an ephemeral port and prints ``PORT <n>`` on its first stdout line.
``POST /v1/chat/completions`` answers with the next entry of the script (a JSON list):

    {"tool_call": {"name": "sql", "arguments": {...} | "raw text"}}   a native tool call
    {"text": "..."}                                                    plain assistant text
    {"status": 429 | 500 | ..., "message": "..."}                      an HTTP error
    {"reject_tools": true}   400 "tools are not supported" when the request carries tools,
                             otherwise falls through to the next entry (the entry is consumed)
    any entry may add "delay": seconds (a slow reply) and "repeat": true (never consumed)

Every request body is appended to the ``--log`` JSONL file, so tests can assert what the real
``openai`` client sent. When the script is exhausted the server answers 500 "script exhausted".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Script:
    def __init__(self, entries: list[dict[str, Any]], log_path: str | None) -> None:
        self.entries = list(entries)
        self.lock = threading.Lock()
        self.log_path = log_path
        self.count = 0

    def next_entry(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            self.count += 1
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(body) + "\n")
            while self.entries:
                entry = self.entries[0]
                if not entry.get("repeat"):
                    self.entries.pop(0)
                if entry.get("reject_tools"):
                    if body.get("tools"):
                        return {"status": 400, "message": "tools are not supported by this server"}
                    continue
                return entry
            return None


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def completion(entry: dict[str, Any], body: dict[str, Any], n: int) -> dict[str, Any]:
    prompt_text = "".join(str(m.get("content") or "") for m in body.get("messages", []))
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    if "tool_call" in entry:
        call = entry["tool_call"]
        args = call.get("arguments", {})
        message["tool_calls"] = [{
            "id": f"call_{n}", "type": "function",
            "function": {"name": call["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
        }]
        finish = "tool_calls"
        out_text = json.dumps(message["tool_calls"])
    else:
        message["content"] = entry.get("text", "")
        out_text = message["content"]
    return {
        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": _tokens(prompt_text), "completion_tokens": _tokens(out_text),
                  "total_tokens": _tokens(prompt_text) + _tokens(out_text)},
    }


def make_handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "invalid JSON body"}})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            entry = script.next_entry(body)
            if entry is None:
                self._send(500, {"error": {"message": "script exhausted", "type": "server_error"}})
                return
            if entry.get("delay"):
                time.sleep(float(entry["delay"]))
            if "status" in entry:
                self._send(int(entry["status"]), {"error": {"message": entry.get("message", "scripted error"),
                                                            "type": "scripted", "code": entry["status"]}})
                return
            self._send(200, completion(entry, body, script.count))

    return Handler


class FakeServer:
    """Test helper: runs this file as a separate server process with a reply script."""

    def __init__(self, tmp: Path, script: list[dict[str, Any]]) -> None:
        self.script_path = tmp / "script.json"
        self.log_path = tmp / "requests.jsonl"
        self.script_path.write_text(json.dumps(script))
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--script",
                                      str(self.script_path), "--log", str(self.log_path)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(x) for x in self.log_path.read_text().splitlines() if x.strip()]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--script", required=True, help="JSON list of scripted replies")
    parser.add_argument("--log", default=None, help="append every request body here (JSONL)")
    args = parser.parse_args(argv)
    with open(args.script, encoding="utf-8") as fh:
        entries = json.load(fh)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Script(entries, args.log)))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
