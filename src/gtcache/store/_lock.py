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
  system, Lustre and NFSv3+ included), holding ``pid host`` and the holder's start
  time; the holder refreshes its modification time every ``HEARTBEAT`` seconds
  (through transient errors, until released). A lock file is stale when its process
  is gone (same host) or it has not been refreshed for ``STALE`` seconds (any host),
  and the next contender takes it over.
- ``auto`` (default): ``flock``, and ``files`` in every folder whose file
  system answers ``flock`` with ENOSYS, EOPNOTSUPP or ENOLCK (Lustre mounted
  without ``flock``, some NFS set-ups).

Taking a stale lock file over. Its age is judged by the file system's clock,
not this host's: a new probe file's modification time (set by the file server
on NFS) minus the lock's (set by its holder's refreshes, through the same
server), so a holder on a host whose clock is off is not judged by it. The
contender remembers which file it judged stale (inode, modification time and
holder: file systems reuse a freed inode at once). Contenders take over one at
a time: each first creates ``<name>.lock.break`` (with ``O_EXCL``; removed when
done), checks again that the path still names the judged file and renames it
aside. While the stale file is there no lock can be created, so nothing else
changes what the path names meanwhile, and many contenders judging one stale
lock end with one holder. (Without the break file, one contender could move
aside the fresh lock of another's takeover, and a third create the lock before
it was put back.) What was moved is checked once more: anything but the judged
file is linked back. A break file left by a contender that died is stale as a
lock file is, and removed the same way. Two hold the lock only if a live holder
is judged stale (not refreshed for ``STALE`` seconds), or two contenders remove
a dead contender's break file at once; no harm comes of that (the work is done
twice).

Telling a dead holder from a reused pid. ``kill(pid, 0)`` says only that *some* process
has the pid: once the holder died the kernel may hand its pid to another process, and
``kill`` then succeeds (or answers EPERM, for another user's process): the lock stood
until ``STALE``, every contender waiting up to its ``GTCACHE_WAIT``. So a lock file also records
its holder's start time (``starttime``, field 22 of ``/proc/<pid>/stat``: clock ticks since
boot, fixed for a process's life), and a live process with the pid but another start time
is not the holder: the lock is stale. With it goes the holder's pid namespace (the inode of
``/proc/self/ns/pid``): a pid recorded in another namespace (a container of the same host
name) names no process here, and such a lock file is judged by its age alone, as another
host's. The file reads ``pid host``, spaces up to byte 256, then ``started <ticks> pidns
<inode>``: older gtcache reads only the first 256 bytes and strips them, so it still reads
``pid host`` and judges as it did. A lock file without them (an older gtcache's, one
half-written, or its holder's ``/proc`` unreadable or another namespace's) and a holder
whose ``/proc/<pid>/stat`` this contender may not read (``hidepid``) are judged by ``kill``
alone, as before.

Lock files get the store's file mode (``Store.modes``): group-writable in a
group-shared store, so that its members can lock and take over each other's locks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import socket
import threading
import time

from gtcache.errors import GtcacheError
from gtcache.settings import LOCKING_METHODS
from gtcache.store import _files

