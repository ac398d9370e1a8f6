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
import signal
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
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
#: ``manifest.json`` and each ``entry.json`` are read into memory (one record at a time):
#: they stay small. A real record has a few KiB (a dace one, its binding code, some tens).
MAX_MANIFEST_SIZE = 16 << 20
MAX_RECORD_SIZE = 4 << 20
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


def _tar_info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
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


class _Refused(BundleError):
    """Something refused while the archive is read, below ``tarfile``: what the bundle is or has
    (``Bundle '<name>'`` is put before it later)."""


class _Header(tarfile.TarInfo):
    """A tar header that refuses extension headers before ``tarfile`` reads their contents,
    and checks the archive's end itself.

    pax and GNU long-name headers carry a size that ``tarfile`` reads into memory, and
    GNU sparse maps make it loop; gtcache bundles (ustar) never contain them. ``tarfile``
    takes a block that is no header (zeros, a bad checksum, a short block) for the end of
    the archive and reads no further: here only zeros end it, and what follows them is read
    too, all zeros to the end of the record ``tarfile`` writes (``_check_end``). ``raw`` is
    the header's block as read (``_admit`` compares it with the one ``export`` writes).
    """

    raw = b""

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> _Header:
        assert tarfile_.fileobj is not None
        buf = tarfile_.fileobj.read(tarfile.BLOCKSIZE)
        if len(buf) == tarfile.BLOCKSIZE and not buf.strip(b"\0"):
            _check_end(tarfile_.fileobj, tarfile_.fileobj.tell() - tarfile.BLOCKSIZE)
            raise tarfile.EOFHeaderError("end of file header")  # type: ignore[attr-defined]  # ``next()`` returns None
        try:
            obj = cls.frombuf(buf, tarfile_.encoding, tarfile_.errors)
        except tarfile.HeaderError as error:
            raise _Refused(f"is damaged or cut short (a tar header: {error}).") from None
        if obj.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                        tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_SPARSE):
            raise _Refused(f"has a member '{obj.name}' that is a tar extension header"
                           f" ({obj.type.decode(errors='replace')!r}), which gtcache bundles never contain.")
        obj.offset = tarfile_.fileobj.tell() - tarfile.BLOCKSIZE
        obj.raw = buf
        return obj._proc_member(tarfile_)  # type: ignore[attr-defined,no-any-return]


