"""Prune policies alone and combined, on synthetic entries with known ages and sizes; what a
plan does with an entry used or published again before its removal."""

from __future__ import annotations

import datetime
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from gtcache.policies import PrunePolicy, backend_glob, plan_prune, plan_removal
from tests.helpers import draft
from tests.policies.conftest import NOW

DAY = 86400.0


def removed(make_entry, policy: PrunePolicy) -> list[str]:
    plan = plan_prune(make_entry.store.scan(), policy, now=NOW)
    return sorted(r.entry.program for r in plan.removals)


def test_older_than(make_entry) -> None:
    make_entry("young", created_days=1)
    make_entry("old", created_days=10)
    assert removed(make_entry, PrunePolicy(older_than=7 * DAY)) == ["old"]


def test_unused_for(make_entry) -> None:
    make_entry("old_but_used", created_days=30, used_days=1)
    make_entry("idle", created_days=30, used_days=20)
    assert removed(make_entry, PrunePolicy(unused_for=14 * DAY)) == ["idle"]


def test_max_size_removes_least_recently_used_first(make_entry) -> None:
    make_entry("a", size=1000, used_days=5)
    make_entry("b", size=1000, used_days=1)
    make_entry("c", size=1000, used_days=3)
    # On disk each takes 1000 bytes and its record (some 800): 3 of them are over 4000, 2 not.
    plan = plan_prune(make_entry.store.scan(), PrunePolicy(max_size=4000), now=NOW)
    assert [r.entry.program for r in plan.removals] == ["a"]
    assert plan.remaining_entries == 2 and plan.remaining_size <= 4000
    assert "least recently used" in plan.removals[0].reason


def test_max_files_counts_every_file(make_entry) -> None:
    for name, used in (("a", 3), ("b", 2), ("c", 1)):
        make_entry(name, used_days=used)  # 2 files each: payload + entry.json
    assert removed(make_entry, PrunePolicy(max_files=4)) == ["a"]


def test_by_value_keeps_what_saves_most_per_byte(make_entry) -> None:
    make_entry("cheap_recent", size=1000, compile_seconds=1, used_days=0)
    make_entry("dear_old", size=1000, compile_seconds=80, hits=5, used_days=9)
    assert removed(make_entry, PrunePolicy(max_size=3000)) == ["dear_old"]
    assert removed(make_entry, PrunePolicy(max_size=3000, by_value=True)) == ["cheap_recent"]


def test_stale_and_keep_gt4py(make_entry) -> None:
    make_entry("current", toolchain={"gt4py": "1.2.3", "python_abi": "abi-312"})
    make_entry("older_gt4py", toolchain={"gt4py": "1.2.1", "python_abi": "abi-312"})
    make_entry("other_python", toolchain={"gt4py": "1.2.3", "python_abi": "abi-313"})
    here = {"gt4py": "1.2.3", "python_abi": "abi-312", "cxx": "g++"}
    assert removed(make_entry, PrunePolicy(stale=here)) == ["older_gt4py", "other_python"]
    assert removed(make_entry, PrunePolicy(keep_gt4py=frozenset({"1.2.3"}))) == ["older_gt4py"]


def test_broken(make_entry) -> None:
    make_entry("fine")
    bad = make_entry("bad")
    (bad.path / "program.py").write_bytes(b"")
    assert removed(make_entry, PrunePolicy(broken=True)) == ["bad"]


def test_filters_limit_what_may_go(make_entry) -> None:
    make_entry("stencil_a", created_days=10)
    make_entry("stencil_b", created_days=10, backend="run_dace_cpu")
    make_entry("other", created_days=10)
    assert removed(make_entry, PrunePolicy(older_than=DAY, program="stencil_*")) == ["stencil_a", "stencil_b"]
    assert removed(make_entry, PrunePolicy(older_than=DAY, backend="*dace*")) == ["stencil_b"]


