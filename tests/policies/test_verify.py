"""verify finds every kind of injected damage; --repair fixes it and loses no sound entry."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time

import pytest

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


# -- folders lookups refuse for their owner or mode (a store made under umask 002) -------------------


def _group_writable(path: pathlib.Path) -> None:
    os.chown(path, 0, 65534)  # nogroup: the reader (root) does not trust it
    os.chmod(path, 0o775)


def test_refused_folders_are_problems_and_repair_sets_them_aside_without_a_chmod(make_entry) -> None:
    """A shard folder lookups refuse refuses every entry published into it again: verify names
    it (refused-folder) besides its entries (broken-entry); --repair quarantines the entries,
    removes the emptied shard folders (a direct-link one with its links) and changes no mode: a
    chmod would trust what an untrusted group member may have written. The next publish makes
    the shard anew, with the store's mode, and it is served."""
    import json
    import stat

    store: gtcache.Store = make_entry.store
    entries = [make_entry(f"e{i}") for i in range(12)]
    shards: dict[str, list[gtcache.Entry]] = {}
    for entry in entries:
        shards.setdefault(entry.key[:2], []).append(entry)
    refused_shard = store.root / "entries" / entries[0].key[:2]
    in_shard = shards[entries[0].key[:2]]
    alone = next(e for e in entries if e.key[:2] != entries[0].key[:2])  # an entry folder of its own
    store.link_direct("d" * 32, alone.key)
    _group_writable(refused_shard)
    _group_writable(alone.path)
    _group_writable(store.root / "direct" / "dd")
    fresh = gtcache.open_store(store.root)

    report = verify(fresh)
    found = sorted((p.kind, p.path) for p in report.problems)
    assert found == sorted([
        ("refused-folder", refused_shard), ("refused-folder", store.root / "direct" / "dd"),
        ("broken-entry", alone.path), *(("broken-entry", e.path) for e in in_shard),
    ])
    for problem in report.problems:
        assert "is writable by group 'nogroup'" in problem.detail and f"chmod -R go-w {store.root}" in problem.detail
    shard_problem = next(p for p in report.problems if p.path == refused_shard)
    assert shard_problem.detail.startswith(f"{len(in_shard)} entr")

    cli = _cli(store.root, "verify", "--json")  # the command, as read-only as verify is
    assert cli.returncode == 1 and {p["kind"] for p in json.loads(cli.stdout)["problems"]} == {
        "refused-folder", "broken-entry"}

    repaired = verify(gtcache.open_store(store.root), repair=True)
    assert repaired.ok, repaired.problems
    assert sorted((p.kind, p.path) for p in repaired.repaired) == found
    assert not refused_shard.exists() and not (store.root / "direct" / "dd").exists()
    quarantined = {p.name.rsplit("-", 2)[0]: p for p in (store.root / "quarantine").iterdir()}
    assert set(quarantined) == {alone.key, *(e.key for e in in_shard)}
    # Nothing was chmod-ed: the entry folder set aside keeps the mode and group it had.
    st = quarantined[alone.key].stat()
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o775, 65534)
    survivors = {e.key for e in entries} - set(quarantined)
    assert {e.key for e in gtcache.open_store(store.root).scan().entries} == survivors

    again = gtcache.open_store(store.root).publish(draft("e0"), {"program.py": b"x" * 1000})
    assert again.key == entries[0].key
    shard_st = refused_shard.stat()
    assert (stat.S_IMODE(shard_st.st_mode), shard_st.st_gid) == (store.modes.folder, 0)
    assert gtcache.open_store(store.root).lookup(again.key) is not None, "served: its new shard is trusted"
    assert verify(gtcache.open_store(store.root)).ok


def test_repairing_a_refused_shard_never_removes_what_is_still_in_it(make_entry) -> None:
    """The shard folder goes only once empty (its entries quarantined first): if one could not be
    moved (a publish landed meanwhile), the shard, the entry and the problem stay."""
    import stat

    from gtcache.policies.verify import Problem, _repair

    store: gtcache.Store = make_entry.store
    entry = make_entry("kept")
    _group_writable(entry.path.parent)
    _repair(store, Problem("refused-folder", entry.path.parent, "as verify found it"))
    assert (entry.path / "entry.json").is_file() and stat.S_IMODE(entry.path.parent.stat().st_mode) == 0o775
    problems = verify(gtcache.open_store(store.root)).problems
    assert ("refused-folder", entry.path.parent) in {(p.kind, p.path) for p in problems}


