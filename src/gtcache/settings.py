"""Settings resolved once, at the entry point, from arguments and the environment."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

import platformdirs

__all__ = ["Settings"]

#: Environment variables gtcache reads (documented in docs/configuration.md).
ENV_CACHE_DIR = "GTCACHE_DIR"
ENV_INDEX_DIR = "GTCACHE_INDEX_DIR"
ENV_ENABLE = "GTCACHE"
ENV_SELF_CHECK = "GTCACHE_SELF_CHECK"
ENV_EXPLAIN = "GTCACHE_EXPLAIN"
ENV_READONLY_DIRS = "GTCACHE_READONLY_DIRS"
ENV_PROMOTE = "GTCACHE_PROMOTE"
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

    @classmethod
    def from_env(
        cls,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Settings:
        """Arguments win over ``GTCACHE_DIR`` / ``GTCACHE_INDEX_DIR``, which win over defaults."""
        env = os.environ if env is None else env
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
        )
