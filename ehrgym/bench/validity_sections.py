"""Validity sections of the card (see :mod:`ehrgym.bench.validity`): one function per section."""

from __future__ import annotations

import json
from collections import defaultdict
from statistics import median
from typing import Any

from ehrgym.bench.task import Task
from ehrgym.bench.validity import ValidityContext, validity_section


CARD_TASKS_PER_SUBTYPE = 160  # noisy tasks judged per subtype (at 80 the accuracy of a subtype compared by content
# swung by ±0.05 between seeds around the 0.55 bar)


@validity_section("artifact_classifier")
def artifact_classifier(ctx: ValidityContext) -> dict[str, Any]:
    """Balanced accuracy of a depth-3 tree telling overlay-touched rows from base rows."""
    from ehrgym.bench.artifacts import BAR, artifact_report

    if ctx.db is None:
        return {"skipped": "no database given"}
    report = artifact_report(ctx.db, ctx.tasks, ctx.seed, per_subtype=CARD_TASKS_PER_SUBTYPE, workers=ctx.workers)
    md = [f"Held-out balanced accuracy of a depth-3 tree on storage features ({', '.join(report['features'])}); "
          f"chance 0.5, bar {BAR}.", "", "Noise rows against base rows of the same table and item:", ""]
    md += _artifact_table(report["by_subtype"], "base rows")
    if report.get("decoys_by_subtype"):
        md += ["", "Clean twins' decoy rows (one harmless anomaly of the pair's own subtype) against base rows:", ""]
        md += _artifact_table(report["decoys_by_subtype"], "base rows")
        md += ["", "Noise rows against decoy rows of the same pairs (can storage tell the anomaly that changes the "
               "answer from the one that does not?):", ""]
        md += _artifact_table(report["noise_vs_decoy"], "decoy rows")
    return {**report, "markdown": md}


def _artifact_table(by_subtype: dict[str, dict[str, Any]], against: str) -> list[str]:
    from ehrgym.bench.artifacts import BAR

    md = [f"| subtype | balanced accuracy | entities | touched rows | {against} |", "|---|---|---|---|---|"]
    for sub, r in by_subtype.items():
        acc = r["balanced_accuracy"]
        shown = "too few rows" if acc is None else f"{acc}{'' if acc <= BAR else ' ⚠'}"
        md.append(f"| {sub} | {shown} | {r['entities']} | {r['touched_rows']} | {r['base_rows']} |")
    return md


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
          "| probe | accuracy | 95 % interval | majority | test questions |", "|---|---|---|---|---|"]
    for name, r in report.items():
        if isinstance(r, dict) and "accuracy" in r:
            ci = "–".join(str(v) for v in r.get("interval95", []))
            md.append(f"| {name} | {r.get('accuracy')} | {ci} | {r.get('majority', r.get('chance'))} | "
                      f"{r.get('n_test', r.get('questions', ''))} |")
    return {**report, "markdown": md}


@validity_section("answer_prior")
def answer_prior(ctx: ValidityContext) -> dict[str, Any]:
    """What a policy scores that says each template's most common training answer without reading any data, and
    each template's answer spread (the most common clean answer's share of its pairs)."""
    from ehrgym.bench.validity.prior import answer_prior as measure

    report = measure(ctx.tasks)
    md = [f"A policy that answers every question with its template's most common clean answer on the train split "
          f"(no query at all), strict scoring on the test split: {report['clean_pct']} % of clean twins and "
          f"{report['noise_pct']} % of noisy twins; the same per template and concept named (a lookup table of "
          f"train answers): {report['lookup_clean_pct']} % and {report['lookup_noise_pct']} % "
          f"({report['test_clean']} test pairs; "
          f"{report['templates_not_in_train']} test templates have no train pairs). Any one clean answer holds at "
          f"most {report['bar']} of a template's pairs (rounded up; `max_answer_share`): median share "
          f"{report['median_share']}, largest {report['max_share']} (templates of {report['min_pairs']}+ pairs), "
          f"{len(report['above_bar'])} templates or template-concept groups above it, by at most "
          f"{max([a['excess'] for a in report['above_bar'].values()] or [0])} pair (a pair of another answer dropped "
          f"later to keep the template's answer/abstain balance).", "",
          "| template | test pairs | prior correct (clean) | its answer | share in train |", "|---|---|---|---|---|"]
    md += [f"| {r['template']} | {r['test_pairs']} | {r['clean_pct']} % | {json.dumps(r['answer'])[:60]} | "
           f"{r['train_share']} |" for r in report["top_templates"]]
    return {**{k: v for k, v in report.items() if k != "spread"}, "markdown": md}


