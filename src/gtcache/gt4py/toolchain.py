"""Facts about what builds and runs a payload, none of which gt4py's own keys hold.

Gathered once per process (the compiler is asked for its version once).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

from gtcache.gt4py import _compat
from gtcache.keys import digest

__all__ = ["cpu_features", "device_arch", "toolchain_facts"]

#: Environment variables that change how gt4py's and dace's builds compile.
_BUILD_ENV = ("CXX", "CC", "CXXFLAGS", "CFLAGS", "LDFLAGS", "CUDAARCHS", "NVCC_APPEND_FLAGS")


@functools.cache
def toolchain_facts() -> dict[str, Any]:
    """Versions and identities that decide whether a payload built here runs there."""
    return {
        "gt4py": _compat.GT4PY_VERSION,
        "gt4py_build_cache_version": os.environ.get("GT4PY_BUILD_CACHE_VERSION_ID"),
        "dace": _compat.distribution_version("dace"),
        "nanobind": _compat.distribution_version("nanobind"),
        "gridtools_cpp": _compat.distribution_version("gridtools-cpp"),
        "python_abi": sysconfig.get_config_var("EXT_SUFFIX") or sys.implementation.cache_tag,
        "machine": platform.machine(),
        "system": platform.system(),
        "cxx": _compiler_identity(),
        "build_env": {name: os.environ[name] for name in _BUILD_ENV if name in os.environ},
    }


@functools.cache
def cpu_features() -> str:
    """A digest of the host CPU's model and feature flags (code built with -march=native)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as stream:
            lines = [
                line.split(":", 1)[1].strip()
                for line in stream
                if line.startswith(("flags", "model name", "Features", "CPU part"))
            ]
    except OSError:
        lines = [platform.processor(), platform.machine()]
    return digest("\n".join(sorted(set(lines))))


def device_arch(device_type_name: str) -> str | None:
    """The GPU architecture code is built for (``CUDAARCHS`` or the device's); None on CPU."""
    if device_type_name in ("CPU", "CPU_PINNED"):
        return None
    if arch := os.environ.get("CUDAARCHS"):
        return arch
    try:
        import cupy  # only present on GPU installations

        return str(cupy.cuda.Device(0).compute_capability)
    except Exception:  # no cupy, no device, no driver: the arch stays unknown
        return "unknown"


def _compiler_identity() -> str | None:
    compiler = os.environ.get("CXX") or "c++"
    path = shutil.which(compiler.split()[0]) if compiler else None
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return path
    first = out.splitlines()[0] if out else ""
    return f"{os.path.realpath(path)}: {first}"
