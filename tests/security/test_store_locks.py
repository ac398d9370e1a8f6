"""Another local user, who may read a store but not write it, against its locks.

``flock`` takes any open descriptor, one opened for reading too: whoever may read a lock
file may hold its lock. The tests run as root (the store's owner and its writers) and
attack as ``nobody`` (65534) in a real process of that user.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator

import pytest

import gtcache
from gtcache.store import TrustPolicy

NOBODY, NOGROUP = 65534, 65534
#: A group the attacker is not in (the group of a group-shared store).
TEAM = 65533
KEY = "ab" + "1" * 30


@pytest.fixture
def public() -> Iterator[pathlib.Path]:
    """A folder every user can reach (pytest's own are private to root), removed afterwards."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-locks-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _store(public: pathlib.Path, how: str) -> pathlib.Path:
    root = public / "store"
    root.mkdir()
    if how == "group-shared":  # the HPC set-up of docs/security.md, a group nobody is not in
        os.chown(root, 0, TEAM)
        os.chmod(root, 0o2775)
    else:
        os.chmod(root, 0o755)
    _open(root).close()
    return root


def _open(root: pathlib.Path) -> gtcache.Store:
    return gtcache.open_store(root, trust=TrustPolicy(groups=[TEAM]))


def _hold_as_nobody(path: pathlib.Path) -> tuple[int, int]:
    """A process of ``nobody`` that opens ``path`` for reading and waits for its lock; (pid, pipe
    that says "1" once it holds the lock, "0" if it could not open the file)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(NOGROUP, NOGROUP, NOGROUP)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                fd = os.open(path, os.O_RDONLY)
            except PermissionError:
                os.write(w, b"0")
                os._exit(0)
            os.write(w, b"r")
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(w, b"1")
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


@pytest.mark.parametrize("how", ["personal", "group-shared"])
def test_someone_who_may_only_read_a_store_cannot_hold_its_locks(public: pathlib.Path, how: str) -> None:
    """A compiler holding a variant's lock is killed (OOM, a CI timeout): the kernel lets go of
    its ``flock``, its lock file stays. Another user waiting on it (opened for reading) then held
    that lock for good: every process missing the variant waited ``GTCACHE_WAIT`` (600 s)
    before compiling it (reproduced; the same user, watching ``locks/`` with inotify, took 229
    of 300 fresh locks as they were created, with no compiler killed)."""
    root = _store(public, how)
    ready_r, ready_w = os.pipe()
    holder = os.fork()
    if holder == 0:  # a compiling process of the store's owner
        try:
            if _open(root).lock(KEY).acquire(5):
                os.write(ready_w, b"x")
                time.sleep(120)
        finally:
            os._exit(0)
    attacker = None
    try:
        assert os.read(ready_r, 1) == b"x"
        path = root / "locks" / f"{KEY}.lock"
        attacker, said = _hold_as_nobody(path)
        opened = os.read(said, 1)
        os.kill(holder, signal.SIGKILL)  # the compiler dies, holding the lock
        os.waitpid(holder, 0)
        holder = 0
        if opened == b"r":
            os.read(said, 1)  # the attacker's flock is granted now
        start = time.monotonic()
        lock = _open(root).lock(KEY)
        got = lock.acquire(3)
        lock.release()
        assert got, (f"a lock another user opened ({opened!r}: 'r' read it) was held by them:"
                     f" the next compiler waited {time.monotonic() - start:.1f} s in vain")
        assert opened == b"0", "the lock file was readable by someone who may not write the store"
    finally:
        for pid in (holder, attacker):
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
