"""Bundles: store entries as one ``.tar.gz`` stream, every byte proved, to move between machines.

Bundle format 2. The archive's first member is ``manifest.json``: the format, the
gtcache version, and every further member with its path, size and SHA-256
(``entry.json`` of each entry included, so its record, which for dace holds the
Python source binding arguments, is covered like any payload). The second member,
when a key was given, is ``signature``: HMAC-SHA256 of the exact manifest bytes,
as 64 hex digits. Then the entry files, sorted, as ``entries/<k2>/<key>/<name>``.
The archive is reproducible: the same entries give the same bytes (fixed mtime,
owners and modes, no folders, a gzip header without name or time).

Reading is sequential (it works from a pipe) and trusts nothing: the manifest and
signature are read and checked first; each further member is refused as soon as
its header is seen if it is not in the manifest, comes twice, is not a regular
file, has another size than listed or a name not of the form above; its bytes go
straight to a staging folder under the store's ``tmp/`` while being hashed, so
memory stays bounded whatever the bundle holds. Only when the archive has ended,
every listed member was seen with its SHA-256, and each entry's record agrees
with the manifest and its own checksums are the entries published (through the
store's atomic publish): a refused bundle writes nothing into the store.

``write_bundle`` / ``read_bundle`` work on binary streams (a remote tier moves one
entry at a time in this form); ``export_bundle`` / ``import_bundle`` wrap them for
files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import hmac
import io
import json
import os
import pathlib
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import IO, Any, BinaryIO, Protocol

import xxhash

from gtcache._version import __version__
from gtcache.errors import CorruptEntryError, GtcacheError
from gtcache.store import ENTRY_FILE, TMP_DIR, EntryRecord, Store, format_size, fsync_dir

__all__ = [
    "BUNDLE_FORMAT",
    "BundleError",
    "ExportReport",
    "ImportReport",
    "export_bundle",
    "import_bundle",
    "read_bundle",
    "write_bundle",
]

BUNDLE_FORMAT = 2
ENV_KEY = "GTCACHE_BUNDLE_KEY"
MANIFEST = "manifest.json"
SIGNATURE = "signature"
#: No payload file of a real entry comes near this; a bigger member is refused.
MAX_MEMBER_SIZE = 1 << 30
#: All members of one bundle together.
MAX_TOTAL_SIZE = 64 << 30
#: ``manifest.json`` and each ``entry.json`` are read into memory: they stay small.
MAX_MANIFEST_SIZE = 16 << 20
MAX_RECORD_SIZE = 16 << 20
#: Facts an entry's toolchain must share with this environment to be imported (unless forced).
MATCHING_FACTS = ("gt4py", "python_abi", "machine")

_CHUNK = 1 << 20
_SIGNATURE_SIZE = 64
#: ``entries/<k2>/<key>/<name>``: names as entry records allow them, short enough for ustar.
_MEMBER_NAME = re.compile(r"^entries/(?P<shard>[0-9a-f]{2})/(?P<key>[0-9a-f]{32})/(?P<name>[A-Za-z0-9._+-]{1,100})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MEMBER_FIELDS = {"path", "size", "sha256"}
_MANIFEST_FIELDS = {"format", "gtcache_version", "members"}


class BundleError(GtcacheError):
    """A bundle that cannot be written or must not be imported."""


class _HasKeyAndPath(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def path(self) -> pathlib.Path: ...


@dataclasses.dataclass(frozen=True)
class ExportReport:
    #: ``None`` when the bundle went to a stream.
    path: pathlib.Path | None
    entries: int
    size: int
    signed: bool
    #: Key -> why the entry was left out (broken in the store).
    left_out: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path) if self.path is not None else "-", "entries": self.entries,
            "size": self.size, "signed": self.signed, "left_out": dict(self.left_out),
        }


@dataclasses.dataclass(frozen=True)
class ImportReport:
    imported: tuple[str, ...]
    #: Keys the store had already (kept as they were).
    existing: tuple[str, ...]
    #: Key -> why it was not imported (toolchain mismatch).
    skipped: Mapping[str, str]
    #: Keys whose broken entry in the store was replaced (also in ``imported``).
    replaced: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "imported": list(self.imported), "existing": list(self.existing),
            "skipped": dict(self.skipped), "replaced": list(self.replaced),
        }


# -- writing ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Member:
    name: str
    #: Content (``entry.json``, read once so that manifest and member agree) or a file.
    source: bytes | pathlib.Path
    size: int
    sha256: str


def write_bundle(
    stream: IO[bytes], store: Store, entries: Iterable[_HasKeyAndPath], *,
    key: bytes | None = None, mtime: int = 0,
) -> ExportReport:
    """Write the sound ``entries`` of ``store`` as a bundle to the binary ``stream``.

    Signed with ``key`` when given. Entries whose files do not match their record are
    left out (named in the report). ``mtime`` is every member's time (``SOURCE_DATE_EPOCH``).
    """
    if key is not None and not key:
        raise BundleError("The bundle key is empty; give a real key or none.")
    members, count, left_out = _collect(store, entries)
    manifest = {
        "format": BUNDLE_FORMAT,
        "gtcache_version": __version__,
        "members": [{"path": m.name, "size": m.size, "sha256": m.sha256} for m in members],
    }
    manifest_bytes = (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode()
    counter = _CountingWriter(stream)
    try:
        with gzip.GzipFile(filename="", mode="wb", fileobj=counter, mtime=0, compresslevel=6) as gz, \
                tarfile.open(fileobj=gz, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
            _add_bytes(tar, MANIFEST, manifest_bytes, mtime)
            if key:
                _add_bytes(tar, SIGNATURE, _sign(key, manifest_bytes).encode(), mtime)
            for member in members:
                if isinstance(member.source, bytes):
                    _add_bytes(tar, member.name, member.source, mtime)
                else:
                    _add_file(tar, member, mtime)
    except BrokenPipeError:  # the reader went away (``export - | head``): theirs to say
        raise
    except OSError as error:
        raise BundleError(f"Cannot write the bundle: {error.strerror or error}.") from None
    return ExportReport(None, count, counter.written, bool(key), left_out)


def export_bundle(
    store: Store, entries: Iterable[_HasKeyAndPath], path: pathlib.Path, *,
    key: bytes | None = None, force: bool = False, mtime: int = 0,
) -> ExportReport:
    """Write the bundle file ``path``: a new file in its folder, flushed, then renamed into place.

    An existing ``path`` is refused unless ``force``.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise BundleError(f"Cannot write bundle '{path}': it is a folder.")
    if os.path.lexists(path) and not force:
        raise BundleError(f"Bundle '{path}' exists already; --force replaces it.")
    folder = path.parent
    try:
        # O_EXCL, mode 0600, an unpredictable name: nothing planted there is followed.
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise BundleError(f"Cannot write bundle '{path}': {error.strerror or error}.") from None
    tmp = pathlib.Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            report = write_bundle(out, store, entries, key=key, mtime=mtime)
            out.flush()
            os.fchmod(out.fileno(), 0o666 & ~_umask())
            os.fsync(out.fileno())
        os.replace(tmp, path)
        fsync_dir(folder)
    except OSError as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise BundleError(f"Cannot write bundle '{path}': {error.strerror or error}.") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return dataclasses.replace(report, path=path)


