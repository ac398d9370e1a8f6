"""The ``Hook``: what happens to one program variant on its way through gt4py's compile.

``make_task`` stands in for ``compilation_tasks.make_compilation_task`` and
``submit`` for the runner's ``submit`` (see ``gtcache.gt4py.hook`` for how they
are patched in): a variant found in the store by its direct key (no lowering)
or its build key (after gt4py's lowering) becomes a served task; a miss stays
gt4py's own task, and what gt4py builds is published before gt4py sees it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import pathlib
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from gtcache._frozen import Frozen, field
from gtcache.errors import (
    CorruptEntryError, EntryRemovedError, GtcacheError, UnsupportedArtifactError, UntrustedEntryError, escape,
)
from gtcache.gt4py import _compat, _facts
from gtcache.gt4py._loading import LoadedArtifact, artifact_of, publish_artifact
from gtcache.gt4py.ingredients import (
    BUILD_KEY_KIND,
    DIRECT_KEY_KIND,
    backend_changed as _changed,
    backend_name,
    build_ingredients,
    direct_ingredients,
    keying_problem,
    make_key,
)
from gtcache.store import Store, now_iso

if TYPE_CHECKING:  # imported only when used: the remote tiers (and bundles) when GTCACHE_REMOTE
    # is set, the size cap at the first publish, the compile lock at the first miss
    from gtcache.store import StoreLock
    from gtcache.gt4py._remote import RemoteTiers
    from gtcache.policies.limits import Limits

__all__ = ["GtcacheWarning", "Hook", "Outcome", "PROCESS_RUN", "ProcessRun"]


class GtcacheWarning(UserWarning):
    """A cache problem that did not stop the program (it compiled without the cache)."""


#: What happened to a variant: "hit", "compiled" (and published unless the outcome's
#: ``detail`` says otherwise), "bypassed" (gt4py compiled, nothing stored) or "failed" (gt4py's
#: compilation raised); when only planning: "cached", "missing" or "unplannable".
OutcomeStatus = Literal["hit", "compiled", "bypassed", "failed", "cached", "missing", "unplannable"]
#: Which key found a hit: "direct" (no lowering) or "build" (found after lowering).
HitVia = Literal["direct", "build"]


class Outcome(Frozen):
    """What happened to one program variant."""

    program: str
    backend: str
    #: See ``OutcomeStatus`` ("unplannable": no key without compiling; ``detail`` says why).
    status: OutcomeStatus
    key: str | None
    seconds: float
    #: For hits: "direct" (no lowering) or "build" (found after lowering).
    via: HitVia | None = None
    detail: str | None = None
    #: For hits: the part of ``seconds`` spent in gt4py's ``backend.load_artifact``.
    load_seconds: float = 0.0
    #: For hits: the compile seconds the entry recorded (what this hit did not spend).
    saved_seconds: float = 0.0
    #: The build key's ingredients, when they were computed (misses and planned variants).
    ingredients: Mapping[str, Any] | None = field(default=None, repr=False)
    #: How ``gtcache warm`` can name this variant again (``warm --from-ledger``), if it can.
    spec: Mapping[str, Any] | None = field(default=None, repr=False)


# The hook's internal records are NamedTuples: a frozen data class costs 0.4-0.8 ms to
# create (Python 3.12 compiles each of its methods), paid by every process that imports gt4py.


class _Variant(NamedTuple):
    """What the hook knows of a variant on its way through gt4py's runner."""

    program: dict[str, str]
    backend: str
    key: str
    ingredients: dict[str, Any]
    direct_key: str | None
    start: float
    spec: dict[str, Any] | None = None
    #: Held while this process compiles the variant (other processes wait for it).
    lock: StoreLock | None = None
    #: The backend whose executor builds it, when no copy of the executor could be made for
    #: it (``_compat.detached``): its configuration is read again once built (``backend`` is its name).
    live_backend: Any = None


class _Loaded(NamedTuple):
    program: Callable[..., Any]
    load_seconds: float
    compile_seconds: float
    #: Found in a read-only tier and copied into the writable store (``promote``).
    promoted: bool = False


# The two task classes extend gt4py's frozen data class by one attribute each, set after its
# ``__init__``; they are plain subclasses, not data classes of their own (see above). gt4py's
# runners (1.2.1-1.2.3) read a task's fields and call ``compile``; none copies a task with
# ``dataclasses.replace``, which would fail here (no ``served`` / ``variant`` argument).


