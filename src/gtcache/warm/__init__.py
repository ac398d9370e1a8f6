"""``gtcache warm``: compile declared program variants into a store, in parallel.

``plan`` resolves and checks every variant in this process (importing the
programs, letting gt4py lower them, computing their keys: nothing compiles) so
that bad input fails before any compile starts and stored variants are skipped;
``warm`` then compiles what is missing, each distinct key once, in worker
processes (``run.py``).
"""

from __future__ import annotations

import dataclasses
import time
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from gtcache import toolchain
from gtcache.errors import GtcacheError
from gtcache.settings import Settings
from gtcache.store import Store
from gtcache.warm.run import DEFAULT_MEMORY_PER_JOB, WarmResult, WarmStatus, effective_jobs, run_local, run_on_dask
from gtcache.warm.spec import (
    DEVICES,
    SpecError,
    VariantSpec,
    for_archs,
    from_ledger,
    from_manifest,
    from_modules,
    unique,
)

__all__ = [
    "DEFAULT_MEMORY_PER_JOB",
    "DEVICES",
    "PlanStatus",
    "PlannedVariant",
    "SpecError",
    "VariantSpec",
    "WarmReport",
    "WarmResult",
    "WarmStatus",
    "check_static_args",
    "check_toolkit",
    "effective_jobs",
    "for_archs",
    "from_ledger",
    "from_manifest",
    "from_modules",
    "plan",
    "resolve",
    "unique",
    "warm",
]


#: "cached" (in the store), "missing", "failed" (gt4py could not lower it) or
#: "unplannable" (its key cannot be computed without compiling; ``detail`` says why).
PlanStatus = Literal["cached", "missing", "failed", "unplannable"]


@dataclasses.dataclass(frozen=True)
class PlannedVariant:
    spec: VariantSpec
    key: str | None
    status: PlanStatus
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), "key": self.key, "status": self.status, "detail": self.detail}


@dataclasses.dataclass(frozen=True)
class WarmReport:
    results: tuple[WarmResult, ...]
    jobs: int
    seconds: float

    def count(self, status: WarmStatus) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def failed(self) -> tuple[WarmResult, ...]:
        return tuple(r for r in self.results if r.status in ("failed", "timeout", "unplannable"))

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "seconds": round(self.seconds, 3),
            "counts": {s: self.count(s) for s in typing.get_args(WarmStatus)},
            "peak_memory": max((r.peak_memory for r in self.results), default=0),
            "variants": [r.to_json() for r in self.results],
        }


def resolve(specs: Sequence[VariantSpec]) -> dict[tuple[str, str], Any]:
    """Resolve and check every declared variant (program, backend, grid, static arguments)
    without a store, as ``plan`` does: ``SpecError`` for bad input, found before a store is made.
    Variants from the ledger are left to ``plan`` (they fail alone). The result, given to
    ``plan``, spares it resolving them again (a grid is built once)."""
    resolved: dict[tuple[str, str], Any] = {}
    for spec in specs:
        if not spec.recorded:
            _resolve(spec, resolved)
    return resolved


def _resolve(spec: VariantSpec, resolved: dict[tuple[str, str], Any]) -> tuple[Any, Any, Any]:
    from gtcache.gt4py import scalar_parameters
    from gtcache.gt4py.targets import TargetError, load_object, resolve_backend, resolve_grid

    def get(kind: str, name: str, resolve: Callable[[str], Any]) -> Any:
        if (kind, name) not in resolved:
            try:
                resolved[(kind, name)] = resolve(name)
            except TargetError as error:
                raise SpecError(str(error)) from None
        return resolved[(kind, name)]

    program = get("program", spec.program, lambda n: load_object(n, what="program"))
    backend = get("backend", spec.backend, resolve_backend)
    grid = get("grid", spec.grid or "", resolve_grid)
    _check_static_args(spec, scalar_parameters(program))
    return program, backend, grid


def plan(
    specs: Sequence[VariantSpec], store: Store, *, settings: Settings | None = None,
    resolved: dict[tuple[str, str], Any] | None = None,
) -> list[PlannedVariant]:
    """Resolve and check every variant, and look its key up. ``SpecError`` for bad input (a
    variant from the ledger that does not resolve here fails alone: ``VariantSpec.recorded``).
    ``settings``: as ``gtcache.gt4py.serving`` takes them (default: the environment's);
    ``resolved``: what ``resolve`` found for them already."""
    from gtcache.gt4py import plan_variants

    resolved = {} if resolved is None else resolved
    planned = []
    for spec in specs:
        try:
            program, backend, grid = _resolve(spec, resolved)
        except SpecError as error:
            if not spec.recorded:
                raise
            planned.append(PlannedVariant(spec, None, "failed", str(error)))
            continue
        try:
            with toolchain.target_arch(spec.arch):  # keyed for the arch it is built for
                outcomes = plan_variants(
                    store, program, backend=backend, offset_provider=grid,
                    static_args={name: [value] for name, value in spec.static_args}, settings=settings,
                )
        except Exception as error:  # a program gt4py cannot lower fails alone
            planned.append(PlannedVariant(spec, None, "failed", f"{type(error).__name__}: {error}"))
            continue
        if not outcomes:
            planned.append(PlannedVariant(spec, None, "unplannable", "gt4py asked for no compilation"))
        for outcome in outcomes:
            status = outcome.status
            if status == "cached" or status == "missing" or status == "unplannable":
                planned.append(PlannedVariant(spec, outcome.key, status, outcome.detail))
            else:  # planning serves and compiles nothing: never "hit", "compiled", ...
                planned.append(PlannedVariant(spec, outcome.key, "failed", f"planning gave '{status}'"))
    return planned


