"""Finding gt4py programs in modules and packages."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

from gtcache.warm.spec import SpecError

#: gt4py backend names -> the short names ``gtcache.gt4py.targets`` resolves.
SHORT_BACKEND_NAMES = {
    "run_gtfn_cpu": "gtfn_cpu",
    "run_gtfn_gpu": "gtfn_gpu",
    "run_dace_cpu_opt": "dace_cpu",
    "run_dace_gpu_opt": "dace_gpu",
    "roundtrip": "roundtrip",
}


def short_backend_name(backend: object) -> str | None:
    return SHORT_BACKEND_NAMES.get(str(getattr(backend, "name", "")))


def programs_in(module_name: str) -> Iterator[tuple[str, str | None]]:
    """``("pkg.module:name", short backend name or None)`` of each program defined there."""
    from gt4py.next.ffront.decorator import Program

    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a user module can raise anything
        raise SpecError(f"Cannot import '{module_name}': {error}.") from None
    modules = [module]
    if hasattr(module, "__path__"):  # a package: its modules too
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{module_name}."):
            try:
                modules.append(importlib.import_module(info.name))
            except Exception as error:
                raise SpecError(f"Cannot import '{info.name}': {error}.") from None
    for mod in modules:
        for attr, value in sorted(vars(mod).items()):
            if isinstance(value, Program) and getattr(value.definition, "__module__", None) == mod.__name__:
                yield f"{mod.__name__}:{attr}", short_backend_name(value.backend)
