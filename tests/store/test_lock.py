"""Locks between real processes, with flock and with flock taken away (as on Lustre without it)."""

from __future__ import annotations

import os
import pathlib
import queue
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from gtcache.store._lock import STALE, StoreLock, _judge_stale, start_ticks
from tests.helpers import can_give_pids, process_given_pid, run_python

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
    assert path.read_bytes()[:256].decode().strip().split() == [str(os.getpid()), socket.gethostname()], (
        "the 256 bytes older gtcache reads (and strips): 'pid host', judged as they always were"
    )
    assert path.read_text().split() == [str(os.getpid()), socket.gethostname(), "started", start_ticks(os.getpid()),
                                        "pidns", str(os.stat("/proc/self/ns/pid").st_ino)]
    lock.release()


@pytest.mark.slow
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


# -- taking over stale lock files (issue 16 bug 7) -----------------------------------------------


def _stale_lock_file(path: pathlib.Path) -> None:
    """A lock file of this very process (as a thread whose heartbeat died leaves), not refreshed for long."""
    path.write_text(f"{os.getpid()} {socket.gethostname()}\n")
    old = time.time() - STALE - 5
    os.utime(path, (old, old))


def test_two_contenders_judging_one_stale_lock_end_with_one_holder(tmp_path: pathlib.Path) -> None:
    # The interleaving forced: B judges the stale lock, then A takes it over and holds the
    # lock, then B acts on its (now outdated) judgement. Same process, so both holders'
    # lock files read "pid host" alike; A's new file even gets the freed inode number back.
    path = tmp_path / "x.lock"
    _stale_lock_file(path)
    a, b = StoreLock(path, "files"), StoreLock(path, "files")
    judged = _judge_stale(path)
    assert judged is not None, "B finds the lock stale"
    assert not a.acquire(0), "A's first try takes the stale file over"
    assert a.acquire(0), "A's second try creates its own"
    b._take_over(judged)
    assert path.exists() and os.stat(path).st_ino == a._ino, "B must not remove A's fresh lock"
    assert not b.acquire(0), "exactly one holder"
    a.release()
    assert b.acquire(0)
    b.release()


def test_many_threads_on_one_stale_lock_never_hold_it_together(tmp_path: pathlib.Path) -> None:
    import threading

    path = tmp_path / "x.lock"
    _stale_lock_file(path)
    start = threading.Barrier(8)
    guard = threading.Lock()
    holding, most, got = 0, 0, 0

    def contend() -> None:
        nonlocal holding, most, got
        lock = StoreLock(path, "files")
        start.wait()
        if lock.acquire(timeout=20):
            with guard:
                holding += 1
                most = max(most, holding)
                got += 1
            time.sleep(0.02)
            with guard:
                holding -= 1
            lock.release()

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (most, got) == (1, 8), "one holder at a time, and every contender got its turn"
    assert not path.exists() and not list(tmp_path.glob("*.stale-*")) and not list(tmp_path.glob(".clock-*"))
    assert not list(tmp_path.glob("*.break"))