__all__ = ["StoreLock", "flock_works"]

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

    def __init__(self, path: pathlib.Path, method: str = "auto", *, mode: int = 0o644):
        if method not in LOCKING_METHODS:
            raise GtcacheError(f"Unknown locking method '{method}' (choose from {', '.join(LOCKING_METHODS)}).")
        self.path = path
        self.method = method
        #: Permission bits of the lock file, whatever the umask.
        self.mode = mode
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

        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, self.mode)
        except FileExistsError:
            try:
                fd = os.open(self.path, flags)
            except FileNotFoundError:  # removed by its holder meanwhile
                return False
        else:
            try:
                os.fchmod(fd, self.mode)  # what the umask took away
            except BaseException:
                os.close(fd)
                raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The holder before us may have removed the file after we opened it.
            held = os.fstat(fd)
            if held.st_ino != os.stat(self.path, follow_symlinks=False).st_ino:
                raise FileNotFoundError
            if held.st_mode & 0o777 & ~self.mode and held.st_uid == os.geteuid():
                # A lock file its dead holder left, made by an older gtcache readable by
                # others (who could then hold it): as private as new ones from now on.
                with contextlib.suppress(OSError):
                    os.fchmod(fd, self.mode)
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
            fd = os.open(self.path, _CREATE, self.mode)
        except FileExistsError:
            stale = _judge_stale(self.path)
            if stale is not None:
                self._take_over(stale)
            return False
        try:
            os.fchmod(fd, self.mode)
            os.write(fd, _holder())
            self._ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        beat = threading.Event()
        threading.Thread(
            target=_refresh, args=(self.path, self._ino, beat), daemon=True, name="gtcache-lock"
        ).start()
        self._heartbeat = beat
        return True

    def _take_over(self, stale: _Identity) -> None:
        """Remove the lock file if it is still the one judged ``stale``; never a fresh lock."""
        # One contender at a time, holding the break file (see the module docstring).
        breaking = self.path.with_name(f"{self.path.name}.break")
        try:
            fd = os.open(breaking, _CREATE, self.mode)
        except FileExistsError:  # another contender is at it, or died at it
            other = _judge_stale(breaking)
            if other is not None:
                _remove_if_still(breaking, other)
            return
        except OSError:
            return
        try:
            try:
                os.fchmod(fd, self.mode)
                os.write(fd, _holder())
            finally:
                os.close(fd)
            _remove_if_still(self.path, stale)
        finally:
            try:
                os.unlink(breaking)
            except OSError:
                pass


#: What tells two lock files at one path apart: inode (reused at once by many file
#: systems), modification time (refreshed by a live holder) and holder ("pid host").
_Identity = tuple[int, int, str]


#: Flags that create a lock file (or break file) only if none is there.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


#: The bytes of a lock file older gtcache read (and stripped): ``pid host`` is padded to them.
_OLD_HOLDER_BYTES = 256
#: The bytes of a lock file read: ``pid host``, the padding, ``started <ticks> pidns <inode>``.
_HOLDER_BYTES = 512
#: This process's start time and pid namespace (``_own_process``), by pid: a forked child is another process.
_own: dict[int, tuple[str, str] | None] = {}


