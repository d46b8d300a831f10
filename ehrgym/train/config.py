"""Training configurations: a YAML or TOML file read into :class:`SftSettings` / :class:`GrpoSettings`.

Top-level keys are the kit's own (model, data, output directory, LoRA, environment); the ``trl``
table is passed verbatim to TRL's ``SFTConfig`` / ``GRPOConfig`` (learning rate, steps, batch
sizes, lengths …), so any TRL option can be set without the kit knowing it. Relative paths are
read relative to the current directory. Unknown top-level keys are refused (a typo would
otherwise silently train something else). Examples: ``configs/train/*.yaml``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ehrgym.train.models import TrainingSetupError


@dataclass(frozen=True)
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] | str = "all-linear"


@dataclass(frozen=True)
class SftSettings:
    """``ehrgym train sft``: fine-tune ``model`` on ``data`` (from ``ehrgym train sft-data``)."""

    model: str                                   # local model directory (tiny: build one with `train tiny-model`)
    data: str                                    # SFT JSONL
    output_dir: str
    tool_template: bool = True                   # give a model without a tool-capable template TRL's Qwen2.5 one
    assistant_only_loss: bool = True
    lora: LoraSettings | None = None
    dtype: str | None = None                     # e.g. bfloat16 on GPUs; None: the checkpoint's
    seed: int = 0
    trl: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GrpoSettings:
    """``ehrgym train grpo``: GRPO with the episode as environment and the verifier as reward."""

    model: str
    bench: str
    db: str
    output_dir: str
    reward: str = "strict"                       # strict | lenient | shaped (ehrgym.train.rewards)
    protocol: str = "tools"                      # tools (environment_factory) | text (rollout_func)
    prompt: str = "neutral"
    split: str = "train"                         # only train: held-out splits are refused
    limit_tasks: int | None = None               # the first N training tasks (seeded shuffle)
    env: dict[str, Any] = field(default_factory=dict)   # EnvConfig fields (max_steps, python, …)
    tool_template: bool = True
    lora: LoraSettings | None = None
    dtype: str | None = None
    seed: int = 0
    trl: dict[str, Any] = field(default_factory=dict)


S = TypeVar("S", SftSettings, GrpoSettings)


def read_config_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise TrainingSetupError(f"config {path} does not exist (examples: configs/train/)")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TrainingSetupError(f"{path}: not valid TOML ({exc})") from exc
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise TrainingSetupError("YAML configs need pyyaml (pip install pyyaml), or use TOML") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TrainingSetupError(f"{path}: not valid YAML ({exc})") from exc
        if not isinstance(data, dict):
            raise TrainingSetupError(f"{path}: the top level must be a mapping")
        return data
    raise TrainingSetupError(f"{path}: use a .yaml, .yml or .toml file")


def settings_from_dict(cls: type[S], data: dict[str, Any], source: str = "config") -> S:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise TrainingSetupError(f"{source}: unknown keys {unknown}; known: {sorted(names)} (TRL options go "
                                 f"under `trl:`)")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise TrainingSetupError(f"{source}: missing keys {missing}")
    values = dict(data)
    lora = values.get("lora")
    if isinstance(lora, dict):
        try:
            options: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in lora.items()}
            values["lora"] = LoraSettings(**options)
        except TypeError as exc:
            raise TrainingSetupError(f"{source}: bad lora table ({exc})") from exc
    elif lora is not None and not isinstance(lora, LoraSettings):
        raise TrainingSetupError(f"{source}: lora must be a table (r, alpha, dropout, target_modules)")
    return cls(**values)


def load_settings(cls: type[S], path: str | Path, overrides: dict[str, Any] | None = None) -> S:
    """Settings of ``cls`` from a YAML/TOML file; ``overrides`` replace top-level keys (``trl`` is merged)."""
    data = read_config_file(path)
    for key, value in (overrides or {}).items():
        if key == "trl" and isinstance(value, dict):
            data["trl"] = {**(data.get("trl") or {}), **value}
        else:
            data[key] = value
    return settings_from_dict(cls, data, str(path))


def peft_config(lora: LoraSettings | None) -> Any:
    if lora is None:
        return None
    try:
        from peft import LoraConfig
    except ImportError as exc:
        raise TrainingSetupError("LoRA needs peft: pip install -e \".[train]\"") from exc
    targets = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                      task_type="CAUSAL_LM")
