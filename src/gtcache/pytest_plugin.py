"""pytest plugin: ``pytest --gtcache[=DIR]`` serves the session's gt4py compilations from a
store and reports its use; ``--gtcache-require-warm`` fails a session that had to compile.

Installed as the ``pytest11`` entry point ``gtcache``. Inert unless asked for (the
option, or the ``gtcache_dir`` ini setting): it imports gt4py only then. Under
pytest-xdist each worker installs the hook; the summary then covers the controller only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gtcache.gt4py.hook import Hook

_HOOK: pytest.StashKey[Hook] = pytest.StashKey()
#: Statuses that mean the session had to compile (or could not store) something.
_NOT_WARM = ("compiled", "failed", "bypassed")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gtcache", "gtcache: persistent cache of compiled GT4Py programs")
    group.addoption(
        "--gtcache", nargs="?", const="", default=None, metavar="DIR",
        help="Serve gt4py compilations from a gtcache store (DIR; else GTCACHE_DIR or the"
        " default location) and print what it saved.",
    )
    group.addoption(
        "--gtcache-require-warm", action="store_true", default=False,
        help="Fail the session if any program variant had to be compiled (CI after 'gtcache warm').",
    )
    parser.addini("gtcache_dir", "Store for --gtcache (enables the plugin when set).", default="")


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("--gtcache")
    ini = config.getini("gtcache_dir")
    if option is None and not ini and not config.getoption("--gtcache-require-warm"):
        return
    from gtcache.gt4py.hook import install

    config.stash[_HOOK] = install(option or ini or None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    hook = session.config.stash.get(_HOOK, None)
    if hook is None or not session.config.getoption("--gtcache-require-warm"):
        return
    if any(o.status in _NOT_WARM for o in hook.outcomes) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    hook = config.stash.get(_HOOK, None)
    if hook is None:
        return
    outcomes = hook.outcomes
    counts = {status: sum(o.status == status for o in outcomes) for status in ("hit", *_NOT_WARM)}
    spent = sum(o.seconds for o in outcomes if o.status == "compiled")
    saved = sum(o.saved_seconds for o in outcomes if o.status == "hit")
    root = hook.config.cache_dir or "(no store)"
    write = terminalreporter.write_line
    terminalreporter.section("gtcache")
    write(
        f"{counts['hit']} variants loaded from {root}, {counts['compiled']} compiled,"
        f" {counts['bypassed']} bypassed, {counts['failed']} failed;"
        f" {spent:.1f}s spent compiling, {saved:.1f}s saved"
    )
    misses = sorted((o for o in outcomes if o.status in _NOT_WARM), key=lambda o: -o.seconds)
    for outcome in misses[:5]:
        write(f"  {outcome.status}: {outcome.program} ({outcome.backend}) {outcome.seconds:.1f}s")
    if config.getoption("--gtcache-require-warm") and misses:
        write(f"--gtcache-require-warm: {len(misses)} variants were not in the store.", red=True)
