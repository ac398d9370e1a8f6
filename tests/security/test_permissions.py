"""Owner and permission checks (as ssh ``StrictModes``): a store, tier or entry that someone
untrusted could have written is never used, with one warning saying why and how to fix it.

Tests run as root, whom the checks trust as an owner; so the READERS here are real
unprivileged users: ``nobody`` (65534) and uid 65533 (no passwd entry). The venv's
interpreter lives under /root (mode 0700), which other users cannot read, so each child
starts as root, imports (and, for compiling children, runs once through gtcache against a
scratch store) every code path it needs, then drops to the reader's uid and gids for good
(``setresuid``) before it opens the store under test.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

import gtcache
from gtcache._frozen import replace
from gtcache.store import TrustPolicy
from tests.conftest import SIZE, CompiledStore
from tests.helpers import publish
from tests.reliability.test_hostile_input import files

NOBODY, NOGROUP = 65534, 65534
#: A second unprivileged user, without a passwd entry (numeric ids work with setuid).
OTHER = 65533
GTCACHE_CLI = [sys.executable, "-m", "gtcache_cli"]

DROP = """
import os
def drop(uid, gid, groups):
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
"""

#: argv: store, uid, gid, extra gids (comma list), scratch store. Prints warnings and counts.
HOOK_RUN = DROP + """
import json, sys, warnings
import numpy as np
import gtcache
from gtcache import examples
from gtcache.gt4py import hook as gthook
from gtcache.gt4py._hook import GtcacheWarning

store, uid, gid, groups, scratch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
example = examples.EXAMPLES["axpy"]
backend = examples.backend_by_name("roundtrip")

def run():
    program = example.program.with_backend(backend)
    args, out = example.make_args(32, 1)
    program(*args, offset_provider=example.offset_provider(32))
    np.testing.assert_allclose(out.asnumpy(), example.reference(args))

for _ in range(2):  # as root: compile and publish, then hit and load (imports every path)
    with gthook.installed(scratch):
        run()
drop(uid, gid, [int(g) for g in groups.split(",") if g])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hook = gtcache.install(store)
    run()
    counts = dict(hook.counts)
    gtcache.uninstall()
from gtcache.gt4py._hook import PROCESS_RUN
PROCESS_RUN.write_ledgers()  # what the exit handler does, skipped by os._exit below
print(json.dumps({
    "warnings": [str(w.message) for w in caught if issubclass(w.category, GtcacheWarning)],
    "counts": counts,
}), flush=True)
os._exit(0)  # gt4py's exit handlers would remove, as this user, the temp folder root made
"""

#: argv: store, uid, gid. Prints "used" or the refusal.
OPEN = DROP + """
import sys
import gtcache
from gtcache.store import TrustPolicy
store, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
drop(uid, gid, [])
try:
    gtcache.open_store(store, create=False, trust=TrustPolicy.from_env()).close()
    print("used")
except gtcache.GtcacheError as error:
    print(type(error).__name__, error)
"""


def child(code: str, *args: object, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True, text=True,
        timeout=600, env={**os.environ, **(env or {})}, check=False,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture
def public(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A folder every user can reach (pytest's own are private to root), removed afterwards."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-trust-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def hook_env(public: pathlib.Path) -> dict[str, str]:
    """gt4py's build cache and temp folders where any reader may write; compiles in-process."""
    cache, temp = public / "gt4py-build-cache", public / "tmp"
    for folder in (cache, temp):
        folder.mkdir()
        os.chmod(folder, 0o1777)
    return {
        "GT4PY_BUILD_CACHE_DIR": str(cache), "GT4PY_BUILD_CACHE_LIFETIME": "persistent", "TMPDIR": str(temp),
        "GT4PY_BUILD_JOBS_MODE": "serial",  # spawned workers could not start as the reader (see above)
    }


def run_hook(public: pathlib.Path, store: pathlib.Path, uid: int, gid: int, groups: tuple[int, ...] = (),
             env: dict[str, str] | None = None) -> dict[str, Any]:
    out = child(HOOK_RUN, store, uid, gid, ",".join(map(str, groups)), public / "scratch", env=env)
    result: dict[str, Any] = json.loads(out)
    return result