CARD_LITERAL_PAIRS = 400  # test pairs the literal floor is measured on (a hashed uniform sample; ~10 s)


def literal_records(db: str, tasks: list[Task], seed: int) -> list[dict[str, Any]]:
    """The ``literal`` agent's episode records on ``tasks`` (one environment worker; module level so that a build
    worker process can run it)."""
    from ehrgym.eval.runner import EpisodeWorker, WorkerConfig

    worker = EpisodeWorker(WorkerConfig(db, "literal", {}, {"schema_summary": False}, "card", seed, None, 0))
    try:
        return [worker.run(t, 0) for t in tasks]
    finally:
        worker.close()


@validity_section("literal_baseline")
def literal_baseline(ctx: ValidityContext) -> dict[str, Any]:
    """The floor: the ``literal`` agent (the question's obvious query; abstain on an empty/NULL result or an error)
    run through the real environment on test pairs, strict scoring. A valid benchmark keeps its noise success
    low: what it scores there is rewarded without any inspection of the data."""
    import hashlib

    if ctx.db is None:
        return {"skipped": "no database given"}
    test = [t for t in ctx.tasks if t.split == "test"]
    pairs = sorted({t.pair_id for t in test}, key=lambda p: hashlib.sha256(p.encode()).hexdigest())
    chosen = set(pairs[:CARD_LITERAL_PAIRS])
    tasks = sorted((t for t in test if t.pair_id in chosen), key=lambda t: t.task_id)
    if not tasks:
        return {"skipped": "no test pairs"}
    parts = max(1, min(ctx.workers, len(tasks)))
    if parts == 1:
        records = literal_records(str(ctx.db), tasks, ctx.seed)
    else:  # each episode is its own, so the records do not depend on the split
        from ehrgym.bench.builder import run_worker_processes

        records = [r for part in run_worker_processes([{"call": literal_records,
                                                        "args": (str(ctx.db), tasks[k::parts], ctx.seed)}
                                                       for k in range(parts)]) for r in part]
    ok = {(r["pair_id"], r["variant"]): bool(r["success_strict"]) for r in records}
    by_level: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        if r["variant"] == "noise":
            by_level[str(r["noise_level"])].append(bool(r["success_strict"]))

    def rate(xs: list[bool]) -> float | None:
        return round(100 * sum(xs) / len(xs), 1) if xs else None

    clean = [v for (_, variant), v in ok.items() if variant == "clean"]
    noise = [v for (_, variant), v in ok.items() if variant == "noise"]
    both = [ok.get((p, "clean"), False) and ok.get((p, "noise"), False) for p in chosen]
    levels = {k: rate(v) for k, v in sorted(by_level.items())}
    out: dict[str, Any] = {"pairs": len(chosen), "clean_pct": rate(clean), "noise_pct": rate(noise),
                           "pair_pct": rate(both), "noise_pct_by_level": levels}
    md = [f"The `literal` agent (runs the question's obvious query, abstains on an empty/NULL result or an error) "
          f"through the environment on {len(chosen)} test pairs (a hashed uniform sample), strict scoring: what a "
          "benchmark rewards without any inspection of the data.", "",
          "| clean | noise | pair | " + " | ".join(f"noise ({k})" for k in levels) + " |",
          "|---|---|---|" + "---|" * len(levels),
          f"| {out['clean_pct']} % | {out['noise_pct']} % | {out['pair_pct']} % | "
          + " | ".join(f"{v} %" for v in levels.values()) + " |"]
    return {**out, "markdown": md}