def test_a_takeover_under_way_is_not_raced_by_another(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The interleaving once seen with eight threads under load: B checks that the path still
    # names the stale file it judged; A then takes that file over and creates its lock; B's
    # rename moves A's fresh lock aside by mistake, and D creates the lock before B can link
    # A's back: A and D both held it. Takeovers one at a time leave A nothing to take over.
    path = tmp_path / "x.lock"
    _stale_lock_file(path)
    a, b, d = (StoreLock(path, "files") for _ in range(3))
    judged = _judge_stale(path)
    assert judged is not None
    real_rename, real_link = os.rename, os.link
    holders: list[StoreLock] = []

    def rename(src: object, dst: object) -> None:
        monkeypatch.setattr(os, "rename", real_rename)  # B's rename: A acts just before it
        holders.extend(lock for lock in (a, a) if lock.acquire(0))
        real_rename(src, dst)

    def link(src: object, dst: object) -> None:  # B puts back what it moved by mistake
        holders.extend(lock for lock in (d,) if lock.acquire(0))
        real_link(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "link", link)
    b._take_over(judged)
    monkeypatch.undo()
    assert holders == [], "A neither took the stale lock over nor created its own meanwhile"
    assert not path.exists(), "B removed the stale lock"
    assert d.acquire(0) and not a.acquire(0) and not b.acquire(0), "then one holder"
    d.release()
    assert not list(tmp_path.iterdir()), "no break file nor file moved aside is left"


def test_a_break_file_of_a_dead_contender_is_removed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.lock"
    _stale_lock_file(path)
    _stale_lock_file(tmp_path / "x.lock.break")  # a contender died while taking the lock over
    lock = StoreLock(path, "files")
    assert lock.acquire(timeout=2), "the break file, then the stale lock, are removed"
    lock.release()
    assert not list(tmp_path.iterdir())


def test_a_lock_is_judged_by_the_file_systems_clock_not_this_hosts(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gtcache.store._lock import fs_now, lock_age

    assert abs(fs_now(tmp_path) - time.time()) < 2, "here both clocks are the kernel's"
    assert lock_age(lock_mtime=1000.0, now=1030.0) == 30.0
    path = tmp_path / "x.lock"
    path.write_text(f"12345 not-{socket.gethostname()}\n")  # refreshed just now by a host elsewhere
    ino = os.stat(path).st_ino
    real_time = time.time
    # This host's clock runs 61 s ahead of the file server's (the writer's clock, seen from
    # here, is 61 s behind): by time.time() the lock looks stale, by the server's it is fresh.
    monkeypatch.setattr(time, "time", lambda: real_time() + STALE + 1)
    assert not StoreLock(path, "files").acquire(0.2), "a live lock elsewhere is not broken"
    assert os.stat(path).st_ino == ino


HEARTBEAT_HOLDER = """
import os, pathlib, sys
from gtcache.store import _lock
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)  # after the imports
_lock.HEARTBEAT = 0.05
lock = _lock.StoreLock(pathlib.Path(sys.argv[1]), "files")
held = lock.acquire(5)
real_stat = os.stat

def stat(path, *args, **kwargs):  # each heartbeat starts with a stat of the lock: told to the test
    if str(path) != sys.argv[1]:
        return real_stat(path, *args, **kwargs)
    try:
        found = real_stat(path, *args, **kwargs)
    except OSError:
        print("BEAT failed", flush=True)
        raise
    print("BEAT", flush=True)
    return found

os.stat = stat
print("HELD" if held else "NOT", flush=True)
sys.stdin.read()
lock.release()
"""


def test_the_heartbeat_goes_on_through_a_transient_error(tmp_path: pathlib.Path) -> None:
    import shutil
    import tempfile

    # The holder runs as nobody, so that taking its folder's permissions away stops it
    # (root ignores them): a file server that does not answer for a while.
    base = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-lock-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        folder = base / "locks"
        folder.mkdir()
        os.chown(folder, 65534, 65534)
        path = folder / "x.lock"
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(HEARTBEAT_HOLDER), str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        assert proc.stdout is not None and proc.stdin is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line.strip()) for line in proc.stdout], daemon=True).start()

        def until(line: str) -> None:  # the holder's next such line (30 s at most: a busy machine)
            while lines.get(timeout=30) != line:
                pass

        until("HELD")
        os.chmod(folder, 0)
        until("BEAT failed")
        until("BEAT failed")  # two heartbeats failed: the server does not answer
        os.chmod(folder, 0o755)
        os.utime(path, (1000, 1000))
        deadline = time.monotonic() + 30
        while os.stat(path).st_mtime <= 1000:
            assert time.monotonic() < deadline, "the holder refreshes its lock again"
            time.sleep(0.02)
        proc.stdin.close()
        proc.wait(timeout=30)
        assert proc.returncode == 0
        assert not path.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("method", ["flock", "files"])
def test_lock_files_get_the_mode_asked_whatever_the_umask(tmp_path: pathlib.Path, method: str) -> None:
    lock = StoreLock(tmp_path / "x.lock", method, mode=0o664)
    old = os.umask(0o077)
    try:
        assert lock.acquire(0)
        assert (os.stat(lock.path).st_mode & 0o777) == 0o664, "group members may lock it too"
    finally:
        os.umask(old)
        lock.release()


