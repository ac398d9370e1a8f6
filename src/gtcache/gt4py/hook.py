"""The gt4py hook: every program-variant compilation goes through a store first.

The seam is in ``CompiledProgramsPool._compile_variant`` (gt4py 1.2.1-1.2.3)::

    runner = runners.get_default_runner()
    future = runner.submit(compilation_tasks.make_compilation_task(backend, definition_stage, cta))

Both module attributes are replaced once (``_patch``) by dispatchers that defer
to gt4py's originals unless a ``Hook`` is active:

- the task factory asks the active ``Hook`` (``_hook.py``): direct key (no
  lowering), else gt4py's lowering and the build key; a hit becomes a served task.
- the runner returns a finished future for served tasks without ever creating
  gt4py's worker pool; misses go to gt4py's own runner (serial, threads or
  spawned processes, as configured), and their artifacts are published when
  their futures complete, on the main-process side.

gt4py itself still fires ``compile_variant_hook`` and fills the pool, so its
metrics and call path stay as they are. Any cache problem is one warning per
reason per process, and gt4py compiles as it would have.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from gtcache.errors import GtcacheError
from gtcache.gt4py import _compat
from gtcache.gt4py._hook import GtcacheWarning, Hook, Outcome
from gtcache.policies.limits import Limits
from gtcache.settings import Settings
from gtcache.store import Store, open_store

__all__ = [
    "GtcacheWarning",
    "Hook",
    "Outcome",
    "active_hook",
    "install",
    "installed",
    "serving",
    "uninstall",
]


class _Runner:
    """What ``runners.get_default_runner()`` returns while a hook is active."""

    def __init__(self, hook: Hook, original: Callable[[], Any]):
        self.hook = hook
        self.original = original

    def submit(self, task: Any) -> concurrent.futures.Future[Any]:
        return self.hook.submit(self.original, task)

    def shutdown(self, wait: bool = True) -> None:  # the real runner is gt4py's to shut down
        return None


# -- patching ------------------------------------------------------------------------------

_state_lock = threading.RLock()
_active: Hook | None = None
_originals: dict[str, Callable[..., Any]] = {}


def _patch() -> None:
    """Replace gt4py's task factory and runner getter by dispatchers (once per process)."""
    if _originals:
        return
    tasks, runners = _compat.compilation_tasks, _compat.runners
    original_factory = tasks.make_compilation_task
    original_runner = runners.get_default_runner

    @functools.wraps(original_factory)
    def make_compilation_task(backend: Any, definition_stage: Any, compile_time_args: Any) -> Any:
        hook = _active
        if hook is None:
            return original_factory(backend, definition_stage, compile_time_args)
        try:
            return hook.make_task(original_factory, backend, definition_stage, compile_time_args)
        except Exception as error:  # never break the user's program over the cache
            hook.warn_once(f"lookup failed: {error!r}")
            return original_factory(backend, definition_stage, compile_time_args)

    @functools.wraps(original_runner)
    def get_default_runner() -> Any:
        hook = _active
        return original_runner() if hook is None else _Runner(hook, original_runner)

    _originals.update(make_compilation_task=original_factory, get_default_runner=original_runner)
    tasks.make_compilation_task = make_compilation_task
    runners.get_default_runner = get_default_runner


def _unpatch() -> None:
    if _originals:
        _compat.compilation_tasks.make_compilation_task = _originals.pop("make_compilation_task")
        _compat.runners.get_default_runner = _originals.pop("get_default_runner")


def active_hook() -> Hook | None:
    return _active


def install(
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    index_dir: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
) -> Hook:
    """Serve every gt4py compilation of this process from a store (idempotent per store).

    The store comes from ``settings``, else ``cache_dir`` / ``index_dir``, else the
    environment (``GTCACHE_DIR``, ...). A store that cannot be opened is a warning:
    the hook then passes everything through to gt4py.
    """
    global _active
    settings = settings or Settings.from_env(cache_dir=cache_dir, index_dir=index_dir)
    with _state_lock:
        current = _active
        if current is not None and current.cache_dir == settings.cache_dir:
            return current
        if current is not None:
            current.close()
        hook = _new_hook(settings)
        _patch()
        _active = hook
        return hook


def uninstall() -> None:
    """Stop serving from the store; gt4py compiles on its own again."""
    global _active
    with _state_lock:
        if _active is not None:
            _active.close()
        _active = None
        _unpatch()


def installed(
    cache_dir: str | os.PathLike[str] | None = None, *, index_dir: str | os.PathLike[str] | None = None
) -> contextlib.AbstractContextManager[Hook]:
    """``install`` for the duration of a ``with`` block, restoring what was active before."""
    return _activated(_new_hook(Settings.from_env(cache_dir=cache_dir, index_dir=index_dir)))


def serving(
    store: Store, *, self_check: bool = False, plan_only: bool = False
) -> contextlib.AbstractContextManager[Hook]:
    """Serve compilations started in a ``with`` block from ``store``, serially, in this thread.

    ``plan_only``: compute keys and look them up, compile nothing.
    """
    settings = Settings.from_env()
    hook = Hook(
        store, serial=True, self_check=self_check, plan_only=plan_only, locking=settings.locking, wait=settings.wait
    )
    hook.limits = _limits(hook, store)
    return _activated(hook)


@contextlib.contextmanager
def _activated(hook: Hook) -> Iterator[Hook]:
    global _active
    with _state_lock:
        previous = _active
        _patch()
        _active = hook
    try:
        yield hook
    finally:
        with _state_lock:
            hook.close()
            _active = previous
            if previous is None:
                _unpatch()


def _new_hook(settings: Settings) -> Hook:
    """A hook for ``settings`` whose stores are opened when it first sees a compilation."""
    hook = Hook(
        None, self_check=settings.self_check, explain=settings.explain, promote=settings.promote,
        locking=settings.locking, wait=settings.wait, cache_dir=settings.cache_dir,
    )
    hook.opener = functools.partial(_open_stores, hook, settings)
    return hook


def _open_stores(hook: Hook, settings: Settings) -> None:
    store, problem = _open(settings)
    hook.store = store
    if problem:
        hook.warn_once(problem)
    tiers = []
    for folder in settings.readonly_dirs:
        try:
            tiers.append(open_store(folder, read_only=True))
        except (GtcacheError, OSError) as error:
            hook.warn_once(f"read-only store '{folder}' not used: {error}")
    hook.tiers = tuple(tiers)
    if store is not None:
        hook.limits = _limits(hook, store)


def _limits(hook: Hook, store: Store) -> Limits | None:
    try:
        return Limits.for_store(store.root)
    except GtcacheError as error:
        hook.warn_once(f"no size cap: {error}")
        return None


def _open(settings: Settings) -> tuple[Store | None, str | None]:
    try:
        return open_store(settings.cache_dir, index_dir=settings.index_dir), None
    except (GtcacheError, OSError) as error:
        return None, f"cannot open store '{settings.cache_dir}': {error}"


@atexit.register
def _close_at_exit() -> None:
    hook = _active
    if hook is not None:
        # atexit runs this before gt4py's own shutdown of its runner (registered earlier):
        # let compilations still running finish and publish first, so the ledger has them.
        with contextlib.suppress(Exception):
            _compat.runners.reset_default_runner()
        hook.close()
