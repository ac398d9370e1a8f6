# gtcache: `make demo` runs the built-in example, `make test` the test suite.
# Both create the virtual environment first (.venv, Python >= 3.12, gt4py pinned below).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
GT4PY_VERSION ?= 1.2.3
# `make test` also runs the suite against this gt4py (icon4py 0.4.1 pins it), in its own venv;
# `make test GT4PY_ALSO=` skips that.
GT4PY_ALSO ?= 1.2.1
PY := $(VENV)/bin/python
DEMO_STORE ?= build/demo-store
PYTEST_ARGS ?=
# The package indexes configured on some machines print a warning per package; keep logs readable.
PIP := $(PY) -m pip --disable-pip-version-check
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: help venv demo test test-suite lint bench clean

help:
	@echo "make demo   - set up .venv, compile the built-in examples into $(DEMO_STORE), list it"
	@echo "make test   - set up .venv, lint (ruff, mypy --strict), run the test suite against"
	@echo "              gt4py $(GT4PY_VERSION), then against gt4py $(GT4PY_ALSO) in .venv-gt4py-$(GT4PY_ALSO)"
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

test: lint test-suite
	@for version in $(GT4PY_ALSO); do \
		echo "=== the test suite again, against gt4py $$version"; \
		$(MAKE) --no-print-directory test-suite GT4PY_VERSION=$$version VENV=.venv-gt4py-$$version || exit 1; \
	done

test-suite: venv
	$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check src cli tests bench
	$(VENV)/bin/mypy

bench: venv
	$(PY) -O bench/run.py

clean:
	rm -rf $(VENV) .venv-gt4py-* build
