"""Ending a warm worker's processes: the worker leads a session of its own
(``start_new_session``), and every process it starts stays in that session, whatever
process group it is put in (ninja starts each compile command in a group of its own, so
a signal to the worker's group misses the compilers: a timeout's SIGKILL left them running).

A session's id is its leader's pid, which the kernel does not hand out again while any
process of the session lives, the leader's zombie included: what holds that id after the
worker ended is what it left. Once the worker is reaped and nothing it left lives, the pid
is free, and a process given it that starts a session of its own (anyone's: a warm run as
root signals every user's) would be taken for the worker's. So the warm run signals a
worker's session only before it reaps the worker (``exit_status`` waits without reaping).

The processes of a session are listed from ``/proc``, then signalled one by one: one that
ended in between may have had its pid given to another process, not of the session. Each
is held by a pidfd while its session is read again, and signalled through that pidfd, so
only a process that is still the session's gets the signal (``kill`` where the kernel has
no pidfds, before Linux 5.3: there a listed process that ended and whose pid went to
another process within that moment, a whole cycle of the pid counter, could be hit).
"""

from __future__ import annotations

import contextlib
import os
import signal


def _session_of(pid: int) -> int | None:
    """The session of process ``pid`` (``/proc``), or None (ended, or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rpartition(b")")[2].split()[3])  # (state, ppid, pgrp, session, ...)
    except (OSError, ValueError, IndexError):
        return None


def members(leader: int) -> list[int] | None:
    """The processes of the session ``leader`` leads (Linux's ``/proc``), or None where
    that cannot be read."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    return [int(name) for name in names if name.isdigit() and _session_of(int(name)) == leader]


def signal_session(leader: int, signum: int) -> None:
    """Send ``signum`` to every process of the session ``leader`` leads, this process
    last if it is one of them (and to its process group where ``/proc`` cannot be read)."""
    found = members(leader)
    if found is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signum)
        return
    signal_listed(found, leader, signum)


def signal_listed(listed: list[int], leader: int, signum: int) -> None:
    """Send ``signum`` to each of the processes ``listed`` as the session ``leader`` leads
    that still is one of them (see the module docstring), this process last."""
    me = os.getpid()
    for pid in sorted(listed, key=lambda pid: pid == me):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pid == me:
                os.kill(pid, signum)
                continue
            try:
                held = os.pidfd_open(pid)
            except (AttributeError, OSError) as error:  # no pidfds (this kernel, this platform): kill
                if isinstance(error, ProcessLookupError):
                    continue  # (ended meanwhile)
                if _session_of(pid) == leader:
                    os.kill(pid, signum)
                continue
            try:
                if _session_of(pid) == leader:  # the process held, as long as it lives
                    signal.pidfd_send_signal(held, signum)
            finally:
                os.close(held)


def exit_status(pid: int) -> int | None:
    """The exit status of this process's ended child ``pid``, as ``Popen.returncode`` has it
    (negative: the signal that ended it), without reaping it (``waitid`` with ``WNOWAIT``): its
    pid, its session's id, stays its own until it is reaped. None while it runs; 0 when
    something else reaped it (as ``Popen`` says then; its session is then never signalled)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
    except ChildProcessError:
        return 0
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