def _collect(store: Store, entries: Iterable[_HasKeyAndPath]) -> tuple[list[_Member], int, dict[str, str]]:
    """The members of the sound entries (hashed now), how many entries, and those left out.

    Each entry passes ``Store.lookup`` first, as a hit's does (who wrote its files and
    folders): a listing's row may be an index's, older than a file put in its place by
    someone untrusted, and a signed bundle would carry that file to every importer."""
    members: list[_Member] = []
    left_out: dict[str, str] = {}
    count = 0
    done: set[str] = set()
    for entry in sorted(entries, key=lambda e: e.key):
        if entry.key in done:
            continue
        done.add(entry.key)
        problem = getattr(entry, "problem", None)
        if problem is not None:
            left_out[entry.key] = problem
            continue
        prefix = f"entries/{entry.key[:2]}/{entry.key}/"
        try:
            if store.lookup(entry.key) is None:
                raise ValueError(f"'{ENTRY_FILE}' is missing.")
            record_bytes = (entry.path / ENTRY_FILE).read_bytes()
            record = EntryRecord.loads(record_bytes)
            if record.key != entry.key:
                raise ValueError(f"its record names key '{record.key}'.")
            files = []
            for item in record.files:
                if len(prefix + item.path) > 255 or len(item.path) > 100:
                    raise ValueError(f"file name '{item.path}' is too long for a bundle.")
                size, sha256, xxh3 = _hash_file(entry.path / item.path)
                if (size, xxh3) != (item.size, item.xxh3):
                    raise ValueError(f"file '{item.path}' does not match its checksum.")
                files.append(_Member(prefix + item.path, entry.path / item.path, size, sha256))
        except CorruptEntryError as error:
            left_out[entry.key] = error.reason
            continue
        except (OSError, ValueError) as error:
            left_out[entry.key] = str(error)
            continue
        members.append(_Member(prefix + ENTRY_FILE, record_bytes, len(record_bytes),
                               hashlib.sha256(record_bytes).hexdigest()))
        members.extend(files)
        count += 1
    members.sort(key=lambda m: m.name)
    return members, count, left_out


