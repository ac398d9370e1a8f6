"""Code gt4py generates from the offset provider's *values*, not only its types: a fresh process
on another grid must not be served the build made for the first one.

gt4py's domain inference (``pass_manager.apply_common_transforms``, run by the gtfn and dace
translation steps) reads the concrete connectivities: with dynamic domains (the default) it
bounds an unstructured shift's domain by the grid's sizes (``_max_domain_range_sizes``: each
table's rows, and its largest index + 1), with static domains by the indices a table holds
(``_unstructured_translate_range_statically``). Both become literals in the generated code, as
a temporary's size and domain. gt4py's own persistent cache keys the tables by content; the
connectivity *types* gtcache keys by (domain, codomain, max neighbours, skip value, dtype) are
equal on such grids. Before the fix the second process was served the first one's build: its
temporary of 4 cells, read at cells 4 to 7 (garbage, or a crash), where gt4py alone is right.
``GTCACHE_SELF_CHECK=1`` did not see it (the build key is made before translation).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from tests.helpers import pythonpath, run_python

pytestmark = pytest.mark.slow

#: A cell field that is an operator of two arguments (so gt4py does not inline it into its
#: use) read through E2C from edges: gtfn makes it a temporary over the cells.
PROJ = """
import numpy as np
import gt4py.next as gtx
from gt4py.next import Field, neighbor_sum

Cell = gtx.Dimension("Cell")
Edge = gtx.Dimension("Edge")
E2CDim = gtx.Dimension("E2C", kind=gtx.DimensionKind.LOCAL)
C2EDim = gtx.Dimension("C2E", kind=gtx.DimensionKind.LOCAL)
E2C = gtx.FieldOffset("E2C", source=Cell, target=(Edge, E2CDim))
C2E = gtx.FieldOffset("C2E", source=Edge, target=(Cell, C2EDim))


@gtx.field_operator
def _op(a: Field[[Edge], gtx.float64], b: Field[[Cell], gtx.float64]) -> Field[[Edge], gtx.float64]:
    c = neighbor_sum(a(C2E), axis=C2EDim) * b
    return c(E2C[0]) + c(E2C[1])


@gtx.program
def prog(a: Field[[Edge], gtx.float64], b: Field[[Cell], gtx.float64], out: Field[[Edge], gtx.float64]):
    _op(a, b, out=out)


def grid(cells, touched):
    # A ring of as many edges as cells: cell i has edges i, i+1, i+2; edge j joins cells j and
    # j+1 of the first ``touched`` cells.
    c2e = np.array([[i % cells, (i + 1) % cells, (i + 2) % cells] for i in range(cells)], dtype=np.int32)
    e2c = np.array([[j % touched, (j + 1) % touched] for j in range(cells)], dtype=np.int32)
    return c2e, e2c
"""

RUN = """
import json, sys
import numpy as np
import gt4py.next as gtx
from proj import Cell, C2EDim, E2CDim, Edge, grid, prog

cells, touched, static = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "static"
c2e, e2c = grid(cells, touched)
offset_provider = {
    "C2E": gtx.as_connectivity([Cell, C2EDim], codomain=Edge, data=c2e),
    "E2C": gtx.as_connectivity([Edge, E2CDim], codomain=Cell, data=e2c),
}
a_, b_ = np.arange(cells) + 1.0, np.arange(cells) * 0.5 + 1.0
a, b = gtx.as_field([Edge], a_), gtx.as_field([Cell], b_)
out = gtx.as_field([Edge], np.zeros(cells))
program = prog.with_backend(gtx.gtfn_cpu)
if static:
    program = program.with_compilation_options(static_domains=True)
program(a, b, out, offset_provider=offset_provider)
c = a_[c2e].sum(axis=1) * b_
from gtcache.gt4py import active_hook
print("REPORT " + json.dumps({"out": out.asnumpy().tolist(), "numpy": (c[e2c[:, 0]] + c[e2c[:, 1]]).tolist(),
                              "outcomes": [(o.status, o.via) for o in active_hook().outcomes]}))
"""


def run(project: pathlib.Path, store: pathlib.Path, cells: int, touched: int, domains: str) -> dict:
    env = {"PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store),
           "GT4PY_BUILD_JOBS": "0"}
    out = run_python(RUN, str(cells), str(touched), domains, env=env)
    return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))


@pytest.mark.parametrize(
    ("domains", "first", "second"),
    [
        # dynamic domains: another mesh size, equal connectivity types
        pytest.param("dynamic", (4, 4), (8, 8), id="another grid size"),
        # static domains (the field sizes are static arguments, equal here): other indices
        pytest.param("static", (8, 4), (8, 8), id="same sizes, other table"),
    ],
)
def test_a_grid_the_generated_code_depends_on_is_not_served_another_grid_s_build(
    tmp_path: pathlib.Path, domains: str, first: tuple[int, int], second: tuple[int, int]
) -> None:
    project, store = tmp_path / "project", tmp_path / "store"
    project.mkdir()
    (project / "proj.py").write_text(PROJ)
    made = run(project, store, *first, domains)
    assert made["outcomes"] == [["compiled", None]]
    assert np.allclose(made["out"], made["numpy"])
    other = run(project, store, *second, domains)
    assert np.allclose(other["out"], other["numpy"]), other  # gt4py alone computes this
    assert other["outcomes"][0][0] == "compiled"


#: Two meshes in one process (a test session's grid fixtures): gt4py compiles a variant for each
#: offset provider object; the second was served the build gtcache had just stored for the first.
ONE_PROCESS = """
import json
import numpy as np
import gt4py.next as gtx
from proj import Cell, C2EDim, E2CDim, Edge, grid, prog

program, right = prog.with_backend(gtx.itir_python), []
for cells in (4, 8):
    c2e, e2c = grid(cells, cells)
    offset_provider = {
        "C2E": gtx.as_connectivity([Cell, C2EDim], codomain=Edge, data=c2e),
        "E2C": gtx.as_connectivity([Edge, E2CDim], codomain=Cell, data=e2c),
    }
    a_, b_ = np.arange(cells) + 1.0, np.arange(cells) * 0.5 + 1.0
    out = gtx.as_field([Edge], np.zeros(cells))
    program(gtx.as_field([Edge], a_), gtx.as_field([Cell], b_), out, offset_provider=offset_provider)
    c = a_[c2e].sum(axis=1) * b_
    right.append(bool(np.allclose(out.asnumpy(), c[e2c[:, 0]] + c[e2c[:, 1]])))
from gtcache.gt4py import active_hook
print("REPORT " + json.dumps({"right": right, "outcomes": [(o.status, o.via) for o in active_hook().outcomes]}))
"""


def test_two_meshes_in_one_process_are_two_variants(tmp_path: pathlib.Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "proj.py").write_text(PROJ)
    env = {"PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(tmp_path / "store")}
    out = run_python(ONE_PROCESS, env=env)
    report = json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))
    assert report == {"right": [True, True], "outcomes": [["compiled", None], ["compiled", None]]}
