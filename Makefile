# EHR-RobustGym — the two commands a new user runs:
#   make reproduce   build the default database + benchmark, run the baselines, regenerate tables/figures
#   make test        run the test suite (what CI runs)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ehrgym-installed

# reproduce parameters (override on the command line: make reproduce PATIENTS=500 SOURCE=demo)
SOURCE ?= synthetic
PATIENTS ?= 1000
SEED ?= 0
CONFIG ?= paper
K ?= 4
WORKERS ?= 2
SPLIT ?= test
MIMIC_DIR ?= ../shared/mimic-iv-demo-2.2
DATA := data
# pytest worker processes for make test / test-slow (pytest-xdist; each takes whole test files, so a file's
# module fixtures are built once); 0 runs in this process
TEST_WORKERS ?= 2
# seconds one test may take, its fixtures' setup included (pytest-timeout): a test that hangs fails with every
# thread's stack printed instead of holding CI until its deadline; the slowest setup takes ~6 min here
TEST_TIMEOUT ?= 1200
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
	--timeout=$(TEST_TIMEOUT) --timeout-method=thread --durations=15

.PHONY: venv lint test test-slow test-all reproduce llm-smoke train-smoke bench clean-data lock

LOCK := requirements/lock.txt
# optional extras to install too (CI: dev,hf,train,serve,ray,browser); their tests skip when absent
EXTRAS ?= dev

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e ".[$(EXTRAS)]"
	@touch $(STAMP)

venv: $(STAMP)

# the default suite; the slow end-to-end cases (tests/conftest.py SLOW_TESTS) run with `make test-slow`
test: lint
	$(PYTEST) -m "not slow"

# ruff (pyflakes, bugbear) on the code and tests, mypy on the package: both must be clean
lint: $(STAMP)
	$(BIN)/python -m ruff check ehrgym tests benchmarks scripts
	$(BIN)/python -m mypy ehrgym

test-slow: $(STAMP)
	$(PYTEST) -m slow

test-all: $(STAMP)
	$(PYTEST)

reproduce: $(STAMP)
	$(BIN)/python -m ehrgym.pipeline --source $(SOURCE) --patients $(PATIENTS) --seed $(SEED) \
		--config $(CONFIG) --k $(K) --workers $(WORKERS) --split $(SPLIT) --mimic-dir "$(MIMIC_DIR)" --data $(DATA)

llm-smoke: $(STAMP)
	$(BIN)/python scripts/llm_smoke.py

# skeptic run → SFT data → a few SFT steps (MODEL=<model dir>, else a tiny random model) → two GRPO steps
train-smoke: $(STAMP)
	MODEL="$(MODEL)" PY=$(BIN)/python bash scripts/train_smoke.sh

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# re-resolve pyproject.toml's ranges in a fresh venv and pin the result (after changing dependencies)
lock:
	PYTHON=$(PYTHON) bash scripts/lock.sh

clean-data:
	rm -rf $(DATA)/*.duckdb $(DATA)/bench $(DATA)/runs $(DATA)/notebooks
