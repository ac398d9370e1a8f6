"""Ending a warm worker's session: what it left is ended, and only that (real processes,
real pid reuse; the workers are small Python programs, no compiles)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from gtcache.warm.run import Workers, _run_worker
from tests.helpers import can_give_pids, process_given_pid

#: A worker that starts a process in its session (``sleep``, as ninja starts a compiler, its
#: output not the worker's), prints that one's pid and dies of a signal, leaving it running.
LEAVES_A_PROCESS = """
import os, signal, subprocess
left = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(left.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def test_what_a_failed_worker_left_in_its_session_is_ended() -> None:
    code, out, _ = _run_worker([sys.executable, "-c", textwrap.dedent(LEAVES_A_PROCESS)], dict(os.environ), 60, None)
    left = int(out.split()[0])
    assert code == -9
    deadline = time.monotonic() + 10
    while _alive(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(left), "the process the dead worker left is ended with its session"


def test_a_worker_past_its_timeout_is_ended_with_its_session() -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        _run_worker([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), 0.5, None)
    assert time.monotonic() - started < 10


class _GivingAwayThePid(Workers):
    """The run's workers; as one is done (``ended``: before the run's last kill of the
    worker's session, if it did not end well), the kernel gives the worker's pid, if it is
    free by then, to a process of uid 65534 that leads a session of its own: what any
    process on the machine may get."""

    def __init__(self) -> None:
        super().__init__()
        self.taker: subprocess.Popen[bytes] | None = None
        self.held = False

    def ended(self, proc: subprocess.Popen[str]) -> None:
        super().ended(proc)
        for _ in range(50):  # (another fork on the machine may take the pid first)
            if os.path.exists(f"/proc/{proc.pid}"):
                self.held = True  # still the worker's (a zombie, not reaped yet), or the other fork's
                return
            self.taker = process_given_pid(proc.pid, 65534, session=True)
            if self.taker is not None:
                return


def test_a_warm_never_signals_a_session_that_took_its_dead_workers_pid() -> None:
    """A worker fails (exit 3) leaving nothing; the run then kills its session, in case it
    left compilers. Were the worker reaped first, its pid would be free: a process of another
    user given it that leads a session of its own (its id: that pid) would be taken for the
    worker's session and killed, by a warm running as root, whoever's it is. Catches: the
    worker reaped (``Popen.communicate``) before the session's kill. The pid is the worker's,
    a zombie's, until the run no longer signals its session."""
    if not can_give_pids():
        pytest.skip("the pid counter cannot be set here (ns_last_pid): no pid to reuse on purpose")
    workers = _GivingAwayThePid()
    try:
        code, _, _ = _run_worker([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), 60, workers)
        assert code == 3
        if workers.taker is not None:
            time.sleep(0.5)  # (a signal the run sent has ended it by now)
            assert workers.taker.poll() is None, "the session that took the pid was killed"
        assert (workers.held, workers.taker) == (True, None), "the pid was still the worker's when the run let it go"
    finally:
        if workers.taker is not None:
            workers.taker.kill()
            workers.taker.wait()


#: A session leader (argv: none) with one more process in its session (``sleep``, whose pid
#: it prints), which it reaps when it ends; then it waits for its stdin to close.
LEADER = """
import subprocess, sys
member = subprocess.Popen(["sleep", "600"])
print(member.pid, flush=True)
member.wait()
print("reaped", flush=True)
sys.stdin.read()
"""


def test_a_listed_process_whose_pid_went_to_another_since_is_not_signalled() -> None:
    """The processes of a session are listed, then signalled one by one; one that ended in
    between, its pid given to a process of uid 65534 that leads a session of its own, is not
    signalled (the others are). Catches: ``kill`` on each listed pid (the new process got the
    session's SIGKILL)."""
    import signal

    from gtcache.warm._session import members, signal_listed

    if not can_give_pids():
        pytest.skip("the pid counter cannot be set here (ns_last_pid): no pid to reuse on purpose")
    leader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LEADER)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, start_new_session=True)
    taker = None
    try:
        assert leader.stdout is not None
        member = int(leader.stdout.readline())
        listed = members(leader.pid)
        assert listed is not None and sorted(listed) == sorted([leader.pid, member])
        os.kill(member, signal.SIGKILL)  # it ends after it was listed
        assert leader.stdout.readline().split() == [b"reaped"], "its pid is free"
        for _ in range(50):  # (another fork on the machine may take the pid first)
            taker = process_given_pid(member, 65534, session=True)
            if taker is not None:
                break
        assert taker is not None, "the pid could not be reused on purpose in 50 tries"
        signal_listed(listed, leader.pid, signal.SIGKILL)
        assert leader.wait(10) == -signal.SIGKILL, "a process still of the session gets the signal"
        time.sleep(0.5)  # (a signal sent to it has ended it by now)
        assert taker.poll() is None, "the process given the ended member's pid was signalled"
    finally:
        for proc in (leader, taker):
            if proc is not None:
                proc.kill()
                proc.wait()
