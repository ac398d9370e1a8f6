"""Shell completion: the documented install lines work; keys and names come from the store."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

import gtcache
from gtcache_cli.main import cli
from tests.helpers import publish


def complete(words: str) -> list[str]:
    """What bash completion offers for the command line ``words`` (the last word being completed)."""
    parts = words.split(" ")
    env = {"_GTCACHE_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    result = CliRunner().invoke(cli, [], env=env, prog_name="gtcache")
    assert result.exit_code == 0, result.output
    return [line.split(",", 1)[1] for line in result.output.splitlines() if "," in line]


@pytest.fixture
def store(tmp_path: pathlib.Path) -> gtcache.Store:
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    publish(store, "alpine", backend="run_dace_cpu_opt")
    publish(store, "evil\x1b[2J")
    return store


def test_keys_and_program_names_are_completed_from_the_store(store: gtcache.Store) -> None:
    root = str(store.root)
    keys = {e.program: e.key for e in store.scan().entries}
    assert complete(f"gtcache --cache-dir {root} info al") == ["alpha", "alpine"]
    assert complete(f"gtcache --cache-dir {root} info tests.synthetic.alp") == [
        "tests.synthetic.alpha", "tests.synthetic.alpine"]
    assert complete(f"gtcache --cache-dir {root} info {keys['alpha'][:4]}") == [keys["alpha"]]
    assert complete(f"gtcache --cache-dir {root} rm alpha {keys['alpine'][:5]}") == [keys["alpine"]]
    assert complete(f"gtcache --cache-dir {root} ls --program alpi") == ["alpine"]
    assert complete(f"gtcache --cache-dir {root} prune --backend run_d") == ["run_dace_cpu_opt"]
    assert complete(f"gtcache --cache-dir {root} config get max-") == ["max-size", "max-files"]
    assert not any("\x1b" in item for item in complete(f"gtcache --cache-dir {root} info "))


def test_the_environment_chooses_the_store_and_a_missing_one_completes_nothing(
    store: gtcache.Store, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GTCACHE_DIR", str(store.root))
    assert complete("gtcache info alph") == ["alpha"]
    assert complete(f"gtcache --cache-dir {tmp_path / 'typo'} info al") == []
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize(("shell", "expected"), [
    ("bash", "complete -o nosort -F _gtcache_completion gtcache"),
    ("zsh", "compdef _gtcache_completion gtcache"),
    ("fish", "complete --no-files --command gtcache"),
])
def test_documented_install_lines_give_a_completion_script(shell: str, expected: str) -> None:
    docs = (pathlib.Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    assert f"_GTCACHE_COMPLETE={shell}_source gtcache" in docs
    env = {**os.environ, "_GTCACHE_COMPLETE": f"{shell}_source", "PYTHONPATH": os.pathsep.join(sys.path)}
    script = subprocess.run([sys.executable, "-m", "gtcache_cli"], env=env, capture_output=True, text=True,
                            check=True).stdout
    assert expected in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_install_line_registers_the_completion(tmp_path: pathlib.Path) -> None:
    script = pathlib.Path(sys.executable).with_name("gtcache")
    env = {**os.environ, "PATH": f"{script.parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(["bash", "-c", 'eval "$(_GTCACHE_COMPLETE=bash_source gtcache)" && complete -p gtcache'],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert "_gtcache_completion" in out
