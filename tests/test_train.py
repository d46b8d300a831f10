"""Training in the gym with tiny random models built here (no downloads): SFT data export, the
refusal of held-out splits, one SFT step, one GRPO step with the real environment whose rewards
are the verifier's verdicts, and the episode semantics the trainer's environment shows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from ehrgym.agents.textactions import action_from_tool_call, parse_text_action  # noqa: E402
from ehrgym.bench.answers import format_answer  # noqa: E402
from ehrgym.bench.configs import BuildConfig  # noqa: E402
from ehrgym.env.actions import AnswerAction, action_from_dict, action_to_dict  # noqa: E402
from ehrgym.env.episode import EnvConfig  # noqa: E402
from ehrgym.env.tools import tool_schemas  # noqa: E402
from ehrgym.env.verifier import Verdict, verify  # noqa: E402
from ehrgym.eval.store import EpisodeStore  # noqa: E402
from ehrgym.train.config import GrpoSettings, SftSettings, load_settings  # noqa: E402
from ehrgym.train.data import (ExportOptions, TrainingDataError, build_examples, example_chars,  # noqa: E402
                               export_sft_data, read_examples, write_examples)
from ehrgym.train.environment import EpisodeEnvironment, EpisodeOver, SharedEpisodes  # noqa: E402
from ehrgym.train.models import TrainingSetupError  # noqa: E402
from ehrgym.train.rewards import EpisodeOutcome, get_reward_fn  # noqa: E402

TINY_BENCH = BuildConfig("train-test", 40, oversample=2.0, min_candidates=8, tier_weights=(1.0, 1.0, 2.0))


@pytest.fixture(scope="module")
def bench(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ehrgym.bench.build import build_benchmark

    out = tmp_path_factory.mktemp("train") / "bench"
    build_benchmark(synth_db, out, config=TINY_BENCH, seed=0, progress=False)
    return out


@pytest.fixture(scope="module")
def tasks(bench: Path) -> list[Any]:
    from ehrgym.bench.dataset import load_benchmark

    return load_benchmark(bench).tasks


@pytest.fixture(scope="module")
def train_run(bench: Path, synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The skeptic on a few train pairs, two trials each (deterministic: the trials repeat)."""
    from ehrgym.eval.runner import run_evaluation

    out = tmp_path_factory.mktemp("train") / "run-train"
    run_evaluation(bench, synth_db, "skeptic", out, k=2, tasks={"split": "train"}, limit_pairs=6,
                   progress=False)
    return out


@pytest.fixture(scope="module")
def dev_run(bench: Path, synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ehrgym.eval.runner import run_evaluation

    out = tmp_path_factory.mktemp("train") / "run-dev"
    run_evaluation(bench, synth_db, "skeptic", out, k=1, tasks={"split": "dev"}, limit_pairs=1, progress=False)
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ehrgym.train.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("train") / "tiny")


def _norm(action: dict[str, Any]) -> dict[str, Any]:
    """An action dict with the answer value as text (the text protocol carries text, and an
    ``ANSWER:`` line no explanation)."""
    out = dict(action)
    if out.get("tool") == "answer" and not out.get("abstain"):
        out["explanation"] = ""
    if out.get("tool") == "answer" and out.get("value") is not None:
        value = out["value"]
        out["value"] = json.dumps(value) if isinstance(value, list) else str(value)
    return out


# ---------------------------------------------------------------------------------------------
# SFT data
# ---------------------------------------------------------------------------------------------
def test_export_tools_round_trip_dedup_and_determinism(train_run: Path, tmp_path: Path) -> None:
    records = {r.task_id: r for r in EpisodeStore(train_run).records() if r.trial == 0}
    out_a, out_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    stats = export_sft_data([train_run], out_a)
    export_sft_data([train_run], out_b)
    assert out_a.read_bytes() == out_b.read_bytes()               # deterministic
    examples = read_examples(out_a)
    assert stats.examples == len(examples) > 0
    assert stats.skipped["duplicate"] >= len(examples) - 2        # the second trials repeat the first ones
    assert len({json.dumps(e["messages"], sort_keys=True) for e in examples}) == len(examples)
    schemas = tool_schemas()
    for ex in examples:
        assert ex["tools"] == schemas                             # the environment's own tool schemas
        msgs = ex["messages"]
        assert [m["role"] for m in msgs[:2]] == ["system", "user"] and msgs[-1]["role"] == "assistant"
        record = records[ex["meta"]["task_id"]]
        assert msgs[1]["content"] == record.trajectory["initial_observation"]
        calls = [m["tool_calls"][0]["function"] for m in msgs if m["role"] == "assistant"]
        recorded = [s["action"] for s in record.trajectory["steps"] if s["action"]["tool"] != "invalid"]
        assert len(calls) == len(recorded)
        for call, action in zip(calls, recorded):
            rebuilt = action_from_tool_call(call["name"], call["arguments"])  # what a tool-calling agent reads
            assert action_to_dict(rebuilt) == action_to_dict(action_from_dict(action))
        tool_turns = [m for m in msgs if m["role"] == "tool"]
        assert [m["content"] for m in tool_turns] == [s["observation"] for s in record.trajectory["steps"]
                                                     if s["action"]["tool"] in ("sql", "python")]
    assert sum(stats.by_intent.values()) == sum(stats.by_outcome.values()) == stats.examples


