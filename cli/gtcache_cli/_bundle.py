"""``gtcache export`` / ``gtcache import``: move entries between stores as one file (or a pipe)."""

from __future__ import annotations

import json
import pathlib
import sys

import click

import gtcache
from gtcache import bundle, policies, toolchain
from gtcache.errors import EntryNotFoundError, GtcacheError
from gtcache.store import format_size
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    filter_options,
    json_option,
    pass_context,
)
from gtcache_cli._errors import OutputStream
from gtcache_cli._text import escape, plural


@click.command(name="export", short_help="Write entries to one checked, optionally signed bundle.", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=str))
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@filter_options
@json_option
@pass_context
def export_command(
    obj: Context, file: str, force: bool, program_glob: str | None, backend_glob: str | None, as_json: bool
) -> None:
    """Write the store's sound entries (or those matching --program/--backend) to FILE (.tar.gz).

    FILE '-' writes to standard output (the report then goes to standard error).
    Signed (HMAC-SHA256) when GTCACHE_BUNDLE_KEY is set. The same entries give the same bytes.
    """
    trust = obj.settings.bundle_trust()
    mtime = obj.settings.bundle_mtime()
    store = obj.store()
    scan = store.scan()
    chosen = policies.backend_glob(backend_glob, (e.backend for e in scan.entries))
    entries = [e for e in scan.entries if policies.matches(e, program_glob, chosen)]
    if (program_glob or backend_glob) and not any(e.ok for e in entries):
        # A typo, or only broken entries (never exported): no empty bundle written or --force replaced.
        asked = " ".join(f"--{o} {g}" for o, g in (("program", program_glob), ("backend", backend_glob)) if g)
        if entries:
            does = "does" if len(entries) == 1 else "do"
            raise GtcacheError(f"No sound entry matches '{asked}' ({plural(len(entries), 'broken entry', 'broken entries')}"
                               f" {does}; broken entries are never exported: 'gtcache verify' names them).")
        raise EntryNotFoundError(asked)
    if file == "-":
        if sys.stdout.isatty():
            raise bundle.BundleError("Standard output is a terminal; redirect it to a file or a pipe.")
        output = OutputStream(sys.stdout.buffer)
        report = bundle.write_bundle(output, store, entries, key=trust.key, mtime=mtime)  # type: ignore[arg-type]
        output.flush()
    else:
        report = bundle.export_bundle(store, entries, pathlib.Path(file), key=trust.key, force=force, mtime=mtime)
    to_stderr = file == "-"
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2), err=to_stderr)
        return
    signed = ", signed" if report.signed else ""
    where = "standard output" if to_stderr else f"'{file}'"
    exported = plural(report.entries, "entry", "entries")
    click.echo(f"Exported {exported} to {where} ({format_size(report.size)}{signed}).", err=to_stderr)
    if report.left_out:
        left_out = plural(len(report.left_out), "broken entry", "broken entries")
        click.echo(f"Left out {left_out} ('gtcache verify' names them).", err=to_stderr)


@click.command(name="import", short_help="Check a bundle and add its entries to the store.", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=str))
@click.option("--force", is_flag=True, help="Import entries built for another gt4py, Python or machine too.")
@click.option("--require-signature", is_flag=True,
              help="Refuse unsigned bundles (also: GTCACHE_BUNDLE_REQUIRE_SIGNED=1, or a key set).")
@json_option
@pass_context
def import_command(obj: Context, file: str, force: bool, require_signature: bool, as_json: bool) -> None:
    """Check every member and checksum of the bundle FILE ('-': standard input), then add its entries.

    Existing entries are kept; broken ones at a bundled key are replaced. With
    GTCACHE_BUNDLE_KEY set, unsigned or wrongly signed bundles are refused.
    """
    trust = obj.settings.bundle_trust()
    required = require_signature or trust.require_signed
    facts = toolchain.current_facts()
    if file == "-" and sys.stdin is None:  # (started with it closed: ``gtcache import - <&-``)
        raise bundle.BundleError("Standard input is closed; pipe a bundle in.")
    if file == "-" and sys.stdin.isatty():
        raise bundle.BundleError("Standard input is a terminal; pipe a bundle in.")
    # The store is opened, or made, only once the bundle's manifest and signature check out:
    # a file that is no bundle, or is signed with another key, leaves a new --cache-dir unmade.
    def store() -> gtcache.Store:
        return obj.store(create=True)

    if file == "-":
        report = bundle.read_bundle(sys.stdin.buffer, store, key=trust.key, require_signature=required,
                                    force=force, facts=facts, name="<stdin>")
    else:
        report = bundle.import_bundle(store, pathlib.Path(file), key=trust.key, require_signature=required,
                                      force=force, facts=facts)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    replaced = f" ({len(report.replaced)} replaced broken ones)" if report.replaced else ""
    there = "was" if len(report.existing) == 1 else "were"
    click.echo(f"Imported {plural(len(report.imported), 'entry', 'entries')}{replaced}; {len(report.existing)}"
               f" {there} there already; {len(report.skipped)} skipped.")
    for key, reason in sorted(report.skipped.items()):
        click.echo(f"skipped {escape(key[:12])}: {escape(reason)} (--force imports it)")


COMMANDS = (export_command, import_command)
