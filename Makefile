# Two commands on a fresh machine with Python 3.11 and make:
#   make run    set up .venv, run the default evaluation (kedro run), print a summary
#   make test   set up .venv, run the test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
export KEDRO_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1

.PHONY: setup run lint test test-all viz mlflow-ui bench clean

setup: $(VENV)/.installed

# The project and what `kedro run` needs.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# Plus the test tools and the optional runtimes the tests exercise: Dask (distributed
# inference) and torch + MiniLM (torch==2.13.0 is pinned: on this project's machines pip takes
# the CPU wheel; an unpinned torch would pull a multi-GB CUDA build).
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[test,dask,torch]"
	touch $@

run: setup
	$(BIN)/kedro run
	$(BIN)/python -m jevkedro.summary --no-lines

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/python scripts/import_cycles.py src/jevkedro
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m ""

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_scoring.py
	$(BIN)/python benchmarks/bench_zh_run.py

viz: setup
	$(BIN)/python scripts/viz.py

mlflow-ui: setup
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db

clean:
	rm -rf data/02_snapshots/*.tsv data/02_snapshots/*.json data/07_model_output/*/ data/08_reporting/*/ mlflow.db mlruns
