"""Facts that are slow to compute and change only when files change, kept in the store.

A fresh process would otherwise pay for them on its first hit: the backend's
configuration fingerprint (gt4py's fingerprinting walks the whole toolchain, 1-4 ms)
and the installed distributions' versions (one listing per ``sys.path`` folder).
They live in ``facts/<environment>.json`` and its shards ``facts/<environment>-<xx>.json``
(``Store.read_facts`` / ``write_facts``), where ``<environment>`` digests what could make
them differ: the versions of gtcache, gt4py and Python, the interpreter, and the identity
(size, modification time, inode), as imported, of the code that computes them (gt4py's
``fingerprinting``, gtcache's ``_compat`` and this file). The main file holds the backend
fingerprints and the versions; a program's definitions and sources are in the shard named
by the first two hex digits of ``shard_of`` its source file, read when first needed.

Each fact is checked before use, never trusted over correctness:

- ``backend_config`` maps a digest of *everything the fingerprint reads* (the backend's
  fingerprinted state, serialized by ``_compat.backend_digest``, plus the identity of
  the modules defining its data classes) to the fingerprint. Another option, another
  step, an edited module: another digest, and the fingerprint is computed afresh.
- ``definitions`` maps a digest of everything the direct key's definition fingerprint
  reads (source texts, closure values, the modules of its data classes; see
  ``definition.py``) to that fingerprint (gt4py's fingerprinting is slow the first
  time, about 1 ms a program).
- ``sources`` maps a digest of a source file's name (``shard_of``) to its ``identity`` as
  ``source_file_key`` digests it and what is known of the ``functions`` in it, by
  ``<first line>:<qualified name>``: the digest of their text, and the names they read
  (see ``definition.py``). Used only while the file's identity is the same; one entry per
  file name, so an edited file's facts replace those of its earlier version (format 3 kept
  every version until the caps pushed them out). One identity per file, not per function:
  a fresh process digests a file's identity once.
- a program's definitions and sources are in the shard of its own source file's name
  (``shard_of``), so its first hit reads one shard (a function called by programs in
  several files is in each of their shards).
- ``folders`` maps each ``sys.path`` folder listed (by absolute name) to its identity
  (device, inode, size, modification and change time) and the keyed distributions'
  ``versions`` found in it: installing or removing a distribution changes its folder,
  and only a changed or new folder is listed again. Per folder, not per ``sys.path``: a
  process whose path has one more folder (a script's, a test's) lists that one, and does
  not replace what other processes' paths keep (format 4 kept one ``sys.path``, and two
  kinds of processes took turns listing every folder and rewriting the file).

With ``GTCACHE_SELF_CHECK=1`` every fact read is computed as well and compared: a
difference is a warning, and the computed value is used. The files are a hint: any may be
deleted at any time, and a damaged one is ignored and rewritten.
"""

from __future__ import annotations

import atexit
import linecache
import math
import os
import sys
import threading
import time
import tokenize
import warnings
from collections.abc import Callable
from typing import Any

import xxhash

from gtcache import toolchain
from gtcache._version import __version__
from gtcache.gt4py import _compat
from gtcache.keys import canonical_bytes, digest
from gtcache.store import Store

__all__ = [
    "Facts", "active", "active_store", "backend_code", "backend_config", "content_key", "changed_since_start_at", "flush", "remember_versions",
    "shard_of", "source_file_key",
    "source_unchanged", "use",
]

_FORMAT = "gtcache-facts"
_VERSION = 5
#: Definition fingerprints and source facts are kept in shards (``facts/<environment>-<xx>.json``,
#: 256 of them): those of a program in the one named by the first two hex digits of
#: ``shard_of`` its source file (see ``definition.py``). A program's first hit reads that shard, never every
#: fact of a model (megabytes for a large one, tens of milliseconds to parse). Backend
#: fingerprints and versions, few, are in the main file.
_SHARD_DIGITS = 2
#: At most this many backend fingerprints, and per shard definition fingerprints and source
#: files (any beyond are recomputed; 131,072 definitions and 32,768 files in all). A shard
#: holds the programs of the files whose names it is named by: all variants of a file's
#: programs and every file they reach must fit, or the oldest are recomputed each run.
_MAX_BACKENDS = 64
#: At most this many ``sys.path`` folders' listings (the main file is read by every fresh
#: process's first hit: a few kB).
_MAX_FOLDERS = 64
_MAX_DEFINITIONS_PER_SHARD = 512
_MAX_SOURCE_FILES_PER_SHARD = 128
#: A file changed less than this many seconds ago is not described in the facts: an edit in
#: the same tick of the file system's clock, of the same size, would not show (ccache's rule).
_TOO_RECENT = 2.0
#: About when this process started (this module is imported as the hook is installed, when
#: gt4py is imported, before any DSL module): a file changed since may differ from what the
#: process imported and gt4py read from it.
_STARTED = time.time()


