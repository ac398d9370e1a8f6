"""Garbage into every command of the real ``gtcache`` binary: exactly one ``Error:`` line on
stderr, never a traceback, the documented exit code, and the store's files byte-identical.

Tests run as root, and root ignores file permissions. The permission attacks run the CLI as
root *without* the capabilities that let it (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
dropped from the bounding set before exec), against folders owned by ``nobody`` (uid 65534)
or of mode 000: the kernel then checks permissions exactly as for an unprivileged user. (The
CLI cannot run as ``nobody`` itself here: the venv's interpreter lives under /root.)
"""

from __future__ import annotations

import ctypes
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import gtcache
from tests.reliability.test_hostile_input import files, one_line_error
from tests.helpers import publish

GTCACHE = str(pathlib.Path(sys.executable).parent / "gtcache")
NOBODY = 65534
#: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER (linux/capability.h).
_DAC_CAPS = (1, 2, 3)
_PR_CAPBSET_DROP = 24


def _drop_dac_caps() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _DAC_CAPS:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run(store: pathlib.Path, *args: str, unprivileged: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GTCACHE, "--cache-dir", str(store), *args], capture_output=True, text=True, timeout=300,
        preexec_fn=_drop_dac_caps if unprivileged else None, **kwargs,
    )


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr


