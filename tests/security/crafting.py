"""Hand-made bundles for attacks: any members, with a manifest that lists them truthfully."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import pathlib
import tarfile
from collections.abc import Callable, Iterable, Sequence

import gtcache
from tests.helpers import tar_as_exported

Member = tuple[tarfile.TarInfo, bytes]


def read_members(bundle: pathlib.Path) -> list[Member]:
    """Every member of a bundle with its bytes (b"" for non-files), in archive order."""
    with tarfile.open(bundle, "r:gz") as tar:
        out = []
        for info in tar.getmembers():
            stream = tar.extractfile(info) if info.isfile() else None
            out.append((info, stream.read() if stream is not None else b""))
        return out


def payload(members: Iterable[Member]) -> list[Member]:
    return [(i, d) for i, d in members if i.name not in ("manifest.json", "signature")]


def manifest_for(members: Iterable[Member], fmt: int = 2) -> bytes:
    rows = {i.name: {"path": i.name, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for i, d in members}
    document = {"format": fmt, "gtcache_version": gtcache.__version__, "members": list(rows.values())}
    return json.dumps(document, indent=1, sort_keys=True).encode()


def sign(key: bytes, manifest: bytes) -> bytes:
    return hmac.new(key, manifest, hashlib.sha256).hexdigest().encode()


def build(
    out: pathlib.Path, members: Sequence[Member], *, key: bytes | None = None,
    manifest: bytes | None = None, signature: bytes | None = None, listed: Sequence[Member] | None = None,
) -> pathlib.Path:
    """A bundle of ``members`` (ustar, so that no extension header hides them): ``manifest.json``
    listing ``listed`` (default: the members) with their true sizes and SHA-256, then the
    signature (with ``key``), then the members as given."""
    manifest = manifest if manifest is not None else manifest_for(listed if listed is not None else members)
    if signature is None and key is not None:
        signature = sign(key, manifest)
    with tar_as_exported(out) as tar:
        head = [(file_info("manifest.json", manifest), manifest)]
        if signature is not None:
            head.append((file_info("signature", signature), signature))
        for info, data in [*head, *members]:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out


def file_info(name: str, data: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    return info


def edit(members: Sequence[Member], match: Callable[[str], bool], change: Callable[[bytes], bytes]) -> list[Member]:
    """The members with ``change`` applied to the bytes of those whose name ``match``es."""
    out = []
    for info, data in members:
        if match(info.name):
            data = change(data)
            info = file_info(info.name, data)
        out.append((info, data))
    return out


def flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:]


def rewrite_record(record_bytes: bytes, change: Callable[[dict], None]) -> bytes:
    """``entry.json`` after ``change``, with ``record_xxh3`` recomputed (what an attacker can do)."""
    from gtcache.store._record import record_digest

    data = json.loads(record_bytes)
    change(data)
    data["record_xxh3"] = record_digest(data)
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def tree(root: pathlib.Path) -> dict[str, bytes | str]:
    """Every file (bytes) and symlink (target) under ``root``, for before/after comparisons."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "-> " + str(path.readlink())
        elif path.is_file():
            found[rel] = path.read_bytes()
        elif path.is_dir():
            found[rel] = "dir"
    return found