class _ServedTask(_compat.runners.CompilationTask):
    """A task the store answered: its 'artifact' is the loaded program."""

    served: LoadedArtifact

    def __init__(self, *, served: LoadedArtifact, **task: Any) -> None:
        super().__init__(**task)
        object.__setattr__(self, "served", served)


class _PublishingTask(_compat.runners.CompilationTask):
    """gt4py's own task, marked so that its artifact is published when it completes."""

    variant: _Variant

    def __init__(self, *, variant: _Variant, **task: Any) -> None:
        super().__init__(**task)
        object.__setattr__(self, "variant", variant)


class HookConfig(Frozen):
    """How a hook serves, fixed when it is made (``install``, ``serving``)."""

    #: Where the hook's store is (or will be opened).
    cache_dir: pathlib.Path | None = None
    #: Compile in this thread (gt4py's ``SerialRunner``), not in gt4py's worker pool.
    serial: bool = False
    #: Compute the build key of every direct hit too and compare (``GTCACHE_SELF_CHECK``).
    self_check: bool = False
    #: Log why each miss missed (``GTCACHE_EXPLAIN=1``).
    explain: bool = False
    #: Compute keys and look them up, compile nothing ("cached" / "missing" outcomes).
    plan_only: bool = False
    #: Copy hits in read-only tiers into the store first (``GTCACHE_PROMOTE``).
    promote: bool = False
    #: How to lock the store, and how long to wait for another process compiling a variant.
    locking: str = "auto"
    wait: float = 600.0


class HookStores(NamedTuple):
    """What a hook serves from, once opened."""

    store: Store | None
    #: Read-only stores consulted after ``store`` (never written); hits there are used
    #: in place, or copied into ``store`` first with ``promote``.
    tiers: tuple[Store, ...] = ()
    #: Remote tiers tried after ``store`` and ``tiers`` (a hit is copied into ``store``).
    remote: RemoteTiers | None = None
    #: Resolves ``remote`` when a miss first needs it (the store's ``gtcache.toml`` may
    #: name remotes: reading it is not a hit's work). See ``Hook.remote_tiers``.
    remote_from: Callable[[], RemoteTiers | None] | None = None
    #: Resolves the size cap when a publish first needs it (reading the store's
    #: ``gtcache.toml`` and importing the policies is not a hit's work).
    limits_from: Callable[[], Limits | None] | None = None


