"""``gtcache warm``: pre-compile declared program variants into the store."""

from __future__ import annotations

import json
import pathlib
import sys

import click

from gtcache_cli import _render
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    duration_value,
    errors_to_exit_codes,
    json_option,
    pass_context,
    size_value,
)


@click.command(name="warm", epilog=EXIT_CODES_HELP)
@click.argument("modules", nargs=-1)
@click.option("--manifest", "manifests", multiple=True, type=click.Path(dir_okay=False, path_type=pathlib.Path),
              help="A TOML manifest of programs x backends x static args x grids (docs/warm.md).")
@click.option("--from-ledger", is_flag=True, help="The variants earlier runs against this store used.")
@click.option("--backend", "backends", multiple=True, help="Backends for programs found in MODULES (default: their own).")
@click.option("--grid", metavar="MODULE:CALLABLE", help="Offset provider for programs from MODULES and the ledger.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parallel compilations [default: the CPUs available].")
@click.option("--max-memory", callback=size_value, help="Memory budget for parallel compilations [default: 80% of available].")
@click.option("--memory-per-job", callback=size_value, default="2G", show_default=True,
              help="What one compilation may need; jobs are capped at max-memory / this.")
@click.option("--timeout", callback=duration_value, help="Give up on a variant after this long (e.g. 30m).")
@click.option("--scheduler", metavar="ADDRESS", help="Run the jobs on this dask.distributed scheduler.")
@click.option("--dry-run", "-n", is_flag=True, help="List the variants and their keys; compile nothing.")
@json_option
@pass_context
@errors_to_exit_codes
def warm_command(
    obj: Context, modules: tuple[str, ...], manifests: tuple[pathlib.Path, ...], from_ledger: bool,
    backends: tuple[str, ...], grid: str | None, jobs: int | None, max_memory: int | None,
    memory_per_job: int, timeout: float | None, scheduler: str | None, dry_run: bool, as_json: bool,
) -> None:
    """Compile program variants into the store before they are needed (CI, model set-up).

    Variants come from MODULES (every gt4py program they define), --manifest files and
    --from-ledger. Each distinct variant compiles once, in a worker process of its own;
    stored ones are skipped. Exit 1 when any variant failed.
    """
    from gtcache import warm

    store = obj.store()
    try:
        specs = [spec for path in manifests for spec in warm.from_manifest(path)]
        if modules:
            specs += warm.from_modules(modules, backends=list(backends) or None, grid=grid)
        if from_ledger:
            specs += warm.from_ledger(store.ledger_runs(), grid=grid)
        if not specs:
            raise click.UsageError("Nothing to warm: give MODULES, --manifest FILE or --from-ledger.")
        planned = warm.plan(warm.unique(specs), store)
    except warm.SpecError as error:
        raise click.UsageError(str(error)) from None

    if dry_run:
        if as_json:
            click.echo(json.dumps([p.to_json() for p in planned], indent=2))
        else:
            _render.warm_plan(planned)
        if any(p.status == "failed" for p in planned):
            raise SystemExit(1)
        return

    effective = warm.effective_jobs(jobs, max_memory=max_memory, memory_per_job=memory_per_job)
    missing = sum(p.status == "missing" for p in planned)
    with _render.WarmProgress(total=missing, enabled=not as_json and sys.stdout.isatty()) as progress:
        report = warm.warm(planned, store, jobs=effective, timeout=timeout, scheduler=scheduler,
                           on_done=progress.done if not as_json else lambda _: None)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _render.warm_report(report)
    if not report.ok:
        raise SystemExit(1)


COMMANDS = (warm_command,)
