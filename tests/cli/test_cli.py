"""The CLI: exit codes, --json equal to the tables' data, confirmation, errors in one line."""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

import gtcache
from gtcache_cli.main import cli
from tests.helpers import draft, here, publish, tree_state


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: pathlib.Path) -> gtcache.Store:
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    publish(store, "beta", backend="run_dace_cpu")
    broken = publish(store, "gamma")
    (broken.path / "program.py").write_bytes(b"")
    return store


def test_ls_json_lists_every_entry_with_status(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "ls", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {(r["program"], r["backend"], r["status"]) for r in rows} == {
        ("tests.synthetic.alpha", "run_gtfn_cpu", "ok"),
        ("tests.synthetic.beta", "run_dace_cpu", "ok"),
        ("tests.synthetic.gamma", "run_gtfn_cpu", "broken"),
    }
    assert all(len(r["key"]) == 32 and r["size"] >= 0 and r["disk_size"] > r["size"] for r in rows), "record counted"


def test_a_broken_entry_whose_record_is_unreadable_shows_what_it_takes(tmp_path: pathlib.Path) -> None:
    """ls showed 0 B for it (its record lists no files): SIZE and the total show the folder as
    measured; --json has both numbers."""
    store = gtcache.open_store(tmp_path / "s")
    lost = publish(store, "lost", payload=b"x" * 150_000)
    (lost.path / "entry.json").write_text("{ not json")
    [row] = json.loads(run("--cache-dir", str(store.root), "ls", "--json")[1])
    assert row["status"] == "broken" and row["size"] == 0 and row["disk_size"] >= 150_000
    code, out = run("--cache-dir", str(store.root), "ls", env={"COLUMNS": "200"})
    assert code == 0 and "146.5 KiB" in out and "1 entry, 146.5 KiB, 1 broken" in out, out


def test_ls_table_shows_the_same_entries(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "ls")
    assert code == 0
    for row in json.loads(run("--cache-dir", str(store.root), "ls", "--json")[1]):
        assert row["key"][:12] in out
    assert "3 entries" in out and "1 broken" in out


def test_ls_filters(store: gtcache.Store) -> None:
    keys = lambda *a: [r["program"] for r in json.loads(run("--cache-dir", str(store.root), "ls", "--json", *a)[1])]
    assert keys("--backend", "*dace*") == ["tests.synthetic.beta"]
    assert keys("--program", "al*") == ["tests.synthetic.alpha"]
    assert keys("--broken") == ["tests.synthetic.gamma"]


def test_ls_quiet_reverse_and_the_order_of_names_shown(tmp_path: pathlib.Path) -> None:
    """-q: full keys only (for xargs); -r reverses any order; --sort compile; by program means
    by the name shown, module second ('axpy' of package z before 'diffuse' of package a)."""
    from gtcache._frozen import replace

    store = gtcache.open_store(tmp_path / "s")
    for name, module, seconds in (("diffuse", "a.model", 3.0), ("axpy", "z.model", 1.0), ("edge", "m.model", 2.0)):
        store.publish(replace(draft(name), program={"name": name, "module": module},
                                          compile_seconds=seconds), {"program.py": b"x"})
    listed = lambda *a: [r["program"] for r in json.loads(run("--cache-dir", str(store.root), "ls", "--json", *a)[1])]
    assert listed() == ["z.model.axpy", "a.model.diffuse", "m.model.edge"]
    assert listed("-r") == ["m.model.edge", "a.model.diffuse", "z.model.axpy"]
    assert listed("--sort", "compile") == ["a.model.diffuse", "m.model.edge", "z.model.axpy"]
    assert listed("--sort", "compile", "--reverse") == ["z.model.axpy", "m.model.edge", "a.model.diffuse"]
    code, out = run("--cache-dir", str(store.root), "ls", "-q", "--program", "[ae][xd]*")
    keys = {e.program: e.key for e in store.scan().entries}
    assert (code, out) == (0, f"{keys['axpy']}\n{keys['edge']}\n")
    assert run("--cache-dir", str(store.root), "ls", "-q", "--program", "none")[1] == ""
    assert run("--cache-dir", str(store.root), "ls", "-q", "--json")[0] == 2


def test_empty_store_is_not_an_error(tmp_path: pathlib.Path) -> None:
    gtcache.open_store(tmp_path / "new")
    code, out = run("--cache-dir", str(tmp_path / "new"), "ls")
    assert code == 0 and "No entries" in out
    code, out = run("--cache-dir", str(tmp_path / "new"), "ls", "--json")
    assert code == 0 and json.loads(out) == []


READING_COMMANDS = [
    ("ls",), ("ls", "--json"), ("stats",), ("stats", "--zero"), ("verify",), ("verify", "--repair"),
    ("info", "abcd"), ("rm", "abcd", "--yes"), ("clear", "--yes"),
    ("export", "out.tar.gz"), ("reindex",),
]


@pytest.mark.parametrize("args", READING_COMMANDS, ids=" ".join)
def test_a_missing_store_is_an_error_and_is_not_created(tmp_path: pathlib.Path, args: tuple[str, ...]) -> None:
    typo = tmp_path / "typo"
    args = tuple(str(tmp_path / a) if a.endswith(".tar.gz") else a for a in args)
    code, out = run("--cache-dir", str(typo), *args)
    assert code == 1
    assert out.strip() == f"Error: No gtcache store at '{typo}'."
    assert not typo.exists() and not (tmp_path / "out.tar.gz").exists()
    # An empty folder is not a store either, and stays empty.
    typo.mkdir()
    assert run("--cache-dir", str(typo), *args)[0] == 1 and list(typo.iterdir()) == []


def test_prune_of_no_store_has_nothing_to_remove(tmp_path: pathlib.Path) -> None:
    """A CI job's first run prunes before it warms (docs/recipes.md): no store is nothing to
    remove (exit 0), and none is made; without a policy or a cap it is still a usage error."""
    typo = tmp_path / "typo"
    code, out = run("--cache-dir", str(typo), "prune", "--stale", "--unused-for", "2w", "--yes")
    assert (code, out.strip()) == (0, f"No gtcache store at '{typo}'. Nothing to remove.")
    code, out = run("--cache-dir", str(typo), "prune", "--broken", "--json", "--yes")
    assert code == 0 and json.loads(out)["entries"] == 0
    assert run("--cache-dir", str(typo), "prune")[0] == 2
    assert run("--cache-dir", str(typo), "prune", env={"GTCACHE_MAX_SIZE": "1G"})[0] == 0
    assert not typo.exists()
    typo.mkdir()
    assert run("--cache-dir", str(typo), "prune", "--broken", "--yes")[0] == 0 and list(typo.iterdir()) == []
    (typo / "thesis.tex").write_text("mine")  # a typo naming some other folder is not 'no store'
    for command in (("prune", "--max-size", "0", "--yes"), ("ls",)):
        code, out = run("--cache-dir", str(typo), *command)
        assert (code, out.strip()) == (1, f"Error: '{typo}' is not a gtcache store and is not empty;"
                                          " choose another '--cache-dir'."), command
    assert [p.name for p in typo.iterdir()] == ["thesis.tex"]


def test_prune_json_needs_yes_with_or_without_a_store_and_says_what_quarantine_holds(
    store: gtcache.Store, tmp_path: pathlib.Path,
) -> None:
    """``prune --json`` without --yes exited 0 on a missing store but 2 on one that is there; and
    the quarantine count the text shows was missing from prune's and rm's --json."""
    for where in (tmp_path / "missing", store.root):
        code, out = run("--cache-dir", str(where), "prune", "--max-size", "1", "--json")
        assert code == 2 and "give --yes" in out, (where, out)
    assert not (tmp_path / "missing").exists()
    broken = next(e for e in store.scan().entries if not e.ok)
    store.quarantine(broken.key)
    for command in (("prune", "--max-size", "0", "--dry-run"), ("rm", "--program", "*", "--dry-run"),
                    ("prune", "--max-size", "0", "--yes")):
        code, out = run("--cache-dir", str(store.root), *command, "--json")
        data = json.loads(out)
        assert code == 0 and data["quarantined"] == 1 and data["quarantine_size"] > 0, (command, out)
    code, out = run("--cache-dir", str(tmp_path / "missing"), "prune", "--max-size", "1", "--json", "--yes")
    assert code == 0 and json.loads(out)["quarantined"] == 0


def test_rm_and_clear_json_need_yes_with_or_without_a_store_or_a_match(
    store: gtcache.Store, tmp_path: pathlib.Path,
) -> None:
    """``rm --json`` without --yes is a usage error (exit 2, docs/cli.md's exit codes), as for
    prune and clear: it was "No gtcache store at ..." (exit 1) on a missing store, and "No entry
    matches ..." (exit 1) for a name that matches nothing."""
    for where in (tmp_path / "missing", store.root):
        for command in (("rm", "alpha", "--json"), ("rm", "nothing-of-that-name", "--json"), ("clear", "--json")):
            code, out = run("--cache-dir", str(where), *command)
            assert code == 2 and "give --yes" in out, (where, command, out)
    assert not (tmp_path / "missing").exists()
    assert len(store.scan().entries) == 3


def test_prune_without_a_policy_under_a_file_is_told_as_a_missing_store(tmp_path: pathlib.Path) -> None:
    """A --cache-dir under a file holds no store, as a missing one: prune without a policy asked
    for one (exit 2) there, but said "Cannot read '.../gtcache.toml': Not a directory" (exit 1)
    under a file (a reviewer's find)."""
    (tmp_path / "file").write_text("")
    missing = run("--cache-dir", str(tmp_path / "missing"), "prune")
    under_a_file = run("--cache-dir", str(tmp_path / "file" / "sub"), "prune")
    assert missing[0] == under_a_file[0] == 2 and "Give a policy" in under_a_file[1], under_a_file


def test_prune_without_a_policy_brings_the_store_under_its_caps(store: gtcache.Store) -> None:
    """As ``ccache --cleanup``: the caps set with ``config set`` (or the environment) apply."""
    code, out = run("--cache-dir", str(store.root), "prune", "--dry-run", env={"GTCACHE_MAX_SIZE": "0"})
    assert code == 0 and "3 entries, " in out and "max size" in out
    assert run("--cache-dir", str(store.root), "config", "set", "max-files", "4")[0] == 0
    code, out = run("--cache-dir", str(store.root), "prune", "--yes")
    assert code == 0 and "Removed 1 entry," in out and "max files 4" in out
    assert len(store.scan().entries) == 2


def test_prune_keep_gt4py_takes_versions_and_says_when_it_keeps_none(store: gtcache.Store) -> None:
    for bad in (",,", "v1.2.3", "latest", ""):
        code, out = run("--cache-dir", str(store.root), "prune", "--keep-gt4py", bad, "--yes")
        assert code == 2 and "is not a version" in out, (bad, out)
    assert len(store.scan().entries) == 3
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), "prune", "--keep-gt4py", "9.9", "--dry-run"])
    assert result.exit_code == 0 and "2 entries, " in result.stdout, "the broken one only goes with --broken"
    assert "Warning: no entry here was built by gt4py 9.9" in result.stderr


