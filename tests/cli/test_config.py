"""``gtcache config get/set/unset/list``: gtcache.toml written, checked when set and when read;
``verify`` reports a bad value; the caps it sets are the ones enforced."""

from __future__ import annotations

import json
import pathlib
import tomllib

import pytest
from click.testing import CliRunner

import gtcache
from gtcache.policies import Limits
from gtcache.settings import Settings
from gtcache_cli.main import cli


def run(root: pathlib.Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    env = {"GTCACHE_MAX_SIZE": None, "GTCACHE_MAX_FILES": None, **(env or {})}  # type: ignore[dict-item]
    result = CliRunner().invoke(cli, ["--cache-dir", str(root), *args], env=env)
    return result.exit_code, result.output


def errors(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("Error:")]


def test_set_get_list_unset(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    code, out = run(root, "config", "set", "max-size", "20G")  # creates the store
    assert code == 0 and "20G (18.6 GiB)" in out
    assert run(root, "config", "set", "max_files", "1000")[0] == 0  # ccache's spelling too
    assert tomllib.loads((root / "gtcache.toml").read_text()) == {"limits": {"max_size": "20G", "max_files": 1000}}
    assert Limits.for_store(root, Settings.from_env(env={})) == Limits(max_size=20 * 10**9, max_files=1000)
    assert run(root, "config", "get", "max-size") == (0, "20G\n")
    code, out = run(root, "config", "list", "--json")
    settings = {s["key"]: s for s in json.loads(out)["settings"]}
    assert settings["max-size"]["value"] == 20 * 10**9 and settings["max-size"]["source"] == "gtcache.toml"
    code, out = run(root, "config", "list", env={"GTCACHE_MAX_SIZE": "1Gi"})
    assert code == 0 and "1Gi (1.0 GiB)" in out and "environment (GTCACHE_MAX_SIZE)" in out and "file: 20G" in out
    assert run(root, "config", "unset", "max-size")[0] == 0
    assert run(root, "config", "get", "max-size") == (0, "")
    assert Limits.for_store(root, Settings.from_env(env={})) == Limits(max_files=1000)


@pytest.mark.parametrize(("args", "words"), [
    (("max-size", "20X"), "'20X' is not a size"),
    (("max-files", "1.5"), "is not a whole number"),
    (("max-files", "lots"), "is not a whole number"),
    (("max-size", "-1"), "'-1' is not a size"),  # a value, not an unknown option
    (("max-files", "-5"), "is not a whole number"),
    (("colour", "blue"), "'colour' is not a setting; the settings are max-size, max-files"),
])
def test_a_bad_value_is_refused_when_set(tmp_path: pathlib.Path, args: tuple[str, ...], words: str) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root)
    code, out = run(root, "config", "set", *args)
    assert code == 2 and len(errors(out)) == 1 and words in errors(out)[0], out
    assert not (root / "gtcache.toml").exists()


@pytest.mark.parametrize(("text", "words"), [
    ('[limits]\nmax_size = "20X"\n', "max-size = '20X' is not a size"),
    ("[limits]\nmax_files = -5\n", "max-files = -5 is not a whole number"),
    ("[limits]\nmax_size = true\n", "max-size = True is not a size"),
    ("[limits]\nmax_size = -5\n", "max-size = -5 is negative"),  # (a mutation audit: accepted unseen)
])
def test_a_bad_value_is_reported_when_read(tmp_path: pathlib.Path, text: str, words: str) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root)
    (root / "gtcache.toml").write_text(text)
    for command in (("config", "list"), ("config", "get", "max-size" if "size" in words else "max-files")):
        code, out = run(root, *command)
        assert code == 1 and len(errors(out)) == 1 and words in errors(out)[0], out
        assert "gtcache config set" in errors(out)[0]
    code, out = run(root, "verify")
    assert code == 1 and "config:" in out and words in out
    code, out = run(root, "verify", "--repair", "--json")
    report = json.loads(out)
    assert code == 1 and [p["kind"] for p in report["problems"]] == ["config"] and report["repaired"] == []
    with pytest.raises(gtcache.GtcacheError, match="Bad store limit"):
        Limits.for_store(root, Settings.from_env(env={}))


def test_a_bad_environment_value_says_which_variable(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root)
    code, out = run(root, "config", "list", env={"GTCACHE_MAX_FILES": "many"})
    assert code == 1 and "fix or unset GTCACHE_MAX_FILES" in errors(out)[0]


