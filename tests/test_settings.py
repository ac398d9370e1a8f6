"""Settings resolve arguments over environment over defaults, once."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

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


@pytest.mark.parametrize("word", ["1", "true", "Yes", " on ", "TRUE"])
def test_every_switch_reads_the_same_true_words(word: str) -> None:
    names = ("GTCACHE_SELF_CHECK", "GTCACHE_EXPLAIN", "GTCACHE_PROMOTE", "GTCACHE_REPORT")
    settings = Settings.from_env(env={**dict.fromkeys(names, word), "GTCACHE": word, "GTCACHE_BUNDLE_REQUIRE_SIGNED": word})
    assert (settings.self_check, settings.explain, settings.promote, settings.report, settings.enabled) == (True,) * 5
    assert settings.bundle_trust().require_signed
    off = Settings.from_env(env={**dict.fromkeys(names, "maybe"), "GTCACHE": "maybe"})
    assert not (off.self_check or off.explain or off.promote or off.report or off.enabled)


@pytest.mark.parametrize(
    ("env", "active"),
    [({"GTCACHE": "YES "}, True), ({"GTCACHE": "on"}, True), ({"GTCACHE_DIR": "/x", "GTCACHE": "0"}, False)],
)
def test_start_up_hook_reads_the_switch_as_settings_do(env: dict[str, str], active: bool) -> None:
    """``_autoload`` (cheap: it runs at interpreter start-up) arms itself exactly when
    ``Settings.enabled`` says the hook installs."""
    code = (
        "import sys, gtcache._autoload\n"
        "print(any(type(f).__name__ == '_PostImport' for f in sys.meta_path), 'gtcache.settings' in sys.modules)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(active), "False"], out.stderr
    assert Settings.from_env(env=env).enabled is active


#: The modules besides settings.py that touch os.environ, and why (docs/architecture.md).
READ_ENVIRONMENT = {
    "gtcache/_autoload.py": "the start-up switch, through gtcache._env, before anything is imported",
    "gtcache/doctor.py": "the environment a model run would see is what it diagnoses",
    "gtcache/toolchain.py": "CXX, CUDAARCHS, ...: facts of the build (key ingredients), not settings",
    "gtcache/warm/run.py": "the environment its worker processes inherit",
    "gtcache_cli/_text.py": "COLUMNS: the terminal's width, as rich reads it, not a gtcache setting",
}


def test_only_settings_reads_gtcache_settings_from_the_environment() -> None:
    root = pathlib.Path(__file__).parents[1]
    found = {
        str(path.relative_to(root / folder))
        for folder in ("src", "cli")
        for path in (root / folder).rglob("*.py")
        if "os.environ" in path.read_text() or "getenv(" in path.read_text()
    }
    assert found - {"gtcache/settings.py"} == set(READ_ENVIRONMENT)
