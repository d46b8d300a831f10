"""``ehrgym db``: build, load and inspect databases."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("db")
def group() -> None:
    """Build (synthetic), load (MIMIC-IV / demo) and inspect MIMIC-IV-shaped DuckDB databases."""


@group.command("synth")
@click.option("--patients", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def synth(patients: int, seed: int, out: Path, force: bool) -> None:
    """Generate the embedded synthetic hospital (deterministic from --seed)."""
    from ehrgym.db.info import database_info, format_info
    from ehrgym.db.synth import build_synthetic_database

    build_synthetic_database(out, patients=patients, seed=seed, overwrite=force)
    click.echo(format_info(database_info(out)))


@group.command("load-mimic")
@click.argument("source", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def load_mimic_cmd(source: Path, out: Path, force: bool, progress: bool) -> None:
    """Load PhysioNet's MIMIC-IV (v2.2+) or the demo from SOURCE (hosp/*.csv.gz, icu/*.csv.gz)."""
    import warnings

    from ehrgym.db.info import database_info, format_info
    from ehrgym.db.mimic import MimicLoadWarning, load_mimic

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MimicLoadWarning)
        load_mimic(source, out, progress=progress, overwrite=force)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    click.echo(format_info(database_info(out)))


@group.command("info")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def info(path: Path, as_json: bool) -> None:
    """Source, release, seed, patients, per-table row counts and content hash of a database."""
    from ehrgym.db.info import database_info, format_info

    data = database_info(path)
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else format_info(data))
