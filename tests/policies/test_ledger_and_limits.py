"""The stats ledger under concurrent writers; the automatic size cap."""

from __future__ import annotations

import multiprocessing
import pathlib

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