def _check_end(stream: Any, at: int) -> None:
    """The archive's end, a zero block at ``at``: the rest of the stream must be zeros, the two
    blocks of the end marker and the record's padding as ``tarfile`` writes them, no more."""
    expected = -(-(at + 2 * tarfile.BLOCKSIZE) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE - at
    zeros = tarfile.BLOCKSIZE
    while zeros <= expected and (chunk := stream.read(min(_CHUNK, expected - zeros + 1))):
        if chunk.strip(b"\0"):
            raise _Refused("has data after the end of its archive.")
        zeros += len(chunk)
    if zeros != expected:  # (read no further than one byte past what export writes)
        raise _Refused(f"does not end as gtcache writes an archive ({'more' if zeros > expected else 'fewer'}"
                       f" zeros after its last member than the {expected} bytes of its end).")


#: The gzip header ``write_bundle`` writes (no name, no time, no flags; ``compresslevel=6``).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


class _Gunzip:
    """The decompressed bytes of a gzip stream written as ``write_bundle`` writes one, read
    from ``source`` as they are asked for: its header as written, one member whose CRC-32 and
    size are checked at its end, nothing after it. (``tarfile``'s own ``r|gz`` takes any
    header, checks no trailer and ignores what follows: bytes no signature would cover.)"""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        header = _read_upto(source, len(_GZIP_HEADER))
        if header[:2] != _GZIP_HEADER[:2]:
            raise _Refused("is not a gtcache bundle (not a tar.gz stream).")
        if len(header) < len(_GZIP_HEADER):
            raise _Refused("is cut short (its gzip stream ends early).")
        if header != _GZIP_HEADER:
            raise _Refused("has a gzip header gtcache does not write (compressed again by another tool?).")
        self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        self._crc = 0
        self._size = 0
        self._done = False

    def read(self, size: int = _CHUNK) -> bytes:
        """Up to ``size`` bytes (at least one unless the stream has ended)."""
        while not self._done and size:
            data = self._inflate.decompress(self._inflate.unconsumed_tail or self._more(), size if size > 0 else _CHUNK)
            self._crc = zlib.crc32(data, self._crc)
            self._size += len(data)
            if self._inflate.eof:
                self._finish()
            if data:
                return data
        return b""

    def _more(self) -> bytes:
        data = self._source.read(_CHUNK)
        if not data:
            raise _Refused("is cut short (its gzip stream ends early).")
        return data

    def _finish(self) -> None:
        trailer = self._inflate.unused_data
        if len(trailer) < 8:
            trailer += _read_upto(self._source, 8 - len(trailer))
        if len(trailer) < 8:
            raise _Refused("is cut short (its gzip stream ends early).")
        crc, size = int.from_bytes(trailer[:4], "little"), int.from_bytes(trailer[4:8], "little")
        if (crc, size) != (self._crc, self._size & 0xFFFFFFFF):
            raise _Refused("is damaged (its gzip checksum does not match).")
        if trailer[8:] or self._source.read(1):
            raise _Refused("has data after its gzip stream.")
        self._done = True


def _read_upto(source: IO[bytes], size: int) -> bytes:
    """``size`` bytes of ``source``, fewer only at its end."""
    data = b""
    while len(data) < size and (chunk := source.read(size - len(data))):
        data += chunk
    return data


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
        received = _receive(stream, target, key, require_signature, name, expect)
        _check_entries(received, target.staging, name)
        return _publish_all(target.store, received, target.staging, force, facts or {}, name)
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
        gunzip = _Gunzip(stream)
        try:
            tar = tarfile.open(fileobj=gunzip, mode="r|", tarinfo=_Header)  # type: ignore[call-overload]
        except (tarfile.TarError, EOFError, zlib.error) as error:
            raise BundleError(f"Bundle '{name}' is not a gtcache bundle (not a tar.gz stream: {error}).") from None
        with tar:
            return _receive_members(tar, target, key, require_signature, name, expect)
    except _Refused as error:
        raise BundleError(f"Bundle '{name}' {error}") from None
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
    mtime = first.mtime  # (every member's: ``SOURCE_DATE_EPOCH`` or 0)
    _check_header(first, mtime, name)
    manifest_bytes = _read_small(tar, first, name)
    manifest = _parse_manifest(manifest_bytes, name)
    member = tar.next()
    signature = None
    if member is not None and member.name == SIGNATURE:
        if not member.isreg() or member.size > 4 * _SIGNATURE_SIZE:
            raise BundleError(f"Bundle '{name}': its '{SIGNATURE}' is not a signature.")
        _check_header(member, mtime, name)
        signature = _read_small(tar, member, name)
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
        expected = _admit(member, listed, seen, name, mtime)
        match = _MEMBER_NAME.fullmatch(member.name)
        assert match is not None
        entry_key, file_name = match["key"], match["name"]
        xxh3 = _stage_member(tar, member, staging / entry_key, file_name, expected, name)
        _check_padding(tar, member, name)
        received.setdefault(entry_key, {})[file_name] = (member.size, xxh3)
        member = tar.next()
    missing = sorted(listed.keys() - seen)
    if missing:
        raise BundleError(f"Bundle '{name}' lacks member '{missing[0]}' its manifest lists"
                          f" ({len(missing)} missing in all).")
    return received


def _read_small(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> bytes:
    source = tar.extractfile(member)
    assert source is not None
    data = source.read()
    if len(data) != member.size:
        raise tarfile.ReadError("unexpected end of data")
    _check_padding(tar, member, name)
    return data


def _check_padding(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> None:
    """Read the zeros that pad ``member``'s data (just read) to a whole block, which ``tarfile``
    would skip unread: bytes no checksum covers, so they must be zeros."""
    assert tar.fileobj is not None
    padding = -member.size % tarfile.BLOCKSIZE
    if padding and tar.fileobj.read(padding).strip(b"\0"):
        raise BundleError(f"Bundle '{name}': member '{member.name}' is followed by data in its padding.")


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


def _admit(member: tarfile.TarInfo, listed: Mapping[str, _Listed], seen: set[str], name: str, mtime: float) -> _Listed:
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
    _check_header(member, mtime, name)
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


def _check_header(member: tarfile.TarInfo, mtime: float, name: str) -> None:
    """Refuse a member whose header is not the one ``write_bundle`` writes for its name and size
    (mode, owners, time, type, format): bytes no signature and no checksum would cover."""
    try:
        expected = _tar_info(member.name, member.size, mtime).tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")
    except ValueError:  # a time or size no ustar header holds (base-256 in the header read)
        expected = b""
    if getattr(member, "raw", b"") != expected:
        raise BundleError(f"Bundle '{name}': member '{member.name}' has a tar header gtcache does not write"
                          " (its mode, owner, time, type or format).")


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
    # Unbuffered: a write that fails (a full disk) fails here, worded as the staging's, never
    # later in a flush that would read as the bundle's own error.
    try:
        while chunk := source.read(_CHUNK):
            sha256.update(chunk)
            xxh3.update(chunk)
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            except OSError as error:
                raise BundleError(f"Cannot stage '{member.name}' in '{folder}': {error.strerror or error}.") from None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.close(fd)
    except OSError as error:  # (a file server may report a full disk only now)
        raise BundleError(f"Cannot stage '{member.name}' in '{folder}': {error.strerror or error}.") from None
    if sha256.hexdigest() != expected.sha256:
        raise BundleError(f"Bundle '{name}': member '{member.name}' does not match its SHA-256 in the manifest.")
    return xxh3.hexdigest()


def _check_entries(
    received: Mapping[str, Mapping[str, tuple[int, str]]], staging: pathlib.Path, name: str,
) -> None:
    """Check each staged entry's record against the files received for it (one record in
    memory at a time: ``_publish_all`` reads each again)."""
    for entry_key in sorted(received):
        _checked_record(received[entry_key], staging, entry_key, name)


def _checked_record(
    files: Mapping[str, tuple[int, str]], staging: pathlib.Path, entry_key: str, name: str,
) -> EntryRecord:
    """The staged record of ``entry_key``, checked against the files received for it."""
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
    return record


def _publish_all(
    store: Store, received: Mapping[str, Mapping[str, tuple[int, str]]], staging: pathlib.Path, force: bool,
    facts: Mapping[str, Any], name: str,
) -> ImportReport:
    """Publish the checked entries, all or none.

    Every key is judged before anything is written: an entry the store has, sound, is kept;
    one built for another environment is skipped; a key whose shard folder lookups refuse
    (a symlink, a folder others can write) refuses the import. Then the new entries are
    published, and last those that replace broken ones, each broken one set aside in the
    staging folder first. When one cannot be published (a full disk) or the import is
    interrupted, the entries published are removed again and those set aside put back.
    Each entry's publish and the note that would undo it are made with signals held: an
    interruption (Ctrl-C, SIGTERM) never falls between the two."""
    existing: list[str] = []
    skipped: dict[str, str] = {}
    new: list[str] = []
    broken: list[str] = []
    for key in sorted(received):
        if not force and (problem := _mismatch(_checked_record(received[key], staging, key, name), facts)):
            skipped[key] = problem
            continue
        if (problem := store.publish_problem(key)) is not None:
            raise BundleError(f"Cannot import entry '{key}' from bundle '{name}': {problem.rstrip('.')};"
                              " nothing was imported.")
        try:
            found = store.lookup(key)
            if found is not None:
                store.verify_payload(found)
                existing.append(key)
                continue
        except CorruptEntryError:
            broken.append(key)  # publishing replaces a broken entry
            continue
        new.append(key)
    imported: list[str] = []
    placed: dict[str, os.stat_result] = {}
    aside: dict[str, pathlib.Path] = {}
    to_replace = frozenset(broken)
    try:
        for key in (*new, *broken):
            try:
                with _signals_held():
                    if key in to_replace:
                        aside[key] = _aside_folder(staging) / key  # (noted first: put back whatever got there)
                        if store.set_aside(key, aside[key].parent) is None:
                            del aside[key]
                    if (published := _publish_one(store, _checked_record(received[key], staging, key, name),
                                                  staging / key)) is not None:
                        placed[key] = published
            except (OSError, GtcacheError) as error:
                why = (error.strerror if isinstance(error, OSError) else None) or str(error)
                raise BundleError(f"Cannot publish entry '{key}' from bundle '{name}': {why.rstrip('.')}."
                                  f"{_rolled_back(store, placed, aside)}") from None
            if key in placed:
                imported.append(key)
            else:  # another process published it meanwhile: its own
                existing.append(key)
    except BundleError:
        raise
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): nothing half-imported either
        _rolled_back(store, placed, aside)
        raise
    replaced = tuple(key for key in broken if key in placed)
    return ImportReport(tuple(sorted(imported)), tuple(sorted(existing)), skipped, replaced)


def _publish_one(store: Store, record: EntryRecord, folder: pathlib.Path) -> os.stat_result | None:
    """Publish a staged entry; the ``lstat`` of its folder, None if another process published
    it meanwhile. (A function of its own: no record outlives its publish.)"""
    entry = store.publish_record(record, {f.path: folder / f.path for f in record.files})
    return os.lstat(entry.path) if entry.published else None


def _aside_folder(staging: pathlib.Path) -> pathlib.Path:
    """Where an import sets broken entries aside (removed with the staging folder when it ends)."""
    folder = staging / "replaced"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held while the block runs, delivered once it ends, to the
    handlers they had. Python runs signal handlers in the main thread only, whichever thread
    the kernel hands a signal to (so a signal mask would not do: another thread takes it): in
    the main thread the handlers are swapped for one that notes the signal; elsewhere no
    signal interrupts the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    swapped: dict[signal.Signals, Any] = {}
    for signum in _HELD_SIGNALS:
        if signal.getsignal(signum) is not None:  # (None: a handler not set from Python, left alone)
            swapped[signum] = signal.signal(signum, lambda number, _frame: caught.append(number))
    try:
        yield
    finally:
        for signum, handler in swapped.items():
            signal.signal(signum, handler)
        for number in caught:
            signal.raise_signal(number)


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))


