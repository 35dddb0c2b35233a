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

.PHONY: all test unit demo build krew check-manifest install lint bench clean peers

all: build

$(BIN)/.ready: requirements-dev.txt requirements-zipapp.txt setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# The zipapp: the pinned synchronous-client dependencies (installed without their console
# scripts, whose first line names this checkout's interpreter, and without what it never
# imports: the asyncio client, test suites), the package's sources (copied, so no build dir or
# machine path ends up inside), and the preamble that keeps the extraction directory tidy;
# then its __main__.py is replaced by a version guard that any Python can read, followed by
# krew/boot.py, and each module gets its byte code beside it (hash-based, so the first run
# unpacks and compiles nothing). The same sources give the same bytes in any directory.
$(ZIPAPP): $(BIN)/.ready requirements-zipapp.txt krew/zipapp_main.py krew/boot.py krew/preamble.py krew/build.py \
           $(shell find kubectl_kvreset -name '*.py' -o -name py.typed -o -name '*.schema.json' 2>/dev/null)
	rm -rf $(STAGE)
	mkdir -p $(STAGE)/site-packages $(dir $(ZIPAPP))
	umask 022 && $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile --no-deps \
	    --no-warn-script-location --target $(STAGE)/site-packages -r requirements-zipapp.txt && \
	    $(BIN)/python krew/build.py drop-scripts $(STAGE)/site-packages && \
	    $(BIN)/python krew/build.py prune $(STAGE)/site-packages && \
	    cp -R kubectl_kvreset $(STAGE)/site-packages/ && \
	    find $(STAGE) -name __pycache__ -prune -exec rm -rf {} + && \
	    $(BIN)/shiv --reproducible --python '/usr/bin/env python3' \
	    --preamble krew/preamble.py --site-packages $(STAGE)/site-packages \
	    --entry-point kubectl_kvreset.cli:main --output-file $(STAGE)/kubectl-kvreset
	$(BIN)/python krew/build.py guard $(STAGE)/kubectl-kvreset $(ZIPAPP)
	rm -rf $(STAGE)

build: $(ZIPAPP)

# The krew release archive and the manifest that names its sha256 (plugin.yaml at the root).
krew: $(ZIPAPP)
	$(BIN)/python krew/build.py archive --zipapp $(ZIPAPP) --license LICENSE \
	    --completion krew/kubectl_complete-kvreset --output $(ARCHIVE)
	$(BIN)/python krew/build.py manifest --archive $(ARCHIVE) --homepage '$(HOMEPAGE)' \
	    --uri '$(RELEASE_URL)' --output $(MANIFEST)

# The committed plugin.yaml must name the sha256 of the archive this checkout builds (.ci/run).
check-manifest: $(ZIPAPP)
	@tmp=$$(mktemp -d) && \
	$(MAKE) --no-print-directory krew ARCHIVE=$$tmp/kubectl-kvreset.tar.gz MANIFEST=$$tmp/plugin.yaml >/dev/null && \
	if diff -u plugin.yaml $$tmp/plugin.yaml; then echo "plugin.yaml matches the archive built here"; rm -rf $$tmp; \
	else echo "plugin.yaml is stale: run 'make krew' and commit it" >&2; rm -rf $$tmp; exit 1; fi

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
# LMCache, Mooncake, SGLang (and sglang-router) in venvs under $${KVRESET_PEERS_DIR:-.peers}, Redis from Debian.
peers:
	PYTHON=$(PYTHON) bash tests/peers/install.sh

unit: $(BIN)/.ready
	$(BIN)/python -m pytest -q tests/unit

demo: $(BIN)/.ready $(ZIPAPP)
	$(BIN)/python -m tests.demo

# ruff, mypy strict, and the import layers contract (setup.cfg [importlinter]).
lint: $(BIN)/.ready
	$(BIN)/ruff check kubectl_kvreset tests krew
	$(BIN)/mypy
	$(BIN)/lint-imports

# The goals table (docs/performance.md): start-up against kubectl, the cold first run, `clear
# --all` at 8, 64, 256 and 1024 pods against its floor and the manual procedure (8 and 64 pods)
# on the simulated cluster, then the details. About 5 minutes on 2 cores.
bench: $(BIN)/.ready $(ZIPAPP)
	KVRESET_BIN=$(ZIPAPP) $(BIN)/python -m tests.bench

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
