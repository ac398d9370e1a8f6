"""Settings resolved once, at the entry point, from arguments and the environment."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

import platformdirs

from gtcache.errors import GtcacheError

__all__ = ["Settings"]

#: Environment variables gtcache reads (documented in docs/configuration.md).
ENV_CACHE_DIR = "GTCACHE_DIR"
ENV_INDEX_DIR = "GTCACHE_INDEX_DIR"
ENV_ENABLE = "GTCACHE"
ENV_SELF_CHECK = "GTCACHE_SELF_CHECK"
ENV_EXPLAIN = "GTCACHE_EXPLAIN"
ENV_READONLY_DIRS = "GTCACHE_READONLY_DIRS"
ENV_PROMOTE = "GTCACHE_PROMOTE"
ENV_LOCKING = "GTCACHE_LOCKING"
ENV_WAIT = "GTCACHE_WAIT"
LOCKING_METHODS = ("auto", "flock", "files")
_TRUE = ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where the store and its index live, and how the gt4py hook behaves."""

    cache_dir: pathlib.Path
    #: ``None``: the index lives inside the store (``<cache_dir>/index``).
    index_dir: pathlib.Path | None = None
    #: Whether the start-up hook installs itself (``GTCACHE_DIR`` set, or ``GTCACHE=1``).
    enabled: bool = False
    #: Compute both keys on every direct hit and report disagreements (``GTCACHE_SELF_CHECK=1``).
    self_check: bool = False
    #: Log, on every miss, which key ingredients differ from the nearest entry (``GTCACHE_EXPLAIN=1``).
    explain: bool = False
    #: Read-only stores consulted after ``cache_dir``, in order (``GTCACHE_READONLY_DIRS``,
    #: separated by ``os.pathsep``): e.g. a shared store CI filled. Never written.
    readonly_dirs: tuple[pathlib.Path, ...] = ()
    #: Copy entries found in a read-only store into ``cache_dir`` (``GTCACHE_PROMOTE=1``).
    promote: bool = False
    #: How processes lock a store (``GTCACHE_LOCKING``): "auto" (``flock``, lock files where
    #: the file system has no ``flock``), "flock" or "files" (see ``gtcache.store._lock``).
    locking: str = "auto"
    #: Seconds a process waits for another one compiling the same variant before compiling
    #: it too (``GTCACHE_WAIT``); 0: never wait.
    wait: float = 600.0

    @classmethod
    def from_env(
        cls,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Settings:
        """Arguments win over ``GTCACHE_DIR`` / ``GTCACHE_INDEX_DIR``, which win over defaults.

        A bad value of ``GTCACHE_LOCKING`` or ``GTCACHE_WAIT`` raises ``GtcacheError``.
        """
        env = os.environ if env is None else env
        locking = env.get(ENV_LOCKING, "").strip().lower() or "auto"
        if locking not in LOCKING_METHODS:
            raise GtcacheError(f"{ENV_LOCKING}={locking!r} is not one of {', '.join(LOCKING_METHODS)}.")
        wait_text = env.get(ENV_WAIT, "").strip()
        try:
            wait = float(wait_text) if wait_text else 600.0
        except ValueError:
            wait = -1.0
        if not 0 <= wait < float("inf"):
            raise GtcacheError(f"{ENV_WAIT}={wait_text!r} is not a number of seconds >= 0.")
        chosen = cache_dir or env.get(ENV_CACHE_DIR) or platformdirs.user_cache_dir("gtcache")
        chosen_index = index_dir or env.get(ENV_INDEX_DIR) or None
        enable = env.get(ENV_ENABLE, "").strip().lower()
        return cls(
            cache_dir=pathlib.Path(chosen).expanduser().absolute(),
            index_dir=pathlib.Path(chosen_index).expanduser().absolute() if chosen_index else None,
            enabled=enable in _TRUE or (bool(env.get(ENV_CACHE_DIR)) and enable not in ("0", "false", "no", "off")),
            self_check=env.get(ENV_SELF_CHECK, "").strip().lower() in _TRUE,
            explain=env.get(ENV_EXPLAIN, "").strip().lower() in _TRUE,
            readonly_dirs=tuple(
                pathlib.Path(p).expanduser().absolute()
                for p in env.get(ENV_READONLY_DIRS, "").split(os.pathsep) if p.strip()
            ),
            promote=env.get(ENV_PROMOTE, "").strip().lower() in _TRUE,
            locking=locking,
            wait=wait,
        )
