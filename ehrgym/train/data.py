"""Supervised fine-tuning data from results stores: one chat example per distinct train-split episode.

``export_sft_data(run_dirs, out)`` reads the ``episodes.jsonl`` of each run directory
(:mod:`ehrgym.eval.store`), refuses any run that holds an episode of a held-out split
(dev, test, ood: training on them would leak the evaluation), and writes one JSON line per
distinct episode in the chat format TRL's ``SFTTrainer`` (and most other trainers) read:

* ``--format tools``: ``{"messages": [system, user (first observation), assistant with
  "tool_calls", {"role": "tool", "name": ..., "content": observation}, …, assistant answer call],
  "tools": [the environment's own schemas, ehrgym.env.tools.tool_schemas()]}``;
* ``--format text``: the plain-text action protocol (``ehrgym.env.protocol``, as the ``hf`` agent
  speaks it: ```` ```sql ```` blocks, ``ANSWER: …``, ``ABSTAIN: reason: explanation``), observations as
  user turns, for models whose chat template has no tool calling.

Each line also carries ``meta`` (task id, intent, noise subtype, outcome) for statistics; trainers
ignore it. ``max_chars`` (compact mode) clips observations — tool results first, from the longest
down, then the first observation's schema listing — so that an example fits the budget; examples
that still do not fit are dropped and counted. Output is deterministic: runs in the order given,
records sorted by (task id, trial), duplicates (the same messages) kept once.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ehrgym.agents.prompts import system_prompt
from ehrgym.env.tools import tool_schemas
from ehrgym.errors import EhrGymError
from ehrgym.eval.records import EpisodeRecord
from ehrgym.eval.store import EPISODES_FILE, EpisodeStore, read_run_config

FORMATS: tuple[str, ...] = ("tools", "text")
TRAIN_SPLIT = "train"
CHARS_PER_TOKEN = 4          # the estimate used when no tokenizer is given
_SKIPPED_TERMINATIONS = ("agent_error", "infrastructure_error")
_CLIP_FLOOR = 120            # no observation is clipped below this many characters
_FIRST_FLOOR = 600           # nor the first observation (question, then tool help and protocol) below this


class TrainingDataError(EhrGymError):
    """Run directories cannot be turned into training data (held-out split, no episodes)."""


@dataclass(frozen=True)
class ExportOptions:
    format: str = "tools"                # tools | text
    only_success: bool = False           # keep only strictly successful episodes
    max_chars: int | None = None         # compact mode: the character budget of one example
    prompt: str = "neutral"              # system prompt variant (ehrgym.agents.prompts)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise TrainingDataError(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.max_chars is not None and self.max_chars < 1000:
            raise TrainingDataError(f"max_chars={self.max_chars} is too small to hold a question; use ≥ 1000")


@dataclass
class ExportStats:
    examples: int = 0
    chars: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    tokens_exact: bool = False
    by_intent: Counter = field(default_factory=Counter)
    by_subtype: Counter = field(default_factory=Counter)
    by_outcome: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)     # why episodes were left out
    clipped: int = 0                                      # examples whose observations were clipped

    def to_dict(self) -> dict[str, Any]:
        def summary(values: list[int]) -> dict[str, Any]:
            if not values:
                return {"total": 0, "mean": 0, "max": 0}
            return {"total": sum(values), "mean": round(sum(values) / len(values), 1), "max": max(values)}

        return {"examples": self.examples, "chars": summary(self.chars),
                "tokens": {**summary(self.tokens), "exact": self.tokens_exact},
                "by_intent": dict(sorted(self.by_intent.items())),
                "by_subtype": dict(sorted(self.by_subtype.items())),
                "by_outcome": dict(sorted(self.by_outcome.items())),
                "skipped": dict(sorted(self.skipped.items())), "clipped": self.clipped}

    def render(self) -> str:
        d = self.to_dict()
        tok = "tokens" if self.tokens_exact else f"tokens (estimated, chars/{CHARS_PER_TOKEN})"
        lines = [f"examples: {d['examples']}",
                 f"chars: total {d['chars']['total']}, mean {d['chars']['mean']}, max {d['chars']['max']}",
                 f"{tok}: total {d['tokens']['total']}, mean {d['tokens']['mean']}, max {d['tokens']['max']}",
                 f"clipped examples: {self.clipped}"]
        for title, key in (("intent", "by_intent"), ("noise subtype", "by_subtype"), ("outcome", "by_outcome"),
                           ("left out", "skipped")):
            if d[key]:
                lines.append(f"by {title}: " + ", ".join(f"{k} {v}" for k, v in d[key].items()))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------

def train_records(run_dirs: Iterable[str | Path]) -> list[tuple[Path, EpisodeRecord]]:
    """The episodes of ``run_dirs`` (each run's records sorted by task id and trial).

    Raises :class:`TrainingDataError` when a run holds an episode of any split other than
    ``train`` (dev/test/ood are held out for evaluation) or holds no episodes at all.
    """
    out: list[tuple[Path, EpisodeRecord]] = []
    for run in map(Path, run_dirs):
        if not (run / EPISODES_FILE).exists():
            raise TrainingDataError(f"{run} has no {EPISODES_FILE}; pass run directories written by "
                                    f"`ehrgym eval run --split train`")
        records = EpisodeStore(run).records()
        held_out = Counter(r.split for r in records if r.split != TRAIN_SPLIT)
        if held_out:
            listed = ", ".join(f"{n} {s!r}" for s, n in sorted(held_out.items()))
            raise TrainingDataError(
                f"{run} holds episodes of held-out splits ({listed} episodes); training data may only come "
                f"from the {TRAIN_SPLIT!r} split, or the dev/test/ood evaluations stop measuring anything. "
                f"Run the agent with `ehrgym eval run --split {TRAIN_SPLIT} …` and export that run.")
        if not records:
            raise TrainingDataError(f"{run} holds no finished episodes")
        out.extend((run, r) for r in sorted(records, key=lambda r: (r.task_id, r.trial)))
    return out


def _run_tools(run: Path) -> tuple[str, ...]:
    """The tools the run's episodes offered (the python tool may have been switched off)."""
    config = read_run_config(run) or {}
    env = config.get("env") or config.get("env_config") or {}
    python = env.get("python", True) if isinstance(env, dict) else True
    return ("sql", "python", "answer") if python else ("sql", "answer")


# ---------------------------------------------------------------------------------------------
# Rendering one episode
# ---------------------------------------------------------------------------------------------

def answer_arguments(action: dict[str, Any]) -> dict[str, Any]:
    """The ``answer`` tool's arguments for a recorded answer action (unset fields left out)."""
    if action.get("abstain"):
        args: dict[str, Any] = {"abstain": action["abstain"]}
    else:
        args = {"value": action.get("value")}
    if action.get("explanation"):
        args["explanation"] = action["explanation"]
    return args


def action_text(action: dict[str, Any]) -> str:
    """A recorded action written in the plain-text protocol (read back by ``protocol.parse_action``)."""
    tool = action.get("tool")
    if tool == "sql":
        return f"```sql\n{action['query'].strip()}\n```"
    if tool == "python":
        return f"```python\n{action['code'].rstrip()}\n```"
    if tool == "answer":
        if action.get("abstain"):
            explanation = " ".join(str(action.get("explanation") or "").split())
            return f"ABSTAIN: {action['abstain']}: {explanation}" if explanation else f"ABSTAIN: {action['abstain']}"
        value = action.get("value")
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else str(value)
        return f"ANSWER: {shown}"
    return str(action.get("text", ""))


def _tool_call(action: dict[str, Any]) -> dict[str, Any]:
    tool = action["tool"]
    if tool == "sql":
        args: dict[str, Any] = {"query": action["query"]}
    elif tool == "python":
        args = {"code": action["code"]}
    else:
        args = answer_arguments(action)
    return {"type": "function", "function": {"name": tool, "arguments": args}}


def episode_messages(trajectory: dict[str, Any], fmt: str, prompt: str = "neutral") -> list[dict[str, Any]]:
    """The chat of one recorded episode: system prompt, first observation, then actions and observations.

    Invalid actions (text the environment could not read) are left out together with their
    observation, so that the model learns only well-formed calls. The final answer is the last
    assistant turn (its "recorded" acknowledgement is not a training target and is left out)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(prompt, text_protocol=(fmt == "text"))},
        {"role": "user", "content": str(trajectory.get("initial_observation", ""))},
    ]
    for step in trajectory.get("steps", []):
        action = step.get("action") or {}
        tool = action.get("tool")
        if tool not in ("sql", "python", "answer"):
            continue
        if fmt == "tools":
            messages.append({"role": "assistant", "content": "", "tool_calls": [_tool_call(action)]})
        else:
            messages.append({"role": "assistant", "content": action_text(action)})
        if tool == "answer":
            break
        obs = str(step.get("observation", ""))
        messages.append({"role": "tool", "name": tool, "content": obs} if fmt == "tools"
                        else {"role": "user", "content": obs})
    return messages


def example_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of an example's message contents and tool-call arguments."""
    total = 0
    for m in messages:
        total += len(m.get("content") or "")
        for call in m.get("tool_calls") or []:
            total += len(json.dumps(call["function"]["arguments"], ensure_ascii=False))
    return total


def clip_text(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters: its head and tail around a note of what was cut."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 40)
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    return f"{text[:head]}\n[… {len(text) - head - tail} characters clipped …]\n{text[len(text) - tail:]}"


def compact(messages: list[dict[str, Any]], max_chars: int) -> tuple[list[dict[str, Any]], bool]:
    """Clip observations until the example fits ``max_chars``; returns (messages, fits).

    Tool results are clipped first (the longest first, never below a floor), then the first
    observation's schema listing, then the middle of the first observation (the question, which
    comes first, is kept). Actions are never clipped: they are what the model learns."""
    out = [dict(m) for m in messages]
    observations = [i for i, m in enumerate(out) if m["role"] in ("tool", "user") and i > 1]
    while example_chars(out) > max_chars:
        longest = max(observations, key=lambda i: len(out[i]["content"]), default=None)
        if longest is None or len(out[longest]["content"]) <= _CLIP_FLOOR:
            break
        excess = example_chars(out) - max_chars
        target = max(_CLIP_FLOOR, len(out[longest]["content"]) - excess,
                     len(out[longest]["content"]) // 2)
        clipped = clip_text(out[longest]["content"], target)
        if len(clipped) >= len(out[longest]["content"]):
            break
        out[longest]["content"] = clipped
    excess = example_chars(out) - max_chars
    if excess > 0:
        first = out[1]["content"]
        start = first.find("Tables (schemas")
        if start != -1:
            end = first.find("\n\n", start)
            end = len(first) if end == -1 else end
            listing = first[start:end]
            if len(listing) - excess > _CLIP_FLOOR:
                out[1]["content"] = first[:start] + clip_text(listing, len(listing) - excess) + first[end:]
    excess = example_chars(out) - max_chars
    if excess > 0 and len(out[1]["content"]) - excess >= _FIRST_FLOOR:
        # last resort: the middle of the first observation (tool help, protocol); its head holds the question
        out[1]["content"] = clip_text(out[1]["content"], len(out[1]["content"]) - excess)
    return out, example_chars(out) <= max_chars


def _outcome(record: EpisodeRecord) -> str:
    if record.success_strict:
        return "success"
    return record.failure or record.termination


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------

def build_examples(run_dirs: Iterable[str | Path], options: ExportOptions = ExportOptions(),
                   tokenizer: Any = None) -> tuple[list[dict[str, Any]], ExportStats]:
    """The SFT examples of ``run_dirs`` and their statistics (see the module docstring)."""
    stats = ExportStats(tokens_exact=tokenizer is not None)
    seen: set[str] = set()
    examples: list[dict[str, Any]] = []
    for run, record in train_records(run_dirs):
        if record.termination in _SKIPPED_TERMINATIONS:
            stats.skipped[record.termination] += 1
            continue
        if options.only_success and not record.success_strict:
            stats.skipped["unsuccessful"] += 1
            continue
        trajectory = record.trajectory or {}
        if not trajectory.get("steps"):
            stats.skipped["no_trajectory"] += 1
            continue
        messages = episode_messages(trajectory, options.format, options.prompt)
        if messages[-1]["role"] != "assistant":
            stats.skipped["no_final_answer"] += 1
            continue
        clipped = False
        if options.max_chars is not None and example_chars(messages) > options.max_chars:
            messages, fits = compact(messages, options.max_chars)
            if not fits:
                stats.skipped["over_budget"] += 1
                continue
            clipped = True
        tools = tool_schemas(_run_tools(run)) if options.format == "tools" else None
        body: dict[str, Any] = {"messages": messages}
        if tools is not None:
            body["tools"] = tools
        key = json.dumps(body, sort_keys=True, ensure_ascii=False)
        if key in seen:
            stats.skipped["duplicate"] += 1
            continue
        seen.add(key)
        subtype = record.noise_subtype or "clean"
        body["meta"] = {"task_id": record.task_id, "pair_id": record.pair_id, "variant": record.variant,
                        "intent": record.intent, "noise_subtype": subtype, "outcome": _outcome(record),
                        "agent": record.agent, "trial": record.trial}
        examples.append(body)
        chars = example_chars(messages)
        stats.examples += 1
        stats.clipped += int(clipped)
        stats.chars.append(chars)
        stats.tokens.append(_count_tokens(tokenizer, body) if tokenizer is not None
                            else -(-chars // CHARS_PER_TOKEN))
        stats.by_intent[record.intent] += 1
        stats.by_subtype[subtype] += 1
        stats.by_outcome[body["meta"]["outcome"]] += 1
    return examples, stats


def _count_tokens(tokenizer: Any, example: dict[str, Any]) -> int:
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(example["messages"], tools=example.get("tools"), tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return len(ids)
    return len(tokenizer("\n".join(str(m.get("content") or "") for m in example["messages"])).input_ids)


def write_examples(examples: list[dict[str, Any]], out: str | Path) -> Path:
    """Write examples as JSON lines (keys sorted, UTF-8): the same examples give the same bytes."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for ex in examples:
            fh.write(json.dumps(ex, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
    tmp.replace(out)
    return out


def export_sft_data(run_dirs: Iterable[str | Path], out: str | Path, options: ExportOptions = ExportOptions(),
                    tokenizer: Any = None) -> ExportStats:
    """Build the examples of ``run_dirs`` and write them to ``out``; returns the statistics."""
    examples, stats = build_examples(run_dirs, options, tokenizer)
    if not examples:
        raise TrainingDataError(f"no examples left to write ({stats.render()})")
    write_examples(examples, out)
    return stats


def read_examples(path: str | Path) -> list[dict[str, Any]]:
    """The examples of an SFT data file written by :func:`write_examples`."""
    path = Path(path)
    if not path.exists():
        raise TrainingDataError(f"{path} does not exist; write it with `ehrgym train sft-data`")
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TrainingDataError(f"{path}:{lineno}: not JSON ({exc.msg})") from exc
    return rows


def assistant_turn_tokens(examples: Iterable[dict[str, Any]], tokenizer: Any) -> list[int]:
    """Tokens of every assistant turn of ``examples`` (its text, or its tool calls as JSON): an agent evaluated
    with a reply limit below these writes the actions it was trained on cut short — unparseable."""
    out = []
    for example in examples:
        for message in example["messages"]:
            if message.get("role") != "assistant":
                continue
            text = str(message.get("content") or "")
            if message.get("tool_calls"):
                text += json.dumps(message["tool_calls"], sort_keys=True)
            out.append(len(tokenizer(text).input_ids))
    return out
