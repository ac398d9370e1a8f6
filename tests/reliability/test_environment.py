"""A hostile machine: full disk, read-only store, unwritable folder, a lock left by a dead process.

The disk is real: a small tmpfs mounted for the test (root can mount here and
in CI). Each of those scenarios also has a variant that needs no mount and always
runs: the full disk as a file-size limit in the child (``RLIMIT_FSIZE``: EFBIG on
every write past it), the read-only store as a folder the child cannot write (it
drops to uid 65534 ``nobody`` before it opens the store). The figures name the
variant that ran. Every scenario runs the user's plain gt4py script in a fresh
process: it must give the right result, with at most one gtcache warning, and
lose nothing already stored.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

import gtcache
from gtcache.policies.verify import verify
from tests.helpers import expected, write_project
from tests.helpers import pythonpath

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

#: The user's script under warnings capture: prints its report, then the gtcache warnings.
#: argv: the project, then a file-size limit in bytes ("" for none).
CAPTURED = """
import resource, runpy, signal, sys, warnings
if sys.argv[2]:  # a full disk without a mount: every write past the limit fails with EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runpy.run_path(sys.argv[1] + "/run.py", run_name="__main__")
print("WARNINGS " + repr([str(w.message) for w in caught if "gtcache" in str(w.message)]))
"""

#: The same as uid 65534: root imports every code path first (the interpreter lives under
#: /root, which nobody can read) by running the project twice through a scratch store, then
#: drops to nobody for good and only then installs the hook on GTCACHE_DIR and runs it.
#: argv: the project, the scratch store, the store under test.
AS_NOBODY = """
import json, os, runpy, sys, warnings
from gtcache.gt4py import hook as gthook
project, scratch, store = sys.argv[1:4]
for _ in range(2):
    with gthook.installed(scratch):
        runpy.run_path(project + "/run.py", run_name="__main__")
from gtcache.gt4py._hook import PROCESS_RUN
PROCESS_RUN.write_ledgers()  # the scratch store's, as root (else at exit, as nobody)
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
print("DROPPED", flush=True)
os.environ["GTCACHE_DIR"] = store
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    gthook.install()
    runpy.run_path(project + "/run.py", run_name="__main__")
