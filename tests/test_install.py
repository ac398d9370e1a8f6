"""The start-up hook in every install mode: set GTCACHE_DIR, run twice, the second run hits.

Builds the sdist and wheels once, installs gtcache (``--no-deps``) into fresh virtual
environments that see this environment's dependencies through a plain path line in a
``_deps.pth`` (a path line adds the folder to ``sys.path`` without running the ``.pth``
files inside it, so this environment's own gtcache start-up hook stays out), and runs a
cheap program (the roundtrip backend) twice in each, in fresh processes.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
PTH = "gtcache-autoload.pth"
UV = shutil.which("uv", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("uv")

PROGRAM = """\
import json
import warnings

with warnings.catch_warnings(record=True) as caught:  # a hook that did not install warns
    warnings.simplefilter("always")
    import gtcache
    from gtcache import examples
    from gtcache.gt4py import active_hook

if __name__ == "__main__":
    assert not [str(w.message) for w in caught if "gtcache" in str(w.message)]
    example = examples.EXAMPLES["axpy"]
    program = example.program.with_backend(examples.backend_by_name("roundtrip"))
    args, _ = example.make_args(8, 0)
    program(*args, offset_provider=example.offset_provider(8))
    hook = active_hook()
    print(json.dumps({"gtcache": gtcache.__file__, "hook": hook is not None,
                      "statuses": [o.status for o in hook.outcomes] if hook else []}))
"""


def _run(*cmd: str | pathlib.Path, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, timeout=600, check=False,
        env=env or _clean_env(),
    )
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GTCACHE", "PYTHONPATH", "VIRTUAL_ENV"))}
    return {**env, **extra}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A copy of the source tree that is also a git repository (for the git URL install)."""
    tree = tmp_path_factory.mktemp("source") / "gtcache"
    ignore = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*cache*")
    shutil.copytree(ROOT, tree, ignore=ignore)
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    _run(*git, "init", "-q")
    _run(*git, "add", "-A")
    _run(*git, "commit", "-q", "-m", "snapshot")
    return tree


@pytest.fixture(scope="module")
def dists(source: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """The sdist, the wheel ``build`` makes from it, and a wheel built straight from the tree."""
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (setuptools) is in this environment; isolation would
    # fetch it from the index for every build.
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out / "from-sdist", source)
    _run(sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out / "from-tree", source)
    return {
        "sdist": next((out / "from-sdist").glob("*.tar.gz")),
        "wheel-from-sdist": next((out / "from-sdist").glob("*.whl")),
        "wheel": next((out / "from-tree").glob("*.whl")),
    }


def test_the_sdist_is_complete(dists: dict[str, pathlib.Path]) -> None:
    with tarfile.open(dists["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for required in (f"src/{PTH}", "LICENSE", "cache_schema/v1/layout.md", "cache_schema/v1/entry.schema.json",
                     "src/gtcache/py.typed", "docs/configuration.md", "setup.py", "MANIFEST.in"):
        assert required in names, f"{required} is missing from the sdist"
    for wheel in (dists["wheel"], dists["wheel-from-sdist"]):
        with zipfile.ZipFile(wheel) as archive:
            listed = set(archive.namelist())
        assert PTH in listed and "gtcache/py.typed" in listed and "gtcache_cli/py.typed" in listed
        assert any(name.endswith(".dist-info/licenses/LICENSE") for name in listed)


def _venv(path: pathlib.Path) -> pathlib.Path:
    """A fresh environment that sees this one's packages (not its .pth files); its python."""
    _run(sys.executable, "-m", "venv", "--without-pip", path)
    python = path / "bin" / "python"
    purelib = pathlib.Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (purelib / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _pip(python: pathlib.Path, *args: str | pathlib.Path) -> None:
    _run(sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python, "install", "-q",
         "--no-deps", "--no-build-isolation", *args)


def _uv(python: pathlib.Path, *args: str | pathlib.Path) -> None:
    assert UV is not None
    _run(UV, "pip", "install", "-q", "--python", python, "--no-deps", *args)


INSTALLS = {
    "pip-wheel": lambda py, d, src: _pip(py, d["wheel"]),
    "pip-wheel-from-sdist": lambda py, d, src: _pip(py, d["wheel-from-sdist"]),
    "pip-sdist": lambda py, d, src: _pip(py, d["sdist"]),
    "pip-path": lambda py, d, src: _pip(py, src),
    "pip-git-url": lambda py, d, src: _pip(py, f"git+file://{src}"),
    "pip-editable": lambda py, d, src: _pip(py, "-e", src),
    "uv-wheel": lambda py, d, src: _uv(py, d["wheel"]),
    "uv-editable": lambda py, d, src: _uv(py, "-e", src),
}


@pytest.mark.parametrize("mode", list(INSTALLS))
def test_second_run_hits_in_every_install_mode(
    mode: str, dists: dict[str, pathlib.Path], source: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    if mode.startswith("uv") and UV is None:
        pytest.skip("uv is not installed")
    python = _venv(tmp_path / "venv")
    INSTALLS[mode](python, dists, source)
    purelib = pathlib.Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    assert (purelib / PTH).read_text().strip() == (ROOT / "src" / PTH).read_text().strip()
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent(PROGRAM))
    env = _clean_env(GTCACHE_DIR=str(tmp_path / "store"), GT4PY_BUILD_CACHE_DIR=str(tmp_path / "gt4py"))
    runs = [json.loads(_run(python, program, cwd=tmp_path, env=env).strip().splitlines()[-1]) for _ in range(2)]
    expected_root = source / "src" if "editable" in mode else purelib
    for run in runs:
        assert run["hook"], f"{mode}: the start-up hook did not install"
        assert pathlib.Path(run["gtcache"]).is_relative_to(expected_root), run["gtcache"]
    assert runs[0]["statuses"] == ["compiled"] and runs[1]["statuses"] == ["hit"], runs
