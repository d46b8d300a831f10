"""Builder, overlays, gate and verifier agree: every task's expected path succeeds in the env.

For every task of the ``small`` benchmark built on the ``synth_db`` fixture: reset, run the gold
SQL through the SQL tool (gate + overlay views), check that the typed gold value read from the
env's own result equals the task's expected value (answer tasks), then give the expected answer
or abstention and require a strict success with reward 1.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ehrgym.bench.answers import answers_match, format_answer, gold_from_rows
from ehrgym.env.actions import AnswerAction, SqlAction
from ehrgym.env.episode import EhrEnv, EnvConfig
from ehrgym.errors import BenchmarkError


def test_expected_path_of_every_task_succeeds(small_bench: Path, synth_db: Path) -> None:
    failures: list[str] = []
    outcomes: Counter[str] = Counter()
    with EhrEnv.from_benchmark(small_bench, synth_db, EnvConfig(max_steps=3, python=False)) as env:
        tasks = env.benchmark.tasks
        assert tasks, "the small benchmark is empty"
        for task in tasks:
            env.reset(task.task_id)
            step = env.step(SqlAction(task.gold_sql))
            if step.info["error"]:
                failures.append(f"{task.task_id}: gold SQL failed in the env: {step.info['error'][:200]}")
                continue
            spec = task.expected.answer
            if task.expected.is_abstain:
                action = AnswerAction(abstain=task.expected.reason, explanation="expected path")
            else:
                rows = step.observation.rows if not step.observation.truncated else \
                    [tuple(r) for r in env.sql_frame(task.gold_sql).itertuples(index=False)]
                value = gold_from_rows(rows, spec)
                if value is None or not answers_match(task.expected.value, value, spec):
                    failures.append(f"{task.task_id}: env gold {value!r} != expected {task.expected.value!r}")
                action = AnswerAction(format_answer(task.expected.value, spec))
            result = env.step(action)
            verdict = result.info["verdict"]
            outcomes[f"{task.variant}:{task.expected.kind}"] += 1
            if not (result.done and result.reward == 1.0 and verdict["success_strict"]):
                failures.append(f"{task.task_id}: {verdict}")
    assert not failures, f"{len(failures)} of {sum(outcomes.values())} tasks failed:\n" + "\n".join(failures[:20])
    assert outcomes["noise:abstain"] > 0 and outcomes["clean:answer"] > 0


def test_a_benchmark_refuses_another_database(small_bench: Path, tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_env_support import make_tiny_db

    other = make_tiny_db(tmp_path / "other.duckdb")
    with pytest.raises(BenchmarkError, match="content hash"):
        EhrEnv.from_benchmark(small_bench, other)


def test_play_command_runs_an_episode(small_bench: Path, synth_db: Path) -> None:
    from click.testing import CliRunner

    from ehrgym.env.cli import group

    result = CliRunner().invoke(group, ["play", "--bench", str(small_bench), "--db", str(synth_db), "--no-python"],
                                input="SQL: SELECT count(*) AS n\nFROM patients\n\nANSWER: 42\n\n")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Question:") and "(1 row)" in result.output and "verdict: Verdict(" in result.output
