"""The adapter knows the gt4py it runs against, and its range agrees with `gtcache doctor`."""

from __future__ import annotations

import re

from gtcache import doctor
from gtcache.gt4py import _compat


def test_the_adapter_was_checked_against_this_gt4py() -> None:
    release = re.match(r"\d+\.\d+\.\d+", _compat.GT4PY_VERSION)
    assert release is not None, _compat.GT4PY_VERSION
    assert release.group() in _compat.KNOWN_GT4PY_VERSIONS, (
        f"gt4py {_compat.GT4PY_VERSION} is new to gtcache.gt4py._compat: read its internals, then add it"
    )


def test_every_known_version_is_one_doctor_supports() -> None:
    for version in _compat.KNOWN_GT4PY_VERSIONS:
        assert doctor._gt4py_problem(version) is None, version
    assert doctor._gt4py_problem("1.3.0") is not None