@pytest.mark.parametrize("written_by", ["older gtcache", "gtcache"])
def test_a_live_holder_this_contender_may_not_signal_is_never_judged_stale(written_by: str) -> None:
    """A lock file of this host whose holder is alive but another user's process (``kill``
    answers EPERM, not "no such process": here pid 1, root's, seen by an unprivileged
    contender) is held: the contender waits and gives up, the lock file stays. Taking it over
    would run the work twice at once, as a shared store's users do (a mutation audit: EPERM
    counted as dead went unnoticed; the suite's contenders all run as root). The same for a
    lock file older gtcache wrote (``pid host`` alone, no start time to compare)."""
    import shutil
    import tempfile

    folder = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-lock-", dir="/tmp"))
    try:
        os.chmod(folder, 0o777)  # the unprivileged contender may create (and take over) lock files here
        path = folder / "x.lock"
        holder = f"1 {socket.gethostname()}\n"
        if written_by == "gtcache":
            holder = holder.ljust(256) + f"started {start_ticks(1)} pidns {os.stat('/proc/self/ns/pid').st_ino}\n"
        path.write_text(holder)
        code = """
            import os, pathlib, sys
            from gtcache.store._lock import StoreLock
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            print("HELD" if StoreLock(pathlib.Path(sys.argv[1]), "files").acquire(0.3) else "NOT")
        """
        assert run_python(code, str(path)).split() == ["NOT"]
        assert path.read_text() == holder, "the holder's lock file is left as it was"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_lock_whose_dead_holders_pid_went_to_another_users_process_is_taken_over() -> None:
    """The holder dies holding a lock file; the kernel gives its pid to a process of uid 65534
    (real pid reuse); a contender of uid 1234 (``kill`` answers EPERM: someone else's, alive)
    takes the lock over at once, by the start time the lock file recorded. Catches: a reused
    pid judged the live holder, the lock standing until ``STALE`` (60 s), every contender
    waiting its ``GTCACHE_WAIT`` out. The process given the pid is left alone."""
    import shutil
    import tempfile

    if not can_give_pids():
        pytest.skip("the pid counter cannot be set here (ns_last_pid): no pid to reuse on purpose")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-lock-", dir="/tmp"))
    reuser = None
    try:
        os.chmod(folder, 0o777)  # the unprivileged contender may create (and take over) lock files here
        path = folder / "x.lock"
        for _ in range(50):  # (another fork on the machine may take the pid first)
            holder, (state, _) = start_holder(path, "files", end="die")
            assert state == "HELD"
            stop(holder)  # dead and reaped: its pid is free
            assert path.read_text().split()[:1] == [str(holder.pid)], "its lock file names it"
            reuser = process_given_pid(holder.pid, 65534)
            if reuser is not None:
                break
            path.unlink()
        assert reuser is not None, "the pid could not be reused on purpose in 50 tries"
        code = """
            import os, pathlib, sys, time
            from gtcache.store._lock import StoreLock
            os.setgroups([])
            os.setresgid(1234, 1234, 1234)
            os.setresuid(1234, 1234, 1234)
            try:
                os.kill(int(sys.argv[2]), 0)
            except PermissionError:
                print("EPERM")
            lock = StoreLock(pathlib.Path(sys.argv[1]), "files")
            started = time.monotonic()
            print("HELD" if lock.acquire(20) else "NOT", round(time.monotonic() - started))
            lock.release()
        """
        assert run_python(code, str(path), str(reuser.pid)).split() == ["EPERM", "HELD", "0"]
        assert reuser.poll() is None, "the process given the pid is left alone"
    finally:
        if reuser is not None:
            reuser.kill()
            reuser.wait()
        shutil.rmtree(folder, ignore_errors=True)


#: Takes and releases a flock lock (argv: path, marker, rounds) and counts the rounds in which
#: another process was inside too (the marker, created with O_EXCL, was there).
TAKE_AND_RELEASE = """
import os, pathlib, sys
from gtcache.store._lock import StoreLock
path, marker, rounds = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
together = 0
for _ in range(rounds):
    lock = StoreLock(path, "flock")
    while not lock.acquire(5):
        pass
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        together += 1
    else:
        os.unlink(marker)
    lock.release()
print(together)
"""


