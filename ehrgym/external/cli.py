"""``ehrgym external``: build external benchmarks, list them, score runs and SQL predictions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click


@click.group("external")
def group() -> None:
    """External EHR benchmarks (EHRSQL 2024 …) as kit task sets, with their official metrics."""


@group.command("list")
def list_cmd() -> None:
    """The registered adapters, their official metric and what they need from you."""
    from ehrgym.external.base import ADAPTERS, default_external_dir

    for name, adapter in ADAPTERS.load_all().items():
        data = default_external_dir() / adapter.data_folder
        needs = ", ".join("--" + n.replace("_", "-") for n in adapter.needs) or "nothing (offline)"
        click.echo(f"{name:22s} {adapter.official_metric:28s} needs {needs}; data "
                   f"{'found' if data.is_dir() else 'missing'} at {data}")


@group.command("build")
@click.argument("name")
@click.option("--data", type=click.Path(file_okay=False), default=None,
              help="the benchmark's data folder (default: $EHRGYM_EXTERNAL_DIR/<folder> or ../shared/external/<folder>)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="output directory")
@click.option("--split", "splits", multiple=True, help="benchmark splits to include (default: all)")
@click.option("--check", is_flag=True, default=False, help="verify every gold SQL reproduces its gold answer")
@click.option("--db", type=click.Path(dir_okay=False), default=None, help="your database (benchmarks that need one)")
@click.option("--fhir-url", default=None,
              help="your FHIR R4 server's base URL (medagentbench-v2: the benchmark's docker image, e.g. "
                   "http://localhost:8080/fhir/)")
def build_cmd(name: str, data: str | None, out_dir: str, splits: tuple[str, ...], check: bool, db: str | None,
              fhir_url: str | None) -> None:
    """Build benchmark NAME into OUT: databases plus tasks that `ehrgym eval run` runs."""
    from ehrgym.external.base import build_external

    options: dict[str, object] = {"check": check, "db": db, "fhir_url": fhir_url}
    if splits:
        options["splits"] = tuple(splits)
    result = build_external(name, out_dir, data, **options)
    click.echo(f"{name}: {result.tasks} tasks {result.by_split} in {result.out_dir} ({result.seconds:.1f} s)")
    for role, path in result.files.items():
        click.echo(f"  {role}: {path}")
    if "gold_sql_checked" in result.checks:
        click.echo(f"  gold SQL checked: {result.checks.get('gold_sql_checked')}, mismatches: "
                   f"{len(result.checks.get('gold_sql_mismatches', []))}")
    if "patients_checked" in result.checks:   # a FHIR server (MedAgentBench)
        missing = result.checks.get("patients_missing") or []
        click.echo(f"  patients looked up on the server: {result.checks['patients_checked']}, missing: "
                   f"{len(missing)}{' (e.g. ' + missing[0] + ')' if missing else ''}")
    db_file = result.files.get("episode_db")
    if db_file:
        click.echo(f"run agents with: ehrgym eval run --bench {result.out_dir} --db {db_file} --agent AGENT --out RUN")


@group.command("score")
@click.argument("rundirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def score_cmd(rundirs: tuple[str, ...]) -> None:
    """Official metric, answer accuracy and abstention precision/recall of runs on external benchmarks."""
    from ehrgym.external.metrics import METRIC_COLUMNS, transfer_rows

    rows = transfer_rows(list(rundirs))
    if not rows:
        raise click.ClickException("none of these runs is on an external benchmark")
    click.echo("| benchmark | system | trials | questions | " + " | ".join(METRIC_COLUMNS) + " |")
    click.echo("|" + "---|" * (4 + len(METRIC_COLUMNS)))
    for r in rows:
        cells = ["n/a" if math.isnan(r[c]) else f"{r[c]:.1f}" for c in METRIC_COLUMNS]
        click.echo(f"| {r['benchmark']} | {r['system']} | {r['trials']} | {r['questions']} | " + " | ".join(cells) + " |")
    from ehrgym.external.metrics import task_type_rows

    by_type = [row for d in rundirs for row in task_type_rows(d)]
    if by_type:   # MedAgentBench's official metric per task type
        click.echo("\n| benchmark | system | task type | success rate |\n|---|---|---|---|")
        for row in by_type:
            click.echo(f"| {row['benchmark']} | {row['system']} | {row['task_type']} | {row['success_rate']:.1f} |")


@group.command("score-sql")
@click.option("--bench", "bench_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="a built EHRSQL benchmark directory")
@click.option("--pred", "pred_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help='predictions as the shared task wants them: {"question id": "SQL" or "null"}')
@click.option("--split", default=None, help="only questions of this kit split (train/dev/test)")
def score_sql_cmd(bench_dir: str, pred_path: str, split: str | None) -> None:
    """Official SQL-level RS(c): run predicted and gold SQL on the benchmark's SQLite build."""
    from ehrgym.external.sqlscore import score_sql_predictions

    predictions = json.loads(Path(pred_path).read_text(encoding="utf-8"))
    metrics = score_sql_predictions(bench_dir, predictions, split=split)
    for key, value in metrics.items():
        click.echo(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
