"""Publishing compiled artifacts into a store and loading them back."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from gtcache._frozen import Frozen
from gtcache import toolchain as _toolchain
from gtcache.gt4py import codecs
from gtcache.store import Entry, EntryDraft, Store

__all__ = ["LoadedArtifact", "artifact_of", "load_entry", "publish_artifact"]


class LoadedArtifact(Frozen):
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
    return codecs.decode(
        entry.record.artifact, entry.path, files={f.path for f in entry.record.files}, key=entry.key
    )


def load_entry(entry: Entry, backend: Any, *, store: Store) -> Callable[..., Any]:
    """Check an entry's files against their checksums, rebuild its artifact and load it."""
    return backend.load_artifact(artifact_of(entry, store=store))  # type: ignore[no-any-return]


def _gpu_runtime(files: Mapping[str, Any], kind: str, version: str | None) -> str:
    """The GPU runtime library a payload needs: the shared one it names (``libcudart.so.13``,
    ``libamdhip64.so.6``), else the toolkit's, linked in (CMake's default for CUDA): then the
    node's driver must support that toolkit version."""
    marker = b"libcudart.so." if kind == "cuda" else b"libamdhip64.so."
    for name, source in files.items():
        if ".so" not in name:
            continue
        try:
            data = source if isinstance(source, bytes) else pathlib.Path(source).read_bytes()
        except OSError:
            continue
        at = data.find(marker)
        if at >= 0:
            end = at + len(marker)
            while end < len(data) and data[end : end + 1] in b"0123456789.":
                end += 1
            return data[at:end].decode("ascii").rstrip(".")
    name = "CUDA" if kind == "cuda" else "HIP"
    return f"static ({name} {version or '?'}: the driver must support it)"


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
    kind = _toolchain.gpu_kind(str(ingredients.get("device", {}).get("type", "CPU")))
    if kind is not None:  # for the record: the toolkit's version and the runtime the payload needs
        version = _toolchain.toolkit_version(kind)
        toolchain["toolkit_version"] = version
        toolchain["gpu_runtime"] = _gpu_runtime(encoded.files, kind, version)
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
