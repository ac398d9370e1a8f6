"""``gtcache explain``: which key ingredients make a variant miss."""

from __future__ import annotations

import json

import click

from gtcache_cli import _render
from gtcache_cli._common import EXIT_CODES_HELP, Context, errors_to_exit_codes, json_option, pass_context


@click.command(name="explain", epilog=EXIT_CODES_HELP)
@click.argument("target")
@click.option("--backend", "backend_name", default="gtfn_cpu", show_default=True,
              help="gtfn_cpu, gtfn_gpu, dace_cpu, dace_gpu, roundtrip or package.module:name.")
@click.option("--static", "static", multiple=True, metavar="NAME=VALUE",
              help="A static argument's value (repeat for more values or names).")
@click.option("--grid", metavar="MODULE:CALLABLE", help="Returns the offset provider (connectivities).")
@json_option
@pass_context
@errors_to_exit_codes
def explain_command(
    obj: Context, target: str, backend_name: str, static: tuple[str, ...], grid: str | None, as_json: bool
) -> None:
    """Why would TARGET (package.module:program) compile? Names the key ingredients that differ
    from the nearest stored entries of the same program. Imports gt4py; compiles nothing."""
    from gtcache.explain import explain
    from gtcache.gt4py import plan_variant
    from gtcache.gt4py.targets import TargetError, load_object, parse_static_args, resolve_backend, resolve_grid

    try:
        program = load_object(target, what="program")
        backend = resolve_backend(backend_name)
        offset_provider = resolve_grid(grid)
        static_args = parse_static_args(static)
    except TargetError as error:
        raise click.UsageError(str(error)) from None
    store = obj.store()
    outcomes = plan_variant(store, program, backend=backend, offset_provider=offset_provider, static_args=static_args)
    scan = store.scan()
    explanations = [
        explain(scan, program=o.program, backend=o.backend, key=o.key or "", ingredients=o.ingredients or {})
        for o in outcomes
    ]
    if as_json:
        click.echo(json.dumps([e.to_json() for e in explanations], indent=2, default=str))
    else:
        _render.explanations_text(explanations)


COMMANDS = (explain_command,)
