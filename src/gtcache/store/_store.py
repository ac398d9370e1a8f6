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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gtcache._version import __version__
from gtcache.errors import (
    AmbiguousKeyError,
    CorruptEntryError,
    EntryNotFoundError,
    GtcacheError,
    NotAStoreError,
    StoreVersionError,
)
from gtcache.store import _files, _layout, _ledger
from gtcache.store._index import Index, IndexRow
from gtcache.store._lock import StoreLock
from gtcache.store._record import EntryRecord, FileRecord, now_iso
from gtcache.store._scan import EntryInfo, StoreScan

__all__ = ["Entry", "EntryDraft", "Store", "open_store"]


@dataclasses.dataclass(frozen=True)
class EntryDraft:
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


@dataclasses.dataclass(frozen=True)
class Entry:
    """A sound entry found at its key: its record and the folder its files sit in."""

    record: EntryRecord
    path: pathlib.Path

    @property
    def key(self) -> str:
        return self.record.key

    def file(self, name: str) -> pathlib.Path:
        return self.path / name


class Store:
    """A gtcache store rooted at ``root``. Create with ``open_store``."""

    def __init__(self, root: pathlib.Path, *, index_dir: pathlib.Path | None, read_only: bool):
        self.root = root
        self.read_only = read_only
        self.index_dir = index_dir if index_dir is not None else root / _layout.INDEX_DIR
        self._index = Index(self.index_dir)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, read_only={self.read_only})"

    def close(self) -> None:
        self._index.close()

    # -- lookup -------------------------------------------------------------------------

    def entry_path(self, key: str) -> pathlib.Path:
        return _layout.entry_dir(self.root, key)

    def lookup(self, key: str) -> Entry | None:
        """The entry at ``key``; ``None`` if there is none; ``CorruptEntryError`` if it is broken.

        Reads the entry folder (the truth), never the index. File sizes are checked
        here, checksums by ``verify_payload`` just before loading.
        """
        path = self.entry_path(key)
        try:
            text = (path / _layout.ENTRY_FILE).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CorruptEntryError(key, f"cannot read '{_layout.ENTRY_FILE}' ({error}).") from None
        try:
            record = EntryRecord.loads(text)
        except ValueError as error:
            raise CorruptEntryError(key, str(error)) from None
        if record.key != key:
            raise CorruptEntryError(key, f"its record names key '{record.key}'.")
        if problem := _size_problem(path, ((f.path, f.size) for f in record.files)):
            if not (path / _layout.ENTRY_FILE).exists():
                return None  # removed (renamed away whole) while we looked: absent, not broken
            raise CorruptEntryError(key, problem)
        return Entry(record=record, path=path)

    def get(self, key: str) -> Entry:
        """Like ``lookup`` but ``EntryNotFoundError`` when absent."""
        entry = self.lookup(key)
        if entry is None:
            raise EntryNotFoundError(key)
        return entry

    def verify_payload(self, entry: Entry) -> None:
        """Check every payload file against its size and xxh3; ``CorruptEntryError`` if one differs."""
        for item in entry.record.files:
            try:
                digest = _files.file_xxh3(entry.path / item.path)
            except OSError as error:
                raise CorruptEntryError(entry.key, f"cannot read '{item.path}' ({error}).") from None
            if digest != item.xxh3:
                raise CorruptEntryError(entry.key, f"file '{item.path}' does not match its checksum.")

    def touch(self, key: str, *, hits: int = 1) -> None:
        """Record use of an entry (last used, hit count). Best effort; lost updates are harmless."""
        if self.read_only:
            return
        path = self.entry_path(key) / _layout.ENTRY_FILE
        with contextlib.suppress(OSError, ValueError):
            record = EntryRecord.loads(path.read_bytes())
            record = dataclasses.replace(record, last_used=now_iso(), hits=record.hits + hits)
            # Not fsynced: usage counters are worth less than a disk flush per hit.
            _files.atomic_write_text(path, record.dumps(), durable=False)

    # -- direct keys --------------------------------------------------------------------

    def resolve_direct(self, direct_key: str) -> str | None:
        """The build key a direct key was linked to, or ``None``. Never raises."""
        try:
            text = _layout.direct_link(self.root, direct_key).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if _layout.is_key(text) else None

    def link_direct(self, direct_key: str, build_key: str) -> None:
        """Record that ``direct_key`` names the entry ``build_key`` (atomic; last writer wins)."""
        self._require_writable()
        if not (_layout.is_key(direct_key) and _layout.is_key(build_key)):
            raise ValueError("Direct and build keys must be 32 lowercase hex digits.")
        link = _layout.direct_link(self.root, direct_key)
        link.parent.mkdir(parents=True, exist_ok=True)
        _files.atomic_write_text(link, build_key + "\n", durable=False)

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

    def publish_record(self, record: EntryRecord, files: Mapping[str, bytes]) -> Entry:
        """Publish an entry another store wrote (an import): its record as it is, its files
        checked against the record. Atomic and single-flight like ``publish``."""

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
            target.parent.mkdir(parents=True, exist_ok=True)
            for _attempt in range(3):
                if _rename_if_absent(staging, target):
                    # The index is not touched: model runs (many ranks, shared file
                    # systems) never open SQLite; the next scan picks the entry up.
                    _files.fsync_dir(target.parent)
                    return Entry(record=_read_record(target), path=target)
                try:
                    existing = self.lookup(key)
                    if existing is not None:
                        self.verify_payload(existing)
                        return existing
                except CorruptEntryError:
                    self._move_to_trash(target)
            raise GtcacheError(f"Could not publish entry '{key}' after three attempts.")
        finally:
            _files.remove_tree(staging)

    def _stage(
        self, files: Mapping[str, pathlib.Path | bytes],
        record_for: Callable[[tuple[FileRecord, ...]], EntryRecord],
    ) -> pathlib.Path:
        """A complete entry folder under ``tmp/``: every file flushed, then ``entry.json``."""
        tmp_root = self.root / _layout.TMP_DIR
        tmp_root.mkdir(exist_ok=True)
        staging = tmp_root / _files.unique_name("publish-")
        staging.mkdir()
        try:
            records = []
            for name, source in sorted(files.items()):
                if isinstance(source, bytes):
                    size, digest = _files.write_durably(staging / name, source)
                else:
                    size, digest = _files.copy_durably(source, staging / name)
                records.append(FileRecord(path=name, size=size, xxh3=digest))
            record = record_for(tuple(records))
            EntryRecord.from_json(json.loads(record.dumps()))  # never publish what we cannot read
            _files.atomic_write_text(staging / _layout.ENTRY_FILE, record.dumps())
            _files.fsync_dir(staging)
        except BaseException:
            _files.remove_tree(staging)
            raise
        return staging

    # -- removal ------------------------------------------------------------------------

    def remove(self, keys: Iterable[str]) -> int:
        """Remove entries (absent keys are skipped); return the bytes freed."""
        self._require_writable()
        freed = 0
        for key in keys:
            path = self.entry_path(key)
            size = _tree_size(path)
            if self._move_to_trash(path):
                freed += size
            self._index.delete(key)
        return freed

    def clear(self) -> int:
        """Remove every entry folder and the index; return the bytes freed."""
        self._require_writable()
        keys = [key for key, _ in self._disk_keys()]
        freed = self.remove(keys)
        self._index.drop()
        for leftover in (_layout.TMP_DIR, _layout.TRASH_DIR, _layout.DIRECT_DIR):
            _files.remove_tree(self.root / leftover)
        return freed

    def _move_to_trash(self, path: pathlib.Path) -> bool:
        trash = self.root / _layout.TRASH_DIR
        trash.mkdir(exist_ok=True)
        doomed = trash / _files.unique_name(f"{path.name}-")
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            return False
        _files.remove_tree(doomed)
        return True

    # -- scan ---------------------------------------------------------------------------

    def scan(self, *, use_index: bool = True) -> StoreScan:
        """Every entry folder, sound or broken, reconciled with (and refreshing) the index.

        ``use_index=False`` reads every ``entry.json`` and never opens the index
        (what a model run does: it must not touch SQLite on a shared file system).
        """
        # A scan allocates a few objects per entry and frees none of them: the cyclic
        # garbage collector would rescan the growing heap again and again (superlinear).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._scan(use_index)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _scan(self, use_index: bool) -> StoreScan:
        rows = None if self.read_only or not use_index else self._index.rows()
        index_state = self._index.state if rows is not None else "unavailable"
        rows = rows or {}
        seen = set()
        infos = []
        for key, mtime_ns in self._disk_keys():
            seen.add(key)
            row = rows.get(key)
            if row is None or row.mtime_ns != mtime_ns:
                row = self._read_row(key, mtime_ns)
                if not self.read_only and use_index:
                    self._index.put(key, row)
            infos.append(self._info(key, row))
        for stale in rows.keys() - seen:
            self._index.delete(stale)
        if not use_index:
            index_state = "unused"
        infos.sort(key=lambda info: (info.program, info.backend, info.key))
        return StoreScan(root=self.root, entries=tuple(infos), index=index_state)

    def check_index(self) -> str:
        """How the index compares with the folders, refreshing it if needed.

        "ok"; "lagging" (behind the folders, which is normal after publishes);
        "rebuilt" (it was unreadable); "unavailable" (read-only or unwritable).
        """
        if self.read_only:
            return "unavailable"
        rows = self._index.rows()
        if rows is None:
            return "unavailable"
        if self._index.state == "rebuilt":
            self.scan()
            return "rebuilt"
        disk = dict(self._disk_keys())
        lagging = rows.keys() != disk.keys() or any(
            rows[key].mtime_ns != (mtime or 0) for key, mtime in disk.items()
        )
        if lagging:
            self.scan()
        return "lagging" if lagging else "ok"

    def quarantine(self, key: str) -> pathlib.Path | None:
        """Move an entry out of the way, into ``quarantine/``, for inspection; None if absent."""
        self._require_writable()
        folder = self.root / _layout.QUARANTINE_DIR
        folder.mkdir(exist_ok=True)
        target = folder / _files.unique_name(f"{key}-")
        try:
            os.rename(self.entry_path(key), target)
        except FileNotFoundError:
            return None
        self._index.delete(key)
        return target

    def usage(self) -> tuple[int, int, int]:
        """(entries, bytes, files) from the folders alone: no record is parsed, no index read."""
        entries = size = files = 0
        for key, _ in self._disk_keys():
            entries += 1
            with contextlib.suppress(OSError), os.scandir(self.entry_path(key)) as items:
                for item in items:
                    with contextlib.suppress(OSError):
                        size += item.stat(follow_symlinks=False).st_size
                        files += 1
        return entries, size, files

    # -- the ledger ---------------------------------------------------------------------

    def record_run(self, summary: Mapping[str, Any]) -> None:
        """Add one process run's summary to the ledger (nothing on a read-only store)."""
        if not self.read_only:
            _ledger.write_run(self.root, summary)

    def ledger(self) -> _ledger.LedgerTotals:
        return _ledger.totals(self.root)

    def ledger_runs(self) -> list[dict[str, Any]]:
        return _ledger.read_runs(self.root)[0]

    def zero_ledger(self) -> int:
        self._require_writable()
        return _ledger.zero(self.root)

    def rebuild_index(self) -> StoreScan:
        """Drop the index and rebuild it from the entry folders."""
        self._require_writable()
        self._index.drop()
        scan = self.scan()
        return dataclasses.replace(scan, index="rebuilt")

    def resolve(self, query: str, scan: StoreScan | None = None) -> tuple[EntryInfo, ...]:
        """Entries matching a full key, a unique key prefix (>= 4 digits) or a program name."""
        scan = scan if scan is not None else self.scan()
        query = query.strip()
        by_key = [e for e in scan.entries if e.key == query]
        if by_key:
            return tuple(by_key)
        if len(query) >= 4 and all(c in "0123456789abcdef" for c in query):
            prefixed = [e for e in scan.entries if e.key.startswith(query)]
            if len(prefixed) > 1:
                raise AmbiguousKeyError(query, len(prefixed))
            if prefixed:
                return tuple(prefixed)
        named = tuple(
            e for e in scan.entries if query in (e.program, e.qualified_program)
        )
        if not named:
            raise EntryNotFoundError(query)
        return named

    def _disk_keys(self) -> list[tuple[str, int | None]]:
        """(key, mtime_ns of entry.json or None) of every folder shaped like an entry."""
        found = []
        entries = self.root / _layout.ENTRIES_DIR
        with contextlib.suppress(FileNotFoundError):
            for shard in os.scandir(entries):
                if len(shard.name) != 2 or not shard.is_dir():
                    continue
                for item in os.scandir(shard.path):
                    if not (_layout.is_key(item.name) and item.name.startswith(shard.name)):
                        continue
                    try:  # f-strings, not os.path.join: this runs once per entry per scan
                        mtime_ns: int | None = os.stat(f"{item.path}/{_layout.ENTRY_FILE}").st_mtime_ns
                    except OSError:
                        mtime_ns = None
                    found.append((item.name, mtime_ns))
        return found

    def _read_row(self, key: str, mtime_ns: int | None) -> IndexRow:
        try:
            entry = self.lookup(key)
        except CorruptEntryError as error:
            record = None
            with contextlib.suppress(OSError, ValueError):
                raw = json.loads((self.entry_path(key) / _layout.ENTRY_FILE).read_bytes())
                record = raw if isinstance(raw, dict) else None
            return IndexRow(mtime_ns=mtime_ns or 0, record=record, problem=error.reason)
        if entry is None:  # entry.json missing
            return IndexRow(mtime_ns=0, record=None, problem=f"'{_layout.ENTRY_FILE}' is missing.")
        return IndexRow(mtime_ns=mtime_ns or 0, record=entry.record.to_json(), problem=None)

    def _info(self, key: str, row: IndexRow) -> EntryInfo:
        path = f"{self.root}/{_layout.ENTRIES_DIR}/{key[:2]}/{key}"
        problem = row.problem
        if problem is None and row.record is not None:
            # Sizes change without touching entry.json (a truncated payload): check them here.
            problem = _size_problem(path, ((f["path"], f["size"]) for f in row.record.get("files", ())))
        return EntryInfo.make(key=key, path=pathlib.Path(path), raw=row.record, problem=problem)

    def lock(self, name: str, method: str = "auto") -> StoreLock:
        """The inter-process lock ``name`` of this store (``locks/<name>.lock``, see ``_lock.py``)."""
        self._require_writable()
        folder = self.root / _layout.LOCKS_DIR
        folder.mkdir(exist_ok=True)
        return StoreLock(folder / f"{name}.lock", method)

    def _require_writable(self) -> None:
        if self.read_only:
            raise GtcacheError(f"Store '{self.root}' is read-only.")


