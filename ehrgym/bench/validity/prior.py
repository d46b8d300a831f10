"""The answer prior: what a policy scores that answers from the template alone, without reading any data.

A template whose clean answer is mostly one value — one culture, no readmission, "no organism", the
Medicine service — can be answered from its wording: a policy that says each template's most common
training answer collects that reward with no query at all, and RL finds such a template at once. The
builder therefore keeps any one clean answer to at most ``BuildConfig.max_answer_share`` of a
template's pairs (step 6 of the plan, :func:`ehrgym.bench.configs.answer_allowed`); this module
measures what is left:

* the prior policy: per template, the most common clean answer of its train pairs (ties: the
  answer that sorts first as JSON), scored on the test split with the strict verifier — on clean
  twins, and on noisy twins (an abstention it never gives counts as wrong); the lookup policy the
  same per template and concept named (``configs.spread_groups``: "blood culture", "E. coli and
  meropenem"), falling back to the template's answer for a concept no train pair names;
* ``spread``: per template, the share of its pairs whose clean answer is its most common one, over
  the whole benchmark; templates above the bar are listed.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from typing import Any, Iterable

from ehrgym.bench.answers import NotComparable, answer_key, answers_match
from ehrgym.bench.configs import spread_groups
from ehrgym.bench.task import Task

BAR = 0.5  # the most common clean answer of a template holds at most this share of its pairs, rounded up
MIN_PAIRS = 4  # templates with fewer pairs are not held to the bar (2 of 3 is the closest a build can come)


def _most_common(keys: Iterable[str]) -> tuple[str, int, int]:
    """(answer, its count, all) of the most common answer; ties broken by the answer's JSON."""
    counts = Counter(keys)
    key, n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return key, n, sum(counts.values())


def _groups(task: Task) -> tuple[Any, ...]:
    return spread_groups(task.template_id, (task.meta or {}).get("entity") or {})


def _excess(spread: dict[str, Any], bar: float) -> int:
    """Pairs with the most common answer beyond ``bar`` of them rounded up (the cap's own limit: 4 of 7). The
    build's balancing can drop a pair of another answer after the cap let one in, so 1 is possible (5 of 8)."""
    return round(spread["share"] * spread["pairs"]) - math.ceil(bar * spread["pairs"] - 1e-9)


def _correct(task: Task, guess: Any) -> bool:
    if task.expected.kind != "answer":
        return False
    try:
        return answers_match(task.expected.value, guess, task.expected.answer)
    except NotComparable:
        return False


def answer_prior(tasks: list[Task], bar: float = BAR, top: int = 8) -> dict[str, Any]:
    """The prior policy's test scores and each template's answer spread (see the module docstring)."""
    # per spread group — (template, ()) and (template, concept named): its clean answers, all and train only
    every: dict[Any, list[str]] = defaultdict(list)
    train: dict[Any, list[str]] = defaultdict(list)
    for t in tasks:
        if t.variant == "clean":
            key = answer_key(t.expected.value)
            for group in _groups(t):
                every[group].append(key)
                if t.split == "train":
                    train[group].append(key)
    most = {group: _most_common(keys) for group, keys in train.items()}
    guess = {tid: m for (tid, concept), m in most.items() if not concept}
    scored: dict[tuple[str, str], list[bool]] = defaultdict(list)
    looked: dict[str, list[bool]] = defaultdict(list)
    for t in tasks:
        if t.split == "test":
            g = guess.get(t.template_id)
            scored[(t.template_id, t.variant)].append(g is not None and _correct(t, json.loads(g[0])))
            found = [most[c] for c in _groups(t)[1:] if c in most]
            g = found[0] if found else g
            looked[t.variant].append(g is not None and _correct(t, json.loads(g[0])))

    def pct(xs: list[bool]) -> float | None:
        return round(100 * sum(xs) / len(xs), 1) if xs else None

    variants = {v: [ok for (_, var), oks in scored.items() if var == v for ok in oks] for v in ("clean", "noise")}
    by_template = []
    for (tid, variant), oks in scored.items():
        if variant == "clean" and tid in guess:
            key, n, total = guess[tid]
            by_template.append({"template": tid, "test_pairs": len(oks), "clean_pct": pct(oks),
                                "answer": json.loads(key), "train_share": round(n / total, 3)})
    by_template.sort(key=lambda r: (-sum(scored[(r["template"], "clean")]), r["template"]))
    spread: dict[str, dict[str, Any]] = {}  # per template
    above: dict[str, dict[str, Any]] = {}  # templates and concept groups over the cap's own limit (4 of 7)
    for (tid, concept), keys in sorted(every.items()):
        key, n, total = _most_common(keys)
        s = {"pairs": total, "answer": json.loads(key), "share": round(n / total, 3)}
        if not concept:
            spread[tid] = s
        if total >= MIN_PAIRS and _excess(s, bar) > 0:
            name = f"{tid} ({', '.join(v for _, v in concept)})" if concept else tid
            above[name] = {**s, "excess": _excess(s, bar)}
    unseen = sorted({t.template_id for t in tasks if t.split == "test"} - set(guess))
    shares = sorted(s["share"] for s in spread.values() if s["pairs"] >= MIN_PAIRS)
    return {"clean_pct": pct(variants["clean"]), "noise_pct": pct(variants["noise"]),
            "lookup_clean_pct": pct(looked["clean"]), "lookup_noise_pct": pct(looked["noise"]),
            "test_clean": len(variants["clean"]), "templates_not_in_train": len(unseen), "bar": bar,
            "min_pairs": MIN_PAIRS, "median_share": shares[len(shares) // 2] if shares else None,
            "max_share": shares[-1] if shares else None, "above_bar": above, "top_templates": by_template[:top],
            "spread": spread}
