"""The builder's fast paths give what the slow ones gave: the evidence head counted and cut in the database, and
clean queries on the verifier's second connection while an overlay shadows the first."""

from __future__ import annotations

import numpy as np
import pytest

from ehrgym.bench.noise import InjectContext
from ehrgym.bench.noise.base import BATCH_MAX
from ehrgym.bench.noise.values import finite
from ehrgym.bench.sampling import sample_candidates
from ehrgym.bench.templates.registry import all_templates
from ehrgym.bench.verify import PairVerifier
from ehrgym.db.overlay import Overlay, TableEdit


@pytest.fixture(scope="module")
def verifier(synth_db):
    v = PairVerifier(synth_db)
    yield v
    v.close()


def _slow_batch(ctx: InjectContext, order: str | None, finite_values: bool) -> tuple[int, list[dict]]:
    rows = ctx.evidence_rows(order=order, limit=None)
    if finite_values:
        rows = [r for r in rows if finite(r.get(ctx.evidence.value_col))]
    return len(rows), rows[:BATCH_MAX]


def test_evidence_batch_is_the_head_of_the_evidence_rows(verifier):
    checked, cut, filtered = 0, 0, 0
    for t in all_templates():
        if not t.evidence.value_col:
            continue
        # ineligible candidates too: some have evidence with NULL values, which the finite filter drops
        for c in sample_candidates(verifier.con, t, 4, 0)[:4]:
            ctx = InjectContext(verifier.clean_con, t, dict(c.params), None, np.random.default_rng(0))
            for order in {ctx.one_sided_order(), None}:
                for finite_values in (False, True):
                    fast, slow = ctx.evidence_batch(order, finite_values), _slow_batch(ctx, order, finite_values)
                    assert fast == slow, (t.id, c.params, order, finite_values)
                    checked += 1
                    cut += slow[0] > BATCH_MAX
                    filtered += finite_values and slow[0] < len(ctx.evidence_rows(order=order))
    # cohorts hold more rows than a batch takes, and some evidence has NULL values the filter drops
    assert checked >= 100 and cut >= 20 and filtered >= 1, (checked, cut, filtered)


def test_clean_queries_read_the_clean_database_while_an_overlay_shadows_it(verifier):
    scan = "SELECT * FROM mimiciv_hosp.labevents LIMIT 2000"  # no ORDER BY: rows in scan order
    count = "SELECT count(*) FROM mimiciv_hosp.labevents"
    verifier.clean()
    clean_scan, clean_count = verifier.con.execute(scan).fetchall(), verifier.con.execute(count).fetchall()
    assert verifier.clean_con.execute(scan).fetchall() == clean_scan  # the base tables, in the views' scan order
    overlay = Overlay((TableEdit("labevents", tuple(range(0, 40, 2)), (), (), None),))
    assert verifier.rows(count, overlay)[0][0] == clean_count[0][0] - 20
    assert verifier.rows(count) == clean_count
    # the overlay still shadows the first connection: a clean query did not re-point its views
    assert verifier.con.execute(count).fetchall()[0][0] == clean_count[0][0] - 20
    assert verifier.clean_con.execute(scan).fetchall() == clean_scan
    assert verifier.rows(count, overlay)[0][0] == clean_count[0][0] - 20