def open_store(
    root: str | os.PathLike[str],
    *,
    index_dir: str | os.PathLike[str] | None = None,
    create: bool = True,
    read_only: bool = False,
) -> Store:
    """Open the store at ``root``, creating it when absent (or an empty folder) and ``create``.

    Raises ``StoreVersionError`` for a store of another layout version and
    ``NotAStoreError`` for a non-empty folder that is not a store. ``read_only``
    opens an existing store that is never written (no index, counters, links, ledger).
    """
    path = pathlib.Path(root).expanduser().absolute()
    layout = path / _layout.LAYOUT_FILE
    if not layout.exists():
        if not create or read_only:
            raise GtcacheError(f"No gtcache store at '{path}'.")
        _create(path)
    _check_layout(path, layout)
    writable = os.access(path, os.W_OK) and os.access(path / _layout.ENTRIES_DIR, os.W_OK)
    return Store(
        path,
        index_dir=pathlib.Path(index_dir).expanduser().absolute() if index_dir else None,
        read_only=read_only or not writable,
    )


#: What a store (or one being created by another process right now) may hold.
_STORE_NAMES = frozenset({
    _layout.ENTRIES_DIR, _layout.TMP_DIR, _layout.TRASH_DIR, _layout.CACHEDIR_TAG, _layout.LAYOUT_FILE,
    _layout.INDEX_DIR, _layout.DIRECT_DIR, _layout.QUARANTINE_DIR, _layout.LEDGER_DIR, _layout.LOCKS_DIR,
    _layout.CONFIG_FILE,
})


