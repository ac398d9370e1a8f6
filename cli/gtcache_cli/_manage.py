"""Commands that change the store: rm, prune, clear (plan, confirm, execute), verify, reindex."""

from __future__ import annotations

import dataclasses
import re

import click

import gtcache
from gtcache import policies, toolchain
from gtcache_cli import _complete, _render, _text
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    confirm,
    dry_run_option,
    duration_value,
    emit,
    filter_options,
    json_option,
    pass_context,
    resolve,
    size_value,
    yes_option,
)


def _run_plan(store: gtcache.Store, plan: policies.PrunePlan, *, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Print the plan, ask, execute: the one path of every removing command.

    The bytes the plan frees are those its entry folders take on disk (records included),
    what the removal then reports. An entry that cannot be removed (permissions, ...) does
    not stop the others; each is named with its reason, and the command exits 1.
    """
    _json_needs_yes(as_json, yes, dry_run)
    on_disk = {r.entry.key: store.disk_size(r.entry.key) for r in plan.removals}
    freed = sum(on_disk.values())
    remaining = max(store.usage()[1] - freed, 0)
    quarantine = store.quarantined()
    if not plan.removals or dry_run:
        def render() -> None:
            if plan.removals:
                _render.plan_table(plan, on_disk=on_disk, remaining=remaining)
            else:
                click.echo(f"Nothing to remove in '{_text.escape(str(plan.root))}'.")
            _render.quarantine_note(quarantine)

        emit({**plan.to_json(), "freed": freed, "remaining_size": remaining, "dry_run": dry_run,
              **_quarantine_json(quarantine)}, as_json, render)
        return
    if not as_json:
        _render.plan_table(plan, on_disk=on_disk, remaining=remaining)
    confirm(f"Remove {_text.plural(len(plan.removals), 'entry', 'entries')} ({gtcache.format_size(freed)})?", yes=yes)
    outcome = plan.apply(store)

    def report() -> None:
        _render.removal_outcome(outcome)
        _render.quarantine_note(quarantine)

    emit({**plan.to_json(), "remaining_size": remaining, "dry_run": False, **outcome.to_json(),
          **_quarantine_json(quarantine)}, as_json, report)
    if not outcome.ok:
        raise SystemExit(1)


def _quarantine_json(quarantine: tuple[int, int]) -> dict[str, int]:
    """What the text's quarantine note says: broken entries 'verify --repair' moved aside."""
    return {"quarantined": quarantine[0], "quarantine_size": quarantine[1]}


def _json_needs_yes(as_json: bool, yes: bool, dry_run: bool) -> None:
    if as_json and not (yes or dry_run):
        raise click.UsageError("With --json, give --yes (or --dry-run): there is no prompt.")


@click.command(name="rm", short_help="Remove chosen entries (by key, prefix, program or glob).", epilog=EXIT_CODES_HELP)
@click.argument("queries", nargs=-1, shell_complete=_complete.entry_queries)
@filter_options
@dry_run_option
@yes_option
@json_option
@pass_context
def rm_command(
    obj: Context, queries: tuple[str, ...], program_glob: str | None, backend_glob: str | None,
    dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Remove entries: by key, key prefix or program name (QUERIES), or by --program/--backend glob.

    With both, the globs narrow what the QUERIES name (as on ls, prune and export).
    """
    if not queries and not program_glob and not backend_glob:
        raise click.UsageError("Name entries to remove: KEY..., --program GLOB or --backend GLOB.")
    _json_needs_yes(as_json, yes, dry_run)  # whether a store is there or not, the entries found or not
    store = obj.store()
    scan = store.scan()
    chosen: dict[str, gtcache.EntryInfo] = {}
    for query in queries:
        chosen.update((e.key, e) for e in resolve(store, query, scan))
    if not queries:
        chosen = {e.key: e for e in scan.entries}
    backend = policies.backend_glob(backend_glob, (e.backend for e in scan.entries))
    chosen = {k: e for k, e in chosen.items() if policies.matches(e, program_glob, backend)}
    _run_plan(store, policies.plan_removal(scan, chosen), dry_run=dry_run, yes=yes, as_json=as_json)


@click.command(name="prune", short_help="Remove entries by policy, or down to the store's caps.", epilog=EXIT_CODES_HELP)
@click.option("--max-size", callback=size_value, metavar="SIZE",
              help="Remove entries until the store holds at most SIZE (20G = 20*10^9 bytes, 20Gi = 20*2^30, 1e9).")
@click.option("--max-files", type=click.IntRange(min=0), help="Remove entries until the store holds at most N files (inode quotas).")
@click.option("--older-than", callback=duration_value, metavar="DURATION",
              help="Remove entries created longer ago than this (e.g. 7d, 1h30m).")
@click.option("--unused-for", callback=duration_value, metavar="DURATION",
              help="Remove entries not used for this long (e.g. 2w, 36h).")
@click.option("--stale", is_flag=True, help="Remove entries built by another toolchain than this environment's.")
@click.option("--keep-gt4py", help="Remove entries built by gt4py versions not in this comma list.")
@click.option("--broken", is_flag=True, help="Remove broken entries.")
@filter_options
@click.option("--by-value", is_flag=True, help="Under a cap, keep what saves the most compile time per byte.")
@dry_run_option
@yes_option
@json_option
@pass_context
def prune_command(
    obj: Context, max_size: int | None, max_files: int | None, older_than: float | None,
    unused_for: float | None, stale: bool, keep_gt4py: str | None, broken: bool,
    program_glob: str | None, backend_glob: str | None, by_value: bool,
    dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Remove entries by policy. Policies combine; --program/--backend limit what may go.

    Under --max-size/--max-files, least recently used entries go first. Without a policy,
    the store's caps (gtcache config set max-size/max-files, GTCACHE_MAX_SIZE/_FILES) apply,
    as ccache --cleanup. No store at all: nothing to remove (exit 0).
    """
    _json_needs_yes(as_json, yes, dry_run)  # whether a store is there or not
    policy = policies.PrunePolicy(
        max_size=max_size, max_files=max_files, older_than=older_than, unused_for=unused_for,
        stale=toolchain.current_facts() if stale else None,
        keep_gt4py=_versions(keep_gt4py) if keep_gt4py is not None else None,
        broken=broken, program=program_glob, backend=backend_glob, by_value=by_value,
    )
    try:
        store = obj.store()
    except gtcache.NoStoreError as error:  # a CI job's first run prunes before it warms
        if not policy.selects_anything and not policies.Limits.for_store(error.path, obj.settings).active:
            raise _no_policy() from None
        said = f"{_text.escape(str(error))} Nothing to remove."
        emit({"cache_dir": str(error.path), "entries": 0, "freed": 0, "remaining_entries": 0,
              "remaining_size": 0, "removals": [], "dry_run": dry_run, **_quarantine_json((0, 0))},
             as_json, lambda: click.echo(said))
        return
    if not policy.selects_anything:
        limits = policies.Limits.for_store(store.root, obj.settings, store.trust)
        if not limits.active:
            raise _no_policy()
        policy = dataclasses.replace(policy, max_size=limits.max_size, max_files=limits.max_files)
    scan = store.scan()
    # Measured after the scan: an entry removed since (another prune) is not counted twice.
    usage = store.usage_by_key() if policy.max_size is not None or policy.max_files is not None else None
    policy = dataclasses.replace(policy, backend=policies.backend_glob(policy.backend, (e.backend for e in scan.entries)))
    if policy.keep_gt4py and scan.entries and not any(e.gt4py in policy.keep_gt4py for e in scan.entries):
        built = ", ".join(sorted({e.gt4py for e in scan.entries}))
        click.echo(f"Warning: no entry here was built by gt4py {', '.join(sorted(policy.keep_gt4py))}"
                   f" (built by: {_text.escape(built)}); --keep-gt4py keeps none of them.", err=True)
    _run_plan(store, policies.plan_prune(scan, policy, usage=usage), dry_run=dry_run, yes=yes, as_json=as_json)


def _no_policy() -> click.UsageError:
    return click.UsageError(
        "Give a policy: --max-size, --max-files, --older-than, --unused-for, --stale,"
        " --keep-gt4py or --broken (or set a cap: gtcache config set max-size 20G)."
    )


def _versions(value: str) -> frozenset[str]:
    """``--keep-gt4py 1.2.1,1.2.3``: each a version as records hold them (``1.2.3``, ``1.2.3.dev4``)."""
    versions = [v.strip() for v in value.split(",")]
    for version in versions:
        if not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+-]*)", version):
            shown = f"'{_text.escape(version)}'" if version else "an empty item"
            raise click.BadParameter(
                f"{shown} is not a version; give gt4py versions as 'gtcache ls' shows them, e.g. 1.2.1,1.2.3.",
                param_hint="'--keep-gt4py'",
            )
    return frozenset(versions)


@click.command(name="clear", short_help="Remove every entry, quarantine/ and the index.", epilog=EXIT_CODES_HELP)
@click.option("--quarantine", "quarantine_only", is_flag=True,
              help="Only the broken entries verify --repair moved to quarantine/; every entry stays.")
@dry_run_option
@yes_option
@json_option
@pass_context
def clear_command(obj: Context, quarantine_only: bool, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Remove every entry, the index, direct links, and the broken entries verify --repair
    moved to quarantine/ (with --quarantine: only those)."""
    if as_json and not (yes or dry_run):
        raise click.UsageError("With --json, give --yes (or --dry-run): there is no prompt.")
    store = obj.store()
    if quarantine_only:
        entries = size = 0
    else:
        entries = len(store.scan().entries)  # opens the index first: a bad --index-dir stops here, nothing removed
        _, size, _ = store.usage()
    quarantined, quarantine_size = store.quarantined()
    root = _text.escape(str(store.root))
    data = {"cache_dir": str(store.root), "entries": entries, "quarantined": quarantined,
            "size": size + quarantine_size, "dry_run": dry_run}
    parts = [] if quarantine_only else [_text.plural(entries, "entry", "entries")]
    if quarantined:
        parts.append(_text.plural(quarantined, "quarantined entry", "quarantined entries"))
    what = " and ".join(parts)
    if not entries and not quarantined:
        empty = f"quarantine/ of '{root}' is empty" if quarantine_only else f"'{root}' is empty"
        emit({**data, "freed": 0}, as_json, lambda: click.echo(f"Nothing to clear: {empty}."))
        return
    if dry_run:
        emit({**data, "freed": 0}, as_json, lambda: click.echo(
            f"Would remove {what} ({gtcache.format_size(size + quarantine_size)}) from '{root}'."))
        return
    confirm(f"Remove {what} ({gtcache.format_size(size + quarantine_size)}) from '{root}'?", yes=yes)
    freed = store.clear_quarantine() if quarantine_only else store.clear()
    emit({**data, "freed": freed}, as_json, lambda: click.echo(f"Removed {what}, freed {gtcache.format_size(freed)}."))


@click.command(name="verify", short_help="Check records, checksums, links and left-overs; --repair.", epilog=EXIT_CODES_HELP)
@click.option("--repair", is_flag=True, help="Quarantine broken entries, remove left-overs and emptied refused"
              " shard folders (never a chmod), rebuild the index.")
@json_option
@pass_context
def verify_command(obj: Context, repair: bool, as_json: bool) -> None:
    """Check every entry's record and checksums, links, left-overs and the index.

    Also the shard folders whose owner or mode lookups refuse (refused-folder).
    Exit 1 while problems remain.
    """
    report = policies.verify(obj.store(inspect=not repair), repair=repair)
    emit(report.to_json(), as_json, lambda: _render.verify_text(report))
    if not report.ok:
        raise SystemExit(1)


@click.command(name="reindex", short_help="Rebuild the index from the entry folders.", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
def reindex_command(obj: Context, as_json: bool) -> None:
    """Rebuild the index from the entry folders (it is rebuilt on its own when unreadable)."""
    store = obj.store()
    scan = store.rebuild_index()
    if scan.index != "rebuilt":
        raise gtcache.GtcacheError(f"The index of '{store.root}' was not rebuilt: another process holds it locked,"
                                   " or it cannot be made there; it is left as it is (run reindex again later).")
    data = {"entries": len(scan.entries), "broken": len(scan.broken), "index": scan.index}
    emit(data, as_json, lambda: click.echo(
        f"Indexed {_text.plural(len(scan.entries), 'entry', 'entries')} ({len(scan.broken)} broken)."))


COMMANDS = (rm_command, prune_command, clear_command, verify_command, reindex_command)
