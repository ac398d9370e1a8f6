"""``verify``: check every entry, link and left-over of a store; ``repair`` what is bad.

Problems and what ``repair`` does with them:

| kind | what | repair |
|---|---|---|
| ``broken-entry`` | record unreadable or invalid, a file missing, of the wrong size or checksum | moved to ``quarantine/`` |
| ``extra-file`` | a file in an entry folder that its record does not list | removed |
| ``orphan`` | something under ``entries/`` that is not an entry folder at its place | removed |
| ``leftover`` | a staging folder in ``tmp/`` or a temp file older than the grace period, anything in ``trash/`` | removed |
| ``dangling-link`` | a direct link to no sound entry, or unreadable | removed |
| ``index`` | the index could not be read | rebuilt |

An index that lags behind the folders is normal (publishing never touches it):
it is reported as a note and refreshed, not as a problem.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any

from gtcache.errors import CorruptEntryError
from gtcache.store import Store, is_key
from gtcache.store import _files, _layout  # the layout names this module checks

__all__ = ["Problem", "VerifyReport", "verify"]

#: Staging folders and temp files younger than this may belong to a running publish.
DEFAULT_GRACE_SECONDS = 3600.0


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: str
    path: pathlib.Path
    detail: str
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "detail": self.detail, "key": self.key}


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    root: pathlib.Path
    entries: int
    problems: tuple[Problem, ...]
    repaired: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.root),
            "entries": self.entries,
            "ok": self.ok,
            "problems": [p.to_json() for p in self.problems],
            "repaired": [p.to_json() for p in self.repaired],
            "notes": list(self.notes),
        }


def verify(store: Store, *, repair: bool = False, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> VerifyReport:
    """Check the whole store; with ``repair``, fix what can be fixed and check again."""
    problems, entries, notes = _check(store, grace_seconds)
    if not repair or not problems:
        return VerifyReport(store.root, entries, tuple(problems), notes=tuple(notes))
    for problem in problems:
        _repair(store, problem)
    store.rebuild_index()
    remaining, entries, notes = _check(store, grace_seconds)
    return VerifyReport(store.root, entries, tuple(remaining), repaired=tuple(problems), notes=tuple(notes))


def _check(store: Store, grace: float) -> tuple[list[Problem], int, list[str]]:
    problems: list[Problem] = []
    notes: list[str] = []
    sound: set[str] = set()
    entries = 0
    now = time.time()
    entries_dir = store.root / _layout.ENTRIES_DIR
    for shard in _listdir(entries_dir):
        if not (len(shard.name) == 2 and shard.is_dir() and all(c in "0123456789abcdef" for c in shard.name)):
            problems.append(Problem("orphan", pathlib.Path(shard.path), "not a shard folder"))
            continue
        for item in _listdir(shard):
            if not (item.is_dir() and is_key(item.name) and item.name.startswith(shard.name)):
                problems.append(Problem("orphan", pathlib.Path(item.path), "not an entry folder"))
                continue
            entries += 1
            entry_problems = _check_entry(store, item.name, now, grace)
            problems += entry_problems
            if not any(p.kind == "broken-entry" for p in entry_problems):
                sound.add(item.name)
    problems += _check_leftovers(store, now, grace)
    problems += _check_links(store, sound, now, grace)
    index = store.check_index()
    if index == "rebuilt":
        problems.append(Problem("index", store.index_dir, "the index was unreadable; rebuilt"))
    elif index == "lagging":
        notes.append("the index lagged behind the entry folders (normal after publishes); refreshed")
    elif index == "unavailable":
        notes.append("no index here (read-only store or unwritable index folder)")
    return problems, entries, notes


def _check_entry(store: Store, key: str, now: float, grace: float) -> list[Problem]:
    path = store.entry_path(key)
    try:
        entry = store.lookup(key)
        if entry is None:
            return [Problem("broken-entry", path, f"'{_layout.ENTRY_FILE}' is missing.", key)]
        store.verify_payload(entry)
    except CorruptEntryError as error:
        return [Problem("broken-entry", path, error.reason, key)]
    listed = {f.path for f in entry.record.files} | {_layout.ENTRY_FILE}
    problems = []
    for item in _listdir(path):
        if item.name in listed:
            continue
        if item.name.startswith(f".{_layout.ENTRY_FILE}.tmp-"):
            if now - _mtime(item) > grace:
                problems.append(Problem("leftover", pathlib.Path(item.path), "temp file of an interrupted write", key))
        else:
            problems.append(Problem("extra-file", pathlib.Path(item.path), "not listed in the record", key))
    return problems


def _check_leftovers(store: Store, now: float, grace: float) -> list[Problem]:
    problems = []
    for item in _listdir(store.root / _layout.TMP_DIR):
        if now - _mtime(item) > grace:
            problems.append(Problem("leftover", pathlib.Path(item.path), "staging folder of an interrupted publish"))
    for item in _listdir(store.root / _layout.TRASH_DIR):
        if now - _mtime(item) > grace:
            problems.append(Problem("leftover", pathlib.Path(item.path), "removal that did not finish"))
    return problems


def _check_links(store: Store, sound: set[str], now: float, grace: float) -> list[Problem]:
    problems = []
    for shard in _listdir(store.root / _layout.DIRECT_DIR):
        for item in _listdir(shard):
            path = pathlib.Path(item.path)
            if not is_key(item.name):
                if now - _mtime(item) > grace:
                    problems.append(Problem("leftover", path, "not a direct link"))
                continue
            target = store.resolve_direct(item.name)
            if target is None or target not in sound:
                problems.append(Problem("dangling-link", path, f"links to no sound entry ({target})"))
    return problems


def _repair(store: Store, problem: Problem) -> None:
    if problem.kind == "broken-entry" and problem.key is not None:
        store.quarantine(problem.key)
    elif problem.kind in ("extra-file", "orphan", "leftover", "dangling-link"):
        if problem.path.is_dir() and not problem.path.is_symlink():
            _files.remove_tree(problem.path)
        else:
            try:
                problem.path.unlink()
            except FileNotFoundError:
                pass


def _listdir(path: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as items:
            return sorted(items, key=lambda item: item.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _mtime(item: os.DirEntry[str]) -> float:
    try:
        return item.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0
