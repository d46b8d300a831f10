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
