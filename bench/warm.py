"""Warm throughput: the same variants with 1 job and with J jobs (``make bench`` runs it)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

VARIANTS = int(os.environ.get("BENCH_WARM_VARIANTS", "8"))


def warm(store: pathlib.Path, manifest: pathlib.Path, jobs: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GTCACHE", "GT4PY"))}
    proc = subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), "warm", "--manifest", str(manifest),
         "--jobs", str(jobs), "--json"],
        capture_output=True, text=True, env={**env, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])},
        check=True,
    )
    report = json.loads(proc.stdout)
    assert report["counts"]["compiled"] == VARIANTS, report
    return report


def main() -> list[str]:
    jobs = len(os.sched_getaffinity(0))
    work = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-warm-bench-"))
    try:
        factors = ", ".join(f"{i}.0" for i in range(1, VARIANTS + 1))
        manifest = work / "m.toml"
        manifest.write_text(f'[[variant]]\nprogram = "gtcache.examples:scale_by"\nbackends = ["gtfn_cpu"]\n'
                            f"static_args = {{ factor = [{factors}] }}\n")
        serial = warm(work / "serial", manifest, 1)
        parallel = warm(work / "parallel", manifest, jobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    speedup = serial["seconds"] / parallel["seconds"]
    return [
        "| warm | jobs | seconds | variants / s | speed-up | peak memory of a job |",
        "|---|---:|---:|---:|---:|---:|",
        f"| {VARIANTS} gtfn variants | 1 | {serial['seconds']:.1f} | {VARIANTS / serial['seconds']:.2f} | 1.0x | {serial['peak_memory'] / 2**20:.0f} MiB |",
        f"| {VARIANTS} gtfn variants | {jobs} | {parallel['seconds']:.1f} | {VARIANTS / parallel['seconds']:.2f} | {speedup:.2f}x (target >= {0.8 * jobs:.1f}x) | {parallel['peak_memory'] / 2**20:.0f} MiB |",
    ]


if __name__ == "__main__":
    for line in main():
        print(line)