def _tar_info(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    tar.addfile(_tar_info(name, len(data), mtime), io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, member: _Member, mtime: int) -> None:
    assert isinstance(member.source, pathlib.Path)
    with open(member.source, "rb") as source:
        reader = _HashingReader(source)
        tar.addfile(_tar_info(member.name, member.size, mtime), reader)
        if reader.sha256.hexdigest() != member.sha256 or source.read(1):
            raise BundleError(f"File '{member.source}' changed while it was being exported; export again.")


class _HashingReader:
    def __init__(self, source: BinaryIO) -> None:
        self.source = source
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.sha256.update(data)
        return data


class _CountingWriter:
    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.written = 0

    def write(self, data: bytes) -> int:
        self.stream.write(data)
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        self.stream.flush()


# -- reading ----------------------------------------------------------------------------


class _HeaderRefused(BundleError):
    """A tar header refused before ``tarfile`` processed it (the bundle's name added later)."""


class _Header(tarfile.TarInfo):
    """A tar header that refuses extension headers before ``tarfile`` reads their contents.

    pax and GNU long-name headers carry a size that ``tarfile`` reads into memory, and
    GNU sparse maps make it loop; gtcache bundles (ustar) never contain them.
    """

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> _Header:
        assert tarfile_.fileobj is not None
        buf = tarfile_.fileobj.read(tarfile.BLOCKSIZE)
        obj = cls.frombuf(buf, tarfile_.encoding, tarfile_.errors)
        if obj.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                        tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_SPARSE):
            raise _HeaderRefused(f"member '{obj.name}' is a tar extension header ({obj.type.decode(errors='replace')!r}),"
                              " which gtcache bundles never contain.")
        obj.offset = tarfile_.fileobj.tell() - tarfile.BLOCKSIZE
        return obj._proc_member(tarfile_)  # type: ignore[attr-defined,no-any-return]


def read_bundle(
    stream: IO[bytes], store: Store | Callable[[], Store], *, key: bytes | None = None, require_signature: bool = False,
    force: bool = False, facts: Mapping[str, Any] | None = None, name: str = "<stream>",
    expect: Collection[str] | None = None,
) -> ImportReport:
    """Check everything in the bundle read from the binary ``stream``, then publish its entries.

    ``expect``: the keys the bundle must hold, no more, no fewer (a remote object is named
    after its entry): a signed bundle of other entries, replayed under this name, is
    refused right after the signature check, before anything is staged.

    With ``key``, the bundle must carry a signature made with it; ``require_signature``
    refuses unsigned bundles (and needs ``key`` to check one). Entries built for another
    gt4py, Python ABI or machine (``facts``) are skipped unless ``force``. Entries the
    store has are kept; a broken entry at a bundled key is replaced. ``name`` is what
    messages call the bundle. Raises ``BundleError`` before anything is published.

    ``store`` may be a function that opens it (``open_store(create=True)``): it is called
    only once the bundle's manifest and signature check out, so that a file that is no
    bundle, or one signed with another key, creates no store.
    """
    if key is not None and not key:
        raise BundleError("The bundle key is empty; give a real key or none.")
    if require_signature and key is None:
        raise BundleError(f"Signed bundles are required, but {ENV_KEY} is not set to check signatures.")
    target = _Target(store)
    if not callable(store):
        target.open()
    try:
        listed = _receive(stream, target, key, require_signature, name, expect)
        checked = _check_entries(listed, target.staging, name)
        return _publish_all(target.store, checked, target.staging, force, facts or {}, name)
    finally:
        if target.opened:
            shutil.rmtree(target.staging, ignore_errors=True)


