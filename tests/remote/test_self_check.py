"""Self-check mode and the remote tier: a remote's direct link is never used unchecked."""

from __future__ import annotations

import pathlib

import pytest

from gtcache.remote import Remote, parse_remote
from tests.remote.helpers import KEY, model_run

pytestmark = pytest.mark.slow


def test_self_check_never_serves_a_remote_direct_link_unchecked(redis_server: str, tmp_path: pathlib.Path) -> None:
    """A remote direct link, validly signed, naming another program's sound entry (a bug in
    how direct keys are made, or a signer's mistake): what ``GTCACHE_SELF_CHECK`` exists to
    catch. With it, the hook skips the remote's direct links (it cannot check one without
    lowering) and finds the variant by its build key: the right program. Catches: the remote
    direct lookup done in self-check mode too (``Hook.make_task``)."""
    compiled = model_run(tmp_path / "ci", f"{redis_server}?mode=read-write", tmp_path, "axpy", "edge_diff")
    axpy, edge_diff = (o["key"] for o in compiled["outcomes"])
    signer = Remote(parse_remote(f"{redis_server}?mode=read-write"), key=KEY.encode())
    direct = [p.name.removesuffix(".json") for p in (tmp_path / "ci" / "direct").rglob("*") if p.is_file()]
    [axpy_direct] = [d for d in direct if signer.build_key_of(d) == axpy]
    signer.push_direct(axpy_direct, edge_diff)
    assert signer.build_key_of(axpy_direct) == edge_diff, "the setup poisons the remote's link"

    checked = model_run(tmp_path / "node", redis_server, tmp_path, "axpy", GTCACHE_SELF_CHECK="1")
    assert checked["correct"] == [True], checked
    assert [(o["status"], o["via"], o["key"]) for o in checked["outcomes"]] == [("hit", "build", axpy)], checked
    assert "from remote" in checked["outcomes"][0]["detail"]
