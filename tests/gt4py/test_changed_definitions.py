"""A definition changed in a running process, after gt4py parsed it: gtcache serves what gt4py
alone would run, and never links a direct key to a build of another definition.

gt4py parses a field operator when it is decorated (its closure values folded in) and a
program again for each new ``Program`` object; the direct key reads the definitions when a
variant is looked up. Each scenario changes something in between, in a process of its own,
then a fresh process runs the changed project as it now is: before the fix, the first process
linked the new definition's direct key to the old build, and the fresh one was served it.
The roundtrip backend keeps compiles cheap (the keys do not depend on the backend).
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Callable

import pytest

from tests.helpers import expected, pythonpath, run_python, write_project

pytestmark = pytest.mark.slow

#: Runs ``proj``'s program once or twice (``sys.argv[1]`` says what changes before the second
#: call, or before the only one); prints each call's output and the hook's outcomes.
SCRIPT = """
import json, pathlib, sys
import numpy as np
import gt4py.next as gtx
from gt4py.eve.utils import FrozenNamespace
from proj import ops, prog

def call():
    a = gtx.as_field([ops.IDim], np.arange(8.0))
    out = gtx.as_field([ops.IDim], np.zeros(8))
    prog.shift_scale.with_backend(gtx.itir_python)(a, out, offset_provider={})  # a new Program
    return out.asnumpy().tolist()

def edit(module, old, new):
    path = pathlib.Path(module.__file__)
    path.write_text(path.read_text().replace(old, new))

change, outs = sys.argv[1], []
if change == "rebind":  # a test's monkeypatch, a notebook cell: scale's closure value
    ops.PHYS = FrozenNamespace(FACTOR=3.0)
elif change == "edit-before-call":  # the file edited after the import (no reload)
    edit(ops, "return PHYS.FACTOR * a", "return PHYS.FACTOR * -a")
elif change == "edit-after-call":  # the program's own text, read again for a new Program
    outs.append(call())
    edit(prog, "_shift_scale(a, out=out)", "_shift_scale(out, out=out)")  # the same names
outs.append(call())
from gtcache.gt4py import active_hook
print("REPORT " + json.dumps({"outs": outs, "outcomes": [(o.status, o.via) for o in active_hook().outcomes]}))
"""


def run(project: pathlib.Path, store: pathlib.Path, change: str) -> dict:
    env = {"PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store)}
    out = run_python(SCRIPT, change, env=env)
    return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("change", "in_process", "rewrite", "fresh", "fresh_outcome"),
    [
        # gt4py folded PHYS.FACTOR = 2.0 into scale when decorating it.
        ("rebind", [expected(2.0, 1.0)], {"factor": "3.0"}, expected(3.0, 1.0), ["compiled", None]),
        ("edit-before-call", [expected(2.0, 1.0)], {"scale_body": "PHYS.FACTOR * -a"}, expected(-2.0, 1.0),
         ["compiled", None]),
        # The first call is served; the second is of the edited program (out = 2 * out + 1),
        # compiled and stored by its build key, which the fresh process finds after lowering.
        ("edit-after-call", [expected(2.0, 1.0), [1.0] * 8], None, [1.0] * 8, ["hit", "build"]),
    ],
)
def test_a_definition_changed_after_gt4py_parsed_it(
    tmp_path: pathlib.Path, change: str, in_process: list, rewrite: dict | None, fresh: list, fresh_outcome: list
) -> None:
    store, project = tmp_path / "store", write_project(tmp_path / "p")
    first = run(project, store, "none")  # the project's build is in the store
    assert first["outs"] == [expected(2.0, 1.0)] and first["outcomes"] == [["compiled", None]], first

    changed = run(project, store, change)
    assert changed["outs"] == in_process, "gtcache serves what gt4py alone runs"
    if rewrite is not None:
        write_project(project, **rewrite)
    later = run(project, store, "none")
    assert later["outs"] == [fresh], f"a fresh process runs the project as it now is: {later}"
    assert later["outcomes"] == [fresh_outcome], later


OPERATOR_SCRIPT = """
import json
import numpy as np
import gt4py.next as gtx
from proj import ops

