"""The ``gtcache`` command: parses, calls one library function, renders what it returns.

Exit codes: 0 success (an empty store, nothing to do); 1 an operational error
(a gtcache error: unreadable store, unknown entry, ...); 2 a usage error (bad
option or argument). ``--json`` prints the same data as the table.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

import gtcache
from gtcache_cli import _render

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES_HELP = """\b
Exit codes:
  0  success (also: the store is empty, nothing to do)
  1  operational error (unreadable store, unknown entry, ...)
  2  usage error (bad option or argument)"""


@dataclasses.dataclass
class Context:
    settings: gtcache.Settings
    _store: gtcache.Store | None = None

    def store(self, *, create: bool = True) -> gtcache.Store:
        if self._store is None:
            self._store = gtcache.open_store(
                self.settings.cache_dir, index_dir=self.settings.index_dir, create=create
            )
        return self._store


pass_context = click.make_pass_decorator(Context)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        func
    )


def _errors_to_exit_codes(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except gtcache.GtcacheError as error:
            raise click.ClickException(str(error)) from None

    return wrapper  # type: ignore[return-value]


@click.group(epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(gtcache.__version__, prog_name="gtcache")
@click.option(
    "--cache-dir",
    envvar="GTCACHE_DIR",
    type=click.Path(file_okay=False, path_type=str),
    help="The store [env: GTCACHE_DIR; default: the user cache dir].",
)
@click.option(
    "--index-dir",
    envvar="GTCACHE_INDEX_DIR",
    type=click.Path(file_okay=False, path_type=str),
    help="Where the index lives, e.g. node-local disk [env: GTCACHE_INDEX_DIR; default: inside the store].",
)
@click.pass_context
def cli(ctx: click.Context, cache_dir: str | None, index_dir: str | None) -> None:
    """Inspect and manage a gtcache store of compiled GT4Py programs."""
    ctx.obj = Context(settings=gtcache.Settings.from_env(cache_dir=cache_dir, index_dir=index_dir))


@cli.command(name="dir", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
@_errors_to_exit_codes
def dir_command(obj: Context, as_json: bool) -> None:
    """Print where the store (and its index) is."""
    settings = obj.settings
    data = {
        "cache_dir": str(settings.cache_dir),
        "index_dir": str(settings.index_dir or settings.cache_dir / "index"),
    }
    click.echo(json.dumps(data, indent=2) if as_json else data["cache_dir"])


@cli.command(name="ls", epilog=EXIT_CODES_HELP)
@click.option("--program", "program_glob", help="Only programs whose name matches this glob.")
@click.option("--backend", "backend_glob", help="Only backends whose name matches this glob.")
@click.option("--broken", is_flag=True, help="Only broken entries.")
@click.option(
    "--sort",
    type=click.Choice(["program", "size", "created", "last-used", "hits"]),
    default="program",
    show_default=True,
)
@json_option
@pass_context
@_errors_to_exit_codes
def ls_command(
    obj: Context,
    program_glob: str | None,
    backend_glob: str | None,
    broken: bool,
    sort: str,
    as_json: bool,
) -> None:
    """List the entries of the store (broken ones included, marked)."""
    scan = obj.store().scan()
    entries = [
        e
        for e in scan.entries
        if (program_glob is None or _matches(program_glob, e.program, e.qualified_program))
        and (backend_glob is None or fnmatch.fnmatchcase(e.backend, backend_glob))
        and (not broken or not e.ok)
    ]
    entries.sort(key=_SORT_KEYS[sort], reverse=sort in ("size", "created", "last-used", "hits"))
    if as_json:
        click.echo(json.dumps([e.to_json() for e in entries], indent=2))
    else:
        _render.entries_table(entries, root=scan.root)


_SORT_KEYS: dict[str, Callable[[gtcache.EntryInfo], Any]] = {
    "program": lambda e: (e.qualified_program, e.backend, e.key),
    "size": lambda e: e.size,
    "created": lambda e: e.created,
    "last-used": lambda e: e.last_used,
    "hits": lambda e: e.hits,
}


def _matches(pattern: str, *names: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for name in names)


@cli.command(name="info", epilog=EXIT_CODES_HELP)
@click.argument("query")
@json_option
@pass_context
@_errors_to_exit_codes
def info_command(obj: Context, query: str, as_json: bool) -> None:
    """Show the entries matching QUERY: a key, a key prefix (4+ digits) or a program name."""
    matches = obj.store().resolve(query)
    if as_json:
        click.echo(json.dumps([_render.info_json(e) for e in matches], indent=2))
    else:
        _render.info_text(matches)


@cli.command(name="stats", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
@_errors_to_exit_codes
def stats_command(obj: Context, as_json: bool) -> None:
    """Summarise the store: entries and bytes by backend and gt4py version, hits, time saved."""
    scan = obj.store().scan()
    stats = scan.stats()
    if as_json:
        click.echo(json.dumps({"cache_dir": str(scan.root), **stats.to_json()}, indent=2))
    else:
        _render.stats_text(stats, root=scan.root)


@cli.command(name="clear", epilog=EXIT_CODES_HELP)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_context
@_errors_to_exit_codes
def clear_command(obj: Context, yes: bool) -> None:
    """Remove every entry (and the index) from the store."""
    store = obj.store()
    scan = store.scan()
    if not scan.entries:
        click.echo(f"Nothing to clear: '{scan.root}' is empty.")
        return
    if not yes:
        click.confirm(
            f"Remove {len(scan.entries)} entries ({gtcache.format_size(scan.size)})"
            f" from '{scan.root}'?",
            abort=True,
        )
    freed = store.clear()
    click.echo(f"Removed {len(scan.entries)} entries, freed {gtcache.format_size(freed)}.")


@cli.command(name="reindex", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
@_errors_to_exit_codes
def reindex_command(obj: Context, as_json: bool) -> None:
    """Rebuild the index from the entry folders (it is rebuilt on its own when unreadable)."""
    scan = obj.store().rebuild_index()
    data = {"entries": len(scan.entries), "broken": len(scan.broken), "index": scan.index}
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"Indexed {data['entries']} entries ({data['broken']} broken).")


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="gtcache")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
