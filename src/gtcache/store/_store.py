"""The store: entry folders under one root, published atomically, scanned into frozen data.

Concurrency model. Readers take no locks. An entry becomes visible by one
``rename`` of a complete staging folder (written under ``tmp/`` on the same
file system, every file flushed) to ``entries/<k2>/<key>``; ``rename`` of a
folder onto an existing non-empty one fails, so the first publisher of a key
wins and later ones discard their copy: single flight with no lock. Removal
renames the folder into ``trash/`` first, so no half-deleted entry is ever
visible at its key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import json
import os
import pathlib
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from gtcache._frozen import Frozen, replace
from gtcache._version import __version__
from gtcache.errors import (
    CorruptEntryError,
    EntryNotFoundError,
    EntryRemovedError,
    GtcacheError,
    UntrustedEntryError,
)
from gtcache.store import _files, _layout
from gtcache.store._record import EntryRecord, FileRecord, now_iso
from gtcache.store._trust import StoreModes, TrustPolicy

if TYPE_CHECKING:  # what only listing and maintenance use is imported when they run (a hit
    # imports none of it: tests/gt4py/test_hot_path.py)
    from gtcache.store._index import Index
    from gtcache.store._ledger import LedgerTotals
    from gtcache.store._lock import StoreLock
    from gtcache.store._scan import EntryInfo, Seen, StoreScan

__all__ = ["Entry", "EntryDraft", "RefusedFolder", "Store"]


class EntryDraft(Frozen):
    """What a publisher knows of a variant; the store adds files, times and counters."""

    key: str
    ingredients: Mapping[str, Any]
    program: Mapping[str, str]
    backend: Mapping[str, Any]
    device: Mapping[str, Any]
    toolchain: Mapping[str, Any]
    artifact: Mapping[str, Any]
    compile_seconds: float

    def __post_init__(self) -> None:
        if not _layout.is_key(self.key):
            raise ValueError(f"Key '{self.key}' is not 32 lowercase hex digits.")


class Entry(Frozen):
    """A sound entry found at its key: its record and the folder its files sit in."""

    record: EntryRecord
    path: pathlib.Path
    #: From ``publish``: this call put it there (not another publisher that got there first).
    published: bool = False

    @property
    def key(self) -> str:
        return self.record.key

    def file(self, name: str) -> pathlib.Path:
        return self.path / name


class RefusedFolder(Frozen):
    """A folder whose owner or mode makes lookups refuse what it holds (``Store.refused_folders``)."""

    path: pathlib.Path
    #: "shard" (``entries/<xx>``), "entry" (``entries/<xx>/<key>``) or "direct" (``direct/<xx>``).
    what: str
    #: Why, as lookups say it (the reason of their ``CorruptEntryError``, the fix included).
    problem: str
    #: What lookups refuse because of it: the entry folders it holds (1 for an entry folder),
    #: or the direct links (a "direct" folder). None for a folder that is a symlink: nothing
    #: is listed through one.
    refused: int | None


#: How the index compares with the entry folders (``Store.check_index``).
IndexState = Literal["ok", "lagging", "rebuilt", "foreign", "unavailable"]


class Store:
    """A gtcache store rooted at ``root``. Create with ``open_store``."""

    def __init__(
        self, root: pathlib.Path, *, index_dir: pathlib.Path | None, read_only: bool,
        trust: TrustPolicy | None = None, trust_problem: str | None = None, modes: StoreModes | None = None,
    ):
        self.root = root
        #: ``root`` as text, for the lookup path (which makes no pathlib objects).
        self._root = os.fspath(root)
        self.read_only = read_only
        self.index_dir = index_dir if index_dir is not None else root / _layout.INDEX_DIR
        #: Whether the index is the store's own ``index`` folder (a fixed folder then).
        self._index_inside = index_dir is None or os.fspath(index_dir) == f"{self._root}/{_layout.INDEX_DIR}"
        #: Whose entry files ``lookup`` accepts (``None``: anyone's; see ``_trust.py``).
        self.trust = trust
        #: Why the store is not trusted, when opened anyway (``allow_untrusted``): then read-only.
        self.trust_problem = trust_problem
        #: Permission bits of what this store creates: the root's (group-shared stores).
        self.modes = modes or StoreModes()
        self._index_handle: Index | None = None
        #: The fixed folders that are not real folders, checked once (``unsafe_folders``).
        self._unsafe: tuple[tuple[pathlib.Path, str], ...] | None = None
        #: Shard folders checked by ``_folder_problem`` (path -> problem or None), once each.
        self._shards: dict[str, str | None] = {}

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, read_only={self.read_only})"

    def close(self) -> None:
        if self._index_handle is not None:
            self._index_handle.close()

    @property
    def _index(self) -> Index:
        """The index (a hint, never read by a lookup), made when first used."""
        if self._index_handle is None:
            from gtcache.store._index import Index

            self._index_handle = Index(
                self.index_dir, store_root=self.root, mode=self.modes.folder if self.modes.shared else 0o700
            )
        return self._index_handle

    # -- lookup -------------------------------------------------------------------------

    def entry_path(self, key: str) -> pathlib.Path:
        return pathlib.Path(_layout.entry_dir(self._root, key))

    def lookup(self, key: str) -> Entry | None:
        """The entry at ``key``; ``None`` if there is none; ``CorruptEntryError`` if it is broken.

        Reads the entry folder (the truth), never the index. File sizes are checked
        here, checksums by ``verify_payload`` just before loading. A problem found after
        the record was read, when that record is no longer at the key (the entry removed,
        or removed and published anew, meanwhile: a prune or ``rm`` in another process),
        is not the entry's: absent, or the new entry looked up again.
        """
        for _attempt in range(2):
            try:
                return self._lookup(key)
            except _Replaced:
                continue
        return self._lookup(key, last=True)

    def _lookup(self, key: str, *, last: bool = False) -> Entry | None:
        """``lookup`` once; ``_Replaced`` (unless ``last``) when a problem was found but the
        record read is no longer the one at the key."""
        path = _layout.entry_dir(self._root, key)
        try:  # never a symlink or a FIFO; the owner and mode come with the fstat
            fd, st = _files.open_regular(f"{path}/{_layout.ENTRY_FILE}")
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CorruptEntryError(key, f"cannot read '{_layout.ENTRY_FILE}' ({error.strerror}).") from None
        try:
            # Who may have written it, and its size, before a byte of it is read: someone who
            # may write a refused folder could put a sparse record of gigabytes there.
            if self.trust is not None and (problem := self._entry_problem(path, st)):
                if (now := _record_now(path, st)) == "gone":
                    return None  # removed (renamed away whole) while we looked: absent, not untrusted
                if now == "other" and not last:
                    raise _Replaced
                raise UntrustedEntryError(key, problem)
            if st.st_size > _layout.RECORD_MAX_BYTES:
                raise CorruptEntryError(key, f"'{_layout.ENTRY_FILE}' has {st.st_size} bytes, more than a record has.")
            text = _read_fd(fd, st.st_size, _layout.RECORD_MAX_BYTES)
        except OSError as error:
            raise CorruptEntryError(key, f"cannot read '{_layout.ENTRY_FILE}' ({error}).") from None
        except ValueError as error:  # grew past the limit while read
            raise CorruptEntryError(key, f"'{_layout.ENTRY_FILE}' has {error}.") from None
        finally:
            os.close(fd)
        try:
            record = EntryRecord.loads(text)
        except ValueError as error:
            raise CorruptEntryError(key, str(error)) from None
        if record.key != key:
            raise CorruptEntryError(key, f"its record names key '{record.key}'.")
        if problem := _files.size_problem(path, ((f.path, f.size) for f in record.files), self.trust):
            if (now := _record_now(path, st)) == "gone":
                return None  # removed (renamed away whole) while we looked: absent, not broken
            if now == "other" and not last:
                raise _Replaced  # and published anew: that entry is looked up
            raise CorruptEntryError(key, problem)
        return Entry(record=record, path=pathlib.Path(path))

    def get(self, key: str) -> Entry:
        """Like ``lookup`` but ``EntryNotFoundError`` when absent."""
        entry = self.lookup(key)
        if entry is None:
            raise EntryNotFoundError(key)
        return entry

    def removed_since_lookup(self, key: str) -> bool:
        """Whether the entry at ``key`` is gone whole (no record: renamed away by a prune or
        ``rm``), as a file it had found missing then says (absent, not broken)."""
        return not os.path.lexists(f"{_layout.entry_dir(self._root, key)}/{_layout.ENTRY_FILE}")

    def verify_payload(self, entry: Entry) -> None:
        """Check every payload file against its size and xxh3; ``CorruptEntryError`` if one differs,
        ``EntryRemovedError`` (one) if the entry was removed since its lookup (a file and the
        record gone: the folder renamed away whole, as ``lookup`` tells absent from broken)."""
        folder = os.fspath(entry.path)
        for item in entry.record.files:
            try:
                digest = _files.file_xxh3(f"{folder}/{item.path}")
            except OSError as error:
                if isinstance(error, FileNotFoundError) and self.removed_since_lookup(entry.key):
                    raise EntryRemovedError(entry.key) from None
                raise CorruptEntryError(entry.key, f"cannot read '{item.path}' ({error.strerror}).") from None
            if digest != item.xxh3:
                raise CorruptEntryError(entry.key, f"file '{item.path}' does not match its checksum.")

    def touch(self, key: str, *, hits: int = 1) -> None:
        """Record use of an entry (last used, hit count). Best effort; lost updates are harmless.

        Reads and rewrites ``entry.json`` through one descriptor of the entry folder: if
        the entry is removed (renamed into ``trash/``) and published again meanwhile, the
        rewrite lands in the old, removed folder, never over the new entry's record.
        """
        if self.read_only or self.unsafe_folders():
            return
        with contextlib.suppress(OSError, ValueError):
            folder = os.open(self.entry_path(key), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                record = EntryRecord.loads(_files.read_regular(_layout.ENTRY_FILE, dir_fd=folder, limit=_layout.RECORD_MAX_BYTES))
                if record.key != key:
                    return
                record = replace(record, last_used=now_iso(), hits=record.hits + hits)
                # Not fsynced: usage counters are worth less than a disk flush per hit.
                _files.replace_text_at(folder, _layout.ENTRY_FILE, record.dumps(), mode=self.modes.file)
            finally:
                os.close(folder)

    # -- direct keys --------------------------------------------------------------------

    def build_key_of(self, direct_key: str) -> str | None:
        """The build key a direct key was linked to, or ``None``: also for a link (or its shard
        folder) someone untrusted may have written, as ``lookup`` checks an entry's. Never raises."""
        link = _layout.direct_link(self._root, direct_key)
        try:  # never a symlink or a FIFO (which would block)
            fd, st = _files.open_regular(link)
            try:  # bytes, decoded here: a text-mode open looks the codec up (an import, the first time)
                text = os.read(fd, 256).decode("ascii").strip()
            finally:
                os.close(fd)
        except (OSError, UnicodeDecodeError):
            return None
        if self.trust is not None and (self.trust.file_problem(link, st) or self._shard_problem(link)):
            return None
        return text if _layout.is_key(text) else None

    def trust_problem_of(self, key: str) -> str | None:
        """Why entry ``key``'s record or folders may have been written by someone untrusted
        (what ``lookup`` checks besides the payload files), or None: for listings, whose rows
        may come from the index."""
        if self.trust is None:
            return None
        path = _layout.entry_dir(self._root, key)
        try:
            st = os.lstat(f"{path}/{_layout.ENTRY_FILE}")
        except OSError:
            return None  # absent: the listing's row says what it found
        if not stat.S_ISREG(st.st_mode):
            return f"'{_layout.ENTRY_FILE}' is not a regular file."
        return self._entry_problem(path, st)

    def _entry_problem(self, path: str, st: os.stat_result) -> str | None:
        """Why the entry folder ``path`` (its ``entry.json`` of stat ``st``) may have been written
        by someone untrusted: its folders (``_folder_problem``), then its record; None when
        nothing. The rule of ``lookup``, which listings, ``doctor`` and ``verify`` apply too."""
        return self._folder_problem(path) or self._record_problem(path, st)

    def _record_problem(self, path: str, st: os.stat_result) -> str | None:
        """Why the record (``entry.json``, stat ``st``) of the entry folder ``path`` may have
        been written by someone untrusted."""
        assert self.trust is not None
        problem = self.trust.file_problem(_layout.ENTRY_FILE, st, folder=path)
        if problem is not None and "writable by" in problem:
            return f"{problem.removesuffix('.')}; {_umask_advice(self._root, problem)}"  # (seldom alone, as for folders)
        return problem

    def _folder_problem(self, folder: str) -> str | None:
        """Why an entry folder or its shard (``_shard_problem``) may have been written by someone
        untrusted, or None. The entry's own files are checked too, but a writer of a folder
        above them could swap a checked file for another between the checks and the load."""
        return self._shard_problem(folder) or _real_folder_problem(folder, self.trust, self._root)

    def _shard_problem(self, path: str) -> str | None:
        """``_real_folder_problem`` of the shard folder holding ``path`` (once per shard)."""
        shard = path.rpartition("/")[0]
        if (problem := self._shards.get(shard, "")) == "":
            problem = self._shards[shard] = _real_folder_problem(shard, self.trust, self._root)
        return problem

    # -- environment facts (a hint: see FACTS_DIR) ---------------------------------------

    def read_facts(self, name: str) -> dict[str, Any] | None:
        """The JSON object of ``facts/<name>.json`` (``name``: ``_layout.FACTS_NAME_PATTERN``);
        None when absent, unreadable, untrusted or not an object. Never raises: whoever uses a
        fact checks it (or recomputes it)."""
        if not _layout.FACTS_NAME_PATTERN.fullmatch(name):
            return None
        try:
            fd, st = _files.open_regular(f"{self._root}/{_layout.FACTS_DIR}/{name}.json")
            try:
                # Who wrote it and how big it is, before a byte is read.
                if st.st_size > _layout.FACTS_MAX_BYTES or (
                    self.trust is not None and self.trust.file_problem(_layout.FACTS_DIR, st, fd=fd)
                ):
                    return None
                data = _read_fd(fd, st.st_size, _layout.FACTS_MAX_BYTES)
            finally:
                os.close(fd)
            value = json.loads(data)
        except (OSError, ValueError, RecursionError):  # RecursionError: nested too deep for json
            return None
        return value if isinstance(value, dict) else None

    def write_facts(self, name: str, value: Mapping[str, Any]) -> None:
        """Replace ``facts/<name>.json`` atomically (not fsynced: a lost file is recomputed).
        Does nothing in a read-only store or one with an unsafe fixed folder."""
        if not _layout.FACTS_NAME_PATTERN.fullmatch(name) or self.read_only or self.unsafe_folders():
            return
        if not self.root.is_dir():  # removed while the process ran: the facts make no store again
            return
        folder = self.root / _layout.FACTS_DIR
        self.modes.make_folder(folder)
        _files.atomic_write_text(folder / f"{name}.json", json.dumps(value, sort_keys=True), durable=False,
                                 mode=self.modes.file)

    def sweep_facts(self, keep: str, older_than: float) -> int:
        """Remove what is in ``facts/`` (but folders) whose name does not start with ``keep``
        (this environment's digest) and that was neither written nor read for ``older_than``
        seconds (``st_mtime``, ``st_atime`` where the file system keeps it): the facts of other
        environments, which nothing reads once gtcache or gt4py is upgraded. "Now" is the
        folder's own modification time when that is earlier than this host's clock (the
        caller has just written a file there: the file server's clock, not a node's that runs
        ahead). Returns how many were removed; never raises. Nothing is followed: a symlink
        is unlinked itself. A file replaced between its ``lstat`` and the ``unlink`` is removed
        all the same: facts are hints, and its environment computes them again."""
        if not _layout.is_key(keep) or self.read_only or self.unsafe_folders():
            return 0
        removed = 0
        try:
            folder = os.open(self.root / _layout.FACTS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return 0
        try:
            cutoff = min(time.time(), os.fstat(folder).st_mtime) - older_than
            for name in os.listdir(folder):
                if name.startswith(keep):
                    continue
                with contextlib.suppress(OSError):
                    st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode) and max(st.st_mtime, st.st_atime) < cutoff:
                        os.unlink(name, dir_fd=folder)
                        removed += 1
        except OSError:
            pass
        finally:
            os.close(folder)
        return removed

    def link_direct(self, direct_key: str, build_key: str) -> None:
        """Record that ``direct_key`` names the entry ``build_key`` (atomic; last writer wins)."""
        self._require_writable()
        if not (_layout.is_key(direct_key) and _layout.is_key(build_key)):
            raise ValueError("Direct and build keys must be 32 lowercase hex digits.")
        # Through descriptors opened without following a symlink: ``direct/``, then its shard
        # (either swapped for a link since this Store checked its folders writes nothing).
        shard_name = direct_key[:2]
        direct = self._fixed_dir(_layout.DIRECT_DIR)
        try:
            try:
                os.mkdir(shard_name, self.modes.folder, dir_fd=direct)
                made = True
            except FileExistsError:
                made = False
            try:
                shard = os.open(shard_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=direct)
            except OSError as error:
                raise GtcacheError(f"'{self.root / _layout.DIRECT_DIR / shard_name}' is not a folder (a symlink or a"
                                   f" file: {error.strerror}); run 'gtcache verify --repair'.") from None
        finally:
            os.close(direct)
        if made:
            os.fchmod(shard, self.modes.folder)  # the store's mode, whatever the umask
        try:
            _files.replace_text_at(shard, direct_key, build_key + "\n", mode=self.modes.file)
        finally:
            os.close(shard)

    # -- publish ------------------------------------------------------------------------

    def publish(self, draft: EntryDraft, files: Mapping[str, pathlib.Path | bytes]) -> Entry:
        """Copy ``files`` (entry file name -> source path or content) in as entry ``draft.key``.

        Atomic and single-flight: returns the entry that ended up at the key, which
        is another publisher's when it got there first. A broken entry at the key
        (bad record, missing file, wrong size or checksum) is replaced.
        """

        def record_for(file_records: tuple[FileRecord, ...]) -> EntryRecord:
            now = now_iso()
            return EntryRecord(
                key=draft.key, ingredients=draft.ingredients, program=draft.program,
                backend=draft.backend, device=draft.device, toolchain=draft.toolchain,
                artifact=draft.artifact, files=file_records, created=now, last_used=now, hits=0,
                compile_seconds=round(draft.compile_seconds, 3), gtcache_version=__version__,
            )

        return self._publish(draft.key, files, record_for)

    def publish_record(self, record: EntryRecord, files: Mapping[str, pathlib.Path | bytes]) -> Entry:
        """Publish an entry another store wrote (an import): its record as it is, its files
        (name -> source path or content) checked against the record. Atomic and
        single-flight like ``publish``; a broken entry at the key is replaced."""

        def record_for(file_records: tuple[FileRecord, ...]) -> EntryRecord:
            if sorted(file_records, key=lambda f: f.path) != sorted(record.files, key=lambda f: f.path):
                raise CorruptEntryError(record.key, "its files do not match its record.")
            return record

        return self._publish(record.key, files, record_for)

    def _publish(
        self, key: str, files: Mapping[str, pathlib.Path | bytes],
        record_for: Callable[[tuple[FileRecord, ...]], EntryRecord],
    ) -> Entry:
        self._require_writable()
        staging = self._stage(files, record_for)
        target = self.entry_path(key)
        try:
            self._shard(key, create=True)
            for _attempt in range(3):
                staged = os.lstat(staging)
                if _rename_if_absent(staging, target):
                    # The index is not touched: model runs (many ranks, shared file
                    # systems) never open SQLite; the next scan picks the entry up.
                    try:
                        _files.fsync_dir(target.parent)
                        return Entry(record=_read_record(target), path=target, published=True)
                    except (OSError, ValueError):  # its record unreadable now (EIO): not left behind unsaid
                        with contextlib.suppress(OSError):
                            self._move_to_trash(target, judged=staged)
                        raise
                # Something is at the key. A sound entry wins; anything else (a broken
                # record, a folder without 'entry.json', a symlink, a file) is replaced:
                # a complete entry is renamed in whole, so none of those is one in the making.
                try:
                    if stat.S_ISDIR(os.lstat(target).st_mode):
                        existing = self.lookup(key)
                        if existing is not None:
                            self.verify_payload(existing)
                            return existing
                except FileNotFoundError:
                    continue  # removed meanwhile: try again
                except CorruptEntryError:
                    pass
                self._move_to_trash(target)
            raise GtcacheError(f"Could not publish entry '{key}' after three attempts.")
        finally:
            _files.remove_tree(staging)

    def publish_problem(self, key: str) -> str | None:
        """Why an entry published at ``key`` now would not be served, or None: its shard folder
        is not a real folder, or lookups refuse what it holds (``_shard_problem``). What an
        import asks of every key before it writes anything."""
        shard = os.fspath(self.entry_path(key).parent)
        try:
            mode = os.lstat(shard).st_mode
        except FileNotFoundError:
            return None  # made by the publish, with the store's mode
        except OSError as error:
            return f"cannot check folder '{shard}' ({error.strerror})."
        if not stat.S_ISDIR(mode):
            return f"'{shard}' is not a folder (a symlink or a file); run 'gtcache verify --repair'."
        return self._shard_problem(f"{shard}/{key}") if self.trust is not None else None

    def set_aside(self, key: str, folder: pathlib.Path) -> pathlib.Path | None:
        """Move what is at ``key`` (a broken entry: a folder, a symlink or a file) into ``folder``
        (under ``tmp/``), through a descriptor of its shard folder (never through a symlink);
        where it went, or None when nothing was there. ``put_back`` undoes it."""
        self._require_writable()
        try:
            shard = os.open(self.entry_path(key).parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        try:
            os.rename(key, folder / key, src_dir_fd=shard)
        except FileNotFoundError:
            return None
        finally:
            os.close(shard)
        _files.fsync_dir(folder)
        return folder / key

    def put_back(self, key: str, aside: pathlib.Path) -> bool:
        """Move back to ``key`` what ``set_aside`` moved to ``aside``, unless something is at the
        key now (False: it stays where it is)."""
        shard = os.open(self.entry_path(key).parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.rename(aside, key, dst_dir_fd=shard)
        except OSError as error:
            if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                return False
            raise
        finally:
            os.close(shard)
        return True

    def _stage(
        self, files: Mapping[str, pathlib.Path | bytes],
        record_for: Callable[[tuple[FileRecord, ...]], EntryRecord],
    ) -> pathlib.Path:
        """A complete entry folder under ``tmp/``: every file flushed, then ``entry.json``."""
        staging = self.scratch_root() / _files.unique_name("publish-")
        self.modes.make_folder(staging)
        try:
            records = []
            for name, source in sorted(files.items()):
                if isinstance(source, bytes):
                    size, digest = _files.write_durably(staging / name, source, mode=self.modes.file)
                else:
                    size, digest = _files.copy_durably(source, staging / name, mode=self.modes.file)
                records.append(FileRecord(path=name, size=size, xxh3=digest))
            record = record_for(tuple(records))
            EntryRecord.from_json(json.loads(record.dumps()))  # never publish what we cannot read
            _files.atomic_write_text(staging / _layout.ENTRY_FILE, record.dumps(), mode=self.modes.file)
            _files.fsync_dir(staging)
        except BaseException:
            _files.remove_tree(staging)
            raise
        return staging

    # -- removal ------------------------------------------------------------------------

    def remove(
        self, keys: Iterable[str], *, failed: dict[str, str] | None = None,
        judged: Mapping[str, os.stat_result] | None = None,
        seen: Mapping[str, Seen] | None = None, left: set[str] | None = None,
        removed: list[str] | None = None,
    ) -> int:
        """Remove entries (absent keys are skipped); return the bytes freed.

        ``removed``: the keys this call removed are added to it (not those found gone: another
        process removed them).

        ``failed``: an entry that cannot be removed (``OSError``: permissions, ...) is added
        to it, key -> why, and the others still go; without it the first such error raises.
        ``judged``: by key, the ``lstat`` of the entry folder to remove; another folder found
        at the key (published since) is left.
        ``seen``: by key, what a plan was made from (``EntryInfo.as_seen``); an entry used or
        published since (its record, read once it is in ``trash/`` where no process updates it
        any more, has another usage stamp or another file identity) is put back and its key
        added to ``left``. One that cannot be put back (its shard folder gone) stays in
        ``trash/`` and fails like a removal that cannot be done.
        """
        self._require_writable()
        freed = 0
        for key in keys:
            path = self.entry_path(key)
            if self._shard(key) is None:  # never reach through a symlinked shard
                self._index.delete(key)
                continue
            size = _tree_size(path)
            try:
                done = self._move_to_trash(
                    path, judged=None if judged is None else judged.get(key),
                    seen=None if seen is None else seen.get(key),
                )
            except OSError as error:
                if failed is None:
                    raise
                where = f": '{error.filename}'" if error.filename is not None else ""
                failed[key] = f"{error.strerror or error}{where}"
                continue
            if done == "left":
                if left is not None:
                    left.add(key)
                continue
            if done == "removed":
                freed += size
                if removed is not None:
                    removed.append(key)
            self._index.delete(key)
        return freed

    def clear(self) -> int:
        """Remove every entry folder, the index and what ``quarantine/`` holds; return the bytes freed."""
        from gtcache.store import _catalog

        self._require_writable()
        keys = [key for key, _ in _catalog.disk_keys(self)]
        freed = self.remove(keys)
        freed += self.quarantined()[1]
        self._index.drop()
        for leftover in (_layout.TMP_DIR, _layout.TRASH_DIR, _layout.DIRECT_DIR, _layout.QUARANTINE_DIR):
            _files.remove_tree(self.root / leftover)
        return freed

    def clear_quarantine(self) -> int:
        """Remove what ``quarantine/`` holds (never through a symlink); return the bytes freed."""
        self._require_writable()
        size = self.quarantined()[1]
        _files.remove_tree(self.root / _layout.QUARANTINE_DIR)
        return size

    def quarantined(self) -> tuple[int, int]:
        """(items, bytes) in ``quarantine/``: broken entries ``verify --repair`` moved aside,
        which no listing shows and only ``clear`` removes. Nothing is followed through a symlink."""
        folder = self.root / _layout.QUARANTINE_DIR
        if any(path == folder for path, _ in self.unsafe_folders()):
            return 0, 0
        count = size = 0
        with contextlib.suppress(OSError), os.scandir(folder) as items:
            for item in items:
                count += 1
                with contextlib.suppress(OSError):
                    is_folder = item.is_dir(follow_symlinks=False)
                    size += _tree_size(pathlib.Path(item.path)) if is_folder else item.stat(follow_symlinks=False).st_size
        return count, size

    def disk_size(self, key: str) -> int:
        """Bytes the entry folder of ``key`` takes (its record included): what ``remove`` frees."""
        return _tree_size(self.entry_path(key)) if self._shard(key) is not None else 0

    def _move_to_trash(
        self, path: pathlib.Path, *, judged: os.stat_result | None = None, seen: Seen | None = None,
    ) -> Literal["removed", "gone", "left"]:
        """Rename ``path`` (a folder, or a symlink itself) into ``trash/`` and delete it there.

        ``trash/`` is opened without following a symlink and the rename and the removal go
        through that descriptor: nothing is ever moved or deleted outside the store.
        ``judged``: the ``lstat`` of what is to go; ``seen``: its record as a scan saw it.
        Anything else found at ``path`` (another folder, or the folder's record changed) is
        put back, through a descriptor of its shard folder taken before the move (never
        through a symlink swapped in meanwhile): "left". If yet another folder took its
        place meanwhile, that one stays and the one moved is deleted ("left" too); if it
        cannot be put back otherwise, it stays in ``trash/`` and ``OSError`` is raised.
        """
        trash = self._fixed_dir(_layout.TRASH_DIR)
        shard = None
        try:
            if judged is not None or seen is not None:
                try:
                    shard = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                except FileNotFoundError:
                    return "gone"
            doomed = _files.unique_name(f"{path.name}-")
            try:
                os.rename(path, doomed, dst_dir_fd=trash)
            except FileNotFoundError:
                return "gone"
            if shard is not None and not self._as_judged(trash, doomed, judged, seen):
                try:
                    os.rename(doomed, path.name, src_dir_fd=trash, dst_dir_fd=shard)
                except OSError as error:
                    if not _exists_at(trash, doomed):  # gone from trash/ meanwhile (a verify --repair)
                        return "gone"
                    if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise OSError(error.errno, f"used since the plan, but could not be put back ({error.strerror});"
                                                   f" kept as '{self.root / _layout.TRASH_DIR / doomed}'") from None
                    _files.remove_tree(doomed, dir_fd=trash)  # another entry was published at the key: it stays
                return "left"
            _files.remove_tree(doomed, dir_fd=trash)
        finally:
            os.close(trash)
            if shard is not None:
                os.close(shard)
        return "removed"

    @staticmethod
    def _as_judged(trash: int, name: str, judged: os.stat_result | None, seen: Seen | None) -> bool:
        """Whether ``trash/<name>`` is the folder judged (same inode) with the record seen
        (the same usage stamp, from an ``entry.json`` of the same identity)."""
        if judged is not None:
            moved = os.stat(name, dir_fd=trash, follow_symlinks=False)
            if (moved.st_dev, moved.st_ino) != (judged.st_dev, judged.st_ino):
                return False
        if seen is None:
            return True
        from gtcache.store._scan import usage_stamp

        data: Any = {}
        identity = None
        with contextlib.suppress(OSError, ValueError, RecursionError):  # unreadable: as a broken entry's
            folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=trash)
            try:
                # The identity as the scan takes it (a stat that follows a link: a broken entry's
                # entry.json may be a symlink, a FIFO, a folder); the record only from a regular file.
                st = os.stat(_layout.ENTRY_FILE, dir_fd=folder)
                identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                data = json.loads(_files.read_regular(_layout.ENTRY_FILE, dir_fd=folder, limit=_layout.RECORD_MAX_BYTES))
            finally:
                os.close(folder)
        if seen.identity is not None and identity != seen.identity:
            return False
        return usage_stamp(data if isinstance(data, dict) else {}) == seen.stamp

    def _fixed_dir(self, name: str) -> int:
        """A descriptor of the store folder ``name``, created if absent, never through a symlink."""
        path = self.root / name
        self.modes.make_folder(path)
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as error:
            raise GtcacheError(f"'{path}' is not a folder of the store ({error.strerror}); run 'gtcache verify --repair'.") from None

    def _shard(self, key: str, *, create: bool = False) -> pathlib.Path | None:
        """The shard folder of ``key`` if it is a real folder (created with ``create``), else None.

        A shard that is a symlink or a file is refused when publishing (``GtcacheError``)
        and skipped when removing: it is an orphan for ``verify --repair``.
        """
        shard = self.entry_path(key).parent
        if create:
            self.modes.make_folder(shard)
        try:
            mode = os.lstat(shard).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(mode):
            return shard
        if create:
            raise GtcacheError(f"'{shard}' is not a folder (a symlink or a file); run 'gtcache verify --repair'.")
        return None

    # -- scan ---------------------------------------------------------------------------

    def scan(self, *, use_index: bool = True) -> StoreScan:
        """Every entry folder, sound or broken, reconciled with (and refreshing) the index.

        ``use_index=False`` reads every ``entry.json`` and never opens the index
        (what a model run does: it must not touch SQLite on a shared file system).
        """
        from gtcache.store import _catalog

        # A scan allocates a few objects per entry and frees none of them: the cyclic
        # garbage collector would rescan the growing heap again and again (superlinear).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return _catalog.scan(self, self._index, use_index)
        finally:
            if gc_was_enabled:
                gc.enable()

    def check_index(self) -> IndexState:
        """How the index compares with the folders, refreshing it if needed.

        "ok"; "lagging" (behind the folders, which is normal after publishes);
        "rebuilt" (it was unreadable); "foreign" (it holds rows that are not gtcache's
        text rows, never read: ``index_foreign_rows`` says how many; rebuild to clear);
        "unavailable" (read-only or unwritable).
        """
        from gtcache.store import _catalog

        return _catalog.check_index(self, self._index)

    @property
    def index_foreign_rows(self) -> int:
        """Rows the last index read skipped unread because they are not gtcache's."""
        return self._index.foreign

    def quarantine(self, key: str, *, judged: os.stat_result | None = None) -> pathlib.Path | None:
        """Move an entry out of the way, into ``quarantine/``, for inspection; None if absent.

        ``judged``: the ``lstat`` of the entry folder the caller found broken. Only that folder
        is set aside: one a publish put at the key since (a sound entry) is put back, or
        removed if yet another took its place meanwhile, and None is returned."""
        self._require_writable()
        if self._shard(key) is None:
            return None
        folder = self._fixed_dir(_layout.QUARANTINE_DIR)
        name = _files.unique_name(f"{key}-")
        try:
            os.rename(self.entry_path(key), name, dst_dir_fd=folder)
            moved = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(folder)
        aside = self.root / _layout.QUARANTINE_DIR / name
        if judged is not None and (moved.st_dev, moved.st_ino) != (judged.st_dev, judged.st_ino):
            if not _rename_if_absent(aside, self.entry_path(key)):
                self._move_to_trash(aside)
            return None
        self._index.delete(key)
        return aside

    def usage(self) -> tuple[int, int, int]:
        """(entries, bytes, files) from the folders alone: no record is parsed, no index read."""
        by_key = self.usage_by_key()
        return len(by_key), sum(size for size, _ in by_key.values()), sum(files for _, files in by_key.values())

    def usage_by_key(self) -> dict[str, tuple[int, int]]:
        """(bytes, files) of each entry folder found now, by key: ``usage`` entry by entry, what a
        plan made from an earlier scan checks its caps against (an entry gone since is not there)."""
        from gtcache.store import _catalog

        found = {}
        for key, _ in _catalog.disk_keys(self):
            size = files = 0
            try:
                with os.scandir(self.entry_path(key)) as items:
                    for item in items:
                        with contextlib.suppress(OSError):
                            size += item.stat(follow_symlinks=False).st_size
                            files += 1
            except FileNotFoundError:
                continue  # removed since it was listed
            except OSError:
                pass
            found[key] = (size, files)
        return found

    # -- the ledger ---------------------------------------------------------------------

    def record_run(self, summary: Mapping[str, Any]) -> None:
        """Add one process run's summary to the ledger (nothing on a read-only store). Only
        ``ledger/`` itself must be a real folder (``_ledger`` writes through a descriptor of it
        opened without following a symlink): a hit in a store with another folder swapped for a
        symlink (which a miss warns of) is recorded, and says nothing at exit."""
        from gtcache.store import _ledger

        if not self.read_only:
            _ledger.write_run(self.root, summary, self.modes)

    def ledger(self) -> LedgerTotals:
        from gtcache.store import _ledger

        return _ledger.totals(self.root)

    def ledger_runs(self) -> list[dict[str, Any]]:
        from gtcache.store import _ledger

        return _ledger.read_runs(self.root)[0]

    def zero_ledger(self) -> int:
        from gtcache.store import _ledger

        self._require_writable()
        return _ledger.zero(self.root, self.modes)

    def ledger_zeroed(self) -> str | None:
        """When ``zero_ledger`` (``gtcache stats --zero``) last ran, ISO 8601; None if never."""
        from gtcache.store import _ledger

        return _ledger.zeroed(self.root)

    def rebuild_index(self) -> StoreScan:
        """Rebuild the index from the entry folders: its rows removed, in the database other
        processes may have open (a damaged one is made anew), and written again by a scan. An
        index another process holds locked is left as it is, never deleted: the scan reads the
        folders without it (``index`` "unavailable")."""
        self._require_writable()
        if not self._index.clear():
            return self.scan()
        return dataclasses.replace(self.scan(), index="rebuilt")

    def resolve(self, query: str, scan: StoreScan | None = None) -> tuple[EntryInfo, ...]:
        """Entries matching a full key, a unique key prefix (>= 4 digits) or a program name."""
        from gtcache.store import _catalog

        return _catalog.resolve(scan if scan is not None else self.scan(), query)

    def lock(self, name: str, method: str = "auto") -> StoreLock:
        """The inter-process lock ``name`` of this store (``locks/<name>.lock``, see ``_lock.py``)."""
        from gtcache.store._lock import StoreLock

        self._require_writable()
        folder = self.root / _layout.LOCKS_DIR
        self.modes.make_folder(folder)
        # Readable by those who may write the store only: ``flock`` takes a descriptor opened
        # for reading, so whoever may read a lock file may hold it (a reviewer's attack: another
        # user took most compile locks as they were created, and each compile waited
        # ``GTCACHE_WAIT``, 600 s, for nobody).
        return StoreLock(folder / f"{name}.lock", method, mode=self.modes.file & (0o660 if self.modes.shared else 0o600))

    @contextlib.contextmanager
    def scratch(self, prefix: str) -> Iterator[pathlib.Path]:
        """A fresh path in the store's ``tmp/`` (not created: make a folder or a file there),
        removed with everything under it on leaving. Same file system as the entries.
        ``scratch_root`` first: refused where the store is not written."""
        path = self.scratch_root() / _files.unique_name(prefix)
        try:
            yield path
        finally:
            _files.remove_tree(path)

    def scratch_root(self) -> pathlib.Path:
        """The store's ``tmp/``, made with the store's mode if absent (not with the umask of
        whoever runs first: a group-shared store's next writer could not use it). Refused
        (``GtcacheError``) where the store is not written: read-only, or a fixed folder that
        is a symlink (``tmp/`` itself: staging there would write outside the store)."""
        self._require_writable()
        os.close(self._fixed_dir(_layout.TMP_DIR))  # a real folder now (made if absent), not only when opened
        return self.root / _layout.TMP_DIR

    def _require_writable(self) -> None:
        if self.read_only:
            raise GtcacheError(f"Store '{self.root}' is read-only.")
        if (problem := self.unsafe_problem()) is not None:
            raise GtcacheError(problem)

    def unsafe_problem(self) -> str | None:
        """Why nothing is written to the store although it is writable: a fixed folder that is
        not a real folder (``unsafe_folders``); None when there is none."""
        if unsafe := self.unsafe_folders():
            path, what = unsafe[0]
            return f"Store folder '{path}' is {what}; nothing is written through it: run 'gtcache verify --repair'."
        return None

    def fixed_folders(self) -> tuple[pathlib.Path, ...]:
        """The store's own folders (and ``index`` when it lives in the store)."""
        folders = tuple(self.root / name for name in _layout.FIXED_DIRS)
        if self._index_inside:
            folders += (self.index_dir,)
        return folders

    def unsafe_folders(self) -> tuple[tuple[pathlib.Path, str], ...]:
        """Fixed folders that exist but are not real folders (a symlink, a file): (path, what).

        Checked once per ``Store`` (one ``lstat`` per folder), never on lookups; every
        write refuses while one is found (``verify --repair`` mends them).
        """
        if self._unsafe is None:  # (paths as text: a first hit makes no pathlib objects here)
            found = []
            folders = [f"{self._root}/{name}" for name in _layout.FIXED_DIRS]
            if self._index_inside:
                folders.append(f"{self._root}/{_layout.INDEX_DIR}")
            for path in folders:
                try:
                    mode = os.lstat(path).st_mode
                except FileNotFoundError:
                    continue
                except OSError as error:
                    found.append((pathlib.Path(path), f"unreadable ({error.strerror})"))
                    continue
                if stat.S_ISLNK(mode):
                    found.append((pathlib.Path(path), "a symbolic link"))
                elif not stat.S_ISDIR(mode):
                    found.append((pathlib.Path(path), "not a folder"))
            self._unsafe = tuple(found)
        return self._unsafe

    def refused_folders(self, *, entry_folders: bool = True) -> Iterator[RefusedFolder]:
        """The shard folders (``entries/<xx>``, ``direct/<xx>``) and entry folders whose owner
        or mode (an entry's: or its record's, ``entry.json``) makes lookups refuse what they
        hold, each checked by what lookups call (``_shard_problem``, ``_folder_problem``,
        ``_record_problem``: ``_entry_problem``'s rule), in name order; nothing when
        ``trust`` is None. An entry folder in a refused shard is counted in the shard's
        ``refused``, not listed; ``entry_folders=False`` leaves out the entry folders of the
        other shards (their ``lstat`` each). The fixed folders are checked when the store is
        opened (``check_store``): they are not here.

        Bounded for a large store: an ``lstat`` or two per folder and record, no file opened; nothing
        followed through a symlink (a shard that is a symlink is refused, not listed, and a
        folder is listed through a descriptor opened with ``O_NOFOLLOW``, in case one is
        swapped for a symlink meanwhile).
        """
        if self.trust is None:
            return
        unsafe = {os.fspath(path) for path, _ in self.unsafe_folders()}
        for fixed in (_layout.ENTRIES_DIR, _layout.DIRECT_DIR):
            top = f"{self._root}/{fixed}"
            if top in unsafe:
                continue  # a symlink or a file (``verify`` names it): never listed through
            for name, kind in _folder_items(top):
                if kind == "other" or len(name) != 2 or not all(c in "0123456789abcdef" for c in name):
                    continue  # not a shard lookups could reach (``verify``: an orphan)
                shard = f"{top}/{name}"
                problem = self._shard_problem(f"{shard}/")  # as a lookup checks the shard of its key
                what = "direct" if fixed == _layout.DIRECT_DIR else "shard"
                if kind == "link":  # refused ("not a real folder"), never listed through
                    if problem is not None:
                        yield RefusedFolder(pathlib.Path(shard), what, problem, None)
                    continue
                if what == "direct":
                    if problem is not None:
                        links = sum(_layout.is_key(n) for n, _ in _folder_items(shard))
                        yield RefusedFolder(pathlib.Path(shard), what, problem, links)
                    continue
                if problem is None and not entry_folders:
                    continue
                refused = 0
                for key, item_kind in _folder_items(shard):
                    if item_kind == "other" or not (_layout.is_key(key) and key.startswith(name)):
                        continue
                    folder = f"{shard}/{key}"
                    # Its folders, then its record, as lookups check them (``_entry_problem``).
                    if (why := self._folder_problem(folder) or self._record_problem_at(folder)) is None:
                        continue
                    if not os.path.lexists(f"{folder}/{_layout.ENTRY_FILE}"):
                        continue  # no record: lookups find no entry there, refused or not
                    if why == problem:
                        refused += 1  # lookups stop at the shard's problem
                    else:
                        yield RefusedFolder(pathlib.Path(folder), "entry", why, 1)
                if problem is not None:
                    yield RefusedFolder(pathlib.Path(shard), what, problem, refused)

    def _record_problem_at(self, folder: str) -> str | None:
        """``_record_problem`` of the entry folder ``folder``'s record; None without one."""
        try:
            st = os.lstat(f"{folder}/{_layout.ENTRY_FILE}")
        except OSError:
            return None
        return self._record_problem(folder, st) if stat.S_ISREG(st.st_mode) else None

    def recheck_folders(self) -> None:
        """Forget the folder checks made once per ``Store`` (``unsafe_folders``, the shard
        folders' ``_shard_problem``): after a repair, they are made again when next needed."""
        self._unsafe = None
        self._shards.clear()

    def repair_folder(self, path: pathlib.Path) -> None:
        """Replace the fixed folder ``path`` that is a symlink or a file by an empty folder.

        Removes the link (or file) itself, never what it points to.
        """
        if self.read_only:
            raise GtcacheError(f"Store '{self.root}' is read-only.")
        if path not in self.fixed_folders():
            raise ValueError(f"'{path}' is not a fixed folder of the store.")
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                path.unlink()
        if path == self.index_dir and not self.modes.shared:
            path.mkdir(mode=0o700, exist_ok=True)  # private, as the index makes it
        else:  # the store's mode, as at its making (a group-shared store's folders stay so)
            self.modes.make_folder(path)
        self._unsafe = None


class _Replaced(Exception):
    """``Store._lookup``: the record read is no longer the one at the key, another is."""


def _record_now(path: str, st: os.stat_result) -> Literal["same", "gone", "other"]:
    """Whether the record (``entry.json``, ``fstat`` ``st``) read from the entry folder ``path``
    is still the one there: "same" (also when that cannot be told), "gone" (nothing there now:
    the folder renamed away whole) or "other" (another record: removed and published anew)."""
    try:
        now = os.stat(f"{path}/{_layout.ENTRY_FILE}", follow_symlinks=False)
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "same"
    return "same" if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) else "other"


