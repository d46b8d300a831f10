"""The evidence-anomaly shortcut: can an agent tell the noisy twin by *whether* the evidence looks odd, without asking
whether the oddity changes the answer?

A clean twin is drawn only among entities whose evidence is naturally clean (:mod:`ehrgym.bench.sampling`: a
question whose own rows are duplicated, valueless or outside the stay has no defensible gold). Left at that, every
NULL, copy, contradiction, impossible value, second unit or out-of-stay row an agent finds in the rows it is asked
about was put there by the noise, and "abstain whenever the evidence looks odd" is a reward RL collects without
judging anything. The builder therefore serves most clean twins of data-level pairs a *decoy*
(:mod:`ehrgym.bench.decoys`): one anomaly of the pair's own kind, on a row that does not decide the answer and
verified not to change it under any reading. This module measures what is left, on the test split:

* ``clean_vs_noise``: the policy "the twin whose evidence has any anomaly is the noisy one", over the twins of pairs
  whose noise leaves a visible anomaly (every record- and value-level subtype but ``missing_evidence``); chance 0.5;
* ``answer_vs_abstain``: the policy "abstain when the evidence has an anomaly or no rows, else answer", scored against
  the expected outcome of every twin of a record- or value-level pair (the majority rate is the bar to compare with);
* ``lookup``: the expected outcome looked up by (template, the anomaly its evidence shows, or none) among train twins
  — a policy that knows which oddity goes with which outcome, without judging its effect; over all twins (where
  "no rows: abstain" is sound reasoning, not a shortcut) and over the twins whose evidence shows an anomaly
  (``lookup_when_odd``: there nothing but the anomaly's effect should tell; compare with its majority rate);
* per subtype: the share of noisy twins and of their clean twins whose evidence shows an anomaly.

The anomaly test is the sampler's own (``sampling.evidence_anomaly``) run on the served views of each twin.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from ehrgym.bench.sampling import PROFILE_COLUMNS, evidence_anomaly, profile_sql
from ehrgym.bench.task import Task
from ehrgym.bench.templates import all_templates
from ehrgym.db.overlay import overlay_connection
from ehrgym.vocab import NOISE_SUBTYPES

DATA_LEVELS = ("record", "value")
MAX_TRAIN_PAIRS = 400  # train pairs the lookup learns from (a hashed sample: each twin is one overlay query)
INVISIBLE = frozenset({"missing_evidence"})  # its noisy twin's rows are gone: nothing odd is left to see
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")


def _typed(params: dict[str, Any]) -> dict[str, Any]:
    """Entity parameters as the builder rendered them (timestamps back from their ISO text)."""
    return {k: dt.datetime.fromisoformat(v) if isinstance(v, str) and _STAMP.match(v) else v
            for k, v in params.items()}


def twin_anomalies(db: str | Path, tasks: list[Task], workers: int = 1) -> dict[str, str | None]:
    """task_id -> the anomaly its served evidence shows (``no_evidence`` when it has no rows; None: none)."""
    return {k: evidence_anomaly(p) for k, p in twin_profiles(db, tasks, workers).items()}


def twin_profiles(db: str | Path, tasks: list[Task], workers: int = 1) -> dict[str, dict[str, int]]:
    """task_id -> the profile of its served evidence (``sampling.PROFILE_COLUMNS``: rows, keys, NULLs …).

    ``workers`` > 1 reads the twins in that many worker processes (``python -m ehrgym.bench.worker``, as the
    build's): each profile is one query on its own twin's views, so the result does not depend on the split."""
    ordered = sorted(tasks, key=lambda x: x.task_id)
    parts = max(1, min(workers, len(ordered)))
    if parts == 1:
        return _profiles(str(db), ordered)
    from ehrgym.bench.builder import run_worker_processes

    got: dict[str, dict[str, int]] = {}
    for part in run_worker_processes([{"call": _profiles, "args": (str(db), ordered[k::parts])}
                                      for k in range(parts)]):
        got.update(part)
    return {t.task_id: got[t.task_id] for t in ordered if t.task_id in got}


def _profiles(db: str, tasks: list[Task]) -> dict[str, dict[str, int]]:
    templates = {t.id: t for t in all_templates()}
    con, session = overlay_connection(db)
    out: dict[str, dict[str, int]] = {}
    try:
        for task in tasks:
            t = templates.get(task.template_id)
            if t is None:
                continue
            entity = task.meta.get("noisy_entity") or task.meta.get("entity") or {}
            session.apply(task.overlay)
            cur = con.execute(profile_sql(t, "(SELECT 1 AS __one)", _typed(entity)))
            names = [d[0] for d in cur.description]
            got = dict(zip(names, cur.fetchone() or [0] * len(names)))
            out[task.task_id] = {k: int(got.get(k) or 0) for k in PROFILE_COLUMNS}
    finally:
        con.close()
    return out


def _data_pairs(tasks: list[Task], split: str) -> dict[str, dict[str, Task]]:
    pairs: dict[str, dict[str, Task]] = defaultdict(dict)
    for task in tasks:
        if task.split == split:
            pairs[task.pair_id][task.variant] = task
    return {pid: tw for pid, tw in sorted(pairs.items()) if len(tw) == 2 and tw["noise"].noise is not None
            and NOISE_SUBTYPES.get(tw["noise"].noise.subtype) in DATA_LEVELS}


def _sample(pairs: dict[str, dict[str, Task]], n: int) -> dict[str, dict[str, Task]]:
    """At most ``n`` pairs, the same ones whatever the order of the tasks (by a hash of the pair id)."""
    keep = sorted(pairs, key=lambda p: hashlib.sha256(p.encode()).hexdigest())[:n]
    return {p: pairs[p] for p in sorted(keep)}


def _majority(labels: list[str]) -> str:
    counts = Counter(labels)
    return min(counts, key=lambda k: (-counts[k], k))


def anomaly_shortcut(db: str | Path, tasks: list[Task], split: str = "test",
                     train_pairs: int = MAX_TRAIN_PAIRS, workers: int = 1) -> dict[str, Any]:
    """The policies of the module docstring on ``split``; the lookup learns from at most ``train_pairs`` train
    pairs; ``workers`` processes read the twins' evidence (same numbers for any count)."""
    data = _data_pairs(tasks, split)
    train = _sample(_data_pairs(tasks, "train"), train_pairs)
    profiles = twin_profiles(db, [t for group in (data, train) for tw in group.values() for t in tw.values()], workers)
    seen = {k: evidence_anomaly(p) for k, p in profiles.items()}

    def odd(task: Task) -> bool:
        return seen.get(task.task_id) not in (None, "no_evidence")

    def subtype(tw: dict[str, Task]) -> str:
        return tw["noise"].noise.subtype if tw["noise"].noise is not None else ""

    visible = [tw for tw in data.values() if subtype(tw) not in INVISIBLE]
    right = sum(odd(tw["noise"]) for tw in visible) + sum(not odd(tw["clean"]) for tw in visible)
    by: dict[str, dict[str, int]] = defaultdict(lambda: {"pairs": 0, "noise_odd": 0, "clean_odd": 0})
    for tw in data.values():
        b = by[subtype(tw)]
        b["pairs"] += 1
        b["noise_odd"] += odd(tw["noise"])
        b["clean_odd"] += odd(tw["clean"])
    twins = [t for tw in data.values() for t in tw.values()]
    abstains = [t.expected.kind == "abstain" for t in twins]
    says = [seen.get(t.task_id) is not None for t in twins]
    majority = max(sum(abstains), len(abstains) - sum(abstains)) / len(abstains) if twins else None
    # the lookup: (template, what its evidence shows) -> the train twins' most common expected outcome
    learnt: dict[tuple[str, str], list[str]] = defaultdict(list)
    for tw in train.values():
        for t in tw.values():
            learnt[(t.template_id, str(seen.get(t.task_id)))].append(t.expected.kind)
            learnt[("", str(seen.get(t.task_id)))].append(t.expected.kind)
    overall = _majority([k for tw in train.values() for t in tw.values() for k in [t.expected.kind]] or ["answer"])

    def lookup(t: Task) -> str:
        for key in ((t.template_id, str(seen.get(t.task_id))), ("", str(seen.get(t.task_id)))):
            if learnt.get(key):
                return _majority(learnt[key])
        return overall

    hits = [lookup(t) == t.expected.kind for t in twins]
    shown = [i for i, t in enumerate(twins) if odd(t)]  # twins whose evidence shows an anomaly

    def scored(idx: list[int]) -> dict[str, Any]:
        n_abstain = sum(abstains[i] for i in idx)
        return {"accuracy": round(sum(hits[i] for i in idx) / len(idx), 3) if idx else None,
                "majority": round(max(n_abstain, len(idx) - n_abstain) / len(idx), 3) if idx else None,
                "twins": len(idx)}
    return {
        "split": split,
        "pairs": len(data),
        "train_pairs": len(train),
        "clean_vs_noise": {"accuracy": round(right / (2 * len(visible)), 3) if visible else None,
                           "pairs": len(visible), "chance": 0.5},
        "answer_vs_abstain": {"accuracy": round(sum(a == s for a, s in zip(abstains, says)) / len(twins), 3)
                              if twins else None,
                              "majority": round(majority, 3) if majority is not None else None, "twins": len(twins)},
        "lookup": {"accuracy": round(sum(hits) / len(twins), 3) if twins else None,
                   "majority": round(majority, 3) if majority is not None else None, "twins": len(twins)},
        "lookup_when_odd": scored(shown),
        # of those, the twins with more than one evidence row: with one row the odd row is the answer itself, and
        # noticing it is judging it (an impossible age, a MIC that reads as nothing)
        "lookup_when_odd_many_rows": scored([i for i in shown if profiles[twins[i].task_id]["__n"] > 1]),
        "clean_odd_share": round(sum(odd(tw["clean"]) for tw in visible) / len(visible), 3) if visible else None,
        "noise_odd_share": round(sum(odd(tw["noise"]) for tw in visible) / len(visible), 3) if visible else None,
        "by_subtype": {k: {**v, "noise_odd_pct": round(100 * v["noise_odd"] / v["pairs"], 1),
                           "clean_odd_pct": round(100 * v["clean_odd"] / v["pairs"], 1)}
                       for k, v in sorted(by.items())},
    }
