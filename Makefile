# Casekeeper: `make run` runs it, `make test` tests it. Both work from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUN_STAMP := $(VENV)/.run-stamp
NODE_STAMP := node_modules/.installed-stamp
# The Functions worker's own indexing check runs on Python 3.13 (azure-functions-runtime); where a 3.13
# interpreter exists (pyenv provides one here), setup builds .venv313 for it.
# The first candidate that actually runs: a pyenv shim is on PATH even when its version is not active.
PYTHON313 ?= $(shell for p in $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.13*/bin/python3.13 2>/dev/null) \
  $$(command -v python3.13 2>/dev/null); do "$$p" -c 'import sys' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
STAMP313 := .venv313/.installed-stamp

.PHONY: help setup setup-run lint test test-313 run demo bench sim chaos screenshots clean
.DEFAULT_GOAL := help

# make help: every target with its "##" line.
help: ## this list
	@echo "Casekeeper: make run to try it, make test to test it."
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z0-9-]+):.*## /  make \1\t/' | expand -t 20

setup: $(STAMP) $(NODE_STAMP) $(if $(PYTHON313),$(STAMP313)) ## everything the tests need: .venv, npm packages, .venv313

# What make run needs: the app's own requirements in .venv, nothing else.
setup-run: $(RUN_STAMP) ## only what make run needs (.venv with the app's requirements)

$(RUN_STAMP): requirements.txt pyproject.toml casekeeper/pyproject.toml
	@echo "==> setting up $(VENV) for the app (first time: about a minute; pip shows what it installs)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e ./casekeeper
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

$(STAMP): $(RUN_STAMP) requirements-dev.txt
	@echo "==> adding the test and lint tools to $(VENV)"
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt -r requirements-dev.txt
	@touch $@

$(STAMP313): requirements.txt
	@echo "==> setting up .venv313 (Python 3.13, for the Functions worker's own indexing check in the tests)"
	$(PYTHON313) -m venv .venv313
	.venv313/bin/python -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt azure-functions-runtime==1.3.0
	@touch $@

# The Cosmos DB test server (@vercel/cosmosdb-server), pinned in package-lock.json.
$(NODE_STAMP): package.json package-lock.json
	@echo "==> installing the Cosmos DB test server (npm ci)"
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# checkov in a virtual environment of its own (its pins conflict with pytest's): the Bicep lint.
CHECKOV_STAMP := .venv-checkov/.installed-stamp

$(CHECKOV_STAMP): requirements-checkov.txt
	@echo "==> installing checkov (the Bicep lint) into .venv-checkov"
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

# lint-imports: the layers, as import-linter contracts in pyproject.toml ([tool.importlinter]).
lint: setup $(CHECKOV_STAMP) ## ruff, mypy, the import layers (lint-imports) and the Bicep lint (checkov)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo
	$(BIN)/python scripts/lint_infra.py

# The suite in two passes, the same for make test and make test-313: first on PYTEST_WORKERS processes
# (pytest-xdist), each test file kept on one worker (--dist loadfile: a module's fixtures, such as the host
# the browser tests drive, start once); then the tests marked `serial` alone (the seeded chaos run: it loads
# both cores itself and its hosts work against the clock). Both passes run; either failing fails the target.
# pytest exits 5 when it collects nothing; that is a broken suite, so it fails here too.
PYTEST_WORKERS ?= 2
define run_suite
$(1) -n $(PYTEST_WORKERS) --dist loadfile -m "not serial"; first=$$?; \
  $(1) -m serial; second=$$?; \
  for rc in $$first $$second; do [ $$rc -eq 5 ] && echo "pytest collected no tests: that is a failure"; done; \
  exit $$(( first ? first : second ))
endef

test: lint ## ruff, mypy and the whole test suite
	@$(call run_suite,$(BIN)/pytest)

# The whole suite again on Python 3.13, the Python infra/ deploys by default (pythonVersion), in a virtual
# environment of its own with requirements.txt and requirements-dev.txt: the wheels the deployed app
# imports, and the same tests, on that interpreter. CI runs it after make test.
VENV_TEST313 := .venv-test313
STAMP_TEST313 := $(VENV_TEST313)/.installed-stamp

$(STAMP_TEST313): requirements.txt requirements-dev.txt pyproject.toml casekeeper/pyproject.toml
	@test -n "$(PYTHON313)" || { echo "make test-313 needs a Python 3.13 interpreter (pyenv install 3.13, or PYTHON313=/path/to/python3.13)"; exit 1; }
	@echo "==> setting up $(VENV_TEST313) (Python 3.13, the whole test suite again)"
	$(PYTHON313) -m venv $(VENV_TEST313)
	$(VENV_TEST313)/bin/python -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt -r requirements-dev.txt
	$(VENV_TEST313)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e ./casekeeper
	$(VENV_TEST313)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

test-313: setup $(STAMP_TEST313) ## the whole test suite again on Python 3.13, the deployed Python
	@$(VENV_TEST313)/bin/python --version
	@$(call run_suite,$(VENV_TEST313)/bin/pytest)

# FRESH=1 starts from an empty data folder; otherwise the cases are kept across restarts.
run: setup-run ## start the supplier stub and the local host, with one approval waiting (FRESH=1: start afresh)
	@CASEKEEPER_FRESH=$(FRESH) scripts/run-local.sh

demo: setup-run ## the failure modes in one table
	$(BIN)/casekeeper demo

# What the guard costs (benchmarks/guarded_effect.py), then end to end against DBOS (benchmarks/e2e.py,
# about 2-3 minutes). The DBOS baseline's pin (requirements-bench.txt) goes into .venv here only.
# More: make bench E2E_ARGS="--n 50 --skip-dbos --report bench.json".
BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

# Each runs even when one before it fails; any failing fails the target.
bench: setup $(BENCH_STAMP) ## what the guard and a whole case cost, against DBOS; the views at 1k and 100k cases
	@$(BIN)/python -m benchmarks.guarded_effect; first=$$?; echo; \
	  $(BIN)/python -m benchmarks.scale; second=$$?; echo; \
	  $(BIN)/python -m benchmarks.e2e $(E2E_ARGS) && exit $$(( first || second ))

# The seeded simulator (docs/simulator.md): seeds from SIM_SEED on, for SIM_SECONDS; a violation prints its
# seed and shrunk steps and exits non-zero. More: make sim SIM_SECONDS=3600 SIM_ARGS="--steps 80".
SIM_SEED ?= 0
SIM_SECONDS ?= 60
sim: setup ## the seeded simulator for SIM_SECONDS (default 60) from SIM_SEED (default 0)
	$(BIN)/casekeeper sim --seed $(SIM_SEED) --seconds $(SIM_SECONDS) $(SIM_ARGS)

# The simulator first, then the promise under faults and kill -9, checked from outside with real processes
# (about 4-5 minutes). Exits non-zero on any violation. More: make chaos SIM_SECONDS=600 CHAOS_ARGS="--hosts 2
# --seed 42" (or --store cosmos, --report FILE).
chaos: setup ## the simulator, then the guarantees under faults and kill -9 with real processes (about 4-5 minutes)
	$(BIN)/casekeeper sim --seed $(SIM_SEED) --seconds $(SIM_SECONDS) $(SIM_ARGS)
	$(BIN)/casekeeper chaos $(CHAOS_ARGS)

# The README's pictures of the approval and ops pages, retaken by the browser tests.
screenshots: setup ## retake the pages' pictures in docs/
	CASEKEEPER_SCREENSHOTS=$(CURDIR)/docs $(BIN)/pytest -q tests/browser

clean: ## delete .venv, .venv313, .venv-test313, .venv-checkov, node_modules and caches (not the data in .casekeeper)
	rm -rf $(VENV) .venv313 $(VENV_TEST313) .venv-checkov node_modules .mypy_cache .ruff_cache .pytest_cache
