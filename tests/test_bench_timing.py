"""The timing side-channel probe (ehrgym.bench.validity.timing): it times what it says, and it sees a channel
when one is there (a positive control), so that its near-chance numbers on real builds mean something."""

from __future__ import annotations

from dataclasses import replace

import duckdb
import numpy as np
import pytest
from scipy.stats import spearmanr

from ehrgym.bench.build import build_benchmark
from ehrgym.bench.configs import BuildConfig
from ehrgym.bench.templates import all_templates
from ehrgym.bench.validity.timing import evidence_table, time_episodes, timed_pairs, timing_report
from ehrgym.db.overlay import END, Overlay, TableEdit, fetch_rows


@pytest.fixture(scope="module")
def tiny(synth_db, tmp_path_factory):
    templates = [t for t in all_templates() if t.intent == "labs"]
    return build_benchmark(synth_db, tmp_path_factory.mktemp("timing") / "b", config=BuildConfig("tiny", 40,
                           min_candidates=12), seed=2, progress=False, templates=templates)


def test_only_twins_served_different_data_are_timed(tiny, synth_db):
    pairs = timed_pairs(tiny.tasks, per_split=1000)
    assert pairs and all(c.variant == "clean" and n.variant == "noise" and c.pair_id == n.pair_id for c, n in pairs)
    assert all(c.overlay != n.overlay for c, n in pairs)
    skipped = {t.pair_id for t in tiny.tasks} - {c.pair_id for c, _ in pairs}
    assert all(t.overlay == next(u for u in tiny.tasks if u.pair_id == t.pair_id and u.variant == "clean").overlay
               for t in tiny.tasks if t.pair_id in skipped and t.variant == "noise" and t.split in ("train", "test"))
    assert len(timed_pairs(tiny.tasks, per_split=2)) <= 4
    rows = time_episodes(synth_db, pairs[:6], repeats=2)
    assert len(rows) == 12 and {r.noisy for r in rows} == {True, False}
    assert all(0 < r.best_ms and 0 < r.first_ms for r in rows)
    assert all(r.table == evidence_table(n) for r, (_, n) in zip(rows[::2], pairs[:6]))


def test_the_probe_reads_a_channel_that_is_there(tiny, synth_db):
    """Positive control: noisy twins whose view carries 400 extra literal rows are told from clean twins served the
    base (no background): the probe is not blind."""
    report = timing_report(time_episodes(synth_db, _heavy_pairs(tiny, synth_db), repeats=2))
    assert report["noisy_slower_best"]["share"] >= 0.9  # best of 2: robust to a load spike
    assert report["clean_vs_noise"]["balanced_accuracy"] >= 0.8
    assert report["passes"] is False


