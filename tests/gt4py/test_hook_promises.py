"""The hook's promises that a mutation audit found untested (each test names the mutation it
catches): a cache problem never breaks the program and is said once, a store removed while the
process runs is no problem at all, self-check mode checks the facts the hook reads.

Every scenario runs the user's plain gt4py script in a fresh process, with real stores.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import expected, pythonpath, statuses, write_project

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


def run(project: pathlib.Path, store: pathlib.Path, after: str = "", **env: str) -> tuple[dict, list[str], str]:
    """The report, every gtcache warning (those at exit too: printed to stderr) and stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", CAPTURED, str(project), textwrap.dedent(after)], capture_output=True, text=True,
        timeout=600,
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

