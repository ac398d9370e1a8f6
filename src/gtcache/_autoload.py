"""Start-up hook, run from ``gtcache-autoload.pth`` only when the environment asks for it.

The ``.pth`` line imports this module only if ``GTCACHE_DIR`` is set or
``GTCACHE=1``, so interpreters without them pay nothing but one environment
look-up. Even then nothing heavy is imported here: the gt4py hook is installed
right after ``gt4py.next`` finishes importing (a post-import hook on
``sys.meta_path``), so processes that never import gt4py (pip, tools) never load
gtcache's store or gt4py.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

_TARGET = "gt4py.next"


def _install() -> None:
    try:
        from gtcache.settings import Settings

        settings = Settings.from_env()
        if settings.enabled:
            from gtcache.gt4py.hook import install

            install(settings=settings)
    except Exception as error:  # a start-up hook must never stop the interpreter
        import warnings

        warnings.warn(f"gtcache: not installed ({error!r})", RuntimeWarning, stacklevel=1)


class _PostImport:
    """A ``sys.meta_path`` finder that runs ``_install`` once ``gt4py.next`` has executed.

    (Not an ``importlib.abc.MetaPathFinder`` subclass: importing ``importlib.abc``
    costs more start-up time than this whole module.)"""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module: Any) -> None:
            exec_module(module)
            _install()

        spec.loader.exec_module = exec_then_install  # type: ignore[method-assign]
        return spec


def activate() -> None:
    if _TARGET in sys.modules:
        _install()
    elif not any(isinstance(finder, _PostImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImport())


if os.environ.get("GTCACHE_DIR") or os.environ.get("GTCACHE", "").lower() in ("1", "true", "yes", "on"):
    activate()
