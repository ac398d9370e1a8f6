"""``verify``: check every entry, link and left-over of a store; ``repair`` what is bad.

Problems and what ``repair`` does with them:

| kind | what | repair |
|---|---|---|
| ``symlink`` | a fixed folder of the store (``entries``, ``tmp``, ``trash``, ``quarantine``, ``ledger``, ``direct``, ``locks``, ``index`` in the store) that is a symlink or not a folder; every write refuses until repaired | the link (or file) itself removed, never its target; an empty folder made |
| ``broken-entry`` | record unreadable or invalid (an artifact naming a file the entry does not list), a file missing, not a regular file, of the wrong size or checksum | moved to ``quarantine/`` |
| ``extra-file`` | a file in an entry folder that its record does not list | removed (a symlink itself, never its target) |
| ``orphan`` | something under ``entries/`` that is not an entry folder at its place, a symlinked shard or entry folder among them | removed (a symlink itself, never its target) |
| ``refused-folder`` | a shard folder (``entries/<xx>``, ``direct/<xx>``) whose owner or mode makes lookups refuse all it holds (a store made under umask 002): its entries are ``broken-entry`` problems, its links never followed; an entry folder of its own is a ``broken-entry`` alone | ``entries/<xx>``: removed once empty (its entries quarantined); ``direct/<xx>``: removed with its links; made anew, with the store's mode, by the next publish. Never ``chmod``: that would trust what someone untrusted may have written |
| ``leftover`` | a staging or build folder in ``tmp/``, anything in ``trash/``, a temp file, older than the grace period (``tmp/`` and ``trash/``: by the newest time within; a week while the pid its name carries runs on this host, in a process started before, ``_in_use``) | removed |
| ``dangling-link`` | a direct link to no sound entry, or unreadable | removed |
| ``index`` | the index could not be read, or holds rows that are not gtcache's JSON text (a pickle: never loaded) | rebuilt |
| ``config`` | ``gtcache.toml`` unreadable, not TOML, or a value that does not check out (``max_size = "20X"``): the caps are not enforced | none: ``gtcache config set`` / ``unset`` fixes it |

An index that lags behind the folders is normal (publishing never touches it):
it is reported as a note and refreshed, not as a problem. Nothing is followed
through a symlink: folders are listed with ``lstat`` semantics, and what repair
deletes is deleted with ``remove_tree`` (a link is unlinked, a folder removed
by descriptors).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import time
from collections.abc import Mapping, Set as AbstractSet
from typing import Any, Literal

from gtcache.errors import CorruptEntryError
from gtcache.policies.config import config_file_problems
from gtcache.store import (
    CONFIG_FILE,
    DIRECT_DIR,
    ENTRIES_DIR,
    ENTRY_FILE,
    LEDGER_DIR,
    LOCKS_DIR,
    TMP_DIR,
    TRASH_DIR,
    RefusedFolder,
    Store,
    fs_now,
    is_key,
    pid_of,
    remove_tree,
)

__all__ = ["Problem", "VerifyReport", "verify"]

#: Staging folders and temp files younger than this may belong to a running publish. What
#: ``tmp/`` and ``trash/`` hold is judged by the newest time within it (``_newest_mtime``).
DEFAULT_GRACE_SECONDS = 3600.0
#: What ``tmp/`` or ``trash/`` holds whose name carries the pid of a process running on this
#: host is kept while nothing in it is older than this (a compile can write nothing for hours;
#: a pid reused by a long-lived process must not keep litter for ever).
_RUNNING_GRACE_SECONDS = 7 * 86400.0
#: How many items of a folder in ``tmp/`` or ``trash/`` are looked at for its newest time.
_WALK_LIMIT = 10_000


#: What ``verify`` finds: "symlink" (a store folder that is a link), "orphan", "index",
#: "broken-entry", "leftover", "extra-file", "dangling-link", "config" or "refused-folder"
#: (docs/cli.md, ``verify``).
ProblemKind = Literal[
    "symlink", "orphan", "index", "broken-entry", "leftover", "extra-file", "dangling-link", "config",
    "refused-folder",
]

#: The order repairs run in: the store's own folders first (every other repair writes through
#: them), a refused shard folder last (removed once its entries are quarantined).
_REPAIR_ORDER = {"symlink": 0, "refused-folder": 2}


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: ProblemKind
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
    failed: list[str] = []
    unchecked: dict[tuple[str, pathlib.Path], str] = {}
    gone: set[tuple[str, pathlib.Path]] = set()
    for problem in sorted(problems, key=lambda p: _REPAIR_ORDER.get(p.kind, 1)):
        try:
            done = _repair(store, problem)
            if done == "left":
                unchecked[problem.kind, problem.path] = problem.detail
            elif done == "gone":
                gone.add((problem.kind, problem.path))
        except OSError as error:  # (a folder of another user in the store): the rest is repaired
            failed.append(f"could not repair {problem.path}: {error.strerror or error}")
    store.recheck_folders()  # checked again, not taken from before the repairs
    store.rebuild_index()
    remaining, entries, notes = _check(store, grace_seconds)
    left = {(p.kind, p.path) for p in remaining}  # (a detail may count what is left)
    repaired = tuple(p for p in problems if p.kind != "config" and (p.kind, p.path) not in left | unchecked.keys() | gone)
    failed += [f"left {path} as it was: {detail.removesuffix('.')}, but it checks out now."
               for (kind, path), detail in sorted(unchecked.items()) if (kind, path) not in left]
    failed += [f"{path} was removed by another process before its repair (not repaired)."
               for kind, path in sorted(gone) if (kind, path) not in left]
    return VerifyReport(store.root, entries, tuple(remaining), repaired=repaired, notes=tuple(failed + notes))


def _check(store: Store, grace: float) -> tuple[list[Problem], int, list[str]]:
    problems: list[Problem] = []
    notes: list[str] = []
    sound: set[str] = set()
    entries = 0
    now = time.time()
    unsafe = {path for path, _ in store.unsafe_folders()}
    problems += [
        Problem("symlink", path, f"{what}, not a folder of the store; nothing is written through it")
        for path, what in store.unsafe_folders()
    ]
    # Shard folders whose owner or mode lookups refuse (the checks lookups make): the entries
    # in one are broken-entry problems below; a symlinked shard is an orphan.
    refused = {
        found.path: found for found in store.refused_folders(entry_folders=False) if found.refused is not None
    }
    entries_dir = store.root / ENTRIES_DIR
    for shard in _listdir(entries_dir, unsafe):
        if not (
            len(shard.name) == 2 and shard.is_dir(follow_symlinks=False)
            and all(c in "0123456789abcdef" for c in shard.name)
        ):
            what = "a symlink, not a shard folder" if shard.is_symlink() else "not a shard folder"
            problems.append(Problem("orphan", pathlib.Path(shard.path), what))
            continue
        if (found := refused.get(pathlib.Path(shard.path))) is not None:
            problems.append(Problem("refused-folder", found.path, f"{_refused_what(found)}: {found.problem}"))
        for item in _listdir(shard):
            if not (item.is_dir(follow_symlinks=False) and is_key(item.name) and item.name.startswith(shard.name)):
                what = "a symlink, not an entry folder" if item.is_symlink() else "not an entry folder"
                problems.append(Problem("orphan", pathlib.Path(item.path), what))
                continue
            entry_problems = _check_entry(store, item.name, now, grace)
            if entry_problems is None:
                continue  # removed since it was listed (a prune, rm): not an entry, not broken
            entries += 1
            problems += entry_problems
            if not any(p.kind == "broken-entry" for p in entry_problems):
                sound.add(item.name)
    problems += _check_leftovers(store, now, grace, unsafe)
    # A setting that does not check out: caps would not be enforced (never repaired: say what to set).
    problems += [Problem("config", store.root / CONFIG_FILE, detail)
                 for detail in config_file_problems(store.root, store.trust)]
    problems += _check_links(store, sound, now, grace, unsafe, refused)
    index = "unavailable" if store.index_dir in unsafe else store.check_index()
    if index == "rebuilt":
        problems.append(Problem("index", store.index_dir, "the index was unreadable; rebuilt"))
    elif index == "foreign":
        problems.append(Problem(
            "index", store.index_dir,
            f"the index holds {store.index_foreign_rows} rows that are not gtcache's JSON text (never read)",
        ))
    elif index == "lagging":
        notes.append("the index lagged behind the entry folders (normal after publishes); refreshed")
    elif index == "unavailable":
        notes.append("no index here (read-only store, unwritable index folder, or locked by another process)")
    return problems, entries, notes


def _check_entry(store: Store, key: str, now: float, grace: float) -> list[Problem] | None:
    """The problems of entry ``key``; None when its folder is gone (removed while checked)."""
    path = store.entry_path(key)
    try:
        entry = store.lookup(key)
        if entry is None:
            if not os.path.lexists(path):
                return None
            return [Problem("broken-entry", path, f"'{ENTRY_FILE}' is missing.", key)]
        store.verify_payload(entry)
    except CorruptEntryError as error:
        if not os.path.lexists(path):  # renamed away whole while its files were read
            return None
        return [Problem("broken-entry", path, error.reason, key)]
    listed = {f.path for f in entry.record.files} | {ENTRY_FILE}
    problems = []
    for item in _listdir(path):
        if item.name in listed:
            continue
        if item.name.startswith(f".{ENTRY_FILE}.tmp-"):
            if now - _mtime(item) > grace:
                problems.append(Problem("leftover", pathlib.Path(item.path), "temp file of an interrupted write", key))
        else:
            problems.append(Problem("extra-file", pathlib.Path(item.path), "not listed in the record", key))
    return problems


def _check_leftovers(store: Store, now: float, grace: float, unsafe: set[pathlib.Path]) -> list[Problem]:
    problems = []
    # What tmp/ and trash/ hold is judged by the file system's clock (a file server's sets
    # their times; this host's where no probe file can be made), and a process's start on
    # this host's clock is turned into it.
    # No probe file in a store opened read-only (another user's: verify without --repair
    # writes nothing there), nor through a tmp/ that is a symlink or a file (nothing is
    # written through it): this host's clock then.
    tmp = store.root / TMP_DIR
    clock = time.time() if store.read_only or tmp in unsafe else fs_now(tmp)
    skew = now - clock
    for item in _listdir(store.root / TMP_DIR, unsafe):
        if not _in_use(item, clock, grace, skew):
            problems.append(Problem("leftover", pathlib.Path(item.path), "staging folder of an interrupted publish"))
    for item in _listdir(store.root / TRASH_DIR, unsafe):
        if not _in_use(item, clock, grace, skew):
            problems.append(Problem("leftover", pathlib.Path(item.path), "removal that did not finish"))
    # What a process killed meanwhile left: a ledger entry's temp file, a lock's flock probe
    # (folders this user may not list: not looked into, as the entries' checks do not need them).
    for item in _listdir(store.root / LEDGER_DIR, unsafe, unlisted_ok=True):
        if item.name.startswith(".") and ".tmp-" in item.name and now - _mtime(item) > grace:
            problems.append(Problem("leftover", pathlib.Path(item.path), "temp file of an interrupted ledger write"))
    for item in _listdir(store.root / LOCKS_DIR, unsafe, unlisted_ok=True):
        if item.name.startswith(".flock-probe-") and now - _mtime(item) > grace:
            problems.append(Problem("leftover", pathlib.Path(item.path), "flock probe of an interrupted process"))
    return problems


def _check_links(
    store: Store, sound: set[str], now: float, grace: float, unsafe: set[pathlib.Path],
    refused: Mapping[pathlib.Path, RefusedFolder],
) -> list[Problem]:
    problems = []
    for shard in _listdir(store.root / DIRECT_DIR, unsafe):
        if not shard.is_dir(follow_symlinks=False):
            if shard.is_symlink() or now - _mtime(shard) > grace:
                problems.append(Problem("leftover", pathlib.Path(shard.path), "not a direct-link folder"))
            continue
        if (found := refused.get(pathlib.Path(shard.path))) is not None:
            # No link in it is followed; the repair removes them with it (as dangling links).
            problems.append(Problem("refused-folder", found.path, f"{_refused_what(found)}: {found.problem}"))
            continue
        for item in _listdir(shard):
            path = pathlib.Path(item.path)
            if not is_key(item.name):
                if now - _mtime(item) > grace:
                    problems.append(Problem("leftover", path, "not a direct link"))
                continue
            target = store.build_key_of(item.name)
            if target is None or target not in sound:
                problems.append(Problem("dangling-link", path, f"links to no sound entry ({target})"))
    return problems


def _refused_what(found: RefusedFolder) -> str:
    count = found.refused or 0
    if found.what == "direct":
        return f"{count} direct link{'' if count == 1 else 's'} in it not followed"
    return f"{count} entr{'y' if count == 1 else 'ies'} in it refused (each a broken-entry)"


def _repair(store: Store, problem: Problem) -> Literal["repaired", "left", "gone"]:
    """Repair ``problem``; "left": left as it was on purpose (it could not be checked, or it
    checks out now); "gone": a broken entry removed meanwhile by another process (a prune, rm):
    nothing was done to it."""
    if problem.kind == "symlink":
        store.repair_folder(problem.path)
    elif problem.kind == "refused-folder":
        # Never chmod: that would trust what someone untrusted may have written. A shard
        # folder goes (the next publish makes it anew, with the store's mode): a direct-link
        # folder with its links (hints, not followed anyway), an entry shard once its entries
        # are quarantined (else it stays, and is reported again). Not one that could not be
        # checked (an I/O error, a stale NFS handle: maybe gone by the next run).
        if ": cannot check folder" in problem.detail:
            return "left"
        if problem.path.parent.name == DIRECT_DIR:
            remove_tree(problem.path)  # a symlink is unlinked itself, never followed
        else:
            with contextlib.suppress(OSError):
                os.rmdir(problem.path)  # only an empty folder; never follows a symlink
    elif problem.kind == "broken-entry" and problem.key is not None:
        # Checked again first: a model run may have published it anew, sound, since the check
        # (which takes minutes in a large store); then only the folder judged is set aside.
        try:
            judged = os.lstat(problem.path)
        except FileNotFoundError:
            return "gone"
        if _sound(store, problem.key):
            return "left"
        if store.quarantine(problem.key, judged=judged) is None and not os.path.lexists(problem.path):
            return "gone"
    elif problem.kind == "dangling-link":
        target = store.build_key_of(problem.path.name)
        if target is not None and _sound(store, target):  # linked anew, or its entry published since
            return "left"
        remove_tree(problem.path)
    elif problem.kind in ("extra-file", "orphan", "leftover"):
        remove_tree(problem.path)  # a symlink is unlinked itself, never followed
    return "repaired"


def _sound(store: Store, key: str) -> bool:
    """Whether the entry ``key`` passes ``lookup`` and its checksums now."""
    try:
        entry = store.lookup(key)
        if entry is not None:
            store.verify_payload(entry)
    except CorruptEntryError:
        return False
    return entry is not None


def _listdir(
    path: str | os.PathLike[str], unsafe: AbstractSet[pathlib.Path] = frozenset(), *, unlisted_ok: bool = False,
) -> list[os.DirEntry[str]]:
    """The items of a folder, sorted; none for a fixed folder that is a symlink (``unsafe``),
    and with ``unlisted_ok`` none for one this user may not list."""
    if isinstance(path, pathlib.Path) and path in unsafe:
        return []
    try:
        with os.scandir(path) as items:
            return sorted(items, key=lambda item: item.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except PermissionError:
        if unlisted_ok:
            return []
        raise


def _in_use(item: os.DirEntry[str], now: float, grace: float, skew: float) -> bool:
    """Whether what ``tmp/`` or ``trash/`` holds (``item``) may still be in use: something in it
    (looked at up to ``_WALK_LIMIT`` items, ``_newest_mtime``) was written within ``grace``
    seconds, or its name carries the pid of a process running on this host (``unique_name``)
    and it was written within ``_RUNNING_GRACE_SECONDS``. A pid tells nothing of another host's
    processes (a store shared over NFS): there, and for a dead pid, the age alone decides.
    ``now`` and the item's times are the file system's clock; ``skew``, this host's minus it."""
    newest = _newest_mtime(item)
    if now - newest <= grace:
        return True
    pid = pid_of(item.name)
    return pid is not None and now - newest <= _RUNNING_GRACE_SECONDS and _running_here(pid, newest + skew)


