"""``ehrgym report RUNDIR… [--bench DIR] [--out DIR | --tables-out DIR --figures-out DIR]``."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("rundirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--bench", "bench_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="benchmark directory (tasks.jsonl) for the dataset statistics; default: tasks seen in the runs")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="write OUT/tables and OUT/figures (instead of --tables-out/--figures-out)")
@click.option("--tables-out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="table directory  [default: tables]")
@click.option("--figures-out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="figure directory  [default: figures]")
@click.option("--lenient", is_flag=True, default=False, help="lenient abstention scoring (any reason)")
@click.option("--n-boot", type=click.IntRange(min=0), default=1000, show_default=True,
              help="bootstrap replicates for the 95% CIs")
@click.option("--seed", type=int, default=0, show_default=True, help="bootstrap seed")
@click.option("--no-progress", is_flag=True, default=False)
def group(rundirs: tuple[Path, ...], bench_dir: Path | None, out_dir: Path | None, tables_out: Path | None,
          figures_out: Path | None, lenient: bool, n_boot: int, seed: int, no_progress: bool) -> None:
    """Regenerate every table (CSV, Markdown, LaTeX) and figure (PNG, PDF) from RUNDIRS."""
    from ehrgym.report.build import build_report

    if out_dir is not None and (tables_out is not None or figures_out is not None):
        raise click.UsageError("use either --out or --tables-out/--figures-out, not both")
    tables_dir = out_dir / "tables" if out_dir is not None else (tables_out or Path("tables"))
    figures_dir = out_dir / "figures" if out_dir is not None else (figures_out or Path("figures"))
    manifest = build_report(list(rundirs), bench_dir, tables_dir, figures_dir, strict=not lenient,
                            n_boot=n_boot, seed=seed, progress=not no_progress)
    click.echo(f"{len(manifest.tables)} tables -> {tables_dir}, {len(manifest.figures)} figures -> {figures_dir} "
               f"(dataset statistics from {manifest.dataset_source})")
    for name, reason in manifest.skipped.items():
        click.echo(f"skipped {name}: {reason}", err=True)
