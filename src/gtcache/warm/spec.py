"""What ``gtcache warm`` compiles: variant specs from manifests, modules and the ledger.

A ``VariantSpec`` names everything by import path so that it can cross a
process boundary as JSON: the program (``pkg.module:name``), the backend
(``gtfn_cpu``, ... or ``pkg.module:name``), one value per static argument and
the grid (``pkg.module:callable`` returning the offset provider). Every spec is
checked before anything compiles: a bad manifest is one ``SpecError`` naming the
file and, where it can, the line.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pathlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "DEVICES", "SpecError", "VariantSpec", "for_archs", "from_ledger", "from_manifest", "from_modules", "unique",
]

_SCALARS = (bool, int, float, str)

#: ``--device``: the GPU kind an ``--arch`` is for, and what an arch of it looks like.
DEVICES = {"cuda": re.compile(r"\d{2,3}[a-z]?"), "rocm": re.compile(r"gfx[0-9a-z]+")}


class SpecError(ValueError):
    """A manifest, module or argument that does not describe compilable variants."""


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    program: str
    backend: str
    #: One value per static argument (a variant), sorted by name.
    static_args: tuple[tuple[str, Any], ...] = ()
    grid: str | None = None
    #: The GPU kind and arch a GPU variant is built for (``gtcache warm --device cuda --arch 90``);
    #: None: the worker's environment decides (CPU variants, GPU ones without ``--arch``).
    device: str | None = None
    arch: str | None = None
    #: Read from the ledger (``from_ledger``): a run recorded it, so a program, backend or grid
    #: that cannot be found here (a module of another checkout) fails that variant alone,
    #: where in a manifest or a module list it is bad input. Not part of a variant's identity.
    recorded: bool = dataclasses.field(default=False, compare=False)

    @property
    def label(self) -> str:
        static = ", ".join(f"{k}={v!r}" for k, v in self.static_args)
        arch = f", {self.device} arch {self.arch}" if self.arch else ""
        return f"{self.program} ({self.backend}{arch}{', ' + static if static else ''})"

    def to_json(self) -> dict[str, Any]:
        data = {"program": self.program, "backend": self.backend,
                "static_args": dict(self.static_args), "grid": self.grid}
        if self.arch is not None:
            data.update(device=self.device, arch=self.arch)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantSpec:
        return cls(
            program=data["program"], backend=data["backend"],
            static_args=tuple(sorted(data.get("static_args", {}).items())), grid=data.get("grid"),
            device=data.get("device"), arch=data.get("arch"),
        )


def is_gpu_backend(name: str) -> bool:
    """``gtfn_gpu``, ``dace_gpu`` or a custom backend with ``gpu`` in its name."""
    return "gpu" in name.rpartition(":")[2].lower()


def check_archs(device: str, archs: Iterable[str], where: str) -> list[str]:
    """The archs, checked against ``device``'s form (``90``; ``gfx90a``); ``SpecError`` otherwise."""
    if device not in DEVICES:
        raise SpecError(f"{where}: device '{device}' is not one of {', '.join(DEVICES)}.")
    checked = []
    for arch in archs:
        arch = str(arch).strip()
        if not DEVICES[device].fullmatch(arch):
            example = "90, 80, 90a" if device == "cuda" else "gfx90a, gfx942"
            raise SpecError(f"{where}: '{arch}' is not a {device} arch (e.g. {example}).")
        checked.append(arch)
    return list(dict.fromkeys(checked))


def for_archs(specs: Iterable[VariantSpec], device: str, archs: Iterable[str]) -> list[VariantSpec]:
    """Each GPU variant that has no arch yet, once per arch (``--device``/``--arch``); the
    others as they are. ``SpecError`` for a bad arch, or when no variant is a GPU one."""
    checked = check_archs(device, archs, "--arch")
    specs = list(specs)
    if checked and not any(is_gpu_backend(s.backend) for s in specs):
        raise SpecError("--arch: no variant has a GPU backend (gtfn_gpu, dace_gpu); name one with --backend.")
    result = []
    for spec in specs:
        if spec.arch is None and is_gpu_backend(spec.backend) and checked:
            result += [dataclasses.replace(spec, device=device, arch=arch) for arch in checked]
        else:
            result.append(spec)
    return result


def expand(
    program: str, backends: Iterable[str], static_args: Mapping[str, list[Any]], grid: str | None
) -> list[VariantSpec]:
    """Every backend x every combination of static values."""
    names = sorted(static_args)
    combos = list(itertools.product(*(static_args[n] for n in names))) if names else [()]
    return [
        VariantSpec(program, backend, tuple(zip(names, combo, strict=True)), grid)
        for backend in backends
        for combo in combos
    ]


