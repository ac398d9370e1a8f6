"""Facts about what builds and runs a payload, none of which gt4py's own keys hold.

Does not import gt4py (``gtcache prune --stale`` uses it to compare entries with
the current environment).

These are key ingredients, so they are computed on the lookup path: once per
process and backend family, without starting a process (the compiler is
identified by the path, size and modification time of its driver, not by running it;
``compiler_version`` runs it, for the record, only when publishing).

GPU variants (device type ``CUDA...`` or ``ROCM...``) add the GPU toolkit's driver
(``nvcc`` / ``hipcc``, identified the same way; ``toolkit_version`` runs it only when
publishing) and the architecture the code is built for (``device_arch``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from stat import S_ISDIR
from typing import Any, NamedTuple

import xxhash

from gtcache.keys import digest
from gtcache.settings import ENV_CUDA_ARCH, ENV_HIP_ARCH, declared_gpu_arch

__all__ = [
    "backend_family",
    "compiler_version",
    "cpu_features",
    "cpu_features_digest",
    "cpuinfo_lines",
    "current_facts",
    "device_arch",
    "device_arch_source",
    "folder_identity",
    "folder_versions",
    "gpu_facts",
    "gpu_kind",
    "gpu_toolkit_facts",
    "gt4py_sources",
    "in_standard_library",
    "ListedFolder",
    "listed_folders",
    "seed_folder_versions",
    "SourceTree",
    "stat_shows_changes",
    "stat_suffices",
    "supported_archs",
    "target_arch",
    "toolchain_facts",
    "toolkit_driver",
    "toolkit_version",
]

#: Environment variables that change how gt4py's and dace's builds compile: the compilers and
#: the flags CMake starts from, the GPU toolkit's, a CMake toolchain file (its text too:
#: ``cmake_toolchain_file``), and the compilers' own search paths (gcc and clang rank ``CPATH``
#: like ``-I``, ahead of the ``gridtools_cpp`` headers gt4py passes as ``-isystem``).
_BUILD_ENV = (
    "CXX", "CC", "CXXFLAGS", "CFLAGS", "LDFLAGS", "CUDAARCHS", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS",
    "NVCC_CCBIN", "CUDAFLAGS", "HIPFLAGS", "CUDAHOSTCXX", "CMAKE_TOOLCHAIN_FILE",
    "CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX",
)


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
    if (sources := gt4py_sources()) is not None:
        facts["gt4py_sources"] = sources.digest
    if family == "roundtrip":  # generated Python source: no compiler, no native libraries
        return facts
    if family in ("gtfn", "other"):
        facts["nanobind"] = _version("nanobind")
        facts["gridtools_cpp"] = _version("gridtools_cpp")
    if family in ("dace", "other"):
        facts["dace"] = _version("dace")
    facts["cxx"] = _compiler_identity()
    facts["build_env"] = {name: os.environ[name] for name in _BUILD_ENV if name in os.environ}
    if toolchain_file := os.environ.get("CMAKE_TOOLCHAIN_FILE"):
        text = _file_bytes(toolchain_file)
        facts["cmake_toolchain_file"] = None if text is None else xxhash.xxh3_128_hexdigest(text)
        if text is not None and names_native_code(text.decode(errors="replace")):
            facts["cmake_toolchain_native"] = True  # (then the key names the CPU: ``ingredients``)
    return facts


def _file_bytes(path: str) -> bytes | None:
    """A file's bytes (None: it cannot be read)."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def names_native_code(flags: str) -> bool:
    """Whether build flags (any text holding them) ask for code for the CPU the compiler runs
    on: gcc's and clang's ``-march=native`` (``-mcpu=native`` on aarch64 and POWER), Intel's
    ``-xHost``. Such code may die with SIGILL on another CPU model."""
    return _NATIVE_FLAGS.search(flags) is not None


_NATIVE_FLAGS = re.compile(r"-m(?:arch|cpu)=native\b|-x[Hh]ost\b")


class SourceTree(NamedTuple):
    """What ``gt4py_sources`` found of a gt4py imported from a source tree."""

    #: A digest of its files' names, sizes and modification times.
    digest: str
    #: The newest change time of its files (ns; any write sets it to the time of the write,
    #: whatever the modification time says) and that file: one changed after the process
    #: imported gt4py may hold other code than the process runs.
    changed_ns: int
    changed_file: str


