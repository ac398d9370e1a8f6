"""gtcache warm: manifests, modules, the ledger; parallel workers; dask; failures alone."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import gtcache
from tests.conftest import SIZE
from tests.helpers import load_in_fresh_process, run_python

pytestmark = pytest.mark.slow

MANIFEST = """
[defaults]
backends = ["roundtrip"]

[[variant]]
program = "gtcache.examples:axpy"
backends = ["roundtrip", "gtfn_cpu"]

[[variant]]
program = "gtcache.examples:edge_diff"
grid = "gtcache.examples:ring_offset_provider"

[[variant]]   # listed twice: compiled once
program = "gtcache.examples:edge_diff"
grid = "gtcache.examples:ring_offset_provider"
"""

def gtcache_cli(store: pathlib.Path, *args: str, cwd: pathlib.Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), *args],
        capture_output=True, text=True, cwd=cwd, env={**os.environ, **env}, check=False, timeout=900,
    )


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_manifest_then_a_fresh_process_compiles_nothing(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    manifest = write(tmp_path / "variants.toml", MANIFEST)
    dry = gtcache_cli(store, "warm", "--manifest", str(manifest), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert [(p["program"], p["backend"], p["status"]) for p in planned] == [
        ("gtcache.examples:axpy", "roundtrip", "missing"),
        ("gtcache.examples:axpy", "gtfn_cpu", "missing"),
        ("gtcache.examples:edge_diff", "roundtrip", "missing"),
    ]
    assert all(len(p["key"]) == 32 for p in planned)
    assert not list(store.glob("entries/*/*")), "a dry run compiles nothing"

    run = gtcache_cli(store, "warm", "--manifest", str(manifest), "--json", "--jobs", "2")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["counts"]["compiled"] == 3 and report["counts"]["failed"] == 0
    assert {v["key"] for v in report["variants"]} == {p["key"] for p in planned}
    assert report["peak_memory"] > 0

    again = json.loads(gtcache_cli(store, "warm", "--manifest", str(manifest), "--json").stdout)
    assert again["counts"] == {"compiled": 0, "cached": 3, "bypassed": 0, "failed": 0, "timeout": 0}

    for example, backend in (("axpy", "gtfn_cpu"), ("axpy", "roundtrip"), ("edge_diff", "roundtrip")):
        outcomes = load_in_fresh_process(store, example, backend, seed=1, size=SIZE, out_file=tmp_path / "o.npy")
        assert [o["status"] for o in outcomes] == ["hit"], (example, backend)


MODULE_RUN = """
import json, sys
import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variant
store = gtcache.open_store(sys.argv[1])
grid = examples.ring_offset_provider()
statuses = []
for program in (examples.axpy, examples.edge_diff, examples.scale_by):
    _, outcomes = compile_variant(store, program, backend=examples.backend_by_name("roundtrip"), offset_provider=grid)
    statuses += [o.status for o in outcomes]