def test_caps_remove_only_what_the_filters_let_go(make_entry) -> None:
    """``prune --program 'stencil_*' --max-size 0``: a cap that cannot be met removes every
    stencil and nothing else, and the plan says what stays (the others count against it)."""
    make_entry("stencil_a", size=1000, used_days=1)
    make_entry("stencil_b", size=1000, used_days=2)
    keep = make_entry("keep_me", size=1000, used_days=30)  # least recently used of all
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(max_size=0, program="stencil_*"), now=NOW)
    assert sorted(r.entry.program for r in plan.removals) == ["stencil_a", "stencil_b"]
    assert plan.remaining_entries == 1 and plan.remaining_size == store.disk_size(keep.key) > 0
    plan = plan_prune(store.scan(), PrunePolicy(max_size=0, backend="run_dace*"), now=NOW)
    assert plan.removals == ()


def test_criteria_and_caps_combine(make_entry) -> None:
    make_entry("ancient", size=1000, created_days=100)
    make_entry("a", size=1000, used_days=5)
    make_entry("b", size=1000, used_days=1)
    make_entry("c", size=1000, used_days=3)
    # 'ancient' goes by age; then the cap needs one more: the least recently used.
    assert removed(make_entry, PrunePolicy(older_than=30 * DAY, max_size=4000)) == ["a", "ancient"]


def test_nothing_to_prune(make_entry) -> None:
    make_entry("a")
    plan = plan_prune(make_entry.store.scan(), PrunePolicy(max_size=10**9), now=NOW)
    assert plan.removals == () and plan.freed == 0


def test_execute_frees_what_the_plan_says(make_entry) -> None:
    make_entry("a", size=5000, created_days=10)
    make_entry("b", size=10, created_days=1)
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(older_than=DAY), now=NOW)
    assert plan.execute(store) >= plan.freed
    assert [e.program for e in store.scan().entries] == ["b"]
    assert plan.execute(store) == 0, "executing twice (or two prunes at once) is harmless"


def test_policy_selects_nothing_with_filters_only() -> None:
    assert not PrunePolicy(program="x*").selects_anything
    assert PrunePolicy(broken=True).selects_anything


def test_an_entry_used_or_published_again_after_the_plan_is_left(make_entry) -> None:
    """A plan is a decision on what a scan saw: an entry a model run hit (``touch``) or published
    anew between the plan and its removal is put back and reported left; the others go."""
    idle = make_entry("idle", created_days=30, used_days=20)
    gone = make_entry("gone", created_days=30, used_days=20)
    bad = make_entry("bad")
    (bad.path / "program.py").write_bytes(b"")
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(unused_for=14 * DAY, broken=True), now=NOW)
    assert sorted(r.entry.program for r in plan.removals) == ["bad", "gone", "idle"]
    store.touch(idle.key)  # a hit
    shutil.rmtree(bad.path)  # the broken one removed and built again, sound
    store.publish(draft("bad"), {"program.py": b"x" * 1000})

    outcome = plan.apply(store)
    assert outcome.removed == (gone.key,) and outcome.left == tuple(sorted((idle.key, bad.key)))
    assert outcome.to_json()["left"] == sorted((idle.key, bad.key))
    assert sorted(e.program for e in store.scan().entries) == ["bad", "idle"]
    assert store.lookup(idle.key) is not None and store.lookup(bad.key) is not None, "put back whole"
    assert list((store.root / "trash").iterdir()) == []
    assert plan.execute(store) == 0, "executing again: the two are still left, the third gone"
    assert len(store.scan().entries) == 2


