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
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SpecError", "VariantSpec", "from_ledger", "from_manifest", "from_modules", "unique"]

_SCALARS = (bool, int, float, str)


class SpecError(ValueError):
    """A manifest, module or argument that does not describe compilable variants."""


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    program: str
    backend: str
    #: One value per static argument (a variant), sorted by name.
    static_args: tuple[tuple[str, Any], ...] = ()
    grid: str | None = None

    @property
    def label(self) -> str:
        static = ", ".join(f"{k}={v!r}" for k, v in self.static_args)
        return f"{self.program} ({self.backend}{', ' + static if static else ''})"

    def to_json(self) -> dict[str, Any]:
        return {"program": self.program, "backend": self.backend,
                "static_args": dict(self.static_args), "grid": self.grid}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantSpec:
        return cls(
            program=data["program"], backend=data["backend"],
            static_args=tuple(sorted(data.get("static_args", {}).items())), grid=data.get("grid"),
        )


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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{path}: {error}.") from None  # the message carries line and column
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
        unknown = set(table) - {"program", "backends", "backend", "static_args", "grid"}
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
        specs += expand(program, backends, static, grid)
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
    from gtcache.warm import _discover

    specs = []
    for module in modules:
        for name, program_backend in _discover.programs_in(module):
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
                specs.append(dataclasses.replace(VariantSpec.from_json(spec), grid=grid or spec.get("grid")))
    return specs


def dumps(specs: Iterable[VariantSpec]) -> str:
    return json.dumps([s.to_json() for s in specs])
