"""The gt4py hook: every program-variant compilation goes through a store first.

The seam is in ``CompiledProgramsPool._compile_variant`` (gt4py 1.2.1-1.2.3)::

    runner = runners.get_default_runner()
    future = runner.submit(compilation_tasks.make_compilation_task(backend, definition_stage, cta))

Both module attributes are replaced once (``_patch``) by dispatchers that defer
to gt4py's originals unless a ``Hook`` is active:

- the task factory computes the **direct key** (no lowering); when the store
  links it to a sound entry, the entry is loaded and handed back as a served
  task. Otherwise gt4py lowers the program, the **build key** is computed and
  looked up the same way; a hit records the direct link for next time.
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
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from gtcache.errors import CorruptEntryError, GtcacheError, UnsupportedArtifactError
from gtcache.gt4py import _compat
from gtcache.gt4py._loading import LoadedArtifact, load_entry, publish_artifact
from gtcache.gt4py.ingredients import (
    BUILD_KEY_KIND,
    DIRECT_KEY_KIND,
    backend_name,
    build_ingredients,
    direct_ingredients,
    make_key,
)
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


class GtcacheWarning(UserWarning):
    """A cache problem that did not stop the program (it compiled without the cache)."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What happened to one program variant."""

    program: str
    backend: str
    #: "hit", "compiled" (and published unless ``detail`` says otherwise), "bypassed"
    #: (gt4py compiled, nothing stored) or "failed" (gt4py's compilation raised).
    status: str
    key: str | None
    seconds: float
    #: For hits: "direct" (no lowering) or "build" (found after lowering).
    via: str | None = None
    detail: str | None = None


@dataclasses.dataclass(frozen=True)
class _Variant:
    """What the hook knows of a variant on its way through gt4py's runner."""

    program: dict[str, str]
    backend: str
    key: str
    ingredients: dict[str, Any]
    direct_key: str | None
    start: float


@dataclasses.dataclass(frozen=True)
class _ServedTask(_compat.runners.CompilationTask):
    """A task the store answered: its 'artifact' is the loaded program."""

    served: LoadedArtifact | None = None


@dataclasses.dataclass(frozen=True)
class _PublishingTask(_compat.runners.CompilationTask):
    """gt4py's own task, marked so that its artifact is published when it completes."""

    variant: _Variant | None = None


