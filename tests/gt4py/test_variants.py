"""Static arguments: each value is a variant of its own, stored and found separately."""

from __future__ import annotations

import pathlib

import gt4py.next as gtx
import numpy as np
import pytest

import gtcache
from gtcache import examples
from gtcache.examples import scale_by
from gtcache.gt4py import compile_variants, serving

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


def test_the_variants_of_one_compile_call_share_one_reading_of_definition_and_backend(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """icon4py's ``setup_program`` compiles a program's variants in one ``compile()`` call: their
    direct keys share one reading of the definition and one of the backend (0.2-0.4 ms a
    variant otherwise). The next call, and a variant compiled by a call of the program, read
    both anew (``tests/gt4py/test_keys.py``: a backend changed in place between calls)."""
    from gtcache.gt4py import _facts, ingredients

    readings: list[str] = []
    definition, config = ingredients.definition_fingerprint, _facts.backend_config
    monkeypatch.setattr(ingredients, "definition_fingerprint", lambda s: readings.append("definition") or definition(s))
    monkeypatch.setattr(_facts, "backend_config", lambda b: readings.append("backend") or config(b))
    store = gtcache.open_store(tmp_path / "s")
    backend = examples.backend_by_name("roundtrip")
    _, first = compile_variants(store, scale_by, backend=backend, static_args={"factor": [2.0, 3.0, 4.0]})
    assert [o.status for o in first] == ["compiled"] * 3
    readings.clear()
    program, again = compile_variants(store, scale_by, backend=backend, static_args={"factor": [2.0, 3.0, 4.0]})
    assert [o.status for o in again] == ["hit"] * 3 and [o.via for o in again] == ["direct"] * 3
    assert readings == ["definition", "backend"], "one reading for the call's three variants"

    readings.clear()
    a = gtx.as_field([IDim], np.arange(5.0))
    out = gtx.as_field([IDim], np.zeros(5))
    with serving(store) as hook:
        program(a, 5.0, out, offset_provider={})  # a variant of its own, compiled by the call
    assert [o.status for o in hook.outcomes] == ["compiled"]
    assert readings.count("definition") == 2, f"before its lookup, and once lowered (before linking): {readings}"
    np.testing.assert_allclose(out.asnumpy(), 5.0 * np.arange(5.0))
