"""``ehrgym`` command line: one group per pipeline stage (db, bench, env, eval, report, external, serve, export, train)."""

from __future__ import annotations

import importlib
import sys

import click

from ehrgym import __version__
from ehrgym.errors import EhrGymError

# stage name -> module exposing a click group called ``group``
STAGES: dict[str, str] = {
    "db": "ehrgym.db.cli",
    "bench": "ehrgym.bench.cli",
    "env": "ehrgym.env.cli",
    "eval": "ehrgym.eval.cli",
    "report": "ehrgym.report.cli",
    "external": "ehrgym.external.cli",
    "serve": "ehrgym.serve.cli",
    "export": "ehrgym.harbor.cli",
    "train": "ehrgym.train.cli",
}


class StageGroup(click.Group):
    """Loads each stage's commands lazily so `ehrgym db …` does not import the LLM stack."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(STAGES)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = STAGES.get(name)
        if module is None:
            return None
        return importlib.import_module(module).group


@click.group(cls=StageGroup)
@click.version_option(__version__, prog_name="ehrgym")
def cli() -> None:
    """EHR-RobustGym: Clean–Noise benchmarks and episodes over MIMIC-IV-shaped DuckDB databases."""


def run_command(command: click.Command, args: list[str] | None = None) -> None:
    """Run a click command as a program: kit errors become one ``error:`` line and exit code 2."""
    try:
        command.main(args=args, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except EhrGymError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def main() -> None:
    run_command(cli)


if __name__ == "__main__":
    main()
