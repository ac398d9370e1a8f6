"""Key ingredients without compiling: what must and must not change a key."""

from __future__ import annotations

import copyreg
import dataclasses
import gc
import json
import os
import pathlib
import sys
import textwrap
import time
import weakref
from collections.abc import Callable
from typing import Any

import gt4py.next as gtx
import numpy as np
import pytest

from gtcache.gt4py import _compat
from gtcache.gt4py.definition import definition_fingerprint
from tests.helpers import run_python

Edge = gtx.Dimension("Edge")
Vertex = gtx.Dimension("Vertex")
E2VDim = gtx.Dimension("E2V", kind=gtx.DimensionKind.LOCAL)


def connectivity(rows: int, cols: int, skip_value: int | None = None) -> dict:
    table = np.zeros((rows, cols), dtype=gtx.IndexType)
    return {"E2V": gtx.as_connectivity([Edge, E2VDim], codomain=Vertex, data=table, skip_value=skip_value)}


def test_connectivity_types_ignore_size_and_identity() -> None:
    assert _compat.offset_provider_type(connectivity(10, 2)) == _compat.offset_provider_type(connectivity(999, 2))


def test_connectivity_tables_are_keyed_by_content_not_identity() -> None:
    """gt4py's domain inference reads the tables' sizes and indices (docs/keys.md): another
    table is another variant, a new object holding the same table is not."""
    def tables(rows: int, first: int = 0) -> dict[str, str]:
        provider = connectivity(rows, 2)
        provider["E2V"].ndarray[0, 0] = first
        return _compat.connectivity_tables({**provider, "K": gtx.Dimension("K"), "Koff": gtx.CartesianConnectivity(Edge, 1)})

    assert tables(10) == tables(10) and list(tables(10)) == ["E2V"]
    assert tables(10) != tables(999)
    assert tables(10) != tables(10, first=5)
    # by their values whatever the layout (gt4py's column-major, row-major, strided)
    values = np.arange(40, dtype=np.int32).reshape(10, 4)
    assert len({_compat._table_digest(t) for t in (values, np.asfortranarray(values), values.copy())}) == 1
    assert _compat._table_digest(values[:, ::2]) == _compat._table_digest(values[:, ::2].copy())
    changed = np.asfortranarray(values)
    changed[9, 2] = -1
    assert _compat._table_digest(changed) != _compat._table_digest(values)
    assert _compat._table_digest(values.reshape(4, 10)) != _compat._table_digest(values)


@pytest.mark.parametrize("other", [connectivity(10, 3), connectivity(10, 2, skip_value=-1)])
def test_connectivity_types_see_max_neighbours_and_skip_values(other: dict) -> None:
    assert _compat.offset_provider_type(connectivity(10, 2)) != _compat.offset_provider_type(other)


def test_the_text_of_a_connectivity_type_stays_as_keys_of_stored_entries_have_it() -> None:
    """A key ingredient's text is part of every stored key: writing it faster must not change
    it (every entry of every store would be missed after the upgrade)."""
    assert _compat.offset_provider_type(connectivity(10, 2, skip_value=-1)) == {"E2V": (
        "NeighborConnectivityType(domain=(Dimension(value='Edge', kind=<DimensionKind.HORIZONTAL: 'horizontal'>),"
        " Dimension(value='E2V', kind=<DimensionKind.LOCAL: 'local'>)),"
        " codomain=Dimension(value='Vertex', kind=<DimensionKind.HORIZONTAL: 'horizontal'>), skip_value=-1,"
        f" dtype=DType(scalar_type={np.dtype(gtx.IndexType).type!r}, tensor_shape=()), max_neighbors=2)"
    )}


def _a_function() -> None: ...


class _AClass: ...


def _nested() -> Any:
    def inner() -> None: ...
    return inner


def _shadowed() -> None: ...


_first_shadowed = _shadowed


def _shadowed() -> None: ...  # type: ignore[no-redef]  # noqa: F811  # the name now means another function


def _without_module() -> None: ...


_without_module.__module__ = None  # type: ignore[assignment]  # pickle finds it anyway, by searching every module
_a_lambda = lambda: None  # noqa: E731


def _named_oddly() -> None: ...


_named_oddly.__qualname__ = "named<lambda>oddly"  # pickle resolves it (the module has that attribute), gt4py refuses
globals()["named<lambda>oddly"] = _named_oddly


class _Reduced(type):
    """A metaclass ``copyreg`` reduces (as numpy's dtype classes): pickle writes its classes
    by that reduction, and never checks their names."""


copyreg.pickle(_Reduced, lambda cls: (str, (cls.__name__,)))


class _ReducedClass(metaclass=_Reduced): ...


_first_reduced = _ReducedClass


class _ReducedClass(metaclass=_Reduced): ...  # type: ignore[no-redef]  # noqa: F811  # shadows the first


class _ClaimsToBeAClass:
    """An object that says it is a class (``isinstance(obj, type)``), which pickle writes as an object."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type


_claiming = _ClaimsToBeAClass()


@pytest.mark.parametrize("obj, refused", [
    (_a_function, False), (_AClass, False), (len, False), (np.float64, False),
    (_nested(), True), (_first_shadowed, True), (_without_module, True), (_a_lambda, True), (type(None), True),
    (__import__("random").random, True),  # a built-in bound to an object (written as that object by pickle)
    (_named_oddly, True), (_ReducedClass, False), (_first_reduced, True), (_claiming, True),
], ids=lambda value: getattr(type(value), "__name__", "") if value is _claiming else getattr(value, "__qualname__", str(value)))
def test_content_serialization_refuses_the_references_gt4py_refuses(obj: Any, refused: bool) -> None:
    """The direct key's serialization (``content_bytes``) writes classes and functions by name
    and leaves most checks of that name to pickle: it must refuse what gt4py's fingerprinting
    refuses (no shortcut then, and no direct key), and nothing else."""
    try:
        _compat._REFERENCE(obj, True)
    except Exception:  # TypeError; AttributeError for an object without a qualified name
        gt4py_refuses = True
    else:
        gt4py_refuses = False
    assert gt4py_refuses == refused
    assert (_compat.content_bytes([obj]) is None) == refused


def test_content_serialization_writes_classes_pickle_would_reduce_by_their_full_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """gt4py fingerprints a class by its full name; pickle writes a class of a metaclass that
    ``copyreg`` reduces by that reduction (here: the bare name), which two classes can share."""
    written = []
    for cls in _same_named_classes(monkeypatch, _Reduced, "gtcache_test"):
        _compat._REFERENCE(cls, True)  # gt4py takes both
        written.append(_compat.content_bytes([cls]))
    assert None not in written and written[0] != written[1]


def _same_named_classes(monkeypatch: pytest.MonkeyPatch, metaclass: type, prefix: str) -> list[type]:
    """Two classes ``Same`` of ``metaclass``, in two modules named after ``prefix``."""
    import types

    classes = []
    for module_name in (f"{prefix}_first", f"{prefix}_second"):
        module = types.ModuleType(module_name)
        monkeypatch.setitem(sys.modules, module_name, module)
        cls = metaclass("Same", (), {"__module__": module_name})
        module.Same = cls  # type: ignore[attr-defined]
        classes.append(cls)
    return classes


def test_a_renamed_class_is_written_by_the_name_it_has_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is found of a class once per process is its metaclass's handling, not its name: a
    class renamed since is written by its new name, and refused when that name does not lead
    to it."""
    import types

    module = types.ModuleType("gtcache_test_renamed")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cls = type("Before", (), {"__module__": module.__name__})
    module.Before = cls  # type: ignore[attr-defined]
    before = _compat.content_bytes([cls])
    cls.__qualname__ = cls.__name__ = "After"
    module.After = cls  # type: ignore[attr-defined]
    after = _compat.content_bytes([cls])
    assert before is not None and after is not None and after[0] != before[0] and b"After" in after[0]
    del module.After  # type: ignore[attr-defined]
    assert _compat.content_bytes([cls]) is None


