"""The dataset card: counts by intent × level × variant × noise level × subtype, SQL complexity,
splits and answer types, as ``card.json`` and a Markdown ``card.md``."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from statistics import mean
from typing import Any, Iterable

from ehrgym.bench.complexity import complexity_by_tier
from ehrgym.bench.noise.teaching import expected_outcomes, teaching_card
from ehrgym.bench.task import Task
from ehrgym.bench.validity import ValidityContext, section_names, validity_markdown, validity_report
from ehrgym.vocab import INTENTS, NOISE_SUBTYPES


def _nested(counter: Counter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, n in sorted(counter.items()):
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = n
    return out


def make_card(tasks: list[Task], info: dict[str, Any], db: Path | None = None, seed: int = 0,
              workers: int = 1, seconds: dict[str, float] | None = None,
              validity: Iterable[str] | None = None) -> dict[str, Any]:
    """The benchmark card; ``workers`` processes compute its validity report (same numbers for any count);
    ``seconds`` receives each validity section's wall time. ``validity``: the sections to compute (None: all); the
    card then lists the others under ``validity_skipped``, so that nobody reads a partial report as a whole one."""
    names = section_names(validity)
    skipped = [n for n in section_names() if n not in names]
    noise = [t for t in tasks if t.variant == "noise"]
    clean = [t for t in tasks if t.variant == "clean"]
    noise_specs = [t.noise for t in noise if t.noise is not None]  # every noise task carries its spec
    full = Counter((t.intent, t.level, t.variant, t.noise.level if t.noise else "clean",
                    t.noise.subtype if t.noise else "clean") for t in tasks)
    complexity: dict[tuple[str, str], list[int]] = defaultdict(list)
    for t in tasks:
        complexity[(t.intent, t.level)].append(int(t.meta.get("complexity", 0)))
    by_intent: dict[str, list[int]] = defaultdict(list)
    for (intent, _), vals in complexity.items():
        by_intent[intent].extend(vals)
    all_c = [c for vals in complexity.values() for c in vals]
    clean_c = [int(t.meta.get("complexity", 0)) for t in clean]
    return {
        **info,
        "pairs": len(noise),
        "tasks": len(tasks),
        "templates": len({t.template_id for t in tasks}),
        "by_intent_level": _nested(Counter((t.intent, t.level) for t in noise)),
        "by_noise_level": dict(sorted(Counter(spec.level for spec in noise_specs).items())),
        "by_subtype": {s: n for s, n in sorted(Counter(spec.subtype for spec in noise_specs).items(),
                                                key=lambda kv: list(NOISE_SUBTYPES).index(kv[0]))},
        "by_expected": dict(sorted(Counter(f"{t.variant}:{t.expected.kind}" for t in tasks).items())),
        "by_abstain_reason": dict(sorted(Counter(t.expected.reason for t in noise if t.expected.is_abstain).items())),
        "counts": _nested(full),
        "by_split": _nested(Counter((t.split, t.variant) for t in tasks)),
        "by_answer_type": dict(sorted(Counter(t.expected.answer.type for t in clean).items())),
        "by_template": dict(sorted(Counter(t.template_id for t in noise).items())),
        "sql_complexity": {
            "mean_all_gold": round(mean(all_c), 2) if all_c else None,
            "mean_clean_gold": round(mean(clean_c), 2) if clean_c else None,
            "by_intent": {i: round(mean(v), 2) for i, v in sorted(by_intent.items())},
            "by_intent_level": _nested(Counter({k: round(mean(v), 2) for k, v in complexity.items()})),
            "by_tier": complexity_by_tier(tasks),
        },
        "by_tier": dict(sorted(Counter(str(t.meta.get("tier", "unknown")) for t in noise).items())),
        "validity": validity_report(ValidityContext(tasks, db, seed, workers), seconds, names),
        **({"validity_skipped": skipped} if skipped else {}),
    }


def card_markdown(card: dict[str, Any]) -> str:
    lines = [f"# EHR-RobustGym benchmark card — config `{card.get('config', {}).get('name', '?')}`", "",
             f"- pairs: **{card['pairs']}** ({card['tasks']} tasks), templates: {card['templates']}",
             f"- database: {card.get('db_source', '?')} (content hash `{str(card.get('db_content_hash'))[:16]}…`)",
             f"- seed: {card.get('seed')}",
             f"- distribution: {card.get('distribution', '')}",
             f"- SQL structural complexity (sqlglot components, mean over gold SQL): "
             f"{card['sql_complexity']['mean_all_gold']} (clean gold: {card['sql_complexity']['mean_clean_gold']})",
             "", "## Pairs by intent and level", "", "| intent | patient | population | complexity (mean) |",
             "|---|---|---|---|"]
    for intent in INTENTS:
        row = card["by_intent_level"].get(intent, {})
        if not row:
            continue
        lines.append(f"| {intent} | {row.get('patient', 0)} | {row.get('population', 0)} | "
                     f"{card['sql_complexity']['by_intent'].get(intent, '')} |")
    by_tier = card["sql_complexity"].get("by_tier", {})
    if by_tier:
        lines += ["", "## Difficulty tiers", "",
                  "Tier 1: one clinical table; 2: joins across tables or multi-block queries; 3: multi-step "
                  "time logic or a cohort definition.", "",
                  "| tier | pairs | gold SQL complexity (mean) | median | clean gold (mean) |", "|---|---|---|---|---|"]
        for tier, row in by_tier.items():
            lines.append(f"| {tier} | {card.get('by_tier', {}).get(tier, 0)} | {row['mean']} | {row['median']} | "
                         f"{row['clean_mean']} |")
    lines += ["", "## Noise", "",
              "Each subtype's teaching card (docs/noise.md, `ehrgym bench teaching-cards`) says how it arises "
              "and why the credulous shortcut falls for it.", "",
              "| level | subtype | pairs | what it is | the check that catches it | expected |", "|---|---|---|---|---|---|"]
    for sub, n in card["by_subtype"].items():
        tc = teaching_card(sub)
        lines.append(f"| {NOISE_SUBTYPES[sub]} | {tc.title} (`{sub}`) | {n} | {tc.definition} | {tc.check} | "
                     f"{expected_outcomes(sub)} |")
    lines += ["", "Noise levels: " + ", ".join(f"{k} {v}" for k, v in card["by_noise_level"].items()),
              "", "## Expected outcomes", ""]
    lines += [f"- {k}: {v}" for k, v in card["by_expected"].items()]
    lines += ["", "Abstention reasons: " + ", ".join(f"{k} {v}" for k, v in card["by_abstain_reason"].items()),
              "", "## Splits", "", "| split | clean | noise |", "|---|---|---|"]
    for split, row in card["by_split"].items():
        lines.append(f"| {split} | {row.get('clean', 0)} | {row.get('noise', 0)} |")
    lines += ["", f"Held-out (ood) templates: {', '.join(card.get('ood_templates', [])) or 'none'}",
              "", "## Answer types (clean tasks)", ""]
    lines += [f"- {k}: {v}" for k, v in card["by_answer_type"].items()]
    lines += ["", "## Pairs per intent × level × noise level × subtype", "",
              "| intent | level | noise level | subtype | pairs |", "|---|---|---|---|---|"]
    for intent, levels in card["counts"].items():
        for level, variants in levels.items():
            for nl, subs in variants.get("noise", {}).items():
                for sub, n in subs.items():
                    lines.append(f"| {intent} | {level} | {nl} | {sub} | {n} |")
    lines += template_shares_markdown(card)
    if card.get("limitations"):
        lines += ["", "## Limitations of this build", ""] + [f"- {w}" for w in card["limitations"]]
    if card.get("validity") or card.get("validity_skipped"):
        lines += validity_markdown(card["validity"])
    if card.get("validity_skipped"):
        lines += [f"Not computed in this build (`--validity`): {', '.join(card['validity_skipped'])}.", ""]
    return "\n".join(lines) + "\n"


def template_shares_markdown(card: dict[str, Any]) -> list[str]:
    """Pairs per template against the quota plan: templates whose subtypes cannot keep half their twins answering
    (step 5 of the plan, ``ehrgym.bench.configs``) lose pairs, which other templates of their cell make instead."""
    made: dict[str, int] = card["by_template"]
    planned: dict[str, int] | None = card.get("planned_by_template")
    if not planned:  # a card written before plans were recorded
        return ["", "## Pairs per template", ""] + [f"- `{k}`: {v}" for k, v in made.items()]
    dropped: dict[str, int] = card.get("balance_dropped_by_template", {})
    names = sorted(set(planned) | set(made))
    short = [t for t in names if made.get(t, 0) < planned.get(t, 0) / 2]
    over = [t for t in names if made.get(t, 0) > 2 * planned.get(t, 0)]
    total = sum(made.values()) or 1
    largest = max(names, key=lambda t: (made.get(t, 0), t))
    lines = ["", "## Pairs per template", "",
             f"{len(names)} templates planned, {sum(1 for t in names if made.get(t, 0))} with pairs. The plan spreads a "
             "cell's pairs over its templates by subtype and tier; a template then keeps half its noisy twins "
             "answering and half abstaining, so one whose answering (or abstaining) subtypes rarely verify loses "
             "its unmatched pairs (\"dropped for balance\": verified, then dropped), and the cell's other templates make "
             f"its pairs instead. {len(short)} templates made fewer than half their planned pairs, {len(over)} more "
             f"than twice; the largest, `{largest}`, holds {made.get(largest, 0)} pairs "
             f"({100 * made.get(largest, 0) / total:.1f} %, planned {planned.get(largest, 0)}).", "",
             "| template | pairs | planned | dropped for balance |", "|---|---|---|---|"]
    for t in names:
        flag = " (under half)" if t in short else " (over twice)" if t in over else ""
        lines.append(f"| `{t}` | {made.get(t, 0)}{flag} | {planned.get(t, 0)} | {dropped.get(t, 0)} |")
    return lines
