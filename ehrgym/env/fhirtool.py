"""The FHIR tools of an episode on a FHIR R4 server (MedAgentBench): ``fhir_get`` and ``fhir_post``.

An episode offers them when its database's schema profile names them (``SchemaProfile.tools``; see
:mod:`ehrgym.external.medagentbench`). The server is the task's ``meta["fhir_url"]`` (written by
``ehrgym external build … --fhir-url``), or ``$EHRGYM_FHIR_URL`` when set (a server that moved).

* ``fhir_get(url)``: a GET on that server (a URL relative to its base, or a full URL under it; any
  other host is refused, so nothing leaves the machine but to the user's server). ``_format=json``
  is added as the official harness does; the JSON response is shown compactly.
* ``fhir_post(url, payload)``: as in the official harness, a POST is **recorded, not sent**: a payload
  that is JSON is accepted and kept in the step's info (``accepted``, ``resource``, ``payload``) for
  the grader; anything else is an invalid POST. The server's data never changes, so every episode
  sees the same records.

:class:`FhirClient` is the one HTTP client: graders and the MedAgentBench oracle read reference
values through it too.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from ehrgym.env.actions import FhirGetAction, FhirPostAction
from ehrgym.errors import InfrastructureError

FHIR_URL_ENV = "EHRGYM_FHIR_URL"
POST_ACCEPTED = ("POST request accepted and recorded (POSTs are not sent to the server, as in the official "
                 "MedAgentBench harness). Give your final answer when you have finished all the requested tasks.")


PROTOCOL = ("Answer protocol. Call one tool per step: fhir_get / fhir_post (or the lines GET <url>, or POST <url> "
            "followed by the JSON payload). When you have finished all the requested tasks, give your answers as "
            "a JSON list: FINISH([answer1, answer2, ...]) or ANSWER: [answer1, ...].")


class FhirError(InfrastructureError):
    """The FHIR server is not given, cannot be reached, or refused a request (an infrastructure error: the
    runner retries the episode, then records it as such, never as the agent's failure)."""


def normalise_base(url: str) -> str:
    """``url`` as a FHIR base URL ending in ``/`` (http or https only)."""
    text = str(url or "").strip()
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise FhirError(f"--fhir-url {text!r} is not an http(s) URL; pass the FHIR base URL of your server, "
                        f"e.g. http://localhost:8080/fhir/")
    return text if text.endswith("/") else text + "/"


def task_fhir_base(task: Any) -> str:
    """The FHIR base URL of ``task``'s episode: ``$EHRGYM_FHIR_URL``, else the task's ``meta["fhir_url"]``."""
    return fhir_base((getattr(task, "meta", None) or {}).get("fhir_url"), getattr(task, "task_id", "?"))


def fhir_base(url: str | None, task_id: str = "?") -> str:
    """``$EHRGYM_FHIR_URL``, else ``url`` (normalised); a clear error when neither is set."""
    url = os.environ.get(FHIR_URL_ENV) or url
    if not url:
        raise FhirError(f"no FHIR server for task {task_id}: build the benchmark with "
                        f"--fhir-url URL or set {FHIR_URL_ENV}")
    return normalise_base(url)


@dataclass(frozen=True)
class FhirResponse:
    status: int
    data: Any = None          # the parsed JSON body (None when the body is not JSON)
    text: str = ""
    error: str | None = None  # set when the request failed (unreachable, HTTP error)


class FhirClient:
    """GET requests against one FHIR base URL (stdlib HTTP; ``timeout`` seconds per request)."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base = normalise_base(base_url)
        self.timeout = float(timeout)

    def resolve(self, url: str) -> str:
        """The full URL of ``url`` (relative to the base, or a full URL under it); refuses other hosts."""
        text = str(url).strip()
        if text.startswith(("http://", "https://")):
            if not text.startswith(self.base) and text.rstrip("/") + "/" != self.base:
                raise FhirError(f"{text[:200]!r} is not on this episode's FHIR server {self.base}; use a URL "
                                f"under it or one relative to it (e.g. Patient?identifier=...)")
            return text
        return self.base + text.lstrip("/")

    def resource(self, url: str) -> str:
        """The resource path of ``url`` relative to the base, without its query (``Observation``)."""
        full = self.resolve(url)
        return urllib.parse.urlsplit(full[len(self.base):]).path.strip("/") if full.startswith(self.base) else ""

    def get(self, url: str) -> FhirResponse:
        """GET ``url`` with ``_format=json`` (as the official harness adds it)."""
        full = self.resolve(url)
        if "_format=" not in full:
            full += ("&" if "?" in full else "?") + "_format=json"
        request = urllib.request.Request(full, headers={"Accept": "application/fhir+json, application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8", errors="replace")
                status = resp.status
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", errors="replace")[:500]
            return FhirResponse(exc.code, None, body, f"HTTP {exc.code}: {body or exc.reason}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return FhirResponse(0, None, "", f"cannot reach the FHIR server {self.base} ({reason})")
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return FhirResponse(status, None, text, None)
        return FhirResponse(status, data, text, None)

    def get_json(self, url: str) -> Any:
        """GET ``url`` and return its JSON; raises :class:`FhirError` on any failure (graders, oracle)."""
        resp = self.get(url)
        if resp.error:
            raise FhirError(resp.error)
        if resp.data is None:
            raise FhirError(f"the FHIR server answered {url!r} with something that is not JSON: {resp.text[:200]!r}")
        return resp.data

    def check(self) -> None:
        """Raise :class:`FhirError` unless the server answers its capability statement (``metadata``)."""
        resp = self.get("metadata")
        if resp.error:
            raise FhirError(f"{resp.error}; start the MedAgentBench FHIR server (see README, 'MedAgentBench') "
                            f"and pass its base URL with --fhir-url")
        if not isinstance(resp.data, dict) or resp.data.get("resourceType") != "CapabilityStatement":
            raise FhirError(f"{self.base} does not look like a FHIR R4 server: its metadata endpoint returned "
                            f"{resp.text[:200]!r}")


_CLIENTS: dict[str, FhirClient] = {}


def client_for(task: Any) -> FhirClient:
    return client_at(task_fhir_base(task))


def client_at(base: str) -> FhirClient:
    if base not in _CLIENTS:
        _CLIENTS[base] = FhirClient(base)
    return _CLIENTS[base]


def parse_payload(payload: Any) -> Any:
    """A POST payload: a mapping or list as given, text parsed as JSON (ValueError when it is not JSON,
    TypeError when it is neither text nor JSON-like)."""
    if isinstance(payload, (dict, list)):
        return payload
    if isinstance(payload, (bytes, bytearray)):
        payload = bytes(payload).decode("utf-8")
    if not isinstance(payload, str):
        raise TypeError(f"the payload must be a JSON object, got {type(payload).__name__}")
    return json.loads(payload)


def _register() -> None:
    from ehrgym.env.episode import TOOL_SETTINGS, Observation, ToolContext, action_handler

    TOOL_SETTINGS.add("fhir_url")

    def client(ctx: ToolContext) -> FhirClient:
        return client_at(fhir_base(ctx.tool_setting("fhir_url")))

    @action_handler(FhirGetAction)
    def _fhir_get(ctx: ToolContext, action: FhirGetAction) -> tuple[Any, dict[str, Any]]:
        try:
            resp = client(ctx).get(action.url)
        except FhirError as exc:
            msg = f"Error in sending the GET request: {exc}"
            return Observation(text=msg, kind="fhir_get", error=msg), {"tool": "fhir_get", "error": msg}
        if resp.error:
            msg = f"Error in sending the GET request: {resp.error}"
            return Observation(text=msg, kind="fhir_get", error=msg), {"tool": "fhir_get", "error": msg,
                                                                        "status": resp.status}
        body = json.dumps(resp.data, separators=(",", ":"), ensure_ascii=False) if resp.data is not None else resp.text
        text = f"Here is the response from the GET request:\n{body}"
        return Observation(text=text, kind="fhir_get"), {"tool": "fhir_get", "status": resp.status}

    @action_handler(FhirPostAction)
    def _fhir_post(ctx: ToolContext, action: FhirPostAction) -> tuple[Any, dict[str, Any]]:
        try:
            resource = client(ctx).resource(action.url)
            payload = parse_payload(action.payload)
        except (FhirError, ValueError, TypeError) as exc:
            msg = f"Invalid POST request: {exc}"
            return (Observation(text=msg, kind="fhir_post", error=msg),
                    {"tool": "fhir_post", "accepted": False, "error": msg})
        return (Observation(text=POST_ACCEPTED, kind="fhir_post"),
                {"tool": "fhir_post", "accepted": True, "resource": resource, "payload": payload})


_register()
