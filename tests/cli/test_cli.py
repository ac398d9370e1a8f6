"""The CLI: exit codes, --json equal to the tables' data, confirmation, errors in one line."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

import gtcache
from gtcache_cli.main import cli
from tests.store.test_store import publish


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
    assert all(len(r["key"]) == 32 and r["size"] >= 0 for r in rows)


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


def test_empty_store_is_not_an_error(tmp_path: pathlib.Path) -> None:
    code, out = run("--cache-dir", str(tmp_path / "new"), "ls")
    assert code == 0 and "No entries" in out
    code, out = run("--cache-dir", str(tmp_path / "new"), "ls", "--json")
    assert code == 0 and json.loads(out) == []


def test_env_var_chooses_the_store(store: gtcache.Store) -> None:
    code, out = run("ls", "--json", env={"GTCACHE_DIR": str(store.root)})
    assert code == 0 and len(json.loads(out)) == 3
    code, out = run("dir", "--json", env={"GTCACHE_DIR": str(store.root)})
    assert json.loads(out)["cache_dir"] == str(store.root)


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
    assert stats["by_gt4py"]["1.2.3"]["entries"] == 3
    code, out = run("--cache-dir", str(store.root), "stats")
    assert code == 0 and "run_dace_cpu" in out and "3 (1 broken)" in out


def test_clear_asks_and_yes_skips(store: gtcache.Store) -> None:
    code, out = run("--cache-dir", str(store.root), "clear", input="n\n")
    assert code == 1 and "Aborted" in out
    assert len(store.scan().entries) == 3
    code, out = run("--cache-dir", str(store.root), "clear", "--yes")
    assert code == 0 and "Removed 3 entries" in out
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
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--dry-run")
    assert code == 0 and "broken" in out and "1 entries" in out
    assert len(store.scan().entries) == 3
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--json", "--dry-run")
    plan = json.loads(out)
    assert plan["entries"] == 1 and plan["dry_run"] is True and plan["removals"][0]["status"] == "broken"
    code, out = run("--cache-dir", str(store.root), "prune", "--broken", "--yes")
    assert code == 0 and "Removed 1 entries" in out
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
    assert code == 0 and "Removed 1 entries" in out
    code, out = run("--cache-dir", str(store.root), "rm", "--program", "be*", "--yes")
    assert code == 0 and "Removed 1 entries" in out
    code, out = run("--cache-dir", str(store.root), "rm")
    assert code == 2
    code, out = run("--cache-dir", str(store.root), "rm", "nosuch", "--yes")
    assert code == 1 and "No entry matches" in out


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
    assert code == 0 and "Forgot 1 recorded runs" in out
    assert json.loads(run("--cache-dir", str(store.root), "stats", "--json")[1])["runs"]["runs"] == 0
