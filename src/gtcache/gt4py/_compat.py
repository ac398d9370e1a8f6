"""The one place that knows gt4py's internals and their differences between versions.

Supported: gt4py 1.2.1 (what icon4py 0.4.1 pins) through 1.2.3. Module moves
between them (1.2.1 -> 1.2.3):

- ``ConcreteProgramDef``: ``otf.definitions`` -> ``otf.stages``
- ``CompilationArtifact``: ``otf.stages`` -> ``otf.artifacts``

Everything else used here (``compilation_tasks.make_compilation_task``,
``runners``, ``CompiledProgramsPool``, the artifact classes) has the same
module and signature in both. Other gtcache modules import gt4py only through
this one, but for two: ``gtcache.examples`` (its DSL programs are gt4py code) and
``gtcache.doctor`` (it imports ``gt4py.next`` as a model run does). ``make lint``
checks it (the "gt4py" contract in pyproject.toml; docs/architecture.md, "Layers").
"""

from __future__ import annotations

import builtins
import collections
import copyreg
import dataclasses
import enum
import functools
import importlib
import io
import operator
import pickle
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
import typing
from typing import Any, NamedTuple

import numpy as np
import xxhash

import gt4py
from gt4py._core import definitions as core_defs
from gt4py.eve import concepts as eve_concepts
from gt4py.next import backend as gtx_backend, common, config, fingerprinting
from gt4py.next.embedded import nd_array_field
from gt4py.next.ffront import source_utils
from gt4py.next.iterator import ir as itir
from gt4py.next.otf import compilation_tasks, compiled_program, runners
from gt4py.next.type_system import type_specifications as ts, type_translation

try:  # 1.2.3
    from gt4py.next.otf.stages import ConcreteProgramDef
except ImportError:  # 1.2.1
    from gt4py.next.otf.definitions import ConcreteProgramDef  # type: ignore[no-redef]

__all__ = [
    "ARTIFACT_CLASSES",
    "BACKENDS",
    "BackendName",
    "GT4PY_VERSION",
    "KNOWN_GT4PY_VERSIONS",
    "ConcreteProgramDef",
    "Dimension",
    "DimensionKind",
    "DeviceType",
    "artifact_class",
    "backend",
    "backend_digest",
    "backend_fingerprint",
    "gtfn_backend",
    "backend_short_name",
    "connectivity_tables",
    "content_bytes",
    "is_own_code",
    "debug_flag",
    "CLOSURE_FROM_SOURCE",
    "CONSTANT_NAMESPACES",
    "closure_global_names",
    "closure_vars",
    "global_values",
    "fingerprinting",
    "has_custom_compile",
    "variant_callbacks",
    "is_backend",
    "is_program",
    "compilation_tasks",
    "compiled_program",
    "ir_fingerprint",
    "offset_provider_type",
    "planning_backend",
    "parsed_as_defined",
    "runners",
    "scalar_parameters",
    "type_text",
]

GT4PY_VERSION: str = gt4py.__version__
#: The gt4py releases this module was checked against (the test suite fails on any other:
#: a new release needs its internals read before it is added here).
KNOWN_GT4PY_VERSIONS = ("1.2.1", "1.2.2", "1.2.3")
DeviceType = core_defs.DeviceType
Dimension = common.Dimension
DimensionKind = common.DimensionKind

#: Artifact kind -> (module, class name). Imported lazily: dace is slow to import.
ARTIFACT_CLASSES: dict[str, tuple[str, str]] = {
    "gtfn": ("gt4py.next.program_processors.runners.gtfn", "GTFNCompilationArtifact"),
    "dace": (
        "gt4py.next.program_processors.runners.dace.workflow.compilation",
        "DaCeCompilationArtifact",
    ),
    "roundtrip": ("gt4py.next.program_processors.runners.roundtrip", "RoundtripArtifact"),
}


def artifact_class(kind: str) -> type:
    module_name, class_name = ARTIFACT_CLASSES[kind]
    module = importlib.import_module(module_name)
    cls: type = getattr(module, class_name)
    return cls


def artifact_kind(artifact: object) -> str | None:
    """The kind of an artifact by its exact class, without importing any backend."""
    cls = type(artifact)
    for kind, (module_name, class_name) in ARTIFACT_CLASSES.items():
        if cls.__module__ == module_name and cls.__qualname__ == class_name:
            return kind
    return None


class BackendName(NamedTuple):  # a table row (not a data class: cheaper to create at import)
    """Where gt4py defines a backend (imported on first use: dace is slow to import) and the
    ``name`` the backend object has (how a program's own backend is named back)."""

    module: str
    attribute: str
    name: str


#: gtcache's short backend names (``gtcache warm --backend``, manifests, the ledger) -> gt4py's.
BACKENDS: dict[str, BackendName] = {
    "gtfn_cpu": BackendName("gt4py.next", "gtfn_cpu", "run_gtfn_cpu"),
    "gtfn_gpu": BackendName("gt4py.next", "gtfn_gpu", "run_gtfn_gpu"),
    "dace_cpu": BackendName("gt4py.next.program_processors.runners.dace", "run_dace_cpu", "run_dace_cpu_opt"),
    "dace_gpu": BackendName("gt4py.next.program_processors.runners.dace", "run_dace_gpu", "run_dace_gpu_opt"),
    "roundtrip": BackendName("gt4py.next", "itir_python", "roundtrip"),
}