def test_export_text_protocol_rescored_by_the_verifier(train_run: Path, tasks: list[Any]) -> None:
    by_id = {t.task_id: t for t in tasks}
    records = {r.task_id: r for r in EpisodeStore(train_run).records()}
    examples, stats = build_examples([train_run], ExportOptions(format="text"))
    assert "tools" not in examples[0]
    assert "ANSWER: <value>" in examples[0]["messages"][0]["content"]      # the text protocol is in the prompt
    for ex in examples:
        record = records[ex["meta"]["task_id"]]
        replies = [m["content"] for m in ex["messages"] if m["role"] == "assistant"]
        recorded = [s["action"] for s in record.trajectory["steps"] if s["action"]["tool"] != "invalid"]
        for reply, action in zip(replies, recorded, strict=True):
            assert _norm(action_to_dict(parse_text_action(reply))) == _norm(action)
        final = parse_text_action(replies[-1])
        assert isinstance(final, AnswerAction)
        assert verify(by_id[record.task_id], final).success_strict == record.success_strict
    only = build_examples([train_run], ExportOptions(format="text", only_success=True))[0]
    assert all(e["meta"]["outcome"] == "success" for e in only)
    assert len(only) == stats.by_outcome.get("success", 0)


def test_compact_mode_fits_the_budget(train_run: Path) -> None:
    full, full_stats = build_examples([train_run], ExportOptions(format="text"))
    budget = sorted(example_chars(e["messages"]) for e in full)[len(full) // 2] - 200
    compact, stats = build_examples([train_run], ExportOptions(format="text", max_chars=budget))
    assert compact and stats.clipped > 0
    assert all(example_chars(e["messages"]) <= budget for e in compact)
    episodes = full_stats.examples + full_stats.skipped["duplicate"]
    assert stats.examples + stats.skipped["over_budget"] + stats.skipped["duplicate"] == episodes
    clipped = [e for e in compact if "characters clipped" in json.dumps(e)]
    assert clipped and all(e["messages"][1]["content"].startswith("Question:") for e in clipped)


def test_held_out_splits_are_refused(train_run: Path, dev_run: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingDataError, match="held-out splits .*'dev'"):
        export_sft_data([dev_run], tmp_path / "x.jsonl")
    with pytest.raises(TrainingDataError, match="held-out"):
        export_sft_data([train_run, dev_run], tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()
    with pytest.raises(TrainingDataError, match="train' split only"):
        from ehrgym.train.grpo import build_grpo_trainer

        build_grpo_trainer(GrpoSettings(model="m", bench="b", db="d", output_dir="o", split="test"))


def test_cli_sft_data(train_run: Path, dev_run: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ehrgym.cli import cli

    out = tmp_path / "cli.jsonl"
    result = CliRunner().invoke(cli, ["train", "sft-data", "--runs", str(train_run), "--out", str(out),
                                      "--format", "text", "--only-success"])
    assert result.exit_code == 0, result.output
    assert "examples:" in result.output and "by intent:" in result.output and out.exists()
    refused = CliRunner().invoke(cli, ["train", "sft-data", "--runs", str(dev_run), "--out", str(out)])
    assert isinstance(refused.exception, TrainingDataError)


def test_config_files_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "c.toml"
    good.write_text('model = "m"\ndata = "d"\noutput_dir = "o"\n[lora]\nr = 4\n[trl]\nmax_steps = 1\n')
    s = load_settings(SftSettings, good, {"trl": {"learning_rate": 0.1}})
    assert s.lora is not None and s.lora.r == 4 and s.trl == {"max_steps": 1, "learning_rate": 0.1}
    bad = tmp_path / "b.yaml"
    bad.write_text("model: m\ndata: d\noutput_dir: o\nmax_steps: 3\n")
    with pytest.raises(TrainingSetupError, match="unknown keys \\['max_steps'\\]"):
        load_settings(SftSettings, bad)
    repo = Path(__file__).resolve().parents[1] / "configs" / "train"
    for path in sorted(repo.glob("sft-*.yaml")):
        load_settings(SftSettings, path)
    for path in sorted(repo.glob("grpo-*.yaml")):
        assert load_settings(GrpoSettings, path).reward in ("strict", "lenient", "shaped")


# ---------------------------------------------------------------------------------------------
# The environment TRL drives
# ---------------------------------------------------------------------------------------------
def _verdict(strict: bool, lenient: bool, failure: str | None) -> Verdict:
    return Verdict(strict, lenient, float(strict), failure, "")


def test_reward_variants() -> None:
    ok = EpisodeOutcome(_verdict(True, True, None), True)
    wrong_reason = EpisodeOutcome(_verdict(False, True, "wrong_reason"), True)
    wrong = EpisodeOutcome(_verdict(False, False, "wrong_value"), True)
    none = EpisodeOutcome(_verdict(False, False, "no_answer"), False)
    table = {name: [get_reward_fn(name)(o) for o in (ok, wrong_reason, wrong, none)]
             for name in ("strict", "lenient", "shaped")}
    assert table == {"strict": [1, 0, 0, 0], "lenient": [1, 1, 0, 0], "shaped": [1, 0.5, 0.1, 0]}


def test_environment_terminated_truncated_and_refusal(bench: Path, synth_db: Path, tasks: list[Any]) -> None:
    task = next(t for t in tasks if t.split == "train" and not t.expected.is_abstain)
    gold = format_answer(task.expected.value, task.expected.answer)
    shared = SharedEpisodes.from_benchmark(bench, synth_db, EnvConfig(max_steps=2, python=False))
    try:
        env = shared.factory()
        assert type(env) is EpisodeEnvironment and not hasattr(env, "python")
        first = env.reset(task_id=task.public_id, prompt=[])          # TRL passes the whole row
        assert task.question in first
        assert "42" in env.sql("SELECT 42 AS x")
        assert not env.terminated and not env.truncated
        env.answer(value=gold)
        assert env.terminated and not env.truncated and env.get_reward() == 1.0 == env.verdict.reward
        with pytest.raises(EpisodeOver, match="episode is over"):
            env.sql("SELECT 1")
        # the step limit truncates; the reward is the verdict on a missing answer
        env.reset(task_id=task.public_id)
        env.sql("SELECT 1")
        env.sql("SELECT 2")
        assert env.truncated and not env.terminated
        assert env.get_reward() == 0.0 and env.verdict.failure == "no_answer"
        with pytest.raises(EpisodeOver):
            env.answer(value=gold)
        # a rollout that stops without answering is truncated when it is scored
        env.reset(task_id=task.public_id)
        env.sql("SELECT 1")
        assert env.get_reward() == 0.0 and env.truncated and not env.terminated
        # two instances share one connection pool, and a wrong abstention scores as the verifier says
        other = shared.factory()
        other.reset(task_id=task.task_id)
        other.answer(abstain="out_of_scope", explanation="x")
        assert other.get_reward() == 0.0 and other.verdict.failure == "false_abstention"
        assert env.episode.pool is other.episode.pool
    finally:
        shared.close()
    timed = SharedEpisodes.from_benchmark(bench, synth_db, EnvConfig(episode_timeout_s=0.0, python=False))
    try:
        env = timed.factory()
        env.reset(task_id=task.public_id)
        with pytest.raises(EpisodeOver, match="Time limit"):
            env.sql("SELECT 1")
        assert env.truncated and not env.terminated and env.get_reward() == 0.0
    finally:
        timed.close()


def test_tool_methods_are_documented_for_trl(bench: Path, synth_db: Path) -> None:
    from transformers.utils import get_json_schema

    shared = SharedEpisodes.from_benchmark(bench, synth_db, EnvConfig(python=True))
    try:
        env_cls = type(shared.factory())
    finally:
        shared.close()
    import inspect

    public = sorted(n for n, _ in inspect.getmembers(env_cls, inspect.isfunction) if not n.startswith("_"))
    assert public == ["answer", "get_reward", "python", "reset", "sql"]
    answer = get_json_schema(env_cls.answer)["function"]
    assert answer["description"].startswith("Give the final answer")
    assert "insufficient_evidence" in answer["parameters"]["properties"]["abstain"]["enum"]
    assert get_json_schema(env_cls.sql)["function"]["parameters"]["required"] == ["query"]


# ---------------------------------------------------------------------------------------------
# One SFT step, one GRPO step
# ---------------------------------------------------------------------------------------------
def test_one_sft_step_writes_a_model_the_hf_agent_loads(train_run: Path, tiny_dir: Path, tmp_path: Path) -> None:
    from ehrgym.agents.registry import make_agent
    from ehrgym.train.sft import run_sft

    data = tmp_path / "sft.jsonl"
    examples, _ = build_examples([train_run], ExportOptions(format="tools", max_chars=8000))
    write_examples(examples[:1], data)                     # one example: one quick step
    out = tmp_path / "sft-model"
    with pytest.raises(TrainingDataError, match="max_length=64"):
        run_sft(SftSettings(model=str(tiny_dir), data=str(data), output_dir=str(out), trl={"max_length": 64}))
    result = run_sft(SftSettings(model=str(tiny_dir), data=str(data), output_dir=str(out),
                                 trl={"max_steps": 1, "per_device_train_batch_size": 1, "max_length": 4096}))
    assert result.steps == 1 and len(result.losses) == 1 and math.isfinite(result.losses[0])
    assert result.losses[0] > 0
    assert result.coverage["kept"] == 1 and result.coverage["loss_tokens"] > 0
    assert json.loads((out / "ehrgym_train.json").read_text())["stage"] == "sft"
    agent = make_agent("hf", model=str(out), max_tokens=4)
    assert agent.tokenizer.chat_template


def test_loss_coverage_warns_when_most_examples_are_cut_at_max_length() -> None:
    from datasets import Dataset

    from ehrgym.train.sft import coverage_warning, loss_coverage

    # what TRL leaves after preparation: two examples cut at max_length=4, one whole; one dropped entirely
    prepared = Dataset.from_list([{"input_ids": [1, 2, 3, 4], "labels": [-100, -100, -100, 7]},
                                  {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 5, 6]},
                                  {"input_ids": [1, 2], "labels": [-100, 9]}])
    coverage = loss_coverage(prepared, examples=4, max_length=4)
    assert coverage == {"examples": 4, "kept": 3, "truncated": 2, "tokens": 10, "loss_tokens": 4}
    warning = coverage_warning(coverage, 4)
    assert warning is not None and "2 of 3" in warning and "1 more dropped" in warning
    assert coverage_warning(loss_coverage(prepared, examples=3, max_length=8), 8) is None


class _Force(transformers.LogitsProcessor):
    """Row i of the first generation writes ``scripts[i]``; any later turn (after a tool result) ends."""

    def __init__(self, scripts: list[list[int]], start: int, eos: int, after_tool: int) -> None:
        self.scripts, self.start, self.eos, self.after_tool = scripts, start, eos, after_tool

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        forced = torch.full_like(scores, -math.inf)
        pos = input_ids.shape[1] - self.start
        for row in range(scores.shape[0]):
            script = self.scripts[row % len(self.scripts)]
            done = bool((input_ids[row] == self.after_tool).any()) or pos >= len(script)
            forced[row, self.eos if done else script[pos]] = 0.0
        return forced


def test_one_grpo_step_rewards_are_the_verifiers_verdicts(bench: Path, synth_db: Path, tasks: list[Any],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ehrgym.train.grpo import build_grpo_trainer, episode_rows
    from ehrgym.train.models import build_tiny_model

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    settings = GrpoSettings(model="(in memory)", bench=str(bench), db=str(synth_db), output_dir=str(tmp_path / "g"),
                            limit_tasks=1, env={"max_steps": 3, "python": False, "schema_summary": False},
                            trl={"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2,
                                 "max_completion_length": 160})
    probe = SharedEpisodes.from_benchmark(bench, synth_db, EnvConfig(python=False))
    public_id = episode_rows(probe, "tools", limit=1)[0]["task_id"]
    task = probe.tasks[public_id]
    probe.close()
    if task.expected.is_abstain:
        right = {"abstain": task.expected.reason, "explanation": "the records do not support it"}
        wrong = {"value": "0"}
    else:
        right = {"value": format_answer(task.expected.value, task.expected.answer)}
        wrong = {"abstain": "out_of_scope", "explanation": "x"}
    model, tok = build_tiny_model(seed=1)

    def call(arguments: dict[str, Any]) -> list[int]:
        text = "<tool_call>\n" + json.dumps({"name": "answer", "arguments": arguments}) + "\n</tool_call>"
        return tok(text, add_special_tokens=False).input_ids

    scripts = [call(right), call(wrong)]
    after_tool = tok.convert_tokens_to_ids("<tool_response>")
    original_generate = type(model).generate

    def scripted_generate(self: Any, input_ids: Any = None, **kwargs: Any) -> Any:
        procs = transformers.LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        procs.append(_Force(scripts, input_ids.shape[1], tok.eos_token_id, after_tool))
        return original_generate(self, input_ids=input_ids, logits_processor=procs, **kwargs)

    monkeypatch.setattr(type(model), "generate", scripted_generate)
    seen: list[tuple[float, bool, str | None]] = []
    original_reward = EpisodeEnvironment.get_reward

    def recording(self: EpisodeEnvironment) -> float:
        reward = original_reward(self)
        seen.append((reward, self.verdict.success_strict, self.verdict.failure))
        return reward

    monkeypatch.setattr(EpisodeEnvironment, "get_reward", recording)
    trainer, shared = build_grpo_trainer(settings, model, tok)
    try:
        trainer.train()
    finally:
        shared.close()
    assert len(seen) == 2
    assert [(r, s) for r, s, _ in seen] == [(1.0, True), (0.0, False)]   # reward = the strict verdict
    assert seen[1][2] in ("false_abstention", "missed_abstention")
    log = next(e for e in trainer.state.log_history if "reward" in e)
    assert log["rewards/strict_success/mean"] == 0.5 == log["rewards/EpisodeEnvironment/mean"]
    assert log["tools/call_frequency"] > 0


def test_one_grpo_step_text_protocol_rollout(bench: Path, synth_db: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollout_func path: the model writes the plain-text protocol; rewards are still the verdicts."""
    from ehrgym.train.grpo import build_grpo_trainer, episode_rows
    from ehrgym.train.models import build_tiny_model

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    settings = GrpoSettings(model="(in memory)", bench=str(bench), db=str(synth_db), output_dir=str(tmp_path / "g"),
                            protocol="text", reward="shaped", limit_tasks=1,
                            env={"max_steps": 3, "python": False, "schema_summary": False},
                            trl={"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2,
                                 "max_completion_length": 96})
    probe = SharedEpisodes.from_benchmark(bench, synth_db, EnvConfig(python=False))
    row = episode_rows(probe, "text", limit=1)[0]
    task = probe.tasks[row["task_id"]]
    probe.close()
    assert row["prompt"][1]["content"].startswith(f"Episode {task.public_id}")
    if task.expected.is_abstain:
        replies = [f"ABSTAIN: {task.expected.reason}: not supported", "ANSWER: 0"]
    else:
        replies = [f"ANSWER: {format_answer(task.expected.value, task.expected.answer)}",
                   "ABSTAIN: out_of_scope: x"]
    model, tok = build_tiny_model(seed=2)
    scripts = [tok(r, add_special_tokens=False).input_ids + [tok.eos_token_id] for r in replies]
    original_generate = type(model).generate
    calls = {"n": 0}

    def scripted_generate(self: Any, input_ids: Any = None, **kwargs: Any) -> Any:
        script = scripts[calls["n"] % 2]
        calls["n"] += 1
        procs = transformers.LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        procs.append(_Force([script], input_ids.shape[1], tok.eos_token_id, -1))
        return original_generate(self, input_ids=input_ids, logits_processor=procs, **kwargs)

    monkeypatch.setattr(type(model), "generate", scripted_generate)
    trainer, shared = build_grpo_trainer(settings, model, tok)
    try:
        trainer.train()
        verdicts = [env.verdict for env in shared.instances if env.verdict is not None]
    finally:
        shared.close()
    assert calls["n"] == 2 and [v.success_strict for v in verdicts] == [True, False]
    log = next(e for e in trainer.state.log_history if "reward" in e)
    assert log["rewards/strict_success/mean"] == 0.5
    # shaped: 1 for the success, 0.1 for the well-formed wrong final call
    assert log["rewards/episode_reward/mean"] == pytest.approx((1.0 + 0.1) / 2)