def _file_clock_ns() -> int:
    """Now, by the clock that stamps files: Linux's coarse real-time clock, a tick behind
    ``time.time()`` at most (elsewhere ``time.time()`` less a tick)."""
    if sys.platform == "linux":
        try:
            return time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
        except OSError:
            pass
    return time.time_ns() - 10_000_000


_CLOCK_REALTIME_COARSE = 5  # Linux's; the time module does not name it
#: ``_STARTED`` by the files' clock: a file stamped at or after it changed after the process
#: started (or within the same tick before), so it may differ from what the process parsed.
_STARTED_NS = _file_clock_ns()


def _since_ns() -> int:
    """The moment a file changed at or after may hold another text than this process read of
    it (ns, by the files' clock): when it first looked gt4py up (``gtcache._autoload``'s
    finder, armed at start-up: no file of gt4py, nor of a DSL module gt4py parsed, was read
    before); without the start-up hook, when the process started (``/proc/self/stat``: clock
    ticks since boot), less two ticks; elsewhere ``_TOO_RECENT`` before the hook's install."""
    seen = getattr(sys.modules.get("gtcache._autoload"), "gt4py_first_seen_ns", None)
    if isinstance(seen, int):
        return min(seen, _STARTED_NS)
    try:
        with open("/proc/self/stat", "rb") as file:
            ticks = int(file.read().rpartition(b")")[2].split()[19])  # field 22, ``starttime``
        per_second = os.sysconf("SC_CLK_TCK")
        age_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - ticks * 1_000_000_000 // per_second
        return min(_STARTED_NS, _file_clock_ns() - age_ns) - 2 * 1_000_000_000 // per_second
    except (OSError, ValueError, IndexError, AttributeError):
        return _STARTED_NS - int(_TOO_RECENT * 1e9)


#: ``_since_ns``, taken at import: a forked process runs what its parent imported, and
#: inherits this.
_SINCE_NS = _since_ns()


def changed_since_start_at(time_ns: int) -> bool:
    """Whether a file's modification or change time (ns) is at or after ``_SINCE_NS``; a time in
    whole seconds (a file system that keeps no finer one: Lustre, GPFS, ext4 with small inodes)
    from the second of ``_SINCE_NS`` on."""
    return time_ns >= (_SINCE_NS - _SINCE_NS % 1_000_000_000 if time_ns % 1_000_000_000 == 0 else _SINCE_NS)


#: At most one write of the file per this many seconds (and one at the end: ``flush``).
_SAVE_EVERY = 2.0
#: Facts files of other environments (an older gtcache or gt4py, another venv) neither
#: written nor read for this long are removed by a process that wrote facts, at its exit
#: (``Store.sweep_facts``): nothing reads them after an upgrade. One still in use loses only
#: hints, computed again.
_SWEEP_AFTER = 30 * 24 * 3600.0
#: At most one sweep per environment and store this often (the main file says when): on a
#: parallel file system each file listed is a metadata request.
_SWEEP_EVERY = 24 * 3600.0

_active: Facts | None = None


def use(store: Store | None, *, verify: bool = False, warn: Callable[[str], None] | None = None) -> None:
    """Read this environment's facts from ``store`` (None: keep none); seeds the toolchain's versions."""
    global _active
    if _active is not None:
        _active.flush()
    _active = None if store is None else Facts(store, verify=verify, warn=warn)
    if _active is not None:
        _active.seed_versions()


def active() -> Facts | None:
    return _active


def active_store() -> Store | None:
    return None if _active is None else _active.store


