"""Planning (``plan_variants``, ``warm --dry-run``, ``explain``) never compiles, and names the
variants it cannot plan with the reason (issue 16, bug 1)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
from gt4py.next import backend as gtx_backend

import gtcache
from gtcache import examples, warm
from gtcache.gt4py import plan_variants

EXAMPLE = examples.EXAMPLES["axpy"]
COMPILES: list[str] = []


@dataclasses.dataclass(frozen=True)
class OpaqueBackend(gtx_backend.Backend):
    """A backend with its own ``compile`` (its key would need that compile)."""

    def compile(self, program: Any, compile_time_args: Any) -> Any:
        COMPILES.append(self.name)
        return super().compile(program, compile_time_args)


class GuardedExecutor:
    """An executor holding a lock: gt4py compiles with it, gtcache cannot fingerprint it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.guard = threading.Lock()

    def __call__(self, program: Any) -> Any:
        COMPILES.append("guarded")
        return self.inner(program)


def _backends() -> tuple[Any, Any]:
    base = examples.backend_by_name("roundtrip")
    opaque = OpaqueBackend(name="opaque", executor=base.executor, allocator=base.allocator, transforms=base.transforms)
    guarded = gtx_backend.Backend(
        name="guarded", executor=GuardedExecutor(base.executor), allocator=base.allocator, transforms=base.transforms
    )
    return opaque, guarded


def test_planning_compiles_nothing_and_says_what_it_could_not_plan(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    opaque, guarded = _backends()
    COMPILES.clear()
    [custom] = plan_variants(store, EXAMPLE.program, backend=opaque)
    [raising] = plan_variants(store, EXAMPLE.program, backend=guarded)
    assert COMPILES == [], "planning ran a compile"
    assert (custom.status, custom.key) == ("unplannable", None)
    assert "custom compile" in (custom.detail or "")
    assert (raising.status, raising.key) == ("unplannable", None)
    assert "Cannot fingerprint" in (raising.detail or "")
    assert store.scan().entries == ()
    # Compiling (not planning) the custom-compile backend still works, through gt4py alone.
    from gtcache.gt4py import compile_variants

    _, outcomes = compile_variants(store, EXAMPLE.program, backend=opaque)
    assert [o.status for o in outcomes] == ["bypassed"] and COMPILES == ["opaque"]


BACKENDS_MODULE = """
import dataclasses, os, pathlib, threading
from gt4py.next import backend as gtx_backend
from gtcache import examples

_base = examples.backend_by_name("roundtrip")

def _compiled(what):
    pathlib.Path(os.environ["COMPILE_MARK"]).write_text(what)

@dataclasses.dataclass(frozen=True)
class Opaque(gtx_backend.Backend):
    def compile(self, program, compile_time_args):
        _compiled("opaque")
        return super().compile(program, compile_time_args)

class Guarded:
    def __init__(self):
        self.guard = threading.Lock()
    def __call__(self, program):
        _compiled("guarded")
        return _base.executor(program)

opaque = Opaque(name="opaque", executor=_base.executor, allocator=_base.allocator, transforms=_base.transforms)
guarded = gtx_backend.Backend(name="guarded", executor=Guarded(), allocator=_base.allocator, transforms=_base.transforms)
"""


@pytest.mark.slow
def test_warm_dry_run_and_explain_list_unplannable_variants(tmp_path: pathlib.Path) -> None:
    (tmp_path / "odd_backends.py").write_text(textwrap.dedent(BACKENDS_MODULE))
    manifest = tmp_path / "variants.toml"
    manifest.write_text(textwrap.dedent("""
        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["odd_backends:opaque", "odd_backends:guarded", "roundtrip"]
    """))
    mark = tmp_path / "compiled"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "COMPILE_MARK": str(mark)}
    store = tmp_path / "store"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), *args],
                              capture_output=True, text=True, env=env, timeout=600, check=False)

    dry = cli("warm", "--manifest", str(manifest), "--dry-run", "--json")
    assert dry.returncode == 1, dry.stderr  # variants that cannot be warmed
    planned = {p["backend"]: p for p in json.loads(dry.stdout)}
    assert planned["roundtrip"]["status"] == "missing" and planned["roundtrip"]["key"]
    assert planned["odd_backends:opaque"]["status"] == "unplannable"
    assert "custom compile" in planned["odd_backends:opaque"]["detail"]
    assert planned["odd_backends:guarded"]["status"] == "unplannable"
    assert "Cannot fingerprint" in planned["odd_backends:guarded"]["detail"]

    table = cli("warm", "--manifest", str(manifest), "--dry-run")
    assert "unplannable: the backend has a custom compile" in table.stdout, table.stdout
    assert "3 variants, 1 to compile, 2 cannot be planned." in table.stdout

    explained = cli("explain", "gtcache.examples:axpy", "--backend", "odd_backends:guarded", "--json")
    assert explained.returncode == 0, explained.stderr
    [explanation] = json.loads(explained.stdout)
    assert "Cannot fingerprint" in explanation["unplannable"] and explanation["key"] == ""
    text = cli("explain", "gtcache.examples:axpy", "--backend", "odd_backends:opaque")
    assert "cannot plan without compiling: the backend has a custom compile" in text.stdout, text.stdout

    assert not mark.exists(), f"planning compiled: {mark.read_text() if mark.exists() else ''}"
    assert not list(store.glob("entries/*/*"))


