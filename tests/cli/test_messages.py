"""Small things a new user meets: plurals, plan bytes equal to the bytes freed, messages that
say what to do (short key prefixes, warm with nothing to warm), clear and quarantine/."""

from __future__ import annotations

import json
import pathlib

import pytest
from click.testing import CliRunner

import gtcache
from gtcache_cli.main import cli
from tests.helpers import publish


def run(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input)
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: pathlib.Path) -> gtcache.Store:
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    return store


def test_one_entry_is_singular(store: gtcache.Store, tmp_path: pathlib.Path) -> None:
    root = str(store.root)
    assert "1 entry, " in run("--cache-dir", root, "ls")[1]
    assert "Checked 1 entry in" in run("--cache-dir", root, "verify")[1]
    assert "Indexed 1 entry (0 broken)" in run("--cache-dir", root, "reindex")[1]
    assert "Exported 1 entry to" in run("--cache-dir", root, "export", str(tmp_path / "b.tar.gz"))[1]
    out = run("--cache-dir", str(tmp_path / "other"), "import", str(tmp_path / "b.tar.gz"))[1]
    assert "Imported 1 entry; 0 were there already" in out
    out = run("--cache-dir", root, "import", str(tmp_path / "b.tar.gz"))[1]
    assert "Imported 0 entries; 1 was there already" in out
    out = run("--cache-dir", root, "rm", "alpha", "--dry-run")[1]
    assert "1 entry, " in out and "0 entries (0 B) stay" in out
    assert "Removed 1 entry, freed" in run("--cache-dir", root, "rm", "alpha", "--yes")[1]
    for text in (out,):
        assert "1 entries" not in text


def test_rm_plans_the_bytes_it_frees(store: gtcache.Store) -> None:
    publish(store, "beta", payload=b"x" * 5000)
    code, out = run("--cache-dir", str(store.root), "rm", "--program", "*", "--dry-run", "--json")
    planned = json.loads(out)["freed"]
    _, on_disk, _ = store.usage()
    assert planned == on_disk  # records included, as removal counts them
    code, out = run("--cache-dir", str(store.root), "rm", "--program", "*", "--yes", "--json")
    assert code == 0 and json.loads(out)["freed"] == planned
    publish(store, "gamma", payload=b"y" * 3000)
    code, out = run("--cache-dir", str(store.root), "prune", "--max-size", "0", "--yes")
    [to_free] = [line for line in out.splitlines() if "to free" in line]
    rows = [line.split()[1:] for line in out.splitlines()[1:] if line[:1].isalnum() and "to free" not in line
            and not line.startswith("Removed")]
    assert [" ".join(row[2:4]) for row in rows] == [to_free.split(", ")[1].split(" to free")[0]]  # column = total
    [freed] = [line for line in out.splitlines() if line.startswith("Removed")]
    assert to_free.split(", ")[1].split(" to free")[0] == freed.split("freed ")[1].rstrip(".")


def test_a_short_key_prefix_says_how_many_digits(store: gtcache.Store) -> None:
    key = store.scan().entries[0].key
    for command in ("info", "rm"):
        code, out = run("--cache-dir", str(store.root), command, key[:3], *(["--yes"] if command == "rm" else []))
        assert code == 1, out
        assert out.strip().splitlines()[-1] == (
            f"Error: No entry matches '{key[:3]}'; a key prefix needs at least 4 digits ('{key[:3]}' has 3):"
            " see 'gtcache ls'.")
    assert run("--cache-dir", str(store.root), "info", key[:4])[0] == 0
    code, out = run("--cache-dir", str(store.root), "info", "zzz")
    assert code == 1 and out.strip() == "Error: No entry matches 'zzz'."


def test_warm_with_modules_that_give_nothing_says_why(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "warm", "--dry-run", "gtcache.examples")
    assert code == 2
    assert ("Error: Nothing to warm: 'gtcache.examples' defines no gt4py program with a backend of its own"
            " (name one: --backend gtfn_cpu).") in out
    assert "give MODULES" not in out
    code, out = run("--cache-dir", str(store.root), "warm", "--dry-run")
    assert code == 2 and "give MODULES, --manifest FILE or --from-ledger" in out
    code, out = run("--cache-dir", str(store.root), "warm", "--dry-run", "--from-ledger")
    assert code == 2 and "ledger records no variant" in out


