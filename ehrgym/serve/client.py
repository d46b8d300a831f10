"""``EpisodeClient``: an episode server's episodes with :class:`~ehrgym.env.episode.EhrEnv`'s methods.

    from ehrgym.serve.client import EpisodeClient
    with EpisodeClient("http://127.0.0.1:8000") as env:
        task = env.tasks()[0]["task_id"]
        obs = env.reset(task)                                   # an Observation, as EhrEnv.reset
        r = env.step({"tool": "sql", "query": "SELECT 1"})      # a StepResult, as EhrEnv.step
        r = env.step("ANSWER: 42")
        r.reward, r.terminated, r.truncated, r.info["verdict"]

Every request carries a fresh ``request_id``; a request that fails on the way (connection reset,
timeout, 502/503/504) is sent again with the same id, so the server runs it once. Refusals raise
the kit's errors: :class:`~ehrgym.serve.errors.ServerFull` (429), :class:`SessionNotFound` (the
session was reaped or the server restarted: the episode is lost), :class:`EpisodeOver` (409),
:class:`UnknownTask`, :class:`BadRequest`; an unreachable server raises :class:`ServerUnavailable`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from ehrgym.env.actions import Action, action_to_dict
from ehrgym.env.episode import Observation, StepResult
from ehrgym.errors import EnvironmentStateError
from ehrgym.serve.errors import ERRORS, BadRequest, ServeError, ServerUnavailable

_RETRY_STATUS = (502, 503, 504)
_OBS_FIELDS = set(Observation.__dataclass_fields__)


def observation_from_dict(data: dict[str, Any]) -> Observation:
    fields = {k: v for k, v in data.items() if k in _OBS_FIELDS}
    if "schemas" in fields:
        fields["schemas"] = tuple(fields["schemas"])
    if "rows" in fields:
        fields["rows"] = [tuple(r) for r in fields["rows"]]
    return Observation(**fields)


class EpisodeClient:
    """One session on an episode server at ``base_url``; see the module docstring."""

    def __init__(self, base_url: str, *, timeout: float = 120.0, retries: int = 3, backoff_s: float = 0.2,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = max(0, int(retries))
        self.backoff_s = backoff_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)
        self.session_id: str | None = None
        self.observation: Observation | None = None
        self.done = True
        self.reward = 0.0
        self.info: dict[str, Any] = {}
        self._closed = False

    # -- EhrEnv's interface ---------------------------------------------------------------------
    def reset(self, task_id: str | None = None, seed: int | None = None) -> Observation:
        """Start an episode on ``task_id`` (a public id from :meth:`tasks`; None: drawn by ``seed`` or
        in turn), reusing this client's session."""
        self._check_open()
        body: dict[str, Any] = {"task_id": task_id, "seed": seed}
        if self.session_id is not None:
            body["session_id"] = self.session_id
        try:
            out = self._call("POST", "/reset", body)
        except ServeError as exc:
            if exc.code != "session_not_found" or self.session_id is None:
                raise
            self.session_id = None      # reaped, or the server restarted: a new session
            out = self._call("POST", "/reset", {"task_id": task_id, "seed": seed})
        self.session_id = out["session_id"]
        self.observation = observation_from_dict(out["observation"])
        self.info = out.get("info") or {}
        self.done, self.reward = False, 0.0
        return self.observation

    def step(self, action: Action | str | dict[str, Any]) -> StepResult:
        """Run one action: a tool-call mapping, an SqlAction/PythonAction/AnswerAction, or action text."""
        self._check_open()
        if self.session_id is None:
            raise EnvironmentStateError("call reset(task_id) before step()")
        if not isinstance(action, (str, dict)):
            try:
                action = action_to_dict(action)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001
                raise BadRequest(f"cannot send an action of type {type(action).__name__}") from exc
        out = self._call("POST", "/step", {"session_id": self.session_id, "action": action})
        self.observation = observation_from_dict(out["observation"])
        self.done, self.reward, self.info = bool(out["done"]), float(out["reward"]), out.get("info") or {}
        return StepResult(self.observation, self.reward, bool(out["terminated"]), bool(out["truncated"]), self.info)

    def state(self) -> dict[str, Any]:
        if self.session_id is None:
            return {"episode_id": None, "step_count": 0}
        return self._call("GET", "/state", params={"session_id": self.session_id})

    def close(self) -> None:
        """End the session on the server (an unfinished episode is aborted) and the connection."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.session_id is not None:
                self._call("POST", "/close", {"session_id": self.session_id})
        except (ServeError, ServerUnavailable):
            pass  # reaped, or the server is gone: nothing left to close
        finally:
            self.session_id = None
            self._http.close()

    def __enter__(self) -> "EpisodeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the server's other routes ---------------------------------------------------------------
    def tasks(self, split: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/tasks", params={"split": split} if split else None)["tasks"]

    def schema(self) -> dict[str, Any]:
        return self._call("GET", "/schema")

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    # -- transport -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise EnvironmentStateError("this client is closed; create a new EpisodeClient")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              params: dict[str, Any] | None = None) -> dict[str, Any]:
        if body is not None and method == "POST":
            body = {**body, "request_id": uuid.uuid4().hex}   # one id for all tries of this request
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            try:
                resp = self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                last = exc
                continue
            if resp.status_code in _RETRY_STATUS:
                last = ServerUnavailable(f"{resp.status_code}: {resp.text[:300]}")
                continue
            return self._decode(resp)
        raise ServerUnavailable(f"the episode server at {self.base_url} did not answer {method} {path} after "
                                f"{self.retries + 1} tries ({type(last).__name__}: {last}); is it running? "
                                f"(start it with `ehrgym serve http --bench DIR --db PATH`)")

    def _decode(self, resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError:
            data = {"detail": resp.text[:500]}
        if resp.status_code < 400:
            return data
        if resp.status_code >= 500:
            raise ServerUnavailable(f"the episode server failed on this request ({resp.status_code}): "
                                    f"{data.get('detail', data)}")
        code = data.get("error") if isinstance(data, dict) else None
        detail = data.get("detail", data) if isinstance(data, dict) else data
        cls = ERRORS.get(code or "", BadRequest)
        extra = {k: v for k, v in data.items() if k not in ("error", "detail")} if isinstance(data, dict) else {}
        raise cls(detail if isinstance(detail, str) else f"{resp.status_code}: {detail}", **extra)


def scripted_actions(task: Any, wrong: bool = False) -> list[dict[str, Any]]:
    """Evaluator-side script for load tests and checks (it reads the full Task, so never an agent):
    the gold query, then the expected answer or abstention — or a wrong answer when ``wrong``."""
    from ehrgym.bench.answers import format_answer

    e = task.expected
    if wrong:
        final: dict[str, Any] = {"tool": "answer", "value": "-1"}
    elif e.is_abstain:
        final = {"tool": "answer", "abstain": e.reason, "explanation": "scripted"}
    else:
        value = list(e.value) if e.answer.type in ("set", "list") else format_answer(e.value, e.answer)
        final = {"tool": "answer", "value": value}
    return [{"tool": "sql", "query": task.gold_sql}, final]
