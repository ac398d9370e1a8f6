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
from collections.abc import Callable, Sequence
from typing import Any

from gtcache.store import Store
from gtcache.store._files import remove_tree, unique_name
from gtcache.warm.run import DEFAULT_MEMORY_PER_JOB, WarmResult, effective_jobs, run_local, run_on_dask
from gtcache.warm.spec import SpecError, VariantSpec, from_ledger, from_manifest, from_modules, unique

__all__ = [
    "DEFAULT_MEMORY_PER_JOB",
    "PlannedVariant",
    "SpecError",
    "VariantSpec",
    "WarmReport",
    "WarmResult",
    "effective_jobs",
    "from_ledger",
    "from_manifest",
    "from_modules",
    "plan",
    "unique",
    "warm",
]


@dataclasses.dataclass(frozen=True)
class PlannedVariant:
    spec: VariantSpec
    key: str | None
    #: "cached" (in the store), "missing" or "failed" (gt4py could not lower it).
    status: str
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), "key": self.key, "status": self.status, "detail": self.detail}


@dataclasses.dataclass(frozen=True)
class WarmReport:
    results: tuple[WarmResult, ...]
    jobs: int
    seconds: float

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def failed(self) -> tuple[WarmResult, ...]:
        return tuple(r for r in self.results if r.status in ("failed", "timeout"))

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "seconds": round(self.seconds, 3),
            "counts": {s: self.count(s) for s in ("compiled", "cached", "bypassed", "failed", "timeout")},
            "peak_memory": max((r.peak_memory for r in self.results), default=0),
            "variants": [r.to_json() for r in self.results],
        }


def plan(specs: Sequence[VariantSpec], store: Store) -> list[PlannedVariant]:
    """Resolve and check every variant, and look its key up. ``SpecError`` for bad input."""
    from gtcache.gt4py import _compat, plan_variant
    from gtcache.gt4py.targets import TargetError, load_object, resolve_backend, resolve_grid

    resolved: dict[tuple[str, str], Any] = {}

    def get(kind: str, name: str, resolve: Callable[[str], Any]) -> Any:
        if (kind, name) not in resolved:
            try:
                resolved[(kind, name)] = resolve(name)
            except TargetError as error:
                raise SpecError(str(error)) from None
        return resolved[(kind, name)]

    planned = []
    for spec in specs:
        program = get("program", spec.program, lambda n: load_object(n, what="program"))
        backend = get("backend", spec.backend, resolve_backend)
        grid = get("grid", spec.grid or "", resolve_grid)
        _check_static_args(spec, _compat.scalar_parameters(program))
        try:
            outcomes = plan_variant(
                store, program, backend=backend, offset_provider=grid,
                static_args={name: [value] for name, value in spec.static_args},
            )
        except Exception as error:  # a program gt4py cannot lower fails alone
            planned.append(PlannedVariant(spec, None, "failed", f"{type(error).__name__}: {error}"))
            continue
        for outcome in outcomes:
            planned.append(PlannedVariant(spec, outcome.key, outcome.status))
    return planned


def _check_static_args(spec: VariantSpec, params: dict[str, str | None]) -> None:
    for name, value in spec.static_args:
        if name not in params:
            raise SpecError(f"{spec.label}: '{spec.program}' has no parameter '{name}'.")
        kind = params[name]
        if kind is None:
            raise SpecError(f"{spec.label}: parameter '{name}' is not a scalar and cannot be static.")
        ok = (
            isinstance(value, bool) if kind == "BOOL"
            else isinstance(value, int) and not isinstance(value, bool) if "INT" in kind
            else isinstance(value, (int, float)) and not isinstance(value, bool) if "FLOAT" in kind
            else True
        )
        if not ok:
            raise SpecError(f"{spec.label}: static argument '{name}' is {type(value).__name__}, the parameter is {kind.lower()}.")


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
    build_dir = store.root / "tmp" / unique_name("warm-build-")
    try:
        if scheduler:
            ran = run_on_dask(to_run, str(store.root), scheduler=scheduler, timeout=timeout,
                              build_dir=str(build_dir), on_done=on_done)
        else:
            ran = run_local(to_run, str(store.root), jobs=jobs, timeout=timeout,
                            build_dir=str(build_dir), on_done=on_done)
    finally:
        remove_tree(build_dir)
    by_spec = {r.spec: r for r in ran}
    results = []
    for item in planned:
        if item.status == "cached":
            results.append(WarmResult(item.spec, "cached", item.key, 0.0))
        elif item.status == "failed" or item.key is None:
            results.append(WarmResult(item.spec, "failed", item.key, 0.0, detail=item.detail))
        else:
            ran_as = by_spec[first_of_key[item.key]]
            results.append(dataclasses.replace(ran_as, spec=item.spec))
    return WarmReport(tuple(results), jobs, time.perf_counter() - start)
