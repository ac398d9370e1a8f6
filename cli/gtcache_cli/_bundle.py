"""``gtcache export`` / ``gtcache import``: move entries between stores as one file."""

from __future__ import annotations

import json
import os
import pathlib

import click

from gtcache import bundle, toolchain
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    errors_to_exit_codes,
    filter_options,
    json_option,
    pass_context,
)
from gtcache_cli._inspect import matches


def _key() -> bytes | None:
    value = os.environ.get(bundle.ENV_KEY)
    return value.encode() if value else None


@click.command(name="export", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(dir_okay=False, path_type=pathlib.Path))
@filter_options
@json_option
@pass_context
@errors_to_exit_codes
def export_command(obj: Context, file: pathlib.Path, program_glob: str | None, backend_glob: str | None, as_json: bool) -> None:
    """Write the store's sound entries (or those matching --program/--backend) to FILE (.tar.gz).

    Signed (HMAC-SHA256) when GTCACHE_BUNDLE_KEY is set.
    """
    store = obj.store()
    entries = [e for e in store.scan().entries if matches(e, program_glob, backend_glob)]
    report = bundle.export_bundle(store, entries, file, key=_key())
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        signed = ", signed" if report.signed else ""
        click.echo(f"Exported {report.entries} entries to '{file}' ({report.size} bytes{signed}).")


@click.command(name="import", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path))
@click.option("--force", is_flag=True, help="Import entries built for another gt4py, Python or machine too.")
@json_option
@pass_context
@errors_to_exit_codes
def import_command(obj: Context, file: pathlib.Path, force: bool, as_json: bool) -> None:
    """Check every member and checksum of the bundle FILE, then add its entries to the store.

    Existing entries are kept. With GTCACHE_BUNDLE_KEY set, unsigned or wrongly signed
    bundles are refused.
    """
    report = bundle.import_bundle(obj.store(), file, key=_key(), force=force, facts=toolchain.current_facts())
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    click.echo(f"Imported {len(report.imported)} entries; {len(report.existing)} were there already;"
               f" {len(report.skipped)} skipped.")
    for key, reason in sorted(report.skipped.items()):
        click.echo(f"skipped {key[:12]}: {reason} (--force imports it)")


COMMANDS = (export_command, import_command)