def test_verify_reports_settings_gtcache_does_not_read(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root)
    (root / "gtcache.toml").write_text("[limits]\nmax_sise = 5\n")
    code, out = run(root, "verify")
    assert code == 1 and "max_sise is not a setting" in out
    (root / "gtcache.toml").write_text("[limits\n")
    code, out = run(root, "verify")
    assert code == 1 and "is not TOML" in out


def test_config_keeps_other_settings_and_the_store_mode(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    gtcache.open_store(root)
    (root / "gtcache.toml").write_text("# mine\n[limits]\nmax_files = 7\n")
    assert run(root, "config", "set", "max-size", "1.5GiB")[0] == 0
    assert tomllib.loads((root / "gtcache.toml").read_text()) == {"limits": {"max_files": 7, "max_size": "1.5GiB"}}
    assert (root / "gtcache.toml").stat().st_mode & 0o777 == gtcache.open_store(root).modes.file


def test_config_needs_a_store_except_set(tmp_path: pathlib.Path) -> None:
    for command in (("config", "list"), ("config", "get", "max-size"), ("config", "unset", "max-size")):
        code, out = run(tmp_path / "typo", *command)
        assert code == 1 and errors(out) == [f"Error: No gtcache store at '{tmp_path / 'typo'}'."]
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("how", ["writable by others", "a FIFO", "a symlink"])
def test_caps_in_a_settings_file_someone_untrusted_may_have_written_remove_nothing(
    tmp_path: pathlib.Path, how: str,
) -> None:
    """Its caps remove entries, so gtcache.toml is read as an entry file is: one others may
    write (max_size = "0" would empty the store), a FIFO (which blocked prune for good) or a
    symlink is not read: prune without a policy and the model runs' cap refuse it, verify names
    it; the entries stay (a review: Limits.for_store read it with read_text, unchecked)."""
    import os

    from tests.helpers import publish

    root = tmp_path / "store"
    store = gtcache.open_store(root)
    publish(store, "alpha")
    config = root / "gtcache.toml"
    if how == "writable by others":
        config.write_text('[limits]\nmax_size = "0"\n')
        config.chmod(0o666)
    elif how == "a FIFO":
        os.mkfifo(config)
    else:
        (tmp_path / "elsewhere.toml").write_text('[limits]\nmax_size = "0"\n')
        config.symlink_to(tmp_path / "elsewhere.toml")
    code, out = run(root, "prune", "--yes")
    assert code == 1 and len(errors(out)) == 1 and "gtcache.toml" in errors(out)[0], out
    with pytest.raises(gtcache.GtcacheError, match="gtcache.toml"):
        Limits.for_store(root, None, store.trust)
    code, out = run(root, "verify")
    assert code == 1 and "config" in out and "gtcache.toml" in out, out
    code, out = run(root, "config", "list")
    assert code == 1 and "gtcache.toml" in errors(out)[0], "not shown as if in force"
    env_caps = Settings.from_env(env={"GTCACHE_MAX_FILES": "7"})
    assert Limits.for_store(root, env_caps, store.trust) == Limits(max_files=7), "the environment's cap still applies"
    assert len(store.scan().entries) == 1


# -- checks a mutation of the code once left unseen (each test fails with it) ----------------------


def test_config_set_in_a_group_store_keeps_the_file_writable_by_the_group(tmp_path: pathlib.Path) -> None:
    """In a group-shared store (root 2775) the settings file gets the store's file mode, 0664,
    whatever the umask, so that the group's other members may change it (a mutation audit: the
    default mode, 0644, went unseen: the tests' stores were private)."""
    import os

    root = tmp_path / "team"
    root.mkdir()
    os.chmod(root, 0o2775)
    old = os.umask(0o022)
    try:
        assert run(root, "config", "set", "max-size", "1G")[0] == 0
    finally:
        os.umask(old)
    assert (root / "gtcache.toml").stat().st_mode & 0o777 == 0o664


def test_set_config_refuses_a_store_opened_read_only(tmp_path: pathlib.Path) -> None:
    """A store opened read-only (another user's, or one only listed) is never written: setting a
    cap there is an error and the file stays as it was (a mutation audit)."""
    from gtcache.policies.config import set_config

    root = tmp_path / "store"
    gtcache.open_store(root)
    (root / "gtcache.toml").write_text("[limits]\nmax_files = 7\n")
    with pytest.raises(gtcache.GtcacheError, match="read-only"):
        set_config(gtcache.open_store(root, read_only=True), "max-size", "0")
    assert (root / "gtcache.toml").read_text() == "[limits]\nmax_files = 7\n"