def backend(short_name: str) -> Any:
    """The gt4py backend of a short name in ``BACKENDS`` (``KeyError`` for another)."""
    where = BACKENDS[short_name]
    return getattr(importlib.import_module(where.module), where.attribute)


def backend_short_name(backend: object) -> str | None:
    """The short name of one of gt4py's own backends, by its ``name``; None for any other."""
    name = str(getattr(backend, "name", ""))
    return next((short for short, where in BACKENDS.items() if where.name == name), None)


def is_backend(value: object) -> bool:
    return isinstance(value, gtx_backend.Backend)


def is_program(value: object) -> bool:
    """A ``@gtx.program`` (looked up on each call: importing dace's backend replaces the class)."""
    from gt4py.next.ffront import decorator

    return isinstance(value, decorator.Program)


def _ir_node(node: Any) -> Any:
    """A node by the fields its equality compares: source locations and the types inference
    attaches (``eq=False``) left out, a literal's type (``itir.Literal.type``, ``eq=True``:
    ``0.1`` as float32 or float64 is other code) kept."""
    cls = type(node)
    if (deconstruct := _IR_NODES.get(cls)) is None:
        skipped = [f.name for f in getattr(cls, "__attrs_attrs__", ()) if not f.eq]
        deconstruct = _IR_NODES[cls] = fingerprinting.skipping_fields_node_deconstructor(*skipped)
    return deconstruct(node)


#: Per node class, its deconstruction (classes do not change in a process).
_IR_NODES: dict[type, Callable[[Any], Any]] = {}

#: Strict (cross-process, by-reference) fingerprint of lowered IR. gt4py's own
#: ``lenient_ir_fingerprinter`` skips ``location`` and ``type`` on every node (a literal's
#: type too) and may key objects by ``id()``: not for a persistent cache.
_ir_fingerprinter = fingerprinting.make_fingerprinter(
    deconstructor=fingerprinting.make_strict_data_deconstructor({eve_concepts.Node: _ir_node})
)

#: Strict fingerprint of a backend's toolchain, blind to the build-cache lifetime
#: (session or persistent decides where gt4py builds, not what it builds).
_backend_fingerprinter = fingerprinting.make_fingerprinter(
    deconstructor=fingerprinting.make_strict_data_deconstructor(
        {
            config.BuildCacheLifetime: lambda _: fingerprinting.Deconstruction.from_typed_value(
                config.BuildCacheLifetime
            )
        }
    )
)


def ir_fingerprint(program: itir.Program) -> str:
    """Fingerprint of a lowered program by what makes it equal to another (``_ir_node``)."""
    return str(_ir_fingerprinter(program))


def backend_fingerprint(backend: Any) -> str:
    """Cross-process fingerprint of everything in a backend's toolchain (steps and options).

    Walks the frozen dataclasses of the executor and transforms (every option of
    translation, bindings and compilation, dace's non-default config included) and
    references callables by qualified name.
    """
    return str(_backend_fingerprinter((backend.executor, backend.transforms)))


def gtfn_backend(cmake_build_type: Any = None) -> Any:
    """A new gtfn CPU backend like ``run_gtfn``, optionally with another CMake build type (a
    ``config.CMakeBuildType``). gt4py 1.2.1 makes backends with factory_boy factories; later
    releases with ``make_gtfn_toolchain``. For tests and benchmarks that need a fresh object."""
    from gt4py.next.program_processors.runners import gtfn

    if hasattr(gtfn, "make_gtfn_toolchain"):
        config = gtfn.GTFNConfig() if cmake_build_type is None else gtfn.GTFNConfig(cmake_build_type=cmake_build_type)
        return gtfn.make_gtfn_toolchain(config)
    options = {} if cmake_build_type is None else {"otf_workflow__cmake_build_type": cmake_build_type}
    return gtfn.GTFNBackendFactory(**options)  # type: ignore[attr-defined]  # gt4py 1.2.1


def backend_digest(backend: Any) -> tuple[bytes, frozenset[str]] | None:
    """What ``backend_fingerprint`` reads, serialized fast (``content_bytes``), and the modules
    of the data classes in it; None when it cannot be serialized (then nothing is cached)."""
    return content_bytes((backend.executor, backend.transforms))


#: A live object's identity, unique while it lives as ``id()``'s is, without ``id()``'s audit
#: event: where an audit hook written in Python is installed (gt4py's ``filelock`` installs
#: one to watch for forks), every ``id()`` and every read of a function's ``__code__`` runs it:
#: 0.6 us instead of 0.06, and a first hit made some 160 such calls. ``object.__hash__`` is the
#: object's address rotated by four bits (CPython's ``_Py_HashPointer``; the low four bits of
#: an object's address are 0): another number than ``id()``'s, one to one with it.
identity: Callable[[object], int] = object.__hash__

#: A custom reduction for ``content_bytes``: (a module-level marker function, its arguments).
Reduction = tuple[Callable[..., Any], tuple[Any, ...]]


