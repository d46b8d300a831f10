#!/usr/bin/env bash
# make train-smoke: skeptic run on train tasks → SFT data → a few SFT steps → two GRPO steps with the
# real environment. Small model: MODEL=<model dir> (e.g. from `ehrgym train convert-gguf`), else the tiny
# random one. Everything lands in data/train-smoke/.
set -euo pipefail
PY=${PY:-.venv/bin/python}
EHRGYM="$PY -m ehrgym.cli"
D=data/train-smoke
mkdir -p "$D"
t0=$(date +%s)
[ -f "$D/synth.duckdb" ] || $EHRGYM db synth --patients 200 --seed 7 --out "$D/synth.duckdb"
[ -d "$D/bench" ] || $EHRGYM bench build --db "$D/synth.duckdb" --config small --seed 0 --out "$D/bench" --quiet
$EHRGYM eval run --bench "$D/bench" --db "$D/synth.duckdb" --agent skeptic --out "$D/run-skeptic-train" \
  --k 1 --split train --limit-pairs 40 --no-progress
$EHRGYM train sft-data --runs "$D/run-skeptic-train" --out "$D/sft-text.jsonl" --format text --max-chars 6000 \
  --only-success
$EHRGYM train sft-data --runs "$D/run-skeptic-train" --out "$D/sft-tools.jsonl" --format tools
[ -d "$D/tiny-model" ] || $EHRGYM train tiny-model --out "$D/tiny-model"
$EHRGYM train sft --config configs/train/sft-cpu-smoke.yaml --model "${MODEL:-$D/tiny-model}"
TRL_EXPERIMENTAL_SILENCE=1 $EHRGYM train grpo --config configs/train/grpo-cpu-smoke.yaml
# the training notebook at the smallest scale (NOTEBOOK=0 skips it): export → 1 SFT step → before/after on 1 dev pair
if [ "${NOTEBOOK:-1}" = 1 ]; then
  A=$(pwd)
  M=$(realpath "${MODEL:-$D/tiny-model}")
  $PY -m papermill notebooks/05_train.ipynb "$D/05_train.ipynb" --cwd notebooks -k python3 --log-level WARNING -y "
runs: ['$A/$D/run-skeptic-train']
bench: '$A/$D/bench'
db: '$A/$D/synth.duckdb'
out_dir: '$A/$D/nb'
model: '$M'
steps: 1
max_chars: 6000
max_length: 1536
dev_pairs: 1
env_steps: 2
max_tokens: 16
progress: false"
fi
echo "train-smoke done in $(( $(date +%s) - t0 )) s"