a = gtx.as_field([ops.IDim], np.arange(8.0))
out = gtx.as_field([ops.IDim], np.zeros(8))
ops.scale.with_backend(gtx.itir_python)(a, out=out, offset_provider={})
from gtcache.gt4py import active_hook
print("REPORT " + json.dumps({"out": out.asnumpy().tolist(), "outcomes": [(o.status, o.via) for o in active_hook().outcomes]}))
"""


def test_a_field_operator_called_directly_is_linked_as_a_program_is(tmp_path: pathlib.Path) -> None:
    """Its definition is a field operator's (gt4py keeps its ``func_to_foast`` parse, not a
    program's): unchanged, the direct link is written and the next process hits it."""
    store, project = tmp_path / "store", write_project(tmp_path / "p")
    env = {"PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(store)}
    reports = [
        json.loads(next(l for l in run_python(OPERATOR_SCRIPT, env=env).splitlines() if l.startswith("REPORT ")).removeprefix("REPORT "))
        for _ in range(2)
    ]
    assert [r["out"] for r in reports] == [expected(2.0, 0.0)] * 2
    assert [r["outcomes"] for r in reports] == [[["compiled", None]], [["hit", "direct"]]], reports


#: Runs ``proj``'s program once and reports; ``edit`` first appends a comment to a file of the
#: gt4py it imported (from a checkout, as a GT4Py developer's): an edit saved while the process
#: runs; ``edit-fork`` the same, then runs the program in a forked child (which runs what the
#: parent imported); ``edit-keep-mtime`` puts the file's old times back after the edit (only its
#: change time shows it).
GT4PY_EDIT_SCRIPT = """
import json, multiprocessing, os, pathlib, sys, warnings
import numpy as np
import gt4py.next as gtx
from proj import ops

def call():
    a = gtx.as_field([ops.IDim], np.arange(8.0))
    out = gtx.as_field([ops.IDim], np.zeros(8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops.scale.with_backend(gtx.itir_python)(a, out=out, offset_provider={})
    from gtcache.gt4py import active_hook
    return {"out": out.asnumpy().tolist(), "outcomes": [o.status for o in active_hook().outcomes],
            "warnings": [str(w.message) for w in caught if "gtcache" in str(w.message)]}

if sys.argv[1].startswith("edit"):
    path = pathlib.Path(gtx.__file__).parent / "program_processors" / "runners" / "roundtrip.py"
    before = path.stat()
    path.write_text(path.read_text() + "\\n# an edit\\n")
if sys.argv[1] == "edit-keep-mtime":  # the old times put back, as cp -p, rsync -a or tar x do
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
if sys.argv[1] == "edit-fork":
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=lambda: queue.put(call()))
    child.start()
    report = queue.get(timeout=600)
    child.join()
else:
    report = call()
print("REPORT " + json.dumps(report))
"""


@pytest.mark.parametrize("edit", ["edit", "edit-fork", "edit-keep-mtime"])
def test_a_gt4py_checkout_edited_while_a_process_runs(tmp_path: pathlib.Path, edit: str) -> None:
    """The process runs the gt4py it imported; its files now hold other code. Keyed by the files
    (``gt4py_sources``), what it builds would be stored, and served to the next process, as the
    edited code's: it compiles without the cache (one warning), and the next process compiles
    the edited code (before, it was served the first one's build). A forked child runs what its
    parent imported: the same (it was missed when the child counted from its own start). A
    checkout written just before a process starts (``git checkout x && python``) is what the
    process imports: cached (it was not, when the start was taken less a margin). An edit whose
    file is given its old modification time back (``cp -p``, ``rsync -a``, ``tar x``) is seen by
    its change time (by the modification time, the process was not told, and stored its build
    as the edited code's)."""
    import shutil

    import gt4py

    checkout = tmp_path / "src"
    shutil.copytree(pathlib.Path(gt4py.__file__).parent, checkout / "gt4py", ignore=shutil.ignore_patterns("__pycache__"))
    store, project = tmp_path / "store", write_project(tmp_path / "p")
    env = {"PYTHONPATH": f"{checkout}{os.pathsep}{pythonpath(project)}", "PYTHONDONTWRITEBYTECODE": "1",
           "GTCACHE_DIR": str(store)}

    def run_once(change: str) -> dict:
        out = run_python(GT4PY_EDIT_SCRIPT, change, env=env)
        return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))  # type: ignore[no-any-return]

    (checkout / "gt4py" / "__init__.py").touch()  # right before the process: not an edit it missed
    assert run_once("none")["outcomes"] == ["compiled"]
    edited = run_once(edit)
    assert edited["out"] == expected(2.0, 0.0)
    assert edited["outcomes"] == ["bypassed"], edited
    assert len(edited["warnings"]) == 1 and "roundtrip.py' changed since this process imported gt4py" in edited["warnings"][0]
    after = [run_once("none") for _ in range(2)]
    assert [r["outcomes"] for r in after] == [["compiled"], ["hit"]], after
    assert [r["out"] for r in after] == [expected(2.0, 0.0)] * 2


