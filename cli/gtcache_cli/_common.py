"""What every command shares: the settings object on the context, options defined once,
library errors turned into exit codes in one place."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

import gtcache
from gtcache.policies import parse_duration, parse_size

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES_HELP = """\b
Exit codes:
  0  success (also: the store is empty, nothing to do)
  1  operational error (unreadable store, unknown entry, problems found, ...)
  2  usage error (bad option or argument)"""


@dataclasses.dataclass
class Context:
    settings: gtcache.Settings
    _store: gtcache.Store | None = None

    def store(self) -> gtcache.Store:
        if self._store is None:
            self._store = gtcache.open_store(self.settings.cache_dir, index_dir=self.settings.index_dir)
        return self._store


pass_context = click.make_pass_decorator(Context)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(func)


def yes_option(func: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(func)


def dry_run_option(func: F) -> F:
    return click.option("--dry-run", "-n", is_flag=True, help="Print the plan; remove nothing.")(func)


def filter_options(func: F) -> F:
    func = click.option("--backend", "backend_glob", help="Only backends matching this glob.")(func)
    return click.option("--program", "program_glob", help="Only programs matching this glob.")(func)


def errors_to_exit_codes(func: F) -> F:
    """``GtcacheError`` -> exit 1 with its one-line message; bad values -> exit 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except gtcache.GtcacheError as error:
            raise click.ClickException(str(error)) from None

    return wrapper  # type: ignore[return-value]


def size_value(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: ``20G`` -> bytes; a bad value is a usage error naming the option."""
    try:
        return None if value is None else parse_size(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def duration_value(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Click callback: ``7d`` -> seconds."""
    try:
        return None if value is None else parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def confirm(question: str, *, yes: bool) -> None:
    """Ask unless ``--yes``; a refusal (or no terminal to ask on) exits 1."""
    if not yes:
        click.confirm(question, abort=True)
