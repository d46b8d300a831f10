"""Writes the notebooks of notebooks/ (thin: calls into ehrgym, displays, plots).

The notebooks are generated so their structure stays uniform; edit this script and rerun
``python scripts/make_notebooks.py`` rather than editing the .ipynb files by hand.
"""
import sys
from pathlib import Path

import nbformat as nbf

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "notebooks"
META = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "pygments_lexer": "ipython3"}}


def md(text):
    return nbf.v4.new_markdown_cell(text.strip("\n"))


def code(text, tags=(), hidden=False):
    c = nbf.v4.new_code_cell(text.strip("\n"))
    if tags:
        c.metadata["tags"] = list(tags)
    if hidden:  # collapsed in JupyterLab / Notebook 7 until the reader expands it
        c.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": True}
    return c


def params(text):
    return code(text, tags=("parameters",))


def write(name, cells):
    nb = nbf.v4.new_notebook(cells=cells, metadata=META)
    for i, c in enumerate(nb.cells):
        c.id = f"{name[:2]}-{i:02d}"
    nbf.validate(nb)
    OUT.mkdir(parents=True, exist_ok=True)
    nbf.write(nb, OUT / f"{name}.ipynb")


# ---------------------------------------------------------------------------------------------
write("00_build_database", [
    md("""
# 00 · Build the database

EHR-RobustGym runs every question against a **MIMIC-IV-shaped DuckDB database** (schemas
`mimiciv_hosp` and `mimiciv_icu`, 31 tables, table and column names exactly as MIMIC-IV v2.2).
Three sources:

| `source` | what | needs |
|---|---|---|
| `synthetic` | the embedded synthetic hospital, deterministic from `seed`, any number of `patients` | nothing |
| `demo` | the open MIMIC-IV demo (100 patients, ODbL) | `mimic_dir` with `hosp/` and `icu/` from PhysioNet |
| `mimic` | the credentialed MIMIC-IV release | `mimic_dir` (PhysioNet credentialed access) |

An existing database with the same parameters is reused (its bookkeeping records source, seed,
patient count and a content hash); `force=True` rebuilds it. `make reproduce` runs this notebook
through papermill with the parameters below replaced.
"""),
    params("""
source = "synthetic"      # synthetic | demo | mimic
patients = 1000           # synthetic hospital size (ignored for demo/mimic)
seed = 0                  # synthetic generator seed
mimic_dir = None          # demo/mimic: directory with hosp/ and icu/ (demo default: ../shared/mimic-iv-demo-2.2)
data_dir = "../data"      # where databases, benchmarks and runs go
db_path = None            # None: DATA_DIR/<source>-….duckdb
force = False             # rebuild even if a matching database exists
progress = True           # progress bars
fidelity_against = None   # fidelity: another kit database to compare with (e.g. the loaded demo)
"""),
    code("""
import matplotlib.pyplot as plt
import pandas as pd

from ehrgym import pipeline
from ehrgym.db.connect import open_database
from ehrgym.db.fidelity import fidelity_report
from ehrgym.db.fidelity_figure import fidelity_figure
from ehrgym.db.info import database_info
from ehrgym.db.schema import mimic_schema

pd.set_option("display.max_columns", 40, "display.width", 200)
db_path = db_path or str(pipeline.database_path(source, patients, seed, data_dir))
"""),
    md("## Build or reuse"),
    code("""
# NBVAL_IGNORE_OUTPUT
# (build time and built/reused depend on what is already on disk)
result = pipeline.ensure_database(source, db_path, patients=patients, seed=seed, mimic_dir=mimic_dir,
                                  force=force, progress=progress)
print(f"{result.note} in {result.seconds:.1f} s")
"""),
    md("""
## What the database holds

The bookkeeping lives in a schema agents never see (`ehrgym_meta`). The content hash is an
order-independent digest of every row: the same source, seed and size always give the same hash.
"""),
    code("""
info = database_info(db_path)
pd.Series({key: info.get(key, "-") for key in ("source", "release", "seed", "patients", "content_hash")},
          name="value").to_frame()
"""),
    code("""
rows = pd.DataFrame([{"table": name, "rows": n} for name, n in info["row_counts"].items()])
rows["schema"] = rows["table"].map(lambda t: mimic_schema()[t].qualified.split(".")[0])
rows = rows.sort_values(["schema", "rows"])
colors = rows["schema"].map({"mimiciv_hosp": "#4477AA", "mimiciv_icu": "#EE6677"})
ax = rows.plot.barh(x="table", y="rows", figsize=(7, 8), logx=True, color=colors, legend=False)
ax.set_xlabel("rows (log scale)")
ax.set_title(f"{info.get('source')} database: rows per table (total {rows['rows'].sum():,}; "
             f"blue mimiciv_hosp, red mimiciv_icu)", fontsize=9)
plt.show()
"""),
    md("A first look: a few patients and their admissions (unqualified table names resolve through the MIMIC-IV search path)."),
    code("""
con = open_database(db_path, read_only=True)
patients_df = con.execute(\"\"\"
    SELECT p.subject_id, p.gender, p.anchor_age, count(a.hadm_id) AS admissions,
           min(a.admittime) AS first_admission
    FROM patients p LEFT JOIN admissions a USING (subject_id)
    GROUP BY ALL ORDER BY p.subject_id LIMIT 5\"\"\").df()
con.close()
patients_df
"""),
    md("""
## Fidelity: how MIMIC-IV-like is it?

`ehrgym db fidelity DB [--against OTHER_DB] [--figure OUT.png]` measures vocabulary sizes, rows per
admission (hosp event tables) and per ICU stay (icu event tables), everyday-messiness rates and the
value quantiles of the reference items. Full MIMIC-IV v3.1's volumes follow from its published
row counts (e.g. labevents rows / admissions rows); `ratio` is this database over the reference
(full MIMIC-IV where published, else `fidelity_against`), `flag` says whether it is within ±30 %.
A statistic over a table the database leaves empty shows as missing (the demo has no chartevents).
"""),
    code("""
fidelity = fidelity_report(db_path, fidelity_against)
stats = fidelity.statistics().set_index(["section", "statistic"])
stats[["this", "other", "full_mimic_iv", "ratio", "flag"]].round(2)
"""),
    code("""
fidelity_figure(fidelity)
"""),
    md("""
Item values: the median shift is (p50 − reference p50) as a fraction of the reference's p1–p99
range (reference: the demo quantiles in the item reference, else `fidelity_against`); the spread
is the p1–p99 range over the reference's. `ok`: |shift| ≤ 0.10 and spread within ±30 %.
"""),
    code("""
items = fidelity.items()
compared = items[items["flag"].isin(["ok", "off"])]
print(f"{(compared['flag'] == 'ok').sum()} of {len(compared)} compared items ok")
compared[["table", "label", "unit", "n", "p05", "p50", "p95", "ref_p50", "median_shift", "spread_ratio",
          "flag"]].round(2)
"""),
])