def test_a_function_whose_module_left_sys_modules_is_refused_after_being_written(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What pickle writes by name is found once per object (``_compat._named``), but gt4py
    refuses a reference whose module is not in ``sys.modules`` any more: so must the
    serialization then, without importing the module again (as pickle would, running its code)."""
    (tmp_path / "gtcache_test_leaving.py").write_text("def kept():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gtcache_test_leaving  # type: ignore[import-not-found]

    function = gtcache_test_leaving.kept
    assert _compat.content_bytes([function]) is not None
    monkeypatch.delitem(sys.modules, "gtcache_test_leaving")
    with pytest.raises(TypeError):
        _compat._REFERENCE(function, True)  # gt4py refuses it now
    assert _compat.content_bytes([function]) is None
    assert "gtcache_test_leaving" not in sys.modules
    monkeypatch.setitem(sys.modules, "gtcache_test_leaving", gtcache_test_leaving)
    assert _compat.content_bytes([function]) is not None


def test_classes_of_a_metaclass_copyreg_reduces_later_are_written_by_their_full_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library may register a ``copyreg`` reducer for a metaclass after its classes were
    written: pickle then writes them by that reducer (here a bare name two classes share),
    so gtcache writes them by their full names from then on."""
    written = _same_named_classes(monkeypatch, _LateReduced, "gtcache_test_late")
    assert all(_compat.content_bytes([cls]) is not None for cls in written)
    monkeypatch.setitem(copyreg.dispatch_table, _LateReduced, lambda cls: (str, (cls.__name__,)))
    first, second = (_compat.content_bytes([cls]) for cls in written)
    assert first is not None and second is not None and first != second


class _LateReduced(type):
    """A metaclass ``copyreg`` reduces only from some point on (the test registers it)."""


def test_a_class_given_a_reduced_metaclass_later_is_written_by_its_full_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether pickle writes a class by name is found once per class (``_compat._named``): not
    past an assignment of its metaclass (``cls.__class__ = ...``) to one ``copyreg`` reduces
    (here to a bare name two classes share), nor a reducer registered while another went
    (``copyreg``'s tables keep their size)."""
    written = _same_named_classes(monkeypatch, _Plain, "gtcache_test_reassigned")
    assert all(_compat.content_bytes([cls]) is not None for cls in written)  # by reference, once
    monkeypatch.setitem(copyreg.dispatch_table, _Reassigned, lambda cls: (str, (cls.__name__,)))
    for cls in written:
        cls.__class__ = _Reassigned
    first, second = (_compat.content_bytes([cls]) for cls in written)
    assert first is None or second is None or first != second


class _Plain(type):
    """A metaclass no ``copyreg`` reducer takes."""


class _Reassigned(type):
    """A metaclass a ``copyreg`` reducer takes (the test registers it)."""


def test_builtins_copyreg_reduces_are_written_by_their_full_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """pickle writes a built-in function by a ``copyreg`` reducer registered for its type:
    ``math.sqrt`` and ``cmath.sqrt`` would be written alike (gt4py tells them apart). (With
    every built-in reduced so, protocol 2's own reduction of bytes, through the built-in
    ``_codecs.encode``, cannot be written either: refused, which is never wrong.)"""
    import cmath
    import math
    import types

    monkeypatch.setitem(copyreg.dispatch_table, types.BuiltinFunctionType, lambda f: (str, (f.__name__,)))
    ours, other = _compat.content_bytes([math.sqrt]), _compat.content_bytes([cmath.sqrt])
    assert ours is None or other is None or ours != other


def test_functions_with_a_copyreg_extension_code_are_written_by_their_full_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """pickle writes a global registered with ``copyreg.add_extension`` as its code: one code
    moved from one function to another wrote both alike (gt4py tells them apart)."""
    import types

    module = types.ModuleType("gtcache_test_extension")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    written = []
    for name in ("first", "second"):
        function = types.FunctionType((lambda: None).__code__, {}, name)
        function.__module__, function.__qualname__ = module.__name__, name
        setattr(module, name, function)
        copyreg.add_extension(module.__name__, name, 0x7FFF_FF00)
        try:
            written.append(_compat.content_bytes([function]))
        finally:
            copyreg.remove_extension(module.__name__, name, 0x7FFF_FF00)
    assert None not in written and written[0] != written[1]


def test_a_data_class_claiming_to_be_a_class_is_written_as_one() -> None:
    """An object whose ``__class__`` says ``type`` is fingerprinted by gt4py as a class (by
    its name), whatever its real class: two such data class instances of equal fields and
    other names are told apart (or refused), never written alike by their fields."""
    first, second = _Claiming(1), _Claiming(1)
    object.__setattr__(first, "__qualname__", "first")
    object.__setattr__(second, "__qualname__", "second")
    ours, other = _compat.content_bytes([first]), _compat.content_bytes([second])
    assert ours is None or other is None or ours != other


@dataclasses.dataclass(frozen=True)
class _Claiming:
    tag: int

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type


def test_an_enum_makes_its_module_part_of_the_content_key() -> None:
    """pickle writes an enum member as its class (by name) and value, but gt4py reads the
    class's members: a member added in the file must change the key, as the file does."""
    from gt4py.next import config

    for value in (config.CMakeBuildType.RELEASE, config.CMakeBuildType):
        made = _compat.content_bytes([value])
        assert made is not None and config.__name__ in made[1], made


def test_content_serialization_keeps_python_3_module_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pickle's protocol 2 renames modules to their Python 2 names unless told not to: then
    ``collections.UserDict`` and a class ``UserDict.IterableUserDict`` were written alike."""
    import collections
    import types

    module = types.ModuleType("UserDict")
    monkeypatch.setitem(sys.modules, "UserDict", module)

    class IterableUserDict: ...

    IterableUserDict.__module__, IterableUserDict.__qualname__ = "UserDict", "IterableUserDict"
    module.IterableUserDict = IterableUserDict  # type: ignore[attr-defined]
    ours, other = _compat.content_bytes([collections.UserDict]), _compat.content_bytes([IterableUserDict])
    assert ours is not None and other is not None and ours != other


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # NumPy 2.5 deprecates changing shape and dtype in place
def test_a_connectivity_described_before_is_described_again_when_its_table_changes_shape() -> None:
    """A connectivity field's description is kept while the object lives (``_described_offset``):
    not past an in-place change of its table's shape or dtype, which changes its type."""
    provider = connectivity(12, 2)
    before = _compat.offset_provider_type(provider)
    assert _compat.offset_provider_type(provider) == before
    table = np.zeros((12, 3), dtype=gtx.IndexType)  # C-contiguous: numpy can change it in place
    object.__setattr__(provider["E2V"], "_ndarray", table)  # (gt4py's own tables are views: it cannot)
    assert "max_neighbors=3" in _compat.offset_provider_type(provider)["E2V"]
    table.shape = (9, 4)
    assert "max_neighbors=4" in _compat.offset_provider_type(provider)["E2V"]
    table.dtype = np.int64 if table.dtype.itemsize == 4 else np.int32  # (9, 2) or (9, 8)
    after = _compat.offset_provider_type(provider)["E2V"]
    assert after == _compat._describe_type(provider["E2V"].__gt_type__()) and "max_neighbors=4" not in after
    object.__setattr__(provider["E2V"], "_skip_value", -1)  # the other parts of its type too
    assert "skip_value=-1" in _compat.offset_provider_type(provider)["E2V"]
    object.__setattr__(provider["E2V"], "_codomain", Edge)
    assert "codomain=Dimension(value='Edge'" in _compat.offset_provider_type(provider)["E2V"]


def test_a_kept_connectivity_description_goes_with_its_object() -> None:
    """Kept by the object's id while it lives: the kept descriptions do not keep tables
    alive, and an entry left at an id a new object now has (a freed object's address,
    which CPython may give to the next one) is not used for it, nor dropped by the old
    object's farewell."""
    gc.collect()  # earlier tests' cyclic garbage goes now, not amid the counting
    kept = len(_compat._DESCRIBED_OFFSETS)
    for i in range(40):
        skip_value = -1 if i % 2 else None  # tables of one shape: only the object tells them apart
        provider = connectivity(10, 2, skip_value=skip_value)
        assert f"skip_value={skip_value}," in _compat.offset_provider_type(provider)["E2V"]
        table = weakref.ref(provider["E2V"].ndarray)
        del provider
        assert table() is None
    assert len(_compat._DESCRIBED_OFFSETS) == kept

    class Gone:
        pass

    field = connectivity(10, 2)["E2V"]
    gone = weakref.ref(Gone())  # dead: the object that had this address before
    parts = (field.ndarray.shape, field.ndarray.dtype, field.domain, field.codomain, field.skip_value)
    _compat._DESCRIBED_OFFSETS[_compat.identity(field)] = (gone, *parts, "left by the freed object")
    assert _compat.offset_provider_type({"E2V": field})["E2V"] == _compat._describe_type(field.__gt_type__())
    _compat._forget_offset(_compat.identity(field), gone)  # the freed object's callback, run late
    assert _compat._DESCRIBED_OFFSETS[_compat.identity(field)][0]() is field
    del field
    assert len(_compat._DESCRIBED_OFFSETS) == kept


def test_connectivities_of_other_classes_are_described_each_time() -> None:
    """Only gt4py's own connectivity fields have their descriptions kept: a subclass that
    defines what the type reads itself, or a Cartesian connectivity, is described anew."""
    from gt4py.next.embedded import nd_array_field

    class Moving(nd_array_field.NumPyArrayConnectivityField):  # type: ignore[misc]
        codomain = property(lambda self: self.__dict__.get("moved", Vertex))

    table = connectivity(10, 2)["E2V"]
    moving = Moving.from_array(table.ndarray, codomain=Vertex, domain=table.domain)
    assert "codomain=Dimension(value='Vertex'" in _compat.offset_provider_type({"E2V": moving})["E2V"]
    moving.__dict__["moved"] = Edge
    assert "codomain=Dimension(value='Edge'" in _compat.offset_provider_type({"E2V": moving})["E2V"]
    cartesian = gtx.CartesianConnectivity(Edge, 1)
    assert _compat.offset_provider_type({"Eoff": cartesian}) == {"Eoff": _compat._describe_type(cartesian.__gt_type__())}


def test_connectivity_types_are_what_gt4py_makes_of_the_offset_provider() -> None:
    """The fast path (no protocol check for gt4py's own classes) describes what gt4py's
    ``offset_provider_to_type`` gives: connectivity fields, dimensions (cartesian offsets)
    and connectivity types (an offset provider type) alike."""
    from gt4py.next import common

    table = connectivity(10, 2)["E2V"]
    provider = {"E2V": table, "Ioff": Edge, "V2E": table.__gt_type__(), "K": gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL)}
    expected = {name: _compat._describe_type(value) for name, value in common.offset_provider_to_type(provider).items()}
    assert _compat.offset_provider_type(provider) == expected
    assert "NeighborConnectivityType" in expected["E2V"] and expected["E2V"] == expected["V2E"]


def test_connectivity_types_are_what_gt4py_makes_of_every_kind_of_connectivity() -> None:
    """``_offset_type`` rewrites gt4py's ``Connectivity.__gt_type__`` without its protocol check:
    equal to gt4py's for neighbour tables (with and without skip values, other index types) and
    for connectivities that are not (a one-dimensional domain, a local or a vertical dimension first), and a
    subclass that overrides ``__gt_type__`` gets its own."""
    table = np.zeros((7, 3), dtype=np.int64)
    values = [
        connectivity(10, 2)["E2V"],
        connectivity(10, 4, skip_value=-1)["E2V"],
        gtx.as_connectivity([Edge, E2VDim], codomain=Vertex, data=table, skip_value=-1),
        gtx.as_connectivity([Edge], codomain=Vertex, data=np.zeros(5, dtype=gtx.IndexType)),
        gtx.as_connectivity([E2VDim, Edge], codomain=Vertex, data=np.zeros((2, 5), dtype=gtx.IndexType)),
        gtx.as_connectivity([gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL), E2VDim], codomain=Vertex,
                            data=np.zeros((5, 2), dtype=gtx.IndexType)),
    ]
    kinds = set()
    for value in values:
        assert _compat._offset_type(value) == value.__gt_type__()
        kinds.add(type(value.__gt_type__()).__name__)
    assert kinds == {"NeighborConnectivityType", "ConnectivityType"}

    marker = object()

    class Custom(type(values[0])):  # type: ignore[misc]
        def __gt_type__(self) -> Any:
            return marker

    custom = Custom(**{f.name: getattr(values[0], f.name) for f in dataclasses.fields(values[0])})
    assert _compat._offset_type(custom) is marker


