"""Publishing compiled artifacts into a store and loading them back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from gtcache import toolchain as _toolchain
from gtcache.gt4py import codecs
from gtcache.store import Entry, EntryDraft, Store

__all__ = ["LoadedArtifact", "artifact_of", "load_entry", "publish_artifact"]


@dataclasses.dataclass(frozen=True)
class LoadedArtifact:
    """An already-loaded program in the shape gt4py's pool expects of an artifact.

    ``backend.load_artifact`` calls ``load()``; dace's backend then sets its
    workspace again on the program (idempotent).
    """

    program: Callable[..., Any]

    def load(self) -> Callable[..., Any]:
        return self.program


def artifact_of(entry: Entry, *, store: Store) -> Any:
    """Check an entry's files against their checksums and rebuild its artifact."""
    store.verify_payload(entry)
    return codecs.decode(entry.record.artifact, entry.path)


def load_entry(entry: Entry, backend: Any, *, store: Store) -> Callable[..., Any]:
    """Check an entry's files against their checksums, rebuild its artifact and load it."""
    return backend.load_artifact(artifact_of(entry, store=store))  # type: ignore[no-any-return]


def publish_artifact(
    store: Store,
    artifact: Any,
    *,
    key: str,
    ingredients: Mapping[str, Any],
    program: Mapping[str, str],
    compile_seconds: float,
) -> Entry:
    """Publish a compiled artifact under ``key``; ``UnsupportedArtifactError`` if it cannot be."""
    encoded = codecs.encode(artifact, device_arch=ingredients.get("device", {}).get("arch"))
    toolchain = {
        name.removeprefix("toolchain."): value
        for name, value in ingredients.items()
        if name.startswith("toolchain.")
    }
    if toolchain.get("cxx"):  # readable, for the record only (not a key ingredient)
        toolchain["cxx_version"] = _toolchain.compiler_version()
    draft = EntryDraft(
        key=key,
        ingredients=dict(ingredients),
        program=dict(program),
        backend={
            "name": ingredients["backend"],
            "options": {"fingerprint": ingredients["backend_config"]},
        },
        device=encoded.device,
        toolchain=toolchain,
        artifact=encoded.description,
        compile_seconds=compile_seconds,
    )
    return store.publish(draft, encoded.files)
