"""Serving gt4py compilations from a store, at gt4py's compilation-task seam.

``CompiledProgramsPool._compile_variant`` asks ``runners.get_default_runner()``
for a runner and submits ``compilation_tasks.make_compilation_task(...)`` to it.
While ``serving(store)`` is active both are replaced: the task factory lowers the
program (gt4py's own transforms), computes the build key and either hands back a
task whose executor returns the stored program, or wraps gt4py's executor so
that what it builds is published. The runner is gt4py's serial one, so hits and
misses run in the calling thread and nothing is shipped to a worker process.

A cache problem never fails the compilation: it is warned about once per
process and gt4py compiles as it would without gtcache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from gtcache.errors import CorruptEntryError, GtcacheError, UnsupportedArtifactError
from gtcache.gt4py import _compat, codecs
from gtcache.gt4py.ingredients import build_ingredients, build_key
from gtcache.store import Entry, EntryDraft, Store

__all__ = ["LoadedArtifact", "Outcome", "load_entry", "publish_artifact", "serving"]

_patch_lock = threading.Lock()
_warned: set[str] = set()


class GtcacheWarning(UserWarning):
    """A cache problem that did not stop the program (it compiled instead)."""


def warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"gtcache: {reason} (compiling without the cache)", GtcacheWarning, stacklevel=3)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What happened to one program variant."""

    program: str
    backend: str
    #: "hit", "compiled" (and published) or "bypassed" (gt4py compiled, nothing stored).
    status: str
    key: str | None
    seconds: float
    detail: str | None = None


@dataclasses.dataclass(frozen=True)
class LoadedArtifact:
    """An already-loaded program in the shape gt4py's pool expects of an artifact."""

    program: Callable[..., Any]

    def load(self) -> Callable[..., Any]:
        return self.program


def load_entry(entry: Entry, backend: Any, *, store: Store) -> Callable[..., Any]:
    """Check an entry's files against their checksums, rebuild its artifact and load it."""
    store.verify_payload(entry)
    artifact = codecs.decode(entry.record.artifact, entry.path)
    return backend.load_artifact(artifact)  # type: ignore[no-any-return]


def publish_artifact(
    store: Store,
    artifact: Any,
    *,
    key: str,
    ingredients: dict[str, Any],
    program: dict[str, str],
    backend: Any,
    compile_seconds: float,
) -> Entry:
    """Publish a compiled artifact under ``key``; ``UnsupportedArtifactError`` if it cannot be."""
    encoded = codecs.encode(artifact, device_arch=ingredients.get("device", {}).get("arch"))
    facts = {
        name.removeprefix("toolchain."): value
        for name, value in ingredients.items()
        if name.startswith("toolchain.")
    }
    draft = EntryDraft(
        key=key,
        ingredients=ingredients,
        program=program,
        backend={"name": ingredients["backend"], "options": {"fingerprint": ingredients["backend_config"]}},
        device=encoded.device,
        toolchain=facts,
        artifact=encoded.description,
        compile_seconds=compile_seconds,
    )
    return store.publish(draft, encoded.files)


@contextlib.contextmanager
def serving(store: Store, outcomes: list[Outcome]) -> Iterator[None]:
    """Serve compilations started in this block from ``store``; append an ``Outcome`` each."""
    with _patch_lock:
        original_factory = _compat.compilation_tasks.make_compilation_task
        original_runner = _compat.runners.get_default_runner
        serial = _compat.runners.SerialRunner()

        def factory(backend: Any, definition_stage: Any, compile_time_args: Any) -> Any:
            return _make_task(
                store, outcomes, original_factory, backend, definition_stage, compile_time_args
            )

        _compat.compilation_tasks.make_compilation_task = factory
        _compat.runners.get_default_runner = lambda: serial
        try:
            yield
        finally:
            _compat.compilation_tasks.make_compilation_task = original_factory
            _compat.runners.get_default_runner = original_runner


def _make_task(
    store: Store,
    outcomes: list[Outcome],
    original_factory: Callable[..., Any],
    backend: Any,
    definition_stage: Any,
    compile_time_args: Any,
) -> Any:
    start = time.perf_counter()
    definition = definition_stage.definition
    program = {"name": definition.__name__, "module": getattr(definition, "__module__", "") or ""}
    backend_name = str(getattr(backend, "name", type(backend).__qualname__))
    task = original_factory(backend, definition_stage, compile_time_args)  # lowers
    if task.no_offload_reason is not None:  # opaque backend: gt4py's business alone
        outcomes.append(Outcome(program["name"], backend_name, "bypassed", None, 0.0, task.no_offload_reason))
        return task
    try:
        ingredients = build_ingredients(backend, task.construct_compilable(False))
        key = build_key(ingredients)
    except Exception as error:  # a program gtcache does not understand passes through
        outcomes.append(Outcome(program["name"], backend_name, "bypassed", None, 0.0, repr(error)))
        return task

    loaded = _try_hit(store, key, backend)
    if loaded is not None:
        seconds = time.perf_counter() - start
        outcomes.append(Outcome(program["name"], backend_name, "hit", key, seconds))
        return dataclasses.replace(task, executor=lambda _compilable: LoadedArtifact(loaded))

    def compile_and_publish(compilable: Any) -> Any:
        artifact = task.executor(compilable)
        seconds = time.perf_counter() - start
        status, detail = "compiled", None
        try:
            publish_artifact(
                store, artifact, key=key, ingredients=ingredients, program=program,
                backend=backend, compile_seconds=seconds,
            )
        except UnsupportedArtifactError as error:
            status, detail = "bypassed", str(error)
        except (GtcacheError, OSError) as error:
            status, detail = "compiled", f"not published: {error}"
            warn_once(f"cannot publish to '{store.root}': {error}")
        outcomes.append(Outcome(program["name"], backend_name, status, key, seconds, detail))
        return artifact

    return dataclasses.replace(task, executor=compile_and_publish)


def _try_hit(store: Store, key: str, backend: Any) -> Callable[..., Any] | None:
    try:
        entry = store.lookup(key)
        if entry is None:
            return None
        program = load_entry(entry, backend, store=store)
    except CorruptEntryError as error:
        warn_once(str(error))
        return None
    except Exception as error:  # a payload that does not load is a miss, never a failure
        warn_once(f"entry '{key}' did not load: {error!r}")
        return None
    store.touch(key)
    return program