BACKEND_FP = """
import json
from gtcache.examples import backend_by_name
from gtcache.gt4py import _compat
print(json.dumps({b: _compat.backend_fingerprint(backend_by_name(b)) for b in ("gtfn_cpu", "dace_cpu")}))
"""


def backend_fingerprints(**env: str) -> dict[str, str]:
    return json.loads(run_python(BACKEND_FP, env=env).strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_backend_config_is_stable_across_processes_and_cache_lifetimes() -> None:
    first = backend_fingerprints(GT4PY_BUILD_CACHE_LIFETIME="session")
    assert first == backend_fingerprints(GT4PY_BUILD_CACHE_LIFETIME="persistent")


@pytest.mark.slow
def test_backend_config_sees_build_options() -> None:
    debug = backend_fingerprints(GT4PY_CMAKE_BUILD_TYPE="debug")
    release = backend_fingerprints(GT4PY_CMAKE_BUILD_TYPE="release")
    assert debug["gtfn_cpu"] != release["gtfn_cpu"]
    assert debug["dace_cpu"] != release["dace_cpu"]


@pytest.mark.parametrize("facts", [True, False], ids=["with facts", "without"])
def test_a_backend_changed_in_place_changes_the_key(tmp_path: pathlib.Path, facts: bool) -> None:
    """gt4py's build factory is not frozen: flags added to it in place reach gt4py's next build
    (its build folder is named from a fresh fingerprint), so they reach the key of the next
    lookup too, not a fingerprint remembered for the backend object."""
    from gt4py.next.otf.arguments import CompileTimeArgs

    from gtcache import examples, open_store
    from gtcache.gt4py import _facts, ingredients

    backend = _compat.gtfn_backend()  # a backend of this test's own
    _facts.use(open_store(tmp_path / "store") if facts else None)
    try:
        before = ingredients.direct_ingredients(backend, examples.axpy.definition_stage, CompileTimeArgs.empty())
        backend.executor.compilation.builder_factory.cmake_extra_flags.append("-DCMAKE_CXX_FLAGS=-O1")
        after = ingredients.direct_ingredients(backend, examples.axpy.definition_stage, CompileTimeArgs.empty())
    finally:
        _facts.use(None)
    assert after["backend_config"] != before["backend_config"]
    assert {k: v for k, v in after.items() if k != "backend_config"} == {
        k: v for k, v in before.items() if k != "backend_config"
    }


BACKEND_RACE_SCRIPT = """
import copyreg, json, sys, threading, warnings
from gt4py.next.otf import compiled_program
from gt4py.next.otf.compilation import cache
from gtcache import examples
from gtcache.gt4py import _compat, active_hook

backend = _compat.gtfn_backend()  # a backend of this process's own
factory = backend.executor.compilation.builder_factory
flags = factory.cmake_extra_flags
if sys.argv[1] == "unpicklable":  # pickle refuses its build factory (gtcache's keys read it all the same)
    def refuse(obj):
        raise TypeError("not picklable")
    copyreg.pickle(type(factory), refuse)
changed_in = []

def profile(frame, event, arg):  # another thread's change, as a worker takes the task up
    if (event == "call" and not changed_in and frame.f_code.co_name == "__call__"
            and frame.f_code.co_filename.endswith("compilation/compiler.py")):
        changed_in.append(threading.current_thread() is threading.main_thread())
        flags.append("-DCMAKE_CXX_FLAGS=-O1")

def around_the_copy(frame, event, arg):  # ... made as the executor is copied, undone after
    if frame.f_code.co_name == "detached" and frame.f_code.co_filename.endswith("_compat.py"):
        if event == "call":
            changed_in.append(threading.current_thread() is threading.main_thread())
            flags.append("-DCMAKE_CXX_FLAGS=-O1")
        elif event == "return":
            flags.remove("-DCMAKE_CXX_FLAGS=-O1")

example = examples.EXAMPLES["axpy"]
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    threading.setprofile_all_threads(around_the_copy if sys.argv[1] == "around the copy" else profile)
    example.program.with_backend(backend).compile(offset_provider=example.offset_provider(8))
    compiled_program.wait_for_compilation()
    threading.setprofile_all_threads(None)
print("REPORT " + json.dumps({
    "changed_in_main_thread": changed_in, "flags": flags,
    "outcomes": [(o.status, o.detail) for o in active_hook().outcomes],
    "built_with_the_flag": any("O1" in p.name for p in cache._session_cache_dir_path.iterdir()),
    "warnings": [str(w.message) for w in said if "gtcache" in str(w.message)]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["picklable", "unpicklable", "around the copy"])
def test_a_backend_changed_in_place_while_its_variant_waits_for_a_worker(tmp_path: pathlib.Path, executor: str) -> None:
    """gt4py's thread runner builds a variant when a worker takes its task up: flags added to
    the backend's build factory in place meanwhile would reach the build, not the key made
    with the task (they did: stored under the key of the backend as it was). The task is built
    with a copy of the executor made with the key (pickled, as gt4py's process runner hands a
    task over): stored, built without them. An executor pickle refuses is built as it is then,
    and read again once built: changed, the build is used, not stored. The other thread's
    change is made by a profile function as the worker begins the build (``compiler.py``), or
    as the executor is copied and undone after it (the build is stored under the key of the
    backend as copied, but the direct key, of the backend as it was before and is again after,
    is not linked to it)."""
    store = tmp_path / "store"
    out = run_python(BACKEND_RACE_SCRIPT, executor,
                     env={"GTCACHE_DIR": str(store), "GT4PY_BUILD_JOBS_MODE": "thread",
                          "GT4PY_BUILD_CACHE_LIFETIME": "session"})  # (its build folders its own)
    report = json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))
    entries, links = list(store.glob("entries/*/*")), list(store.glob("direct/*/*"))
    if executor == "around the copy":
        assert report["changed_in_main_thread"] == [True] and report["flags"] == [], "changed and undone"
        assert report["built_with_the_flag"] is True, "built with the copy, as changed"
        assert report["outcomes"] == [["compiled", None]] and report["warnings"] == []
        assert len(entries) == 1 and links == [], "stored under the build key of the copy, not linked"
        return
    assert report["changed_in_main_thread"] == [False], "changed in the worker, as it began the build"
    assert report["flags"] == ["-DCMAKE_CXX_FLAGS=-O1"]
    if executor == "picklable":
        assert report["built_with_the_flag"] is False, "built with the copy made with the key"
        assert report["outcomes"] == [["compiled", None]] and report["warnings"] == []
        assert len(entries) == 1 and len(links) == 1
    else:
        assert report["built_with_the_flag"] is True, "built with the backend as changed"
        assert report["outcomes"] == [["compiled", "not stored: its backend was changed while it compiled"]]
        assert report["warnings"] == [
            "gtcache: 'axpy' was not stored: its backend (run_gtfn_cpu) was changed in place while it compiled"
            " (this process uses the build)"
        ]
        assert entries == [] and links == [], "nothing stored, nothing linked"


def test_one_compile_call_reads_the_backend_once() -> None:
    """The variants of one gt4py ``compile()`` call share the backend's (and the definition's)
    fingerprint, found for the first (``ingredients.one_compile_call``): the call sees the
    backend as it was when it began. Another backend in the call is keyed as its own; the
    next call, and a variant keyed outside a call, read it anew."""
    from gt4py.next.otf.arguments import CompileTimeArgs

    from gtcache import examples
    from gtcache.gt4py import ingredients

    backend, other = _compat.gtfn_backend(), _compat.gtfn_backend()
    flags = backend.executor.compilation.builder_factory.cmake_extra_flags
    other.executor.compilation.builder_factory.cmake_extra_flags.append("-DCMAKE_CXX_FLAGS=-O2")

    def config(of: Any) -> str:
        return ingredients.direct_ingredients(of, examples.axpy.definition_stage, CompileTimeArgs.empty())["backend_config"]

    with ingredients.one_compile_call():
        first = config(backend)
        flags.append("-DCMAKE_CXX_FLAGS=-O1")
        assert config(backend) == first, "read once in the call"
        assert config(other) != first, "another backend: its own"
    changed = config(backend)
    assert changed != first, "outside a call: read anew"
    with ingredients.one_compile_call():
        assert config(backend) == changed
    flags.append("-DCMAKE_CXX_FLAGS=-O3")
    with ingredients.one_compile_call():
        assert config(backend) != changed, "the next call: read anew"



def test_no_reading_is_shared_while_callbacks_run_in_the_call() -> None:
    """A callback on gt4py's ``compile_variant_hook`` runs before each variant of a ``compile()``
    call and may change the definition or the backend: once one is seen (registered before or
    during the call), each of the call's later variants is keyed as they are then (as outside
    a call), also after it is removed (a callback may remove itself)."""
    from gt4py.next.otf import compiled_program
    from gt4py.next.otf.arguments import CompileTimeArgs

    from gtcache import examples
    from gtcache.gt4py import ingredients

    backend = _compat.gtfn_backend()
    flags = backend.executor.compilation.builder_factory.cmake_extra_flags

    def config() -> str:
        return ingredients.direct_ingredients(backend, examples.axpy.definition_stage, CompileTimeArgs.empty())["backend_config"]

    def callback(program_pool: Any, key: Any, backend: Any, argument_descriptors: Any, offset_provider: Any) -> None:
        pass

    with ingredients.one_compile_call():
        first = config()
        compiled_program.compile_variant_hook.register(callback, name="gtcache-test")
        try:
            flags.append("-DCMAKE_CXX_FLAGS=-O1")
            second = config()
            assert second != first, "a callback registered during the call: read anew"
            flags.append("-DCMAKE_CXX_FLAGS=-O3")
            assert config() != second, "and at each variant while it is there"
        finally:
            compiled_program.compile_variant_hook.remove("gtcache-test")
        third = config()
        flags.append("-DCMAKE_CXX_FLAGS=-O0")
        assert config() != third, "nor for the rest of the call (a callback may remove itself)"
    with ingredients.one_compile_call():
        fourth = config()
        flags.append("-DCMAKE_CXX_FLAGS=-Os")
        assert config() == fourth, "the next call shares again"


OPERATOR_SOURCE = '''
import enum
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")


class Mode(enum.Enum):
    FAST = {fast}


@gtx.field_operator
def op(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return a * Mode.FAST
'''


@pytest.fixture
def sources_before_start(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call after writing DSL files in this process: the process is then taken to have started
    after them, as a model run starts after its sources were written (a file changed since
    the start gives no direct key: ``_facts.changed_since_start``)."""
    from gtcache.gt4py import _facts

    return lambda: monkeypatch.setattr(_facts, "_SINCE_NS", time.time_ns() + 1)


