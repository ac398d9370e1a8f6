"""The store's settings file, ``<store>/gtcache.toml``: read, checked and written key by key.

``gtcache config get/set/unset/list`` use this; ``Limits.for_store`` reads the same
values through ``check_value``, and ``verify`` reports a value that does not check out.
Two settings exist, both under ``[limits]``::

    max-size   max_size = "20G"     (a size, ``gtcache.policies.parse_size``)
    max-files  max_files = 200000   (a whole number >= 0)

The environment (``GTCACHE_MAX_SIZE`` / ``GTCACHE_MAX_FILES``) overrides the file.

The remote tiers may be named there too (``remote_urls``; edited by hand)::

    [remote]
    urls = ["redis://cache:6379/0?mode=read-write", "https://cache.example.org/gtcache"]

``GTCACHE_REMOTE`` (even set empty) and ``gtcache.install(remote=...)`` override them.
Whoever can write the file chooses where this reader fetches code from, so it is read
only when the store passes the reader's trust check and the file itself is owned and
writable as an entry file must be (``gtcache.store._trust``); a remote it names is
never trusted (``?trusted=1`` is refused), needs ``GTCACHE_BUNDLE_KEY`` and gets no
credentials from the environment (``gtcache.remote.open_remote(from_file=True)``).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tomllib
from collections.abc import Mapping
from typing import Any

from gtcache.errors import GtcacheError
from gtcache.settings import Settings, split_remotes
from gtcache.policies._units import SIZE_HELP, parse_size
from gtcache.store import CONFIG_FILE, Store, TrustPolicy, atomic_write_text, check_store, open_regular

__all__ = [
    "CONFIG_KEYS", "ENV_SOURCE", "FILE_SOURCE", "ConfigValue", "check_value", "config_file_problems", "file_limits",
    "read_config",
    "remote_urls", "set_config",
]

#: The section and field of ``gtcache.toml`` naming remote tiers (a URL or a list of URLs).
REMOTE_TABLE, REMOTE_FIELD = "remote", "urls"
#: Where ``remote_urls`` found the URLs: the reader's own (environment, ``install``) or the file.
ENV_SOURCE, FILE_SOURCE = "GTCACHE_REMOTE", f"{CONFIG_FILE} [{REMOTE_TABLE}]"


@dataclasses.dataclass(frozen=True)
class _Key:
    name: str
    table: str
    field: str
    env: str


#: The settings a store's file may hold: ``config`` key -> where it lives and what overrides it.
CONFIG_KEYS: Mapping[str, _Key] = {
    "max-size": _Key("max-size", "limits", "max_size", "GTCACHE_MAX_SIZE"),
    "max-files": _Key("max-files", "limits", "max_files", "GTCACHE_MAX_FILES"),
}


def key_of(name: str) -> _Key:
    """``max-size`` or ``max_size`` -> its key; ``ValueError`` naming the known keys otherwise."""
    found = CONFIG_KEYS.get(name.strip().lower().replace("_", "-"))
    if found is None:
        raise ValueError(f"'{name}' is not a setting; the settings are {', '.join(CONFIG_KEYS)}.")
    return found


def check_value(name: str, value: object) -> int:
    """The value of setting ``name`` (file value or environment text) as a number; ``ValueError``
    with one sentence saying what a good value looks like."""
    key = key_of(name)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{key.name} = {value!r} is not a {'size' if key.name == 'max-size' else 'number'}.")
    if key.name == "max-size":
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"max-size = {value} is negative.")
            return value
        try:
            return parse_size(value)
        except ValueError:
            raise ValueError(f"max-size = {value!r} is not a size; give {SIZE_HELP}.") from None
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"max-files = {value!r} is not a whole number of files (>= 0).")
    return int(text)


@dataclasses.dataclass(frozen=True)
class ConfigValue:
    """One setting as it applies to a store: where its value comes from, and whether it checks out."""

    key: str
    #: The value as written (file or environment); ``None``: not set.
    raw: str | int | None
    #: What it means: bytes or files; ``None`` when unset or bad.
    value: int | None
    #: ``"environment (GTCACHE_MAX_SIZE)"``, ``"gtcache.toml"`` or ``"unset"``.
    source: str
    problem: str | None = None
    #: The file's value when the environment overrides it.
    file_raw: str | int | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _read_file(root: pathlib.Path, trust: TrustPolicy | None = None) -> dict[str, Any]:
    """The parsed ``gtcache.toml`` (``{}`` when absent), never through a symlink or from a FIFO;
    ``GtcacheError`` when unreadable, not TOML, or (with ``trust``) possibly written by someone
    untrusted: its caps remove entries, so it is read as an entry file would be."""
    path = root / CONFIG_FILE
    try:
        fd, info = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):  # (no store: a --cache-dir under a file has none)
        return {}
    except OSError as error:
        raise GtcacheError(f"Cannot read '{path}': {error}.") from None
    try:
        if trust is not None and (problem := trust.problem(path, info)) is not None:
            raise GtcacheError(f"The store's settings are not read: {problem}.")
        chunks = []
        while chunk := os.read(fd, 1 << 16):  # the file that was checked
            chunks.append(chunk)
        text = b"".join(chunks).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GtcacheError(f"Cannot read '{path}': {error}.") from None
    finally:
        os.close(fd)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GtcacheError(f"'{path}' is not TOML: {error}.") from None


def file_limits(root: pathlib.Path, trust: TrustPolicy | None) -> Mapping[str, object]:
    """The ``[limits]`` table of the store's ``gtcache.toml`` (``_read_file``)."""
    table = _read_file(root, trust).get("limits", {})
    return table if isinstance(table, Mapping) else {}


