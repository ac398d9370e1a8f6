"""The on-disk store (layout version 1): entry folders are the truth, the index a hint.

What only listing, statistics, maintenance and compiling use (``_scan``, ``_ledger``, the index
behind them, ``_lock``) is imported when first used: a hit imports none of it.
"""

from typing import TYPE_CHECKING, Any

from gtcache.store._files import atomic_write_text, fsync_dir, open_regular, pid_of, read_regular, remove_tree
from gtcache.store._layout import (
    CONFIG_FILE,
    DIRECT_DIR,
    ENTRIES_DIR,
    ENTRY_FILE,
    ENTRY_PATH_PATTERN,
    KEY_PATTERN,
    LAYOUT_VERSION,
    LEDGER_DIR,
    LOCKS_DIR,
    TMP_DIR,
    TRASH_DIR,
    is_key,
)
from gtcache.store._record import SCHEMA_VERSION, EntryRecord, FileRecord, now_iso
from gtcache.store._open import open_store, resolve_store_path
from gtcache.store._store import Entry, EntryDraft, IndexState, RefusedFolder, Store
from gtcache.store._trust import StoreModes, TrustPolicy, check_store

if TYPE_CHECKING:
    from gtcache.store._ledger import LedgerTotals
    from gtcache.store._lock import StoreLock, flock_works, fs_now
    from gtcache.store._scan import EntryInfo, Seen, StoreScan, StoreStats, format_size

#: Names imported from their module when first asked for (PEP 562).
_LAZY = {
    "EntryInfo": "_scan", "Seen": "_scan", "StoreScan": "_scan", "StoreStats": "_scan", "format_size": "_scan",
    "LedgerTotals": "_ledger", "StoreLock": "_lock", "flock_works": "_lock", "fs_now": "_lock",
}


def __getattr__(name: str) -> Any:
    if (module := _LAZY.get(name)) is None:
        raise AttributeError(f"module 'gtcache.store' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(f"gtcache.store.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "atomic_write_text",
    "fsync_dir",
    "open_regular",
    "pid_of",
    "read_regular",
    "CONFIG_FILE",
    "DIRECT_DIR",
    "ENTRIES_DIR",
    "ENTRY_FILE",
    "ENTRY_PATH_PATTERN",
    "KEY_PATTERN",
    "LAYOUT_VERSION",
    "LEDGER_DIR",
    "LOCKS_DIR",
    "SCHEMA_VERSION",
    "TMP_DIR",
    "TRASH_DIR",
    "Entry",
    "EntryDraft",
    "EntryInfo",
    "EntryRecord",
    "FileRecord",
    "IndexState",
    "LedgerTotals",
    "RefusedFolder",
    "Seen",
    "Store",
    "StoreScan",
    "StoreLock",
    "flock_works",
    "fs_now",
    "StoreModes",
    "StoreStats",
    "TrustPolicy",
    "check_store",
    "format_size",
    "is_key",
    "now_iso",
    "open_store",
    "remove_tree",
    "resolve_store_path",
]