#: Imports ``proj``, edits its operator, and only then installs gtcache (no start-up hook:
#: ``GTCACHE_DIR`` unset), as a notebook or a script that calls ``gtcache.install`` late does.
LATE_INSTALL_SCRIPT = """
import json, pathlib, sys
import numpy as np
import gt4py.next as gtx
from proj import ops, prog

path = pathlib.Path(ops.__file__)
path.write_text(path.read_text().replace("return PHYS.FACTOR * a", "return PHYS.FACTOR * -a"))
import gtcache.gt4py
hook = gtcache.gt4py.install(sys.argv[1])
a = gtx.as_field([ops.IDim], np.arange(8.0))
out = gtx.as_field([ops.IDim], np.zeros(8))
prog.shift_scale.with_backend(gtx.itir_python)(a, out, offset_provider={})
print("REPORT " + json.dumps({"out": out.asnumpy().tolist(), "outcomes": [(o.status, o.via) for o in hook.outcomes]}))
"""


def test_a_definition_edited_before_a_late_install(tmp_path: pathlib.Path) -> None:
    """gt4py parsed the operator when it was imported; its file was edited before gtcache was
    installed. The direct key reads the file's new text, which a process running that text has
    linked: served that build, this process ran what gt4py alone would not (the edit counted
    only from the install's time, not from when the process could have read the file)."""
    store = tmp_path / "store"
    edited = write_project(tmp_path / "edited", scale_body="PHYS.FACTOR * -a")
    linked = [run(edited, store, "none") for _ in range(2)]
    assert [r["outcomes"] for r in linked] == [[["compiled", None]], [["hit", "direct"]]], linked
    project = write_project(tmp_path / "p")
    time.sleep(0.05)  # the project is written before the process starts
    env = {"PYTHONPATH": pythonpath(project), "PYTHONDONTWRITEBYTECODE": "1"}
    out = run_python(LATE_INSTALL_SCRIPT, str(store), env={**env, "GTCACHE_DIR": ""})
    late = json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))
    assert late["out"] == expected(2.0, 1.0), "what gt4py parsed when the operator was imported"
    assert late["outcomes"] == [["compiled", None]], late


RACE_MODULE = """
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")

@gtx.field_operator
def fo(a: Field[Dims[IDim], float64], factor: float64) -> Field[Dims[IDim], float64]:
    return factor * a + 100.0
fo_b = fo  # (gt4py wants a called operator's name to be the one it is called by)

@gtx.field_operator
def fo(a: Field[Dims[IDim], float64], factor: float64) -> Field[Dims[IDim], float64]:
    return factor * a

@gtx.program
def prog(a: Field[Dims[IDim], float64], factor: float64, out: Field[Dims[IDim], float64]) -> None:
    fo(a, factor, out=out)
"""

