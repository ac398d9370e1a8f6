"""After ``os.fork`` (a forked worker that compiled): the child pushes on a thread of its own
and opens its own connections (the review's a5_fork.py, as tests)."""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

import pytest

import gtcache
from gtcache.gt4py._remote import RemoteTiers
from gtcache.remote import Remote, parse_remote
from tests.helpers import publish


class _SlowRemote:
    """Stands for a writable remote whose push takes 0.2 s."""

    broken = None
    writable = True
    name = "r"

    def push(self, store: Any, key: str) -> bool:
        time.sleep(0.2)
        return True

    def push_direct(self, direct_key: str, key: str) -> None:
        pass


def _in_child(job: Any) -> int:
    """Run ``job()`` in a forked child; its exit code (``job`` returning True: 0)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if job() else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_pushes_its_own_compiles() -> None:
    warned: list[str] = []
    tiers = RemoteTiers((_SlowRemote(),), lambda a, b: warned.append(a))  # type: ignore[arg-type]
    tiers.push(None, "k1", None)  # type: ignore[arg-type]
    assert tiers.flush(5)  # the parent's push thread exists now

    def child() -> bool:
        tiers.push(None, "k2", None)  # type: ignore[arg-type]
        return tiers.flush(30) and tiers.pushed == 2  # served: the child's own push thread

    assert _in_child(child) == 0
    tiers.push(None, "k3", None)  # type: ignore[arg-type]
    assert tiers.flush(5) and tiers.pushed == 2 and not warned  # the parent's thread still serves


def test_a_forked_child_opens_its_own_connection(redis_server: str, tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "store", create=True)
    entry = publish(store, "alpha")
    remote = Remote(parse_remote(f"{redis_server}?mode=read-write"), key=b"k" * 32)
    remote.push(store, entry.key, force=True)
    parent_backend = remote._backend

    def child() -> bool:
        ok = remote._backend is None and remote.has(entry.key)
        return ok and remote._backend is not parent_backend

    for _ in range(3):
        assert _in_child(child) == 0
    assert remote._backend is parent_backend and remote.has(entry.key)  # the parent's connection is intact


if not hasattr(os, "fork"):
    pytestmark = pytest.mark.skip("no os.fork")