class Hook:
    """Serves gt4py compilations as ``config`` says from ``stores`` (a store of ``None``:
    pass everything through).

    ``stores`` may be a function of the hook, called at the first compilation the hook
    sees (``install``): gt4py's compile workers import gt4py too, and must neither open
    stores nor warn. It may warn through ``hook.warn_once``.
    """

    def __init__(self, config: HookConfig, stores: HookStores | Callable[[Hook], HookStores]):
        self.config = config
        self.started = now_iso()
        #: Runtime state: the stores (see ``HookStores``), set once, by ``_open``.
        self.store: Store | None = None
        self.tiers: tuple[Store, ...] = ()
        self.remote: RemoteTiers | None = None
        self._remote_from: Callable[[], RemoteTiers | None] | None = None
        self.limits: Limits | None = None
        self._limits_from: Callable[[], Limits | None] | None = None
        self._limits_checked = 0.0
        #: How many outcomes are in the ledger already.
        self._recorded = 0
        self.outcomes: list[Outcome] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self._hits: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._warned: set[object] = set()
        self._open_lock = threading.Lock()
        self._opener: Callable[[Hook], HookStores] | None = None
        if isinstance(stores, HookStores):
            self._use(stores)
        else:
            self._opener = stores

    def _use(self, stores: HookStores) -> None:
        self.store, self.tiers, self.remote = stores.store, stores.tiers, stores.remote
        self._remote_from, self._limits_from = stores.remote_from, stores.limits_from

    # -- reporting ------------------------------------------------------------------------

    def warn_once(self, reason: str, consequence: str = "compiling without the cache", *, topic: object = None) -> None:
        """One warning per ``reason`` (or per ``topic``: reasons that differ in a detail only) a process."""
        reason = escape(reason)  # it may quote a server's answer or a name from a store
        with self._lock:
            if (seen := reason if topic is None else topic) in self._warned:
                return
            self._warned.add(seen)
        warnings.warn(f"gtcache: {reason} ({consequence})", GtcacheWarning, stacklevel=4)

    def _cannot_write(self, reason: str) -> None:
        """``warn_once`` of a store that cannot be written (a full disk, permissions): the
        process's ledger entry, written at exit, is then not warned about again."""
        if self.store is not None:
            PROCESS_RUN.warned_unwritable(self.store.root)
        self.warn_once(reason)

    def _record(self, outcome: Outcome) -> None:
        """Keep what happened to a variant; one INFO line on the ``gtcache`` logger when enabled."""
        with self._lock:
            self.outcomes.append(outcome)
            self.counts[outcome.status] += 1
        if _log.isEnabledFor(logging.INFO):  # nothing is formatted otherwise
            _log.info("gtcache: %s", _describe(outcome))

    def flush_usage(self) -> None:
        """Write the hit counts gathered in memory into the entries (once, not per hit)."""
        with self._lock:
            hits, self._hits = self._hits, collections.Counter()
        if self.store is not None:
            for key, count in hits.items():
                self.store.touch(key, hits=count)

    def close(self) -> None:
        """Flush usage counters; hand this hook's outcomes to the process's ledger entry
        (``PROCESS_RUN``, written at exit). Never raises."""
        try:
            self.flush_usage()
        except Exception as error:  # at exit, a cache problem must stay a warning
            self._cannot_write(f"cannot record usage in '{getattr(self.store, 'root', '?')}': {error!r}")
        if self.remote is not None:
            self.remote.flush()
        with self._lock:
            outcomes = self.outcomes[self._recorded:]
            self._recorded = len(self.outcomes)
        if self.store is not None and outcomes and not self.config.plan_only:
            PROCESS_RUN.add(self.store, self.started, outcomes)

    # -- the task factory ----------------------------------------------------------------

    def make_task(
        self, original: Callable[..., Any], backend: Any, definition_stage: Any, cta: Any
    ) -> Any:
        if self.config.plan_only:
            return self._plan_task(original, backend, definition_stage, cta)
        start = time.perf_counter()
        if self._opener is not None:
            self._open()
        self._use_facts()
        stores = self._stores()
        if not stores:
            return original(backend, definition_stage, cta)
        definition = definition_stage.definition
        program = {"name": definition.__name__, "module": getattr(definition, "__module__", "") or ""}
        name = backend_name(backend)
        spec = _variant_spec(program, backend, cta)
        if (problem := keying_problem()) is not None:  # (a later run may warm it: ``spec``)
            self.warn_once(problem)
            self._record(Outcome(program["name"], name, "bypassed", None, 0.0, detail=problem, spec=spec))
            return original(backend, definition_stage, cta)
        if _compat.has_custom_compile(backend):  # opaque: gt4py's business alone
            self._record(Outcome(program["name"], name, "bypassed", None, 0.0, detail="custom compile"))
            return original(backend, definition_stage, cta)

        # (self-check lowers every hit: its key is read as it is now, never the call's reading)
        direct_key = self._direct_key(backend, definition_stage, cta, fresh=self.config.self_check)
        if direct_key is not None:
            for store in stores:
                build_key = store.build_key_of(direct_key)
                loaded = self._load(store, build_key, backend) if build_key else None
                if loaded is not None and build_key and not (self.config.self_check and self._self_check_fails(
                    original, backend, definition_stage, cta, build_key, direct_key
                )):
                    if loaded.promoted:  # (not when the copy failed: the store has no entry to link to)
                        self._link(direct_key, build_key)
                    return self._served(program, name, build_key, loaded, start, "direct", spec)
            if not self.config.self_check and (served := self._from_remote_direct(
                program, name, direct_key, backend, start, spec
            )) is not None:
                return served

        task = original(backend, definition_stage, cta)  # gt4py lowers the program here
        # Built with a copy of the executor made now, keyed by that copy: gt4py's thread runner
        # builds a task when a worker takes it up, and flags added to the backend's build factory
        # meanwhile would reach the build, not the key (docs/keys.md).
        built_with = _compat.detached(backend, task.executor)
        try:
            ingredients = build_ingredients(built_with or backend, task.construct_compilable(False))
        except Exception as error:  # a program gtcache does not understand passes through, said once
            self.warn_once(f"lookup failed: {error!r}")  # (as when the direct key fails so: one reason)
            self._record(Outcome(program["name"], name, "bypassed", None, 0.0, detail=repr(error)))
            return task
        key = make_key(BUILD_KEY_KIND, ingredients)
        if direct_key is not None and (
            self._direct_key(built_with or backend, definition_stage, cta, fresh=True) != direct_key
            or not _compat.parsed_as_defined(backend, definition_stage)
        ):
            # The definition or the backend (as copied for the build) changed since the variant was
            # looked up (another thread meanwhile; a compile() call's shared reading), or what
            # gt4py lowered is not what the definition says now (see parsed_as_defined): linked,
            # the direct key would name a build of another definition in every process.
            _log.info("gtcache: '%s' differs from what gt4py lowered of it; not linking its direct key", program["name"])
            direct_key = None
        for store in stores:
            loaded = self._load(store, key, backend)
            if loaded is not None:
                if store is self.store or loaded.promoted:
                    self._link(direct_key, key)
                return self._served(program, name, key, loaded, start, "build", spec)
        if self.store is None:
            return task  # nowhere to publish (the warning said why)
        if self.store.read_only:
            self._cannot_write(f"cannot publish to '{self.store.root}': it is not writable")
            return task
        if (problem := self.store.unsafe_problem()) is not None:  # one warning, not the lock's and the publish's
            self._cannot_write(f"cannot publish to '{self.store.root}': {problem}")
            return task
        executor, live = (task.executor, backend) if built_with is None else (built_with.executor, None)
        lock = self._claim(key, program["name"])
        if lock is None:
            if (served := self._from_remote(program, name, key, direct_key, backend, start, spec)) is not None:
                return served
            return self._publishing(task, executor, _Variant(program, name, key, ingredients, direct_key, start, spec, live_backend=live))
        try:
            if (loaded := self._load(self.store, key, backend)) is not None:
                lock.release()  # another process compiled it while this one waited
                self._link(direct_key, key)
                return self._served(program, name, key, loaded, start, "build", spec, "waited for another process")
            # Under the compile lock: ranks of one node asking for one key download it once.
            if (served := self._from_remote(program, name, key, direct_key, backend, start, spec)) is not None:
                lock.release()
                return served
            if self.config.explain:
                self._explain(program, name, key, ingredients)
            published = self._publishing(task, executor, _Variant(program, name, key, ingredients, direct_key, start, spec, lock, live))
            # Released when the task is published (``_publish``), when submitting it fails
            # (``submit``), or at the latest when gt4py drops a task it never submitted.
            weakref.finalize(published, lock.release)
            return published
        except BaseException:
            lock.release()
            raise

    @staticmethod
    def _publishing(task: Any, executor: Any, variant: _Variant) -> _PublishingTask:
        return _PublishingTask(
            name=task.name,
            construct_compilable=task.construct_compilable,
            executor=executor,
            no_offload_reason=task.no_offload_reason,
            variant=variant,
        )

    def unplannable(self, definition_stage: Any, backend: Any, reason: str) -> _ServedTask:
        """Planning could not compute a variant's key: say why, hand gt4py a placeholder."""
        program = getattr(definition_stage.definition, "__name__", "?")
        self._record(Outcome(program, backend_name(backend), "unplannable", None, 0.0, detail=reason))
        return _placeholder(program)

    def _plan_task(self, original: Callable[..., Any], backend: Any, definition_stage: Any, cta: Any) -> _ServedTask:
        """Planning: lower, compute the build key, look it up; hand gt4py a placeholder.

        Never compiles. gt4py's own lowering errors propagate (the program's, reported
        "failed" by ``warm.plan``); any other problem, and a backend whose key would need
        its custom ``compile``, is an "unplannable" outcome saying why.
        """
        try:
            if self._opener is not None:
                self._open()
            self._use_facts()
            if self.store is None:
                raise GtcacheError("no store to plan against")
            if _compat.has_custom_compile(backend):
                return self.unplannable(definition_stage, backend, "the backend has a custom compile")
            if (problem := keying_problem()) is not None:
                return self.unplannable(definition_stage, backend, problem)
        except Exception as error:
            return self.unplannable(definition_stage, backend, f"{type(error).__name__}: {error}")
        task = original(backend, definition_stage, cta)  # gt4py lowers here; nothing compiles
        try:
            definition = definition_stage.definition
            program = definition.__name__
            ingredients = build_ingredients(backend, task.construct_compilable(False))
            key = make_key(BUILD_KEY_KIND, ingredients)
            try:
                stored = self.store.lookup(key) is not None
            except CorruptEntryError:
                stored = False
        except Exception as error:  # said, never compiled instead
            return self.unplannable(definition_stage, backend, f"{type(error).__name__}: {error}")
        self._record(Outcome(
            program, backend_name(backend), "cached" if stored else "missing", key, 0.0, ingredients=ingredients
        ))
        return _placeholder(program)

    def _explain(self, program: dict[str, str], backend: str, key: str, ingredients: Mapping[str, Any]) -> None:
        assert self.store is not None
        try:
            from gtcache.explain import explain

            explanation = explain(
                self.store.scan(use_index=False), program=program["name"], backend=backend,
                key=key, ingredients=ingredients,
            )
            _log.warning("gtcache miss: %s", explanation.summary())
        except Exception as error:  # explaining is a courtesy, never a failure
            _log.warning("gtcache miss: '%s' (%s); cannot explain: %r", program["name"], backend, error)

    def _open(self) -> None:
        with self._open_lock:
            if self._opener is not None:
                opener, self._opener = self._opener, None
                self._use(opener(self))

    def remote_tiers(self) -> RemoteTiers | None:
        """The remote tiers (opened at the first call that needs them), or None."""
        if self._remote_from is not None:
            with self._open_lock:
                if self._remote_from is not None:
                    try:
                        self.remote = self._remote_from()
                    except Exception as error:  # a cache problem never breaks the program
                        self.warn_once(f"no remote used: {error}", "compiling without remotes")
                    finally:
                        self._remote_from = None
        return self.remote

    def _use_facts(self) -> None:
        """The slow, file-bound facts (backend fingerprints, versions) of this hook's store."""
        if self.store is not None and _facts.active_store() is not self.store:
            _facts.use(self.store, verify=self.config.self_check,
                       warn=lambda problem: self.warn_once(problem, "using the computed value"))

    def _writable_remote(self) -> RemoteTiers | None:
        """The remote tiers, when there are any and a writable store to copy their entries into."""
        if self.store is None or self.store.read_only:
            return None
        return self.remote_tiers()

    def _from_remote_direct(
        self, program: dict[str, str], name: str, direct_key: str, backend: Any, start: float,
        spec: dict[str, Any] | None,
    ) -> _ServedTask | None:
        """The entry a remote's direct link names: fetched under its compile lock (the ranks
        of one node that miss it download it once), then loaded from the store."""
        if (remote := self._writable_remote()) is None:
            return None
        assert self.store is not None
        found = remote.build_key_of(direct_key)
        if found is None:
            return None
        build_key, source = found
        lock = self._claim(build_key, program["name"])
        try:
            loaded = self._load(self.store, build_key, backend)  # another process fetched it meanwhile?
            detail = None
            if loaded is None and remote.fetch_from(source, self.store, build_key):
                loaded = self._load(self.store, build_key, backend)
                detail = f"from remote '{source.name}'"
        finally:
            if lock is not None:
                lock.release()
        if loaded is None:
            return None
        self._link(direct_key, build_key)
        return self._served(program, name, build_key, loaded, start, "direct", spec, detail)

    def _from_remote(
        self, program: dict[str, str], name: str, key: str, direct_key: str | None, backend: Any, start: float,
        spec: dict[str, Any] | None,
    ) -> _ServedTask | None:
        """Entry ``key`` from a remote: copied into the store, then loaded from there."""
        if (remote := self._writable_remote()) is None:
            return None
        assert self.store is not None
        found = remote.fetch(self.store, key)
        if found is None or (loaded := self._load(self.store, key, backend)) is None:
            return None
        self._link(direct_key, key)
        if direct_key is not None:
            remote.push(self.store, key, direct_key)  # the remote learns the direct link too
        return self._served(program, name, key, loaded, start, "build", spec, f"from remote '{found.name}'")

    def _stores(self) -> tuple[Store, ...]:
        return (self.store, *self.tiers) if self.store is not None else self.tiers

    def _claim(self, key: str, name: str) -> StoreLock | None:
        """Take the compile lock of ``key``, waiting (bounded) while another process holds it.

        None when not waiting (``wait`` 0), when locking fails, or when the wait ran out: then
        this process compiles the variant too, and the first publish wins.
        """
        if self.config.wait <= 0 or _reimported_main():
            return None
        assert self.store is not None
        try:
            lock = self.store.lock(key, self.config.locking)
            if lock.acquire(self.config.wait):
                return lock
        except (OSError, GtcacheError) as error:
            self.warn_once(f"cannot lock '{self.store.root}': {error}", "compiling without waiting for others")
            return None
        self.warn_once(f"waited {self.config.wait:g} s for another process compiling '{name}'", "compiling it here too")
        return None

    def _direct_key(self, backend: Any, definition_stage: Any, cta: Any, fresh: bool = False) -> str | None:
        try:
            return make_key(DIRECT_KEY_KIND, direct_ingredients(backend, definition_stage, cta, fresh=fresh))
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

    def _load(self, store: Store, key: str, backend: Any) -> _Loaded | None:
        """The loaded program of entry ``key`` of ``store`` and the seconds gt4py's load took."""
        try:
            entry = store.lookup(key)
            if entry is None:
                return None
            artifact = artifact_of(entry, store=store)
            start = time.perf_counter()
            program = backend.load_artifact(artifact)
            load_seconds = time.perf_counter() - start
        except EntryRemovedError:
            return None  # removed (a prune) since its lookup: a miss, not a broken entry
        except UntrustedEntryError as error:
            if "writable by" in error.reason:  # a store made under umask 002: every entry, one reason
                self.warn_once(f"{error}; other entries of '{store.root}' writable by someone untrusted are not"
                               " reported again ('gtcache doctor' lists them)", topic=("writable", store.root))
            else:  # another owner, a symlink, a folder that cannot be checked: each said
                self.warn_once(str(error))
            return None
        except CorruptEntryError as error:
            self.warn_once(str(error))
            return None
        except Exception as error:  # a payload that does not load is a miss, never a failure
            if not store.removed_since_lookup(key):  # (removed by a prune after its checksums: a quiet miss)
                self.warn_once(f"entry '{key}' did not load: {error!r}")
            return None
        if store is self.store:
            with self._lock:
                self._hits[key] += 1
        elif self.config.promote:
            return _Loaded(program, load_seconds, entry.record.compile_seconds, self._promote(store, key))
        return _Loaded(program, load_seconds, entry.record.compile_seconds)

    def _promote(self, tier: Store, key: str) -> bool:
        """Copy a read-only tier's entry into the writable store; whether it is there now (a
        warning if it cannot be: the tier's entry is used in place, and nothing is linked to it)."""
        if self.store is None or self.store.read_only:
            return False
        try:
            entry = tier.get(key)
            files = {f.path: (entry.path / f.path).read_bytes() for f in entry.record.files}
            self.store.publish_record(entry.record, files)
        except Exception as error:  # promotion is an optimisation, never a failure
            self.warn_once(f"cannot copy entry '{key}' from '{tier.root}': {error!r}", "using it in place")
            return False
        return True

    def _link(self, direct_key: str | None, build_key: str) -> None:
        if direct_key is None or self.store is None or self.store.read_only:
            return
        try:
            self.store.link_direct(direct_key, build_key)
        except (OSError, GtcacheError) as error:
            self._cannot_write(f"cannot write to '{self.store.root}': {error}")

    def _served(
        self, program: dict[str, str], backend: str, key: str, loaded: _Loaded, start: float, via: HitVia,
        spec: dict[str, Any] | None, detail: str | None = None,
    ) -> _ServedTask:
        seconds = time.perf_counter() - start
        self._record(Outcome(
            program["name"], backend, "hit", key, seconds, via, detail,
            load_seconds=loaded.load_seconds, saved_seconds=loaded.compile_seconds, spec=spec,
        ))
        return _ServedTask(
            name=program["name"],
            construct_compilable=_nothing,
            executor=_nothing,
            no_offload_reason="served by gtcache",
            served=LoadedArtifact(loaded.program),
        )

    # -- the runner ----------------------------------------------------------------------

    def submit(self, original_runner: Callable[[], Any], task: Any) -> concurrent.futures.Future[Any]:
        if isinstance(task, _ServedTask):
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_result(task.served)
            return future
        variant = task.variant if isinstance(task, _PublishingTask) else None
        try:
            runner = _compat.runners.SerialRunner() if self.config.serial else original_runner()
            inner = runner.submit(task)
        except BaseException:
            if variant is not None and variant.lock is not None:
                variant.lock.release()  # nothing will publish it: others must not wait for it
            raise
        if variant is None:
            return inner
        # gt4py waits on 'outer', which completes only after the artifact is published:
        # once a program has its variant, the store has it too (and a process that exits
        # right after its last compile still publishes everything).
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        inner.add_done_callback(functools.partial(self._publish, variant, outer, task))  # (keeps the task alive)
        return outer

    def _publish(
        self, variant: _Variant, outer: concurrent.futures.Future[Any], _task: Any,
        inner: concurrent.futures.Future[Any],
    ) -> None:
        try:
            self._publish_result(variant, inner)
        finally:
            if variant.lock is not None:
                variant.lock.release()
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
            self._record(Outcome(name, variant.backend, "failed", variant.key, seconds, spec=variant.spec))
            return
        status: OutcomeStatus = "compiled"
        detail: str | None = None
        try:
            assert self.store is not None
            if variant.live_backend is not None and _changed(variant.live_backend, variant.ingredients):
                # Changed in place after the key was made (built with the backend itself: no copy
                # of its executor could be made); stored, the build would be served to every
                # process as made with the backend the key names.
                detail = "not stored: its backend was changed while it compiled"
                self.warn_once(f"'{name}' was not stored: its backend ({variant.backend}) was changed in place"
                               " while it compiled", "this process uses the build", topic="backend changed")
                self._record(Outcome(name, variant.backend, status, variant.key, seconds, detail=detail, spec=variant.spec))
                return
            publish_artifact(
                self.store, future.result(), key=variant.key, ingredients=variant.ingredients,
                program=variant.program, compile_seconds=seconds,
            )
            self._link(variant.direct_key, variant.key)
            if (remote := self.remote_tiers()) is not None:
                remote.push(self.store, variant.key, variant.direct_key)
        except UnsupportedArtifactError as error:
            status, detail = "bypassed", str(error)
        except Exception as error:  # full disk, permissions, anything: the program goes on
            detail = f"not stored: {error}"
            self._cannot_write(f"cannot publish to '{self.store.root if self.store else '?'}': {error}")
        else:
            try:  # published: a cap that cannot be enforced is no failed publish
                self._enforce_limits()
            except Exception as error:
                self.warn_once(f"cannot enforce the size cap of '{self.store.root}': {error}",
                               "the entry is stored; the store may stay over its cap", topic="size cap")
        self._record(Outcome(name, variant.backend, status, variant.key, seconds, detail=detail, spec=variant.spec))


    def _enforce_limits(self) -> None:
        """The size cap, after a publish; at most every few seconds per process."""
        if self._limits_from is not None:
            self.limits, self._limits_from = self._limits_from(), None
        if self.limits is None or not self.limits.active or self.store is None:
            return
        now = time.monotonic()
        if now - self._limits_checked < _LIMITS_INTERVAL:
            return
        self._limits_checked = now
        from gtcache.policies.limits import enforce_limits

        enforce_limits(self.store, self.limits, locking=self.config.locking)