def load_operator(tmp_path: pathlib.Path, name: str, *, fast: float = 2.0, padding: int = 0) -> Any:
    module_file = tmp_path / f"{name}.py"
    module_file.write_text("\n" * padding + textwrap.dedent(OPERATOR_SOURCE.format(fast=fast)))
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__(name)
    finally:
        sys.path.remove(str(tmp_path))
    return module.op


def test_definition_fingerprint_ignores_file_and_line(tmp_path: pathlib.Path, sources_before_start: Callable[[], None]) -> None:
    a = load_operator(tmp_path, "ops_at_top")
    b = load_operator(tmp_path, "ops_further_down", padding=40)
    sources_before_start()
    assert definition_fingerprint(a.definition_stage) == definition_fingerprint(b.definition_stage)


def test_definition_fingerprint_sees_enum_values(tmp_path: pathlib.Path, sources_before_start: Callable[[], None]) -> None:
    two = load_operator(tmp_path, "ops_enum_two", fast=2.0)
    three = load_operator(tmp_path, "ops_enum_three", fast=3.0)
    sources_before_start()
    assert definition_fingerprint(two.definition_stage) != definition_fingerprint(three.definition_stage)


def test_definition_without_source_has_no_direct_key() -> None:
    from gt4py.next.ffront import stages

    stage = stages.DSLFieldOperatorDef(definition=eval("lambda a: a"))  # no source file behind it
    with pytest.raises(ValueError, match="no source"):
        definition_fingerprint(stage)


