"""The kit's commands inside an exported Harbor task's container (standard library + duckdb + sqlglot).

    python -m ehrgym.harbor.container sql "SELECT …"          # the gated SQL command (ehrgym-sql)
    python -m ehrgym.harbor.container build-db TABLES OUT      # image build: Parquet folder → DuckDB
    python -m ehrgym.harbor.container verify --task T --answer A --reward-dir D   # tests/test.sh

``sql`` runs a query exactly as an episode's ``sql`` tool does — the same gate, limits, row cap
and table preview (:mod:`ehrgym.env.sqltool`) — on the task's database, whose tables already hold
the task's overlay (:mod:`ehrgym.harbor.materialise`). It is a convenience with the episode's
rules, not a security boundary: the agent has a shell in the container and could open the file
itself, which is why the file holds nothing an episode would not show.

``verify`` reads the agent's answer file (any form of the answer protocol,
:func:`ehrgym.env.protocol.parse_action`), scores it with :func:`ehrgym.env.verifier.verify` and
writes Harbor's reward file (``reward.txt``: ``1`` or ``0``) plus ``verdict.json`` with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_DB = "/data/ehr.duckdb"
DEFAULT_ANSWER = "/app/answer.txt"


def run_sql(query: str, db_path: str | Path) -> tuple[bool, str]:
    """``(ok, text)``: the observation an episode's ``sql`` step would return for ``query``."""
    from ehrgym.env.engine import ConnectionSettings, EpisodeConnection, SqlLimits, Watchdog
    from ehrgym.env.gate import SqlGate
    from ehrgym.env.sqltool import format_outcome, run_query

    conn = EpisodeConnection(Path(db_path), ConnectionSettings(isolation="inprocess"))
    gate = SqlGate(profile=conn.profile)
    watchdog = Watchdog()
    limits = SqlLimits()
    try:
        out = run_query(gate, conn, watchdog, query, limits)
        return out.ok, format_outcome(out, limits)
    finally:
        watchdog.close()
        gate.close()
        conn.close()


def score_answer_file(task_path: str | Path, answer_path: str | Path, scoring: str = "strict") -> dict[str, Any]:
    """The verdict (a dict) for the answer file at ``answer_path`` on the task in ``task_path``."""
    from ehrgym.bench.task import Task
    from ehrgym.env.actions import AnswerAction
    from ehrgym.env.protocol import ActionParseError, parse_action
    from ehrgym.env.verifier import verify

    task = Task.from_dict(json.loads(Path(task_path).read_text(encoding="utf-8")))
    answer_path = Path(answer_path)
    action: AnswerAction | None = None
    note = ""
    if not answer_path.exists():
        note = f"no answer file at {answer_path}"
    else:
        text = answer_path.read_text(encoding="utf-8", errors="replace")
        try:
            parsed = parse_action(text)
        except ActionParseError as exc:
            parsed, note = None, f"the answer file holds no answer: {exc}"
        if parsed is not None and not isinstance(parsed, AnswerAction):
            note = "the answer file holds a tool call, not ANSWER/ABSTAIN"
        elif parsed is not None:
            action = parsed
    verdict = verify(task, action, scoring=scoring).to_dict()
    if note:
        verdict["detail"] = f"{note}; {verdict['detail']}"
    return verdict


def write_reward(verdict: dict[str, Any], reward_dir: str | Path) -> None:
    reward_dir = Path(reward_dir)
    reward_dir.mkdir(parents=True, exist_ok=True)
    (reward_dir / "verdict.json").write_text(json.dumps(verdict, sort_keys=True) + "\n", encoding="utf-8")
    (reward_dir / "reward.txt").write_text(f"{int(verdict['reward'])}\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ehrgym-harbor", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_sql = sub.add_parser("sql", help="run one gated, read-only SQL query on the task's database")
    p_sql.add_argument("query", nargs="?", help="the query (read from stdin when omitted)")
    p_sql.add_argument("--db", default=os.environ.get("EHRGYM_DB", DEFAULT_DB))
    p_build = sub.add_parser("build-db", help="build the task's DuckDB file from its Parquet tables")
    p_build.add_argument("tables_dir")
    p_build.add_argument("out")
    p_verify = sub.add_parser("verify", help="score the answer file and write Harbor's reward file")
    p_verify.add_argument("--task", required=True)
    p_verify.add_argument("--answer", default=DEFAULT_ANSWER)
    p_verify.add_argument("--reward-dir", default="/logs/verifier")
    p_verify.add_argument("--scoring", default="strict", choices=("strict", "lenient"))
    args = parser.parse_args(argv)
    if args.command == "sql":
        query = args.query if args.query is not None else sys.stdin.read()
        ok, text = run_sql(query, args.db)
        print(text)
        return 0 if ok else 1
    if args.command == "build-db":
        from ehrgym.harbor.materialise import build_database

        counts = build_database(args.tables_dir, args.out)
        print(f"built {args.out}: {len(counts)} tables, {sum(counts.values()):,} rows")
        return 0
    verdict = score_answer_file(args.task, args.answer, args.scoring)
    write_reward(verdict, args.reward_dir)
    print(f"reward {int(verdict['reward'])}: {verdict['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
