"""A store's ``gtcache.toml`` names remotes, but whoever can write the file is not the reader:
its remotes are never trusted, always need the bundle key, get none of the environment's
credentials, and the file is read only when it and the store pass the trust check.

(The review's a3_toml.py and a3_hook.py, as tests: a fake HTTP server records what it is sent.)
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterator

import pytest

import gtcache
from gtcache.errors import GtcacheError
from gtcache.policies.config import FILE_SOURCE, remote_urls
from gtcache.remote import RemoteError, open_remote
from tests.remote import fakes
from tests.remote.helpers import KEY, gtcache_cli, model_run

SECRETS = {"GTCACHE_REMOTE_TOKEN": "s3cr3t-token", "GTCACHE_REMOTE_USER": "alice", "GTCACHE_REMOTE_PASSWORD": "pw"}


@pytest.fixture
def server() -> Iterator[fakes.FakeServer]:
    server = fakes.http_404()
    try:
        yield server
    finally:
        server.close()


def _store_with_toml(tmp_path: pathlib.Path, *urls: str) -> pathlib.Path:
    root = gtcache.open_store(tmp_path / "store", create=True).root
    (root / "gtcache.toml").write_text(f"[remote]\nurls = {json.dumps(list(urls))}\n")
    return root


def _authorizations(server: fakes.FakeServer) -> list[str]:
    return [line for head in server.requests for line in head.splitlines() if line.lower().startswith("authorization")]


def _doctor_remote_lines(root: pathlib.Path, **env: str | None) -> list[str]:
    code, out = gtcache_cli("--cache-dir", str(root), "doctor", env={"GTCACHE_REMOTE": None, **env})  # type: ignore[dict-item]
    return [line for line in out.splitlines() if line.startswith("Remote:")]


@pytest.mark.parametrize("case", ["foreign-owner", "world-writable-file", "group-writable-file", "untrusted-store"])
def test_the_file_is_read_only_when_it_and_the_store_pass_the_trust_check(
        case: str, server: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    root = _store_with_toml(tmp_path, f"http://127.0.0.1:{server.port}/steal")
    toml = root / "gtcache.toml"
    if case == "foreign-owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(toml, 12345, 12345)
    elif case == "world-writable-file":
        os.chmod(toml, 0o666)
    elif case == "group-writable-file":
        if os.geteuid() != 0:
            pytest.skip("a foreign group needs root")
        os.chown(toml, os.geteuid(), 12345)
        os.chmod(toml, 0o664)
    else:
        os.chmod(root, 0o777)
    settings = gtcache.Settings.from_env(cache_dir=root, env={})
    with pytest.raises(GtcacheError, match=r"\[remote\] of '.*gtcache.toml' is not read: "):
        remote_urls(settings)
    lines = _doctor_remote_lines(root, **SECRETS)
    assert len(lines) == 1 and "is not read" in lines[0], lines
    code, out = gtcache_cli("--cache-dir", str(root), "pull", "ab" * 16, env={"GTCACHE_REMOTE": None})  # type: ignore[dict-item]
    assert code == 1 and out.startswith("Error: ") and "is not read" in out, out
    assert server.requests == []  # nothing was asked of the file's server


def test_trusted_is_refused_in_the_file(server: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    url = f"http://127.0.0.1:{server.port}/steal?trusted=1"
    root = _store_with_toml(tmp_path, url)
    settings = gtcache.Settings.from_env(cache_dir=root, env={})
    assert remote_urls(settings) == ((url,), FILE_SOURCE)
    with pytest.raises(RemoteError, match="says trusted=1, which only the reader's own GTCACHE_REMOTE"):
        open_remote(url, settings, from_file=True)
    assert open_remote(url, settings).spec.trusted  # the reader's own URL may say it
    code, out = gtcache_cli("--cache-dir", str(root), "pull", "ab" * 16, env={"GTCACHE_REMOTE": None})  # type: ignore[dict-item]
    assert code == 1 and out.count("Error:") == 1 and "trusted=1" in out, out
    lines = _doctor_remote_lines(root)
    assert len(lines) == 1 and "Not used" in lines[0] and "trusted=1" in lines[0], lines
    assert server.requests == []


def test_a_file_remote_needs_the_bundle_key(server: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    root = _store_with_toml(tmp_path, f"http://127.0.0.1:{server.port}/steal")
    code, out = gtcache_cli("--cache-dir", str(root), "pull", "ab" * 16,
                            env={"GTCACHE_REMOTE": None, "GTCACHE_BUNDLE_KEY": None})  # type: ignore[dict-item]
    assert code == 1 and "no GTCACHE_BUNDLE_KEY" in out and "used only with the key" in out, out
    assert server.requests == []


def test_credentials_go_only_to_the_readers_own_remotes(server: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    url = f"http://127.0.0.1:{server.port}/cache"
    root = _store_with_toml(tmp_path, url)
    lines = _doctor_remote_lines(root, **SECRETS)  # pings the file's remote, with the key
    assert len(lines) == 1 and lines[0].endswith("answers"), lines
    assert server.requests and _authorizations(server) == []
    # The same URL in the reader's own GTCACHE_REMOTE gets them (plain http too: the reader chose it).
    server.requests.clear()
    lines = _doctor_remote_lines(root, GTCACHE_REMOTE=url, **SECRETS)
    assert _authorizations(server) == ["Authorization: Bearer s3cr3t-token"]


@pytest.mark.slow
def test_the_hook_refuses_trusted_and_sends_no_credentials(server: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    root = _store_with_toml(tmp_path, f"http://127.0.0.1:{server.port}/trusted?trusted=1&mode=read-write",
                            f"http://127.0.0.1:{server.port}/plain?mode=read-write")
    run = model_run(root, None, tmp_path, **SECRETS)
    assert run["correct"] == [True] and [o["status"] for o in run["outcomes"]] == ["compiled"], run
    refused = [w for w in run["warnings"] if "trusted=1" in w]
    assert len(refused) == 1 and "/trusted" in refused[0], run["warnings"]
    paths = [head.split()[1] for head in server.requests]
    assert paths and all(p.startswith("/plain/") for p in paths), paths  # the key-verified one is used
    assert _authorizations(server) == []


@pytest.mark.slow
def test_the_hook_does_not_read_a_foreign_file(server: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    root = _store_with_toml(tmp_path, f"http://127.0.0.1:{server.port}/steal?mode=read-write")
    os.chown(root / "gtcache.toml", 12345, 12345)
    run = model_run(root, None, tmp_path, key=KEY, **SECRETS)
    assert run["correct"] == [True] and [o["status"] for o in run["outcomes"]] == ["compiled"], run
    assert [w for w in run["warnings"] if "is not read" in w and "12345" in w], run["warnings"]
    assert server.requests == []