print("WARNINGS " + repr([str(w.message) for w in caught if "gtcache" in str(w.message)]))
"""


def run(project: pathlib.Path, store: pathlib.Path, *, fsize: int | None = None, as_nobody: bool = False,
        **env: str) -> tuple[dict, list[str]]:
    if as_nobody:
        # A new scratch store each time: the warm-up then compiles, and imports that path too.
        scratch = tempfile.mkdtemp(prefix="scratch-", dir=project.parent)
        argv = [AS_NOBODY, str(project), scratch, str(store)]
        env = {"GT4PY_BUILD_CACHE_DIR": str(project.parent / "gt4py"), **env}
    else:
        argv = [CAPTURED, str(project), "" if fsize is None else str(fsize)]
        env = {"GTCACHE_DIR": str(store), **env}
    proc = subprocess.run(
        [sys.executable, "-c", *argv], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", **env},
    )
    assert proc.returncode == 0, f"the user's program failed:\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    if as_nobody:
        lines = lines[lines.index("DROPPED"):]
    report = json.loads(next(l for l in lines if l.startswith("REPORT ")).removeprefix("REPORT "))
    warned = eval(next(l for l in lines if l.startswith("WARNINGS ")).removeprefix("WARNINGS "))
    # And those given after the program, at exit (the ledger entry's): printed to stderr.
    warned += [line.partition("GtcacheWarning: ")[2] for line in proc.stderr.splitlines() if "GtcacheWarning: " in line]
    return report, warned


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "entries").rglob("*")) if p.is_file()}


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the no-mount variant runs instead")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def open_folder() -> Iterator[pathlib.Path]:
    """A folder owned by root that everyone can read (pytest's tmp_path is root's alone), with
    a subfolder everyone can write (gt4py's build cache of a child running as nobody)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-hostile-"))
    try:
        folder.chmod(0o755)
        (folder / "gt4py").mkdir(mode=0o777)
        (folder / "gt4py").chmod(0o777)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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


@pytest.mark.parametrize("variant", ["tmpfs", "RLIMIT_FSIZE"])
def test_full_disk(variant: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path, figures) -> None:
    """tmpfs: the disk is full (ENOSPC); RLIMIT_FSIZE: no mount, every store write past 200
    bytes fails (EFBIG) in the process that misses."""
    disk = request.getfixturevalue("small_disk") if variant == "tmpfs" else tmp_path / "disk"
    print(f"full disk: the {variant} variant runs")
    store = disk / "store"
    project = write_project(tmp_path / "p")
    report, warned = run(project, store)
    assert report["counts"] == {"compiled": 1} and warned == []
    before = snapshot(store)
    if variant == "tmpfs":
        fill(disk)
    write_project(project, offset="7.0")
    report, warned = run(project, store, fsize=None if variant == "tmpfs" else 200)
    assert report["out"] == expected(2.0, 7.0)
    error = "No space left on device" if variant == "tmpfs" else "File too large"
    assert len(warned) == 1 and error in warned[0], warned
    assert snapshot(store) == before, "nothing stored was lost"
    assert verify(gtcache.open_store(store, read_only=True), grace_seconds=0).entries == 1
    what = "tmpfs, ENOSPC" if variant == "tmpfs" else "no mount: RLIMIT_FSIZE, EFBIG"
    figures.add("hostile machine", f"full disk ({what}): program ran, warnings", len(warned))


@pytest.mark.parametrize("variant", ["ro mount", "uid 65534"])
def test_read_only_store_and_unwritable_folder(
    variant: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path, figures
) -> None:
    """ro mount: the tmpfs holding the store is remounted read-only; uid 65534: no mount, the
    store and its folder are root's (mode 0755) and the user's process runs as nobody."""
    print(f"read-only store: the {variant} variant runs")
    nobody = variant == "uid 65534"
    disk = request.getfixturevalue("open_folder" if nobody else "small_disk")
    store = disk / "store"
    project = write_project((disk if nobody else tmp_path) / "p")
    run(project, store)
    before = snapshot(store)
    if nobody:
        assert all(p.stat().st_uid == 0 and not p.stat().st_mode & 0o022 for p in (disk, store))
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)

    report, warned = run(project, store, as_nobody=nobody)
    assert report["out"] == expected(2.0, 1.0) and [o["status"] for o in report["outcomes"]] == ["hit"]
    assert warned == [], "a hit needs nothing written"

    write_project(project, offset="3.0")
    report, warned = run(project, store, as_nobody=nobody)
    assert report["out"] == expected(2.0, 3.0)
    assert len(warned) == 1 and "not writable" in warned[0], warned
    figures.add("hostile machine", f"read-only store ({variant}): miss ran, warnings", len(warned))

    report, warned = run(project, disk / "new-store", as_nobody=nobody)
    assert report["out"] == expected(2.0, 3.0) and len(warned) == 1 and "cannot open store" in warned[0], warned
    assert snapshot(store) == before
    assert not (disk / "new-store").exists()
    figures.add("hostile machine", f"store folder that cannot be created ({variant}): program ran, warnings", len(warned))


@pytest.mark.parametrize("folder", ["facts", "trash", "locks"])
def test_a_store_folder_made_a_symlink(tmp_path: pathlib.Path, folder: str, figures) -> None:
    """A fixed folder replaced by a symbolic link: nothing is written through it. A hit is
    served; a miss runs with one warning that says how to mend the store (before, the lock and
    the publish each warned), and the link's target stays empty."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    project = write_project(tmp_path / "p")
    run(project, store)
    before = snapshot(store)
    shutil.rmtree(store / folder, ignore_errors=True)
    elsewhere.mkdir()
    (store / folder).symlink_to(elsewhere)

    report, warned = run(project, store)
    assert report["out"] == expected(2.0, 1.0) and [o["status"] for o in report["outcomes"]] == ["hit"], report
    assert warned == [], "a hit needs nothing written"
    write_project(project, offset="3.0")
    report, warned = run(project, store)
    assert report["out"] == expected(2.0, 3.0), report
    assert len(warned) == 1 and f"'{store / folder}'" in warned[0] and "verify --repair" in warned[0], warned
    assert list(elsewhere.iterdir()) == [] and snapshot(store) == before
    figures.add("hostile machine", f"store folder '{folder}' a symbolic link: miss ran, warnings", len(warned))


@pytest.mark.parametrize("locking", ["flock", "files"])
def test_lock_left_by_a_killed_compiler(tmp_path: pathlib.Path, locking: str, figures) -> None:
    """SIGKILL a process while it compiles (holding the variant's lock); the next one must not wait for it."""
    store = tmp_path / "store"
    project = write_project(tmp_path / "p", backend="gtx.gtfn_cpu")
    env = {
        **os.environ, "PYTHONPATH": pythonpath(project), "GTCACHE_DIR": str(store), "GTCACHE_LOCKING": locking,
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
    assert warned == [], "a dead holder is no reason to warn (a wait that ran out would warn)"
    assert not list(store.glob("locks/*.lock"))
    figures.add("hostile machine", f"lock left by a SIGKILLed compiler ({locking}): seconds to the next compile", round(seconds, 1))
