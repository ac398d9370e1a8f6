"""Attacks on ``gtcache warm``'s worker processes by another local user, who cannot write the
store but can write the folder warm is run from (``/tmp``, a shared scratch folder).

The tests run as root (the user warming) and plant as ``nobody`` (65534), through a real
process of that user.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.slow

NOBODY, NOGROUP = 65534, 65534
#: The installed console script (as a user runs it: no working folder on its ``sys.path``).
GTCACHE = str(pathlib.Path(sys.executable).parent / "gtcache")


def _as_nobody() -> None:
    os.setgroups([])
    os.setresgid(NOGROUP, NOGROUP, NOGROUP)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def plant_as_nobody(folder: pathlib.Path, files: dict[str, str]) -> None:
    """Make ``folder`` with ``files`` in a process of ``nobody`` (the venv's interpreter is not
    theirs to run: a forked child drops to their uid)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _as_nobody()
            folder.mkdir()
            for name, text in files.items():
                (folder / name).write_text(text)
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0, "planting failed"


@pytest.fixture
def shared() -> Iterator[pathlib.Path]:
    """A folder everyone may write, sticky (as ``/tmp``), removed afterwards."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-shared-", dir="/tmp"))
    os.chmod(base, 0o1777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


#: What the attacker plants: a ``gtcache`` package that notes who imported it, then hands over
#: to the real one (nothing shows).
PLANTED = textwrap.dedent("""
    import os, sys, importlib
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "ran-as-%d" % os.getuid()), "w") as f:
        f.write("planted code ran\\n")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    del sys.modules[__name__]
    sys.modules[__name__] = importlib.import_module(__name__)
""")


def test_warm_run_from_a_folder_others_write_imports_nothing_of_theirs(
    shared: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """``python -m gtcache.warm.worker`` put the working folder first on the worker's path: a
    ``gtcache`` package another user put in ``/tmp`` ran as the user warming (and could have
    published any payload into the store, for every reader to load)."""
    plant_as_nobody(shared / "gtcache", {"__init__.py": PLANTED})
    assert (shared / "gtcache" / "__init__.py").stat().st_uid == NOBODY

    store = tmp_path / "store"
    manifest = tmp_path / "m.toml"
    manifest.write_text('[[variant]]\nprogram = "gtcache.examples:axpy"\nbackend = "roundtrip"\n')
    run = subprocess.run(
        [GTCACHE, "--cache-dir", str(store), "warm", "--manifest", str(manifest), "--json"],
        cwd=shared, capture_output=True, text=True, check=False, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["counts"]["compiled"] == 1
    ran = sorted(path.name for path in shared.glob("ran-as-*"))
    assert ran == [], f"another user's planted package ran in warm's worker ({ran})"
