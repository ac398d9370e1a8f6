"""Read-only commands: dir, ls, info, stats."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from typing import Any

import click

import gtcache
from gtcache_cli import _render
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    errors_to_exit_codes,
    filter_options,
    json_option,
    pass_context,
)


@click.command(name="dir", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
@errors_to_exit_codes
def dir_command(obj: Context, as_json: bool) -> None:
    """Print where the store (and its index) is."""
    settings = obj.settings
    data = {
        "cache_dir": str(settings.cache_dir),
        "index_dir": str(settings.index_dir or settings.cache_dir / "index"),
    }
    click.echo(json.dumps(data, indent=2) if as_json else data["cache_dir"])


_SORT_KEYS: dict[str, Callable[[gtcache.EntryInfo], Any]] = {
    "program": lambda e: (e.qualified_program, e.backend, e.key),
    "size": lambda e: e.size,
    "created": lambda e: e.created,
    "last-used": lambda e: e.last_used,
    "hits": lambda e: e.hits,
}


@click.command(name="ls", epilog=EXIT_CODES_HELP)
@filter_options
@click.option("--broken", is_flag=True, help="Only broken entries.")
@click.option("--sort", type=click.Choice(list(_SORT_KEYS)), default="program", show_default=True,
              help="Order of the rows; every key but 'program' sorts descending.")
@json_option
@pass_context
@errors_to_exit_codes
def ls_command(
    obj: Context, program_glob: str | None, backend_glob: str | None, broken: bool, sort: str, as_json: bool
) -> None:
    """List the entries of the store (broken ones included, marked)."""
    scan = obj.store().scan()
    entries = [
        e
        for e in scan.entries
        if matches(e, program_glob, backend_glob) and (not broken or not e.ok)
    ]
    entries.sort(key=_SORT_KEYS[sort], reverse=sort != "program")
    if as_json:
        click.echo(json.dumps([e.to_json() for e in entries], indent=2))
    else:
        _render.entries_table(entries, root=scan.root)


def matches(entry: gtcache.EntryInfo, program_glob: str | None, backend_glob: str | None) -> bool:
    if program_glob and not any(
        fnmatch.fnmatchcase(name, program_glob) for name in (entry.program, entry.qualified_program)
    ):
        return False
    return not backend_glob or fnmatch.fnmatchcase(entry.backend, backend_glob)


@click.command(name="info", epilog=EXIT_CODES_HELP)
@click.argument("query")
@json_option
@pass_context
@errors_to_exit_codes
def info_command(obj: Context, query: str, as_json: bool) -> None:
    """Show the entries matching QUERY: a key, a key prefix (4+ digits) or a program name."""
    found = obj.store().resolve(query)
    if as_json:
        click.echo(json.dumps([_render.info_json(e) for e in found], indent=2))
    else:
        _render.info_text(found)


@click.command(name="stats", epilog=EXIT_CODES_HELP)
@click.option("--zero", is_flag=True, help="Forget the recorded runs (hits, misses, time saved).")
@json_option
@pass_context
@errors_to_exit_codes
def stats_command(obj: Context, zero: bool, as_json: bool) -> None:
    """Entries and bytes by backend and gt4py version; hits, misses and time saved by runs."""
    store = obj.store()
    if zero:
        removed = store.zero_ledger()
        if not as_json:
            click.echo(f"Forgot {removed} recorded runs.")
    stats = store.scan().stats()
    ledger = store.ledger()
    if as_json:
        click.echo(json.dumps({"cache_dir": str(store.root), **stats.to_json(), "runs": ledger.to_json()}, indent=2))
    else:
        _render.stats_text(stats, ledger, root=store.root)


COMMANDS = (dir_command, ls_command, info_command, stats_command)
