"""``gtcache warm --push``: CI warms, then fills the read-write remotes with the plan's entries."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import gtcache
from gtcache.remote import Remote, parse_remote
from tests.helpers import publish, without_gt4py_build_cache
from tests.remote.helpers import KEY, model_run

MANIFEST = """
[[variant]]
program = "gtcache.examples:axpy"
backends = ["roundtrip"]
"""


def warm(store: pathlib.Path, tmp_path: pathlib.Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "variants.toml"
    manifest.write_text(MANIFEST)
    return subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest", str(manifest), *args],
        capture_output=True, text=True, check=False, timeout=900,
        env={**os.environ, "GTCACHE_BUNDLE_KEY": KEY, **without_gt4py_build_cache(tmp_path / "gt4py"), **env},
    )


@pytest.mark.slow
def test_warm_push_fills_the_remote_with_the_plan(redis_server: str, tmp_path: pathlib.Path) -> None:
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    store = tmp_path / "ci"
    other = publish(gtcache.open_store(store), "not_in_the_plan").key

    refused = warm(store, tmp_path, "--push", GTCACHE_REMOTE=redis_server)  # read only
    assert refused.returncode == 1 and refused.stderr.startswith("Error: warm --push: no read-write remote"), refused
    assert refused.stderr.count("\n") == 1
    assert [e.key for e in gtcache.open_store(store).scan().entries] == [other], "compiled before refusing"

    rw = f"{redis_server}?mode=read-write"
    run = warm(store, tmp_path, "--push", "--json", GTCACHE_REMOTE=rw)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    (variant,) = report["variants"]
    assert variant["status"] == "compiled"
    assert report["pushed"] == [{"remote": parse_remote(rw).name, "pushed": [variant["key"]], "existing": []}]
    remote = Remote(parse_remote(redis_server), key=KEY.encode())
    assert remote.has(variant["key"]) and not remote.has(other)

    again = warm(store, tmp_path, "--push", GTCACHE_REMOTE=rw)  # cached: pushed already
    assert again.returncode == 0, again.stderr
    assert "Pushed 0 entries to" in again.stdout and "(1 there already)" in again.stdout, again.stdout

    node = model_run(tmp_path / "node", redis_server, tmp_path)  # a runner starting empty
    assert node["correct"] == [True]
    assert [(o["status"], o["key"]) for o in node["outcomes"]] == [("hit", variant["key"])], node
    assert "from remote" in node["outcomes"][0]["detail"]
