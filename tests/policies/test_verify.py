"""verify finds every kind of injected damage; --repair fixes it and loses no sound entry."""

from __future__ import annotations

import os
import pathlib
import shutil
import time

import gtcache
from gtcache.policies import verify
from tests.helpers import draft


def age(path, seconds: float = 7200) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_clean_store_verifies(make_entry) -> None:
    make_entry("a")
    report = verify(make_entry.store)
    assert report.ok and report.entries == 1


def test_every_kind_of_damage_is_found_and_repaired(make_entry) -> None:
    store: gtcache.Store = make_entry.store
    good = make_entry("good")
    bad_json = make_entry("bad_json")
    truncated = make_entry("truncated")
    flipped = make_entry("flipped")
    (bad_json.path / "entry.json").write_text("{")
    with open(truncated.path / "program.py", "r+b") as stream:
        stream.truncate(3)
    data = bytearray((flipped.path / "program.py").read_bytes())
    data[0] ^= 1
    (flipped.path / "program.py").write_bytes(bytes(data))
    (good.path / "stray.txt").write_text("?")  # extra file
    (store.root / "entries" / "zz").mkdir()  # orphan shard
    (store.root / "entries" / good.key[:2] / "not-a-key").mkdir()  # orphan folder
    staging = store.root / "tmp" / "publish-1-dead"
    staging.mkdir()
    age(staging)  # an old, interrupted publish
    fresh = store.root / "tmp" / "publish-2-running"
    fresh.mkdir()  # a publish in progress: not a problem
    leftover = store.root / "trash" / "x-1"
    leftover.mkdir(parents=True)
    age(leftover)
    store.link_direct("d" * 32, "e" * 32)  # dangling link
    store.link_direct("c" * 32, good.key)  # sound link

    report = verify(store)
    kinds = sorted(p.kind for p in report.problems)
    assert kinds == sorted([
        "broken-entry", "broken-entry", "broken-entry", "extra-file", "orphan", "orphan",
        "leftover", "leftover", "dangling-link",
    ])
    broken = {p.key for p in report.problems if p.kind == "broken-entry"}
    assert broken == {bad_json.key, truncated.key, flipped.key}

    repaired = verify(store, repair=True)
    assert repaired.ok, repaired.problems
    assert len(repaired.repaired) == len(report.problems)
    assert [e.key for e in store.scan().entries] == [good.key]
    store.verify_payload(store.get(good.key))
    assert store.build_key_of("c" * 32) == good.key
    assert len(list((store.root / "quarantine").iterdir())) == 3
    assert fresh.exists(), "a running publish's staging folder is left alone"


def test_unreadable_index_is_a_repaired_problem(make_entry) -> None:
    store = make_entry.store
    make_entry("a")
    store.scan()
    store.close()
    for db in (store.root / "index").glob("cache.db*"):
        db.write_bytes(b"garbage" * 100)
    report = verify(gtcache.open_store(store.root))
    assert [p.kind for p in report.problems] == ["index"]
    assert verify(gtcache.open_store(store.root)).ok


def test_lagging_index_is_only_a_note(make_entry) -> None:
    store = make_entry.store
    make_entry("a")
    store.scan()
    store.publish(draft("b"), {"program.py": b"b"})  # publishing never updates the index
    report = verify(store)
    assert report.ok and any("lagged" in note for note in report.notes)


def test_verify_does_not_write_a_read_only_store(make_entry) -> None:
    make_entry("a")
    root = make_entry.store.root
    shutil.rmtree(root / "index", ignore_errors=True)
    reader = gtcache.Store(root, index_dir=None, read_only=True)
    report = verify(reader)
    assert report.ok and not (root / "index").exists()


# -- only regular files count (issue 16 bug 8) --------------------------------------------------


def _cli(root, *args: str):
    import pathlib
    import subprocess
    import sys

    gtcache_bin = str(pathlib.Path(sys.executable).parent / "gtcache")
    return subprocess.run([gtcache_bin, "--cache-dir", str(root), *args], capture_output=True, text=True, timeout=60)


def test_fifo_as_payload_file_is_broken_and_never_opened(make_entry) -> None:
    entry = make_entry("piped", size=0)  # a FIFO's size is 0 too: only its type tells
    (entry.path / "program.py").unlink()
    os.mkfifo(entry.path / "program.py")
    result = _cli(make_entry.store.root, "verify", "--json")  # hangs if it opens the FIFO
    assert result.returncode == 1, result.stdout + result.stderr
    import json

    problems = json.loads(result.stdout)["problems"]
    assert [(p["kind"], p["key"]) for p in problems] == [("broken-entry", entry.key)]
    assert "not a regular file" in problems[0]["detail"]


def test_fifo_as_record_never_blocks_a_listing(make_entry) -> None:
    entry = make_entry("piped")
    (entry.path / "entry.json").unlink()
    os.mkfifo(entry.path / "entry.json")
    result = _cli(make_entry.store.root, "ls", "--json")  # hangs if it opens the FIFO
    assert result.returncode == 0, result.stderr
    import json

    assert [row["status"] for row in json.loads(result.stdout)] == ["broken"]


def test_symlinked_payload_file_is_broken(make_entry, tmp_path) -> None:
    entry = make_entry("linked", size=5)
    outside = tmp_path / "outside.py"
    outside.write_bytes(b"x" * 5)  # same size and bytes: only the link gives it away
    (entry.path / "program.py").unlink()
    (entry.path / "program.py").symlink_to(outside)
    problems = verify(make_entry.store).problems
    assert [(p.kind, p.key) for p in problems] == [("broken-entry", entry.key)]
    assert verify(make_entry.store, repair=True).ok
    assert outside.read_bytes() == b"x" * 5


def test_the_problem_kinds_are_the_ones_docs_cli_md_explains() -> None:
    import re
    import typing

    from gtcache.policies import ProblemKind

    page = (pathlib.Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    section = page.split("## verify", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE)
    assert sorted(documented) == sorted(typing.get_args(ProblemKind))