# ---------------------------------------------------------------------------------------------
write("01_build_benchmark", [
    md("""
# 01 · Build the Clean–Noise benchmark

Every question comes as a **pair**: a clean task, and a noisy twin whose evidence (record level),
a value (value level) or the question itself (query level) was corrupted. A pair is kept only if
it is *verified*: the clean gold SQL answers on clean evidence, the noise really traps a credulous
agent, and for recoverable noise a robust gold SQL reproduces the expected answer.

Configs: `small` (~300 pairs, seconds) and `paper` (5,486 pairs, balanced over the six intents
and two levels, noise levels about a third each). The build is deterministic: same database,
config and seed give byte-identical files. An existing benchmark with the same config, seed and
database content hash is reused.
"""),
    params("""
db_path = "../data/synthetic-p1000-s0.duckdb"   # from 00_build_database
bench_dir = None          # None: DATA/bench/<db>-<config>-s<seed>
config = "paper"          # small | paper
seed = 0
force = False
progress = True
examples_per_subtype = 1  # example pairs shown per noise subtype
"""),
    code("""
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from ehrgym import explore, pipeline
from ehrgym.bench.dataset import load_benchmark
from ehrgym.report.figures import palette  # the colour-blind-safe palette of the report figures

pd.set_option("display.max_columns", 40, "display.width", 250, "display.max_colwidth", 120)
bench_dir = bench_dir or str(pipeline.benchmark_path(db_path, config, seed))
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
# (build time and built/reused depend on what is already on disk)
result = pipeline.ensure_benchmark(db_path, bench_dir, config=config, seed=seed, force=force, progress=progress)
print(f"{result.note} in {result.seconds:.1f} s")
"""),
    code("""
bench = load_benchmark(bench_dir)
frame = explore.task_frame(bench.tasks)
print(f"{len(bench.pairs())} pairs, {len(bench)} tasks, content hash {bench.content_hash[:16]}…")
explore.dataset_overview(frame)
"""),
    md("""
## Counts by intent × level × noise level × subtype

Rows: clinical intent and question level; columns: noise level and subtype (Clean–Noise pairs).
"""),
    code("explore.category_matrix(frame)"),
    code("""
report = json.loads((Path(bench_dir) / "build_report.json").read_text())
pd.Series(report["discarded"], name="pairs discarded by reason", dtype="int64").to_frame()
"""),
    md("""
## SQL complexity

Structural-component count of each clean task's gold SQL (tables, joins, predicates,
aggregations, subqueries/CTEs, window functions, GROUP/ORDER/LIMIT, CASE, functions; see
`ehrgym.bench.complexity`).
"""),
    code("explore.complexity_summary(frame)"),
    code("""
dist = explore.complexity_distribution(frame)
ax = dist.plot.bar(stacked=True, figsize=(9, 3.5), width=0.85, color=palette(len(dist.columns)))
ax.set_xlabel("gold-SQL complexity (structural components)")
ax.set_ylabel("clean tasks")
ax.set_title("SQL complexity distribution by intent")
plt.show()
"""),
    md("## Example pairs (one per noise subtype)"),
    code("explore.example_pairs(bench.tasks, per_subtype=examples_per_subtype)"),
    md("## The dataset card (`card.md`, written with the benchmark)"),
    code("Markdown((Path(bench_dir) / \"card.md\").read_text())"),
])