NESTED_SOURCE = '''
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")
FACTOR = 2.0
OFFSET = 1.0


@gtx.field_operator
def inner(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return a + OFFSET


@gtx.field_operator
def op(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return inner(a) * FACTOR
'''


@pytest.mark.parametrize("name, value", [("FACTOR", 3.0), ("OFFSET", 5.0)])
def test_a_rebound_closure_variable_changes_the_fingerprint_in_the_same_process(
    tmp_path: pathlib.Path, name: str, value: float, sources_before_start: Callable[[], None]
) -> None:
    """The fingerprint follows the definition as it is now (gt4py's fingerprinter too); that
    gt4py lowers an operator as it was decorated is the hook's business (no direct link:
    ``tests/gt4py/test_changed_definitions.py``)."""
    from gtcache.gt4py import definition

    (tmp_path / f"nested_{name}.py").write_text(NESTED_SOURCE)
    sources_before_start()
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__(f"nested_{name}")
    finally:
        sys.path.remove(str(tmp_path))
    stage = module.op.definition_stage
    before = definition_fingerprint(stage)
    assert definition_fingerprint(stage) == before  # (served from this process's memo)
    setattr(module, name, value)  # the frontend would read the new value: so must the key
    after = definition_fingerprint(stage)
    assert after != before
    assert after == str(definition._fingerprinter(stage))
    setattr(module, name, {"FACTOR": 2.0, "OFFSET": 1.0}[name])
    assert definition_fingerprint(stage) == before



#: What gt4py's frontend folds into a field operator that is neither its text nor a closure
#: variable's own value: one module per value (``{value}``), the same text otherwise.
FOLDED_SOURCES = {
    # A class attribute of a FrozenNamespace subclass (icon4py's constants namespaces).
    "namespace class attribute": ("2.0", "5.0", """
from gt4py.eve.utils import FrozenNamespace
class Phys(FrozenNamespace):
    FACTOR = {value}
PHYS = Phys()
OP_BODY = "a * PHYS.FACTOR"
"""),
    # An enum class's constant that is not a member.
    "enum nonmember": ("2.0", "5.0", """
import enum
class PHYS(enum.Enum):
    FACTOR = enum.nonmember({value})
OP_BODY = "a * PHYS.FACTOR"
"""),
    # The same namespace reached through a module.
    "module's namespace": ("2.0", "5.0", """
import types
from gt4py.eve.utils import FrozenNamespace
class Phys(FrozenNamespace):
    FACTOR = {value}
consts = types.ModuleType("consts")
consts.PHYS = Phys()
OP_BODY = "a * consts.PHYS.FACTOR"
"""),
    # A name only annotations use, their texts kept (``from __future__ import annotations``).
    "annotation-only name": ("VERTICAL", "HORIZONTAL", """
K = gtx.Dimension("K", kind=gtx.DimensionKind.{value})
OP_BODY = "a + 1.0"
"""),
}

FOLDED_OPERATOR = '''from __future__ import annotations
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64
IDim = gtx.Dimension("IDim")
K = gtx.Dimension("K")
{prelude}

@gtx.field_operator
def op(a: Field[Dims[IDim, K], float64]) -> Field[Dims[IDim, K], float64]:
    return {body}
'''


@pytest.mark.parametrize("case", list(FOLDED_SOURCES))
def test_what_gt4py_folds_into_an_operator_is_in_its_fingerprint(
    tmp_path: pathlib.Path, case: str, sources_before_start: Callable[[], None]
) -> None:
    """Two modules of the same text but for a value gt4py reads through an attribute or an
    annotation: a stale hit before (the value's namespace, enum or name was keyed, not what
    gt4py's ``getattr`` or ``typing.get_type_hints`` finds)."""
    from gtcache.gt4py import definition

    name = "folded_" + "".join(c if c.isalnum() else "_" for c in case)
    stages = []
    for value in FOLDED_SOURCES[case][:2]:  # the module edited: its classes keep their names
        prelude = textwrap.dedent(FOLDED_SOURCES[case][2].format(value=value))
        body = prelude.rsplit("OP_BODY = ", 1)[1].strip().strip('"')
        (tmp_path / f"{name}.py").write_text(FOLDED_OPERATOR.format(prelude=prelude, body=body))
        sys.modules.pop(name, None)
        sys.path.insert(0, str(tmp_path))
        try:
            stages.append(__import__(name).op.definition_stage)
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop(name, None)
    sources_before_start()
    first, second = (definition_fingerprint(stage) for stage in stages)
    assert first != second
    assert [first, second] == [str(definition._fingerprinter(stage)) for stage in stages]  # both ways agree
    assert definition_fingerprint(stages[0]) == first


