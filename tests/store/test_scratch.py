"""``Store.scratch``: a fresh path in the store's tmp/ (what ``gtcache warm`` builds in),
gone afterwards with everything under it, also when the block raises."""

from __future__ import annotations

import pathlib

import pytest

import gtcache
from gtcache.store import TMP_DIR


def test_scratch_is_fresh_in_tmp_and_removed_after(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    with store.scratch("warm-build-") as first, store.scratch("warm-build-") as second:
        assert first != second and first.parent == second.parent == store.root / TMP_DIR
        assert first.name.startswith("warm-build-") and not first.exists()
        (first / "deep").mkdir(parents=True)
        (first / "deep" / "file").write_text("x")
        second.write_text("a file is fine too")
    assert not first.exists() and not second.exists()
    with pytest.raises(RuntimeError), store.scratch("x-") as path:
        path.mkdir()
        raise RuntimeError("the build failed")
    assert not path.exists()