def tree(root: pathlib.Path) -> dict[str, tuple[int, bytes]]:
    """Every file and folder under ``root`` with its mode (and bytes): "unchanged" means this."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        found[str(path.relative_to(root))] = (st.st_mode, path.read_bytes() if path.is_file() else b"")
    return found


# -- stores others can write ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["world-writable", "group-writable"])
def test_a_store_others_can_write_is_not_used_and_left_alone(
    public: pathlib.Path, hook_env: dict[str, str], how: str, figures: Any
) -> None:
    root = public / "store"
    gtcache.open_store(root).close()  # root's, which every reader trusts as an owner
    if how == "world-writable":
        os.chmod(root, 0o777)
    else:
        os.chown(root, 0, NOGROUP)  # a group nobody is in... but the reader does not trust it
        os.chmod(root, 0o775)
    before = tree(root)
    result = run_hook(public, root, NOBODY, NOGROUP, env=hook_env)
    assert result["counts"] == {}, "nothing served from or published to the store"
    (warning,) = result["warnings"]
    assert f"store '{root}' not used" in warning and "compiling without the cache" in warning, warning
    if how == "world-writable":
        assert f"chmod o-w {root}" in warning and "drwxrwxrwx" in warning, warning
    else:
        assert f"chmod g-w {root}" in warning and "GTCACHE_TRUSTED_GROUPS=nogroup" in warning, warning
    assert tree(root) == before, "the store's bytes and modes are unchanged"
    figures.add("security", f"{how} store: warnings, entries served", "1, 0")


def test_a_store_of_another_user_is_refused_unless_that_user_is_trusted(public: pathlib.Path) -> None:
    root = public / "store"
    gtcache.open_store(root).close()
    for path in (root, *root.rglob("*")):
        os.chown(path, NOBODY, NOGROUP, follow_symlinks=False)
    refused = child(OPEN, root, OTHER, OTHER)
    assert refused.startswith("UntrustedStoreError") and "belongs to user 'nobody'" in refused, refused
    assert "GTCACHE_TRUSTED_USERS=nobody" in refused, refused
    assert child(OPEN, root, OTHER, OTHER, env={"GTCACHE_TRUSTED_USERS": "nobody"}) == "used"
    assert child(OPEN, root, OTHER, OTHER, env={"GTCACHE_TRUSTED_USERS": str(NOBODY)}) == "used"
    assert child(OPEN, root, NOBODY, NOGROUP) == "used", "its owner uses it"


def test_a_parent_folder_others_can_write_lets_them_swap_the_store(public: pathlib.Path) -> None:
    parent = public / "parent"
    parent.mkdir()
    gtcache.open_store(parent / "store").close()
    os.chmod(parent, 0o777)
    refused = child(OPEN, parent / "store", NOBODY, NOGROUP)
    assert refused.startswith("UntrustedStoreError") and f"'{parent}' is writable by everyone" in refused
    os.chmod(parent, 0o1777)  # sticky, as /tmp: others cannot rename what is not theirs
    assert child(OPEN, parent / "store", NOBODY, NOGROUP) == "used"


def test_trust_is_declared_by_the_reader_never_by_the_store(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root).close()
    os.chmod(root, 0o777)
    (root / "gtcache.toml").write_text('trusted_users = ["*"]\ntrusted_groups = ["*"]\n')
    with pytest.raises(gtcache.UntrustedStoreError, match="writable by everyone"):
        gtcache.open_store(root, trust=TrustPolicy.from_env({}))
    gtcache.open_store(root, trust=TrustPolicy.from_env({"GTCACHE_TRUSTED_USERS": "*"})).close()


@pytest.mark.parametrize("how", ["writable by everyone", "another user's"])
def test_an_index_folder_apart_from_the_store_is_checked_as_the_store_is(tmp_path: pathlib.Path, how: str) -> None:
    """An index given apart from the store (``index_dir``, ``GTCACHE_INDEX_DIR``: node-local
    disk) is read and rewritten as the store's own is: one someone untrusted may write (mode
    0777, not sticky) or owns could hold rows they made up. Opening refuses it, naming it, as
    it refuses such a store (its parents alone passing is not enough); ``allow_untrusted``
    (listings) opens the store read-only, saying why."""
    from gtcache.settings import Settings

    root, index = tmp_path / "store", tmp_path / "node-local" / "index"
    gtcache.open_store(root).close()
    index.mkdir(parents=True)
    if how == "writable by everyone":
        os.chmod(index, 0o777)
        said = f"'{index}' is writable by everyone"
    else:
        os.chown(index, NOBODY, NOGROUP)
        said = f"'{index}' belongs to user 'nobody'"
    trust = TrustPolicy.from_env({})
    gtcache.open_store(root, trust=trust).close()  # the store itself is sound: only its index is not
    with pytest.raises(gtcache.UntrustedStoreError) as refused:
        gtcache.open_store(root, index_dir=index, trust=trust)
    assert said in str(refused.value), refused.value
    settings = Settings.from_env(env={"GTCACHE_DIR": str(root), "GTCACHE_INDEX_DIR": str(index)})
    assert settings.index_dir == index
    with pytest.raises(gtcache.UntrustedStoreError) as refused:
        gtcache.open_store(settings.cache_dir, index_dir=settings.index_dir, trust=trust)
    assert said in str(refused.value), refused.value
    listed = gtcache.open_store(root, index_dir=index, trust=trust, allow_untrusted=True)
    assert listed.read_only and said in (listed.trust_problem or ""), listed.trust_problem


# -- group-shared stores ---------------------------------------------------------------------------


def test_what_a_store_makes_is_never_writable_by_everyone_whatever_the_mode_of_its_root(tmp_path: pathlib.Path) -> None:
    """Folders and files a store makes get its root's permission bits, never world-write: a
    root everyone may write (a store opened with ``GTCACHE_TRUSTED_USERS='*'``, as on a file
    system that reports every file as 0777) still makes 0775 folders and 0664 files, not
    folders anyone could swap an entry in (a mutation audit: world-write passed on went
    unnoticed)."""
    root = tmp_path / "store"
    root.mkdir()
    os.chmod(root, 0o777)
    store = gtcache.open_store(root, trust=TrustPolicy.from_ids([-1], ()))
    entry = publish(store)
    store.link_direct("ab" * 16, entry.key)
    made = [root / "entries", entry.path.parent, entry.path, entry.path / "program.py", entry.path / "entry.json",
            root / "tmp", root / "direct" / "ab", root / "direct" / "ab" / ("ab" * 16)]
    assert {oct(stat.S_IMODE(os.lstat(path).st_mode)) for path in made} == {"0o775", "0o664"}, made


@pytest.mark.slow
def test_a_group_shared_store_is_used_by_the_group_and_stays_group_writable(
    public: pathlib.Path, hook_env: dict[str, str], figures: Any
) -> None:
    root = public / "team-store"
    root.mkdir()
    os.chown(root, 0, NOGROUP)
    os.chmod(root, 0o2775)  # the documented set-up: setgid, group-writable
    trusted = {**hook_env, "GTCACHE_TRUSTED_GROUPS": "nogroup"}
    old = os.umask(0o022)  # the writer's umask would make everything 0644 / 0755
    try:
        wrote = run_hook(public, root, NOBODY, NOGROUP, env=trusted)
    finally:
        os.umask(old)
    assert (wrote["counts"], wrote["warnings"]) == ({"compiled": 1}, [])
    made = list(root.rglob("*"))
    assert any(p.suffix == ".json" and "ledger" in p.parts for p in made), "the run was recorded"
    for path in made:
        st = path.lstat()
        want = 0o2775 if path.is_dir() else 0o664
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (want, NOGROUP), (path, oct(st.st_mode))
    # A second member of the group (uid 65533, nogroup as a supplementary group) loads it.
    read = run_hook(public, root, OTHER, OTHER, groups=(NOGROUP,), env=trusted)
    assert (read["counts"], read["warnings"]) == ({"hit": 1}, [])
    # Without declaring the group, the same reader refuses the store.
    refused = run_hook(public, root, OTHER, OTHER, groups=(NOGROUP,), env=hook_env)
    assert refused["counts"] == {} and "GTCACHE_TRUSTED_GROUPS=nogroup" in refused["warnings"][0]
    figures.add("security", "group-shared store (2775): modes of what a umask-022 writer made", "2775 / 0664")


@pytest.mark.parametrize("shared", [False, True])
def test_a_folder_verify_repairs_gets_the_store_s_mode(tmp_path: pathlib.Path, shared: bool) -> None:
    """``verify --repair`` of fixed folders replaced by symlinks (``tmp/``, the index) makes them
    anew with the modes the store made them with, whatever the umask: in a group-shared store
    (2775) group-writable, else 0755 (the index 0700). Catches: the repair's mkdir with the
    umask's mode (0755 in a group store: its members could no longer publish; under umask 0, a
    world-writable folder, and the store refused)."""
    from gtcache.policies.verify import verify

    root = tmp_path / "store"
    root.mkdir()
    os.chmod(root, 0o2775 if shared else 0o755)
    store = gtcache.open_store(root)
    store.scan()
    store.close()
    for name in ("tmp", "index"):
        shutil.rmtree(root / name)
        (root / name).symlink_to(tmp_path)
    for umask in (0o022, 0o000):
        old = os.umask(umask)
        try:
            verify(gtcache.open_store(root), repair=True)
        finally:
            os.umask(old)
        modes = {name: stat.S_IMODE((root / name).lstat().st_mode) for name in ("tmp", "index")}
        assert modes == ({"tmp": 0o2775, "index": 0o2775} if shared else {"tmp": 0o755, "index": 0o700}), (umask, modes)
        for name in ("tmp", "index"):
            shutil.rmtree(root / name)
            (root / name).symlink_to(tmp_path)


def test_an_index_gtcache_creates_is_private_unless_the_store_is_shared(tmp_path: pathlib.Path) -> None:
    private = gtcache.open_store(tmp_path / "mine")
    private.scan()
    assert stat.S_IMODE((tmp_path / "mine" / "index").stat().st_mode) == 0o700
    shared_root = tmp_path / "ours"
    shared_root.mkdir()
    os.chmod(shared_root, 0o2775)
    shared = gtcache.open_store(shared_root)
    shared.scan()
    assert stat.S_IMODE((shared_root / "index").stat().st_mode) == 0o2775
    lock = shared.lock("x", "files")
    assert lock.acquire(0)
    # Group members can take over each other's locks; others cannot open them (test_store_locks.py).
    assert stat.S_IMODE(lock.path.stat().st_mode) == 0o660, "group members can take over each other's locks"
    lock.release()


# -- entries -------------------------------------------------------------------------------------------

#: argv: store, marker. Compiles-or-loads axpy/roundtrip; prints the outcome statuses.
LOAD = """
import json, sys
import numpy as np
import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variants
store = gtcache.open_store(sys.argv[1])
example = examples.EXAMPLES["axpy"]
program, outcomes = compile_variants(store, example.program, backend=examples.backend_by_name("roundtrip"),
                                    offset_provider=example.offset_provider(32))