#: Seconds between two size-cap checks of one process.
_LIMITS_INTERVAL = 10.0


class ProcessRun:
    """Every outcome of this process's hooks, by store: one ledger entry per store and process.

    Hooks hand their outcomes over when they close (``serving`` / ``compile_variants``
    close one hook per call); ``write_ledgers`` runs once, at exit (``gtcache.gt4py.hook``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[pathlib.Path, str] = {}
        self._pending: dict[pathlib.Path, tuple[Store, list[Outcome]]] = {}
        #: Everything this process served or compiled, for the exit report.
        self.outcomes: list[Outcome] = []
        self.roots: list[pathlib.Path] = []
        #: Stores a hook warned this process cannot write: their ledger entry fails quietly.
        self._unwritable: set[pathlib.Path] = set()

    def warned_unwritable(self, root: pathlib.Path) -> None:
        with self._lock:
            self._unwritable.add(root)

    def add(self, store: Store, started: str, outcomes: list[Outcome]) -> None:
        with self._lock:
            self._started.setdefault(store.root, started)
            self._pending.setdefault(store.root, (store, []))[1].extend(outcomes)
            self.outcomes.extend(outcomes)
            if store.root not in self.roots:
                self.roots.append(store.root)

    def write_ledgers(self) -> None:
        """Write one ledger file per store this process used (a warning if one cannot be
        written, unless a hook warned already that the store cannot be: one warning a process)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for root, (store, outcomes) in pending.items():
            if not root.is_dir():  # the store was removed while the process ran: nothing to record in
                continue
            try:
                store.record_run(_run_summary(self._started[root], outcomes))
            except Exception as error:  # at exit, a cache problem must stay a warning
                if root in self._unwritable:
                    _log.debug("gtcache: cannot record usage in '%s': %r", root, error)
                    continue
                warnings.warn(
                    f"gtcache: cannot record usage in '{root}': {error!r} (this run is not in 'gtcache stats')",
                    GtcacheWarning, stacklevel=2,
                )

    def report(self) -> str | None:
        """The one-line summary ``GTCACHE_REPORT=1`` prints at exit (None: nothing happened)."""
        with self._lock:
            outcomes, roots = list(self.outcomes), list(self.roots)
        if not outcomes:
            return None
        counts = collections.Counter(o.status for o in outcomes)
        spent = sum(o.seconds for o in outcomes)
        saved = sum(o.saved_seconds for o in outcomes if o.status == "hit")
        stores = ", ".join(f"'{root}'" for root in roots)
        return (
            f"gtcache: {counts['hit']} hits, {counts['compiled']} compiled, {counts['bypassed']} bypassed,"
            f" {counts['failed']} failed; {spent:.2f} s spent, {saved:.2f} s of compiling saved (store {stores})."
        )


