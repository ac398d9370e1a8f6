"""``gtcache warm``: pre-compile declared program variants into the store."""

from __future__ import annotations

import pathlib
import sys

import click

from gtcache.errors import GtcacheError
from gtcache_cli import _remote, _render
from gtcache_cli._common import (
    EXIT_CODES_HELP,
    Context,
    duration_value,
    emit,
    json_option,
    pass_context,
    size_value,
)


@click.command(name="warm", short_help="Compile program variants into the store ahead of runs.", epilog=EXIT_CODES_HELP)
@click.argument("modules", nargs=-1)
@click.option("--manifest", "manifests", multiple=True, type=click.Path(dir_okay=False, path_type=pathlib.Path),
              help="A TOML manifest of programs x backends x static args x grids (docs/warm.md).")
@click.option("--from-ledger", is_flag=True, help="The variants earlier runs against this store used.")
@click.option("--backend", "backends", multiple=True, help="Backends for programs found in MODULES (default: their own).")
@click.option("--grid", metavar="MODULE:CALLABLE", help="Offset provider for programs from MODULES and the ledger.")
@click.option("--device", type=click.Choice(["cuda", "rocm"]), default="cuda", show_default=True,
              help="The GPU kind --arch names.")
@click.option("--arch", "archs", multiple=True, metavar="ARCH",
              help="Build each GPU variant for this arch (90, 80; rocm: gfx90a), no GPU needed; repeat for more.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parallel compilations [default: the CPUs available].")
@click.option("--max-memory", callback=size_value, metavar="SIZE", help="Memory budget for parallel compilations [default: 80% of available].")
@click.option("--memory-per-job", callback=size_value, default="2G", show_default=True, metavar="SIZE",
              help="What one compilation may need; jobs are capped at max-memory / this.")
@click.option("--timeout", callback=duration_value, metavar="DURATION",
              help="Give up on a variant after this long (e.g. 30m, 1h30m).")
@click.option("--scheduler", metavar="ADDRESS", help="Run the jobs on this dask.distributed scheduler.")
@click.option("--dry-run", "-n", is_flag=True, help="List the variants and their keys; compile nothing.")
@click.option("--push", is_flag=True,
              help="Then push the plan's entries (compiled or cached) to the read-write remotes (docs/remote.md).")
@json_option
@pass_context
def warm_command(
    obj: Context, modules: tuple[str, ...], manifests: tuple[pathlib.Path, ...], from_ledger: bool,
    backends: tuple[str, ...], grid: str | None, device: str, archs: tuple[str, ...], jobs: int | None, max_memory: int | None,
    memory_per_job: int, timeout: float | None, scheduler: str | None, dry_run: bool, push: bool, as_json: bool,
) -> None:
    """Compile program variants into the store before they are needed (CI, model set-up).

    Variants come from MODULES (every gt4py program they define), --manifest files and
    --from-ledger. Each distinct variant compiles once, in a worker process of its own;
    stored ones are skipped. GPU variants compile once per --arch (or manifest 'archs'),
    on a machine without a GPU too (the toolkit is needed). Exit 1 when any variant failed.

    --push (CI): then upload the plan's entries, compiled now or found stored, to every
    read-write remote of GTCACHE_REMOTE / the store's gtcache.toml; none is an error
    before anything compiles. With --dry-run nothing is pushed.
    """
    from gtcache import warm

    remotes = _remote.writable_remotes(obj, "warm --push") if push else []

    # A manifest or module that does not check out is a SpecError: a usage error (exit 2),
    # found before the store is made (a mistyped --cache-dir is not made by a failing warm).
    specs = [spec for path in manifests for spec in warm.from_manifest(path)]
    if modules:
        specs += warm.from_modules(modules, backends=list(backends) or None, grid=grid)
    resolved = warm.resolve(specs)
    if not specs and not from_ledger:
        raise click.UsageError(_nothing_to_warm(modules, manifests, from_ledger=from_ledger, backends=backends))
    store = obj.store(create=True)
    if from_ledger:
        specs += warm.from_ledger(store.ledger_runs(), grid=grid)
    if not specs:
        raise click.UsageError(_nothing_to_warm(modules, manifests, from_ledger=from_ledger, backends=backends))
    if archs:
        specs = warm.for_archs(specs, device, archs)
    specs = warm.unique(specs)
    warm.check_toolkit(specs)  # nvcc missing or too old for an arch: a GtcacheError (exit 1)
    planned = warm.plan(specs, store, settings=obj.settings, resolved=resolved)

    if dry_run:
        emit([p.to_json() for p in planned], as_json, lambda: _render.warm_plan(planned))
        if any(p.status in ("failed", "unplannable") for p in planned):
            raise SystemExit(1)
        return

    effective = warm.effective_jobs(jobs, max_memory=max_memory, memory_per_job=memory_per_job)
    missing = sum(p.status == "missing" for p in planned)
    with _render.WarmProgress(total=missing, enabled=not as_json and sys.stdout.isatty()) as progress:
        report = warm.warm(planned, store, jobs=effective, timeout=timeout, scheduler=scheduler,
                           on_done=progress.done if not as_json else lambda _: None)
    if not remotes:
        emit(report.to_json(), as_json, lambda: _render.warm_report(report))
    else:  # the report first, then the pushes (a remote that fails is an error after the report)
        keys = sorted({r.key for r in report.results if r.key is not None and r.status in ("compiled", "cached")})
        try:
            pushed = _remote.push_keys(store, remotes, keys)
        except GtcacheError as error:
            emit(report.to_json(), as_json, lambda: _render.warm_report(report))
            raise GtcacheError(f"warm --push: {error}") from None

        def render() -> None:
            _render.warm_report(report)
            _remote.render_pushed(pushed)

        emit({**report.to_json(), "pushed": pushed}, as_json, render)
    if not report.ok:
        raise SystemExit(1)


def _nothing_to_warm(
    modules: tuple[str, ...], manifests: tuple[pathlib.Path, ...], *, from_ledger: bool, backends: tuple[str, ...],
) -> str:
    """Why no variant came out of what was given, and what to give instead."""
    if not (modules or manifests or from_ledger):
        return "Nothing to warm: give MODULES, --manifest FILE or --from-ledger."
    reasons = []
    if modules:
        names = ", ".join(f"'{m}'" for m in modules)
        verb = "defines" if len(modules) == 1 else "define"
        reasons.append(f"{names} {verb} no gt4py program" if backends else
                       f"{names} {verb} no gt4py program with a backend of its own (name one: --backend gtfn_cpu)")
    if manifests:
        reasons.append("the manifests declare no variant")
    if from_ledger:
        reasons.append("the store's ledger records no variant (none since the last 'stats --zero')")
    return f"Nothing to warm: {'; '.join(reasons)}."


COMMANDS = (warm_command,)