args, out = example.make_args(32, 1)
program(*args, offset_provider=example.offset_provider(32))
np.testing.assert_allclose(out.asnumpy(), example.reference(args))
print(json.dumps([[o.status, o.detail] for o in outcomes]))
"""


def plant(store_path: pathlib.Path, key: str, marker: pathlib.Path) -> None:
    """Make the entry's program write ``marker`` when loaded, its record matching (checksums
    pass), and its payload file owned by uid 65533: another user wrote it."""
    from gtcache.store import EntryRecord, FileRecord
    from gtcache.store._files import atomic_write_text
    import xxhash

    entry = store_path / "entries" / key[:2] / key
    payload = entry / "program.py"
    source = f"open({str(marker)!r}, 'w').write('ran')\n" + payload.read_text()
    payload.write_text(source)
    record = EntryRecord.loads((entry / "entry.json").read_bytes())
    files_ = tuple(
        FileRecord(path=f.path, size=len(source.encode()), xxh3=xxhash.xxh3_128_hexdigest(source.encode()))
        if f.path == "program.py" else f for f in record.files
    )
    atomic_write_text(entry / "entry.json", replace(record, files=files_).dumps())
    os.chown(payload, OTHER, OTHER)


@pytest.mark.slow
def test_a_payload_another_user_wrote_is_never_loaded(
    compiled_store: CompiledStore, store_copy: pathlib.Path, tmp_path: pathlib.Path, figures: Any
) -> None:
    key = compiled_store.variant("axpy", "roundtrip").key
    marker = tmp_path / "planted-code-ran"
    # The control: trusting uid 65533, the planted entry is live code (so the check is what stops it).
    control = tmp_path / "control-store"
    shutil.copytree(compiled_store.path, control, symlinks=True)
    plant(control, key, marker)
    assert json.loads(child(LOAD, control, env={"GTCACHE_TRUSTED_USERS": str(OTHER)})) == [["hit", None]]
    assert marker.exists(), "the planted payload runs when its writer is trusted"
    marker.unlink()

    plant(store_copy, key, marker)
    with pytest.raises(gtcache.CorruptEntryError, match="'program.py' belongs to user '65533'"):
        gtcache.open_store(store_copy).lookup(key)
    statuses = json.loads(child(LOAD, store_copy))
    assert statuses[0][0] == "compiled", statuses
    assert not marker.exists(), "the planted payload never ran"
    entry = gtcache.open_store(store_copy).get(key)  # replaced by this reader's own compile
    assert (entry.path / "program.py").stat().st_uid == os.geteuid()
    figures.add("security", "payload owned by an untrusted uid: loaded / planted code ran", "no / no")


def test_an_entry_file_others_can_write_is_broken(store_copy: pathlib.Path, compiled_store: CompiledStore) -> None:
    key = compiled_store.variant("axpy", "roundtrip").key
    entry_json = store_copy / "entries" / key[:2] / key / "entry.json"
    os.chmod(entry_json, 0o666)
    store = gtcache.open_store(store_copy)
    with pytest.raises(gtcache.CorruptEntryError, match="'entry.json' is writable by everyone"):
        store.lookup(key)
    (info,) = [e for e in store.scan(use_index=False).entries if e.key == key]
    assert not info.ok


# -- read-only tiers and the CLI --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_readonly_tier_others_can_write_is_skipped_while_the_main_store_serves(
    compiled_store: CompiledStore, public: pathlib.Path, hook_env: dict[str, str]
) -> None:
    tier = public / "tier"
    shutil.copytree(compiled_store.path, tier, symlinks=True)
    main = public / "main"  # the reader's own store (an empty folder it owns, filled by its first run)
    main.mkdir()
    os.chown(main, NOBODY, NOGROUP)
    env = {**hook_env, "GTCACHE_READONLY_DIRS": str(tier)}
    served = run_hook(public, main, NOBODY, NOGROUP, env=env)
    assert (served["counts"], served["warnings"]) == ({"hit": 1}, []), "the control: the tier serves"
    os.chmod(tier / "entries", 0o777)
    before = tree(tier)
    skipped = run_hook(public, main, NOBODY, NOGROUP, env=env)
    assert skipped["counts"] == {"compiled": 1}, "compiled into the main store"
    (warning,) = skipped["warnings"]
    assert f"read-only store '{tier}' not used" in warning and "it is skipped" in warning, warning
    assert f"chmod o-w {tier}/entries" in warning
    assert tree(tier) == before
    assert len(gtcache.open_store(main, trust=TrustPolicy.from_env({"GTCACHE_TRUSTED_USERS": "nobody"})).scan().entries) == 1


def test_the_cli_lists_an_untrusted_store_with_a_warning_and_refuses_to_import(
    store_copy: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    env = {**os.environ, "GTCACHE_DIR": str(store_copy)}
    bundle = tmp_path / "b.tar.gz"
    exported = subprocess.run([*GTCACHE_CLI, "export", str(bundle)], capture_output=True, text=True, env=env)
    assert exported.returncode == 0, exported.stderr
    os.chmod(store_copy, 0o777)
    before = files(store_copy)
    listed = subprocess.run([*GTCACHE_CLI, "ls"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "axpy" in listed.stdout, listed.stderr
    (warning,) = listed.stderr.strip().splitlines()
    assert warning.startswith(f"Warning: Store '{store_copy}' is not trusted:") and "chmod o-w" in warning
    imported = subprocess.run([*GTCACHE_CLI, "import", str(bundle)], capture_output=True, text=True, env=env)
    assert imported.returncode == 1, imported.stderr
    (error,) = imported.stderr.strip().splitlines()
    assert error.startswith(f"Error: Store '{store_copy}' is not trusted:"), error
    for command in (["prune", "--broken", "--yes"], ["clear", "--yes"], ["verify", "--repair"], ["stats", "--zero"]):
        refused = subprocess.run([*GTCACHE_CLI, *command], capture_output=True, text=True, env=env)
        assert refused.returncode == 1 and refused.stderr.startswith("Error: Store"), (command, refused.stderr)
    assert files(store_copy) == before


def test_a_trusted_folder_is_checked_without_name_look_ups(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owner checks run at every opening; user and group names (which may go to LDAP) are
    looked up only to word a problem, never for a trusted folder, a sticky /tmp included."""
    from gtcache.store import _trust

    def no_look_up(_id: int) -> Any:
        raise AssertionError("a name was looked up")

    monkeypatch.setattr(_trust.pwd, "getpwuid", no_look_up)
    monkeypatch.setattr(_trust.grp, "getgrgid", no_look_up)
    policy = TrustPolicy.from_ids((), ())
    sticky, private = tmp_path / "sticky", tmp_path / "private"
    sticky.mkdir(mode=0o755)
    private.mkdir(mode=0o755)
    os.chmod(sticky, 0o1777)
    assert policy.problem(sticky, os.stat(sticky), sticky_ok=True) is None
    assert policy.problem(private, os.stat(private)) is None
    with pytest.raises(AssertionError, match="looked up"):  # as the store itself, /tmp's mode is a problem
        policy.problem(sticky, os.stat(sticky))


# -- folders inside a store, and the path to it ---------------------------------------------------