def test_a_repair_that_cannot_be_done_is_named_and_the_others_are_done(make_entry) -> None:
    """A refused shard whose entries cannot be moved (another user's folder; here an immutable
    one, which root cannot change either) stops nothing: the other problems are repaired, the
    index rebuilt, and the one left is named, in the notes and as a problem still there."""
    import subprocess

    store: gtcache.Store = make_entry.store
    stuck = make_entry("stuck")
    extra = make_entry("sound").path / "extra.bin"
    extra.write_bytes(b"not listed in the record")
    _group_writable(stuck.path.parent)
    subprocess.run(["chattr", "+i", str(stuck.path.parent)], check=True)
    try:
        report = verify(gtcache.open_store(store.root), repair=True)
    finally:
        subprocess.run(["chattr", "-i", str(stuck.path.parent)], check=True)
    assert not extra.exists(), "the other problems are repaired"
    assert ("extra-file", extra) in {(p.kind, p.path) for p in report.repaired}
    assert {(p.kind, p.path) for p in report.problems} == {
        ("refused-folder", stuck.path.parent), ("broken-entry", stuck.path)}
    assert not {(p.kind, p.path) for p in report.repaired} & {(p.kind, p.path) for p in report.problems}
    assert any(note.startswith(f"could not repair {stuck.path}") for note in report.notes), report.notes


