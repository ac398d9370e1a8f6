"""Static arguments: each value is a variant of its own, stored and found separately."""

from __future__ import annotations

import pathlib

import gt4py.next as gtx
import numpy as np

import gtcache
from gtcache import examples
from gtcache.examples import scale_by
from gtcache.gt4py import compile_variants

IDim = examples.IDim


def test_each_static_value_is_its_own_variant(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    backend = examples.backend_by_name("roundtrip")
    _, first = compile_variants(store, scale_by, backend=backend, static_args={"factor": [2.0, 3.0]})
    assert [o.status for o in first] == ["compiled", "compiled"]
    assert first[0].key != first[1].key
    program, again = compile_variants(store, scale_by, backend=backend, static_args={"factor": [3.0, 2.0]})
    assert [o.status for o in again] == ["hit", "hit"]
    assert {o.key for o in again} == {o.key for o in first}
    _, more = compile_variants(store, scale_by, backend=backend, static_args={"factor": [4.0]})
    assert [o.status for o in more] == ["compiled"]
    a = gtx.as_field([IDim], np.arange(5.0))
    out = gtx.as_field([IDim], np.zeros(5))
    program(a, 3.0, out, offset_provider={})
    np.testing.assert_allclose(out.asnumpy(), 3.0 * np.arange(5.0))
    assert len(store.scan().entries) == 3
