"""Bundles: a store's entries as one ``.tar.gz`` to move between CI jobs and machines.

A bundle holds ``manifest.json`` (format, gtcache version, every entry with its
files, sizes and xxh3 checksums), optionally ``signature`` (HMAC-SHA256 of the
manifest with the key in ``GTCACHE_BUNDLE_KEY``), and the entry folders exactly
as the store keeps them (``entries/<k2>/<key>/...``): only what loading needs.

Import trusts nothing in a bundle: members must be plain files or folders at the
places the manifest names (no absolute paths, no ``..``, no links or devices, no
oversized members); every file must match the manifest's checksum and the
entry's own record; with a key set, the signature must verify. Entries are
published through the store's atomic publish, so existing entries are kept and
a failed import leaves nothing half-written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import os
import pathlib
import tarfile
from collections.abc import Iterable, Mapping
from typing import Any

import xxhash

from gtcache._version import __version__
from gtcache.errors import GtcacheError
from gtcache.store import EntryInfo, EntryRecord, Store
from gtcache.store._layout import ENTRY_FILE, is_key

__all__ = ["BUNDLE_FORMAT", "BundleError", "ExportReport", "ImportReport", "export_bundle", "import_bundle"]

BUNDLE_FORMAT = 1
ENV_KEY = "GTCACHE_BUNDLE_KEY"
MANIFEST = "manifest.json"
SIGNATURE = "signature"
#: No payload file of a real entry comes near this; a bigger member is refused.
MAX_MEMBER_SIZE = 1 << 30
#: Facts an entry's toolchain must share with this environment to be imported (unless forced).
MATCHING_FACTS = ("gt4py", "python_abi", "machine")


class BundleError(GtcacheError):
    """A bundle that cannot be written or must not be imported."""


@dataclasses.dataclass(frozen=True)
class ExportReport:
    path: pathlib.Path
    entries: int
    size: int
    signed: bool

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "entries": self.entries, "size": self.size, "signed": self.signed}


@dataclasses.dataclass(frozen=True)
class ImportReport:
    imported: tuple[str, ...]
    #: Keys the store had already (kept as they were).
    existing: tuple[str, ...]
    #: Key -> why it was not imported (toolchain mismatch).
    skipped: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"imported": list(self.imported), "existing": list(self.existing), "skipped": dict(self.skipped)}


def export_bundle(
    store: Store, entries: Iterable[EntryInfo], path: pathlib.Path, *, key: bytes | None = None
) -> ExportReport:
    """Write the sound ``entries`` of ``store`` into the bundle ``path`` (signed with ``key``)."""
    chosen = [e for e in entries if e.ok and e.record is not None]
    manifest = {
        "format": BUNDLE_FORMAT,
        "gtcache_version": __version__,
        "entries": {e.key: {f.path: {"size": f.size, "xxh3": f.xxh3} for f in e.record.files} for e in chosen if e.record},
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, indent=1).encode()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            _add_bytes(tar, MANIFEST, manifest_bytes)
            if key:
                _add_bytes(tar, SIGNATURE, _sign(key, manifest_bytes).encode())
            for entry in chosen:
                assert entry.record is not None
                for name in (ENTRY_FILE, *(f.path for f in entry.record.files)):
                    tar.add(entry.path / name, arcname=f"entries/{entry.key[:2]}/{entry.key}/{name}", recursive=False)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise BundleError(f"Cannot write bundle '{path}': {error.strerror or error}.") from None
    return ExportReport(path, len(chosen), path.stat().st_size, bool(key))


def import_bundle(
    store: Store, path: pathlib.Path, *, key: bytes | None = None, force: bool = False,
    facts: Mapping[str, Any] | None = None,
) -> ImportReport:
    """Check everything in the bundle ``path``, then publish its entries into ``store``."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            files = _read_members(tar, path)
    except (OSError, tarfile.TarError, EOFError) as error:
        raise BundleError(f"'{path}' is not a readable gtcache bundle ({error}).") from None
    manifest_bytes = files.pop(MANIFEST, None)
    signature = files.pop(SIGNATURE, None)
    if manifest_bytes is None:
        raise BundleError(f"'{path}' has no '{MANIFEST}'.")
    if key is not None:
        if signature is None:
            raise BundleError(f"'{path}' is not signed, and {ENV_KEY} asks for signed bundles.")
        if not hmac.compare_digest(signature.decode(errors="replace"), _sign(key, manifest_bytes)):
            raise BundleError(f"'{path}' has a wrong signature: tampered, or signed with another key.")
    entries = _check_manifest(manifest_bytes, files, path)
    imported, existing, skipped = [], [], {}
    for entry_key, entry_files in sorted(entries.items()):
        record = EntryRecord.loads(entry_files[ENTRY_FILE])
        if not force and (problem := _mismatch(record, facts or {})):
            skipped[entry_key] = problem
            continue
        if store.lookup(entry_key) is not None:
            existing.append(entry_key)
            continue
        store.publish_record(record, {n: data for n, data in entry_files.items() if n != ENTRY_FILE})
        imported.append(entry_key)
    return ImportReport(tuple(imported), tuple(existing), skipped)


