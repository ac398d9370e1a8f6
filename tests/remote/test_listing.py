"""``gtcache ls --remote``: what a remote holds, where its protocol can list (Redis SCAN,
WebDAV PROPFIND); a plain HTTP server cannot, and says so."""

from __future__ import annotations

import json
import pathlib

import gtcache
from gtcache.remote import Remote, entry_object, info_object, parse_remote
from tests.helpers import publish
from tests.remote.helpers import KEY, gtcache_cli


def _pushed(remote_url: str, tmp_path: pathlib.Path) -> tuple[gtcache.Store, list[str]]:
    source = gtcache.open_store(tmp_path / "source")
    keys = sorted(publish(source, name, payload=name.encode() * 1000).key for name in ("alpha", "beta"))
    code, out = gtcache_cli("--cache-dir", str(source.root), "push", "--remote", f"{remote_url}?mode=read-write")
    assert code == 0, out
    return source, keys


def test_ls_remote_lists_what_was_pushed(remote_url: str, tmp_path: pathlib.Path) -> None:
    store = tmp_path / "empty"
    code, out = gtcache_cli("--cache-dir", str(store), "ls", "--remote", remote_url)
    assert (code, out) == (0, f"No entries on '{parse_remote(remote_url).name}'.\n")

    source, keys = _pushed(remote_url, tmp_path)
    code, out = gtcache_cli("--cache-dir", str(store), "ls", "--remote", remote_url, "--json")
    assert code == 0, out
    rows = json.loads(out)
    assert sorted(r["key"] for r in rows) == keys
    assert [r["program"].rpartition(".")[2] for r in rows] == ["alpha", "beta"]  # sorted by program
    remote = Remote(parse_remote(f"{remote_url}?mode=read-write"), key=KEY.encode())
    for row in rows:
        entry = source.get(row["key"])
        assert row["program"] == entry.record.program["name"] or row["program"].endswith("." + entry.record.program["name"])
        assert row["backend"] == entry.record.backend["name"]
        assert row["created"] == entry.record.created
        # the signed object's bytes; when it was written
        assert row["size"] == len(remote._call("get", lambda b, k=row["key"]: b.get(entry_object(k), 1 << 30)))
        assert row["modified"]

    code, out = gtcache_cli("--cache-dir", str(store), "ls", "--remote", remote_url, "--program", "be*", env={"COLUMNS": "200"})
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["KEY", "PROGRAM", "BACKEND", "SIZE", "CREATED", "PUSHED"], out
    assert len(lines) == 3 and "beta" in lines[1] and lines[2].startswith("1 entry, "), out

    # An entry pushed by a gtcache that wrote no info object still lists, with what is known.
    remote._call("put", lambda b: b.put(info_object(keys[0]), b"garbage"))
    code, out = gtcache_cli("--cache-dir", str(store), "ls", "--remote", remote_url, "--json")
    unknown = [r for r in json.loads(out) if r["key"] == keys[0]]
    assert [(r["program"], r["backend"]) for r in unknown] == [(None, None)], out


def test_pull_everything_from_a_webdav_remote(remote_url: str, tmp_path: pathlib.Path) -> None:
    _, keys = _pushed(remote_url, tmp_path)
    code, out = gtcache_cli("--cache-dir", str(tmp_path / "target"), "pull", "--remote", remote_url)
    assert (code, out) == (0, "Pulled 2 entries; 0 there already; 0 skipped.\n")
    assert all(gtcache.open_store(tmp_path / "target").lookup(k) is not None for k in keys)


def test_plain_http_cannot_list(nginx_server: tuple[str, pathlib.Path], tmp_path: pathlib.Path) -> None:
    base, _ = nginx_server
    plain = base.replace("/cache", "/plain")
    source = gtcache.open_store(tmp_path / "source")
    publish(source, "alpha")
    code, out = gtcache_cli("--cache-dir", str(source.root), "push", "--remote", f"{plain}?mode=read-write")
    assert code == 0, out  # it stores objects...
    for args in (["ls", "--remote", plain], ["pull", "--remote", plain]):
        code, out = gtcache_cli("--cache-dir", str(tmp_path / "x"), *args)
        assert code == 1 and out.count("\n") == 1 and out.startswith("Error: Remote ") and "cannot list" in out, out
    code, out = gtcache_cli("--cache-dir", str(tmp_path / "x"), "ls", "--remote", plain, "--broken")
    assert code == 2, out
