"""The transparent hook: plain gt4py scripts under GTCACHE_DIR, keys that never go stale.

Every scenario runs a user's project in a fresh interpreter, as a model run
would. The roundtrip backend keeps compiles cheap; what is tested (keys,
lookups, publishing at gt4py's seam) does not depend on the backend, and the
gtfn/dace payloads are covered by test_compiled_store.py and one gtfn run here.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import gtcache
from tests.helpers import (
    ROUNDTRIP_NOT_EMBEDDED,
    expected,
    publish,
    pythonpath,
    run_project,
    run_python,
    statuses,
    write_project,
)

pytestmark = pytest.mark.slow

def test_without_gtcache_dir_nothing_is_loaded(tmp_path: pathlib.Path) -> None:
    project = write_project(tmp_path / "p")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}
    code = "import sys, gt4py.next; print('gtcache' in sys.modules, 'gtcache._autoload' in sys.modules)"
    out = run_python(code, env={**env, "PYTHONPATH": pythonpath(project)})
    assert out.split() == ["False", "False"]


def test_plain_script_compiles_once_then_loads_without_workers(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")

    first = run_project(project, store)
    assert statuses(first) == [("compiled", None)]
    assert first["out"] == expected(2.0, 1.0)

    second = run_project(project, store)
    assert statuses(second) == [("hit", "direct")], "a fresh process loads without lowering"
    assert second["out"] == expected(2.0, 1.0)
    assert second["worker_pool"] is False, "a hit must not start gt4py's worker pool"


@pytest.mark.parametrize(
    "change",
    ["lines above the program", "moved project", "new process"],
)
def test_changes_that_must_hit(tmp_path: pathlib.Path, change: str) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    assert statuses(run_project(project, store)) == [("compiled", None)]
    if change == "lines above the program":
        write_project(project, padding=7)
    elif change == "moved project":
        project = tmp_path / "elsewhere" / "p"
        shutil.move(tmp_path / "p", project)
    report = run_project(project, store)
    assert statuses(report) == [("hit", "direct")]
    assert report["out"] == expected(2.0, 1.0)


@pytest.mark.parametrize(
    ("change", "edit", "factor", "offset"),
    [
        ("program body", {"offset": "3.0"}, 2.0, 3.0),
        ("called operator in another module", {"scale_body": "a * PHYS.FACTOR * 2.0"}, 4.0, 1.0),
        ("constant read from another module", {"factor": "5.0"}, 5.0, 1.0),
        ("backend option", {"backend": ROUNDTRIP_NOT_EMBEDDED}, 2.0, 1.0),
    ],
)
def test_changes_that_must_recompile(
    tmp_path: pathlib.Path, change: str, edit: dict, factor: float, offset: float
) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    assert statuses(run_project(project, store)) == [("compiled", None)]
    write_project(project, **edit)
    report = run_project(project, store)
    assert statuses(report) == [("compiled", None)], change
    assert report["out"] == expected(factor, offset)
    # and the edited variant is now stored too
    assert statuses(run_project(project, store)) == [("hit", "direct")]


def test_constant_in_the_programs_own_module_must_recompile(tmp_path: pathlib.Path) -> None:
    """``OWN = FrozenNamespace(OFFSET=1.0)`` at module level in prog.py, read by the program's
    field operator, then 4.0. (A bare ``OFFSET = 1.0`` gt4py itself refuses in a field
    operator: its frontend folds only namespace constants such as these.)"""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p", offset="OWN.OFFSET", own_constant="1.0")
    first = run_project(project, store)
    assert statuses(first) == [("compiled", None)] and first["out"] == expected(2.0, 1.0)
    write_project(project, offset="OWN.OFFSET", own_constant="4.0")
    report = run_project(project, store)
    assert statuses(report) == [("compiled", None)], "the constant's new value is a new variant"
    assert report["out"] == expected(2.0, 4.0)
    assert statuses(run_project(project, store)) == [("hit", "direct")]
    assert len(gtcache.open_store(store).scan().entries) == 2


#: A plain script with a connectivity: gtcache.examples.edge_diff on a ring whose E2V table
#: has the dtype given in argv (another connectivity type, the same offsets and values).
RING = """
import json, sys
import numpy as np
import gt4py.next as gtx
from gtcache import examples
from gtcache.gt4py import active_hook

