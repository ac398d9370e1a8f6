"""What a hit costs in files and imports, counted with an audit hook in a fresh process.

Times belong to ``make bench``; these counts do not depend on the machine's load, so a
regression (a directory listing, the SQLite index or the maintenance code on the lookup
path) fails here.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.conftest import SIZE, CompiledStore
from tests.helpers import run_python

pytestmark = pytest.mark.slow

#: The hook installs when gt4py.next is imported (GTCACHE_DIR); events are counted from
#: the first compile call to the end of wait_for_compilation.
CHILD = """
import collections, json, os, sys

WATCHED = ("diskcache", "sqlite3", "tomllib", "platformdirs")
OURS = ("gtcache.policies", "gtcache.warm", "gtcache.explain", "gtcache.store._diskcache", "gtcache.store._index",
        "gtcache.store._catalog", "gtcache.store._scan", "gtcache.store._ledger", "gtcache.store._lock")


def watched_modules():
    return sorted(m for m in sys.modules if m.split(".")[0] in WATCHED or m.startswith(OURS))


def our_data_classes():
    # gtcache's data classes loaded so far (not the example programs this script runs): each
    # cost 0.4-1 ms to make (see gtcache._frozen).
    return sorted(
        f"{name}.{attr}" for name, module in list(sys.modules.items())
        if name.startswith("gtcache") and name != "gtcache.examples"
        for attr, value in vars(module).items()
        if isinstance(value, type) and value.__module__ == name and "__dataclass_fields__" in value.__dict__
    )


def main():
    import gt4py.next
    if sys.argv[1] == "--baseline":  # what gt4py alone imports (gt4py 1.2.1 imports tomllib itself)
        print("RESULT " + json.dumps({"modules": watched_modules()}))
        return
    from gt4py.next.otf import compiled_program
    from gtcache import examples

    example = examples.EXAMPLES[sys.argv[1]]
    bound = example.program.with_backend(examples.backend_by_name(sys.argv[2]))
    provider = example.offset_provider(int(sys.argv[3]))
    store = sys.argv[4]
    seen = collections.defaultdict(list)
    watching = [True]

    def audit(event, args):
        if watching[0] and event in ("builtins.id", "object.__getattr__"):
            watching[0] = False  # (reading the caller's frame raises events too)
            try:
                if "/gtcache/" in sys._getframe(1).f_code.co_filename:
                    seen["ours " + event].append(str(args[1]) if event == "object.__getattr__" else "")
            finally:
                watching[0] = True
        if watching[0] and event in ("open", "os.listdir", "os.scandir", "sqlite3.connect"):
            seen[event].append(str(args[0]) if args else "")
            if event == "open" and len(args) > 2 and isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR):
                seen["write"].append(str(args[0]))

    sys.addaudithook(audit)
    before = set(sys.modules)
    bound.compile(offset_provider=provider)
    compiled_program.wait_for_compilation()
    watching[0] = False
    from gtcache.gt4py import active_hook

    print("RESULT " + json.dumps({
        "statuses": [o.status for o in active_hook().outcomes],
        "in_store": {event: [p for p in paths if p.startswith(store)] for event, paths in seen.items()},
        "sqlite": len(seen["sqlite3.connect"]),
        "audited": {event.removeprefix("ours "): paths for event, paths in seen.items() if event.startswith("ours ")},
        "modules": watched_modules(),
        "new_modules": len(set(sys.modules) - before),
        "data_classes": our_data_classes(),
    }))

if __name__ == "__main__":
    main()
