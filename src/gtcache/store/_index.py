"""The diskcache index: a rebuildable hint of what the entry folders hold.

It maps each key to a summary of its record (what listings and prune plans
need), the ``entry.json`` modification time it was read at, and the entry's
state, so that listings need not parse every ``entry.json``. Rows are stored as
JSON text (no pickle: faster to read back in bulk, and readable by other tools). The entry folders stay the truth: ``Store.scan`` reconciles the
index with them on every call, and any failure to open or read the index drops
it and rebuilds it from the folders. It can live apart from the store (a
node-local disk when the store sits on a shared file system, where SQLite
locking is what made gt4py drop diskcache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import shutil
import sqlite3
from collections.abc import Iterator
from typing import Any

import diskcache

__all__ = ["INDEX_FORMAT", "Index", "IndexRow", "summarize"]

#: Bumped when what the index stores changes; a mismatch rebuilds it.
INDEX_FORMAT = 2
_META_KEY = "__gtcache_index_format__"
_ERRORS = (OSError, sqlite3.Error, diskcache.Timeout, ValueError, TypeError, EOFError, KeyError)


@dataclasses.dataclass(frozen=True)
class IndexRow:
    """What the index remembers of one entry folder."""

    mtime_ns: int
    #: A summary of ``entry.json`` (``summarize``); ``None`` when it could not be parsed.
    record: dict[str, Any] | None
    #: Why the entry is broken, or ``None`` when it is sound.
    problem: str | None


class Index:
    """A diskcache ``Cache`` holding ``IndexRow``s by key. Never raises on read errors."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self._cache: diskcache.Cache | None = None
        #: How the last open went: "ok", "rebuilt" (it was unusable) or "unavailable".
        self.state = "unavailable"

    def open(self) -> bool:
        """Open (creating or rebuilding as needed); False when no index can be had here."""
        if self._cache is not None:
            return True
        for attempt in range(2):
            try:
                cache = _open_cache(self.directory)
                stale = cache.get(_META_KEY) != INDEX_FORMAT
                if stale:
                    stale = len(cache) > 0
                    cache.clear()
                    cache.set(_META_KEY, INDEX_FORMAT)
            except _ERRORS:
                # Unreadable or corrupt: drop it whole; it holds nothing that is not in the folders.
                self.drop()
                continue
            self._cache = cache
            self.state = "rebuilt" if attempt or stale else "ok"
            return True
        self.state = "unavailable"
        return False

    def close(self) -> None:
        if self._cache is not None:
            with contextlib.suppress(*_ERRORS):
                self._cache.close()
            self._cache = None

    def rows(self) -> dict[str, IndexRow] | None:
        """All rows, or ``None`` when the index cannot be read (then it is rebuilt next time)."""
        if not self.open():
            return None
        assert self._cache is not None
        try:
            return {
                key: IndexRow(*json.loads(value))
                for key, value in _iter_items(self._cache)
                if key != _META_KEY
            }
        except _ERRORS:
            self.drop()
            return None

    def put(self, key: str, row: IndexRow) -> None:
        if self.open():
            assert self._cache is not None
            try:
                self._cache.set(key, json.dumps([row.mtime_ns, summarize(row.record), row.problem]))
            except _ERRORS:
                self.drop()

    def delete(self, key: str) -> None:
        if self.open():
            assert self._cache is not None
            try:
                self._cache.delete(key)
            except _ERRORS:
                self.drop()

    def drop(self) -> None:
        """Forget the whole index (it is rebuilt from the entry folders on next use)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.state = "unavailable"


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


def _open_cache(directory: pathlib.Path) -> diskcache.Cache:
    # Settings are passed here and nowhere else: diskcache stores the settings of the
    # last opener in its database. No eviction: the index must hold every entry.
    cache = diskcache.Cache(
        str(directory), timeout=5.0, eviction_policy="none", size_limit=2**62, statistics=False
    )
    cache.get(_META_KEY)  # touch the database now, so that corruption shows here
    return cache


def _iter_items(cache: diskcache.Cache) -> Iterator[tuple[str, Any]]:
    """Every item, read with one query (diskcache has no bulk get; one get per key is
    10x slower over 10,000 entries). Decoding uses diskcache's own ``Disk.fetch``."""
    try:
        rows = cache._sql("SELECT key, raw, mode, filename, value FROM Cache").fetchall()  # noqa: SLF001
        items = [
            (cache.disk.get(key, raw), cache.disk.fetch(mode, filename, value, False))
            for key, raw, mode, filename, value in rows
        ]
    except (sqlite3.Error, AttributeError, TypeError, ValueError):  # another diskcache: the slow way
        items = [(key, cache.get(key)) for key in list(cache.iterkeys())]
    for key, value in items:
        if value is not None:
            yield key, value