def backend_config(backend: Any) -> str:
    """The backend's configuration fingerprint, from the active facts when they have it (else
    from this process's, by the same digest of what it reads)."""
    if _active is not None:
        return _active.backend_config(backend)
    made = _compat.backend_digest(backend)
    if made is None:
        return _compat.backend_fingerprint(backend)
    key = content_key(*made)
    if (known := _backend_fingerprints.get(key)) is None:
        known = _backend_fingerprints[key] = _compat.backend_fingerprint(backend)
    return known + backend_code(made[1])


#: ``backend_config`` without active facts: fingerprints by ``content_key`` (a few backends).
_backend_fingerprints: dict[str, str] = {}


def backend_code(modules: frozenset[str]) -> str:
    """What ``backend_config`` adds to gt4py's fingerprint for a backend holding code of the
    user's (``_compat.is_own_code``: classes, functions, data classes or enums of modules other
    than gt4py's and the standard library's, which gt4py fingerprints by their names): a digest
    of those modules' files, "" when there are none. ``ValueError`` (no key) when such a file
    cannot be read or changed since the process started: it may hold other code than was imported."""
    if (known := _backend_codes.get(modules)) is None:
        known = _backend_codes[modules] = _read_backend_code(modules)
    code, problem = known
    if problem is not None:
        raise ValueError(problem)
    return code


#: ``backend_code`` per set of modules: (its suffix, or why there is none). Constant in a process.
_backend_codes: dict[frozenset[str], tuple[str, str | None]] = {}


def _read_backend_code(modules: frozenset[str]) -> tuple[str, str | None]:
    files = []
    for name in sorted(m for m in modules if isinstance(m, str) and _compat.is_own_code(m)):
        path = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(path, str):
            return "", f"the backend holds code of module '{name}', which has no file to key it by"
        identity = _file_identity(path)
        try:
            with open(path, "rb") as file:
                text = file.read()
        except OSError:
            text = None
        if identity is None or text is None or _identity(path) != identity:
            return "", (f"the backend holds code of '{path}', which changed since this process started"
                        f" (or {_TOO_RECENT:g} s before: it may not be what was imported), or cannot be read")
        files.append([name, xxhash.xxh3_128_hexdigest(text)])
    return (f" code {digest(canonical_bytes(files))}" if files else ""), None


def flush() -> None:
    """Write the active facts not written yet (at exit, and when other facts are used)."""
    if _active is not None:
        _active.flush()


@atexit.register
def _at_exit() -> None:
    """The last write; then, if this process wrote facts (a new environment's first processes
    do) and none swept today, the old facts of other environments go (off the hot path: it
    lists a folder)."""
    if _active is not None:
        _active.flush()
        _active.sweep()


def remember_versions() -> None:
    """Keep the distribution versions ``toolchain`` listed in this process (if it listed them)."""
    if _active is not None:
        _active.remember_versions()


