"""Running code in fresh Python processes, as users' programs do."""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from typing import Any

CHILD_LOAD = """
import json, sys, warnings
import numpy as np
import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variants

store_path, example_name, backend_name, seed, size, out_file = sys.argv[1:7]
store = gtcache.open_store(store_path)
example = examples.EXAMPLES[example_name]
offset_provider = example.offset_provider(int(size))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    program, outcomes = compile_variants(
        store, example.program, backend=examples.backend_by_name(backend_name),
        offset_provider=offset_provider,
    )
args, out = example.make_args(int(size), int(seed))
program(*args, offset_provider=offset_provider)
np.save(out_file, out.asnumpy())
print("WARNINGS " + json.dumps([str(w.message) for w in caught if "gtcache" in str(w.message)]))
print(json.dumps([{"status": o.status, "key": o.key, "detail": o.detail} for o in outcomes]))
"""


def run_python(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run ``code`` in a fresh interpreter; return its stdout; fail the test on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def can_give_pids() -> bool:
    """Whether this process may set the pid counter (``process_given_pid``: root, and a
    ``/proc/sys`` not mounted read-only)."""
    return os.access("/proc/sys/kernel/ns_last_pid", os.W_OK)


def process_given_pid(pid: int, user: int, *, session: bool = False) -> subprocess.Popen[bytes] | None:
    """A process of ``user`` (``sleep 60``; ``session``: leading a session of its own) that
    the kernel gave the free ``pid``, as pids are reused: the pid counter is set just below
    it (``ns_last_pid``). None when the pid is taken, or another fork took it first."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as counter:
        counter.write(str(pid - 1))
    proc = subprocess.Popen(["sleep", "60"], user=user, group=user, extra_groups=[], start_new_session=session)
    if proc.pid == pid:
        return proc
    proc.kill()
    proc.wait()
    return None


@contextlib.contextmanager
def loop_devices() -> Iterator[None]:
    """Held while a test loop-mounts images: ``make test`` runs the compatibility subset beside
    the suite, and a test that mounts two images in turn needs the same loop device for both
    (its files' identity holds the device number); another session's mount between them would
    take it."""
    with open("/tmp/gtcache-tests-loop-devices.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_in_mount_namespace(mount: str, code: str, *args: str, folder: pathlib.Path, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter in a mount namespace of its own (``unshare``, as root)
    after the shell command ``mount`` (a bind mount over ``/etc/resolv.conf``, a ``/proc`` in a
    jail: seen by that process only); its stdout. The script is written to ``folder``."""
    script = folder / "in_namespace.py"
    script.write_text(textwrap.dedent(code))
    quoted = " ".join(f"'{arg}'" for arg in args)
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", f"{mount} && exec {sys.executable} {script} {quoted}"],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def load_in_fresh_process(
    store: pathlib.Path,
    example: str,
    backend: str,
    *,
    seed: int,
    size: int,
    out_file: pathlib.Path,
    env: dict[str, str] | None = None,
    warnings: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Compile-or-load one variant through ``store`` in a new process; return its outcomes.

    ``warnings``, if given, receives the gtcache warnings the process gave.
    """
    stdout = run_python(
        CHILD_LOAD, str(store), example, backend, str(seed), str(size), str(out_file), env=env
    )
    lines = stdout.strip().splitlines()
    if warnings is not None:
        warnings += json.loads(next(line for line in lines if line.startswith("WARNINGS ")).removeprefix("WARNINGS "))
    outcomes: list[dict[str, Any]] = json.loads(lines[-1])
    return outcomes


def without_gt4py_build_cache(folder: pathlib.Path) -> dict[str, str]:
    """Environment for a child whose gt4py finds none of the session's builds (a fresh,
    empty build cache dropped at exit): a hit must come from the store alone."""
    return {"GT4PY_BUILD_CACHE_DIR": str(folder), "GT4PY_BUILD_CACHE_LIFETIME": "session"}


class Figures:
    """Figures the reliability and security suites measure: ``add(section, what, value)``;
    printed at the end of the session and written to ``build/reliability-figures.md``."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[str, Any]]] = {}

    def add(self, section: str, what: str, value: Any) -> None:
        self.rows.setdefault(section, []).append((what, value))

    def table(self) -> str:
        lines = ["| attack | measured | value |", "|---|---|---|"]
        lines += [f"| {section} | {what} | {value} |" for section, rows in self.rows.items() for what, value in rows]
        return "\n".join(lines) + "\n"

    def write(self, reporter: Any, folder: pathlib.Path) -> None:
        if not self.rows:
            return
        text = self.table()
        reporter.write_sep("=", "reliability and security figures")
        reporter.write(text)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "reliability-figures.md").write_text(text)
        except OSError:
            pass


