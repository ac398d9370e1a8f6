"""Synthetic entries with chosen ages, sizes, hits and toolchains."""

from __future__ import annotations

import datetime
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

import gtcache
from gtcache.store._record import record_digest
from tests.helpers import draft

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def days_ago(days: float) -> str:
    return (NOW - datetime.timedelta(days=days)).isoformat()


@pytest.fixture
def make_entry(tmp_path: pathlib.Path) -> Callable[..., gtcache.Entry]:
    """``make_entry(name, size=..., created_days=..., used_days=..., hits=..., ...)`` in one store."""
    store = gtcache.open_store(tmp_path / "store")

    def make(
        name: str, *, size: int = 1000, created_days: float = 1, used_days: float | None = None,
        hits: int = 0, compile_seconds: float = 10.0, backend: str = "run_gtfn_cpu",
        toolchain: dict[str, Any] | None = None,
    ) -> gtcache.Entry:
        entry = store.publish(draft(name, backend=backend), {"program.py": b"x" * size})
        record = json.loads((entry.path / "entry.json").read_text())
        record.update(
            created=days_ago(created_days),
            last_used=days_ago(created_days if used_days is None else used_days),
            hits=hits, compile_seconds=compile_seconds,
        )
        if toolchain is not None:
            record["toolchain"] = toolchain
        record["record_xxh3"] = record_digest(record)
        (entry.path / "entry.json").write_text(json.dumps(record))
        return store.get(entry.key)

    make.store = store  # type: ignore[attr-defined]
    return make
