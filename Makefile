# Casekeeper: `make run` runs it, `make test` tests it. Both work from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
# The Functions worker's own indexing check runs on Python 3.13 (azure-functions-runtime); where a 3.13
# interpreter exists (pyenv provides one here), setup builds .venv313 for it.
# The first candidate that actually runs: a pyenv shim is on PATH even when its version is not active.
PYTHON313 ?= $(shell for p in $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.13*/bin/python3.13 2>/dev/null) \
  $$(command -v python3.13 2>/dev/null); do "$$p" -c 'import sys' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
STAMP313 := .venv313/.installed-stamp

.PHONY: setup lint test run demo bench chaos screenshots clean

setup: $(STAMP) $(NODE_STAMP) $(if $(PYTHON313),$(STAMP313))

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

$(STAMP313): requirements.txt
	$(PYTHON313) -m venv .venv313
	.venv313/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt azure-functions-runtime==1.3.0
	touch $@

# The Cosmos DB test server (@vercel/cosmosdb-server), pinned in package-lock.json.
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# checkov in a virtual environment of its own (its pins conflict with pytest's): the Bicep lint.
CHECKOV_STAMP := .venv-checkov/.installed-stamp

$(CHECKOV_STAMP): requirements-checkov.txt
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

lint: setup $(CHECKOV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python scripts/lint_infra.py

# pytest exits 5 when it collects nothing; that is a broken suite, so it fails here too.
test: lint
	@$(BIN)/pytest || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests: that is a failure"; exit $$rc; }

run: setup
	@scripts/run-local.sh

demo: setup
	$(BIN)/casekeeper demo

# What the guard costs (benchmarks/guarded_effect.py), then end to end against DBOS (benchmarks/e2e.py,
# about 2-3 minutes). The DBOS baseline's pin (requirements-bench.txt) goes into .venv here only.
# More: make bench E2E_ARGS="--n 50 --skip-dbos --report bench.json".
BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

# Both run even when the first fails; either failing fails the target.
bench: setup $(BENCH_STAMP)
	@$(BIN)/python -m benchmarks.guarded_effect; first=$$?; echo; \
	  $(BIN)/python -m benchmarks.e2e $(E2E_ARGS) && exit $$first

# The promise under faults and kill -9, checked from outside (about 3-4 minutes). Exits non-zero on any
# violation. More: make chaos CHAOS_ARGS="--hosts 2 --seed 42" (or --store cosmos, --report FILE).
chaos: setup
	$(BIN)/casekeeper chaos $(CHAOS_ARGS)

# The README's pictures of the approval and ops pages, retaken by the browser tests.
screenshots: setup
	CASEKEEPER_SCREENSHOTS=$(CURDIR)/docs $(BIN)/pytest -q tests/browser

clean:
	rm -rf $(VENV) .venv313 .venv-checkov node_modules .mypy_cache .ruff_cache .pytest_cache
