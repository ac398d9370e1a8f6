"""The store with synthetic entries: layout, publish, lookup, scan, index, removal."""

from __future__ import annotations

import json
import multiprocessing
import os
import multiprocessing.synchronize
import pathlib
import shutil
import stat
import time

import pytest

import gtcache
from gtcache.store import ENTRY_PATH_PATTERN
from tests.helpers import draft, publish, validate

# -- layout ----------------------------------------------------------------------------


def test_new_store_has_tag_layout_file_and_folders(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    assert (store.root / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    layout = json.loads((store.root / "gtcache-layout.json").read_text())
    assert layout == {"format": "gtcache-store", "layout_version": 1}
    assert (store.root / "entries").is_dir()
    assert not store.read_only


def test_newer_layout_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    gtcache.open_store(tmp_path / "s")
    (tmp_path / "s/gtcache-layout.json").write_text('{"format": "gtcache-store", "layout_version": 2}')
    with pytest.raises(gtcache.StoreVersionError, match=r"layout version 2 .* reads version 1"):
        gtcache.open_store(tmp_path / "s")


def test_non_empty_folder_is_not_taken_over(tmp_path: pathlib.Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(gtcache.NotAStoreError):
        gtcache.open_store(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep"


@pytest.mark.parametrize("plant", ["fifo", "symlink", "folder", "garbage"])
def test_a_layout_file_that_is_not_one_is_a_clear_error_and_never_blocks(tmp_path: pathlib.Path, plant: str) -> None:
    """The layout file is the first thing a lookup reads: a FIFO planted there must not block
    the reader (a hook in a model run), a symlink is not followed, and nothing is written."""
    store = gtcache.open_store(tmp_path / "s").root
    layout = store / "gtcache-layout.json"
    elsewhere = tmp_path / "layout-elsewhere.json"
    elsewhere.write_bytes(layout.read_bytes())
    layout.unlink()
    if plant == "fifo":
        os.mkfifo(layout)
    elif plant == "symlink":
        layout.symlink_to(elsewhere)
    elif plant == "folder":
        layout.mkdir()
    else:
        layout.write_bytes(b"\xff not json")
    before = sorted(p.name for p in store.iterdir())
    with pytest.raises(gtcache.GtcacheError, match="Cannot read '.*gtcache-layout.json'"):
        gtcache.open_store(store)
    assert sorted(p.name for p in store.iterdir()) == before


def test_entry_path_pattern_round_trip(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    relative = entry.path.relative_to(store.root).as_posix()
    match = ENTRY_PATH_PATTERN.fullmatch(relative)
    assert match is not None and match["key"] == entry.key and match["shard"] == entry.key[:2]


# -- publish and lookup -------------------------------------------------------------------


def test_publish_then_lookup(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    found = store.lookup(entry.key)
    assert found is not None and found.record == entry.record
    assert (found.path / "program.py").read_bytes() == b"print(1)\n"
    store.verify_payload(found)
    validate(found.record.to_json())
    assert store.lookup("0" * 32) is None
    assert not any((store.root / "tmp").iterdir()), "staging folders must not outlive a publish"


def test_record_has_no_absolute_paths(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    text = (entry.path / "entry.json").read_text()
    assert str(tmp_path) not in text
    assert all("/" not in f.path for f in entry.record.files)


def test_second_publisher_gets_the_first_entry(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    first = publish(store, payload=b"first\n")
    second = publish(store, payload=b"second\n")
    assert second.record.files == first.record.files
    assert (second.path / "program.py").read_bytes() == b"first\n"


def test_touch_counts_hits(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    store.touch(entry.key)
    store.touch(entry.key)
    record = store.get(entry.key).record
    assert record.hits == 2 and record.last_used >= record.created


def _publish_in_child(root: str, barrier: multiprocessing.synchronize.Barrier, payload: bytes) -> None:
    store = gtcache.open_store(root)
    barrier.wait()
    entry = publish(store, payload=payload)
    assert store.lookup(entry.key) is not None


def test_concurrent_publishers_of_one_key_leave_one_entry(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "s"
    gtcache.open_store(root)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_publish_in_child, args=(str(root), barrier, b"x" * 100_000)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    store = gtcache.open_store(root)
    scan = store.scan()
    assert len(scan.entries) == 1 and scan.entries[0].ok
    store.verify_payload(store.get(scan.entries[0].key))
    assert not any((root / "tmp").iterdir())


def test_broken_entry_is_replaced_by_next_publish(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    (entry.path / "entry.json").write_text("{not json")
    with pytest.raises(gtcache.CorruptEntryError):
        store.lookup(entry.key)
    again = publish(store)
    assert store.lookup(again.key) is not None


def test_an_imported_record_is_published_only_with_the_files_it_names(tmp_path: pathlib.Path) -> None:
    """``publish_record`` (an import) publishes another store's record as it is: the files
    given must be the ones it names, byte for byte. A payload of the same size but other
    bytes (sizes are all a lookup checks) is refused before anything is published, and its
    staging folder does not outlive the refusal; the true files are published."""
    source = gtcache.open_store(tmp_path / "source")
    entry = publish(source, payload=b"print(1)\n")
    target = gtcache.open_store(tmp_path / "target")
    with pytest.raises(gtcache.CorruptEntryError, match="its files do not match its record"):
        target.publish_record(entry.record, {"program.py": b"print(2)\n"})
    assert target.lookup(entry.key) is None, "nothing was published"
    assert not any((target.root / "tmp").iterdir()), "no staging folder left behind"
    published = target.publish_record(entry.record, {"program.py": entry.file("program.py")})
    assert published.published and published.record == entry.record
    target.verify_payload(target.get(entry.key))


# -- scan, broken entries ------------------------------------------------------------------


def test_scan_lists_sound_and_broken_entries(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    good = publish(store, "good")
    bad_json = publish(store, "bad_json")
    truncated = publish(store, "truncated", payload=b"0123456789" * 100)
    flipped = publish(store, "flipped", payload=b"0123456789" * 100)
    (bad_json.path / "entry.json").write_text('{"schema_version": 2, "key": 3}')
    with open(truncated.path / "program.py", "r+b") as stream:
        stream.truncate(10)
    with open(flipped.path / "program.py", "r+b") as stream:
        stream.write(b"X")

    scan = store.scan()
    status = {e.key: e.status for e in scan.entries}
    assert status == {good.key: "ok", bad_json.key: "broken", truncated.key: "broken", flipped.key: "ok"}
    problems = {e.key: e.problem for e in scan.entries}
    assert "missing field" in problems[bad_json.key]
    assert "has 10 bytes" in problems[truncated.key]
    # Same size, other bytes: only the checksum check before a load sees it.
    with pytest.raises(gtcache.CorruptEntryError, match="checksum"):
        store.verify_payload(store.get(flipped.key))
    assert store.lookup(good.key) is not None


@pytest.mark.parametrize("field", ["artifact", "ingredients", "toolchain", "program"])
def test_a_record_edited_without_its_checksum_is_broken(tmp_path: pathlib.Path, field: str) -> None:
    """Every field of ``entry.json`` but the usage counters is covered by ``record_xxh3``: one
    edited by hand (here: a value added) makes the entry broken, not loaded with what the edit
    says; usage counters may change freely (a mutation audit: the comparison and the artifact's
    part in it were only caught by the heavy damage tests)."""
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store, "a")
    path = entry.path / "entry.json"
    record = json.loads(path.read_text())
    record["hits"], record["last_used"] = 99, "2030-01-01T00:00:00+00:00"
    path.write_text(json.dumps(record))
    assert store.lookup(entry.key) is not None, "usage counters are not covered"
    record[field] = {**record[field], "edited": "by hand"}
    path.write_text(json.dumps(record))
    with pytest.raises(gtcache.CorruptEntryError, match="does not match its checksum"):
        store.lookup(entry.key)


def test_an_entry_folder_copied_to_another_key_is_broken_there(tmp_path: pathlib.Path) -> None:
    """An entry folder copied whole to another key's place (a stray ``cp -r`` or ``rsync``
    into the store) has a sound record, files and checksums, but another program's: its
    record names the key it was made for, so at the other key it is broken, never loaded
    as that key's program (a silently wrong result), and a scan lists it broken."""
    store = gtcache.open_store(tmp_path / "s")
    a = publish(store, "a")
    b = draft("b").key
    assert b != a.key
    shutil.copytree(a.path, store.entry_path(b))
    with pytest.raises(gtcache.CorruptEntryError, match=f"its record names key '{a.key}'"):
        store.lookup(b)
    scan = store.scan()
    assert {e.key: e.status for e in scan.entries} == {a.key: "ok", b: "broken"}
    assert "its record names key" in next(e.problem for e in scan.entries if e.key == b)
    assert store.lookup(a.key) is not None, "the original is still sound"


def test_resolve_by_key_prefix_and_program(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    a = publish(store, "alpha")
    publish(store, "alpha", backend="run_dace_cpu")
    assert [e.key for e in store.resolve(a.key)] == [a.key]
    assert [e.key for e in store.resolve(a.key[:8])] == [a.key]
    assert len(store.resolve("alpha")) == 2
    assert len(store.resolve("tests.synthetic.alpha")) == 2
    with pytest.raises(gtcache.EntryNotFoundError):
        store.resolve("beta")


# -- the index ----------------------------------------------------------------------------


def _listing(store: gtcache.Store) -> list[tuple[str, str, str]]:
    return [(e.key, e.program, e.status) for e in store.scan().entries]


def test_deleted_index_is_rebuilt_with_same_listing(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    for name in ("a", "b", "c"):
        publish(store, name)
    before = _listing(store)
    store.close()
    shutil.rmtree(tmp_path / "s/index")
    store = gtcache.open_store(tmp_path / "s")
    assert _listing(store) == before


def test_corrupt_index_is_rebuilt(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    for name in ("a", "b"):
        publish(store, name)
    before = _listing(store)
    store.close()
    for db in (tmp_path / "s/index").glob("cache.db*"):
        db.write_bytes(b"this is not sqlite" * 100)
    store = gtcache.open_store(tmp_path / "s")
    scan = store.scan()
    assert [(e.key, e.program, e.status) for e in scan.entries] == before
    assert scan.index == "rebuilt"


@pytest.mark.slow  # (about 8 s: the suite, not make test-fast)
def test_an_index_another_process_holds_locked_is_not_waited_for_nor_dropped(tmp_path: pathlib.Path) -> None:
    """Another process holds the index database's write lock (a long scan, a stuck process): a
    scan waited 60 s (diskcache retries its opening) and then deleted that process's database
    as if it were corrupt. The wait is bounded (``LOCK_WAIT``), the folders are scanned without
    the index, and the database is left as it is (real processes: the holder, ``gtcache ls``)."""
    import subprocess
    import sys

    from gtcache.store import _diskcache

    store = gtcache.open_store(tmp_path / "s")
    for name in ("a", "b"):
        publish(store, name)
    before = _listing(store)  # the index made
    store.close()
    database = tmp_path / "s" / "index" / "cache.db"
    identity = database.stat().st_ino
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "db.execute('BEGIN EXCLUSIVE')\nprint('held', flush=True)\nsys.stdin.readline()\n"
         "db.execute('INSERT OR REPLACE INTO Settings VALUES (?, ?)', ('holder', 1))\ndb.execute('COMMIT')\n",
         str(database)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        store = gtcache.open_store(tmp_path / "s")
        scan = store.scan()
        assert [(e.key, e.program, e.status) for e in scan.entries] == before and scan.index == "unavailable"
        assert store._index.busy  # noqa: SLF001 (once: the scan's writes did not wait again)
        # The command line, in a process of its own (a hang guard, far above the bound, not a timing).
        listing = subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(tmp_path / "s"), "ls", "--json"],
                                 capture_output=True, text=True, timeout=10 * _diskcache.LOCK_WAIT + 20, check=True)
        assert sorted(row["key"] for row in json.loads(listing.stdout)) == sorted(key for key, _, _ in before)
        assert database.stat().st_ino == identity, "the other process's database is not deleted"
        # Rebuilding it (reindex; verify --repair, which rebuilds after its repairs) leaves it too
        # (a reviewer's run deleted it: the rebuild dropped the files first).
        reindex = subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(tmp_path / "s"), "reindex"],
                                 capture_output=True, text=True, timeout=10 * _diskcache.LOCK_WAIT + 20, check=False)
        assert reindex.returncode == 1 and "was not rebuilt: another process holds it locked" in reindex.stderr
        (next((tmp_path / "s").glob("entries/*/*")) / "stray.o").write_bytes(b"x")  # something to repair
        repair = subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(tmp_path / "s"), "verify",
                                 "--repair"], capture_output=True, text=True, timeout=10 * _diskcache.LOCK_WAIT + 20,
                                check=False)
        assert repair.returncode == 0 and "repaired" in repair.stdout, repair.stdout + repair.stderr
        assert database.stat().st_ino == identity, "the other process's database is not deleted by a rebuild"
    finally:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.close()
    assert holder.wait(timeout=60) == 0, "the holder could still write and commit"
    scan = gtcache.open_store(tmp_path / "s").scan()
    assert scan.index == "ok" and [(e.key, e.program, e.status) for e in scan.entries] == before


def test_an_entry_removed_after_its_lookup_is_removed_not_broken(tmp_path: pathlib.Path) -> None:
    """``verify_payload`` of an entry a prune removed (renamed away whole) since its lookup:
    ``EntryRemovedError``, as ``lookup`` finds it absent; a payload file missing beside its
    record is still broken."""
    from gtcache.errors import CorruptEntryError, EntryRemovedError
    from tests.helpers import run_python

    store = gtcache.open_store(tmp_path / "s")
    removed, damaged = publish(store, "removed"), publish(store, "damaged")
    found = store.get(removed.key)
    run_python("from gtcache_cli.main import cli; cli()", "--cache-dir", str(store.root), "rm", removed.key, "--yes")
    with pytest.raises(EntryRemovedError):
        store.verify_payload(found)
    found = store.get(damaged.key)
    (damaged.path / "program.py").unlink()
    with pytest.raises(CorruptEntryError, match="cannot read 'program.py'") as caught:
        store.verify_payload(found)
    assert not isinstance(caught.value, EntryRemovedError)


def _remove_and_publish_again(
    root: str, key: str, started: multiprocessing.synchronize.Event, stop: multiprocessing.synchronize.Event,
) -> None:
    store = gtcache.open_store(root)
    while not stop.is_set():
        store.remove([key])
        publish(store, payload=b"x" * 50_000)
        started.set()


def test_a_lookup_racing_a_removal_and_a_publish_anew_is_a_hit_or_a_miss_never_broken(tmp_path: pathlib.Path) -> None:
    """Another process removes an entry (``rm``, a prune: renamed away whole) and publishes
    it anew, again and again, while this one looks it up: every lookup finds the entry or
    nothing, never a broken one. Before, a removal between the record's read and the checks
    of its folders or files made the lookup say "broken" ("cannot check folder ... No such
    file", "file 'program.py' is missing": a hook's warning and a needless compile); found
    by a mutation audit (the check that told "removed" from "broken" was untested)."""
    root = tmp_path / "s"
    store = gtcache.open_store(root)
    key = publish(store, payload=b"x" * 50_000).key
    ctx = multiprocessing.get_context("spawn")
    started, stop = ctx.Event(), ctx.Event()
    churn = ctx.Process(target=_remove_and_publish_again, args=(str(root), key, started, stop))
    churn.start()
    found = []
    try:
        assert started.wait(120), "the other process removed and published the entry once"
        for _ in range(20_000):
            found.append(store.lookup(key) is not None)
    finally:
        stop.set()
        churn.join(60)
    assert churn.exitcode == 0
    assert any(found) and not all(found), "the lookups ran while the entry came and went"


def test_index_follows_entries_added_and_removed_behind_its_back(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    a = publish(store, "a")
    assert [e.program for e in store.scan().entries] == ["a"]
    other = gtcache.open_store(tmp_path / "s", index_dir=tmp_path / "elsewhere")
    b = publish(other, "b")
    shutil.rmtree(a.path)
    assert [e.key for e in store.scan().entries] == [b.key]


def test_index_can_live_apart(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s", index_dir=tmp_path / "node-local")
    publish(store, "a")
    assert len(store.scan().entries) == 1
    assert (tmp_path / "node-local").is_dir()
    assert not (tmp_path / "s/index").exists()


def test_rebuild_index(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    publish(store, "a")
    publish(store, "b")
    scan = store.rebuild_index()
    assert scan.index == "rebuilt" and len(scan.entries) == 2


# -- moving, removing, read-only ------------------------------------------------------------


def test_moved_store_looks_up_the_same(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    store.close()
    shutil.move(tmp_path / "s", tmp_path / "moved")
    moved = gtcache.open_store(tmp_path / "moved")
    found = moved.get(entry.key)
    assert found.path == tmp_path / "moved" / found.path.relative_to(tmp_path / "moved")
    moved.verify_payload(found)
    assert [e.key for e in moved.scan().entries] == [entry.key]


def test_remove_and_clear(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    a, b = publish(store, "a"), publish(store, "b")
    assert store.remove([a.key]) > 0
    assert store.lookup(a.key) is None
    assert [e.key for e in store.scan().entries] == [b.key]
    assert store.clear() > 0
    assert store.scan().entries == ()
    assert (tmp_path / "s/gtcache-layout.json").exists()


def test_read_only_flag_refuses_writes(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    store.close()
    reader = gtcache.Store(tmp_path / "s", index_dir=None, read_only=True)
    before = sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "s").rglob("*"))
    assert reader.lookup(entry.key) is not None
    reader.touch(entry.key)
    assert len(reader.scan().entries) == 1
    with pytest.raises(gtcache.GtcacheError, match="read-only"):
        publish(reader, "other")
    after = sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "s").rglob("*"))
    assert before == after


def _open_in_child(root: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    gtcache.open_store(root)


def test_many_processes_create_one_store_at_once(tmp_path: pathlib.Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    for attempt in range(3):
        root = tmp_path / f"new-{attempt}"
        barrier = ctx.Barrier(6)
        procs = [ctx.Process(target=_open_in_child, args=(str(root), barrier)) for _ in range(6)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        assert [proc.exitcode for proc in procs] == [0] * 6
        assert gtcache.open_store(root).scan().entries == ()


# -- what sits at a key that is not a sound entry (issue 16 bug 2) ----------------------------


def test_folder_without_record_is_replaced_by_publish(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    d = draft("blocked")
    stale = store.entry_path(d.key)
    stale.mkdir(parents=True)
    (stale / "program.py").write_bytes(b"half a copy")  # no entry.json: never a sound entry
    assert store.lookup(d.key) is None
    entry = store.publish(d, {"program.py": b"print(1)\n"})
    found = store.get(d.key)
    store.verify_payload(found)
    assert found.record == entry.record and (found.path / "program.py").read_bytes() == b"print(1)\n"
    assert not any((store.root / "trash").iterdir())


@pytest.mark.parametrize("what", ["symlink", "file", "dangling"])
def test_link_or_file_at_a_key_is_replaced_never_followed(tmp_path: pathlib.Path, what: str) -> None:
    store = gtcache.open_store(tmp_path / "s")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    d = draft("linked")
    at_key = store.entry_path(d.key)
    at_key.parent.mkdir(parents=True)
    if what == "symlink":
        at_key.symlink_to(outside, target_is_directory=True)
    elif what == "dangling":
        at_key.symlink_to(tmp_path / "nowhere")
    else:
        at_key.write_text("not a folder")
    publish(store, "linked")
    assert not at_key.is_symlink() and at_key.is_dir()
    store.verify_payload(store.get(d.key))
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"] and (outside / "keep.txt").read_text() == "keep"


def test_symlinked_shard_is_refused_by_publish(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    outside = tmp_path / "outside"
    outside.mkdir()
    d = draft("sharded")
    (store.root / "entries" / d.key[:2]).symlink_to(outside, target_is_directory=True)
    with pytest.raises(gtcache.GtcacheError, match="verify --repair"):
        publish(store, "sharded")
    assert list(outside.iterdir()) == []


# -- usage counters never write a stale record over a new entry (issue 16 bug 6) ---------------

TOUCHER = """
import sys, time
import gtcache
store = gtcache.open_store(sys.argv[1])
key, seconds = sys.argv[2], float(sys.argv[3])
end = time.monotonic() + seconds
while time.monotonic() < end:
    store.touch(key)
"""


def test_touch_racing_remove_and_republish_never_corrupts(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    store = gtcache.open_store(tmp_path / "s")
    key = publish(store, "raced").key
    togglers = [subprocess.Popen([sys.executable, "-c", TOUCHER, str(store.root), key, "4"]) for _ in range(2)]
    corrupt = rounds = 0
    try:
        while any(p.poll() is None for p in togglers):
            rounds += 1
            store.remove([key])
            # Payloads of other sizes: a stale record over the new entry is always broken.
            publish(store, "raced", payload=b"y" * (1 + rounds % 7) * 1000)
            try:
                store.lookup(key)
            except gtcache.CorruptEntryError:
                corrupt += 1
    finally:
        for proc in togglers:
            proc.wait(60)
    assert [p.returncode for p in togglers] == [0, 0]
    assert rounds > 50, rounds
    assert corrupt == 0, f"{corrupt} of {rounds} republished entries were overwritten by a stale record"
    store.verify_payload(store.get(key))


def test_index_files_gone_since_the_listing_are_not_foreign(tmp_path: pathlib.Path) -> None:
    # SQLite removes 'cache.db-wal' / '-shm' when a process closes the index, and diskcache
    # value folders go with their rows: between another process's listing of the index
    # folder and its check of each name, they vanish (seen as a writer's crash under load).
    from gtcache.store._index import Index, IndexLocationError

    store = gtcache.open_store(tmp_path / "store")
    index = Index(store.index_dir, store_root=store.root, mode=0o700)
    index._check_contents(["cache.db-wal", "cache.db-shm", "ab"])  # listed, gone now: no error
    store.index_dir.mkdir(exist_ok=True)
    (store.index_dir / "notes.txt").write_text("mine")
    with pytest.raises(IndexLocationError, match="holds 'notes.txt'"):
        index._check_contents(["cache.db-wal", "notes.txt"])


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 65537, 3 * 65536 + 7])
def test_payload_checksums_cover_every_byte_of_files_read_in_many_pieces(tmp_path: pathlib.Path, size: int) -> None:
    """``verify_payload`` reads a file in pieces of 64 KiB: a file of any size hashes as its
    whole bytes do, and a byte changed anywhere (the last one too) is caught."""
    import xxhash

    from gtcache.store._files import file_xxh3

    store = gtcache.open_store(tmp_path / "s")
    payload = os.urandom(size)
    entry = publish(store, f"p{size}", payload)
    assert file_xxh3(entry.file("program.py")) == xxhash.xxh3_128_hexdigest(payload)
    store.verify_payload(store.get(entry.key))  # as published: sound
    if size:
        changed = payload[:-1] + bytes([payload[-1] ^ 1])
        entry.file("program.py").write_bytes(changed)
        with pytest.raises(gtcache.CorruptEntryError, match="does not match its checksum"):
            store.verify_payload(store.get(entry.key))


def test_a_read_stops_at_its_limit_however_far_the_file_grew(tmp_path: pathlib.Path) -> None:
    """``read_facts`` checks a file's size before reading it and bounds the read as well:
    a file that grows after its ``fstat`` is read up to the limit, then refused."""
    from gtcache.store._store import _read_fd

    path = tmp_path / "grown"
    path.write_bytes(b"x" * 100_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="more than 50000 bytes"):
            _read_fd(fd, 10, 50_000)  # fstat said 10 bytes
        os.lseek(fd, 0, os.SEEK_SET)
        assert _read_fd(fd, 10, 100_000) == b"x" * 100_000
        os.lseek(fd, 0, os.SEEK_SET)  # one byte past the limit is past it (a mutation audit: off by one)
        with pytest.raises(ValueError, match="more than 99999 bytes"):
            _read_fd(fd, 10, 99_999)
    finally:
        os.close(fd)


def test_sweeping_facts_never_goes_through_a_symlinked_folder_or_sweeps_for_a_bad_name(tmp_path: pathlib.Path) -> None:
    """``sweep_facts`` lists ``facts/`` only when it is a real folder of the store, and only
    for a ``keep`` that is an environment digest (a short one would match almost nothing)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    old = time.time() - 90 * 24 * 3600
    victims = []
    for name in ("a" * 32 + ".json", "b" * 32 + "-00.json"):
        victims.append(elsewhere / name)
        victims[-1].write_text("{}")
        os.utime(victims[-1], (old, old))
    store = gtcache.open_store(tmp_path / "store")
    (store.root / "facts").symlink_to(elsewhere)
    assert store.sweep_facts("c" * 32, 3600) == 0
    assert all(path.exists() for path in victims)
    (store.root / "facts").unlink()
    real = store.root / "facts"
    real.mkdir()
    for victim in victims:
        shutil.copy(victim, real / victim.name)
        os.utime(real / victim.name, (old, old))
    fresh = gtcache.open_store(tmp_path / "store")  # unsafe folders are checked once per Store
    assert fresh.sweep_facts("c", 3600) == 0 and fresh.sweep_facts("", 3600) == 0
    assert sorted(os.listdir(real)) == sorted(path.name for path in victims)
    assert fresh.sweep_facts("c" * 32, 3600) == 2 and not os.listdir(real)


@pytest.mark.parametrize("how", ["writable by everyone", "another user's"])
def test_a_facts_file_someone_untrusted_may_have_written_reads_as_absent(tmp_path: pathlib.Path, how: str) -> None:
    """``facts/<name>.json`` holds what an environment found once, which a run may act on:
    one others may write (mode 0666) or another user owns reads as absent (recomputed), as
    an entry record of theirs is refused, before a byte of it is read; the same file, sound,
    reads back."""
    from gtcache.store import TrustPolicy

    store = gtcache.open_store(tmp_path / "s", trust=TrustPolicy.from_env({}))
    name = "c" * 32
    store.write_facts(name, {"answer": 42})
    assert store.read_facts(name) == {"answer": 42}
    path = store.root / "facts" / f"{name}.json"
    if how == "writable by everyone":
        os.chmod(path, 0o666)
    else:
        os.chown(path, 65534, 65534)  # nobody's
    assert store.read_facts(name) is None
    if how == "writable by everyone":
        os.chmod(path, 0o644)
    else:
        os.chown(path, 0, 0)
    assert store.read_facts(name) == {"answer": 42}, "sound again: read"


def test_a_damaged_payload_file_is_found_whichever_file_of_the_entry_it_is(tmp_path: pathlib.Path) -> None:
    """``verify_payload`` checks every payload file against its checksum, not the first only:
    a file damaged in place (its size kept: ``lookup`` cannot tell) is broken, whichever it is,
    and is named (a mutation audit: a check of the first file only went unnoticed)."""
    store = gtcache.open_store(tmp_path / "s")
    contents = {"program.py": b"print(1)\n", "b.so": b"second\n", "c.txt": b"third\n"}
    entry = store.publish(draft("multi"), contents)
    for name, data in contents.items():
        (entry.path / name).write_bytes(data.upper())  # same size, other bytes
        found = store.get(entry.key)
        with pytest.raises(gtcache.CorruptEntryError, match=f"file '{name}' does not match its checksum"):
            store.verify_payload(found)
        (entry.path / name).write_bytes(data)
        store.verify_payload(store.get(entry.key))


@pytest.mark.parametrize("plant", ["symlink", "folder", "fifo"])
def test_a_record_that_is_not_a_regular_file_is_broken_not_absent(tmp_path: pathlib.Path, plant: str) -> None:
    """An ``entry.json`` that is a symlink (to a sound record elsewhere), a folder or a FIFO:
    ``lookup`` says the entry is broken and why, never that the key is absent (which a
    listing, ``verify`` and a hook's miss would each tell differently), nor follows the link
    or blocks on the FIFO (a mutation audit: every open error taken for "absent" went unnoticed)."""
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    record = entry.path / "entry.json"
    elsewhere = tmp_path / "entry-elsewhere.json"
    elsewhere.write_bytes(record.read_bytes())
    record.unlink()
    if plant == "symlink":
        record.symlink_to(elsewhere)
    elif plant == "folder":
        record.mkdir()
    else:
        os.mkfifo(record)
    with pytest.raises(gtcache.CorruptEntryError, match="cannot read 'entry.json'"):
        store.lookup(entry.key)


@pytest.mark.parametrize("text", [b"", b"not a key\n", "\u00e9".encode() * 16 + b"\n", b"\xff" * 32 + b"\n",
                                  b"AB" * 16 + b"\n", b"ab" * 16 + b"0\n", b"../" * 11],
                         ids=["empty", "text", "non-ascii", "undecodable", "upper-case", "a-digit-too-many", "a-path"])
def test_a_direct_link_that_does_not_hold_a_key_links_nothing_and_never_raises(tmp_path: pathlib.Path, text: bytes) -> None:
    """A direct link whose content is not a build key (empty, text, bytes that are not ASCII,
    upper case, a digit too many, a path) links nothing: ``build_key_of`` returns None, never
    raises, and a link holding a key again is followed (a mutation audit: neither the key's
    form nor undecodable bytes were checked by a test)."""
    store = gtcache.open_store(tmp_path / "s")
    build, direct = publish(store).key, "ab" * 16
    store.link_direct(direct, build)
    link = store.root / "direct" / direct[:2] / direct
    link.write_bytes(text)
    assert store.build_key_of(direct) is None
    store.link_direct(direct, build)
    assert store.build_key_of(direct) == build


def test_an_entry_damaged_in_place_is_replaced_by_the_next_publish(tmp_path: pathlib.Path) -> None:
    """A payload file damaged in place, its size kept (what ``lookup`` alone cannot see): the
    next publish of the key checks the checksums of the entry it finds, and replaces it rather
    than hand it back as its own (a mutation audit: returning it unchecked went unnoticed, and
    the damaged entry would have stayed for good)."""
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store, payload=b"print(1)\n")
    (entry.path / "program.py").write_bytes(b"print(7)\n")
    assert store.lookup(entry.key) is not None, "same size: lookup cannot tell"
    again = publish(store, payload=b"print(1)\n")
    assert again.published, "this publish put its own entry there"
    assert (again.path / "program.py").read_bytes() == b"print(1)\n"
    store.verify_payload(store.get(entry.key))
    assert not any((store.root / "trash").iterdir()), "the damaged entry was removed, not left in trash/"


@pytest.mark.parametrize("change", [{"compile_seconds": -1.0}, {"program": {"module": "tests.synthetic"}},
                                    {"artifact": {"kind": "roundtrip"}}], ids=["negative-time", "no-name", "no-fields"])
def test_a_record_lookups_could_not_read_is_never_published(tmp_path: pathlib.Path, change: dict) -> None:
    """A draft whose record every lookup would call broken (a negative compile time, a program
    without its name, an artifact without its fields) is refused before anything is published:
    ``ValueError`` saying why, nothing at the key, no staging folder left (a mutation audit:
    the read-back of the staged record was untested)."""
    from gtcache._frozen import replace

    store = gtcache.open_store(tmp_path / "s")
    bad = replace(draft("prog"), **change)
    with pytest.raises(ValueError, match="must not be negative|lacks its"):
        store.publish(bad, {"program.py": b"print(1)\n"})
    assert store.lookup(bad.key) is None
    assert not (store.root / "entries" / bad.key[:2] / bad.key).exists()
    assert not any((store.root / "tmp").iterdir())


def test_remove_leaves_another_folder_published_at_the_key_since_it_was_judged(tmp_path: pathlib.Path) -> None:
    """``remove(judged=...)`` (an import rolling back what it placed) removes only the folder
    it judged: one published at the key since (removed and published anew: another inode) is
    put back and stays, and nothing is counted freed; the folder judged goes (a mutation audit:
    the inode comparison was untested)."""
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store)
    judged = os.lstat(entry.path)
    # Held open: the removed folder's inode stays taken, so the new one cannot be given it
    # (the file system reuses a freed inode at once: the test failed once so).
    held = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        store.remove([entry.key])
        again = publish(store)
        assert os.lstat(again.path).st_ino != judged.st_ino
        removed: list[str] = []
        assert store.remove([entry.key], judged={entry.key: judged}, removed=removed) == 0
        assert removed == [] and store.lookup(entry.key) is not None
        store.verify_payload(store.get(entry.key))
        removed = []
        assert store.remove([entry.key], judged={entry.key: os.lstat(again.path)}, removed=removed) > 0
        assert removed == [entry.key] and store.lookup(entry.key) is None
    finally:
        os.close(held)


def test_sweeping_facts_keeps_this_environments_file_and_shards_however_old(tmp_path: pathlib.Path) -> None:
    """``sweep_facts(keep)`` removes the old facts of other environments only: this
    environment's file and its shards (``<digest>-<xx>.json``) stay however old, and so does
    another environment's file read or written lately (a mutation audit: a sweep that kept
    the exact name only, removing this environment's shards, went unnoticed)."""
    store = gtcache.open_store(tmp_path / "s")
    keep, other = "c" * 32, "d" * 32
    old = time.time() - 90 * 24 * 3600
    for name in (keep, f"{keep}-00", f"{keep}-ff", other, f"{other}-00", "e" * 32):
        store.write_facts(name, {"name": name})
        if name != "e" * 32:
            os.utime(store.root / "facts" / f"{name}.json", (old, old))
    assert store.sweep_facts(keep, 3600) == 2
    assert sorted(os.listdir(store.root / "facts")) == sorted(
        f"{name}.json" for name in (keep, f"{keep}-00", f"{keep}-ff", "e" * 32))
    assert store.read_facts(f"{keep}-ff") == {"name": f"{keep}-ff"}


def test_a_facts_file_larger_than_its_limit_reads_as_absent(tmp_path: pathlib.Path) -> None:
    """A facts file over ``FACTS_MAX_BYTES`` (valid JSON all the same) is not read: absent,
    recomputed; one at the limit is read (a mutation audit: the size check was untested)."""
    from gtcache.store._layout import FACTS_MAX_BYTES

    store = gtcache.open_store(tmp_path / "s")
    name = "c" * 32
    path = store.root / "facts" / f"{name}.json"
    store.write_facts(name, {})
    frame = len(json.dumps({"a": ""}))
    path.write_text(json.dumps({"a": "x" * (FACTS_MAX_BYTES - frame)}))
    assert path.stat().st_size == FACTS_MAX_BYTES and store.read_facts(name) is not None
    path.write_text(json.dumps({"a": "x" * (FACTS_MAX_BYTES - frame + 1)}))
    assert store.read_facts(name) is None


def test_a_payload_file_grown_or_shrunk_is_broken_at_lookup(tmp_path: pathlib.Path) -> None:
    """``lookup`` compares every payload file's size with its record, both ways: a file with
    bytes appended (an editor, a stray ``>>``) is broken as a truncated one is, named with
    both sizes, and a scan lists it broken, not sound (a mutation audit: a check of shrunk
    files only went unnoticed, caught only by the checksums just before loading)."""
    store = gtcache.open_store(tmp_path / "s")
    entry = publish(store, payload=b"print(1)\n")
    payload = entry.path / "program.py"
    for data in (b"print(1)\n# appended\n", b"print(1)"):
        payload.write_bytes(data)
        with pytest.raises(gtcache.CorruptEntryError, match=f"file 'program.py' has {len(data)} bytes, not 9"):
            store.lookup(entry.key)
        assert [e.ok for e in store.scan(use_index=False).entries] == [False]


def test_a_payload_copied_from_an_executable_file_stays_executable(tmp_path: pathlib.Path) -> None:
    """A payload file published from an executable source (a compiled library, mode 0755)
    keeps execute where it can be read, one from a plain file gets none: the store's file
    mode, whatever the source's other bits (a mutation audit: execute dropped went unnoticed)."""
    library, source = tmp_path / "lib.so", tmp_path / "program.py"
    library.write_bytes(b"\x7fELF not really\n")
    source.write_bytes(b"print(1)\n")
    os.chmod(library, 0o700)
    os.chmod(source, 0o600)
    store = gtcache.open_store(tmp_path / "s")
    entry = store.publish(draft("prog"), {"program.py": source, "lib.so": library})
    plain = store.modes.file
    assert stat.S_IMODE((entry.path / "program.py").stat().st_mode) == plain
    assert stat.S_IMODE((entry.path / "lib.so").stat().st_mode) == plain | ((plain & 0o444) >> 2)
    assert (entry.path / "lib.so").stat().st_mode & stat.S_IXUSR
