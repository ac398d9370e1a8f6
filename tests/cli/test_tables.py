"""Tables at fixed widths (COLUMNS 60, 80, 120, narrower) and in pipes; names escaped; times."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import gtcache
from gtcache_cli import _text
from gtcache_cli.main import cli
from tests.helpers import publish

ALL_COLUMNS = ("KEY", "PROGRAM", "BACKEND", "SIZE", "COMPILE", "HITS", "LAST USED", "STATUS")
EVIL = "evil\x1b[31mred\x07"


def run(*args: str, columns: int | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    env = {**(env or {}), "COLUMNS": str(columns) if columns else None}  # type: ignore[dict-item]
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: pathlib.Path) -> gtcache.Store:
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "alpha")
    publish(store, "diffuse_vn_with_a_long_name", backend="run_dace_cpu_opt")
    publish(store, EVIL)
    broken = publish(store, "gamma")
    (broken.path / "program.py").write_bytes(b"")
    return store


def header(out: str) -> list[str]:
    line = out.splitlines()[0]
    return [name for name in ALL_COLUMNS if name in line]


def rows(store: gtcache.Store) -> list[dict]:
    return json.loads(run("--cache-dir", str(store.root), "ls", "--json")[1])


@pytest.mark.parametrize("columns", [60, 80, 120, 40])
def test_ls_fits_the_width_and_keeps_what_identifies_an_entry(store: gtcache.Store, columns: int) -> None:
    code, out = run("--cache-dir", str(store.root), "ls", columns=columns)
    assert code == 0
    table = [line for line in out.splitlines() if not line.startswith(("broken ", "4 entries"))]
    assert all(len(line.rstrip()) <= columns for line in table), out  # sentences below are not wrapped
    assert "…" not in out  # nothing cut to an ellipsis: columns drop whole, names wrap
    if columns >= 60:
        assert header(out)[:3] == ["KEY", "PROGRAM", "BACKEND"]
    shown = [m[1] for m in re.finditer(r"^([0-9a-f]{2,}) ", out, re.MULTILINE)]
    full = {r["key"]: r for r in rows(store)}
    assert len(shown) == 4 and all(len(prefix) >= _text.MIN_PREFIX for prefix in shown)
    for prefix in shown:  # every key shown is one info takes, naming one entry
        code, info = run("--cache-dir", str(store.root), "info", prefix, "--json")
        assert code == 0, info
        [entry] = json.loads(info)
        assert entry["key"].startswith(prefix) and entry["key"] in full


def test_less_important_columns_drop_first(store: gtcache.Store) -> None:
    seen = {columns: header(run("--cache-dir", str(store.root), "ls", columns=columns)[1]) for columns in (60, 80, 120)}
    assert seen[120] == list(ALL_COLUMNS)
    assert seen[60] == ["KEY", "PROGRAM", "BACKEND"]
    assert set(seen[60]) < set(seen[80]) < set(seen[120])
    assert "COMPILE" not in seen[80] and "HITS" not in seen[80]
    # 12 digits while there is room
    out = run("--cache-dir", str(store.root), "ls", columns=60)[1]
    assert all(r["key"][:12] in out for r in rows(store))


def test_program_names_short_by_default_qualified_with_long(store: gtcache.Store) -> None:
    out = run("--cache-dir", str(store.root), "ls", columns=120)[1]
    assert " alpha " in out and "tests.synthetic" not in out
    out = run("--cache-dir", str(store.root), "ls", "--long", columns=200)[1]
    assert "tests.synthetic.alpha" in out and "tests.synthetic.diffuse_vn_with_a_long_name" in out
    assert {r["program"] for r in rows(store)} >= {"tests.synthetic.alpha"}  # --json: qualified


def test_piped_output_is_never_cut(store: gtcache.Store) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    proc = subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store.root), "ls"],
                          capture_output=True, text=True, env=env, check=True)
    assert header(proc.stdout) == list(ALL_COLUMNS)
    assert all(r["key"][:12] in proc.stdout for r in rows(store))
    out = run("--cache-dir", str(store.root), "ls")[1]  # CliRunner: not a terminal, no COLUMNS
    assert header(out) == list(ALL_COLUMNS)


def test_terminal_escapes_in_names_are_escaped(store: gtcache.Store) -> None:
    key = next(r["key"] for r in rows(store) if "evil" in r["program"])
    for args in (("ls",), ("ls", "--long"), ("info", key), ("rm", key, "--dry-run")):
        out = run("--cache-dir", str(store.root), *args, columns=200)[1]
        assert "\x1b" not in out and "\x07" not in out, args
        assert "evil\\x1b[31mred\\x07" in out, args


def test_times_relative_in_tables_iso_with_zone_in_json_and_info(store: gtcache.Store) -> None:
    out = run("--cache-dir", str(store.root), "ls", columns=120)[1]
    assert "just now" in out
    for row in rows(store):
        moment = datetime.datetime.fromisoformat(row["last_used"])
        assert moment.tzinfo is not None and moment.utcoffset() == datetime.timedelta(0)
    key = rows(store)[0]["key"]
    env = {**os.environ, "TZ": "Asia/Kolkata", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store.root), "info", key],
                          capture_output=True, text=True, env=env, check=True)
    [created] = [line for line in proc.stdout.splitlines() if line.strip().startswith("created")]
    stamp = created.split()[1]
    assert stamp.endswith("+05:30") and "(just now)" in created
    assert datetime.datetime.fromisoformat(stamp).astimezone(datetime.UTC) <= datetime.datetime.now(datetime.UTC)


@pytest.mark.parametrize(("seconds", "text"), [
    (5, "just now"), (60, "1 minute ago"), (150, "2 minutes ago"), (3600, "1 hour ago"),
    (3 * 86400, "3 days ago"), (13 * 86400, "13 days ago"), (15 * 86400, "2 weeks ago"),
    (70 * 86400, "2 months ago"), (800 * 86400, "2 years ago"), (-300, "just now"),
])
def test_ago(seconds: int, text: str) -> None:
    now = datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)
    assert _text.ago((now - datetime.timedelta(seconds=seconds)).isoformat(), now) == text
    assert _text.ago("") == "-"


def test_key_digits_never_below_a_prefix_info_accepts() -> None:
    assert _text.key_digits(["aaaa0000", "bbbb0000"], room=False) == _text.MIN_PREFIX
    assert _text.key_digits(["abcdef01", "abcdef02"], room=False) == 8
    assert _text.key_digits(["abcdef01", "abcdef02"]) == _text.KEY_DIGITS


def run_with(columns: str, *args: str, input: str | None = None) -> tuple[int, str]:
    """``run`` with ``COLUMNS`` exactly as given (``run`` leaves a 0 unset)."""
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": columns}, input=input, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize("columns", ["0", "00", "-1"])
def test_a_columns_that_is_not_a_positive_number_is_ignored(store: gtcache.Store, columns: str) -> None:
    """``COLUMNS=0`` (some CI and editor shells) once made rich print every table as nothing."""
    root = str(store.root)
    key = rows(store)[0]["key"]
    code, out = run_with(columns, "--cache-dir", root, "ls")
    assert code == 0 and out, "ls printed nothing"
    assert header(out) == list(ALL_COLUMNS)  # as if unset: not a terminal, nothing cut
    assert all(r["key"][:12] in out for r in rows(store)) and "4 entries" in out
    assert "Checked 4 entries" in run_with(columns, "--cache-dir", root, "verify")[1]
    assert "Store:" in run_with(columns, "--cache-dir", root, "stats")[1]
    assert key in run_with(columns, "--cache-dir", root, "info", key)[1]
    for args in (("prune", "--max-size", "0", "-n"), ("rm", "--program", "alpha")):
        out = run_with(columns, "--cache-dir", root, *args, input="n\n")[1]
        plan, _, _ = out.partition("[y/N]")
        assert "KEY" in plan and "PROGRAM" in plan and "to free" in plan, (args, out)  # the plan before the question


@pytest.mark.parametrize("columns", ["1", "5", "20"])
def test_a_tiny_width_keeps_what_identifies_an_entry(store: gtcache.Store, columns: str) -> None:
    """Narrower than KEY, PROGRAM and BACKEND need: the table is wider than the terminal
    (as coreutils' ls is) rather than dropping PROGRAM or cutting keys to ``8…``."""
    root = str(store.root)
    code, out = run_with(columns, "--cache-dir", root, "ls")
    assert code == 0 and header(out) == ["KEY", "PROGRAM", "BACKEND"], out
    assert "…" not in out
    shown = [m[1] for m in re.finditer(r"^([0-9a-f]{2,}) ", out, re.MULTILINE)]
    assert len(shown) == 4 and all(len(prefix) >= _text.MIN_PREFIX for prefix in shown), out
    assert {"alpha", "run_dace_cpu_opt"} <= set(out.split())  # names and backends whole
    out = run_with(columns, "--cache-dir", root, "prune", "--max-size", "0", "-n")[1]
    assert "…" not in out and all(r["key"][:12] in out for r in rows(store)), out
    assert header(out)[:2] == ["KEY", "PROGRAM"] and "REASON" in out.splitlines()[0]
    out = run_with(columns, "--cache-dir", root, "stats")[1]
    assert "…" not in out and "run_dace_cpu_opt" in out, out


def test_docs_and_help_name_the_ls_columns_in_the_order_ls_prints_them() -> None:
    page = (pathlib.Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    tables = " ".join(page.partition("### Tables")[2].partition("\n#")[0].split())
    help_text = " ".join(run("ls", "--help")[1].split())
    optional = ALL_COLUMNS[3:]
    for text in (tables, help_text):
        listed = text.partition("KEY, PROGRAM and BACKEND")[2]
        assert sorted(optional, key=listed.find) == list(optional), text