def test_a_direct_link_someone_untrusted_may_have_written_links_nothing(tmp_path: pathlib.Path) -> None:
    """A link names which build a program is served: one another user wrote, one in a shard
    folder others can write (they could swap in another link, victim-owned), a symlink or a
    FIFO (which blocked the reader for good) is no link. Before, each was followed: another
    variant's build served (a silently wrong result), or the run hung (a helper's attacks)."""
    store = gtcache.open_store(tmp_path / "store")
    build = publish(store).key
    direct, other = "ab" * 16, "ab" + "c" * 30
    store.link_direct(direct, build)
    link = pathlib.Path(store.root / "direct" / direct[:2] / direct)
    assert store.build_key_of(direct) == build
    os.chown(link, OTHER, OTHER)  # another user's link
    assert gtcache.open_store(store.root).build_key_of(direct) is None
    os.chown(link, 0, 0)
    os.chmod(link.parent, 0o777)  # a shard folder everyone can write
    assert gtcache.open_store(store.root).build_key_of(direct) is None
    os.chmod(link.parent, 0o755)
    link.unlink()
    link.symlink_to(pathlib.Path(store.root / "direct" / other[:2] / other))  # a link to a good link
    store.link_direct(other, build)
    assert gtcache.open_store(store.root).build_key_of(direct) is None
    link.unlink()
    os.mkfifo(link)
    assert gtcache.open_store(store.root).build_key_of(direct) is None  # (and returns: no open blocks)
    link.unlink()
    store.link_direct(direct, build)
    assert gtcache.open_store(store.root).build_key_of(direct) == build


@pytest.mark.parametrize("folder", ["entry", "shard"])
@pytest.mark.parametrize("how", ["writable by others", "a symlink"])
def test_an_entry_under_a_folder_someone_untrusted_may_write_is_broken(
    tmp_path: pathlib.Path, folder: str, how: str
) -> None:
    """Its files pass their checks, but a writer of a folder above them could swap a checked
    library for another between the checksum and the load (a helper's attack ran its code
    so): the entry is not loaded."""
    store = gtcache.open_store(tmp_path / "store")
    key = publish(store).key
    entry = store.root / "entries" / key[:2] / key
    target = entry if folder == "entry" else entry.parent
    if how == "writable by others":
        os.chmod(target, 0o777)
    else:  # the folder moved aside and a symlink to it in its place
        aside = target.with_name(target.name + ".aside")
        target.rename(aside)
        target.symlink_to(aside.name)
    with pytest.raises(gtcache.CorruptEntryError, match="writable by everyone|not a real folder") as caught:
        gtcache.open_store(store.root).lookup(key)
    if how == "writable by others":  # the fix, for every folder (a store made under umask 002)
        assert f"run 'chmod -R go-w {store.root}'" in str(caught.value)