_EIO_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
static int failures;  /* the first GTCACHE_TEST_EIO_TIMES (all: unset) lstat calls of the path */
static int failing(const char *path) {
    const char *named = getenv("GTCACHE_TEST_EIO_PATH"), *times = getenv("GTCACHE_TEST_EIO_TIMES");
    return named != NULL && path != NULL && strcmp(path, named) == 0 && (times == NULL || failures++ < atoi(times));
}
#define WRAP(name, params, args, path) \
    int name params { \
        static int (*real) params; \
        if (failing(path)) { errno = EIO; return -1; } \
        if (real == NULL) real = dlsym(RTLD_NEXT, #name); \
        return real args; \
    }
WRAP(lstat, (const char *p, struct stat *s), (p, s), p)
WRAP(lstat64, (const char *p, struct stat64 *s), (p, s), p)
WRAP(fstatat, (int d, const char *p, struct stat *s, int f), (d, p, s, f), p)
WRAP(fstatat64, (int d, const char *p, struct stat64 *s, int f), (d, p, s, f), p)
"""


@pytest.mark.parametrize("times", [None, "1"], ids=["lasting", "transient"])
def test_a_folder_that_could_not_be_checked_is_named_and_never_removed(
        make_entry, tmp_path: pathlib.Path, times: str | None) -> None:
    """A folder whose status cannot be read (an I/O error, a stale NFS handle: maybe gone by
    the next run) is a problem verify names, and one --repair leaves: not even a direct-link
    shard, whose links are hints, is removed on that. The error comes from the C library:
    ``lstat`` of that path fails with EIO in the ``gtcache`` command (a shim loaded with
    ``LD_PRELOAD``), each time, or the first time only (then it is not said to be repaired)."""
    import subprocess
    import sys

    store: gtcache.Store = make_entry.store
    entry = make_entry("linked")
    store.link_direct("d" * 32, entry.key)
    shard = store.root / "direct" / "dd"
    (tmp_path / "eio.c").write_text(_EIO_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "eio.so"), str(tmp_path / "eio.c"), "-ldl"],
                   check=True)
    env = {**os.environ, "LD_PRELOAD": str(tmp_path / "eio.so"), "GTCACHE_TEST_EIO_PATH": str(shard),
           **({"GTCACHE_TEST_EIO_TIMES": times} if times else {})}
    gtcache_bin = str(pathlib.Path(sys.executable).parent / "gtcache")
    cli = subprocess.run([gtcache_bin, "--cache-dir", str(store.root), "verify", "--repair"],
                         capture_output=True, text=True, timeout=60, env=env)
    said = cli.stdout + cli.stderr
    assert f"cannot check folder '{shard}' (Input/output error)" in said, said
    assert "repaired refused-folder" not in said, said
    if times is None:
        assert cli.returncode == 1, said
    else:
        assert cli.returncode == 0 and f"left {shard} as it was: 1 direct link" in said and "but it checks out now." in said, said
    assert (shard / ("d" * 32)).is_file(), "the shard and its link are left"
    assert gtcache.open_store(store.root).build_key_of("d" * 32) == entry.key
    assert verify(gtcache.open_store(store.root)).ok, "without the error, nothing is wrong"


def test_an_entry_published_anew_since_the_check_is_left_and_so_is_its_link(make_entry) -> None:
    """In a large store, minutes pass between verify finding an entry broken and --repair
    repairing it: a model run may publish it anew, sound, meanwhile (a reviewer's run: the
    sound entry went to quarantine/ and its fresh direct link was removed as dangling). The
    repair checks the entry and the link's entry again, and leaves them."""
    from gtcache.policies.verify import _repair

    store: gtcache.Store = make_entry.store
    entry = make_entry("republished")
    store.link_direct("d" * 32, entry.key)
    (entry.path / "program.py").write_bytes(b"x")  # truncated: broken
    report = verify(gtcache.open_store(store.root))
    link = store.root / "direct" / "dd" / ("d" * 32)
    assert {(p.kind, p.path) for p in report.problems} == {("broken-entry", entry.path), ("dangling-link", link)}
    assert store.publish(draft("republished"), {"program.py": b"x" * 1000}).key == entry.key  # a model run's
    for problem in report.problems:
        assert _repair(store, problem) == "left", problem
    assert not (store.root / "quarantine").exists() or not any((store.root / "quarantine").iterdir())
    assert gtcache.open_store(store.root).build_key_of("d" * 32) == entry.key
    assert verify(gtcache.open_store(store.root)).ok


def test_quarantine_sets_aside_only_the_folder_judged_broken(make_entry) -> None:
    """Between the last check and the move, a publish may put a new folder at the key: that
    one is put back, and the call says nothing was set aside."""
    store: gtcache.Store = make_entry.store
    entry = make_entry("swapped")
    (entry.path / "program.py").write_bytes(b"x")
    judged = os.lstat(entry.path)
    store.publish(draft("swapped"), {"program.py": b"x" * 1000})
    assert store.quarantine(entry.key, judged=judged) is None
    assert gtcache.open_store(store.root).lookup(entry.key) is not None
    assert not (store.root / "quarantine").exists() or not any((store.root / "quarantine").iterdir())
    broken = make_entry("broken")
    (broken.path / "program.py").write_bytes(b"x")
    aside = store.quarantine(broken.key, judged=os.lstat(broken.path))
    assert aside is not None and aside.parent == store.root / "quarantine" and not broken.path.exists()


def test_a_killed_writers_ledger_temp_file_and_flock_probe_are_leftovers(make_entry) -> None:
    """A process killed while writing its ledger entry, or while probing flock, leaves a file
    no command removes (stats --zero leaves temp files: they may be a run being recorded): an
    old one is a leftover, a fresh one is not, and a run file is neither."""
    store: gtcache.Store = make_entry.store
    make_entry("a")
    store.record_run({"counts": {"hit": 1}})
    (store.root / "locks").mkdir(exist_ok=True)
    old_temp = store.root / "ledger" / ".x.json.tmp-123-abc"
    probe = store.root / "locks" / ".flock-probe-dead"
    fresh = store.root / "ledger" / ".y.json.tmp-456-def"
    for path in (old_temp, probe, fresh):
        path.write_text("")
    age(old_temp)
    age(probe)
    report = verify(gtcache.open_store(store.root))
    assert {(p.kind, p.path) for p in report.problems} == {("leftover", old_temp), ("leftover", probe)}
    assert verify(gtcache.open_store(store.root), repair=True).ok
    assert not old_temp.exists() and not probe.exists() and fresh.exists()
    assert len(gtcache.open_store(store.root).ledger_runs()) == 1, "the run file stays"


def test_a_name_in_tmp_with_a_pid_no_kernel_has_is_judged_by_its_age(make_entry) -> None:
    """Whoever may write ``tmp/`` chooses names there: a pid past what the kernel takes made
    ``os.kill`` raise OverflowError and stopped verify ('a bug in gtcache'); such a name says
    nothing of a running process, and an old item with it is a leftover like any."""
    store: gtcache.Store = make_entry.store
    make_entry("a")
    odd = store.scratch_root() / "publish-99999999999999999999-0123456789ab"
    odd.mkdir()
    age(odd)
    report = verify(store, repair=True)
    assert [(p.kind, p.path) for p in report.repaired] == [("leftover", odd)] and not odd.exists()


def test_what_tmp_holds_in_use_is_never_a_leftover(make_entry) -> None:
    """A running ``gtcache warm``'s build folder (``tmp/warm-build-<pid>-...``) whose own time is
    old (its compiles write deep inside it, or nothing for a while) was a leftover, and
    ``verify --repair`` deleted it under the warm. What ``tmp/`` holds is judged by the newest
    time within it, and kept while its name carries the pid of a process running here; a dead
    pid's old folder is a leftover as before (the age rule: a pid says nothing of another host)."""
    import subprocess
    import sys

    store: gtcache.Store = make_entry.store
    make_entry("a")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    tmp = store.scratch_root()
    grace = 10.0  # this process's folder is aged past the grace, not to before this process started
    with store.scratch("warm-build-") as running:  # this process's: running
        (running / "build" / "module").mkdir(parents=True)
        (running / "build" / "module" / "a.o").write_bytes(b"o")
        for path in (running / "build" / "module" / "a.o", running / "build" / "module", running / "build", running):
            age(path, 3 * grace)
        busy = tmp / f"warm-build-{dead_pid}-0123456789ab"  # a dead pid (or another host's), a fresh file deep in it
        (busy / "build" / "module").mkdir(parents=True)
        (busy / "build" / "module" / "b.o").write_bytes(b"o")
        for path in (busy / "build" / "module", busy / "build", busy):
            age(path)
        stale = tmp / f"warm-build-{dead_pid}-ba9876543210"  # a dead pid, everything old: a leftover
        (stale / "build").mkdir(parents=True)
        (stale / "build" / "c.o").write_bytes(b"o")
        for path in (stale / "build" / "c.o", stale / "build", stale):
            age(path)

        report = verify(store, repair=True, grace_seconds=grace)
        assert [(p.kind, p.path) for p in report.repaired] == [("leftover", stale)]
        assert report.ok, report.problems
        assert (running / "build" / "module" / "a.o").exists() and (busy / "build" / "module" / "b.o").exists()
        assert not stale.exists()
        age(busy / "build" / "module" / "b.o")  # once nothing in it is young, the dead pid's goes
        assert [(p.kind, p.path) for p in verify(store, grace_seconds=grace).problems] == [("leftover", busy)]
    assert not running.exists()


def test_a_pid_reused_by_a_later_process_keeps_nothing(make_entry) -> None:
    """A leftover build folder whose name carries a pid that a process started since has taken
    (pids are reused; after a reboot, soon) was kept for a week; that process started after the
    folder was last written, so it did not make it: a leftover like any."""
    import subprocess

    store: gtcache.Store = make_entry.store
    make_entry("a")
    left = store.scratch_root() / "warm-build-PID-0123456789ab"
    with subprocess.Popen(["sleep", "60"]) as later:
        try:
            left = left.with_name(left.name.replace("PID", str(later.pid)))
            (left / "build").mkdir(parents=True)
            (left / "build" / "a.o").write_bytes(b"o")
            for path in (left / "build" / "a.o", left / "build", left):
                age(path)  # two hours ago: before the process started
            report = verify(store, repair=True)
            assert [(p.kind, p.path) for p in report.repaired] == [("leftover", left)] and not left.exists()
            assert later.poll() is None  # (its pid was running all along)
        finally:
            later.kill()


def _rm_in_another_process(store: gtcache.Store, key: str) -> None:
    """``gtcache rm KEY --yes`` in a process of its own: a prune or rm racing this one."""
    from tests.helpers import run_python

    run_python("from gtcache_cli.main import cli; cli()", "--cache-dir", str(store.root), "rm", key, "--yes")
    assert not store.entry_path(key).exists()


def test_an_entry_removed_while_verify_checks_is_neither_broken_nor_repaired(make_entry, monkeypatch) -> None:
    """An entry another process removes after verify listed it was reported broken ("'entry.json'
    is missing", exit 1), and one found broken and removed before its repair was counted
    repaired though nothing was done to it. Removed is gone: not an entry, not broken, not
    repaired (a note says so)."""
    store: gtcache.Store = make_entry.store
    kept, removed = make_entry("kept"), make_entry("removed")
    real_lookup = gtcache.Store.lookup

    def lookup(self: gtcache.Store, key: str) -> object:
        if key == removed.key:
            monkeypatch.setattr(gtcache.Store, "lookup", real_lookup)
            _rm_in_another_process(store, key)
        return real_lookup(self, key)

    monkeypatch.setattr(gtcache.Store, "lookup", lookup)
    report = verify(store)
    assert report.ok and report.entries == 1, report.problems

    broken = make_entry("broken")
    (broken.path / "program.py").write_bytes(b"")
    real_check_index = gtcache.Store.check_index

    def check_index(self: gtcache.Store) -> object:  # after the check, before the repairs
        monkeypatch.setattr(gtcache.Store, "check_index", real_check_index)
        _rm_in_another_process(store, broken.key)
        return real_check_index(self)

    monkeypatch.setattr(gtcache.Store, "check_index", check_index)
    repaired = verify(store, repair=True)
    assert repaired.ok and repaired.repaired == () and repaired.entries == 1, repaired
    assert any("removed by another process" in note and broken.key in note for note in repaired.notes), repaired.notes
    assert not (store.root / "quarantine").exists() or not any((store.root / "quarantine").iterdir())
    assert [e.key for e in store.scan().entries] == [kept.key]


def test_ls_broken_lists_no_entry_removed_while_it_scans(make_entry, monkeypatch) -> None:
    """``ls --broken`` listed an entry removed after the scan listed the folders as broken."""
    from click.testing import CliRunner

    from gtcache.store import _catalog
    from gtcache_cli.main import cli

    store: gtcache.Store = make_entry.store
    kept, removed = make_entry("kept"), make_entry("removed")
    real = _catalog.disk_keys

    def disk_keys(listed: gtcache.Store) -> object:
        found = real(listed)
        monkeypatch.setattr(_catalog, "disk_keys", real)
        _rm_in_another_process(store, removed.key)
        return found

    monkeypatch.setattr(_catalog, "disk_keys", disk_keys)
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), "ls", "--broken", "--json"], catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.output) == [], result.output
    assert [e.key for e in store.scan().entries] == [kept.key]


