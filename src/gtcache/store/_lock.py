"""Locks between processes that only save work: correctness never depends on them.

An entry becomes visible by one atomic rename and the first publisher wins
(``_store.py``), so a lock in gtcache only keeps two processes from doing the
same work at once (compiling one variant, pruning one store). That allows two
things a correctness lock could not: every wait is bounded (``acquire`` gives
up and says so), and a lock whose holder looks dead may be broken.

Two methods, chosen by ``GTCACHE_LOCKING``:

- ``flock``: ``fcntl.flock`` on ``<name>.lock``. The kernel drops the lock when
  its holder dies. The holder removes the file while it still holds it; a
  waiter that then wins the lock on the removed file sees that the path no
  longer names its file and tries again, so no lock files pile up.
- ``files``: ``<name>.lock`` created with ``O_EXCL`` (atomic on every file
  system, Lustre and NFSv3+ included), holding ``pid host``; the holder
  refreshes its modification time every ``HEARTBEAT`` seconds. A lock file is
  stale when its process is gone (same host) or it has not been refreshed for
  ``STALE`` seconds (any host), and the next contender removes it.
- ``auto`` (default): ``flock``, and ``files`` in every folder whose file
  system answers ``flock`` with ENOSYS, EOPNOTSUPP or ENOLCK (Lustre mounted
  without ``flock``, some NFS set-ups).
"""

from __future__ import annotations

import errno
import os
import pathlib
import socket
import threading
import time

from gtcache.errors import GtcacheError
from gtcache.settings import LOCKING_METHODS

__all__ = ["StoreLock"]

#: Seconds between two refreshes of a held lock file (method ``files``).
HEARTBEAT = 10.0
#: Seconds after which a lock file nobody refreshed is stale.
STALE = 60.0
#: The errors of a file system without ``flock``.
_NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOLCK})
#: Per folder: whether its file system has ``flock`` (method ``auto``, found out once per process).
_has_flock: dict[str, bool] = {}
_HOST = socket.gethostname()


class StoreLock:
    """One named lock; ``acquire(timeout)`` returns whether it got it, never waits longer."""

    def __init__(self, path: pathlib.Path, method: str = "auto"):
        if method not in LOCKING_METHODS:
            raise GtcacheError(f"Unknown locking method '{method}' (choose from {', '.join(LOCKING_METHODS)}).")
        self.path = path
        self.method = method
        self._fd: int | None = None
        self._heartbeat: threading.Event | None = None
        #: The inode of the lock file this lock created (method ``files``).
        self._ino = 0

    def effective_method(self) -> str:
        """``flock`` or ``files``: what ``auto`` comes to in this lock's folder."""
        if self.method != "auto":
            return self.method
        folder = str(self.path.parent)
        if folder not in _has_flock:
            _has_flock[folder] = _probe_flock(folder)
        return "flock" if _has_flock[folder] else "files"

    def acquire(self, timeout: float) -> bool:
        """Take the lock within ``timeout`` seconds (0: one try). Raises OSError if it cannot lock at all."""
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            if self._try():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.25)

    def release(self) -> None:
        """Give the lock up (and remove its file). Never raises."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.unlink(self.path)  # while still held: see the module docstring
            except OSError:
                pass
            os.close(fd)
        if self._heartbeat is not None:
            beat, self._heartbeat = self._heartbeat, None
            beat.set()
            try:
                if os.stat(self.path, follow_symlinks=False).st_ino == self._ino:  # not broken and retaken
                    os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> StoreLock:  # ``with lock:`` after a successful ``acquire`` releases it
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # -- flock ------------------------------------------------------------------------------

    def _try(self) -> bool:
        return self._try_flock() if self.effective_method() == "flock" else self._try_file()

    def _try_flock(self) -> bool:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The holder before us may have removed the file after we opened it.
            if os.fstat(fd).st_ino != os.stat(self.path, follow_symlinks=False).st_ino:
                raise FileNotFoundError
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    # -- lock files -------------------------------------------------------------------------

    def _try_file(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            self._break_if_stale()
            return False
        try:
            os.write(fd, f"{os.getpid()} {_HOST}\n".encode())
            self._ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        beat = threading.Event()
        threading.Thread(target=_refresh, args=(self.path, beat), daemon=True, name="gtcache-lock").start()
        self._heartbeat = beat
        return True

    def _break_if_stale(self) -> None:
        try:
            holder = self.path.read_text(encoding="utf-8", errors="replace")
            age = time.time() - os.stat(self.path).st_mtime
        except OSError:  # released meanwhile: the next try may get it
            return
        if not _stale(holder, age):
            return
        # Move it aside under a unique name, then make sure it was the stale one: a
        # contender may have broken it and a new holder taken the lock meanwhile.
        aside = self.path.with_name(f"{self.path.name}.stale-{os.getpid()}-{threading.get_ident()}")
        try:
            os.rename(self.path, aside)
        except OSError:
            return
        try:
            if aside.read_text(encoding="utf-8", errors="replace") != holder:
                os.link(aside, self.path)  # a live lock: put it back unless taken again
        except OSError:
            pass
        finally:
            try:
                os.unlink(aside)
            except OSError:
                pass


def _probe_flock(folder: str) -> bool:
    """Whether ``flock`` works in ``folder`` (tried on a file of its own, then removed)."""
    import fcntl

    probe = f"{folder}/.flock-probe-{os.getpid()}-{threading.get_ident()}"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in _NO_FLOCK:
            raise
        return False
    finally:
        os.close(fd)
        os.unlink(probe)
    return True


def _stale(holder: str, age: float) -> bool:
    """Whether a lock file with ``holder`` ("pid host"), last refreshed ``age`` seconds ago, is stale."""
    if age > STALE:
        return True
    pid_text, _, host = holder.strip().partition(" ")
    if host != _HOST or not pid_text.isdigit():
        return False  # a half-written or foreign holder: only its age tells
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, but someone else's
        return False
    return False


def _refresh(path: pathlib.Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT):
        try:
            os.utime(path)
        except OSError:
            return