def _own_process() -> tuple[str, str] | None:
    """This process's start time (``start_ticks``) and pid namespace (the inode of
    ``/proc/self/ns/pid``); None where ``/proc`` cannot tell them, or is another pid
    namespace's (its ``self`` is not this pid: a ``/proc`` not mounted anew in a container)."""
    pid = os.getpid()
    if pid not in _own:
        try:
            ours = os.readlink("/proc/self") == str(pid)
            namespace = str(os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            ours, namespace = False, ""
        ticks = start_ticks(pid) if ours else None
        _own[pid] = (ticks, namespace) if ticks is not None else None
    return _own[pid]


def _holder() -> bytes:
    """What a lock file holds: ``pid host``, padded for older gtcache, then ``started <ticks>
    pidns <inode>`` (see the module docstring); ``pid host`` alone where ``/proc`` cannot
    tell this process's start time."""
    first = f"{os.getpid()} {_HOST}\n".encode()
    own = _own_process()
    if own is None:
        return first
    return first.ljust(_OLD_HOLDER_BYTES, b" ") + f"started {own[0]} pidns {own[1]}\n".encode()


def start_ticks(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``, field 22:
    fixed for the process's life, so another process given the pid later has another), as
    text; None where it cannot be read (no ``/proc``, no such process, ``hidepid``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()  # (the name may hold spaces and parentheses)
        ticks = fields[19].decode("ascii")
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    return ticks if ticks.isdigit() else None


def _judge_stale(path: pathlib.Path) -> _Identity | None:
    """Who the lock file at ``path`` is, if it is stale (its holder and age read from one open file)."""
    try:
        ino, mtime_ns, holder = _identity(path)
    except OSError:  # released meanwhile: the next try may get it
        return None
    if not _stale(holder, lock_age(mtime_ns / 1e9, fs_now(path.parent))):
        return None
    return ino, mtime_ns, holder


def _remove_if_still(path: pathlib.Path, stale: _Identity) -> None:
    """Remove the file at ``path`` if it is still the one judged ``stale``."""
    try:
        if _identity(path) != stale:
            return  # a contender took it over first
    except OSError:
        return
    # Should the path name another file by now (see the module docstring for when),
    # the rename moves that one: put it back.
    aside = path.with_name(f"{path.name}.stale-{os.getpid()}-{threading.get_ident()}")
    try:
        os.rename(path, aside)
    except OSError:
        return
    try:
        if _identity(aside) != stale:
            os.link(aside, path)  # a live lock: put it back unless taken again
    except OSError:
        pass
    finally:
        try:
            os.unlink(aside)
        except OSError:
            pass


def _identity(path: pathlib.Path) -> _Identity:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        return st.st_ino, st.st_mtime_ns, os.read(fd, _HOLDER_BYTES).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _probe_flock(folder: str) -> bool:
    """Whether ``flock`` works in ``folder`` (tried on a file of its own, made anew, never
    through a symlink, then removed)."""
    probe = f"{folder}/.flock-probe-{_files.unique_name('')}"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        return flock_works(fd)
    finally:
        os.close(fd)
        os.unlink(probe)


def flock_works(fd: int) -> bool:
    """Whether ``flock`` works on the file system of the open file ``fd``: a shared lock
    taken and let go at once (nothing is written); False where the file system has none
    (ENOSYS, EOPNOTSUPP, ENOLCK: Lustre without ``flock``, NFS without a lock manager)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in _NO_FLOCK:
            return False
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):  # held exclusively: it works
            raise
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _stale(holder: str, age: float) -> bool:
    """Whether a lock file with ``holder`` (what ``_holder`` wrote), last refreshed ``age``
    seconds ago, is stale."""
    if age > STALE:
        return True
    first, _, rest = holder.partition("\n")
    pid_text, _, host = first.strip().partition(" ")
    if host != _HOST or not pid_text.isdigit():
        return False  # a half-written or foreign holder: only its age tells
    words = rest.split()
    recorded = dict(zip(words[::2], words[1::2], strict=False))  # started <ticks> pidns <inode>; none: older gtcache's
    own = _own_process()
    if "pidns" in recorded and (own is None or recorded["pidns"] != own[1]):
        return False  # a pid of another pid namespace (a container of this host name): only its age tells
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, but someone else's: the holder, or a process given its pid since
        pass
    started = recorded.get("started", "")
    if not started.isdigit() or own is None:
        return False  # an older gtcache's lock file (or one half-written): the pid alone tells
    now = start_ticks(int(pid_text))
    # Another start time: the holder died and its pid went to another process. None: this
    # contender may not read the process's /proc entry (hidepid): judged alive, as before.
    return now is not None and now != started


def fs_now(folder: pathlib.Path) -> float:
    """The file system's clock in ``folder``: the modification time of a new probe file.

    On NFS the server sets it, as it sets the times of the lock's refreshes; this
    host's ``time.time()`` when no file can be made here.
    """
    probe = f"{folder}/.clock-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return time.time()
    try:
        return os.fstat(fd).st_mtime
    except OSError:
        return time.time()
    finally:
        os.close(fd)
        try:
            os.unlink(probe)
        except OSError:
            pass


def lock_age(lock_mtime: float, now: float) -> float:
    """Seconds since a lock was refreshed, both times from the file system's clock."""
    return now - lock_mtime


def _refresh(path: pathlib.Path, ino: int, stop: threading.Event) -> None:
    """Refresh the lock file ``ino`` every ``HEARTBEAT`` until ``stop``; errors are retried
    (a file server that does not answer for a while); stops if the lock was taken over."""
    while not stop.wait(HEARTBEAT):
        try:
            if os.stat(path, follow_symlinks=False).st_ino != ino:
                return  # broken as stale and taken by another: not ours to refresh
            os.utime(path)
        except FileNotFoundError:
            return  # taken over, or released
        except OSError:
            continue
