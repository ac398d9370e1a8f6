"""The stats ledger: one small JSON file per process run that used the store.

The hook writes its run's summary once, at exit (never on the hit path), as a
new file: concurrent writers never share a file, so nothing is lost or torn.
``gtcache stats`` adds them up; ``gtcache stats --zero`` removes them.

A run file is a ``*.json`` name not starting with a dot (``_is_run``). Everything else in
``ledger/`` is not a run: the ``zeroed`` marker, and a writer's temp file
(``.<name>.tmp-<pid>-<hex>``) that becomes a run file by one rename: ``zero`` never removes
one, as it may be a run being recorded right now.

``ledger/`` is a fixed folder of the store (a real folder or absent): it is opened once,
without following a symlink, and every file in it is read, written and removed through
that descriptor. A ``ledger/`` that is a symlink (or a file) reads as no runs and is never
written through (``verify`` names it, ``verify --repair`` mends it).

A run names its process by ``program`` alone (``program_name``), never its command line:
every user who may read the store reads the ledger, and arguments hold tokens and paths
(older gtcache kept ``argv``, its first four words: ``stats --zero`` removes such runs).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pathlib
import socket
import stat
import sys
from collections.abc import Mapping
from typing import Any

from gtcache.errors import GtcacheError
from gtcache.store import _files
from gtcache.store._layout import LEDGER_DIR
from gtcache.store._record import now_iso
from gtcache.store._trust import StoreModes

__all__ = [
    "LEDGER_FORMAT", "ZEROED_FILE", "LedgerTotals", "program_name", "read_runs", "totals", "write_run", "zero", "zeroed",
]

LEDGER_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class LedgerTotals:
    runs: int = 0
    hits: int = 0
    compiled: int = 0
    bypassed: int = 0
    failed: int = 0
    compile_seconds: float = 0.0
    compile_seconds_saved: float = 0.0
    unreadable: int = 0

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["compile_seconds"] = round(self.compile_seconds, 3)
        data["compile_seconds_saved"] = round(self.compile_seconds_saved, 3)
        return data


#: ``ledger/`` opened as a folder, never through a symlink (ELOOP) or as a file (ENOTDIR).
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _is_run(name: str) -> bool:
    """Whether ``name`` in ``ledger/`` is a run file (not a temp file, not the marker)."""
    return name.endswith(".json") and not name.startswith(".")


def _open_folder(root: pathlib.Path) -> int | None:
    """A descriptor of ``root``'s ``ledger/``; None when it is absent. ``GtcacheError`` when
    it is not a real folder (a symlink, a file): nothing is read or written through it."""
    folder = root / LEDGER_DIR
    try:
        return os.open(folder, _OPEN_FOLDER)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise GtcacheError(
                f"Store folder '{folder}' is not a real folder; nothing is written through it:"
                " run 'gtcache verify --repair'."
            ) from None
        raise


def program_name() -> str:
    """What names this process in the ledger, without its arguments: the module run by
    ``python -m`` (``pytest``), else the script or command's file name without its folder
    (``run.py``, ``gtcache``; ``-c`` for ``python -c``, ``python`` when there is none)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name:
        return name.removesuffix(".__main__")
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) if isinstance(first, str) and os.path.basename(first) else "python"


#: What a summary may not bring into a run file: the command line (see the module docstring).
_NEVER_RECORDED = frozenset({"argv"})


def write_run(root: pathlib.Path, summary: Mapping[str, Any], modes: StoreModes | None = None) -> pathlib.Path:
    """Write one run's summary as a new ledger file (with ``modes``); return its path. The
    run names its process by ``program_name`` (never its command line, whatever ``summary`` holds).

    ``GtcacheError`` if ``ledger/`` is a symlink or a file (never written through)."""
    folder = root / LEDGER_DIR
    modes = modes or StoreModes.of_root(os.stat(root).st_mode)
    modes.make_folder(folder)  # nothing if anything, a symlink too, is there
    fd = _open_folder(root)
    if fd is None:  # removed (``clear``) between the two: not recorded, as a run killed
        raise FileNotFoundError(errno.ENOENT, "the ledger folder was removed meanwhile", str(folder))
    try:
        stamp = now_iso().replace(":", "").replace("+0000", "Z")
        name = f"{stamp}-{socket.gethostname()}-{_files.unique_name('')}.json"
        record = {"format": LEDGER_FORMAT, "ended": now_iso(), "host": socket.gethostname(),
                  "pid": os.getpid(),
                  **{field: value for field, value in summary.items() if field not in _NEVER_RECORDED},
                  "program": program_name()}
        _files.replace_text_at(fd, name, json.dumps(record, sort_keys=True) + "\n", mode=modes.file)
    finally:
        os.close(fd)
    return folder / name


