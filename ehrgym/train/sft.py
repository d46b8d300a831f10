"""Supervised fine-tuning on gym trajectories: TRL's ``SFTTrainer`` over ``ehrgym train sft-data`` output.

The model is a local directory (no download). When the data uses native tool calls and the
model's chat template cannot render them, TRL's Qwen2.5 template is supplied
(:func:`ehrgym.train.models.ensure_tool_template`); TRL swaps in its training variant with
assistant-token markers so the loss covers only the assistant's turns (``assistant_only_loss``).
With ``lora`` the model is wrapped by peft and the adapter merged back before saving, so the
output directory is an ordinary model directory the ``hf`` agent loads
(``ehrgym eval run --agent hf --model OUTPUT_DIR``).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sized
from typing import Any

from ehrgym.train.config import SftSettings, peft_config
from ehrgym.train.data import TrainingDataError, read_examples
from ehrgym.train.models import ensure_tool_template, load_model, require_training_stack


@dataclass
class TrainResult:
    output_dir: Path
    steps: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    logs: list[dict[str, Any]] = field(default_factory=list)
    coverage: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"output_dir": str(self.output_dir), "steps": self.steps, "losses": self.losses,
                "seconds": round(self.seconds, 2), "coverage": self.coverage}


def loss_coverage(train_dataset: Any, examples: int, max_length: int | None) -> dict[str, int]:
    """What the loss sees of the data after TRL's preparation: examples kept (TRL drops those whose assistant
    turns all fall past ``max_length``), examples cut at ``max_length``, and loss-bearing tokens. A trajectory's
    prompt alone can fill most of ``max_length``: then the model learns only the first action's opening."""
    columns = set(getattr(train_dataset, "column_names", None) or ())
    ids = train_dataset["input_ids"] if "input_ids" in columns else []
    labels = train_dataset["labels"] if "labels" in columns else []
    return {"examples": examples, "kept": len(train_dataset),
            "truncated": sum(1 for row in ids if max_length is not None and len(row) >= max_length),
            "tokens": sum(len(row) for row in ids),
            "loss_tokens": sum(1 for row in labels for label in row if label != -100)}


def coverage_warning(coverage: dict[str, int], max_length: int | None) -> str | None:
    """A warning when most kept examples were cut at ``max_length`` (their later turns never reach the loss)."""
    kept = coverage.get("kept", 0)
    if not kept or coverage.get("truncated", 0) * 2 <= kept:
        return None
    return (f"{coverage['truncated']} of {kept} training examples were cut at max_length={max_length} tokens "
            f"({coverage['examples'] - kept} more dropped, no assistant token left): the loss sees only their first "
            "turns; raise trl.max_length or export shorter examples (ehrgym train sft-data --max-chars)")


def chat_dataset(examples: list[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of ``messages`` (and ``tools``) whose mixed-type JSON (tool arguments,
    answer values, schemas) is kept as is through the ``Json`` feature."""
    from datasets import Dataset, Features, Json, List

    with_tools = any("tools" in ex for ex in examples)
    rows = [{"messages": ex["messages"], **({"tools": ex.get("tools") or []} if with_tools else {})}
            for ex in examples]
    features = {"messages": List(Json())}
    if with_tools:
        features["tools"] = List(Json())
    return Dataset.from_list(rows, features=Features(features))


def cpu_defaults() -> dict[str, Any]:
    """TRL options that make training run on a machine without an accelerator (TRL defaults to bf16)."""
    import torch

    if torch.cuda.is_available():
        return {}
    return {"bf16": False, "use_cpu": True}


def save_model_dir(model: Any, tokenizer: Any, out: Path, extra: dict[str, Any] | None = None) -> None:
    """Save an ordinary model directory (a peft model is merged first) and ``ehrgym_train.json``."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if extra is not None:
        (out / "ehrgym_train.json").write_text(json.dumps(extra, indent=2, sort_keys=True, default=str) + "\n",
                                               encoding="utf-8")


def run_sft(settings: SftSettings) -> TrainResult:
    """Fine-tune ``settings.model`` on ``settings.data``; writes the model to ``settings.output_dir``."""
    require_training_stack()
    from trl import SFTConfig, SFTTrainer

    examples = read_examples(settings.data)
    if not examples:
        raise TrainingDataError(f"{settings.data} holds no examples")
    model, tokenizer = load_model(settings.model, settings.dtype)
    uses_tools = any("tools" in ex for ex in examples)
    if settings.tool_template and (uses_tools or not getattr(tokenizer, "chat_template", None)):
        ensure_tool_template(tokenizer, model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out = Path(settings.output_dir)
    trl_args = {"report_to": "none", "logging_steps": 1, "save_strategy": "no", "seed": settings.seed,
                "data_seed": settings.seed, **cpu_defaults(), **settings.trl}
    args = SFTConfig(output_dir=str(out), assistant_only_loss=settings.assistant_only_loss, **trl_args)
    trainer = SFTTrainer(model=model, args=args, train_dataset=chat_dataset(examples), processing_class=tokenizer,
                         peft_config=peft_config(settings.lora))
    train_dataset = trainer.train_dataset
    assert isinstance(train_dataset, Sized)  # chat_dataset builds a (sized) datasets.Dataset
    if len(train_dataset) == 0:
        raise TrainingDataError(f"no example of {settings.data} keeps an assistant turn within "
                                f"max_length={args.max_length} tokens; raise trl.max_length or export shorter "
                                f"examples (ehrgym train sft-data --max-chars)")
    coverage = loss_coverage(train_dataset, len(examples), args.max_length)
    warning = coverage_warning(coverage, args.max_length)
    if warning:
        warnings.warn(warning, stacklevel=2)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = list(trainer.state.log_history)
    losses = [float(entry["loss"]) for entry in logs if "loss" in entry]
    result = TrainResult(out, int(trainer.state.global_step), losses, seconds, logs, coverage)
    save_model_dir(trainer.model, tokenizer, out,
                   {"stage": "sft", "base_model": settings.model, "data": settings.data, **result.to_dict()})
    return result
