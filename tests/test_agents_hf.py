"""The local Hugging Face agent with a tiny randomly initialised model built in the test (no download)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from ehrgym.agents.base import Briefing  # noqa: E402
from ehrgym.agents.registry import make_agent  # noqa: E402
from ehrgym.env.actions import AnswerAction, SqlAction  # noqa: E402
from ehrgym.errors import AgentError  # noqa: E402

WORDS = ["<pad>", "<eos>", "<unk>", "ANSWER", ":", "42", "SQL", "SELECT", "1", "the", "labs", "look", "fine",
         "maybe", "patient", "<|system|>", "<|user|>", "<|assistant|>"]


@dataclass
class Obs:
    text: str


def tiny_model(seed: int = 0) -> tuple[Any, Any]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="<eos>")
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=len(WORDS), n_positions=256, n_embd=16, n_layer=1, n_head=2,
                                  eos_token_id=1, bos_token_id=1, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg), fast


def forcing(sequence: list[str]) -> Any:
    """A ``prefix_allowed_tokens_fn`` that makes any model write ``sequence`` then stop."""
    ids = [WORDS.index(w) for w in sequence]

    def allowed(batch_id: int, input_ids: Any) -> list[int]:
        last = int(input_ids[-1])
        if last in ids[:-1]:
            return [ids[ids.index(last) + 1]]
        if last == ids[-1]:
            return [1]  # <eos>
        return [ids[0]]

    return allowed


def forced_agent(sequence: list[str]) -> Any:
    model, tok = tiny_model()
    return make_agent("hf", model=model, tokenizer=tok, max_tokens=8,
                      generation_kwargs={"prefix_allowed_tokens_fn": forcing(sequence)})


def test_generation_is_parsed_into_actions() -> None:
    agent = forced_agent(["ANSWER", ":", "42"])
    agent.reset(Obs("the patient labs"), Briefing("t", 0, "q", seed=3))
    action = agent.act(Obs("the patient labs"))
    assert action == AnswerAction("42")
    assert agent.usage.calls == 1 and agent.usage.completion_tokens >= 3 and agent.usage.prompt_tokens > 10
    assert agent.transcript()[-1] == {"role": "assistant", "content": "ANSWER : 42"}


def test_sql_action_and_history() -> None:
    agent = forced_agent(["SQL", ":", "SELECT", "1"])
    agent.reset(Obs("labs"), Briefing("t", 0, "q", seed=3))
    assert agent.act(Obs("labs")) == SqlAction("SELECT 1")
    assert agent.act(Obs("1 row")) == SqlAction("SELECT 1")
    roles = [m["role"] for m in agent.transcript()]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert agent.transcript()[3]["content"] == "1 row"


def test_random_model_output_gets_corrective_messages_then_agent_error() -> None:
    model, tok = tiny_model(seed=1)
    agent = make_agent("hf", model=model, tokenizer=tok, max_tokens=6, max_format_retries=2,
                       generation_kwargs={"bad_words_ids": [[WORDS.index("ANSWER")], [WORDS.index("SQL")],
                                                            [WORDS.index("SELECT")]]})
    agent.reset(Obs("the labs"), Briefing("t", 0, "q", seed=1))
    with pytest.raises(AgentError, match="no usable action after 3 attempts"):
        agent.act(Obs("the labs"))
    transcript = agent.transcript()
    assert [m["role"] for m in transcript] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "Could not read an action" in transcript[3]["content"] or "empty" in transcript[3]["content"]
    assert agent.usage.calls == 3


def test_greedy_generation_is_deterministic_and_sampling_is_seeded() -> None:
    outs = []
    for _ in range(2):
        model, tok = tiny_model(seed=2)
        agent = make_agent("hf", model=model, tokenizer=tok, max_tokens=6, temperature=1.0)
        agent.reset(Obs("the labs"), Briefing("t", 0, "q", seed=99))
        outs.append(agent._generate())
    assert outs[0] == outs[1]
    state = torch.random.get_rng_state()
    model, tok = tiny_model(seed=2)
    torch.random.set_rng_state(state)
    agent = make_agent("hf", model=model, tokenizer=tok, max_tokens=6, temperature=1.0)
    agent.reset(Obs("the labs"), Briefing("t", 0, "q", seed=99))
    agent._generate()
    assert torch.equal(torch.random.get_rng_state(), state)  # no global RNG side effect


def test_missing_model_is_a_clear_error() -> None:
    with pytest.raises(AgentError, match="--model"):
        make_agent("hf")
    with pytest.raises(AgentError, match="cannot load"):
        make_agent("hf", model="/nonexistent/model-dir")
