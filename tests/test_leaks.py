"""Nothing an agent sees may reveal a task's variant, noise subtype, pair or expected outcome.

A `small` benchmark is built on the 200-patient synthetic hospital and every path to the agent
is audited on every noisy task: the briefing of each entitlement below the oracle, the first
observation (text and fields), tool results (a query, the draft query, an SQL error, a gate
rejection, an unreadable action), the Python worker's globals, the Gymnasium ``info`` and the
trajectory. Texts that every task shares (protocol, tool descriptions, schema summary — they
list every abstention reason by design) must be byte-identical across clean and noisy tasks;
everything else must not contain the subtype, ``noise``/``clean``, the pair id, the internal
task id or the expected reason code.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Iterable

import pytest

from ehrgym.agents.base import Entitlement
from ehrgym.agents.registry import make_agent
from ehrgym.bench.dataset import Benchmark, load_benchmark
from ehrgym.bench.task import Task, public_task_id, task_to_json
from ehrgym.env.episode import EhrEnv, EnvConfig, schema_summary
from ehrgym.env.protocol import protocol_text
from ehrgym.env.tools import tool_descriptions
from ehrgym.eval.runner import make_briefing
from ehrgym.vocab import NOISE_SUBTYPES

PUBLIC_ID = re.compile(r"task-[0-9a-f]{16}")
OVERLAID_TABLES = ("labevents", "chartevents", "inputevents", "outputevents", "prescriptions", "emar",
                   "microbiologyevents", "diagnoses_icd", "drgcodes", "admissions", "icustays", "patients",
                   "transfers")
RESET_INFO_KEYS = {"task_id", "intent", "level", "max_steps"}
END_INFO_KEYS = {"verdict", "termination"}  # the evaluator's verdict, once the episode is over


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Benchmark:
    return load_benchmark(small_bench)  # the run's shared "small" build (tests/conftest.py)


@pytest.fixture(scope="module")
def noisy(bench: Benchmark) -> list[Task]:
    tasks = bench.filter(variant="noise")
    assert {t.noise.subtype for t in tasks} == set(NOISE_SUBTYPES)
    return tasks


def forbidden(task: Task) -> list[str]:
    """Strings that would tell an agent what kind of task this is."""
    assert task.noise is not None
    words = [task.task_id, task.pair_id, task.pair_id.rsplit(":", 1)[-1], "noise", "clean",
             task.noise.subtype, task.noise.subtype.replace("_", " ")]
    if task.expected.reason:
        words += [task.expected.reason, task.expected.reason.replace("_", " ")]
    return [w.casefold() for w in words]


def shared_texts(config: EnvConfig) -> list[str]:
    """Blocks every task's first observation holds verbatim (they list every reason by design)."""
    return [protocol_text(), tool_descriptions(config.tools), schema_summary()]


def leaves(value: Any) -> Iterable[str]:
    """Every string in a (nested) value, dict keys included; other scalars as text."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from leaves(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from leaves(v)
    else:
        yield value if isinstance(value, str) else str(value)


def assert_clean(task: Task, where: str, texts: Iterable[Any], shared: list[str] = ()) -> None:
    for text in (leaf for t in texts for leaf in leaves(t)):
        for block in shared:
            text = text.replace(block, "")
        low = text.casefold()
        hits = [w for w in forbidden(task) if w in low]
        assert not hits, f"{where} of {task.task_id} reveals {hits}: {text[:300]!r}"


def test_public_ids_are_opaque_unique_and_stable(bench: Benchmark) -> None:
    ids = [t.public_id for t in bench.tasks]
    assert all(PUBLIC_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    for t in bench.tasks[:20]:  # a hash of the whole task: stable across loads, free of its labels
        assert t.public_id == public_task_id(Task.from_dict(json.loads(task_to_json(t))))
        assert t.variant not in t.public_id and t.pair_id not in t.public_id
        assert bench.task(t.public_id) is t and bench.task(t.task_id) is t
    from click.testing import CliRunner

    from ehrgym.cli import cli

    shown = CliRunner().invoke(cli, ["bench", "show", str(bench.path), ids[0]])  # humans look trajectories up
    assert shown.exit_code == 0 and bench.tasks[0].task_id in shown.output, shown.output
    for clean, noise in bench.pairs():  # twins share no visible structure
        a, b = clean.public_id[5:], noise.public_id[5:]
        assert a[:6] != b[:6] and a[-6:] != b[-6:]


def test_every_expected_reason_has_an_equivalence_decision(noisy: list[Task]) -> None:
    """Each abstention a subtype expects is covered by ACCEPTED_REASONS (an injector that starts
    expecting another reason must decide, in ehrgym.vocab, which reasons its evidence allows)."""
    from ehrgym.vocab import ACCEPTED_REASONS

    for t in noisy:
        if t.expected.is_abstain:
            assert t.expected.reason in ACCEPTED_REASONS[t.noise.subtype], (t.task_id, t.expected.reason)


def test_briefings_reveal_nothing(noisy: list[Task]) -> None:
    agents = {name: make_agent(name) for name in ("credulous", "skeptic", "literal")}
    assert {a.entitlement for a in agents.values()} == {Entitlement.DRAFT}
    for task in noisy:
        for agent in agents.values():
            b = make_briefing(agent, task, trial=0, seed=1)
            assert b.task_id == task.public_id and b.task is None
            assert_clean(task, f"{agent.name}'s briefing", [b.task_id, b.question, b.draft_sql or "",
                                                            b.answer_type or "", str(b.seed)])


def test_drafts_and_answer_formats_do_not_differ_on_data_noise(bench: Benchmark) -> None:
    """The DRAFT entitlement: a record/value-level twin gets its clean twin's draft and answer format."""
    agent = make_agent("literal")
    for clean, noise in bench.pairs():
        a, b = make_briefing(agent, clean, 0, 1), make_briefing(agent, noise, 0, 1)
        assert a.answer_type == b.answer_type
        if noise.noise.level != "query" or noise.noise.subtype == "out_of_scope":
            assert a.draft_sql == b.draft_sql, noise.task_id


