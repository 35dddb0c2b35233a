# kubectl-kvreset developer tasks. `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Release build (make build / krew / install). DIST, MANIFEST and BINDIR may be overridden, e.g.
# `make krew DIST=/tmp/out MANIFEST=/tmp/out/plugin.yaml`.
DIST     ?= dist
ZIPAPP   ?= $(DIST)/kubectl-kvreset
STAGE    := $(DIST)/.stage-zipapp
ARCHIVE  ?= $(DIST)/kubectl-kvreset.tar.gz
MANIFEST ?= plugin.yaml
HOMEPAGE ?= https://github.com/kubectl-kvreset/kubectl-kvreset
RELEASE_URL ?= $(HOMEPAGE)/releases/download/v{version}/kubectl-kvreset.tar.gz
PREFIX   ?= $(HOME)/.local
BINDIR   ?= $(PREFIX)/bin
SOURCE_DATE_EPOCH ?= 1767225600
export SOURCE_DATE_EPOCH

.PHONY: all test unit demo build krew install lint bench clean peers

all: build

$(BIN)/.ready: requirements-dev.txt requirements-zipapp.txt setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# The zipapp: the package's sources (copied, so no build dir or machine path ends up inside) plus
# the pinned synchronous-client dependencies, with the preamble that removes stale extractions;
# then its __main__.py is replaced by a version guard that any Python can read.
$(ZIPAPP): $(BIN)/.ready requirements-zipapp.txt krew/zipapp_main.py krew/preamble.py krew/build.py \
           $(shell find kubectl_kvreset -name '*.py' -o -name py.typed 2>/dev/null)
	rm -rf $(STAGE)
	mkdir -p $(STAGE)/site-packages
	umask 022 && cp -R kubectl_kvreset $(STAGE)/site-packages/ && \
	    find $(STAGE) -name __pycache__ -prune -exec rm -rf {} + && \
	    $(BIN)/shiv --compile-pyc --reproducible --python '/usr/bin/env python3' \
	    --preamble krew/preamble.py --site-packages $(STAGE)/site-packages \
	    --entry-point kubectl_kvreset.cli:main --output-file $(STAGE)/kubectl-kvreset \
	    --no-deps -r requirements-zipapp.txt --quiet --disable-pip-version-check
	$(BIN)/python krew/build.py guard $(STAGE)/kubectl-kvreset $(ZIPAPP)
	rm -rf $(STAGE)

build: $(ZIPAPP)

# The krew release archive and the manifest that names its sha256 (plugin.yaml at the root).
krew: $(ZIPAPP)
	$(BIN)/python krew/build.py archive --zipapp $(ZIPAPP) --license LICENSE \
	    --completion krew/kubectl_complete-kvreset --output $(ARCHIVE)
	$(BIN)/python krew/build.py manifest --archive $(ARCHIVE) --homepage '$(HOMEPAGE)' \
	    --uri '$(RELEASE_URL)' --output $(MANIFEST)

# The plugin and its completion helper, in a directory on PATH (default ~/.local/bin).
install: $(ZIPAPP)
	install -d $(BINDIR)
	install -m 0755 $(ZIPAPP) $(BINDIR)/kubectl-kvreset
	install -m 0755 krew/kubectl_complete-kvreset $(BINDIR)/kubectl_complete-kvreset

# Two phases: the parallel suite without real servers, then the tests that start real servers
# (marker `peers`) one at a time, so the parallel run does not starve them. Exit 5 ("no tests
# collected", e.g. a checkout without peer tests selected) is not a failure of either phase.
test: $(BIN)/.ready $(ZIPAPP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not peers" || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -q -p no:xdist -m peers || [ $$? -eq 5 ]

# The real servers the `peers` tests run as pods (tests/peers/install.sh): vLLM's CPU build,
# LMCache, Mooncake in venvs under $${KVRESET_PEERS_DIR:-.peers}, Redis from Debian.
peers:
	PYTHON=$(PYTHON) bash tests/peers/install.sh

unit: $(BIN)/.ready
	$(BIN)/python -m pytest -q tests/unit

demo: $(BIN)/.ready $(ZIPAPP)
	$(BIN)/python -m tests.demo

lint: $(BIN)/.ready
	$(BIN)/ruff check kubectl_kvreset tests
	$(BIN)/mypy

# Start-up and `clear --all` (8, 64, 256 pods) against kubectl and the manual procedure on the
# simulated cluster; prints one table (README "Performance"). About 3 minutes on 2 cores.
bench: $(BIN)/.ready $(ZIPAPP)
	KVRESET_BIN=$(ZIPAPP) $(BIN)/python -m tests.bench

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
