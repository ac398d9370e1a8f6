"""GPU variants warmed without a GPU (nvcc only), keyed by device type, arch and toolkit.

One session fixture compiles ``gtcache.examples:scale_by`` with ``gtfn_gpu`` for arch 80
and 90 through ``gtcache warm`` (real nvcc builds, ~30 s each); the other tests only
compute keys in fresh processes. Loading a GPU entry needs a device: the ``gpu`` test.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from gtcache import toolchain
from gtcache.warm import SpecError, VariantSpec, for_archs, from_manifest

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs the CUDA toolkit (nvcc on PATH) to build GPU variants")

PROGRAM = "gtcache.examples:scale_by"
MANIFEST = f"""
[[variant]]
program = "{PROGRAM}"
backends = ["gtfn_gpu", "gtfn_cpu"]
archs = ["80", "90"]
"""


def gtcache_cli(store: pathlib.Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gtcache_cli", "--cache-dir", str(store), *args],
        capture_output=True, text=True, env={**os.environ, **env}, check=False, timeout=900,
    )


@pytest.fixture(scope="session")
def gpu_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str]]:
    """A store warmed with scale_by for gtfn_gpu (arch 80 and 90): (path, {arch: key})."""
    if NVCC is None:
        pytest.skip("needs the CUDA toolkit (nvcc on PATH) to build GPU variants")
    folder = tmp_path_factory.mktemp("gpu")
    manifest = folder / "gpu.toml"
    manifest.write_text(f'[[variant]]\nprogram = "{PROGRAM}"\nbackends = ["gtfn_gpu"]\narchs = ["80", "90"]\n')
    store = folder / "store"
    warmed = gtcache_cli(store, "warm", "--manifest", str(manifest), "--jobs", "2", "--json")
    assert warmed.returncode == 0, warmed.stdout + warmed.stderr
    report = json.loads(warmed.stdout)
    assert [(v["arch"], v["status"]) for v in report["variants"]] == [("80", "compiled"), ("90", "compiled")], report
    return store, {v["arch"]: v["key"] for v in report["variants"]}


def explain(store: pathlib.Path, *args: str, **env: str) -> tuple[dict[str, object], str]:
    """``gtcache explain`` of the GPU variant in a fresh process: (its JSON, its text)."""
    as_json = gtcache_cli(store, "explain", PROGRAM, "--backend", "gtfn_gpu", *args, "--json", **env)
    as_text = gtcache_cli(store, "explain", PROGRAM, "--backend", "gtfn_gpu", *args, **env)
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    [found] = json.loads(as_json.stdout)
    return found, as_text.stdout


def entry_record(store: pathlib.Path, key: str) -> dict[str, object]:
    record: dict[str, object] = json.loads((store / "entries" / key[:2] / key / "entry.json").read_text())
    return record


# -- without compiling -------------------------------------------------------------------------


def test_manifest_archs_expand_gpu_backends_only(tmp_path: pathlib.Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST)
    assert [(s.backend, s.device, s.arch) for s in from_manifest(manifest)] == [
        ("gtfn_gpu", "cuda", "80"), ("gtfn_gpu", "cuda", "90"), ("gtfn_cpu", None, None),
    ]
    manifest.write_text(MANIFEST.replace('"80"', '"sm_80"'))
    with pytest.raises(SpecError, match="'sm_80' is not a cuda arch"):
        from_manifest(manifest)
    cpu_only = [VariantSpec(PROGRAM, "gtfn_cpu")]
    with pytest.raises(SpecError, match="no variant has a GPU backend"):
        for_archs(cpu_only, "cuda", ["90"])
    assert for_archs([VariantSpec(PROGRAM, "dace_gpu")], "rocm", ["gfx90a"])[0].arch == "gfx90a"


def test_arch_comes_from_warm_then_device_then_declaration_then_cudaarchs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GTCACHE_CUDA_ARCH", raising=False)
    monkeypatch.setenv("CUDAARCHS", "80")
    assert toolchain.device_arch_source("CPU") == (None, "cpu")
    if toolchain._device_arch_from_cupy("cuda") is None:  # no device here: the declarations decide
        assert toolchain.device_arch_source("CUDA") == ("80", "CUDAARCHS")
        monkeypatch.setenv("GTCACHE_CUDA_ARCH", "90")
        assert toolchain.device_arch_source("CUDA") == ("90", "GTCACHE_CUDA_ARCH")
        assert toolchain.device_arch_source("ROCM")[0] == "unknown"
    with toolchain.target_arch("86"):
        assert toolchain.device_arch("CUDA") == "86"


def test_cpu_variants_keep_their_facts_and_gpu_ones_key_the_toolkit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAARCHS", "90")
    facts = {"cxx": "c++", "build_env": {"CXXFLAGS": "-O2", "CUDAARCHS": "90"}}
    assert toolchain.gpu_facts(facts, "CPU", None) is facts  # CPU keys do not change
    gpu = toolchain.gpu_facts(facts, "CUDA", "90")
    assert gpu["build_env"] == {"CXXFLAGS": "-O2"}  # CUDAARCHS is what device.arch says
    assert "nvcc" in gpu
    assert toolchain.gpu_facts(facts, "CUDA", "80")["build_env"]["CUDAARCHS"] == "90"  # built for 90, keyed 80


def test_warm_refuses_without_nvcc(tmp_path: pathlib.Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST)
    empty = tmp_path / "bin"
    empty.mkdir()
    done = gtcache_cli(tmp_path / "store", "warm", "--manifest", str(manifest), "--dry-run",
                       PATH=str(empty), CUDACXX="")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "Error: --arch 80, 90: nvcc is not found (not on PATH, $CUDACXX unset): install the CUDA toolkit"
        " or point $CUDACXX at nvcc."
    ]


@needs_nvcc
def test_warm_refuses_an_arch_nvcc_cannot_build(tmp_path: pathlib.Path) -> None:
    too_old = next(a for a in ("30", "35", "50", "70") if a not in (toolchain.supported_archs("cuda") or ()))
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[variant]]\nprogram = "{PROGRAM}"\nbackends = ["gtfn_gpu"]\n')
    done = gtcache_cli(tmp_path / "store", "warm", "--manifest", str(manifest), "--arch", "90",
                       "--arch", too_old, "--dry-run")
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert re.fullmatch(rf"Error: --arch {too_old}: nvcc \S+ cannot build for it \(it builds for .*90.*\)\.", line)


# -- one real warm for two archs -----------------------------------------------------------------


@pytest.mark.slow
def test_two_archs_give_two_entries_with_their_ingredients(gpu_store: tuple[pathlib.Path, dict[str, str]]) -> None:
    store, keys = gpu_store
    assert len(set(keys.values())) == 2
    nvcc = toolchain.gpu_toolkit_facts("CUDA")["nvcc"]
    for arch, key in keys.items():
        record = entry_record(store, key)
        ingredients = record["ingredients"]
        assert isinstance(ingredients, dict) and isinstance(record["toolchain"], dict)
        assert ingredients["device"] == {"type": "CUDA", "arch": arch}
        assert ingredients["toolchain.nvcc"] == nvcc
        assert "CUDAARCHS" not in ingredients["toolchain.build_env"]
        assert record["device"] == {"type": "CUDA", "arch": arch}
        assert record["toolchain"]["toolkit_version"] == toolchain.toolkit_version("cuda")
        assert str(record["toolchain"]["gpu_runtime"]).startswith(("libcudart.so.", "static"))
        # built for its own arch (one gt4py build cache per arch), not the other's
        [payload] = (store / "entries" / key[:2] / key).glob("*.so")
        code = set(re.findall(rb"sm_\d+", payload.read_bytes()))
        assert code == {f"sm_{arch}".encode()}, code


@pytest.mark.slow
def test_declared_arch_finds_the_entry_without_compiling(gpu_store: tuple[pathlib.Path, dict[str, str]],
                                                         tmp_path: pathlib.Path) -> None:
    store, keys = gpu_store
    found, text = explain(store, GTCACHE_CUDA_ARCH="90")
    assert found["stored"] is True and found["key"] == keys["90"]
    assert "stored, would load" in text
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[variant]]\nprogram = "{PROGRAM}"\nbackends = ["gtfn_gpu"]\n')
    plan = gtcache_cli(store, "warm", "--manifest", str(manifest), "--dry-run", "--json", GTCACHE_CUDA_ARCH="80")
    assert plan.returncode == 0, plan.stderr
    assert [(p["key"], p["status"]) for p in json.loads(plan.stdout)] == [(keys["80"], "cached")]
    again = gtcache_cli(store, "warm", "--manifest", str(manifest), "--arch", "80", "--arch", "90", "--json")
    assert [v["status"] for v in json.loads(again.stdout)["variants"]] == ["cached", "cached"], again.stderr


@pytest.mark.slow
def test_another_arch_misses_and_says_why(gpu_store: tuple[pathlib.Path, dict[str, str]]) -> None:
    store, _ = gpu_store
    found, text = explain(store, "--arch", "86")
    assert found["stored"] is False
    nearest = found["nearest"]
    assert isinstance(nearest, list) and len(nearest) == 2
    for near in nearest:
        assert [d["ingredient"] for d in near["differences"]] == ["device"]
    assert "device arch: '80' -> '86' (the entry is for another CUDA arch)" in text, text


@pytest.mark.slow
def test_another_toolkit_misses(gpu_store: tuple[pathlib.Path, dict[str, str]], tmp_path: pathlib.Path) -> None:
    """Another nvcc on PATH (here: the same one behind another driver file) is another toolkit."""
    store, _ = gpu_store
    assert NVCC is not None
    other = tmp_path / "cuda-other" / "bin"
    other.mkdir(parents=True)
    (other / "nvcc").write_text(f'#!/bin/sh\n# another toolkit\nexec {NVCC} "$@"\n')
    (other / "nvcc").chmod(0o755)
    found, text = explain(store, GTCACHE_CUDA_ARCH="90", PATH=f"{other}{os.pathsep}{os.environ['PATH']}")
    assert found["stored"] is False
    nearest = found["nearest"]
    assert isinstance(nearest, list)
    [difference] = nearest[0]["differences"]
    assert difference["ingredient"] == "toolchain.nvcc"
    assert difference["current"].startswith(os.path.realpath(other / "nvcc") + "@"), difference
    assert "toolchain.nvcc:" in text


@pytest.mark.gpu
@pytest.mark.slow
def test_a_warmed_entry_loads_on_the_device(gpu_store: tuple[pathlib.Path, dict[str, str]]) -> None:
    """On a GPU node: the entry of the device's arch loads without compiling, and computes."""
    store, keys = gpu_store
    arch = toolchain._device_arch_from_cupy("cuda")
    if arch not in keys:
        pytest.skip(f"the device is of arch {arch}; the store holds 80 and 90")
    code = f"""
import json, cupy as cp, gtcache
from gt4py import next as gtx
from gtcache import examples
from gtcache.gt4py import compile_variants
store = gtcache.open_store({str(store)!r})
backend = examples.backend_by_name("gtfn_gpu")
program, outcomes = compile_variants(store, examples.scale_by, backend=backend, offset_provider={{}})
a = gtx.as_field([examples.IDim], cp.arange(8.0), allocator=backend)
out = gtx.zeros({{examples.IDim: 8}}, allocator=backend)
program(a, 2.0, out, offset_provider={{}})
print(json.dumps([o.status for o in outcomes]), float(out.asnumpy().sum()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['["hit"]', str(2.0 * sum(range(8)))]
