"""What the hook cannot store passes straight through to gt4py: counted, never broken."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np
from gt4py.next import backend as gtx_backend
from gt4py.next.program_processors.runners import double_roundtrip

import gtcache
from gtcache import examples
from gtcache import toolchain
from gtcache.gt4py import compile_variant

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
    program, outcomes = compile_variant(store, EXAMPLE.program, backend=opaque)
    assert [o.status for o in outcomes] == ["bypassed"]
    args, out = EXAMPLE.make_args(8, 0)
    program(*args, offset_provider={})
    np.testing.assert_allclose(out.asnumpy(), EXAMPLE.reference(args))
    assert store.scan().entries == ()


def test_artifact_gtcache_cannot_describe_is_bypassed(tmp_path: pathlib.Path) -> None:
    """double_roundtrip's artifact carries a whole backend: not JSON, so not stored."""
    store = gtcache.open_store(tmp_path / "s")
    program, outcomes = compile_variant(store, EXAMPLE.program, backend=double_roundtrip.backend)
    assert [o.status for o in outcomes] == ["bypassed"]
    assert "dispatch backend" in (outcomes[0].detail or "")
    args, out = EXAMPLE.make_args(8, 0)
    program(*args, offset_provider={})
    np.testing.assert_allclose(out.asnumpy(), EXAMPLE.reference(args))
    assert store.scan().entries == ()


def test_gpu_arch_comes_from_cudaarchs_without_cupy(monkeypatch: Any) -> None:
    monkeypatch.setenv("CUDAARCHS", "90")
    assert toolchain.device_arch("CUDA") == "90"
    assert toolchain.device_arch("CPU") is None