@functools.cache
def gt4py_sources() -> SourceTree | None:
    """For a gt4py imported from a source tree (an editable install, a checkout on the path),
    a digest of its files' names, sizes and modification times: its version names a commit at
    best, and a GT4Py developer's uncommitted edit of the frontend or a code generator must
    miss. None for an installed gt4py (its version names its files). Walks the tree (about
    360 files, some ms) once per process, for such a gt4py only."""
    module = sys.modules.get("gt4py")  # imported on the lookup path; not by the CLI
    origin = getattr(module, "__file__", None) if module is not None else getattr(
        importlib.util.find_spec("gt4py"), "origin", None
    )
    root = os.path.dirname(origin or "")
    if not root or os.path.basename(os.path.dirname(root)) in ("site-packages", "dist-packages"):
        return None
    files, changed, changed_file = [], 0, ""
    for folder, folders, names in os.walk(root):
        folders[:] = sorted(name for name in folders if name != "__pycache__")
        for name in sorted(names):
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                stat = os.stat(path)
                files.append(f"{os.path.relpath(path, root)}:{stat.st_size}:{stat.st_mtime_ns}")
                if stat.st_ctime_ns > changed:
                    changed, changed_file = stat.st_ctime_ns, path
                if not stat_shows_changes(stat):  # a source tree on an image: its bytes
                    with open(path, "rb") as file:
                        files[-1] += f":{xxhash.xxh3_64_hexdigest(file.read())}"
    return SourceTree(digest("\n".join(files)), changed, changed_file)


def current_facts() -> dict[str, Any]:
    """Every fact of this environment (what ``--stale`` compares entries with)."""
    return toolchain_facts("other")


def _version(module_name: str) -> str | None:
    name = module_name.lower().replace("-", "_")
    if name not in _KEYED_DISTRIBUTIONS:  # the listing keeps only those
        raise ValueError(f"'{module_name}' is not one of toolchain._KEYED_DISTRIBUTIONS")
    module = sys.modules.get(module_name)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    return _installed_versions().get(name)


#: Per ``sys.path`` entry, the keyed distributions' versions found in it, handed in by
#: ``seed_folder_versions`` (the hook's facts file); and the entries this process listed,
#: each with ``folder_identity`` as it was just before the listing.
_SEEDED_FOLDERS: dict[str, dict[str, str]] = {}
_LISTED_FOLDERS: dict[str, ListedFolder] = {}


class ListedFolder(NamedTuple):
    """A ``sys.path`` folder this process listed: ``folder_identity`` taken just before, and the
    keyed distributions' versions found (``folder_versions``)."""

    name: str | None
    identity: list[int] | None
    at: float
    versions: dict[str, str]


def folder_identity(entry: str) -> tuple[str | None, list[int] | None, float]:
    """A ``sys.path`` entry's absolute name (None: a relative one in a working folder that was
    removed), the identity (device, inode, size, modification and change time; for a folder
    whose times would not show a change, ``stat_shows_changes``, a digest of the names in it
    too) of what it names (None: nothing, or it cannot be stat'ed or listed) and when it was
    taken (epoch seconds, before the ``stat``)."""
    at = time.time()
    try:
        name: str | None = os.path.abspath(entry or ".")
    except OSError:  # os.getcwd() fails in a removed folder
        name = None
    try:
        st = os.stat(entry or ".")
    except OSError:
        return name, None, at
    identity = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if not stat_suffices(name or "", st):  # an image's folder: what it holds (its versions come from that)
        try:
            names = "\0".join(sorted(os.listdir(entry or ".")))
        except OSError:
            return name, None, at
        identity.append(xxhash.xxh3_64_intdigest(names.encode(errors="surrogateescape")))
    return name, identity, at


def stat_suffices(path: str, st: os.stat_result) -> bool:
    """Whether the stat identity of ``path`` (absolute; ``st`` its ``stat``) tells its versions
    apart: ``stat_shows_changes``, or ``in_standard_library``. Otherwise the facts add what it
    holds (a file's bytes, a folder's names)."""
    return bool(st.st_mtime_ns != st.st_ctime_ns or st.st_mtime_ns % 1_000_000_000
                or in_standard_library(path) or stat_shows_changes(st))


