"""The hook's promises that a mutation audit found untested (each test names the mutation it
catches): a cache problem never breaks the program and is said once, a store removed while the
process runs is no problem at all, self-check mode checks the facts the hook reads.

Every scenario runs the user's plain gt4py script in a fresh process, with real stores.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import gtcache
from tests.helpers import expected, pythonpath, run_project, run_python, statuses, write_project

pytestmark = pytest.mark.slow

#: The user's script under warnings capture, then ``AFTER`` (argv[2]: Python code); prints the
#: report and the gtcache warnings raised while it ran.
CAPTURED = """
import json, runpy, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runpy.run_path(sys.argv[1] + "/run.py", run_name="__main__")
print("WARNINGS " + json.dumps([str(w.message) for w in caught if "gtcache" in str(w.message)]))
exec(sys.argv[2])
"""


def run(project: pathlib.Path, store: pathlib.Path, after: str = "", *, preexec_fn: Any = None,
        **env: str) -> tuple[dict, list[str], str]:
    """The report, every gtcache warning (those at exit too: printed to stderr) and stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", CAPTURED, str(project), textwrap.dedent(after)], capture_output=True, text=True,
        timeout=600, preexec_fn=preexec_fn,
        env={**os.environ, "PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1",
             "GTCACHE_DIR": str(store), **env},
    )
    assert proc.returncode == 0, f"the user's program failed:\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    report = json.loads(next(l for l in lines if l.startswith("REPORT ")).removeprefix("REPORT "))
    warned = json.loads(next(l for l in lines if l.startswith("WARNINGS ")).removeprefix("WARNINGS "))
    warned += [line.partition("GtcacheWarning: ")[2] for line in proc.stderr.splitlines() if "GtcacheWarning: " in line]
    return report, warned, proc.stderr


def test_a_store_removed_while_the_process_runs_is_no_warning_at_exit(tmp_path: pathlib.Path) -> None:
    """``rm -rf`` of the store while a program runs (after its compile): at exit there is no
    store to record the run in, which is no cache problem to warn about, and the store is not
    made again. Catches: ``ProcessRun.write_ledgers`` without its ``root.is_dir()`` check."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    report, warned, stderr = run(project, store, f"import shutil; shutil.rmtree({str(store)!r})")
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("compiled", None)]
    assert warned == [] and "gtcache" not in stderr, stderr
    assert not store.exists(), "nothing made the store again"


def test_a_lock_held_past_the_wait_is_one_warning_and_the_variant_compiles(tmp_path: pathlib.Path) -> None:
    """Another process holds the compile lock of the variant (it compiles it, slowly) for longer
    than ``GTCACHE_WAIT``: this one stops waiting, compiles it too and says so, once (a stall
    that ends silently looks like a hang that went away). Catches: ``_claim`` without the
    'waited ... s for another process' warning."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    [outcome] = run_project(project, store)["outcomes"]
    opened = gtcache.open_store(store)
    subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "rm", outcome["key"], "--yes"],
                   check=True, capture_output=True, env={**os.environ})
    for link in (store / "direct").rglob("*"):
        if link.is_file():
            link.unlink()
    assert opened.lookup(outcome["key"]) is None
    lock = opened.lock(outcome["key"])
    assert lock.acquire(0), "this process holds the variant's compile lock"
    try:
        report, warned, _ = run(project, store, GTCACHE_WAIT="1")
    finally:
        lock.release()
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("compiled", None)]
    assert len(warned) == 1 and "waited 1 s for another process compiling 'shift_scale'" in warned[0], warned
    assert "compiling it here too" in warned[0], warned
    assert opened.lookup(outcome["key"]) is not None, "what it compiled is stored"


def test_self_check_recomputes_the_facts_the_hook_reads(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_SELF_CHECK=1`` computes every stored fact the hook would read, and says when one
    differs: a planted backend fingerprint (the facts file lies) is reported, the computed one
    used, and the right entry served by its direct key. Catches: the hook opening its facts
    without ``verify`` (tests/gt4py/test_facts.py calls ``_facts.use`` itself)."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    [facts] = sorted(path for path in (store / "facts").glob("*.json") if "-" not in path.stem)
    data = json.loads(facts.read_text())
    assert data["backend_config"], "the first run stored the backend's fingerprint"
    data["backend_config"] = {digest: "0" * 16 for digest in data["backend_config"]}
    facts.write_text(json.dumps(data))

    report, warned, _ = run(project, store, GTCACHE_SELF_CHECK="1")
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("hit", "direct")], report
    assert report["counts"]["self_check_ok"] == 1
    assert len(warned) == 1 and "self-check: the stored fingerprint of backend" in warned[0], warned
    assert "'0000000000000000'" in warned[0] and "using the computed value" in warned[0], warned


