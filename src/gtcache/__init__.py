"""gtcache: a persistent, content-addressed cache of compiled GT4Py programs.

Importing this package does not import gt4py; the gt4py adapter lives in
``gtcache.gt4py`` and is imported only when used.
"""

from gtcache._version import __version__
from gtcache.errors import (
    AmbiguousKeyError,
    CorruptEntryError,
    EntryNotFoundError,
    GtcacheError,
    NotAStoreError,
    StoreVersionError,
    UnsupportedArtifactError,
)
from gtcache.settings import Settings
from gtcache.store import (
    Entry,
    EntryDraft,
    EntryInfo,
    Store,
    StoreScan,
    StoreStats,
    format_size,
    open_store,
)

__all__ = [
    "AmbiguousKeyError",
    "CorruptEntryError",
    "Entry",
    "EntryDraft",
    "EntryInfo",
    "EntryNotFoundError",
    "GtcacheError",
    "NotAStoreError",
    "Settings",
    "Store",
    "StoreScan",
    "StoreStats",
    "StoreVersionError",
    "UnsupportedArtifactError",
    "__version__",
    "format_size",
    "open_store",
]