def test_an_entry_published_again_with_the_very_same_record_is_left(make_entry) -> None:
    """An import (or pull) repairs a broken entry with the bundle's record, which carries the
    same creation time, last use and hits as the broken one's: the new folder's entry.json
    has another identity, so a prune planned on the broken one leaves it (a review: it was
    removed, the repair lost)."""
    bad = make_entry("bad")
    store = make_entry.store
    record, payload = bad.record, (bad.path / "program.py").read_bytes()
    (bad.path / "program.py").write_bytes(b"")
    plan = plan_prune(store.scan(), PrunePolicy(broken=True), now=NOW)
    assert [r.entry.program for r in plan.removals] == ["bad"]
    shutil.rmtree(bad.path)
    store.publish_record(record, {"program.py": payload})  # the repair, as import makes it
    outcome = plan.apply(store)
    assert outcome.removed == () and outcome.left == (bad.key,)
    assert store.lookup(bad.key) is not None


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "missing"])
def test_broken_entries_whose_record_is_no_file_are_removed(make_entry, tmp_path: pathlib.Path, kind: str) -> None:
    """The re-check takes entry.json's identity as the scan does (a stat that follows a link):
    an entry.json that is a symlink, a FIFO or a folder is not read, and such a broken entry
    is removed, not left at every prune (a review of the re-check)."""
    bad = make_entry("bad")
    record = bad.path / "entry.json"
    record.unlink()
    if kind == "symlink":
        (tmp_path / "elsewhere.json").write_text("{}")
        record.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "fifo":
        os.mkfifo(record)
    elif kind == "folder":
        record.mkdir()
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(broken=True), now=NOW)
    assert [r.entry.key for r in plan.removals] == [bad.key]
    outcome = plan.apply(store)
    assert outcome.removed == (bad.key,) and outcome.left == () and store.scan().entries == ()


def _swap_during_the_check(monkeypatch, swap) -> None:
    """Run ``swap`` while ``remove`` looks at the folder it moved to trash/ (a writer racing it)."""
    from gtcache.store import Store

    judged = Store._as_judged

    def racing(*args):
        swap()
        return judged(*args)

    monkeypatch.setattr(Store, "_as_judged", staticmethod(racing))


def test_an_entry_left_is_put_back_never_through_a_shard_swapped_for_a_symlink(
    make_entry, monkeypatch, tmp_path: pathlib.Path,
) -> None:
    """The put-back goes through a descriptor of the shard folder taken before the move: a
    shard swapped for a symlink meanwhile (by someone who may write the store) never gets the
    folder outside the store."""
    used = make_entry("used", created_days=30, used_days=20)
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(unused_for=14 * DAY), now=NOW)
    store.touch(used.key)
    outside = tmp_path / "outside"
    outside.mkdir()
    shard = used.path.parent

    def swap() -> None:
        shard.rename(shard.with_name("aside"))
        shard.symlink_to(outside)

    _swap_during_the_check(monkeypatch, swap)
    outcome = plan.apply(store)
    assert outcome.left == (used.key,) and list(outside.iterdir()) == []
    assert (shard.with_name("aside") / used.key / "entry.json").exists(), "back in its own shard folder"


def test_an_entry_that_cannot_be_put_back_stays_in_trash_and_is_named(make_entry, monkeypatch) -> None:
    """Its shard folder removed meanwhile: the entry is neither deleted nor reported left; it
    stays in trash/ and the key is named as not removed."""
    used = make_entry("used", created_days=30, used_days=20)
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(unused_for=14 * DAY), now=NOW)
    store.touch(used.key)
    _swap_during_the_check(monkeypatch, lambda: used.path.parent.rmdir())
    outcome = plan.apply(store)
    assert outcome.removed == () and outcome.left == () and list(outcome.failed) == [used.key]
    assert "could not be put back" in outcome.failed[used.key]
    [kept] = (store.root / "trash").iterdir()
    assert (kept / "entry.json").exists()


def test_rm_removes_what_was_asked_for_even_if_used_since(make_entry) -> None:
    entry = make_entry("a")
    store = make_entry.store
    plan = plan_removal(store.scan(), [entry.key])
    store.touch(entry.key)
    outcome = plan.apply(store)
    assert outcome.removed == (entry.key,) and outcome.left == () and store.scan().entries == ()