# ---------------------------------------------------------------------------------------------
write("02_run_evaluation", [
    md("""
# 02 · Run the agents

A run is an agent × the benchmark × `k` trials. Episodes run concurrently (`workers`), are
appended to `RUNS/<agent>/episodes.jsonl` as they finish, and rerunning resumes where a crash
left off — so this notebook is cheap to run again.

Baselines: `oracle` (replays the expected path; must score 100 %), `credulous` (runs the clean
gold SQL and answers whatever comes back — the trap), `literal` (runs the same query and
abstains when it returns nothing — the floor a robust agent must beat), `skeptic` (checks
existence, plausibility, duplicates and units first). An LLM joins through any OpenAI-compatible endpoint:
set `model` and `base_url` (or `EHRGYM_MODEL` / `OPENAI_BASE_URL`) and add `"chat"` to `agents`.
"""),
    params("""
db_path = "../data/synthetic-p1000-s0.duckdb"
bench_dir = "../data/bench/synthetic-p1000-s0-paper-s0"
runs_dir = None           # None: DATA/runs/<benchmark name>
agents = ["oracle", "credulous", "literal", "skeptic"]
k = 4                     # trials per task
workers = 2               # concurrent episodes
seed = 0                  # run seed (per-episode seeds derive from it)
split = "test"            # the split evaluated (train | dev | test | ood); None: every task
limit_pairs = None        # evaluate only the first N pairs
model = None              # chat agent: model name
base_url = None           # chat agent: OpenAI-compatible endpoint
n_boot = 1000             # bootstrap replicates for the 95% CIs below
progress = True
"""),
    code("""
import pandas as pd

from ehrgym import pipeline
from ehrgym.eval.metrics import format_table, load_episodes, summarize

pd.set_option("display.max_columns", 40, "display.width", 250)
runs_dir = runs_dir or str(pipeline.runs_path(bench_dir))
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
# (how many episodes run now depends on what is already stored; timings vary)
summaries = pipeline.run_agents(db_path, bench_dir, runs_dir, agents, k=k, workers=workers, seed=seed,
                                split=split, limit_pairs=limit_pairs, model=model, base_url=base_url, progress=progress)
pd.DataFrame([{key: s.to_dict()[key] for key in ("agent", "model", "planned", "skipped", "ran", "wall_seconds",
                                               "episodes_per_second", "infrastructure_errors")} for s in summaries])
"""),
    md("""
## Results

Success rates per system over the tasks of each variant (every task weighs the same, infrastructure
errors excluded), 95 % bootstrap CIs over Clean–Noise pairs. `03_robustness_analysis` breaks these
down and regenerates the paper's tables and figures.
"""),
    code("""
run_dirs = pipeline.run_dirs(runs_dir, agents, model)
episodes = load_episodes(run_dirs)
tables = summarize(episodes, n_boot=n_boot, seed=seed)
tables["overview"]
"""),
    code("format_table(tables[\"clean_vs_noise\"], percent=(\"clean\", \"noise\", \"pair\", \"drop_abs\", \"drop_rel\"))"),
    code("""
terminations = tables["terminations"]
terminations.pivot_table(index="system", columns="termination", values="count", aggfunc="sum", fill_value=0)
"""),
])