def here() -> dict[str, Any]:
    """This environment's facts, recorded by synthetic entries: a bundle import skips entries
    built for another gt4py, so under gt4py 1.2.1 they must say 1.2.1."""
    from gtcache.toolchain import toolchain_facts

    return toolchain_facts("roundtrip")


def draft(name: str = "prog", backend: str = "run_gtfn_cpu", **ingredients: object) -> Any:
    """A synthetic roundtrip entry's draft (module ``tests.synthetic``, nothing compiled)."""
    from gtcache.keys import make_key
    from gtcache.store import EntryDraft

    ingredients = {"program_ir": name, "backend": backend, "backend_config": "x", **ingredients}
    facts = here()
    return EntryDraft(
        key=make_key("test", ingredients),
        ingredients=ingredients,
        program={"name": name, "module": "tests.synthetic"},
        backend={"name": backend, "options": {}},
        device={"type": "CPU", "arch": None},
        toolchain={fact: facts[fact] for fact in ("gt4py", "python_abi")},
        artifact={"kind": "roundtrip", "fields": {"source": "program.py", "entry_point_name": name,
                                                  "column_axis": None, "debug": False}},
        compile_seconds=1.5,
    )


def publish(store: Any, name: str = "prog", payload: bytes = b"print(1)\n", **kw: object) -> Any:
    """Publish a synthetic entry whose one payload file is ``program.py``."""
    return store.publish(draft(name, **kw), {"program.py": payload})


def validate(record: dict[str, Any]) -> None:
    """Validate an entry record against cache_schema (jsonschema is a test requirement)."""
    import jsonschema

    schema = pathlib.Path(__file__).parents[1] / "cache_schema/v1/entry.schema.json"
    jsonschema.validate(record, json.loads(schema.read_text()))


@contextlib.contextmanager
def tar_as_exported(out: pathlib.Path, fmt: int = tarfile.USTAR_FORMAT) -> Iterator[tarfile.TarFile]:
    """A hand-made ``.tar.gz`` in the framing ``gtcache export`` writes (its gzip header: no name,
    no time; members added with default headers are as export's): an import refuses any other
    framing first, before the check a test aims at."""
    with open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=fmt) as tar:
        yield tar


def gzip_as_exported(data: bytes) -> bytes:
    """``data`` gzipped with the header ``gtcache export`` writes (see ``tar_as_exported``; not
    ``gzip.compress``, which with ``mtime=0`` leaves the header to zlib: another OS byte)."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return out.getvalue()


def pythonpath(folder: pathlib.Path) -> str:
    """``PYTHONPATH`` for a child that imports a project from ``folder``, keeping the session's
    own (a checkout's ``src`` given there wins over an installed gtcache in the child too)."""
    return os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)


def tree_state(root: pathlib.Path, *, skip: str | None = None) -> list[tuple[str, int, int, bytes]]:
    """Every path under ``root`` (``root`` too; not the folder ``skip`` nor what it holds) with
    its mode, mtime (ns) and bytes (a file's content, a link's target): equal states mean
    nothing was written, removed or touched."""
    state = []
    for path in [root, *sorted(root.rglob("*"))]:
        if skip is not None and path.relative_to(root).parts[:1] == (skip,):
            continue
        info = path.lstat()
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes() if path.is_file() else b""
        state.append((str(path.relative_to(root)), info.st_mode, info.st_mtime_ns, data))
    return state


