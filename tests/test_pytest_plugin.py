"""The pytest plugin in real pytest sessions (subprocesses): summary and --gtcache-require-warm."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

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


def test_warm_then_require_warm_passes(pytester: pytest.Pytester, tmp_path: pathlib.Path) -> None:
    """CI: `gtcache warm` the test module's programs, then the session compiles nothing."""
    store = tmp_path / "store"
    pytester.makepyfile(test_user=USER_TEST.format(factor="5.0"))
    warm = subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "test_user", "--json"],
        capture_output=True, text=True, cwd=pytester.path, timeout=900, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(pytester.path), os.environ.get("PYTHONPATH", "")])},
    )
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert json.loads(warm.stdout)["counts"]["compiled"] == 1
    result = pytester.runpytest_subprocess(f"--gtcache={store}", "--gtcache-require-warm")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"1 variants loaded from {store}, 0 compiled, 0 bypassed, 0 failed*"])
    result.stdout.no_fnmatch_line("*--gtcache-require-warm:*")


#: A test that passes although its program is not stored: gtcache cannot store what the
#: double_roundtrip backend builds (bypassed), or gt4py's build fails and the test expects it.
BYPASSED_TEST = """
import numpy as np
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64
from gt4py.next.program_processors.runners import double_roundtrip

IDim = gtx.Dimension("IDim")


@gtx.field_operator
def _triple(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return 3.0 * a


@gtx.program(backend=double_roundtrip.backend)
def triple(a: Field[Dims[IDim], float64], out: Field[Dims[IDim], float64]):
    _triple(a, out=out)


def test_triple():
    a = gtx.as_field([IDim], np.arange(4.0))
    out = gtx.as_field([IDim], np.zeros(4))
    triple(a, out, offset_provider={})
    assert out.asnumpy().tolist() == [0.0, 3.0, 6.0, 9.0]
"""

FAILED_TEST = """
import numpy as np
import pytest
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")


@gtx.field_operator
def _quadruple(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return 4.0 * a


@gtx.program(backend=gtx.gtfn_cpu)
def quadruple(a: Field[Dims[IDim], float64], out: Field[Dims[IDim], float64]):
    _quadruple(a, out=out)


def test_the_build_fails():
    a = gtx.as_field([IDim], np.arange(4.0))
    out = gtx.as_field([IDim], np.zeros(4))
    with pytest.raises(Exception):  # CXX is no compiler: gt4py's build fails
        quadruple(a, out, offset_provider={})
"""


@pytest.mark.parametrize("status", ["bypassed", "failed"])
def test_require_warm_fails_on_bypassed_and_failed(
    pytester: pytest.Pytester, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    """The tests pass; the session must still fail: the store had nothing for them."""
    store = tmp_path / "store"
    if status == "failed":
        # A fresh gt4py build cache (its CMake set-up is made anew) with a compiler that fails.
        monkeypatch.setenv("GT4PY_BUILD_CACHE_DIR", str(tmp_path / "gt4py"))
        monkeypatch.setenv("CXX", "/bin/false")
    pytester.makepyfile(test_user=BYPASSED_TEST if status == "bypassed" else FAILED_TEST)
    result = pytester.runpytest_subprocess(f"--gtcache={store}", "--gtcache-require-warm")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    program = {"bypassed": "triple", "failed": "quadruple"}[status]
    result.stdout.fnmatch_lines([
        f"0 variants loaded from {store}, 0 compiled, {int(status == 'bypassed')} bypassed, {int(status == 'failed')} failed*",
        f"*{status}: {program} (*",
        "*--gtcache-require-warm: 1 variants were not in the store.*",
    ])
    plain = pytester.runpytest_subprocess(f"--gtcache={store}")
    assert plain.ret == pytest.ExitCode.OK, "without --gtcache-require-warm the session passes"


def test_plugin_is_inert_without_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="import sys\n\ndef test_x():\n    assert 'gt4py' not in sys.modules\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert "variants loaded" not in result.stdout.str()