"""

#: The files a hit reads in the store besides facts: the layout marker, the direct link,
#: entry.json.
_MAX_METADATA_OPENS = 3
#: The facts files it reads: the main one and the program's shard.
_MAX_FACTS_OPENS = 2
#: The reads of a function's ``__code__`` (an audited call) a hit makes in gtcache's code: one
#: for the program's facts shard, one for each function keyed (each example: the program and
#: its field operator). Each function's keying read it four times before (9 in all).
_MAX_CODE_READS = 3


@pytest.mark.parametrize("example, backend", [("axpy", "gtfn_cpu"), ("edge_diff", "roundtrip")])
def test_a_hit_lists_no_folder_opens_no_index_and_imports_no_maintenance_code(
    compiled_store: CompiledStore, store_copy: pathlib.Path, tmp_path: pathlib.Path, example: str, backend: str,
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)

    def child(*args: str, **env: str) -> dict:
        out = run_python(
            f"import runpy, sys; sys.argv = {[str(script), *args]!r}; runpy.run_path(sys.argv[0], run_name='__main__')",
            env=env,
        )
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))

    gt4py_alone = set(child("--baseline")["modules"])
    # The first process of an environment may store what it computed (facts/, nothing else);
    # the next one reads it and writes nothing.
    first = child(example, backend, str(SIZE), str(store_copy), GTCACHE_DIR=str(store_copy))
    assert first["statuses"] == ["hit"], first
    assert all("/facts/" in path for path in first["in_store"].get("write", [])), first["in_store"]
    report = child(example, backend, str(SIZE), str(store_copy), GTCACHE_DIR=str(store_copy))
    assert report["statuses"] == ["hit"], report
    in_store = report["in_store"]
    assert not in_store.get("write"), in_store
    assert any("/facts/" in path for path in in_store["open"]), "the facts file is read"
    assert not in_store.get("os.listdir") and not in_store.get("os.scandir"), in_store
    assert report["sqlite"] == 0, "a hit never opens the index"
    entry = compiled_store.variant(example, backend).key
    payload_opens = [p for p in in_store["open"] if f"/{entry}/" in p and not p.endswith("/entry.json")]
    facts_opens = [p for p in in_store["open"] if "/facts/" in p]
    metadata_opens = [p for p in in_store["open"] if p not in payload_opens and p not in facts_opens]
    assert len(metadata_opens) <= _MAX_METADATA_OPENS, metadata_opens
    assert len(facts_opens) <= _MAX_FACTS_OPENS and len(set(facts_opens)) == len(facts_opens), facts_opens
    assert payload_opens, "the payload is checked against its checksums before loading"
    ours = sorted(set(report["modules"]) - gt4py_alone)
    assert ours == [], "imported on the hit path: " + ", ".join(ours)
    assert report["data_classes"] == [], "data classes made on the hit path (Frozen costs nothing to make)"
    # An audit hook written in Python (gt4py's filelock installs one) runs at every audited
    # call: gtcache's code makes none that it can avoid (``_compat.identity``).
    audited = report["audited"]
    assert not audited.get("builtins.id"), f"{len(audited['builtins.id'])} id() calls on the hit path"
    assert len(audited.get("object.__getattr__", [])) <= _MAX_CODE_READS, audited


REMOVED_WORKING_FOLDER = """
import json, os, sys, tempfile
import gt4py.next
from gt4py.next.otf import compiled_program
from gtcache import examples
from gtcache.gt4py import active_hook

if "" not in sys.path:  # the working folder, as 'python -c' puts it (the facts name it by its absolute name)
    sys.path.insert(0, "")
folder = tempfile.mkdtemp()
os.chdir(folder)
os.rmdir(folder)  # os.getcwd() fails from here on
example = examples.EXAMPLES[sys.argv[1]]
bound = example.program.with_backend(examples.backend_by_name(sys.argv[2]))
bound.compile(offset_provider=example.offset_provider(int(sys.argv[3])))
compiled_program.wait_for_compilation()
print("RESULT " + json.dumps([o.status for o in active_hook().outcomes]))
"""


def test_a_hit_in_a_removed_working_folder_is_a_hit(compiled_store: CompiledStore, store_copy: pathlib.Path) -> None:
    """A process whose working folder (on ``sys.path`` as '') was removed still hits: the facts
    cannot name that folder, so they neither use nor keep a listing of it."""
    for _ in range(2):  # the first process may store facts, the second reads them
        out = run_python(REMOVED_WORKING_FOLDER, "axpy", "gtfn_cpu", str(SIZE), env={"GTCACHE_DIR": str(store_copy)})
        assert json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT ")) == ["hit"], out
