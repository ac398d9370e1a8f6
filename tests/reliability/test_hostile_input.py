"""Hostile input through the real ``gtcache`` command: one-line errors, documented exit codes,
and nothing already stored lost (the store's files are byte-identical afterwards)."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
import tarfile

import pytest

import gtcache
from gtcache.bundle import export_bundle
from tests.helpers import publish, tar_as_exported

pytestmark = pytest.mark.heavy

GTCACHE = str(pathlib.Path(sys.executable).parent / "gtcache")


def gtcache_cli(store: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GTCACHE, "--cache-dir", str(store), *args], capture_output=True, text=True, timeout=300)


def files(root: pathlib.Path) -> dict[str, bytes]:
    """Every entry file and direct link of a store, by path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for pattern in ("entries/**/*", "direct/**/*", "gtcache-layout.json")
        for p in sorted(root.glob(pattern)) if p.is_file()
    }


@pytest.fixture
def store(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "store"
    opened = gtcache.open_store(root)
    for name in ("kept_a", "kept_b"):
        publish(opened, name, payload=name.encode() * 100)
    return root


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    # Usage errors (exit 2) come after click's usage line and hint, as for every click tool.
    assert len(errors) == 1 and lines[-1] == errors[0] and (code == 2 or len(lines) == 1), result.stderr
    return errors[0]


def hostile_bundle(tmp_path: pathlib.Path, kind: str) -> pathlib.Path:
    source = gtcache.open_store(tmp_path / "bundle-source")
    publish(source, "shipped")
    good = tmp_path / "good.tar.gz"
    export_bundle(source, source.scan().entries, good)
    out = tmp_path / f"{kind}.tar.gz"
    with tarfile.open(good, "r:gz") as src, tar_as_exported(out, tarfile.PAX_FORMAT) as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        if kind == "traversal":
            member = tarfile.TarInfo("entries/../../../evil")
            member.size = 4
            dst.addfile(member, io.BytesIO(b"evil"))
        elif kind == "link":
            member = tarfile.TarInfo("entries/ab/link")
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
            dst.addfile(member)
    if kind == "huge":  # a header claiming 8 GiB, then the archive ends: never to be read or written
        member = tarfile.TarInfo("entries/ab/huge.bin")
        member.size = 8 << 30
        with tar_as_exported(out, tarfile.PAX_FORMAT) as dst:
            header = member.tobuf(dst.format, dst.encoding, dst.errors)
            dst.fileobj.write(header)  # type: ignore[union-attr]
            dst.offset += len(header)
    return out


HOSTILE_BUNDLES = {
    "traversal": "is not a canonical name",
    "link": "is not a canonical name",
    "huge": "is a tar extension header",  # 8 GiB needs a pax size record: refused before it is read
}


@pytest.mark.parametrize("kind", list(HOSTILE_BUNDLES))
def test_hostile_bundles(store: pathlib.Path, tmp_path: pathlib.Path, kind: str, figures) -> None:
    before = files(store)
    bundle = hostile_bundle(tmp_path, kind)
    line = one_line_error(gtcache_cli(store, "import", str(bundle)), 1)
    assert HOSTILE_BUNDLES[kind] in line and str(bundle) in line, line
    assert files(store) == before
    assert not (tmp_path / "evil").exists()
    figures.add("hostile input", f"bundle with a {kind} member: exit code / stored files changed", "1 / 0")


BAD_RECORDS = {
    "a wrong type": lambda r: r | {"hits": "many"},
    "a missing field": lambda r: {k: v for k, v in r.items() if k != "files"},
    "an unknown field": lambda r: r | {"run_this": "rm -rf /"},
    "no JSON at all": None,
}


@pytest.mark.parametrize("damage", list(BAD_RECORDS))
def test_hostile_entry_records(store: pathlib.Path, damage: str, figures) -> None:
    opened = gtcache.open_store(store)
    victim = publish(opened, "victim")
    path = victim.path / "entry.json"
    edit = BAD_RECORDS[damage]
    path.write_text("{not json" if edit is None else json.dumps(edit(json.loads(path.read_text()))))
    before = files(store)

    listing = gtcache_cli(store, "ls", "--json")
    assert listing.returncode == 0, listing.stderr
    status = sorted(row["status"] for row in json.loads(listing.stdout) if row["key"] != victim.key)
    assert [r["status"] for r in json.loads(listing.stdout) if r["key"] == victim.key] == ["broken"]
    assert status == ["ok", "ok"]
    with pytest.raises(gtcache.CorruptEntryError):
        opened.lookup(victim.key)
    verify = gtcache_cli(store, "verify")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert files(store) == before, "inspecting changes nothing"
    figures.add("hostile input", f"entry.json with {damage}: listed broken, verify exit code", verify.returncode)


def test_hostile_manifest(store: pathlib.Path, tmp_path: pathlib.Path, figures) -> None:
    manifest = tmp_path / "bad.toml"
    manifest.write_text('[[variant]]\nprogram = gtcache.examples:axpy\n')
    before = files(store)
    line = one_line_error(gtcache_cli(store, "warm", "--manifest", str(manifest)), 2)
    assert str(manifest) in line and "line 2" in line, line
    assert files(store) == before
    figures.add("hostile input", "manifest with bad TOML: exit code", 2)


def test_store_of_a_newer_layout(store: pathlib.Path, figures) -> None:
    layout = store / "gtcache-layout.json"
    layout.write_text(json.dumps({"format": "gtcache-store", "layout_version": 99}))
    before = files(store)
    for command in (["ls"], ["stats"], ["prune", "--max-size", "0", "--yes"], ["clear", "--yes"], ["verify", "--repair"]):
        line = one_line_error(gtcache_cli(store, *command), 1)
        assert str(store) in line and "99" in line, line
    assert files(store) == before
    figures.add("hostile input", "store of layout version 99: exit code for ls/stats/prune/clear/verify", 1)
