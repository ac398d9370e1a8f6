"""Opening a store: creating its folders when absent, checking its layout and its owners."""

from __future__ import annotations

import json
import os
import pathlib

from gtcache.errors import GtcacheError, NoStoreError, NotAStoreError, StoreVersionError, UntrustedStoreError
from gtcache.store import _files, _layout
from gtcache.store._store import Store
from gtcache.store._trust import StoreModes, TrustPolicy, check_store

__all__ = ["open_store", "resolve_store_path"]


def open_store(
    root: str | os.PathLike[str],
    *,
    index_dir: str | os.PathLike[str] | None = None,
    create: bool = True,
    read_only: bool = False,
    trust: TrustPolicy | None = None,
    allow_untrusted: bool = False,
) -> Store:
    """Open the store at ``root``, creating it when absent (or an empty folder) and ``create``.

    Raises ``StoreVersionError`` for a store of another layout version and
    ``NotAStoreError`` for a non-empty folder that is not a store. ``read_only``
    opens an existing store that is never written (no index, counters, links, ledger).

    The store (and its index) must pass the owner and permission checks of
    ``trust`` (default: ``TrustPolicy.from_env()``, see ``gtcache.store._trust``),
    else ``UntrustedStoreError``; with ``allow_untrusted`` (listings) it opens
    anyway, read-only and without its index, with the reason in ``Store.trust_problem``.
    Entries whose files fail the checks are broken either way.
    """
    # Resolved once, here: the checks below are of this path, and every later step goes
    # through it. A symlink on the way (one in a sticky /tmp-like folder: anyone may own
    # it) could otherwise be re-pointed at another tree after the checks (a helper's attack).
    path = resolve_store_path(root)
    text = os.fspath(path)  # (paths as text below: pathlib objects cost a first hit)
    layout = f"{text}/{_layout.LAYOUT_FILE}"
    data = _read_layout(layout)
    if data is None:
        if not create or read_only:
            if path.is_dir() and _foreign(path):  # a --cache-dir typo naming some other folder
                raise NotAStoreError(path)
            raise NoStoreError(path)
        _create(path)
        data = _read_layout(layout)
    _check_layout(path, layout, data)
    trust = trust if trust is not None else TrustPolicy.from_env()
    index = resolve_store_path(index_dir) if index_dir else None
    problem = None
    try:
        check_store(path, index, trust, resolved=True)
    except UntrustedStoreError as error:
        if not allow_untrusted:
            raise
        problem, read_only = str(error), True
    writable = os.access(text, os.W_OK) and os.access(f"{text}/{_layout.ENTRIES_DIR}", os.W_OK)
    return Store(
        path, index_dir=index, read_only=read_only or not writable, trust=trust, trust_problem=problem,
        modes=StoreModes.of_root(os.stat(text).st_mode),
    )


def resolve_store_path(path: str | os.PathLike[str]) -> pathlib.Path:
    """Where ``open_store`` uses a store (or an index folder) given as ``path``: ``~`` expanded,
    symlinks resolved (what ``ls``, ``dir`` and ``doctor`` print)."""
    return pathlib.Path(os.path.realpath(os.path.expanduser(path)))


#: What a store (or one being created by another process right now) may hold.
_STORE_NAMES = frozenset({
    _layout.ENTRIES_DIR, _layout.TMP_DIR, _layout.TRASH_DIR, _layout.CACHEDIR_TAG, _layout.LAYOUT_FILE,
    _layout.INDEX_DIR, _layout.DIRECT_DIR, _layout.QUARANTINE_DIR, _layout.LEDGER_DIR, _layout.LOCKS_DIR,
    _layout.CONFIG_FILE, _layout.FACTS_DIR,
})


def _foreign(path: pathlib.Path) -> bool:
    """True if ``path`` holds anything a store (being created) would not."""
    for name in os.listdir(path):
        temp = name.startswith((f".{_layout.CACHEDIR_TAG}.tmp-", f".{_layout.LAYOUT_FILE}.tmp-"))
        if name not in _STORE_NAMES and not temp:
            return True
    return False


def _create(path: pathlib.Path) -> None:
    # Another process may be creating the same store right now: its folders are no
    # reason to refuse, and every step below is idempotent.
    if path.exists() and (not path.is_dir() or _foreign(path)):
        raise NotAStoreError(path)
    try:
        _files.make_real_folders(os.fspath(path))
        # The root's mode (umask, or what an admin set: 2775 for a group) is the store's.
        modes = StoreModes.of_root(os.stat(path).st_mode)
        for name in (_layout.ENTRIES_DIR, _layout.TMP_DIR, _layout.TRASH_DIR):
            modes.make_folder(path / name)
        tag = path / _layout.CACHEDIR_TAG
        if not tag.exists():
            _files.atomic_write_text(tag, _layout.CACHEDIR_TAG_TEXT, mode=modes.file)
        layout_text = json.dumps(
            {"format": _layout.LAYOUT_FORMAT, "layout_version": _layout.LAYOUT_VERSION}, indent=2
        )
        # Written last: a folder is a store once this file exists.
        _files.atomic_write_text(path / _layout.LAYOUT_FILE, layout_text + "\n", mode=modes.file)
    except OSError as error:
        raise GtcacheError(f"Cannot create a store at '{path}': {error.strerror or error}.") from None


def _read_layout(layout: str) -> bytes | None:
    """The layout file's bytes (one open, a lookup's first step; never a symlink or a FIFO,
    which could block); None when there is none. A store's is about 60 bytes."""
    try:
        fd, _ = _files.open_regular(layout)
        try:
            return os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise GtcacheError(f"Cannot read '{layout}': {error.strerror or error}.") from None


def _check_layout(path: pathlib.Path, layout: str, data: bytes | None) -> None:
    try:
        value = json.loads(data) if data is not None else None
    except ValueError as error:
        raise GtcacheError(f"Cannot read '{layout}': {error}.") from None
    if not isinstance(value, dict) or value.get("format") != _layout.LAYOUT_FORMAT:
        raise NotAStoreError(path)
    if value.get("layout_version") != _layout.LAYOUT_VERSION:
        raise StoreVersionError(path, value.get("layout_version"), _layout.LAYOUT_VERSION)
