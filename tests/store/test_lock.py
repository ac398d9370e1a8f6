"""Locks between real processes, with flock and with flock taken away (as on Lustre without it)."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from gtcache.store._lock import STALE, StoreLock
from tests.helpers import run_python

#: Holds a lock (argv: path, method) until stdin closes, printing what it got.
HOLDER = """
import pathlib, sys
from gtcache.store._lock import StoreLock
lock = StoreLock(pathlib.Path(sys.argv[1]), sys.argv[2])
print("HELD" if lock.acquire(5) else "NOT", lock.effective_method(), flush=True)
sys.stdin.read()
if sys.argv[3] == "release":
    lock.release()
else:
    import os
    os._exit(0)  # dies holding it
"""


def start_holder(path: pathlib.Path, method: str, end: str = "release", env: dict[str, str] | None = None):
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), str(path), method, end],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()


def stop(proc: subprocess.Popen) -> None:
    proc.communicate("", timeout=30)
    assert proc.returncode == 0


@pytest.mark.parametrize("method", ["flock", "files"])
def test_a_held_lock_excludes_other_processes_until_released(tmp_path: pathlib.Path, method: str) -> None:
    path = tmp_path / "x.lock"
    proc, (state, used) = start_holder(path, method)
    assert (state, used) == ("HELD", method)
    lock = StoreLock(path, method)
    started = time.monotonic()
    assert not lock.acquire(timeout=0.3), "held by another process"
    assert time.monotonic() - started < 5, "the wait is bounded"
    stop(proc)
    assert lock.acquire(timeout=5)
    lock.release()
    assert not path.exists(), "no lock files pile up"


@pytest.mark.parametrize("method", ["flock", "files"])
def test_a_lock_of_a_dead_process_is_taken_over(tmp_path: pathlib.Path, method: str) -> None:
    path = tmp_path / "x.lock"
    proc, (state, _) = start_holder(path, method, end="die")
    assert state == "HELD"
    stop(proc)
    assert path.exists(), "the dead holder left its lock file"
    lock = StoreLock(path, method)
    assert lock.acquire(timeout=2)
    lock.release()


def test_lock_files_of_other_hosts_count_until_they_go_stale(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.lock"
    path.write_text(f"12345 not-{socket.gethostname()}\n")
    lock = StoreLock(path, "files")
    assert not lock.acquire(timeout=0.2), "a live holder elsewhere, as far as anyone here can tell"
    old = time.time() - STALE - 5
    os.utime(path, (old, old))
    assert lock.acquire(timeout=2), "not refreshed for longer than STALE: its holder is gone"
    assert path.read_text().split() == [str(os.getpid()), socket.gethostname()]
    lock.release()


def test_without_flock_auto_falls_back_to_lock_files(tmp_path: pathlib.Path, no_flock: dict[str, str]) -> None:
    path = tmp_path / "x.lock"
    proc, (state, used) = start_holder(path, "auto", env=no_flock)
    assert (state, used) == ("HELD", "files")
    other, (other_state, _) = start_holder(path, "auto", end="release", env=no_flock)
    assert other_state == "NOT", "excluded without flock as with it"
    stop(other)
    stop(proc)
    assert not path.exists()


def test_without_flock_the_flock_method_says_so(tmp_path: pathlib.Path, no_flock: dict[str, str]) -> None:
    code = f"""
    import pathlib
    from gtcache.store._lock import StoreLock
    try:
        StoreLock(pathlib.Path({str(tmp_path / 'x.lock')!r}), "flock").acquire(1)
    except OSError as error:
        print("ERROR", error.errno)
    """
    import errno

    assert run_python(code, env=no_flock).split() == ["ERROR", str(errno.ENOSYS)]


def test_unknown_method_is_refused(tmp_path: pathlib.Path) -> None:
    import gtcache

    with pytest.raises(gtcache.GtcacheError, match="Unknown locking method 'lustre'"):
        StoreLock(tmp_path / "x.lock", "lustre")