# ---------------------------------------------------------------------------------------------
write("03_robustness_analysis", [
    md("""
# 03 · Robustness analysis

**Learning goal.** After this notebook you can say how much each agent loses when the evidence or
the question is noisy, which noise subtypes hurt most, whether an agent's abstentions are
trustworthy, and why individual episodes failed.

**How to read the output.** Every section shows one table and, where there is one, its figure.
*Clean* and *Noise* are success rates (share of tasks answered correctly under strict scoring: the
right value, or an abstention with an accepted reason) on the clean questions and on their noisy
twins; the *drop* is Clean − Noise. Brackets are 95 % bootstrap confidence intervals over
Clean–Noise pairs. The failure modes name what went wrong (a wrong value, a missed or a false
abstention, a wrong reason …); the example trajectories show each step an agent took. What each
noise subtype is: `docs/noise.md` or notebook 04.

This notebook calls `ehrgym.report.build_report` — the function behind `ehrgym report` — so the
command line and the notebook cannot drift apart. It writes every table (CSV, Markdown, LaTeX)
into `tables/` and every figure (PNG, PDF) into `figures/`, then shows them.
"""),
    params("""
bench_dir = "../data/bench/synthetic-p1000-s0-paper-s0"
run_dirs = ["../data/runs/synthetic-p1000-s0-paper-s0/oracle",
            "../data/runs/synthetic-p1000-s0-paper-s0/credulous",
            "../data/runs/synthetic-p1000-s0-paper-s0/literal",
            "../data/runs/synthetic-p1000-s0-paper-s0/skeptic"]
tables_out = "../tables"
figures_out = "../figures"
n_boot = 1000             # bootstrap replicates for the 95% CIs
seed = 0                  # bootstrap seed
examples_per_mode = 1     # failed trajectories shown per (agent, failure mode)
"""),
    code("""
import pandas as pd
from IPython.display import Markdown, display

from ehrgym import explore
from ehrgym.eval.metrics import load_episodes
from ehrgym.report import build_report

pd.set_option("display.max_columns", 40, "display.width", 250, "display.max_colwidth", 100)
manifest = build_report(run_dirs, bench_dir, tables_out, figures_out, n_boot=n_boot, seed=seed, progress=False)
print(f"{len(manifest.tables)} tables and {len(manifest.figures)} figures written; "
      f"skipped: {sorted(manifest.skipped) or 'none'}")
"""),
    md("## Clean vs Noise per agent (95 % CI) and the drop"),
    code("display(*explore.report_section(manifest, \"clean_vs_noise\"))"),
    md("## Per noise subtype"),
    code("display(*explore.report_section(manifest, \"by_subtype\", figure=False))\n"
         "display(*explore.report_section(manifest, \"subtype_heatmap\", table=False))"),
    code("display(*explore.report_section(manifest, \"by_noise_level\"))"),
    md("## Per clinical intent and per question level"),
    code("display(*explore.report_section(manifest, \"by_intent\"))"),
    code("display(*explore.report_section(manifest, \"by_level\"))"),
    md("""
## Reliability across trials: pass^k, k = 1..4

pass^k is the chance that *all* k trials of a task succeed (unbiased estimator
C(c,k)/C(n,k)); undefined, not zero, for tasks with fewer than k valid trials.
"""),
    code("display(*explore.report_section(manifest, \"pass_k\"))"),
    md("## Abstention: precision, recall and over-abstention on Clean"),
    code("display(*explore.report_section(manifest, \"abstention\"))"),
    md("## McNemar's test on Clean/Noise pairs"),
    code("display(*explore.report_section(manifest, \"mcnemar\", figure=False))"),
    code("display(*explore.report_section(manifest, \"reliability\", figure=False))"),
    md("""
## Failure modes

Failed episodes by cause: SQL error, wrong value, false abstention (abstained on an answerable
question), missed abstention (answered an unanswerable one), wrong reason, step limit.
"""),
    code("display(*explore.report_section(manifest, \"failure_modes\"))"),
    md("### Example failed trajectories"),
    code("""
episodes = load_episodes(run_dirs, trajectories=True)
for example in explore.failure_gallery(episodes, per_mode=examples_per_mode):
    display(Markdown(example["title"]), example["steps"])
"""),
    md("## Dataset statistics (from the benchmark)"),
    code("display(*explore.report_section(manifest, \"dataset_counts\", figure=False))\n"
         "display(*explore.report_section(manifest, \"dataset_composition\"))"),
])

