"""The on-disk store (layout version 1): entry folders are the truth, the index a hint."""

from gtcache.store._files import atomic_write_text, fsync_dir, open_regular, read_regular, remove_tree
from gtcache.store._layout import (
    CONFIG_FILE,
    DIRECT_DIR,
    ENTRIES_DIR,
    ENTRY_FILE,
    ENTRY_PATH_PATTERN,
    KEY_PATTERN,
    LAYOUT_VERSION,
    TMP_DIR,
    TRASH_DIR,
    is_key,
)
from gtcache.store._ledger import LedgerTotals
from gtcache.store._lock import StoreLock
from gtcache.store._record import SCHEMA_VERSION, EntryRecord, FileRecord, now_iso
from gtcache.store._scan import EntryInfo, StoreScan, StoreStats, format_size
from gtcache.store._open import open_store
from gtcache.store._store import Entry, EntryDraft, IndexState, Store
from gtcache.store._trust import StoreModes, TrustPolicy, check_store

__all__ = [
    "atomic_write_text",
    "fsync_dir",
    "open_regular",
    "read_regular",
    "CONFIG_FILE",
    "DIRECT_DIR",
    "ENTRIES_DIR",
    "ENTRY_FILE",
    "ENTRY_PATH_PATTERN",
    "KEY_PATTERN",
    "LAYOUT_VERSION",
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
    "Store",
    "StoreScan",
    "StoreLock",
    "StoreModes",
    "StoreStats",
    "TrustPolicy",
    "check_store",
    "format_size",
    "is_key",
    "now_iso",
    "open_store",
    "remove_tree",
]
