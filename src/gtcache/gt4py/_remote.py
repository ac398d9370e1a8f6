"""The hook's remote tiers: fetch into the local store on a miss, push what was compiled.

A fetched entry is verified and published into the local store (``Remote.fetch``), then
loaded from there like any local hit. Pushes run on one background thread, off the
compile path; ``flush`` (at exit) waits for them at most ``FLUSH_SECONDS``. A remote
that fails once is skipped for the rest of the process, with one warning.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from gtcache import toolchain
from gtcache.remote import Remote, RemoteError
from gtcache.store import Store

__all__ = ["FLUSH_SECONDS", "RemoteTiers"]

#: How long the exit waits for pushes still under way (then they are dropped).
FLUSH_SECONDS = 30.0


class RemoteTiers:
    """The remotes of one hook. After ``os.fork`` the child gets a queue and push thread of
    its own (the parent's thread does not exist there; the parent's queued pushes are the
    parent's): a forked worker's compiles are pushed, and its exit waits only for them."""

    def __init__(self, remotes: tuple[Remote, ...], warn: Callable[[str, str], None]):
        self.remotes = remotes
        self._warn = warn
        self._facts: dict[str, Any] | None = None
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._pending = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        #: Objects fetched and pushed by this process (for tests and the log).
        self.fetched = 0
        self.pushed = 0
        _live.add(self)

    def _after_fork_in_child(self) -> None:
        self._jobs = collections.deque()
        self._pending = 0
        self._cond = threading.Condition()
        self._thread = None

    def _usable(self, writable: bool = False) -> list[Remote]:
        return [r for r in self.remotes if r.broken is None and (r.writable or not writable)]

    def _failed(self, remote: Remote, error: RemoteError, refused: str = "compiling it here") -> None:
        """Warn of ``error``: a remote that failed is skipped from now on; an object it refused
        (read: this entry is compiled here; pushed: the entry stays local) is the entry's."""
        if remote.broken is not None:
            self._warn(str(error), "skipped for the rest of this process")
        else:
            self._warn(str(error), refused)

    def fetch(self, store: Store, key: str) -> Remote | None:
        """The remote entry ``key`` came from into ``store``, or None."""
        for remote in self._usable():
            try:
                if remote.fetch(store, key, facts=self._current_facts()):
                    self.fetched += 1
                    return remote
            except RemoteError as error:
                self._failed(remote, error)
        return None

    def build_key_of(self, direct_key: str) -> tuple[str, Remote] | None:
        """(build key, remote) of the first verified direct link a remote holds."""
        for remote in self._usable():
            try:
                build_key = remote.build_key_of(direct_key)
                if build_key is not None:
                    return build_key, remote
            except RemoteError as error:
                self._failed(remote, error)
        return None

    def fetch_from(self, remote: Remote, store: Store, key: str) -> bool:
        """Entry ``key`` from ``remote`` into ``store``; whether it is there now."""
        if remote.broken is not None:
            return False
        try:
            if remote.fetch(store, key, facts=self._current_facts()):
                self.fetched += 1
                return True
        except RemoteError as error:
            self._failed(remote, error)
        return False

    def push(self, store: Store, key: str | None, direct_key: str | None) -> None:
        """Push entry ``key`` and the link ``direct_key`` -> ``key`` to every writable remote, later."""
        if key is None or not self._usable(writable=True):
            return

        def job() -> None:
            for remote in self._usable(writable=True):
                try:
                    if remote.push(store, key):
                        self.pushed += 1
                    if direct_key is not None:
                        remote.push_direct(direct_key, key)
                except RemoteError as error:
                    self._failed(remote, error, "kept in the local store only")
                except Exception as error:  # a push is a courtesy, never a failure
                    self._warn(f"cannot push entry '{key}' to '{remote.name}': {error!r}", "not pushed")

        with self._cond:
            self._jobs.append(job)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gtcache-push", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs))
                job = self._jobs.popleft()
            try:
                job()
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def flush(self, timeout: float = FLUSH_SECONDS) -> bool:
        """Wait (at most ``timeout`` s) for the pushes under way; whether all finished."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._pending == 0, timeout)
        if not done:
            self._warn(f"{self._pending} pushes to remotes still under way after {timeout:g} s", "they are dropped")
        return done

    def _current_facts(self) -> dict[str, Any]:
        if self._facts is None:
            self._facts = toolchain.current_facts()
        return self._facts


_live: weakref.WeakSet[RemoteTiers] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tiers in list(_live):
        tiers._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
