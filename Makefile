# gtcache: `make demo` runs the built-in example, `make test` the test suite, `make docs` the site.
# Both create the virtual environment first (.venv, Python >= 3.12, gt4py pinned below).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
GT4PY_VERSION ?= 1.2.3
# `make test` also runs the compatibility subset (the tests marked `compat`: everything that
# goes through gt4py) against this gt4py (icon4py 0.4.1 pins it), in its own venv, beside the suite;
# `make test GT4PY_ALSO=` skips that, `make test-suite GT4PY_VERSION=1.2.1 VENV=.venv-gt4py-1.2.1`
# runs the whole suite there.
GT4PY_ALSO ?= 1.2.1
PY := $(VENV)/bin/python
DEMO_STORE ?= build/demo-store
PYTEST_ARGS ?=
# The package indexes configured on some machines print a warning per package; keep logs readable.
PIP := $(PY) -m pip --disable-pip-version-check
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }
# mkdocs-material prints a banner about its end of life on every build; keep logs readable.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

.PHONY: help venv demo test test-fast test-suite lint docs docs-serve docs-record reliability bench clean

help:
	@echo "make demo   - set up .venv, compile the built-in examples into $(DEMO_STORE), list it"
	@echo "make test   - set up .venv, lint (ruff, mypy --strict, import-linter, the docs build), run the test suite"
	@echo "              against gt4py $(GT4PY_VERSION), then its compatibility subset against gt4py $(GT4PY_ALSO)"
	@echo "make test-fast - the tests not marked slow or heavy, against gt4py $(GT4PY_VERSION), in two halves at once (under 3 minutes: 2.5 here)"
	@echo "make docs   - build the documentation site into build/site (mkdocs build --strict)"
	@echo "make docs-serve  - serve the documentation at http://127.0.0.1:8000, rebuilt on edits"
	@echo "make docs-record - re-record the terminal output in docs/recorded/ (compiles; a few minutes)"
	@echo "make reliability - run the reliability suite alone (a few minutes; its figures go to docs/recorded/)"
	@echo "make bench  - run the benchmark (writes docs/benchmarks.md)"
	@echo "make clean  - remove .venv and build/"

$(VENV)/.installed-$(GT4PY_VERSION): pyproject.toml setup.py MANIFEST.in src/gtcache-autoload.pth scripts/find-python
	@python=$$(scripts/find-python) && echo "Creating $(VENV) with $$python" && "$$python" -m venv --clear $(VENV)
	@$(PIP) install -q --upgrade pip 2>&1 | $(QUIET_PIP)
	@echo "Installing gtcache (editable) and gt4py==$(GT4PY_VERSION) into $(VENV)"
	@$(PIP) install -q -e '.[test,docs]' 'gt4py==$(GT4PY_VERSION)' 2>&1 | $(QUIET_PIP)
	@# The editable install ships the start-up hook itself (setup.py); check it is there.
	@$(PY) -c 'import gtcache, gt4py.next, dace, gtcache_cli, os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "gtcache-autoload.pth")), "gtcache-autoload.pth not installed"'
	@touch $@

venv: $(VENV)/.installed-$(GT4PY_VERSION)

demo: venv
	@mkdir -p build
	$(PY) -O -m gtcache.demo --cache-dir $(DEMO_STORE)
	$(VENV)/bin/gtcache --cache-dir $(DEMO_STORE) ls

# The compatibility subsets run beside the suite, each in the background with its output in
# build/test-gt4py-<version>.log (printed when it ends): most of a test is waiting for a
# compiler or a child process, so on 2 cores the two together take little more than the suite.
test: lint
	@for version in $(GT4PY_ALSO); do $(MAKE) --no-print-directory venv GT4PY_VERSION=$$version VENV=.venv-gt4py-$$version; done
	@sh scripts/test-servers
	@mkdir -p build; pids=""; \
	trap 'kill $$pids 2>/dev/null || true' EXIT; \
	for version in $(GT4PY_ALSO); do \
		echo "=== the compatibility subset against gt4py $$version, beside the suite (build/test-gt4py-$$version.log)"; \
		$(MAKE) --no-print-directory test-suite GT4PY_VERSION=$$version VENV=.venv-gt4py-$$version \
			PYTEST_ARGS="-m compat -p no:cacheprovider $(PYTEST_ARGS)" > build/test-gt4py-$$version.log 2>&1 & \
		pids="$$pids $$!"; \
	done; \
	status=0; $(MAKE) --no-print-directory test-suite || status=1; \
	set -- $$pids; \
	for version in $(GT4PY_ALSO); do \
		wait $$1 || status=1; shift; \
		echo "=== the compatibility subset against gt4py $$version (build/test-gt4py-$$version.log):"; \
		cat build/test-gt4py-$$version.log; \
	done; \
	pids=""; exit $$status

# Two halves at once (most of a test waits for a compiler or a child process): the tests that
# go through gt4py in the background (output in build/test-fast-gt4py.log, printed when it
# ends), the rest in the foreground. A half that a -k selects nothing of is no failure (pytest's
# exit 5); both are.
test-fast: venv
	@sh scripts/test-servers
	@mkdir -p build; pid=""; \
	trap '[ -z "$$pid" ] || kill $$pid 2>/dev/null || true' EXIT; \
	$(PY) -m pytest -m "compat and not slow and not heavy" -p no:cacheprovider $(PYTEST_ARGS) > build/test-fast-gt4py.log 2>&1 & \
	pid=$$!; \
	rest=0; $(PY) -m pytest -m "not compat and not slow and not heavy" $(PYTEST_ARGS) || rest=$$?; \
	through=0; wait $$pid || through=$$?; pid=""; \
	echo "=== the tests that go through gt4py (build/test-fast-gt4py.log):"; cat build/test-fast-gt4py.log; \
	for code in $$rest $$through; do [ $$code = 0 ] || [ $$code = 5 ] || exit 1; done; \
	[ "$$rest$$through" != 55 ]

test-suite: venv
	@sh scripts/test-servers
	$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check src cli tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(MKDOCS) build --strict -q

docs: venv
	$(MKDOCS) build --strict

docs-serve: venv
	$(MKDOCS) serve

docs-record: venv
	$(PY) scripts/record-docs

reliability: venv
	$(PY) -m pytest tests/reliability tests/security $(PYTEST_ARGS)
	cp build/reliability-figures.md docs/recorded/reliability-figures.md

bench: venv
	@# gtcache's own modules byte-compiled, as an install from a wheel has them (this machine
	@# sets PYTHONDONTWRITEBYTECODE=1: without it, every start would compile them again).
	$(PY) -m compileall -q src cli > /dev/null
	$(PY) -O -m compileall -q src cli > /dev/null
	@# The installed packages too at -O, which gt4py asks its users to run with: pip writes
	@# only the plain .pyc files, so every -O process compiled the modules it imports from
	@# source (dace's lazy import of sympy in its load was 60 of a dace hit's 105 ms). A few
	@# files in dace's tree are Python 2 and fail: compileall's status is ignored.
	@$(PY) -O -m compileall -q -j0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null 2>&1 || true
	$(PY) -O bench/run.py

clean:
	rm -rf $(VENV) .venv-gt4py-* build