def test_commands_that_add_entries_create_the_store(tmp_path: pathlib.Path) -> None:
    source = gtcache.open_store(tmp_path / "src")
    publish(source, "alpha")
    assert run("--cache-dir", str(source.root), "export", str(tmp_path / "b.tar.gz"))[0] == 0
    code, out = run("--cache-dir", str(tmp_path / "new"), "import", str(tmp_path / "b.tar.gz"))
    assert code == 0 and "Imported 1 entr" in out
    assert len(gtcache.open_store(tmp_path / "new", create=False).scan().entries) == 1


def test_a_bad_store_path_from_the_environment_names_the_variable(tmp_path: pathlib.Path) -> None:
    (tmp_path / "afile").write_text("")
    code, out = run("ls", env={"GTCACHE_DIR": str(tmp_path / "afile")})
    assert code == 2 and f"Error: Invalid value for GTCACHE_DIR (--cache-dir): Directory '{tmp_path / 'afile'}' is a file." in out
    code, out = run("--cache-dir", str(tmp_path / "afile"), "ls", env={"GTCACHE_DIR": str(tmp_path)})
    assert code == 2 and "Error: Invalid value for '--cache-dir': Directory" in out, "typed: the option"
    code, out = run("ls", env={"GTCACHE_DIR": str(tmp_path), "GTCACHE_INDEX_DIR": str(tmp_path / "afile")})
    assert code == 2 and "Invalid value for GTCACHE_INDEX_DIR (--index-dir)" in out


