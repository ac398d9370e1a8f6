"""The ``gtcache`` command: parses, calls one library function, renders what it returns.

Exit codes: 0 success (an empty store, nothing to do); 1 an operational error
(a gtcache error: unreadable store, unknown entry, problems found, ...); 2 a
usage error (bad option or argument); 130 interrupted; 143 or 129 terminated
(SIGTERM, SIGHUP: unwound as on Ctrl-C). Errors are turned into
these in one place, ``_errors.guarded``, around the whole command (see there).
``--json`` prints the same data as the table.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

import gtcache
from gtcache_cli import _bundle, _config, _doctor, _errors, _explain, _inspect, _manage, _remote, _warm
from gtcache_cli._common import EXIT_CODES_HELP, Context


class _Group(click.Group):
    """click's group with the error boundary around everything it runs (also under CliRunner)."""

    def main(
        self, args: Sequence[str] | None = None, prog_name: str | None = None,
        complete_var: str | None = None, standalone_mode: bool = True, **extra: Any,
    ) -> Any:
        code = _errors.guarded(
            lambda: super(_Group, self).main(args, prog_name, complete_var, standalone_mode=False, **extra)
        )
        if standalone_mode:
            sys.exit(code)
        return code


class _EnvOption(click.Option):
    """An option whose bad value, when it came from its environment variable, is named by
    the variable (``Invalid value for GTCACHE_DIR (--cache-dir)``): the user typed no option."""

    def get_error_hint(self, ctx: click.Context | None) -> str:
        hint = super().get_error_hint(ctx)
        if ctx is not None and ctx.get_parameter_source(self.name or "") is click.core.ParameterSource.ENVIRONMENT:
            return f"{self.envvar} ({hint.strip(chr(39))})"
        return hint


@click.group(cls=_Group, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(gtcache.__version__, prog_name="gtcache")
@click.option(
    "--cache-dir",
    cls=_EnvOption,
    envvar="GTCACHE_DIR",
    type=click.Path(file_okay=False, readable=False, path_type=str),  # unreadable: exit 1, from the store
    help="The store [env: GTCACHE_DIR; default: the user cache dir].",
)
@click.option(
    "--index-dir",
    cls=_EnvOption,
    envvar="GTCACHE_INDEX_DIR",
    type=click.Path(file_okay=False, readable=False, path_type=str),  # unreadable: exit 1, from the store
    help="Where the index lives, e.g. node-local disk [env: GTCACHE_INDEX_DIR; default: inside the store].",
)
@click.pass_context
def cli(ctx: click.Context, cache_dir: str | None, index_dir: str | None) -> None:
    """Inspect and manage a gtcache store of compiled GT4Py programs."""
    ctx.obj = Context(settings=gtcache.Settings.from_env(cache_dir=cache_dir, index_dir=index_dir))


for command in (
    *_inspect.COMMANDS, *_manage.COMMANDS, *_explain.COMMANDS, *_warm.COMMANDS, *_bundle.COMMANDS,
    *_config.COMMANDS, *_doctor.COMMANDS, *_remote.COMMANDS,
):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="gtcache")


if __name__ == "__main__":  # pragma: no cover
    main()
