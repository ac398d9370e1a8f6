"""The folders reconciled with the index: scans, the index's state, queries.

The entry folders are the truth; the index (``_index.py``) is a hint refreshed here
whenever a folder's ``entry.json`` changed behind it: a row is used as it is only if
``entry.json`` still has the identity it was read at (inode, size, modification and
change times, from the one ``stat`` per entry a scan makes) and that reading was
settled (its times well before the scan that read it: on 1-second timestamps, usage
updates within one second can bring back the very identity read). ``Store``
delegates its ``scan``, ``check_index`` and ``resolve`` here.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import time
from typing import TYPE_CHECKING

from gtcache.errors import AmbiguousKeyError, CorruptEntryError, EntryNotFoundError
from gtcache.store import _files, _layout
from gtcache.store._index import Identity, Index, IndexRow, identity_of, settled_at
from gtcache.store._scan import EntryInfo, StoreScan

if TYPE_CHECKING:
    from gtcache.store._store import IndexState, Store

__all__ = ["check_index", "disk_keys", "resolve", "scan"]


def scan(store: Store, index: Index, use_index: bool) -> StoreScan:
    """``Store.scan``: every entry folder, reconciled with (and refreshing) ``index``."""
    rows = None if store.read_only or not use_index else index.rows()
    index_state = index.state if rows is not None else "unavailable"
    rows = rows or {}
    seen = set()
    infos = []
    now_ns = time.time_ns()  # before any stat: what is settled by then stays so
    for key, identity in disk_keys(store):
        seen.add(key)
        row = rows.get(key)
        if row is None or not row.trusted_for(identity):
            row = _read_row(store, key, identity, now_ns)
            if row is None:  # removed since it was listed (a prune, rm): gone, not broken
                seen.discard(key)
                continue
            if not store.read_only and use_index:
                index.put(key, row)
        if (info := _info(store, key, row)) is None:
            seen.discard(key)
            continue
        infos.append(info)
    for stale in rows.keys() - seen:
        index.delete(stale)
    if index.busy:  # a write hit another process's lock: left as it is, not refreshed
        index_state = "unavailable"
    if not use_index:
        index_state = "unused"
    infos.sort(key=lambda info: (info.program, info.backend, info.key))
    return StoreScan(root=store.root, entries=tuple(infos), index=index_state)


def check_index(store: Store, index: Index) -> IndexState:
    """``Store.check_index``."""
    if store.read_only:
        return "unavailable"
    rows = index.rows()
    if rows is None:
        return "unavailable"
    if index.state == "rebuilt":
        store.scan()
        return "unavailable" if index.busy else "rebuilt"
    if index.foreign:
        return "foreign"
    disk = dict(disk_keys(store))
    lagging = rows.keys() != disk.keys() or any(
        rows[key].identity != identity for key, identity in disk.items()
    )
    if lagging:
        store.scan()
    if index.busy:  # a refresh that hit another process's lock: not refreshed
        return "unavailable"
    return "lagging" if lagging else "ok"


def resolve(scan: StoreScan, query: str) -> tuple[EntryInfo, ...]:
    """Entries matching a full key, a unique key prefix (>= 4 digits) or a program name."""
    query = query.strip()
    digits = query.lower()  # keys are lower-case hex; a prefix copied in upper case is one too
    by_key = [e for e in scan.entries if e.key == digits]
    if by_key:
        return tuple(by_key)
    if len(digits) >= 4 and all(c in "0123456789abcdef" for c in digits):
        prefixed = [e for e in scan.entries if e.key.startswith(digits)]
        if len(prefixed) > 1:
            raise AmbiguousKeyError(query, len(prefixed), [f"{e.key[:12]} {e.program}" for e in prefixed[:4]])
        if prefixed:
            return tuple(prefixed)
    named = tuple(
        e for e in scan.entries if query in (e.program, e.qualified_program)
    )
    if not named:
        raise EntryNotFoundError(query)
    return named


def disk_keys(store: Store) -> list[tuple[str, Identity | None]]:
    """(key, identity of its entry.json or None) of every folder shaped like an entry."""
    found: list[tuple[str, Identity | None]] = []
    entries = store.root / _layout.ENTRIES_DIR
    if any(path == entries for path, _ in store.unsafe_folders()):
        return found  # a symlinked 'entries' is never listed (verify reports it)
    with contextlib.suppress(FileNotFoundError):
        for shard in os.scandir(entries):
            # No symlinks (d_type: no extra system call): a linked shard or entry is an
            # orphan, never listed, so never removed through the link.
            if len(shard.name) != 2 or not shard.is_dir(follow_symlinks=False):
                continue
            for item in os.scandir(shard.path):
                if not (
                    _layout.is_key(item.name) and item.name.startswith(shard.name)
                    and item.is_dir(follow_symlinks=False)
                ):
                    continue
                try:  # f-strings, not os.path.join: this runs once per entry per scan
                    identity: Identity | None = identity_of(os.stat(f"{item.path}/{_layout.ENTRY_FILE}"))
                except OSError:
                    identity = None
                found.append((item.name, identity))
    return found


def _read_row(store: Store, key: str, identity: Identity | None, now_ns: int) -> IndexRow | None:
    """A row read from ``entry.json`` now; ``identity`` is what the scan's ``stat`` found (taken
    before the read: if the file is replaced in between, the next scan sees another identity).
    None when the entry folder is gone (removed since the scan listed it)."""
    settled = identity is not None and settled_at(identity, now_ns)
    try:
        entry = store.lookup(key)
    except CorruptEntryError as error:
        if not os.path.lexists(store.entry_path(key)):
            return None
        record = None
        with contextlib.suppress(OSError, ValueError, RecursionError):
            raw = json.loads(_files.read_regular(store.entry_path(key) / _layout.ENTRY_FILE, limit=_layout.RECORD_MAX_BYTES))
            record = raw if isinstance(raw, dict) else None
        return IndexRow(identity=identity, settled=settled, record=record, problem=error.reason)
    if entry is None:  # entry.json missing
        if not os.path.lexists(store.entry_path(key)):
            return None
        return IndexRow(identity=None, settled=False, record=None, problem=f"'{_layout.ENTRY_FILE}' is missing.")
    return IndexRow(identity=identity, settled=settled, record=entry.record.to_json(), problem=None)


def _info(store: Store, key: str, row: IndexRow) -> EntryInfo | None:
    """The listing's row of entry ``key`` (``row``: from the index or read now); None when its
    folder is gone (removed since the scan listed it)."""
    path = f"{store.root}/{_layout.ENTRIES_DIR}/{key[:2]}/{key}"
    problem = row.problem
    if problem is None and row.record is not None:
        # Sizes change without touching entry.json (a truncated payload): check them here.
        problem = _files.size_problem(
            path, ((f["path"], f["size"]) for f in row.record.get("files", ())), store.trust
        ) or store.trust_problem_of(key)  # (an index row is older than who wrote entry.json since)
    if problem is not None and not os.path.lexists(path):
        return None
    # On disk: a sound entry's files as its record lists them (checked above) and its record
    # as the scan's stat found it; a broken one's as they are (measured: a few, seldom).
    return EntryInfo.make(
        key=key, path=pathlib.Path(path), raw=row.record, problem=problem,
        record_size=0 if row.identity is None else row.identity[1],
        disk_size=store.disk_size(key) if problem is not None else -1, identity=row.identity,
    )