def _foreign(path: pathlib.Path) -> bool:
    """True if ``path`` holds anything a store (being created) would not."""
    for name in os.listdir(path):
        temp = name.startswith((f".{_layout.CACHEDIR_TAG}.tmp-", f".{_layout.LAYOUT_FILE}.tmp-"))
        if name not in _STORE_NAMES and not temp:
            return True
    return False


def _create(path: pathlib.Path) -> None:
    # Another process may be creating the same store right now: its folders are no
    # reason to refuse, and every step below is idempotent.
    if path.exists() and (not path.is_dir() or _foreign(path)):
        raise NotAStoreError(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        for name in (_layout.ENTRIES_DIR, _layout.TMP_DIR, _layout.TRASH_DIR):
            (path / name).mkdir(exist_ok=True)
        tag = path / _layout.CACHEDIR_TAG
        if not tag.exists():
            _files.atomic_write_text(tag, _layout.CACHEDIR_TAG_TEXT)
        layout_text = json.dumps(
            {"format": _layout.LAYOUT_FORMAT, "layout_version": _layout.LAYOUT_VERSION}, indent=2
        )
        # Written last: a folder is a store once this file exists.
        _files.atomic_write_text(path / _layout.LAYOUT_FILE, layout_text + "\n")
    except OSError as error:
        raise GtcacheError(f"Cannot create a store at '{path}': {error.strerror or error}.") from None


def _check_layout(path: pathlib.Path, layout: pathlib.Path) -> None:
    try:
        data = json.loads(layout.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise GtcacheError(f"Cannot read '{layout}': {error}.") from None
    if not isinstance(data, dict) or data.get("format") != _layout.LAYOUT_FORMAT:
        raise NotAStoreError(path)
    if data.get("layout_version") != _layout.LAYOUT_VERSION:
        raise StoreVersionError(path, data.get("layout_version"), _layout.LAYOUT_VERSION)


def _rename_if_absent(source: pathlib.Path, target: pathlib.Path) -> bool:
    try:
        os.rename(source, target)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    return True


def _read_record(path: pathlib.Path) -> EntryRecord:
    return EntryRecord.loads((path / _layout.ENTRY_FILE).read_bytes())


def _size_problem(path: str | pathlib.Path, files: Iterable[tuple[str, int]]) -> str | None:
    """Why the payload files ``(name, size)`` in ``path`` are not as recorded, or None.

    Runs per entry on every scan: f-strings and ``os.stat``, no pathlib objects.
    """
    for name, expected in files:
        try:
            size = os.stat(f"{path}/{name}").st_size
        except OSError:
            return f"file '{name}' is missing."
        if size != expected:
            return f"file '{name}' has {size} bytes, not {expected}."
    return None


def _tree_size(path: pathlib.Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for item in path.iterdir():
            with contextlib.suppress(OSError):
                total += item.stat().st_size
    return total