@validity_section("evidence_anomaly")
def evidence_anomaly(ctx: ValidityContext) -> dict[str, Any]:
    """Whether an oddity in a twin's own evidence rows (a copy, a contradiction, a NULL, an impossible value, a second
    unit, a row outside the stay) names the noisy twin or the expected outcome without judging its effect."""
    from ehrgym.bench.validity.anomaly import anomaly_shortcut

    if ctx.db is None:
        return {"skipped": "no database given"}
    r = anomaly_shortcut(ctx.db, ctx.tasks, workers=ctx.workers)
    cvn, ava, lk, lko, lkm = (r["clean_vs_noise"], r["answer_vs_abstain"], r["lookup"], r["lookup_when_odd"],
                              r["lookup_when_odd_many_rows"])
    md = ["Each twin's evidence rows on its served views, checked as the sampler checks natural noise (test split, "
          f"{r['pairs']} record/value-level pairs). Clean twins are served a harmless anomaly of their pair's kind "
          "where one fits (a decoy, `ehrgym.bench.decoys`); without decoys every clean twin's evidence is pristine "
          "and the first policy scores 1.0.", "",
          "| policy | accuracy | chance / majority | twins |", "|---|---|---|---|",
          f"| the odd twin is the noisy one | {cvn['accuracy']} | 0.5 | {2 * cvn['pairs']} |",
          f"| abstain when the evidence is odd or empty | {ava['accuracy']} | {ava['majority']} | {ava['twins']} |",
          f"| outcome looked up by (template, oddity) | {lk['accuracy']} | {lk['majority']} | {lk['twins']} |",
          f"| the same, twins with an oddity only | {lko['accuracy']} | {lko['majority']} | {lko['twins']} |",
          f"| the same, of several evidence rows | {lkm['accuracy']} | {lkm['majority']} | {lkm['twins']} |", "",
          "With one evidence row the odd row is the answer itself (an impossible age), and noticing it is judging it.",
          "",
          f"Clean twins whose evidence shows an oddity: {100 * (r['clean_odd_share'] or 0):.0f} % (noisy twins: "
          f"{100 * (r['noise_odd_share'] or 0):.0f} %, `missing_evidence` excluded: its rows are gone).", "",
          "| subtype | pairs | noisy twins odd | clean twins odd |", "|---|---|---|---|"]
    md += [f"| {k} | {v['pairs']} | {v['noise_odd_pct']} % | {v['clean_odd_pct']} % |" for k, v in r["by_subtype"].items()]
    return {**r, "markdown": md}


@validity_section("database_state")
def database_state(ctx: ValidityContext) -> dict[str, Any]:
    """Accuracy of a depth-3 tree that reads only whole-table fingerprints (row counts, a content checksum)
    against the clean database — what an agent that remembers other episodes on the same file can compare."""
    from ehrgym.bench.validity.state import BAR, OUTCOME_SLACK, state_passes, state_validity

    report = state_validity(ctx.tasks, ctx.db)
    cvn, ava = report["clean_vs_noise"], report["answer_vs_abstain"]

    def flag(ok: bool) -> str:
        return "" if ok else " ⚠"

    md = ["A depth-3 tree on whole-table fingerprints only (per table: row count and whether any content differs "
          "from the clean database; `count(*)` and `sum(hash(t))` in SQL), train split → test split. An agent that "
          f"remembers one clean episode can compare them in every later one. Bar: clean vs noisy ≤ {BAR}, answer vs "
          f"abstain ≤ majority + {OUTCOME_SLACK}.", "",
          "| probe | accuracy | 95 % interval | majority | test tasks |", "|---|---|---|---|---|"]
    for name, r in (("clean_vs_noise", cvn), ("answer_vs_abstain", ava), ("items", report.get("items", {}))):
        if r.get("accuracy") is None:
            continue
        ok = r["accuracy"] <= (r["majority"] + OUTCOME_SLACK if name == "answer_vs_abstain" else BAR)
        md.append(f"| {name} | {r['accuracy']}{flag(ok)} | {'–'.join(map(str, r['interval95']))} | {r['majority']} | "
                  f"{r['n_test']} |")
    if "items" in report:
        md += ["", "`items`: clean vs noisy twin from the rows of the items the noise edits only (per item: row count "
               "and whether any content differs; `GROUP BY itemid`), on pairs whose noise edits rows; clean test twins "
               f"whose item differs from the clean database: {100 * report['items']['clean_item_changed']:.0f} %."]
    md += ["", f"Clean test tasks served the clean database as it is: {100 * report['clean_served_as_base']:.0f} %.", "",
           "| noisy test tasks (subtype:outcome) | tasks | database differs by count | by content |", "|---|---|---|---|"]
    md += [f"| {k} | {v['tasks']} | {v['by_count']} | {v['by_content']} |" for k, v in report["detectable"].items()]
    return {**report, "passes": state_passes(report), "markdown": md}
