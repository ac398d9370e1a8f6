"""The named ingredients of a build key: what gt4py would compile, wherever its source lives.

Computed from the lowered program (``backend.transforms`` output), so it does
not depend on source locations, object identities or connectivity table
contents; see docs/keys.md for the list and why each one is there.
"""

from __future__ import annotations

from typing import Any

from gtcache.gt4py import _compat, toolchain
from gtcache.keys import make_key

__all__ = ["BUILD_KEY_KIND", "build_ingredients", "build_key"]

BUILD_KEY_KIND = "build/1"


def build_ingredients(backend: Any, compilable: Any) -> dict[str, Any]:
    args = compilable.args
    backend_name = str(getattr(backend, "name", type(backend).__qualname__))
    facts = toolchain.toolchain_facts()
    device = _device_type(backend)
    ingredients: dict[str, Any] = {
        "program_ir": _compat.ir_fingerprint(compilable.data),
        "backend": backend_name,
        "backend_config": _compat.backend_fingerprint(backend),
        "arg_types": [str(t) for t in args.args],
        "kwarg_types": {k: str(t) for k, t in sorted(args.kwargs.items())},
        "static_args": _descriptors(args.argument_descriptor_contexts),
        "connectivity_types": _compat.offset_provider_type(args.offset_provider),
        "column_axis": None if args.column_axis is None else str(args.column_axis),
        "device": {"type": device, "arch": toolchain.device_arch(device)},
        **{f"toolchain.{name}": value for name, value in facts.items()},
    }
    if "dace" in backend_name or "-march=native" in str(facts.get("build_env")):
        # dace builds with -march=native by default: its code is for this CPU only.
        ingredients["cpu_features"] = toolchain.cpu_features()
    return ingredients


def build_key(ingredients: dict[str, Any]) -> str:
    return make_key(BUILD_KEY_KIND, ingredients)


def _device_type(backend: Any) -> str:
    allocator = getattr(backend, "allocator", None)
    device = getattr(allocator, "__gt_device_type__", None)
    return str(getattr(device, "name", device or "CPU"))


def _descriptors(contexts: Any) -> dict[str, Any]:
    """Argument descriptors (static args, static domains) as readable, ordered text."""
    return {
        getattr(cls, "__name__", str(cls)): {
            param: repr(value) for param, value in sorted(context.items())
        }
        for cls, context in sorted(contexts.items(), key=lambda item: str(item[0]))
    }
