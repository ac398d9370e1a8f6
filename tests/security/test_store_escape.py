"""Attacks by someone who can write into a store: nothing gtcache does reaches outside it.

Every test runs the real ``gtcache`` command (or a fresh Python process) on a real
store with real symlinks, pickles and tampered records, and checks that a canary
folder outside the store is byte-identical afterwards (same names, same bytes,
nothing new).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import gtcache
from gtcache.store._record import record_digest
from tests.helpers import publish

GTCACHE = str(pathlib.Path(sys.executable).parent / "gtcache")
#: A key shaped name in a shard no real entry uses (the planted shard and entry folders).
PLANTED_KEY = "cd" + "0" * 30


def gtcache_cli(store: pathlib.Path, *args: str, index_dir: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--index-dir", str(index_dir)] if index_dir is not None else []
    return subprocess.run(
        [GTCACHE, "--cache-dir", str(store), *extra, *args], capture_output=True, text=True, timeout=300, check=False
    )


def snapshot(root: pathlib.Path) -> dict[str, tuple[str, bytes]]:
    """Every name under ``root`` (without following links) with its type and bytes."""
    found: dict[str, tuple[str, bytes]] = {".": ("dir", b"")}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        name = str(path.relative_to(root))
        if stat.S_ISLNK(info.st_mode):
            found[name] = ("link", os.readlink(path).encode())
        elif stat.S_ISDIR(info.st_mode):
            found[name] = ("dir", b"")
        else:
            found[name] = ("file", path.read_bytes())
    return found


def age(root: pathlib.Path, seconds: float = 7200) -> None:
    """Make everything under ``root`` old enough for verify's grace period to pass."""
    then = time.time() - seconds
    for path in [root, *root.rglob("*")]:
        os.utime(path, (then, then), follow_symlinks=False)


def make_canary(folder: pathlib.Path, record: dict[str, Any], payload: bytes) -> pathlib.Path:
    """A folder outside the store that looks like every store folder a command might clean:
    ledger-like JSON files, key-named entry folders with records and extra files, staging-
    like folders, a direct-link shard."""
    folder.mkdir()
    (folder / "precious.txt").write_text("do not touch\n")
    (folder / "run.json").write_text('{"format": 1, "counts": {"hit": 1}}\n')
    (folder / "publish-1-dead").mkdir()
    (folder / "publish-1-dead" / "data.bin").write_bytes(b"\0" * 100)
    entry = folder / PLANTED_KEY
    entry.mkdir()
    planted = dict(record, key=PLANTED_KEY)
    planted["record_xxh3"] = record_digest(planted)
    (entry / "entry.json").write_text(json.dumps(planted))
    (entry / "program.py").write_bytes(payload)  # a sound entry...
    (entry / "stray.txt").write_text("extra")  # ...with an extra file verify --repair would remove
    (folder / "cd").mkdir()  # a shard-like folder (the planted shard points here)
    shutil.copytree(entry, folder / "cd" / PLANTED_KEY)
    (folder / "ab").mkdir()  # a direct-link shard with a link file and a stray file
    (folder / "ab" / ("ab" + "1" * 30)).write_text("e" * 32 + "\n")
    (folder / "ab" / "junk").write_text("junk")
    age(folder)
    return folder