def _rolled_back(store: Store, placed: Mapping[str, os.stat_result], aside: Mapping[str, pathlib.Path]) -> str:
    """Remove the entry folders this import published (by key, the ``lstat`` of each: never
    one another process put at the key since) and put back the broken ones it set aside
    (unless another entry took the key meanwhile); what the error says of them. With signals
    held: a second Ctrl-C does not cut it short."""
    with _signals_held():
        return _roll_back(store, placed, aside)


def _roll_back(store: Store, placed: Mapping[str, os.stat_result], aside: Mapping[str, pathlib.Path]) -> str:
    said = ""
    if placed:
        imported = list(placed)
        failed: dict[str, str] = {}
        store.remove(imported, failed=failed, judged=placed)
        before = "the entry imported before it" if len(imported) == 1 else f"the {len(imported)} entries imported before it"
        if failed:
            said = f" Of {before}, {len(failed)} could not be removed again: {', '.join(sorted(failed))}."
        else:
            said = f" {before[0].upper()}{before[1:]} {'was' if len(imported) == 1 else 'were'} removed again: nothing was imported."
    kept = []
    for key, where in sorted(aside.items()):
        try:
            store.put_back(key, where)
        except OSError:
            kept.append(key)
    if kept:
        said += f" The broken entries at {', '.join(kept)} could not be put back."
    return said


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
