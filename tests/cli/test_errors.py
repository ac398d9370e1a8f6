"""The CLI's one error boundary (``_errors.guarded``): what each kind of exception becomes."""

from __future__ import annotations

import errno
import os
import pathlib

import click
import pytest

import gtcache
from gtcache.warm import SpecError
from gtcache_cli._errors import guarded


def _raise(error: BaseException) -> None:
    raise error


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), captured.err
    return lines[0]


def test_a_bug_is_one_line_naming_its_type_and_the_debug_switch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GTCACHE_DEBUG", raising=False)
    assert guarded(lambda: 1 / 0) == 1
    assert one_error_line(capsys) == (
        "Error: Unexpected ZeroDivisionError: division by zero. This is a bug in gtcache;"
        " GTCACHE_DEBUG=1 shows the traceback."
    )
    monkeypatch.setenv("GTCACHE_DEBUG", "1")
    assert guarded(lambda: 1 / 0) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("Error: Unexpected ZeroDivisionError")


def test_library_and_environment_errors(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    assert guarded(lambda: _raise(gtcache.EntryNotFoundError("x"))) == 1
    assert one_error_line(capsys) == "Error: No entry matches 'x'."
    assert guarded(lambda: (tmp_path / "nothing-here").read_bytes()) == 1
    assert one_error_line(capsys) == f"Error: No such file or directory: '{tmp_path / 'nothing-here'}'."
    assert guarded(lambda: _raise(OSError(errno.ENOSPC, "No space left on device"))) == 1
    assert one_error_line(capsys) == "Error: No space left on device."
    assert guarded(lambda: _raise(SpecError("m.toml: not a table\nsecond line"))) == 2
    assert one_error_line(capsys) == "Error: m.toml: not a table second line."


def test_click_exit_codes_and_interrupts(capsys: pytest.CaptureFixture[str]) -> None:
    assert guarded(lambda: None) == 0
    assert guarded(lambda: 3) == 3  # click's Exit code in non-standalone mode
    assert guarded(lambda: _raise(click.UsageError("Bad."))) == 2
    assert capsys.readouterr().err.strip().endswith("Error: Bad.")
    assert guarded(lambda: _raise(KeyboardInterrupt())) == 130
    assert one_error_line(capsys) == "Error: Interrupted."

    def refused() -> None:
        raise click.exceptions.Abort()

    assert guarded(refused) == 1
    assert one_error_line(capsys) == "Error: Aborted; nothing was changed."

    def interrupted_in_prompt() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise click.exceptions.Abort() from None  # what click.confirm does

    assert guarded(interrupted_in_prompt) == 130


def test_terminal_escapes_in_an_error_are_shown_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    assert guarded(lambda: _raise(gtcache.EntryNotFoundError("x\x1b]0;pwned\x07"))) == 1
    assert one_error_line(capsys) == "Error: No entry matches 'x\\x1b]0;pwned\\x07'."


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130() -> None:
    """A real SIGINT delivered while the console script imports the command (before any
    handler of click's or ours runs): one ``Error:`` line and 130, no traceback."""
    import subprocess
    import sys

    code = (
        "import builtins, os, signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # as in a terminal (pytest in the background ignores it)
        "real = builtins.__import__\n"
        "def hook(name, *args, **kwargs):\n"
        "    if name == 'gtcache_cli.main':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = hook\n"
        "import gtcache_cli\n"
        "gtcache_cli.run()\n"
    )
    result = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr, result.stdout) == (130, "Error: Interrupted.\n", "")


@pytest.mark.parametrize("command", [["ls"], ["ls", "--json"], ["stats"], ["export", "-"], ["--version"]])
def test_output_that_cannot_be_written_is_named_as_the_output(tmp_path: pathlib.Path, command: list[str]) -> None:
    """``gtcache ls > /dev/full`` said ``Error: No space left on device.``, as if the store's disk
    were full, and with stdout closed (``>&-``) every command printed nothing and exited 0:
    both are ``Error: Cannot write the output: ...`` and exit 1 (real processes, real files)."""
    import subprocess
    import sys

    from tests.helpers import publish

    store = gtcache.open_store(tmp_path / "s")
    publish(store)
    store.close()
    run = [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(tmp_path / "s"), *command]
    ok = subprocess.run(run, capture_output=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout, ok

    def files() -> list[tuple[str, bytes]]:  # the store's truth (the index is a hint ls may rebuild)
        return sorted((str(p), p.read_bytes()) for p in (tmp_path / "s").rglob("*") if p.is_file() and "index" not in p.parts)

    before = files()
    with open("/dev/full", "wb") as full:
        result = subprocess.run(run, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (1, "Error: Cannot write the output: No space left on device.\n")
    result = subprocess.run(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                            preexec_fn=lambda: os.close(1))
    assert (result.returncode, result.stderr) == (1, "Error: Cannot write the output: standard output is closed.\n")
    assert files() == before


def test_a_question_that_cannot_be_asked_changes_nothing(tmp_path: pathlib.Path) -> None:
    """``clear``'s question written into a full disk was reported as the store's disk being
    full, and with stdin closed it was 'a bug in gtcache' (``input(): lost sys.stdin``): each
    says it cannot ask, exit 1, nothing removed. A declined question stays 'Aborted'. And
    ``export -`` into a pipe its reader closed is quiet (exit 1), as ``ls`` into ``head`` is."""
    import subprocess
    import sys

    from tests.helpers import publish

    store = gtcache.open_store(tmp_path / "s")
    publish(store, payload=os.urandom(2**20))  # (incompressible: a bundle larger than a pipe holds)
    store.close()
    run = [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(tmp_path / "s")]

    def entries() -> int:
        return len(gtcache.open_store(tmp_path / "s").scan(use_index=False).entries)

    with open("/dev/full", "wb") as full:
        result = subprocess.run([*run, "clear"], input="y\n", stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (
        1, "Error: Cannot ask for confirmation: No space left on device; nothing was changed (--yes does not ask).\n")
    result = subprocess.run([*run, "clear"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: os.close(0))
    assert (result.returncode, result.stderr) == (
        1, "Error: Cannot ask for confirmation: standard input is closed; nothing was changed (--yes does not ask).\n")
    result = subprocess.run([*run, "clear"], input="n\n", capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (1, "Error: Aborted; nothing was changed.\n")
    assert entries() == 1

    export = subprocess.Popen([*run, "export", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert export.stdout is not None and export.stdout.read(1)
    export.stdout.close()  # the reader goes away after one byte, the writer still writing
    assert (export.wait(timeout=120), export.stderr.read() if export.stderr else b"") == (1, b"")
