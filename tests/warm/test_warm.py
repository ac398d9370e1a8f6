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
    assert again["counts"] == {"compiled": 0, "cached": 3, "bypassed": 0, "failed": 0, "timeout": 0, "unplannable": 0}

    for example, backend in (("axpy", "gtfn_cpu"), ("axpy", "roundtrip"), ("edge_diff", "roundtrip")):
        outcomes = load_in_fresh_process(store, example, backend, seed=1, size=SIZE, out_file=tmp_path / "o.npy")
        assert [o["status"] for o in outcomes] == ["hit"], (example, backend)


MODULE_RUN = """
import json, sys
import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variants
store = gtcache.open_store(sys.argv[1])
grid = examples.ring_offset_provider()
statuses = []
for program in (examples.axpy, examples.edge_diff, examples.scale_by):
    _, outcomes = compile_variants(store, program, backend=examples.backend_by_name("roundtrip"), offset_provider=grid)
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
    # No store made either (it was, before the manifest was read): a mistyped --cache-dir shows
    # at once, as docs/cli.md says, and a failing command leaves the file system as it was.
    assert not store.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("gtcache.no_such_module",), "Cannot import 'gtcache.no_such_module'"),
        (("--manifest", "{empty}"), "no [[variant]] tables"),
        (("json",), "Nothing to warm"),
    ],
)
def test_warm_of_nothing_that_checks_out_is_a_usage_error_and_makes_no_store(
    tmp_path: pathlib.Path, args: tuple[str, ...], message: str,
) -> None:
    store = tmp_path / "store"
    empty = write(tmp_path / "empty.toml", "")
    result = gtcache_cli(store, "warm", *(a.format(empty=empty) for a in args))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert not store.exists()


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


#: A model run: plain gt4py through the hook (GTCACHE_DIR), programs of gtcache.examples on
#: the roundtrip backend, one of them with a static argument. Prints the hook's outcomes.
MODEL_RUN = """
import json
import numpy as np
import gt4py.next as gtx
from gtcache import examples
from gtcache.gt4py import active_hook

def main():
    backend = examples.backend_by_name("roundtrip")
    for name in ("axpy", "edge_diff"):
        example = examples.EXAMPLES[name]
        args, out = example.make_args(32, 0)
        example.program.with_backend(backend)(*args, offset_provider=example.offset_provider(32))
        np.testing.assert_allclose(out.asnumpy(), example.reference(args))
    IDim = examples.IDim
    a, out = gtx.as_field([IDim], np.arange(4.0)), gtx.as_field([IDim], np.zeros(4))
    scale = examples.scale_by.with_backend(backend).compile(factor=[3.0], offset_provider={})
    scale(a, 3.0, out, offset_provider={})
    assert out.asnumpy().tolist() == [0.0, 3.0, 6.0, 9.0]
    print("OUTCOMES " + json.dumps([(o.program, o.status) for o in active_hook().outcomes]))

if __name__ == "__main__":
    main()