#: argv: store, grid size. Runs two examples (roundtrip) through the hook; prints the gtcache
#: warnings and statuses. The size must be the compiled store's: the grid's tables are in the key.
TWO_PROGRAMS = """
import json, sys, warnings
import gtcache
from gtcache import examples
from gtcache.gt4py._hook import GtcacheWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hook = gtcache.install(sys.argv[1])
    for name in ("axpy", "edge_diff"):
        example = examples.EXAMPLES[name]
        args, _ = example.make_args(int(sys.argv[2]), 1)
        example.program.with_backend(examples.backend_by_name("roundtrip"))(
            *args, offset_provider=example.offset_provider(int(sys.argv[2])))
    statuses = [o.status for o in hook.outcomes]
    gtcache.uninstall()
print(json.dumps({"warnings": [str(w.message) for w in caught if issubclass(w.category, GtcacheWarning)],
                  "statuses": statuses}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("second", ["folder writable", "record writable", "folder a symlink"])
def test_a_store_made_under_umask_002_warns_once_not_once_per_entry(
    store_copy: pathlib.Path, compiled_store: CompiledStore, second: str
) -> None:
    """Every entry of such a store is refused for the same reason (its folder or its record
    writable by others): a run says so once, with the fix, not once per program, and compiles.
    Another reason (a folder swapped for a symlink) is said too, not hidden behind the first."""
    first_key, second_key = (compiled_store.variant(name, "roundtrip").key for name in ("axpy", "edge_diff"))
    os.chmod(store_copy / "entries" / first_key[:2] / first_key, 0o777)
    folder = store_copy / "entries" / second_key[:2] / second_key
    if second == "folder writable":
        os.chmod(folder, 0o777)
    elif second == "record writable":
        os.chmod(folder / "entry.json", 0o666)
    else:
        folder.rename(folder.with_name("aside"))
        folder.symlink_to("aside")
    out = json.loads(child(TWO_PROGRAMS, store_copy, SIZE))
    assert out["statuses"] == ["compiled", "compiled"], out
    refused = [w for w in out["warnings"] if "so it is not loaded" in w]
    assert len(refused) == (2 if second == "folder a symlink" else 1), out["warnings"]
    assert f"chmod -R go-w {store_copy}" in refused[0] and "'gtcache doctor' lists them" in refused[0]
    if second == "folder a symlink":
        assert "not a real folder" in refused[1], refused


def test_a_record_others_can_write_is_refused_by_lookups_and_counted_by_doctor(tmp_path: pathlib.Path) -> None:
    """A store made under umask 002 whose folders were made go-w but not its records: lookups
    refuse the entry (with the fix for the whole store), and the store scan doctor and verify
    make finds it, by the same rule."""
    store = gtcache.open_store(tmp_path / "store")
    key = publish(store).key
    entry = store.root / "entries" / key[:2] / key
    os.chmod(entry / "entry.json", 0o666)
    with pytest.raises(gtcache.CorruptEntryError) as caught:
        gtcache.open_store(store.root).lookup(key)
    reason = caught.value.reason
    assert reason.startswith("file 'entry.json' is writable by everyone") and f"chmod -R go-w {store.root}" in reason
    (found,) = gtcache.open_store(store.root).refused_folders()
    assert (found.path, found.what, found.problem) == (entry, "entry", reason)


def _grant_write(path: pathlib.Path, *, user: int | None = None, group: int | None = None, mask: int = 0o7) -> None:
    """Give ``path`` a POSIX access ACL that names ``user`` or ``group`` with write (``setfacl
    -m u:<user>:rwx``; no setfacl here: the extended attribute the kernel reads). ``mask``
    bounds what named entries get; the mode's group bits then show it."""
    folder = path.is_dir()
    own, others = (0o7, 0o5) if folder else (0o6, 0o4)
    entries = [(0x01, own, 0xFFFFFFFF), (0x04, others, 0xFFFFFFFF), (0x10, mask, 0xFFFFFFFF), (0x20, others, 0xFFFFFFFF)]
    entries += [(0x02, own, user)] if user is not None else [(0x08, own, group)]
    entries.sort()
    os.setxattr(path, "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


#: argv: a file or folder. As ``nobody``: appends to the file, or makes a file in the folder.
WRITE_AS_NOBODY = DROP + """
import os, sys
drop(65534, 65534, [])
target = sys.argv[1]
if os.path.isdir(target):
    open(os.path.join(target, "planted"), "w").close()
else:
    with open(target, "a"):
        pass
print("written")
"""


@pytest.mark.parametrize("what", ["program.py", "entry.json", "entry folder", "shard folder", "store root", "group"])
def test_what_an_acl_lets_someone_untrusted_write_is_refused(public: pathlib.Path, what: str) -> None:
    """A POSIX ACL lets a named user or group write what the owner and mode alone say only
    trusted users can: the mode shows its mask as the group bits (``-rw-rw-r--+``, group the
    owner's private one, which is accepted), and a reviewer's ``nobody`` rewrote a payload
    and its record so that a reader ran its code. The ACL is read when the mask lets named
    entries write: a user or group it names must be trusted."""
    store = gtcache.open_store(public / "store")
    key = publish(store).key
    entry = store.root / "entries" / key[:2] / key
    target = {"program.py": entry / "program.py", "entry.json": entry / "entry.json", "entry folder": entry,
              "shard folder": entry.parent, "store root": store.root, "group": entry / "program.py"}[what]
    who = {"group": NOGROUP} if what == "group" else {"user": NOBODY}

    def lookup(trust: TrustPolicy | None = None) -> object:
        return gtcache.open_store(store.root, trust=trust or TrustPolicy.from_env()).lookup(key)

    _grant_write(target, **who, mask=0o5 if target.is_dir() else 0o4)  # named, but the mask lets nobody write
    assert lookup() is not None
    _grant_write(target, **who)
    if what != "group":
        assert child(WRITE_AS_NOBODY, target) == "written", "the ACL lets nobody write it"
    refusal = "writable by group 'nogroup'" if what == "group" else "writable by user 'nobody'"
    error = gtcache.UntrustedStoreError if what == "store root" else gtcache.CorruptEntryError
    with pytest.raises(error, match=f"{refusal} through its access ACL") as caught:
        lookup()
    if what in ("entry.json", "entry folder", "shard folder"):  # the fix, for the store (payload files: none)
        assert f"setfacl -R -b {store.root}" in str(caught.value)
    trusted = TrustPolicy(groups=[NOGROUP]) if what == "group" else TrustPolicy(users=[NOBODY])
    if target.is_dir():
        (target / "planted").unlink(missing_ok=True)
    assert lookup(trusted) is not None, "trusting whom the ACL names, it is used"


def test_a_store_reached_through_a_symlink_is_used_where_it_was_checked(public: pathlib.Path) -> None:
    """A symlink on the way (anyone may own one in a sticky /tmp-like folder) re-pointed after
    the checks sent a reader's lookups into the link owner's tree (a helper's attack): the
    store is resolved once, checked there, and used there."""
    real, other = public / "real", public / "other"
    store = gtcache.open_store(real)
    key = publish(store).key
    shutil.copytree(real, other)
    link = public / "link"
    link.symlink_to(real)
    opened = gtcache.open_store(link)
    assert opened.root == real
    link.unlink()
    link.symlink_to(other)
    shutil.rmtree(other / "entries")  # what the link points at now has no entry
    assert opened.lookup(key) is not None


def _sticky_and_readers_own(public: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A sticky folder everyone may write (as ``/tmp``), and an empty folder of the reader's."""
    sticky, elsewhere = public / "sticky", public / "readers-own"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    elsewhere.mkdir()
    return sticky, elsewhere


def _link_as_nobody(link: pathlib.Path, target: pathlib.Path) -> None:
    """``link`` made a symlink to ``target`` by another user (uid 65534), in a process of its own."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOGROUP)
            os.setuid(NOBODY)
            os.symlink(target, link)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert link.is_symlink()


def test_a_store_path_made_a_symlink_after_it_was_resolved_is_not_created_through(
    public: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that does not exist yet, in a sticky folder: another user makes its path a
    symlink to a folder of the reader's just after ``open_store`` resolved it (a helper's
    race, forced here: the plant runs right after the resolution). The store was made
    wherever the link pointed (``mkdir -p`` follows links); now it is refused, and nothing is
    made there."""
    sticky, elsewhere = _sticky_and_readers_own(public)
    path = sticky / "store" / "sub"
    resolve = gtcache.store._open.resolve_store_path

    def resolved_then_planted(root: Any) -> pathlib.Path:
        real = resolve(root)
        _link_as_nobody(sticky / "store", elsewhere)
        return real

    monkeypatch.setattr(gtcache.store._open, "resolve_store_path", resolved_then_planted)
    with pytest.raises(gtcache.GtcacheError, match="symbolic link"):
        gtcache.open_store(path)
    assert list(elsewhere.iterdir()) == [], "the store was made through the planted link"


@pytest.mark.parametrize("planted", ["a folder above it", "the folder itself"])
def test_an_index_folder_made_a_symlink_after_it_was_resolved_is_not_made_through(
    public: pathlib.Path, planted: str,
) -> None:
    """The same race for an index folder outside the store (``GTCACHE_INDEX_DIR``) that does
    not exist yet: made when first used, it followed a symlink another user planted on its
    path after ``open_store`` resolved it, and the index was kept where the link pointed. Now
    the index is unavailable (a hint: lookups never read it) and nothing is made there."""
    sticky, elsewhere = _sticky_and_readers_own(public)
    index = sticky / "index" / "sub" if planted == "a folder above it" else sticky / "index"
    store = gtcache.open_store(public / "store", index_dir=index)
    publish(store)
    _link_as_nobody(sticky / "index", elsewhere)  # after the resolution
    assert store.check_index() == "unavailable"
    assert list(elsewhere.iterdir()) == [], "the index was made through the planted link"
    scan = store.scan()
    assert scan.index == "unavailable" and len(scan.entries) == 1, "the listing goes on from the folders"


@pytest.fixture
def private_group_user() -> Iterator[str]:
    """A user with a user private group (``useradd --user-group``), removed afterwards with
    what the test adds (``<name>2``, group ``<name>-alias``)."""
    name = "gtcache-upg"

    def clean() -> None:
        for command in (["userdel", f"{name}2"], ["groupdel", f"{name}-alias"], ["userdel", name], ["groupdel", name],
                        ["groupdel", f"{name}-alias"]):  # (once no user has it as primary group)
            subprocess.run(command, capture_output=True, check=False)

    clean()
    subprocess.run(["useradd", "--user-group", "--no-create-home", "-s", "/usr/sbin/nologin", name], check=True)
    try:
        yield name
    finally:
        clean()


@pytest.mark.parametrize("how", ["primary group", "second group entry"])
def test_a_private_group_with_a_hidden_member_is_not_private(
    tmp_path: pathlib.Path, private_group_user: str, how: str
) -> None:
    """Group-writable is fine when the group is the owner's private group; but a user whose
    primary group it is (``useradd -g alice mallory``), or a member of another group entry
    with its gid (``groupadd -o``, an LDAP group after ``files``), is a member the group's
    member list does not show: each wrote a library in such a store in place, and it ran in
    the owner's processes (a helper's attack, then a reviewer's)."""
    import grp
    import pwd

    user = pwd.getpwnam(private_group_user)
    folder = tmp_path / "store"
    folder.mkdir()
    os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o775)  # umask 002, as RHEL gives users with a private group
    assert TrustPolicy.from_ids([user.pw_uid], ()).problem(folder, os.stat(folder)) is None
    other = f"{private_group_user}2"
    if how == "primary group":
        subprocess.run(["useradd", "-g", private_group_user, "--no-create-home", "-s", "/usr/sbin/nologin", other],
                       check=True)
    else:
        alias = f"{private_group_user}-alias"
        subprocess.run(["useradd", "--user-group", "--no-create-home", "-s", "/usr/sbin/nologin", other], check=True)
        subprocess.run(["groupadd", "-o", "-g", str(user.pw_gid), alias], check=True)
        subprocess.run(["usermod", "-a", "-G", alias, other], check=True)
        assert grp.getgrgid(user.pw_gid).gr_name == private_group_user  # what the rule looked at alone
    problem = TrustPolicy.from_ids([user.pw_uid], ()).problem(folder, os.stat(folder))
    assert problem is not None and "writable by group" in problem


def test_an_entry_whose_record_someone_untrusted_replaced_is_neither_listed_sound_nor_exported(
    tmp_path: pathlib.Path,
) -> None:
    """A listing's row may come from the index, older than an ``entry.json`` put in its place
    (its time set back): ``ls`` said ok, and ``export`` signed the planted record and the
    file it named, which ran in the importer's processes (a reviewer's attack)."""
    from gtcache import bundle

    store = gtcache.open_store(tmp_path / "store")
    key = publish(store).key
    assert [e.ok for e in store.scan().entries] == [True]  # the row is in the index now
    record = store.root / "entries" / key[:2] / key / "entry.json"
    st = record.stat()
    os.chown(record, OTHER, OTHER)
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns))
    (info,) = gtcache.open_store(store.root).scan().entries
    assert not info.ok and "belongs to user" in str(info.problem)
    report = bundle.export_bundle(store, [info.__class__.make(key=key, path=info.path, raw=info.raw, problem=None)],
                                  tmp_path / "out.tar.gz")
    assert report.entries == 0 and "belongs to user" in report.left_out[key]


