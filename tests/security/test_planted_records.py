"""A record planted by someone untrusted is refused before a byte of it is read.

The documented "store made under umask 002" (docs/security.md): a shard folder its group may
write, a group the reader does not trust. Its entries are refused (and compile again), but a
member of that group can put anything in it. Tests run as root (the store's owner and its
reader) and plant as ``nobody`` (65534, of group ``nogroup``) in a real process of that user.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator

import pytest

import gtcache
from tests.helpers import publish

NOBODY, NOGROUP = 65534, 65534
#: The planted record's size: sparse, so it costs no disk.
PLANTED_BYTES = 64 << 30

#: argv: store. Opens it and looks the key up, then lists it, with 2 GiB of address space
#: (a job's memory limit): prints what each did.
READER = textwrap.dedent("""
    import json, resource, sys, time
    import gtcache
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    store_path, key = sys.argv[1], sys.argv[2]
    said = {}
    for what in ("lookup", "scan"):
        start = time.monotonic()
        try:
            store = gtcache.open_store(store_path, create=False)
            if what == "lookup":
                store.lookup(key)
                said[what] = "found"
            else:
                said[what] = [e.status for e in store.scan(use_index=False).entries]
        except BaseException as error:
            said[what] = type(error).__name__
        said[what + "_seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(said))
""")


@pytest.fixture
def public() -> Iterator[pathlib.Path]:
    base = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-planted-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)  # (shutil.rmtree recurses: a deep tree stops it)


def _as_nobody(plant: Callable[[], object]) -> None:
    """``plant()`` in a child process of ``nobody`` (group ``nogroup``); the test fails if it fails."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(NOGROUP, NOGROUP, NOGROUP)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            plant()
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0, "planting failed"


def _plant_as_nobody(shard: pathlib.Path, key: str) -> None:
    """As ``nobody``: the entry folder at ``key`` moved aside, another in its place whose
    ``entry.json`` is a sparse file of ``PLANTED_BYTES``."""
    def plant() -> None:
        os.rename(shard / key, shard / "aside")
        (shard / key).mkdir()
        with open(shard / key / "entry.json", "wb") as planted:
            planted.truncate(PLANTED_BYTES)
    _as_nobody(plant)


@pytest.mark.parametrize("trust", ["default", "anyone"])
def test_a_huge_record_planted_in_a_folder_others_may_write_is_not_read(public: pathlib.Path, trust: str) -> None:
    """The lookup read the whole record before it checked who wrote it: a 6 GB sparse one
    planted so held a model run's lookup 81 s and took 12 GB of its memory (a reviewer's
    attack; a larger one, the job's memory). Now it is refused from its owner and size alone,
    as the hook, ``ls`` and ``verify`` see it; with the owner checks off
    (``GTCACHE_TRUSTED_USERS='*'``) from its size."""
    store = gtcache.open_store(public / "store")
    key = publish(store).key
    shard = store.root / "entries" / key[:2]
    os.chown(shard, 0, NOGROUP)
    os.chmod(shard, 0o775)  # umask 002: its group may write it
    _plant_as_nobody(shard, key)
    assert (shard / key / "entry.json").stat().st_uid == NOBODY

    env = {**os.environ, "GTCACHE_TRUSTED_USERS": "*"} if trust == "anyone" else {
        k: v for k, v in os.environ.items() if not k.startswith("GTCACHE_TRUSTED")}
    proc = subprocess.run([sys.executable, "-c", READER, str(store.root), key], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = "UntrustedEntryError" if trust == "default" else "CorruptEntryError"
    assert said["lookup"] == expected, said
    assert said["scan"] == ["broken"], said
    assert said["lookup_seconds"] < 5 and said["scan_seconds"] < 5, said


def _plant_entry_as_nobody(shard: pathlib.Path, record: dict, size: int) -> str:
    """As ``nobody``: a new entry folder in ``shard`` whose record says it was last used in 9999
    and whose payload is a sparse file of ``size`` bytes; its key."""
    key = shard.name + "f" * 30

    def plant() -> None:
        (shard / key).mkdir()
        late = "9999-12-31T00:00:00+00:00"
        (shard / key / "entry.json").write_text(json.dumps({**record, "key": key, "created": late, "last_used": late}))
        with open(shard / key / "program.py", "wb") as payload:
            payload.truncate(size)
    _as_nobody(plant)
    return key


ENFORCE = textwrap.dedent("""
    import sys, gtcache
    from gtcache.policies import Limits, enforce_limits
    try:
        enforce_limits(gtcache.open_store(sys.argv[1]), Limits(max_size=int(sys.argv[2])))
    except gtcache.GtcacheError as error:
        print(error)
""")


@pytest.mark.parametrize("owner", ["root", "a user"])
def test_a_planted_entry_makes_the_size_cap_remove_no_sound_entry(public: pathlib.Path, owner: str) -> None:
    """In a store with a size cap, one shard folder its untrusted group may write (umask 002):
    a member planted an entry there, a sparse terabyte last used "in 9999". The next publish's
    cap removed every sound entry of the store, least recently used first, before it (a
    reviewer's attack: 20 of 20). Now broken entries go first, and one the cap cannot remove
    (a store owner who is not root may not move another user's folder) makes no sound entry go."""
    from tests.security.test_cli_errors import _drop_dac_caps

    store = gtcache.open_store(public / "store")
    keys = [publish(store, f"p{i}").key for i in range(12)]
    by_shard: dict[str, list[str]] = {}
    for key in keys:
        by_shard.setdefault(key[:2], []).append(key)
    shard = store.root / "entries" / keys[0][:2]
    os.chown(shard, 0, NOGROUP)
    os.chmod(shard, 0o775)  # umask 002: its group may write it
    record = json.loads((shard / keys[0] / "entry.json").read_text())
    _plant_entry_as_nobody(shard, record, 1 << 40)
    sound = sorted(k for k in keys if k[:2] != shard.name)  # the others in that shard are refused
    cap = sum(size for key, (size, _) in store.usage_by_key().items() if key in sound)

    proc = subprocess.run([sys.executable, "-c", ENFORCE, str(store.root), str(cap)], capture_output=True, text=True,
                          timeout=300, check=False, preexec_fn=_drop_dac_caps if owner == "a user" else None)
    assert proc.returncode == 0, proc.stderr
    left = {e.key for e in gtcache.open_store(store.root).scan(use_index=False).entries if e.ok}
    assert left == set(sound), f"the cap removed {len(set(sound) - left)} of {len(sound)} sound entries ({proc.stdout})"


GTCACHE = str(pathlib.Path(sys.executable).parent / "gtcache")


def test_a_tree_too_deep_to_recurse_into_is_removed(public: pathlib.Path) -> None:
    """In a shard folder its untrusted group may write, a member planted an entry folder with a
    tree 3,000 folders deep: ``prune --broken`` and ``clear`` ended in "Unexpected
    RecursionError" (Python 3.12's ``shutil.rmtree`` recurses) and left it in ``trash/`` for
    every later ``clear`` and ``verify --repair`` to stop at (a reviewer's attack)."""
    store = gtcache.open_store(public / "store")
    keys = [publish(store, f"p{i}").key for i in range(3)]
    shard = store.root / "entries" / keys[0][:2]
    os.chown(shard, 0, NOGROUP)
    os.chmod(shard, 0o775)
    planted = shard.name + "f" * 30

    def plant() -> None:
        (shard / planted).mkdir()
        (shard / planted / "entry.json").write_text("{}")
        fd = os.open(shard / planted, os.O_RDONLY)
        for _ in range(3000):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    _as_nobody(plant)
    for args in (["prune", "--broken", "--yes"], ["clear", "--yes"]):
        run = subprocess.run([GTCACHE, "--cache-dir", str(store.root), *args], capture_output=True, text=True,
                             timeout=300, check=False)
        assert run.returncode == 0 and "RecursionError" not in run.stdout + run.stderr, (args, run.stdout, run.stderr)
    left = sorted(str(p.relative_to(store.root)) for folder in ("trash", "quarantine", "entries")
                  for p in (store.root / folder).glob("*/*") if (store.root / folder).is_dir())
    assert not any(planted in name for name in left), left
    trash = store.root / "trash"
    assert not trash.is_dir() or not list(trash.iterdir()), "the planted tree stayed in trash/"