def env_override(name: str, settings: Settings | None) -> str | None:
    """The environment's text for setting ``name`` as ``settings`` hold it, if it is set."""
    value = getattr(settings, CONFIG_KEYS[name].field, None) if settings is not None else None
    return value or None


def _file_value(data: Mapping[str, Any], key: _Key) -> object:
    table = data.get(key.table, {})
    return table.get(key.field) if isinstance(table, Mapping) else None


def read_config(
    root: pathlib.Path, settings: Settings | None = None, trust: TrustPolicy | None = None,
) -> list[ConfigValue]:
    """Every setting of the store at ``root`` with its source, the environment's overrides as
    ``settings`` hold them (None: the file alone); bad values carry their ``problem`` (this
    never raises for a bad value, only for a file that is not TOML, cannot be read, or, with
    ``trust``, is not read because someone untrusted may have written it)."""
    data = _read_file(root, trust)
    values = []
    for key in CONFIG_KEYS.values():
        in_file = _file_value(data, key)
        file_raw = in_file if isinstance(in_file, (str, int)) else None if in_file is None else repr(in_file)
        from_env = env_override(key.name, settings)
        raw: object = from_env if from_env is not None else in_file
        source = f"environment ({key.env})" if from_env is not None else CONFIG_FILE if in_file is not None else "unset"
        value, problem = None, None
        if raw is not None:
            try:
                value = check_value(key.name, raw)
            except ValueError as error:
                problem = f"{source}: {error}"
        values.append(ConfigValue(
            key=key.name, raw=raw if raw is None or isinstance(raw, (str, int)) else repr(raw), value=value, source=source,
            problem=problem, file_raw=file_raw if from_env is not None else None,
        ))
    return values


