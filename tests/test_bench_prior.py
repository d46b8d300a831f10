"""The answer prior: no template may be answerable from its wording alone (step 6 of the plan,
``ehrgym.bench.validity.prior``)."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

from ehrgym.bench.answers import AnswerSpec, answer_key
from ehrgym.bench.build import build_benchmark
from ehrgym.bench.configs import CONFIGS, answer_allowed, spread_groups
from ehrgym.bench.task import Expected, NoiseSpec, Task, load_tasks_jsonl
from ehrgym.bench.validity.prior import BAR, MIN_PAIRS, answer_prior

# templates whose clean answers pile up on one value in the synthetic hospital (one culture, no readmission, one
# transfer, …): the cap has something to do on them
CONFIG = replace(CONFIGS["small"], pairs=600)


@pytest.fixture(scope="module")
def builds(synth_db, tmp_path_factory):
    root = tmp_path_factory.mktemp("prior")
    # the card's one section these tests read (the others take a third of each build and are tested elsewhere)
    capped = build_benchmark(synth_db, root / "capped", config=CONFIG, seed=4, progress=False,
                             validity=["answer_prior"])
    free = build_benchmark(synth_db, root / "free", config=replace(CONFIG, max_answer_share=1.0), seed=4,
                           progress=False, validity=[])
    return capped, free


def _shares(out) -> dict[str, tuple[float, int]]:
    by: dict[str, Counter] = defaultdict(Counter)
    for t in load_tasks_jsonl(out / "tasks.jsonl"):
        if t.variant == "clean":
            by[t.template_id][answer_key(t.expected.value)] += 1
    return {tid: (max(c.values()) / sum(c.values()), sum(c.values())) for tid, c in by.items()}


def test_answer_allowed_keeps_one_answer_to_half_rounded_up():
    made: Counter[str] = Counter()
    for answer in "yyyyn" * 5:  # a boolean whose data is mostly "yes", in the candidates' random order
        if answer_allowed(made[answer], sum(made.values()), 0.5):
            made[answer] += 1
            assert max(made.values()) <= math.ceil(sum(made.values()) / 2)  # at every point of the build
    assert made == Counter(y=5, n=5)  # every "no" kept, and as many "yes"
    made = Counter()
    for answer in "aaaaabcaaadaa":
        if answer_allowed(made[answer], sum(made.values()), 0.5):
            made[answer] += 1
    assert made == Counter(a=4, b=1, c=1, d=1)  # 4 of 7: half of 7, rounded up
    assert answer_allowed(0, 0, 0.5) and not answer_allowed(1, 1, 0.5) and answer_allowed(1, 2, 0.5)
    assert all(answer_allowed(k, 10, 1.0) for k in range(11))  # share 1.0: no cap


def test_answers_are_spread_per_template_and_per_concept_named():
    groups = spread_groups("microbiology.count_cultures", {"subject_id": 1, "hadm_id": 2, "specimen": "blood culture",
                                                          "t0": "2150-01-01 00:00:00"})
    assert groups == (("microbiology.count_cultures", ()),
                      ("microbiology.count_cultures", (("specimen", "blood culture"),)))
    assert spread_groups("encounters.transfer_count", {"subject_id": 1, "hadm_id": 2}) == (
        ("encounters.transfer_count", ()),)


def test_no_template_of_a_build_is_mostly_one_answer(builds):
    capped, free = builds
    uncapped = {tid: s for tid, (s, n) in _shares(free.out).items() if n >= MIN_PAIRS and s > BAR + 0.1}
    assert uncapped, "the synthetic hospital has templates whose answers pile up: the control must see some"
    shares = _shares(capped.out)
    above = {tid: (s, n) for tid, (s, n) in shares.items() if n >= MIN_PAIRS and round(s * n) > math.ceil(BAR * n) + 1}
    assert not above  # half, rounded up, then at most a dropped pair's worth (balancing drops the last pairs)
    over = answer_prior(load_tasks_jsonl(capped.out / "tasks.jsonl"))["above_bar"]  # templates and concepts
    assert all(a["excess"] <= 1 for a in over.values())
    loose = answer_prior(load_tasks_jsonl(free.out / "tasks.jsonl"))["above_bar"]
    assert any("(" in k and a["excess"] > 1 for k, a in loose.items())  # a concept group piled up without the cap
    assert capped.report["kept_pairs"] == CONFIG.pairs  # the other templates make up what the cap refuses
    assert capped.report["discarded"].get("answer_share_cap", 0) > 0  # counted with the build's other discards
    assert "answer_share_cap" not in free.report["discarded"]


def test_the_prior_policy_scores_less_on_the_capped_build(builds):
    capped, free = builds
    card = json.loads((capped.out / "card.json").read_text())
    section = card["validity"]["answer_prior"]
    assert "### answer_prior" in (capped.out / "card.md").read_text()
    again = answer_prior(load_tasks_jsonl(capped.out / "tasks.jsonl"))
    assert section["clean_pct"] == again["clean_pct"] and section["above_bar"] == json.loads(
        json.dumps(again["above_bar"]))
    loose = answer_prior(load_tasks_jsonl(free.out / "tasks.jsonl"))
    assert again["max_share"] < loose["max_share"]
    assert again["clean_pct"] <= 25.0  # on this build: see the README for the 1k numbers


def _task(tid: str, split: str, value, variant: str = "clean", kind: str = "answer") -> Task:
    spec = AnswerSpec("integer")
    return Task(task_id=f"{tid}:{split}:{value}:{variant}", pair_id=f"{tid}:{split}:{value}", variant=variant,
                intent="labs", level="patient", template_id=tid, question="q", gold_sql="SELECT 1",
                naive_sql="SELECT 1", expected=Expected(kind, spec, value if kind == "answer" else None,
                                                        None if kind == "answer" else "insufficient_evidence"),
                noise=None if variant == "clean" else NoiseSpec("record", "missing_evidence"), split=split,
                meta={})


def test_the_probe_finds_a_planted_prior():
    tasks = [_task("t.one", "train", 1) for _ in range(8)] + [_task("t.one", "train", 2)]
    tasks += [_task("t.one", "test", 1), _task("t.one", "test", 1), _task("t.one", "test", 3)]
    tasks += [_task("t.spread", "train", v) for v in range(10)] + [_task("t.spread", "test", v) for v in (11, 12)]
    tasks += [_task("t.one", "test", 1, "noise", "abstain")]
    r = answer_prior(tasks)
    assert r["clean_pct"] == 40.0  # 2 of the 5 clean test twins, all of them of the piled-up template
    assert r["noise_pct"] == 0.0  # it never abstains
    assert set(r["above_bar"]) == {"t.one"} and r["above_bar"]["t.one"]["share"] == 0.833
    assert r["top_templates"][0]["template"] == "t.one" and r["top_templates"][0]["answer"] == 1
