# kubectl-kvreset developer tasks. `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ZIPAPP := dist/kubectl-kvreset
SOURCE_DATE_EPOCH ?= 1767225600
export SOURCE_DATE_EPOCH

.PHONY: all test unit demo build lint bench clean

all: build

$(BIN)/.ready: requirements-dev.txt requirements-zipapp.txt setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

$(ZIPAPP): $(BIN)/.ready requirements-zipapp.txt setup.cfg $(shell find kubectl_kvreset -name '*.py' 2>/dev/null)
	rm -rf build dist/.shiv-src
	mkdir -p dist
	$(BIN)/shiv --compile-pyc --reproducible --python '/usr/bin/env python3' \
	    --entry-point kubectl_kvreset.cli:main --output-file $(ZIPAPP) \
	    --no-deps --no-build-isolation . -r requirements-zipapp.txt --quiet --disable-pip-version-check
	rm -rf build

build: $(ZIPAPP)

test: $(BIN)/.ready $(ZIPAPP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

unit: $(BIN)/.ready
	$(BIN)/python -m pytest -q tests/unit

demo: $(BIN)/.ready $(ZIPAPP)
	$(BIN)/python -m tests.demo

lint: $(BIN)/.ready
	$(BIN)/ruff check kubectl_kvreset tests
	$(BIN)/mypy

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
