"""The gt4py hook: every program-variant compilation goes through a store first.

The seam is in ``CompiledProgramsPool._compile_variant`` (gt4py 1.2.1-1.2.3)::

    runner = runners.get_default_runner()
    future = runner.submit(compilation_tasks.make_compilation_task(backend, definition_stage, cta))

Both module attributes are replaced once (``_patch``) by dispatchers that defer
to gt4py's originals unless a ``Hook`` is active (and ``CompiledProgramsPool.compile``
by a wrapper: the direct keys of one call's variants share one reading of the definition
and the backend, ``ingredients.one_compile_call``):

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
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gtcache._frozen import replace
from gtcache.errors import GtcacheError, UntrustedStoreError
from gtcache.gt4py import _compat
from gtcache.gt4py._hook import PROCESS_RUN, GtcacheWarning, Hook, HookConfig, HookStores, Outcome
from gtcache.gt4py.ingredients import one_compile_call
from gtcache.settings import Settings, split_remotes
from gtcache.store import CONFIG_FILE, Store, TrustPolicy, open_store

if TYPE_CHECKING:
    from gtcache.gt4py._remote import RemoteTiers
    from gtcache.policies.limits import Limits

__all__ = [
    "GtcacheWarning",
    "Hook",
    "Outcome",
    "active_hook",
    "install",
    "install_at_startup",
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
#: The hook ``install`` made, the settings it was made with (as ``_same_install`` compares
#: them) and whether the start-up hook made it (an explicit ``install`` then replaces it).
_installed: tuple[Hook, Settings, bool] | None = None
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
            if hook.config.plan_only:  # only gt4py's own lowering errors get here: the program's
                raise
            hook.warn_once(f"lookup failed: {error!r}")
            return original_factory(backend, definition_stage, compile_time_args)

    @functools.wraps(original_runner)
    def get_default_runner() -> Any:
        hook = _active
        return original_runner() if hook is None else _Runner(hook, original_runner)

    pool = _compat.compiled_program.CompiledProgramsPool
    original_compile = pool.compile

    @functools.wraps(original_compile)
    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _active is None:
            return original_compile(self, *args, **kwargs)
        with one_compile_call():  # its variants' direct keys share one reading of definition and backend
            return original_compile(self, *args, **kwargs)

    _originals.update(make_compilation_task=original_factory, get_default_runner=original_runner,
                      compile=original_compile)
    tasks.make_compilation_task = make_compilation_task
    runners.get_default_runner = get_default_runner
    pool.compile = compile  # type: ignore[method-assign]


def _unpatch() -> None:
    if _originals:
        _compat.compilation_tasks.make_compilation_task = _originals.pop("make_compilation_task")
        _compat.runners.get_default_runner = _originals.pop("get_default_runner")
        _compat.compiled_program.CompiledProgramsPool.compile = _originals.pop("compile")  # type: ignore[method-assign]


def active_hook() -> Hook | None:
    return _active


def install(
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    index_dir: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
    remote: str | Sequence[str] | None = None,
) -> Hook:
    """Serve every gt4py compilation of this process from a store.

    The store comes from ``settings``, else ``cache_dir`` / ``index_dir``, else the
    environment (``GTCACHE_DIR``, ...). A store that cannot be opened is a warning:
    the hook then passes everything through to gt4py.

    ``remote``: a remote tier URL or a list of them (docs/remote.md), tried in order
    after the stores; it wins over ``GTCACHE_REMOTE`` and the store's ``gtcache.toml``
    (``[]``: no remote). A URL that does not parse raises ``GtcacheError``.

    Installing again with the same settings returns the installed hook. With other
    settings it raises ``GtcacheError`` (``uninstall()`` first), except over the start-up
    hook's install (``GTCACHE_DIR``): arguments win over the environment, and replace it.
    """
    settings = settings or Settings.from_env(cache_dir=cache_dir, index_dir=index_dir)
    if remote is not None:
        settings = replace(settings, remotes=_remote_argument(remote), remotes_given=True)
    return _install(settings, by_startup=False)


def _remote_argument(remote: str | Sequence[str]) -> tuple[str, ...]:
    """``install``'s ``remote``: the URLs, each checked (``RemoteError`` for a bad one)."""
    from gtcache.remote import parse_remote

    if isinstance(remote, str):
        urls = split_remotes(remote)
    elif isinstance(remote, Sequence) and all(isinstance(u, str) for u in remote):
        urls = tuple(u for text in remote for u in split_remotes(text))
    else:
        raise GtcacheError(f"install(remote=...) takes a URL or a list of URLs, not {type(remote).__name__}.")
    for url in urls:
        parse_remote(url)
    return urls


