"""The small build on the synthetic database: verification properties, splits, files, loading, CLI."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from ehrgym.bench.answers import NotComparable, answers_match, gold_from_rows
from ehrgym.bench.build import build_benchmark
from ehrgym.bench.card import card_markdown
from ehrgym.bench.configs import CONFIGS, BuildConfig
from ehrgym.bench.dataset import load_benchmark
from ehrgym.bench.task import load_tasks_jsonl
from ehrgym.bench.templates import all_templates
from ehrgym.bench.noise import INJECTORS
from ehrgym.bench.verify import PairVerifier
from ehrgym.db.connect import open_database, read_meta
from ehrgym.errors import BenchmarkError, TaskFormatError
from ehrgym.vocab import NOISE_SUBTYPES

DETERMINISTIC_FILES = ("tasks.jsonl", "tasks.parquet", "card.json", "card.md", "manifest.json")


@pytest.fixture(scope="module")
def small(small_build):
    return small_build  # the run's shared "small" build (tests/conftest.py); read only


def test_small_build_meets_its_plan(small):
    bench = load_benchmark(small.out)
    assert small.report["kept_pairs"] == CONFIGS["small"].pairs == len(bench.pairs())
    assert small.report["shortfall"] == 0
    noise = bench.filter(variant="noise")
    assert {t.noise.subtype for t in noise} == set(NOISE_SUBTYPES)
    assert {t.intent for t in noise} >= {"labs", "vitals", "encounters"}
    assert {t.level for t in noise} == {"patient", "population"}
    levels = small.card["by_noise_level"]
    # about a third each by plan; outcome balance trims the value level where a template's only answered value subtype
    # is missing (the MIC templates carry no encoding corruption: 55 of 300 value-level pairs on this build)
    assert min(levels.values()) > 0.15 * sum(levels.values())
    for clean, noisy in bench.pairs():
        assert clean.pair_id == noisy.pair_id and clean.template_id == noisy.template_id
        assert clean.expected.kind == "answer" and clean.noise is None
        for t in (clean, noisy):
            assert t.meta["complexity"] > 0 and t.meta["tables"] and t.meta["evidence_sql"]
            assert t.meta["answer_type"] == t.expected.answer.type


def test_card_shows_each_templates_pairs_against_its_plan(small):
    """Templates the balance starves (and those that make their pairs instead) are visible, including a planned
    template that kept no pair at all; the counts add up to the build's."""
    planned, made = small.card["planned_by_template"], small.card["by_template"]
    assert sum(planned.values()) == CONFIGS["small"].pairs == sum(made.values())
    assert set(made) <= set(planned)
    dropped = small.card["balance_dropped_by_template"]
    assert dropped == small.report["balance_dropped_by_template"] and sum(dropped.values()) > 0
    assert set(dropped) <= set(planned)
    md = card_markdown(small.card)
    section = md.split("## Pairs per template", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(planned)  # a planned template without pairs is listed with 0
    for tid, n in planned.items():
        assert any(r.startswith(f"| `{tid}` | {made.get(tid, 0)}") and f"| {n} |" in r for r in rows), tid
    short = [t for t in planned if made.get(t, 0) < planned[t] / 2]
    assert sum("(under half)" in r for r in rows) == len(short)
    assert f"{len(short)} templates made fewer than half their planned pairs" in section


def _match(gold, value, spec) -> bool:
    try:
        return value is not None and answers_match(gold, value, spec)
    except NotComparable:
        return False


def test_every_pair_satisfies_the_three_verification_properties(small, synth_db):
    """Independent re-check through the overlay layer (the environment's code path)."""
    bench = load_benchmark(small.out)
    v = PairVerifier(synth_db)
    try:
        for clean, noisy in bench.pairs():
            spec = clean.expected.answer
            # 1. clean gold on clean evidence: meaningful and equal to the stored gold value
            got = v.value(clean.gold_sql, spec)
            assert got is not None and _match(clean.expected.value, got, spec), clean.task_id
            # 2. the naive SQL on the noisy evidence does not give the expected outcome
            rows = v.rows(noisy.naive_sql, noisy.overlay)
            naive = gold_from_rows(rows, spec)
            if noisy.expected.kind == "answer":
                assert not _match(noisy.expected.value, naive, spec), noisy.task_id
                # 3. recoverable: the robust gold on the noisy evidence reproduces the answer
                assert _match(noisy.expected.value, v.value(noisy.gold_sql, spec, noisy.overlay), spec), noisy.task_id
                assert noisy.expected.value == clean.expected.value
            else:
                looks_like_value = any(r and r[0] is not None for r in rows)
                assert looks_like_value or INJECTORS[noisy.noise.subtype].empty_is_trap, noisy.task_id
    finally:
        v.close()


def test_splits_are_disjoint_by_patient_and_ood_holds_whole_templates(small):
    bench = load_benchmark(small.out)
    patient_split = defaultdict(set)
    template_splits = defaultdict(set)
    for t in bench.tasks:
        template_splits[t.template_id].add(t.split)
        if t.split != "ood":
            for sid in t.meta["subject_ids"]:
                patient_split[sid].add(t.split)
    assert all(len(s) == 1 for s in patient_split.values())
    held = set(bench.manifest["ood_templates"])
    assert held and all(template_splits[tid] == {"ood"} for tid in held)
    assert all("ood" not in s for tid, s in template_splits.items() if tid not in held)
    intents_with_ood = {bench.filter(template_id=tid)[0].intent for tid in held}
    assert intents_with_ood == {t.intent for t in bench.tasks}
    assert {"train", "dev", "test"} <= {t.split for t in bench.tasks}


def test_files_manifest_card_and_parquet(small, synth_db):
    out = small.out
    for name in ("tasks.jsonl", "tasks.parquet", "card.json", "card.md", "build_report.json", "manifest.json"):
        assert (out / name).exists(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["content_hash"] == hashlib.sha256((out / "tasks.jsonl").read_bytes()).hexdigest()
    con = open_database(synth_db)
    assert manifest["db_content_hash"] == read_meta(con)["content_hash"]
    con.close()
    assert manifest["task_counts"]["pairs"] == CONFIGS["small"].pairs
    table = pq.read_table(out / "tasks.parquet")
    assert table.num_rows == 2 * CONFIGS["small"].pairs
    assert table.column("task_id").to_pylist() == [t.task_id for t in load_tasks_jsonl(out / "tasks.jsonl")]
    report = json.loads((out / "build_report.json").read_text())
    timings = report["timings_seconds"]
    assert set(timings) >= {"sampling", "gold_execution", "verification", "card", "total"}
    card = json.loads((out / "card.json").read_text())
    # each validity section's wall time is reported beside the build's (never in the card, which is deterministic)
    assert set(timings["card_sections"]) == set(card["validity"])
    phases = timings["pairs_phases"]  # the pairs phase's wall time, split where the work changes hands
    assert set(phases) == {"sampling", "first_pass", "deficit_passes"} and min(phases.values()) >= 0
    assert sum(phases.values()) <= timings["pairs"]
    assert card["sql_complexity"]["mean_all_gold"] > 5
    assert sum(card["by_subtype"].values()) == card["pairs"]
    assert "| labs |" in (out / "card.md").read_text()


def test_build_is_deterministic(synth_db, tmp_path, small):
    """Same database, config and seed → byte-identical files, whether built by one process or two."""
    cfg = BuildConfig("tiny", 40, min_candidates=12)
    templates = [t for t in all_templates() if t.intent in ("labs", "encounters")]
    a = build_benchmark(synth_db, tmp_path / "a", config=cfg, seed=9, progress=False, templates=templates)
    b = build_benchmark(synth_db, tmp_path / "b", config=replace(cfg, workers=2), seed=9, progress=False,
                        templates=templates)
    for name in DETERMINISTIC_FILES:
        assert (a.out / name).read_bytes() == (b.out / name).read_bytes(), name
    assert a.report["kept_pairs"] == 40
    # another seed draws other entities
    assert {t.pair_id for t in a.tasks}.isdisjoint({t.pair_id for t in small.tasks}) or \
        a.manifest["content_hash"] != small.manifest["content_hash"]


def test_a_build_computes_the_validity_sections_it_is_asked_for(synth_db, tmp_path):
    """``validity`` picks the card's sections; the tasks do not depend on it, and the card (json and md) lists the
    sections left out, so a partial report never reads as a whole one. An unknown name fails before the build."""
    from click.testing import CliRunner

    from ehrgym.bench.validity import section_names
    from ehrgym.cli import cli
    from ehrgym.errors import BenchmarkError

    cfg = BuildConfig("tiny", 12, min_candidates=8)
    templates = [t for t in all_templates() if t.intent == "labs"]
    some = build_benchmark(synth_db, tmp_path / "some", config=cfg, seed=9, progress=False, templates=templates,
                           validity=["trap_margins", "answer_prior"])
    none = build_benchmark(synth_db, tmp_path / "none", config=cfg, seed=9, progress=False, templates=templates,
                           validity=[])
    assert (some.out / "tasks.jsonl").read_bytes() == (none.out / "tasks.jsonl").read_bytes()
    assert set(some.card["validity"]) == {"answer_prior", "trap_margins"}
    assert some.card["validity_skipped"] == [n for n in section_names() if n not in ("answer_prior", "trap_margins")]
    assert none.card["validity"] == {} and none.card["validity_skipped"] == section_names()
    assert set(some.report["timings_seconds"]["card_sections"]) == {"answer_prior", "trap_margins"}
    md = (some.out / "card.md").read_text()
    assert "### answer_prior" in md and "### text_classifier" not in md
    assert "Not computed in this build (`--validity`): " + ", ".join(some.card["validity_skipped"]) in md
    with pytest.raises(BenchmarkError, match="unknown validity section.*known: answer_prior"):
        build_benchmark(synth_db, tmp_path / "bad", config=cfg, seed=9, progress=False, validity=["answer_prio"])
    assert not (tmp_path / "bad").exists()
    res = CliRunner().invoke(cli, ["bench", "build", "--db", str(synth_db), "--out", str(tmp_path / "cli"),
                                   "--quiet", "--validity", "text_classifier,bogus"])
    assert res.exit_code != 0 and "unknown validity section(s) bogus" in str(res.exception or res.output)
    assert not (tmp_path / "cli").exists()


def test_parallel_build_reports_pairs_while_workers_run(synth_db, tmp_path, monkeypatch):
    """The "pairs" bar advances from the workers' own progress, not only when they finish."""
    from ehrgym.bench import builder

    seen: list[tuple[int, int]] = []
    original = builder._run_workers

    class Bar:
        n = 0

        def refresh(self) -> None:
            pass

    def recording(jobs, bar=None, poll_seconds=0.25):
        probe = Bar()
        results = original(jobs, probe, poll_seconds=0.01)
        seen.append((probe.n, sum(len(m["first"]) + len(m["balance"]) for r in results
                                  for m in r["templates"].values())))
        return results

    monkeypatch.setattr(builder, "_run_workers", recording)
    cfg = BuildConfig("tiny", 20, min_candidates=12, workers=2)
    templates = [t for t in all_templates() if t.intent in ("labs", "encounters")]
    build_benchmark(synth_db, tmp_path / "p", config=cfg, seed=3, progress=False, templates=templates)
    assert seen and seen[0][0] == seen[0][1] > 0


def test_a_template_gives_the_same_pairs_in_whichever_worker_claims_it(synth_db, tmp_path):
    """Workers claim templates from one shared list: whichever worker makes a template, and whatever it made
    before, the template's pairs, slot states and stats are the same; a claimed template is made once."""
    from ehrgym.bench.builder import Builder, _claim, _fill_worker

    cfg = BuildConfig("tiny", 24, min_candidates=12)
    templates = [t for t in all_templates() if t.intent in ("labs", "encounters")][:3]
    b = Builder(synth_db, cfg, 4, progress=False, templates=templates)
    try:
        plan = b.sample()
    finally:
        b.close()
    job = [(t, [(sub, q) for (tid, sub), q in sorted(plan.items()) if tid == t.id], b.candidates.get(t.id, []))
           for t in templates]

    def run(claims: Path, taken: tuple[int, ...] = ()) -> dict:
        claims.mkdir()
        for i in taken:
            assert _claim(str(claims), i) and not _claim(str(claims), i)
        return _fill_worker(((str(synth_db), cfg, 4, job, str(claims)), None))["templates"]

    alone = run(tmp_path / "all")  # one worker makes all three, in order
    late = run(tmp_path / "late", taken=(0, 1))  # another makes only the third, with nothing before it
    early = run(tmp_path / "early", taken=(2,))
    assert set(alone) == {t.id for t in templates} and set(late) == {templates[2].id}
    assert set(early) == {templates[0].id, templates[1].id}

    def digest(made: dict) -> list:
        return [(d.subtype, sorted(d.params.items()), d.clean["question"], d.noise["question"],
                 d.noise["gold_sql"], d.clean["background"]) for part in ("first", "balance") for d in made[part]]

    for tid, made in {**early, **late}.items():
        assert made["first"], tid
        assert digest(made) == digest(alone[tid]), tid
        assert made["slots"] == alone[tid]["slots"] and made["used"] == alone[tid]["used"]
        assert made["stats"].attempts == alone[tid]["stats"].attempts
        assert made["stats"].discarded_by_subtype == alone[tid]["stats"].discarded_by_subtype


def test_candidates_are_drawn_from_the_clean_database_whatever_pair_was_verified_last(synth_db):
    """The samplers read the verifier's overlaid views: a draw made after a pair's noise or background was applied
    there (a test drafting pairs template by template, a draw for a late re-plan) must still see the clean rows."""
    from ehrgym.bench.builder import Builder
    from ehrgym.db.overlay import Overlay, TableEdit

    template = next(t for t in all_templates() if t.id == "labs.change_first_last")
    fresh = Builder(synth_db, CONFIGS["small"], 5, progress=False, templates=[template])
    try:
        fresh._draw(template, 30)
        expected = [sorted(c.params.items()) for c in fresh.candidates[template.id]]
    finally:
        fresh.close()
    assert len(expected) >= 10
    drafted = Builder(synth_db, CONFIGS["small"], 5, progress=False, templates=[template])
    try:
        # half of labevents gone from the overlaid views, as a heavy noise overlay would leave them
        rowids = tuple(r[0] for r in drafted.verifier.clean_con.execute(
            "SELECT rowid FROM mimiciv_hosp.labevents WHERE rowid % 2 = 0 ORDER BY rowid").fetchall())
        drafted.verifier.use(Overlay((TableEdit("labevents", rowids),)))
        drafted._draw(template, 30)
        assert [sorted(c.params.items()) for c in drafted.candidates[template.id]] == expected
    finally:
        drafted.close()


def test_benchmark_api(small):
    bench = load_benchmark(small.out)
    t = bench.tasks[0]
    assert bench.by_id[t.task_id] is t
    assert all(x.variant == "noise" and x.intent == "labs" for x in bench.filter(variant="noise", intent="labs"))
    assert len(bench.filter(split=["train", "dev", "test", "ood"])) == len(bench)
    assert len(bench.filter(noise_subtype="unit_mismatch")) > 0
    with pytest.raises(BenchmarkError, match="cannot filter"):
        bench.filter(colour="blue")


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_malformed_benchmarks_are_rejected_clearly(small, tmp_path):
    with pytest.raises(BenchmarkError, match="does not exist"):
        load_benchmark(tmp_path / "nowhere")
    d = _copy(small.out, tmp_path / "no_manifest")
    (d / "manifest.json").unlink()
    with pytest.raises(BenchmarkError, match="manifest.json is missing"):
        load_benchmark(d)
    d = _copy(small.out, tmp_path / "tampered")
    lines = (d / "tasks.jsonl").read_text().splitlines()
    (d / "tasks.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(BenchmarkError, match="modified after the build"):
        load_benchmark(d)
    with pytest.raises(TaskFormatError, match="exactly one clean and one noise"):
        load_benchmark(d, verify_hash=False)
    d = _copy(small.out, tmp_path / "badjson")
    (d / "tasks.jsonl").write_text(lines[0] + "\n{not json\n")
    with pytest.raises(TaskFormatError, match=r"tasks.jsonl:2: not valid JSON"):
        load_benchmark(d, verify_hash=False)
    d = _copy(small.out, tmp_path / "badfield")
    bad = json.loads(lines[0])
    bad["split"] = "holdout"
    (d / "tasks.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(TaskFormatError, match="split 'holdout'"):
        load_benchmark(d, verify_hash=False)
    d = _copy(small.out, tmp_path / "badmanifest")
    (d / "manifest.json").write_text("{}")
    with pytest.raises(BenchmarkError, match="lacks"):
        load_benchmark(d)


@pytest.mark.parametrize("name", ["tasks.parquet", "card.json", "card.md"])
def test_every_served_file_is_checked_against_the_manifest(small, tmp_path, name):
    from ehrgym.cli import cli

    d = _copy(small.out, tmp_path / "edited")
    (d / name).write_bytes((d / name).read_bytes() + b"\n")
    with pytest.raises(BenchmarkError, match=f"{name} does not match its manifest"):
        load_benchmark(d)
    assert len(load_benchmark(d, verify_hash=False)) == len(small.tasks)
    res = CliRunner().invoke(cli, ["bench", "show", str(d), small.tasks[0].pair_id])
    assert res.exit_code != 0 and "modified after the build" in str(res.exception)
    res = CliRunner().invoke(cli, ["bench", "show", "--no-verify-hash", str(d), small.tasks[0].pair_id])
    assert res.exit_code == 0, res.output
    (d / name).unlink()
    with pytest.raises(BenchmarkError, match=f"{name} is listed in manifest.json but missing"):
        load_benchmark(d)


def test_cli_card_show_and_errors(small, tmp_path):
    from ehrgym.cli import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["bench", "card", str(small.out)])
    assert res.exit_code == 0 and "benchmark card" in res.output
    pair = small.tasks[0].pair_id
    res = runner.invoke(cli, ["bench", "show", str(small.out), pair])
    assert res.exit_code == 0 and "expected:" in res.output and "noise:" in res.output
    res = runner.invoke(cli, ["bench", "build", "--db", str(tmp_path / "missing.duckdb"), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "does not exist" in str(res.exception or res.output)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 5000), max_size=6, unique=True),
       st.lists(st.floats(0, 500, allow_nan=False).map(lambda v: round(v, 2)), max_size=3))
def test_overlay_round_trip_and_effect(synth_db, rowids, values):
    """Overlays survive JSON and change exactly the rows they name, through the builder's verifier."""
    from ehrgym.bench.task import NoiseSpec
    from ehrgym.db.overlay import Overlay, TableEdit

    rows = tuple({"labevent_id": 10**9 + i, "subject_id": 1, "itemid": 50912, "valuenum": v,
                  "charttime": "2150-01-01 00:00:00", "value": str(v)} for i, v in enumerate(values))
    spec = NoiseSpec("record", "duplicate_records", Overlay((TableEdit("labevents", tuple(rowids), rows),)))
    again = NoiseSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    v = _verifier(synth_db)
    base = v.rows("SELECT count(*) FROM mimiciv_hosp.labevents")[0][0]
    got = v.rows("SELECT count(*), count(*) FILTER (WHERE labevent_id >= 1000000000) FROM mimiciv_hosp.labevents",
                 again.overlay)[0]
    assert got == (base - len(rowids) + len(rows), len(rows))
    v.use(Overlay())  # clean again (run uncached SQL: the verifier memoises clean results)
    assert v.con.execute("SELECT count(*) FROM mimiciv_hosp.labevents").fetchone()[0] == base


_VERIFIERS: dict = {}


def _verifier(db):
    if db not in _VERIFIERS:
        _VERIFIERS[db] = PairVerifier(db)
    return _VERIFIERS[db]


def test_card_records_the_literal_floor_as_the_runner_measures_it(small, synth_db, tmp_path):
    from ehrgym.eval.runner import run_evaluation

    card = json.loads((small.out / "card.json").read_text())
    floor = card["validity"]["literal_baseline"]
    assert "literal_baseline" in (small.out / "card.md").read_text()
    bench = load_benchmark(small.out)
    test_pairs = {t.pair_id for t in bench.tasks if t.split == "test"}
    assert floor["pairs"] == min(len(test_pairs), 400) > 0
    # the same agent through the runner on the whole test split (the card's sample is all of it at this size)
    run_evaluation(small.out, synth_db, "literal", tmp_path / "run", k=1, tasks={"split": "test"}, progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    clean = [r["success_strict"] for r in records if r["variant"] == "clean"]
    noise = [r["success_strict"] for r in records if r["variant"] == "noise"]
    assert floor["clean_pct"] == round(100 * sum(clean) / len(clean), 1)
    assert floor["noise_pct"] == round(100 * sum(noise) / len(noise), 1)
    assert floor["noise_pct"] < 100.0  # noisy twins are traps for the obvious query


def test_card_sections_read_in_worker_processes_give_what_one_process_gives(small, synth_db):
    from ehrgym.bench import validity_sections  # noqa: F401  (registers the sections)
    from ehrgym.bench.validity import SECTIONS, ValidityContext

    tasks = list(load_benchmark(small.out).tasks)
    for name in ("literal_baseline", "evidence_anomaly"):
        one = SECTIONS[name](ValidityContext(tasks, synth_db, 0, 1))
        assert one.get("pairs"), name
        assert SECTIONS[name](ValidityContext(tasks, synth_db, 0, 2)) == one, name


def test_card_records_the_database_state_probe(small, synth_db):
    from ehrgym.bench.validity.state import state_validity

    card = json.loads((small.out / "card.json").read_text())
    section = card["validity"]["database_state"]
    assert "### database_state" in (small.out / "card.md").read_text()
    recomputed = state_validity(load_benchmark(small.out).tasks, synth_db)
    assert recomputed["items"]["n_test"] > 0  # the per-item probe ran on the database
    assert {k: section[k] for k in recomputed} == json.loads(json.dumps(recomputed))
    assert section["clean_served_as_base"] == 0.0  # every pair has its background (ehrgym.bench.background)


def test_overlay_rows_carry_the_flag_their_value_and_range_give(small):
    # the base (and MIMIC-IV) flags a result abnormal exactly when it lies outside its own reference range; a row an
    # overlay wrote with a new value but the old flag was the only such row, whatever its subtype
    FLAG_COLUMNS = ("valuenum", "ref_range_lower", "ref_range_upper", "flag")

    checked, wrong = 0, []
    for t in load_benchmark(small.out).tasks:
        for edit in t.overlay.edits:
            for row in edit.insert_rows:
                if not all(c in row for c in FLAG_COLUMNS) or None in (row["valuenum"], row["ref_range_lower"],
                                                                       row["ref_range_upper"]):
                    continue
                checked += 1
                outside = row["valuenum"] < row["ref_range_lower"] or row["valuenum"] > row["ref_range_upper"]
                if outside != (row["flag"] == "abnormal"):
                    wrong.append((t.task_id, row))
    assert checked >= 100, checked
    assert not wrong, wrong[:3]


def test_overlay_susceptibility_rows_are_steps_the_base_stores(small, synth_db):
    # an MIC comes in dilution steps, each stored with its interpretation, comparison and text: a row an overlay wrote
    # with a value in between (156 mg/L) or with the first reading's interpretation was in no base row
    cols = ("ab_itemid", "dilution_value", "interpretation", "dilution_comparison", "dilution_text")
    with open_database(synth_db) as con:
        base = set(con.execute(f"SELECT DISTINCT {', '.join(cols)} FROM mimiciv_hosp.microbiologyevents "
                               "WHERE dilution_value IS NOT NULL").fetchall())
    tasks = load_benchmark(small.out).tasks
    unreadable_on_purpose = {"implausible_value", "encoding_corruption"}
    subtype = {t.pair_id: t.noise.subtype for t in tasks if t.noise is not None}
    checked, wrong = 0, []
    for t in tasks:
        if subtype.get(t.pair_id) in unreadable_on_purpose:
            continue
        for edit in t.overlay.edits:
            for row in edit.insert_rows:
                if edit.table.endswith("microbiologyevents") and row.get("dilution_value") is not None:
                    checked += 1
                    if tuple(row[c] for c in cols) not in base:
                        wrong.append((t.task_id, tuple(row[c] for c in cols)))
    assert checked >= 50, checked
    assert not wrong, wrong[:3]


def test_overlay_infusion_rows_keep_amount_rate_and_original_amount_together(small, synth_db):
    # a pump row holds amount ~ rate x minutes (x weight per kg), and the base keeps originalamount = amount: a row an
    # overlay gave a new amount with the old rate and original amount was the only one of its kind
    import datetime as dt

    ratio_sql = ("amount / (rate * (epoch(endtime) - epoch(starttime)) / 60.0 * "
                 "CASE WHEN rateuom LIKE '%/kg/%' THEN patientweight ELSE 1 END)")
    with open_database(synth_db) as con:
        ratio = dict(((i, ru, au), r) for i, ru, au, r in con.execute(
            f"SELECT itemid, rateuom, amountuom, median({ratio_sql}) FROM mimiciv_icu.inputevents "
            "WHERE rate > 0 AND endtime > starttime GROUP BY ALL").fetchall())
        base_off = con.execute(
            f"WITH r AS (SELECT itemid, rateuom, amountuom, {ratio_sql} AS x FROM mimiciv_icu.inputevents "
            "WHERE rate > 0 AND endtime > starttime), m AS (SELECT itemid, rateuom, amountuom, median(x) AS med "
            "FROM r GROUP BY ALL) SELECT avg(CASE WHEN abs(x / med - 1) > 0.01 THEN 1.0 ELSE 0.0 END) "
            "FROM r JOIN m USING (itemid, rateuom, amountuom)").fetchone()[0]
        assert con.execute("SELECT count(*) FROM mimiciv_icu.inputevents WHERE amount != originalamount").fetchone()[0] == 0

    def stamp(v):
        return dt.datetime.fromisoformat(str(v))

    rated, off, wrong = 0, 0, []
    for t in load_benchmark(small.out).tasks:
        for edit in t.overlay.edits:
            if not edit.table.endswith("inputevents"):
                continue
            for r in edit.insert_rows:
                if r["amount"] != r["originalamount"]:
                    wrong.append((t.task_id, r["amount"], r["originalamount"]))
                key = (r["itemid"], r["rateuom"], r["amountuom"])
                minutes = (stamp(r["endtime"]) - stamp(r["starttime"])).total_seconds() / 60
                if r["rate"] and minutes > 0 and key in ratio:
                    rated += 1
                    per = r["patientweight"] if "/kg/" in (r["rateuom"] or "") else 1
                    off += abs(r["amount"] / (r["rate"] * minutes * per) / ratio[key] - 1) > 0.01
    assert rated >= 20, rated
    assert not wrong, wrong[:3]
    assert off / rated <= base_off + 0.1, (off, rated, base_off)  # as often off as base rows are (rounded amounts)


def test_unit_mismatch_lab_rows_bring_their_reference_range_in_the_new_unit(small, synth_db):
    # a result the laboratory reports in another unit comes with its reference range in that unit: a creatinine of
    # 80 µmol/L beside a 0.4-1.1 range would read as abnormal, and as noise, by its range alone
    tasks = load_benchmark(small.out).tasks
    unit_pairs = {t.pair_id for t in tasks if t.noise is not None and t.noise.subtype == "unit_mismatch"}
    checked, wrong = 0, []
    with open_database(synth_db) as con:
        for t in tasks:
            if t.pair_id not in unit_pairs or t.noise is None:
                continue
            for edit in t.overlay.edits:
                if not edit.table.endswith("labevents") or len(edit.delete_rowids) != len(edit.insert_rows):
                    continue
                for rowid, new in zip(edit.delete_rowids, edit.insert_rows):
                    old = con.execute("SELECT valuenum, ref_range_lower, ref_range_upper, valueuom "
                                      "FROM mimiciv_hosp.labevents WHERE rowid = ?", [rowid]).fetchone()
                    if not old[0] or not old[1] or not new["valuenum"]:
                        continue
                    checked += 1
                    factor = new["valuenum"] / old[0]
                    if new["valueuom"] == old[3] or abs(new["ref_range_lower"] / old[1] / factor - 1) > 0.1:
                        wrong.append((t.task_id, old, {k: new[k] for k in ("valuenum", "ref_range_lower",
                                                                             "ref_range_upper", "valueuom")}))
    assert checked >= 2, checked  # 3 unit-mismatch lab rows with a range on the small build
    assert not wrong, wrong[:3]


ROW_IDS = ("labevent_id", "microevent_id", "transfer_id")
"""Ids that number rows, not the things rows are about: a re-stored lab result gets a new labevent_id, while a
duplicated patient or stay keeps its subject_id or stay_id (duplicate records are copies of those keys)."""


def test_inserted_rows_are_numbered_where_they_stand(small, synth_db):
    # a row an overlay adds carries ids as a base row would: no id another row of the table keeps (a copy that kept
    # its source's microevent_id was the only duplicate of a unique id), and, where the base numbers rows in scan
    # order, an id between those of the rows it stands between (a row put before a patient's first ICU stay took an
    # id above that stay's: 0.71 within icustays on the 1k card)
    from ehrgym.db.overlay import END
    from ehrgym.db.schema import table_spec

    tasks = load_benchmark(small.out).tasks
    checked, misplaced, duplicated = 0, [], []
    with open_database(synth_db) as con:
        unique: dict[str, list[tuple[str, bool]]] = {}  # table -> its unique id columns, and whether in scan order
        for t in tasks:
            for edit in t.overlay.edits:
                spec = table_spec(edit.table)
                if edit.table not in unique:
                    unique[edit.table] = []
                    for col in (c for c in spec.column_names if c.endswith("_id") or c == "orderid"):
                        n, distinct, falls = con.execute(
                            f"SELECT count(*), count(DISTINCT cur), count(*) FILTER (WHERE nxt <= cur) FROM "
                            f"(SELECT {col} AS cur, lead({col}) OVER (ORDER BY rowid) AS nxt FROM {spec.qualified})"
                        ).fetchone()
                        if n > 1 and distinct == n:
                            unique[edit.table].append((col, falls == 0))
                deleted = set(edit.delete_rowids)
                for row, after in zip(edit.insert_rows, edit.insert_after):
                    for col, in_order in unique[edit.table]:
                        if row.get(col) is None or edit.dense_id == col:  # a dense id is renumbered by the view
                            continue
                        checked += 1
                        owner = con.execute(f"SELECT rowid FROM {spec.qualified} WHERE {col} = ?", [row[col]]).fetchone()
                        if col in ROW_IDS and owner is not None and owner[0] not in deleted:
                            duplicated.append((t.task_id, edit.table, col, row[col]))
                        if not in_order or after == END or after < 0:
                            continue
                        got = con.execute(f"SELECT {col} FROM {spec.qualified} WHERE rowid IN (?, ?) ORDER BY rowid",
                                          [after, after + 1]).fetchall()
                        low, high = got[0][0], (got[1][0] if len(got) > 1 else None)
                        if not (low <= row[col] and (high is None or row[col] < high)):
                            misplaced.append((t.task_id, edit.table, col, low, row[col], high))
    assert checked >= 50, checked
    assert not duplicated, (len(duplicated), duplicated[:3])
    assert not misplaced, (len(misplaced), misplaced[:3])


def test_loading_the_same_benchmark_again_reads_nothing_until_a_file_changes(tmp_path: Path, small_bench: Path) -> None:
    import shutil

    from ehrgym.bench import dataset

    copy = tmp_path / "bench"
    shutil.copytree(small_bench, copy)
    first = dataset.load_benchmark(copy)
    calls: list[Path] = []
    real = dataset._load_benchmark

    def counted(path: Path, verify_hash: bool) -> dataset.Benchmark:
        calls.append(path)
        return real(path, verify_hash)

    dataset._load_benchmark = counted  # type: ignore[assignment]
    try:
        again = dataset.load_benchmark(copy)
        assert calls == [] and again.tasks == first.tasks and again.tasks is not first.tasks
        again.manifest["content_hash"] = "changed by a caller"  # a caller's edit reaches nobody else
        assert dataset.load_benchmark(copy).manifest == first.manifest and calls == []
        # a file edited after the load (one byte, same size) is read and verified again
        tasks = copy / "tasks.jsonl"
        data = bytearray(tasks.read_bytes())
        data[-2:-1] = b" " if data[-2:-1] != b" " else b"\t"
        tasks.write_bytes(bytes(data))
        with pytest.raises(BenchmarkError, match="does not match its manifest"):
            dataset.load_benchmark(copy)
        assert calls == [copy]
    finally:
        dataset._load_benchmark = real  # type: ignore[assignment]


def test_questions_read_as_written_text(small_build) -> None:
    """No question of a build carries a rendering slip: a placeholder left, an empty parameter's stray space before
    the punctuation ("above 1.5 ?"), two spaces, or a word twice ("the mean mean arterial pressure")."""
    import re

    slips = {"placeholder": r"[{}]", "space before punctuation": r" [?.,;:]", "two spaces": r"\S  +\S",
             "word twice": r"\b([A-Za-z]+) \1\b", "no value": r"\b(None|nan|NaN|NaT)\b"}
    found = [(name, t.template_id, t.question) for t in small_build.tasks for name, p in slips.items()
             if re.search(p, t.question)]
    assert not found, found[:5]


def test_an_empty_parameter_leaves_no_stray_space() -> None:
    from ehrgym.bench.sqlrender import render_text

    assert render_text("Any {label} above {threshold} {unit}?", {"label": "INR(PT)", "threshold": 1.5, "unit": ""}) \
        == "Any INR(PT) above 1.5?"
    assert render_text("Any {label} above {threshold} {unit}?", {"label": "K", "threshold": 5, "unit": "mEq/L"}) \
        == "Any K above 5 mEq/L?"