# -- the folders lookups refuse, found over a whole store (doctor, verify) ---------------------------


def group_writable(path: pathlib.Path) -> None:
    """What a store made under umask 002 has: a folder its (untrusted) group may write."""
    os.chown(path, 0, NOGROUP, follow_symlinks=False)
    os.chmod(path, 0o775)


def test_the_folders_a_store_scan_refuses_are_the_folders_lookups_refuse(
    tmp_path: pathlib.Path, private_group_user: str
) -> None:
    """``Store.refused_folders`` (the whole-store scan ``verify`` and ``doctor`` use) runs the checks
    lookups make: the entries it finds refused are exactly those whose lookup fails for a folder,
    with the same reason, under either trust; and it lists nothing through a symlink (a shard
    pointing out of the store is refused, not listed)."""
    import pwd

    store = gtcache.open_store(tmp_path / "store")
    keys = sorted(publish(store, f"p{i}").key for i in range(40))
    by_shard: dict[str, list[str]] = {}
    for key in keys:
        by_shard.setdefault(key[:2], []).append(key)
    shared_shard = next(shard for shard, members in by_shard.items() if len(members) > 1)
    single = [members[0] for shard, members in by_shard.items() if shard != shared_shard and len(members) == 1]
    own_mode, foreign_owner, in_linked_shard = single[:3]
    group_writable(store.root / "entries" / shared_shard)  # every entry in it refused
    group_writable(store.entry_path(own_mode))  # an entry folder alone
    os.chown(store.entry_path(foreign_owner), pwd.getpwnam(private_group_user).pw_uid, 0)  # another user's
    store.link_direct("ab" * 16, keys[0])
    group_writable(store.root / "direct" / "ab")
    # A shard that is a symlink to a folder outside the store, holding a refused entry folder.
    outside = tmp_path / "outside"
    shutil.move(store.root / "entries" / in_linked_shard[:2], outside)
    (store.root / "entries" / in_linked_shard[:2]).symlink_to(outside)
    group_writable(outside / in_linked_shard)
    # Entry folders without a record (a publish's leftovers): lookups find no entry there.
    recordless = [shared_shard + "f" * 30, own_mode[:2] + "e" * 30]
    for key in recordless:
        (store.root / "entries" / key[:2] / key).mkdir()
    group_writable(store.root / "entries" / own_mode[:2] / recordless[1])

    reader = gtcache.open_store(store.root, trust=TrustPolicy.from_ids((), ()))
    found = list(reader.refused_folders())
    entries = store.root / "entries"
    assert {(f.path, f.what, f.refused) for f in found} == {
        (entries / shared_shard, "shard", len(by_shard[shared_shard])),
        (store.entry_path(own_mode), "entry", 1),
        (store.entry_path(foreign_owner), "entry", 1),
        (entries / in_linked_shard[:2], "shard", None),  # refused; nothing listed through it
        (store.root / "direct" / "ab", "direct", 1),
    }
    assert not any(str(f.path).startswith(str(outside)) for f in found)
    # The same entries and reasons as lookups (a fresh store: no check remembered).
    lookups = gtcache.open_store(store.root, trust=TrustPolicy.from_ids((), ()))
    refused_by_lookup = {}
    for key in keys:
        try:
            lookups.lookup(key)
        except gtcache.CorruptEntryError as error:
            refused_by_lookup[key] = error.reason
    reasons = {f.path: f.problem for f in found}
    expected = {
        key: reasons.get(store.entry_path(key)) or reasons[store.entry_path(key).parent]
        for key in [*by_shard[shared_shard], own_mode, foreign_owner, in_linked_shard]
    }
    assert refused_by_lookup == expected
    assert [lookups.lookup(key) for key in recordless] == [None, None]
    assert f"run 'chmod -R go-w {store.root}'" in reasons[entries / shared_shard]
    assert f"GTCACHE_TRUSTED_USERS={private_group_user}" in reasons[store.entry_path(foreign_owner)]
    assert reader.build_key_of("ab" * 16) is None, "the refused direct-link folder's link is not followed"
    # Trusting that group and that user: nothing refused, by the scan or by lookups (but the symlink).
    trusting = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "nogroup", "GTCACHE_TRUSTED_USERS": private_group_user})
    trusted = gtcache.open_store(store.root, trust=trusting)
    assert [(f.path, f.what) for f in trusted.refused_folders()] == [(entries / in_linked_shard[:2], "shard")]
    for key in keys:
        if key != in_linked_shard:
            assert trusted.lookup(key) is not None


#: argv: store. As ``nobody``: verify, the problems' kinds (or the error).
VERIFY_AS_NOBODY = DROP + """
import json, sys
import gtcache
from gtcache.policies import verify
drop(65534, 65534, [])
try:
    report = verify(gtcache.open_store(sys.argv[1], read_only=True))
    print(json.dumps(sorted(p.kind for p in report.problems)))
except Exception as error:
    print(type(error).__name__, error)
"""


def test_verify_by_another_user_goes_on_past_a_ledger_it_may_not_list(public: pathlib.Path) -> None:
    """The ledger and locks folders are looked into for what killed processes left; one this
    user may not list (mode 000) is skipped, not an error that stops verify."""
    store = gtcache.open_store(public / "store")
    publish(store)
    store.record_run({"counts": {"hit": 1}})
    os.chmod(store.root / "ledger", 0)
    try:
        assert child(VERIFY_AS_NOBODY, store.root) == "[]"
    finally:
        os.chmod(store.root / "ledger", 0o755)


# -- checks a mutation of the code once left unseen (each test fails with it) ----------------------


def test_the_parents_of_an_index_folder_apart_from_the_store_are_checked(tmp_path: pathlib.Path) -> None:
    """Whoever may rename in a parent of the index folder (0777, not sticky) may swap the index."""
    root, parent = tmp_path / "store", tmp_path / "node-local"
    gtcache.open_store(root).close()
    (parent / "index").mkdir(parents=True)
    os.chmod(parent, 0o777)
    trust = TrustPolicy.from_env({})
    with pytest.raises(gtcache.UntrustedStoreError) as refused:
        gtcache.open_store(root, index_dir=parent / "index", trust=trust)
    assert f"'{parent}' is writable by everyone" in str(refused.value), refused.value
    os.chmod(parent, 0o1777)  # sticky, as /tmp
    gtcache.open_store(root, index_dir=parent / "index", trust=trust).close()


@pytest.mark.parametrize(
    "folder", ["entries", "direct", "tmp", "trash", "quarantine", "ledger", "locks", "index", "facts"])
def test_a_store_folder_others_can_write_is_refused_when_the_store_is_opened(tmp_path: pathlib.Path, folder: str) -> None:
    """Every fixed folder of the store (docs/security.md lists them): whoever may write ``tmp/``
    may swap a staged entry before its publish, ``locks/`` hold every compile, ``ledger/`` and
    ``index/`` feed listings (a mutation audit: the check of each folder but ``entries``,
    ``direct`` and ``facts`` could be dropped unseen)."""
    root = tmp_path / "store"
    gtcache.open_store(root).close()
    (root / folder).mkdir(exist_ok=True)
    os.chmod(root / folder, 0o777)
    with pytest.raises(gtcache.UntrustedStoreError) as refused:
        gtcache.open_store(root, trust=TrustPolicy.from_env({}))
    assert f"'{root / folder}' is writable by everyone" in str(refused.value), refused.value