def test_prune_leaves_an_entry_hit_while_it_asked_for_confirmation(make_entry, tmp_path: pathlib.Path) -> None:
    """The real command: the plan is shown, a model run hits one entry while the user reads
    it, the user confirms; that entry stays and the summary says so."""
    hit = make_entry("hit", created_days=30, used_days=20)
    make_entry("idle", created_days=30, used_days=20)
    store = make_entry.store
    command = [str(pathlib.Path(sys.executable).with_name("gtcache")), "--cache-dir", str(store.root),
               "prune", "--unused-for", "14d"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "COLUMNS": "200"}) as process:
        assert process.stdout is not None and process.stdin is not None
        shown = b""
        while b"[y/N]" not in shown:
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, shown.decode()
            shown += chunk
        store.touch(hit.key)
        out, _ = process.communicate(b"y\n", timeout=60)
    text = (shown + out).decode()
    assert process.returncode == 0, text
    assert "Removed 1 entry" in text and "1 entry used or published again since the plan, left" in text, text
    assert [e.program for e in store.scan().entries] == ["hit"]


def test_a_backend_glob_means_the_names_as_written_first() -> None:
    """``--backend gtfn_cpu`` (as warm and explain take it) selects run_gtfn_cpu, unless a
    backend is named exactly so: then the glob is kept to the names as written, never both."""
    assert backend_glob("gtfn_cpu", ["run_gtfn_cpu", "run_dace_cpu"]) == "run_gtfn_cpu"
    assert backend_glob("gtfn_cpu", ["run_gtfn_cpu", "gtfn_cpu"]) == "gtfn_cpu"
    assert backend_glob("g*", ["run_gtfn_cpu", "run_dace_cpu"]) == "run_g*"
    assert backend_glob("g*", ["run_gtfn_cpu", "gpu_mine"]) == "g*"
    assert backend_glob("*dace*", ["run_dace_cpu"]) == "*dace*"
    assert backend_glob("run_nothing", []) == "run_nothing" and backend_glob(None, ["x"]) is None


def test_two_prunes_at_once_each_count_only_what_they_removed(make_entry) -> None:
    """Another prune (a real process, to completion) runs between this one's plan and its
    removals: this one reported the same entries removed ('Removed 3 entries, freed 0 B'). It
    counts only what it removed; the others are 'gone' (``gone`` in --json, said in the text)."""
    from tests.helpers import run_python

    entries = [make_entry(f"p{i}", created_days=30, used_days=20) for i in range(3)]
    store = make_entry.store
    plan = plan_prune(store.scan(), PrunePolicy(unused_for=14 * DAY))
    other = run_python("from gtcache_cli.main import cli; cli()", "--cache-dir", str(store.root), "prune",
                       "--unused-for", "14d", "--yes")
    assert "Removed 3 entries" in other
    outcome = plan.apply(store)
    assert (outcome.removed, outcome.freed, outcome.left, dict(outcome.failed)) == ((), 0, (), {})
    assert sorted(outcome.gone) == sorted(e.key for e in entries)
    assert outcome.to_json()["removed"] == 0 and len(outcome.to_json()["gone"]) == 3


