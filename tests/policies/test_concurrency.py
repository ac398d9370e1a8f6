"""Prune while other processes publish and load: nothing half-deleted is ever seen."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import time

import pytest

import gtcache
from gtcache.policies import PrunePolicy, plan_prune, verify
from tests.helpers import draft

pytestmark = pytest.mark.slow

SECONDS = 6.0


def _publisher(root: str, count: int) -> None:
    store = gtcache.open_store(root)
    for i in range(count):
        store.publish(draft(f"p{i}"), {"program.py": os.urandom(20_000 + 997 * (i % 50))})


def _loader(root: str, errors: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    store = gtcache.open_store(root)
    deadline = time.monotonic() + SECONDS
    loads = 0
    while time.monotonic() < deadline:
        for shard in pathlib.Path(root, "entries").glob("*"):
            for folder in shard.glob("*"):
                try:
                    entry = store.lookup(folder.name)
                    if entry is not None:
                        store.verify_payload(entry)
                        loads += 1
                except gtcache.CorruptEntryError as error:
                    if folder.exists():  # still there, yet broken: a torn or half-deleted entry
                        errors.put(f"{folder.name}: {error.reason}")
    errors.put(f"loads={loads}")


def _pruner(root: str) -> None:
    store = gtcache.open_store(root)
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        plan_prune(store.scan(use_index=False), PrunePolicy(max_files=40)).execute(store)


def test_prune_while_publishing_and_loading(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path / "s")
    gtcache.open_store(root)
    ctx = multiprocessing.get_context("spawn")
    errors = ctx.Queue()
    procs = [
        ctx.Process(target=_publisher, args=(root, 300)),
        ctx.Process(target=_loader, args=(root, errors)),
        ctx.Process(target=_pruner, args=(root,)),
        ctx.Process(target=_pruner, args=(root,)),
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0, 0, 0]
    messages = []
    while not errors.empty():
        messages.append(errors.get())
    problems = [m for m in messages if not m.startswith("loads=")]
    assert problems == []
    assert any(m.startswith("loads=") and int(m[6:]) > 0 for m in messages)
    store = gtcache.open_store(root)
    assert verify(store).ok
    assert all(entry.ok for entry in store.scan().entries)