def test_a_trusted_group_trusts_its_members_only(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_TRUSTED_GROUPS`` trusts the owners that are in the group (by primary group or
    membership), not every user with a name: ``daemon`` (uid 1) is no member of ``nogroup``."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, 1, 1)
    os.chmod(folder, 0o755)
    info = os.stat(folder)
    problem = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "nogroup"}).problem(folder, info)
    assert problem is not None and "belongs to user 'daemon'" in problem, problem
    assert TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "daemon"}).problem(folder, info) is None


def test_a_store_config_reached_through_a_symlink_is_checked_where_it_is(tmp_path: pathlib.Path) -> None:
    """The ``[remote]`` URLs of a store's ``gtcache.toml`` name the servers a run trusts: read
    only when the store passes the checks where it really is, not where a symlink to it is."""
    from gtcache.errors import GtcacheError
    from gtcache.policies.config import remote_urls
    from gtcache.settings import Settings

    shared = tmp_path / "shared"
    shared.mkdir()
    gtcache.open_store(shared / "store").close()
    (shared / "store" / "gtcache.toml").write_text('[remote]\nurls = ["http://127.0.0.1:9/x"]\n')
    (tmp_path / "link").symlink_to(shared / "store")
    assert remote_urls(Settings.from_env(cache_dir=tmp_path / "link", env={}))[0] == ("http://127.0.0.1:9/x",)
    os.chmod(shared, 0o777)  # anyone may now put another store (and its servers) there
    with pytest.raises(GtcacheError, match=f"is not read: .*'{shared}' is writable by everyone"):
        remote_urls(Settings.from_env(cache_dir=tmp_path / "link", env={}))


def test_a_hit_writes_nothing_through_a_store_folder_that_is_a_symlink(tmp_path: pathlib.Path) -> None:
    """``entries/`` replaced by a symlink to a folder outside the store (its checks follow it:
    root's, 0755): lookups may read through it, but nothing is written there, not even a
    hit's usage stamp (every write refuses until ``verify --repair``)."""
    root, outside = tmp_path / "store", tmp_path / "outside"
    store = gtcache.open_store(root)
    key = publish(store).key
    store.close()
    shutil.move(root / "entries", outside)
    (root / "entries").symlink_to(outside)
    before = tree(outside)
    store = gtcache.open_store(root)
    assert store.lookup(key) is not None and store.unsafe_folders() == ((root / "entries", "a symbolic link"),)
    store.touch(key)
    assert tree(outside) == before


def test_a_payload_file_that_is_a_symlink_is_not_loaded(tmp_path: pathlib.Path) -> None:
    """Even where every owner is trusted (``*``): a payload file is read only as a regular file
    in its entry folder, never through a symlink to another file, identical or not."""
    trust = TrustPolicy.from_env({"GTCACHE_TRUSTED_USERS": "*"})
    store = gtcache.open_store(tmp_path / "store", trust=trust)
    entry = publish(store)
    copy = tmp_path / "copy.py"
    shutil.copy(entry.path / "program.py", copy)
    (entry.path / "program.py").unlink()
    (entry.path / "program.py").symlink_to(copy)
    with pytest.raises(gtcache.CorruptEntryError, match="not a regular file"):
        store.lookup(entry.key)


def test_a_store_root_others_can_write_is_refused_even_with_the_sticky_bit(tmp_path: pathlib.Path) -> None:
    """The sticky bit makes a folder others may write safe only above the store (as ``/tmp``):
    in the root itself anyone could make the fixed folders not made yet (``locks/``, ``facts/``)
    or ``gtcache.toml`` (a mutation audit: the root checked as an ancestor went unseen)."""
    root = tmp_path / "store"
    gtcache.open_store(root).close()
    os.chmod(root, 0o1777)
    with pytest.raises(gtcache.UntrustedStoreError) as refused:
        gtcache.open_store(root, trust=TrustPolicy.from_env({}))
    assert f"'{root}' is writable by everyone" in str(refused.value), refused.value


def test_trusting_every_user_serves_a_store_whose_files_all_show_0777(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_TRUSTED_USERS='*'`` is for file systems that show every file as 0777: the check
    is off for entries, direct links, facts and ``gtcache.toml`` too, not only for the store's
    folders (a mutation audit: ``problem`` without its ``anyone`` answer refused every entry
    there, and no test saw it)."""
    from gtcache.policies import Limits

    anyone = TrustPolicy.from_env({"GTCACHE_TRUSTED_USERS": "*"})
    store = gtcache.open_store(tmp_path / "store", trust=anyone)
    entry = publish(store)
    store.link_direct("ab" * 16, entry.key)
    store.write_facts("c" * 32, {"fact": 1})
    (store.root / "gtcache.toml").write_text("[limits]\nmax_files = 7\n")
    for path in (store.root, *store.root.rglob("*")):
        os.chmod(path, 0o777, follow_symlinks=False)
    reader = gtcache.open_store(store.root, trust=anyone)
    found = reader.lookup(entry.key)
    assert found is not None
    reader.verify_payload(found)
    assert reader.build_key_of("ab" * 16) == entry.key
    assert reader.read_facts("c" * 32) == {"fact": 1}
    assert Limits.for_store(store.root, None, anyone) == Limits(max_files=7)
    with pytest.raises(gtcache.UntrustedStoreError):  # the control: without '*', refused
        gtcache.open_store(store.root, trust=TrustPolicy.from_env({}))


def test_trusting_every_group_still_checks_owners_and_world_write(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_TRUSTED_GROUPS='*'``: group-writable is fine whatever the group; another user's
    folder or one everyone may write is not (a mutation audit: the ``*`` went unread)."""
    folder = tmp_path / "ours"
    folder.mkdir()
    os.chown(folder, 0, NOGROUP)
    os.chmod(folder, 0o775)
    any_group = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "*"})
    assert any_group.problem(folder, os.stat(folder)) is None
    assert "writable by group 'nogroup'" in str(TrustPolicy.from_env({}).problem(folder, os.stat(folder)))
    os.chmod(folder, 0o777)
    assert "writable by everyone" in str(any_group.problem(folder, os.stat(folder)))
    os.chown(folder, OTHER, NOGROUP)
    os.chmod(folder, 0o775)
    assert "belongs to user '65533'" in str(any_group.problem(folder, os.stat(folder)))


def test_a_sticky_parent_of_a_user_trusted_through_a_group_is_accepted(tmp_path: pathlib.Path) -> None:
    """A folder above the store that others may write, with the sticky bit, owned by a user
    trusted as a member of a trusted group (not in the fast path's set of trusted users): as
    ``/tmp``, others cannot rename the store away (a mutation audit: that second sticky test
    could be dropped unseen; the store was then refused)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    gtcache.open_store(shared / "store").close()
    os.chown(shared, 1, 1)  # daemon's, a member of group daemon
    os.chmod(shared, 0o1777)
    daemon = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "daemon"})
    gtcache.open_store(shared / "store", trust=daemon).close()
    os.chmod(shared, 0o777)  # without the sticky bit: anyone may rename the store away
    with pytest.raises(gtcache.UntrustedStoreError, match=f"'{shared}' is writable by everyone"):
        gtcache.open_store(shared / "store", trust=daemon)
    assert "writable by everyone" in str(daemon.problem(shared, os.stat(shared)))  # (not an ancestor)


def test_a_shared_store_s_facts_are_read_when_its_group_is_trusted(tmp_path: pathlib.Path) -> None:
    """In the documented group store (2775, ``GTCACHE_TRUSTED_GROUPS``) every facts file is
    group-writable (0664): its ACL is read through the descriptor the facts are read from, and
    they are used; one whose ACL lets an untrusted user write is not (a mutation audit: the ACL read at
    the bare name ``facts``, not found, left every facts file of such a store unread)."""
    root = tmp_path / "team"
    root.mkdir()
    os.chown(root, 0, NOGROUP)
    os.chmod(root, 0o2775)
    trust = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "nogroup"})
    store = gtcache.open_store(root, trust=trust)
    store.write_facts("c" * 32, {"fact": 1})
    facts = root / "facts" / f"{'c' * 32}.json"
    assert stat.S_IMODE(facts.stat().st_mode) == 0o664
    assert gtcache.open_store(root, trust=trust).read_facts("c" * 32) == {"fact": 1}
    _grant_write(facts, user=OTHER)  # (not nobody: a member of nogroup, trusted here)
    assert gtcache.open_store(root, trust=trust).read_facts("c" * 32) is None


_NO_ACL_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/types.h>
/* Reading a POSIX access ACL fails with EIO (an I/O error, a stale NFS handle); nothing else. */
static int acl(const char *name) { return name != NULL && strcmp(name, "system.posix_acl_access") == 0; }
#define WRAP(fn, target_t) \
    ssize_t fn(target_t target, const char *name, void *value, size_t size) { \
        static ssize_t (*real)(target_t, const char *, void *, size_t); \
        if (acl(name)) { errno = EIO; return -1; } \
        if (real == NULL) real = dlsym(RTLD_NEXT, #fn); \
        return real(target, name, value, size); \
    }
WRAP(getxattr, const char *)
WRAP(lgetxattr, const char *)
WRAP(fgetxattr, int)
"""

