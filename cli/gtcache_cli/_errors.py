"""The CLI's one error boundary: every exception becomes one ``Error: ...`` line and an exit code.

- click's usage errors: exit 2, as click prints them (usage line, hint, ``Error:`` line).
- bad input the library names (``SpecError``, ``TargetError``): exit 2, one line.
- ``GtcacheError`` and ``OSError`` (unreadable store, permissions, full disk): exit 1, one line.
- anything else is a bug in gtcache: exit 1, one line naming the exception type and how to
  see the traceback (``GTCACHE_DEBUG=1``).
- Ctrl-C: exit 130, one line; SIGTERM or SIGHUP (a cancelled CI job, a batch job's time
  limit, a closed terminal): unwound the same way (``Terminated``, what the command was doing
  undone as on Ctrl-C), exit 143 or 129, one line; a closed pipe (``gtcache ls | head``): exit 1, silent (as click
  itself does it).
- output that cannot be written (``gtcache ls > /dev/full``, a closed stdout): exit 1,
  ``Error: Cannot write the output: ...``, never worded like a problem of the store.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

import click

import gtcache
from gtcache import settings
from gtcache_cli._text import escape

#: Set to 1 to print the traceback of an error before its ``Error:`` line.
DEBUG_ENV = "GTCACHE_DEBUG"

OPERATIONAL, USAGE, INTERRUPTED = 1, 2, 130

#: Bad input the library reports with its own classes (module, class), found in
#: ``sys.modules`` only: raising them means their module is loaded (no import of gt4py here).
_USAGE_ERRORS = (("gtcache.warm.spec", "SpecError"), ("gtcache.gt4py.targets", "TargetError"))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP while a command runs: raised where it runs, as Ctrl-C's
    ``KeyboardInterrupt`` is, so that what undoes an interrupted command (an import's
    rollback, a staging folder's removal) runs for these too; exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def _unwind_on_termination() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise ``Terminated`` while the command runs (in the main thread, where
    signals are handled, and where nobody installed a handler of their own); what puts the
    handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            before[signum] = signal.signal(signum, _terminate)

    def restore() -> None:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    return restore


class OutputError(Exception):
    """Writing the command's output failed: the ``OSError`` that said so."""

    def __init__(self, error: OSError):
        super().__init__(error.strerror or str(error))
        self.error = error


class OutputStream:
    """A binary output stream (``export -``'s) whose write errors are ``OutputError``s."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream

    def write(self, data: bytes) -> int:
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(error) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(error) from None


class _ClosedOutput:
    """``sys.stdout`` when the process started without one (``gtcache ls >&-``): Python sets it
    to None, and click and rich would drop the output without a word."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        raise OutputError(OSError(errno.EBADF, "standard output is closed"))

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    @property
    def buffer(self) -> OutputStream:
        return OutputStream(self)  # type: ignore[arg-type]


#: Where click and rich write a command's output: an ``OSError`` without a file name raised
#: there was the output's (a full disk under ``> file``), not the store's.
_OUTPUT_WRITERS = frozenset({("click.utils", "echo"), ("rich.console", "_write_buffer")})


def _from_output(error: OSError) -> bool:
    if error.filename is not None or (tb := error.__traceback__) is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return (tb.tb_frame.f_globals.get("__name__"), tb.tb_frame.f_code.co_name) in _OUTPUT_WRITERS


def guarded(call: Callable[[], Any]) -> int:
    """Run ``call`` (click in non-standalone mode); its exit code, every error reported."""
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()
    restore = _unwind_on_termination()
    try:
        result = call()
        return result if isinstance(result, int) else 0
    except OutputError as error:
        return _report(f"Cannot write the output: {_sentence(str(error))}", OPERATIONAL)
    except click.exceptions.Abort as error:
        if isinstance(cause := error.__cause__ or error.__context__, KeyboardInterrupt):
            return _interrupted(cause)
        return _report("Aborted; nothing was changed.", OPERATIONAL)
    except click.ClickException as error:
        _debug()
        error.show()
        return error.exit_code
    except KeyboardInterrupt as error:
        return _interrupted(error)
    except BrokenPipeError:
        _quiet_stdout()
        return OPERATIONAL
    except gtcache.GtcacheError as error:
        return _report(_sentence(str(error)), OPERATIONAL)
    except Exception as error:
        if isinstance(error, _usage_error_types()):
            return _report(_sentence(str(error)), USAGE)
        if isinstance(error, OSError):
            if _from_output(error):
                return _report(f"Cannot write the output: {_os_error(error)}", OPERATIONAL)
            return _report(_os_error(error), OPERATIONAL)
        return _report(
            f"Unexpected {type(error).__name__}: {_sentence(str(error) or 'no message')} This is a bug in"
            f" gtcache; {DEBUG_ENV}=1 shows the traceback.", OPERATIONAL,
        )
    finally:
        restore()


def _interrupted(error: KeyboardInterrupt) -> int:
    if isinstance(error, Terminated):
        return _report(f"Terminated ({signal.Signals(error.signum).name}).", 128 + error.signum)
    return _report("Interrupted.", INTERRUPTED)


def _usage_error_types() -> tuple[type[BaseException], ...]:
    found = (getattr(sys.modules.get(module), name, None) for module, name in _USAGE_ERRORS)
    return tuple(cls for cls in found if isinstance(cls, type))


def _os_error(error: OSError) -> str:
    """``Permission denied: '/path'.`` (no errno, no exception type)."""
    what = error.strerror or str(error) or type(error).__name__
    names = [f"'{name}'" for name in (error.filename, error.filename2) if name is not None]
    return f"{what}: {' -> '.join(names)}." if names else _sentence(what)


def _sentence(text: str) -> str:
    """One line, ending in a period (messages of other libraries may span lines)."""
    line = " ".join(text.split())
    return line if line.endswith((".", "!", "?")) else f"{line}."


def _report(message: str, code: int) -> int:
    _debug()
    try:
        click.echo(f"Error: {escape(message)}", err=True)  # names from a store or bundle are data
    except OSError:  # stderr is gone too: the exit code is all that is left
        pass
    return code


def _debug() -> None:
    if settings.switch(DEBUG_ENV) and sys.exc_info()[0] is not None:
        traceback.print_exc()


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null so that the exit flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (tests): nothing will be flushed there
        pass
