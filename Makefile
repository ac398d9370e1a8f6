# gtcache: `make demo` runs the built-in example, `make test` the test suite.
# Both create the virtual environment first (.venv, Python >= 3.12, gt4py pinned below).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
GT4PY_VERSION ?= 1.2.3
PY := $(VENV)/bin/python
DEMO_STORE ?= build/demo-store
PYTEST_ARGS ?=
# The package indexes configured on some machines print a warning per package; keep logs readable.
PIP := $(PY) -m pip --disable-pip-version-check
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: help venv demo test lint bench clean

help:
	@echo "make demo   - set up .venv, compile the built-in examples into $(DEMO_STORE), list it"
	@echo "make test   - set up .venv, lint (ruff, mypy --strict) and run the test suite"
	@echo "make bench  - run the benchmark (writes docs/benchmarks.md)"
	@echo "make clean  - remove .venv and build/"

$(VENV)/.installed-$(GT4PY_VERSION): pyproject.toml setup.py src/gtcache-autoload.pth scripts/find-python
	@python=$$(scripts/find-python) && echo "Creating $(VENV) with $$python" && "$$python" -m venv --clear $(VENV)
	@$(PIP) install -q --upgrade pip 2>&1 | $(QUIET_PIP)
	@echo "Installing gtcache (editable) and gt4py==$(GT4PY_VERSION) into $(VENV)"
	@$(PIP) install -q -e '.[test]' 'gt4py==$(GT4PY_VERSION)' 2>&1 | $(QUIET_PIP)
	@# Editable installs do not ship root-level files: put the start-up hook in place by hand.
	@$(PY) -c 'import shutil, sysconfig; shutil.copy("src/gtcache-autoload.pth", sysconfig.get_paths()["purelib"])'
	@$(PY) -c 'import gtcache, gt4py.next, dace, gtcache_cli'
	@touch $@

venv: $(VENV)/.installed-$(GT4PY_VERSION)

demo: venv
	@mkdir -p build
	$(PY) -O -m gtcache.demo --cache-dir $(DEMO_STORE)
	$(VENV)/bin/gtcache --cache-dir $(DEMO_STORE) ls

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check src cli tests bench
	$(VENV)/bin/mypy

bench: venv
	$(PY) -O bench/run.py

clean:
	rm -rf $(VENV) build