def test_a_literal_s_type_is_in_the_lowered_program_s_fingerprint() -> None:
    """float32 and float64 ``0.1`` are other code (gtfn writes typed literals): one build key
    for both served a float64 program a float32 build. Source locations and the types
    inference attaches stay out (they do not make two programs unequal)."""
    from gt4py.eve import SourceLocation
    from gt4py.next.iterator import ir as itir
    from gt4py.next.type_system import type_specifications as ts

    def literal(kind: ts.ScalarKind, line: int = 1) -> itir.Literal:
        return itir.Literal(value="0.1", type=ts.ScalarType(kind=kind), location=SourceLocation("a.py", line, 1))

    def name(inferred: ts.TypeSpec | None) -> itir.SymRef:
        ref = itir.SymRef(id="a")
        ref.type = inferred
        return ref

    f32, f64 = ts.ScalarKind.FLOAT32, ts.ScalarKind.FLOAT64
    assert _compat.ir_fingerprint(literal(f32)) != _compat.ir_fingerprint(literal(f64))
    assert _compat.ir_fingerprint(literal(f64)) == _compat.ir_fingerprint(literal(f64, line=7))
    assert _compat.ir_fingerprint(name(None)) == _compat.ir_fingerprint(name(ts.ScalarType(kind=f64)))


def test_argument_types_name_each_dimension_s_kind() -> None:
    """gt4py's text of a field type names its dimensions only: a vertical and a horizontal
    ``K`` were one key, and the hit crashed (``No Dimension of type 'K[vertical]'``)."""
    from gt4py.next.type_system import type_specifications as ts

    def field(kind: gtx.DimensionKind) -> ts.FieldType:
        return ts.FieldType(dims=[Edge, gtx.Dimension("K", kind=kind)], dtype=ts.ScalarType(kind=ts.ScalarKind.FLOAT64))

    vertical, horizontal = field(gtx.DimensionKind.VERTICAL), field(gtx.DimensionKind.HORIZONTAL)
    assert str(vertical) == str(horizontal)
    assert _compat.type_text(vertical) == "Field[[Edge:horizontal, K:vertical], float64]"
    assert _compat.type_text(vertical) != _compat.type_text(horizontal)
    assert _compat.type_text(ts.TupleType(types=[vertical, horizontal])) == (
        f"tuple[{_compat.type_text(vertical)}, {_compat.type_text(horizontal)}]"
    )


X86_PROCESSOR = """processor\t: {n}
vendor_id\t: GenuineIntel
cpu family\t: 6
model name\t: Intel(R) Core(TM) Ultra 7 165H
cpu MHz\t\t: 2445.{n}
cpu cores\t: 16
flags\t\t: fpu sse2 avx2{extra}
vmx flags\t: vnmi
bugs\t\t: spectre_v1

"""