def test_clear_counts_and_empties_quarantine(store: gtcache.Store) -> None:
    broken = publish(store, "broken", payload=b"z" * 4000)
    (broken.path / "program.py").write_bytes(b"short")
    assert run("--cache-dir", str(store.root), "verify", "--repair")[0] == 0
    quarantine = store.root / "quarantine"
    assert len(list(quarantine.iterdir())) == 1
    assert store.quarantined()[0] == 1 and store.quarantined()[1] > 0
    code, out = run("--cache-dir", str(store.root), "prune", "--max-size", "0", "--yes")
    assert "quarantine/ holds 1 broken entry" in out and "'gtcache clear --quarantine' removes them" in out
    assert store.scan().entries == () and len(list(quarantine.iterdir())) == 1
    _, quarantined = store.quarantined()
    code, out = run("--cache-dir", str(store.root), "clear", input="y\n")
    assert code == 0 and "Remove 0 entries and 1 quarantined entry" in out
    assert f"freed {gtcache.format_size(quarantined)}" in out
    assert not quarantine.exists() or not list(quarantine.iterdir())
    assert "Nothing to clear" in run("--cache-dir", str(store.root), "clear", "--yes")[1]


def test_clear_quarantine_removes_only_what_verify_set_aside(store: gtcache.Store) -> None:
    broken = publish(store, "broken", payload=b"z" * 4000)
    (broken.path / "program.py").write_bytes(b"short")
    assert run("--cache-dir", str(store.root), "verify", "--repair")[0] == 0
    entries = {e.key for e in store.scan().entries}
    assert entries and store.quarantined()[0] == 1
    code, out = run("--cache-dir", str(store.root), "clear", "--quarantine", "--dry-run")
    assert (code, out.split(" (")[0]) == (0, "Would remove 1 quarantined entry") and store.quarantined()[0] == 1
    code, out = run("--cache-dir", str(store.root), "clear", "--quarantine", input="y\n")
    assert code == 0 and "Remove 1 quarantined entry (" in out and "Removed 1 quarantined entry, freed" in out
    assert store.quarantined() == (0, 0) and {e.key for e in store.scan().entries} == entries, "every entry stays"
    code, out = run("--cache-dir", str(store.root), "clear", "--quarantine", "--yes")
    assert code == 0 and "Nothing to clear: quarantine/ of" in out


def test_ls_whose_filters_match_nothing_says_what_the_store_holds(store: gtcache.Store, tmp_path: pathlib.Path) -> None:
    publish(store, "beta")
    root = str(store.root)
    for args in (("--broken",), ("--program", "nosuch"), ("--backend", "nosuch"), ("--program", "alpha", "--broken")):
        code, out = run("--cache-dir", root, "ls", *args)
        assert (code, out) == (0, f"No entries match in '{root}' (2 entries there).\n"), args
        assert run("--cache-dir", root, "ls", *args, "--json") == (0, "[]\n"), args
    gtcache.open_store(tmp_path / "empty")
    for args in ((), ("--program", "nosuch")):  # a store that holds nothing says just that
        code, out = run("--cache-dir", str(tmp_path / "empty"), "ls", *args)
        assert (code, out) == (0, f"No entries in '{tmp_path / 'empty'}'.\n"), args


def test_dir_prints_the_store_path_and_its_help_says_so(store: gtcache.Store, tmp_path: pathlib.Path) -> None:
    """One line, the store only (``$(gtcache dir)``); the index only in --json, as the help says."""
    index = tmp_path / "index"
    code, out = run("--cache-dir", str(store.root), "--index-dir", str(index), "dir")
    assert (code, out) == (0, f"{store.root}\n")
    data = json.loads(run("--cache-dir", str(store.root), "--index-dir", str(index), "dir", "--json")[1])
    assert data == {"cache_dir": str(store.root), "index_dir": str(index)}
    [summary] = [line for line in run("--help")[1].splitlines() if line.strip().startswith("dir ")]
    assert "store's path" in summary and "--json" in summary, summary