def content_bytes(
    obj: Any, overrides: Mapping[type, Callable[[Any], Reduction]] | None = None
) -> tuple[bytes, frozenset[str]] | None:
    """A serialization of everything a strict gt4py fingerprint of ``obj`` reads, made fast (C
    pickling), and the modules of the data classes in it; None when it cannot be made.

    Equal serializations mean equal fingerprints: data classes are written as their class
    (by reference) and the fields gt4py fingerprints (``gt4py_metadata(fingerprint=False)``
    ones left out, as gt4py does); classes and functions by a qualified name gt4py accepts;
    everything else as pickle writes it, through the same ``__reduce_ex__(2)`` / ``copyreg``
    reduction gt4py's fallback deconstructs (containers and enums with all their content).
    ``overrides`` (by type, looked up along the MRO like gt4py's dispatch; a mapping that
    does not change) mirror a fingerprinter's own deconstructors. Objects gt4py treats
    otherwise (mocks, data classes that are also containers, modules) make it None. The
    bytes are hashed, never unpickled.
    """
    if _DATA_FIELDS is None or _FINGERPRINTED is None or _REFERENCE is None:
        return None  # another gt4py: no shortcut
    stream = io.BytesIO()
    pickler = _ContentPickler(stream, overrides or _NO_OVERRIDES)
    try:
        pickler.dump(obj)
    except Exception:  # pickling refused something (or an override did): no shortcut
        return None
    return stream.getvalue(), frozenset(pickler.modules)


_DATA_FIELDS: Any = getattr(fingerprinting, "_data_fields", None)
_FINGERPRINTED: Any = getattr(fingerprinting, "_is_fingerprinted_field", None)
_REFERENCE: Any = getattr(fingerprinting, "_reference_by_fully_qualified_name", None)
_NO_OVERRIDES: Mapping[type, Callable[[Any], Reduction]] = {}

#: What ``_ContentPickler`` does with an object: ``action(pickler, obj)`` returns what
#: ``reducer_override`` returns.
_Action = Callable[["_ContentPickler", Any], Any]

#: Per ``overrides`` mapping (by identity, kept alive), per class: the action for its
#: instances (``_action``), worked out once per class. Classes do not change in a process,
#: and neither does what gt4py says of them.
_ACTIONS: dict[int, tuple[Mapping[type, Callable[[Any], Reduction]], dict[type, _Action]]] = {}


class _ContentPickler(pickle.Pickler):
    """The pickler of ``content_bytes`` (pickle calls ``reducer_override`` for every object
    but ``None``, booleans and instances of the built-in numbers, strings and containers)."""

    def __init__(self, stream: io.BytesIO, overrides: Mapping[type, Callable[[Any], Reduction]]):
        # Protocol 2: objects reduce as gt4py deconstructs them (``__reduce_ex__(2)``); no
        # renaming of modules to their Python 2 names, which made two classes one
        # (``collections.UserDict`` and a ``UserDict.IterableUserDict``).
        super().__init__(stream, protocol=2, fix_imports=False)
        shared = _ACTIONS.get(identity(overrides))
        if shared is None or shared[0] is not overrides:
            if len(_ACTIONS) >= 64:  # (callers pass module-level mappings: a few)
                _ACTIONS.clear()
            shared = _ACTIONS[identity(overrides)] = (overrides, {})
        self.overrides = overrides
        self._actions = shared[1]
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        action = self._actions.get(cls)
        if action is None:
            action = self._actions[cls] = _action(cls, self.overrides)
        return action(self, obj)


def _action(cls: type, overrides: Mapping[type, Callable[[Any], Reduction]]) -> _Action:
    """How ``_ContentPickler`` writes the instances of ``cls``: an override found along its MRO
    (gt4py's dispatch), a class or function by its name (``_named``), a data class by its
    fingerprinted fields (``_class_plan``), else as pickle does."""
    if overrides and (override := next((overrides[base] for base in cls.__mro__ if base in overrides), None)):
        if cls is types.FunctionType:  # the markers are functions: written by name
            return lambda pickler, obj: NotImplemented if obj is data_fields_of or obj is mirrored else override(obj)
        return lambda pickler, obj: override(obj)
    if issubclass(cls, (type, types.FunctionType, types.BuiltinFunctionType)):
        return _named_enum if issubclass(cls, enum.EnumMeta) else _named
    plan = _class_plan(cls)
    if plan is None:
        def as_pickle(pickler: _ContentPickler, obj: Any) -> Any:
            if obj.__class__ is not cls:
                return _by_claimed_class(pickler, obj)
            return NotImplemented
        return as_pickle
    if isinstance(plan, str):
        refusal = plan

        def refuse(pickler: _ContentPickler, obj: Any) -> Any:
            if obj.__class__ is not cls:
                return _by_claimed_class(pickler, obj)
            raise TypeError(refusal)
        return refuse
    module, (names, values) = cls.__module__, plan

    def fields(pickler: _ContentPickler, obj: Any) -> Any:
        if obj.__class__ is not cls:
            return _by_claimed_class(pickler, obj)
        pickler.modules.add(module)
        return data_fields_of, (cls, names, values(obj))
    return fields