class Hook:
    """Serves gt4py compilations from ``store`` (``None``: pass everything through)."""

    def __init__(self, store: Store | None, *, serial: bool = False, self_check: bool = False):
        self.store = store
        self.serial = serial
        self.self_check = self_check
        self.outcomes: list[Outcome] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self._hits: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    # -- reporting ------------------------------------------------------------------------

    def warn_once(self, reason: str) -> None:
        with self._lock:
            if reason in self._warned:
                return
            self._warned.add(reason)
        warnings.warn(f"gtcache: {reason} (compiling without the cache)", GtcacheWarning, stacklevel=4)

    def _record(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)
            self.counts[outcome.status] += 1

    def flush_usage(self) -> None:
        """Write the hit counts gathered in memory into the entries (once, not per hit)."""
        with self._lock:
            hits, self._hits = self._hits, collections.Counter()
        if self.store is not None:
            for key, count in hits.items():
                self.store.touch(key, hits=count)

    # -- the task factory ----------------------------------------------------------------

    def make_task(
        self, original: Callable[..., Any], backend: Any, definition_stage: Any, cta: Any
    ) -> Any:
        start = time.perf_counter()
        if self.store is None:
            return original(backend, definition_stage, cta)
        definition = definition_stage.definition
        program = {"name": definition.__name__, "module": getattr(definition, "__module__", "") or ""}
        name = backend_name(backend)
        if _compat.has_custom_compile(backend):  # opaque: gt4py's business alone
            self._record(Outcome(program["name"], name, "bypassed", None, 0.0, detail="custom compile"))
            return original(backend, definition_stage, cta)

        direct_key = self._direct_key(backend, definition_stage, cta)
        if direct_key is not None and (build_key := self.store.resolve_direct(direct_key)):
            loaded = self._load(build_key, backend)
            if loaded is not None and not (self.self_check and self._self_check_fails(
                original, backend, definition_stage, cta, build_key, direct_key
            )):
                return self._served(program, name, build_key, loaded, start, "direct")

        task = original(backend, definition_stage, cta)  # gt4py lowers the program here
        try:
            ingredients = build_ingredients(backend, task.construct_compilable(False))
        except Exception as error:  # a program gtcache does not understand passes through
            self._record(Outcome(program["name"], name, "bypassed", None, 0.0, detail=repr(error)))
            return task
        key = make_key(BUILD_KEY_KIND, ingredients)
        loaded = self._load(key, backend)
        if loaded is not None:
            self._link(direct_key, key)
            return self._served(program, name, key, loaded, start, "build")
        variant = _Variant(program, name, key, ingredients, direct_key, start)
        return _PublishingTask(
            name=task.name,
            construct_compilable=task.construct_compilable,
            executor=task.executor,
            no_offload_reason=task.no_offload_reason,
            variant=variant,
        )

    def _direct_key(self, backend: Any, definition_stage: Any, cta: Any) -> str | None:
        try:
            return make_key(DIRECT_KEY_KIND, direct_ingredients(backend, definition_stage, cta))
        except ValueError:  # not keyable by content: the build key still works
            return None

    def _self_check_fails(
        self, original: Callable[..., Any], backend: Any, definition_stage: Any, cta: Any,
        build_key: str, direct_key: str,
    ) -> bool:
        task = original(backend, definition_stage, cta)
        actual = make_key(BUILD_KEY_KIND, build_ingredients(backend, task.construct_compilable(False)))
        if actual == build_key:
            self.counts["self_check_ok"] += 1
            return False
        self.counts["self_check_failed"] += 1
        warnings.warn(
            f"gtcache self-check: direct key '{direct_key}' of '{definition_stage.definition.__name__}'"
            f" links to build key '{build_key}' but lowering gives '{actual}'; not using it.",
            GtcacheWarning,
            stacklevel=4,
        )
        return True

    def _load(self, key: str, backend: Any) -> Callable[..., Any] | None:
        assert self.store is not None
        try:
            entry = self.store.lookup(key)
            if entry is None:
                return None
            program = load_entry(entry, backend, store=self.store)
        except CorruptEntryError as error:
            self.warn_once(str(error))
            return None
        except Exception as error:  # a payload that does not load is a miss, never a failure
            self.warn_once(f"entry '{key}' did not load: {error!r}")
            return None
        with self._lock:
            self._hits[key] += 1
        return program

    def _link(self, direct_key: str | None, build_key: str) -> None:
        if direct_key is None or self.store is None or self.store.read_only:
            return
        try:
            self.store.link_direct(direct_key, build_key)
        except (OSError, GtcacheError) as error:
            self.warn_once(f"cannot write to '{self.store.root}': {error}")

    def _served(
        self, program: dict[str, str], backend: str, key: str, loaded: Callable[..., Any],
        start: float, via: str,
    ) -> _ServedTask:
        self._record(Outcome(program["name"], backend, "hit", key, time.perf_counter() - start, via))
        return _ServedTask(
            name=program["name"],
            construct_compilable=_nothing,
            executor=_nothing,
            no_offload_reason="served by gtcache",
            served=LoadedArtifact(loaded),
        )

    # -- the runner ----------------------------------------------------------------------

    def submit(self, original_runner: Callable[[], Any], task: Any) -> concurrent.futures.Future[Any]:
        if isinstance(task, _ServedTask):
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_result(task.served)
            return future
        runner = _compat.runners.SerialRunner() if self.serial else original_runner()
        inner = runner.submit(task)
        if not isinstance(task, _PublishingTask) or task.variant is None:
            return inner
        # gt4py waits on 'outer', which completes only after the artifact is published:
        # once a program has its variant, the store has it too (and a process that exits
        # right after its last compile still publishes everything).
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        inner.add_done_callback(functools.partial(self._publish, task.variant, outer))
        return outer

    def _publish(
        self, variant: _Variant, outer: concurrent.futures.Future[Any],
        inner: concurrent.futures.Future[Any],
    ) -> None:
        try:
            self._publish_result(variant, inner)
        finally:
            if inner.cancelled():
                outer.cancel()
            elif (error := inner.exception()) is not None:
                outer.set_exception(error)
            else:
                outer.set_result(inner.result())

    def _publish_result(self, variant: _Variant, future: concurrent.futures.Future[Any]) -> None:
        seconds = time.perf_counter() - variant.start
        name = variant.program["name"]
        if future.cancelled() or future.exception() is not None:
            self._record(Outcome(name, variant.backend, "failed", variant.key, seconds))
            return
        status, detail = "compiled", None
        try:
            assert self.store is not None
            if self.store.read_only:
                raise GtcacheError(f"Store '{self.store.root}' is read-only.")
            publish_artifact(
                self.store, future.result(), key=variant.key, ingredients=variant.ingredients,
                program=variant.program, compile_seconds=seconds,
            )
            self._link(variant.direct_key, variant.key)
        except UnsupportedArtifactError as error:
            status, detail = "bypassed", str(error)
        except Exception as error:  # full disk, permissions, anything: the program goes on
            detail = f"not stored: {error}"
            self.warn_once(f"cannot publish to '{self.store.root if self.store else '?'}': {error}")
        self._record(Outcome(name, variant.backend, status, variant.key, seconds, detail=detail))


