"""One measurement in a fresh interpreter; prints one JSON line. Run by bench/run.py.

    python -O bench/_child.py compile PROGRAM BACKEND
    python -O bench/_child.py floor PROGRAM BACKEND STORE KEY
    python -O bench/_child.py many BACKEND COUNT
    python -O bench/_child.py programs PROGRAM,PROGRAM,... BACKEND
    python -O bench/_child.py count PROGRAM,PROGRAM,... BACKEND
    python -O bench/_child.py parts PROGRAM BACKEND
    python -O bench/_child.py offsets CONNECTIVITIES
    python -O bench/_child.py install STORE

Times are taken inside the process, around ``Program.compile`` +
``wait_for_compilation`` (icon4py's set-up pattern): interpreter start-up and
imports are the same for every mode and are not part of a program's latency.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def program_and_provider(name: str) -> tuple[Any, dict[str, Any]]:
    from gtcache import examples

    from bench import programs

    if name == "diffuse_vn":
        return programs.diffuse_vn, programs.mesh_offset_provider()
    example = examples.EXAMPLES[name]
    return example.program, example.offset_provider(64)


def report(**data: Any) -> None:
    from gtcache.gt4py import active_hook

    hook = active_hook()
    if hook is not None:
        from gtcache._frozen import asdict

        data["outcomes"] = [asdict(o) for o in hook.outcomes]
    print("RESULT " + json.dumps(data))


def compile_one(name: str, backend_name: str, spent: dict[str, float] | None = None) -> None:
    """The first call; with ``spent`` (seconds by step, filled by ``parts``' wrappers), those too."""
    from gt4py.next.otf import compiled_program

    from gtcache import examples

    program, offset_provider = program_and_provider(name)
    bound = program.with_backend(examples.backend_by_name(backend_name))
    start = time.perf_counter()
    bound.compile(offset_provider=offset_provider)
    compiled_program.wait_for_compilation()
    ms = (time.perf_counter() - start) * 1e3
    if spent is None:
        report(ms=ms)
    else:
        report(ms=ms, parts={label: spent[label] * 1e3 for label in PARTS})


def floor(name: str, backend_name: str, store_path: str, key: str) -> None:
    """The bare load: gt4py's ``load_artifact`` of an artifact already in hand."""
    import gtcache
    from gtcache import examples
    from gtcache.gt4py import codecs

    backend = examples.backend_by_name(backend_name)
    store = gtcache.open_store(store_path)
    entry = store.get(key)
    artifact = codecs.decode(
        entry.record.artifact, entry.path, files={f.path for f in entry.record.files}, key=key
    )
    start = time.perf_counter()
    backend.load_artifact(artifact)
    report(ms=(time.perf_counter() - start) * 1e3)


#: The steps of a hit that ``parts`` times: label -> (module or class, attribute).
PARTS = {
    "opening the store": ("gtcache.gt4py._hook:Hook", "_open"),
    "the facts file": ("gtcache.gt4py._hook:Hook", "_use_facts"),
    "definition fingerprint": ("gtcache.gt4py.ingredients", "definition_fingerprint"),
    "backend configuration": ("gtcache.gt4py._facts", "backend_config"),
    "connectivity types": ("gtcache.gt4py._compat", "offset_provider_type"),
    "toolchain facts": ("gtcache.toolchain", "toolchain_facts"),
    "direct link": ("gtcache.store._store:Store", "build_key_of"),
    "entry.json": ("gtcache.store._store:Store", "lookup"),
    "payload checksums": ("gtcache.store._store:Store", "verify_payload"),
}


def parts(name: str, backend_name: str) -> None:
    """``compile`` with the steps of the hit (``PARTS``) timed by wrappers: where its own share goes."""
    import collections
    import functools
    import importlib

    spent: dict[str, float] = collections.defaultdict(float)

    def timed(label: str, function: Any) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - start
        return wrapper

    for label, (where, attribute) in PARTS.items():
        module_name, _, class_name = where.partition(":")
        owner = importlib.import_module(module_name)
        owner = getattr(owner, class_name) if class_name else owner
        setattr(owner, attribute, timed(label, getattr(owner, attribute)))
    compile_one(name, backend_name, spent)


def install(store: str) -> None:
    """What installing the hook adds to ``import gt4py.next``, in-process: gt4py imported with
    the hook off, then gtcache's start-up module with ``GTCACHE_DIR`` set, which installs it
    (its imports, the settings, the hook; the store is opened at the first compile)."""
    import os

    import gt4py.next  # noqa: F401

    assert "gtcache.gt4py" not in sys.modules, "the hook was armed before gt4py was imported"
    os.environ["GTCACHE_DIR"] = store
    start = time.perf_counter()
    import gtcache._autoload  # noqa: F401
    ms = (time.perf_counter() - start) * 1e3
    from gtcache.gt4py import active_hook

    assert active_hook() is not None, "the hook did not install"
    print("RESULT " + json.dumps({"ms": ms}))


def many(backend_name: str, count: int) -> None:
    """One program compiled for ``count`` static values: ``count`` variants, one process."""
    from gt4py.next.otf import compiled_program

    from bench import programs
    from gtcache import examples

    bound = programs.scale_by.with_backend(examples.backend_by_name(backend_name))
    start = time.perf_counter()
    bound.compile(offset_provider={}, factor=[float(i) for i in range(1, count + 1)])
    compiled_program.wait_for_compilation()
    report(ms=(time.perf_counter() - start) * 1e3)


def several(names: str, backend_name: str) -> None:
    """Several programs' first calls in one process, in turn: a model's later programs."""
    from gt4py.next.otf import compiled_program

    from gtcache import examples

    backend = examples.backend_by_name(backend_name)
    for name in names.split(","):
        program, offset_provider = program_and_provider(name)
        program.with_backend(backend).compile(offset_provider=offset_provider)
        compiled_program.wait_for_compilation()
    report()


def count(names: str, backend_name: str) -> None:
    """The Python bytecode instructions and calls of the last program's hit (its own share: gt4py's
    ``load_artifact`` left out), by where their code lives; counted by ``sys.monitoring``, so the
    same in every run (with ``PYTHONHASHSEED`` fixed): a measure of the hot path without the
    run-to-run noise of its time."""
    import collections
    import sysconfig

    from gt4py.next.otf import compiled_program

    from gtcache import examples
    from gtcache.gt4py import _hook

    monitoring = sys.monitoring
    tool = monitoring.PROFILER_ID
    stdlib = sysconfig.get_paths()["stdlib"]
    counted: collections.Counter[str] = collections.Counter()
    places: dict[str, str] = {}
    active = [False]

    def place(code: Any) -> str:
        where = places.get(code.co_filename)
        if where is None:
            name = code.co_filename
            where = places[name] = (
                "gtcache" if "/gtcache/" in name else "gt4py" if "/gt4py/" in name
                else "stdlib" if name.startswith(stdlib) or name.startswith("<frozen") else "other"
            )
        return where

    def instruction(code: Any, _offset: int) -> None:
        if active[0]:
            counted[place(code)] += 1

    def call(_code: Any, _offset: int, _callable: Any, _arg0: Any) -> None:
        if active[0]:
            counted["calls"] += 1

    backend = examples.backend_by_name(backend_name)
    original_load = type(backend).load_artifact
    original_task = _hook.Hook.make_task
    last = names.split(",")[-1]

    def load_artifact(self: Any, artifact: Any) -> Any:
        was, active[0] = active[0], False
        try:
            return original_load(self, artifact)
        finally:
            active[0] = was

    def make_task(self: Any, original: Any, backend: Any, definition_stage: Any, cta: Any) -> Any:
        active[0] = definition_stage.definition.__name__ == last
        try:
            return original_task(self, original, backend, definition_stage, cta)
        finally:
            active[0] = False

    type(backend).load_artifact = load_artifact  # type: ignore[method-assign]
    _hook.Hook.make_task = make_task  # type: ignore[method-assign]
    monitoring.use_tool_id(tool, "gtcache-bench")
    monitoring.register_callback(tool, monitoring.events.INSTRUCTION, instruction)
    monitoring.register_callback(tool, monitoring.events.CALL, call)
    monitoring.set_events(tool, monitoring.events.INSTRUCTION | monitoring.events.CALL)
    try:
        for name in names.split(","):
            program, offset_provider = program_and_provider(name)
            program.with_backend(backend).compile(offset_provider=offset_provider)
            compiled_program.wait_for_compilation()
    finally:
        monitoring.set_events(tool, 0)
        monitoring.free_tool_id(tool)
    report(counts=dict(counted))


def offsets(connectivities: int) -> None:
    """The connectivity types and tables of an offset provider like icon4py's (it passes all of
    a grid's connectivities to every program; tables of an R2B4 grid's sizes), as a key computes
    them: for a process's first variant, and the median of twenty later variants with the same
    connectivity objects."""
    import statistics

    import gt4py.next as gtx
    import numpy as np

    from gtcache.gt4py import _compat

    horizontal = [gtx.Dimension(name) for name in ("Cell", "Edge", "Vertex")]
    provider: dict[str, Any] = {"Koff": gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL)}
    for i in range(connectivities):
        local = gtx.Dimension(f"N{i}", kind=gtx.DimensionKind.LOCAL)
        # (values written: a table read for the first time is not also faulted in, as np.zeros would be)
        table = np.arange(ROWS[i % 3] * (2 + i % 5), dtype=gtx.IndexType).reshape(ROWS[i % 3], -1) % ROWS[(i + 1) % 3]
        provider[f"N{i}"] = gtx.as_connectivity(
            [horizontal[i % 3], local], codomain=horizontal[(i + 1) % 3], data=table, skip_value=-1 if i % 2 else None
        )
    result = {}
    for label, key in (("", _compat.offset_provider_type), ("tables_", _compat.connectivity_tables)):
        times = []
        for _ in range(21):
            start = time.perf_counter()
            key(provider)
            times.append((time.perf_counter() - start) * 1e3)
        result |= {f"{label}first_ms": times[0], f"{label}later_ms": statistics.median(times[1:])}
    print("RESULT " + json.dumps(result))