def _by_claimed_class(pickler: _ContentPickler, obj: Any) -> Any:
    """An object whose ``__class__`` is not its class (a mock's says what it mocks): what it
    claims decides whether it is a class or function, as in ``isinstance`` and gt4py's
    dispatch; its class decides the rest."""
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return _named_enum(pickler, obj) if isinstance(obj, enum.EnumMeta) else _named(pickler, obj)
    plan = _class_plan(type(obj))
    if plan is None:
        return NotImplemented
    if isinstance(plan, str):
        raise TypeError(plan)
    pickler.modules.add(type(obj).__module__)
    names, values = plan
    return data_fields_of, (type(obj), names, values(obj))


@functools.cache  # (module names: a few hundred in a process)
def is_own_code(module: str) -> bool:
    """Whether code of ``module`` (a ``__module__``) is keyed by its file (``_facts.backend_code``):
    not the standard library's, gt4py's (its version and, from a source tree, its files are key
    ingredients) or gtcache's markers."""
    top = module.partition(".")[0]
    return bool(top) and top not in ("gt4py", "gtcache") and top not in sys.stdlib_module_names


def _named_enum(pickler: _ContentPickler, obj: Any) -> Any:
    # gt4py reads an enum's members (pickle writes a member as its class and value): its file counts.
    pickler.modules.add(obj.__module__)
    return _named(pickler, obj)


def _named(pickler: _ContentPickler, obj: Any) -> Any:
    """A class or function: by reference when pickle checks its name as gt4py does (pickle also
    checks that the name leads to it, each time), else as the name gt4py fingerprints (checked
    by gt4py each time). The first is found once per object, and taken again while what it
    depends on is as it was: the object's type (a class's metaclass can be assigned) and no
    ``copyreg`` reducer for it (``_written_by_name``), its ``__module__`` and ``__qualname__``
    (``_pickle_checks_as_gt4py``), its module in ``sys.modules`` (pickle would import it again)."""
    if obj is data_fields_of or obj is mirrored:
        return NotImplemented
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    cls = type(obj)
    seen = _BY_REFERENCE.get(identity(obj))
    if (seen is not None and seen[0] is obj and seen[1] is cls and seen[2] == module and seen[3] == name
            and cls not in copyreg.dispatch_table and not copyreg._extension_registry  # type: ignore[attr-defined]
            and sys.modules.get(module) is not None):
        if seen[4]:
            pickler.modules.add(module)
        return NotImplemented
    # gt4py's fingerprint reads only the name: the module's file counts (``_facts.backend_code``)
    own = module.__class__ is str and is_own_code(module)
    if own:
        pickler.modules.add(typing.cast(str, module))
    by_name = _written_by_name(obj)
    if by_name and _pickle_checks_as_gt4py(obj):
        if len(_BY_REFERENCE) >= _MAX_BY_REFERENCE:
            _BY_REFERENCE.pop(next(iter(_BY_REFERENCE)), None)
        _BY_REFERENCE[identity(obj)] = (obj, cls, module, name, own)
        return NotImplemented  # pickled by reference (pickle checks the name resolves too)
    reference = _REFERENCE(obj, True)  # TypeError where gt4py refuses the reference
    # What pickle would not write by its name (a reduced metaclass's class) is written as
    # the name gt4py fingerprints.
    return NotImplemented if by_name else (mirrored, (b"gtcache-reference", reference))


#: The classes and functions ``_named`` found pickle writes by reference (by identity, kept
#: alive), with their type, ``__module__`` and ``__qualname__`` then, and whether the module
#: is the user's (``is_own_code``). Bounded.
_BY_REFERENCE: dict[int, tuple[Any, type, Any, Any, bool]] = {}
_MAX_BY_REFERENCE = 8192


def _class_plan(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] | str | None:
    """How instances of ``cls`` that no override takes are written: ``None`` as pickle does, a
    data class's fingerprinted field names and a function reading their values (as a tuple),
    a ``TypeError`` message: refused."""
    fields = _DATA_FIELDS(cls)
    if fields is None:
        return "a module" if issubclass(cls, types.ModuleType) else None
    if not _PLAIN_DATA_CLASS.isdisjoint(cls.__mro__[1:]):
        return f"data class '{cls.__qualname__}' is also a container, enum or mock"
    names = tuple(f.name for f in fields if _FINGERPRINTED(f.metadata))
    if len(names) > 1:  # the values read in C: a first hit reads some hundred fields
        return names, operator.attrgetter(*names)
    return names, (lambda obj: (getattr(obj, names[0]),)) if names else (lambda obj: ())