# ---------------------------------------------------------------------------------------------
write("04_explore_noise", [
    md("""
# 04 · Explore the noise: predict, then reveal

**Learning goal.** Recognise the thirteen kinds of noise in clinical data and questions, see why
the *credulous* shortcut (run the obvious query, trust whatever comes back) falls for each, and
practise the check that catches it — by committing to an answer *before* seeing the solution.

**How to read the output.** Each noise subtype has a *teaching card* (what it is, how it arises in
real hospitals, the trap, the check, what the expected outcome means; also in `docs/noise.md`).
For a pair you first see only what an agent sees: the noisy question and its evidence rows
(numbers rounded as the answer expects). You answer in the same protocol agents use —
`ANSWER: <value>` or `ABSTAIN: <reason>: <why>` — and the kit's verifier scores you. Only then
are revealed: the expected outcome (an abstention reason means *the records do not support an
answer, and this is why*), what the credulous agent said, a robust solution path (the oracle's
SQL and its result), and the clean vs noisy comparison: both questions with the words that differ
marked, the evidence with edited cells shown as `clean → noisy` and highlighted, removed and
inserted rows coloured. For question-level noise the database is unchanged: the two sides are
the rows each *question* reads.

The interactive explorer at the end needs a running kernel; a shared executed copy shows a
static snapshot instead. Every step is a function of `ehrgym.explore` / `ehrgym.lesson`.
"""),
    params("""
db_path = "../data/synthetic-p1000-s0.duckdb"            # the pipeline passes its own paths
bench_dir = "../data/bench/synthetic-p1000-s0-paper-s0"
pair_id = None            # None: the first pair in the list
prediction = None         # your answer to that pair, e.g. "ANSWER: 7.2" or "ABSTAIN: false_premise: ..."
agent = "skeptic"         # the agent run live below
"""),
    code("""
import pandas as pd
from IPython.display import HTML, Markdown, display

from ehrgym import explore
from ehrgym.bench.noise.teaching import teaching_markdown

pd.set_option("display.max_columns", 40, "display.width", 250, "display.max_colwidth", 200)
ex = explore.NoiseExplorer(db_path, bench_dir)
pairs = ex.pairs()
pairs.groupby(["noise_level", "subtype_name", "expected"], sort=False).size().rename("pairs").to_frame()
"""),
    md("""
## The trap, one pair per noise subtype

What the credulous agent says on one noisy question of each subtype, and what is expected
(numbers rounded as the answer spec says; `null` means the query returned no value and the agent
reported it anyway).
"""),
    code("explore.trap_table(ex)"),
    md("## One pair: predict first"),
    code("""
pair_id = pair_id or pairs["pair_id"].iloc[0]
view = ex.compare(pair_id, credulous=False)
HTML(view.student_html())
"""),
    md("""
What would you answer? Set `prediction` in the parameters cell (or here) and run again; the
verifier scores it before anything is revealed.
"""),
    code("""
if prediction is None:
    display(Markdown("*No prediction yet: set `prediction` (e.g. `'ANSWER: 7.2'` or "
                     "`'ABSTAIN: insufficient_evidence: no rows'`) and run this cell again.*"))
else:
    scored = ex.predict(pair_id, prediction)
    display(HTML(ex.reveal(pair_id, scored).html() + "<h4>Clean vs noisy</h4>" + view.comparison_html()))
"""),
    md("""
## Reveal: the comparison

Both questions in full (words that differ are marked), then the evidence: the `rows` column says
what the noise did to each row; edited cells show `clean → noisy`; the columns the question's SQL
uses come first.
"""),
    code("""
display(HTML(view.comparison_html()))
pd.Series(view.summary(), name="").to_frame()
"""),
    md("## Run an agent live on the noisy question (every step: full SQL, result as a table)"),
    code("""
run = ex.run_agent(view.noise, agent)
HTML(f"<p>{agent} said <code>{run.said}</code> — {run.verdict}</p>" + run.steps_html())
"""),
    md("""
## Interactive explorer

Filter by intent, question level, noise level, subtype or expected outcome, search the questions,
step with *next pair* / *random pair*. For each pair: read the question and evidence, choose
*answer* (type the value) or *abstain: reason* (optionally type why), press *check my answer* —
then study what is revealed. *run agent live* replays an agent on the noisy twin.
If this shows a static snapshot (or "model not found"), the notebook was reopened without a
running kernel: run the cells again.
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
# (widget state)
explore.ExplorerUI(ex, pair_id=pair_id)
"""),
    md("## Every teaching card (also `docs/noise.md`)"),
    code("Markdown(teaching_markdown())"),
])