#: Compiles ``race.prog`` for the factors given, in one ``compile()`` call (its variants share
#: one reading of the definition), then calls it for each. With ``rebind``, ``race.fo`` is
#: rebound to ``fo_b`` as gt4py starts the call's second variant; with ``edit`` the program's
#: file is edited then; with ``rebind-jit`` (no ``compile()``: the call compiles) ``race.fo``
#: is rebound while gtcache looks the variant up. As another thread could, unseen by gtcache:
#: by a profile function (callbacks of gt4py's ``compile_variant_hook`` would turn the sharing off).
RACE_SCRIPT = """
import json, sys, warnings
import numpy as np
import gt4py.next as gtx
from gt4py.next.otf import compiled_program
import race
from gtcache.gt4py import active_hook

change, factors = sys.argv[1], [float(f) for f in sys.argv[2].split(",")]
where, when = {"rebind": ("_compile_variant", 2), "edit": ("_compile_variant", 2),
               "rebind-jit": ("build_key_of", 1)}.get(change, (None, 0))  # ("jit": no compile(), no change)
seen = []

def profile(frame, event, arg):
    if event != "call" or frame.f_code.co_name != where:
        return
    seen.append(1)
    if len(seen) == when and change.startswith("rebind"):
        race.fo = race.fo_b
    elif len(seen) == when and change == "edit":  # the program's text (gt4py reads it for each variant)
        with open(race.__file__) as f:
            text = f.read()
        with open(race.__file__, "w") as f:
            f.write(text.replace("fo(a, factor, out=out)", "fo(out, factor, out=out)"))

bound = race.prog.with_backend(gtx.itir_python)
caught = warnings.catch_warnings(record=True)
said = caught.__enter__()
warnings.simplefilter("always")
sys.setprofile(profile)
if not change.endswith("jit"):
    bound.compile(offset_provider={}, factor=factors)
    compiled_program.wait_for_compilation()
a = gtx.as_field([race.IDim], np.arange(4.0))
outs = []
for factor in factors:
    out = gtx.as_field([race.IDim], np.zeros(4))
    bound(a, factor, out, offset_provider={})
    outs.append(out.asnumpy().tolist())
sys.setprofile(None)
print("REPORT " + json.dumps({"outs": outs, "outcomes": [(o.status, o.via) for o in active_hook().outcomes],
                              "warnings": [str(w.message) for w in said if "gtcache" in str(w.message)]}))
"""


def racing(folder: pathlib.Path) -> Callable[..., dict]:
    """Writes ``race.py`` into ``folder`` (settled: older than the processes' start, also where
    times are whole seconds); a function running ``RACE_SCRIPT`` with a store there."""
    (folder / "race.py").write_text(RACE_MODULE)
    time.sleep(1.1)

    def run(change: str, factors: str, **env: str) -> dict:
        env = {"PYTHONPATH": pythonpath(folder), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(folder / "store"), **env}
        out = run_python(RACE_SCRIPT, change, factors, env=env)
        return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))  # type: ignore[no-any-return]

    return run


@pytest.mark.parametrize(("change", "plain"), [("rebind", "none"), ("rebind-jit", "jit")])
def test_a_definition_changed_while_a_variant_is_looked_up(tmp_path: pathlib.Path, change: str, plain: str) -> None:
    """The program's field operator is rebound after a variant's direct key was read and before
    gt4py lowers it: between two variants of one ``compile()`` call (whose variants share one
    reading of the definition), or while gtcache looks up a variant a call of the program
    compiles. gt4py lowers the new operator; the variant's direct link is written only if a
    reading once lowered gives the key it was looked up with, so a fresh process with the module
    as written is never served the rebound operator's build (it was: ``3 * a + 100`` for
    ``3 * a``, found by two reviews; the second case is older than the sharing)."""
    run, a = racing(tmp_path), [0.0, 1.0, 2.0, 3.0]
    raced = run(change, "2.0,3.0")  # (called, the program has one variant: factor is not static)
    assert raced["outcomes"] == [["compiled", None]] * (2 if change == "rebind" else 1), raced
    assert raced["outs"] == [[2 * x + 100 * (change == "rebind-jit") for x in a], [3 * x + 100 for x in a]], (
        "what gt4py alone compiles"
    )
    fresh = run(plain, "3.0")
    assert fresh["outs"] == [[3 * x for x in a]], f"the module as written: {fresh}"
    assert fresh["outcomes"] == [["compiled", None]], fresh
    again = run(plain, "3.0")  # now stored and linked under the definition as written
    assert again["outs"] == [[3 * x for x in a]] and again["outcomes"] == [["hit", "direct"]], again


def test_a_file_edited_between_the_variants_of_one_compile_call(tmp_path: pathlib.Path) -> None:
    """The program's file is edited between the first and second variant of a call whose first
    variant was served: the second lowers (a miss), its reading once lowered finds the file
    changed since the process started (no direct key, as outside a call), and the third,
    stored under the definition as it was, is not served by the call's first reading either:
    gt4py alone compiles the edited program for both (``fo(out, ...)`` into zeros)."""
    run, a = racing(tmp_path), [0.0, 1.0, 2.0, 3.0]
    assert run("none", "1.0,3.0")["outcomes"] == [["compiled", None]] * 2
    raced = run("edit", "1.0,2.0,3.0")
    assert raced["outcomes"] == [["hit", "direct"], ["compiled", None], ["compiled", None]], raced
    assert raced["outs"] == [a, [0.0] * 4, [0.0] * 4], raced
    assert raced["warnings"] == [], raced

    # The same in self-check mode (it lowers every hit: the call's reading is never shared):
    # the link of factor 3 names the file as it was, and is no self-check failure (it was).
    (tmp_path / "race.py").write_text(RACE_MODULE)
    time.sleep(1.1)
    checked = run("edit", "1.0,3.0", GTCACHE_SELF_CHECK="1")
    assert checked["outcomes"] == [["hit", "direct"], ["hit", "build"]], checked  # (the edited build is stored)
    assert checked["outs"] == [a, [0.0] * 4] and checked["warnings"] == [], checked


