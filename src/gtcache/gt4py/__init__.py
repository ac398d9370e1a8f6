"""The gt4py side of gtcache: the only package that imports gt4py.

``compile_variant`` compiles (or loads) program variants through a store with
gt4py's own ``Program.compile``; ``publish_artifact`` and ``load_entry`` are the
lower-level halves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gtcache.gt4py._serve import (
    GtcacheWarning,
    LoadedArtifact,
    Outcome,
    load_entry,
    publish_artifact,
    serving,
)
from gtcache.store import Store

__all__ = [
    "GtcacheWarning",
    "LoadedArtifact",
    "Outcome",
    "compile_variant",
    "load_entry",
    "publish_artifact",
    "serving",
]


def compile_variant(
    store: Store,
    program: Any,
    *,
    backend: Any = None,
    offset_provider: Mapping[str, Any] | None = None,
    static_args: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[Any, list[Outcome]]:
    """Compile ``program`` for the given variants through ``store``: load hits, publish misses.

    ``static_args`` map parameter names to lists of values (as ``Program.compile``
    takes them). Returns the program bound to ``backend`` with the variants
    ready in its pool, and what happened to each variant.
    """
    bound = program.with_backend(backend) if backend is not None else program
    outcomes: list[Outcome] = []
    with serving(store, outcomes):
        bound.compile(offset_provider=dict(offset_provider or {}), **{
            name: list(values) for name, values in (static_args or {}).items()
        })
    return bound, outcomes
