"""Import order never matters: with GTCACHE_DIR set, the start-up hook installs once, silently.

Each order runs in a fresh interpreter of this environment, whose start-up hook
(``gtcache-autoload.pth``) imports ``gtcache._autoload`` from the sources under test.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import gtcache

CHECK = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
{imports}
    import gt4py.next
    import gtcache.gt4py.hook as hook
from gt4py.next.otf import compilation_tasks, runners
factory, getter = compilation_tasks.make_compilation_task, runners.get_default_runner
print(json.dumps({{
    "active": hook.active_hook() is not None,
    "cache_dir": str(hook.active_hook().config.cache_dir) if hook.active_hook() else None,
    # patched once: one dispatcher wrapping gt4py's own function, not a dispatcher's
    "factory": [factory.__code__.co_qualname, getattr(factory, "__wrapped__", factory).__code__.co_qualname],
    "runner": [getter.__code__.co_qualname, getattr(getter, "__wrapped__", getter).__code__.co_qualname],
    "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in caught if "gtcache" in str(w.message)
                 or w.category.__name__ in ("RuntimeWarning", "GtcacheWarning")],
}}))
"""

ORDERS = {
    "gtcache-then-gt4py": ["import gtcache", "import gt4py.next"],
    "adapter-first": ["import gtcache.gt4py"],
    "hook-module-first": ["import gtcache.gt4py.hook"],
    "gt4py-then-adapter": ["import gt4py.next", "import gtcache.gt4py"],
    "examples-first": ["import gtcache.examples"],
    "cli-then-gt4py": ["import gtcache_cli.main", "import gt4py.next"],
    "cli-explain-module": ["import gtcache_cli._explain", "import gtcache.explain"],
    "public-api-install": ["import gtcache", "gtcache.install()"],
}


def _env(store: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}
    return {**env, "GTCACHE_DIR": str(store)}


def _installed_pth() -> bool:
    import site

    return any((pathlib.Path(p) / "gtcache-autoload.pth").exists() for p in site.getsitepackages())


pytestmark = pytest.mark.skipif(not _installed_pth(), reason="gtcache's start-up hook is not installed here")


@pytest.mark.slow
@pytest.mark.parametrize("order", list(ORDERS))
def test_every_import_order_installs_the_hook_once_without_warnings(order: str, tmp_path: pathlib.Path) -> None:
    imports = textwrap.indent("\n".join(ORDERS[order]), "    ")
    proc = subprocess.run(
        [sys.executable, "-c", CHECK.format(imports=imports)], capture_output=True, text=True,
        env=_env(tmp_path / "store"), cwd=tmp_path, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["warnings"] == [] and "gtcache" not in proc.stderr, (result["warnings"], proc.stderr)
    assert result["active"] and result["cache_dir"] == str(tmp_path / "store")
    assert result["factory"] == ["_patch.<locals>.make_compilation_task", "make_compilation_task"]
    assert result["runner"] == ["_patch.<locals>.get_default_runner", "get_default_runner"]


@pytest.mark.parametrize("how", ["module", "console-script"])
def test_cli_with_gtcache_dir_exported_prints_no_warning(how: str, tmp_path: pathlib.Path) -> None:
    """``gtcache explain`` imports gt4py with GTCACHE_DIR exported: no 'not installed' warning."""
    command = [sys.executable, "-m", "gtcache_cli"] if how == "module" else [
        str(pathlib.Path(sys.executable).parent / "gtcache")]
    gtcache.open_store(tmp_path / "store")  # explain reads a store; it never creates one
    proc = subprocess.run(
        [*command, "explain", "gtcache.examples:axpy", "--backend", "roundtrip"], capture_output=True,
        text=True, env=_env(tmp_path / "store"), cwd=tmp_path, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stderr and "not installed" not in proc.stderr, proc.stderr