def test_env_var_chooses_the_store(store: gtcache.Store) -> None:
    code, out = run("ls", "--json", env={"GTCACHE_DIR": str(store.root)})
    assert code == 0 and len(json.loads(out)) == 3
    code, out = run("dir", "--json", env={"GTCACHE_DIR": str(store.root)})
    assert json.loads(out)["cache_dir"] == str(store.root)


def test_dir_prints_the_resolved_path_as_ls_and_verify_do(store: gtcache.Store, tmp_path: pathlib.Path) -> None:
    """A store given through a symlink is used where it resolves (``open_store``): ``dir`` prints
    that path, as ``ls`` and ``verify`` do, not the link; also for an index elsewhere."""
    link, index_link = tmp_path / "link", tmp_path / "index-link"
    link.symlink_to(store.root)
    (tmp_path / "index").mkdir()
    index_link.symlink_to(tmp_path / "index")
    code, out = run("--cache-dir", str(link), "dir")
    assert (code, out) == (0, f"{store.root}\n")
    code, out = run("--cache-dir", str(link), "--index-dir", str(index_link), "dir", "--json")
    assert json.loads(out) == {"cache_dir": str(store.root), "index_dir": str(tmp_path / "index")}
    assert f"in '{store.root}'" in run("--cache-dir", str(link), "ls")[1]
    assert f"in '{store.root}'" in run("--cache-dir", str(link), "verify")[1]
    code, out = run("--cache-dir", str(link / "not-yet"), "dir")  # a store not made yet: resolved too
    assert out == f"{store.root / 'not-yet'}\n"