def _written_by_name(obj: type | types.FunctionType | types.BuiltinFunctionType) -> bool:
    """Whether pickle writes ``obj`` by reference (``save_global``: the module of ``__module__``,
    ``__qualname__`` resolved in it attribute by attribute, refused unless that yields the
    object itself): a Python function, a built-in function of a module, a class whose
    metaclass has no ``copyreg`` reducer, but none of the three types ``NoneType``... Not an
    object that only claims to be a class (``__class__``), a class of a reduced metaclass
    (numpy's dtype classes) or a built-in bound to an object (``random.random``)."""
    cls = type(obj)
    if copyreg._extension_registry:  # type: ignore[attr-defined]  # (usually empty) what pickle reads
        module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if (module, name) in copyreg._extension_registry:  # type: ignore[attr-defined]
            return False  # written as its extension code
    if cls is types.FunctionType:
        return True  # (pickle consults no ``copyreg`` reducer for functions, nor for ``type``)
    if cls is types.BuiltinFunctionType:
        return isinstance(getattr(obj, "__self__", None), types.ModuleType) and cls not in copyreg.dispatch_table
    return (issubclass(cls, type) and cls not in copyreg.dispatch_table
            and obj is not _NONE_TYPE and obj is not _ELLIPSIS_TYPE and obj is not _NOT_IMPLEMENTED_TYPE)


def _pickle_checks_as_gt4py(obj: type | types.FunctionType | types.BuiltinFunctionType) -> bool:
    """For what pickle writes by reference (``_written_by_name``): whether its check refuses
    what gt4py's does (``_REFERENCE`` need not run: about 2 us an object, a third of a first
    hit's serialization of a program). pickle also refuses a ``<locals>`` part of the name (a
    ``<lambda>`` one never resolves). gt4py checks the same, but looks the module up in
    ``sys.modules`` only, refuses a ``__module__`` that is not set, and refuses ``<locals>``
    and ``<lambda>`` anywhere in the name. So: when ``__module__`` names a module already
    imported and neither name has a ``<``."""
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return (
        isinstance(module, str) and isinstance(name, str) and "<" not in module and "<" not in name
        and sys.modules.get(module) is not None
    )


_NONE_TYPE, _ELLIPSIS_TYPE, _NOT_IMPLEMENTED_TYPE = type(None), type(...), type(NotImplemented)


def data_fields_of(*_pieces: Any) -> None:
    """Marks a data class's fingerprinted fields in ``content_bytes`` (never called)."""
    raise RuntimeError("never unpickled")


def mirrored(*_pieces: Any) -> None:
    """Marks the pieces of a fingerprinter's own deconstruction in ``content_bytes`` (never called)."""
    raise RuntimeError("never unpickled")


#: Bases gt4py deconstructs by their own rules (a data class with one of them is not
#: deconstructed by its fields): ``backend_digest`` makes no shortcut for such objects.
_PLAIN_DATA_CLASS = frozenset({
    tuple, list, dict, set, frozenset, collections.defaultdict, int, float, complex, str, bytes, bytearray,
    bool, enum.Enum, enum.Flag, enum.IntEnum, enum.IntFlag, enum.EnumMeta,
    *(cls for cls in (getattr(enum, "StrEnum", None), getattr(getattr(fingerprinting, "eve_utils", None), "Namespace", None),
                      getattr(getattr(fingerprinting, "mock", None), "Mock", None)) if isinstance(cls, type)),
})


def debug_flag() -> bool:
    """gt4py's ``DEBUG`` setting now (``GT4PY_DEBUG``, or set in the running program): the
    roundtrip executor, whose own ``debug`` is None, reads it when it runs and keeps it in its
    artifact (a debug artifact is loaded from a temporary file, for tracebacks and debuggers)."""
    return bool(config.DEBUG)


def planning_backend(backend: Any) -> Any:
    """``backend`` for planning (``plan_variants``): the same fields, with gt4py's base
    ``load_artifact`` (``artifact.load()``), which takes the placeholder a planned variant
    leaves in gt4py's pool: gt4py 1.2.3's dace backend refuses a program that is not dace's
    (an ``AssertionError``: planning a dace variant failed). Its keys are the backend's: the
    same name, executor, transforms and allocator, and ``compile`` (custom or not)."""
    cls = type(backend)
    if getattr(cls, "load_artifact", None) is gtx_backend.Backend.load_artifact or not hasattr(backend, "__dict__"):
        return backend
    planning_class = _PLANNING_CLASSES.get(cls)
    if planning_class is None:
        planning_class = _PLANNING_CLASSES[cls] = type(cls.__name__, (cls,), {
            "load_artifact": gtx_backend.Backend.load_artifact, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
        })
    planning: Any = object.__new__(planning_class)
    planning.__dict__.update(backend.__dict__)
    return planning


_PLANNING_CLASSES: dict[type, type] = {}


def variant_callbacks() -> bool:
    """Whether gt4py's ``compile_variant_hook`` has callbacks besides its own definition: code
    of the user's that gt4py runs before each variant of a ``compile()`` call (True when it
    cannot tell)."""
    hook = getattr(compiled_program, "compile_variant_hook", None)
    if hook is None:
        return False
    callbacks, definition = getattr(hook, "callbacks", None), getattr(hook, "definition", None)
    return callbacks is None or any(callback is not definition for callback in callbacks)


def cmake_flags(backend: Any) -> str:
    """The flags a backend's own configuration passes to CMake, as text (gtfn's builder
    factory's ``cmake_extra_flags``; "" for a backend without them)."""
    factory = getattr(getattr(getattr(backend, "executor", None), "compilation", None), "builder_factory", None)
    return str(getattr(factory, "cmake_extra_flags", ""))


