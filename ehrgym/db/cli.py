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


@group.command("fidelity")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--against", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="a second kit database to compare with (e.g. the loaded MIMIC-IV demo)")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the whole report (both profiles, statistics, items) as JSON")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the statistics as CSV to OUT and the item quantiles to OUT's stem + '-items.csv'")
@click.option("--figure", "figure_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the fidelity figure (.png, .pdf or .svg)")
@click.option("--all-items", is_flag=True, help="list every reference item, not only those off their reference")
def fidelity(path: Path, against: Path | None, json_out: Path | None, csv_out: Path | None,
             figure_out: Path | None, all_items: bool) -> None:
    """How MIMIC-IV-like database PATH is: vocabulary sizes, rows per admission / ICU stay, messiness
    rates and item value quantiles, beside full MIMIC-IV v3.1 (from its published row counts) and,
    with --against, another kit database; each statistic flagged within ±30 % of its reference."""
    from ehrgym.db.fidelity import fidelity_report, format_report
    from ehrgym.db.fidelity_figure import FIGURE_SUFFIXES

    if figure_out is not None and figure_out.suffix.lower() not in FIGURE_SUFFIXES:
        raise click.BadParameter(f"{figure_out}: use one of {', '.join(FIGURE_SUFFIXES)}", param_hint="--figure")
    report = fidelity_report(path, against)
    click.echo(format_report(report, all_items=all_items))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        click.echo(f"wrote {json_out}")
    if csv_out is not None:
        items_out = csv_out.with_name(f"{csv_out.stem}-items.csv")
        csv_out.parent.mkdir(parents=True, exist_ok=True)
        report.statistics().to_csv(csv_out, index=False)
        report.items().to_csv(items_out, index=False)
        click.echo(f"wrote {csv_out} and {items_out}")
    if figure_out is not None:
        from ehrgym.db.fidelity_figure import fidelity_figure, save_fidelity_figure

        save_fidelity_figure(fidelity_figure(report), figure_out)
        click.echo(f"wrote {figure_out}")