class Facts:
    """The facts files of this environment in one store: the main file, read when the facts
    are used, and the shards, each read when a fact in it is first asked for; a file is
    written when a fact in it is new."""

    def __init__(self, store: Store, *, verify: bool = False, warn: Callable[[str], None] | None = None):
        self.store = store
        self.verify = verify
        self._warn = warn
        self._lock = threading.Lock()
        self.environment = _ENVIRONMENT
        self.backends: dict[str, str] = {}
        #: Per ``sys.path`` folder's absolute name: its ``identity`` and the ``versions`` in it.
        self.folders: dict[str, dict[str, Any]] = {}
        self._shards: dict[str, _Shard] = {}
        #: Per ``sys.path`` entry when the facts were used: ``toolchain.folder_identity``.
        self._path_now: dict[str, tuple[str | None, list[int] | None, float]] = {}
        self._remembered = False
        #: The files with facts not written yet: ``""`` the main one, else a shard's name.
        self._dirty: set[str] = set()
        self._saved_at = float("-inf")
        self._wrote = False
        #: When a process last swept other environments' facts (``sweep``; epoch seconds).
        self.swept_at: float | None = None
        data = _ours(store.read_facts(self.environment))
        if data is not None:
            try:
                self.backends = _str_map(data.get("backend_config"))
                self.swept_at = _epoch(data.get("swept_at"))
                self.folders = _folders(data.get("folders"))
            except Exception:  # damaged in a way the checks miss: ignored (and rewritten), like
                self.backends, self.swept_at, self.folders = {}, None, {}  # any damaged file

    # -- backend fingerprints -----------------------------------------------------------

    def backend_config(self, backend: Any) -> str:
        made = _compat.backend_digest(backend)
        if made is None:
            return _compat.backend_fingerprint(backend)
        key = content_key(*made)
        known = self.backends.get(key)
        if known is not None and not self.verify:
            return known + backend_code(made[1])
        fingerprint = _compat.backend_fingerprint(backend)
        if known is not None and known != fingerprint:
            self._report(f"the stored fingerprint of backend '{getattr(backend, 'name', '?')}' is {known!r},"
                         f" computing it gives {fingerprint!r}")
        if known is None:
            self._put(self.backends, key, fingerprint, _MAX_BACKENDS, "")
        return fingerprint + backend_code(made[1])

    # -- definition fingerprints --------------------------------------------------------

    def definition(self, shard: str, key: str) -> str | None:
        """The stored fingerprint of the definition content ``key`` (see ``definition.py``), in
        the shard ``shard`` names (``shard_of`` the definition's source file)."""
        return None if self.verify else self._shard(shard).definitions.get(key)

    def remember_definition(self, shard_key: str, key: str, fingerprint: str) -> None:
        shard = self._shard(shard_key)
        known = shard.definitions.get(key)
        if known is not None and known != fingerprint:  # only when verifying
            self._report(f"the stored fingerprint of a definition is {known!r}, computing it gives {fingerprint!r}")
        if known != fingerprint:
            self._put(shard.definitions, key, fingerprint, _MAX_DEFINITIONS_PER_SHARD, shard.name)

    # -- source texts -------------------------------------------------------------------

    def source(self, shard: str, filename: str, file_key: str, name: str) -> dict[str, Any] | None:
        """What is stored of the function ``name`` (``<first line>:<qualified name>``) in the
        source file ``filename``, if it was stored of the file as it is now (``file_key``: see
        ``source_file_key``), in the shard of ``shard``: the ``digest`` of its text, and when
        they were needed the attribute ``chains`` it reads and the ``globals`` gt4py finds in
        it (see ``definition.py``)."""
        if self.verify:
            return None
        functions = _file_functions(self._shard(shard).sources.get(shard_of(filename)), file_key)
        return None if functions is None else _function_facts(functions.get(name))

    def remember_source(self, shard_key: str, filename: str, file_key: str, name: str, value: dict[str, Any]) -> None:
        """Keep ``value`` for the function ``name`` of ``filename`` as ``file_key`` describes it.
        A file's facts are kept by its name: those of an earlier version of it are dropped."""
        shard = self._shard(shard_key)
        key = shard_of(filename)
        with self._lock:  # threads keeping facts of one file add to what the others kept
            functions = _file_functions(shard.sources.get(key), file_key)
            # A damaged entry (planted, or from a bug) is replaced like a missing one.
            known = None if functions is None else _function_facts(functions.get(name))
            differ = [] if known is None or not self.verify else [  # what reading gives against what is stored
                (fact, known[fact], computed) for fact, computed in value.items() if fact in known and known[fact] != computed
            ]
            if known is not None and known["digest"] == value.get("digest"):  # the same text: its facts
                value = {**{fact: known[fact] for fact in _SOURCE_FACTS if fact in known}, **value}  # not computed yet stay
            if known == value:
                return
            if functions is None:  # new, edited or damaged: its place is the newest (last out)
                shard.sources.pop(key, None)
                if len(shard.sources) >= _MAX_SOURCE_FILES_PER_SHARD:
                    shard.sources.pop(next(iter(shard.sources)))
            shard.sources[key] = {"identity": file_key, "functions": {**(functions or {}), name: value}}
        for fact, stored, computed in differ:
            self._report(f"the stored {_SOURCE_FACTS.get(fact, fact)} of a source text is {stored!r},"
                         f" reading it gives {computed!r}")
        self._save(shard.name)

    def source_files(self) -> int:
        """How many source files the shards read or written in this process describe."""
        return sum(len(shard.sources) for shard in self._shards.values())

    # -- installed versions -------------------------------------------------------------

    def seed_versions(self) -> None:
        """Hand ``toolchain`` the stored listings of the ``sys.path`` folders that are as they were."""
        self._path_now = {entry: toolchain.folder_identity(entry) for entry in sys.path}
        if self.verify:
            return
        toolchain.seed_folder_versions({
            entry: stored["versions"]
            for entry, (name, identity, _) in self._path_now.items()
            if name is not None and (stored := self.folders.get(name)) is not None and stored["identity"] == identity
        })

    def remember_versions(self) -> None:
        """After the toolchain facts: keep what ``toolchain`` listed of the folders it had to list
        (once), each with its identity taken just before its listing, unless it had changed
        less than ``_TOO_RECENT`` seconds before (a change in the same tick would not show).
        The folders this process found as stored move to the newest places first: at the cap,
        the folders no process used for longest go, not those of every process's path."""
        if self._remembered or not (listed := toolchain.listed_folders()):
            return
        self._remembered = True
        changed = False
        with self._lock:
            for folder in listed:
                if folder.name is None:  # a removed working folder: no name to keep it by
                    continue
                settled = folder.identity is None or max(folder.identity[3], folder.identity[4]) / 1e9 <= folder.at - _TOO_RECENT
                stored = self.folders.get(folder.name)
                if (self.verify and stored is not None and stored["identity"] == folder.identity
                        and stored["versions"] != folder.versions):
                    self._report(f"the stored distribution versions of '{folder.name}' differ from the installed ones")
                if not settled or stored == {"identity": folder.identity, "versions": folder.versions}:
                    continue
                if not changed:  # the first change: those still in use go to the newest places
                    for name, identity, _ in self._path_now.values():
                        if name is not None and (kept := self.folders.get(name)) is not None and kept["identity"] == identity:
                            self.folders[name] = self.folders.pop(name)
                    changed = True
                self.folders.pop(folder.name, None)
                if len(self.folders) >= _MAX_FOLDERS:
                    self.folders.pop(next(iter(self.folders)))
                self.folders[folder.name] = {"identity": folder.identity, "versions": folder.versions}
        if changed:
            self._save("")

    # -- the files ----------------------------------------------------------------------

    def _shard(self, key: str) -> _Shard:
        """The shard the hex digest ``key`` names, read from its file the first time."""
        name = key[:_SHARD_DIGITS]
        shard = self._shards.get(name)
        if shard is None:
            shard = _Shard(name, _ours(self.store.read_facts(f"{self.environment}-{name}")))
            with self._lock:
                shard = self._shards.setdefault(name, shard)
        return shard

    def _put(self, table: dict[str, Any], key: str, value: Any, limit: int, file: str) -> None:
        """Keep a new fact (the oldest of its table out when there are ``limit``) and save."""
        with self._lock:
            if key not in table and len(table) >= limit:
                table.pop(next(iter(table)))
            table[key] = value
        self._save(file)

    def _save(self, file: str) -> None:
        """Write the facts now if they were not written in the last ``_SAVE_EVERY`` seconds,
        else at the next fact after that or at ``flush`` (at exit): the first process of an
        environment learns hundreds of facts, and each write is of a whole file."""
        with self._lock:
            self._dirty.add(file)
        if time.monotonic() - self._saved_at >= _SAVE_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write what is not written yet."""
        with self._lock:
            if not self._dirty:
                return
            files, self._dirty, self._saved_at = self._dirty, set(), time.monotonic()
            header = {"format": _FORMAT, "version": _VERSION, "gtcache": __version__}
            values = {
                file: {**header, "backend_config": dict(self.backends), "folders": dict(self.folders),
                       "swept_at": self.swept_at}
                if file == "" else {**header, **self._shards[file].as_json()}
                for file in files
            }
        for file, value in values.items():
            try:
                self.store.write_facts(f"{self.environment}-{file}" if file else self.environment, value)
                self._wrote = True
            except Exception:  # a hint not written is recomputed by the next process
                pass

    def sweep(self) -> None:
        """Remove other environments' facts files unused for ``_SWEEP_AFTER``: only in a process
        that wrote facts (one that learned nothing lists nothing), once, and only when no
        process swept in the last ``_SWEEP_EVERY`` (then the main file records when)."""
        now = time.time()
        if not self._wrote or (self.swept_at is not None and 0 <= now - self.swept_at < _SWEEP_EVERY):
            return
        self._wrote = False
        self.store.sweep_facts(self.environment, _SWEEP_AFTER)
        self.swept_at = now
        with self._lock:
            self._dirty.add("")
        self.flush()

    def _report(self, problem: str) -> None:
        """A stored fact that computing contradicts (self-check): a warning; the computed one is used."""
        if self._warn is not None:
            self._warn(f"self-check: {problem}")
        else:
            warnings.warn(f"gtcache self-check: {problem} (using the computed value)", UserWarning, stacklevel=3)


class _Shard:
    """The definitions and source files of the programs whose source files' ``shard_of``
    starts with ``name`` (``facts/<environment>-<name>.json``)."""

    def __init__(self, name: str, data: dict[str, Any] | None):
        self.name = name
        self.definitions: dict[str, str] = _str_map(data.get("definitions")) if data is not None else {}
        sources = data.get("sources") if data is not None else None
        #: Per digest of a file's name: its identity and functions (checked when used).
        self.sources: dict[str, dict[str, Any]] = {
            k: v for k, v in sources.items() if isinstance(k, str) and isinstance(v, dict)
        } if isinstance(sources, dict) else {}

    def as_json(self) -> dict[str, Any]:
        return {"definitions": dict(self.definitions), "sources": dict(self.sources)}


def _file_functions(entry: Any, file_key: str) -> dict[str, Any] | None:
    """The functions of a file's entry in a shard if it describes the file as ``file_key`` does."""
    if isinstance(entry, dict) and entry.get("identity") == file_key and isinstance(entry.get("functions"), dict):
        return entry["functions"]  # type: ignore[no-any-return]
    return None


