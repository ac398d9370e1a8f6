"""What the hook cannot store passes straight through to gt4py: counted, never broken."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from gt4py.next import backend as gtx_backend
from gt4py.next.program_processors.runners import double_roundtrip

import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variants

EXAMPLE = examples.EXAMPLES["axpy"]


@dataclasses.dataclass(frozen=True)
class OpaqueBackend(gtx_backend.Backend):
    """A backend with its own ``compile``: gt4py cannot split it, neither can gtcache."""

    def compile(self, program: Any, compile_time_args: Any) -> Any:
        return super().compile(program, compile_time_args)


def test_custom_compile_backend_is_bypassed(tmp_path: pathlib.Path) -> None:
    base = examples.backend_by_name("roundtrip")
    opaque = OpaqueBackend(
        name="opaque", executor=base.executor, allocator=base.allocator, transforms=base.transforms
    )
    store = gtcache.open_store(tmp_path / "s")
    program, outcomes = compile_variants(store, EXAMPLE.program, backend=opaque)
    assert [o.status for o in outcomes] == ["bypassed"]
    args, out = EXAMPLE.make_args(8, 0)
    program(*args, offset_provider={})
    np.testing.assert_allclose(out.asnumpy(), EXAMPLE.reference(args))
    assert store.scan().entries == ()


def test_artifact_gtcache_cannot_describe_is_bypassed(tmp_path: pathlib.Path) -> None:
    """double_roundtrip's artifact carries a whole backend: not JSON, so not stored."""
    store = gtcache.open_store(tmp_path / "s")
    program, outcomes = compile_variants(store, EXAMPLE.program, backend=double_roundtrip.backend)
    assert [o.status for o in outcomes] == ["bypassed"]
    assert "dispatch backend" in (outcomes[0].detail or "")
    args, out = EXAMPLE.make_args(8, 0)
    program(*args, offset_provider={})
    np.testing.assert_allclose(out.asnumpy(), EXAMPLE.reference(args))
    assert store.scan().entries == ()


#: A process in which cupy cannot be imported whether it is installed or not (a finder ahead
#: of all others refuses it and counts the attempts); prints the GPU arch gtcache records.
WITHOUT_CUPY = """
import importlib.abc, json, sys

class NoCupy(importlib.abc.MetaPathFinder):
    attempts = 0

    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith("cupy."):
            NoCupy.attempts += 1
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.modules.pop("cupy", None)
sys.meta_path.insert(0, NoCupy())
from gtcache import toolchain
print(json.dumps([toolchain.device_arch("CUDA"), toolchain.device_arch("CPU"), NoCupy.attempts]))
"""


@pytest.mark.parametrize(("cudaarchs", "expected"), [("90", ["90", None, 1]), (None, ["unknown", None, 1])])
def test_gpu_arch_comes_from_cudaarchs_without_cupy(cudaarchs: str | None, expected: list[Any]) -> None:
    """The device decides the arch (cupy is asked first, once); without cupy CUDAARCHS names it;
    without either it is "unknown", no error. (docs/keys.md#gpu-variants: the order.)"""
    env = {k: v for k, v in os.environ.items() if k != "CUDAARCHS"}
    if cudaarchs is not None:
        env["CUDAARCHS"] = cudaarchs
    proc = subprocess.run([sys.executable, "-c", WITHOUT_CUPY], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == expected
