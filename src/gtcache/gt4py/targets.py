"""Naming programs, backends and grids on a command line: ``pkg.module:program``,
``gtfn_cpu`` or ``pkg.module:backend``, ``pkg.module:make_grid``, ``name=value``.

Errors are ``TargetError`` (a ``ValueError``) with one sentence saying what was wrong.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["BACKENDS", "TargetError", "load_object", "parse_static_args", "resolve_backend", "resolve_grid"]


class TargetError(ValueError):
    """A program, backend, grid or static argument that cannot be found or read."""


def _gtfn(device: str) -> Any:
    import gt4py.next as gtx

    return gtx.gtfn_cpu if device == "cpu" else gtx.gtfn_gpu


def _dace(device: str) -> Any:
    from gt4py.next.program_processors.runners import dace

    return dace.run_dace_cpu if device == "cpu" else dace.run_dace_gpu


def _roundtrip() -> Any:
    import gt4py.next as gtx

    return gtx.itir_python


#: Short names of gt4py's backends.
BACKENDS: dict[str, Callable[[], Any]] = {
    "gtfn_cpu": lambda: _gtfn("cpu"),
    "gtfn_gpu": lambda: _gtfn("gpu"),
    "dace_cpu": lambda: _dace("cpu"),
    "dace_gpu": lambda: _dace("gpu"),
    "roundtrip": _roundtrip,
}


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
        return BACKENDS[name]()
    if ":" in name:
        return load_object(name, what="backend")
    raise TargetError(f"Unknown backend '{name}'; use one of {', '.join(BACKENDS)} or 'package.module:name'.")


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