def in_standard_library(path: str) -> bool:
    """Whether ``path`` (absolute) is the interpreter's standard library or in it (not in its
    ``site-packages``): no distribution is installed there (pip, conda and Debian install into
    ``site-packages`` / ``dist-packages``), and the interpreter's version (``sys.version``, in
    every facts file's name) names its files. Their stat identities are used as they are, even
    where ``stat_shows_changes`` says no (a Python from an image would otherwise list its
    library and read ``typing.py`` in every process)."""
    if not path.startswith(_LIBRARY):
        return False
    rest = path[len(_LIBRARY):]
    return not rest or (rest[0] == os.sep and rest[1:].split(os.sep, 1)[0] not in ("site-packages", "dist-packages"))


_LIBRARY = os.path.dirname(os.__file__)


def stat_shows_changes(st: os.stat_result) -> bool:
    """Whether a change to a file would show in its identity (device, inode, size, modification
    and change time), as the facts files assume: where the kernel (or a file server) set the
    change time when the file was last written. Not where an image builder wrote the times
    (squashfs, erofs, ISO 9660; ext2/3/4 images made by ``mkfs.ext4 -d`` or ``genext2fs``; a
    VM's root file system converted from a container image): the files carry whole seconds,
    the change time equal to the modification time, and reproducible builds
    (``SOURCE_DATE_EPOCH``) fix them, so two builds of one image can give an edited file (of
    the same size) the identity it had. Such times are taken at their word only on a file
    system whose server keeps whole-second times (Lustre, GPFS: looked up once per device).
    Times with nanoseconds, or a change time of its own, were set by the kernel (an image
    keeping nanosecond times, edited with its modification time kept to the nanosecond, is a
    known gap: docs/keys.md)."""
    if st.st_mtime_ns != st.st_ctime_ns or st.st_mtime_ns % 1_000_000_000:
        return True
    if (kind := _FILE_SYSTEMS.get(st.st_dev)) is None:
        kind = _FILE_SYSTEMS[st.st_dev] = _file_system(st.st_dev)
    return kind in _WHOLE_SECOND_SERVERS


#: The file system type per device (``stat_shows_changes``), as this process found it.
_FILE_SYSTEMS: dict[int, str] = {}
#: File systems whose servers keep change times in whole seconds.
_WHOLE_SECOND_SERVERS = frozenset({"lustre", "gpfs"})