# -- checks a mutation of the code once left unseen (each test fails with it) ----------------------


def _litter(store: gtcache.Store, entry: gtcache.Entry, where: str) -> pathlib.Path:
    """What a running (or, aged, a killed) process has in the store while it writes."""
    if where == "record temp file":  # a record being rewritten (a hit's usage stamp)
        return entry.path / ".entry.json.tmp-123-0123456789ab"
    if where == "flock probe":
        (store.root / "locks").mkdir(exist_ok=True)
        return store.root / "locks" / ".flock-probe-123-0123456789ab"
    if where == "direct link temp file":  # a direct link being written
        store.link_direct("d" * 32, entry.key)
        return store.root / "direct" / "dd" / ".link.tmp-123-0123456789ab"
    (store.root / "direct").mkdir(exist_ok=True)
    return store.root / "direct" / "stray"  # a file where a shard folder goes


@pytest.mark.parametrize("where", ["record temp file", "flock probe", "direct link temp file", "file in direct"])
def test_fresh_litter_is_no_problem_and_old_litter_a_leftover(make_entry, where: str) -> None:
    """A temp file younger than the grace period may belong to a running write: verify leaves it
    (repairing it would break that write); once old, it is a leftover that --repair removes (a
    mutation audit: each age test could be dropped, or the record temp file taken for an extra
    file, unseen)."""
    store: gtcache.Store = make_entry.store
    entry = make_entry("a")
    litter = _litter(store, entry, where)
    litter.write_text("")
    assert verify(gtcache.open_store(store.root), repair=True).ok
    assert litter.exists(), "a fresh one is left alone"
    age(litter)
    report = verify(gtcache.open_store(store.root))
    assert [(p.kind, p.path) for p in report.problems] == [("leftover", litter)]
    assert verify(gtcache.open_store(store.root), repair=True).ok and not litter.exists()
    assert [e.key for e in store.scan().entries] == [entry.key]


