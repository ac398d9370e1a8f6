"""The on-disk store (layout version 1): entry folders are the truth, the index a hint."""

from gtcache.store._layout import ENTRY_PATH_PATTERN, KEY_PATTERN, LAYOUT_VERSION, is_key
from gtcache.store._ledger import LedgerTotals
from gtcache.store._record import SCHEMA_VERSION, EntryRecord, FileRecord, now_iso
from gtcache.store._scan import EntryInfo, StoreScan, StoreStats, format_size
from gtcache.store._store import Entry, EntryDraft, Store, open_store

__all__ = [
    "ENTRY_PATH_PATTERN",
    "KEY_PATTERN",
    "LAYOUT_VERSION",
    "SCHEMA_VERSION",
    "Entry",
    "EntryDraft",
    "EntryInfo",
    "EntryRecord",
    "FileRecord",
    "LedgerTotals",
    "Store",
    "StoreScan",
    "StoreStats",
    "format_size",
    "is_key",
    "now_iso",
    "open_store",
]
