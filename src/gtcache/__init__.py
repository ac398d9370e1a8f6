"""gtcache: a persistent, content-addressed cache of compiled GT4Py programs.

Importing this package is cheap and imports neither gt4py nor the store: names
are loaded on first use (the start-up hook imports it in every interpreter
where ``GTCACHE_DIR`` is set). ``install``/``uninstall``/``installed`` import gt4py.
"""

from __future__ import annotations

import importlib

from gtcache._version import __version__

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

    from gtcache.errors import (
        AmbiguousKeyError,
        CorruptEntryError,
        EntryNotFoundError,
        GtcacheError,
        NoStoreError,
        NotAStoreError,
        StoreVersionError,
        UnsupportedArtifactError,
        UntrustedStoreError,
    )
    from gtcache.gt4py.hook import install, installed, uninstall
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

_LAZY = {
    "AmbiguousKeyError": "gtcache.errors",
    "CorruptEntryError": "gtcache.errors",
    "EntryNotFoundError": "gtcache.errors",
    "GtcacheError": "gtcache.errors",
    "NoStoreError": "gtcache.errors",
    "NotAStoreError": "gtcache.errors",
    "StoreVersionError": "gtcache.errors",
    "UnsupportedArtifactError": "gtcache.errors",
    "UntrustedStoreError": "gtcache.errors",
    "Settings": "gtcache.settings",
    "Entry": "gtcache.store",
    "EntryDraft": "gtcache.store",
    "EntryInfo": "gtcache.store",
    "Store": "gtcache.store",
    "StoreScan": "gtcache.store",
    "StoreStats": "gtcache.store",
    "format_size": "gtcache.store",
    "open_store": "gtcache.store",
    "install": "gtcache.gt4py.hook",
    "installed": "gtcache.gt4py.hook",
    "uninstall": "gtcache.gt4py.hook",
}

__all__ = [
    "AmbiguousKeyError",
    "CorruptEntryError",
    "Entry",
    "EntryDraft",
    "EntryInfo",
    "EntryNotFoundError",
    "GtcacheError",
    "NoStoreError",
    "NotAStoreError",
    "Settings",
    "Store",
    "StoreScan",
    "StoreStats",
    "StoreVersionError",
    "UnsupportedArtifactError",
    "UntrustedStoreError",
    "__version__",
    "format_size",
    "install",
    "installed",
    "open_store",
    "uninstall",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gtcache' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