#: What a function's source facts are, as self-check names them.
_SOURCE_FACTS = {"digest": "digest", "globals": "global names", "chains": "attribute chains"}


def _function_facts(value: Any) -> dict[str, Any] | None:
    """A function's stored source facts if they are an object with a ``digest`` (else: none)."""
    return value if isinstance(value, dict) and isinstance(value.get("digest"), str) else None


def _ours(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """A facts file's object if it is of this format and version (else it is ignored)."""
    return data if data is not None and data.get("format") == _FORMAT and data.get("version") == _VERSION else None


def content_key(serialized: bytes, modules: frozenset[str]) -> str:
    """The digest of a ``_compat.content_bytes`` serialization and its data classes' modules' files."""
    if (identities := _modules_identities.get(modules)) is None:
        identities = _modules_identities[modules] = canonical_bytes(
            sorted((name, _module_identity(name)) for name in modules)
        )
    return digest(serialized + identities)


#: ``content_key``'s serialized module identities per set of modules (constant in a process).
_modules_identities: dict[frozenset[str], bytes] = {}


def source_file_key(filename: str) -> str | None:
    """The identity of a source file as its entry in the facts keeps it: a digest of its name
    and identity (device, inode, size, modification and change time); None when the file cannot be stat'ed or changed after
    ``_TOO_RECENT`` seconds before this process started. Once per process, like the identity
    (``source_unchanged`` tells whether the file still has it)."""
    if filename not in _file_keys:
        identity = _file_identity(filename)
        _file_keys[filename] = None if identity is None else digest(canonical_bytes([filename, identity]))
    return _file_keys[filename]


_file_keys: dict[str, str | None] = {}


def shard_of(filename: str) -> str:
    """The shard of the facts of the programs defined in ``filename``: a digest of its name,
    not of its identity (an edited file's facts go to the same shard; its source facts
    replace the old ones there, its programs' old definition fingerprints stay until the
    shard's cap pushes them out). Also the key of a file's source facts in a shard."""
    if (shard := _shards_of.get(filename)) is None:
        shard = _shards_of[filename] = digest(filename)
    return shard


_shards_of: dict[str, str] = {}


def changed_since_start(filename: str) -> bool:
    """Whether ``filename`` changed (or cannot be stat'ed) since the process started: what gt4py
    parsed of it when its operators were decorated may differ from what it holds now. A fresh
    ``stat`` every call. A text ``inspect`` takes from memory never changes: IPython keeps each
    cell's code in ``linecache`` without a modification time (a new name per cell run), and
    ``linecache`` never reads such an entry again."""
    kept = linecache.cache.get(filename)
    if kept is not None and len(kept) == 4 and kept[1] is None:
        return False
    try:
        st = os.stat(filename)
    except OSError:
        return True
    if changed_since_start_at(st.st_mtime_ns):
        return True
    return changed_since_start_at(st.st_ctime_ns) and not _same_text(filename, st, kept)


def _same_text(filename: str, st: os.stat_result, kept: Any) -> bool:
    """Whether a file whose change time alone moved since the start (a hard link made to it, as
    ``uv`` installing from a shared cache does; a ``chmod``) still has the text ``inspect`` read
    before: ``linecache``'s, while its size and modification time are the file's (an edit that
    kept them, ``cp -p``, shows in the text). Read once per change time, once it is settled.
    Every call here follows one that found the modification time from before the start."""
    if _same_texts.get(filename) == st.st_ctime_ns:
        return True
    if kept is None or len(kept) != 4 or kept[0] != st.st_size or kept[1] != st.st_mtime:
        return False
    try:
        with tokenize.open(filename) as file:
            lines = file.readlines()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"  # as linecache keeps it
    if lines != kept[2]:
        return False
    if time.time() - st.st_ctime > _TOO_RECENT:  # another change in the same tick would not show
        _same_texts[filename] = st.st_ctime_ns
    return True


#: Per file, the change time ``_same_text`` found its text unchanged at (read once per change).
_same_texts: dict[str, int] = {}


def source_unchanged(filename: str) -> bool:
    """Whether ``filename`` still has the identity ``source_file_key`` used (read after its text)."""
    return _file_identity(filename) == _identity(filename)


_file_identities: dict[str, list[int] | None] = {}


def _file_identity(filename: str) -> list[int] | None:
    """``_identity`` of a source file when the process first asked for it; None when absent or
    too recent."""
    if filename not in _file_identities:
        identity = _identity(filename)
        if identity is not None and max(identity[3], identity[4]) / 1e9 > _STARTED - _TOO_RECENT:
            identity = None
        _file_identities[filename] = identity
    return _file_identities[filename]


def _epoch(value: Any) -> float | None:
    """A stored time (epoch seconds), if it is a finite number a float holds (JSON's numbers
    are not bounded: ``float(10**400)`` raises)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _identity(path: str | None) -> list[int] | None:
    """A file's device, inode, size, modification and change time; where these do not tell its
    versions apart (``toolchain.stat_suffices``: an image's file), a digest of its bytes too
    (read each time)."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    identity = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if not toolchain.stat_suffices(path, st):
        try:
            with open(path, "rb") as file:
                identity.append(xxhash.xxh3_64_intdigest(file.read()))
        except OSError:
            return None
    return identity


_module_identities: dict[str, list[int] | None] = {}


def _module_identity(name: str) -> list[int] | None:
    """The identity of a module's file (once per process: a module's code does not change in it)."""
    if name not in _module_identities:
        _module_identities[name] = _identity(getattr(sys.modules.get(name), "__file__", None))
    return _module_identities[name]


def _environment() -> str:
    """The digest naming this environment's facts file: versions, and the files of the code that
    computes or reads the facts (an edited gtcache of the same version, in a checkout's
    editable install, must not read what its earlier code stored)."""
    here = os.path.dirname(__file__)
    code = [
        _compat.fingerprinting.__file__, _compat.__file__, __file__, os.path.join(here, "definition.py"),
        toolchain.__file__, sys.modules[canonical_bytes.__module__].__file__,
    ]
    return digest(canonical_bytes({
        "gtcache": __version__, "gt4py": _compat.GT4PY_VERSION, "python": sys.version,
        "executable": sys.executable, "code": [[path, _identity(path)] for path in code],
    }))


def _folders(value: Any) -> dict[str, dict[str, Any]]:
    """The stored folder listings of a main file that are well formed (others are listed again)."""
    if not isinstance(value, dict):
        return {}
    return {
        name: {"identity": entry["identity"], "versions": entry["versions"]}
        for name, entry in value.items()
        if isinstance(name, str) and isinstance(entry, dict)
        and isinstance(versions := entry.get("versions"), dict) and _str_map(versions) == versions
        and ((identity := entry.get("identity")) is None
             or (isinstance(identity, list) and len(identity) in (5, 6) and all(type(part) is int for part in identity)))
    }


#: This environment's digest, taken as the modules are imported: the code that runs is the
#: code as imported (a file of it edited later must not name the facts this code computes).
_ENVIRONMENT = _environment()