# ---------------------------------------------------------------------------------------------
write("07_exercises", [
    md("""
# 07 · Exercises: reasoning robustly over noisy clinical records

**Learning goal.** Answer clinical data questions the way a careful analyst would: check the
evidence before trusting it, answer when the noise can be cleaned away, and abstain — with the
right reason — when the records do not support an answer. You practise on one pair per noise
level (record, value, query), then look for the limits of a scripted robust agent.

**How to read the output.** Each exercise shows a question and its evidence exactly as an agent
would find them. Write your answer in the cell below it, in the answer protocol agents use:
`"ANSWER: 7.2"` (one value, in the unit asked) or `"ABSTAIN: <reason>: <why>"` with a reason from
the list printed below. The check cell scores it with the kit's verifier (strict: the value within
the spec's tolerance, or an accepted abstention reason) and only then reveals the expected
outcome, the credulous agent's answer, a robust solution path and the clean vs noisy comparison.
The answer key at the end is hidden (tag `answer-key`; collapsed in JupyterLab, removed by
`jupyter nbconvert --TagRemovePreprocessor.remove_cell_tags=answer-key`).
"""),
    params("""
db_path = "../data/synthetic-p1000-s0.duckdb"            # the pipeline passes its own paths
bench_dir = "../data/bench/synthetic-p1000-s0-paper-s0"
seed = 0                  # which pairs the lesson draws
agent = "skeptic"         # the agent the open exercise examines
limit_pairs = 26          # noisy twins it is run on (round-robin over the subtypes)
use_answer_key = False    # a teacher's run: fill unanswered exercises with the key (checks the key)
"""),
    code("""
import pandas as pd
from IPython.display import HTML, Markdown, display

from ehrgym import explore, lesson
from ehrgym.env.protocol import REASON_DESCRIPTIONS

pd.set_option("display.max_columns", 40, "display.width", 250, "display.max_colwidth", 200)
ex = explore.NoiseExplorer(db_path, bench_dir)
steps = lesson.lesson_pairs(ex, seed=seed)
pd.Series(REASON_DESCRIPTIONS, name="abstention reasons").to_frame()
"""),
    md("## Exercise 1 (record-level noise)"),
    code("HTML(lesson.exercise_html(ex, steps, 1))"),
    md("What would you answer?"),
    code("""
answer_1 = None           # e.g. "ANSWER: 7.2" or "ABSTAIN: insufficient_evidence: no rows for this stay"
HTML(lesson.check_answer(ex, steps, 1, answer_1, use_key=use_answer_key))
"""),
    md("## Exercise 2 (value-level noise)"),
    code("HTML(lesson.exercise_html(ex, steps, 2))"),
    md("What would you answer?"),
    code("""
answer_2 = None
HTML(lesson.check_answer(ex, steps, 2, answer_2, use_key=use_answer_key))
"""),
    md("## Exercise 3 (query-level noise)"),
    code("HTML(lesson.exercise_html(ex, steps, 3))"),
    md("What would you answer?"),
    code("""
answer_3 = None
HTML(lesson.check_answer(ex, steps, 3, answer_3, use_key=use_answer_key))
"""),
    md("""
## Open exercises

1. **Where does the skeptic fail?** The table lists noisy questions the scripted `skeptic` agent
   (generic checks: existence, plausibility, duplicates, units, windows) gets wrong. Pick one, open
   it in notebook 04 (`pair_id = ...`) and explain in a few sentences which check was missing or
   misfired, and what a better check would be.
2. **Write the check.** For one subtype, write the SQL of its check (the teaching card's *the
   check that catches it*) and run it on the pair with `ex.query(sql, task.overlay)`.
3. **Argue a reason.** For a pair that expects an abstention, argue why the accepted reasons fit
   and the others do not (`docs/noise.md` lists them).
"""),
    code("""
failures = lesson.agent_failures(ex, agent, limit=limit_pairs)
print(f"{agent} failed on {len(failures)} of {limit_pairs} noisy questions tried")
failures
"""),
    md("Your explanation (exercise 1): *…*"),
    md("## Answer key (hidden: expand the cell to see it)"),
    code("lesson.answer_key(ex, steps)", tags=("answer-key",), hidden=True),
])
print("notebooks written to", OUT)

