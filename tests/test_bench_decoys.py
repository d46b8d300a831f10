"""Decoys: a clean twin's evidence must not be pristine by selection (``ehrgym.bench.decoys``), or "any oddity in
the rows means the noisy twin" scores perfectly (``ehrgym.bench.validity.anomaly``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from ehrgym.bench.build import build_benchmark
from ehrgym.bench.configs import CONFIGS
from ehrgym.bench.decoys import DECOYED, UNREADABLE, readings
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.noise.base import Injection
from ehrgym.bench.task import load_tasks_jsonl
from ehrgym.bench.templates import all_templates
from ehrgym.bench.validity.anomaly import anomaly_shortcut, twin_anomalies
from ehrgym.bench.verify import PairVerifier
from ehrgym.bench.verify import _match as answers_agree
from ehrgym.db.overlay import Overlay, TableEdit

CONFIG = replace(CONFIGS["small"], pairs=400)


@pytest.fixture(scope="module")
def builds(synth_db, tmp_path_factory):
    root = tmp_path_factory.mktemp("decoys")
    # no card sections: these tests read the tasks and the build report (the card's own tests are elsewhere)
    with_decoys = build_benchmark(synth_db, root / "with", config=CONFIG, seed=2, progress=False, validity=[])
    without = build_benchmark(synth_db, root / "without", config=replace(CONFIG, decoys=False), seed=2,
                              progress=False, validity=[])
    return (load_tasks_jsonl(root / "with" / "tasks.jsonl"), with_decoys,
            load_tasks_jsonl(root / "without" / "tasks.jsonl"), without)


def test_decoys_go_to_clean_twins_of_visible_data_noise_only(builds):
    tasks, result, *_ = builds
    served = [t for t in tasks if not t.decoy.is_empty]
    assert served, "no clean twin was served a decoy"
    subtype = {t.pair_id: t.noise.subtype for t in tasks if t.noise is not None}
    assert all(t.variant == "clean" for t in served)
    assert all(subtype[t.pair_id] in DECOYED for t in served)
    assert all(t.meta["decoy"]["subtype"] == subtype[t.pair_id] for t in served)  # the pair's own kind
    counts = result.report["decoys"]
    assert sum(v["served"] for v in counts.values()) == len(served)
    assert set(counts) <= DECOYED
    # the served overlay is background + decoy; the noisy twin's is background + noise
    for t in served:
        assert t.overlay.edits == t.background.edits + t.decoy.edits


def test_a_decoy_never_changes_the_clean_answer_and_is_visible(builds, synth_db):
    tasks, *_ = builds
    served = [t for t in tasks if not t.decoy.is_empty]
    seen = twin_anomalies(synth_db, served)
    verifier = PairVerifier(synth_db)
    try:
        for t in served:
            got = verifier.value(t.gold_sql, t.expected.answer, t.overlay)
            assert answers_agree(t.expected.value, got, t.expected.answer), (t.task_id, t.meta["decoy"])
    finally:
        verifier.close()
    # most decoys show in the evidence as the sampler would flag natural noise (an out-of-window copy of a stay
    # whose window the profile does not join is the exception)
    assert sum(v is not None for v in seen.values()) >= 0.8 * len(served)


def test_decoys_break_the_any_anomaly_shortcut(builds, synth_db):
    tasks, _, plain, _ = builds
    before = anomaly_shortcut(synth_db, plain, split="train", train_pairs=200)
    after = anomaly_shortcut(synth_db, tasks, split="train", train_pairs=200)
    # without decoys every clean twin's evidence is pristine: the oddity alone names the noisy twin
    assert before["clean_odd_share"] == 0.0 and before["clean_vs_noise"]["accuracy"] == 1.0
    assert after["clean_odd_share"] >= 0.25
    assert after["clean_vs_noise"]["accuracy"] <= before["clean_vs_noise"]["accuracy"] - 0.1
    assert after["lookup_when_odd"]["accuracy"] < before["lookup_when_odd"]["accuracy"]


def _template(subtype: str):
    return next(t for t in all_templates() if INJECTORS[subtype].can_corrupt(t) and t.evidence.item_param
                and t.evidence.value_col and t.evidence.table == "labevents")


def test_readings_cover_every_way_the_decoy_may_be_true():
    t = _template("missing_value")
    row = {"subject_id": 1, "hadm_id": 2, "itemid": 50912, t.evidence.value_col: None, "charttime": "2150-01-01"}
    served = Overlay((TableEdit("labevents", (5,), (row,), (5,)),))
    inj = Injection(INJECTORS["missing_value"].spec(served), "abstain", "insufficient_evidence")
    worlds = readings(t, "missing_value", inj, {t.evidence.item_param: 50912})
    assert "missing_value" in UNREADABLE
    values = [w.edits[0].insert_rows[0][t.evidence.value_col] for w, _ in worlds]
    assert values[0] is None and len(worlds) == 3  # as served, then either end of creatinine's plausible range
    assert values[1] < values[2]
    # a contradiction adds the world where the other record is the true one; a clean-up reading for answered noise
    alt = Overlay((TableEdit("labevents", (5,), ({**row, t.evidence.value_col: 1.0},), (5,)),))
    conflict = Injection(INJECTORS["conflicting_records"].spec(served), "abstain", "conflicting_evidence",
                         alternative=alt)
    assert [w for w, _ in readings(t, "conflicting_records", conflict, {})][1] is alt
    dup = Injection(INJECTORS["duplicate_records"].spec(served), "answer", cleaners=(lambda *a: "",))
    assert [cleaned for _, cleaned in readings(t, "duplicate_records", dup, {})] == [False, True]


def test_build_without_decoys_is_the_previous_benchmark(builds):
    _, _, plain, report = builds
    assert all(t.decoy.is_empty for t in plain)
    assert all("decoy" not in t.to_dict() for t in plain)
    assert Counter(v["served"] for v in report.report["decoys"].values()) == Counter({0: len(report.report["decoys"])})


def test_the_skeptic_judges_a_contradiction_by_its_effect(builds, synth_db, tmp_path):
    """A generic checker that abstains on every contradiction fails the decoyed clean twins; the skeptic believes
    each side in turn and abstains only when that changes the answer."""
    from ehrgym.eval.runner import run_evaluation
    from ehrgym.eval.store import EpisodeStore

    tasks, result, *_ = builds
    clean = [t.task_id for t in tasks if t.meta.get("decoy", {}).get("subtype") == "conflicting_records"]
    noisy = [t.task_id for t in tasks if t.noise is not None and t.noise.subtype == "conflicting_records"]
    assert len(clean) >= 3
    run_evaluation(result.out, synth_db, "skeptic", tmp_path / "sk", k=1, tasks=clean + noisy, progress=False)
    got = {r.task_id: r.success_strict for r in EpisodeStore(tmp_path / "sk").records()}
    assert sum(got[t] for t in clean) >= 0.8 * len(clean)  # answered, correctly, through the harmless one
    assert sum(got[t] for t in noisy) >= 0.8 * len(noisy)  # abstained on the one that matters


def test_a_conflicting_decoy_contradicts_its_row_either_way(builds, synth_db):
    """The noise's contradiction goes the way that changes the answer (above a maximum); a decoy's goes either way.
    Sent the noise's way, only readings that stayed under the maximum were kept, and a susceptibility's MIC there is
    a rare uncensored intermediate step ('4', 'I') that told decoys from the base rows beside them."""
    import duckdb

    from ehrgym.db.schema import table_spec

    templates = {t.id: t for t in all_templates()}
    sides: Counter[str] = Counter()
    con = duckdb.connect(str(synth_db), read_only=True)
    try:
        for task in builds[0]:
            t = templates[task.template_id]
            ev = t.evidence
            if task.meta.get("decoy", {}).get("subtype") != "conflicting_records" or not ev.value_col \
                    or ev.focus not in ("max", "min"):
                continue
            for e in task.decoy.edits:
                for row, anchor in zip(e.insert_rows, e.insert_after):
                    was = con.execute(f"SELECT {ev.value_col} FROM {table_spec(e.table).qualified} WHERE rowid = ?",
                                      [anchor]).fetchone()[0]
                    if row.get(ev.value_col) is not None and was is not None and row[ev.value_col] != was:
                        toward = (row[ev.value_col] > was) == ((ev.focus == "max") == (t.answer.type == "number"))
                        sides["the noise's way" if toward else "the other way"] += 1
    finally:
        con.close()
    # kept decoys on the noise's way are only those that stayed under the maximum; the other way always leaves it
    assert sum(sides.values()) >= 4 and sides["the noise's way"] >= 1, sides
    assert sides["the other way"] >= 0.25 * sum(sides.values()), sides


def test_unreadable_value_decoys_are_timed_like_the_deciding_row(synth_db):
    # missing- and implausible-value noise edits the deciding row in place; where that is a stay's first charted slot
    # it is always on the hour, and decoys on any row were off the hour in 5 of 27 chart pairs of the 1k card against
    # none of their noise rows (missing-value noise told from its decoys at 0.579). Other subtypes keep the hashed
    # order (encoding-corruption decoys sent there moved away from the base rows beside them: 0.533 -> 0.585)
    import datetime as dt

    import numpy as np

    from ehrgym.bench.decoys import TIMED_LIKE_DECIDING, targets
    from ehrgym.bench.noise import InjectContext
    from ehrgym.bench.sampling import sample_candidates

    assert TIMED_LIKE_DECIDING == {"missing_value", "implausible_value"}

    def on_the_hour(value) -> bool:
        t = dt.datetime.fromisoformat(str(value))
        return t.minute == 0 and t.second == 0

    v = PairVerifier(synth_db)
    matched = unmatched_plain = 0
    try:
        for t in all_templates():
            ev = t.evidence
            if ev.table != "chartevents" or not ev.time_col:
                continue
            for c in sample_candidates(v.con, t, 5, 0)[:5]:
                ctx = InjectContext(v.clean_con, t, dict(c.params), None, np.random.default_rng(0))
                rows = ctx.evidence_rows()
                if len(rows) < 3:
                    continue
                deciding = on_the_hour(rows[0][ev.time_col])
                like = [r for r in rows[1:] if on_the_hour(r[ev.time_col]) == deciding]
                when = {int(r["__rowid"]): on_the_hour(r[ev.time_col]) for r in rows}
                got = targets(ctx, set(), 7, timed_like_deciding=True)
                assert set(got) <= set(when) - {int(rows[0]["__rowid"])}
                if len(like) >= len(got):
                    assert all(when[r] == deciding for r in got), (t.id, c.params)
                    matched += len(got)
                plain = targets(ctx, set(), 7)
                unmatched_plain += sum(when[r] != deciding for r in plain)
    finally:
        v.close()
    assert matched >= 10
    assert unmatched_plain >= 1  # the plain order does send decoys off the deciding row's time: the test can fail


def test_make_decoy_times_only_unreadable_value_decoys_like_the_deciding_row(synth_db, monkeypatch):
    import numpy as np

    from ehrgym.bench import decoys
    from ehrgym.bench.noise import INJECTORS, InjectContext
    from ehrgym.bench.sampling import sample_candidates
    from ehrgym.db.overlay import Overlay

    asked: dict[str, bool] = {}

    def recorder(ctx, avoid, seed, timed_like_deciding=False):
        asked[current] = timed_like_deciding
        return []

    monkeypatch.setattr(decoys, "targets", recorder)
    v = PairVerifier(synth_db)
    try:
        for subtype in ("missing_value", "implausible_value", "encoding_corruption", "conflicting_records"):
            for t in all_templates():
                inj = INJECTORS[subtype]
                if t.evidence.table != "chartevents" or not inj.can_corrupt(t):
                    continue
                c = sample_candidates(v.con, t, 5, 0)[0]
                if not inj.accepts(t, c.params):
                    continue
                current = subtype
                ctx = InjectContext(v.clean_con, t, dict(c.params), None, np.random.default_rng(0))
                assert decoys.make_decoy(v, t, subtype, ctx, Overlay(), "SELECT 1", 7) is None
                break
    finally:
        v.close()
    assert asked == {"missing_value": True, "implausible_value": True, "encoding_corruption": False,
                     "conflicting_records": False}
