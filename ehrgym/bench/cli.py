"""``ehrgym bench``: build, describe and inspect Clean–Noise benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("bench")
def group() -> None:
    """Build Clean–Noise benchmarks from a database and inspect them."""


@group.command("build")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="DuckDB database built by `ehrgym db synth` or `ehrgym db load-mimic`.")
@click.option("--config", "config", type=click.Choice(["small", "paper"]), default="small", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.option("--validity", default="all", show_default=True, metavar="all|none|NAME,…",
              help="The card's validity sections to compute (they take a third of a build's time; the tasks do not "
              "depend on them; the card lists those left out).")
def build(db: Path, config: str, seed: int, out: Path, quiet: bool, validity: str) -> None:
    """Sample entities, inject the 13 noise subtypes, verify every pair and write the benchmark to OUT."""
    from ehrgym.bench.build import build_benchmark, summary

    sections = None if validity == "all" else [] if validity == "none" else \
        [n.strip() for n in validity.split(",") if n.strip()]
    result = build_benchmark(db, out, config=config, seed=seed, progress=not quiet, validity=sections)
    click.echo(summary(result))
    for w in result.report["warnings"]:
        click.echo(f"warning: {w}", err=True)


@group.command("card")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print card.json instead of card.md.")
@click.option("--no-verify-hash", is_flag=True, help="Load even if a file differs from manifest.json (edited by hand).")
def card(path: Path, as_json: bool, no_verify_hash: bool) -> None:
    """Print the dataset card of a built benchmark."""
    from ehrgym.bench.dataset import load_benchmark

    bench = load_benchmark(path, verify_hash=not no_verify_hash)
    if as_json:
        click.echo(json.dumps(bench.card, indent=2, sort_keys=True))
    else:
        md = path / "card.md"
        click.echo(md.read_text(encoding="utf-8") if md.exists() else json.dumps(bench.card, indent=2))


@group.command("timing-probe")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Database to time on (default: the one the benchmark was built from).")
@click.option("--per-split", type=int, default=300, show_default=True, help="Pairs timed per split (train, test).")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--through-env", is_flag=True, help="Time from Python cells of real episodes (as an agent can) instead "
              "of a bare connection.")
@click.option("--quantum-ms", type=float, default=None, help="With --through-env: the sql() reply quantum "
              "(default: PythonLimits' own; 0: none).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def timing_probe(path: Path, db: Path | None, per_split: int, repeats: int, seed: int, through_env: bool,
                 quantum_ms: float | None, as_json: bool) -> None:
    """Can an agent tell a noisy episode from a clean one by timing its own queries? (machine-dependent:
    not part of the card)."""
    from ehrgym.bench.validity.timing import probe_benchmark, report_lines

    report = probe_benchmark(path, db, per_split=per_split, repeats=repeats, seed=seed, progress=not as_json,
                             through_env=through_env, quantum_ms=quantum_ms)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else "\n".join(report_lines(report)))


@group.command("show")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.argument("task_or_pair_id")
@click.option("--no-verify-hash", is_flag=True, help="Load even if a file differs from manifest.json (edited by hand).")
def show(path: Path, task_or_pair_id: str, no_verify_hash: bool) -> None:
    """Show a task (by its id or the public id agents see), or both tasks of a pair."""
    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.errors import BenchmarkError

    bench = load_benchmark(path, verify_hash=not no_verify_hash)
    tasks = [t for t in bench.tasks if task_or_pair_id in (t.task_id, t.pair_id)]
    if not tasks and task_or_pair_id in bench.by_public_id:  # the opaque id an agent's trajectory shows
        tasks = [bench.by_public_id[task_or_pair_id]]
    if not tasks:
        raise BenchmarkError(f"no task or pair {task_or_pair_id!r} in {path}; ids look like "
                             f"{bench.tasks[0].task_id if bench.tasks else '…'}")
    for t in tasks:
        click.echo(f"== {t.task_id} ({t.public_id}) [{t.split}] {t.intent}/{t.level} {t.template_id}")
        click.echo(f"Q: {t.question}")
        exp = t.expected
        click.echo(f"expected: {exp.kind} " + (repr(exp.value) if exp.kind == "answer" else str(exp.reason)))
        if t.noise:
            click.echo(f"noise: {t.noise.level}/{t.noise.subtype} — {t.noise.description}")
            if t.noise.question_edit:
                click.echo(f"question edit: {t.noise.question_edit}")
            for e in t.noise.overlay.edits:
                click.echo(f"overlay: {e.table}: delete {len(e.delete_rowids)} rows, insert {len(e.insert_rows)}")
        click.echo(f"gold SQL:\n{t.gold_sql}\n")


@group.command("teaching-cards")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Markdown here (the repository keeps it in docs/noise.md) instead of printing it.")
@click.option("--check", is_flag=True, help="With --out: exit 1 if the file differs from what would be written.")
def teaching_cards(out: Path | None, check: bool) -> None:
    """The teaching card of every noise subtype (what it is, how it arises, the credulous trap, the check that
    catches it, the expected outcome) as Markdown; the cards live on the injectors in ehrgym/bench/noise/."""
    from ehrgym.bench.noise.teaching import teaching_markdown

    text = teaching_markdown()
    if out is None:
        click.echo(text, nl=False)
    elif check:
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            raise click.ClickException(f"{out} is out of date: run `ehrgym bench teaching-cards --out {out}`")
        click.echo(f"{out} is up to date")
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {out}")
