"""The exception tree of gtcache.

Library code raises these; only the CLI turns them into exit codes (all of them
mean exit 1, an operational error). Messages are one sentence, capitalised,
ending in a period, with names in single quotes.
"""

from __future__ import annotations

import pathlib
import unicodedata

__all__ = [
    "AmbiguousKeyError",
    "CorruptEntryError",
    "EntryRemovedError",
    "EntryNotFoundError",
    "GtcacheError",
    "NoStoreError",
    "NotAStoreError",
    "StoreVersionError",
    "UnsupportedArtifactError",
    "UntrustedEntryError",
    "UntrustedStoreError",
    "escape",
]


def escape(text: str) -> str:
    """``text`` with control and format characters (terminal escapes, bidi overrides) shown as
    ``\\x1b``-style escapes: names from a store, error messages from a server, are data,
    never commands to the terminal. The one escape of the library and the CLI."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if unicodedata.category(char)[0] == "C":
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


class GtcacheError(Exception):
    """Base class of every error gtcache raises on purpose."""


class NoStoreError(GtcacheError):
    """No store at the path (nothing there, or an empty folder) and none was to be created."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        super().__init__(f"No gtcache store at '{path}'.")


class NotAStoreError(GtcacheError):
    """A folder exists but is not a gtcache store (and is not empty)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        super().__init__(
            f"'{path}' is not a gtcache store and is not empty; choose another '--cache-dir'."
        )


class StoreVersionError(GtcacheError):
    """The store's layout version is not one this gtcache can read."""

    def __init__(self, path: pathlib.Path, found: object, supported: int) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(
            f"Store '{path}' has layout version {found!r} but this gtcache reads version"
            f" {supported}; upgrade gtcache, use another cache directory, or delete the"
            " folder to start over."
        )


class EntryNotFoundError(GtcacheError):
    """No entry matches a key, key prefix or program name."""

    def __init__(self, query: str) -> None:
        self.query = query
        super().__init__(f"No entry matches '{query}'.")


class AmbiguousKeyError(GtcacheError):
    """A key prefix matches more than one entry."""

    def __init__(self, query: str, matches: int, some: list[str] | None = None) -> None:
        self.query = query
        self.matches = matches
        shown = f" ({', '.join(some)}{', ...' if len(some) < matches else ''})" if some else ""
        super().__init__(
            f"Key prefix '{query}' matches {matches} entries{shown}; give more characters."
        )


class CorruptEntryError(GtcacheError):
    """An entry folder exists but cannot be trusted (bad record, missing or changed file)."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"Entry '{key}' is broken: {reason}")


class EntryRemovedError(CorruptEntryError):
    """An entry removed (renamed away whole: a prune, rm) while it was read: absent, not broken.
    A ``CorruptEntryError`` for whoever does not tell the two apart (it is not loaded either)."""

    def __init__(self, key: str) -> None:
        super().__init__(key, "removed while it was read.")


class UntrustedEntryError(CorruptEntryError):
    """An entry whose record or folders someone untrusted owns or may write (docs/security.md):
    never loaded. A store made under umask 002 has many such entries, for one reason."""


class UnsupportedArtifactError(GtcacheError):
    """A compilation artifact that gtcache cannot describe as JSON and rebuild."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"Cannot store artifact: {what}")


class UntrustedStoreError(GtcacheError):
    """A store (or its index) that someone the reader does not trust could have written.

    ``problem`` names the path, what was found and the fix (see ``gtcache.store._trust``).
    """

    def __init__(self, path: pathlib.Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"Store '{path}' is not trusted: {problem}.")