def main():
    n = 16
    table = np.stack([np.arange(n), (np.arange(n) + 1) % n], axis=1).astype(sys.argv[1])
    grid = {"E2V": gtx.as_connectivity([examples.Edge, examples.E2VDim], codomain=examples.Vertex, data=table)}
    v = gtx.as_field([examples.Vertex], np.arange(n, dtype=np.float64) ** 2)
    out = gtx.as_field([examples.Edge], np.zeros(n))
    examples.edge_diff.with_backend(examples.backend_by_name("roundtrip"))(v, out, offset_provider=grid)
    assert out.asnumpy().tolist() == (np.roll(v.asnumpy(), -1) - v.asnumpy()).tolist()
    print("REPORT " + json.dumps([(o.status, o.via) for o in active_hook().outcomes]))

if __name__ == "__main__":
    main()
"""


def test_connectivity_of_another_type_must_recompile(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    script = tmp_path / "ring.py"
    script.write_text(RING)

    def ring(dtype: str) -> list[list[str | None]]:
        code = f"import runpy, sys; sys.argv[1:] = [{dtype!r}]; runpy.run_path({str(script)!r}, run_name='__main__')"
        out = run_python(code, env={"GTCACHE_DIR": str(store)})
        return json.loads(next(l for l in out.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))

    assert ring("int32") == [["compiled", None]]
    assert ring("int64") == [["compiled", None]], "an int64 table is another connectivity type"
    assert ring("int64") == [["hit", "direct"]]
    assert ring("int32") == [["hit", "direct"]]


def test_self_check_recomputes_the_build_key(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    report = run_project(project, store, GTCACHE_SELF_CHECK="1")
    assert statuses(report) == [("hit", "direct")]
    assert report["counts"]["self_check_ok"] == 1
    assert "self_check_failed" not in report["counts"]


def test_self_check_refuses_a_direct_link_to_another_programs_entry(tmp_path: pathlib.Path) -> None:
    """A direct link pointing at a sound entry of another program (a bug in how direct keys
    are made, or a hand-edited store): served as it is without the self-check, which the
    self-check exists to catch: it warns, counts a failure and serves the build key's entry,
    the right result (a mutation audit: a self-check that always passed passed the suite)."""
    store = tmp_path / "store"
    p1, p2 = write_project(tmp_path / "p1"), write_project(tmp_path / "p2", factor="3.0")
    run_project(p1, store)
    [link] = [f for f in (store / "direct").rglob("*") if f.is_file()]
    run_project(p2, store)
    other = [f for f in (store / "direct").rglob("*") if f.is_file() and f != link]
    assert len(other) == 1
    link.write_text(other[0].read_text())  # p1's direct key now names p2's build

    poisoned = run_project(p1, store)
    assert statuses(poisoned) == [("hit", "direct")] and poisoned["out"] == expected(3.0, 1.0), "the setup poisons"
    link.write_text(other[0].read_text())  # as it was before that run (a hit does not rewrite it)
    report = run_project(p1, store, GTCACHE_SELF_CHECK="1")
    assert report["counts"]["self_check_failed"] == 1 and "self_check_ok" not in report["counts"]
    assert statuses(report) == [("hit", "build")] and report["out"] == expected(2.0, 1.0)


def test_stale_direct_link_falls_back_to_the_build_key(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    for link in (store / "direct").rglob("*"):
        if link.is_file():
            link.write_text("0" * 32 + "\n")  # points at no entry
    report = run_project(project, store)
    assert statuses(report) == [("hit", "build")]
    assert statuses(run_project(project, store)) == [("hit", "direct")], "the link was repaired"


def test_unusable_store_warns_and_compiles(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    project = write_project(tmp_path / "p")
    code = f"""
    import runpy, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    print("WARNINGS", sum("gtcache" in str(w.message) for w in caught))
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(blocker / "store")},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    report = json.loads(next(l for l in out.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["out"] == expected(2.0, 1.0)
    assert out.split("WARNINGS")[1].strip() == "1"
    assert report["worker_pool"] and "gtcache" not in proc.stderr, "gt4py's workers open no store, warn nothing"


def test_full_disk_while_publishing_keeps_the_program_running(tmp_path: pathlib.Path) -> None:
    """A file-size limit makes every store write fail with EFBIG, like a full disk."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)  # one stored variant that must survive
    before = sorted(p.relative_to(store) for p in (store / "entries").rglob("*"))
    write_project(project, offset="9.0")
    code = f"""
    import resource, runpy, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
    runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    """
    out = run_python(code, env={"PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(store)})
    report = json.loads(next(l for l in out.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["out"] == expected(2.0, 9.0)
    assert [o["detail"].startswith("not stored") for o in report["outcomes"]] == [True]
    assert sorted(p.relative_to(store) for p in (store / "entries").rglob("*")) == before
    assert not any((store / "tmp").iterdir())


def test_gtfn_program_through_the_hook_in_process_mode(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p", backend="gtx.gtfn_cpu")
    first = run_project(project, store)
    assert statuses(first) == [("compiled", None)] and first["out"] == expected(2.0, 1.0)
    second = run_project(project, store)
    assert statuses(second) == [("hit", "direct")] and second["worker_pool"] is False
    assert second["out"] == expected(2.0, 1.0)


def test_runs_are_recorded_in_the_ledger(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    run_project(project, store)
    ledger = gtcache.open_store(store).ledger()
    assert (ledger.runs, ledger.compiled, ledger.hits) == (2, 1, 1)
    assert ledger.compile_seconds > 0 and ledger.compile_seconds_saved > 0
    runs = gtcache.open_store(store).ledger_runs()
    assert runs[-1]["variants"][0]["spec"] == {
        "program": "proj.prog:shift_scale", "backend": "roundtrip", "static_args": {}, "offsets": []
    }, "what 'gtcache warm --from-ledger' needs to compile it again"


def test_a_run_through_the_hook_keeps_no_word_of_its_command_line(tmp_path: pathlib.Path) -> None:
    """A model run started as ``run.py --token=... /home/alice/grant-4711/in.nc``: its run file
    (which every user who may read the store may read) names it ``run.py`` and holds no word of
    its arguments. Catches: the hook's summary keeping ``sys.argv[:4]``."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    env = {**os.environ, "PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store)}
    subprocess.run([sys.executable, str(project / "run.py"), "--token=s3cr3t-t0ken", "/home/alice/grant-4711/in.nc"],
                   env=env, check=True, capture_output=True, timeout=600)
    (run_file,) = (store / "ledger").glob("*.json")
    text = run_file.read_text()
    assert "s3cr3t" not in text and "grant-4711" not in text and str(project) not in text, text
    (run,) = gtcache.open_store(store).ledger_runs()
    assert (run["program"], run["counts"], "argv" in run) == ("run.py", {"compiled": 1}, False)


def test_size_cap_is_enforced_after_publishing(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    first = gtcache.open_store(store).scan().entries
    write_project(project, offset="5.0")
    # room for one entry only: the older one must go when the new one arrives
    report = run_project(project, store, GTCACHE_MAX_FILES="2")
    assert report["out"] == expected(2.0, 5.0)
    entries = gtcache.open_store(store).scan().entries
    assert len(entries) == 1 and entries[0].key != first[0].key


def test_a_cap_that_cannot_remove_an_entry_warns_so_and_the_publish_stands(tmp_path: pathlib.Path) -> None:
    """The least recently used entry in a folder the process may not write (another user's):
    the cap's error was taken for the publish's, 'cannot publish ... (compiling without the
    cache)', although the entry was stored, and the cap went no further. Now the cap goes on
    past it (the next least recently used goes) and says what it could not do, once."""
    from gtcache.store._record import record_digest
    from tests.security.test_cli_errors import NOBODY, _drop_dac_caps

    store = gtcache.open_store(tmp_path / "store")
    locked = publish(store, "locked_old")
    removable = next(e for e in (publish(store, f"other{i}") for i in range(8)) if e.path.parent != locked.path.parent)
    record = json.loads((locked.path / "entry.json").read_text())
    record["last_used"] = "2020-01-01T00:00:00+00:00"  # the least recently used
    record["record_xxh3"] = record_digest(record)
    (locked.path / "entry.json").write_text(json.dumps(record))
    project = write_project(tmp_path / "p")
    code = f"""
    import runpy, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    print("WARNINGS " + json.dumps([str(w.message) for w in caught if "gtcache" in str(w.message)]))
    """
    os.chown(locked.path.parent, NOBODY, NOBODY)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import json\n" + textwrap.dedent(code)], capture_output=True, text=True,
            timeout=600, preexec_fn=_drop_dac_caps,
            env={**os.environ, "PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(store.root),
                 "GTCACHE_MAX_FILES": "2"},
        )
    finally:
        os.chown(locked.path.parent, 0, 0)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["out"] == expected(2.0, 1.0)
    assert [(o["status"], o["detail"]) for o in report["outcomes"]] == [("compiled", None)], "stored: no failed publish"
    [warning] = json.loads(proc.stdout.split("WARNINGS ")[1].splitlines()[0])
    assert "cannot enforce the size cap" in warning and f"could not remove entry '{locked.key}'" in warning, warning
    assert "cannot publish" not in warning and "compiling without the cache" not in warning, warning
    assert store.lookup(locked.key) is not None and store.lookup(removable.key) is None, "the next one went instead"


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_hit_whose_entry_a_prune_removes_before_its_checksums_is_a_quiet_miss(tmp_path: pathlib.Path, when: str) -> None:
    """A prune (a real 'gtcache rm' process) removes the entry between a hit's lookup and its
    checksums: the hit warned 'Entry ... is broken: cannot read ...'; or after its checksums,
    before gt4py loads it: 'did not load'. The folder was renamed away whole (its record gone
    too): a miss, compiled again without a warning."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    assert statuses(run_project(project, store)) == [("compiled", None)]
    code = f"""
    import json, runpy, subprocess, sys, warnings
    from gtcache.store._store import Store
    checked = Store.verify_payload

    def racing(self, entry):
        Store.verify_payload = checked
        if {when!r} == "after":
            checked(self, entry)
        subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", {str(store)!r}, "rm", entry.key, "--yes"],
                       check=True, capture_output=True)
        return checked(self, entry) if {when!r} == "before" else None

    Store.verify_payload = racing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    print("WARNINGS " + json.dumps([str(w.message) for w in caught if "gtcache" in str(w.message)]))
    print("RACED", Store.verify_payload is checked)
    """
    out = run_python(code, env={"PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(store)})
    report = json.loads(next(l for l in out.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    assert "RACED True" in out, "the entry was removed between the lookup and the checksums"
    assert report["out"] == expected(2.0, 1.0) and statuses(report) == [("compiled", None)]
    assert json.loads(out.split("WARNINGS ")[1].splitlines()[0]) == [], "a miss, not a broken entry"


def test_explain_logs_why_a_miss_missed(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    project = write_project(tmp_path / "p")
    run_project(project, store)
    write_project(project, backend=ROUNDTRIP_NOT_EMBEDDED)
    code = f"""
    import logging, runpy, sys
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
    runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    """
    out = run_python(code, env={"PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(store), "GTCACHE_EXPLAIN": "1"})
    line = next(l for l in out.splitlines() if l.startswith("gtcache miss:"))
    assert "'shift_scale' (roundtrip)" in line and "backend_config:" in line
    assert "program_ir" not in line


def snapshot(root: pathlib.Path) -> list[tuple[str, bytes, int]]:
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)
        for p in root.rglob("*")
    )


def test_read_only_tier_is_used_and_never_written(tmp_path: pathlib.Path) -> None:
    shared = tmp_path / "shared"
    project = write_project(tmp_path / "p")
    run_project(project, shared)  # CI filled the shared store
    shutil.rmtree(shared / "index", ignore_errors=True)
    before = snapshot(shared)

    local = tmp_path / "local"
    report = run_project(project, local, GTCACHE_READONLY_DIRS=str(shared))
    assert statuses(report) == [("hit", "direct")] and report["out"] == expected(2.0, 1.0)
    assert snapshot(shared) == before, "no index, lock, counter, link or ledger in a read-only store"
    assert gtcache.open_store(local).scan().entries == (), "used in place, not copied"

    promoted = run_project(project, local, GTCACHE_READONLY_DIRS=str(shared), GTCACHE_PROMOTE="1")
    assert statuses(promoted) == [("hit", "direct")]
    assert len(gtcache.open_store(local).scan().entries) == 1
    assert snapshot(shared) == before
    assert statuses(run_project(project, local)) == [("hit", "direct")], "the copy serves on its own"


def test_miss_with_a_read_only_tier_never_writes_the_tier(tmp_path: pathlib.Path) -> None:
    shared = tmp_path / "shared"
    project = write_project(tmp_path / "p")
    run_project(project, shared)
    shutil.rmtree(shared / "index", ignore_errors=True)
    before = snapshot(shared)

    write_project(project, offset="6.0")  # a variant the tier does not have
    for promote in ("0", "1"):
        local = tmp_path / f"local-{promote}"
        report = run_project(project, local, GTCACHE_READONLY_DIRS=str(shared), GTCACHE_PROMOTE=promote)
        assert statuses(report) == [("compiled", None)] and report["out"] == expected(2.0, 6.0)
        assert snapshot(shared) == before, "no entry, lock, link, counter or ledger in the read-only tier"
        assert len(gtcache.open_store(local).scan().entries) == 1, "the miss was published to the own store"


def test_read_only_tier_serves_when_the_own_store_cannot_be_opened(tmp_path: pathlib.Path) -> None:
    shared = tmp_path / "shared"
    project = write_project(tmp_path / "p")
    run_project(project, shared)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = f"""
    import runpy, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path({str(project / 'run.py')!r}, run_name="__main__")
    print("WARNINGS", [str(w.message) for w in caught if "gtcache" in str(w.message)])
    """
    out = run_python(code, env={
        "PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(blocker / "store"), "GTCACHE_READONLY_DIRS": str(shared),
    })
    report = json.loads(next(l for l in out.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    assert statuses(report) == [("hit", "direct")] and report["out"] == expected(2.0, 1.0)
    warned = out.split("WARNINGS")[1]
    assert warned.count("gtcache:") == 1 and "cannot open store" in warned


def test_unguarded_script_fails_as_fast_as_without_gtcache(tmp_path: pathlib.Path) -> None:
    """A script without ``if __name__ == "__main__"``: gt4py's spawned workers re-run it and compile
    the variant whose lock the parent holds. They must not wait for it (GTCACHE_WAIT is 600 s):
    the script fails as it does with gt4py alone."""
    project = write_project(tmp_path / "p")
    script = tmp_path / "unguarded.py"
    script.write_text((project / "run.py").read_text().replace('if __name__ == "__main__":\n    main()', "main()"))
    # Were the workers to wait for the parent's lock, the run would outlast the timeout.
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(tmp_path / "store"), "GTCACHE_WAIT": "3600"},
    )
    assert proc.returncode != 0 and "BrokenProcessPool" in proc.stderr, proc.stderr[-2000:]
    assert "waited" not in proc.stderr
