"""The remote tier on real servers: Redis and nginx WebDAV, started on loopback ports.

Every model run is a fresh process with ``GTCACHE_DIR`` and ``GTCACHE_REMOTE`` set, as a
CI job's is; the roundtrip backend keeps the compiles cheap.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
from click.testing import CliRunner

import gtcache
from gtcache import bundle
from gtcache.remote import Remote, RemoteError, entry_object, parse_remote
from gtcache_cli.main import cli
from tests.helpers import publish, run_python, without_gt4py_build_cache
from tests.remote.conftest import SilentServer, free_port
from tests.remote.helpers import KEY, MODEL_RUN, gtcache_cli, model_run

@pytest.mark.slow
def test_fresh_store_hits_from_remote_and_compiles_nothing(remote_url: str, tmp_path: pathlib.Path) -> None:
    compiled = model_run(tmp_path / "ci", f"{remote_url}?mode=read-write", tmp_path)
    assert compiled["correct"] == [True]
    assert [o["status"] for o in compiled["outcomes"]] == ["compiled"]
    key = compiled["outcomes"][0]["key"]
    remote = Remote(parse_remote(remote_url), key=KEY.encode())
    assert remote.has(key), "the compile was not pushed at exit"

    # A fresh store on another "node": served from the remote by the direct key (no lowering).
    fresh = model_run(tmp_path / "node", remote_url, tmp_path)
    assert fresh["correct"] == [True]
    assert [(o["status"], o["via"]) for o in fresh["outcomes"]] == [("hit", "direct")], fresh
    assert "from remote" in fresh["outcomes"][0]["detail"]
    # ... copied into the local store: the next process hits locally, without the remote.
    assert gtcache.open_store(tmp_path / "node").lookup(key) is not None
    again = model_run(tmp_path / "node", None, tmp_path)
    assert [(o["status"], o["detail"]) for o in again["outcomes"]] == [("hit", None)]

    # Without the direct link on the remote: found by the build key after lowering.
    _drop_direct_links(remote_url)
    by_build = model_run(tmp_path / "node2", remote_url, tmp_path)
    assert [(o["status"], o["via"]) for o in by_build["outcomes"]] == [("hit", "build")], by_build
    assert by_build["correct"] == [True] and by_build["warnings"] == []


def _drop_direct_links(url: str) -> None:
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        for name in client.scan_iter(match="gtcache/v1/direct/*"):
            client.delete(name)
    else:
        import httpx

        # nginx lists nothing; delete the links by name through WebDAV DELETE of the folder.
        httpx.request("DELETE", f"{url}/v1/direct/")


@pytest.mark.slow
@pytest.mark.parametrize("tampering", ["resigned", "garbage"])
def test_tampered_remote_object_is_refused_and_recompiled(
    remote_url: str, tampering: str, tmp_path: pathlib.Path
) -> None:
    compiled = model_run(tmp_path / "ci", f"{remote_url}?mode=read-write", tmp_path)
    key = compiled["outcomes"][0]["key"]
    store = gtcache.open_store(tmp_path / "ci")
    if tampering == "resigned":  # the attacker re-signs the entry with a key of their own
        out = io.BytesIO()
        bundle.write_bundle(out, store, [store.get(key)], key=b"the attacker's key")
        data, said = out.getvalue(), "wrong signature"
    else:
        data, said = b"<html>not a bundle</html>" * 100, "not a gtcache bundle"
    attacker = Remote(parse_remote(f"{remote_url}?mode=read-write"), key=b"the attacker's key")
    attacker._call("put", lambda b: b.put(entry_object(key), data))
    _drop_direct_links(remote_url)  # (a link alone cannot be forged either: it is signed too)

    fresh = model_run(tmp_path / "node", remote_url, tmp_path)
    assert fresh["correct"] == [True]
    assert [o["status"] for o in fresh["outcomes"]] == ["compiled"], fresh
    assert any(said in w for w in fresh["warnings"]), fresh["warnings"]


@pytest.mark.slow
def test_forged_direct_link_is_refused(remote_url: str, tmp_path: pathlib.Path) -> None:
    compiled = model_run(tmp_path / "ci", f"{remote_url}?mode=read-write", tmp_path, "axpy", "edge_diff")
    axpy, edge_diff = (o["key"] for o in compiled["outcomes"])
    honest = Remote(parse_remote(remote_url), key=KEY.encode())
    # Point every direct link at edge_diff's (validly signed) entry, with another key's signature.
    forger = Remote(parse_remote(f"{remote_url}?mode=read-write"), key=b"forger")
    direct = _direct_keys(tmp_path / "ci")
    for direct_key in direct:
        assert honest.build_key_of(direct_key) in (axpy, edge_diff)
        forger.push_direct(direct_key, edge_diff)
        with pytest.raises(RemoteError, match="wrong or no signature"):
            honest.build_key_of(direct_key)
    fresh = model_run(tmp_path / "node", remote_url, tmp_path, "axpy")
    assert fresh["correct"] == [True]
    assert [(o["status"], o["key"]) for o in fresh["outcomes"]] == [("hit", axpy)], fresh


def _direct_keys(store: pathlib.Path) -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in (store / "direct").rglob("*") if p.is_file())


class _RedisMonitor:
    """The commands a Redis server runs (``MONITOR`` on a connection of its own)."""

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port))
        self.sock.sendall(b"MONITOR\r\n")
        self.data = bytearray()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := self.sock.recv(65536):
                self.data += chunk

    def count(self, command: str) -> int:
        return self.data.decode(errors="replace").count(command)

    def close(self) -> None:
        self.sock.close()


RANKS = 8


@pytest.mark.slow
@pytest.mark.parametrize("server", ["http", "redis"])
def test_processes_missing_one_key_download_it_once_per_store(
    server: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """8 ranks on one empty store miss one key at once: the entry is downloaded once (the
    server says so: nginx's access log, Redis's MONITOR), every rank hits."""
    if server == "http":
        base, folder = request.getfixturevalue("nginx_server")
        log = folder.parents[1] / "access.log"
    else:
        base = request.getfixturevalue("redis_server")
        import redis

        redis.Redis.from_url(base).flushdb()
    compiled = model_run(tmp_path / "ci", f"{base}?mode=read-write", tmp_path)
    key = compiled["outcomes"][0]["key"]

    if server == "http":
        def downloads() -> int:
            return sum(f"GET /cache/v1/entries/{key}.tar.gz" in line for line in log.read_text().splitlines())
        before = downloads()
    else:
        monitor = _RedisMonitor(base)
        time.sleep(0.2)
        before = 0

        def downloads() -> int:
            time.sleep(0.5)  # MONITOR's output lags the commands a little
            # an object is read in GETRANGE chunks (never GET): count the first chunk of each read
            return monitor.count(f'"GETRANGE" "gtcache/v1/entries/{key}.tar.gz" "0"')

    env = {**os.environ, "GTCACHE_DIR": str(tmp_path / "node"), "GTCACHE_REMOTE": base, "GTCACHE_BUNDLE_KEY": KEY,
           **without_gt4py_build_cache(tmp_path / "gt4py-node")}
    ranks = [subprocess.Popen([sys.executable, "-c", MODEL_RUN, "axpy"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(RANKS)]
    for rank in ranks:
        out, err = rank.communicate(timeout=600)
        assert rank.returncode == 0, err
        result = json.loads(out.splitlines()[-1])
        assert result["correct"] == [True] and [o["status"] for o in result["outcomes"]] == ["hit"], result
    try:
        assert downloads() - before == 1
    finally:
        if server == "redis":
            monitor.close()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["redis", "http"])
def test_silent_remote_costs_one_timeout_per_process(
    scheme: str, silent_server: SilentServer, tmp_path: pathlib.Path
) -> None:
    url = f"{scheme}://127.0.0.1:{silent_server.port}/?timeout=1&connect_timeout=1"
    run = model_run(tmp_path / "node", url, tmp_path, "axpy", "edge_diff")
    assert run["correct"] == [True, True]
    assert [o["status"] for o in run["outcomes"]] == ["compiled", "compiled"]
    assert silent_server.accepted == 1, "the remote was asked again after it timed out"
    remote_warnings = [w for w in run["warnings"] if "127.0.0.1" in w]
    assert len(remote_warnings) == 1 and "timed out" in remote_warnings[0], run["warnings"]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["redis", "http"])
def test_remote_that_is_down_is_skipped_with_one_warning(scheme: str, tmp_path: pathlib.Path) -> None:
    url = f"{scheme}://127.0.0.1:{free_port()}/?mode=read-write"
    run = model_run(tmp_path / "node", url, tmp_path, "axpy", "edge_diff")
    assert run["correct"] == [True, True]
    assert [o["status"] for o in run["outcomes"]] == ["compiled", "compiled"]
    assert len([w for w in run["warnings"] if "127.0.0.1" in w]) == 1, run["warnings"]


@pytest.mark.slow
def test_remote_without_key_or_trust_is_not_used(redis_server: str, tmp_path: pathlib.Path) -> None:
    run = model_run(tmp_path / "node", redis_server, tmp_path, key=None)
    assert [o["status"] for o in run["outcomes"]] == ["compiled"]
    assert any("no GTCACHE_BUNDLE_KEY" in w for w in run["warnings"]), run["warnings"]


# -- the CLI -----------------------------------------------------------------------------------


def test_push_then_pull_round_trip(remote_url: str, tmp_path: pathlib.Path) -> None:
    source = gtcache.open_store(tmp_path / "source")
    keys = sorted(publish(source, name).key for name in ("alpha", "beta"))
    rw = f"{remote_url}?mode=read-write"
    code, out = gtcache_cli("--cache-dir", str(source.root), "push", "--remote", rw)
    assert (code, out) == (0, f"Pushed 2 entries to '{parse_remote(remote_url).name}' (0 there already).\n")
    code, out = gtcache_cli("--cache-dir", str(source.root), "push", "--remote", rw, "alpha")
    assert (code, out) == (0, f"Pushed 0 entries to '{parse_remote(remote_url).name}' (1 there already).\n")

    target = tmp_path / "target"
    code, out = gtcache_cli("--cache-dir", str(target), "pull", "--remote", remote_url, *keys)
    assert (code, out) == (0, "Pulled 2 entries; 0 there already; 0 skipped.\n")
    pulled = gtcache.open_store(target)
    for key in keys:
        entry = pulled.lookup(key)
        assert entry is not None
        assert (entry.path / "entry.json").read_bytes() == (source.get(key).path / "entry.json").read_bytes()
    code, out = gtcache_cli("--cache-dir", str(target), "verify")
    assert code == 0, out

    # With another key, the very same objects are refused: one Error line, exit 1, nothing written.
    other = tmp_path / "other"
    code, out = gtcache_cli("--cache-dir", str(other), "pull", "--remote", remote_url, keys[0],
                            env={"GTCACHE_BUNDLE_KEY": "another key"})
    assert code == 1 and out.startswith("Error: Remote object refused:") and "wrong signature" in out, out
    assert len(out.strip().splitlines()) == 1
    assert not any((other / "entries").rglob("entry.json"))


def test_cli_errors_are_one_line(redis_server: str, tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    root = str(store.root)
    cases = [
        (["push", "--remote", redis_server], "is read-only; add ?mode=read-write"),
        (["push"], "No remote: give --remote URL, set GTCACHE_REMOTE"),
        (["push", "--remote", "ftp://example.org/x"], "is not a redis://"),
        (["push", "--remote", f"{redis_server}?mode=write"], "mode='write'"),
        (["pull", "--remote", redis_server, "f" * 32], "on none of the remotes"),
        (["pull", "--remote", f"http://127.0.0.1:{free_port()}/"], "list failed: PROPFIND failed"),
        (["push", "--remote", f"redis://127.0.0.1:{free_port()}/?mode=read-write"], "failed"),
        (["push", "--force", "--remote", f"{redis_server}?mode=read-write&max_size=100"], "over the 100-byte limit"),
        (["push", "--remote", f"{redis_server}?timeout=-1"], "timeout='-1', not a number > 0"),
        (["push", "--remote", f"{redis_server}?color=red"], "unknown option 'color'"),
    ]
    for args, message in cases:
        code, out = gtcache_cli("--cache-dir", root, *args)
        assert code == 1, (args, out)
        errors = [line for line in out.splitlines() if line.startswith("Error: ")]
        assert errors == [out.strip().splitlines()[-1]] and message in errors[0], (args, out)
    code, out = gtcache_cli("--cache-dir", root, "pull", "--remote", redis_server, "nothex")
    assert code == 2 and "is not a key" in out


def test_password_and_token_are_never_shown(nginx_server: tuple[str, pathlib.Path], tmp_path: pathlib.Path) -> None:
    base, _ = nginx_server
    private = base.replace("/cache", "/private")
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    env = {"GTCACHE_REMOTE": f"{private}?mode=read-write", "GTCACHE_REMOTE_TOKEN": "s3cret-token"}
    code, out = gtcache_cli("--cache-dir", str(store.root), "push", env=env)
    assert code == 0, out
    code, out = gtcache_cli("--cache-dir", str(store.root), "push", env={**env, "GTCACHE_REMOTE_TOKEN": "wrong"})
    assert code == 1 and "HTTP 401" in out and "wrong" not in out, out
    with_password = private.replace("http://", "http://user:hunter2@")
    code, out = gtcache_cli("--cache-dir", str(store.root), "doctor", env={"GTCACHE_REMOTE": with_password,
                                                                       "GTCACHE_REMOTE_TOKEN": "s3cret-token"})
    assert "hunter2" not in out and "s3cret-token" not in out
    assert "Remote:        http://user:***@127.0.0.1" in out and "answers" in out, out


def test_doctor_shows_each_remote_and_whether_it_answers(redis_server: str, tmp_path: pathlib.Path) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    env = {"GTCACHE_REMOTE": f"{redis_server}?mode=read-write {down}"}
    proc = subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(tmp_path / "s"), "doctor"],
                          capture_output=True, text=True, env={**os.environ, **env,
                                                               "GTCACHE_BUNDLE_KEY": KEY}, check=False)
    remotes = [line for line in proc.stdout.splitlines() if line.startswith("Remote:")]
    assert len(remotes) == 2, proc.stdout + proc.stderr
    assert remotes[0].endswith("(read-write)  answers")
    assert "(read)  Does not answer:" in remotes[1]


def test_trusted_remote_works_without_a_key(redis_server: str, tmp_path: pathlib.Path) -> None:
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    source = gtcache.open_store(tmp_path / "source")
    key = publish(source, "alpha").key
    result = CliRunner().invoke(cli, ["--cache-dir", str(source.root), "push", "--remote",
                                      f"{redis_server}?mode=read-write"],
                                env={"GTCACHE_BUNDLE_KEY": None}, catch_exceptions=False)
    assert result.exit_code == 1 and "no GTCACHE_BUNDLE_KEY" in result.output, result.output
    result = CliRunner().invoke(cli, ["--cache-dir", str(source.root), "push", "--remote",
                                      f"{redis_server}?mode=read-write&trusted=1"],
                                env={"GTCACHE_BUNDLE_KEY": None}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["--cache-dir", str(tmp_path / "target"), "pull", "--remote",
                                      f"{redis_server}?trusted=1"], env={"GTCACHE_BUNDLE_KEY": None},
                                catch_exceptions=False)
    assert (result.exit_code, result.output) == (0, "Pulled 1 entry; 0 there already; 0 skipped.\n")
    assert gtcache.open_store(tmp_path / "target").lookup(key) is not None
    # An unsigned object is refused as soon as a key is set, whatever the URL says.
    code, out = gtcache_cli("--cache-dir", str(tmp_path / "third"), "pull", "--remote", f"{redis_server}?trusted=1", key)
    assert code == 1 and "is not signed" in out, out


def test_remote_urls_are_read_from_the_environment() -> None:
    env = {"GTCACHE_REMOTE": " redis://a:6379/0?mode=read-write,https://b/cache  http://c/x ",
           "GTCACHE_REMOTE_TOKEN": "t0ken", "GTCACHE_REMOTE_PASSWORD": "pw"}
    settings = gtcache.Settings.from_env(env=env)
    assert settings.remotes == ("redis://a:6379/0?mode=read-write", "https://b/cache", "http://c/x")
    assert "t0ken" not in repr(settings) and "pw" not in repr(settings) and "redis://" not in repr(settings)
    spec = parse_remote("redis://me:secret@a:6379/0?mode=read-write&trusted=1&timeout=0.5&retries=0")
    assert (spec.mode, spec.trusted, spec.timeout, spec.retries, spec.name) == (
        "read-write", True, 0.5, 0, "redis://me:***@a:6379/0")
    assert "secret" not in repr(spec)
    assert parse_remote("http://b/cache").mode == "read"


def test_push_completes_keys_and_program_names(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    env = {"_GTCACHE_COMPLETE": "bash_complete", "COMP_WORDS": f"gtcache --cache-dir {store.root} push al",
           "COMP_CWORD": "4"}
    result = CliRunner().invoke(cli, [], env=env, prog_name="gtcache")
    assert "alpha" in [line.split(",", 1)[1] for line in result.output.splitlines() if "," in line], result.output


def test_a_broken_entry_is_not_pushed(redis_server: str, tmp_path: pathlib.Path) -> None:
    """An entry whose file no longer matches its record is refused by push, naming why, and
    nothing is put on the remote (no empty bundle named after it, no info object)."""
    import redis

    from gtcache.remote import RemoteError, entry_object, info_object

    store = gtcache.open_store(tmp_path / "source")
    entry = publish(store, "alpha", payload=b"print('alpha')\n")
    program = entry.path / "program.py"
    program.chmod(0o644)
    program.write_bytes(b"print('ALPHA')\n")  # the same size: only its checksum tells
    remote = Remote(parse_remote(f"{redis_server}?mode=read-write"), key=KEY.encode())
    with pytest.raises(RemoteError, match=f"Entry '{entry.key}' is broken and was not pushed"):
        remote.push(store, entry.key)
    # A file of another size: the entry's lookup refuses it, before any bundle is made.
    beta = publish(store, "beta", payload=b"print('beta')\n")
    (beta.path / "program.py").chmod(0o644)
    (beta.path / "program.py").write_bytes(b"print()\n")
    with pytest.raises(RemoteError, match=f"Entry '{beta.key}' is broken and was not pushed: .*program.py"):
        remote.push(store, beta.key)
    client = redis.Redis.from_url(redis_server)
    for key in (entry.key, beta.key):
        assert client.get("gtcache/" + entry_object(key)) is None
        assert client.get("gtcache/" + info_object(key)) is None
    assert remote.broken is None


@pytest.mark.slow
def test_a_push_the_remote_refuses_keeps_the_entry_local(redis_server: str, tmp_path: pathlib.Path) -> None:
    """A compile whose entry is over the remote's ``max_size``: one warning saying it is kept
    locally (not that the program is compiled here), the entry is in the local store, and the
    remote is not dropped (the next push is tried: one warning per entry)."""
    # MODEL_RUN, waiting for the pushes before its warnings are no longer recorded.
    flushed = MODEL_RUN.replace("print(json.dumps(", "    hook.remote_tiers().flush()\n" "print(json.dumps(", 1)
    assert flushed.count("hook.remote_tiers().flush()") == 1
    env = {"GTCACHE_DIR": str(tmp_path / "store"), "GTCACHE_BUNDLE_KEY": KEY,
           "GTCACHE_REMOTE": f"{redis_server}?mode=read-write&max_size=100",
           **without_gt4py_build_cache(tmp_path / "gt4py")}
    run = json.loads(run_python(flushed, "axpy", "edge_diff", env=env).splitlines()[-1])
    assert run["correct"] == [True, True]
    assert [o["status"] for o in run["outcomes"]] == ["compiled", "compiled"]
    assert len(run["warnings"]) == 2, run["warnings"]
    for outcome, warned in zip(run["outcomes"], run["warnings"], strict=True):
        assert f"Entry '{outcome['key']}' makes an object of" in warned and "over the 100-byte limit" in warned
        assert warned.endswith("(kept in the local store only)"), warned
        assert gtcache.open_store(tmp_path / "store").lookup(outcome["key"]) is not None


def test_an_entry_for_another_toolchain_is_not_fetched(redis_server: str, tmp_path: pathlib.Path) -> None:
    """``fetch`` is False for an entry the remote holds for another gt4py (skipped, not
    published): the caller compiles, rather than look for an entry that is not there."""
    source = gtcache.open_store(tmp_path / "source")
    entry = publish(source, "alpha")
    remote = Remote(parse_remote(f"{redis_server}?mode=read-write"), key=KEY.encode())
    assert remote.push(source, entry.key)
    target = gtcache.open_store(tmp_path / "target")
    assert remote.fetch(target, entry.key, facts={"gt4py": "9.9.9"}) is False
    assert target.lookup(entry.key) is None
    report = remote.fetch_report(target, entry.key, facts={"gt4py": "9.9.9"})
    assert report is not None and list(report.skipped) == [entry.key] and "gt4py" in report.skipped[entry.key]
    assert remote.fetch(target, entry.key) is True and target.lookup(entry.key) is not None