def test_a_cap_takes_an_unreadable_last_use_for_the_oldest(make_entry) -> None:
    """``--max-size`` ordered ``last_used`` as text: one that cannot be read ('?', hand-edited)
    sorted after every date, as the newest, and stayed; ``--unused-for`` counts it as oldest,
    and so does the cap now (and a time with another offset by the time it names)."""
    import json as json_

    from gtcache.store._record import record_digest

    store = make_entry.store
    unreadable = make_entry("unreadable", used_days=1)
    offset = make_entry("offset", used_days=2)  # written with another offset: still 2 days ago
    make_entry("recent", used_days=1.5)
    for entry, value in ((unreadable, "yesterday"), (offset, None)):
        record = json_.loads((entry.path / "entry.json").read_text())
        if value is None:
            value = (datetime.datetime.fromisoformat(record["last_used"])
                     .astimezone(datetime.timezone(datetime.timedelta(hours=14))).isoformat())
        record["last_used"] = value
        record["record_xxh3"] = record_digest(record)
        (entry.path / "entry.json").write_text(json_.dumps(record))
    scan = store.scan()
    unused = plan_prune(scan, PrunePolicy(unused_for=3 * DAY), now=NOW)
    assert [r.entry.key for r in unused.removals] == [unreadable.key]
    each = max(e.disk_size for e in scan.entries)
    plan = plan_prune(scan, PrunePolicy(max_size=sum(e.disk_size for e in scan.entries) - each // 2), now=NOW)
    assert [r.entry.key for r in plan.removals] == [unreadable.key]
    plan = plan_prune(scan, PrunePolicy(max_size=each + each // 2), now=NOW)
    assert [r.entry.key for r in plan.removals] == [unreadable.key, offset.key], "least recently used first"


# -- checks a mutation of the code once left unseen (each test fails with it) ----------------------


def test_older_than_counts_from_creation_not_last_use(make_entry) -> None:
    """``--older-than`` is the age since creation, ``--unused-for`` since the last use: an entry
    made long ago and used yesterday goes by age (a mutation audit: every entry of the tests had
    been used when it was made, so either time passed)."""
    make_entry("old_but_used", created_days=10, used_days=1)
    make_entry("young_but_idle", created_days=3, used_days=3)
    assert removed(make_entry, PrunePolicy(older_than=7 * DAY)) == ["old_but_used"]
    assert removed(make_entry, PrunePolicy(unused_for=2 * DAY)) == ["young_but_idle"]


def test_an_entry_published_after_the_scan_counts_against_the_caps(make_entry) -> None:
    """The caps are checked against the store as measured after the scan (``usage``): an entry
    a model run published meanwhile takes room too, and one more scanned entry goes for it (a
    mutation audit: not counting it went unseen; the store stayed over its cap)."""
    from gtcache.store import Store

    for name, used in (("a", 3), ("b", 2), ("c", 1)):
        make_entry(name, size=1000, used_days=used)
    store: Store = make_entry.store
    scan = store.scan()
    each = max(e.disk_size for e in scan.entries)
    cap = 3 * each + each // 2  # the three scanned fit, four do not
    assert plan_prune(scan, PrunePolicy(max_size=cap), usage=store.usage_by_key(), now=NOW).removals == ()
    make_entry("published_since", size=1000, used_days=0)
    plan = plan_prune(scan, PrunePolicy(max_size=cap), usage=store.usage_by_key(), now=NOW)
    assert [r.entry.program for r in plan.removals] == ["a"]
    assert plan.remaining_size <= cap


def test_by_value_removes_broken_entries_first(make_entry) -> None:
    """Under a cap ``--by-value`` too removes broken entries first: what a broken record says
    (its compile time, its hits) is not to be believed, and a planted one claiming the most
    value per byte would make sound entries go before it (a mutation audit: only the
    least-recently-used order was tested so)."""
    make_entry("cheap", size=1000, compile_seconds=1, used_days=0)
    make_entry("dear", size=1000, compile_seconds=80, hits=5, used_days=1)
    bad = make_entry("bad", size=1000, compile_seconds=10**6, hits=10**6, used_days=0)
    (bad.path / "program.py").write_bytes(b"")  # broken
    scan = make_entry.store.scan()
    cap = sum(e.disk_size for e in scan.entries) - 1  # one entry must go, whichever
    plan = plan_prune(scan, PrunePolicy(max_size=cap, by_value=True), now=NOW)
    assert [r.entry.program for r in plan.removals] == ["bad"]


def test_by_value_counts_the_compile_an_entry_saves_before_its_first_hit(make_entry) -> None:
    """An entry never hit yet still saves its compile at its next use: the value per byte is
    compile time x (hits + 1), so of two never-hit entries the quicker compile goes, however
    recently used (a mutation audit: ``hits`` alone made them equal, worthless)."""
    make_entry("slow_compile", size=1000, compile_seconds=100, used_days=5)
    make_entry("quick_compile", size=1000, compile_seconds=1, used_days=1)
    scan = make_entry.store.scan()
    cap = sum(e.disk_size for e in scan.entries) - 1
    plan = plan_prune(scan, PrunePolicy(max_size=cap, by_value=True), now=NOW)
    assert [r.entry.program for r in plan.removals] == ["quick_compile"]
