# Casekeeper: `make run` runs it, `make test` tests it. Both work from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp

.PHONY: setup lint test run demo bench clean

setup: $(STAMP) $(NODE_STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . \
	  || $(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

# The Cosmos DB test server (@vercel/cosmosdb-server), pinned in package-lock.json.
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# pytest exits 5 when it collects nothing; that is a broken suite, so it fails here too.
test: lint
	@$(BIN)/pytest || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests: that is a failure"; exit $$rc; }

run: setup
	$(BIN)/casekeeper demo

bench: setup
	$(BIN)/python -m benchmarks.guarded_effect

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache
