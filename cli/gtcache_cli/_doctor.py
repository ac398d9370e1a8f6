"""``gtcache doctor``: is gtcache active in this interpreter, and if not, why (renders ``gtcache.doctor``)."""

from __future__ import annotations

import json

import click

from gtcache_cli._common import EXIT_CODES_HELP, Context, json_option, pass_context
from gtcache_cli._text import escape, plural


@click.command(name="doctor", short_help="Say whether runs in this interpreter are served from the store.", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
def doctor_command(obj: Context, as_json: bool) -> None:
    """Say whether model runs in this interpreter are served from the store, and if not, why.

    Shows the versions, the start-up hook, every GTCACHE_* setting and where it came
    from (and a note on gt4py's persistent build cache, which can store stale builds),
    the store (owner, mode, free space, locking, the folders whose owner or mode
    lookups refuse), the read-only tiers, each remote (GTCACHE_REMOTE) and whether it
    answers, and the toolchain facts in keys. Exits 1, naming the reason, when GTCACHE_DIR
    is set but a model run would not be served. Run it with the model's interpreter
    (`python -m gtcache_cli doctor`) if that is not the one of this `gtcache`.
    """
    from gtcache.doctor import diagnose

    report = diagnose(obj.settings)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _text(report)
    if report.problem is not None:
        if as_json:
            raise SystemExit(1)
        raise click.ClickException(report.problem)


def _text(report: object) -> None:
    from gtcache.doctor import DoctorReport
    from gtcache.store import format_size

    assert isinstance(report, DoctorReport)
    echo = click.echo
    versions = ", ".join(f"{name} {version or '(not installed)'}" for name, version in report.versions.items())
    echo(f"Interpreter:   {report.interpreter}")
    echo(f"Versions:      {versions}")
    echo(f"gt4py:         {'supported' if report.gt4py_supported else report.gt4py_problem}")
    hooks = ", ".join(str(path) for path in report.startup_hook) or "NOT INSTALLED in this interpreter"
    echo(f"Start-up hook: {hooks}")
    dir_set = any(s.name == "GTCACHE_DIR" and s.source == "environment" for s in report.settings)
    state = "active in this process" if report.hook_active else (
        "NOT ACTIVE" if report.enabled else
        "not active (GTCACHE turns it off)" if dir_set else "not active (GTCACHE_DIR is not set)")
    echo(f"gt4py hook:    {state}")
    for warning in report.hook_warnings:
        echo(f"               warned: {warning}")
    echo("Settings:")
    width = max(len(s.name) for s in report.settings)
    for setting in report.settings:
        echo(f"  {setting.name:<{width}}  {setting.value}  [{setting.source}]")
    for note in report.gt4py_notes:
        echo(f"  note: {note}")
    store = report.store
    given = f"  (given as {store.given_path})" if store.given_path is not None else ""
    echo(f"Store:         {store.path}{given}")
    if store.exists:
        echo(f"  layout {store.layout_version if store.layout_version is not None else '?'},"
             f" owner {store.owner}, mode {store.mode}, {'writable' if store.writable else 'not writable'}")
    else:
        echo("  does not exist yet")
    free = format_size(store.free_bytes) if store.free_bytes is not None else "?"
    echo(f"  free space {free}, locking {store.locking or '-'}, index {store.index_dir}")
    for note in store.notes:
        echo(f"  note: {note}")
    if store.problem:
        echo(f"  problem: {store.problem}")
    _refused(store.refused)
    for tier in store.tiers:
        echo(f"Read-only tier: {tier.path}  {tier.problem or 'ok'}")
        _refused(tier.refused)
    for remote in report.remotes:
        trusted = ", trusted" if remote.trusted else ""
        echo(f"Remote:        {escape(remote.name)} ({remote.mode}{trusted})  {escape(remote.problem or 'answers')}")
    echo("Toolchain (key ingredients):")
    for name, value in report.toolchain.items():
        echo(f"  {name}: {value}")
    for kind, facts in report.gpu.items():
        echo(f"GPU ({kind}, key ingredients of its variants):")
        for name, value in facts.items():
            echo(f"  {name}: {value}")
    if not report.gpu:
        echo("GPU:           no toolkit (nvcc, hipcc) found, no device arch known")
    if report.problem is None:
        echo(report.verdict)


def _refused(refused: object) -> None:
    """The folders lookups refuse for their owner or mode: counts, the first few, the fix."""
    from gtcache.doctor import RefusedReport

    if not isinstance(refused, RefusedReport):
        return  # not looked at: the store cannot be opened, or does not exist
    if not refused.folders:
        click.echo("  folders lookups refuse: none")
        return
    lost = [f"{plural(refused.entries, 'entry', 'entries')} never loaded"] if refused.entries else []
    if refused.links:
        lost.append(f"{plural(refused.links, 'direct link')} not followed")
    click.echo(f"  folders lookups refuse (owner or mode): {plural(refused.folders, 'folder')}"
               + "".join(f", {item}" for item in lost))
    for folder in refused.first:  # the reason without the fix, which follows once
        click.echo(f"    {escape(folder.reason.partition(', so it is not loaded')[0])}")
    if (more := refused.folders - len(refused.first)) > 0:
        click.echo(f"    ... and {more} more ('gtcache verify' names each entry)")
    click.echo(f"  fix: {escape(refused.fix or '')}")


COMMANDS = (doctor_command,)
