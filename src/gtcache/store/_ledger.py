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

__all__ = ["LEDGER_FORMAT", "LedgerTotals", "read_runs", "totals", "write_run", "zero"]

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


def write_run(root: pathlib.Path, summary: Mapping[str, Any]) -> pathlib.Path:
    """Write one run's summary as a new ledger file; return its path."""
    folder = root / LEDGER_DIR
    folder.mkdir(exist_ok=True)
    stamp = now_iso().replace(":", "").replace("+0000", "Z")
    path = folder / f"{stamp}-{socket.gethostname()}-{_files.unique_name('')}.json"
    record = {"format": LEDGER_FORMAT, "ended": now_iso(), "host": socket.gethostname(),
              "pid": os.getpid(), **summary}
    _files.atomic_write_text(path, json.dumps(record, sort_keys=True) + "\n", durable=False)
    return path


def read_runs(root: pathlib.Path) -> tuple[list[dict[str, Any]], int]:
    """Every readable run summary (oldest first) and how many files could not be read."""
    runs, unreadable = [], 0
    for path in sorted((root / LEDGER_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
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


def zero(root: pathlib.Path) -> int:
    """Remove every ledger file; return how many."""
    removed = 0
    for path in (root / LEDGER_DIR).glob("*"):
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed
