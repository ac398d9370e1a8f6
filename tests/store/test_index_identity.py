"""The index trusts a row only while ``entry.json`` is the very file it was read from.

``Store.touch`` (a model run's hit) renames a new ``entry.json`` over the old one. Where
timestamps have a 1-second granularity (ext3, ext4 with 128-byte inodes, some NFS and
Lustre set-ups) the new file can carry the old one's modification time, so a row keyed on
``st_mtime_ns`` alone kept the hits and ``last_used`` of a scan made in the same second
(a reviewer's report: ``entry.json`` said 5 hits, ``ls`` and ``stats`` said 1). Real files
throughout: a touch followed by ``os.utime`` back to the time the scan saw, and a
loop-mounted ext4 with 1-second timestamps (as root, in a mount namespace of its own).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest
from click.testing import CliRunner

import gtcache
from gtcache.store import _index
from gtcache_cli.main import cli
from tests.helpers import loop_devices, publish, run_in_mount_namespace


def _ls_hits(store: gtcache.Store, key: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), "ls", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (row,) = [row for row in json.loads(result.output) if row["key"] == key]
    return row["hits"], row["last_used"]


def _stats_hits(store: gtcache.Store) -> int:
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), "stats", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)["hits"]
    assert isinstance(hits, int)
    return hits


def test_a_touch_keeping_the_modification_time_is_seen(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new ``entry.json`` with the old one's ``st_mtime_ns`` (what 1-second timestamps give a
    touch in the scan's second) is read again: its change time (and inode) differ. Every reading
    counts as settled here (``SETTLE_NS`` 0), so only the identity can tell the files apart."""
    monkeypatch.setattr(_index, "SETTLE_NS", 0)
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    record = entry.path / "entry.json"
    store.touch(entry.key, hits=1)
    scanned = os.stat(record)
    assert [e.hits for e in store.scan().entries] == [1]
    for _ in range(4):
        store.touch(entry.key, hits=1)
    os.utime(record, ns=(scanned.st_atime_ns, scanned.st_mtime_ns))  # the time the scan saw
    now = os.stat(record)
    # Same size and modification time; the inode may well be the same too (four renames over
    # it: the touches alternate between two inodes), the change time is not.
    assert (now.st_size, now.st_mtime_ns) == (scanned.st_size, scanned.st_mtime_ns)
    assert (now.st_ino, now.st_ctime_ns) != (scanned.st_ino, scanned.st_ctime_ns)
    on_disk = json.loads(record.read_text())
    assert on_disk["hits"] == 5

    assert [(e.hits, e.last_used) for e in store.scan().entries] == [(5, on_disk["last_used"])]
    assert store.scan().stats().hits == 5
    store.close()
    assert _ls_hits(store, entry.key) == (5, on_disk["last_used"])
    assert _stats_hits(store) == 5


def test_a_row_read_while_entry_json_is_fresh_is_read_again(tmp_path: pathlib.Path) -> None:
    """A reading of an ``entry.json`` written or changed within ``SETTLE_NS`` (either time) is not
    settled: the next scan reads it again even when its identity is unchanged."""
    store = gtcache.open_store(tmp_path / "s")
    fresh, old = publish(store, "fresh"), publish(store, "old")
    long_ago = os.stat(old.path / "entry.json").st_mtime_ns - 3600 * 10**9
    os.utime(old.path / "entry.json", ns=(long_ago, long_ago))
    store.scan()
    rows = store._index.rows()  # noqa: SLF001
    assert rows is not None
    assert not rows[fresh.key].settled  # written (and its ctime set) just now
    assert not rows[old.key].settled  # its mtime is old, but utime just set its ctime
    identity = _index.identity_of(os.stat(fresh.path / "entry.json"))
    assert rows[fresh.key].identity == identity and not rows[fresh.key].trusted_for(identity)
    settled = _index.IndexRow(identity=identity, settled=True, record=None, problem=None)
    assert settled.trusted_for(identity) and not settled.trusted_for(None)
    assert not settled.trusted_for((identity[0] + 1, *identity[1:]))  # another inode
    assert _index.settled_at(identity, identity[3] + _index.SETTLE_NS)
    assert not _index.settled_at(identity, identity[3] + _index.SETTLE_NS - 1)


def _plant_format_3(store: gtcache.Store, key: str, *, hits: int) -> None:
    """An index as gtcache wrote it before format 4: a row keyed on ``entry.json``'s mtime."""
    from gtcache.store import _diskcache

    shutil.rmtree(store.index_dir, ignore_errors=True)
    cache = _diskcache.open_cache(store.index_dir, "__gtcache_index_format__")
    cache.set("__gtcache_index_format__", "3")
    cache.set(key, json.dumps([os.stat(store.entry_path(key) / "entry.json").st_mtime_ns, {"hits": hits}, None]))
    cache.close()


def test_an_index_of_the_previous_format_is_rebuilt(tmp_path: pathlib.Path) -> None:
    """Format 3 rows (``[mtime_ns, summary, problem]``) are never read as identities: the whole
    index is dropped and rebuilt on first use, and the listing is the folders'. What an upgrade
    leaves is no problem for ``verify`` (an unreadable index is): a note that it lagged."""
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    store.touch(entry.key, hits=3)
    store.close()
    _plant_format_3(store, entry.key, hits=1)
    store = gtcache.open_store(tmp_path / "s")
    scan = store.scan()
    assert scan.index == "ok" and [e.hits for e in scan.entries] == [3]
    rows = store._index.rows()  # noqa: SLF001
    assert rows is not None and rows[entry.key].identity == _index.identity_of(os.stat(entry.path / "entry.json"))
    store.close()
    _plant_format_3(store, entry.key, hits=1)
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), "verify", "--json"], catch_exceptions=False)
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["problems"] == [], result.output
    assert any("lagged" in note for note in report["notes"]), report
    assert _ls_hits(store, entry.key)[0] == 3


_EXT4_CHILD = """
import json, os, pathlib, shutil, sys, time
import gtcache

source, mount = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for attempt in range(5):
    root = mount / f"store{attempt}"
    shutil.copytree(source, root, symlinks=True)
    store = gtcache.open_store(root)
    (entry,) = store.scan(use_index=False).entries
    record = entry.path / "entry.json"
    time.sleep(1 - time.time() % 1 + 0.01)  # the start of a second: all of what follows falls in it
    store.touch(entry.key, hits=1)  # a model run exits: hits=1
    store.scan()  # a monitoring job's 'gtcache ls': the index row, hits=1
    scanned = os.stat(record)
    for _ in range(4):
        store.touch(entry.key, hits=1)  # model runs exiting right after: 4 more hits
    final = os.stat(record)
    store.close()
    same = [(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for st in (scanned, final)]
    on_disk = json.loads(record.read_text())
    fresh = gtcache.open_store(root)
    (info,) = fresh.scan().entries
    print(json.dumps({
        "same_identity": same[0] == same[1], "granularity_ok": final.st_mtime_ns % 10**9 == 0,
        "disk": [on_disk["hits"], on_disk["last_used"]], "scan": [info.hits, info.last_used],
        "stats": fresh.scan().stats().hits, "root": str(root),
    }))
    fresh.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("mkfs.ext4", "unshare", "mount")),
                    reason="needs root, mkfs.ext4, unshare and mount (a loop-mounted ext4)")
def test_touches_within_the_scans_second_on_1_second_timestamps(tmp_path: pathlib.Path) -> None:
    """The reviewer's case on a real file system of 1-second timestamps (ext4, 128-byte inodes):
    touch, scan, 4 more touches within that second. The touches alternate between two inodes
    (ext4 reuses the one just freed), so the last ``entry.json`` can have the very identity the
    scan read (inode, size, both times): only a row read while its times were fresh being read
    again keeps the listing true. Each attempt must list what ``entry.json`` says."""
    store = gtcache.open_store(tmp_path / "s")
    publish(store)
    store.close()
    image, mount = tmp_path / "ext4.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 * 2**20)
    subprocess.run(["mkfs.ext4", "-q", "-I", "128", "-F", str(image)], check=True, capture_output=True)
    with loop_devices():
        out = run_in_mount_namespace(f"mount -o loop {image} {mount}", _EXT4_CHILD, str(store.root), str(mount),
                                     folder=tmp_path)
    attempts = [json.loads(line) for line in out.splitlines()]
    assert len(attempts) == 5
    for attempt in attempts:
        assert attempt["granularity_ok"], "not a file system of 1-second timestamps"
        assert attempt["scan"] == attempt["disk"] and attempt["stats"] == 5 == attempt["disk"][0], attempt
    if not any(attempt["same_identity"] for attempt in attempts):
        pytest.skip("no touch brought back the scanned identity (no inode reuse within a second here)")
