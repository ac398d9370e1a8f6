"""``gtcache config get/set/unset/list``: the store's settings file, ``gtcache.toml``."""

from __future__ import annotations

import json

import click

import gtcache
from gtcache.policies.config import (
    CONFIG_KEYS,
    ConfigValue,
    check_value,
    env_override,
    key_of,
    read_config,
    set_config,
)
from gtcache_cli import _text
from gtcache_cli._common import EXIT_CODES_HELP, Context, json_option, pass_context

def _key_argument(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return key_of(value).name
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _complete_key(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [key for key in CONFIG_KEYS if key.startswith(incomplete)]


key_argument = click.argument("key", callback=_key_argument, shell_complete=_complete_key)


def _shown(value: ConfigValue) -> str:
    if value.raw is None:
        return "-"
    if value.value is None:
        return _text.escape(str(value.raw))
    if value.key == "max-size":
        return f"{_text.escape(str(value.raw))} ({gtcache.format_size(value.value)})"
    return str(value.value)


def _check(values: list[ConfigValue]) -> None:
    """Exit 1 (one ``Error:`` line) when a value does not check out, saying how to fix it."""
    sentences = []
    for v in values:
        if v.problem is None:
            continue
        variable = CONFIG_KEYS[v.key].env
        fix = (f"fix or unset {variable}" if v.source.startswith("environment")
               else f"fix it with 'gtcache config set {v.key} VALUE' or 'gtcache config unset {v.key}'")
        sentences.append(f"{v.problem.rstrip('.')}; {fix}.")
    if sentences:
        raise gtcache.GtcacheError(" ".join(sentences))


@click.group(name="config", short_help="Get, set, unset or list the store's caps (gtcache.toml).", epilog=EXIT_CODES_HELP)
def config_group() -> None:
    """The store's settings (<store>/gtcache.toml): max-size and max-files, the caps enforced
    after publishes. GTCACHE_MAX_SIZE / GTCACHE_MAX_FILES override them."""


@config_group.command(name="list", epilog=EXIT_CODES_HELP)
@json_option
@pass_context
def list_command(obj: Context, as_json: bool) -> None:
    """Every setting, its value and where the value comes from. Exit 1 if one does not check out."""
    store = obj.store(inspect=True)
    values = read_config(store.root, obj.settings, store.trust)
    if as_json:
        click.echo(json.dumps({"cache_dir": str(store.root), "settings": [v.to_json() for v in values]}, indent=2))
    else:
        width = max(len(v.key) for v in values)
        for v in values:
            note = f"  [{v.source}]" + (f", file: {_text.escape(str(v.file_raw))}" if v.file_raw is not None else "")
            click.echo(f"{v.key:<{width}}  {_shown(v)}{note}")
    _check(values)


@config_group.command(name="get", epilog=EXIT_CODES_HELP)
@key_argument
@json_option
@pass_context
def get_command(obj: Context, key: str, as_json: bool) -> None:
    """Print the value of KEY (max-size, max-files) as written, nothing if unset.

    Exit 1 if the value does not check out."""
    store = obj.store(inspect=True)
    [value] = [v for v in read_config(store.root, obj.settings, store.trust) if v.key == key]
    if as_json:
        click.echo(json.dumps(value.to_json(), indent=2))
    elif value.raw is not None and value.problem is None:
        click.echo(_text.escape(str(value.raw)))
    _check([value])


@config_group.command(name="set", epilog=EXIT_CODES_HELP, context_settings={"ignore_unknown_options": True})
@key_argument
@click.argument("value")
@pass_context
def set_command(obj: Context, key: str, value: str) -> None:
    """Set KEY to VALUE in the store's gtcache.toml (creating the store if needed): max-size SIZE
    (20G, 500Mi, 1e9) or max-files N. A bad value is a usage error and changes nothing."""
    try:
        check_value(key, value)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'VALUE'") from None
    store = obj.store(create=True)
    written = set_config(store, key, value)
    click.echo(f"Set {key} = {_shown(written)} in '{_text.escape(str(store.root / 'gtcache.toml'))}';"
               " it applies from the next publish ('gtcache prune' applies a cap now).")
    _warn_overridden(obj, key)


@config_group.command(name="unset", epilog=EXIT_CODES_HELP)
@key_argument
@pass_context
def unset_command(obj: Context, key: str) -> None:
    """Remove KEY from the store's gtcache.toml (no cap of that kind)."""
    store = obj.store()
    set_config(store, key, None)
    click.echo(f"Unset {key} in '{_text.escape(str(store.root / 'gtcache.toml'))}'.")
    _warn_overridden(obj, key)


def _warn_overridden(obj: Context, key: str) -> None:
    override = env_override(key, obj.settings)
    if override is not None:
        click.echo(f"Note: {CONFIG_KEYS[key].env}={_text.escape(override)} overrides it in this environment.",
                   err=True)


COMMANDS = (config_group,)