def test_a_bad_size_cap_is_one_warning_and_the_program_runs(tmp_path: pathlib.Path) -> None:
    """A size cap that does not parse (docs/troubleshooting.md: 'no size cap: Bad store limit'):
    the variant is compiled and stored, and the process says once that no cap applies.
    Catches: ``_limits`` returning no cap without a word."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    report, warned, _ = run(project, store, GTCACHE_MAX_FILES="lots")
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("compiled", None)]
    assert [o["detail"] for o in report["outcomes"]] == [None], "stored"
    assert len(warned) == 1 and "no size cap: Bad store limit" in warned[0], warned
    # What happens is said as it is: it said "(compiling without the cache)" of a stored variant.
    assert warned[0].endswith("(entries are stored without one)"), warned


def test_a_missing_read_only_tier_is_skipped_and_said_so(tmp_path: pathlib.Path) -> None:
    """A GTCACHE_READONLY_DIRS path that is no store (docs/troubleshooting.md: 'read-only store
    '…' not used'): one warning saying it is skipped, and GTCACHE_DIR serves and stores as ever.
    The warning said "(compiling without the cache)" of a variant the store then kept."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    report, warned, _ = run(project, store, GTCACHE_READONLY_DIRS=str(tmp_path / "nothing-here"))
    assert statuses(report) == [("compiled", None)] and [o["detail"] for o in report["outcomes"]] == [None]
    assert len(warned) == 1 and f"read-only store '{tmp_path / 'nothing-here'}' not used" in warned[0], warned
    assert warned[0].endswith("(it is skipped)"), warned


def test_a_shard_folder_made_a_symlink_is_one_warning_and_nothing_written_through_it(tmp_path: pathlib.Path) -> None:
    """The shard folder a new entry goes to (``entries/<xx>``) is a symbolic link: the publish
    refuses it (a ``GtcacheError``, not an ``OSError``), the program runs, says once that its
    variant was not stored and how to mend the store, and nothing is written through the link.
    Catches: ``_publish_result`` catching ``OSError`` only (the error then escaped into gt4py's
    future callback: no warning, no outcome, no ledger record)."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    project = write_project(tmp_path / "p")
    [outcome] = run_project(project, store)["outcomes"]
    key = outcome["key"]
    subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "rm", key, "--yes"],
                   check=True, capture_output=True)
    shard = store / "entries" / key[:2]
    shutil.rmtree(shard)
    elsewhere.mkdir()
    shard.symlink_to(elsewhere)
    for link in (store / "direct").rglob("*"):
        if link.is_file():
            link.unlink()

    report, warned, _ = run(project, store)
    assert report["out"] == expected(2.0, 1.0), report
    assert [(o["status"], (o["detail"] or "")[:11]) for o in report["outcomes"]] == [("compiled", "not stored:")], report
    assert len(warned) == 1 and f"'{shard}' is not a folder" in warned[0] and "verify --repair" in warned[0], warned
    assert list(elsewhere.iterdir()) == [], "nothing written through the link"



def test_an_unforeseen_error_in_a_lookup_is_one_warning_and_gt4py_compiles(tmp_path: pathlib.Path) -> None:
    """The hook's last net (``hook._patch``: 'never break the user's program over the cache'):
    an error no part of the hook expects (here a direct-link lookup that raises, injected in the
    child: no store state is known to make one) is a warning, 'lookup failed', and gt4py
    compiles as it would have, unhooked. Catches: that net removed or narrowed
    (``make_compilation_task``'s ``except Exception``)."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    code = f"""
    import json, runpy, warnings
    from gtcache.store._store import Store

    def broken(self, direct_key):
        raise RuntimeError("an unforeseen bug")

    Store.build_key_of = broken
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    print("WARNINGS " + json.dumps([str(w.message) for w in caught if "gtcache" in str(w.message)]))
    """
    out = run_python(code, env={"PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(store)})
    report = json.loads(next(l for l in out.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["out"] == expected(2.0, 1.0), report
    assert report["outcomes"] == [] and report["worker_pool"], "gt4py's own compile, as without gtcache"
    [warning] = json.loads(out.split("WARNINGS ")[1].splitlines()[0])
    assert "lookup failed: RuntimeError('an unforeseen bug')" in warning and "compiling without the cache" in warning


def test_a_compile_lock_that_cannot_be_taken_is_one_warning_and_the_variant_is_stored(tmp_path: pathlib.Path) -> None:
    """The variant's lock path cannot be locked at all (a folder stands there): the process
    compiles without waiting for others, says so once, and still stores what it compiled.
    Catches: ``_claim`` not catching the lock's ``OSError`` (then 'lookup failed': gt4py
    compiled unhooked, nothing stored)."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    [outcome] = run_project(project, store)["outcomes"]
    key = outcome["key"]
    subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "rm", key, "--yes"],
                   check=True, capture_output=True)
    for link in (store / "direct").rglob("*"):
        if link.is_file():
            link.unlink()
    (store / "locks" / f"{key}.lock").mkdir(parents=True)

    report, warned, _ = run(project, store, GTCACHE_LOCKING="flock")
    assert report["out"] == expected(2.0, 1.0)
    assert [(o["status"], o["key"], o["detail"]) for o in report["outcomes"]] == [("compiled", key, None)], report
    assert len(warned) == 1 and f"cannot lock '{store}'" in warned[0], warned
    assert "compiling without waiting for others" in warned[0], warned
    assert gtcache.open_store(store).lookup(key) is not None, "stored"