def test_info_by_program_and_key_prefix(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "info", "alpha", "--json")
    assert code == 0
    [info] = json.loads(out)
    assert info["record"]["program"]["name"] == "alpha"
    code, out = run("--cache-dir", str(store.root), "info", info["key"][:6], "--json")
    assert code == 0 and json.loads(out)[0]["key"] == info["key"]
    code, out = run("--cache-dir", str(store.root), "info", info["key"])
    assert code == 0 and info["key"] in out and "program_ir" in out


def test_unknown_entry_is_exit_1_with_one_line(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "info", "nosuchprogram")
    assert code == 1
    assert out.strip() == "Error: No entry matches 'nosuchprogram'."


def test_key_prefixes_in_upper_case_and_ambiguous_ones_are_helped(tmp_path: pathlib.Path) -> None:
    """A key copied in upper case is a key; an ambiguous prefix names some of what it matches;
    a name that matches nothing while broken entries cannot say their program points at them."""
    store = gtcache.open_store(tmp_path / "s")
    key = publish(store, "alpha").key
    code, out = run("--cache-dir", str(store.root), "info", key[:8].upper(), "--json")
    assert code == 0 and json.loads(out)[0]["key"] == key
    code, out = run("--cache-dir", str(store.root), "info", key.upper(), "--json")
    assert code == 0 and json.loads(out)[0]["key"] == key

    def entry(key: str, name: str) -> gtcache.EntryInfo:
        return gtcache.EntryInfo.make(key=key, path=tmp_path, raw={"program": {"name": name}}, problem=None)

    scan = gtcache.StoreScan(root=tmp_path, index="unused", entries=tuple(
        entry(f"abcd{i:x}{'0' * 27}", f"p{i}") for i in range(6)))
    with pytest.raises(gtcache.AmbiguousKeyError) as raised:
        store.resolve("ABCD", scan)
    assert str(raised.value) == (
        "Key prefix 'ABCD' matches 6 entries (abcd00000000 p0, abcd10000000 p1, abcd20000000 p2,"
        " abcd30000000 p3, ...); give more characters.")

    broken = publish(store, "lost")
    (broken.path / "entry.json").write_text("{ not json")
    code, out = run("--cache-dir", str(store.root), "info", "lost")
    assert (code, out.strip()) == (1, "Error: No entry matches 'lost'; 1 broken entry of the store cannot say"
                                      " which program it is ('gtcache ls --broken' lists them).")


