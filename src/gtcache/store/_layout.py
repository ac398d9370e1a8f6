"""Layout version 1 of a store on disk: names and paths, nothing else.

The layout is documented in ``cache_schema/v1/layout.md``; keep the two in
agreement. Every name below is relative to the store root.
"""

from __future__ import annotations

import re

__all__ = [
    "CACHEDIR_TAG",
    "CONFIG_FILE",
    "DIRECT_DIR",
    "ENTRIES_DIR",
    "ENTRY_FILE",
    "ENTRY_PATH_PATTERN",
    "FACTS_DIR",
    "FACTS_NAME_PATTERN",
    "FIXED_DIRS",
    "INDEX_DIR",
    "KEY_PATTERN",
    "LAYOUT_FILE",
    "LAYOUT_FORMAT",
    "LAYOUT_VERSION",
    "LEDGER_DIR",
    "LOCKS_DIR",
    "QUARANTINE_DIR",
    "TMP_DIR",
    "TRASH_DIR",
    "direct_link",
    "entry_dir",
    "is_key",
]

#: Version of the on-disk layout this code reads and writes.
LAYOUT_VERSION = 1
#: Value of the ``format`` field of the layout file, naming what the folder is.
LAYOUT_FORMAT = "gtcache-store"

LAYOUT_FILE = "gtcache-layout.json"
CACHEDIR_TAG = "CACHEDIR.TAG"
ENTRIES_DIR = "entries"
DIRECT_DIR = "direct"
TMP_DIR = "tmp"
TRASH_DIR = "trash"
QUARANTINE_DIR = "quarantine"
LEDGER_DIR = "ledger"
LOCKS_DIR = "locks"
#: Facts about an environment that are slow to compute and change only with files
#: (``facts/<environment digest>.json`` and its shards ``facts/<environment digest>-<xx>.json``):
#: a hint, never the truth; any of them may be deleted.
FACTS_DIR = "facts"
#: The name of a facts file, without ``.json``.
FACTS_NAME_PATTERN = re.compile(r"^[0-9a-f]{32}(-[0-9a-f]{2})?$")
#: A larger facts file is not read (the hook's caps keep a shard under about 2 MB).
FACTS_MAX_BYTES = 16 * 1024 * 1024
#: A larger ``entry.json`` is not read: it is broken (a record is a few kB; a bundle's may be
#: 4 MiB, which its import writes indented: 3.4 MiB of short strings are 8.4 MB on disk). Read
#: whole otherwise, a sparse record of gigabytes that someone who may write a refused folder put
#: there held a lookup for minutes and took its memory (a reviewer's attack).
RECORD_MAX_BYTES = 64 * 1024 * 1024
CONFIG_FILE = "gtcache.toml"
INDEX_DIR = "index"
ENTRY_FILE = "entry.json"

#: The store's own folders (``index`` too when the index lives in the store): each is a
#: real folder or absent, never a symlink; maintenance refuses to write through one.
FIXED_DIRS = (ENTRIES_DIR, TMP_DIR, TRASH_DIR, QUARANTINE_DIR, LEDGER_DIR, DIRECT_DIR, LOCKS_DIR, FACTS_DIR)

#: A key: 128 bits as 32 lowercase hex digits (xxh3-128 of canonical bytes).
KEY_PATTERN = re.compile(r"^[0-9a-f]{32}$")
#: Where an entry lives, relative to the root, for tools outside Python.
ENTRY_PATH_PATTERN = re.compile(r"^entries/(?P<shard>[0-9a-f]{2})/(?P<key>(?P=shard)[0-9a-f]{30})$")

CACHEDIR_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by gtcache.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)


def is_key(text: str) -> bool:
    return KEY_PATTERN.fullmatch(text) is not None


def entry_dir(root: str, key: str) -> str:
    """The folder of the entry ``key`` (which need not exist) in the store at ``root``.

    Text, not pathlib: a lookup joins no pathlib objects (tens of microseconds in a fresh process).
    """
    return f"{root}/{ENTRIES_DIR}/{key[:2]}/{key}"


def direct_link(root: str, direct_key: str) -> str:
    """The file mapping a direct key to the build key of its entry (text, like ``entry_dir``)."""
    return f"{root}/{DIRECT_DIR}/{direct_key[:2]}/{direct_key}"
