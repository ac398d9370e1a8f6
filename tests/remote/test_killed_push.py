"""A push killed midway (SIGKILL while the push thread uploads a large object over a slow
link) leaves no partial object a reader could see: an object is written in one piece (one
Redis ``SET``; nginx keeps an upload in a temporary file until it is complete)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest

import gtcache
from gtcache.remote import Remote, entry_object, info_object, parse_remote
from tests.helpers import publish
from tests.remote.conftest import SlowProxy
from tests.remote.helpers import KEY

# The hook's push path: the background thread, then the exit's bounded flush.
PUSHER = """
import sys, warnings
from gtcache.gt4py._remote import RemoteTiers
from gtcache.remote import open_remote
from gtcache.settings import Settings
from gtcache.store import open_store
settings = Settings.from_env()
tiers = RemoteTiers((open_remote(sys.argv[2], settings),), lambda reason, consequence: print("warning:", reason))
tiers.push(open_store(sys.argv[1]), sys.argv[3], None)
print("pushing", flush=True)
assert tiers.flush(600) and tiers.pushed == 1
print("pushed", flush=True)
"""
SIZE = 3 << 20  # incompressible bytes: a ~3 MB object, some 12 s over the proxy


def _push(store: pathlib.Path, url: str, key: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PUSHER, str(store), url, key], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "GTCACHE_BUNDLE_KEY": KEY})


@pytest.mark.slow
@pytest.mark.parametrize("server", ["http", "redis"])
def test_push_killed_midway_leaves_no_partial_object(server: str, request: pytest.FixtureRequest,
                                                      tmp_path: pathlib.Path) -> None:
    if server == "http":
        base, folder = request.getfixturevalue("nginx_server")
        for child in folder.iterdir():
            import shutil

            shutil.rmtree(child)
    else:
        base = request.getfixturevalue("redis_server")
        import redis

        redis.Redis.from_url(base).flushdb()
    parts = urllib.parse.urlsplit(base)
    store = gtcache.open_store(tmp_path / "ci")
    key = publish(store, "big", payload=os.urandom(SIZE)).key
    reader = Remote(parse_remote(base), key=KEY.encode())

    proxy = SlowProxy((str(parts.hostname), int(parts.port or 80)))
    try:
        slow = urllib.parse.urlunsplit((parts.scheme, f"127.0.0.1:{proxy.port}", parts.path, "", ""))
        url = f"{slow}?mode=read-write&timeout=120"
        pusher = _push(store.root, url, key)
        deadline = time.monotonic() + 120
        while proxy.uploaded < SIZE // 3:  # well into the upload of the entry's object
            assert pusher.poll() is None and time.monotonic() < deadline, pusher.communicate()
            time.sleep(0.05)
        pusher.send_signal(signal.SIGKILL)
        pusher.wait(30)
        assert proxy.uploaded < SIZE, "the upload finished before the kill"
        # The link goes with the process: what its kernel had buffered would still arrive,
        # and could complete the object (whole: a case the last push below covers).
        proxy.cut()
        time.sleep(1)  # the server sees the connection close

        assert not reader.has(key), "a partial object is visible"
        assert reader.keys() == []
        assert reader.fetch(gtcache.open_store(tmp_path / "reader"), key) is False
        if server == "http":
            assert [p for p in folder.rglob("*") if p.is_file()] == [], "left-overs under the served folder"
        else:
            assert redis.Redis.from_url(base).keys("*") == []

        # The same push, not killed, arrives whole (so the check above would have seen it).
        done = _push(store.root, url, key)
        out, err = done.communicate(timeout=300)
        assert done.returncode == 0 and "pushed" in out, out + err
    finally:
        proxy.close()
    assert reader.has(key) and reader.keys() == [key]
    assert reader._call("get", lambda b: b.get(info_object(key), 4096)) is not None
    assert reader.fetch(gtcache.open_store(tmp_path / "reader"), key) is True
    assert len(reader._call("get", lambda b: b.get(entry_object(key), 1 << 30)) or b"") > SIZE
