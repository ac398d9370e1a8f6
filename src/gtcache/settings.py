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


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where the store and its index live."""

    cache_dir: pathlib.Path
    #: ``None``: the index lives inside the store (``<cache_dir>/index``).
    index_dir: pathlib.Path | None = None

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
        return cls(
            cache_dir=pathlib.Path(chosen).expanduser().absolute(),
            index_dir=pathlib.Path(chosen_index).expanduser().absolute() if chosen_index else None,
        )