def _episode(env: EhrEnv, agent: Any, task: Task) -> list[dict[str, Any]]:
    """The actions ``agent`` takes on ``task`` (through the runner's briefing)."""
    obs = env.reset(task)
    agent.reset(obs, make_briefing(agent, task, 0, 1))
    while not env.done:
        obs = env.step(agent.act(obs)).observation
    return [s.action for s in env.trajectory.steps]


def test_skeptic_decides_from_the_data_not_from_question_cues(bench: Benchmark) -> None:
    """An out-of-scope twin has its clean twin's data and draft: a skeptic that checks only the
    evidence must act on it exactly as on the clean twin (no cue list, no draft-vs-question check)."""
    agent = make_agent("skeptic")
    pairs = [(c, n) for c, n in bench.pairs() if n.noise.subtype == "out_of_scope"]
    assert pairs
    with EhrEnv(_db_of(bench), EnvConfig(max_steps=20, python=False, schema_summary=False)) as env:
        for clean, noise in pairs:
            assert _episode(env, agent, noise) == _episode(env, agent, clean), noise.task_id
            for question in ("What is the home phone number of the patient's next of kin?",
                             "How many of these patients own a pet or play music?"):
                fake = dataclasses.replace(clean, question=question)
                assert _episode(env, agent, fake) == _episode(env, agent, clean)


def test_literal_is_the_floor(bench: Benchmark) -> None:
    """``literal`` answers every clean task right and succeeds on a noisy one only by abstaining on
    an empty draft result — what reading the result literally earns, nothing more."""
    agent = make_agent("literal")
    wins = 0
    with EhrEnv(_db_of(bench), EnvConfig(max_steps=5, python=False, schema_summary=False)) as env:
        for task in bench.tasks:
            actions = _episode(env, agent, task)
            assert actions[0] == {"tool": "sql", "query": task.naive_sql}
            verdict = env.verdict
            if task.variant == "clean":
                assert verdict.success_strict, (task.task_id, verdict)
            elif verdict.success_strict:
                wins += 1
                assert actions[-1]["abstain"] == "insufficient_evidence" and task.expected.is_abstain
    assert 0 < wins < len(bench.filter(variant="noise")) / 2


