"""A local Hugging Face causal-LM agent (optional extra: ``pip install -e ".[hf]"``).

Same protocol as every agent; it speaks the plain-text action protocol
(:mod:`ehrgym.agents.textactions`): the chat history is rendered with the tokenizer's chat
template when it has one (a plain ``<|role|>`` transcript otherwise), the model generates, and
the reply is parsed into an action — malformed output gets a corrective message, up to
``max_format_retries`` times per step. Greedy by default; with ``temperature > 0`` sampling is
seeded from the episode seed inside a forked RNG (no global state is changed).

    ehrgym eval run --agent hf --model /path/to/model-dir …      # any AutoModelForCausalLM
    HFAgent(model=model, tokenizer=tokenizer)                     # objects already in memory

Each runner worker thread holds its own agent, hence its own copy of the model: use
``--workers 1`` for large models.
"""

from __future__ import annotations

import time
from typing import Any

from ehrgym.agents.base import Agent, Briefing, Concurrency, Entitlement, observation_text
from ehrgym.agents.prompts import system_prompt
from ehrgym.agents.registry import register_agent
from ehrgym.agents.textactions import MalformedOutput, parse_text_action
from ehrgym.env.actions import Action
from ehrgym.errors import AgentError


def _require_transformers() -> Any:
    try:
        import torch  # noqa: F401  (transformers needs it; fail early with the install hint)
        import transformers
    except ImportError as exc:
        raise AgentError("the hf agent needs torch and transformers: pip install -e \".[hf]\"") from exc
    return transformers


@register_agent("hf")
class HFAgent(Agent):
    """Local Hugging Face causal language model speaking the plain-text action protocol."""

    entitlement = Entitlement.NONE
    concurrency = Concurrency.THREAD  # generation releases the GIL in torch kernels

    def __init__(self, model: Any = None, tokenizer: Any = None, prompt: str = "neutral",
                 temperature: float = 0.0, top_p: float | None = None, max_tokens: int = 256,
                 max_input_tokens: int | None = None, max_format_retries: int = 2, device: str = "cpu",
                 seed: int | None = None, generation_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        transformers = _require_transformers()
        if model is None:
            raise AgentError("the hf agent needs --model: a local model directory (no downloads at run time)")
        self._name = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path",
                                                                     None) or type(model).__name__
        if isinstance(model, str):
            try:
                tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(model, local_files_only=True)
                model = transformers.AutoModelForCausalLM.from_pretrained(model, local_files_only=True)
            except OSError as exc:
                raise AgentError(f"cannot load a Hugging Face model from {self._name!r}: {exc}") from exc
        if tokenizer is None:
            raise AgentError("pass a tokenizer with an in-memory model")
        self.model_obj = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.prompt = prompt
        system_prompt(prompt)
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        limit = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_input_tokens = max_input_tokens or max(16, int(limit) - max_tokens)
        self.max_format_retries = max_format_retries
        self.seed = seed
        self.generation_kwargs = dict(generation_kwargs or {})  # passed to model.generate (e.g. constraints)
        self.messages: list[dict[str, str]] = []
        self._episode_seed = 0
        self._calls = 0

    @property
    def model(self) -> str | None:
        return str(self._name)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "prompt": self.prompt, "temperature": self.temperature,
                "top_p": self.top_p, "max_tokens": self.max_tokens}

    def reset(self, observation: Any, briefing: Briefing) -> None:
        super().reset(observation, briefing)
        self._episode_seed = briefing.seed if self.seed is None else self.seed + briefing.trial
        self._calls = 0
        self.messages = [{"role": "system", "content": system_prompt(self.prompt, True)},
                         {"role": "user", "content": observation_text(observation)}]
        self._first = True

    def act(self, observation: Any) -> Action:
        if not self.messages:
            raise AgentError("act() before reset()")
        if not self._first:
            self.messages.append({"role": "user", "content": observation_text(observation)})
        self._first = False
        for attempt in range(self.max_format_retries + 1):
            text = self._generate()
            self.messages.append({"role": "assistant", "content": text})
            try:
                return parse_text_action(text)
            except MalformedOutput as exc:
                if attempt == self.max_format_retries:
                    raise AgentError(f"the model produced no usable action after {attempt + 1} attempts") from exc
                self.messages.append({"role": "user", "content": str(exc)})
        raise AgentError("unreachable")  # pragma: no cover

    def transcript(self) -> list[dict[str, Any]]:
        return [dict(m) for m in self.messages]

    # -- generation --------------------------------------------------------------------------------
    def _render(self) -> str:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=True)
        parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in self.messages]
        return "".join(parts) + "<|assistant|>\n"

    def _generate(self) -> str:
        import torch

        ids = self.tokenizer(self._render(), return_tensors="pt").input_ids[:, -self.max_input_tokens:]
        ids = ids.to(self.device)
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_tokens, "attention_mask": torch.ones_like(ids)}
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        if pad is not None:
            kwargs["pad_token_id"] = pad
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature)
            if self.top_p is not None:
                kwargs["top_p"] = self.top_p
        else:
            kwargs["do_sample"] = False
        kwargs.update(self.generation_kwargs)
        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed((self._episode_seed + self._calls) % (2**63))
            out = self.model_obj.generate(ids, **kwargs)
        self._calls += 1
        new = out[0, ids.shape[1]:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        self.usage.add_call(int(ids.shape[1]), int(new.shape[0]), time.perf_counter() - start)
        return text
