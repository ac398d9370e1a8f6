"""Start-up hook, run from ``gtcache-autoload.pth`` only when the environment asks for it.

The ``.pth`` line imports this module only if ``GTCACHE_DIR`` is set or
``GTCACHE=1``, so interpreters without them pay nothing but one environment
look-up. Even then nothing heavy is imported here: the gt4py hook is installed
right after ``gt4py.next`` finishes importing (a post-import hook on
``sys.meta_path``), so processes that never import gt4py (pip, tools) never load
gtcache's store or gt4py.

Import order does not matter. When ``gt4py.next`` finishes importing *because*
``gtcache.gt4py`` is being imported (its ``_compat`` imports gt4py), installing
right then would import ``gtcache.gt4py.hook`` from a half-initialised
``gtcache.gt4py``: the install is deferred until ``gtcache.gt4py`` has finished
(its last line calls ``adapter_ready``).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

from gtcache import _env  # imports nothing: the one parser of GTCACHE=1 / GTCACHE_DIR

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

_TARGET = "gt4py.next"
#: The package that installs the hook; it sets ``_ADAPTER_READY`` on its last line.
_ADAPTER = "gtcache.gt4py"
#: An install waits for ``gtcache.gt4py`` to finish importing.
_pending = False
#: When this process first looked a gt4py module up (ns since the epoch, less a tick of the
#: clock that stamps files; None: not seen, gt4py was imported before the finder was armed):
#: no file of gt4py, nor of a DSL module gt4py parsed, was read before. A file changed since
#: may hold another text than the process runs (``gtcache.gt4py._facts``).
gt4py_first_seen_ns: int | None = None


def _install() -> None:
    global _pending
    adapter = sys.modules.get(_ADAPTER)
    if adapter is not None and not getattr(adapter, "_ADAPTER_READY", False):
        _pending = True  # gtcache.gt4py is importing gt4py right now: see adapter_ready
        return
    try:
        from gtcache.settings import Settings

        settings = Settings.from_env()
        if settings.enabled:
            from gtcache.gt4py.hook import install_at_startup

            install_at_startup(settings)
    except Exception as error:  # a start-up hook must never stop the interpreter
        import warnings

        warnings.warn(
            f"gtcache: not installed ({error!r}); run 'gtcache doctor' to see why.", RuntimeWarning, stacklevel=1
        )


def adapter_ready() -> None:
    """Called by ``gtcache.gt4py`` once imported: run an install that waited for it."""
    global _pending
    if _pending:
        _pending = False
        _install()


class _PostImport:
    """A ``sys.meta_path`` finder that runs ``_install`` once ``gt4py.next`` has executed.

    (Not an ``importlib.abc.MetaPathFinder`` subclass: importing ``importlib.abc``
    costs more start-up time than this whole module.)"""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TARGET:
            if fullname == "gt4py":
                _first_seen()
            return None
        sys.meta_path.remove(self)
        spec = _find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module: Any) -> None:
            exec_module(module)
            _install()

        spec.loader.exec_module = exec_then_install
        return spec


def _first_seen() -> None:
    global gt4py_first_seen_ns
    if gt4py_first_seen_ns is None:
        import time

        gt4py_first_seen_ns = time.time_ns() - 10_000_000  # a file's time may lag by a tick


def _find_spec(fullname: str, path: Any, target: Any) -> Any:
    """The spec the finders after this one give (an editable gt4py has a finder of its own)."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is not None:
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
    return importlib.machinery.PathFinder.find_spec(fullname, path)


def activate() -> None:
    if _TARGET in sys.modules:
        _install()
    elif not any(isinstance(finder, _PostImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImport())


if _env.hook_enabled(os.environ):
    activate()
