"""Plugins: a package installed beside the kit adds an agent through the ``ehrgym.agents`` entry-point
group, and ``ehrgym eval run --agent NAME`` runs it — no edit of the kit."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from ehrgym.registry import Registry, RegistryError

PLUGIN = '''
"""An outside package's agent: always abstains."""
from ehrgym.agents.base import Agent, Concurrency, Entitlement
from ehrgym.agents.registry import register_agent
from ehrgym.env.actions import AnswerAction


@register_agent("always_abstain")
class AlwaysAbstain(Agent):
    """Abstains on every question (a plugin used by the kit's tests)."""

    entitlement = Entitlement.NONE
    concurrency = Concurrency.THREAD

    def act(self, observation):
        return AnswerAction(abstain="insufficient_evidence", explanation="plugin")
'''


@pytest.fixture()
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``pip install``-equivalent of a one-module distribution: the package and its dist-info
    (METADATA + entry_points.txt) on sys.path, which is what importlib.metadata reads."""
    site = tmp_path / "site"
    (site / "ehrgym_demo_plugin").mkdir(parents=True)
    (site / "ehrgym_demo_plugin" / "__init__.py").write_text(PLUGIN)
    dist = site / "ehrgym_demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ehrgym-demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ehrgym.agents]\nalways_abstain = ehrgym_demo_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    from ehrgym.agents.registry import AGENTS

    AGENTS.reset_plugins()
    yield site
    AGENTS.reset_plugins()


def test_a_plugin_agent_is_listed_and_made(installed_plugin: Path) -> None:
    from ehrgym.agents.registry import agent_names, get_agent_entry, make_agent

    assert "always_abstain" in agent_names()
    assert get_agent_entry("always_abstain").summary.startswith("Abstains on every question")
    assert type(make_agent("always_abstain")).__name__ == "AlwaysAbstain"


def test_eval_run_runs_a_plugin_agent(installed_plugin: Path, synth_db: Path, small_bench: Path,
                                      tmp_path: Path) -> None:
    from ehrgym.cli import cli

    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["eval", "run", "--bench", str(small_bench), "--db", str(synth_db), "--agent",
                                   "always_abstain", "--out", str(out), "--k", "1", "--limit-pairs", "3",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 6 and {r["termination"] for r in records} == {"abstained"}


def test_registry_rejects_duplicates_and_names_unknown_entries() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    reg.add("a", 1)  # re-registering the same object (a module imported twice) is fine
    with pytest.raises(RegistryError, match="registered twice"):
        reg.add("a", 2)
    with pytest.raises(RegistryError, match=r"unknown widget 'b'; choose one of \['a'\].*ehrgym.widgets"):
        reg.get("b")


def test_a_broken_plugin_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    dist = site / "broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""
        [ehrgym.gadgets]
        oops = no_such_module_anywhere
    """))
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(RegistryError, match="gadget plugin 'oops' .*failed to load: ModuleNotFoundError"):
        Registry("gadget").get("anything")
