# gtcache: `make demo` runs the built-in example, `make test` the test suite, `make docs` the site.
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
# mkdocs-material prints a banner about its end of life on every build; keep logs readable.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

.PHONY: help venv demo test test-suite lint docs docs-serve docs-record reliability bench clean

help:
	@echo "make demo   - set up .venv, compile the built-in examples into $(DEMO_STORE), list it"
	@echo "make test   - set up .venv, lint (ruff, mypy --strict, the docs build), run the test suite against"
	@echo "              gt4py $(GT4PY_VERSION), then against gt4py $(GT4PY_ALSO) in .venv-gt4py-$(GT4PY_ALSO)"
	@echo "make docs   - build the documentation site into build/site (mkdocs build --strict)"
	@echo "make docs-serve  - serve the documentation at http://127.0.0.1:8000, rebuilt on edits"
	@echo "make docs-record - re-record the terminal output in docs/recorded/ (compiles; a few minutes)"
	@echo "make reliability - run the reliability suite alone (a few minutes; its figures go to docs/recorded/)"
	@echo "make bench  - run the benchmark (writes docs/benchmarks.md)"
	@echo "make clean  - remove .venv and build/"

$(VENV)/.installed-$(GT4PY_VERSION): pyproject.toml setup.py src/gtcache-autoload.pth scripts/find-python
	@python=$$(scripts/find-python) && echo "Creating $(VENV) with $$python" && "$$python" -m venv --clear $(VENV)
	@$(PIP) install -q --upgrade pip 2>&1 | $(QUIET_PIP)
	@echo "Installing gtcache (editable) and gt4py==$(GT4PY_VERSION) into $(VENV)"
	@$(PIP) install -q -e '.[test,docs]' 'gt4py==$(GT4PY_VERSION)' 2>&1 | $(QUIET_PIP)
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
	$(MKDOCS) build --strict -q

docs: venv
	$(MKDOCS) build --strict

docs-serve: venv
	$(MKDOCS) serve

docs-record: venv
	$(PY) scripts/record-docs

reliability: venv
	$(PY) -m pytest tests/reliability $(PYTEST_ARGS)
	cp build/reliability-figures.md docs/recorded/reliability-figures.md

bench: venv
	$(PY) -O bench/run.py

clean:
	rm -rf $(VENV) .venv-gt4py-* build