#: ``mid`` calls ``fo``, defined twice (``fo_b`` keeps the first), and ``prog`` calls ``mid``;
#: ``{first}`` is dropped to leave only the first ``fo``.
REBOUND_CALLEE_MODULE = """
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")

@gtx.field_operator
def fo(a: Field[Dims[IDim], float64], factor: float64) -> Field[Dims[IDim], float64]:
    return factor * a + 100.0
fo_b = fo
{second}
@gtx.field_operator
def mid(a: Field[Dims[IDim], float64], factor: float64) -> Field[Dims[IDim], float64]:
    return fo(a, factor)

@gtx.program
def prog(a: Field[Dims[IDim], float64], factor: float64, out: Field[Dims[IDim], float64]) -> None:
    mid(a, factor, out=out)
"""

SECOND_FO = """
@gtx.field_operator
def fo(a: Field[Dims[IDim], float64], factor: float64) -> Field[Dims[IDim], float64]:
    return factor * a
"""

#: Calls ``race.prog`` once (``rebind``: after ``race.fo = race.fo_b``); reports its output,
#: the outcomes and whether gtcache finds the program parsed as defined.
REBOUND_CALLEE_SCRIPT = """
import json, sys
import numpy as np
import gt4py.next as gtx
import race
from gtcache.gt4py import _compat, active_hook

if sys.argv[1] == "rebind":
    race.fo = race.fo_b
a = gtx.as_field([race.IDim], np.arange(4.0))
out = gtx.as_field([race.IDim], np.zeros(4))
race.prog.with_backend(gtx.itir_python)(a, 3.0, out, offset_provider={})
as_defined = _compat.parsed_as_defined(gtx.itir_python, race.prog.definition_stage)
print("REPORT " + json.dumps({"out": out.asnumpy().tolist(), "as_defined": as_defined,
                              "outcomes": [(o.status, o.via) for o in active_hook().outcomes]}))
"""


def test_a_callee_rebound_to_an_operator_parsed_alike_after_gt4py_parsed_its_caller(tmp_path: pathlib.Path) -> None:
    """``mid`` was parsed when decorated, with the ``fo`` of then (``factor * a``); ``race.fo``
    is rebound to ``fo_b`` (``factor * a + 100``), whose call parses to the same tree. gt4py runs
    ``mid``'s kept parse; the direct key reads ``fo_b``: the parse is not as defined (the closure
    values differ, by identity), and no direct link is written. A fresh process whose ``race.py``
    holds ``fo_b``'s definition alone compiles it (it was served the first build: no ``+ 100``)."""
    def run(change: str) -> dict:
        env = {"PYTHONPATH": pythonpath(tmp_path), "PYTHONDONTWRITEBYTECODE": "1", "GTCACHE_DIR": str(tmp_path / "store")}
        out = run_python(REBOUND_CALLEE_SCRIPT, change, env=env)
        return json.loads(next(line for line in out.splitlines() if line.startswith("REPORT ")).removeprefix("REPORT "))  # type: ignore[no-any-return]

    (tmp_path / "race.py").write_text(REBOUND_CALLEE_MODULE.format(second=SECOND_FO))
    time.sleep(1.1)  # settled before the process starts (also where times are whole seconds)
    rebound = run("rebind")
    assert rebound["out"] == [0.0, 3.0, 6.0, 9.0], "what gt4py alone runs: mid's kept parse"
    assert rebound["outcomes"] == [["compiled", None]] and rebound["as_defined"] is False, rebound

    (tmp_path / "race.py").write_text(REBOUND_CALLEE_MODULE.format(second=""))
    time.sleep(1.1)
    fresh = run("none")
    assert fresh["out"] == [100.0, 103.0, 106.0, 109.0], f"the module as written: {fresh}"
    assert fresh["outcomes"] == [["compiled", None]] and fresh["as_defined"] is True, fresh