class _Target:
    """The store an import goes to and its staging folder in ``tmp/``, made when first needed."""

    def __init__(self, store: Store | Callable[[], Store]) -> None:
        self._store = store
        self.opened = False

    def open(self) -> pathlib.Path:
        if not self.opened:
            self.store = self._store() if callable(self._store) else self._store
            if self.store.read_only:
                raise BundleError(f"Store '{self.store.root}' is read-only; cannot import into it.")
            try:  # (GtcacheError where nothing is written to the store: a symlinked tmp/, say)
                self.staging = pathlib.Path(tempfile.mkdtemp(prefix="import-", dir=self.store.scratch_root()))
            except OSError as error:
                raise BundleError(f"Cannot stage the import in '{self.store.root / TMP_DIR}':"
                                  f" {error.strerror or error}.") from None
            self.opened = True
        return self.staging


def import_bundle(
    store: Store | Callable[[], Store], path: pathlib.Path, *, key: bytes | None = None, require_signature: bool = False,
    force: bool = False, facts: Mapping[str, Any] | None = None,
) -> ImportReport:
    """``read_bundle`` from the file ``path``."""
    try:
        stream = open(path, "rb")  # noqa: SIM115
    except OSError as error:
        raise BundleError(f"Cannot read bundle '{path}': {error.strerror or error}.") from None
    with stream:
        return read_bundle(stream, store, key=key, require_signature=require_signature, force=force,
                           facts=facts, name=str(path))


@dataclasses.dataclass(frozen=True)
class _Listed:
    """What the manifest says of a member."""

    size: int
    sha256: str


def _receive(
    stream: IO[bytes], target: _Target, key: bytes | None, require_signature: bool, name: str,
    expect: Collection[str] | None = None,
) -> dict[str, dict[str, tuple[int, str]]]:
    """Read the whole archive into ``staging/<key>/<file>``; return key -> file -> (size, xxh3)."""
    try:
        try:
            tar = tarfile.open(fileobj=stream, mode="r|gz", tarinfo=_Header)
        except (tarfile.TarError, EOFError, zlib.error) as error:
            raise BundleError(f"Bundle '{name}' is not a gtcache bundle (not a tar.gz stream: {error}).") from None
        with tar:
            return _receive_members(tar, target, key, require_signature, name, expect)
    except _HeaderRefused as error:
        raise BundleError(f"Bundle '{name}': {error}") from None
    except (tarfile.TarError, EOFError, zlib.error) as error:
        raise BundleError(f"Bundle '{name}' is damaged or cut short ({error}).") from None
    except OSError as error:
        raise BundleError(f"Cannot read bundle '{name}': {error.strerror or error}.") from None


