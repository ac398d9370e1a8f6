"""Ending a warm worker's processes: the worker leads a session of its own
(``start_new_session``), and every process it starts stays in that session, whatever
process group it is put in (ninja starts each compile command in a group of its own, so
a signal to the worker's group misses the compilers: a timeout's SIGKILL left them running).

A session's id is its leader's pid, which the kernel does not hand out again while any
process of the session lives: what holds that id after the worker ended is what it left.
"""

from __future__ import annotations

import contextlib
import os
import pathlib


def members(leader: int) -> list[int] | None:
    """The processes of the session ``leader`` leads (Linux's ``/proc``), or None where
    that cannot be read."""
    try:
        entries = list(pathlib.Path("/proc").iterdir())
    except OSError:
        return None
    found = []
    for entry in entries:
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_bytes().rpartition(b")")[2].split()
                if int(fields[3]) == leader:  # (state, ppid, pgrp, session, ...)
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue  # (ended meanwhile)
    return found


def signal_session(leader: int, signum: int) -> None:
    """Send ``signum`` to every process of the session ``leader`` leads, this process
    last if it is one of them (and to its process group where ``/proc`` cannot be read)."""
    found = members(leader)
    if found is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signum)
        return
    me = os.getpid()
    for pid in sorted(found, key=lambda pid: pid == me):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