@pytest.fixture
def store(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "store"
    opened = gtcache.open_store(root)
    for name in ("kept_a", "kept_b"):
        publish(opened, name, payload=name.encode() * 100)
    opened.scan()  # an index exists
    opened.close()
    return root


def _a_record(store: pathlib.Path) -> tuple[str, dict[str, Any]]:
    entry = next(iter(gtcache.open_store(store).scan().entries))
    return entry.key, json.loads((entry.path / "entry.json").read_text())


def _a_payload(store: pathlib.Path) -> bytes:
    entry = next(iter(gtcache.open_store(store).scan().entries))
    return (entry.path / "program.py").read_bytes()


def plant(store: pathlib.Path, what: str, canary: pathlib.Path) -> str:
    """Replace a part of the store by a symlink into ``canary``; return a key to aim at."""
    key, _ = _a_record(store)
    if what in FIXED:
        target = store / what
        if target.exists():
            shutil.rmtree(target)
        target.symlink_to(canary, target_is_directory=True)
        return PLANTED_KEY if what == "entries" else key
    if what == "shard":
        (store / "entries" / "cd").symlink_to(canary / "cd", target_is_directory=True)
        return PLANTED_KEY
    if what == "entry":
        shard = store / "entries" / "cd"
        shard.mkdir()
        (shard / PLANTED_KEY).symlink_to(canary / PLANTED_KEY, target_is_directory=True)
        return PLANTED_KEY
    if what == "payload":
        payload = gtcache.open_store(store).get(key).path / "program.py"
        payload.unlink()
        payload.symlink_to(canary / "precious.txt")
        return key
    raise AssertionError(what)


FIXED = ("entries", "tmp", "trash", "quarantine", "ledger", "direct", "locks", "index")
PLANTS = (*FIXED, "shard", "entry", "payload")
COMMANDS = {
    "verify --repair": ["verify", "--repair"],
    "stats --zero": ["stats", "--zero"],
    "clear --yes": ["clear", "--yes"],
    "rm KEY --yes": ["rm", "{key}", "--yes"],
    "prune --max-size 0 --yes": ["prune", "--max-size", "0", "--yes"],
    "reindex": ["reindex"],
    "import BUNDLE": ["import", "{bundle}"],  # the store's own entries: all there already
}


class Tally:
    def __init__(self) -> None:
        self.tried = self.refused = self.touched = 0


@pytest.fixture(scope="module")
def tally(figures: Any) -> Iterator[Tally]:
    counts = Tally()
    yield counts
    if counts.tried:
        figures.add(
            "security", "symlink planted in a store x maintenance command: tried / refused (exit 1) / outside files touched",
            f"{counts.tried} / {counts.refused} / {counts.touched}",
        )


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("what", PLANTS)
def test_planted_symlink_never_reaches_outside(
    store: pathlib.Path, tmp_path: pathlib.Path, what: str, command: str, tally: Tally
) -> None:
    _, record = _a_record(store)
    bundle = tmp_path / "bundle.tar.gz"
    if command == "import BUNDLE":
        assert gtcache_cli(store, "export", str(bundle)).returncode == 0
    canary = make_canary(tmp_path / "canary", record, _a_payload(store))
    key = plant(store, what, canary)
    before = snapshot(canary)

    result = gtcache_cli(store, *(arg.format(key=key, bundle=bundle) for arg in COMMANDS[command]))

    after = snapshot(canary)
    tally.tried += 1
    tally.refused += result.returncode != 0
    tally.touched += len(set(before.items()) ^ set(after.items()))
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert after == before, f"{command} changed the canary through a symlinked {what}: {result.stdout}{result.stderr}"
    if what == "entries" and command != "verify --repair":
        # A symlinked 'entries' is never listed: nothing to remove, or a refusal naming it.
        assert result.returncode == 0 or f"'{store / what}'" in result.stderr or "No entry" in result.stderr
    elif what in FIXED and command != "verify --repair":
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"'{store / what}'" in result.stderr and "verify --repair" in result.stderr, result.stderr
    if command == "verify --repair":
        assert result.returncode == 0, result.stdout + result.stderr
        planted = {"shard": store / "entries/cd", "entry": store / "entries/cd" / PLANTED_KEY}.get(what, store / what)
        if what != "payload":
            assert not planted.is_symlink(), "the link itself is removed"
        assert gtcache_cli(store, "verify").returncode == 0, "the store is sound after the repair"
    assert (canary / "precious.txt").read_text() == "do not touch\n"


@pytest.mark.parametrize("what", ["tmp", "trash", "quarantine", "ledger", "direct", "locks", "index"])
def test_verify_reports_a_symlinked_folder(store: pathlib.Path, tmp_path: pathlib.Path, what: str) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("keep")
    target = store / what
    if target.exists():
        shutil.rmtree(target)
    target.symlink_to(canary, target_is_directory=True)
    report = gtcache_cli(store, "verify", "--json")
    assert report.returncode == 1
    problems = json.loads(report.stdout)["problems"]
    assert [p["path"] for p in problems if p["kind"] == "symlink"] == [str(target)]
    assert gtcache_cli(store, "ls").returncode == 0, "reading still works"
    assert snapshot(canary) == {".": ("dir", b""), "keep.txt": ("file", b"keep")}


# -- the index never unpickles -----------------------------------------------------------------


PICKLE_PLANTER = """
import pathlib, sys, diskcache
index, marker, key = sys.argv[1:4]
class Bomb:
    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(marker), "unpickled"))
cache = diskcache.Cache(index)
cache.set(key, Bomb())
cache.set(("a", "tuple", "key"), "text")  # a pickled key
cache.close()
"""


@pytest.mark.parametrize("key", ["0" * 32, "__gtcache_index_format__", "real"])
def test_planted_pickle_is_never_loaded(store: pathlib.Path, tmp_path: pathlib.Path, key: str, figures: Any) -> None:
    marker = tmp_path / "unpickled.marker"
    real_key = _a_record(store)[0]
    subprocess.run(
        [sys.executable, "-c", PICKLE_PLANTER, str(store / "index"), str(marker), real_key if key == "real" else key],
        check=True,
    )
    for command in (["ls", "--json"], ["stats", "--json"], ["verify", "--json"]):
        result = gtcache_cli(store, *command)
        assert not marker.exists(), f"'gtcache {command[0]}' unpickled a planted index row"
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode in (0, 1), result.stderr
    listing = json.loads(gtcache_cli(store, "ls", "--json").stdout)
    assert sorted(row["program"] for row in listing) == ["tests.synthetic.kept_a", "tests.synthetic.kept_b"]
    assert all(row["status"] == "ok" for row in listing)
    if key == "0" * 32:
        report = json.loads(gtcache_cli(store, "verify", "--json").stdout)
        assert [p["kind"] for p in report["problems"]] == ["index"], report
        assert "not gtcache's" in report["problems"][0]["detail"]
        repaired = gtcache_cli(store, "verify", "--repair")
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        assert gtcache_cli(store, "verify").returncode == 0
    assert not marker.exists()
    figures.add("security", f"pickled index row (key {key[:8]}...) under ls/stats/verify: unpickled", "never")


# -- reindex and where the index may be ------------------------------------------------------------


def test_reindex_with_the_store_as_index_dir_is_refused(store: pathlib.Path) -> None:
    before = snapshot(store)
    for command in (["reindex"], ["ls"], ["verify", "--repair"], ["clear", "--yes"]):
        result = gtcache_cli(store, *command, index_dir=store)
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
        assert "is the store itself" in result.stderr
    assert snapshot(store) == before


@pytest.mark.parametrize("where", ["inside", "around", "foreign"])
def test_index_dir_that_is_not_its_own_is_refused(store: pathlib.Path, tmp_path: pathlib.Path, where: str) -> None:
    index = {"inside": store / "entries", "around": tmp_path, "foreign": tmp_path / "mine"}[where]
    if where == "foreign":
        index.mkdir()
        (index / "thesis.tex").write_text("years of work")
    before_store, before_index = snapshot(store), snapshot(index)
    result = gtcache_cli(store, "reindex", index_dir=index)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("Error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert snapshot(index) == before_index
    assert snapshot(store) == before_store


def test_reindex_deletes_only_its_own_files(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    index = tmp_path / "node-local" / "index"
    assert gtcache_cli(store, "ls", index_dir=index).returncode == 0
    assert stat.S_IMODE(index.stat().st_mode) == 0o700, "an index folder gtcache creates is private"
    own = sorted(p.name for p in index.iterdir())
    assert set(own) <= {"cache.db", "cache.db-wal", "cache.db-shm"}, own
    result = gtcache_cli(store, "reindex", index_dir=index)
    assert result.returncode == 0 and "Indexed 2 entries" in result.stdout, result.stdout + result.stderr
    (index / "notes.txt").write_text("mine")  # now it holds something that is not gtcache's
    result = gtcache_cli(store, "reindex", index_dir=index)
    assert result.returncode == 1 and "notes.txt" in result.stderr, result.stdout + result.stderr
    assert (index / "notes.txt").read_text() == "mine"


# -- an entry names only its own files ------------------------------------------------------------


def _tamper(entry_json: pathlib.Path, field: str, value: str) -> None:
    record = json.loads(entry_json.read_text())
    record["artifact"]["fields"][field] = value
    record["record_xxh3"] = record_digest(record)  # as an attacker with write access would
    entry_json.write_text(json.dumps(record))


@pytest.mark.parametrize("source", ["../../../evil.py", "/ABSOLUTE/evil.py", "other.py"])
def test_synthetic_record_naming_a_foreign_file_is_broken(store: pathlib.Path, tmp_path: pathlib.Path, source: str) -> None:
    opened = gtcache.open_store(store)
    key, _ = _a_record(store)
    source = source.replace("/ABSOLUTE", str(tmp_path))
    _tamper(opened.entry_path(key) / "entry.json", "source", source)
    with pytest.raises(gtcache.CorruptEntryError, match="not a file of the entry"):
        opened.lookup(key)
    listing = json.loads(gtcache_cli(store, "ls", "--json").stdout)
    assert [row["status"] for row in listing if row["key"] == key] == ["broken"]
    report = json.loads(gtcache_cli(store, "verify", "--json").stdout)
    assert [(p["kind"], p["key"]) for p in report["problems"]] == [("broken-entry", key)]


EVIL_MARKER = """
import pathlib
pathlib.Path({marker!r}).write_text("evil.py ran")
def {name}(*args, **kwargs):
    pathlib.Path({marker!r}).write_text("evil.py ran")
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_roundtrip_entry_pointing_outside_never_runs_it(
    store_copy: pathlib.Path, compiled_store: Any, tmp_path: pathlib.Path, how: str, figures: Any
) -> None:
    from tests.helpers import load_in_fresh_process

    variant = compiled_store.variant("axpy", "roundtrip")
    opened = gtcache.open_store(store_copy)
    entry = opened.get(variant.key)
    marker = tmp_path / "evil-ran.marker"
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL_MARKER.format(marker=str(marker), name=entry.record.artifact["fields"]["entry_point_name"]))
    if how == "relative":
        source = os.path.relpath(evil, entry.path)
        assert source.startswith("../")
    else:
        source = str(evil)
    _tamper(entry.path / "entry.json", "source", source)

    outcomes = load_in_fresh_process(
        store_copy, variant.example, variant.backend, seed=1, size=8, out_file=tmp_path / "out.npy"
    )
    assert not marker.exists(), "the planted source outside the entry was run"
    assert [o["status"] for o in outcomes] == ["compiled"], outcomes
    assert outcomes[0]["key"] == variant.key
    # The broken entry was replaced by the fresh compile: sound again, naming its own file.
    fixed = gtcache.open_store(store_copy).get(variant.key)
    assert fixed.record.artifact["fields"]["source"] in {f.path for f in fixed.record.files}
    assert not marker.exists()
    figures.add("security", f"roundtrip record naming a source outside its entry ({how}): ran / outcome", "never / compiled")


def test_decode_refuses_foreign_paths_for_every_kind(tmp_path: pathlib.Path) -> None:
    from gtcache.gt4py import codecs

    cases = {
        "gtfn": ({"module": "../x.so", "entry_point_name": "f", "device_type": "CPU"}, {"x.so"}),
        "dace": ({"library": "libp.so", "sdfg": "/etc/passwd", "binding_source_code": "", "bind_func_name": "b",
                  "device_type": "CPU"}, {"libp.so", "libdacestub_p.so", "program.sdfg.json"}),
        "dace-stub": ({"library": "libp.so", "sdfg": "program.sdfg.json", "binding_source_code": "",
                       "bind_func_name": "b", "device_type": "CPU"}, {"libp.so", "program.sdfg.json"}),
        "roundtrip": ({"source": "../../evil.py", "entry_point_name": "f", "column_axis": None, "debug": False},
                      {"program.py"}),
    }
    for kind, (fields, files) in cases.items():
        with pytest.raises(gtcache.CorruptEntryError, match="not a file of the entry"):
            codecs.decode({"kind": kind.split("-")[0], "fields": fields}, tmp_path, files=files, key="k" * 32)


def test_a_direct_link_is_never_written_through_a_symlinked_shard(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A hit writes its direct link (``direct/<xx>/<key>``): a shard folder swapped for a
    symlink out of the store (a reviewer's run wrote the link into the target) is refused,
    as a symlinked entry shard is when publishing; the hook warns and goes on (``_link``)."""
    canary = tmp_path / "canary"
    canary.mkdir()
    opened = gtcache.open_store(store)
    key = next(iter(opened.scan().entries)).key
    (store / "direct").mkdir(exist_ok=True)
    (store / "direct" / "6a").symlink_to(canary, target_is_directory=True)
    with pytest.raises(gtcache.GtcacheError, match="is not a folder"):
        opened.link_direct("6a" + "0" * 30, key)
    assert list(canary.iterdir()) == []
    opened.link_direct("6b" + "0" * 30, key)  # a real shard: written
    assert opened.build_key_of("6b" + "0" * 30) == key


def test_remove_never_reaches_through_a_symlinked_shard(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """``Store.remove`` (what rm, prune and clear call) of a key whose shard folder
    ``entries/<xx>`` is a symlink out of the store: the folder at ``<key>`` it leads to (a
    canary holding ``<key>/data``) is neither moved into ``trash/`` nor deleted, with or
    without ``failed``, and ``disk_size`` measures nothing through the link. Without the
    shard check, the rename into ``trash/`` went through the link and the canary was gone."""
    canary = tmp_path / "canary"
    (canary / PLANTED_KEY).mkdir(parents=True)
    (canary / PLANTED_KEY / "data").write_bytes(b"precious\n" * 100)
    (store / "entries" / PLANTED_KEY[:2]).symlink_to(canary, target_is_directory=True)
    before = snapshot(canary)
    opened = gtcache.open_store(store)
    failed: dict[str, str] = {}
    calls = {
        "remove": lambda: opened.remove([PLANTED_KEY]),
        "remove, failed={}": lambda: opened.remove([PLANTED_KEY], failed=failed),
        "disk_size": lambda: opened.disk_size(PLANTED_KEY),
    }
    for what, call in calls.items():
        result = call()
        assert snapshot(canary) == before, f"{what}: the canary's names and bytes are unchanged"
        assert result == 0, f"{what}: no bytes freed or measured through the link"
    assert failed == {}
    assert len(opened.scan().entries) == 2, "the store's own entries are all still there"


@pytest.mark.parametrize("folder", ["direct", "tmp"])
def test_a_folder_made_a_symlink_after_the_store_was_opened_is_not_written_through(
        store: pathlib.Path, tmp_path: pathlib.Path, folder: str) -> None:
    """A long-running process checked the store's folders when it opened it: a fixed folder
    swapped for a symlink since (a reviewer's case: direct/ and tmp/) gets no direct link and
    no staging, though that check said the folders were fine."""
    canary = tmp_path / "canary"
    canary.mkdir()
    opened = gtcache.open_store(store)
    key = next(iter(opened.scan().entries)).key
    assert opened.unsafe_problem() is None  # checked (and remembered) while still sound
    shutil.rmtree(store / folder, ignore_errors=True)
    (store / folder).symlink_to(canary, target_is_directory=True)
    with pytest.raises(gtcache.GtcacheError, match="is not a folder"):
        if folder == "direct":
            opened.link_direct("dd" + "0" * 30, key)
        else:
            publish(opened, "late")
    assert list(canary.iterdir()) == []
