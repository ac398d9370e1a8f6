"""A second ``install()``: the same settings return the installed hook; other settings raise,
except over the start-up hook's install, which arguments replace. Nothing compiles here."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

import gtcache
from gtcache.gt4py import hook as gthook
from gtcache.settings import Settings


@pytest.fixture(autouse=True)
def _uninstalled() -> Iterator[None]:
    gthook.uninstall()
    yield
    gthook.uninstall()


def test_the_same_settings_return_the_installed_hook(tmp_path: pathlib.Path) -> None:
    first = gtcache.install(tmp_path / "a")
    assert gtcache.install(tmp_path / "a") is first
    assert gtcache.install(settings=Settings.from_env(cache_dir=tmp_path / "a", env={})) is first
    assert gthook.active_hook() is first


def test_other_settings_raise_until_uninstalled(tmp_path: pathlib.Path) -> None:
    first = gtcache.install(tmp_path / "a")
    with pytest.raises(gtcache.GtcacheError, match=r"already installed with other settings .*uninstall\(\)"):
        gtcache.install(tmp_path / "b")
    # the same store with another setting was silently ignored before
    with pytest.raises(gtcache.GtcacheError, match="already installed"):
        gtcache.install(settings=Settings.from_env(cache_dir=tmp_path / "a", env={"GTCACHE_WAIT": "5"}))
    assert gthook.active_hook() is first
    gtcache.uninstall()
    assert gtcache.install(tmp_path / "b").config.cache_dir == tmp_path / "b"


def test_arguments_replace_the_start_up_hooks_install(tmp_path: pathlib.Path) -> None:
    from_env = Settings.from_env(env={"GTCACHE_DIR": str(tmp_path / "env")})
    at_startup = gthook.install_at_startup(from_env)
    assert gtcache.install(settings=from_env) is at_startup, "the same settings: the same hook"
    gtcache.uninstall()
    at_startup = gthook.install_at_startup(from_env)
    mine = gtcache.install(tmp_path / "mine")
    assert mine is not at_startup and gthook.active_hook() is mine and mine.config.cache_dir == tmp_path / "mine"
    assert gthook.install_at_startup(from_env) is mine, "the start-up hook never replaces an install"
    with pytest.raises(gtcache.GtcacheError, match="already installed"):
        gtcache.install(tmp_path / "other")


def test_install_inside_a_with_block_raises(tmp_path: pathlib.Path) -> None:
    with gtcache.installed(tmp_path / "a"):
        with pytest.raises(gtcache.GtcacheError, match="inside 'with gtcache.installed"):
            gtcache.install(tmp_path / "a")
    assert gthook.active_hook() is None