def _read_members(tar: tarfile.TarFile, path: pathlib.Path) -> dict[str, bytes]:
    """Every file member's bytes, after checking each member is harmless."""
    files: dict[str, bytes] = {}
    total = 0
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in pathlib.PurePosixPath(name).parts or "\\" in name:
            raise BundleError(f"'{path}': member '{name}' points outside the bundle.")
        if member.isdir():
            continue
        if not member.isfile():
            raise BundleError(f"'{path}': member '{name}' is a link or a device, not a file.")
        if member.size > MAX_MEMBER_SIZE or total + member.size > 64 * MAX_MEMBER_SIZE:
            raise BundleError(f"'{path}': member '{name}' is too large ({member.size} bytes).")
        total += member.size
        stream = tar.extractfile(member)
        if stream is None:
            raise BundleError(f"'{path}': member '{name}' cannot be read.")
        files[name] = stream.read()
    return files


def _check_manifest(manifest_bytes: bytes, files: dict[str, bytes], path: pathlib.Path) -> dict[str, dict[str, bytes]]:
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError:
        raise BundleError(f"'{path}': '{MANIFEST}' is not JSON.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"'{path}': bundle format {manifest.get('format') if isinstance(manifest, dict) else '?'!r} is not {BUNDLE_FORMAT}.")
    listed: dict[str, dict[str, bytes]] = {}
    for entry_key, entry_files in manifest.get("entries", {}).items():
        if not is_key(entry_key) or not isinstance(entry_files, dict):
            raise BundleError(f"'{path}': manifest entry '{entry_key}' is malformed.")
        prefix = f"entries/{entry_key[:2]}/{entry_key}/"
        contents = {}
        for name in (ENTRY_FILE, *entry_files):
            data = files.pop(prefix + name, None)
            if data is None:
                raise BundleError(f"'{path}': '{prefix + name}' is missing.")
            contents[name] = data
        try:
            record = EntryRecord.loads(contents[ENTRY_FILE])
        except ValueError as error:
            raise BundleError(f"'{path}': entry '{entry_key}': {error}") from None
        if record.key != entry_key or {f.path for f in record.files} != set(entry_files):
            raise BundleError(f"'{path}': entry '{entry_key}' does not match its record.")
        for item in record.files:
            expected = entry_files[item.path]
            digest = xxhash.xxh3_128_hexdigest(contents[item.path])
            if (digest, len(contents[item.path])) != (item.xxh3, item.size) or expected != {"size": item.size, "xxh3": item.xxh3}:
                raise BundleError(f"'{path}': '{prefix + item.path}' does not match its checksum.")
        listed[entry_key] = contents
    if files:
        raise BundleError(f"'{path}': member '{sorted(files)[0]}' is not in the manifest.")
    return listed


def _mismatch(record: EntryRecord, facts: Mapping[str, Any]) -> str | None:
    for fact in MATCHING_FACTS:
        if fact in facts and fact in record.toolchain and record.toolchain[fact] != facts[fact]:
            return f"built for {fact} {record.toolchain[fact]!r}, this environment has {facts[fact]!r}"
    return None


def _sign(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
