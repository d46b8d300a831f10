"""``ehrgym env gate`` (the ``play`` command is exercised through EhrEnv in test_env_replay)."""

from __future__ import annotations

from click.testing import CliRunner

from ehrgym.env.cli import group


def test_gate_command() -> None:
    runner = CliRunner()
    ok = runner.invoke(group, ["gate", "SELECT * FROM information_schema.columns"])
    assert ok.exit_code == 0 and "ehrgym_info" in ok.output
    bad = runner.invoke(group, ["gate", "SELECT * FROM base.ehrgym_meta.build_info"])
    assert bad.exit_code == 1 and "Allowed:" in bad.output


def test_gate_command_in_both_duckdb_modes() -> None:
    runner = CliRunner()
    for mode in ("tokens", "ast"):
        ok = runner.invoke(group, ["gate", "--duckdb-check", mode, "SELECT count(*) FROM labevents"])
        assert ok.exit_code == 0 and "tables read: labevents" in ok.output, ok.output
        bad = runner.invoke(group, ["gate", "--duckdb-check", mode, "SELECT * FROM sqlite_master"])
        assert bad.exit_code == 1 and "Query refused" in bad.output
    wrong = runner.invoke(group, ["gate", "--duckdb-check", "regex", "SELECT 1"])
    assert wrong.exit_code == 2