def check_toolkit(specs: Sequence[VariantSpec]) -> None:
    """``GtcacheError`` (one sentence) when a variant declares an arch the toolkit cannot
    build for: its driver (``nvcc``, ``hipcc``) is not found, or it does not list the arch."""
    for device in sorted({s.device for s in specs if s.arch and s.device}):
        compiler, variable, _ = toolchain.toolkit_driver(device)
        archs = sorted({s.arch for s in specs if s.device == device and s.arch})
        supported = toolchain.supported_archs(device)
        if supported is None:
            raise GtcacheError(
                f"--arch {', '.join(archs)}: {compiler} is not found (not on PATH, ${variable} unset):"
                f" install the {'CUDA' if device == 'cuda' else 'ROCm'} toolkit or point ${variable} at {compiler}."
            )
        if not supported:  # the toolkit does not say (hipcc)
            continue
        unsupported = [a for a in archs if a not in supported]
        if unsupported:
            version = toolchain.toolkit_version(device) or "?"
            raise GtcacheError(
                f"--arch {', '.join(unsupported)}: {compiler} {version} cannot build for"
                f" {'it' if len(unsupported) == 1 else 'them'} (it builds for {', '.join(supported)})."
            )


def _check_static_args(spec: VariantSpec, params: dict[str, str | None]) -> None:
    _check_static(spec.label, spec.program, spec.static_args, params)


def check_static_args(program: Any, static_args: Mapping[str, Sequence[Any]], *, name: str) -> None:
    """``SpecError`` unless each static argument of ``program`` (called ``name`` in messages)
    is one of its scalar parameters, with values of its type (what ``gtcache explain`` checks)."""
    from gtcache.gt4py import scalar_parameters

    pairs = [(param, value) for param, values in static_args.items() for value in values]
    _check_static("--static", name, pairs, scalar_parameters(program))


def _check_static(label: str, program: str, pairs: Iterable[tuple[str, Any]], params: dict[str, str | None]) -> None:
    for name, value in pairs:
        if name not in params:
            raise SpecError(f"{label}: '{program}' has no parameter '{name}'.")
        kind = params[name]
        if kind is None:
            raise SpecError(f"{label}: parameter '{name}' is not a scalar and cannot be static.")
        ok = (
            isinstance(value, bool) if kind == "BOOL"
            else isinstance(value, int) and not isinstance(value, bool) if "INT" in kind
            else isinstance(value, (int, float)) and not isinstance(value, bool) if "FLOAT" in kind
            else True
        )
        if not ok:
            raise SpecError(f"{label}: static argument '{name}' is {type(value).__name__}, the parameter is {kind.lower()}.")


def warm(
    planned: Sequence[PlannedVariant], store: Store, *, jobs: int, timeout: float | None,
    scheduler: str | None = None, on_done: Callable[[WarmResult], None] = lambda _: None,
) -> WarmReport:
    """Compile the missing variants (each distinct key once) into ``store``."""
    start = time.perf_counter()
    first_of_key: dict[str, VariantSpec] = {}
    to_run = []
    for item in planned:
        if item.status == "missing" and item.key is not None and item.key not in first_of_key:
            first_of_key[item.key] = item.spec
            to_run.append(item.spec)
    # One gt4py build cache for this run's workers, inside the store's tmp/ (so dask
    # workers that see the store see it too); only the stored payloads outlive the run.
    with store.scratch("warm-build-") as build_dir:
        if scheduler:
            ran = run_on_dask(to_run, str(store.root), scheduler=scheduler, timeout=timeout,
                              build_dir=str(build_dir), on_done=on_done)
        else:
            ran = run_local(to_run, str(store.root), jobs=jobs, timeout=timeout,
                            build_dir=str(build_dir), on_done=on_done)
    by_spec = {r.spec: r for r in ran}
    results = []
    for item in planned:
        if item.status == "cached":
            results.append(WarmResult(item.spec, "cached", item.key, 0.0))
        elif item.status in ("failed", "unplannable") or item.key is None:
            status = item.status if item.status == "unplannable" else "failed"
            results.append(WarmResult(item.spec, status, item.key, 0.0, detail=item.detail))
        else:
            ran_as = by_spec[first_of_key[item.key]]
            results.append(dataclasses.replace(ran_as, spec=item.spec))
    return WarmReport(tuple(results), jobs, time.perf_counter() - start)