def _receive_members(
    tar: tarfile.TarFile, target: _Target, key: bytes | None, require_signature: bool, name: str,
    expect: Collection[str] | None = None,
) -> dict[str, dict[str, tuple[int, str]]]:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isreg():
        found = "nothing" if first is None else f"'{first.name}'"
        raise BundleError(f"Bundle '{name}' does not start with '{MANIFEST}' (it starts with {found}).")
    if first.size > MAX_MANIFEST_SIZE:
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' has {format_size(first.size)},"
                          f" over the {format_size(MAX_MANIFEST_SIZE)} limit.")
    manifest_bytes = _read_small(tar, first)
    manifest = _parse_manifest(manifest_bytes, name)
    member = tar.next()
    signature = None
    if member is not None and member.name == SIGNATURE:
        if not member.isreg() or member.size > 4 * _SIGNATURE_SIZE:
            raise BundleError(f"Bundle '{name}': its '{SIGNATURE}' is not a signature.")
        signature = _read_small(tar, member)
        member = tar.next()
    _check_signature(manifest_bytes, signature, key, require_signature, name)
    listed = _manifest_members(manifest, name)
    if expect is not None:
        holds = sorted({path.split("/")[2] for path in listed})
        if holds != sorted(set(expect)):
            shown = ", ".join(f"'{k}'" for k in holds[:3]) or "nothing"
            raise BundleError(f"Bundle '{name}' holds {shown}, not {', '.join(repr(k) for k in sorted(set(expect)))}"
                              " it is named after (an object replayed under another name?); nothing imported.")

    staging = target.open()  # the header checks out: the store is opened (or made) only now
    seen: set[str] = set()
    received: dict[str, dict[str, tuple[int, str]]] = {}
    while member is not None:
        expected = _admit(member, listed, seen, name)
        match = _MEMBER_NAME.fullmatch(member.name)
        assert match is not None
        entry_key, file_name = match["key"], match["name"]
        xxh3 = _stage_member(tar, member, staging / entry_key, file_name, expected, name)
        received.setdefault(entry_key, {})[file_name] = (member.size, xxh3)
        member = tar.next()
    missing = sorted(listed.keys() - seen)
    if missing:
        raise BundleError(f"Bundle '{name}' lacks member '{missing[0]}' its manifest lists"
                          f" ({len(missing)} missing in all).")
    return received


