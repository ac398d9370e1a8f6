"""What gt4py folds into a program besides its text and its closure variables' own values,
changed between processes: the next process misses, runs what gt4py alone runs, and the one
after it is served that build.

Each project reads ``V`` from the environment when imported, so its files are the same in
every process and only the folded value differs (a configuration switching icon4py's
``vpfloat``, a constant edited in a namespace class). Before the fix each second process
was served the first one's build. The roundtrip backend keeps compiles cheap.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.helpers import pythonpath, run_python

pytestmark = pytest.mark.slow

HEAD = """from __future__ import annotations
import os
import numpy as np
import gt4py.next as gtx
from gt4py.eve.utils import FrozenNamespace
from gt4py.next import Dims, Field, astype, float32, float64
V = os.environ["V"]
IDim = gtx.Dimension("IDim")
K = gtx.Dimension("K")
"""

#: Per case: what the module defines with ``V``, the operator's body, ``V`` of the first and
#: the second process, and what gt4py alone gives the second (at each of the 2 x 3 points).
CASES = {
    # A literal's type: float32 and float64 0.1 lower to the same program but for the
    # literal's type (the build key; gtfn writes the type into the code).
    "literal type": ("vpfloat = float32 if V == '32' else float64", "a + astype(vpfloat(0.1), float64)",
                     "32", "64", 1.1),
    # A class attribute of a FrozenNamespace subclass (icon4py's constants).
    "namespace class attribute": ("class Phys(FrozenNamespace):\n    FACTOR = float(V)\nPHYS = Phys()",
                                  "a * PHYS.FACTOR", "2", "5", 5.0),
    # A dimension's kind, named only in annotations kept as text: a hit crashed ('No Dimension
    # of type K[vertical]').
    "dimension kind": ("K = gtx.Dimension('K', kind=gtx.DimensionKind[V])", "a + 1.0",
                       "VERTICAL", "HORIZONTAL", 2.0),
}

PROGRAM = """

@gtx.field_operator
def _op(a: Field[Dims[IDim, K], float64]) -> Field[Dims[IDim, K], float64]:
    return {body}


@gtx.program
def prog(a: Field[Dims[IDim, K], float64], out: Field[Dims[IDim, K], float64]):
    _op(a, out=out)
"""

RUN = """
import json
import numpy as np
import gt4py.next as gtx
from proj import IDim, K, prog
from gtcache.gt4py import active_hook

a = gtx.as_field([IDim, K], np.ones((2, 3)))
out = gtx.as_field([IDim, K], np.zeros((2, 3)))
prog.with_backend(gtx.itir_python)(a, out, offset_provider={})
print("REPORT " + json.dumps({"out": sorted(set(out.asnumpy().ravel().tolist())),
                              "outcomes": [(o.status, o.via) for o in active_hook().outcomes]}))
"""


@pytest.mark.parametrize("case", list(CASES))
def test_a_folded_value_changed_between_processes_is_not_served_the_old_build(
    tmp_path: pathlib.Path, case: str
) -> None:
    defined, body, first, second, result = CASES[case]
    (tmp_path / "proj.py").write_text(HEAD + defined + PROGRAM.format(body=body))
    store = tmp_path / "store"

    def run(value: str) -> dict:
        env = {"PYTHONPATH": pythonpath(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
               "GTCACHE_DIR": str(store), "V": value}
        out = run_python(RUN, env=env)
        return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))  # type: ignore[no-any-return]

    assert run(first)["outcomes"] == [["compiled", None]]
    changed = run(second)
    assert changed == {"out": [result], "outcomes": [["compiled", None]]}
    assert run(second) == {"out": [result], "outcomes": [["hit", "direct"]]}