def test_processes_taking_and_releasing_a_flock_lock_at_once_never_hold_it_together(tmp_path: pathlib.Path) -> None:
    """Four processes take and release one flock lock thousands of times: never two inside at
    once. A holder removes the lock file as it releases, so a contender may lock the removed
    file it opened just before: it must see that the path names another file (or none) and
    try again (a mutation audit: without that check, hundreds of rounds had two holders,
    and no test noticed)."""
    path, marker = tmp_path / "x.lock", tmp_path / "inside"
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(TAKE_AND_RELEASE), str(path), str(marker), "2000"],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    together = [int(proc.communicate(timeout=300)[0]) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0]
    assert together == [0, 0, 0, 0]
    assert not path.exists() and not marker.exists()


def test_a_file_system_answering_flock_with_enolck_falls_back_to_lock_files(
    tmp_path: pathlib.Path, no_flock: dict[str, str]
) -> None:
    """NFS without a lock manager answers ``flock`` with ENOLCK, not ENOSYS: ``auto`` takes it
    for a file system without flock too, and locks with lock files (a mutation audit: ENOLCK
    left out of the list went unnoticed; the suite's shim answered ENOSYS only)."""
    import errno

    path = tmp_path / "x.lock"
    env = {**no_flock, "GTCACHE_TEST_FLOCK_ERRNO": str(errno.ENOLCK)}
    proc, (state, used) = start_holder(path, "auto", env=env)
    assert (state, used) == ("HELD", "files")
    assert path.read_text().split()[1] == socket.gethostname(), "a lock file, naming its holder"
    stop(proc)
    assert not path.exists()


def test_a_lock_file_taken_over_is_left_to_its_new_holder_by_the_one_it_was_taken_from(tmp_path: pathlib.Path) -> None:
    """A holder whose lock file was judged stale (it was stopped for longer than ``STALE``) and
    taken over by another contender releases only what it made: the new holder's lock file
    stays, and a third contender still finds the lock held (a mutation audit: a release that
    removed whatever lock file was at the path went unnoticed)."""
    path = tmp_path / "x.lock"
    first = StoreLock(path, "files")
    assert first.acquire(0)
    taken = tmp_path / "taken"  # the new holder's lock file, put in place as a takeover does
    taken.write_text(f"{os.getppid()} {socket.gethostname()}\n")
    os.replace(taken, path)
    first.release()
    assert path.read_text() == f"{os.getppid()} {socket.gethostname()}\n"
    assert not StoreLock(path, "files").acquire(0), "held by the new holder"


#: Holds a lock (argv: path) until stdin closes, printing what it got and its pid.
HOLDER_PID = """
import os, pathlib, sys
from gtcache.store._lock import StoreLock
lock = StoreLock(pathlib.Path(sys.argv[1]), "files")
print("HELD" if lock.acquire(5) else "NOT", os.getpid(), flush=True)
sys.stdin.read()
lock.release()
"""


def test_a_lock_held_in_another_pid_namespace_is_judged_by_its_age() -> None:
    """A holder in a pid namespace of its own (a container with this host's name) records pid 1,
    here another process (init) that started at another time: its live lock is not taken for
    a dead holder's whose pid went elsewhere, but waited for (and taken over once not refreshed
    for ``STALE``, as another host's). Catches: the start time compared across pid namespaces."""
    import tempfile

    folder = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-lock-", dir="/tmp"))
    path = folder / "x.lock"
    # pid 1 of a pid namespace of its own, with its own /proc, as in a container
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                               textwrap.dedent(HOLDER_PID), str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["HELD", "1"]
        assert "pidns" in path.read_text(), "the holder's /proc told its start time and namespace"
        lock = StoreLock(path, "files")
        assert not lock.acquire(timeout=0.5), "held, by a live process of another pid namespace"
        old = time.time() - STALE - 5
        os.utime(path, (old, old))
        assert lock.acquire(timeout=2), "not refreshed for longer than STALE: its holder is gone"
        lock.release()
    finally:
        holder.communicate("", timeout=30)
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