def _cpuinfo(tmp_path: pathlib.Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_cpu_features_read_the_first_x86_processor_unless_hybrid(tmp_path: pathlib.Path) -> None:
    """x86: the first processor's model and flags (the others report the same; a node of
    256 threads has 340 kB of /proc/cpuinfo to read per process); an Intel hybrid CPU's
    performance and efficient cores can differ in flags: every one's. Never the lines that
    change while it runs (``cpu MHz``) or name one core (``processor``)."""
    from gtcache import toolchain

    x86 = _cpuinfo(tmp_path, "x86", "".join(X86_PROCESSOR.format(n=n, extra=" avx_vnni" if n == 2 else "") for n in range(3)))
    assert toolchain.cpuinfo_lines(x86, hybrid=False) == ["Intel(R) Core(TM) Ultra 7 165H", "fpu sse2 avx2"]
    assert set(toolchain.cpuinfo_lines(x86, hybrid=True)) == {
        "Intel(R) Core(TM) Ultra 7 165H", "fpu sse2 avx2", "fpu sse2 avx2 avx_vnni"
    }


def test_cpu_features_read_every_core_elsewhere(tmp_path: pathlib.Path) -> None:
    """aarch64's big and little cores differ in ``CPU part`` (gcc reads them all); RISC-V,
    POWER and s390x name their ISA and model in lines of their own (none matched before:
    every such machine had one digest)."""
    from gtcache import toolchain

    arm = _cpuinfo(tmp_path, "arm", "".join(
        f"processor\t: {n}\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: {part}\n\n"
        for n, part in enumerate(["0xd05", "0xd05", "0xd0b"])
    ))
    assert set(toolchain.cpuinfo_lines(arm, hybrid=False)) == {"fp asimd", "0xd05", "0xd0b"}
    riscv = _cpuinfo(tmp_path, "riscv", "processor\t: 0\nhart\t\t: 0\nisa\t\t: rv64imafdc_zicsr\nmmu\t\t: sv39\nuarch\t\t: sifive,u74-mc\n\n")
    assert toolchain.cpuinfo_lines(riscv, hybrid=False) == ["rv64imafdc_zicsr", "sifive,u74-mc"]
    power = _cpuinfo(tmp_path, "power", "processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\nclock\t\t: 2166.000000MHz\n\n")
    assert toolchain.cpuinfo_lines(power, hybrid=False) == ["POWER9 (raw), altivec supported"]
    s390x = _cpuinfo(tmp_path, "s390x", "vendor_id       : IBM/S390\nfeatures\t: esan3 zarch stfle msa ldisp eimm dfp\n")
    assert toolchain.cpuinfo_lines(s390x, hybrid=False) == ["esan3 zarch stfle msa ldisp eimm dfp"]


def test_dace_keys_name_the_cpu_they_were_built_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """dace builds with -march=native: its keys hold the CPU's features, so a store shared by
    nodes of two CPU models never serves one's code to the other (SIGILL); gtfn's keys do not,
    unless its build flags ask for native code (a mutation audit: dropping the ingredient
    passed the suite)."""
    from gt4py.next.otf.arguments import CompileTimeArgs

    from gtcache import examples, toolchain
    from gtcache.gt4py import ingredients

    def shared(name: str) -> dict[str, Any]:
        return ingredients.direct_ingredients(
            examples.backend_by_name(name), examples.axpy.definition_stage, CompileTimeArgs.empty()
        )

    assert shared("dace_cpu")["cpu_features"] == toolchain.cpu_features()
    gtfn = shared("gtfn_cpu")
    assert ("cpu_features" in gtfn) == ("-march=native" in str(gtfn.get("toolchain.build_env")))
    monkeypatch.setattr(toolchain, "cpu_features", lambda: "another CPU model")
    assert shared("dace_cpu")["cpu_features"] == "another CPU model"


def test_the_cpu_features_digest_stays_what_stored_keys_have() -> None:
    """The digest of the lines read is the one stored dace entries were keyed with (the
    value computed for these lines since cpu_features was made: a change would miss every
    such entry)."""
    from gtcache import toolchain

    x86 = ["AMD EPYC 7763 64-Core Processor", "fpu sse2 avx2", "fpu sse2 avx2"]
    assert toolchain.cpu_features_digest(x86) == "a2369fbfb510f2c998380d43b599dc7c"


GT4PY_SOURCES = """
import json, sys
import gt4py.next
from gtcache import toolchain
print(json.dumps([gt4py.__file__, toolchain.toolchain_facts("gtfn").get("gt4py_sources")]))
"""


@pytest.mark.slow
def test_a_gt4py_from_a_source_tree_is_keyed_by_its_files(tmp_path: pathlib.Path) -> None:
    """A GT4Py developer's checkout keeps its version while its frontend or code generators are
    edited: such a gt4py's files are a key ingredient; an installed one's version is. An edit
    that keeps a file's size (one character for another) is seen too, by its modification time
    (a digest of names and sizes alone kept the key)."""
    import shutil

    import gt4py

    checkout = tmp_path / "src"
    shutil.copytree(pathlib.Path(gt4py.__file__).parent, checkout / "gt4py", ignore=shutil.ignore_patterns("__pycache__"))

    def sources(path: str | None) -> list:
        env = {"PYTHONPATH": f"{path}:{os.environ.get('PYTHONPATH', '')}"} if path else {}
        return json.loads(run_python(GT4PY_SOURCES, env={**env, "PYTHONDONTWRITEBYTECODE": "1"}).splitlines()[-1])  # type: ignore[no-any-return]

    installed = sources(None)
    assert "site-packages" in installed[0] and installed[1] is None
    first = sources(str(checkout))
    assert first[0].startswith(str(checkout)) and first[1] is not None, first
    assert sources(str(checkout)) == first  # the same files: the same key
    codegen = checkout / "gt4py" / "next" / "program_processors" / "codegens" / "gtfn" / "codegen.py"
    text = codegen.read_text()
    codegen.write_text(text.replace("# ", "##", 1))  # one character for another: the same size
    assert codegen.stat().st_size == len(text.encode()) and codegen.read_text() != text
    same_size = sources(str(checkout))
    assert same_size[1] != first[1], "an edit that keeps the size is seen (by the modification time)"
    codegen.write_text(codegen.read_text() + "\n# an edit\n")
    assert sources(str(checkout))[1] not in (first[1], same_size[1])


CELL = '''
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")


@gtx.field_operator
def op(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return a * 2.0
'''


def test_a_notebook_cell_has_a_direct_key() -> None:
    """IPython keeps a cell's code in ``linecache`` (no file behind it, no modification time,
    a new name per run), where ``inspect`` and gt4py read it: it cannot change, so it is keyed
    though no file shows when it was written."""
    import linecache

    name = "<ipython-input-7-gtcache>"
    linecache.cache[name] = (len(CELL), None, CELL.splitlines(keepends=True), name)
    try:
        namespace: dict[str, Any] = {}
        exec(compile(CELL, name, "exec"), namespace)
        assert len(definition_fingerprint(namespace["op"].definition_stage)) == 16
    finally:
        del linecache.cache[name]


def test_gt4py_lowers_every_example_as_defined() -> None:
    """Unchanged definitions: each example program, and each field operator it calls (as a
    directly called definition too), has its direct link written after a lowering."""
    from gtcache import examples
    from gtcache.gt4py import _compat

    backend = examples.backend_by_name("roundtrip")
    checked = 0
    for example in examples.EXAMPLES.values():
        assert _compat.parsed_as_defined(backend, example.program.definition_stage), example
        for value in example.program.past_stage.closure_vars.values():
            if hasattr(value, "foast_stage"):
                assert _compat.parsed_as_defined(backend, value.definition_stage), value
                checked += 1
    assert checked >= len(examples.EXAMPLES)


def test_a_file_whose_change_time_alone_moved_is_unchanged_while_its_text_is(
    tmp_path: pathlib.Path, sources_before_start: Callable[[], None]
) -> None:
    """A hard link made to a source file (``uv`` installing from a shared cache does) or a
    ``chmod`` moves its change time only: the text gt4py read is still the file's, and it stays
    keyed; an edit that keeps the size and modification time (``cp -p``) does not."""
    import linecache
    import shutil

    from gtcache.gt4py import _facts

    source = tmp_path / "linked_ops.py"
    source.write_text("A = 1.0\n")
    sources_before_start()
    assert linecache.getlines(str(source)) == ["A = 1.0\n"]  # as gt4py's inspect reads it
    assert not _facts.changed_since_start(str(source))
    time.sleep(0.05)  # past the start by the files' (coarse) clock
    os.link(source, tmp_path / "another-venv-link.py")
    assert os.stat(source).st_ctime_ns >= _facts._SINCE_NS
    assert not _facts.changed_since_start(str(source))
    backup = tmp_path / "backup.py"
    backup.write_text("A = 2.0\n")  # the same size
    shutil.copystat(source, backup)
    shutil.copyfile(backup, source)
    shutil.copystat(backup, source)  # cp -p: the old modification time, another text
    assert os.stat(source).st_mtime_ns < _facts._SINCE_NS
    assert _facts.changed_since_start(str(source))
    linecache.checkcache(str(source))


BUILD_FACTS = """
import json
from gtcache import toolchain
facts = toolchain.toolchain_facts("gtfn")
print(json.dumps({"build_env": facts["build_env"], "cmake_toolchain_file": facts.get("cmake_toolchain_file")}))
"""


def test_settings_a_build_reads_from_the_environment_are_keyed(tmp_path: pathlib.Path) -> None:
    """CMake reads a toolchain file (``CMAKE_TOOLCHAIN_FILE``: its flags), gcc and clang a
    ``CPATH`` (ranked like ``-I``, ahead of the gridtools headers gt4py passes as
    ``-isystem``: an HPC module's GridTools replaces the pip one's): each changed the .so
    while a process with it was served another's (a helper's audit); a toolchain file edited
    under the same name too."""
    def facts(**env: str) -> dict:
        unset = "".join(f"os.environ.pop({n!r}, None)\n" for n in ("CMAKE_TOOLCHAIN_FILE", "CPATH") if n not in env)
        return json.loads(run_python("import os\n" + unset + BUILD_FACTS, env=env).splitlines()[-1])  # type: ignore[no-any-return]

    toolchain_file = tmp_path / "toolchain.cmake"
    toolchain_file.write_text('set(CMAKE_CXX_FLAGS_INIT "-O0")\n')
    base = facts()
    with_cpath = facts(CPATH=str(tmp_path / "include"))
    with_file = facts(CMAKE_TOOLCHAIN_FILE=str(toolchain_file))
    toolchain_file.write_text('set(CMAKE_CXX_FLAGS_INIT "-O1")\n')
    edited = facts(CMAKE_TOOLCHAIN_FILE=str(toolchain_file))
    assert with_cpath["build_env"]["CPATH"] == str(tmp_path / "include")
    assert with_file["build_env"]["CMAKE_TOOLCHAIN_FILE"] == str(toolchain_file)
    assert len({json.dumps(f, sort_keys=True) for f in (base, with_cpath, with_file, edited)}) == 4
    assert edited["build_env"] == with_file["build_env"]  # the same name: its text tells them apart


#: What a build reads from the environment, written out here (not read from ``toolchain``, so
#: that a name dropped there fails): the compilers, their flags and search paths, CUDA's and HIP's.
BUILD_VARIABLES = (
    "CXX", "CC", "CXXFLAGS", "CFLAGS", "LDFLAGS", "CUDAARCHS", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS",
    "NVCC_CCBIN", "CUDAFLAGS", "HIPFLAGS", "CUDAHOSTCXX", "CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH",
    "LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX",
)

EVERY_BUILD_FACT = """
import json
from gtcache import toolchain
facts = toolchain.toolchain_facts("gtfn")
print(json.dumps({"build_env": facts["build_env"], "version_id": facts["gt4py_build_cache_version"]}))
"""


def test_every_variable_a_build_reads_is_keyed() -> None:
    """Each of the build's environment variables, and gt4py's ``GT4PY_BUILD_CACHE_VERSION_ID``
    (what docs/keys.md advises for a compiler behind a wrapper script), is in the toolchain
    facts with its value: a process with ``CXXFLAGS=-O0 -g`` must not be served an ``-O3``
    build (a mutation audit: only ``CPATH`` and the toolchain file were tested)."""
    env = {name: f"value-of-{name}" for name in BUILD_VARIABLES}
    facts = json.loads(run_python(EVERY_BUILD_FACT, env={**env, "GT4PY_BUILD_CACHE_VERSION_ID": "v7"}).splitlines()[-1])
    assert {name: facts["build_env"].get(name) for name in BUILD_VARIABLES} == env
    assert facts["version_id"] == "v7"
    unset = "import os\n" + "".join(f"os.environ.pop({n!r}, None)\n" for n in (*BUILD_VARIABLES, "GT4PY_BUILD_CACHE_VERSION_ID"))
    plain = json.loads(run_python(unset + EVERY_BUILD_FACT).splitlines()[-1])
    assert plain == {"build_env": {}, "version_id": None}


NATIVE_SCRIPT = """
import json
from gt4py.next.otf.arguments import CompileTimeArgs
from gtcache import examples
from gtcache.gt4py import ingredients
found = ingredients.direct_ingredients(examples.backend_by_name("gtfn_cpu"), examples.axpy.definition_stage,
                                       CompileTimeArgs.empty())
print(json.dumps("cpu_features" in found))
"""


#: Each place once with a flag naming the CPU and CXXFLAGS once with one that does not run in
#: ``make test-fast``; every pair in the suite (a process each, about 2 s).
_NATIVE_FAST = {("CXXFLAGS", "-O3 -march=native"), ("toolchain file", "-O2 -mcpu=native"),
                ("cmake_extra_flags", "-xHost -O3"), ("CXXFLAGS", "-O3")}


@pytest.mark.parametrize(("where", "flags"), [
    pytest.param(where, flags, marks=() if (where, flags) in _NATIVE_FAST else pytest.mark.slow)
    for where in ("CXXFLAGS", "toolchain file", "cmake_extra_flags")
    for flags in ("-O3 -march=native", "-O2 -mcpu=native", "-xHost -O3", "-O3", "-march=x86-64-v2")
])
def test_gtfn_built_for_the_cpu_at_hand_is_keyed_by_it(tmp_path: pathlib.Path, flags: str, where: str) -> None:
    """gtfn code built with flags for the CPU at hand (``-march=native``, ``-mcpu=native`` on
    aarch64 and POWER, Intel's ``-xHost``) runs on that CPU model only: its key names the CPU,
    so that a store shared by two models never serves one's code to the other (SIGILL), where
    the flags come from the environment, a CMake toolchain file or the backend's own CMake
    flags. Other flags name no CPU (a mutation audit: the existing check held trivially)."""
    script, env = NATIVE_SCRIPT, {}
    if where == "CXXFLAGS":
        env = {"CXXFLAGS": flags}
    elif where == "toolchain file":
        (tmp_path / "t.cmake").write_text(f'set(CMAKE_CXX_FLAGS_INIT "{flags}")\n')
        env = {"CMAKE_TOOLCHAIN_FILE": str(tmp_path / "t.cmake")}
    else:
        script = script.replace('examples.backend_by_name("gtfn_cpu")', "backend").replace(
            "found =", f"backend = examples.backend_by_name('gtfn_cpu')\n"
                       f"backend.executor.compilation.builder_factory.cmake_extra_flags.append('-DCMAKE_CXX_FLAGS={flags}')\n"
                       "found =", 1)
    native = json.loads(run_python(script, env=env).splitlines()[-1])
    assert native == ("native" in flags or "Host" in flags)


def test_a_content_key_changes_with_the_files_of_its_modules(tmp_path: pathlib.Path) -> None:
    """A stored fingerprint is found by the content serialized and the files of the modules
    its data classes and enums come from: gt4py fingerprints an enum member by its name, pickle
    writes its value only, so a member renamed in the module (its value kept) must not find the
    old fingerprint (a mutation audit: dropping the files from the key passed the suite)."""
    module = tmp_path / "keyed_module_for_content.py"
    module.write_text("VALUE = 1\n")
    code = f"""
import json, os, sys
sys.path.insert(0, {str(tmp_path)!r})
import keyed_module_for_content
from gtcache.gt4py import _facts
first = _facts.content_key(b"the same bytes", frozenset({{"keyed_module_for_content"}}))
print(json.dumps(first))
"""
    before = json.loads(run_python(code).splitlines()[-1])
    assert json.loads(run_python(code).splitlines()[-1]) == before  # the same files: the same key
    module.write_text("VALUE = 2\n")
    assert json.loads(run_python(code).splitlines()[-1]) != before


DEBUG_SCRIPT = """
import json, sys
import numpy as np
import gt4py.next as gtx
from proj import ops

a = gtx.as_field([ops.IDim], np.arange(8.0))
out = gtx.as_field([ops.IDim], np.zeros(8))
ops.scale.with_backend(gtx.itir_python)(a, out=out, offset_provider={})
from gtcache.gt4py import active_hook
print("REPORT " + json.dumps([o.status for o in active_hook().outcomes]))
"""


@pytest.mark.slow
def test_gt4py_debug_is_keyed_for_the_roundtrip_backend(tmp_path: pathlib.Path) -> None:
    """The roundtrip executor reads gt4py's DEBUG when it runs and keeps it in its artifact (a
    debug one runs from a temporary file, for tracebacks and debuggers): a process with
    ``GT4PY_DEBUG=1`` was served one made without (a helper's audit)."""
    from tests.helpers import pythonpath, write_project

    store, project = tmp_path / "store", write_project(tmp_path / "p")

    def outcomes(debug: str) -> list[str]:
        env = {"PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store),
               "GT4PY_DEBUG": debug}
        out = run_python(DEBUG_SCRIPT, env=env)
        return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))  # type: ignore[no-any-return]

    assert [outcomes("0"), outcomes("1"), outcomes("1"), outcomes("0")] == [["compiled"], ["compiled"], ["hit"], ["hit"]]


