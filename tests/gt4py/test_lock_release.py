"""The compile lock is released on every path (issue 16, bug 4): a runner whose ``submit``
raises leaves no lock behind, and the next compile of that key in the same process does not
wait for it."""

from __future__ import annotations

import pathlib
import warnings
from typing import Any

import pytest
from gt4py.next.otf import runners

from gtcache import examples
from gtcache.gt4py import GtcacheWarning, installed

EXAMPLE = examples.EXAMPLES["axpy"]


class FailsOnce(runners.SerialRunner):
    """gt4py's serial runner, whose first ``submit`` fails (a pool that cannot start, ...)."""

    def __init__(self) -> None:
        self.failures = 1

    def submit(self, task: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the runner is down")
        return super().submit(task)


def test_failed_submit_releases_the_compile_lock(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GTCACHE_WAIT", "30")  # a leaked lock: the second compile waits 30 s, then warns
    monkeypatch.setattr(runners, "_default_runner", FailsOnce())
    store = tmp_path / "s"
    program = EXAMPLE.program.with_backend(examples.backend_by_name("roundtrip"))
    with installed(store) as hook, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="the runner is down"):
            program.compile(offset_provider={})
        assert list((store / "locks").glob("*.lock")) == [], "the lock is gone with the failed submit"
        program.compile(offset_provider={})
    [outcome] = hook.outcomes
    assert (outcome.status, outcome.detail) == ("compiled", None)
    waited = [str(w.message) for w in caught if issubclass(w.category, GtcacheWarning) and "waited" in str(w.message)]
    assert waited == []
    assert list((store / "locks").glob("*.lock")) == []
    assert len(list(store.glob("entries/*/*"))) == 1
