"""``gtcache push`` / ``gtcache pull``: move entries to and from remote tiers (docs/remote.md)."""

from __future__ import annotations

from typing import Any

import click

from gtcache import toolchain
from gtcache.errors import GtcacheError
from gtcache.policies.config import FILE_SOURCE, remote_urls
from gtcache.remote import Remote, RemoteError, open_remote
from gtcache.store import Store, is_key
from gtcache_cli import _complete
from gtcache_cli._common import EXIT_CODES_HELP, Context, emit, json_option, pass_context, resolve
from gtcache_cli._text import escape, plural

_REMOTE_HELP = "A remote URL (repeatable) [default: GTCACHE_REMOTE]; see docs/remote.md."


def _remotes(obj: Context, urls: tuple[str, ...], *, writable: bool) -> list[Remote]:
    settings = obj.settings
    chosen, source = (urls, "--remote") if urls else remote_urls(settings)
    if not chosen:
        raise GtcacheError("No remote: give --remote URL, set GTCACHE_REMOTE or [remote] urls in the store's gtcache.toml.")
    remotes = [open_remote(url, settings, from_file=source == FILE_SOURCE) for url in chosen]
    for remote in remotes:
        if (problem := remote.problem()) is not None:
            raise RemoteError(f"Remote '{remote.name}' is not used: {problem}.")
    if writable:
        remotes = [r for r in remotes if r.writable] if not urls else remotes
        if not remotes:
            raise RemoteError("No read-write remote (GTCACHE_REMOTE, gtcache.toml [remote]); add ?mode=read-write to a URL.")
        for remote in remotes:
            if not remote.writable:
                raise RemoteError(f"Remote '{remote.name}' is read-only; add ?mode=read-write to its URL to push to it.")
    return remotes


@click.command(name="push", short_help="Upload entries to the read-write remote tiers.", epilog=EXIT_CODES_HELP)
@click.argument("queries", nargs=-1, shell_complete=_complete.entry_queries)
@click.option("--remote", "urls", multiple=True, help=_REMOTE_HELP)
@click.option("--force", is_flag=True, help="Upload entries the remote has already, too.")
@json_option
@pass_context
def push_command(obj: Context, queries: tuple[str, ...], urls: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Upload entries (keys, key prefixes or program names; none: every sound entry), each as a
    signed single-entry bundle, to every read-write remote.

    Signed with GTCACHE_BUNDLE_KEY; without it only to a remote declared ?trusted=1.
    """
    remotes = _remotes(obj, urls, writable=True)
    store = obj.store()
    scan = store.scan()
    if queries:
        keys = sorted({e.key for q in queries for e in resolve(store, q, scan)})
    else:
        keys = sorted(e.key for e in scan.entries if e.problem is None)
    results = push_keys(store, remotes, keys, force=force)
    emit(results, as_json, lambda: render_pushed(results))


def writable_remotes(obj: Context, command: str) -> list[Remote]:
    """The read-write remotes configured for the store (``GTCACHE_REMOTE``, ``[remote]``), each
    usable; ``RemoteError`` saying how to configure one when there is none."""
    urls, source = remote_urls(obj.settings)
    remotes = [r for r in (open_remote(url, obj.settings, from_file=source == FILE_SOURCE) for url in urls) if r.writable]
    if not remotes:
        raise RemoteError(f"{command}: no read-write remote to push to; name one with ?mode=read-write in"
                          " GTCACHE_REMOTE or in [remote] urls of the store's gtcache.toml.")
    for remote in remotes:
        if (problem := remote.problem()) is not None:
            raise RemoteError(f"Remote '{remote.name}' is not used: {problem}.")
    return remotes


def push_keys(store: Store, remotes: list[Remote], keys: list[str], *, force: bool = False) -> list[dict[str, Any]]:
    """Push entries ``keys`` of ``store`` to each of ``remotes``: what each got and had already."""
    results: list[dict[str, Any]] = []
    for remote in remotes:
        pushed: list[str] = []
        existing: list[str] = []
        try:
            for key in keys:
                (pushed if remote.push(store, key, force=force) else existing).append(key)
        finally:
            remote.close()
        results.append({"remote": remote.name, "pushed": pushed, "existing": existing})
    return results


def render_pushed(results: list[dict[str, Any]]) -> None:
    for result in results:
        click.echo(f"Pushed {plural(len(result['pushed']), 'entry', 'entries')} to '{escape(str(result['remote']))}'"
                   f" ({len(result['existing'])} there already).")


@click.command(name="pull", short_help="Copy entries from a remote tier into the store.", epilog=EXIT_CODES_HELP)
@click.argument("keys", nargs=-1)
@click.option("--remote", "urls", multiple=True, help=_REMOTE_HELP)
@click.option("--force", is_flag=True, help="Pull entries built for another gt4py, Python or machine too.")
@json_option
@pass_context
def pull_command(obj: Context, keys: tuple[str, ...], urls: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Copy entries (full keys; none: all a remote lists, where its protocol can list) from the
    remotes, in order, into the store: each verified, then published atomically.

    A KEY that no remote has is an error (exit 1), after the others were pulled.
    """
    for key in keys:
        if not is_key(key):
            raise click.BadParameter(f"'{key}' is not a key (32 hex digits).", param_hint="KEY")
    remotes = _remotes(obj, urls, writable=False)
    store = obj.store(create=True)
    facts = toolchain.current_facts()
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        for remote in remotes:
            listed = remote.keys()
            if listed is None:
                raise RemoteError(f"Remote '{remote.name}' cannot list what it holds (HTTP); name the keys to pull.")
            wanted.extend(k for k in listed if k not in wanted)
    pulled: list[str] = []
    existing: list[str] = []
    skipped: dict[str, str] = {}
    missing: list[str] = []
    for key in wanted:
        for remote in remotes:
            report = remote.fetch_report(store, key, facts=facts, force=force)
            if report is not None:
                pulled.extend(report.imported)
                existing.extend(report.existing)
                skipped.update(report.skipped)
                break
        else:
            missing.append(key)
    for remote in remotes:
        remote.close()
    result = {"pulled": pulled, "existing": existing, "skipped": skipped, "missing": missing}

    def render() -> None:
        click.echo(f"Pulled {plural(len(pulled), 'entry', 'entries')}; {len(existing)} there already;"
                   f" {len(skipped)} skipped.")
        for key, reason in sorted(skipped.items()):
            click.echo(f"skipped {escape(key[:12])}: {escape(reason)} (--force pulls it)")

    emit(result, as_json, render)
    if missing:
        names = ", ".join(f"'{k}'" for k in missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise RemoteError(f"{plural(len(missing), 'entry', 'entries')} on none of the remotes: {names}.")


COMMANDS = (push_command, pull_command)