def _file_remotes(data: Mapping[str, Any], path: pathlib.Path) -> tuple[str, ...]:
    table = data.get(REMOTE_TABLE)
    if table is None:
        return ()
    value = table.get(REMOTE_FIELD) if isinstance(table, Mapping) else None
    if isinstance(value, str):
        return split_remotes(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(u for v in value for u in split_remotes(v))
    raise GtcacheError(f"'{path}': [{REMOTE_TABLE}] {REMOTE_FIELD} is not a URL or a list of URLs.")


def remote_urls(settings: Settings, root: pathlib.Path | None = None) -> tuple[tuple[str, ...], str]:
    """(the remote tier URLs, where they come from: ``ENV_SOURCE``, ``FILE_SOURCE`` or
    ``"unset"``) for the store at ``root`` (default ``settings.cache_dir``):
    ``settings.remotes`` when given (``GTCACHE_REMOTE``, ``install(remote=...)``), else
    ``[remote] urls`` of the store's ``gtcache.toml``, read only when the store and the
    file pass the trust check of ``settings`` (owner and mode, as entry files). Open
    file URLs with ``open_remote(url, settings, from_file=True)``. ``GtcacheError`` for a
    file that cannot be read, is not trusted, or has a bad ``[remote]``."""
    if settings.remotes_given:
        return settings.remotes, ENV_SOURCE
    root = settings.cache_dir if root is None else root
    path = root / CONFIG_FILE
    try:
        fd, info = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return (), "unset"
    except OSError as error:
        raise GtcacheError(f"Cannot read '{path}': {error}.") from None
    try:
        policy = TrustPolicy.from_ids(settings.trusted_users, settings.trusted_groups)
        problem = policy.problem(path, info)
        if problem is not None:
            raise GtcacheError(f"[{REMOTE_TABLE}] of '{path}' is not read: {problem}.")
        try:
            check_store(root, settings.index_dir if root == settings.cache_dir else None, policy)
        except GtcacheError as error:
            raise GtcacheError(f"[{REMOTE_TABLE}] of '{path}' is not read: {error}") from None
        chunks = []
        while chunk := os.read(fd, 1 << 16):  # the file that was checked, not one put in its place since
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        data = tomllib.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise GtcacheError(f"Cannot read '{path}': {error}.") from None
    except tomllib.TOMLDecodeError as error:
        raise GtcacheError(f"'{path}' is not TOML: {error}.") from None
    urls = _file_remotes(data, path)
    return urls, (FILE_SOURCE if urls else "unset")


def config_file_problems(root: pathlib.Path, trust: TrustPolicy | None = None) -> list[str]:
    """What is wrong with ``gtcache.toml`` itself (not the environment): one sentence each."""
    try:
        data = _read_file(root, trust)
    except GtcacheError as error:
        return [str(error)]
    problems = []
    for name, table in data.items():
        if name == REMOTE_TABLE and isinstance(table, Mapping):
            try:
                _file_remotes(data, root / CONFIG_FILE)
            except GtcacheError as error:
                problems.append(str(error))
            problems += [f"[{REMOTE_TABLE}] {field} is not a setting gtcache reads ({REMOTE_FIELD})."
                         for field in table if field != REMOTE_FIELD]
            continue
        if name != "limits" or not isinstance(table, Mapping):
            problems.append(f"[{name}] is not a section gtcache reads (it reads [limits] and [remote]).")
            continue
        for field, value in table.items():
            key = next((k for k in CONFIG_KEYS.values() if k.field == field), None)
            if key is None:
                problems.append(f"[limits] {field} is not a setting gtcache reads (max_size, max_files).")
                continue
            try:
                check_value(key.name, value)
            except ValueError as error:
                problems.append(f"[limits] {error}")
    return problems


def set_config(store: Store, name: str, value: str | None) -> ConfigValue:
    """Write setting ``name`` into the store's ``gtcache.toml`` (``None``: remove it), after checking
    it (``ValueError``). The file is rewritten whole and atomically, with the store's file mode;
    other settings in it are kept (comments are not)."""
    key = key_of(name)
    stored: str | int | None = None
    if value is not None:
        check_value(key.name, value)
        stored = int(value.strip()) if key.name == "max-files" else value.strip()
    data = _read_file(store.root)
    table = data.get(key.table, {})
    if not isinstance(table, dict):
        raise GtcacheError(f"'{store.root / CONFIG_FILE}': [{key.table}] is not a table; fix it by hand.")
    if stored is None:
        table.pop(key.field, None)
    else:
        table[key.field] = stored
    data[key.table] = table
    if store.read_only:
        raise GtcacheError(f"Store '{store.root}' is read-only here; its settings cannot be changed.")
    atomic_write_text(store.root / CONFIG_FILE, _dumps(data, store.root / CONFIG_FILE), mode=store.modes.file)
    return next(v for v in read_config(store.root) if v.key == key.name)


def _dumps(data: Mapping[str, Any], path: pathlib.Path) -> str:
    """TOML of tables of strings and numbers (all gtcache.toml holds; anything else: edit by hand)."""
    lines = ["# gtcache store settings (docs/configuration.md); written by 'gtcache config set'."]
    for name, table in data.items():
        if not isinstance(table, Mapping):
            raise GtcacheError(f"'{path}': '{name}' is not a table; fix it by hand.")
        if not name.replace("_", "").replace("-", "").isalnum():
            raise GtcacheError(f"'{path}': section '{name}' is not one gtcache writes; fix it by hand.")
        lines += ["", f"[{name}]"]
        for field, value in table.items():
            if isinstance(value, str):
                text = _toml_string(value)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                text = "[" + ", ".join(_toml_string(v) for v in value) + "]"
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                text = repr(value)
            else:
                raise GtcacheError(f"'{path}': [{name}] {field} is neither text nor a number; fix it by hand.")
            if not field.replace("_", "").replace("-", "").isalnum():
                raise GtcacheError(f"'{path}': [{name}] has a key gtcache does not write; fix it by hand.")
            lines.append(f"{field} = {text}")
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