def test_an_entry_folder_under_another_shard_is_an_orphan(make_entry) -> None:
    """An entry folder whose key does not begin with its shard's name is at no place a lookup
    looks: an orphan, removed by --repair; the entry at its own place is untouched (a mutation
    audit: it was neither reported nor counted, and stayed for ever)."""
    store: gtcache.Store = make_entry.store
    entry = make_entry("a")
    other = "ff" if entry.key[:2] != "ff" else "00"
    misplaced = store.root / "entries" / other / entry.key
    shutil.copytree(entry.path, misplaced)
    report = verify(gtcache.open_store(store.root))
    assert [(p.kind, p.path) for p in report.problems] == [("orphan", misplaced)] and report.entries == 1
    assert verify(gtcache.open_store(store.root), repair=True).ok and not misplaced.exists()
    assert gtcache.open_store(store.root).lookup(entry.key) is not None


def test_verify_lists_nothing_through_a_symlinked_entries_folder(make_entry, tmp_path: pathlib.Path) -> None:
    """``entries/`` replaced by a symlink to a folder outside the store: verify reports the link
    (repaired first) and lists nothing through it, neither entries nor orphans of the folder it
    points at (a mutation audit: listing ``entries/`` without the unsafe-folder check went
    unseen, the repair's order hiding it from the symlink attacks' canaries)."""
    store: gtcache.Store = make_entry.store
    make_entry("a")
    outside = tmp_path / "outside"
    shutil.move(store.root / "entries", outside)
    (outside / "zz").mkdir()  # would be an orphan, were it listed
    (store.root / "entries").symlink_to(outside)
    report = verify(gtcache.open_store(store.root))
    assert [(p.kind, p.path) for p in report.problems] == [("symlink", store.root / "entries")]
    assert report.entries == 0


