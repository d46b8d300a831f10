"""GRPO for models without a tool template: a TRL ``rollout_func`` playing the plain-text protocol.

TRL 1.16 calls ``rollout_func(prompts, trainer)`` with the batch's prompts (one per completion)
and expects ``prompt_ids``, ``completion_ids`` and ``logprobs``; other keys are passed to the
reward functions, and ``env_mask`` marks which completion tokens the model wrote (1) and which
the environment inserted (0, left out of the loss). :class:`TextRollout` plays each episode:
generate a reply, read the action with :func:`ehrgym.env.protocol.parse_action` (unreadable
text costs a step and returns the expected formats, as in evaluation), step the environment and
append the observation as a user turn rendered by the model's chat template, until the episode
ends or ``max_completion_length`` tokens are used (then it is truncated and scored as no answer).

The task of a prompt is named on the user turn's first line (``Episode <public id>``; the id is
opaque, as in every observation). Generation runs one episode at a time (no batching across
rollouts): correct and simple, slower than the tool path on accelerators.
"""

from __future__ import annotations

import re
from typing import Any

from ehrgym.errors import EhrGymError
from ehrgym.train.environment import EpisodeEnvironment, SharedEpisodes
from ehrgym.train.rewards import get_reward_fn

_EPISODE_LINE = re.compile(r"^Episode (\S+)\n")


def episode_header(public_id: str) -> str:
    return f"Episode {public_id}\n\n"


class TextRollout:
    """The ``rollout_func`` of the text protocol (see the module docstring)."""

    def __init__(self, shared: SharedEpisodes, tokenizer: Any) -> None:
        self.shared = shared
        self.tokenizer = tokenizer
        self._envs: list[EpisodeEnvironment] = []

    def _env(self, i: int) -> EpisodeEnvironment:
        while len(self._envs) <= i:
            self._envs.append(self.shared.factory())
        return self._envs[i]

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _turn_suffix(self, messages: list[dict[str, Any]], reply: str, observation: str, ended_with_eos: bool) -> str:
        """The text between the model's reply and its next reply: end of turn, the observation as a user
        turn, the generation prompt — as the chat template renders them."""
        marker = "\u2063REPLY\u2063"
        with_reply = self._render(messages + [{"role": "assistant", "content": marker}], False)
        with_obs = self._render(messages + [{"role": "assistant", "content": marker},
                                            {"role": "user", "content": observation}], True)
        if not with_obs.startswith(with_reply) or marker not in with_reply:
            raise EhrGymError("the chat template does not render conversations prefix-preservingly; use another "
                              "template for the text protocol")
        tail = with_reply[with_reply.rindex(marker) + len(marker):]
        eos = self.tokenizer.eos_token or ""
        if ended_with_eos and eos and tail.startswith(eos):
            tail = tail[len(eos):]
        return tail + with_obs[len(with_reply):]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch

        model = trainer.accelerator.unwrap_model(trainer.model)
        device = next(model.parameters()).device
        budget = int(trainer.max_completion_length)
        tok = self.tokenizer
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                     "ehrgym_reward": [], "ehrgym_strict": []}
        for i, prompt in enumerate(prompts):
            messages = [dict(m) for m in prompt]
            match = _EPISODE_LINE.match(str(messages[-1].get("content", "")))
            if match is None:
                raise EhrGymError("a text-protocol prompt must start its user turn with 'Episode <task id>' "
                                  "(build rows with ehrgym.train.grpo.episode_rows(..., protocol='text'))")
            env = self._env(i)
            first = env.reset(match.group(1))
            messages[-1]["content"] = str(messages[-1]["content"]) + first
            prompt_ids = tok(self._render(messages, True), add_special_tokens=False).input_ids
            completion: list[int] = []
            mask: list[int] = []
            logprobs: list[float] = []
            while not env.episode.done and len(completion) < budget:
                ids = torch.tensor([prompt_ids + completion], device=device)
                kwargs: dict[str, Any] = {"max_new_tokens": budget - len(completion), "do_sample": True,
                                          "temperature": float(trainer.temperature or 1.0),
                                          "return_dict_in_generate": True, "output_scores": True,
                                          "attention_mask": torch.ones_like(ids),
                                          "pad_token_id": tok.pad_token_id}
                with torch.no_grad():
                    gen = model.generate(ids, **kwargs)
                    new = gen.sequences[0, ids.shape[1]:]
                    scores = model.compute_transition_scores(gen.sequences, gen.scores, normalize_logits=True)[0]
                new_ids = [int(t) for t in new]
                completion += new_ids
                mask += [1] * len(new_ids)
                logprobs += [float(s) for s in scores[:len(new_ids)]]
                reply = tok.decode(new_ids, skip_special_tokens=True)
                ended = bool(new_ids) and new_ids[-1] == tok.eos_token_id
                try:
                    observation = env._step(reply)    # the environment reads the text (protocol.parse_action)
                except Exception as exc:  # noqa: BLE001 - EpisodeOver on the time limit
                    observation = str(exc)
                messages.append({"role": "assistant", "content": reply})
                if env.episode.done or len(completion) >= budget:
                    break
                suffix = tok(self._turn_suffix(messages[:-1], reply, observation, ended),
                             add_special_tokens=False).input_ids
                if len(completion) + len(suffix) >= budget:
                    break
                completion += suffix
                mask += [0] * len(suffix)
                logprobs += [0.0] * len(suffix)
                messages.append({"role": "user", "content": observation})
            outcome = env._finish()
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion[:budget])
            out["env_mask"].append(mask[:budget])
            out["logprobs"].append(logprobs[:budget])
            out["ehrgym_reward"].append(float(get_reward_fn(self.shared.reward)(outcome)))
            out["ehrgym_strict"].append(1.0 if outcome.verdict.success_strict else 0.0)
        return out


def strict_success(ehrgym_strict: list[float] | None = None, **_: Any) -> list[float]:
    """The strict verdict of each text rollout (logged with weight 0)."""
    return list(ehrgym_strict or [])


def episode_reward(ehrgym_reward: list[float] | None = None, **_: Any) -> list[float]:
    """The chosen reward variant of each text rollout's episode (the trained reward)."""
    return list(ehrgym_reward or [])