def _rename_if_absent(source: pathlib.Path, target: pathlib.Path) -> bool:
    try:
        os.rename(source, target)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):  # ENOTDIR: a file or symlink
            return False
        raise
    return True


def _read_record(path: pathlib.Path) -> EntryRecord:
    return EntryRecord.loads(_files.read_regular(path / _layout.ENTRY_FILE, limit=_layout.RECORD_MAX_BYTES))


def _real_folder_problem(path: str, trust: TrustPolicy | None, root: str) -> str | None:
    """Why ``path`` (in the store at ``root``) is not a real folder only trusted users can
    write, or None (``trust`` None: anyone's). A folder writable by others is seldom alone
    (a store made under umask 002): the advice is for every folder of the store."""
    if trust is None:
        return None
    try:
        st = os.lstat(path)
    except OSError as error:
        return f"cannot check folder '{path}' ({error.strerror})."
    if not stat.S_ISDIR(st.st_mode):
        return f"'{path}' is not a real folder (a symbolic link?), so it is not loaded."
    if (problem := trust.problem(path, st)) is None:
        return None
    head, _, advice = problem.partition("; ")
    if "writable by" in head:
        advice = _umask_advice(root, head)
    return f"folder {head}, so it is not loaded; {advice}"


def _umask_advice(root: str, problem: str) -> str:
    """The fix of a folder or record writable by someone untrusted (``problem``): seldom alone
    (a store made under umask 002, ACLs set on a tree), so for the whole store."""
    if "through its access ACL" in problem:
        return f"run 'setfacl -R -b {root}', or trust whom the ACLs name (GTCACHE_TRUSTED_USERS, GTCACHE_TRUSTED_GROUPS)"
    return f"run 'chmod -R go-w {root}', or set GTCACHE_TRUSTED_GROUPS if its group may write it"


