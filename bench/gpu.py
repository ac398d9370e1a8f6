"""GPU variants on this CPU machine (``make bench`` runs it): warm time per GPU variant
against gtfn_cpu, and what loading a stored GPU entry costs where there is no device.

``gtcache warm`` compiles ``gtcache.examples:scale_by`` for ``gtfn_cpu`` and for
``gtfn_gpu`` (arch 90, nvcc only, no GPU) into one store; then fresh processes look the
GPU variant up with ``GTCACHE_CUDA_ARCH=90`` (the arch a node's device would give)
and load it with gt4py's ``load_artifact`` (dlopen of the nanobind module, which links
the CUDA runtime but touches no device). Skipped, with a row saying so, without nvcc.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
PROGRAM = "gtcache.examples:scale_by"
ARCH = "90"


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GTCACHE", "GT4PY", "CUDAARCHS"))}
    return {**base, "PYTHONPATH": str(ROOT), **extra}


def _manifest(work: pathlib.Path, backend: str) -> pathlib.Path:
    path = work / f"{backend}.toml"
    archs = f'archs = ["{ARCH}"]\n' if backend.endswith("gpu") else ""
    path.write_text(f'[[variant]]\nprogram = "{PROGRAM}"\nbackends = ["{backend}"]\n{archs}')
    return path


def _warm(store: pathlib.Path, manifest: pathlib.Path, *args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest", str(manifest),
         *args, "--json"],
        capture_output=True, text=True, env=_env(), check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"gtcache warm {manifest.name} failed:\n{proc.stdout}\n{proc.stderr}")
    [variant] = json.loads(proc.stdout)["variants"]
    assert variant["status"] == "compiled", variant
    return variant  # type: ignore[no-any-return]


_LOAD = """
import json, sys, time
import gtcache
from gtcache import examples
from gtcache.gt4py import codecs
entry = gtcache.open_store(sys.argv[1]).get(sys.argv[2])
artifact = codecs.decode(entry.record.artifact, entry.path, files={f.path for f in entry.record.files}, key=entry.key)
backend = examples.backend_by_name("gtfn_gpu")
start = time.perf_counter()
backend.load_artifact(artifact)
print("RESULT " + json.dumps({"load_ms": (time.perf_counter() - start) * 1e3}))
"""


def _load(store: pathlib.Path, key: str) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, str(store), key], capture_output=True, text=True, env=_env(), check=False,
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"loading the GPU entry failed:\n{proc.stdout}\n{proc.stderr}")
    return float(json.loads(line.removeprefix("RESULT "))["load_ms"])


def _planned(store: pathlib.Path) -> str:
    """What a fresh process on a node whose device is arch 90 would do: "cached" is a hit."""
    proc = subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest",
         str(store.parent / "gtfn_gpu-node.toml"), "--dry-run", "--json"],
        capture_output=True, text=True, env=_env(GTCACHE_CUDA_ARCH=ARCH), check=False,
    )
    [variant] = json.loads(proc.stdout)  # --dry-run --json: the planned variants
    return str(variant["status"])


def main() -> list[str]:
    if shutil.which("nvcc") is None:
        return ["nvcc is not on PATH here: no GPU rows."]
    work = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-gpu-bench-"))
    try:
        store = work / "store"
        cpu = _warm(store, _manifest(work, "gtfn_cpu"))
        gpu = _warm(store, _manifest(work, "gtfn_gpu"))
        # the node's manifest names no arch: the arch comes from GTCACHE_CUDA_ARCH
        (work / "gtfn_gpu-node.toml").write_text(f'[[variant]]\nprogram = "{PROGRAM}"\nbackends = ["gtfn_gpu"]\n')
        planned = _planned(store)
        load_ms = statistics.median(_load(store, str(gpu["key"])) for _ in range(REPEATS))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpu_s, gpu_s = float(cpu["seconds"]), float(gpu["seconds"])  # type: ignore[arg-type]
    return [
        "| measure | value |",
        "|---|---:|",
        f"| warm one gtfn_cpu variant (c++) | {cpu_s:.1f} s |",
        f"| warm one gtfn_gpu variant, arch {ARCH} (nvcc, no GPU) | {gpu_s:.1f} s |",
        f"| GPU / CPU warm time | {gpu_s / cpu_s:.1f}x |",
        f"| planned status of the GPU variant with `GTCACHE_CUDA_ARCH={ARCH}` in a fresh process | {planned} |",
        f"| `load_artifact` of the stored GPU entry, fresh process, no device (median of {REPEATS}) | {load_ms:.1f} ms |",
    ]


if __name__ == "__main__":
    print("\n".join(main()))
