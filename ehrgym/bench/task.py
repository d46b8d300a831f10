"""The task record (docs/architecture.md §3) and its JSONL form.

A task is one question with everything needed to run and verify it. The clean task and its
noisy twin share ``pair_id``. ``gold_sql`` yields the expected answer on the task's own
evidence (for recoverable noise: the robust SQL); ``naive_sql`` is the clean gold SQL rendered
for this task's question — what a credulous agent runs.

``task_id`` and ``pair_id`` name the template, the noise subtype and the variant: they are for
the evaluator and the results store only. Everything an agent sees (the briefing, observations,
the Gymnasium ``info``, trajectories) names a task by its :attr:`Task.public_id` — ``task-`` and
the first 16 hex digits of the SHA-256 of the task's canonical JSON: stable for a given task,
unguessable without the task (gold SQL and expected outcome included), and with no systematic
difference between a clean task and its noisy twin.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator

from ehrgym.bench.answers import AnswerSpec
from ehrgym.db.overlay import Overlay
from ehrgym.errors import OverlayError, TaskFormatError
from ehrgym.vocab import ABSTAIN_REASONS, INTENTS, LEVELS, NOISE_SUBTYPES, SPLITS, VARIANTS, accepted_reasons

TASK_FORMAT_VERSION = 1
PUBLIC_ID_PREFIX = "task-"
PUBLIC_ID_HEX = 16


@dataclass(frozen=True)
class Expected:
    """``kind='answer'`` with a typed ``value``, or ``kind='abstain'`` with a ``reason`` code."""

    kind: str
    answer: AnswerSpec
    value: Any = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.kind == "answer":
            if self.value is None:
                raise TaskFormatError("an 'answer' expectation needs a value")
        elif self.kind == "abstain":
            if self.reason not in ABSTAIN_REASONS:
                raise TaskFormatError(f"abstention reason {self.reason!r} is not one of {ABSTAIN_REASONS}")
        else:
            raise TaskFormatError(f"expected.kind must be 'answer' or 'abstain', got {self.kind!r}")

    @property
    def is_abstain(self) -> bool:
        return self.kind == "abstain"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "reason": self.reason, "answer": self.answer.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Expected":
        if not isinstance(data, dict) or "kind" not in data or "answer" not in data:
            raise TaskFormatError(f"'expected' must hold kind and answer, got {data!r}")
        return cls(data["kind"], AnswerSpec.from_dict(data["answer"]), data.get("value"), data.get("reason"))


@dataclass(frozen=True)
class NoiseSpec:
    """What was corrupted: level, subtype, the overlay and/or the question edit."""

    level: str
    subtype: str
    overlay: Overlay = field(default_factory=Overlay)
    question_edit: dict[str, Any] | None = None  # {"from": ..., "to": ..., "kind": ...}
    description: str = ""

    def __post_init__(self) -> None:
        if NOISE_SUBTYPES.get(self.subtype) != self.level:
            raise TaskFormatError(f"noise subtype {self.subtype!r} does not belong to level {self.level!r}; "
                                  f"known: {NOISE_SUBTYPES}")

    @property
    def form(self) -> str | None:
        """The form of the question edit where a subtype has several that differ in what they accept
        (``ehrgym.vocab.ACCEPTED_BY_FORM``), e.g. ``beyond_the_course``; None otherwise."""
        form = (self.question_edit or {}).get("form")
        return str(form) if form else None

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "subtype": self.subtype, "overlay": self.overlay.to_dict(),
                "question_edit": self.question_edit, "description": self.description}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "NoiseSpec | None":
        if data is None:
            return None
        try:
            return cls(data["level"], data["subtype"], Overlay.from_dict(data.get("overlay")),
                       data.get("question_edit"), data.get("description", ""))
        except KeyError as exc:
            raise TaskFormatError(f"noise spec lacks {exc}") from exc
        except OverlayError as exc:
            raise TaskFormatError(f"noise overlay: {exc}") from exc


@dataclass(frozen=True)
class Task:
    task_id: str
    pair_id: str
    variant: str
    intent: str
    level: str
    template_id: str
    question: str
    gold_sql: str
    naive_sql: str
    expected: Expected
    noise: NoiseSpec | None
    split: str
    meta: dict[str, Any] = field(default_factory=dict)
    # edits of other patients' rows served to both twins of the pair (ehrgym.bench.background): no episode
    # sees the clean database as such
    background: Overlay = field(default_factory=Overlay)
    # a clean twin's one harmless anomaly in its own evidence (ehrgym.bench.decoys): served to it alone
    decoy: Overlay = field(default_factory=Overlay)

    def __post_init__(self) -> None:
        problems = []
        if self.variant not in VARIANTS:
            problems.append(f"variant {self.variant!r} not in {VARIANTS}")
        if self.intent not in INTENTS:
            problems.append(f"intent {self.intent!r} not in {INTENTS}")
        if self.level not in LEVELS:
            problems.append(f"level {self.level!r} not in {LEVELS}")
        if self.split not in SPLITS:
            problems.append(f"split {self.split!r} not in {SPLITS}")
        if (self.variant == "noise") != (self.noise is not None):
            problems.append("a noise task needs a noise spec and a clean task must not have one")
        if not self.question.strip():
            problems.append("empty question")
        if problems:
            raise TaskFormatError(f"task {self.task_id!r}: " + "; ".join(problems))

    @property
    def accepted_reasons(self) -> frozenset[str]:
        """The abstention reasons strict scoring accepts on this task (``ehrgym.vocab.accepted_reasons`` of its
        noise subtype and question form; the expected reason alone on a clean task)."""
        noise = self.noise
        return accepted_reasons(noise.subtype if noise else None, str(self.expected.reason),
                                noise.form if noise else None)

    @cached_property
    def public_id(self) -> str:
        """The opaque id agents see (see the module docstring); never the internal ``task_id``."""
        return public_task_id(self)

    @property
    def overlay(self) -> Overlay:
        """What the episode is served: the pair's background, then a clean twin's decoy or a noisy twin's noise."""
        noise = self.noise.overlay if self.noise else Overlay()
        if self.background.is_empty and self.decoy.is_empty:
            return noise
        return Overlay(self.background.edits + self.decoy.edits + noise.edits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": TASK_FORMAT_VERSION,
            "task_id": self.task_id, "pair_id": self.pair_id, "variant": self.variant,
            "intent": self.intent, "level": self.level, "template_id": self.template_id,
            "question": self.question, "gold_sql": self.gold_sql, "naive_sql": self.naive_sql,
            "expected": self.expected.to_dict(),
            "noise": self.noise.to_dict() if self.noise else None,
            "split": self.split, "meta": self.meta,
            **({"background": self.background.to_dict()} if not self.background.is_empty else {}),
            **({"decoy": self.decoy.to_dict()} if not self.decoy.is_empty else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Task":
        if not isinstance(data, dict):
            raise TaskFormatError(f"a task is a JSON object, got {type(data).__name__}")
        required = ["task_id", "pair_id", "variant", "intent", "level", "template_id", "question",
                    "gold_sql", "naive_sql", "expected", "split"]
        missing = [k for k in required if k not in data]
        if missing:
            raise TaskFormatError(f"task {data.get('task_id', '?')!r} lacks fields {missing}")
        version = data.get("format_version", TASK_FORMAT_VERSION)
        if version != TASK_FORMAT_VERSION:
            raise TaskFormatError(f"task format version {version} is not supported (this kit reads "
                                  f"{TASK_FORMAT_VERSION}); rebuild the benchmark with `ehrgym bench build`")
        return cls(
            task_id=str(data["task_id"]), pair_id=str(data["pair_id"]), variant=data["variant"],
            intent=data["intent"], level=data["level"], template_id=str(data["template_id"]),
            question=str(data["question"]), gold_sql=str(data["gold_sql"]), naive_sql=str(data["naive_sql"]),
            expected=Expected.from_dict(data["expected"]), noise=NoiseSpec.from_dict(data.get("noise")),
            split=data["split"], meta=dict(data.get("meta") or {}),
            background=Overlay.from_dict(data.get("background")),
            decoy=Overlay.from_dict(data.get("decoy")),
        )


def task_to_json(task: Task) -> str:
    return json.dumps(task.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def public_task_id(task: Task) -> str:
    """``task-`` + the first 16 hex digits of the SHA-256 of the task's canonical JSON."""
    digest = hashlib.sha256(task_to_json(task).encode("utf-8")).hexdigest()
    return PUBLIC_ID_PREFIX + digest[:PUBLIC_ID_HEX]


def write_tasks_jsonl(tasks: Iterable[Task], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for task in tasks:
            fh.write(task_to_json(task) + "\n")


def iter_tasks_jsonl(path: str | Path) -> Iterator[Task]:
    path = Path(path)
    if not path.exists():
        raise TaskFormatError(f"task file {path} does not exist; build one with `ehrgym bench build`")
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskFormatError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            try:
                yield Task.from_dict(data)
            except TaskFormatError as exc:
                raise TaskFormatError(f"{path}:{lineno}: {exc}") from exc


def load_tasks_jsonl(path: str | Path) -> list[Task]:
    tasks = list(iter_tasks_jsonl(path))
    seen: set[str] = set()
    for t in tasks:
        if t.task_id in seen:
            raise TaskFormatError(f"{path}: duplicate task_id {t.task_id!r}")
        seen.add(t.task_id)
    return tasks