def test_self_check_recomputes_a_stored_definition_fingerprint(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_SELF_CHECK=1`` computes the definition fingerprints the facts' shards hold too:
    a planted one is reported, the computed one used, and the entry served by its direct key.
    Catches: ``Facts.definition`` answering from the shard while verifying (then the planted
    fingerprint made another direct key: a build-key hit, and no word of the lie)."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    planted = 0
    for shard in (store / "facts").glob("*-??.json"):
        data = json.loads(shard.read_text())
        planted += len(data["definitions"])
        data["definitions"] = {key: "f" * 16 for key in data["definitions"]}
        shard.write_text(json.dumps(data))
    assert planted, "the first run stored the definition's fingerprint"

    report, warned, _ = run(project, store, GTCACHE_SELF_CHECK="1")
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("hit", "direct")], report
    assert len(warned) == 1 and "self-check: the stored fingerprint of a definition is 'ffffffffffffffff'" in warned[0], warned


def test_a_facts_folder_that_cannot_be_written_still_hits(tmp_path: pathlib.Path) -> None:
    """The facts are hints: a process that cannot write them (``facts/`` another user's, read-only
    to this one) recomputes them, and its hit is a hit, without a word. Catches: ``Facts.flush``
    letting the write's error through (then 'lookup failed': gt4py compiled the variant again)."""
    from tests.security.test_cli_errors import _drop_dac_caps

    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    facts = store / "facts"
    for file in facts.iterdir():
        file.unlink()  # a new environment's first process: it has facts to write
    facts.chmod(0o555)
    try:
        report, warned, stderr = run(project, store, preexec_fn=_drop_dac_caps)
    finally:
        facts.chmod(0o755)
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("hit", "direct")], report
    assert warned == [] and "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert list(facts.iterdir()) == []


def _removed(store: pathlib.Path, key: str) -> None:
    """Entry ``key`` removed (``gtcache rm``) and every direct link with it: the next run misses."""
    subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "rm", key, "--yes"],
                   check=True, capture_output=True)
    for link in (store / "direct").rglob("*"):
        if link.is_file():
            link.unlink()