# ---------------------------------------------------------------------------------------------
write("05_train", [
    md("""
# 05 · Training in the gym

Does training inside the gym make an agent more robust on Noise questions? This notebook exports
agent trajectories of the **train split** as SFT data (`ehrgym train sft-data`: compact
plain-text protocol, successful episodes only), fine-tunes a small model on them
(`ehrgym train sft`, TRL's `SFTTrainer`), evaluates the model before and after on `dev_pairs`
Clean–Noise pairs of the **dev split** through the runner (the `hf` agent) and plots Clean, Noise
and pair success with 95 % CIs. RL with the verifier as reward is `ehrgym train grpo` (see
`configs/train/`).

`model`: a local model directory (e.g. Gemma 3 270M converted by `ehrgym train convert-gguf`);
`gguf`: a GGUF file converted here; neither: a tiny random model, which only shows that the
pipeline runs (its success is 0 before and after). `runs`: train-split run directories; none: a
skeptic run on `train_pairs` train pairs is made. `make reproduce` does not run this notebook;
`make train-smoke` and `benchmarks/bench_train.py --full` are the command-line routes.
"""),
    params("""
runs = []                 # train-split run directories (empty: a skeptic run is made here)
bench = "../data/bench"
db = "../data/synth.duckdb"
model = None              # a local model directory
gguf = None               # or a GGUF file to convert
out_dir = "../data/train"
train_pairs = 20          # pairs of the skeptic run when runs is empty (None: all)
steps = 20                # SFT steps
max_chars = 6000          # compact examples: characters per example
max_length = 1536         # SFT tokens per example
dev_pairs = 40            # Clean–Noise dev pairs evaluated before and after
env_steps = 8             # episode step limit of the evaluation
max_tokens = 256          # tokens per model reply
seed = 0
progress = True
"""),
    code("""
import pandas as pd
from IPython.display import Image, display

from ehrgym.train import notebook as nb
from ehrgym.train.config import SftSettings
from ehrgym.train.sft import run_sft

pd.set_option("display.max_columns", 40, "display.width", 250)
base = nb.base_model(model, out_dir, gguf, seed)
train = nb.train_runs(runs, bench, db, out_dir, train_pairs, seed, progress)
data, stats = nb.export(train, out_dir, "text", max_chars)
print(stats.render())
"""),
    md("""
## Supervised fine-tuning
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
result = run_sft(SftSettings(model=base, data=str(data), output_dir=f"{out_dir}/sft-model", seed=seed,
                             trl={"max_steps": steps, "max_length": max_length, "per_device_train_batch_size": 1}))
pd.DataFrame([e for e in result.logs if "loss" in e])[["step", "loss"]]
"""),
    md("""
## Before and after, on dev pairs
"""),
    code("""
before = nb.evaluate(bench, db, base, f"{out_dir}/run-before", dev_pairs, 1, env_steps, max_tokens, seed, progress)
after = nb.evaluate(bench, db, str(result.output_dir), f"{out_dir}/run-after", dev_pairs, 1, env_steps, max_tokens,
                    seed, progress)
table = nb.before_after(before, after, seed)
table
"""),
    code("""
display(Image(filename=str(nb.plot(table, f"{out_dir}/before_after.png"))))
"""),
])


