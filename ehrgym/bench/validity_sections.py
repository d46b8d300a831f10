"""Validity sections of the card (see :mod:`ehrgym.bench.validity`): one function per section."""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

from ehrgym.bench.validity import ValidityContext, validity_section


CARD_TASKS_PER_SUBTYPE = 80  # noisy tasks sampled per subtype (fewer make the accuracy too noisy to judge)


@validity_section("artifact_classifier")
def artifact_classifier(ctx: ValidityContext) -> dict[str, Any]:
    """Balanced accuracy of a depth-3 tree telling overlay-touched rows from base rows."""
    from ehrgym.bench.artifacts import BAR, artifact_report

    if ctx.db is None:
        return {"skipped": "no database given"}
    report = artifact_report(ctx.db, ctx.tasks, ctx.seed, per_subtype=CARD_TASKS_PER_SUBTYPE)
    md = [f"Held-out balanced accuracy of a depth-3 tree on storage features ({', '.join(report['features'])}); "
          f"chance 0.5, bar {BAR}.", "", "| subtype | balanced accuracy | entities | touched rows | base rows |",
          "|---|---|---|---|---|"]
    for sub, r in report["by_subtype"].items():
        flag = "" if r["balanced_accuracy"] <= BAR else " ⚠"
        md.append(f"| {sub} | {r['balanced_accuracy']}{flag} | {r['entities']} | {r['touched_rows']} | {r['base_rows']} |")
    return {**report, "markdown": md}


@validity_section("trap_margins")
def trap_margins(ctx: ValidityContext) -> dict[str, Any]:
    """How far the traps move the answer (relative for numbers, events for counts, hours for times)."""
    from ehrgym.bench.verify import TRAP_MARGINS

    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for t in ctx.tasks:
        if t.variant == "noise" and t.noise is not None and "trap_margin" in t.meta:
            by[(t.noise.subtype, t.expected.answer.type)].append(float(t.meta["trap_margin"]))
    rows = {f"{s}:{a}": {"pairs": len(v), "min": round(min(v), 4), "median": round(median(v), 4)}
            for (s, a), v in sorted(by.items())}
    md = ["Minimum margin per answer type: " + "; ".join(
        f"{k} ≥ {m.relative:g} relative / {m.absolute:g} {m.unit}" for k, m in TRAP_MARGINS.items()), "",
        "| subtype:answer type | pairs | min | median |", "|---|---|---|---|"]
    md += [f"| {k} | {r['pairs']} | {r['min']} | {r['median']} |" for k, r in rows.items()]
    return {"minimum": {k: {"relative": m.relative, "absolute": m.absolute, "unit": m.unit, "why": m.why}
                        for k, m in TRAP_MARGINS.items()}, "by_subtype_answer_type": rows, "markdown": md}


@validity_section("text_classifier")
def text_classifier(ctx: ValidityContext) -> dict[str, Any]:
    """Accuracy of a question-text-only classifier (word and character n-grams, logistic regression,
    train split → test split): clean vs noisy twin, and answer vs abstain, against the majority rate."""
    from ehrgym.bench.validity.text import text_validity

    report = text_validity(ctx.tasks, workers=ctx.workers)
    md = ["A classifier that reads only the question text, trained on the train split and scored on the test "
          "split (chance 0.5 for clean vs noisy; the majority rate for answer vs abstain).", "",
          "| probe | accuracy | majority | test questions |", "|---|---|---|---|"]
    for name, r in report.items():
        if isinstance(r, dict) and "accuracy" in r:
            md.append(f"| {name} | {r.get('accuracy')} | {r.get('majority', r.get('chance'))} | {r.get('n_test', '')} |")
    return {**report, "markdown": md}
