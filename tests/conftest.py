"""Shared fixtures: one store of really compiled programs per session, copied per test.

gt4py's own build cache is made persistent and put in the session's temp dir
before gt4py is imported, so that "gt4py alone" reference runs reuse the builds
the session store was filled from instead of compiling again.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Any

# A developer's shell must not leak into the tests or their subprocesses (a read-only tier,
# a bundle key, GTCACHE=1 or gt4py's own settings would change what "gt4py alone" means).
_DEV_BUILD_CACHE = os.environ.get("GTCACHE_TESTS_GT4PY_CACHE", "")
for _name in [n for n in os.environ if n.startswith(("GTCACHE", "GT4PY_"))]:
    del os.environ[_name]
_SESSION_TMP = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-tests-"))
# For the edit-test loop only: GTCACHE_TESTS_GT4PY_CACHE keeps gt4py's build cache between
# sessions (the session store then fills in seconds). CI leaves it unset.
os.environ["GT4PY_BUILD_CACHE_DIR"] = _DEV_BUILD_CACHE or str(_SESSION_TMP / "gt4py-cache")
os.environ["GT4PY_BUILD_CACHE_LIFETIME"] = "persistent"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import gtcache  # noqa: E402
from tests.helpers import Figures, run_python  # noqa: E402

BACKENDS = ("gtfn_cpu", "dace_cpu", "roundtrip")
#: Mesh / domain size the session store is compiled and checked with.
SIZE = 32


@dataclasses.dataclass(frozen=True)
class Variant:
    example: str
    backend: str
    key: str


@dataclasses.dataclass(frozen=True)
class CompiledStore:
    """A store holding every example for every backend, and what gt4py alone computes."""

    path: pathlib.Path
    variants: tuple[Variant, ...]

    def variant(self, example: str, backend: str) -> Variant:
        return next(v for v in self.variants if (v.example, v.backend) == (example, backend))


#: The modules that go through gt4py (compile, lower, key, load, hook, install order): the
#: compatibility subset `make test` runs again against the other supported gt4py versions.
#: The rest (store, policies, bundles, CLI, security) does not import gt4py's internals.
COMPAT_MODULES = (
    "tests/gt4py/",
    "tests/warm/",
    "tests/test_explain.py",
    "tests/test_pytest_plugin.py",
    "tests/test_import_order.py",
    "tests/test_doctor.py",
    "tests/test_compat.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = pathlib.Path(__file__).parent.parent
    no_gpu = None
    for item in items:
        where = item.path.relative_to(root).as_posix()
        if where.startswith(COMPAT_MODULES):
            item.add_marker(pytest.mark.compat)
        if item.get_closest_marker("gpu") is not None:
            no_gpu = _no_gpu_device() if no_gpu is None else no_gpu
            if no_gpu:
                item.add_marker(pytest.mark.skip(reason=f"gpu: needs a GPU device; {no_gpu}"))


def _no_gpu_device() -> str:
    """Why no GPU device can be used here ("" when one can): tests marked ``gpu`` skip then."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError:
        return "cupy is not installed"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, no device
        return f"cupy sees no device ({error})"
    return "" if count else "cupy sees no device"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> str:
    import gt4py

    return f"gtcache {gtcache.__version__} against gt4py {gt4py.__version__}"


_FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    """What the reliability and security suites measured (written to build/ at the end)."""
    return _FIGURES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    _FIGURES.write(terminalreporter, pathlib.Path(__file__).parents[1] / "build")


@pytest.fixture(scope="session")
def compiled_store() -> CompiledStore:
    """Compile (once per session) every example for every backend into a store. Read-only use."""
    from gtcache import examples
    from gtcache.gt4py import compile_variants

    path = _SESSION_TMP / "compiled-store"
    store = gtcache.open_store(path)
    variants = []
    for example in examples.EXAMPLES.values():
        for backend in BACKENDS:
            _, outcomes = compile_variants(
                store,
                example.program,
                backend=examples.backend_by_name(backend),
                offset_provider=example.offset_provider(SIZE),
            )
            assert [o.status for o in outcomes] == ["compiled"], outcomes
            assert outcomes[0].key is not None
            variants.append(Variant(example.name, backend, outcomes[0].key))
    store.close()
    return CompiledStore(path=path, variants=tuple(variants))


@pytest.fixture
def store_copy(compiled_store: CompiledStore, tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of the compiled store, at a path of its own."""
    target = tmp_path / "copied-store"
    shutil.copytree(compiled_store.path, target, symlinks=True)
    return target


@pytest.fixture
def gt4py_alone_output() -> object:
    """``f(example, backend, seed, size=SIZE)``: the output of a plain gt4py run (no gtcache)."""
    from gtcache import examples

    def run(example_name: str, backend: str, seed: int, size: int = SIZE) -> np.ndarray:
        example = examples.EXAMPLES[example_name]
        program = example.program.with_backend(examples.backend_by_name(backend))
        offset_provider = example.offset_provider(size)
        args, out = example.make_args(size, seed)
        program(*args, offset_provider=offset_provider)
        result = out.asnumpy().copy()
        np.testing.assert_allclose(result, example.reference(args))
        return result

    return run


NO_FLOCK_C = """
#include <errno.h>
#include <stdlib.h>
int flock(int fd, int operation) {
    (void)fd; (void)operation;
    const char *answer = getenv("GTCACHE_TEST_FLOCK_ERRNO");  /* another file system's answer (ENOLCK: NFS) */
    errno = answer ? atoi(answer) : ENOSYS;
    return -1;
}
"""


@pytest.fixture(scope="session")
def no_flock(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for processes without flock.

    A tiny preload library whose ``flock`` fails with ENOSYS, exactly what a Lustre
    client mounted without ``flock`` answers: processes started with it in
    ``LD_PRELOAD`` have no ``flock`` at all.
    """
    folder = tmp_path_factory.mktemp("no-flock")
    source = folder / "no_flock.c"
    source.write_text(NO_FLOCK_C)
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler is needed (gt4py's gtfn backend needs one too)"
    library = folder / "libnoflock.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    env = {"LD_PRELOAD": str(library)}
    probe = """
    import errno, fcntl, os, tempfile
    with tempfile.TemporaryFile() as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        except OSError as error:
            print(errno.errorcode[error.errno])
    """
    assert run_python(probe, env=env).strip() == "ENOSYS", "the preload library must take flock away"
    return env
