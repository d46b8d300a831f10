"""``build_benchmark``: the one entry point that turns a database into a Clean–Noise benchmark."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ehrgym.bench.builder import BENCHMARK_FORMAT_VERSION, Builder, database_bookkeeping, ensure_out_dir, \
    make_tasks, pair_id_of
from ehrgym.bench.card import card_markdown, make_card
from ehrgym.bench.configs import BuildConfig, get_config
from ehrgym.bench.decoys import decoy_counts
from ehrgym.bench.dataset import write_benchmark
from ehrgym.bench.splits import assign_splits
from ehrgym.bench.task import Task
from ehrgym.bench.templates.base import Template
from ehrgym.codehash import source_digest


# the code that decides what a build contains: the builder, templates, noise and validity checks, and the
# database layer they read through (overlays, schema)
BUILDER_SOURCES = ("bench", "db", "vocab.py")


def builder_code_hash() -> str:
    """sha256 over the source files of :data:`BUILDER_SOURCES` (paths and bytes): a benchmark built by
    other code is not reused (``ehrgym.pipeline.benchmark_mismatch``), however equal its config."""
    return source_digest(BUILDER_SOURCES)


@dataclass
class BuildResult:
    out: Path
    tasks: list[Task]
    manifest: dict[str, Any]
    report: dict[str, Any]
    card: dict[str, Any]


def build_benchmark(db: str | Path, out: str | Path, config: str | BuildConfig = "small", seed: int = 0,
                    progress: bool = True, templates: Iterable[Template] | None = None,
                    validity: Iterable[str] | None = None) -> BuildResult:
    """Sample, inject, verify and write a benchmark; see ``ehrgym.bench.configs`` for the distribution.
    ``validity``: the card's validity sections to compute (None: every registered one; the tasks never depend on
    it)."""
    t_start = time.perf_counter()
    cpu_start = _cpu_seconds()
    cfg = get_config(config)
    if validity is not None:
        from ehrgym.bench.validity import section_names

        validity = section_names(validity)  # an unknown name fails before the build, not after it
    out = ensure_out_dir(out)
    builder = Builder(db, cfg, seed, progress=progress, templates=templates)
    try:
        bookkeeping = database_bookkeeping(builder.verifier)
        drafts = builder.run()
    finally:
        builder.close()
    t_pairs = time.perf_counter()
    splits, held = assign_splits(
        ((pair_id_of(d), d.template.id, d.template.intent, d.template.level,
          d.params.get("subject_id") if d.template.level == "patient" else None,
          d.clean["meta"]["entity"]) for d in drafts),
        seed, cfg.split_fractions, cfg.ood_templates_per_intent)
    tasks = make_tasks(drafts, splits)
    info = {"config": cfg.to_dict(), "seed": int(seed), "db_source": bookkeeping.get("source", "unknown"),
            "db_content_hash": bookkeeping.get("content_hash"), "ood_templates": held,
            "distribution": ("even over (intent, level) cells with templates, then over noise levels and "
                             "subtypes, then over templates in proportion to their tier weight "
                             f"{list(cfg.tier_weights)}; inside a template half the noisy twins expect an answer, "
                             "half an abstention (where its subtypes allow both); deficits are made in "
                             "answer/abstain couples of one template, in the cell first, then anywhere "
                             "(ehrgym.bench.configs)"),
            # what this database could not support (e.g. a demo copy without icu/chartevents)
            "limitations": list(builder.stats.warnings),
            "planned_by_template": planned_by_template(builder.plan),
            "balance_dropped_by_template": dict(sorted(builder.stats.balance_dropped.items()))}
    t_card = time.perf_counter()
    sections: dict[str, float] = {}
    card = make_card(tasks, info, db=Path(db), seed=int(seed), workers=cfg.workers, seconds=sections,
                     validity=validity)
    t_card = time.perf_counter() - t_card
    stats = builder.stats
    attempts = sum(stats.attempts.values())
    report: dict[str, Any] = {
        "config": cfg.name, "seed": int(seed), "target_pairs": cfg.pairs, "kept_pairs": len(drafts),
        "shortfall": max(cfg.pairs - len(drafts), 0),
        "candidates_drawn": dict(sorted(stats.candidates.items())),
        "candidates_ineligible": dict(sorted(stats.ineligible.items())),
        "attempts": attempts, "attempts_by_subtype": dict(sorted(stats.attempts.items())),
        "discarded": dict(sorted(stats.discarded.items())),
        "discarded_by_subtype": {k: dict(sorted(v.items())) for k, v in sorted(stats.discarded_by_subtype.items())},
        "balance_dropped_by_template": dict(sorted(stats.balance_dropped.items())),
        # per kept pair: how its background was made (ehrgym.bench.background): verified edits of the tables it
        # reads that include other patients' rows of its noise's items (verified_items) or not (verified: its noise
        # edits no item's rows, or the focused draw changed an answer), or edits of tables none of its SQL reads
        # (every draw changed an answer)
        "backgrounds": dict(sorted(Counter(d.clean.get("background_kind", "none") for d in drafts).items())),
        # per record/value subtype whose noise leaves something to see: kept pairs whose clean twin is served a
        # decoy (ehrgym.bench.decoys), and those where no row took one that leaves the clean answer as it is
        "decoys": decoy_counts(drafts),
        "warnings": stats.warnings,
        "timings_seconds": {
            "sampling": round(stats.timings["sampling"], 3),
            "gold_execution": round(stats.timings["gold_execution"], 3),
            "verification": round(stats.timings["verification"], 3),
            "decoys": round(stats.timings["decoys"], 3),
            "writing": None, "total": None,
        },
    }
    manifest = {
        "format_version": BENCHMARK_FORMAT_VERSION, "config": cfg.to_dict(), "seed": int(seed),
        "db_path": str(Path(db).resolve()), "db_content_hash": bookkeeping.get("content_hash"),
        "db_source": bookkeeping.get("source", "unknown"), "db_release": bookkeeping.get("release"),
        "ood_templates": held, "builder_code_hash": builder_code_hash(),
    }
    t_write = time.perf_counter()
    report["timings_seconds"]["writing"] = None
    manifest = write_benchmark(out, tasks, card, card_markdown(card), report, manifest)
    t_end = time.perf_counter()
    report["timings_seconds"]["pairs"] = round(t_pairs - t_start, 3)
    report["timings_seconds"]["writing"] = round(t_end - t_write, 3)
    report["timings_seconds"]["total"] = round(t_end - t_start, 3)
    report["timings_seconds"]["card"] = round(t_card, 3)
    report["timings_seconds"]["card_sections"] = dict(sorted(sections.items(), key=lambda kv: -kv[1]))
    report["timings_seconds"]["pairs_phases"] = {k: round(v, 3) for k, v in builder.phase_seconds.items()}
    report["timings_seconds"]["cpu"] = round(_cpu_seconds() - cpu_start, 3)  # this process + worker processes
    from ehrgym.bench.dataset import dump_json

    dump_json(report, out / "build_report.json")
    return BuildResult(out, tasks, manifest, report, card)


def planned_by_template(plan: dict[tuple[str, str], int]) -> dict[str, int]:
    """Pairs the quota plan gave each template (all its subtypes), before balancing and deficits moved them."""
    out: Counter[str] = Counter()
    for (tid, _), quota in plan.items():
        out[tid] += quota
    return dict(sorted(out.items()))


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the build's worker processes)."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def summary(result: BuildResult) -> str:
    counts = Counter(t.split for t in result.tasks if t.variant == "noise")
    r = result.report
    from ehrgym.bench.complexity import complexity_by_tier

    tiers = ", ".join(f"tier {k}: {v['mean']} ({v['tasks']} tasks)"
                      for k, v in complexity_by_tier(result.tasks).items())
    return (f"{r['kept_pairs']} pairs ({r['target_pairs']} planned) → {result.out}\n"
            f"splits: {dict(sorted(counts.items()))}\n"
            f"gold SQL complexity by tier: {tiers}\n"
            f"content hash: {result.manifest['content_hash']}\n"
            f"timings (s): {r['timings_seconds']}")