#: argv: a group store, a private store, the key of an entry of the latter. What each refusal said.
READ_WITHOUT_ACLS = """
import json, sys
import gtcache
from gtcache.store import TrustPolicy
trust = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "nogroup"})
said = {}
try:
    gtcache.open_store(sys.argv[1], create=False, trust=trust).close()
    said["open"] = "used"
except gtcache.GtcacheError as error:
    said["open"] = str(error)
try:
    said["lookup"] = "found" if gtcache.open_store(sys.argv[2], trust=trust).lookup(sys.argv[3]) else "absent"
except gtcache.GtcacheError as error:
    said["lookup"] = str(error)
print(json.dumps(said))
"""


def test_an_acl_that_cannot_be_read_is_not_taken_for_none(tmp_path: pathlib.Path) -> None:
    """What is group-writable by a trusted group may still carry an ACL that lets someone
    untrusted write: when it cannot be read (``getxattr`` fails with EIO in the C library: a
    shim loaded with ``LD_PRELOAD``), the store or entry is refused, naming why, never used as if
    it had none (a mutation audit: that error taken for "no ACL" went unseen)."""
    (tmp_path / "eio.c").write_text(_NO_ACL_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "eio.so"), str(tmp_path / "eio.c"), "-ldl"],
                   check=True)
    team = tmp_path / "team"  # the documented group store: root 2775, group trusted
    team.mkdir()
    os.chown(team, 0, NOGROUP)
    os.chmod(team, 0o2775)
    gtcache.open_store(team, trust=TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "nogroup"})).close()
    store = gtcache.open_store(tmp_path / "mine")  # a private store, one payload file of the group's
    entry = publish(store)
    os.chown(entry.path / "program.py", 0, NOGROUP)
    os.chmod(entry.path / "program.py", 0o664)
    args = [str(team), str(store.root), entry.key]
    assert json.loads(child(READ_WITHOUT_ACLS, *args)) == {"open": "used", "lookup": "found"}, "the control"
    said = json.loads(child(READ_WITHOUT_ACLS, *args, env={"LD_PRELOAD": str(tmp_path / "eio.so")}))
    assert "whomever its ACL names (it cannot be read: Input/output error)" in said["open"], said
    assert "'program.py' is writable by whomever its ACL names" in said["lookup"], said


def test_a_uid_without_a_name_is_no_member_of_a_trusted_group(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_TRUSTED_GROUPS`` trusts the group's members: a uid the system has no user for
    (65533) is in no group this reader can see, so what it owns is refused (a mutation audit:
    such an owner counted as a member went unseen)."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, OTHER, NOGROUP)
    os.chmod(folder, 0o755)
    problem = TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": "nogroup"}).problem(folder, os.stat(folder))
    assert problem is not None and "belongs to user '65533'" in problem, problem


def test_a_listed_member_of_a_trusted_group_is_trusted(tmp_path: pathlib.Path, private_group_user: str) -> None:
    """A user whose supplementary group (listed in the group's members, not its primary group)
    is trusted owns what a reader uses (a mutation audit: only the primary group was ever
    tested; the listed members could be ignored unseen)."""
    import pwd

    alias = f"{private_group_user}-alias"
    subprocess.run(["groupadd", alias], check=True)
    subprocess.run(["usermod", "-a", "-G", alias, private_group_user], check=True)
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, pwd.getpwnam(private_group_user).pw_uid, 0)
    os.chmod(folder, 0o755)
    assert TrustPolicy.from_env({"GTCACHE_TRUSTED_GROUPS": alias}).problem(folder, os.stat(folder)) is None
    assert "belongs to user" in str(TrustPolicy.from_env({}).problem(folder, os.stat(folder)))


@pytest.mark.parametrize("how", ["listed member", "named otherwise", "not the primary group"])
def test_a_group_that_is_not_the_owner_s_private_group_may_not_write(
    tmp_path: pathlib.Path, private_group_user: str, how: str
) -> None:
    """The private-group rule trusts group-write only for the owner's own group: named as the
    owner, their primary group, nobody else in it. A group with another listed member
    (``usermod -a -G alice mallory``), the owner's primary group under another name, or a group
    named as the owner that is not their primary group is not one (a mutation audit: each of the
    three conditions could be dropped unseen)."""
    import grp
    import pwd

    name = private_group_user
    user = pwd.getpwnam(name)
    folder = tmp_path / "store"
    folder.mkdir()
    os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o775)
    policy = TrustPolicy.from_ids([user.pw_uid], ())
    assert policy.problem(folder, os.stat(folder)) is None, "the control: a private group"
    if how == "listed member":
        subprocess.run(["useradd", "--user-group", "--no-create-home", "-s", "/usr/sbin/nologin", f"{name}2"],
                       check=True)
        subprocess.run(["usermod", "-a", "-G", name, f"{name}2"], check=True)
        assert grp.getgrgid(user.pw_gid).gr_mem == [f"{name}2"]
    elif how == "named otherwise":
        subprocess.run(["groupadd", f"{name}-alias"], check=True)
        subprocess.run(["usermod", "-g", f"{name}-alias", name], check=True)  # its only member, by primary group
        os.chown(folder, user.pw_uid, grp.getgrnam(f"{name}-alias").gr_gid)
    else:
        subprocess.run(["usermod", "-g", "nogroup", name], check=True)  # its group keeps its name, no member
    try:
        problem = TrustPolicy.from_ids([user.pw_uid], ()).problem(folder, os.stat(folder))
        assert problem is not None and "writable by group" in problem, problem
    finally:
        subprocess.run(["usermod", "-g", name, name], check=False)


def test_whether_a_group_is_private_is_judged_for_each_owner(tmp_path: pathlib.Path, private_group_user: str) -> None:
    """A group is the private group of one owner: the verdict is remembered by group and owner.
    Remembered by group alone, a first folder of another owner in that group (refused) made the
    owner's own folders refused too (a mutation audit)."""
    import pwd

    user = pwd.getpwnam(private_group_user)
    roots, theirs = tmp_path / "roots", tmp_path / "theirs"
    for folder, owner in ((roots, 0), (theirs, user.pw_uid)):
        folder.mkdir()
        os.chown(folder, owner, user.pw_gid)
        os.chmod(folder, 0o775)
    policy = TrustPolicy.from_ids([user.pw_uid], ())
    assert "writable by group" in str(policy.problem(roots, os.stat(roots)))  # not root's private group
    assert policy.problem(theirs, os.stat(theirs)) is None