@pytest.fixture
def store(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "store"
    opened = gtcache.open_store(root)
    for name in ("kept_a", "kept_b", "kept_c"):
        publish(opened, name, payload=name.encode() * 100)
    opened.close()
    return root


def attack(result: subprocess.CompletedProcess[str], code: int) -> str:
    no_traceback(result)
    return one_line_error(result, code)


# -- bad values and manifests ---------------------------------------------------------------


def test_an_absurd_size_is_a_usage_error(store: pathlib.Path, figures: Any) -> None:
    before = files(store)
    line = attack(run(store, "prune", "--max-size", "9" * 400 + "G", "--yes"), 2)
    assert "--max-size" in line and "too large" in line, line
    line = attack(run(store, "warm", "--memory-per-job", "9" * 400 + "T", "--dry-run", "x.y"), 2)
    assert "--memory-per-job" in line, line
    assert files(store) == before
    figures.add("security", "--max-size of 400 digits (OverflowError before): exit code", 2)


MANIFESTS = {
    "not UTF-8": b'[[variant]]\nprogram = "gtcache.examples:\xff\xfe"\n',
    "5,000 nested arrays": b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "5,000 nested inline tables": b"x = " + b"{a = " * 5000 + b"1" + b"}" * 5000 + b"\n",
    "entries that are not tables": b"variant = [1, 2]\n",
    "a [[variant]] that is a string": b'variant = "gtcache.examples:axpy"\n',
    "defaults that are not a table": b'defaults = 3\n[[variant]]\nprogram = "gtcache.examples:axpy"\n',
    "static args that are tables": b'[[variant]]\nprogram = "gtcache.examples:axpy"\nstatic_args = {n = {a = 1}}\n',
    "a folder": None,
}


@pytest.mark.parametrize("kind", list(MANIFESTS))
def test_hostile_manifest_is_one_line(store: pathlib.Path, tmp_path: pathlib.Path, kind: str, figures: Any) -> None:
    manifest = tmp_path / "manifest.toml"
    content = MANIFESTS[kind]
    if content is None:
        manifest.mkdir()
    else:
        manifest.write_bytes(content)
    before = files(store)
    line = attack(run(store, "warm", "--manifest", str(manifest), "--dry-run"), 2)
    assert str(manifest) in line, line
    assert files(store) == before
    figures.add("security", f"warm manifest with {kind}: exit code", 2)


EXPLAIN_ATTACKS = {
    "a static argument the program lacks": (["--static", "n=1"], "has no parameter 'n'"),
    "a field as a static argument": (["--static", "a=1.0"], "not a scalar"),
    "a static value of the wrong type": (["--static", "alpha=True"], "is bool"),
    "a backend that is no backend": (["--backend", "os:getcwd"], "not a gt4py backend"),
    "a grid that is no grid": (["--grid", "os:getcwd"], "not a dict of connectivities"),
    "a program that does not exist": (["--static", "alpha=1.0", "--backend", "roundtrip"], None),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(EXPLAIN_ATTACKS))
def test_hostile_explain_is_a_usage_error(store: pathlib.Path, kind: str, figures: Any) -> None:
    args, expected = EXPLAIN_ATTACKS[kind]
    target = "gtcache.examples:no_such_program" if expected is None else "gtcache.examples:axpy"
    before = files(store)
    line = attack(run(store, "explain", target, *args), 2)
    assert (expected or "no_such_program") in line, line
    assert files(store) == before
    figures.add("security", f"explain with {kind}: exit code", 2)


def test_deeply_nested_entry_record_and_ledger(store: pathlib.Path, figures: Any) -> None:
    """A 5,000-deep entry.json is one broken entry (RecursionError before: every command
    failed); a 5,000-deep ledger file is an unreadable run."""
    victim = next(store.glob("entries/*/*"))
    (victim / "entry.json").write_text("[" * 5000 + "]" * 5000)
    (store / "ledger").mkdir(exist_ok=True)
    (store / "ledger" / "deep.json").write_text("{\"a\": " * 5000 + "1" + "}" * 5000)
    before = files(store)
    listing = run(store, "ls", "--json")
    no_traceback(listing)
    assert listing.returncode == 0, listing.stderr
    status = {row["key"]: row["status"] for row in json.loads(listing.stdout)}
    assert status.pop(victim.name) == "broken" and set(status.values()) == {"ok"}
    for command in (["stats"], ["info", victim.name], ["warm", "--from-ledger", "--dry-run"]):
        result = run(store, *command)
        no_traceback(result)
        assert result.returncode in (0, 2), result.stderr  # warm: no variants in the ledger
    verify = run(store, "verify")
    no_traceback(verify)
    assert verify.returncode == 1 and victim.name in verify.stdout
    assert files(store) == before
    figures.add("security", "entry.json and ledger 5,000 levels deep: commands with a traceback", 0)


# -- stores that are not folders, or not readable ---------------------------------------------


def test_store_path_is_a_file(tmp_path: pathlib.Path, figures: Any) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a store")
    for command in (["ls"], ["stats"], ["rm", "abcd", "--yes"], ["verify"], ["dir"]):
        attack(run(blocker, *command), 2)  # click: "Directory ... is a file"
        line = attack(run(blocker / "store", *command), 1) if command != ["dir"] else ""
        assert command == ["dir"] or str(blocker) in line, line
    assert blocker.read_text() == "not a store"
    figures.add("security", "store path that is a file / below a file: exit codes", "2 / 1")


def test_unreadable_store(store: pathlib.Path, figures: Any) -> None:
    before = files(store)
    store.chmod(0)
    try:
        for command in (["ls"], ["stats"], ["info", "kept_a"], ["rm", "--program", "*", "--yes"],
                        ["prune", "--max-size", "0", "--yes"], ["clear", "--yes"], ["verify", "--repair"],
                        ["reindex"]):
            line = attack(run(store, *command, unprivileged=True), 1)
            assert str(store) in line, (command, line)
        dir_ = run(store, "dir", unprivileged=True)  # where it is, even when it cannot be read
        assert dir_.returncode == 0 and dir_.stdout.strip() == str(store)
    finally:
        store.chmod(0o755)
    assert files(store) == before
    figures.add("security", "store of mode 000 (CLI without root's file capabilities): exit code", 1)


def test_store_of_another_user_is_not_written(store: pathlib.Path, figures: Any) -> None:
    before = files(store)
    for path in (store, *store.rglob("*")):
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    listing = run(store, "ls", "--json", unprivileged=True)
    assert listing.returncode == 0 and len(json.loads(listing.stdout)) == 3, listing.stderr
    for command in (["rm", "--program", "*", "--yes"], ["prune", "--max-size", "0", "--yes"], ["clear", "--yes"]):
        line = attack(run(store, *command, unprivileged=True), 1)
        assert "is not trusted" in line and "GTCACHE_TRUSTED_USERS=nobody" in line, line
    assert files(store) == before
    figures.add("security", "rm/prune/clear in a store another user owns: exit code", 1)


# -- partial failures ---------------------------------------------------------------------------


@pytest.fixture
def one_entry_locked(store: pathlib.Path) -> Iterator[tuple[pathlib.Path, str]]:
    """The store, and the key of an entry whose shard folder belongs to 'nobody' (mode 0755)."""
    victim = sorted(store.glob("entries/*/*"))[1]
    os.chown(victim.parent, NOBODY, NOBODY)
    victim.parent.chmod(0o755)
    yield store, victim.name
    os.chown(victim.parent, 0, 0)


@pytest.mark.parametrize("command", [["rm", "--program", "*"], ["prune", "--max-size", "0"]])
def test_removal_goes_on_past_an_entry_it_cannot_remove(
    one_entry_locked: tuple[pathlib.Path, str], command: list[str], figures: Any,
) -> None:
    store, locked = one_entry_locked
    kept = {path: data for path, data in files(store).items() if locked in path}
    result = run(store, *command, "--yes", unprivileged=True)
    no_traceback(result)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"not removed {locked}: Permission denied" in result.stdout
    assert "Removed 2 entries" in result.stdout and "1 could not be removed" in result.stdout
    assert sorted(p.name for p in store.glob("entries/*/*")) == [locked], "the others went"
    assert {path: data for path, data in files(store).items() if path.startswith("entries/")} == kept, \
        "the locked entry is intact"
    figures.add("security", f"{command[0]} with one entry in a folder it cannot write: exit code / removed", "1 / 2 of 3")


def test_removal_failures_in_json(one_entry_locked: tuple[pathlib.Path, str]) -> None:
    store, locked = one_entry_locked
    result = run(store, "prune", "--max-size", "0", "--yes", "--json", unprivileged=True)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["removed"] == 2 and report["entries"] == 3
    [failure] = report["failed"]
    assert failure["key"] == locked and "Permission denied" in failure["reason"]


# -- signals and pipes -------------------------------------------------------------------------


def test_interrupt_is_exit_130(store: pathlib.Path, figures: Any) -> None:
    before = files(store)
    proc = subprocess.Popen(
        [GTCACHE, "--cache-dir", str(store), "clear"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        # A shell starts a background job with SIGINT ignored, and Python keeps an ignored
        # SIGINT ignored: the CLI gets the signal's default, as in a terminal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 120
    while "[y/N]" not in seen and time.monotonic() < deadline:  # the confirmation prompt
        seen += proc.stdout.read(1)
    # stdin stays open until the process has exited: closing it (as communicate() does at
    # once) races the signal, and the prompt would read an end of file instead. A signal
    # that lands between the prompt's write and its read is handled only at the next
    # interruption of that read (CPython's signal handlers run between bytecodes): a user
    # presses Ctrl-C again; so does this test, when the first one was not seen in 5 s.
    for _ in range(12):
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
            break
    else:
        proc.kill()
        raise AssertionError("the CLI ignored SIGINT at its prompt")
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.stdin is not None
    proc.stdin.close()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, seen + out, err)
    line = attack(result, 130)
    assert line == "Error: Interrupted.", line
    assert files(store) == before
    figures.add("security", "Ctrl-C at a confirmation: exit code / stderr lines", "130 / 1")


def test_closed_pipe_exits_quietly(store: pathlib.Path, figures: Any) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader ('head') has gone before anything is written
    try:
        proc = subprocess.run([GTCACHE, "--cache-dir", str(store), "ls"], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    figures.add("security", "stdout closed (piped into head): exit code / stderr bytes", "1 / 0")


def test_debug_shows_the_traceback(store: pathlib.Path) -> None:
    quiet = run(store, "info", "nosuch")
    assert one_line_error(quiet, 1) == "Error: No entry matches 'nosuch'."
    loud = run(store, "info", "nosuch", env={**os.environ, "GTCACHE_DEBUG": "1"})
    assert loud.returncode == 1 and "Traceback" in loud.stderr and "EntryNotFoundError" in loud.stderr
    assert loud.stderr.strip().splitlines()[-1] == "Error: No entry matches 'nosuch'."
