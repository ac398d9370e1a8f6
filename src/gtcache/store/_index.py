"""The diskcache index: a rebuildable hint of what the entry folders hold.

It maps each key to a summary of its record (what listings and prune plans
need), the identity of the ``entry.json`` it was read from (``Identity``: inode,
size, modification and change times, as the scan's one ``stat`` gives them),
whether that reading was settled (``settled_at``), and the entry's state, so
that listings need not parse every ``entry.json``. Rows are JSON text
kept in the database itself (``_TextDisk``): the index never unpickles, never
reads or deletes a value file a row names, and a row of any other kind is
ignored (counted in ``Index.foreign``; ``gtcache verify`` reports it and
``--repair`` rebuilds the index). The entry folders stay the truth:
``Store.scan`` reconciles the index with them on every call, and any failure to
open or read the index drops it and rebuilds it from the folders, but a lock another
process holds on it past ``_diskcache.LOCK_WAIT`` (2 s in all): then the folders are
scanned without the index, which is left as it is. It can live
apart from the store (a node-local disk when the store sits on a shared file
system, where SQLite locking is what made gt4py drop diskcache).

Where it may live: ``<store>/index`` (never a symlink there), or a folder that
is neither the store, nor inside it, nor around it, and that holds nothing but
diskcache's files (``cache.db``, ``cache.db-wal``, ``cache.db-shm``,
``cache.db-journal`` and value folders ``<xx>/<yy>/<28 hex>.val``). Dropping the
index deletes exactly those and nothing else; a folder gtcache creates for it is
private to its user (mode 0700).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import stat
from typing import Any

from gtcache.errors import GtcacheError
from gtcache.store._files import make_real_folders
from gtcache.store._layout import INDEX_DIR

__all__ = ["INDEX_FORMAT", "SETTLE_NS", "Identity", "Index", "IndexLocationError", "IndexRow", "identity_of", "settled_at", "summarize"]

#: Bumped when what the index stores changes; a mismatch rebuilds it.
#: 3: rows and the format marker are text only (``_TextDisk``).
#: 4: a row holds ``entry.json``'s identity (inode, size, mtime, ctime) and whether it was
#: settled when read, not its modification time alone.
INDEX_FORMAT = 4
_META_KEY = "__gtcache_index_format__"

#: What diskcache writes in its folder: the database, its WAL/journal files, value files.
_OWN_FILES = frozenset({"cache.db", "cache.db-wal", "cache.db-shm", "cache.db-journal"})
_VALUE_DIR = re.compile(r"^[0-9a-f]{2}$")
_VALUE_FILE = re.compile(r"^[0-9a-f]{28}\.val$")


def _db() -> Any:
    """The diskcache side of the index, imported when the index is first used: diskcache
    and sqlite3 cost milliseconds to import, and a hit never opens the index."""
    from gtcache.store import _diskcache

    return _diskcache


class IndexLocationError(GtcacheError):
    """An index folder gtcache refuses to use or delete in."""


#: ``(st_ino, st_size, st_mtime_ns, st_ctime_ns)`` of an ``entry.json``: what the scan's one
#: ``stat`` of it tells. A usage-counter update (``Store.touch``) renames a new file over the old
#: one, so its inode changes even where its times do not (1-second timestamps: ext3, ext4 with
#: 128-byte inodes, some NFS and Lustre set-ups; or two updates within one clock tick).
Identity = tuple[int, int, int, int]

#: How long after it was last written (its modification or change time) an ``entry.json`` may
#: still be replaced by one of the same identity: the file system's timestamp granularity (1 s;
#: 2 s on FAT), plus clock skew between this host and the file server that sets the times
#: (up to some 4 s: a host further ahead takes a young reading for a settled one).
#: Updates within one tick alternate between two inodes (ext4 reuses the one just freed: touch,
#: scan, 4 more touches in one second on ext4 with 128-byte inodes left the very identity the scan
#: read), so a row read within this window is never trusted as it is: the next scan reads again.
SETTLE_NS = 5_000_000_000


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled_at(identity: Identity, now_ns: int) -> bool:
    """Whether an ``entry.json`` of ``identity``, read after ``now_ns`` (this host's clock, taken
    before its ``stat``), can no longer be replaced by a file of the same identity: both its
    times lie more than ``SETTLE_NS`` before ``now_ns``."""
    return max(identity[2], identity[3]) <= now_ns - SETTLE_NS


@dataclasses.dataclass(frozen=True)
class IndexRow:
    """What the index remembers of one entry folder."""

    #: The ``entry.json`` it was read from (``None``: it was missing or could not be stat'ed).
    identity: Identity | None
    #: Whether ``identity`` was settled when read (``settled_at``): a scan trusts a row only if
    #: it was, and ``entry.json`` still has that identity; else it reads ``entry.json`` again.
    settled: bool
    #: A summary of ``entry.json`` (``summarize``); ``None`` when it could not be parsed.
    record: dict[str, Any] | None
    #: Why the entry is broken, or ``None`` when it is sound.
    problem: str | None

    def trusted_for(self, identity: Identity | None) -> bool:
        """Whether a scan that found ``entry.json`` with ``identity`` may use this row as it is."""
        return self.settled and identity is not None and self.identity == identity

    def to_json(self) -> str:
        return json.dumps([self.identity, self.settled, summarize(self.record), self.problem])

    @classmethod
    def from_json(cls, text: str) -> IndexRow:
        """``ValueError`` for a row of another shape (the index is then dropped and rebuilt)."""
        identity, settled, record, problem = json.loads(text)
        if identity is not None:
            if not (isinstance(identity, list) and len(identity) == 4 and all(type(n) is int for n in identity)):
                raise ValueError("an index row of another shape")
            identity = (identity[0], identity[1], identity[2], identity[3])
        if not (isinstance(settled, bool) and (record is None or isinstance(record, dict))
                and (problem is None or isinstance(problem, str))):
            raise ValueError("an index row of another shape")
        return cls(identity=identity, settled=settled, record=record, problem=problem)


class Index:
    """A diskcache ``Cache`` holding ``IndexRow``s by key. Never raises on read errors;
    ``IndexLocationError`` when the folder is not one the index may live in."""

    def __init__(self, directory: pathlib.Path, *, store_root: pathlib.Path | None = None, mode: int = 0o700) -> None:
        self.directory = directory
        self.store_root = store_root
        #: The index is the store's own ``index`` folder (which must never be a symlink).
        self.fixed = store_root is not None and directory == store_root / INDEX_DIR
        #: The folder's mode when the index creates it: private unless the store is group-shared.
        self.mode = mode
        self._cache: Any = None  # a diskcache.Cache once opened
        self._located = False
        #: How the last open went: "ok" (also when it was new, or of an older format: rebuilt
        #: from the folders as a deleted one is), "rebuilt" (it was unusable) or "unavailable".
        self.state = "unavailable"
        #: Rows the last ``rows()`` ignored because they are not gtcache's text rows.
        self.foreign = 0
        #: Another process held the database's lock past ``_diskcache.LOCK_WAIT``: the index is
        #: unavailable to this ``Index`` (never waited for again, never dropped for it).
        self.busy = False

    def open(self) -> bool:
        """Open (creating or rebuilding as needed); False when no index can be had here."""
        if self._cache is not None:
            return True
        if not self._prepare():
            self.state = "unavailable"
            return False
        if self.busy:
            return False  # locked by another process a moment ago: not waited for again
        outdated = False
        for attempt in range(2):
            try:
                cache = _db().open_cache(self.directory, _META_KEY)
                marker = cache.get(_META_KEY)
                stale = marker != str(INDEX_FORMAT)
                if stale and len(cache) > 0:
                    # An index an older gtcache wrote (its format marker, another number) is what
                    # an upgrade leaves: dropped and rebuilt like a deleted one, not "rebuilt".
                    outdated = isinstance(marker, str) and marker.isdigit()
                    raise ValueError("an index of another format")  # dropped whole, below
                if stale:
                    cache.set(_META_KEY, str(INDEX_FORMAT))
            except _db().ERRORS as error:
                if _db().is_locked(error):
                    self._set_busy()
                    return False
                # Unreadable, corrupt or of another format: drop it whole; it holds nothing
                # that is not in the folders.
                self.drop()
                if not self._prepare():
                    break
                continue
            self._cache = cache
            self.state = "rebuilt" if attempt and not outdated else "ok"
            return True
        self.state = "unavailable"
        return False

    def close(self) -> None:
        if self._cache is not None:
            with contextlib.suppress(*_db().ERRORS):
                self._cache.close()
            self._cache = None

    def rows(self) -> dict[str, IndexRow] | None:
        """All gtcache rows, or ``None`` when the index cannot be read (then it is rebuilt
        next time). Rows of another kind are skipped unread and counted in ``foreign``."""
        if not self.open():
            return None
        assert self._cache is not None
        try:
            items, self.foreign = _db().items(self._cache)
            return {key: IndexRow.from_json(value) for key, value in items if key != _META_KEY}
        except _db().ERRORS as error:
            self._failed(error)
            return None

    def put(self, key: str, row: IndexRow) -> None:
        if self.open():
            assert self._cache is not None
            try:
                self._cache.set(key, row.to_json())
            except _db().ERRORS as error:
                self._failed(error)

    def delete(self, key: str) -> None:
        if self.open():
            assert self._cache is not None
            try:
                self._cache.delete(key)
            except _db().ERRORS as error:
                self._failed(error)

    def clear(self) -> bool:
        """Remove every row, in the database as it is (other processes may have it open: its
        files are not deleted under them); False when there is no index to be had here, or
        another process holds it locked (``busy``: left as it is)."""
        for _attempt in range(2):
            if not self.open():
                return False
            assert self._cache is not None
            try:
                self._cache.clear()
                self._cache.set(_META_KEY, str(INDEX_FORMAT))
                return True
            except _db().ERRORS as error:
                self._failed(error)  # locked: busy, and the next open says so; damaged: dropped, made anew
        return False

    def _failed(self, error: BaseException) -> None:
        """A read or write of the index failed: another process's lock (``busy``: the index is
        left as it is, and not used by this ``Index`` again), or damage (dropped, rebuilt next time)."""
        if _db().is_locked(error):
            self._set_busy()
        else:
            self.drop()

    def _set_busy(self) -> None:
        self.close()
        self.busy = True
        self.state = "unavailable"

    def drop(self) -> None:
        """Forget the whole index (it is rebuilt from the entry folders on next use).

        Deletes diskcache's own files in the folder and nothing else, never through a
        symlinked ``<store>/index``; ``IndexLocationError`` if the folder may not be used.
        """
        self.close()
        self.state = "unavailable"
        self.foreign = 0
        self._check_location()
        if self._is_link():
            return
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        self._check_contents(names)
        for name in names:
            path = self.directory / name
            if name in _OWN_FILES:
                with contextlib.suppress(OSError):
                    path.unlink()
            else:  # a value folder, checked by _check_contents; rmtree never follows a link
                shutil.rmtree(path, ignore_errors=True)

    # -- where the index may live ---------------------------------------------------------

    def _prepare(self) -> bool:
        """Check the folder and create it (mode 0700) if absent; False if it cannot be used."""
        self._check_location()
        if self._is_link():
            return False  # a symlinked index folder: never written through (verify names the store's)
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            try:
                # Not through a symlink made on the way since it was resolved (``open_store``).
                make_real_folders(os.fspath(self.directory.parent))
                self.directory.mkdir(mode=self.mode)
                os.chmod(self.directory, self.mode)
            except FileExistsError:
                return self._prepare()
            except OSError:
                return False
            return True
        except OSError:
            return False
        self._check_contents(names)
        return True

    def _is_link(self) -> bool:
        # The folder is a resolved path (``open_store``): a symlink there is the store's
        # ``index`` made one (``verify`` names it) or one planted since, never followed.
        return os.path.islink(self.directory)

    def _check_location(self) -> None:
        if self._located or self.store_root is None:
            return
        index, store = os.path.realpath(self.directory), os.path.realpath(self.store_root)
        where = f"Index folder '{self.directory}'"
        if index == store:
            raise IndexLocationError(f"{where} is the store itself; give another '--index-dir'.")
        if not self.fixed:
            if _within(index, store):
                raise IndexLocationError(
                    f"{where} lies inside the store '{self.store_root}' (only its '{INDEX_DIR}' folder may hold the index)."
                )
            if _within(store, index):
                raise IndexLocationError(f"{where} contains the store '{self.store_root}'; give another '--index-dir'.")
        self._located = True

    def _check_contents(self, names: list[str]) -> None:
        for name in names:
            path = self.directory / name
            if name in _OWN_FILES and _is_regular(path):
                continue
            if _VALUE_DIR.fullmatch(name) and _is_value_dir(path):
                continue
            if not os.path.lexists(path):
                continue  # gone since the listing: SQLite drops '-wal' / '-shm' when a process closes it
            raise IndexLocationError(
                f"Index folder '{self.directory}' holds '{name}', which is not gtcache's; give an empty or new '--index-dir'."
            )


def _within(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _is_regular(path: pathlib.Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_value_dir(path: pathlib.Path) -> bool:
    """A diskcache value folder ``<xx>/<yy>/<28 hex>.val``: real folders and files only."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        for sub in os.scandir(path):
            if not (_VALUE_DIR.fullmatch(sub.name) and sub.is_dir(follow_symlinks=False)):
                return False
            for item in os.scandir(sub.path):
                if not (_VALUE_FILE.fullmatch(item.name) and item.is_file(follow_symlinks=False)):
                    return False
    except FileNotFoundError:
        return True  # diskcache removed part of it while we looked: nothing foreign in that
    except OSError:
        return False
    return True


#: What of a record the index keeps: enough for ``EntryInfo`` (listings, stats, prune
#: plans); anything else is read from ``entry.json`` when asked for.
_SUMMARY_FIELDS = ("program", "files", "created", "last_used", "hits", "compile_seconds")


def summarize(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    summary = {name: record[name] for name in _SUMMARY_FIELDS if name in record}
    backend, toolchain = record.get("backend"), record.get("toolchain")
    if isinstance(backend, dict):
        summary["backend"] = {"name": backend.get("name")}
    if isinstance(toolchain, dict):
        summary["toolchain"] = {"gt4py": toolchain.get("gt4py")}
    return summary
