"""The index's diskcache and SQLite side (see ``_index.py``): imported only when an index
is opened, never on the lookup path."""

from __future__ import annotations

import pathlib
import sqlite3
import time
from typing import Any

import diskcache

__all__ = ["ERRORS", "LOCK_WAIT", "ForeignRowError", "is_locked", "items", "open_cache"]

#: What reading or writing a damaged, locked or foreign index can raise.
ERRORS = (OSError, sqlite3.Error, diskcache.Timeout, ValueError, TypeError, EOFError, KeyError)


class ForeignRowError(ValueError):
    """An index row that is not gtcache's: a pickle, bytes, a value file, a non-text key."""


class _TextDisk(diskcache.Disk):  # type: ignore[misc]
    """diskcache serialisation for text only: never a pickle, never a value file.

    ``fetch`` and ``get`` refuse every row but a text key with a text value stored in
    the database (``MODE_RAW``), so a row planted by someone else is never decoded;
    ``store`` writes only text, always into the database; ``remove`` never deletes a
    file (the index has none, and a planted row could name any path).
    """

    def put(self, key: Any) -> tuple[Any, bool]:
        if type(key) is not str:
            raise TypeError("the gtcache index has text keys only")
        return key, True

    def get(self, key: Any, raw: bool) -> Any:
        if not raw or type(key) is not str:
            raise ForeignRowError("an index key that is not text")
        return key

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> tuple[int, int, None, str]:
        if read or type(value) is not str:
            raise TypeError("the gtcache index stores text only")
        return 0, diskcache.core.MODE_RAW, None, value

    def fetch(self, mode: int, filename: Any, value: Any, read: bool) -> str:
        if mode != diskcache.core.MODE_RAW or filename is not None or read or type(value) is not str:
            raise ForeignRowError(f"an index row of mode {mode!r} (not text)")
        return value

    def remove(self, file_path: Any) -> None:
        return None


#: Seconds a process waits for another's lock on the index's database: to open it, in all
#: (diskcache retries "database is locked" for 60 s on each statement it opens with), or at a
#: read or write (SQLite's busy timeout). Then the index counts as unavailable to that process
#: (``Index.busy``: not waited for again): the folders are scanned without it, nothing dropped.
LOCK_WAIT = 2.0


def is_locked(error: BaseException) -> bool:
    """Whether ``error`` is another process's lock on the database (a wait that ran out), not
    damage: the index is then unavailable for a while, never dropped."""
    if isinstance(error, diskcache.Timeout):
        return True
    message = str(error).lower()
    return isinstance(error, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


class _BoundedCache(diskcache.Cache):  # type: ignore[misc]
    """diskcache's ``Cache`` whose opening waits at most ``LOCK_WAIT`` seconds in all for a lock
    (diskcache's own retries wait 60 s for each of its statements)."""

    def __init__(self, directory: str, **settings: Any) -> None:
        self._deadline = time.monotonic() + LOCK_WAIT
        super().__init__(directory, **settings)

    @property
    def _sql_retry(self) -> Any:
        sql = self._sql

        def execute(statement: str, *args: Any, **kwargs: Any) -> Any:
            while True:
                try:
                    return sql(statement, *args, **kwargs)
                except sqlite3.OperationalError as error:
                    if not is_locked(error) or time.monotonic() > self._deadline:
                        raise
                    time.sleep(0.005)

        return execute


def open_cache(directory: pathlib.Path, meta_key: str) -> diskcache.Cache:
    # Settings are passed here and nowhere else: diskcache stores the settings of the
    # last opener in its database. Every setting is given, so none is taken from a
    # database someone else wrote. No eviction: the index must hold every entry.
    cache = _BoundedCache(
        str(directory), timeout=LOCK_WAIT, disk=_TextDisk, eviction_policy="none", size_limit=2**62,
        statistics=False, tag_index=False, cull_limit=0, sqlite_auto_vacuum=1, sqlite_cache_size=2**13,
        sqlite_journal_mode="wal", sqlite_mmap_size=2**26, sqlite_synchronous=1,
        disk_min_file_size=2**62, disk_pickle_protocol=0,
    )
    cache.get(meta_key)  # touch the database now, so that corruption shows here
    return cache


def items(cache: diskcache.Cache) -> tuple[list[tuple[str, str]], int]:
    """Every gtcache row, read with one query (diskcache has no bulk get; one get per key
    is 10x slower over 10,000 entries), and how many rows were skipped as foreign.
    Decoding goes through ``_TextDisk``: a pickle is never loaded."""
    disk = cache.disk
    assert isinstance(disk, _TextDisk)
    rows = cache._sql("SELECT key, raw, mode, filename, value FROM Cache").fetchall()  # noqa: SLF001
    items, foreign = [], 0
    for key, raw, mode, filename, value in rows:
        try:
            items.append((disk.get(key, raw), disk.fetch(mode, filename, value, False)))
        except ForeignRowError:
            foreign += 1
    return items, foreign