@pytest.mark.parametrize("how", ["tmp/ a symlink", "the store read-only"])
def test_verify_makes_no_clock_probe_through_a_symlinked_tmp_or_in_a_read_only_store(
    make_entry, tmp_path: pathlib.Path, how: str,
) -> None:
    """verify judges left-overs by the file system's clock, read from a probe file it makes in
    ``tmp/``: it made it through a ``tmp/`` that is a symlink (a file created and removed in the
    folder the link names, while verify reports the link as "nothing is written through it"),
    and in a store opened read-only (another user's, which ``verify`` only reads)."""
    store: gtcache.Store = make_entry.store
    make_entry("a")
    if how == "tmp/ a symlink":
        watched = tmp_path / "outside"
        watched.mkdir()
        shutil.rmtree(store.root / "tmp")
        (store.root / "tmp").symlink_to(watched)
        checked = gtcache.open_store(store.root)
    else:
        watched = store.root / "tmp"
        checked = gtcache.Store(store.root, index_dir=None, read_only=True)
    age(watched, 86400)
    before = os.stat(watched).st_mtime_ns
    verify(checked)
    assert os.stat(watched).st_mtime_ns == before, "a probe file was made and removed there"
    assert list(watched.iterdir()) == []


def test_an_entry_folder_that_is_a_symlink_is_an_orphan_and_only_the_link_goes(make_entry, tmp_path: pathlib.Path) -> None:
    """An entry folder replaced by a symlink (to a copy outside the store) is an orphan, as
    docs/cli.md says, not an entry looked up through the link: --repair unlinks it and leaves
    what it points at (a mutation audit: taking it for a broken entry went unseen)."""
    store: gtcache.Store = make_entry.store
    entry = make_entry("a")
    outside = tmp_path / "outside"
    shutil.move(entry.path, outside)
    entry.path.symlink_to(outside)
    report = verify(gtcache.open_store(store.root))
    assert [(p.kind, p.path) for p in report.problems] == [("orphan", entry.path)]
    assert verify(gtcache.open_store(store.root), repair=True).ok
    assert not os.path.lexists(entry.path) and (outside / "entry.json").is_file()