def install_at_startup(settings: Settings) -> Hook:
    """``install`` as the start-up hook does it (``gtcache._autoload``): it never replaces
    an install, and a later explicit ``install`` with other settings replaces it."""
    return _install(settings, by_startup=True)


def _install(settings: Settings, *, by_startup: bool) -> Hook:
    global _active, _installed
    with _state_lock:
        current = _active
        if current is not None and _installed is not None and current is _installed[0]:
            _, installed_with, installed_at_startup = _installed
            if _same_install(installed_with, settings):
                if not by_startup:
                    _installed = (current, installed_with, False)
                return current
            if by_startup:
                return current
            if not installed_at_startup:
                raise GtcacheError(
                    f"gtcache is already installed with other settings (store '{installed_with.cache_dir}');"
                    f" call gtcache.uninstall() before installing it for '{settings.cache_dir}'."
                )
            current.close()
        elif current is not None:
            raise GtcacheError(
                "gtcache.install() inside 'with gtcache.installed()' (or serving()); install before or after it."
            )
        hook = _new_hook(settings)
        _patch()
        _active = hook
        _installed = (hook, settings, by_startup)
        return hook


def _same_install(a: Settings, b: Settings) -> bool:
    """Whether two settings make the same hook (what turns the start-up hook on, and the
    bundle variables, do not matter to it)."""

    def hook_part(s: Settings) -> Settings:
        return replace(s, enabled=False, bundle_key=None, bundle_require_signed="", source_date_epoch="")

    return hook_part(a) == hook_part(b)


def uninstall() -> None:
    """Stop serving from the store; gt4py compiles on its own again."""
    global _active, _installed
    with _state_lock:
        if _active is not None:
            _active.close()
        _active = None
        _installed = None
        _unpatch()


def installed(
    cache_dir: str | os.PathLike[str] | None = None, *, index_dir: str | os.PathLike[str] | None = None
) -> contextlib.AbstractContextManager[Hook]:
    """``install`` for the duration of a ``with`` block, restoring what was active before."""
    return _activated(_new_hook(Settings.from_env(cache_dir=cache_dir, index_dir=index_dir)))


def serving(
    store: Store, *, self_check: bool = False, plan_only: bool = False, settings: Settings | None = None
) -> contextlib.AbstractContextManager[Hook]:
    """Serve compilations started in a ``with`` block from ``store``, serially, in this thread.

    ``plan_only``: compute keys and look them up, compile nothing (a variant whose key
    cannot be computed without compiling is an "unplannable" outcome saying why).
    ``settings``: locking, waiting, logging and the size cap (default: the environment's,
    ``Settings.from_env()``); their store and hook switches are not used: ``store`` is.
    """
    settings = settings if settings is not None else Settings.from_env()
    _configure_output(settings)
    config = HookConfig(
        cache_dir=store.root, serial=True, self_check=self_check, plan_only=plan_only,
        locking=settings.locking, wait=settings.wait,
    )
    return _activated(Hook(config, lambda hook: HookStores(store, limits_from=functools.partial(_limits, hook, store, settings))))


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


#: The handler ``GTCACHE_LOG`` put on the ``gtcache`` logger (one per process).
_log_handler: logging.Handler | None = None
#: Print the summary line at exit (``GTCACHE_REPORT=1``).
_report = False


def _configure_output(settings: Settings) -> None:
    """``GTCACHE_LOG``: a stderr handler on the ``gtcache`` logger; ``GTCACHE_REPORT``: the exit line."""
    global _log_handler, _report
    _report = _report or settings.report
    if settings.log_level is None:
        return
    logger = logging.getLogger("gtcache")
    level = getattr(logging, settings.log_level.upper())
    with _state_lock:
        if _log_handler is None:
            _log_handler = logging.StreamHandler(sys.stderr)
            _log_handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(_log_handler)
        _log_handler.setLevel(level)
        logger.setLevel(level)


def _new_hook(settings: Settings) -> Hook:
    """A hook for ``settings`` whose stores are opened when it first sees a compilation."""
    _configure_output(settings)
    config = HookConfig(
        cache_dir=settings.cache_dir, self_check=settings.self_check, explain=settings.explain,
        promote=settings.promote, locking=settings.locking, wait=settings.wait,
    )
    return Hook(config, functools.partial(_open_stores, settings))


