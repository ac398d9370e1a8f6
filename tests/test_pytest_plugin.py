"""The pytest plugin in real pytest sessions (subprocesses): summary and --gtcache-require-warm."""

from __future__ import annotations

import pathlib

import pytest

pytestmark = pytest.mark.slow

USER_TEST = '''
import numpy as np
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")


@gtx.field_operator
def _double(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return {factor} * a


@gtx.program(backend=gtx.itir_python)
def double(a: Field[Dims[IDim], float64], out: Field[Dims[IDim], float64]):
    _double(a, out=out)


def test_double():
    a = gtx.as_field([IDim], np.arange(4.0))
    out = gtx.as_field([IDim], np.zeros(4))
    double(a, out, offset_provider={{}})
    assert out.asnumpy().tolist() == [{factor} * i for i in range(4)]
'''


def test_summary_and_require_warm(pytester: pytest.Pytester, tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    pytester.makepyfile(test_user=USER_TEST.format(factor="2.0"))

    first = pytester.runpytest_subprocess(f"--gtcache={store}")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*gtcache*", f"0 variants loaded from {store}, 1 compiled*"])

    warm = pytester.runpytest_subprocess(f"--gtcache={store}", "--gtcache-require-warm")
    warm.assert_outcomes(passed=1)
    assert warm.ret == 0
    warm.stdout.fnmatch_lines([f"1 variants loaded from {store}, 0 compiled*"])

    pytester.makepyfile(test_user=USER_TEST.format(factor="3.0"))  # a new variant
    cold = pytester.runpytest_subprocess(f"--gtcache={store}", "--gtcache-require-warm")
    cold.assert_outcomes(passed=1)
    assert cold.ret == pytest.ExitCode.TESTS_FAILED
    cold.stdout.fnmatch_lines(["*compiled: double (roundtrip)*", "*--gtcache-require-warm: 1 variants were not in the store.*"])


def test_plugin_is_inert_without_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="import sys\n\ndef test_x():\n    assert 'gt4py' not in sys.modules\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert "variants loaded" not in result.stdout.str()