#: This process's run (one per process).
PROCESS_RUN = ProcessRun()


def _describe(outcome: Outcome) -> str:
    """The log line of one outcome: status, program, backend, key, milliseconds, seconds saved."""
    text = f"{outcome.status} '{outcome.program}' ({outcome.backend})"
    if outcome.key:
        text += f", key {outcome.key[:12]}"
    text += f", {outcome.seconds * 1000:.1f} ms"
    if outcome.status == "hit":
        text += f", {outcome.saved_seconds:.2f} s saved"
        if outcome.via:
            text += f" ({outcome.via} key)"
    if outcome.detail:
        text += f"; {outcome.detail}"
    return text + "."


def _run_summary(started: str, outcomes: list[Outcome]) -> dict[str, Any]:
    counts = collections.Counter(o.status for o in outcomes)
    return {
        "started": started,  # (the ledger adds what names the run: its program, never its arguments)
        "gt4py": _compat.GT4PY_VERSION,
        "counts": dict(counts),
        "compile_seconds": round(sum(o.seconds for o in outcomes if o.status == "compiled"), 3),
        "compile_seconds_saved": round(sum(o.saved_seconds for o in outcomes if o.status == "hit"), 3),
        "variants": [
            {"program": o.program, "backend": o.backend, "key": o.key, "status": o.status, "spec": o.spec}
            for o in outcomes
        ],
    }