def test_usage_error_is_exit_2(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "ls", "--sort", "colour")
    assert code == 2
    code, _ = run("--cache-dir", str(store.root), "frobnicate")
    assert code == 2


def test_newer_layout_is_exit_1_naming_the_path(tmp_path: pathlib.Path) -> None:
    gtcache.open_store(tmp_path / "s")
    (tmp_path / "s/gtcache-layout.json").write_text('{"format": "gtcache-store", "layout_version": 9}')
    code, out = run("--cache-dir", str(tmp_path / "s"), "ls")
    assert code == 1 and str(tmp_path / "s") in out and "layout version 9" in out
    assert len(out.strip().splitlines()) == 1


def test_stats_json_matches_entries(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "stats", "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["entries"] == 3 and stats["broken"] == 1
    assert stats["by_backend"]["run_dace_cpu"]["entries"] == 1
    assert stats["by_gt4py"][here()["gt4py"]]["entries"] == 3
    code, out = run("--cache-dir", str(store.root), "stats")
    assert code == 0 and "run_dace_cpu" in out and "3 entries (1 broken)" in out


def test_clear_asks_and_yes_skips(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "clear", input="n\n")
    assert code == 1 and "Aborted" in out
    assert len(store.scan().entries) == 3
    before = tree_state(store.root, skip="index")
    code, out = run("--cache-dir", str(store.root), "clear", "--dry-run")
    assert code == 0 and out.startswith("Would remove 3 entries (") and tree_state(store.root, skip="index") == before
    code, out = run("--cache-dir", str(store.root), "clear", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["entries"] == 3 and json.loads(out)["dry_run"] is True
    assert run("--cache-dir", str(store.root), "clear", "--json")[0] == 2, "--json has no prompt: --yes"
    assert tree_state(store.root, skip="index") == before
    code, out = run("--cache-dir", str(store.root), "clear", "--yes", "--json")
    assert code == 0 and json.loads(out)["entries"] == 3 and json.loads(out)["freed"] > 0
    code, out = run("--cache-dir", str(store.root), "clear", "--yes")
    assert code == 0 and "Nothing to clear" in out


def test_reindex(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "reindex", "--json")
    assert code == 0 and json.loads(out) == {"entries": 3, "broken": 1, "index": "rebuilt"}


def test_help_documents_exit_codes() -> None:
    code, out = run("--help")
    assert code == 0 and "Exit codes" in out and "usage error" in out
    code, out = run("ls", "--help")
    assert code == 0 and "Exit codes" in out


def test_console_script_runs(store: gtcache.Store) -> None:
    script = pathlib.Path(sys.executable).with_name("gtcache")
    proc = subprocess.run([str(script), "--cache-dir", str(store.root), "ls", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == 3


def test_prune_plans_then_removes(store: gtcache.Store) -> None:
    # Scans refresh the index (index/, cache_schema/v1/layout.md): made once here; all else stays.
    assert run("--cache-dir", str(store.root), "ls")[0] == 0
    before = tree_state(store.root, skip="index")
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--dry-run")
    assert code == 0 and "broken" in out and "1 entry, " in out
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--json", "--dry-run")
    plan = json.loads(out)
    assert plan["entries"] == 1 and plan["dry_run"] is True and plan["removals"][0]["status"] == "broken"
    code, out = run("--cache-dir", str(store.root), "prune", "--max-size", "0", "--older-than", "0s", "--dry-run")
    assert code == 0 and "3 entries, " in out
    assert tree_state(store.root, skip="index") == before, "a dry run writes, removes and touches nothing"
    assert len(store.scan().entries) == 3
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--yes")
    assert code == 0 and "Removed 1 entry," in out
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--yes")
    assert code == 0 and "Nothing to remove" in out


def test_prune_needs_a_policy_and_good_units(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "prune")
    assert code == 2 and "Give a policy" in out
    code, out = run("--cache-dir", str(store.root), "prune", "--max-size", "lots")
    assert code == 2 and "not a size" in out
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--json")
    assert code == 2 and "--yes" in out


def test_prune_max_size_json(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "prune", "--max-size", "0", "--json", "--yes")
    assert code == 0 and json.loads(out)["remaining_entries"] == 0
    assert store.scan().entries == ()


def test_rm_by_key_and_program(store: gtcache.Store) -> None:
    rows = json.loads(run("--cache-dir", str(store.root), "ls", "--json")[1])
    alpha = next(r for r in rows if r["program"].endswith("alpha"))
    code, out = run("--cache-dir", str(store.root), "rm", alpha["key"][:8], "--yes")
    assert code == 0 and "Removed 1 entry," in out
    code, out = run("--cache-dir", str(store.root), "rm", "--program", "be*", "--yes")
    assert code == 0 and "Removed 1 entry," in out
    code, out = run("--cache-dir", str(store.root), "rm")
    assert code == 2
    code, out = run("--cache-dir", str(store.root), "rm", "nosuch", "--yes")
    assert code == 1 and "No entry matches" in out


def test_rm_globs_narrow_what_the_queries_name(store: gtcache.Store) -> None:
    """``rm QUERY --backend GLOB`` removes what both select (it added every entry of the
    backend before), and a backend matches by its name without ``run_`` too."""
    code, out = run("--cache-dir", str(store.root), "rm", "alpha", "--backend", "*dace*", "--yes")
    assert code == 0 and "Nothing to remove" in out and len(store.scan().entries) == 3
    code, out = run("--cache-dir", str(store.root), "rm", "alpha", "beta", "--backend", "gtfn_cpu", "--yes")
    assert code == 0 and "Removed 1 entry," in out
    assert sorted(e.program for e in store.scan().entries) == ["beta", "gamma"]


def test_verify_exit_codes(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "verify")
    assert code == 1 and "broken-entry" in out
    code, out = run("--cache-dir", str(store.root), "verify", "--repair", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and len(report["repaired"]) == 1
    code, out = run("--cache-dir", str(store.root), "verify")
    assert code == 0 and "no problems" in out


def test_stats_reports_runs_and_zero(store: gtcache.Store) -> None:
    store.record_run({"counts": {"hit": 4, "compiled": 2, "bypassed": 1}, "compile_seconds": 20.0, "compile_seconds_saved": 44.0})
    code, out = run("--cache-dir", str(store.root), "stats", "--json")
    runs = json.loads(out)["runs"]
    assert (runs["runs"], runs["hits"], runs["compiled"], runs["bypassed"]) == (1, 4, 2, 1)
    assert runs["compile_seconds_saved"] == 44.0
    code, out = run("--cache-dir", str(store.root), "stats", "--zero")
    assert code == 0 and "Forgot 1 recorded run." in out
    assert json.loads(run("--cache-dir", str(store.root), "stats", "--json")[1])["runs"]["runs"] == 0


@pytest.mark.parametrize(("args", "words"), [
    (("prune", "--max-size", "20X"), "'20X' is not a size; give a number of bytes"),
    (("prune", "--max-size", "9" * 40 + "P"), "too large a size"),
    (("prune", "--older-than", "1h1h"), "'1h1h' is not a duration"),
    (("prune", "--unused-for", "3 years"), "'3 years' is not a duration"),
    (("warm", "--timeout", "soon", "--dry-run", "x"), "'soon' is not a duration"),
    (("warm", "--memory-per-job", "2GG", "--dry-run", "x"), "'2GG' is not a size"),
])
def test_bad_sizes_and_durations_are_one_error_line_exit_2(
    store: gtcache.Store, args: tuple[str, ...], words: str
) -> None:
    result = CliRunner().invoke(cli, ["--cache-dir", str(store.root), *args])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and words in errors[0] and args[1] in errors[0], result.output


def test_sizes_and_durations_as_ccache_reads_them(store: gtcache.Store) -> None:
    keeps = lambda cap: json.loads(run("--cache-dir", str(store.root), "prune", "--max-size", cap,  # noqa: E731
                                       "--json", "--dry-run")[1])["remaining_size"]
    _, on_disk, _ = store.usage()  # caps count bytes on disk (records included), some thousands here
    assert keeps(f"{on_disk / 1000}k") == on_disk and keeps("1e5") == on_disk and keeps("0.02Ki") < on_disk
    plan = json.loads(run("--cache-dir", str(store.root), "prune", "--older-than", "1h30m", "--json", "--dry-run")[1])
    assert plan["entries"] == 0


def test_compile_times_read_as_people_read_them() -> None:
    from gtcache_cli._text import duration

    assert [duration(s) for s in (0, 21.74, 59.9, 60, 462.3, 3599.6, 3600, 141505.9, 86400, 277000)] == [
        "0.0s", "21.7s", "59.9s", "1m 00s", "7m 42s", "1h 00m", "1h 00m", "1d 15h", "1d 0h", "3d 4h"]


def test_stats_as_ccache_s(store: gtcache.Store) -> None:
    store.record_run({"counts": {"hit": 40, "compiled": 4, "bypassed": 2, "failed": 1},
                      "compile_seconds": 60.0, "compile_seconds_saved": 412.3})
    store.record_run({"counts": {"hit": 5}, "compile_seconds": 0.0, "compile_seconds_saved": 50.0})
    code, out = run("--cache-dir", str(store.root), "stats")
    assert code == 0
    lines = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
    assert lines["Variants"] == "52"
    assert lines["Cacheable"] == "50 / 52 (96.2 %)"
    assert lines["Hits"] == "45 / 50 (90.0 %)"
    assert lines["Compiled"] == " 4 / 50 (8.0 %)".strip()
    assert lines["Bypassed"] == "2 / 52 (3.8 %)"
    assert lines["Compile time"] == "7m 42s saved, 1m 00s spent compiling"
    assert "the oldest of 2 recorded runs (never zeroed)" in lines["Since"] and "just now" in lines["Since"]
    assert "no cap" in lines["On disk"] and "no cap" in lines["Files"]
    _, size, files = store.usage()
    (store.root / "gtcache.toml").write_text(f'[limits]\nmax_size = {2 * size}\nmax_files = {4 * files}\n')
    lines = {line.split(":")[0].strip(): line.split(":", 1)[1].strip()
             for line in run("--cache-dir", str(store.root), "stats")[1].splitlines() if ":" in line}
    assert lines["On disk"].endswith("(50.0 %)") and lines["Files"] == f"{files} / {4 * files} (25.0 %)"
    data = json.loads(run("--cache-dir", str(store.root), "stats", "--json")[1])
    assert data["runs"]["hit_rate"] == 90.0 and data["usage"] == {
        "size": size, "files": files, "max_size": 2 * size, "max_files": 4 * files, "problem": None}
    assert datetime.datetime.fromisoformat(data["runs"]["since"]).tzinfo is not None
    # A bad cap is shown, not a crash and not silence.
    (store.root / "gtcache.toml").write_text('[limits]\nmax_size = "20X"\n')
    code, out = run("--cache-dir", str(store.root), "stats")
    assert code == 0 and "no cap: Bad store limit: max-size = '20X' is not a size" in out
    # Since the last --zero.
    run("--cache-dir", str(store.root), "stats", "--zero")
    data = json.loads(run("--cache-dir", str(store.root), "stats", "--json")[1])
    assert data["runs"]["hits"] == 0 and data["runs"]["hit_rate"] is None
    assert data["runs"]["since"] == data["runs"]["zeroed"] == store.ledger_zeroed() is not None
    store.record_run({"counts": {"hit": 1}})
    out = run("--cache-dir", str(store.root), "stats")[1]
    assert "the last 'stats --zero'; 1 recorded run" in out
    assert "Forgot 1 recorded run." in run("--cache-dir", str(store.root), "stats", "--zero")[1]  # not the mark
