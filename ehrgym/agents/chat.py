"""An agent backed by any OpenAI-compatible chat-completions server (official ``openai`` client).

Works with OpenAI, vLLM, SGLang, Ollama, llama.cpp's server … Configuration comes from the
arguments or the environment: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``EHRGYM_MODEL``.

* Native tool calling with the environment's tool schemas (``ehrgym.env.tools.tool_schemas``);
  a plain-text protocol instead when ``tools=False`` or, automatically and for the rest of the
  agent's life, when the server rejects the ``tools`` parameter.
* Malformed output (no tool call, unknown tool, unparsable arguments or text) is answered with
  a corrective message and the model is asked again (at most ``max_format_retries`` times per
  step, then the episode ends as an agent error) — never a crash.
* 429, 5xx, timeouts and connection errors are retried with exponential backoff and jitter
  drawn from the episode's seeded RNG; an error that survives ``max_retries`` raises
  :class:`~ehrgym.errors.InfrastructureError` (the runner records an infrastructure error, not a
  wrong answer). Authentication / unknown-model errors raise it at once.
* Tokens, latency, retries and cost are accounted per call in :attr:`usage`.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import numpy as np

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement, observation_text
from ehrgym.agents.prompts import system_prompt
from ehrgym.agents.registry import register_agent
from ehrgym.agents.textactions import CORRECTIVE, MalformedOutput, action_from_tool_call, parse_text_action
from ehrgym.env.actions import Action, FhirGetAction, FhirPostAction, PythonAction, SqlAction
from ehrgym.errors import AgentError, InfrastructureError

_TOOL_HINTS = ("tool", "function", "jinja")


def render_action_text(action: Action) -> str:
    """An action written in the plain-text protocol (used when history moves to text mode)."""
    if isinstance(action, SqlAction):
        return f"```sql\n{action.query}\n```"
    if isinstance(action, PythonAction):
        return f"```python\n{action.code}\n```"
    if isinstance(action, FhirGetAction):
        return f"GET {action.url}"
    if isinstance(action, FhirPostAction):
        payload = action.payload if isinstance(action.payload, str) else json.dumps(action.payload)
        return f"POST {action.url}\n{payload}"
    if action.abstain is not None:
        return f"ABSTAIN: {action.abstain}: {action.explanation}".rstrip(": ")
    return f"ANSWER: {action.value}"


@register_agent("chat")
class ChatAgent(Agent):
    """LLM agent over an OpenAI-compatible chat server (tool calling, text fallback, retries)."""

    entitlement = Entitlement.NONE
    concurrency = Concurrency.THREAD

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 prompt: str = "neutral", tools: bool = True, temperature: float = 0.0,
                 top_p: float | None = None, seed: int | None = None, max_tokens: int = 1024,
                 max_retries: int = 5, backoff_base: float = 0.5, backoff_max: float = 30.0,
                 timeout: float = 120.0, max_format_retries: int = 2,
                 price_prompt_per_mtok: float = 0.0, price_completion_per_mtok: float = 0.0,
                 client: Any = None, sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__()
        self._model = model or os.environ.get("EHRGYM_MODEL")
        if not self._model:
            raise AgentError("the chat agent needs a model name: pass --model or set EHRGYM_MODEL")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self.prompt = prompt
        system_prompt(prompt)  # validate early
        self.native_tools = bool(tools)
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.timeout = timeout
        self.max_format_retries = max_format_retries
        self.prices = (price_prompt_per_mtok, price_completion_per_mtok)
        self._sleep = sleep
        if client is None:
            import openai

            key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers ignore it
            client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=timeout)
        self.client = client
        self._tools: list[dict[str, Any]] | None = None
        self.messages: list[dict[str, Any]] = []
        self._pending_tool_call: str | None = None
        self._rng = np.random.default_rng(0)
        self._trial = 0
        self.fallbacks = 0

    # -- protocol ------------------------------------------------------------------------------
    @property
    def model(self) -> str | None:
        return self._model

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "prompt": self.prompt,
                "tools": self.native_tools, "temperature": self.temperature, "top_p": self.top_p,
                "seed": self.seed, "max_tokens": self.max_tokens, "max_retries": self.max_retries}

    def reset(self, observation: Any, briefing: Briefing) -> None:
        super().reset(observation, briefing)
        self._rng = np.random.default_rng(briefing.seed)
        self._trial = briefing.trial
        self._pending_tool_call = None
        # the SQL tool names the episode's schemas (MIMIC-IV's, or an external benchmark's)
        self._schemas = tuple(getattr(observation, "schemas", ()) or ()) or None
        # an episode on a FHIR server (MedAgentBench) offers other tools than the gym's sql/python/answer
        names = tuple(getattr(observation, "tool_names", ()) or ())
        self._tool_names = names if any(n not in ("sql", "python", "answer") for n in names) else None
        self._tools = None
        self.messages = [{"role": "system", "content": system_prompt(self.prompt, not self.native_tools)},
                         {"role": "user", "content": observation_text(observation)}]
        self._first = True

    def act(self, observation: Any) -> Action:
        if not self.messages:
            raise AgentError("act() before reset(); the runner must reset the agent first")
        if not self._first:
            self._add_observation(observation_text(observation))
        self._first = False
        for attempt in range(self.max_format_retries + 1):
            message = self._complete()
            try:
                return self._read_action(message)
            except MalformedOutput as exc:
                if attempt == self.max_format_retries:
                    raise AgentError(f"the model produced no usable action after {attempt + 1} attempts: "
                                     f"{exc}") from exc
                self._add_observation(str(exc))
        raise AgentError("unreachable")  # pragma: no cover

    def transcript(self) -> list[dict[str, Any]]:
        """The chat messages of the episode so far (stored in the trajectory)."""
        return [dict(m) for m in self.messages]

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if callable(close):
            close()

    # -- messages ------------------------------------------------------------------------------
    def _add_observation(self, text: str) -> None:
        if self._pending_tool_call is not None:
            self.messages.append({"role": "tool", "tool_call_id": self._pending_tool_call, "content": text})
            self._pending_tool_call = None
        else:
            self.messages.append({"role": "user", "content": text})

    def _read_action(self, message: Any) -> Action:
        calls = getattr(message, "tool_calls", None) or []
        content = getattr(message, "content", None)
        if calls:
            call = calls[0]  # one action per step; further calls are dropped from the history
            entry = {"role": "assistant", "content": content or None,
                     "tool_calls": [{"id": call.id, "type": "function",
                                     "function": {"name": call.function.name,
                                                  "arguments": call.function.arguments or "{}"}}]}
            self.messages.append(entry)
            self._pending_tool_call = call.id
            return action_from_tool_call(call.function.name, call.function.arguments)
        self.messages.append({"role": "assistant", "content": content or ""})
        return parse_text_action(content)

    def _to_text_mode(self) -> None:
        """The server rejected tools: continue in the plain-text protocol with a text-only history."""
        self.native_tools = False
        self.fallbacks += 1
        converted: list[dict[str, Any]] = []
        for m in self.messages:
            if m["role"] == "system":
                converted.append({"role": "system", "content": system_prompt(self.prompt, True)})
            elif m["role"] == "tool":
                converted.append({"role": "user", "content": m["content"]})
            elif m["role"] == "assistant" and m.get("tool_calls"):
                fn = m["tool_calls"][0]["function"]
                try:
                    text = render_action_text(action_from_tool_call(fn["name"], fn["arguments"]))
                except MalformedOutput:
                    text = m.get("content") or ""
                converted.append({"role": "assistant", "content": text})
            else:
                converted.append(dict(m))
        self.messages = converted
        self._pending_tool_call = None

    # -- the API call --------------------------------------------------------------------------
    def _request(self) -> dict[str, Any]:
        req: dict[str, Any] = {"model": self._model, "messages": self.messages,
                               "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.top_p is not None:
            req["top_p"] = self.top_p
        if self.seed is not None:
            req["seed"] = int(self.seed) + self._trial  # reproducible, yet trials differ
        if self.native_tools:
            if self._tools is None:
                from ehrgym.env.tools import tool_schemas

                self._tools = tool_schemas(getattr(self, "_tool_names", None), schemas=getattr(self, "_schemas", None))
            req["tools"] = self._tools
        return req

    def _backoff(self, attempt: int) -> float:
        delay = min(self.backoff_max, self.backoff_base * (2 ** attempt))
        return float(delay * (0.5 + self._rng.random()))  # jitter in [0.5, 1.5)

    def _complete(self) -> Any:
        import openai

        retries = 0
        last: Exception | None = None
        while True:
            req = self._request()
            start = time.perf_counter()
            try:
                response = self.client.chat.completions.create(**req)
            except openai.APIStatusError as exc:
                status = exc.status_code
                text = str(exc).lower()
                if self.native_tools and any(h in text for h in _TOOL_HINTS) and status in (400, 404, 422, 500, 501):
                    self._to_text_mode()
                    continue
                if status in (401, 403, 404):
                    raise InfrastructureError(f"the model server refused the request ({status}): {exc}. Check "
                                              f"--base-url, --model and OPENAI_API_KEY") from exc
                if status == 400 or status == 413 or status == 422:
                    raise AgentError(f"the model server rejected the conversation ({status}): {exc}") from exc
                last = exc  # 408, 409, 429, 5xx: transient
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                last = exc
            else:
                latency = time.perf_counter() - start
                usage = getattr(response, "usage", None)
                p = int(getattr(usage, "prompt_tokens", 0) or 0)
                c = int(getattr(usage, "completion_tokens", 0) or 0)
                cost = (p * self.prices[0] + c * self.prices[1]) / 1e6
                self.usage.add_call(p, c, latency, retries, cost)
                choices = getattr(response, "choices", None) or []
                if not choices:
                    return _EmptyMessage()
                return choices[0].message
            if retries >= self.max_retries:
                raise InfrastructureError(f"model server failed after {retries + 1} attempts: "
                                          f"{type(last).__name__}: {last}") from last
            self._sleep(self._backoff(retries))
            retries += 1


class _EmptyMessage:
    content = ""
    tool_calls: list[Any] = []


__all__ = ["ChatAgent", "action_from_tool_call", "render_action_text", "CORRECTIVE"]