def _file_system(device: int) -> str:
    """The type of the file system mounted from ``device`` (``/proc/self/mountinfo``; ``"?"``
    when it is not found there, or elsewhere than Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:  # "36 35 98:0 /root /mount options [optional...] - type source ..."
                fields = line.split()
                major, _, minor = fields[2].partition(":") if len(fields) > 2 else ("", "", "")
                if major.isdigit() and minor.isdigit() and os.makedev(int(major), int(minor)) == device:
                    after = fields[fields.index("-") + 1:] if "-" in fields else []
                    return after[0] if after else "?"
    except OSError:
        pass
    return "?"


def seed_folder_versions(folders: dict[str, dict[str, str]]) -> None:
    """Use ``folders`` (per ``sys.path`` entry, what ``folder_versions`` found in it) instead of
    listing those entries: the caller checks that each is as it was when it was listed."""
    if _installed_versions.cache_info().currsize == 0:
        _SEEDED_FOLDERS.clear()
        _SEEDED_FOLDERS.update({entry: dict(found) for entry, found in folders.items()})


def listed_folders() -> list[ListedFolder]:
    """The ``sys.path`` folders this process listed (not handed in)."""
    return list(_LISTED_FOLDERS.values())


@functools.cache
def _installed_versions() -> dict[str, str]:
    """Distribution versions from the ``<name>-<version>.dist-info`` folder names on sys.path:
    the first entry holding a distribution wins, as for imports.

    One directory listing per path entry (none for an entry handed in) instead of
    ``importlib.metadata``, which parses each distribution's METADATA (about 0.5 ms a
    package, on the hit path). The identity of a folder listed is taken just before its
    listing: a folder changed in between is listed again by the next process, never kept
    with a listing older than its identity.
    """
    versions: dict[str, str] = {}
    for entry in sys.path:
        found = _SEEDED_FOLDERS.get(entry)
        if found is None:
            name, identity, at = folder_identity(entry)
            found = folder_versions(entry)
            _LISTED_FOLDERS[entry] = ListedFolder(name, identity, at, found)
        for dist, version in found.items():
            versions.setdefault(dist, version)
    return versions


def folder_versions(entry: str) -> dict[str, str]:
    """The keyed distributions' versions in one ``sys.path`` entry (``""``: the working
    folder); none when it is not a listable folder."""
    try:
        names = os.listdir(entry or ".")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for name in sorted(names):
        if name.endswith(".dist-info") and "-" in name:
            dist, _, version = name[: -len(".dist-info")].rpartition("-")
            dist = dist.lower().replace("-", "_").replace(".", "_")
            if dist in _KEYED_DISTRIBUTIONS:
                found.setdefault(dist, version)
    return found


#: The distributions whose versions are toolchain facts (``_version``): the only ones kept
#: (the hook's facts file stores them; an environment has a hundred others).
_KEYED_DISTRIBUTIONS = frozenset({"gt4py", "nanobind", "gridtools_cpp", "dace"})


def _compiler_name() -> str:
    return (os.environ.get("CXX") or "c++").split()[0]


def _compiler_path() -> str | None:
    return program_path(_compiler_name())


def program_path(name: str) -> str | None:
    """``os.path.realpath(shutil.which(name))`` (None: not found); see ``program_file``."""
    found = program_file(name)
    return None if found is None else found[0]


def program_file(name: str) -> tuple[str, os.stat_result | None] | None:
    """``os.path.realpath(shutil.which(name))`` (None: not found), at a fifth of their cost on
    a first hit (0.17 ms: a Python loop over ``PATH``, then one over each link of the path,
    ``c++`` -> ``/etc/alternatives/c++`` -> ... -> ``x86_64-linux-gnu-g++-12``): a ``stat`` per
    ``PATH`` folder as ``which`` makes them, and the kernel resolves the links (the path of
    an ``O_PATH`` descriptor, ``/proc/self/fd``). A name with a folder, no ``PATH``, no
    ``O_PATH`` or no ``/proc``: ``shutil`` and ``os.path`` themselves.

    With the path, the status of the file found (None: it could not be read): of the file
    opened, not of the path looked up again, which can name another file by then."""
    search = os.environ.get("PATH")
    if os.sep in name or not search or not _O_PATH:
        found = shutil.which(name)
        return None if found is None else (os.path.realpath(found), _status(found))
    seen = set()
    for folder in search.split(os.pathsep):
        if folder in seen:
            continue
        seen.add(folder)
        candidate = f"{folder}/{name}" if folder else name  # (``os.path.join``'s result, less its cost)
        try:  # ``shutil.which``'s test: exists, is not a folder, may be run
            if S_ISDIR(os.stat(candidate).st_mode) or not os.access(candidate, os.X_OK):
                continue
        except (OSError, ValueError):
            continue
        return _real_file(candidate)
    return None


def _real_file(path: str) -> tuple[str, os.stat_result | None]:
    """``os.path.realpath`` of an existing ``path``, resolved by the kernel where it can, and
    the status of the file opened."""
    try:
        descriptor = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path), _status(path)
    try:
        opened = os.fstat(descriptor)
        real = os.readlink(f"/proc/self/fd/{descriptor}")
        # The kernel's name is taken when it leads to the file opened: not a file deleted or
        # renamed meanwhile, nor a name outside a chroot the working folder was left in.
        named = os.stat(real)
        if (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino) and real.startswith(os.sep):
            return real, opened
    except OSError:  # no /proc; nothing at that name
        pass
    finally:
        os.close(descriptor)
    return os.path.realpath(path), opened


def _status(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


_O_PATH: int = getattr(os, "O_PATH", 0)  # Linux


@functools.cache
def _compiler_identity() -> str | None:
    """``<real path>@<size>:<mtime>`` of the compiler driver: changes with any upgrade.

    Package managers keep the files' modification times, so identical installations
    agree; a stat costs microseconds where running or hashing the compiler costs ms.
    """
    return _identity(program_file(_compiler_name()))


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
        lines = cpuinfo_lines("/proc/cpuinfo", hybrid=os.path.exists("/sys/devices/cpu_atom"))
    except OSError:
        lines = []
    return cpu_features_digest(lines)


def cpu_features_digest(lines: list[str]) -> str:
    """``cpu_features`` of what ``cpuinfo_lines`` read (none: of the platform's names)."""
    return digest("\n".join(sorted(set(lines or [platform.processor(), platform.machine()]))))


def cpuinfo_lines(path: str, *, hybrid: bool) -> list[str]:
    """The values of the model and feature lines of ``/proc/cpuinfo`` (``path``).

    On x86 (its processors have ``flags``) those of the first processor only, unless the
    CPU is ``hybrid`` (Intel's performance and efficient cores: their ``flags`` can differ,
    and ``-march=native`` asks whichever core the compiler runs on; Linux shows such a CPU
    as ``/sys/devices/cpu_core`` and ``cpu_atom``). Other x86 cores report the same, and a
    node of 256 hardware threads has 340 kB of ``/proc/cpuinfo`` to read, once per process
    (1.3 ms). Elsewhere every processor's: aarch64's big and little cores differ in
    ``CPU part``, and gcc reads them all."""
    lines = []
    first_only = False
    with open(path, encoding="utf-8", errors="replace") as stream:
        for line in stream:
            name, colon, value = line.partition(":")
            name = name.strip()
            if colon and name in _CPUINFO_KEYS:
                lines.append(value.strip())
                first_only = first_only or (name == "flags" and not hybrid)
            elif first_only and not line.strip():
                break  # the end of the first processor's block
    return lines


#: The lines of ``/proc/cpuinfo`` that name the CPU's model and features: x86 (``model
#: name``, ``flags``), aarch64 (``Features``, ``CPU part``), RISC-V (``isa``, ``uarch``),
#: POWER (``cpu``), s390x (``features``).
_CPUINFO_KEYS = frozenset({"flags", "model name", "Features", "CPU part", "isa", "uarch", "cpu", "features"})


# -- GPUs -------------------------------------------------------------------------------------

#: Per GPU kind: the toolkit's compiler driver (the variable CMake reads for it, its name on
#: PATH), the variable gt4py and CMake read the target arch from, gtcache's declaration.
_GPU = {
    "cuda": {"compiler_env": "CUDACXX", "compiler": "nvcc", "archs_env": "CUDAARCHS",
             "declared_env": ENV_CUDA_ARCH, "fact": "nvcc"},
    "rocm": {"compiler_env": "HIPCXX", "compiler": "hipcc", "archs_env": "HIPARCHS",
             "declared_env": ENV_HIP_ARCH, "fact": "hipcc"},
}

#: The arch ``gtcache warm`` is planning or building for (wins over everything else).
_TARGET_ARCH: contextvars.ContextVar[str | None] = contextvars.ContextVar("gtcache_target_arch", default=None)


def gpu_kind(device_type_name: str) -> str | None:
    """``cuda`` (``CUDA``, ``CUDA_MANAGED``...), ``rocm`` (``ROCM``...) or None (a CPU)."""
    if device_type_name.startswith("CUDA"):
        return "cuda"
    if device_type_name.startswith("ROCM"):
        return "rocm"
    return None


@contextlib.contextmanager
def target_arch(arch: str | None) -> Any:
    """Within: GPU variants are keyed for ``arch`` (``gtcache warm --arch``, ``explain --arch``)."""
    token = _TARGET_ARCH.set(arch)
    try:
        yield
    finally:
        _TARGET_ARCH.reset(token)


def device_arch(device_type_name: str) -> str | None:
    """The GPU architecture code is built for and run on; None on CPU (see ``device_arch_source``)."""
    return device_arch_source(device_type_name)[0]


def device_arch_source(device_type_name: str) -> tuple[str | None, str]:
    """(arch, where it came from). In order: the arch ``gtcache warm`` builds for
    (``target_arch``), the device this process runs on (cupy's device 0, when cupy
    imports and a device answers), ``GTCACHE_CUDA_ARCH`` / ``GTCACHE_HIP_ARCH``,
    ``CUDAARCHS`` / ``HIPARCHS``, else ``"unknown"``. (None, "cpu") on CPU."""
    kind = gpu_kind(device_type_name)
    if kind is None:
        return None, "cpu"
    if target := _TARGET_ARCH.get():
        return target, "gtcache warm --arch"
    if found := _device_arch_from_cupy(kind):
        return found, "cupy (device 0)"
    if declared := declared_gpu_arch(device_type_name):
        return declared, str(_GPU[kind]["declared_env"])
    archs_env = str(_GPU[kind]["archs_env"])
    if arch := os.environ.get(archs_env, "").strip():
        return arch, archs_env
    return "unknown", "no device, no declaration"


@functools.cache
def _device_arch_from_cupy(kind: str) -> str | None:
    """cupy's device 0: its compute capability (``90``) or gfx arch (``gfx90a``); None when
    cupy is not installed or no device answers (a CPU-only machine, hidden devices)."""
    try:
        import cupy  # only present on GPU installations
    except Exception:
        return None
    try:
        if kind == "rocm":
            name = cupy.cuda.runtime.getDeviceProperties(0)["gcnArchName"]
            return str(name.decode() if isinstance(name, bytes) else name).split(":")[0] or None
        return str(cupy.cuda.Device(0).compute_capability) or None
    except Exception:  # no device, no driver
        return None


def toolkit_driver(kind: str) -> tuple[str, str, str | None]:
    """(driver name, the variable that names it, its real path or None): ``("nvcc", "CUDACXX", ...)``."""
    spec = _GPU[kind]
    return str(spec["compiler"]), str(spec["compiler_env"]), _gpu_compiler_path(kind)


def _gpu_compiler_name(kind: str) -> str:
    spec = _GPU[kind]
    return (os.environ.get(str(spec["compiler_env"])) or str(spec["compiler"])).split()[0]


def _gpu_compiler_path(kind: str) -> str | None:
    return program_path(_gpu_compiler_name(kind))


def gpu_toolkit_facts(device_type_name: str) -> dict[str, Any]:
    """Key facts of a GPU variant's toolkit: ``{"nvcc": "<path>@<size>:<mtime>"}`` (or
    ``hipcc``; None when not found); ``{}`` on CPU. Cheap: a stat, nothing is run."""
    kind = gpu_kind(device_type_name)
    if kind is None:
        return {}
    return {str(_GPU[kind]["fact"]): _gpu_identity(kind)}


@functools.cache
def _gpu_identity(kind: str) -> str | None:
    """Once per process, as for the C++ compiler (the lookup path of every GPU variant)."""
    return _identity(program_file(_gpu_compiler_name(kind)))


def gpu_facts(facts: dict[str, Any], device_type_name: str, arch: str | None) -> dict[str, Any]:
    """``toolchain_facts`` of a GPU variant: the toolkit's driver (``nvcc`` / ``hipcc``) besides
    the C++ compiler, and ``CUDAARCHS`` / ``HIPARCHS`` in ``build_env`` only when they name
    another arch than ``arch`` (the key's ``device.arch``, which is what they decide): an
    entry warmed with ``CUDAARCHS=90`` is found by a process on an arch-90 device that sets
    nothing, and one a process built for ``CUDAARCHS=80`` on an arch-90 device is its own."""
    kind = gpu_kind(device_type_name)
    if kind is None:
        return facts
    archs_env = str(_GPU[kind]["archs_env"])
    build_env = {name: value for name, value in facts.get("build_env", {}).items() if name != "CUDAARCHS"}
    if (value := os.environ.get(archs_env, "").strip()) and value != arch:
        build_env[archs_env] = os.environ[archs_env]
    return {**facts, **gpu_toolkit_facts(device_type_name), "build_env": build_env}


def _identity(found: tuple[str, os.stat_result | None] | None) -> str | None:
    """``<path>@<size>:<mtime>`` of what ``program_file`` found (the path alone: no status)."""
    if found is None:
        return None
    path, status = found
    return path if status is None else f"{path}@{status.st_size}:{int(status.st_mtime)}"


@functools.cache
def toolkit_version(kind: str) -> str | None:
    """The toolkit's version (``13.0`` from ``nvcc --version``'s ``release 13.0``; hipcc's
    ``HIP version``), for the record and ``gtcache doctor``; runs the driver once."""
    path = _gpu_compiler_path(kind)
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+\.\d+)" if kind == "cuda" else r"HIP version: (\S+)", out)
    return match.group(1) if match else None


@functools.cache
def supported_archs(kind: str) -> tuple[str, ...] | None:
    """The archs the toolkit builds for (``nvcc --list-gpu-arch``: ``75``, ``80``, ``90``...);
    None when the driver is missing or cannot say (hipcc: not asked; every gfx arch passes)."""
    path = _gpu_compiler_path(kind)
    if path is None:
        return None
    if kind != "cuda":
        return ()
    try:
        out = subprocess.run([path, "--list-gpu-arch"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return tuple(line.strip().removeprefix("compute_") for line in out.splitlines() if line.strip().startswith("compute_"))
