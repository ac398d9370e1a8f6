"""Finding programs in modules (``gtcache warm MODULE``) and naming their backends: one table of
short backend names, in the adapter (``gtcache.gt4py._compat.BACKENDS``). Nothing compiles here."""

from __future__ import annotations

import pathlib
import textwrap

import pytest
from gt4py.next import backend as gtx_backend

from gtcache import warm
from gtcache.gt4py.targets import BACKENDS, resolve_backend, short_backend_name

PACKAGE = {
    "__init__.py": "",
    "stencils.py": """
        import gt4py.next as gtx
        from gt4py.next import Dims, Field, float64

        IDim = gtx.Dimension("IDim")

        @gtx.field_operator
        def _double(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
            return 2.0 * a

        @gtx.program(backend=gtx.gtfn_cpu)
        def on_gtfn(a: Field[Dims[IDim], float64], out: Field[Dims[IDim], float64]):
            _double(a, out=out)

        @gtx.program
        def without_backend(a: Field[Dims[IDim], float64], out: Field[Dims[IDim], float64]):
            _double(a, out=out)
    """,
}


def _package(root: pathlib.Path, name: str, files: dict[str, str]) -> None:
    (root / name).mkdir()
    for file, text in files.items():
        (root / name / file).write_text(textwrap.dedent(text))


def test_every_short_backend_name_names_its_backend_back() -> None:
    for name in BACKENDS:
        assert short_backend_name(resolve_backend(name)) == name
    roundtrip = resolve_backend("roundtrip")
    mine = gtx_backend.Backend(
        name="mine", executor=roundtrip.executor, allocator=roundtrip.allocator, transforms=roundtrip.transforms
    )
    assert short_backend_name(mine) is None


def test_modules_give_each_program_with_its_own_backend(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "found_programs", PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = warm.from_modules(["found_programs"], backends=None, grid=None)
    assert [(s.program, s.backend) for s in specs] == [("found_programs.stencils:on_gtfn", "gtfn_cpu")]
    chosen = warm.from_modules(["found_programs.stencils"], backends=["roundtrip"], grid=None)
    assert sorted(s.program for s in chosen) == [
        "found_programs.stencils:on_gtfn", "found_programs.stencils:without_backend",
    ]


def test_a_module_that_fails_to_import_is_a_spec_error(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "broken_programs", {"__init__.py": "", "bad.py": "raise RuntimeError('no grid')\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(warm.SpecError, match="Cannot import 'broken_programs.bad': no grid"):
        warm.from_modules(["broken_programs"], backends=None, grid=None)