def unique(specs: Iterable[VariantSpec]) -> list[VariantSpec]:
    """Drop repeats, keeping the first order."""
    return list(dict.fromkeys(specs))


def from_manifest(path: pathlib.Path) -> list[VariantSpec]:
    """Variants a TOML manifest declares (see docs/warm.md for the format)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SpecError(f"{path}: cannot read the manifest ({error.strerror or error}).") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"{path}: not UTF-8 text (byte {error.start}); a manifest is TOML.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{path}: {error}.") from None  # the message carries line and column
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a manifest.") from None
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"{path}: [defaults] must be a table.")
    variants = data.get("variant", [])
    if not isinstance(variants, list) or not variants:
        raise SpecError(f"{path}: no [[variant]] tables.")
    specs = []
    for number, table in enumerate(variants, start=1):
        where = f"{path}: [[variant]] #{number}" + _line_of(text, number)
        if not isinstance(table, dict):
            raise SpecError(f"{where}: not a table.")
        unknown = set(table) - {"program", "backends", "backend", "static_args", "grid", "device", "archs"}
        if unknown:
            raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}.")
        program = table.get("program")
        if not isinstance(program, str) or ":" not in program:
            raise SpecError(f"{where}: 'program' must be 'package.module:name'.")
        backends = table.get("backends", table.get("backend", defaults.get("backends", ["gtfn_cpu"])))
        backends = [backends] if isinstance(backends, str) else backends
        if not isinstance(backends, list) or not all(isinstance(b, str) for b in backends) or not backends:
            raise SpecError(f"{where}: 'backends' must be a list of backend names.")
        static = table.get("static_args", {})
        if not isinstance(static, dict):
            raise SpecError(f"{where}: 'static_args' must be a table of lists.")
        for name, values in static.items():
            if not isinstance(values, list) or not values or not all(isinstance(v, _SCALARS) for v in values):
                raise SpecError(f"{where}: static argument '{name}' must be a non-empty list of numbers, booleans or strings.")
        grid = table.get("grid", defaults.get("grid"))
        if grid is not None and (not isinstance(grid, str) or ":" not in grid):
            raise SpecError(f"{where}: 'grid' must be 'package.module:callable'.")
        found = expand(program, backends, static, grid)
        archs = table.get("archs", defaults.get("archs"))
        if archs is not None:
            device = table.get("device", defaults.get("device", "cuda"))
            if not isinstance(archs, list) or not all(isinstance(a, (str, int)) for a in archs) or not archs:
                raise SpecError(f"{where}: 'archs' must be a list of GPU archs (e.g. [\"80\", \"90\"]).")
            checked = check_archs(str(device), [str(a) for a in archs], where)
            found = [dataclasses.replace(spec, device=str(device), arch=arch) if is_gpu_backend(spec.backend) else spec
                     for spec in found for arch in (checked if is_gpu_backend(spec.backend) else [None])]
        specs += found
    return specs


def _line_of(text: str, number: int) -> str:
    """`` (line N)`` of the ``number``-th ``[[variant]]`` header, when it can be found."""
    seen = 0
    for line_number, line in enumerate(text.splitlines(), start=1):
        if line.strip().replace(" ", "") == "[[variant]]":
            seen += 1
            if seen == number:
                return f" (line {line_number})"
    return ""


def from_modules(modules: Iterable[str], *, backends: list[str] | None, grid: str | None) -> list[VariantSpec]:
    """Every gt4py program defined in the modules (or packages: their modules too).

    A program's own backend (``@gtx.program(backend=...)``) is used unless
    ``backends`` are given; programs with neither are skipped.
    """
    from gtcache.gt4py.targets import TargetError, programs_in

    specs = []
    for module in modules:
        try:
            found = list(programs_in(module))
        except TargetError as error:
            raise SpecError(str(error)) from None
        for name, program_backend in found:
            chosen = backends or ([program_backend] if program_backend else [])
            specs += expand(name, chosen, {}, grid)
    return specs


def from_ledger(runs: Iterable[Mapping[str, Any]], *, grid: str | None) -> list[VariantSpec]:
    """The variants earlier runs against the store compiled or loaded, as the hook recorded them."""
    specs = []
    for run in runs:
        for variant in run.get("variants", []):
            spec = variant.get("spec") if isinstance(variant, dict) else None
            if isinstance(spec, dict) and "program" in spec and "backend" in spec:
                # A run that passed no offset provider compiled without one (older ledger files
                # do not say: they get the grid).
                uses_grid = spec.get("offsets") != []
                chosen = (grid or spec.get("grid")) if uses_grid else None
                specs.append(dataclasses.replace(VariantSpec.from_json(spec), grid=chosen, recorded=True))
    return specs


def dumps(specs: Iterable[VariantSpec]) -> str:
    return json.dumps([s.to_json() for s in specs])