"""


def model_run(script: pathlib.Path, store: pathlib.Path) -> list[list[str]]:
    out = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", env={"GTCACHE_DIR": str(store)})
    outcomes: list[list[str]] = json.loads(next(l for l in out.splitlines() if l.startswith("OUTCOMES ")).removeprefix("OUTCOMES "))
    return outcomes


def test_from_ledger_rewarms_what_runs_used(tmp_path: pathlib.Path) -> None:
    """A real run fills the ledger; the store is cleared (the ledger stays); warm --from-ledger
    compiles what the run used; the same run in a fresh process then compiles nothing."""
    store = tmp_path / "store"
    script = write(tmp_path / "model.py", MODEL_RUN)
    assert model_run(script, store) == [["axpy", "compiled"], ["edge_diff", "compiled"], ["scale_by", "compiled"]]
    cleared = gtcache_cli(store, "clear", "--yes")
    assert cleared.returncode == 0 and "Removed 3 entries" in cleared.stdout, cleared.stdout + cleared.stderr
    assert gtcache.open_store(store).scan().entries == ()
    assert len(gtcache.open_store(store).ledger_runs()) == 1, "clear keeps the ledger"

    args = ("warm", "--from-ledger", "--grid", "gtcache.examples:ring_offset_provider", "--json")
    run = gtcache_cli(store, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["counts"]["compiled"] == 3 and report["counts"]["failed"] == 0, report["counts"]
    grids = {v["program"]: v["grid"] for v in report["variants"]}
    assert grids == {"gtcache.examples:axpy": None, "gtcache.examples:scale_by": None,
                     "gtcache.examples:edge_diff": "gtcache.examples:ring_offset_provider"}, "--grid only where a run used one"
    assert model_run(script, store) == [["axpy", "hit"], ["edge_diff", "hit"], ["scale_by", "hit"]]


def test_warm_then_a_plain_script_compiles_nothing(tmp_path: pathlib.Path) -> None:
    """The model run above (plain gt4py under GTCACHE_DIR, no gtcache call) after a manifest
    warm of the variants it uses: every one is loaded, none compiled."""
    store = tmp_path / "store"
    manifest = write(tmp_path / "model.toml", """
        [defaults]
        backends = ["roundtrip"]

        [[variant]]
        program = "gtcache.examples:axpy"

        [[variant]]
        program = "gtcache.examples:edge_diff"
        grid = "gtcache.examples:ring_offset_provider"

        [[variant]]
        program = "gtcache.examples:scale_by"
        static_args = { factor = [3.0] }
    """)
    run = gtcache_cli(store, "warm", "--manifest", str(manifest), "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["counts"]["compiled"] == 3
    script = write(tmp_path / "model.py", MODEL_RUN)
    assert model_run(script, store) == [["axpy", "hit"], ["edge_diff", "hit"], ["scale_by", "hit"]]


def test_dask_cluster_runs_the_jobs(tmp_path: pathlib.Path) -> None:
    distributed = pytest.importorskip("distributed")
    store = tmp_path / "store"
    manifest = write(tmp_path / "m.toml", MANIFEST.replace('backends = ["roundtrip", "gtfn_cpu"]', ""))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = gtcache_cli(store, "warm", "--manifest", str(manifest), "--scheduler", cluster.scheduler_address, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["compiled"] == 2
    assert len(gtcache.open_store(store).scan().entries) == 2


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_warm_stopped_by_a_signal_ends_its_workers_and_starts_no_more(tmp_path: pathlib.Path, signal_name: str) -> None:
    """SIGTERM (a CI job cancelled) or Ctrl-C while a worker compiles: warm exits with one
    Error line, no worker or compiler of it left running, the queued variants never started
    (before, the run's thread pool went on starting every queued variant; and its workers,
    in the terminal's process group, were not told of a SIGTERM sent to warm). *A process
    started in the background ignores SIGINT (``make test`` runs the compatibility subset so),
    and Python then takes no Ctrl-C: the command is started as a terminal would start it."""
    import signal
    import time

    store = tmp_path / "store"
    manifest = tmp_path / "warm.toml"
    manifest.write_text(textwrap.dedent("""
        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["gtfn_cpu"]
        static_args = { alpha = [1.0, 2.0, 3.0] }
    """))
    proc = subprocess.Popen([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest",
                             str(manifest), "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal*
    deadline = time.monotonic() + 300
    while not _processes_naming(store, b"gtcache.warm.worker") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "warm ended before a worker started"
    proc.send_signal(getattr(signal, signal_name))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == {"SIGTERM": 143, "SIGINT": 130}[signal_name], (out, err)
    assert err.strip().splitlines()[-1] == {"SIGTERM": "Error: Terminated (SIGTERM).", "SIGINT": "Error: Interrupted."}[signal_name]
    assert _processes_naming(store) == [], "a worker (or its compiler) outlived the run"
    assert len(list(store.glob("entries/*/*"))) == 0  # the first variant was stopped, the others never ran


def test_a_warm_killed_outright_takes_its_worker_and_compilers_along(tmp_path: pathlib.Path) -> None:
    """SIGKILL of warm (a CI job's hard cancel, the OOM killer) while a compiler runs: no
    handler of warm's runs, yet its worker and the worker's compilers end with it (before,
    they compiled on, orphaned, and published the variant). The compiler is one that takes
    its time (10 minutes) for the store's builds: only a signal ends it."""
    import time

    store = tmp_path / "store"
    slow = _slow_compiler(tmp_path, store)
    manifest = tmp_path / "warm.toml"
    manifest.write_text(textwrap.dedent("""
        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["gtfn_cpu"]
        static_args = { alpha = [4.0] }
    """))
    proc = subprocess.Popen([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest",
                             str(manifest), "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CXX": str(slow)})
    _await_compiler(store, proc)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while _processes_naming(store) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_naming(store) == [], "a worker (or its compiler) outlived warm"
    assert list(store.glob("entries/*/*")) == []  # stopped, not compiled to the end


@pytest.mark.parametrize("end", ["timeout", "worker killed"])
def test_a_worker_that_times_out_or_is_killed_leaves_no_compiler(tmp_path: pathlib.Path, end: str) -> None:
    """A worker's compile that runs past ``--timeout``, or a worker killed outright (the OOM
    killer picks the biggest process, seldom warm): its compilers end too. ninja starts each
    compile in a process group of its own, so the SIGKILL to the worker's group left them
    running, as did a dead worker (before); all of the worker's session is ended now. The
    compiler is one that takes 10 minutes for the store's builds."""
    import signal

    store = tmp_path / "store"
    manifest = write(tmp_path / "warm.toml", """
        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["gtfn_cpu"]
        static_args = { alpha = [8.0] }
    """)
    options = ["--timeout", "60"] if end == "timeout" else []
    proc = subprocess.Popen([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest",
                             str(manifest), "--jobs", "1", "--json", *options], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CXX": str(_slow_compiler(tmp_path, store))})
    _await_compiler(store, proc)
    if end == "worker killed":
        for worker in _processes_naming(store, b"gtcache.warm.worker"):
            os.kill(worker, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (out, err)
    [variant] = json.loads(out)["variants"]
    assert variant["status"] == ("timeout" if end == "timeout" else "failed"), variant
    assert _processes_naming(store) == [], "a compiler outlived its worker"


def test_an_interrupted_warm_on_a_dask_cluster_ends_its_workers_there(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C of a warm run on a dask cluster while a compiler runs there: the run's worker
    and its compilers on the cluster end, the queued variants never start (before, the
    cluster compiled every variant on after warm had exited). The compiler is one that takes
    10 minutes for the store's builds: only a signal ends it."""
    import signal
    import time

    distributed = pytest.importorskip("distributed")
    store = tmp_path / "store"
    monkeypatch.setenv("CXX", str(_slow_compiler(tmp_path, store)))  # the cluster's workers inherit it
    manifest = write(tmp_path / "warm.toml", """
        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["gtfn_cpu"]
        static_args = { alpha = [5.0, 6.0, 7.0] }
    """)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        proc = _warm_on_dask(store, manifest, cluster.scheduler_address)
        _await_compiler(store, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (out, err)
        deadline = time.monotonic() + 60
        with distributed.Client(cluster) as client:
            while (_processes_naming(store) or any(client.processing().values())) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _processes_naming(store) == [], "a worker (or its compiler) outlived the run"
            assert not any(client.processing().values()), "the cluster went on with the run's variants"
    assert list(store.glob("entries/*/*")) == []


def test_an_interrupted_warm_is_not_held_by_an_unresponsive_dask_worker(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C of a warm run on a dask cluster one of whose workers does not answer (stopped
    here; in life a task holding the GIL, a node gone off the network): warm still exits,
    after its bounded wait for the cluster (10 s), and the answering worker's compilers end.
    Before, the stop waited for every dask worker: for good (120 s and more, reproduced)."""
    import signal
    import time

    distributed = pytest.importorskip("distributed")
    store = tmp_path / "store"
    monkeypatch.setenv("CXX", str(_slow_compiler(tmp_path, store)))  # the cluster's workers inherit it
    manifest = write(tmp_path / "warm.toml", """
        [[variant]]
        program = "gtcache.examples:axpy"
        backends = ["gtfn_cpu"]
        static_args = { alpha = [9.0] }
    """)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            dask_workers = set(client.run(os.getpid).values())
        proc = _warm_on_dask(store, manifest, cluster.scheduler_address)
        _await_compiler(store, proc)
        busy = {_parent(pid) for pid in _processes_naming(store, b"gtcache.warm.worker")}
        [idle] = dask_workers - busy
        os.kill(idle, signal.SIGSTOP)
        try:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=90)  # not held for good
            assert proc.returncode == 130, (out, err)
            deadline = time.monotonic() + 60
            while _processes_naming(store) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _processes_naming(store) == [], "a worker (or its compiler) outlived the run"
        finally:
            os.kill(idle, signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
    assert list(store.glob("entries/*/*")) == []


def _parent(pid: int) -> int:
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _warm_on_dask(store: pathlib.Path, manifest: pathlib.Path, scheduler: str) -> subprocess.Popen[str]:
    """``gtcache warm`` of ``manifest`` on the dask scheduler, started as a terminal would (SIGINT
    ends it: Python ignores it in a process started in the background)."""
    import signal

    return subprocess.Popen([sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest",
                             str(manifest), "--scheduler", scheduler],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _await_compiler(store: pathlib.Path, warm: subprocess.Popen[str]) -> None:
    """Wait (at most 5 minutes) until a compiler of ``warm`` builds under ``store``."""
    import time

    deadline = time.monotonic() + 300
    while not _compilers(store, warm.pid) and warm.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert warm.poll() is None and _compilers(store, warm.pid), "warm ended before a compiler started"


def _slow_compiler(folder: pathlib.Path, store: pathlib.Path) -> pathlib.Path:
    """A C++ compiler that sleeps 10 minutes before each build under ``store`` (only a
    signal ends it), and is ``c++`` otherwise."""
    slow = folder / "slow-c++"
    slow.write_text(f'#!/bin/sh\ncase "$*" in *"{store}"*) sleep 600;; esac\nexec c++ "$@"\n')
    slow.chmod(0o755)
    return slow


def _compilers(store: pathlib.Path, warm: int) -> list[int]:
    """The processes that name the store's ``tmp/`` but are neither ``warm`` nor its workers."""
    workers = _processes_naming(store, b"gtcache.warm.worker")
    return [pid for pid in _processes_naming(store / "tmp") if pid != warm and pid not in workers]


def _processes_naming(store: pathlib.Path, marker: bytes = b"") -> list[int]:
    """The processes whose command line names ``store`` (and ``marker``): warm's workers, and
    their compilers (which build under the store's ``tmp/``)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(store).encode() in command and marker in command:
                found.append(int(entry.name))
    return found
