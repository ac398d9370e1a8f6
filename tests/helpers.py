"""Running code in fresh Python processes, as users' programs do."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

CHILD_LOAD = """
import json, sys
import numpy as np
import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variant

store_path, example_name, backend_name, seed, size, out_file = sys.argv[1:7]
store = gtcache.open_store(store_path)
example = examples.EXAMPLES[example_name]
offset_provider = example.offset_provider(int(size))
program, outcomes = compile_variant(
    store, example.program, backend=examples.backend_by_name(backend_name),
    offset_provider=offset_provider,
)
args, out = example.make_args(int(size), int(seed))
program(*args, offset_provider=offset_provider)
np.save(out_file, out.asnumpy())
print(json.dumps([{"status": o.status, "key": o.key, "detail": o.detail} for o in outcomes]))
"""


def run_python(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run ``code`` in a fresh interpreter; return its stdout; fail the test on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def load_in_fresh_process(
    store: pathlib.Path,
    example: str,
    backend: str,
    *,
    seed: int,
    size: int,
    out_file: pathlib.Path,
) -> list[dict[str, Any]]:
    """Compile-or-load one variant through ``store`` in a new process; return its outcomes."""
    stdout = run_python(
        CHILD_LOAD, str(store), example, backend, str(seed), str(size), str(out_file)
    )
    outcomes: list[dict[str, Any]] = json.loads(stdout.strip().splitlines()[-1])
    return outcomes