def has_custom_compile(backend: Any) -> bool:
    """A backend overriding ``compile`` is opaque: gt4py cannot split it into lowering + executor."""
    return getattr(type(backend), "compile", None) is not gtx_backend.Backend.compile


def detached(backend: Any, executor: Any) -> Any | None:
    """``backend`` with a copy of ``executor`` (a task's: the backend's) that nothing else holds,
    made as gt4py's process runner hands a task to its worker (pickled, then unpickled): a
    variant built with it is what its configuration says, whatever is changed in place on
    ``backend`` meanwhile. None when it cannot be made (an executor pickle refuses)."""
    try:
        return dataclasses.replace(backend, executor=pickle.loads(pickle.dumps(executor)))
    except Exception:  # (what pickle refuses, a backend that is not a data class)
        return None


def scalar_parameters(program: Any) -> dict[str, str | None]:
    """A program's parameters: scalar kind name (``FLOAT64``, ``INT32``, ``BOOL``) or None (fields...)."""
    params = program.past_stage.past_node.type.definition.pos_or_kw_args
    return {name: getattr(getattr(t, "kind", None), "name", None) if type(t).__name__ == "ScalarType" else None
            for name, t in params.items()}


def parsed_as_defined(backend: Any, definition_stage: Any) -> bool:
    """Whether what gt4py lowers of a program is what its definition says now.

    gt4py lowers a program from parses it keeps: its own (``backend.transforms.func_to_past``,
    or ``func_to_foast`` for a field operator called directly, cached by a fingerprint of the
    definition) and each field or scan operator's
    ``foast_stage``, parsed when it was decorated, with the closure values it had then
    (constants, ``consts.FACTOR``, folded in). The direct key reads the definitions as they
    are now. They differ after a module global is rebound (a notebook cell, a test's
    ``monkeypatch``) or a source file edited since: then a direct link would name a build of
    another definition. Each kept parse is compared with a fresh one (its tree, and its
    closure values by identity): a few ms an operator, paid only where a lowering is.
    Any doubt (a parse that fails, a backend without these steps) is a no.
    """
    from gt4py.next.ffront import func_to_foast, func_to_past, stages  # noqa: PLC0415  # gt4py.next imports them
    from gt4py.next.otf import arguments  # noqa: PLC0415

    try:
        artifact = _concrete_artifact(definition_stage, arguments.CompileTimeArgs.empty())
        if isinstance(definition_stage, stages.DSLFieldOperatorDef):  # a field operator called directly
            used = backend.transforms.func_to_foast(artifact).data
            same = _same_parse(used, func_to_foast.func_to_foast(definition_stage), "foast_node")
        else:
            used = backend.transforms.func_to_past(artifact).data
            same = _same_parse(used, func_to_past.func_to_past(definition_stage), "past_node")
        if not same:
            return False
        pending, seen = list(used.closure_vars.values()), set()
        while pending:
            value = pending.pop()
            kept = getattr(value, "__dict__", {}).get("foast_stage")
            if kept is None or id(value) in seen:
                continue
            seen.add(id(value))
            if not _same_parse(kept, func_to_foast.func_to_foast(value.definition_stage), "foast_node"):
                return False
            pending.extend(kept.closure_vars.values())
    except Exception:  # noqa: BLE001  # cannot tell: no direct link
        return False
    return True


def _same_parse(kept: Any, fresh: Any, node: str) -> bool:
    kept_vars, fresh_vars = kept.closure_vars, fresh.closure_vars
    return (
        kept_vars.keys() == fresh_vars.keys()
        and all(kept_vars[name] is fresh_vars[name] for name in kept_vars)
        and getattr(kept, node) == getattr(fresh, node)
    )


try:  # 1.2.3
    from gt4py.next.otf.workflow import ConcreteArtifact as _concrete_artifact
except ImportError:  # 1.2.1
    from gt4py.next.otf.toolchain import ConcreteArtifact as _concrete_artifact  # type: ignore[attr-defined,no-redef]


def closure_vars(func: Any, global_names: Iterable[str] | None = None) -> dict[str, Any]:
    """The closure variables gt4py's frontend resolves for a DSL function (same function it uses).

    ``global_names``: what ``closure_global_names`` gave for this function's source text
    before (kept in the facts): gt4py 1.2.3 finds them by parsing that text, so with them
    the lookup skips the parse (its ``get_closure_vars_from_function``, given the names).
    """
    if global_names is None or _GLOBAL_NAMES_OF_CODE is None:
        return dict(source_utils.get_closure_vars_from_function(func))
    nonlocals = source_utils._free_variables_from_closure_cells(func)  # noqa: SLF001  # gt4py 1.2.3
    return dict(sorted({**global_values(func, global_names), **nonlocals}.items()))


def global_values(func: Any, names: Iterable[str]) -> dict[str, Any]:
    """What ``names`` mean in a function's globals, else its builtins (names neither has are
    left out), as gt4py resolves a closure's global names and ``typing.get_type_hints``
    evaluates annotation texts."""
    global_ns = func.__globals__
    builtin_ns = global_ns.get("__builtins__", builtins.__dict__)
    if isinstance(builtin_ns, types.ModuleType):
        builtin_ns = builtin_ns.__dict__
    found = {}
    for name in names:
        if name in global_ns:
            found[name] = global_ns[name]
        elif name in builtin_ns:
            found[name] = builtin_ns[name]
    return found