def test_a_direct_link_that_cannot_be_written_is_one_warning_and_the_entry_is_stored(tmp_path: pathlib.Path) -> None:
    """The variant's direct link cannot be written (its shard ``direct/<xx>`` is a file, where a
    folder should be): the compiled variant is still published and counted as stored, the process
    says once that it cannot write to the store, and the next process is served the entry by its
    build key (the link failing again: said again, once). Catches: ``_link`` letting the store's
    refusal through (after a compile, 'cannot publish to ...' and an outcome 'not stored' for an
    entry that is stored; on a build-key hit, 'lookup failed' and gt4py compiled the variant again)."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    [outcome] = run_project(project, store)["outcomes"]
    key = outcome["key"]
    [link] = [path for path in (store / "direct").rglob("*") if path.is_file()]
    _removed(store, key)
    shutil.rmtree(link.parent)
    link.parent.write_text("a file where the shard folder should be")

    report, warned, _ = run(project, store)
    assert report["out"] == expected(2.0, 1.0), report
    assert [(o["status"], o["key"], o["detail"]) for o in report["outcomes"]] == [("compiled", key, None)], report
    assert len(warned) == 1 and f"cannot write to '{store}'" in warned[0], warned
    assert f"'{link.parent}' is not a folder" in warned[0] and "compiling without the cache" in warned[0], warned
    assert gtcache.open_store(store).lookup(key) is not None, "stored, its link aside"

    report, warned, _ = run(project, store)
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("hit", "build")], report
    assert len(warned) == 1 and f"cannot write to '{store}'" in warned[0], warned
    assert link.parent.read_text() == "a file where the shard folder should be"


def test_a_tier_hit_that_cannot_be_promoted_is_served_with_one_warning(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_PROMOTE=1`` and a hit in a read-only tier that cannot be copied into the own store
    (its staging folder ``tmp`` is a file, where a folder should be): the tier's entry is served in
    place all the same, the process says once that it cannot copy it (and uses it in place), links
    nothing to it in the own store, does not write the tier, and the own store's entries stay.
    Catches: ``_promote`` letting the copy's error through (then 'lookup failed' and gt4py compiled
    the variant the tier holds) or failing without a word; and the direct link written after a
    failed copy (a link to an entry the own store does not have; here a second warning)."""
    from tests.gt4py.test_hook import snapshot

    shared, local = tmp_path / "shared", tmp_path / "local"
    project = write_project(tmp_path / "p")
    [outcome] = run_project(project, shared)["outcomes"]
    key = outcome["key"]
    shutil.rmtree(shared / "index", ignore_errors=True)
    before = snapshot(shared)
    [own] = run_project(write_project(tmp_path / "q", offset="6.0"), local)["outcomes"]  # the own store's entry
    (local / "tmp").rmdir()
    (local / "tmp").write_text("a file where the staging folder should be")

    report, warned, _ = run(project, local, GTCACHE_READONLY_DIRS=str(shared), GTCACHE_PROMOTE="1")
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("hit", "direct")], report
    assert len(warned) == 1 and f"cannot copy entry '{key}' from '{shared}'" in warned[0], warned
    assert "is not a folder" in warned[0] and "(using it in place)" in warned[0], warned
    assert snapshot(shared) == before, "the tier is not written"
    opened = gtcache.open_store(local)
    assert opened.lookup(key) is None and opened.lookup(own["key"]) is not None, "not copied; the own entry kept"


#: A backend gt4py can build with but no one can key: its executor's transforms are a local
#: function, which gt4py's fingerprinting refuses by name (not importable under it).
UNKEYABLE_BACKEND = '''
import dataclasses

import gt4py.next as gtx
from gt4py.next.iterator.transforms import pass_manager


def _local_transforms():
    def transforms(program, **kwargs):
        return pass_manager.apply_common_transforms(program, extract_temporaries=False, **kwargs)
    return transforms


BACKEND = dataclasses.replace(
    gtx.itir_python, executor=dataclasses.replace(gtx.itir_python.executor, transforms=_local_transforms())
)
'''


def test_key_ingredients_that_cannot_be_computed_are_one_warning_and_gt4py_compiles(tmp_path: pathlib.Path) -> None:
    """A backend whose configuration cannot be fingerprinted (a local function in its executor):
    no key can be made. The program runs, compiled by gt4py as without gtcache, nothing is stored,
    and the process says so once, 'lookup failed: TypeError(...)' (docs/troubleshooting.md): both
    when the direct key is what fails, and when the definition has no direct key (its file touched
    after the import) and the build key's ingredients (``build_ingredients``, after lowering) are
    what fails; then the variant counts as bypassed, lowered once. Catches: ``make_task`` letting
    ``build_ingredients``' error through (then the net's 'lookup failed', no outcome recorded and
    gt4py lowering the variant a second time), and that path bypassing without a word."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p", backend="__import__('proj.backends', fromlist=['BACKEND']).BACKEND")
    (project / "proj" / "backends.py").write_text(UNKEYABLE_BACKEND)
    refused = "TypeError(\"Objects which are not importable under their qualified name ('proj.backends._local_transforms"

    report, warned, _ = run(project, store)
    assert report["out"] == expected(2.0, 1.0) and report["outcomes"] == [], report
    assert len(warned) == 1 and warned[0].startswith(f"gtcache: lookup failed: {refused}"), warned
    assert warned[0].endswith("(compiling without the cache)"), warned

    # The definition's file touched after its import: no direct key; the build key's ingredients fail.
    touch = f"import os, proj.prog; os.utime({str(project / 'proj' / 'prog.py')!r})\n"
    code = CAPTURED.replace("with warnings.catch_warnings", touch + "with warnings.catch_warnings", 1)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(project), ""], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    report = json.loads(next(l for l in lines if l.startswith("REPORT ")).removeprefix("REPORT "))
    warned = json.loads(next(l for l in lines if l.startswith("WARNINGS ")).removeprefix("WARNINGS "))
    assert report["out"] == expected(2.0, 1.0), report
    assert [(o["status"], o["key"], o["detail"][:len(refused)]) for o in report["outcomes"]] == [
        ("bypassed", None, refused)], report
    assert len(warned) == 1 and warned[0].startswith(f"gtcache: lookup failed: {refused}"), warned
    assert gtcache.open_store(store).scan().entries == (), "nothing stored"
