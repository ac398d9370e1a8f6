"""Where the remote tiers come from: ``GTCACHE_REMOTE``, ``[remote]`` in the store's
``gtcache.toml`` and ``gtcache.install(remote=...)``; each way in a fresh process."""

from __future__ import annotations

import json
import pathlib

import pytest

import gtcache
from gtcache.errors import GtcacheError
from gtcache.policies.config import config_file_problems, remote_urls
from gtcache.remote import Remote, parse_remote
from tests.remote.conftest import free_port
from tests.remote.helpers import KEY, MODEL_RUN, model_run


def _write_toml(store: pathlib.Path, urls: object) -> None:
    store.mkdir(parents=True, exist_ok=True)
    (store / "gtcache.toml").write_text(f"[limits]\nmax_size = \"1G\"\n\n[remote]\nurls = {json.dumps(urls)}\n")


@pytest.mark.slow
@pytest.mark.parametrize("way", ["env", "toml", "install", "install-over-env", "empty-env-over-toml"])
def test_each_way_to_name_a_remote(way: str, redis_server: str, tmp_path: pathlib.Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    rw = f"{redis_server}?mode=read-write"
    dead = f"redis://127.0.0.1:{free_port()}/0?mode=read-write"
    store = tmp_path / "ci"
    env: dict[str, str] = {}
    if way == "env":
        env["GTCACHE_REMOTE"] = rw
    if way in ("toml", "empty-env-over-toml"):
        _write_toml(store, [rw])
    if way == "empty-env-over-toml":
        env["GTCACHE_REMOTE"] = ""
    if way.startswith("install"):
        monkeypatch.setattr("tests.remote.helpers.MODEL_RUN", MODEL_RUN.replace(
            "gtcache.install()", f"gtcache.install(remote={[rw]!r})"))
        _write_toml(store, [dead])  # install(remote=...) wins over the file...
        if way == "install-over-env":
            env["GTCACHE_REMOTE"] = dead  # ... and over the environment
    run = model_run(store, None, tmp_path, **env)
    assert run["correct"] == [True] and [o["status"] for o in run["outcomes"]] == ["compiled"], run
    assert not [w for w in run["warnings"] if "127.0.0.1" in w], run["warnings"]  # the dead one was not used
    pushed = Remote(parse_remote(redis_server), key=KEY.encode()).has(run["outcomes"][0]["key"])
    assert pushed == (way != "empty-env-over-toml"), way

    if way == "toml":  # a fresh store whose gtcache.toml names the remote (read) is served from it
        node = tmp_path / "node"
        _write_toml(node, [redis_server])
        fresh = model_run(node, None, tmp_path)
        assert [(o["status"], o["via"]) for o in fresh["outcomes"]] == [("hit", "direct")], fresh
        assert "from remote" in fresh["outcomes"][0]["detail"]


def test_remote_urls_of_the_file(tmp_path: pathlib.Path) -> None:
    settings = gtcache.Settings.from_env(cache_dir=tmp_path, env={})
    assert remote_urls(settings) == ((), "unset")
    _write_toml(tmp_path, "redis://a:1/0 http://b/c")
    assert remote_urls(settings) == (("redis://a:1/0", "http://b/c"), "gtcache.toml [remote]")
    _write_toml(tmp_path, ["redis://a:1/0", "http://b/c"])
    assert remote_urls(settings)[0] == ("redis://a:1/0", "http://b/c")
    assert config_file_problems(tmp_path) == []
    env_settings = gtcache.Settings.from_env(cache_dir=tmp_path, env={"GTCACHE_REMOTE": "http://e/f"})
    assert remote_urls(env_settings) == (("http://e/f",), "GTCACHE_REMOTE")
    _write_toml(tmp_path, [1, 2])
    with pytest.raises(GtcacheError, match=r"\[remote\] urls is not a URL or a list of URLs"):
        remote_urls(settings)
    assert config_file_problems(tmp_path) == [f"'{tmp_path / 'gtcache.toml'}': [remote] urls is not a URL or a list of URLs."]


def test_install_checks_its_remote_argument() -> None:
    with pytest.raises(GtcacheError, match="is not a redis://"):
        gtcache.install(remote="ftp://example.org/x")
    with pytest.raises(GtcacheError, match="takes a URL or a list of URLs"):
        gtcache.install(remote=[1])  # type: ignore[list-item]


def test_doctor_and_push_read_the_file(redis_server: str, tmp_path: pathlib.Path) -> None:
    from tests.helpers import publish
    from tests.remote.helpers import gtcache_cli

    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    _write_toml(store.root, [f"{redis_server}?mode=read-write"])
    code, out = gtcache_cli("--cache-dir", str(store.root), "doctor", env={"GTCACHE_REMOTE": None})  # type: ignore[dict-item]
    remotes = [line for line in out.splitlines() if line.startswith("Remote:")]
    assert len(remotes) == 1 and remotes[0].endswith("(read-write)  answers"), out
    code, out = gtcache_cli("--cache-dir", str(store.root), "push", env={"GTCACHE_REMOTE": None})  # type: ignore[dict-item]
    assert code == 0 and out.startswith("Pushed 1 entry to"), out
    # GTCACHE_REMOTE set empty: no remote, whatever the file says.
    code, out = gtcache_cli("--cache-dir", str(store.root), "push", env={"GTCACHE_REMOTE": ""})
    assert code == 1 and "No remote" in out, out
