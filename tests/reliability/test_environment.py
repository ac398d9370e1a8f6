"""A hostile machine: full disk, read-only store, unwritable folder, a lock left by a dead process.

The disk is real: a small tmpfs mounted for the test (root can mount here and
in CI). Where mounting is not possible, the file-size-limit variant in
tests/gt4py/test_hook.py covers the full disk. Every scenario runs the user's
plain gt4py script in a fresh process: it must give the right result, with at
most one gtcache warning, and lose nothing already stored.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import gtcache
from gtcache.policies.verify import verify
from tests.gt4py.test_hook import expected, write_project

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

#: The user's script under warnings capture: prints its report, then the gtcache warnings.
CAPTURED = """
import runpy, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runpy.run_path(sys.argv[1] + "/run.py", run_name="__main__")
print("WARNINGS " + repr([str(w.message) for w in caught if "gtcache" in str(w.message)]))
"""


def run(project: pathlib.Path, store: pathlib.Path, **env: str) -> tuple[dict, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", CAPTURED, str(project)], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(project), "GTCACHE_DIR": str(store), **env},
    )
    assert proc.returncode == 0, f"the user's program failed:\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
    warned = eval(next(l for l in proc.stdout.splitlines() if l.startswith("WARNINGS ")).removeprefix("WARNINGS "))
    return report, warned


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "entries").rglob("*")) if p.is_file()}


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); test_hook covers RLIMIT_FSIZE")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: pathlib.Path) -> None:
    """Fill the file system of ``folder`` to the last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    for chunk in (65536, 1):
        try:
            while True:
                os.write(fd, b"\0" * chunk)
        except OSError:
            pass
    os.close(fd)


def test_full_disk(small_disk: pathlib.Path, tmp_path: pathlib.Path, figures) -> None:
    store = small_disk / "store"
    project = write_project(tmp_path / "p")
    report, warned = run(project, store)
    assert report["counts"] == {"compiled": 1} and warned == []
    before = snapshot(store)
    fill(small_disk)
    write_project(project, offset="7.0")
    report, warned = run(project, store)
    assert report["out"] == expected(2.0, 7.0)
    assert len(warned) == 1 and "No space left on device" in warned[0], warned
    assert snapshot(store) == before, "nothing stored was lost"
    assert verify(gtcache.open_store(store, read_only=True), grace_seconds=0).entries == 1
    figures.add("hostile machine", "full disk (tmpfs, ENOSPC): program ran, warnings", len(warned))


def test_read_only_store_and_unwritable_folder(small_disk: pathlib.Path, tmp_path: pathlib.Path, figures) -> None:
    store = small_disk / "store"
    project = write_project(tmp_path / "p")
    run(project, store)
    before = snapshot(store)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)

    report, warned = run(project, store)
    assert report["out"] == expected(2.0, 1.0) and [o["status"] for o in report["outcomes"]] == ["hit"]
    assert warned == [], "a hit needs nothing written"

    write_project(project, offset="3.0")
    report, warned = run(project, store)
    assert report["out"] == expected(2.0, 3.0) and len(warned) == 1 and "not writable" in warned[0], warned
    figures.add("hostile machine", "read-only store (ro mount): miss ran, warnings", len(warned))

    report, warned = run(project, small_disk / "new-store")
    assert report["out"] == expected(2.0, 3.0) and len(warned) == 1 and "cannot open store" in warned[0], warned
    assert snapshot(store) == before
    figures.add("hostile machine", "store folder that cannot be created: program ran, warnings", len(warned))


@pytest.mark.parametrize("locking", ["flock", "files"])
def test_lock_left_by_a_killed_compiler(tmp_path: pathlib.Path, locking: str, figures) -> None:
    """SIGKILL a process while it compiles (holding the variant's lock); the next one must not wait for it."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p", backend="gtx.gtfn_cpu")
    env = {
        **os.environ, "PYTHONPATH": str(project), "GTCACHE_DIR": str(store), "GTCACHE_LOCKING": locking,
        "GT4PY_BUILD_CACHE_DIR": str(tmp_path / "gt4py"),  # a real compile, not gt4py's cache
    }
    victim = subprocess.Popen([sys.executable, str(project / "run.py")], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(store.glob("locks/*.lock")):
        assert victim.poll() is None and time.monotonic() < deadline, "the victim never took its lock"
        time.sleep(0.01)
    os.killpg(victim.pid, signal.SIGKILL)  # the compiler's worker processes too
    victim.wait()
    assert list(store.glob("locks/*.lock")), "it died holding the lock"

    started = time.monotonic()
    report, warned = run(project, store, GTCACHE_LOCKING=locking, GT4PY_BUILD_CACHE_DIR=str(tmp_path / "gt4py"))
    seconds = time.monotonic() - started
    assert report["out"] == expected(2.0, 1.0) and report["counts"] == {"compiled": 1}
    assert warned == [], "a dead holder is no reason to warn"
    assert seconds < 120, "it did not wait for the dead process (GTCACHE_WAIT is 600 s)"
    assert not list(store.glob("locks/*.lock"))
    figures.add("hostile machine", f"lock left by a SIGKILLed compiler ({locking}): seconds to the next compile", round(seconds, 1))