def read_runs(root: pathlib.Path) -> tuple[list[dict[str, Any]], int]:
    """Every readable run summary (oldest first) and how many files could not be read.

    A ``ledger/`` that is a symlink or a file holds no runs (never followed)."""
    runs: list[dict[str, Any]] = []
    unreadable = 0
    try:
        fd = _open_folder(root)
    except (GtcacheError, OSError):
        return runs, unreadable
    if fd is None:
        return runs, unreadable
    try:
        try:
            names = sorted(name for name in os.listdir(fd) if _is_run(name))
        except OSError:
            return runs, unreadable
        for name in names:
            try:
                data = json.loads(_files.read_regular(name, dir_fd=fd))  # never a FIFO, never through a symlink
            except (OSError, ValueError, RecursionError):
                unreadable += 1
                continue
            if isinstance(data, dict) and data.get("format") == LEDGER_FORMAT:
                runs.append(data)
            else:
                unreadable += 1
    finally:
        os.close(fd)
    return runs, unreadable


def totals(root: pathlib.Path) -> LedgerTotals:
    runs, unreadable = read_runs(root)

    def count(run: Mapping[str, Any], status: str) -> int:
        value = run.get("counts", {}).get(status, 0)
        return value if isinstance(value, int) else 0

    def number(run: Mapping[str, Any], name: str) -> float:
        value = run.get(name, 0.0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    return LedgerTotals(
        runs=len(runs),
        hits=sum(count(r, "hit") for r in runs),
        compiled=sum(count(r, "compiled") for r in runs),
        bypassed=sum(count(r, "bypassed") for r in runs),
        failed=sum(count(r, "failed") for r in runs),
        compile_seconds=sum(number(r, "compile_seconds") for r in runs),
        compile_seconds_saved=sum(number(r, "compile_seconds_saved") for r in runs),
        unreadable=unreadable,
    )


#: When the ledger was last zeroed (``stats --zero``): one ISO 8601 line; not a run (no ``.json``).
ZEROED_FILE = "zeroed"


def zero(root: pathlib.Path, modes: StoreModes | None = None) -> int:
    """Remove every run file (``_is_run``; a symlink itself, never its target; no folder);
    return how many runs that forgot (regular files: what ``read_runs`` may read); then note
    the time in ``ledger/zeroed``.

    Only run files: a temp file (``.<name>.tmp-*``) may be a run being recorded right now,
    whose rename would then fail (a killed writer's is left for good: harmless, not a run).
    The caller (``Store.zero_ledger``) has checked that ``ledger/`` is a real folder; if it
    was replaced by a symlink since, ``GtcacheError`` and nothing is removed.
    """
    fd = _open_folder(root)
    if fd is None:
        return 0
    removed = 0
    try:
        try:
            names = [name for name in os.listdir(fd) if _is_run(name)]
        except OSError:
            return 0
        for name in names:
            try:
                kind = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                os.unlink(name, dir_fd=fd)  # a folder named *.json: EISDIR, left
            except OSError:
                continue
            removed += stat.S_ISREG(kind)  # a symlink or a FIFO of that name goes, but was no run
        modes = modes or StoreModes.of_root(os.stat(root).st_mode)
        _files.replace_text_at(fd, ZEROED_FILE, now_iso() + "\n", mode=modes.file)
    finally:
        os.close(fd)
    return removed


def zeroed(root: pathlib.Path) -> str | None:
    """When the ledger was last zeroed (ISO 8601), or None (never, unreadable, or ``ledger/``
    not a real folder)."""
    import datetime

    try:
        fd = _open_folder(root)
    except (GtcacheError, OSError):
        return None
    if fd is None:
        return None
    try:
        text = _files.read_regular(ZEROED_FILE, dir_fd=fd)[:100].decode("ascii").strip()
        datetime.datetime.fromisoformat(text)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return text