def test_plan_reports_unplannable_beside_planned(tmp_path: pathlib.Path) -> None:
    """``warm.plan`` keeps every variant, with the reason (it dropped them before)."""
    (tmp_path / "odd_backends2.py").write_text(textwrap.dedent(BACKENDS_MODULE))
    sys.path.insert(0, str(tmp_path))
    os.environ["COMPILE_MARK"] = str(tmp_path / "compiled")
    try:
        specs = [warm.VariantSpec("gtcache.examples:axpy", b) for b in ("odd_backends2:opaque", "roundtrip")]
        planned = warm.plan(specs, gtcache.open_store(tmp_path / "s"))
    finally:
        sys.path.remove(str(tmp_path))
        del os.environ["COMPILE_MARK"]
    assert [(p.spec.backend, p.status) for p in planned] == [("odd_backends2:opaque", "unplannable"), ("roundtrip", "missing")]
    assert planned[0].detail == "the backend has a custom compile"
    assert not (tmp_path / "compiled").exists()


@pytest.mark.parametrize("backend", ["gtfn_cpu", "dace_cpu", "roundtrip"])
def test_planning_finds_what_compiling_stored(compiled_store: Any, store_copy: pathlib.Path, backend: str) -> None:
    """Each example, planned for each backend against a store that holds it: "cached", under the
    key compiling gave; against an empty store: "missing", the same key. (Planning a dace
    variant failed: gt4py 1.2.3's dace backend refused the placeholder planning leaves.)"""
    from tests.conftest import SIZE

    store, empty = gtcache.open_store(store_copy), gtcache.open_store(store_copy.parent / "empty")
    for example in examples.EXAMPLES.values():
        key = compiled_store.variant(example.name, backend).key
        for where, status in ((store, "cached"), (empty, "missing")):
            [planned] = plan_variants(where, example.program, backend=examples.backend_by_name(backend),
                                      offset_provider=example.offset_provider(SIZE))
            assert (planned.status, planned.key) == (status, key), (example.name, planned)
    assert empty.scan().entries == ()


def test_a_ledger_variant_that_does_not_resolve_here_fails_alone(tmp_path: pathlib.Path) -> None:
    """``warm --from-ledger``: a run recorded a program of a module not importable here (another
    checkout, a removed file); that variant fails, the others are planned. The same variant
    named in a manifest or a module list is bad input (``SpecError``, exit 2)."""
    run = {"variants": [{"spec": {"program": "no_such_module_here:prog", "backend": "roundtrip", "offsets": []}},
                        {"spec": {"program": "gtcache.examples:axpy", "backend": "roundtrip", "offsets": []}}]}
    specs = warm.from_ledger([run], grid=None)
    assert [s.recorded for s in specs] == [True, True]
    planned = warm.plan(specs, gtcache.open_store(tmp_path / "s"))
    assert [(p.spec.program, p.status) for p in planned] == [
        ("no_such_module_here:prog", "failed"), ("gtcache.examples:axpy", "missing")]
    assert "Cannot import 'no_such_module_here'" in (planned[0].detail or "")
    with pytest.raises(warm.SpecError, match="Cannot import 'no_such_module_here'"):
        warm.plan([dataclasses.replace(specs[0], recorded=False), specs[1]], gtcache.open_store(tmp_path / "s"))
    assert warm.unique([specs[0], dataclasses.replace(specs[0], recorded=False)]) == [specs[0]], "not identity"