def test_timing_probe_cli(tiny, synth_db, tmp_path):
    import json

    from click.testing import CliRunner

    from ehrgym.cli import cli

    res = CliRunner().invoke(cli, ["bench", "timing-probe", str(tiny.out), "--per-split", "4", "--repeats", "1",
                                   "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["pairs_timed"] <= 8 and set(report["clean_vs_noise"]) >= {"n_train", "n_test"}
    res = CliRunner().invoke(cli, ["bench", "timing-probe", str(tiny.out), "--per-split", "4", "--repeats", "1"])
    assert res.exit_code == 0 and "clean vs noisy from timings" in res.output
    res = CliRunner().invoke(cli, ["bench", "timing-probe", str(tiny.out), "--db", str(tmp_path / "none.duckdb")])
    assert res.exit_code != 0 and "does not exist" in str(res.exception or res.output)


def _heavy_pairs(tiny, synth_db, n: int = 24, rows: int = 400):
    """Positive-control twins: clean served the base, noisy a view of its evidence table carrying ``rows`` extra
    rows (400 cost a whole-table count about 60 ms more on the test machine, 100 about 15 ms)."""
    from ehrgym.bench.templates.registry import get_template

    pairs = timed_pairs(tiny.tasks, per_split=1000)[:n]
    out = []
    for i, (clean, noisy) in enumerate(pairs):
        table = get_template(noisy.template_id).evidence.table
        con = duckdb.connect(str(synth_db), read_only=True)
        try:
            row = fetch_rows(con, table, [0])[0]
        finally:
            con.close()
        edit = TableEdit(table, (), (row,) * rows, (END,) * rows)
        split = "train" if i % 2 == 0 else "test"
        out.append((replace(clean, split=split, background=Overlay()),
                    replace(noisy, split=split, background=Overlay(),
                            noise=replace(noisy.noise, overlay=Overlay((edit,))))))
    return out


def test_the_sql_reply_quantum_hides_what_a_cell_could_time(tiny, synth_db):
    """Through real episodes: without the Python tool's reply quantum a cell times the heavy view as slower; with a
    quantum longer than the difference every call takes one quantum and the twins time alike (a difference longer
    than the quantum still shows, as whole quanta)."""
    pytest.importorskip("ehrgym.env.pyworker")
    from ehrgym.bench.validity.timing import time_episodes_env

    heavy = _heavy_pairs(tiny, synth_db, n=16, rows=100)
    # the best of three calls: a load spike on the shared machine (the suite runs in two worker processes) can
    # slow one call of a clean twin, not all three
    bare = timing_report(time_episodes_env(synth_db, heavy, repeats=3, quantum_ms=0))
    assert bare["noisy_slower_best"]["share"] >= 0.9
    rows = time_episodes_env(synth_db, heavy, repeats=2, quantum_ms=60)
    assert all(60 * 0.98 <= r.best_ms < 2 * 60 for r in rows)
    # within one quantum which twin's reply came back later is a coin: a two-sided sign test over the 16 pairs
    # (a one-in-a-hundred draw of 13 of 16 is no channel; 15 of 16 is one in two thousand)
    held = timing_report(rows)
    assert held["noisy_slower_first"]["p_value"] >= 0.001 and held["noisy_slower_best"]["p_value"] >= 0.001, held


def test_real_twins_time_alike_in_cells_with_the_default_limits(tiny, synth_db):
    """A build's own twins through episodes with the Python tool's default limits: every sql() call a cell times
    takes whole quanta (the default is not 0), and within a quantum the reply's time says nothing of the query's cost
    (between the twins of a pair: what the noise adds to a query's cost must not show in the reply's residue).

    What the quantum does not hide, by design, is a cost difference that crosses a quantum boundary: a noisy twin's
    view carries its background's edits plus the noise's, so it is never cheaper, and under the shared machine's
    load (which stretches every cost) it crossed into the next quantum in up to 25 of 30 comparisons. That residue
    is measured where it matters, by the timing probe's classifier on a full build (``ehrgym bench timing-probe``:
    balanced accuracy 0.51 on the make-reproduce benchmark), not by a sign count on 15 pairs under load."""
    pytest.importorskip("ehrgym.env.pyworker")
    from ehrgym.bench.validity.timing import time_episodes_env
    from ehrgym.env.pyworker import PythonLimits

    quantum = PythonLimits().sql_time_quantum_ms
    assert quantum >= 10
    # the build holds 15 timed pairs; two rounds of timing give 30 comparisons, so that a one-in-forty draw of the
    # shared machine's load (13 of 15 noisy twins slower in one CI run, 0.53-0.6 in repeated quiet and loaded
    # runs) does not decide the test
    pairs = timed_pairs(tiny.tasks, per_split=1000)[:20]
    rows = [replace(r, pair_id=f"{r.pair_id}#{round_}") for round_ in range(2)
            for r in time_episodes_env(synth_db, pairs, repeats=3)]

    def residue(best_ms: float) -> float:
        """The time past the last whole quantum (a call that lands 2 % early counts as on it)."""
        return best_ms - quantum * ((best_ms + 0.02 * quantum) // quantum)

    def whole_quanta(best_ms: float) -> bool:
        return best_ms >= quantum * 0.98 and residue(best_ms) < 0.38 * quantum

    # load only ever adds time: a call that ran over its quantum in all three repeats is timed again (best of
    # more calls), so that one busy moment of the shared machine does not decide the test; the replies must
    # still land on whole quanta
    late = [r for r in rows if not whole_quanta(r.best_ms)]
    assert len(late) <= len(rows) // 3, sorted(r.best_ms for r in rows)
    for _ in range(3):
        if not late:
            break
        again = [p for p in pairs if any(r.pair_id.split("#")[0] == p[0].pair_id for r in late)]
        redeemed = {(r.pair_id, r.noisy) for r in time_episodes_env(synth_db, again, repeats=5)
                    if whole_quanta(r.best_ms)}
        late = [r for r in late if (r.pair_id.split("#")[0], r.noisy) not in redeemed]
    assert not late, sorted(r.best_ms for r in rows)

    # within its quantum the reply's residue (send and unpickle) is read by the cell to the microsecond: between the
    # twins of a pair (the same question on the same table) it must not follow what the noise added to the query's
    # cost (timed without the quantum in the same run). Across pairs the residue may follow the table read (a larger
    # table's query leaves the reply slightly slower: rank correlation 0.58-0.80 over all replies on a quiet machine,
    # where the twins' differences correlated at -0.09-0.24): that names the table, which the agent chose to read
    cost = {(r.pair_id, r.noisy): r.best_ms for r in time_episodes_env(synth_db, pairs, repeats=3, quantum_ms=0)}
    by_twin = {(r.pair_id, r.noisy): residue(r.best_ms) for r in rows if whole_quanta(r.best_ms)}
    both = sorted({p for p, _ in by_twin if (p, True) in by_twin and (p, False) in by_twin})
    assert len(both) >= len(rows) // 4, (len(both), len(rows))
    # one point per pair (its rounds' residue gaps averaged): the two rounds share a pair's cost gap, and counted
    # twice they made ~15 independent points look like 30 — a loaded CI run read 0.549 against the 0.5 bar that
    # quiet runs (-0.09-0.24) stayed far below. Where the quantum failed to hide the cost, the residue gap would be the
    # cost gap (rank correlation near 1); 0.7 is 2.6 standard deviations of the no-leak correlation over 15 pairs
    gaps: dict[str, list[float]] = {}
    for p in both:
        gaps.setdefault(p.split("#")[0], []).append(by_twin[(p, True)] - by_twin[(p, False)])
    residue_gap = [float(np.mean(g)) for g in gaps.values()]
    cost_gap = [cost[(p, True)] - cost[(p, False)] for p in gaps]
    rho = spearmanr(cost_gap, residue_gap).statistic
    assert rho < 0.7, (rho, sorted(zip(cost_gap, residue_gap)))
