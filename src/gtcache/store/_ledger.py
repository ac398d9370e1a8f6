"""The stats ledger: one small JSON file per process run that used the store.

The hook writes its run's summary once, at exit (never on the hit path), as a
new file: concurrent writers never share a file, so nothing is lost or torn.
``gtcache stats`` adds them up; ``gtcache stats --zero`` removes them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import socket
from collections.abc import Mapping
from typing import Any

from gtcache.store import _files
from gtcache.store._layout import LEDGER_DIR
from gtcache.store._record import now_iso
from gtcache.store._trust import StoreModes

__all__ = ["LEDGER_FORMAT", "ZEROED_FILE", "LedgerTotals", "read_runs", "totals", "write_run", "zero", "zeroed"]

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


def write_run(root: pathlib.Path, summary: Mapping[str, Any], modes: StoreModes | None = None) -> pathlib.Path:
    """Write one run's summary as a new ledger file (with ``modes``); return its path."""
    folder = root / LEDGER_DIR
    modes = modes or StoreModes.of_root(os.stat(root).st_mode)
    modes.make_folder(folder)
    stamp = now_iso().replace(":", "").replace("+0000", "Z")
    path = folder / f"{stamp}-{socket.gethostname()}-{_files.unique_name('')}.json"
    record = {"format": LEDGER_FORMAT, "ended": now_iso(), "host": socket.gethostname(),
              "pid": os.getpid(), **summary}
    _files.atomic_write_text(path, json.dumps(record, sort_keys=True) + "\n", durable=False, mode=modes.file)
    return path


def read_runs(root: pathlib.Path) -> tuple[list[dict[str, Any]], int]:
    """Every readable run summary (oldest first) and how many files could not be read."""
    runs, unreadable = [], 0
    for path in sorted((root / LEDGER_DIR).glob("*.json")):
        try:
            data = json.loads(_files.read_regular(path))  # never a FIFO, never through a symlink
        except (OSError, ValueError, RecursionError):
            unreadable += 1
            continue
        if isinstance(data, dict) and data.get("format") == LEDGER_FORMAT:
            runs.append(data)
        else:
            unreadable += 1
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
    """Remove every ledger file (a symlink itself, never its target; no folder); return how many
    runs that forgot; then note the time in ``ledger/zeroed``.

    The caller (``Store.zero_ledger``) has checked that ``ledger/`` is a real folder.
    """
    removed = 0
    try:
        items = list(os.scandir(root / LEDGER_DIR))
    except OSError:
        return 0
    for item in items:
        if item.is_dir(follow_symlinks=False):
            continue
        try:
            os.unlink(item.path)
            removed += item.name != ZEROED_FILE
        except OSError:
            pass
    modes = modes or StoreModes.of_root(os.stat(root).st_mode)
    _files.atomic_write_text(root / LEDGER_DIR / ZEROED_FILE, now_iso() + "\n", durable=False, mode=modes.file)
    return removed


def zeroed(root: pathlib.Path) -> str | None:
    """When the ledger was last zeroed (ISO 8601), or None (never, or unreadable)."""
    import datetime

    try:
        text = _files.read_regular(root / LEDGER_DIR / ZEROED_FILE)[:100].decode("ascii").strip()
        datetime.datetime.fromisoformat(text)
    except (OSError, ValueError):
        return None
    return text
