"""The gt4py side of gtcache: the only package that imports gt4py.

- ``install()`` / ``uninstall()`` / ``installed()``: serve every gt4py
  compilation of the process from a store (what ``GTCACHE_DIR`` does on its own).
- ``compile_variants``: compile (or load) a program's variants through a store,
  serially, and say what happened to each; ``plan_variants``: only their keys.
- ``publish_artifact`` / ``load_entry``: the lower-level halves.
- ``scalar_parameters``: a program's parameters and which are scalars (static arguments).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from gtcache.gt4py._compat import planning_backend, scalar_parameters
from gtcache.gt4py._loading import LoadedArtifact, load_entry, publish_artifact
from gtcache.gt4py._hook import HitVia, OutcomeStatus
from gtcache.gt4py.hook import (
    GtcacheWarning,
    Hook,
    Outcome,
    active_hook,
    install,
    installed,
    serving,
    uninstall,
)
from gtcache.settings import Settings
from gtcache.store import Store

__all__ = [
    "GtcacheWarning",
    "HitVia",
    "Hook",
    "LoadedArtifact",
    "Outcome",
    "OutcomeStatus",
    "active_hook",
    "compile_variants",
    "install",
    "installed",
    "load_entry",
    "plan_variants",
    "publish_artifact",
    "scalar_parameters",
    "serving",
    "uninstall",
]


def compile_variants(
    store: Store,
    program: Any,
    *,
    backend: Any = None,
    offset_provider: Mapping[str, Any] | None = None,
    static_args: Mapping[str, Sequence[Any]] | None = None,
    settings: Settings | None = None,
) -> tuple[Any, list[Outcome]]:
    """Compile ``program`` for the given variants through ``store``: load hits, publish misses.

    ``static_args`` map parameter names to lists of values (as ``Program.compile``
    takes them; every combination is a variant). Returns the program bound to
    ``backend`` with the variants ready in its pool, and what happened to each.
    ``settings``: as ``serving`` takes them (default: the environment's).
    """
    return _through_store(store, program, backend, offset_provider, static_args, settings, plan_only=False)


def plan_variants(
    store: Store,
    program: Any,
    *,
    backend: Any = None,
    offset_provider: Mapping[str, Any] | None = None,
    static_args: Mapping[str, Sequence[Any]] | None = None,
    settings: Settings | None = None,
) -> list[Outcome]:
    """Each variant's build key and whether ``store`` holds it ("cached" / "missing"), with
    its key ingredients; gt4py lowers the program but nothing is compiled. A variant whose
    key cannot be computed without compiling (a backend with a custom ``compile``, a lowering
    that raises) is "unplannable", its ``detail`` saying why."""
    return _through_store(store, program, backend, offset_provider, static_args, settings, plan_only=True)[1]


def _through_store(
    store: Store, program: Any, backend: Any, offset_provider: Mapping[str, Any] | None,
    static_args: Mapping[str, Sequence[Any]] | None, settings: Settings | None, *, plan_only: bool,
) -> tuple[Any, list[Outcome]]:
    if plan_only:  # the backend's load must take a planned variant's placeholder
        backend = planning_backend(backend if backend is not None else program.backend)
    bound = program.with_backend(backend) if backend is not None else program
    static = {name: list(values) for name, values in (static_args or {}).items()}
    with serving(store, plan_only=plan_only, settings=settings) as hook, warnings.catch_warnings():
        # gt4py warns on every compile without `python -O`; not news for a gtcache user.
        warnings.filterwarnings("ignore", message="Python is not running in optimized mode")
        bound.compile(offset_provider=dict(offset_provider or {}), **static)
    return bound, list(hook.outcomes)


#: This package has finished importing; the start-up hook may install (see ``gtcache._autoload``).
_ADAPTER_READY = True
if (_autoload := sys.modules.get("gtcache._autoload")) is not None:
    _autoload.adapter_ready()