# -- a small gt4py project (three modules, a run script), run in fresh interpreters --------

CONSTS = """
from gt4py.eve.utils import FrozenNamespace

PHYS = FrozenNamespace(FACTOR={factor})
"""

OPS = """
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

from proj.consts import PHYS

IDim = gtx.Dimension("IDim")


@gtx.field_operator
def scale(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return {scale_body}
"""

PROG = """
{padding}import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

from proj.ops import IDim, scale
{own_constant}

@gtx.field_operator
def _shift_scale(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return scale(a) + {offset}


@gtx.program
def shift_scale(a: Field[Dims[IDim], float64], out: Field[Dims[IDim], float64]):
    _shift_scale(a, out=out)
"""

#: The user's script: plain gt4py, no gtcache import, default (process) runner.
RUN = """
import dataclasses, json, sys
import numpy as np
import gt4py.next as gtx
from gt4py.next.otf import runners
from proj.prog import shift_scale, IDim

def main():
    backend = {backend}
    a = gtx.as_field([IDim], np.arange(8.0))
    out = gtx.as_field([IDim], np.zeros(8))
    shift_scale.with_backend(backend)(a, out, offset_provider={{}})
    report = {{"out": out.asnumpy().tolist(), "worker_pool": runners._default_runner is not None}}
    if "gtcache" in sys.modules:
        from gtcache.gt4py import active_hook
        hook = active_hook()
        report["counts"] = dict(hook.counts) if hook else None
        from gtcache._frozen import asdict
        report["outcomes"] = [asdict(o) for o in hook.outcomes] if hook else []
    else:
        report["counts"] = None
    print("REPORT " + json.dumps(report))

if __name__ == "__main__":
    main()
"""

ROUNDTRIP = "gtx.itir_python"
ROUNDTRIP_NOT_EMBEDDED = (
    "dataclasses.replace(gtx.itir_python, executor=dataclasses.replace("
    "gtx.itir_python.executor, use_embedded=False))"
)


def write_project(
    root: pathlib.Path, *, factor: str = "2.0", scale_body: str = "PHYS.FACTOR * a",
    offset: str = "1.0", padding: int = 0, backend: str = ROUNDTRIP, own_constant: str | None = None,
) -> pathlib.Path:
    """``own_constant``: the value of ``OWN.OFFSET``, a module-level constant of prog.py
    (give ``offset="OWN.OFFSET"`` to use it)."""
    proj = root / "proj"
    proj.mkdir(parents=True, exist_ok=True)
    (proj / "__init__.py").write_text("")
    (proj / "consts.py").write_text(CONSTS.format(factor=factor))
    (proj / "ops.py").write_text(OPS.format(scale_body=scale_body))
    own = "" if own_constant is None else f"\nfrom gt4py.eve.utils import FrozenNamespace\n\nOWN = FrozenNamespace(OFFSET={own_constant})\n"
    (proj / "prog.py").write_text(PROG.format(padding="\n" * padding, offset=offset, own_constant=own))
    (root / "run.py").write_text(RUN.format(backend=backend))
    return root


def run_project(root: pathlib.Path, store: pathlib.Path | None, **env: str) -> dict:
    environ = {"PYTHONPATH": pythonpath(root), "PYTHONDONTWRITEBYTECODE": "1", **env}
    if store is not None:
        environ["GTCACHE_DIR"] = str(store)
    code = f"import runpy; runpy.run_path({str(root / 'run.py')!r}, run_name='__main__')"
    out = run_python(code, env=environ)
    line = next(l for l in out.splitlines() if l.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


def statuses(report: dict) -> list[tuple[str, str | None]]:
    return [(o["status"], o["via"]) for o in report["outcomes"]]


def expected(factor: float, offset: float) -> list[float]:
    return [factor * i + offset for i in range(8)]