#: Rows of the cell, edge and vertex tables of an icosahedral R2B4 grid (icon4py's test grids).
ROWS = (20_480, 30_720, 10_242)


def caches(name: str, backend_name: str) -> None:
    """The two serializations a lookup makes (the backend's and the definition's, as
    ``content_bytes`` writes them) timed with the CPU's caches warm (the same call just made)
    and flushed (64 MiB written just before, as a program's own work between two lookups
    would): how much of a first hit's time is reading cold memory, not the work done."""
    import statistics

    from gtcache import examples
    from gtcache.gt4py import _compat, definition

    program, _ = program_and_provider(name)
    backend = examples.backend_by_name(backend_name)
    stage = program.definition_stage
    steps = {
        "backend": lambda: _compat.backend_digest(backend),
        "definition": lambda: _compat.content_bytes(stage, definition._REDUCTIONS),  # noqa: SLF001
    }
    flush = bytearray(64 << 20)
    ones = bytes(len(flush[::64]))
    result = {}
    for label, step in steps.items():
        step()  # its first call reads the sources (no facts here) and plans each class
        warm, cold = [], []
        for _ in range(15):
            flush[::64] = ones
            start = time.perf_counter()
            step()
            cold.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            step()
            warm.append((time.perf_counter() - start) * 1e3)
        result[label] = {"warm_ms": statistics.median(warm), "cold_ms": statistics.median(cold)}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "compile":
        compile_one(*args)
    elif mode == "floor":
        floor(*args)
    elif mode == "install":
        install(*args)
    elif mode == "parts":
        parts(*args)
    elif mode == "offsets":
        offsets(int(args[0]))
    elif mode == "programs":
        several(*args)
    elif mode == "count":
        count(*args)
    elif mode == "many":
        many(args[0], int(args[1]))
    elif mode == "caches":
        caches(*args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