KDim = gtx.Dimension("KDim", kind=gtx.DimensionKind.VERTICAL)
K2 = gtx.Dimension("K2", kind=gtx.DimensionKind.VERTICAL)
IDim = gtx.Dimension("IDim")


def _cumulative_sum_along(axis: gtx.Dimension) -> Any:
    """A program summing its field up the column ``axis``: one factory, the same names and the
    same fields over ``[IDim, K2, KDim]`` for either axis."""

    @gtx.scan_operator(axis=axis, forward=True, init=0.0)
    def accumulate(state: gtx.float64, a: gtx.float64) -> gtx.float64:
        return state + a

    @gtx.program
    def cumulative(a: gtx.Field[gtx.Dims[IDim, K2, KDim], gtx.float64],
                   out: gtx.Field[gtx.Dims[IDim, K2, KDim], gtx.float64]) -> None:
        accumulate(a, out=out)

    return cumulative


def test_two_scans_that_differ_only_in_their_axis_are_two_entries(tmp_path: pathlib.Path) -> None:
    """Two scan programs, the same but for the axis they scan (``KDim`` or ``K2``), lower to
    the same ``program_ir``: the scan's axis is the build's ``column_axis``, an ingredient of its
    own. Without it the second was a hit on the first's build and summed up the wrong axis."""
    import gtcache
    from gtcache.gt4py import compile_variants

    store = gtcache.open_store(tmp_path / "store")
    data = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
    keys = []
    for axis, position in ((KDim, 2), (K2, 1)):
        program, outcomes = compile_variants(store, _cumulative_sum_along(axis), backend=gtx.itir_python,
                                             offset_provider={})
        assert [o.status for o in outcomes] == ["compiled"], (axis, outcomes)
        keys.append(outcomes[0].key)
        out = gtx.as_field([IDim, K2, KDim], np.zeros_like(data))
        program(gtx.as_field([IDim, K2, KDim], data), out, offset_provider={})
        np.testing.assert_array_equal(out.asnumpy(), np.cumsum(data, axis=position), err_msg=str(axis))
    first, second = (store.get(key).record.ingredients for key in keys)
    assert first["program_ir"] == second["program_ir"], "the same program: the axis alone tells them apart"
    assert (first["column_axis"], second["column_axis"]) == (str(KDim), str(K2))
