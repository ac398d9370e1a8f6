"""Many processes start one program on one empty store at once, as MPI ranks of a model run do.

Each rank is a fresh interpreter running the user's plain gt4py script under
``GTCACHE_DIR``; all are released together once every one of them has imported
gt4py. One of them compiles the variant, the others wait for it and load it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

import gtcache
from tests.helpers import expected, write_project
from tests.helpers import pythonpath

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

#: Waits at the start line, then runs the project's script (argv: project, start file, ready file).
RANK = """
import pathlib, runpy, sys, time
import gt4py.next  # the hook is installed here, before the race starts
project, start, ready = sys.argv[1:4]
pathlib.Path(ready).touch()
while not pathlib.Path(start).exists():
    time.sleep(0.01)
runpy.run_path(project + "/run.py", run_name="__main__")
"""


def race(project: pathlib.Path, store: pathlib.Path, ranks: int, **env: str) -> list[dict]:
    """Start ``ranks`` processes, release them together, return their reports."""
    start = project / "start"
    start.unlink(missing_ok=True)
    environ = {
        **os.environ, "PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store), **env,
    }
    procs = []
    for rank in range(ranks):
        ready = project / f"ready-{rank}"
        ready.unlink(missing_ok=True)
        procs.append((ready, subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RANK), str(project), str(start), str(ready)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ,
        )))
    deadline = time.monotonic() + 300
    while not all(ready.exists() for ready, _ in procs):
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.05)
    start.touch()
    reports = []
    for _, proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"rank failed:\n{out}\n{err}"
        assert "Traceback" not in err, err
        line = next(l for l in out.splitlines() if l.startswith("REPORT "))
        reports.append(json.loads(line.removeprefix("REPORT ")))
    return reports


def outcomes(reports: list[dict]) -> list[tuple[str, str | None]]:
    return sorted((o["status"], o["detail"]) for r in reports for o in r["outcomes"])


def test_ranks_compile_a_variant_once_and_the_others_load_it(tmp_path: pathlib.Path, figures) -> None:
    project = write_project(tmp_path / "p", backend="gtx.gtfn_cpu")
    store = tmp_path / "store"
    started = time.monotonic()
    reports = race(project, store, ranks=8)
    seconds = time.monotonic() - started
    assert all(r["out"] == expected(2.0, 1.0) for r in reports)
    statuses = [status for status, _ in outcomes(reports)]
    # A rank that starts after the publish hits without waiting: only the counts are certain.
    assert statuses == ["compiled"] + ["hit"] * 7, outcomes(reports)
    waited = [detail for _, detail in outcomes(reports)].count("waited for another process")
    assert len(gtcache.open_store(store).scan().entries) == 1
    section = "8 ranks start one gtfn program on an empty store"
    figures.add(section, "compiles / loads (after waiting) / right results", f"1 / 7 ({waited}) / 8")
    figures.add(section, "entries in the store / seconds (2 cores)", f"1 / {seconds:.0f}")


def test_without_flock_ranks_still_compile_once(tmp_path: pathlib.Path, no_flock: dict[str, str], figures) -> None:
    project = write_project(tmp_path / "p", backend="gtx.gtfn_cpu")
    store = tmp_path / "store"
    # gt4py's build cache too must be on the flock-less "file system": filelock (which gt4py
    # uses) takes a lock file left by flock-using runs for a lock still held, and waits forever.
    reports = race(project, store, ranks=3, GT4PY_BUILD_CACHE_DIR=str(tmp_path / "gt4py"), **no_flock)
    assert all(r["out"] == expected(2.0, 1.0) for r in reports)
    assert [status for status, _ in outcomes(reports)] == ["compiled", "hit", "hit"], outcomes(reports)
    assert not [p.name for p in (store / "locks").iterdir()], "lock files are removed after use"
    figures.add("3 ranks without flock (LD_PRELOAD: ENOSYS)", "compiles / loads after waiting", "1 / 2")


def test_ranks_that_do_not_wait_all_compile_and_one_publish_wins(tmp_path: pathlib.Path, figures) -> None:
    """GTCACHE_WAIT=0: 8 processes compile and publish one variant into one empty store."""
    project = write_project(tmp_path / "p")  # roundtrip: 8 compiles stay cheap
    store = tmp_path / "store"
    reports = race(project, store, ranks=8, GTCACHE_WAIT="0")
    assert all(r["out"] == expected(2.0, 1.0) for r in reports), "8 working programs"
    assert {status for status, _ in outcomes(reports)} <= {"compiled", "hit"}, outcomes(reports)
    scan = gtcache.open_store(store).scan()
    assert len(scan.entries) == 1 and not scan.entries[0].problem
    assert not any((store / "tmp").iterdir()), "the losers cleaned up after themselves"
    compiled = [status for status, _ in outcomes(reports)].count("compiled")
    section = "8 processes race to publish one variant (GTCACHE_WAIT=0)"
    figures.add(section, "compiled and published / entries / right results / exceptions", f"{compiled} / 1 / 8 / 0")