def test_observations_tool_results_and_trajectories_reveal_nothing(bench: Benchmark, noisy: list[Task]) -> None:
    config = EnvConfig(max_steps=10 + len(OVERLAID_TABLES), python=False)
    shared = shared_texts(config)
    firsts, constant = set(), {}
    some_clean = bench.filter(variant="clean")[:10]
    with EhrEnv.from_benchmark(bench.path, _db_of(bench), config) as env:
        for task in noisy + bench.filter(variant="clean"):
            obs = env.reset(task.public_id)
            assert env.task.task_id == task.task_id and obs.task_id == task.public_id
            firsts.add(obs.text.replace(task.question, "{question}"))
            assert obs.protocol == protocol_text() and obs.schema_summary == schema_summary()
            steps = {
                "count": env.step("SQL: SELECT count(*) AS n FROM labevents"),
                "draft": env.step({"tool": "sql", "query": task.naive_sql}),
                "error": env.step("SQL: SELECT no_such_column FROM labevents"),
                "gated": env.step("SQL: SELECT * FROM duckdb_views()"),
                "invalid": env.step("what should I do now?"),
            }
            # an error on a table must not show whether (and how) an overlay shadows it
            for table in task.overlay.tables if task.noise else OVERLAID_TABLES if task in some_clean else ():
                if table in OVERLAID_TABLES:
                    steps[f"error-{table}"] = env.step(f"SQL: SELECT * FROM {table} WHERE subject_id = 'abc'")
            for name in [k for k in steps if k.startswith(("error", "gated", "invalid"))]:
                # the same for every task, clean or noisy
                constant.setdefault(name, set()).add(steps[name].observation.text)
            final = env.step("ANSWER: 1")  # its echo must not add anything either
            if task.variant == "clean":
                continue
            assert_clean(task, "the first observation", [obs.text, obs.question, obs.tools, obs.task_id], shared)
            for name, r in steps.items():
                o = r.observation
                if name in constant:  # shown to every task alike (asserted below); lists every reason
                    continue
                assert o.task_id == task.public_id
                assert not set(r.info) & END_INFO_KEYS
                assert_clean(task, f"the {name} step", [o.text, o.error or "", o.columns, o.rows, r.info], shared)
            assert_clean(task, "the answer step", [final.observation.text], shared)
            trajectory = env.trajectory.to_dict()
            trajectory.pop("verdict")  # the evaluator's verdict comes once the episode is over
            for step in trajectory["steps"]:
                step["info"].pop("verdict", None)
                if any(step["observation"] in texts for texts in constant.values()):
                    step["observation"] = step["info"]["error"] = ""
                if step["action"].get("query") == task.naive_sql:
                    step["action"]["query"] = ""  # the draft is checked above (it is the briefing's)
            assert_clean(task, "the trajectory", [trajectory], shared)
            for edit in task.overlay.edits:  # what the overlay puts into the tables an agent reads
                assert_clean(task, f"an overlay row of {edit.table}",
                             [v for row in edit.insert_rows for v in row.values() if isinstance(v, str)])
    assert len(firsts) == 1, "first observations differ beyond the question"
    assert all(len(texts) == 1 for texts in constant.values()), {k: len(v) for k, v in constant.items()}
    assert {f"error-{t}" for t in OVERLAID_TABLES} <= set(constant)


def test_python_worker_globals_are_task_free(bench: Benchmark, noisy: list[Task]) -> None:
    pytest.importorskip("pandas")
    one_per_subtype = list({t.noise.subtype: t for t in noisy}.values()) + bench.filter(variant="clean")[:2]
    code = "print(sorted(globals())); print(sorted(vars(__builtins__) if isinstance(__builtins__, dict) " \
           "else dir(__builtins__))[:5]); print(sql('SELECT 1 AS one'))"
    outputs = set()
    with EhrEnv(_db_of(bench), EnvConfig(max_steps=5)) as env:
        for task in one_per_subtype:
            env.reset(task)
            r = env.step({"tool": "python", "code": code})
            assert not r.observation.error, r.observation.text
            outputs.add(r.observation.text)
            if task.noise is not None:
                assert_clean(task, "the python globals", [r.observation.text])
            env.abort()
    assert len(outputs) == 1, outputs


def test_gym_info_reveals_nothing(bench: Benchmark, noisy: list[Task]) -> None:
    gym_env = pytest.importorskip("ehrgym.env.gym")
    env = gym_env.EhrGymEnv(_db_of(bench), tasks=bench.tasks, config=EnvConfig(max_steps=4, python=False))
    try:
        for task in noisy:
            _, info = env.reset(options={"task_id": task.task_id})
            assert info["task_id"] == task.public_id and set(info) == RESET_INFO_KEYS
            assert env.current_task is task and env.task_of(info["task_id"]) is task
            infos = [info]
            for action in ("SQL: SELECT 1", "SQL: SELECT nope FROM admissions"):
                infos.append(env.step(action)[4])
            assert not any(set(i) & END_INFO_KEYS for i in infos)
            *_, last = env.step("ANSWER: 1")
            assert set(last) >= END_INFO_KEYS
            last = {k: v for k, v in last.items() if k not in END_INFO_KEYS}
            assert_clean(task, "the gym info", infos + [last])
    finally:
        env.close()


def _db_of(bench: Benchmark) -> Path:
    return Path(bench.manifest["db_path"])
