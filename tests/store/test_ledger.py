"""The stats ledger's folder: what ``zero`` removes, and a ``ledger/`` that is not a real folder
(real processes, real files)."""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import gtcache

RUN = {"counts": {"hit": 2, "compiled": 1}, "compile_seconds": 1.0, "compile_seconds_saved": 5.0}


def _record_runs(root: str, runs: int, failures: multiprocessing.Queue[list[str]]) -> None:
    store = gtcache.open_store(root)
    failed = []
    for _ in range(runs):
        try:
            store.record_run(RUN)
        except Exception as error:  # what the exit handler turns into "cannot record usage" warnings
            failed.append(repr(error))
    failures.put(failed)


def _zero_until(root: str, stop: multiprocessing.synchronize.Event) -> None:
    store = gtcache.open_store(root)
    while not stop.is_set():
        store.zero_ledger()


def test_zero_racing_with_runs_being_recorded_loses_none_of_them(tmp_path: pathlib.Path) -> None:
    """``stats --zero`` in a loop while two processes record 1,500 runs each: every record_run
    succeeds (zero once removed the temp file of a run being written: about 1 in 80 failed)."""
    root = tmp_path / "s"
    gtcache.open_store(root)
    ctx = multiprocessing.get_context("spawn")
    failures: multiprocessing.Queue[list[str]] = ctx.Queue()
    stop = ctx.Event()
    zeroer = ctx.Process(target=_zero_until, args=(str(root), stop))
    zeroer.start()
    writers = [ctx.Process(target=_record_runs, args=(str(root), 1500, failures)) for _ in range(2)]
    for writer in writers:
        writer.start()
    failed = [error for _ in writers for error in failures.get(timeout=300)]
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    stop.set()
    zeroer.join(60)
    assert zeroer.exitcode == 0
    assert failed == [], f"{len(failed)} of 3000 runs not recorded: {sorted(set(failed))[:3]}"


def test_zero_removes_run_files_only(tmp_path: pathlib.Path) -> None:
    """A writer's temp file (a run being recorded) survives ``zero`` and still becomes a run;
    a folder and other names stay too; the runs and only they are counted as forgotten."""
    store = gtcache.open_store(tmp_path / "s")
    for _ in range(2):
        store.record_run(RUN)
    ledger = store.root / "ledger"
    in_flight = ledger / ".20260101T000000Z-host-1-0123456789ab.json.tmp-1-0123456789ab"
    in_flight.write_text(json.dumps({"format": 1, "counts": {"hit": 7}}) + "\n")
    (ledger / "notes.txt").write_text("someone's\n")
    (ledger / "folder.json").mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("{}\n")
    (ledger / "link.json").symlink_to(outside)
    os.mkfifo(ledger / "fifo.json")

    assert store.zero_ledger() == 2, "two runs; the symlink itself and the FIFO go, but were no runs"
    assert sorted(p.name for p in ledger.iterdir()) == sorted([in_flight.name, "notes.txt", "folder.json", "zeroed"])
    assert outside.read_text() == "{}\n", "a symlink is removed itself, never its target"
    assert store.ledger().runs == 0 and store.ledger_zeroed() is not None
    os.replace(in_flight, ledger / "20260101T000000Z-host-1-0123456789ab.json")  # the writer's rename
    totals = store.ledger()
    assert (totals.runs, totals.hits, totals.unreadable) == (1, 7, 1), "folder.json: unreadable, as before"


#: A program that records one run (argv: the store, then its own arguments), handing the
#: ledger its whole command line as a careless caller would (gtcache's hook once did).
PROBE = """
import sys
import gtcache
gtcache.open_store(sys.argv[1]).record_run({"counts": {"hit": 1}, "argv": sys.argv})
"""

SECRET = "s3cr3t-t0ken"


@pytest.mark.parametrize("started", ["script", "module", "-c"])
def test_a_run_is_named_by_its_program_never_by_its_arguments(tmp_path: pathlib.Path, started: str) -> None:
    """Others who may read the store read its ledger: a run keeps the program's name (the
    module for ``python -m``, the script's file name without its folder), and no word of its
    command line (tokens, private paths). Catches: ``argv`` in the run file (it held the first
    four words of every run's command line)."""
    root = tmp_path / "s"
    gtcache.open_store(root)
    private = tmp_path / f"grant-{SECRET}"
    private.mkdir()
    (private / "job.py").write_text(PROBE)
    (private / "ledger_probe.py").write_text(PROBE)
    args = {"script": [str(private / "job.py")], "module": ["-m", "ledger_probe"], "-c": ["-c", PROBE]}[started]
    subprocess.run([sys.executable, *args, str(root), f"--token={SECRET}", str(private / "input.nc")],
                   check=True, cwd=private, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                       p for p in (str(private), os.environ.get("PYTHONPATH", "")) if p)})
    (run_file,) = [p for p in (root / "ledger").iterdir() if p.suffix == ".json"]
    assert SECRET not in run_file.read_text(), run_file.read_text()
    (run,) = gtcache.open_store(root).ledger_runs()
    assert run["program"] == {"script": "job.py", "module": "ledger_probe", "-c": "-c"}[started]
    assert "argv" not in run and run["counts"] == {"hit": 1}


def _outside_ledger(folder: pathlib.Path) -> dict[str, bytes]:
    folder.mkdir()
    for i in range(3):
        (folder / f"run{i}.json").write_text(json.dumps({"format": 1, "counts": {"hit": 1000}}) + "\n")
    (folder / "zeroed").write_text("2026-01-01T00:00:00+00:00\n")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("planted", ["before opening", "after the folder check"])
def test_symlinked_ledger_is_never_read_or_written_through(tmp_path: pathlib.Path, planted: str) -> None:
    """``ledger -> outside``: no runs, no zero time, and recording or zeroing is refused, even by
    a Store that checked its folders before the link was planted."""
    root = tmp_path / "s"
    store = gtcache.open_store(root)
    store.record_run(RUN)
    outside = tmp_path / "outside"
    before = _outside_ledger(outside)
    if planted == "after the folder check":
        assert store.unsafe_folders() == (), "checked (once per Store) while ledger/ is a real folder"
    shutil.rmtree(root / "ledger")
    (root / "ledger").symlink_to(outside, target_is_directory=True)
    if planted == "before opening":
        store = gtcache.open_store(root)

    totals = store.ledger()
    assert (totals.runs, totals.hits, totals.unreadable) == (0, 0, 0)
    assert store.ledger_runs() == [] and store.ledger_zeroed() is None
    with pytest.raises(gtcache.GtcacheError, match="verify --repair"):
        store.record_run(RUN)
    with pytest.raises(gtcache.GtcacheError, match="verify --repair"):
        store.zero_ledger()
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert (root / "ledger").is_symlink()


def test_ledger_that_is_a_file_holds_no_runs(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "s"
    store = gtcache.open_store(root)
    (root / "ledger").write_text('{"format": 1, "counts": {"hit": 1}}\n')
    assert store.ledger().runs == 0 and store.ledger_zeroed() is None
    with pytest.raises(gtcache.GtcacheError):
        store.record_run(RUN)
    assert (root / "ledger").read_text() == '{"format": 1, "counts": {"hit": 1}}\n'