def _read_small(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    source = tar.extractfile(member)
    assert source is not None
    data = source.read()
    if len(data) != member.size:
        raise tarfile.ReadError("unexpected end of data")
    return data


def _parse_manifest(data: bytes, name: str) -> dict[str, Any]:
    """The manifest as an object of this format (nothing else of it checked yet)."""
    try:
        manifest = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' is not UTF-8 text.") from None
    except RecursionError:
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' is nested too deeply.") from None
    except ValueError as error:
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' is not JSON ({error}).") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' is not a JSON object.")
    found = manifest.get("format")
    if found == 1:
        raise BundleError(f"Bundle '{name}' is bundle format 1; this gtcache reads format {BUNDLE_FORMAT}:"
                          " export it again with this gtcache.")
    if found != BUNDLE_FORMAT:
        raise BundleError(f"Bundle '{name}' has bundle format {found!r}; this gtcache reads format"
                          f" {BUNDLE_FORMAT} (a newer gtcache may read it).")
    return manifest


def _check_signature(
    manifest_bytes: bytes, signature: bytes | None, key: bytes | None, require_signature: bool, name: str,
) -> None:
    # ``require_signature`` without a key was refused before reading: a key is what requires.
    if signature is None:
        if key is not None:
            required = "signed bundles are required" if require_signature else f"{ENV_KEY} is set"
            raise BundleError(f"Bundle '{name}' is not signed, and {required}: unsigned bundles are refused.")
        return
    if key is not None and not hmac.compare_digest(signature, _sign(key, manifest_bytes).encode()):
        raise BundleError(f"Bundle '{name}' has a wrong signature: tampered, or signed with another key.")


def _manifest_members(manifest: Mapping[str, Any], name: str) -> dict[str, _Listed]:
    """Member path -> what the manifest says of it, after checking every field."""
    if set(manifest) != _MANIFEST_FIELDS:
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' has fields {sorted(manifest)}, not {sorted(_MANIFEST_FIELDS)}.")
    members = manifest["members"]
    if not isinstance(members, list):
        raise BundleError(f"Bundle '{name}': '{MANIFEST}' field 'members' is not a list.")
    listed: dict[str, _Listed] = {}
    total = 0
    for item in members:
        if not isinstance(item, dict) or set(item) != _MEMBER_FIELDS:
            raise BundleError(f"Bundle '{name}': a member in '{MANIFEST}' is not an object of"
                              f" {', '.join(sorted(_MEMBER_FIELDS))}.")
        path, size, sha256 = item["path"], item["size"], item["sha256"]
        if not isinstance(path, str) or not _canonical(path):
            raise BundleError(f"Bundle '{name}': '{MANIFEST}' lists member {path!r}, which is not a canonical"
                              " name 'entries/<k2>/<key>/<file>'.")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BundleError(f"Bundle '{name}': '{MANIFEST}' gives member '{path}' a bad size.")
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise BundleError(f"Bundle '{name}': '{MANIFEST}' gives member '{path}' a bad SHA-256.")
        if path in listed:
            raise BundleError(f"Bundle '{name}': '{MANIFEST}' lists member '{path}' twice.")
        limit = MAX_RECORD_SIZE if path.endswith("/" + ENTRY_FILE) else MAX_MEMBER_SIZE
        if size > limit:
            raise BundleError(f"Bundle '{name}': member '{path}' has {format_size(size)},"
                              f" over the {format_size(limit)} limit.")
        total += size
        if total > MAX_TOTAL_SIZE:
            raise BundleError(f"Bundle '{name}' holds more than {format_size(MAX_TOTAL_SIZE)}, the limit.")
        listed[path] = _Listed(size, sha256)
    keys = {path.split("/")[2] for path in listed}
    for entry_key in sorted(keys):
        if f"entries/{entry_key[:2]}/{entry_key}/{ENTRY_FILE}" not in listed:
            raise BundleError(f"Bundle '{name}': '{MANIFEST}' lists files of entry '{entry_key}' but no '{ENTRY_FILE}'.")
    return listed


def _canonical(path: str) -> bool:
    match = _MEMBER_NAME.fullmatch(path)
    return bool(match) and match is not None and match["key"].startswith(match["shard"]) \
        and match["name"] not in (".", "..")


def _admit(member: tarfile.TarInfo, listed: Mapping[str, _Listed], seen: set[str], name: str) -> _Listed:
    """What the manifest says of ``member``, after refusing it on its header alone if need be."""
    path = member.name
    if path in (MANIFEST, SIGNATURE):
        raise BundleError(f"Bundle '{name}' has a second '{path}' (it must be the {'first' if path == MANIFEST else 'second'} member only).")
    if not _canonical(path):
        raise BundleError(f"Bundle '{name}': member '{path}' is not a canonical name 'entries/<k2>/<key>/<file>'.")
    if not member.isreg():
        kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                else "a device" if member.ischr() or member.isblk() else "a folder" if member.isdir()
                else "a FIFO" if member.isfifo() else "not a regular file")
        raise BundleError(f"Bundle '{name}': member '{path}' is {kind}, not a regular file.")
    expected = listed.get(path)
    if expected is None:
        raise BundleError(f"Bundle '{name}': member '{path}' is not in the manifest.")
    if path in seen:
        raise BundleError(f"Bundle '{name}': member '{path}' appears twice.")
    if member.size != expected.size:
        got, want = format_size(member.size), format_size(expected.size)
        if got == want:
            got, want = f"{member.size} bytes", f"{expected.size} bytes"
        raise BundleError(f"Bundle '{name}': member '{path}' has {got}, the manifest says {want}.")
    seen.add(path)
    return expected


