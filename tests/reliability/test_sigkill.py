"""SIGKILL processes that write the store, hundreds of times, at random points.

Each round starts two writer processes on one store; each publishes entries of
1-3 files (a few bytes to 2 MiB) as fast as it can, and now and then links a
direct key, counts a hit, records a run in the ledger, removes an entry, or
scans (which writes the index). Each is killed with SIGKILL after a random
time. Afterwards, no entry may be torn or half-visible: every entry folder is
complete and verifies, the index agrees with the folders, and what the killed
writers left behind is only litter that ``verify --repair`` removes.

The same attack with a few kills (no slow or heavy mark) runs in ``make test-fast``.
"""

from __future__ import annotations

import pathlib
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import gtcache
from gtcache.policies.verify import verify

KILLS = 200
#: The short variant: a few kills, a few seconds.
FEW_KILLS = 6
WRITERS = 2

WRITER = """
import os, random, sys
import gtcache
from gtcache.keys import make_key
from gtcache.store import EntryDraft

store = gtcache.open_store(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
print("READY", flush=True)
published = []
n = 0
while True:
    n += 1
    ingredients = {"writer": sys.argv[2], "n": n, "salt": rng.random()}
    key = make_key("sigkill", ingredients)
    files = {
        f"part{i}.bin": os.urandom(rng.choice([16, 4096, 300_000, 2_000_000]))
        for i in range(rng.randint(1, 3))
    }
    draft = EntryDraft(
        key=key, ingredients=ingredients,
        program={"name": f"p{n}", "module": "sigkill"}, backend={"name": "roundtrip", "options": {}},
        device={"type": "CPU", "arch": None}, toolchain={"gt4py": "test"},
        artifact={"kind": "roundtrip", "fields": {"source": "part0.bin", "entry_point_name": "p",
                  "column_axis": None, "debug": False}},
        compile_seconds=0.1,
    )
    store.publish(draft, files)
    published.append(key)
    if n == 1:
        print("PUBLISHED", flush=True)
    op = rng.random()
    if op < 0.2:
        store.link_direct(make_key("direct", ingredients), key)
    elif op < 0.4:
        store.touch(rng.choice(published))
    elif op < 0.5:
        store.record_run({"started": "now", "counts": {"hit": 1}, "variants": []})
    elif op < 0.6 and len(published) > 3:
        store.remove([published.pop(rng.randrange(len(published)))])
    elif op < 0.7:
        store.scan()
"""


def kill_writers(root: pathlib.Path, kills_wanted: int, seed: int) -> int:
    """Start writers in rounds of WRITERS on ``root`` and SIGKILL each at a random time after
    its first entry, until ``kills_wanted`` were killed; return how many."""
    rng = random.Random(seed)
    kills = rounds = 0
    while kills < kills_wanted:
        rounds += 1
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(WRITER), str(root), str(rounds * WRITERS + i)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for i in range(WRITERS)
        ]
        for writer in writers:  # each is killed after its first entry, at a random point after it
            assert writer.stdout is not None and writer.stdout.readline().strip() == "READY"
            assert writer.stdout.readline().strip() == "PUBLISHED"
        for writer in sorted(writers, key=lambda _: rng.random()):
            time.sleep(rng.uniform(0.0, 0.25))
            if writer.poll() is None:
                writer.send_signal(signal.SIGKILL)
                kills += 1
            _, err = writer.communicate()
            assert writer.returncode == -signal.SIGKILL, f"a writer failed on its own:\n{err}"
    return kills


def check_after_kills(root: pathlib.Path) -> dict[str, int]:
    """No torn entry, the index agrees, only litter to repair; return what was found."""
    store = gtcache.open_store(root)
    on_disk = sorted(p.name for p in (root / "entries").glob("*/*"))
    torn = 0
    for key in on_disk:
        try:
            entry = store.get(key)
            store.verify_payload(entry)
        except gtcache.GtcacheError:
            torn += 1
    staging = len(list((root / "tmp").iterdir()))
    index_keys = sorted(e.key for e in store.scan(use_index=True).entries)

    report = verify(store, repair=True, grace_seconds=0)
    kinds = sorted({p.kind for p in report.repaired})
    assert torn == 0, f"{torn} torn or half-visible entries"
    assert index_keys == on_disk, "the index agrees with the entry folders"
    # Litter of killed writers, and direct links to entries the writers removed (links are
    # hints: a lookup through one falls back to the build key).
    assert set(kinds) <= {"leftover", "dangling-link"}, f"nothing but litter to clean up, not {kinds}"
    assert report.ok and report.entries == len(on_disk), "everything that survived verifies"
    assert not any((root / "tmp").iterdir()) and not any((root / "trash").iterdir())

    return {"entries": len(on_disk), "torn": torn, "staging": staging}


@pytest.mark.slow
@pytest.mark.heavy
def test_sigkilled_writers_never_leave_a_torn_entry(tmp_path: pathlib.Path, figures) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root)
    started = time.monotonic()
    kills = kill_writers(root, KILLS, seed=20261202)
    seconds = time.monotonic() - started
    found = check_after_kills(root)

    section = "SIGKILL of writing processes"
    figures.add(section, "writers killed at random points", kills)
    figures.add(section, "entries that survived", found["entries"])
    figures.add(section, "torn or half-visible entries", found["torn"])
    figures.add(section, "staging folders left by kills (removed by verify --repair)", found["staging"])
    figures.add(section, "problems verify --repair found besides litter", 0)
    figures.add(section, "index disagreeing with folders", 0)
    figures.add(section, "seconds", round(seconds, 1))


def test_a_few_sigkilled_writers_leave_no_torn_entry(tmp_path: pathlib.Path) -> None:
    """The attack above, short: a few kills."""
    root = tmp_path / "store"
    gtcache.open_store(root)
    assert kill_writers(root, FEW_KILLS, seed=20261203) == FEW_KILLS
    found = check_after_kills(root)
    assert found["torn"] == 0 and found["entries"] >= 1
