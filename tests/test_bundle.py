"""Bundles: export, import elsewhere, fresh-process hits; hostile bundles refused, nothing written."""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import tarfile

import pytest

import gtcache
from gtcache.bundle import BundleError, export_bundle, import_bundle
from tests.conftest import SIZE, CompiledStore
from tests.helpers import load_in_fresh_process
from tests.store.test_store import publish

KEY = b"ci-secret"


@pytest.fixture
def bundle(tmp_path: pathlib.Path) -> pathlib.Path:
    store = gtcache.open_store(tmp_path / "src")
    for name in ("a", "b"):
        publish(store, name, payload=name.encode() * 1000)
    path = tmp_path / "cache.tar.gz"
    export_bundle(store, store.scan().entries, path, key=KEY)
    return path


def entries(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.glob("entries/*/*"))


def test_export_import_round_trip(bundle: pathlib.Path, tmp_path: pathlib.Path) -> None:
    target = gtcache.open_store(tmp_path / "dst")
    report = import_bundle(target, bundle, key=KEY)
    assert len(report.imported) == 2 and not report.existing and not report.skipped
    for entry in target.scan().entries:
        target.verify_payload(target.get(entry.key))
    again = import_bundle(target, bundle, key=KEY)
    assert again.imported == () and len(again.existing) == 2


def test_compiled_store_moves_by_bundle_and_hits_in_a_fresh_process(
    compiled_store: CompiledStore, tmp_path: pathlib.Path
) -> None:
    source = gtcache.open_store(compiled_store.path)
    path = tmp_path / "ci.tar.gz"
    export_bundle(source, [e for e in source.scan().entries if e.program == "edge_diff"], path)
    target = gtcache.open_store(tmp_path / "elsewhere")
    assert len(import_bundle(target, path).imported) == 3
    for backend in ("gtfn_cpu", "dace_cpu"):
        outcomes = load_in_fresh_process(target.root, "edge_diff", backend, seed=4, size=SIZE, out_file=tmp_path / "o.npy")
        assert [o["status"] for o in outcomes] == ["hit"]


def tamper(bundle: pathlib.Path, out: pathlib.Path, edit) -> pathlib.Path:  # type: ignore[no-untyped-def]
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            member, data = edit(member, data)
            if member is not None:
                dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def flip_payload(member: tarfile.TarInfo, data: bytes | None):  # type: ignore[no-untyped-def]
    if data is not None and member.name.endswith("program.py"):
        data = bytes([data[0] ^ 1]) + data[1:]
    return member, data


def test_tampered_payload_is_refused(bundle: pathlib.Path, tmp_path: pathlib.Path) -> None:
    bad = tamper(bundle, tmp_path / "bad.tar.gz", flip_payload)
    target = gtcache.open_store(tmp_path / "dst")
    with pytest.raises(BundleError, match="does not match its checksum"):
        import_bundle(target, bad)
    assert entries(target.root) == []


def test_signature_is_checked(bundle: pathlib.Path, tmp_path: pathlib.Path) -> None:
    target = gtcache.open_store(tmp_path / "dst")
    with pytest.raises(BundleError, match="wrong signature"):
        import_bundle(target, bundle, key=b"another key")

    def edit_manifest(member: tarfile.TarInfo, data: bytes | None):  # type: ignore[no-untyped-def]
        if member.name == "manifest.json" and data is not None:
            data = data.replace(b'"format": 1', b'"format": 1 ')
            member.size = len(data)
        return member, data

    with pytest.raises(BundleError, match="wrong signature"):
        import_bundle(target, tamper(bundle, tmp_path / "m.tar.gz", edit_manifest), key=KEY)

    unsigned = tmp_path / "unsigned.tar.gz"
    export_bundle(gtcache.open_store(tmp_path / "src"), [], unsigned)
    with pytest.raises(BundleError, match="not signed"):
        import_bundle(target, unsigned, key=KEY)
    assert entries(target.root) == []


def hostile_member(kind: str) -> tarfile.TarInfo:
    names = {"traversal": "entries/../../evil", "absolute": "/tmp/evil", "extra": "entries/zz/extra.txt"}
    member = tarfile.TarInfo(names.get(kind, "entries/ab/link"))
    if kind == "symlink":
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        member.type, member.linkname = tarfile.LNKTYPE, "manifest.json"
    elif kind == "device":
        member.type = tarfile.CHRTYPE
    else:
        member.size = 4
    return member


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink", "hardlink", "device", "extra"])
def test_hostile_members_are_refused(bundle: pathlib.Path, tmp_path: pathlib.Path, kind: str) -> None:
    out = tmp_path / "hostile.tar.gz"
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        hostile = hostile_member(kind)
        dst.addfile(hostile, io.BytesIO(b"evil") if hostile.isfile() else None)
    target = gtcache.open_store(tmp_path / "dst")
    with pytest.raises(BundleError):
        import_bundle(target, out, key=KEY)
    assert entries(target.root) == []
    assert not (tmp_path / "evil").exists()


def test_toolchain_mismatch_is_skipped_unless_forced(bundle: pathlib.Path, tmp_path: pathlib.Path) -> None:
    target = gtcache.open_store(tmp_path / "dst")
    report = import_bundle(target, bundle, key=KEY, facts={"gt4py": "9.9.9"})
    assert len(report.skipped) == 2 and "gt4py" in next(iter(report.skipped.values()))
    assert len(import_bundle(target, bundle, key=KEY, facts={"gt4py": "9.9.9"}, force=True).imported) == 2


def test_cli_export_import(bundle: pathlib.Path, tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from gtcache_cli.main import cli

    out = tmp_path / "cli.tar.gz"
    result = CliRunner().invoke(cli, ["--cache-dir", str(tmp_path / "src"), "export", str(out), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["entries"] == 2
    # The synthetic entries say gt4py 1.2.3: under another gt4py they are skipped unless forced.
    result = CliRunner().invoke(cli, ["--cache-dir", str(tmp_path / "dst"), "import", str(out), "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 0 and len(report["imported"]) + len(report["skipped"]) == 2
    result = CliRunner().invoke(cli, ["--cache-dir", str(tmp_path / "dst"), "import", str(out), "--force", "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 0 and len(report["imported"]) + len(report["existing"]) == 2
    assert len(gtcache.open_store(tmp_path / "dst").scan().entries) == 2
    shutil.copy(out, tmp_path / "copy.tar.gz")
    result = CliRunner().invoke(cli, ["--cache-dir", str(tmp_path / "dst"), "import", str(tmp_path / "copy.tar.gz")],
                                env={"GTCACHE_BUNDLE_KEY": "k"})
    assert result.exit_code == 1 and "not signed" in result.output
