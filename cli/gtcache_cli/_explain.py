"""``gtcache explain``: which key ingredients make a variant miss."""

from __future__ import annotations

import click

from gtcache_cli import _render
from gtcache_cli._common import EXIT_CODES_HELP, Context, emit, json_option, pass_context


@click.command(name="explain", short_help="Why would a program compile? What differs from the store.", epilog=EXIT_CODES_HELP)
@click.argument("target")
@click.option("--backend", "backend_name", default="gtfn_cpu", show_default=True,
              help="gtfn_cpu, gtfn_gpu, dace_cpu, dace_gpu, roundtrip or package.module:name.")
@click.option("--static", "static", multiple=True, metavar="NAME=VALUE",
              help="A static argument's value (repeat for more values or names).")
@click.option("--grid", metavar="MODULE:CALLABLE", help="Returns the offset provider (connectivities).")
@click.option("--arch", metavar="ARCH",
              help="Key a GPU variant for this arch (90; gfx90a) [default: this process's device, GTCACHE_CUDA_ARCH, CUDAARCHS].")
@json_option
@pass_context
def explain_command(
    obj: Context, target: str, backend_name: str, static: tuple[str, ...], grid: str | None, arch: str | None,
    as_json: bool,
) -> None:
    """Why would TARGET (package.module:program) compile? Names the key ingredients that differ
    from the nearest stored entries of the same program. Imports gt4py; compiles nothing
    (a variant whose key needs a compile, e.g. of a backend with its own, is said to be so)."""
    from gtcache import toolchain
    from gtcache.explain import Explanation, explain
    from gtcache.warm import check_static_args
    from gtcache.gt4py import plan_variants
    from gtcache.gt4py.targets import load_object, parse_static_args, resolve_backend, resolve_grid

    # A target, backend or grid that cannot be found is a TargetError: a usage error (exit 2).
    program = load_object(target, what="program")
    backend = resolve_backend(backend_name)
    offset_provider = resolve_grid(grid)
    static_args = parse_static_args(static)
    check_static_args(program, static_args, name=target)  # a SpecError: a usage error too
    store = obj.store()
    with toolchain.target_arch(arch.strip() if arch else None):
        outcomes = plan_variants(
            store, program, backend=backend, offset_provider=offset_provider, static_args=static_args,
            settings=obj.settings,
        )
    scan = store.scan()
    explanations = [
        Explanation.cannot_plan(program=o.program, backend=o.backend, reason=o.detail or "unknown")
        if o.status == "unplannable" else
        explain(scan, program=o.program, backend=o.backend, key=o.key or "", ingredients=o.ingredients or {})
        for o in outcomes
    ]
    emit([e.to_json() for e in explanations], as_json, lambda: _render.explanations_text(explanations))


COMMANDS = (explain_command,)
