"""Settings resolve arguments over environment over defaults, once."""

from __future__ import annotations

import pathlib

import pytest

from gtcache.settings import Settings


def test_arguments_win_over_environment(tmp_path: pathlib.Path) -> None:
    env = {"GTCACHE_DIR": str(tmp_path / "env"), "GTCACHE_INDEX_DIR": str(tmp_path / "idx")}
    settings = Settings.from_env(cache_dir=tmp_path / "arg", env=env)
    assert settings.cache_dir == tmp_path / "arg"
    assert settings.index_dir == tmp_path / "idx"


def test_default_location_is_the_user_cache_dir() -> None:
    settings = Settings.from_env(env={})
    assert settings.cache_dir.name == "gtcache" and settings.index_dir is None
    assert not settings.enabled and not settings.self_check


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({"GTCACHE_DIR": "/x"}, True),
        ({"GTCACHE": "1"}, True),
        ({"GTCACHE_DIR": "/x", "GTCACHE": "0"}, False),
        ({"GTCACHE": "no"}, False),
        ({}, False),
    ],
)
def test_hook_enabled_by_environment(env: dict[str, str], enabled: bool) -> None:
    assert Settings.from_env(env=env).enabled is enabled


def test_self_check_flag() -> None:
    assert Settings.from_env(env={"GTCACHE_SELF_CHECK": "1"}).self_check