def _newest_mtime(item: os.DirEntry[str]) -> float:
    """The newest modification time of ``item`` and, for a folder, of what it holds (a build
    folder's own time changes only when a name is added or removed right in it), never through a
    symlink; at most ``_WALK_LIMIT`` items are looked at (then the newest of those)."""
    newest = _mtime(item)
    if not item.is_dir(follow_symlinks=False):
        return newest
    pending, seen = [item.path], 0
    while pending and seen < _WALK_LIMIT:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as items:
            for sub in items:
                seen += 1
                newest = max(newest, _mtime(sub))
                with contextlib.suppress(OSError):
                    if sub.is_dir(follow_symlinks=False):
                        pending.append(sub.path)
                if seen >= _WALK_LIMIT:
                    break
    return newest


def _running_here(pid: int, written: float) -> bool:
    """Whether a process ``pid`` runs on this host that may have made the name: one started
    after the item was last ``written`` (this host's clock, give or take
    ``_CLOCK_SLACK_SECONDS``) did not, the pid was reused. (Without ``/proc``, any process
    ``pid``: a reused pid keeps the item a while longer, no harm.)"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    except (OSError, OverflowError, ValueError):
        return False
    started = _start_time(pid)
    return started is None or started <= written + _CLOCK_SLACK_SECONDS


#: How far a file system's times may be from this host's clock once its offset is measured.
_CLOCK_SLACK_SECONDS = 60.0


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch, Linux's ``/proc``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        with open("/proc/stat", "rb") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith(b"btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _mtime(item: os.DirEntry[str]) -> float:
    try:
        return item.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0
