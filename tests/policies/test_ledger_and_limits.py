"""The stats ledger under concurrent writers; the automatic size cap."""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import subprocess
import sys

import pytest

import gtcache
from gtcache.policies import Limits, enforce_limits
from gtcache.settings import Settings


def _write_runs(root: str, runs: int) -> None:
    store = gtcache.open_store(root)
    for _ in range(runs):
        store.record_run({"counts": {"hit": 3, "compiled": 1}, "compile_seconds": 2.0, "compile_seconds_saved": 30.0})


def test_ledger_survives_concurrent_writers(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "s"
    gtcache.open_store(root)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_runs, args=(str(root), 25)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    totals = gtcache.open_store(root).ledger()
    assert (totals.runs, totals.hits, totals.compiled, totals.unreadable) == (100, 300, 100, 0)
    assert totals.compile_seconds_saved == pytest.approx(3000.0)


def test_zero_forgets_runs(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    _write_runs(str(store.root), 2)
    assert store.zero_ledger() == 2 and store.ledger().runs == 0


def test_limits_from_config_file_and_environment(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    (store.root / "gtcache.toml").write_text('[limits]\nmax_size = "2K"\nmax_files = 10\n')
    assert Limits.for_store(store.root) == Limits(max_size=2000, max_files=10)
    assert Limits.for_store(store.root, Settings.from_env(env={})) == Limits(max_size=2000, max_files=10)
    from_env = Settings.from_env(env={"GTCACHE_MAX_SIZE": "1Mi", "GTCACHE_MAX_FILES": "7"})
    assert Limits.for_store(store.root, from_env) == Limits(max_size=2**20, max_files=7)
    (store.root / "gtcache.toml").write_text('[limits]\nmax_size = "lots"\n')
    with pytest.raises(gtcache.GtcacheError, match="Bad store limit"):
        Limits.for_store(store.root)


def test_enforce_limits_prunes_least_recently_used(make_entry) -> None:
    for name, used in (("a", 5), ("b", 1), ("c", 3)):
        make_entry(name, size=1000, used_days=used)
    store = make_entry.store
    assert enforce_limits(store, Limits(max_size=10**6)) is None, "fits: nothing to do"
    plan = enforce_limits(store, Limits(max_size=4000))  # each some 1800 bytes on disk, its record included
    assert plan is not None and [r.entry.program for r in plan.removals] == ["a"]
    assert sorted(e.program for e in store.scan().entries) == ["b", "c"]


def test_a_size_cap_counts_records_and_brings_the_store_under_it(make_entry) -> None:
    """Caps count bytes on disk, records included (``Store.usage``). A plan that counted payload
    bytes alone left a store whose records outweigh its payloads (roundtrip entries: some 600
    bytes of source, 2 KB of record) over its cap for good: ``prune --max-size`` said 'Nothing
    to remove', and the automatic cap, seeing the store over, planned nothing at every publish."""
    for name, used in (("a", 3), ("b", 2), ("c", 1)):
        make_entry(name, size=10, used_days=used)
    store = make_entry.store
    _, on_disk, _ = store.usage()
    cap = on_disk - 100  # the payloads alone (30 bytes) are far under it
    plan = enforce_limits(store, Limits(max_size=cap))
    assert plan is not None and [r.entry.program for r in plan.removals] == ["a"]
    assert store.usage()[1] <= cap and plan.remaining_size == store.usage()[1]
    assert enforce_limits(store, Limits(max_size=cap)) is None, "under the cap: nothing more to do"


def test_a_size_cap_counts_what_no_entry_accounts_for(make_entry) -> None:
    """A file no record lists (a record's temp file a killed process left, until verify --repair)
    is on disk all the same: the caps, checked against ``Store.usage``, count it, and so does
    the plan, which removes entries until the store as measured is under the cap."""
    entries = [make_entry(name, size=10, used_days=used) for name, used in (("a", 3), ("b", 2), ("c", 1))]
    (entries[2].path / ".entry.json.tmp-1-dead").write_bytes(b"\0" * 50_000)
    store = make_entry.store
    _, on_disk, _ = store.usage()
    cap = on_disk - 100
    plan = enforce_limits(store, Limits(max_size=cap))
    assert plan is not None and [r.entry.program for r in plan.removals] == ["a"]
    assert store.usage()[1] <= cap


def _ten_entries(make_entry) -> tuple[gtcache.Store, list[gtcache.Entry], int]:
    """Ten entries, p0 least recently used, and a cap eight of them fit under."""
    entries = [make_entry(f"p{i}", size=1000, created_days=10, used_days=10 - i) for i in range(10)]
    store = make_entry.store
    each = store.usage()[1] // 10
    return store, entries, 8 * each + each // 2


def _programs(store: gtcache.Store) -> list[str]:
    return sorted(e.program for e in store.scan(use_index=False).entries)


def test_a_rank_that_takes_the_cap_lock_after_another_enforced_it_removes_nothing_more(
    make_entry, monkeypatch,
) -> None:
    """The cap was measured before ``locks/limits.lock`` was taken: a rank that published while
    another enforced the cap (a real process, run just before this rank takes the lock) pruned
    the store down once more. It is measured again under the lock."""
    from gtcache.store import Store
    from tests.helpers import run_python

    store, _, cap = _ten_entries(make_entry)
    real_lock = Store.lock

    def lock(self: Store, name: str, method: str = "auto") -> object:
        run_python("import sys, gtcache; from gtcache.policies import Limits, enforce_limits;"
                   " enforce_limits(gtcache.open_store(sys.argv[1]), Limits(max_size=int(sys.argv[2])))",
                   str(store.root), str(cap))
        monkeypatch.setattr(Store, "lock", real_lock)
        return real_lock(self, name, method)

    monkeypatch.setattr(Store, "lock", lock)
    assert enforce_limits(store, Limits(max_size=cap)) is None, "under the cap once the lock is had"
    assert _programs(store) == [f"p{i}" for i in range(2, 10)], "the other rank's two went"


def test_prune_counts_no_entry_removed_before_its_scan(make_entry, monkeypatch) -> None:
    """``prune --max-size`` measured the store before scanning it: entries another prune removed
    in between counted as bytes no entry accounts for, and as many more went."""
    from click.testing import CliRunner

    from gtcache.store import Store
    from gtcache_cli.main import cli
    from tests.helpers import run_python

    store, _, cap = _ten_entries(make_entry)
    real_scan = Store.scan

    def scan(self: Store, **kwargs: bool) -> object:
        monkeypatch.setattr(Store, "scan", real_scan)
        run_python("from gtcache_cli.main import cli; cli()", "--cache-dir", str(store.root), "prune",
                   "--max-size", str(cap), "--yes")  # another prune, to completion
        return real_scan(self, **kwargs)

    monkeypatch.setattr(Store, "scan", scan)
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), "prune", "--max-size", str(cap), "--yes",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.output)["entries"] == 0, result.output
    assert _programs(store) == [f"p{i}" for i in range(2, 10)]


def test_an_entry_the_cap_cannot_remove_is_kept_and_the_next_least_recently_used_go(make_entry) -> None:
    """The least recently used entry in a folder the enforcing process may not write (another
    user's): the cap stopped at it, removed entries in name order, not least recently used
    first, and never brought the store under it. Now the others go in least-recently-used order
    until the store fits, and the one kept is named (a real process without root's rights)."""
    from tests.security.test_cli_errors import NOBODY, _drop_dac_caps

    store, entries, cap = _ten_entries(make_entry)
    cap -= 2 * (store.usage()[1] // 10)  # six fit
    locked = entries[0].path.parent  # p0's shard folder; whatever else is in it is locked too
    held = {e.record.program["name"] for e in entries if e.path.parent == locked}
    os.chown(locked, NOBODY, NOBODY)
    try:
        code = ("import sys, gtcache; from gtcache.policies import Limits, enforce_limits\n"
                "try:\n    enforce_limits(gtcache.open_store(sys.argv[1]), Limits(max_size=int(sys.argv[2])))\n"
                "except gtcache.GtcacheError as error:\n    print(error)\n")
        # That user trusted (else its folder's entries are broken, and a broken entry the cap
        # cannot remove makes no sound one go in its place: test_planted_records.py).
        child = subprocess.run([sys.executable, "-c", code, str(store.root), str(cap)], capture_output=True,
                               text=True, check=True, preexec_fn=_drop_dac_caps,
                               env={**os.environ, "GTCACHE_TRUSTED_USERS": str(NOBODY)})
    finally:
        os.chown(locked, 0, 0)
    assert f"could not remove entry '{entries[0].key}' (Permission denied" in child.stdout, child.stdout + child.stderr
    assert store.usage()[1] <= cap
    order = [e.record.program["name"] for e in entries]  # least recently used first
    kept = _programs(store)
    assert set(held) <= set(kept)
    # What went is the least recently used of what could go; everything more recent stayed.
    gone = [p for p in order if p not in kept]
    assert gone == [p for p in order if p not in held][: len(gone)] and len(kept) <= 6 + len(held), kept


def test_bytes_left_in_an_entry_folder_go_with_the_entry_the_cap_removes(make_entry) -> None:
    """A temp file a killed process left in an entry's folder (until ``verify --repair``)
    counts against the cap, and goes with its folder: the cap counted it as staying when it
    removed that entry, and went on removing (a reviewer's store of three, the first with 5 kB
    left in it, was emptied where removing the first was enough)."""
    store, entries, _ = _ten_entries(make_entry)
    stray = entries[0].path / "stray.o"  # p0: the least recently used, the first the cap removes
    stray.write_bytes(b"x" * 5000)
    usage = store.usage_by_key()
    cap = sum(size for size, _ in usage.values()) - usage[entries[0].key][0]  # without p0, it fits
    enforce_limits(store, Limits(max_size=cap))
    assert _programs(store) == sorted(f"p{i}" for i in range(1, 10))


# -- checks a mutation of the code once left unseen (each test fails with it) ----------------------


def test_a_store_exactly_at_its_caps_loses_nothing(make_entry) -> None:
    """A cap is a most: a store holding exactly ``max_size`` bytes or ``max_files`` files is not
    over it (a mutation audit: ``>=`` for ``>`` removed an entry at every publish of a full store)."""
    store, _, _ = _ten_entries(make_entry)
    _, size, files = store.usage()
    assert enforce_limits(store, Limits(max_size=size, max_files=files)) is None
    assert len(_programs(store)) == 10
    plan = enforce_limits(store, Limits(max_size=size - 1))
    assert plan is not None and [r.entry.program for r in plan.removals] == ["p0"]
    _, _, files = store.usage()
    plan = enforce_limits(store, Limits(max_files=files - 1))
    assert plan is not None and [r.entry.program for r in plan.removals] == ["p1"]


def test_an_entry_used_while_the_cap_removes_is_kept_and_the_next_goes_instead(make_entry, monkeypatch) -> None:
    """The least recently used entry is hit (a model run, a real process) between the cap's
    plan and its removal: it is left, and the next least recently used go in its place until the
    store fits (a mutation audit: planning the left entry again removed nothing more, and the
    store stayed over its cap)."""
    from gtcache.store import Store
    from tests.helpers import run_python

    store, entries, cap = _ten_entries(make_entry)  # eight fit: p0 and p1 would go
    real = Store.scan

    def scan(self: Store, **kwargs: bool) -> object:  # the cap's scan, under its lock
        scanned = real(self, **kwargs)
        monkeypatch.setattr(Store, "scan", real)
        run_python("import sys, gtcache; gtcache.open_store(sys.argv[1]).touch(sys.argv[2])",
                   str(store.root), entries[0].key)
        return scanned

    monkeypatch.setattr(Store, "scan", scan)
    enforce_limits(store, Limits(max_size=cap))
    assert store.usage()[1] <= cap
    assert _programs(store) == sorted(["p0", *(f"p{i}" for i in range(3, 10))])


def test_a_cap_the_environment_sets_leaves_the_other_to_the_file(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_MAX_SIZE`` alone overrides the file's ``max_size`` and leaves its ``max_files``
    in force, and the other way round (a mutation audit: the file skipped when the environment
    set one cap, or winning over it, went unseen: the tests set both or none)."""
    store = gtcache.open_store(tmp_path / "s")
    (store.root / "gtcache.toml").write_text('[limits]\nmax_size = "2K"\nmax_files = 10\n')
    size_only = Settings.from_env(env={"GTCACHE_MAX_SIZE": "1Mi"})
    assert Limits.for_store(store.root, size_only, store.trust) == Limits(max_size=2**20, max_files=10)
    files_only = Settings.from_env(env={"GTCACHE_MAX_FILES": "7"})
    assert Limits.for_store(store.root, files_only, store.trust) == Limits(max_size=2000, max_files=7)


def test_the_cap_never_removes_from_a_store_opened_read_only(make_entry) -> None:
    """A store opened read-only (another user's, one that failed the trust check and is only
    listed) is never pruned by a cap: nothing removed, no error (a mutation audit)."""
    store, _, _ = _ten_entries(make_entry)
    reader = gtcache.open_store(store.root, read_only=True)
    assert enforce_limits(reader, Limits(max_size=0)) is None
    assert len(_programs(store)) == 10