def _stage_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, folder: pathlib.Path, file_name: str,
    expected: _Listed, name: str,
) -> str:
    """Stream one member into ``folder/file_name`` while hashing it; return its xxh3."""
    source = tar.extractfile(member)
    assert source is not None
    sha256 = hashlib.sha256()
    xxh3 = xxhash.xxh3_128()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(folder / file_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise BundleError(f"Cannot stage '{member.name}' in '{folder}': {error.strerror or error}.") from None
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            sha256.update(chunk)
            xxh3.update(chunk)
            try:
                out.write(chunk)
            except OSError as error:
                raise BundleError(f"Cannot stage '{member.name}' in '{folder}': {error.strerror or error}.") from None
    if sha256.hexdigest() != expected.sha256:
        raise BundleError(f"Bundle '{name}': member '{member.name}' does not match its SHA-256 in the manifest.")
    return xxh3.hexdigest()


def _check_entries(
    received: Mapping[str, Mapping[str, tuple[int, str]]], staging: pathlib.Path, name: str,
) -> list[EntryRecord]:
    """Each staged entry's record, checked against the files received for it."""
    records = []
    for entry_key in sorted(received):
        files = received[entry_key]
        try:
            record = EntryRecord.loads((staging / entry_key / ENTRY_FILE).read_bytes())
        except ValueError as error:
            raise BundleError(f"Bundle '{name}': the record of entry '{entry_key}' is bad: {error}") from None
        if record.key != entry_key:
            raise BundleError(f"Bundle '{name}': the record of entry '{entry_key}' names key '{record.key}'.")
        payload = {n: v for n, v in files.items() if n != ENTRY_FILE}
        if {f.path for f in record.files} != payload.keys():
            raise BundleError(f"Bundle '{name}': entry '{entry_key}' has other files than its record lists.")
        for item in record.files:
            if payload[item.path] != (item.size, item.xxh3):
                raise BundleError(f"Bundle '{name}': file '{item.path}' of entry '{entry_key}'"
                                  " does not match its record's checksum.")
        records.append(record)
    return records


def _publish_all(
    store: Store, records: list[EntryRecord], staging: pathlib.Path, force: bool,
    facts: Mapping[str, Any], name: str,
) -> ImportReport:
    """Publish the checked entries; all or none: when one cannot be published (a full disk, a
    shard folder that is a symlink), those published before it are removed again."""
    imported: list[str] = []
    placed: dict[str, os.stat_result] = {}
    existing: list[str] = []
    replaced: list[str] = []
    skipped: dict[str, str] = {}
    try:
        for record in records:
            if not force and (problem := _mismatch(record, facts)):
                skipped[record.key] = problem
                continue
            try:
                found = store.lookup(record.key)
                if found is not None:
                    store.verify_payload(found)
                    existing.append(record.key)
                    continue
            except CorruptEntryError:
                replaced.append(record.key)  # publishing replaces a broken entry
            folder = staging / record.key
            try:
                entry = store.publish_record(record, {f.path: folder / f.path for f in record.files})
                if not entry.published:  # another process published it meanwhile: its own
                    existing.append(record.key)
                    continue
                placed[record.key] = os.lstat(entry.path)
            except (OSError, GtcacheError) as error:
                why = (error.strerror if isinstance(error, OSError) else None) or str(error)
                raise BundleError(f"Cannot publish entry '{record.key}' from bundle '{name}': {why.rstrip('.')}."
                                  f"{_rolled_back(store, placed)}") from None
            imported.append(record.key)
    except BundleError:
        raise
    except BaseException:  # interrupted (Ctrl-C): nothing half-imported either
        _rolled_back(store, placed)
        raise
    return ImportReport(tuple(imported), tuple(existing), skipped, tuple(replaced))


def _rolled_back(store: Store, placed: Mapping[str, os.stat_result]) -> str:
    """Remove the entry folders this import published (by key, the ``lstat`` of each: never
    one another process put at the key since); what the error says of them."""
    imported = list(placed)
    if not imported:
        return ""
    failed: dict[str, str] = {}
    store.remove(imported, failed=failed, judged=placed)
    before = "the entry imported before it" if len(imported) == 1 else f"the {len(imported)} entries imported before it"
    if failed:
        return f" Of {before}, {len(failed)} could not be removed again: {', '.join(sorted(failed))}."
    return f" {before[0].upper()}{before[1:]} {'was' if len(imported) == 1 else 'were'} removed again: nothing was imported."


def _mismatch(record: EntryRecord, facts: Mapping[str, Any]) -> str | None:
    for fact in MATCHING_FACTS:
        if fact in facts and fact in record.toolchain and record.toolchain[fact] != facts[fact]:
            return f"built for {fact} {record.toolchain[fact]!r}, this environment has {facts[fact]!r}"
    return None


def _sign(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _hash_file(path: pathlib.Path) -> tuple[int, str, str]:
    """Size, SHA-256 and xxh3-128 of a file, read once."""
    sha256 = hashlib.sha256()
    xxh3 = xxhash.xxh3_128()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            sha256.update(chunk)
            xxh3.update(chunk)
            size += len(chunk)
    return size, sha256.hexdigest(), xxh3.hexdigest()


def _umask() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
