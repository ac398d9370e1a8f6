"""A run says what the cache did when asked (GTCACHE_LOG, GTCACHE_REPORT); one ledger entry per process."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import gtcache
from gtcache.settings import Settings

MODEL = """
import gtcache
from gtcache import examples

if __name__ == "__main__":
    example = examples.EXAMPLES["axpy"]
    program = example.program.with_backend(examples.backend_by_name("roundtrip"))
    args, _ = example.make_args(8, 0)
    program(*args, offset_provider=example.offset_provider(8))
"""

#: Several compile_variants calls (one hook each) and the start-up hook, in one process.
MANY_HOOKS = """
import sys
import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variants

if __name__ == "__main__":
    store = gtcache.open_store(sys.argv[1])
    backend = examples.backend_by_name("roundtrip")
    for factor in (1.0, 2.0, 3.0):
        compile_variants(store, examples.scale_by, backend=backend, static_args={"factor": [factor]})
    compile_variants(store, examples.scale_by, backend=backend, static_args={"factor": [1.0]})
    example = examples.EXAMPLES["axpy"]
    program = example.program.with_backend(backend)
    args, _ = example.make_args(8, 0)
    program(*args, offset_provider=example.offset_provider(8))  # through the start-up hook
"""


def _run(code: str, tmp_path: pathlib.Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}
    script = tmp_path / "model.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, "-O", str(script), *args], capture_output=True, text=True, cwd=tmp_path,
        env={**base, **env}, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


LINE = re.compile(
    r"^gtcache: (?P<status>hit|compiled) 'axpy' \(roundtrip\), key (?P<key>[0-9a-f]{12}), (?P<ms>[0-9.]+) ms"
    r"(?:, (?P<saved>[0-9.]+) s saved \((?P<via>direct|build) key\))?\.$",
    re.MULTILINE,
)


@pytest.mark.slow
def test_gtcache_log_info_says_what_each_variant_did_and_report_sums_it_up(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "store")
    first = _run(MODEL, tmp_path, GTCACHE_DIR=store, GTCACHE_LOG="info", GTCACHE_REPORT="1")
    second = _run(MODEL, tmp_path, GTCACHE_DIR=store, GTCACHE_LOG="info", GTCACHE_REPORT="1")
    compiled, hit = LINE.search(first.stderr), LINE.search(second.stderr)
    assert compiled is not None and compiled["status"] == "compiled", first.stderr
    assert hit is not None and hit["status"] == "hit" and hit["via"] == "direct", second.stderr
    assert hit["key"] == compiled["key"] and float(hit["saved"]) > 0
    assert re.search(
        r"^gtcache: 1 hits, 0 compiled, 0 bypassed, 0 failed; [0-9.]+ s spent, [0-9.]+ s of compiling saved"
        rf" \(store '{re.escape(store)}'\)\.$", second.stderr, re.MULTILINE,
    ), second.stderr
    quiet = _run(MODEL, tmp_path, GTCACHE_DIR=store)
    assert "gtcache" not in quiet.stderr, "nothing is printed unless asked for"
    warning_only = _run(MODEL, tmp_path, GTCACHE_DIR=store, GTCACHE_LOG="warning")
    assert "gtcache" not in warning_only.stderr


@pytest.mark.slow
def test_one_ledger_entry_per_process_however_many_hooks(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    _run(MANY_HOOKS, tmp_path, str(store), GTCACHE_DIR=str(store))
    ledger = gtcache.open_store(store).ledger()
    assert ledger.runs == 1, "five hooks in one process: one run"
    assert (ledger.compiled, ledger.hits) == (4, 1)
    _run(MANY_HOOKS, tmp_path, str(store), GTCACHE_DIR=str(store))
    ledger = gtcache.open_store(store).ledger()
    assert (ledger.runs, ledger.compiled, ledger.hits) == (2, 4, 6)
    runs = gtcache.open_store(store).ledger_runs()
    assert [len(run["variants"]) for run in runs] == [5, 5]


def test_old_ledger_files_still_count(tmp_path: pathlib.Path) -> None:
    """A ledger file written by gtcache 0.2.0 (one per compile_variants call) still adds up."""
    store = gtcache.open_store(tmp_path / "store")
    old = {"format": 1, "ended": "2026-01-01T00:00:00+0000", "host": "h", "pid": 1, "started": "2026-01-01T00:00:00+0000",
           "argv": ["x"], "gt4py": "1.2.1", "counts": {"compiled": 1}, "compile_seconds": 2.5,
           "compile_seconds_saved": 0.0, "variants": []}
    (store.root / "ledger").mkdir(exist_ok=True)
    (store.root / "ledger" / "20260101T000000Z-h-old.json").write_text(json.dumps(old))
    ledger = store.ledger()
    assert (ledger.runs, ledger.compiled, ledger.compile_seconds, ledger.unreadable) == (1, 1, 2.5, 0)


def test_log_and_report_settings() -> None:
    settings = Settings.from_env(env={"GTCACHE_LOG": "INFO", "GTCACHE_REPORT": "yes"})
    assert (settings.log_level, settings.report) == ("info", True)
    assert (Settings.from_env(env={}).log_level, Settings.from_env(env={}).report) == (None, False)
    with pytest.raises(gtcache.GtcacheError, match="GTCACHE_LOG='loud' is not one of debug, info, warning"):
        Settings.from_env(env={"GTCACHE_LOG": "loud"})