def closure_global_names(code: types.CodeType) -> list[str] | None:
    """The global names gt4py's frontend finds in a function's source (None unless
    ``CLOSURE_FROM_SOURCE``: then ``closure_vars`` takes no names)."""
    return None if _GLOBAL_NAMES_OF_CODE is None else sorted(_GLOBAL_NAMES_OF_CODE(code))


#: gt4py 1.2.3 (1.2.1 asks ``inspect.getclosurevars`` instead, which reads no source).
_GLOBAL_NAMES_OF_CODE: Callable[[types.CodeType], frozenset[str]] | None = getattr(
    source_utils, "_global_names_of_code", None
)
#: Whether this gt4py finds a function's closure by parsing its source text.
CLOSURE_FROM_SOURCE = _GLOBAL_NAMES_OF_CODE is not None


def type_text(type_: Any) -> str:
    """An argument's type as gt4py writes it (``Field[[Cell, K], float64]``) with what that text
    leaves out: each dimension's kind (``K:vertical``; a kind changes the code gt4py makes).
    Types other than fields, scalars and tuples of them by their whole ``repr``."""
    cls = type(type_)
    if cls is ts.ScalarType:  # its text is complete: kind and shape
        return str(type_)
    if cls is ts.FieldType:
        dims = "..." if type_.dims is Ellipsis else ", ".join(f"{d.value}:{d.kind.value}" for d in type_.dims)
        return f"Field[[{dims}], {type_text(type_.dtype)}]"
    if cls is ts.TupleType:
        return f"tuple[{', '.join(map(type_text, type_.types))}]"
    return repr(type_)


#: What gt4py's frontend folds the attributes of to constants, besides modules:
#: ``FrozenNamespace`` instances and enum classes (the same in 1.2.1 and 1.2.3).
CONSTANT_NAMESPACES: tuple[type, ...] = typing.get_args(type_translation.ConstantPythonNamespaceObject)


def offset_provider_type(offset_provider: Any) -> dict[str, str]:
    """Readable connectivity *types* (never table contents or object ids), by offset name."""
    result = {}
    for name, value in offset_provider.items():
        result[name] = _described_offset(value)
    return result


def connectivity_tables(offset_provider: Any) -> dict[str, str]:
    """A digest of each connectivity's table (its dtype, shape and values), by offset name, for
    the offsets that have one (not a ``Dimension``, not a Cartesian connectivity).

    gt4py's domain inference (``pass_manager.apply_common_transforms``, which the gtfn, dace
    and roundtrip translation steps run) reads the concrete tables, not only their types: with
    dynamic domains it bounds an unstructured shift by every table's rows and largest index + 1
    (``_max_domain_range_sizes``; all of the offset provider's tables, used by the program or
    not), with static domains by the indices a table holds; both become literals in the code
    (a temporary's size and domain). gt4py's own persistent cache keys the tables by content.
    Digested once per table object while it lives (as gt4py's own dispatch takes an offset
    provider's values to stay what they were by identity): a table changed in place after its
    first use is not seen."""
    result = {}
    for name, value in offset_provider.items():
        if type(value) is common.Dimension:
            continue
        try:
            table = value.ndarray
        except (AttributeError, NotImplementedError):  # (a CartesianConnectivity's raises the second)
            continue
        if table is not None:
            result[name] = _table_digest(table)
    return result


def _table_digest(table: Any) -> str:
    key = identity(table)
    seen = _TABLE_DIGESTS.get(key)
    if seen is not None and seen[0]() is table:
        return str(seen[1])
    host = table if isinstance(table, np.ndarray) else table.get()  # (cupy: its copy in host memory)
    # The values in column-major order, whatever the layout (a GPU node's cupy tables must key
    # as the numpy ones of the CPU runner that warmed their variants): gt4py keeps its tables
    # column-major, hashed without a copy (a copy to row-major was 2 of 2.3 ms for an R2B4
    # grid's 20 tables); others are copied once
    columns = np.asfortranarray(host).T
    data = columns.view(np.uint8).data if host.size else b""
    text = f"{host.dtype.str}{host.shape}:{xxhash.xxh3_128_hexdigest(data)}"
    try:
        alive = weakref.ref(table, functools.partial(_forget_table, key))
    except TypeError:  # not weakly referable: digested each time
        return text
    _TABLE_DIGESTS[key] = (alive, text)
    return text


#: Per connectivity table (by identity): a weak reference to it and its digest. An entry goes
#: with its table.
_TABLE_DIGESTS: dict[int, tuple[Any, str]] = {}


def _forget_table(key: int, gone: weakref.ref[Any]) -> None:
    seen = _TABLE_DIGESTS.get(key)
    if seen is not None and seen[0] is gone:
        _TABLE_DIGESTS.pop(key, None)