print(json.dumps(statuses))
"""


def test_modules_then_a_fresh_process_compiles_nothing(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    args = ("warm", "gtcache.examples", "--backend", "roundtrip", "--grid", "gtcache.examples:ring_offset_provider")
    dry = gtcache_cli(store, *args, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert sorted(p["program"] for p in json.loads(dry.stdout)) == [
        "gtcache.examples:axpy", "gtcache.examples:edge_diff", "gtcache.examples:scale_by",
    ]
    assert gtcache_cli(store, *args).returncode == 0
    statuses = json.loads(run_python(MODULE_RUN, str(store)).strip().splitlines()[-1])
    assert statuses == ["hit", "hit", "hit"]


def test_a_broken_variant_fails_alone(tmp_path: pathlib.Path) -> None:
    """edge_diff without its grid: gt4py cannot lower it (E2V unknown); axpy still compiles."""
    store = tmp_path / "store"
    manifest = write(tmp_path / "m.toml", """
        [[variant]]
        program = "gtcache.examples:edge_diff"
        backends = ["roundtrip"]

        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["roundtrip"]
    """)
    result = gtcache_cli(store, "warm", "--manifest", str(manifest))
    assert result.returncode == 1
    assert "failed: gtcache.examples:edge_diff (roundtrip)" in result.stdout
    entries = gtcache.open_store(store).scan().entries
    assert [e.program for e in entries] == ["axpy"]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ('[[variant]]\nprogram = gtcache.examples:axpy\n', "(at line 2, column"),
        ('[[variant]]\nprogram = "gtcache.examples:nothing"\n', "has no program 'nothing'"),
        ('[[variant]]\nprogram = "gtcache.examples:axpy"\nstatic_args = { alpha = ["x"] }\nbackends = ["roundtrip"]\n', "'alpha' is str, the parameter is float64"),
        ('[[variant]]\nprogram = "gtcache.examples:axpy"\nstatic_args = { beta = [1.0] }\nbackends = ["roundtrip"]\n', "no parameter 'beta'"),
        ('[[variant]]\nprogram = "gtcache.examples:axpy"\nbackends = ["turbo"]\n', "Unknown backend 'turbo'"),
        ('[[variant]]\nprogramme = "gtcache.examples:axpy"\n', "(line 1): unknown key(s) programme"),
    ],
)
def test_bad_manifests_are_usage_errors_before_any_compile(tmp_path: pathlib.Path, manifest: str, message: str) -> None:
    store = tmp_path / "store"
    path = write(tmp_path / "bad.toml", manifest)
    result = gtcache_cli(store, "warm", "--manifest", str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()[-1]) > 0
    assert not list(store.glob("entries/*/*"))


def test_timeout_fails_the_variant(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    manifest = write(tmp_path / "m.toml", '[[variant]]\nprogram = "gtcache.examples:axpy"\nbackends = ["gtfn_cpu"]\n')
    result = gtcache_cli(store, "warm", "--manifest", str(manifest), "--timeout", "1", "--json")
    assert result.returncode == 1
    [variant] = json.loads(result.stdout)["variants"]
    assert variant["status"] == "timeout"
    assert not list(store.glob("entries/*/*")) and not list(store.glob("tmp/*"))


def test_two_concurrent_warms_leave_one_entry_per_variant(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    gtcache.open_store(store)
    manifest = write(tmp_path / "m.toml", MANIFEST.replace('backends = ["roundtrip", "gtfn_cpu"]', ""))
    procs = [
        subprocess.Popen([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest", str(manifest)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err
    entries = gtcache.open_store(store).scan().entries
    assert sorted(e.program for e in entries) == ["axpy", "edge_diff"] and all(e.ok for e in entries)


def test_from_ledger_rewarms_what_runs_used(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    load_in_fresh_process(store, "axpy", "roundtrip", seed=0, size=8, out_file=tmp_path / "o.npy")
    gtcache.open_store(store).record_run({"counts": {}, "variants": [
        {"program": "axpy", "backend": "roundtrip", "key": None, "status": "hit",
         "spec": {"program": "gtcache.examples:axpy", "backend": "roundtrip", "static_args": {}}},
    ]})
    planned = json.loads(gtcache_cli(store, "warm", "--from-ledger", "--dry-run", "--json").stdout)
    assert [(p["program"], p["backend"], p["status"]) for p in planned] == [("gtcache.examples:axpy", "roundtrip", "cached")]


def test_dask_cluster_runs_the_jobs(tmp_path: pathlib.Path) -> None:
    distributed = pytest.importorskip("distributed")
    store = tmp_path / "store"
    manifest = write(tmp_path / "m.toml", MANIFEST.replace('backends = ["roundtrip", "gtfn_cpu"]', ""))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = gtcache_cli(store, "warm", "--manifest", str(manifest), "--scheduler", cluster.scheduler_address, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["compiled"] == 2
    assert len(gtcache.open_store(store).scan().entries) == 2
