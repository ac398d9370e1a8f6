"""What every command shares: the settings object on the context, options defined once,
one output step (``emit``). Errors become exit codes in one place: ``_errors.py``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

import gtcache
from gtcache.policies import parse_duration, parse_size
from gtcache.store import TrustPolicy
from gtcache_cli import _complete, _text
from gtcache_cli._text import MIN_PREFIX

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES_HELP = """\b
Exit codes:
  0    success (also: the store is empty, nothing to do)
  1    operational error (unreadable store, unknown entry, problems found,
       an entry rm/prune could not remove, ...)
  2    usage error (bad option or argument)
  130  interrupted (Ctrl-C); 143, 129: terminated (SIGTERM, SIGHUP)
GTCACHE_DEBUG=1 adds the traceback to an error."""


@dataclasses.dataclass
class Context:
    settings: gtcache.Settings
    _store: gtcache.Store | None = None

    def store(self, *, inspect: bool = False, create: bool = False) -> gtcache.Store:
        """The store; ``inspect`` (commands that only read metadata): an untrusted store is
        opened anyway, read-only, with a warning on stderr; otherwise it is an error.

        Only commands that put something in (``warm``, ``import``, ``config set``) pass
        ``create``; for the others a missing store is an error ("No gtcache store at ...",
        exit 1) and nothing is created: ``--cache-dir /typo`` must not make ``/typo``.
        """
        if self._store is None:
            self._store = gtcache.open_store(
                self.settings.cache_dir, index_dir=self.settings.index_dir, allow_untrusted=inspect, create=create,
                trust=TrustPolicy.from_ids(self.settings.trusted_users, self.settings.trusted_groups),
            )
            if self._store.trust_problem:
                click.echo(f"Warning: {self._store.trust_problem}", err=True)
        return self._store


pass_context = click.make_pass_decorator(Context)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(func)


def yes_option(func: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(func)


def dry_run_option(func: F) -> F:
    return click.option("--dry-run", "-n", is_flag=True, help="Print the plan; remove nothing.")(func)


def filter_options(func: F) -> F:
    func = click.option("--backend", "backend_glob", help="Only backends matching this glob.",
                        shell_complete=_complete.backend_names)(func)
    return click.option("--program", "program_glob", help="Only programs matching this glob.",
                        shell_complete=_complete.program_names)(func)


def emit(data: Any, as_json: bool, render: Callable[[], None]) -> None:
    """The one output step of every command: ``data`` as JSON with ``--json``, else ``render()``."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        render()


def size_value(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: ``20G`` -> bytes (``gtcache.policies.parse_size``: k, M, G decimal, Ki, Mi,
    Gi binary, ``1e9``); a bad value is a usage error naming the option (exit 2)."""
    try:
        return None if value is None else parse_size(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def duration_value(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Click callback: ``7d``, ``1h30m`` -> seconds (``gtcache.policies.parse_duration``)."""
    try:
        return None if value is None else parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def confirm(question: str, *, yes: bool) -> None:
    """Ask unless ``--yes``; a refusal (or no terminal to ask on) exits 1, as does a question
    that cannot be asked (a full disk under ``> file``, no stdin at all), naming why."""
    if yes:
        return
    try:
        click.confirm(question, abort=True)
    except click.Abort:  # (a RuntimeError too) declined, or the end of stdin
        raise
    except RuntimeError:  # input(): lost sys.stdin (started with it closed)
        raise click.ClickException("Cannot ask for confirmation: standard input is closed; nothing was changed"
                                   " (--yes does not ask).") from None
    except OSError as error:
        if isinstance(error, BrokenPipeError):
            raise
        raise click.ClickException(f"Cannot ask for confirmation: {error.strerror or error}; nothing was changed"
                                   " (--yes does not ask).") from None


def resolve(store: gtcache.Store, query: str, scan: gtcache.StoreScan | None = None) -> tuple[gtcache.EntryInfo, ...]:
    """``Store.resolve``, saying so when a query of hex digits is too short to be a key prefix,
    or when broken entries whose program cannot be read might be the one asked for."""
    scan = scan if scan is not None else store.scan()
    try:
        return store.resolve(query, scan)
    except gtcache.EntryNotFoundError:
        digits = query.strip()
        if digits and len(digits) < MIN_PREFIX and all(c in "0123456789abcdefABCDEF" for c in digits):
            raise gtcache.GtcacheError(
                f"No entry matches '{digits}'; a key prefix needs at least {MIN_PREFIX} digits"
                f" ('{digits}' has {len(digits)}): see 'gtcache ls'."
            ) from None
        unnamed = sum(1 for e in scan.entries if not e.ok and e.program == "?")
        if unnamed:
            which = "it is" if unnamed == 1 else "they are"
            raise gtcache.GtcacheError(
                f"No entry matches '{digits}'; {_text.plural(unnamed, 'broken entry', 'broken entries')}"
                f" of the store cannot say which program {which} ('gtcache ls --broken' lists them)."
            ) from None
        raise
