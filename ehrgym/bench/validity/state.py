"""Database-state shortcut probe: can an agent tell a clean episode from a noisy one — or an expected
answer from an expected abstention — without reading the evidence, by comparing whole tables with what
it saw in other episodes on the same database?

Every episode of a benchmark runs on one database file; a clean twin is served the base tables
unchanged and a record- or value-level noisy twin the base plus its overlay. An agent that keeps
anything across episodes (an RL policy trained on the train split, a harness with memory, a prompt
with earlier trajectories) can learn one constant per table — ``SELECT count(*) FROM labevents`` or a
content checksum such as ``SELECT sum(hash(labevents)) FROM labevents`` — and compare: in a clean
episode every table matches it, in a noisy one the touched table does not, and the sign of the count
change (rows added: duplicates or conflicts; removed: missing evidence; unchanged: edited cells)
narrows the subtype. No evidence is inspected; this is the shortcut an RL policy finds first.

The probe computes, from each task's served overlay alone (exactly what those two queries would
return, relative to the clean database), per table the change in row count and whether any content
changed, and fits the depth-3 tree of :mod:`ehrgym.bench.artifacts` on the train split:

* ``clean_vs_noise``: all tasks, label clean/noisy (chance 0.5, twins balanced);
* ``answer_vs_abstain``: noisy tasks, label the expected outcome (chance: the test split's majority rate);
* ``detectable``: per subtype, the share of noisy test tasks whose served database differs from the
  clean one in some table (by count alone, and by content).

* ``items`` (given the database): the same question per item — the twins of each pair whose noise edits
  rows, with features read only from rows of the items the noise edits (the question's item: a
  creatinine, a care unit), as ``SELECT itemid, count(*), sum(hash(labevents)) … GROUP BY itemid``
  gives them. A background drawn from the whole table leaves most items as they are, the noise never
  leaves its own.

A valid benchmark keeps the first two (and ``items``) at chance. Serving the base unchanged to every clean twin fails
that by construction: every overlay is visible in a checksum. Hence the background overlay of each
pair (:mod:`ehrgym.bench.background`), served to both twins, so that no episode sees the base as such;
what the probe can still read is how far the noise's own edits move a table's fingerprint beyond the
background's.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ehrgym.bench.task import Task

BAR = 0.55  # clean vs noisy: at most this accuracy; answer vs abstain: at most the majority rate + 0.05
OUTCOME_SLACK = 0.05


def served_overlay_state(task: Task) -> dict[str, tuple[int, bool]]:
    """Per table the served overlay (background and noise) touches: (row count minus the clean database's,
    whether any content differs)."""
    overlay = task.overlay
    if overlay.is_empty:
        return {}
    out: dict[str, tuple[int, bool]] = {}
    for table, edit in overlay.merged().items():
        delta = len(edit.insert_rows) - len(set(edit.delete_rowids))
        out[table] = (delta, bool(edit.insert_rows or edit.delete_rowids))
    return out


def _features(tasks: Sequence[Task], tables: Sequence[str]) -> np.ndarray:
    """Per table its count change and content-changed flag, then over all tables: any content changed, the
    number of changed tables, and the summed count change (what one checksum query over every table gives)."""
    x = np.zeros((len(tasks), 2 * len(tables) + 3))
    col = {t: i for i, t in enumerate(tables)}
    for r, task in enumerate(tasks):
        state = served_overlay_state(task)
        for table, (delta, changed) in state.items():
            x[r, 2 * col[table]] = delta
            x[r, 2 * col[table] + 1] = float(changed)
        x[r, -3] = float(any(c for _, c in state.values()))
        x[r, -2] = sum(c for _, c in state.values())
        x[r, -1] = sum(d for d, _ in state.values())
    return x


def _fit_score(train: list[Task], test: list[Task], label: Any, tables: Sequence[str]) -> dict[str, Any]:
    return _fit(_features(train, tables), [label(t) for t in train], _features(test, tables), [label(t) for t in test])


def _fit(x_train: np.ndarray, labels_train: list[int], x_test: np.ndarray, labels_test: list[int]) -> dict[str, Any]:
    from ehrgym.bench.artifacts import DepthLimitedTree, balanced_accuracy
    from ehrgym.bench.validity.text import interval95

    y_train = np.array(labels_train, dtype=int)
    y_test = np.array(labels_test, dtype=int)
    out: dict[str, Any] = {"n_train": len(y_train), "n_test": len(y_test)}
    if not len(y_test) or len(set(y_train.tolist())) < 2:
        out["accuracy"] = None
        return out
    tree = DepthLimitedTree(depth=3).fit(x_train, y_train)
    pred = tree.predict(x_test)
    hit = pred == y_test
    share = float(y_test.mean())
    out.update(accuracy=round(float(hit.mean()), 4), interval95=interval95(int(hit.sum()), len(hit)),
               balanced_accuracy=round(balanced_accuracy(y_test, pred), 4), majority=round(max(share, 1 - share), 4))
    return out


def _item_values(db: str | Path, tasks: Sequence[Task]) -> dict[str, dict[int, str | None]]:
    """Per table with an item column: the item of every base row some served overlay deletes."""
    import duckdb
    import pyarrow as pa

    from ehrgym.bench.background import ITEM_COLUMN
    from ehrgym.db.schema import table_spec

    need: dict[str, set[int]] = defaultdict(set)
    for t in tasks:
        for e in t.overlay.edits:
            if e.table in ITEM_COLUMN:
                need[e.table].update(e.delete_rowids)
    out: dict[str, dict[int, str | None]] = {}
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table, rowids in sorted(need.items()):
            wanted = pa.table({"r": pa.array(sorted(rowids), pa.int64())})  # noqa: F841 (read by DuckDB)
            out[table] = dict(con.execute(
                f"SELECT t.rowid, CAST(t.{ITEM_COLUMN[table]} AS VARCHAR) FROM {table_spec(table).qualified} t "
                f"JOIN wanted ON t.rowid = wanted.r").fetchall())
    finally:
        con.close()
    return out


@dataclass(frozen=True)
class ItemChange:
    """One pair's twins seen through the items its noise edits: per twin the row-count change of those items and
    how many tables changed rows of them (``count(*)`` and ``sum(hash(t))`` ``GROUP BY itemid`` against the clean
    database)."""

    split: str
    subtype: str
    clean_delta: int
    clean_changed: int
    noisy_delta: int
    noisy_changed: int


def item_changes(db: str | Path, tasks: Sequence[Task]) -> list[ItemChange]:
    """:class:`ItemChange` of every pair whose noise edits rows of a table with an item column, in pair order."""
    from ehrgym.bench.background import ITEM_COLUMN

    values = _item_values(db, tasks)
    by_pair: dict[str, dict[str, Task]] = defaultdict(dict)
    for t in tasks:
        by_pair[t.pair_id][t.variant] = t

    def item_of(table: str, row: dict[str, Any]) -> str | None:
        v = row.get(ITEM_COLUMN[table])
        return None if v is None else str(v)

    out: list[ItemChange] = []
    for pair_id in sorted(by_pair):
        pair = by_pair[pair_id]
        noisy = pair.get("noise")
        if noisy is None or noisy.noise is None or "clean" not in pair:
            continue
        items: dict[str, set[str | None]] = defaultdict(set)
        for table, edit in noisy.noise.overlay.merged().items():
            if table in ITEM_COLUMN:
                items[table] |= {values[table].get(r) for r in edit.delete_rowids}
                items[table] |= {item_of(table, r) for r in edit.insert_rows}
        if not items:
            continue
        seen: list[int] = []
        for variant in ("clean", "noise"):
            delta = changed = 0
            for table, edit in pair[variant].overlay.merged().items():
                if table not in items:
                    continue
                lost = sum(values[table].get(r) in items[table] for r in set(edit.delete_rowids))
                added = sum(item_of(table, r) in items[table] for r in edit.insert_rows)
                delta += added - lost
                changed += bool(lost or added)
            seen += [delta, changed]
        out.append(ItemChange(noisy.split, noisy.noise.subtype, *seen))
    return out


def item_validity(db: str | Path, tasks: Sequence[Task]) -> dict[str, Any]:
    """The per-item probe (``items`` in the module docstring): clean vs noisy twin, on pairs whose noise edits
    rows of a table with an item column, from (count change, content changed) restricted to those items."""
    rows: dict[str, tuple[list[list[float]], list[int]]] = {"train": ([], []), "test": ([], [])}
    for c in item_changes(db, tasks):
        if c.split not in rows:
            continue
        rows[c.split][0].extend([[c.clean_delta, c.clean_changed], [c.noisy_delta, c.noisy_changed]])
        rows[c.split][1].extend([0, 1])
    (x_train, y_train), (x_test, y_test) = rows["train"], rows["test"]
    report = _fit(np.array(x_train, dtype=float).reshape(-1, 2), y_train,
                  np.array(x_test, dtype=float).reshape(-1, 2), y_test)
    clean_changed = [x[1] > 0 for x, y in zip(x_test, y_test) if y == 0]
    report["clean_item_changed"] = round(sum(clean_changed) / max(1, len(clean_changed)), 4)
    return report


def state_validity(tasks: Iterable[Task], db: str | Path | None = None) -> dict[str, Any]:
    """The database-state probes of a built benchmark (see the module docstring); ``items`` needs the database.
    Deterministic."""
    tasks = sorted(tasks, key=lambda t: t.task_id)
    tables = sorted({table for t in tasks for table in served_overlay_state(t)})
    train = [t for t in tasks if t.split == "train"]
    test = [t for t in tasks if t.split == "test"]
    report: dict[str, Any] = {"tables": tables, "bar": BAR}
    report["clean_vs_noise"] = _fit_score(train, test, lambda t: int(t.variant == "noise"), tables)
    noisy = [t for t in train if t.variant == "noise"], [t for t in test if t.variant == "noise"]
    report["answer_vs_abstain"] = _fit_score(noisy[0], noisy[1], lambda t: int(t.expected.is_abstain), tables)
    by: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for t in noisy[1]:
        state = served_overlay_state(t)
        key = f"{t.noise.subtype if t.noise is not None else '?'}:{t.expected.kind}"
        by[key].append((any(d != 0 for d, _ in state.values()), any(c for _, c in state.values())))
    report["detectable"] = {k: {"tasks": len(v), "by_count": round(sum(a for a, _ in v) / len(v), 4),
                                "by_content": round(sum(b for _, b in v) / len(v), 4)}
                            for k, v in sorted(by.items())}
    report["clean_served_as_base"] = round(
        sum(not served_overlay_state(t) for t in test if t.variant == "clean")
        / max(1, sum(t.variant == "clean" for t in test)), 4)
    if db is not None:
        report["items"] = item_validity(db, tasks)
    return report


def state_passes(report: dict[str, Any]) -> bool:
    """Whether both probes stay at chance (the validity target)."""
    cvn, ava = report["clean_vs_noise"], report["answer_vs_abstain"]
    items = report.get("items", {})
    return ((cvn.get("accuracy") is None or cvn["accuracy"] <= BAR)
            and (ava.get("accuracy") is None or ava["accuracy"] <= ava["majority"] + OUTCOME_SLACK)
            and (items.get("accuracy") is None or items["accuracy"] <= BAR))