_log = logging.getLogger("gtcache")


def _reimported_main() -> bool:
    """Whether this is a process started by ``multiprocessing`` with the spawn method.

    gt4py's compile workers are such processes; they only compile here when they re-run a
    script without ``if __name__ == "__main__"``, while their parent holds the lock of that
    very variant: waiting for it would only stall until ``GTCACHE_WAIT`` runs out.
    """
    # (Importing multiprocessing makes '__mp_main__' an alias of '__main__' in every process;
    # only spawned children have a module of that name.)
    return getattr(sys.modules.get("__mp_main__"), "__name__", None) == "__mp_main__"


def _planned_only(*_args: Any, **_kwargs: Any) -> None:
    raise RuntimeError("This program variant was only planned by gtcache, not compiled.")


def _variant_spec(program: Mapping[str, str], backend: Any, cta: Any) -> dict[str, Any] | None:
    """The variant as ``gtcache warm`` names it, or None when it cannot be named."""
    short = _compat.backend_short_name(backend)
    if short is None or not program["module"]:
        return None
    static: dict[str, Any] = {}
    for cls, context in cta.argument_descriptor_contexts.items():
        if getattr(cls, "__name__", "") == "StaticArg":
            for param, descriptor in context.items():
                value = getattr(descriptor, "value", None)
                if value is not None:
                    static[param] = value.item() if hasattr(value, "item") else value
    # The offsets the run's offset provider named (not their tables): a variant compiled with
    # none must be warmed with none, or its key differs (``warm --from-ledger --grid``).
    offsets = sorted(str(name) for name in (getattr(cta, "offset_provider", None) or {}))
    return {"program": f"{program['module']}:{program['name']}", "backend": short, "static_args": static,
            "offsets": offsets}


def _placeholder(program: str) -> _ServedTask:
    """What gt4py gets for a variant that was only planned: nothing to run, nothing compiled."""
    return _ServedTask(
        name=program, construct_compilable=_nothing, executor=_nothing,
        no_offload_reason="planned by gtcache", served=LoadedArtifact(_planned_only),
    )


def _nothing(_compilable: Any) -> Any:
    """Stands in for a served task's steps, which nothing ever calls."""
    return None
