"""One measurement in a fresh interpreter; prints one JSON line. Run by bench/run.py.

    python -O bench/_child.py compile PROGRAM BACKEND
    python -O bench/_child.py floor PROGRAM BACKEND STORE KEY
    python -O bench/_child.py many BACKEND COUNT

Times are taken inside the process, around ``Program.compile`` +
``wait_for_compilation`` (icon4py's set-up pattern): interpreter start-up and
imports are the same for every mode and are not part of a program's latency.
"""

from __future__ import annotations

import dataclasses
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
        data["outcomes"] = [dataclasses.asdict(o) for o in hook.outcomes]
    print("RESULT " + json.dumps(data))


def compile_one(name: str, backend_name: str) -> None:
    from gt4py.next.otf import compiled_program

    from gtcache import examples

    program, offset_provider = program_and_provider(name)
    bound = program.with_backend(examples.backend_by_name(backend_name))
    start = time.perf_counter()
    bound.compile(offset_provider=offset_provider)
    compiled_program.wait_for_compilation()
    report(ms=(time.perf_counter() - start) * 1e3)


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


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "compile":
        compile_one(*args)
    elif mode == "floor":
        floor(*args)
    elif mode == "many":
        many(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