def _open_stores(settings: Settings, hook: Hook) -> HookStores:
    trust = TrustPolicy.from_ids(settings.trusted_users, settings.trusted_groups)
    store, problem = _open(settings, trust)
    if problem:
        hook.warn_once(problem, "compiling without the cache; 'gtcache doctor' says why")
    tiers = []
    for folder in settings.readonly_dirs:
        try:
            tiers.append(open_store(folder, read_only=True, trust=trust))
        except UntrustedStoreError as error:
            hook.warn_once(f"read-only store '{folder}' not used: {error.problem}", "it is skipped")
        except (GtcacheError, OSError) as error:  # the others and GTCACHE_DIR still serve
            hook.warn_once(f"read-only store '{folder}' not used: {error}", "it is skipped")
    remote = remote_from = limits_from = None
    if settings.remotes_given:
        remote = _open_remotes(hook, settings, settings.remotes) if settings.remotes else None
    elif store is not None:  # the store's gtcache.toml may name remotes: read at the first miss
        remote_from = functools.partial(_remotes_of_store, hook, store, settings)
    if store is not None:
        limits_from = functools.partial(_limits, hook, store, settings)
    return HookStores(store, tuple(tiers), remote, remote_from, limits_from)


def _remotes_of_store(hook: Hook, store: Store, settings: Settings) -> RemoteTiers | None:
    """The remotes ``[remote]`` in the store's ``gtcache.toml`` names (none: no file). The
    file is read only if it and the store pass the trust check; its remotes are never
    trusted, need the bundle key and get no credentials (``open_remote(from_file=True)``)."""
    if not (store.root / CONFIG_FILE).exists():
        return None
    from gtcache.policies.config import remote_urls

    try:
        urls, _ = remote_urls(settings, store.root)
    except GtcacheError as error:
        hook.warn_once(f"no remote used: {error}", "compiling without remotes")
        return None
    return _open_remotes(hook, settings, urls, from_file=True) if urls else None


def _open_remotes(hook: Hook, settings: Settings, urls: tuple[str, ...], *, from_file: bool = False) -> RemoteTiers | None:
    """The usable remotes of ``urls`` (a warning for each that is not)."""
    from gtcache.gt4py._remote import RemoteTiers
    from gtcache.remote import RemoteError, open_remote

    try:
        settings.bundle_trust()
    except GtcacheError as error:
        hook.warn_once(f"no remote used: {error}", "compiling without remotes")
        return None
    usable = []
    for url in urls:
        try:
            remote = open_remote(url, settings, from_file=from_file)
        except RemoteError as error:
            hook.warn_once(str(error), "it is skipped")
            continue
        if (problem := remote.problem()) is not None:
            hook.warn_once(f"remote '{remote.name}' not used: {problem}", "it is skipped")
            continue
        usable.append(remote)
    return RemoteTiers(tuple(usable), hook.warn_once) if usable else None


def _limits(hook: Hook, store: Store, settings: Settings) -> Limits | None:
    from gtcache.policies.limits import Limits

    try:
        return Limits.for_store(store.root, settings, store.trust)
    except GtcacheError as error:
        hook.warn_once(f"no size cap: {error}", "entries are stored without one")
        return None


def _open(settings: Settings, trust: TrustPolicy) -> tuple[Store | None, str | None]:
    try:
        return open_store(settings.cache_dir, index_dir=settings.index_dir, trust=trust), None
    except UntrustedStoreError as error:  # someone else could have put code in it: not used
        return None, f"store '{settings.cache_dir}' not used: {error.problem}"
    except (GtcacheError, OSError) as error:
        return None, f"cannot open store '{settings.cache_dir}': {error}"


@atexit.register
def _close_at_exit() -> None:
    """Close the active hook, write this process's one ledger entry per store, report."""
    hook = _active
    if hook is not None:
        # atexit runs this before gt4py's own shutdown of its runner (registered earlier):
        # let compilations still running finish and publish first, so the ledger has them.
        with contextlib.suppress(Exception):
            _compat.runners.reset_default_runner()
        hook.close()
    PROCESS_RUN.write_ledgers()
    if _report and (line := PROCESS_RUN.report()) is not None:
        print(line, file=sys.stderr, flush=True)