def _described_offset(value: Any) -> str:
    """``_describe_type(_offset_type(value))``; for gt4py's own connectivity fields, once per
    object while it lives and what its type is made of stays as it was (icon4py passes all
    of a grid's twenty-odd connectivities to every program: some 10 us each, per variant).

    The type of such a field is made of its domain, codomain and skip value (fields of a
    frozen data class, compared by identity here) and its table's dtype and second extent
    (its shape and dtype compared here). gt4py's own dispatch takes an offset provider's
    values to stay what they were by identity alone (``common.hash_offset_provider_items_by_id``)."""
    cls = type(value)
    own = _OWN_CONNECTIVITY_CLASSES.get(cls)
    if own is None:
        own = _OWN_CONNECTIVITY_CLASSES[cls] = _ND_CONNECTIVITY is not None and issubclass(cls, _ND_CONNECTIVITY) and all(
            getattr(cls, name, None) is getattr(_ND_CONNECTIVITY, name, None) for name in _CONNECTIVITY_TYPE_READS
        ) and cls.__gt_type__ is _CONNECTIVITY_GT_TYPE
    if not own:
        return _describe_type(_offset_type(value))
    table = value.ndarray
    key = identity(value)
    seen = _DESCRIBED_OFFSETS.get(key)
    if (seen is not None and seen[0]() is value and seen[1] == table.shape and seen[2] == table.dtype
            and seen[3] is value.domain and seen[4] is value.codomain and seen[5] is value.skip_value):
        return str(seen[6])
    text = _describe_type(_connectivity_type(value))
    try:
        alive = weakref.ref(value, functools.partial(_forget_offset, key))
    except TypeError:  # not weakly referable: described each time
        return text
    _DESCRIBED_OFFSETS[key] = (alive, table.shape, table.dtype, value.domain, value.codomain, value.skip_value, text)
    return text


_ND_CONNECTIVITY: Any = getattr(nd_array_field, "NdArrayConnectivityField", None)
#: What a connectivity field's type reads (``_connectivity_type``): a class that defines any
#: of these itself is described each time.
_CONNECTIVITY_TYPE_READS = ("domain", "codomain", "skip_value", "dtype", "ndarray")
#: Per class: whether its instances' descriptions are kept (``_described_offset``).
_OWN_CONNECTIVITY_CLASSES: dict[type, bool] = {}
#: Per connectivity field (by id): a weak reference to it, what its type was made of when
#: it was described (its table's shape and dtype, its domain, codomain and skip value) and
#: the description. An entry goes with its field.
_DESCRIBED_OFFSETS: dict[int, tuple[Any, ...]] = {}


def _forget_offset(key: int, gone: weakref.ref[Any]) -> None:
    seen = _DESCRIBED_OFFSETS.get(key)
    if seen is not None and seen[0] is gone:
        _DESCRIBED_OFFSETS.pop(key, None)


def _offset_type(value: Any) -> Any:
    """``common.offset_provider_to_type`` of one value. Its ``isinstance(value, Connectivity)``
    is a runtime protocol check (every member looked up: 0.1 ms the first time per class); a
    class that inherits ``Connectivity`` (gt4py's own connectivity fields) and a ``Dimension``
    are answered without it, with what the check would say."""
    cls = type(value)
    if cls is common.Dimension:
        return value
    if _CONNECTIVITY in cls.__mro__:
        return _connectivity_type(value) if cls.__gt_type__ is _CONNECTIVITY_GT_TYPE else value.__gt_type__()
    if isinstance(value, _CONNECTIVITY):
        return value.__gt_type__()
    return value


_CONNECTIVITY: Any = common.Connectivity
_CONNECTIVITY_GT_TYPE: Any = common.Connectivity.__gt_type__


def _connectivity_type(value: Any) -> Any:
    """``Connectivity.__gt_type__`` of a class that inherits it, as gt4py 1.2.1-1.2.3 write it,
    less the protocol check its ``is_neighbor_table`` starts with (true of such a class).
    tests/gt4py/test_keys.py compares the two for every kind of connectivity."""
    dims = value.domain.dims
    if len(dims) == 2 and dims[0].kind is _HORIZONTAL and dims[1].kind is _LOCAL:
        return common.NeighborConnectivityType(
            domain=dims, codomain=value.codomain, dtype=value.dtype, skip_value=value.skip_value,
            max_neighbors=value.ndarray.shape[1],
        )
    return common.ConnectivityType(domain=dims, codomain=value.codomain, dtype=value.dtype, skip_value=value.skip_value)


_HORIZONTAL = common.DimensionKind.HORIZONTAL
_LOCAL = common.DimensionKind.LOCAL


def _describe_type(value: Any) -> str:
    cls = type(value)
    names = _DESCRIBED_FIELDS.get(cls, _UNPLANNED)
    if names is _UNPLANNED:  # data class instances by their fields (a class: by its repr)
        names = _DESCRIBED_FIELDS[cls] = (
            tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
        )
    if names is not None:  # list comprehensions, inlined by Python 3.12: a third faster than generators
        return f"{cls.__name__}({', '.join([f'{name}={_describe_type(getattr(value, name))}' for name in names])})"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join([_describe_type(v) for v in value]) + ")"
    return repr(value)


_UNPLANNED: Any = object()
#: Per class, the fields ``_describe_type`` writes (None: not a data class).
_DESCRIBED_FIELDS: dict[type, tuple[str, ...] | None] = {}