def _nothing(*_args: Any) -> None:
    return None


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
        if _active is not None and _active.store is not None and _active.store.root == settings.cache_dir:
            return _active
        if _active is not None:
            _active.flush_usage()
        store, problem = _open(settings)
        hook = Hook(store, self_check=settings.self_check)
        if problem:
            hook.warn_once(problem)
        _patch()
        _active = hook
        return hook


def uninstall() -> None:
    """Stop serving from the store; gt4py compiles on its own again."""
    global _active
    with _state_lock:
        if _active is not None:
            _active.flush_usage()
        _active = None
        _unpatch()


@contextlib.contextmanager
def installed(
    cache_dir: str | os.PathLike[str] | None = None, *, index_dir: str | os.PathLike[str] | None = None
) -> Iterator[Hook]:
    """``install`` for the duration of a ``with`` block, restoring what was active before."""
    global _active
    with _state_lock:
        previous = _active
    hook = install(cache_dir, index_dir=index_dir)
    try:
        yield hook
    finally:
        with _state_lock:
            hook.flush_usage()
            _active = previous
            if previous is None:
                _unpatch()


@contextlib.contextmanager
def serving(store: Store, *, self_check: bool = False) -> Iterator[Hook]:
    """Serve compilations started in this block from ``store``, serially, in this thread."""
    global _active
    hook = Hook(store, serial=True, self_check=self_check)
    with _state_lock:
        previous = _active
        _patch()
        _active = hook
    try:
        yield hook
    finally:
        with _state_lock:
            hook.flush_usage()
            _active = previous
            if previous is None:
                _unpatch()


def _open(settings: Settings) -> tuple[Store | None, str | None]:
    try:
        return open_store(settings.cache_dir, index_dir=settings.index_dir), None
    except (GtcacheError, OSError) as error:
        return None, f"cannot open store '{settings.cache_dir}': {error}"


@atexit.register
def _flush_at_exit() -> None:
    hook = _active
    if hook is not None:
        with contextlib.suppress(Exception):
            hook.flush_usage()
