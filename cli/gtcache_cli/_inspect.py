"""Read-only commands: dir, ls, info, stats."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

import gtcache
from gtcache.policies import Limits, matches
from gtcache.policies import backend_glob as backend_glob_among
from gtcache.store import resolve_store_path
from gtcache_cli import _complete, _render, _text
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    emit,
    filter_options,
    json_option,
    pass_context,
    resolve,
)


@click.command(name="dir", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
def dir_command(obj: Context, as_json: bool) -> None:
    """Print the store's path (with --json, the index's too).

    Symlinks resolved: the path every command uses and prints. One line, the
    store's path only, for $(gtcache dir) in scripts; --json has it as cache_dir
    and where the index is as index_dir (elsewhere with --index-dir).
    """
    settings = obj.settings
    # Where the store would put its index; nothing opened (``dir`` must work on a broken store).
    # Resolved as open_store resolves it: the path 'ls', 'verify' and 'doctor' print too.
    index = resolve_store_path(settings.index_dir) if settings.index_dir is not None else None
    where = gtcache.Store(resolve_store_path(settings.cache_dir), index_dir=index, read_only=True)
    data = {"cache_dir": str(where.root), "index_dir": str(where.index_dir)}
    emit(data, as_json, lambda: click.echo(data["cache_dir"]))


_SORT_KEYS: dict[str, Callable[[gtcache.EntryInfo], Any]] = {
    # By the name the table shows (no module), then the module: 'axpy' before 'diffuse_vn'
    # whatever package each lives in.
    "program": lambda e: (e.program, e.qualified_program, e.backend, e.key),
    "size": lambda e: e.size if e.ok else e.disk_size,  # as SIZE shows it
    "compile": lambda e: e.compile_seconds,
    "created": lambda e: e.created,
    "last-used": lambda e: e.last_used,
    "hits": lambda e: e.hits,
}


@click.command(name="ls", epilog=EXIT_CODES_HELP)
@filter_options
@click.option("--broken", is_flag=True, help="Only broken entries.")
@click.option("--sort", type=click.Choice(list(_SORT_KEYS)), default="program", show_default=True,
              help="Order of the rows; every key but 'program' sorts descending.")
@click.option("--reverse", "-r", is_flag=True, help="The other way round.")
@click.option("--quiet", "-q", is_flag=True, help="Only the full keys, one a line (for scripts: | xargs gtcache rm).")
@click.option("--long", "-l", "long", is_flag=True, help="Program names with their module (as --json has them).")
@click.option("--remote", "remote_url", metavar="URL",
              help="List what this remote holds instead (Redis, WebDAV; not plain HTTP); see docs/remote.md.")
@json_option
@pass_context
def ls_command(
    obj: Context, program_glob: str | None, backend_glob: str | None, broken: bool, sort: str, reverse: bool,
    quiet: bool, long: bool, remote_url: str | None, as_json: bool,
) -> None:
    """List the entries of the store (broken ones included, marked).

    The table fits the terminal (or COLUMNS): KEY, PROGRAM and BACKEND always, then
    SIZE, COMPILE, HITS, LAST USED and STATUS as the width allows (COMPILE drops first,
    STATUS last). Programs show without their module unless --long (or two of one name
    are listed); times are relative.

    With --remote URL: the entries a remote holds (KEY, PROGRAM, BACKEND, SIZE, CREATED,
    PUSHED, as far as it knows); a remote whose protocol cannot list is an error.
    """
    if quiet and as_json:
        raise click.UsageError("--quiet prints keys only; --json prints everything: give one.")
    if remote_url is not None:
        _ls_remote(obj, remote_url, program_glob, backend_glob, broken=broken, sort=sort, reverse=reverse,
                   quiet=quiet, as_json=as_json)
        return
    scan = obj.store(inspect=True).scan()
    chosen = backend_glob_among(backend_glob, (e.backend for e in scan.entries))
    entries = [
        e
        for e in scan.entries
        if matches(e, program_glob, chosen) and (not broken or not e.ok)
    ]
    entries.sort(key=_SORT_KEYS[sort], reverse=(sort != "program") != reverse)
    if quiet:
        click.echo("".join(f"{e.key}\n" for e in entries), nl=False)
        return
    emit([e.to_json() for e in entries], as_json, lambda: _render.entries_table(
        entries, root=scan.root, all_keys=[e.key for e in scan.entries], long=long))


def _ls_remote(
    obj: Context, url: str, program_glob: str | None, backend_glob: str | None, *, broken: bool, sort: str,
    reverse: bool, quiet: bool, as_json: bool,
) -> None:
    import fnmatch

    from gtcache.remote import RemoteError, open_remote

    if broken:
        raise click.UsageError("--broken lists broken entries of the store; a remote holds none (no --remote).")
    if sort not in ("program", "size", "created"):
        raise click.UsageError(f"--sort {sort} is not known of a remote's entries; sort by program, size or created.")
    remote = open_remote(url, obj.settings)
    if (problem := remote.problem()) is not None:
        raise RemoteError(f"Remote '{remote.name}' is not used: {problem}.")
    try:
        listed = remote.listing()
    finally:
        remote.close()
    if listed is None:
        raise RemoteError(f"Remote '{remote.name}' cannot list what it holds: its protocol has no listing"
                          " (plain HTTP; Redis and WebDAV can); 'gtcache pull KEY' fetches by key.")
    chosen = backend_glob_among(backend_glob, (e.backend or "" for e in listed))
    entries = [e for e in listed
               if (program_glob is None or fnmatch.fnmatchcase(e.program or "", program_glob)
                   or fnmatch.fnmatchcase((e.program or "").rpartition(".")[2], program_glob))
               and (chosen is None or fnmatch.fnmatchcase(e.backend or "", chosen))]
    order: dict[str, Callable[[Any], Any]] = {
        "program": lambda e: (e.program or "", e.backend or "", e.key),
        "size": lambda e: e.size or 0, "created": lambda e: e.created or "",
    }
    entries.sort(key=order[sort], reverse=(sort != "program") != reverse)
    if quiet:
        click.echo("".join(f"{e.key}\n" for e in entries), nl=False)
        return
    emit([e.to_json() for e in entries], as_json, lambda: _render.remote_table(entries, name=remote.name))


@click.command(name="info", short_help="Show entries' full records (by key, prefix or program).", epilog=EXIT_CODES_HELP)
@click.argument("query", shell_complete=_complete.entry_queries)
@json_option
@pass_context
def info_command(obj: Context, query: str, as_json: bool) -> None:
    """Show the entries matching QUERY: a key, a key prefix (4+ digits) or a program name."""
    found = resolve(obj.store(inspect=True), query)
    emit([_render.info_json(e) for e in found], as_json, lambda: _render.info_text(found))


@click.command(name="stats", short_help="Hit rate, compile time saved, size against the caps.", epilog=EXIT_CODES_HELP)
@click.option("--zero", is_flag=True, help="Forget the recorded runs (hits, misses, time saved).")
@json_option
@pass_context
def stats_command(obj: Context, zero: bool, as_json: bool) -> None:
    """Hit rate, hits / compiled / bypassed since the last --zero, compile time saved; size and
    files against the caps; entries and bytes by backend and gt4py version (as ccache -s)."""
    store = obj.store(inspect=not zero)
    if zero:
        removed = store.zero_ledger()
        if not as_json:
            click.echo(f"Forgot {_text.plural(removed, 'recorded run')}.")
    stats = store.scan().stats()
    ledger = store.ledger()
    runs = store.ledger_runs()
    zeroed = store.ledger_zeroed()
    since = zeroed or min((str(r.get("ended", "")) for r in runs if r.get("ended")), default=None)
    _, size, files = store.usage()
    try:
        limits, problem = Limits.for_store(store.root, obj.settings, store.trust), None
    except gtcache.GtcacheError as error:
        limits, problem = Limits(), str(error)
    usage = _render.Usage(size=size, files=files, max_size=limits.max_size, max_files=limits.max_files,
                          problem=problem)
    data = {"cache_dir": str(store.root), **stats.to_json(),
            "runs": {**ledger.to_json(), "hit_rate": _render.hit_rate(ledger), "since": since, "zeroed": zeroed},
            "usage": dataclasses.asdict(usage)}
    emit(data, as_json, lambda: _render.stats_text(stats, ledger, root=store.root, usage=usage, since=since, zeroed=zeroed is not None))


COMMANDS = (dir_command, ls_command, info_command, stats_command)