write("06_transfer", [
    md("""
# 06 · Transfer to external EHR benchmarks

Do gains in the gym carry over to public EHR benchmarks, scored by their own rules? This notebook
builds the external benchmarks that are available (`ehrgym external build`), runs the same agents
on them (`ehrgym eval run`: any agent, `k` trials, resumable) and shows the transfer table and
figure — per benchmark: the official metric (RS(c) for EHRSQL, the success rate for MedAgentBench,
also per task type), answer accuracy and abstention precision/recall — next to gym runs when
`gym_runs` names them.

EHRSQL 2024 runs offline (its database is included with the question set). EHRSQL 2022 and
MIMICSQL need your credentialed SQLite database: pass it in `resources`, e.g.
`{"ehrsql-2022-mimic-iii": {"db": "/path/mimic_iii.sqlite"}}`. MedAgentBench v2 needs its FHIR server
(the benchmark's docker image, see README): `{"medagentbench-v2": {"fhir_url": "http://localhost:8080/fhir/"}}`.
Without them these benchmarks are skipped and the reason is shown. With no LLM configured (`model` or `EHRGYM_MODEL`) only the scripted baselines
that make sense here run: `external-oracle` (ceiling) and `external-abstain` (floor). `make
reproduce` does not run this notebook.
"""),
    params("""
benchmarks = ["ehrsql-2024", "ehrsql-2022-mimic-iii", "ehrsql-2022-eicu", "mimicsql", "medagentbench-v2"]
agents = None             # None: the scripted baselines, plus "chat" when an LLM is configured
resources = {}            # benchmark -> {"db": path} or {"fhir_url": url} for those that run on yours
data = None               # external data folder (None: $EHRGYM_EXTERNAL_DIR or ../shared/external)
out_dir = "../data/external"
split = "dev"             # the split evaluated (dev = the validation split; a benchmark without it runs whole)
limit = None              # only the first N questions
k = 1                     # trials per question
workers = 1
model = None              # chat agent: model name (or EHRGYM_MODEL)
base_url = None           # chat agent: OpenAI-compatible endpoint
gym_runs = []             # gym run directories to compare with (e.g. ../data/runs/<bench>/chat-<model>)
progress = True
"""),
    code("""
import pandas as pd
from IPython.display import Image, display

from ehrgym.external import notebook as transfer

pd.set_option("display.max_columns", 40, "display.width", 250)
agents, why = transfer.agents_to_run(agents, model)
print(why)
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
# (what runs now depends on what is already built and stored; timings vary)
result = transfer.build_and_run(benchmarks, agents, out_dir, data=data, resources=resources, split=split,
                                limit=limit, k=k, workers=workers, model=model, base_url=base_url, progress=progress)
for name, path in result.built.items():
    print(f"{name}: built in {path}")
for name, reason in result.skipped.items():
    print(f"{name}: skipped — {reason}")
"""),
    md("""
## Transfer table and figure

RS(c): +1 for a correct answer or an abstention on an unanswerable question, 0 for an abstention on
an answerable one, −c for a wrong answer (c = 0, 5, 10, N); percentages, mean over trials.
"""),
    code("""
table = transfer.transfer_report(result.run_dirs, out_dir, gym_runs)
table
"""),
    md("""
Success rate per benchmark and system: overall, and for MedAgentBench (its official metric)
per task type task1 … task10.
"""),
    code("""
pd.read_csv(f"{out_dir}/tables/transfer_by_task_type.csv")
"""),
    code("""
display(Image(filename=f"{out_dir}/figures/transfer.png"))
"""),
])
