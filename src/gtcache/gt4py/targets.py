"""Naming programs, backends and grids on a command line: ``pkg.module:program``,
``gtfn_cpu`` or ``pkg.module:backend``, ``pkg.module:make_grid``, ``name=value``.

Errors are ``TargetError`` (a ``ValueError``) with one sentence saying what was wrong.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from typing import Any

from gtcache.gt4py import _compat

__all__ = [
    "BACKENDS", "TargetError", "load_object", "parse_static_args", "programs_in", "resolve_backend",
    "resolve_grid", "short_backend_name",
]

#: The short backend names (gt4py's own backends; the table is ``_compat.BACKENDS``).
BACKENDS: tuple[str, ...] = tuple(_compat.BACKENDS)


class TargetError(ValueError):
    """A program, backend, grid or static argument that cannot be found or read."""


def load_object(spec: str, *, what: str) -> Any:
    """``pkg.module:attr.attr`` -> the object."""
    module_name, _, attrs = spec.partition(":")
    if not module_name or not attrs:
        raise TargetError(f"{what.capitalize()} '{spec}' is not of the form 'package.module:name'.")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as error:  # a user module can raise anything on import
        raise TargetError(f"Cannot import '{module_name}' for {what} '{spec}': {error}.") from None
    for attr in attrs.split("."):
        try:
            value = getattr(value, attr)
        except AttributeError:
            raise TargetError(f"'{module_name}' has no {what} '{attrs}'.") from None
    return value


def resolve_backend(name: str) -> Any:
    if name in BACKENDS:
        return _compat.backend(name)
    if ":" in name:
        found = load_object(name, what="backend")
        if not _compat.is_backend(found):
            raise TargetError(f"Backend '{name}' is a {type(found).__name__}, not a gt4py backend.")
        return found
    raise TargetError(f"Unknown backend '{name}'; use one of {', '.join(BACKENDS)} or 'package.module:name'.")


def short_backend_name(backend: object) -> str | None:
    """The short name of one of gt4py's own backends (``gtfn_cpu``...); None for any other."""
    return _compat.backend_short_name(backend)


def programs_in(module_name: str) -> Iterator[tuple[str, str | None]]:
    """``("pkg.module:name", short backend name or None)`` of each gt4py program defined in
    the module or, for a package, in its modules too. ``TargetError`` for a module that fails."""
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a user module can raise anything
        raise TargetError(f"Cannot import '{module_name}': {error}.") from None
    modules = [module]
    if hasattr(module, "__path__"):  # a package: its modules too
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{module_name}."):
            try:
                modules.append(importlib.import_module(info.name))
            except Exception as error:
                raise TargetError(f"Cannot import '{info.name}': {error}.") from None
    for mod in modules:
        for attr, value in sorted(vars(mod).items()):
            if _compat.is_program(value) and getattr(value.definition, "__module__", None) == mod.__name__:
                yield f"{mod.__name__}:{attr}", short_backend_name(value.backend)


def resolve_grid(spec: str | None) -> dict[str, Any]:
    """The offset provider a ``package.module:callable`` returns (``{}`` without one)."""
    if not spec:
        return {}
    factory = load_object(spec, what="grid")
    try:
        provider = factory() if callable(factory) else factory
    except Exception as error:  # the user's grid factory
        raise TargetError(f"Grid '{spec}' failed: {error!r}.") from None
    if not isinstance(provider, dict):
        raise TargetError(f"Grid '{spec}' gave a {type(provider).__name__}, not a dict of connectivities.")
    return provider


def parse_static_args(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["n=1", "n=2", "flag=True"]`` -> ``{"n": [1, 2], "flag": [True]}`` (Python literals)."""
    static: dict[str, list[Any]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise TargetError(f"Static argument '{item}' is not of the form 'name=value'.")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise TargetError(f"Static argument '{item}': '{text}' is not a Python literal.") from None
        static.setdefault(name, []).append(value)
    return static
