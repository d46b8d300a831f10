"""Reinforcement learning in the gym: TRL's ``GRPOTrainer`` with the episode as its environment.

``run_grpo(settings)`` builds the training set from the benchmark's ``train`` split (held-out
splits are refused), one row per task: ``{"prompt": [system, user], "task_id": public id}``.

* ``protocol: tools`` (native tool calls) — ``environment_factory`` gives every rollout an
  :class:`~ehrgym.train.environment.EpisodeEnvironment` (``reset(**row)`` starts the task's
  episode; ``sql``/``python``/``answer`` are the tools; ``get_reward`` is the verifier's verdict
  under the chosen reward variant). The model needs a chat template TRL can parse tool calls
  from; one is supplied when it has none (``tool_template``).
* ``protocol: text`` (the plain-text action protocol, for models without a tool template) —
  a ``rollout_func`` plays each episode turn by turn: generate, read the action with
  :func:`ehrgym.env.protocol.parse_action`, step the environment, append the observation
  (masked out of the loss through ``env_mask``), until the episode ends or the completion
  budget is spent; the reward comes from the same environment class.

Both paths log the strict verdict (``rewards/strict_success``, weight 0) besides the reward the
policy is trained on.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from ehrgym.agents.prompts import system_prompt
from ehrgym.env.episode import EnvConfig
from ehrgym.errors import EhrGymError
from ehrgym.train.config import GrpoSettings, peft_config
from ehrgym.train.data import TRAIN_SPLIT, TrainingDataError
from ehrgym.train.environment import EpisodeEnvironment, SharedEpisodes
from ehrgym.train.models import ensure_tool_template, load_model, require_training_stack
from ehrgym.train.sft import TrainResult, cpu_defaults, save_model_dir
from ehrgym.train.textrollout import episode_header

PROTOCOLS: tuple[str, ...] = ("tools", "text")


def env_config(settings: GrpoSettings) -> EnvConfig:
    try:
        return EnvConfig(**settings.env)
    except TypeError as exc:
        raise EhrGymError(f"bad env table in the GRPO config ({exc}); use EnvConfig fields") from exc


def episode_rows(shared: SharedEpisodes, protocol: str, prompt: str = "neutral", limit: int | None = None,
                 seed: int = 0) -> list[dict[str, Any]]:
    """One training row per task: the system prompt, an empty user turn (the environment's first
    observation fills it at ``reset``; the text protocol names the task on its first line) and the
    task's public id. Seeded order."""
    tasks = sorted({t.task_id: t for t in shared.tasks.values()}.values(), key=lambda t: t.task_id)
    random.Random(seed).shuffle(tasks)
    if limit is not None:
        tasks = tasks[:limit]
    system = system_prompt(prompt, text_protocol=(protocol == "text"))
    return [{"prompt": [{"role": "system", "content": system},
                        {"role": "user", "content": episode_header(t.public_id) if protocol == "text" else ""}],
             "task_id": t.public_id} for t in tasks]


def strict_success(environments: list[EpisodeEnvironment] | None = None, **_: Any) -> list[float | None]:
    """The strict verdict of each rollout's episode (logged with weight 0 next to the trained reward)."""
    if not environments:
        return []
    return [1.0 if env._finish().verdict.success_strict else 0.0 for env in environments]


def build_grpo_trainer(settings: GrpoSettings, model: Any = None, tokenizer: Any = None) -> tuple[Any, SharedEpisodes]:
    """The configured ``GRPOTrainer`` and the shared episodes (close them after training).
    ``model``/``tokenizer``: objects already in memory instead of ``settings.model``."""
    require_training_stack()
    if settings.split != TRAIN_SPLIT:
        raise TrainingDataError(f"GRPO trains on the {TRAIN_SPLIT!r} split only, not {settings.split!r}: dev, test "
                                f"and ood are held out for evaluation")
    if settings.protocol not in PROTOCOLS:
        raise EhrGymError(f"protocol must be one of {PROTOCOLS}, got {settings.protocol!r}")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    shared = SharedEpisodes.from_benchmark(settings.bench, settings.db, env_config(settings), settings.reward)
    try:
        if model is None:
            model, tokenizer = load_model(settings.model, settings.dtype)
        if settings.protocol == "tools" and settings.tool_template:
            ensure_tool_template(tokenizer, model)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        rows = episode_rows(shared, settings.protocol, settings.prompt, settings.limit_tasks, settings.seed)
        trl_args = {"report_to": "none", "logging_steps": 1, "save_strategy": "no", "seed": settings.seed,
                    "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 256,
                    **cpu_defaults(), **settings.trl}
        kwargs: dict[str, Any] = {}
        if settings.protocol == "tools":
            kwargs["environment_factory"] = shared.factory
            reward_funcs: list[Any] = [strict_success]
            trl_args["reward_weights"] = [0.0]            # the environment's get_reward is added with weight 1
        else:
            from ehrgym.train import textrollout

            kwargs["rollout_func"] = textrollout.TextRollout(shared, tokenizer)
            reward_funcs = [textrollout.strict_success, textrollout.episode_reward]
            trl_args["reward_weights"] = [0.0, 1.0]
        args = GRPOConfig(output_dir=settings.output_dir, **trl_args)
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                              train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                              peft_config=peft_config(settings.lora), **kwargs)
    except BaseException:
        shared.close()
        raise
    return trainer, shared


def run_grpo(settings: GrpoSettings, model: Any = None, tokenizer: Any = None) -> TrainResult:
    """Train ``settings.model`` with GRPO on the benchmark's train episodes; writes ``output_dir``."""
    trainer, shared = build_grpo_trainer(settings, model, tokenizer)
    try:
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        logs = list(trainer.state.log_history)
        losses = [float(e["loss"]) for e in logs if "loss" in e]
        out = Path(settings.output_dir)
        result = TrainResult(out, int(trainer.state.global_step), losses, seconds, logs)
        save_model_dir(trainer.model, trainer.processing_class, out,
                       {"stage": "grpo", "base_model": settings.model, "reward": settings.reward,
                        "protocol": settings.protocol, **result.to_dict(), "logs": logs})
        return result
    finally:
        shared.close()