def _folder_items(path: str) -> list[tuple[str, str]]:
    """The items of the folder ``path``, sorted, as (name, "folder" | "link" | "other");
    none when ``path`` is a symlink (opened with ``O_NOFOLLOW``) or cannot be listed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    found = []
    try:
        with os.scandir(fd) as items:
            for item in items:
                with contextlib.suppress(OSError):
                    kind = "link" if item.is_symlink() else "folder" if item.is_dir(follow_symlinks=False) else "other"
                    found.append((item.name, kind))
    except OSError:
        pass
    finally:
        os.close(fd)
    return sorted(found)


def _read_fd(fd: int, size: int, limit: int | None = None) -> bytes:
    """All of an open file's bytes (``size``: what ``fstat`` said; it may have grown);
    ``ValueError`` when it grew past ``limit``."""
    chunks, total = [], 0
    while chunk := os.read(fd, max(size, 4096) + 1):
        chunks.append(chunk)
        total += len(chunk)
        if limit is not None and total > limit:
            raise ValueError(f"more than {limit} bytes")
    return b"".join(chunks)


def _exists_at(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _tree_size(path: pathlib.Path) -> int:
    total = 0
    with contextlib.suppress(OSError), os.scandir(path) as items:
        for item in items:
            with contextlib.suppress(OSError):
                total += item.stat(follow_symlinks=False).st_size
    return total
