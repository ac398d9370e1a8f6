"""Facts about what builds and runs a payload, none of which gt4py's own keys hold.

Does not import gt4py (``gtcache prune --stale`` uses it to compare entries with
the current environment).

These are key ingredients, so they are computed on the lookup path: once per
process and backend family, without starting a process (the compiler is
identified by the path, size and modification time of its driver, not by running it;
``compiler_version`` runs it, for the record, only when publishing).
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

from gtcache.keys import digest

__all__ = [
    "backend_family",
    "compiler_version",
    "cpu_features",
    "current_facts",
    "device_arch",
    "toolchain_facts",
]

#: Environment variables that change how gt4py's and dace's builds compile.
_BUILD_ENV = ("CXX", "CC", "CXXFLAGS", "CFLAGS", "LDFLAGS", "CUDAARCHS", "NVCC_APPEND_FLAGS")


def backend_family(backend_name: str) -> str:
    """``gtfn``, ``dace``, ``roundtrip`` or ``other`` (which gets every fact)."""
    for family in ("gtfn", "dace", "roundtrip"):
        if family in backend_name:
            return family
    return "other"


@functools.cache
def toolchain_facts(family: str) -> dict[str, Any]:
    """Versions and identities that decide whether a payload built here runs there."""
    facts: dict[str, Any] = {
        "gt4py": _version("gt4py"),
        "gt4py_build_cache_version": os.environ.get("GT4PY_BUILD_CACHE_VERSION_ID"),
        "python_abi": sysconfig.get_config_var("EXT_SUFFIX") or sys.implementation.cache_tag,
        "machine": platform.machine(),
        "system": sys.platform,
    }
    if family == "roundtrip":  # generated Python source: no compiler, no native libraries
        return facts
    if family in ("gtfn", "other"):
        facts["nanobind"] = _version("nanobind")
        facts["gridtools_cpp"] = _version("gridtools_cpp")
    if family in ("dace", "other"):
        facts["dace"] = _version("dace")
    facts["cxx"] = _compiler_identity()
    facts["build_env"] = {name: os.environ[name] for name in _BUILD_ENV if name in os.environ}
    return facts


def current_facts() -> dict[str, Any]:
    """Every fact of this environment (what ``--stale`` compares entries with)."""
    return toolchain_facts("other")


def _version(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    return _installed_versions().get(module_name.lower().replace("-", "_"))


@functools.cache
def _installed_versions() -> dict[str, str]:
    """Distribution versions from the ``<name>-<version>.dist-info`` folder names on sys.path.

    One directory listing per path entry instead of ``importlib.metadata``, which
    parses each distribution's METADATA (about 0.5 ms a package, on the hit path).
    """
    versions: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, _, version = name[: -len(".dist-info")].rpartition("-")
                versions.setdefault(dist.lower().replace("-", "_").replace(".", "_"), version)
    return versions


def _compiler_path() -> str | None:
    compiler = (os.environ.get("CXX") or "c++").split()[0]
    path = shutil.which(compiler)
    return os.path.realpath(path) if path else None


@functools.cache
def _compiler_identity() -> str | None:
    """``<real path>@<size>:<mtime>`` of the compiler driver: changes with any upgrade.

    Package managers keep the files' modification times, so identical installations
    agree; a stat costs microseconds where running or hashing the compiler costs ms.
    """
    path = _compiler_path()
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return path
    return f"{path}@{stat.st_size}:{int(stat.st_mtime)}"


@functools.cache
def compiler_version() -> str | None:
    """The compiler's own ``--version`` line, for the record (runs the compiler once)."""
    path = _compiler_path()
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


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
    return _device_arch_from_cupy()


@functools.cache
def _device_arch_from_cupy() -> str:
    try:
        import cupy  # only present on GPU installations

        return str(cupy.cuda.Device(0).compute_capability)
    except Exception:  # no cupy, no device, no driver: the arch stays unknown
        return "unknown"
