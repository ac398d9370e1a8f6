"""Commands that change the store: rm, prune, clear (plan, confirm, execute), verify, reindex."""

from __future__ import annotations

import json

import click

import gtcache
from gtcache import policies, toolchain
from gtcache_cli import _render
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    confirm,
    dry_run_option,
    duration_value,
    errors_to_exit_codes,
    filter_options,
    json_option,
    pass_context,
    size_value,
    yes_option,
)
from gtcache_cli._inspect import matches


def _run_plan(store: gtcache.Store, plan: policies.PrunePlan, *, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Print the plan, ask, execute: the one path of every removing command."""
    if as_json and not (yes or dry_run):
        raise click.UsageError("With --json, give --yes (or --dry-run): there is no prompt.")
    if as_json:
        click.echo(json.dumps({**plan.to_json(), "dry_run": dry_run}, indent=2))
    if not plan.removals:
        if not as_json:
            click.echo(f"Nothing to remove in '{plan.root}'.")
        return
    if not as_json:
        _render.plan_table(plan)
    if dry_run:
        return
    confirm(f"Remove {len(plan.removals)} entries ({plan.freed_str})?", yes=yes)
    freed = plan.execute(store)
    if not as_json:
        click.echo(f"Removed {len(plan.removals)} entries, freed {gtcache.format_size(freed)}.")


@click.command(name="rm", epilog=EXIT_CODES_HELP)
@click.argument("queries", nargs=-1)
@filter_options
@dry_run_option
@yes_option
@json_option
@pass_context
@errors_to_exit_codes
def rm_command(
    obj: Context, queries: tuple[str, ...], program_glob: str | None, backend_glob: str | None,
    dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Remove entries: by key, key prefix or program name (QUERIES), or by --program/--backend glob."""
    if not queries and not program_glob and not backend_glob:
        raise click.UsageError("Name entries to remove: KEY..., --program GLOB or --backend GLOB.")
    store = obj.store()
    scan = store.scan()
    chosen: dict[str, gtcache.EntryInfo] = {}
    for query in queries:
        chosen.update((e.key, e) for e in store.resolve(query, scan))
    if program_glob or backend_glob:
        chosen.update((e.key, e) for e in scan.entries if matches(e, program_glob, backend_glob))
    removals = tuple(policies.Removal(e, "asked for") for e in scan.entries if e.key in chosen)
    plan = policies.PrunePlan(
        root=scan.root,
        removals=removals,
        remaining_entries=len(scan.entries) - len(removals),
        remaining_size=scan.size - sum(r.entry.size for r in removals),
    )
    _run_plan(store, plan, dry_run=dry_run, yes=yes, as_json=as_json)


@click.command(name="prune", epilog=EXIT_CODES_HELP)
@click.option("--max-size", callback=size_value, help="Remove entries until the store holds at most SIZE (e.g. 20G).")
@click.option("--max-files", type=click.IntRange(min=0), help="Remove entries until the store holds at most N files (inode quotas).")
@click.option("--older-than", callback=duration_value, help="Remove entries created longer ago than this (e.g. 7d).")
@click.option("--unused-for", callback=duration_value, help="Remove entries not used for this long (e.g. 2w).")
@click.option("--stale", is_flag=True, help="Remove entries built by another toolchain than this environment's.")
@click.option("--keep-gt4py", help="Remove entries built by gt4py versions not in this comma list.")
@click.option("--broken", is_flag=True, help="Remove broken entries.")
@filter_options
@click.option("--by-value", is_flag=True, help="Under a cap, keep what saves the most compile time per byte.")
@dry_run_option
@yes_option
@json_option
@pass_context
@errors_to_exit_codes
def prune_command(
    obj: Context, max_size: int | None, max_files: int | None, older_than: float | None,
    unused_for: float | None, stale: bool, keep_gt4py: str | None, broken: bool,
    program_glob: str | None, backend_glob: str | None, by_value: bool,
    dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Remove entries by policy. Policies combine; --program/--backend limit what may go.

    Under --max-size/--max-files, least recently used entries go first.
    """
    policy = policies.PrunePolicy(
        max_size=max_size, max_files=max_files, older_than=older_than, unused_for=unused_for,
        stale=toolchain.current_facts() if stale else None,
        keep_gt4py=frozenset(v.strip() for v in keep_gt4py.split(",")) if keep_gt4py else None,
        broken=broken, program=program_glob, backend=backend_glob, by_value=by_value,
    )
    if not policy.selects_anything:
        raise click.UsageError(
            "Give a policy: --max-size, --max-files, --older-than, --unused-for, --stale,"
            " --keep-gt4py or --broken."
        )
    store = obj.store()
    _run_plan(store, policies.plan_prune(store.scan(), policy), dry_run=dry_run, yes=yes, as_json=as_json)


@click.command(name="clear", epilog=EXIT_CODES_HELP)
@yes_option
@pass_context
@errors_to_exit_codes
def clear_command(obj: Context, yes: bool) -> None:
    """Remove every entry (and the index and direct links) from the store."""
    store = obj.store()
    scan = store.scan()
    if not scan.entries:
        click.echo(f"Nothing to clear: '{scan.root}' is empty.")
        return
    confirm(f"Remove {len(scan.entries)} entries ({gtcache.format_size(scan.size)}) from '{scan.root}'?", yes=yes)
    freed = store.clear()
    click.echo(f"Removed {len(scan.entries)} entries, freed {gtcache.format_size(freed)}.")


@click.command(name="verify", epilog=EXIT_CODES_HELP)
@click.option("--repair", is_flag=True, help="Quarantine broken entries, remove left-overs, rebuild the index.")
@json_option
@pass_context
@errors_to_exit_codes
def verify_command(obj: Context, repair: bool, as_json: bool) -> None:
    """Check every entry's record and checksums, links, left-overs and the index.

    Exit 1 while problems remain.
    """
    report = policies.verify(obj.store(), repair=repair)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _render.verify_text(report)
    if not report.ok:
        raise SystemExit(1)


@click.command(name="reindex", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
@errors_to_exit_codes
def reindex_command(obj: Context, as_json: bool) -> None:
    """Rebuild the index from the entry folders (it is rebuilt on its own when unreadable)."""
    scan = obj.store().rebuild_index()
    data = {"entries": len(scan.entries), "broken": len(scan.broken), "index": scan.index}
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"Indexed {data['entries']} entries ({data['broken']} broken).")


COMMANDS = (rm_command, prune_command, clear_command, verify_command, reindex_command)
