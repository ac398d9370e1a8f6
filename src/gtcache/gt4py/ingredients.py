"""The named ingredients of the two keys (see docs/keys.md for each and why).

- The **build key** identifies what gt4py would compile, wherever its source
  lives: computed from the lowered program (``backend.transforms`` output).
- The **direct key** is computable before lowering: the content fingerprint of
  the DSL definition and its closure instead of the lowered program. It maps to
  a build key through a link in the store.

Both share every other ingredient: backend and its whole configuration,
argument types, static arguments, connectivity *types*, device, toolchain.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from gtcache import toolchain
from gtcache.gt4py import _compat, _facts
from gtcache.gt4py.definition import definition_fingerprint
from gtcache.keys import make_key

__all__ = [
    "BUILD_KEY_KIND",
    "DIRECT_KEY_KIND",
    "backend_changed",
    "build_ingredients",
    "direct_ingredients",
    "keying_problem",
    "make_key",
    "one_compile_call",
]

#: ``/2`` (2026-12): a literal's type joined the lowered program's fingerprint.
#: A ``/1`` build key named float32 and float64 literals alike, and a direct link made by
#: that key could name the other build: no ``/1`` key or link is looked up again.
BUILD_KEY_KIND = "build/2"
DIRECT_KEY_KIND = "direct/2"


def build_ingredients(backend: Any, compilable: Any) -> dict[str, Any]:
    """Ingredients of the build key of a lowered ``CompilableProgramDef``."""
    return {
        "program_ir": _compat.ir_fingerprint(compilable.data),
        **_shared_ingredients(backend, compilable.args, _facts.backend_config(backend)),
    }


def direct_ingredients(
    backend: Any, definition_stage: Any, compile_time_args: Any, *, fresh: bool = False
) -> dict[str, Any]:
    """Ingredients of the direct key; ``ValueError`` if the definition cannot be keyed by content.
    In a ``compile()`` call, the definition and backend as the call first read them
    (``one_compile_call``), unless ``fresh``: as they are now (the call's reading from then on)."""
    definition, config = _in_this_call(backend, definition_stage, fresh)
    return {
        "definition": definition,
        "definition_kind": type(definition_stage).__name__,
        **_shared_ingredients(backend, compile_time_args, config),
    }


class _Call(threading.local):
    #: The gt4py ``compile()`` call under way in this thread (an object made for it), or None.
    token: object | None = None
    #: (token, definition stage, backend, definition fingerprint, backend configuration): the
    #: call's reading of the definition and backend it keys.
    found: tuple[object, Any, Any, str, str] | None = None


_call = _Call()


@contextmanager
def one_compile_call() -> Iterator[None]:
    """Held around one gt4py ``compile()`` call (``hook.py`` wraps ``CompiledProgramsPool.compile``,
    which compiles a program for every combination of the static values it is given, as
    icon4py's ``setup_program`` makes a program's variants). The direct keys of its variants
    share one reading of the definition and the backend (their fingerprints, 0.2-0.4 ms a
    variant), taken for the first.

    A variant served by such a key is what the program was when that reading was taken: a
    change made meanwhile by another thread or process counts as made after that variant.
    Nothing is linked by it unread: a variant that lowers (a miss, a build-key hit) is read
    afresh once lowered (``direct_ingredients(fresh=True)``), and its direct link written only
    if that reading gives the key it was looked up with (``_hook.Hook.make_task``); the fresh
    reading is the call's from then on, and one that fails (a file changed since the process
    started) leaves the call without one. Once gt4py's ``compile_variant_hook`` is seen with
    callbacks of the user's (code that runs in the call, before each variant), no reading is
    shared for the rest of the call.
    The next call, and a variant compiled by a call of the program, read both anew."""
    call = _call
    outer, call.token = call.token, object()
    try:
        yield
    finally:
        call.token, call.found = outer, None


def _in_this_call(backend: Any, definition_stage: Any, fresh: bool) -> tuple[str, str]:
    """The definition's fingerprint and the backend's configuration: the call's reading
    (``one_compile_call``), or a fresh one."""
    call = _call
    if call.token is not None and _compat.variant_callbacks():
        call.token = None  # none shared for the rest of the call (a callback may remove itself)
    token, found = call.token, call.found
    if not fresh and found is not None and found[0] is token and found[1] is definition_stage and found[2] is backend:
        return found[3], found[4]
    call.found = None  # (a reading that fails is never shared)
    definition, config = definition_fingerprint(definition_stage), _facts.backend_config(backend)
    if token is not None:
        call.found = (token, definition_stage, backend, definition, config)
    return definition, config


def backend_changed(backend: Any, ingredients: Mapping[str, Any]) -> bool:
    """Whether ``backend``'s configuration is no longer the one ``ingredients`` name (changed in
    place since they were made: its build factory is not frozen), or cannot be read now."""
    try:
        return bool(_facts.backend_config(backend) != ingredients["backend_config"])
    except Exception:  # (read when the ingredients were made: something changed)
        return True


def keying_problem() -> str | None:
    """Why this process can key no variant, or None: a gt4py imported from a source tree with a
    file changed since the process could first have read one (``_facts.changed_since_start_at``)
    may run other code than the files hold (a module imported before the edit), so a key naming
    the files as they are would name what this process did not build with, and hits would load
    what it does not run (docs/keys.md)."""
    tree = toolchain.gt4py_sources()
    if tree is not None and _facts.changed_since_start_at(tree.changed_ns):
        return (f"gt4py's source file '{tree.changed_file}' changed since this process imported gt4py:"
                " it may run other code than the files hold")
    return None


def backend_name(backend: Any) -> str:
    return str(getattr(backend, "name", type(backend).__qualname__))


def _shared_ingredients(backend: Any, args: Any, config: str) -> dict[str, Any]:
    name = backend_name(backend)
    family = toolchain.backend_family(name)
    facts = toolchain.toolchain_facts(family)
    _facts.remember_versions()
    device = _device_type(backend)
    arch = toolchain.device_arch(device)
    kind = toolchain.gpu_kind(device)
    if kind is not None:
        facts = toolchain.gpu_facts(facts, device, arch)
    ingredients: dict[str, Any] = {
        "backend": name,
        # Serialized at every lookup (about 0.1 ms; a compile() call's hits share one:
        # one_compile_call), never remembered by object: a backend can be changed in place (its build factory is
        # not frozen), and gt4py follows it.
        "backend_config": config,
        "arg_types": [_compat.type_text(t) for t in args.args],
        "kwarg_types": {k: _compat.type_text(t) for k, t in sorted(args.kwargs.items())},
        "static_args": _descriptors(args.argument_descriptor_contexts),
        "connectivity_types": _compat.offset_provider_type(args.offset_provider),
        "column_axis": None if args.column_axis is None else str(args.column_axis),
        "device": {"type": device, "arch": arch},
        **{f"toolchain.{key}": value for key, value in facts.items()},
    }
    if tables := _compat.connectivity_tables(args.offset_provider):
        # gt4py's domain inference reads the tables' sizes and indices (docs/keys.md); only
        # where there are tables, so keys without connectivities stay as they were
        ingredients["connectivity_tables"] = tables
    if family == "roundtrip":  # its executor puts gt4py's DEBUG, read when it runs, in the artifact
        ingredients["debug"] = _compat.debug_flag()
    if (family in ("dace", "other") or facts.get("cmake_toolchain_native")
            or toolchain.names_native_code(f"{facts.get('build_env')} {_compat.cmake_flags(backend)}")):
        # dace builds with -march=native by default: its code is for this CPU only; so is
        # gtfn's with such flags (the environment's, a CMake toolchain file's, the backend's).
        ingredients["cpu_features"] = toolchain.cpu_features()
    return ingredients


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
