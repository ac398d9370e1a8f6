"""The facts files (``facts/<environment>.json`` and its shards ``<environment>-<xx>.json``): a
stored fact is used only while what it depends on is unchanged, self-check mode catches one
that lies, and a process reads only the shards its programs need.

Each process here is fresh (``run_python``): what one process stores, the next reads.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import time

import pytest

from gtcache.gt4py import _compat, _facts
from tests.helpers import run_python

#: Prints, per backend, the fingerprint the key uses (through the store's facts) and the one
#: gt4py's fingerprinting computes, plus the warnings raised.
CHILD = """
import json, sys, warnings
import gtcache
from gtcache.examples import backend_by_name
from gtcache.gt4py import _compat, _facts

store = gtcache.open_store(sys.argv[1])
backends = {name: backend_by_name(name) for name in ("gtfn_cpu", "dace_cpu", "roundtrip")}
if len(sys.argv) > 3 and sys.argv[3] == "release-in-process":
    from gt4py.next import config
    backends["gtfn_cpu"] = _compat.gtfn_backend(config.CMakeBuildType.RELEASE)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _facts.use(store, verify=sys.argv[2] == "verify")
    out = {name: {"used": _facts.backend_config(b), "computed": _compat.backend_fingerprint(b)}
           for name, b in backends.items()}
print("RESULT " + json.dumps({"backends": out, "warnings": [str(w.message) for w in caught]}))
"""


def child(store: pathlib.Path, mode: str = "plain", *extra: str, **env: str) -> dict:
    out = run_python(CHILD, str(store), mode, *extra, env=env)
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def facts_files(store: pathlib.Path) -> list[pathlib.Path]:
    """The main facts files (backend fingerprints, versions), one per environment."""
    return sorted(path for path in (store / "facts").glob("*.json") if "-" not in path.stem)


def shard_files(store: pathlib.Path) -> list[pathlib.Path]:
    """The shards (definitions, sources), named by the first two hex digits of a digest of
    their programs' source files' names."""
    return sorted((store / "facts").glob("*-??.json"))


def stored(store: pathlib.Path, table: str) -> dict[str, tuple[pathlib.Path, object]]:
    """Every fact of ``table`` ("definitions" or "sources") in the shards: key -> (its shard, value)."""
    found = {}
    for shard in shard_files(store):
        for key, value in json.loads(shard.read_text())[table].items():
            found[key] = (shard, value)
    return found


def plant(shard: pathlib.Path, table: str, key: str, value: object) -> None:
    data = json.loads(shard.read_text())
    data[table][key] = value
    shard.write_text(json.dumps(data))


def test_a_stored_backend_fingerprint_is_read_back_as_computed(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    first = child(store)
    assert all(b["used"] == b["computed"] for b in first["backends"].values()), first
    [facts] = facts_files(store)
    stored = json.loads(facts.read_text())["backend_config"]
    assert sorted(stored.values()) == sorted(b["computed"] for b in first["backends"].values())
    # The next process reads them (proof: a value planted in the file is what it uses).
    planted = {digest: f"{i:016x}" for i, digest in enumerate(stored)}
    facts.write_text(json.dumps({**json.loads(facts.read_text()), "backend_config": planted}))
    second = child(store)
    assert sorted(b["used"] for b in second["backends"].values()) == sorted(planted.values())
    assert second["warnings"] == []


def test_self_check_computes_every_stored_fact_and_warns_when_one_differs(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    child(store)
    [facts] = facts_files(store)
    data = json.loads(facts.read_text())
    data["backend_config"] = {digest: "0" * 16 for digest in data["backend_config"]}
    facts.write_text(json.dumps(data))
    checked = child(store, "verify")
    assert all(b["used"] == b["computed"] for b in checked["backends"].values()), checked
    assert len([w for w in checked["warnings"] if "stored fingerprint of backend" in w]) == 3, checked["warnings"]


@pytest.mark.slow
@pytest.mark.parametrize("change", ["environment", "in-process"])
def test_a_changed_build_option_changes_the_fingerprint(tmp_path: pathlib.Path, change: str) -> None:
    store = tmp_path / "store"
    debug = child(store, GT4PY_CMAKE_BUILD_TYPE="debug")["backends"]
    if change == "environment":
        release = child(store, GT4PY_CMAKE_BUILD_TYPE="release")["backends"]
    else:
        release = child(store, "plain", "release-in-process", GT4PY_CMAKE_BUILD_TYPE="debug")["backends"]
    for backend in ("gtfn_cpu",) + (("dace_cpu",) if change == "environment" else ()):
        assert release[backend]["used"] == release[backend]["computed"]
        assert release[backend]["used"] != debug[backend]["used"], backend
    assert release["roundtrip"]["used"] == debug["roundtrip"]["used"]  # no build, no build type


@pytest.mark.slow
def test_a_damaged_facts_file_is_ignored_and_rewritten(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    child(store)
    [facts] = facts_files(store)
    facts.write_text("{not json")
    again = child(store)
    assert all(b["used"] == b["computed"] for b in again["backends"].values())
    assert json.loads(facts.read_text())["format"] == "gtcache-facts"


@pytest.mark.slow
@pytest.mark.parametrize("swept_at", ["1" + "0" * 400, "-1e999", "true"])
def test_a_stored_time_of_any_value_is_ignored(tmp_path: pathlib.Path, swept_at: str) -> None:
    """The main file's ``swept_at`` is JSON: a number too large for a float (``float(10**400)``
    raises) once made every lookup fail, for good (nothing rewrote the file). A value that is
    not a finite time is ignored; the other facts are read as stored."""
    store = tmp_path / "store"
    child(store)
    [facts] = facts_files(store)
    data = json.loads(facts.read_text())
    facts.write_text(json.dumps({**data, "swept_at": None}).replace('"swept_at": null', f'"swept_at": {swept_at}'))
    again = child(store)
    assert not again["warnings"] and all(b["used"] == b["computed"] for b in again["backends"].values()), again
    assert _facts._epoch(json.loads(facts.read_text()).get("swept_at")) is None  # (as planted: nothing new)


def test_backend_digest_sees_options_and_not_identity() -> None:
    from gt4py.next import config
    from gt4py.next.program_processors.runners import gtfn

    default = _compat.backend_digest(gtfn.run_gtfn)
    assert default is not None
    assert _compat.backend_digest(_compat.gtfn_backend()) == default  # a new, equal object
    other_type = next(t for t in config.CMakeBuildType if t != config.CMAKE_BUILD_TYPE)
    assert _compat.backend_digest(_compat.gtfn_backend(other_type)) != default
    assert _compat.backend_digest(gtfn.run_gtfn_no_transforms) != default  # a partial's keyword


VERSIONS = """
import json, os, sys
import gtcache
from gtcache import toolchain
from gtcache.gt4py import _facts
seen = {"listed": [], "written": []}

def audit(event, args):
    if event == "os.listdir":
        seen["listed"].append(os.path.abspath(args[0]))
    elif event == "open" and isinstance(args[2], int) and args[2] & os.O_WRONLY and "/facts/" in str(args[0]):
        seen["written"].append(str(args[0]))

sys.addaudithook(audit)
_facts.use(gtcache.open_store(sys.argv[1]))
facts = toolchain.toolchain_facts("gtfn")
_facts.remember_versions()
print("RESULT " + json.dumps({"nanobind": facts["nanobind"], **seen}))
"""


@pytest.mark.slow
def test_stored_versions_are_used_per_path_folder_while_it_is_unchanged(tmp_path: pathlib.Path) -> None:
    store, extra, other = tmp_path / "store", tmp_path / "on-path", tmp_path / "a-script-folder"
    extra.mkdir()
    other.mkdir()
    time.sleep(_facts._TOO_RECENT + 0.1)  # a folder changed within that time is listed, never kept

    def versions(*folders: pathlib.Path) -> dict:
        path = ":".join([*map(str, folders), os.environ.get("PYTHONPATH", "")])
        out = run_python(VERSIONS, str(store), env={"PYTHONPATH": path})
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    first = versions(extra)
    assert str(extra) in first["listed"] and first["written"], first
    [facts] = facts_files(store)
    data = json.loads(facts.read_text())
    holding = [name for name, folder in data["folders"].items() if "nanobind" in folder["versions"]]
    assert len(holding) == 1 and data["folders"][holding[0]]["versions"]["nanobind"] == first["nanobind"]
    assert data["folders"][str(extra)]["versions"] == {}
    data["folders"][holding[0]]["versions"]["nanobind"] = "0.0.planted"
    facts.write_text(json.dumps(data))
    # Read from the file: the folders are as they were. Nothing listed, nothing written.
    assert versions(extra) == {"nanobind": "0.0.planted", "listed": [], "written": []}
    # One more folder on the path (another script's): only it is listed, and kept besides.
    added = versions(other, extra)
    assert added["nanobind"] == "0.0.planted" and added["listed"] == [str(other)] and len(added["written"]) == 1, added
    assert set(json.loads(facts.read_text())["folders"]) >= {holding[0], str(extra), str(other)}
    assert versions(extra) == {"nanobind": "0.0.planted", "listed": [], "written": []}
    assert versions(other, extra)["listed"] == []
    # An install into a folder on the path: that folder is listed again, and wins. Changed
    # less than _TOO_RECENT ago (here: a clock an hour ahead), its listing is not kept (an
    # install in the same tick of the clock would not show): listed by each process.
    (extra / "nanobind-9.9.dist-info").mkdir()
    ahead = time.time() + 3600
    os.utime(extra, (ahead, ahead))
    for _ in range(2):
        assert versions(extra) == {"nanobind": "9.9", "listed": [str(extra)], "written": []}
    os.utime(extra, None)
    time.sleep(_facts._TOO_RECENT + 0.1)
    settled = versions(extra)
    assert settled["nanobind"] == "9.9" and settled["listed"] == [str(extra)] and len(settled["written"]) == 1
    assert versions(extra) == {"nanobind": "9.9", "listed": [], "written": []}


@pytest.mark.slow
def test_at_the_cap_the_folders_no_process_used_for_longest_go(tmp_path: pathlib.Path) -> None:
    """At the cap of folder listings, a process adding one pushes out the folder no process
    used for longest, not one of its own path's (which every process like it would list again)."""
    store, extra, other = tmp_path / "store", tmp_path / "on-path", tmp_path / "a-script-folder"
    extra.mkdir()
    other.mkdir()
    time.sleep(_facts._TOO_RECENT + 0.1)

    def versions(*folders: pathlib.Path) -> dict:
        path = ":".join([*map(str, folders), os.environ.get("PYTHONPATH", "")])
        out = run_python(VERSIONS, str(store), env={"PYTHONPATH": path})
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    versions(extra)
    [facts] = facts_files(store)
    data = json.loads(facts.read_text())
    ours = list(data["folders"])
    for i in range(_facts._MAX_FOLDERS - len(ours)):  # listed later by other processes, used by none since
        data["folders"][f"/gone/folder-{i}"] = {"identity": [1, i, 4096, 0, 0], "versions": {}}
    facts.write_text(json.dumps(data))
    assert versions(other, extra)["listed"] == [str(other)]
    kept = json.loads(facts.read_text())["folders"]
    assert len(kept) == _facts._MAX_FOLDERS and set(ours) <= set(kept) and "/gone/folder-0" not in kept
    assert versions(extra)["listed"] == []


LISTED_BEFORE_A_SECOND_STORE = """
import os, sys, time
import gtcache
from gtcache import toolchain
from gtcache.gt4py import _facts
_facts.use(gtcache.open_store(sys.argv[1]))
toolchain.toolchain_facts("gtfn")  # lists sys.path's folders
_facts.remember_versions()
os.mkdir(os.path.join(sys.argv[3], "nanobind-9.9.dist-info"))  # an install after the listing
time.sleep(float(sys.argv[4]))
_facts.use(gtcache.open_store(sys.argv[2]))  # another store: its facts see the folder as it is now
_facts.remember_versions()
"""


@pytest.mark.slow
def test_a_listing_is_kept_with_the_identity_its_folder_had_when_listed(tmp_path: pathlib.Path) -> None:
    """A process lists once, and may use a second store later (the hook re-installed with
    another one): what it listed goes with the folder's identity before the listing, never
    with the identity it has at the second store's use (then stale versions would be kept
    with a current identity, and used by every later process)."""
    first, second, extra = tmp_path / "first", tmp_path / "second", tmp_path / "on-path"
    extra.mkdir()
    time.sleep(_facts._TOO_RECENT + 0.1)
    env = {"PYTHONPATH": f"{extra}:" + os.environ.get("PYTHONPATH", "")}
    run_python(LISTED_BEFORE_A_SECOND_STORE, str(first), str(second), str(extra), str(_facts._TOO_RECENT + 0.2), env=env)
    out = run_python(VERSIONS, str(second), env=env)
    later = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))
    assert later["nanobind"] == "9.9" and str(extra) in later["listed"], later


DEFINITION = """
import json, sys
import gtcache
from gtcache.gt4py import _facts, definition

sys.path.insert(0, sys.argv[2])
import ops_for_facts

_facts.use(gtcache.open_store(sys.argv[1]))
stage = ops_for_facts.op.definition_stage
print("RESULT " + json.dumps({"used": definition.definition_fingerprint(stage),
                              "computed": str(definition._fingerprinter(stage))}))
"""

OPS = '''
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

IDim = gtx.Dimension("IDim")
FACTOR = {factor}


@gtx.field_operator
def op(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return a * FACTOR
'''
#: The line ``op`` starts on (its decorator's), which names it in the facts with its qualified name.
OPS_FIRST_LINE = OPS.splitlines().index("@gtx.field_operator") + 1


@pytest.mark.slow
def test_a_stored_definition_fingerprint_is_used_only_for_the_same_content(tmp_path: pathlib.Path) -> None:
    store, code = tmp_path / "store", tmp_path / "code"
    code.mkdir()

    def fingerprint(factor: float) -> dict:
        (code / "ops_for_facts.py").write_text(OPS.format(factor=factor))
        time.sleep(0.05)  # written before the process starts (no start-up hook: its start, less two ticks, counts)
        out = run_python(DEFINITION, str(store), str(code))
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    two = fingerprint(2.0)
    assert two["used"] == two["computed"]
    [(key, (shard, value))] = stored(store, "definitions").items()
    assert value == two["computed"]
    plant(shard, "definitions", key, "f" * 16)
    assert fingerprint(2.0)["used"] == "f" * 16  # the same content: read from the file
    three = fingerprint(3.0)  # another closure value: another content key, computed afresh
    assert three["used"] == three["computed"] != two["computed"]


SOURCE = """
import json, sys, warnings
import gtcache
from gtcache.gt4py import _facts, definition

sys.path.insert(0, sys.argv[2])
import ops_for_facts

_facts.use(gtcache.open_store(sys.argv[1]), verify=sys.argv[3] == "verify")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    used = definition.definition_fingerprint(ops_for_facts.op.definition_stage)
read = definition._source_text.cache_info().currsize  # texts read (inspect.getsource)
print("RESULT " + json.dumps({"used": used, "source_read": read > 0, "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.slow
def test_a_stored_source_digest_is_used_only_while_its_file_is_unchanged(tmp_path: pathlib.Path) -> None:
    """A fresh process reads no source text for a function whose file is as the facts describe
    it; an edit of the same size (only the modification time tells) is read again."""
    store, code = tmp_path / "store", tmp_path / "code"
    code.mkdir()
    ops = code / "ops_for_facts.py"

    def write(body: str) -> None:
        ops.write_text(OPS.format(factor=2.0).replace("return a * FACTOR", body))
        time.sleep(_facts._TOO_RECENT + 0.1)  # a file changed within that time is never described

    def run(mode: str = "plain") -> dict:
        out = run_python(SOURCE, str(store), str(code), mode)
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    write("return a * FACTOR")
    first = run()
    assert first["source_read"] and not first["warnings"], first
    [(file_name, (_, entry))] = stored(store, "sources").items()  # one file, one function
    [(name, known)] = entry["functions"].items()  # type: ignore[index]
    assert name == f"{OPS_FIRST_LINE}:op", name
    second = run()
    assert not second["source_read"], "the stored digest stands for the text"
    assert second["used"] == first["used"]
    write("return a / FACTOR")  # the same size: only the file's times differ
    edited = run()
    assert edited["source_read"] and edited["used"] != first["used"], edited
    assert run()["used"] == edited["used"]
    # The edited file's facts replaced the old ones (one entry per file name, not per version).
    [(key, (shard, now))] = stored(store, "sources").items()
    assert key == file_name and now["identity"] != entry["identity"], (entry, now)  # type: ignore[index]
    assert list(now["functions"]) == [name] and now["functions"][name] != known  # type: ignore[index]
    # A digest that lies is caught by self-check, which reads every text.
    plant(shard, "sources", key, {**now, "functions": {name: {"digest": "0" * 32}}})  # type: ignore[dict-item]
    checked = run("verify")
    assert checked["source_read"] and checked["used"] == edited["used"], checked
    assert any("stored digest of a source text" in w for w in checked["warnings"]), checked["warnings"]
    # So are the global names gt4py 1.2.3 parses a text for (1.2.1 reads none: none stored).
    kept = now["functions"][name]  # type: ignore[index]
    assert ("globals" in kept) == _compat.CLOSURE_FROM_SOURCE, kept
    if "globals" in kept:
        plant(shard, "sources", key, {**now, "functions": {name: {**kept, "globals": ["NOT_READ"]}}})  # type: ignore[dict-item]
        checked = run("verify")
        assert checked["used"] == edited["used"], checked
        assert any("stored global names of a source text" in w for w in checked["warnings"]), checked["warnings"]


CHAINS = """
import json, sys
import gtcache
from gtcache.gt4py import _compat, _facts, definition

def parsed():  # sources parsed for attribute chains, and by gt4py for global names (1.2.3)
    count = definition._attribute_chains.cache_info().currsize
    if _compat.CLOSURE_FROM_SOURCE:
        from gt4py.next.ffront import source_utils
        count += source_utils._global_names_of_code.cache_info().currsize
    return count

sys.path.insert(0, sys.argv[2])
import ops_with_module

at_import = parsed()  # (gt4py's decorator may parse it)
_facts.use(gtcache.open_store(sys.argv[1]))
stage = ops_with_module.op.definition_stage
used = definition.definition_fingerprint(stage)
computed = str(definition._fingerprinter(stage))
parsed = parsed() - at_import
print("RESULT " + json.dumps({"used": used, "computed": computed, "parsed": parsed}))
"""

OPS_WITH_MODULE = '''
import gt4py.next as gtx
from gt4py.next import Dims, Field, float64

import consts_for_facts as consts

IDim = gtx.Dimension("IDim")


@gtx.field_operator
def op(a: Field[Dims[IDim], float64]) -> Field[Dims[IDim], float64]:
    return a * consts.FACTOR
'''


@pytest.mark.slow
def test_stored_attribute_chains_still_read_the_module_values(tmp_path: pathlib.Path) -> None:
    """What a function reads from a module (``consts.FACTOR``) and its global names are kept
    in the facts, not their values: a later process reads the values afresh, so a changed
    constant changes the key."""
    store, code = tmp_path / "store", tmp_path / "code"
    code.mkdir()
    (code / "ops_with_module.py").write_text(OPS_WITH_MODULE)
    time.sleep(_facts._TOO_RECENT + 0.1)

    def run(factor: float) -> dict:
        (code / "consts_for_facts.py").write_text(f"FACTOR = {factor}\n")
        out = run_python(CHAINS, str(store), str(code), env={"PYTHONDONTWRITEBYTECODE": "1"})
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    two = run(2.0)
    assert two["parsed"] >= 1 and two["used"] == two["computed"], two
    [chains] = [v["chains"] for _, entry in stored(store, "sources").values() for v in entry["functions"].values()]  # type: ignore[index]
    assert chains["consts"] == [["FACTOR"]], chains  # the name read, not its value
    again = run(2.0)
    assert again["parsed"] == 0 and again["used"] == two["used"], again  # the chains came from the facts
    three = run(3.0)
    assert three["parsed"] == 0 and three["used"] == three["computed"] != two["used"], three


def test_what_the_facts_file_holds_gives_the_content_key_parsing_gives(tmp_path: pathlib.Path) -> None:
    """A function's global names and attribute chains read back from the facts file (JSON:
    new string objects) serialize as those found by parsing its source: the same content key,
    so the next process finds the stored fingerprint (and writes nothing)."""
    from gtcache import examples, open_store
    from gtcache.gt4py import definition

    store = open_store(tmp_path / "store")
    stage = examples.EXAMPLES["edge_diff"].program.definition_stage
    definition._sources.clear()
    _facts.use(store)
    parsed = definition._content_key(stage)
    _facts.flush()
    definition._sources.clear()
    assert stored(tmp_path / "store", "sources"), "the source facts were stored"
    _facts.use(store)  # read back from the files
    try:
        assert definition._content_key(stage) == parsed
        assert _facts.active().source_files() > 0, "the source facts were read back"  # type: ignore[union-attr]
    finally:
        _facts.use(None)
        definition._sources.clear()


EDITED_WHILE_RUNNING = """
import json, pathlib, sys
import gtcache
from gtcache.gt4py import _facts, definition

sys.path.insert(0, sys.argv[2])
import ops_for_facts

source = pathlib.Path(ops_for_facts.__file__)
source.write_text(source.read_text().replace("a * FACTOR", "a / FACTOR"))  # edited after the import
_facts.use(gtcache.open_store(sys.argv[1]))
try:
    definition.definition_fingerprint(ops_for_facts.op.definition_stage)
    refused = None
except ValueError as error:
    refused = str(error)
_facts.flush()
print("RESULT " + json.dumps([_facts.active().source_files(), refused]))
"""


@pytest.mark.slow
def test_a_source_edited_while_the_process_runs_is_not_described(tmp_path: pathlib.Path) -> None:
    """What the process imported may differ from the file now: its text is not kept, and the
    definition has no direct key (gt4py parsed the operator from the text it imported)."""
    store, code = tmp_path / "store", tmp_path / "code"
    code.mkdir()
    (code / "ops_for_facts.py").write_text(OPS.format(factor=2.0))
    time.sleep(_facts._TOO_RECENT + 0.1)
    out = run_python(EDITED_WHILE_RUNNING, str(store), str(code))
    described, refused = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))
    assert described == 0
    assert "changed since the process started" in refused


RELOADED = """
import importlib, json, pathlib, sys
import gtcache
from gtcache.gt4py import _facts, definition

sys.path.insert(0, sys.argv[2])
import ops_for_facts

_facts.use(gtcache.open_store(sys.argv[1]))
old = ops_for_facts.op.definition_stage
before = definition.definition_fingerprint(old)
source = pathlib.Path(ops_for_facts.__file__)
source.write_text(source.read_text().replace(sys.argv[3], sys.argv[4]))
importlib.reload(ops_for_facts)  # as a notebook's autoreload does
new = ops_for_facts.op.definition_stage
try:
    used = definition.definition_fingerprint(new)
except ValueError as error:
    used = str(error)
print("RESULT " + json.dumps({
    "before": before, "used": used, "equal_code": old.definition.__code__ == new.definition.__code__,
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "edit", "equal_code"),
    [
        ("return a * FACTOR", ("a * FACTOR", "a / FACTOR"), False),
        # A comment (or a local variable's annotation, which gt4py's frontend checks) is not in
        # the bytecode: the reloaded function's code object compares equal to the old one's,
        # though the text gt4py fingerprints differs.
        ("return a * FACTOR  # one", ("# one", "# two"), True),
    ],
    ids=["constant", "comment"],
)
def test_a_module_edited_and_reloaded_in_the_process_has_no_direct_key(
    tmp_path: pathlib.Path, body: str, edit: tuple[str, str], equal_code: bool
) -> None:
    """A source file edited after the process read its facts (or its text), then reloaded: no
    direct key (its operators' texts when decorated may not be the file's), not the old one
    from the facts or from the process's memory of an equal code object."""
    store, code = tmp_path / "store", tmp_path / "code"
    code.mkdir()
    (code / "ops_for_facts.py").write_text(OPS.format(factor=2.0).replace("return a * FACTOR", body))
    time.sleep(_facts._TOO_RECENT + 0.1)  # old enough to be described in the facts
    out = run_python(RELOADED, str(store), str(code), *edit)
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))
    assert result["equal_code"] is equal_code, result
    assert "the source file of 'op' changed since the process started" in result["used"], result


LAZY = """
import json, sys
import gtcache
from gtcache import examples
from gtcache.gt4py import _facts, definition

opened = []
sys.addaudithook(lambda event, args: event == "open" and "/facts/" in str(args[0])
                 and opened.append(str(args[0]).rsplit("/", 1)[1]))
_facts.use(gtcache.open_store(sys.argv[1]))
at_use = list(opened)
stage = examples.EXAMPLES[sys.argv[2]].program.definition_stage
definition.definition_fingerprint(stage)
shard = _facts.shard_of(stage.definition.__code__.co_filename)[:2]
print("RESULT " + json.dumps({"at_use": at_use, "then": opened[len(at_use):], "shard": shard}))
"""


def test_a_process_reads_the_main_facts_file_and_only_the_shard_its_program_needs(tmp_path: pathlib.Path) -> None:
    """A model's facts grow to megabytes (tens of ms to parse, see docs/benchmarks.md): a
    process reads the main file when it starts using the facts, and a program's facts (its
    definition's fingerprint, its functions' source facts) from one shard, the one its source
    file's name gives, when the program is first keyed."""
    store = tmp_path / "store"

    def run(example: str) -> dict:
        out = run_python(LAZY, str(store), example)
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    first = run("edge_diff")  # learns and writes the facts (no backend, no versions: no main file)
    written = sorted(path.name for path in shard_files(store))
    environment = written[0].split("-")[0]
    assert written == [f"{environment}-{first['shard']}.json"], written  # the definition and all it calls
    again = run("edge_diff")
    assert again["at_use"] == [f"{environment}.json"], again  # no shard yet
    assert again["then"] == written, again  # its shard, once; no other
    # Shards of facts other programs need are not read: plant one in every other name.
    for digits in (f"{i:02x}" for i in range(256)):
        shard = store / "facts" / f"{environment}-{digits}.json"
        if not shard.exists():
            shard.write_text("{not read")
    assert run("edge_diff")["then"] == written


def test_a_damaged_source_fact_is_replaced_not_kept(tmp_path: pathlib.Path) -> None:
    """A function's entry in a shard that is not an object with a digest is ignored, read
    afresh and replaced: the next process reads no source text again."""
    store, code = tmp_path / "store", tmp_path / "code"
    code.mkdir()
    (code / "ops_for_facts.py").write_text(OPS.format(factor=2.0))
    time.sleep(_facts._TOO_RECENT + 0.1)

    def run() -> dict:
        out = run_python(SOURCE, str(store), str(code), "plain")
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))  # type: ignore[no-any-return]

    first = run()
    [(file_key, (shard, entry))] = stored(store, "sources").items()
    [name] = entry["functions"]  # type: ignore[index]
    plant(shard, "sources", file_key, {**entry, "functions": {name: "damaged"}})  # type: ignore[dict-item]
    damaged = run()
    assert damaged["source_read"] and damaged["used"] == first["used"] and not damaged["warnings"], damaged
    assert stored(store, "sources")[file_key][1] == entry, "replaced by what reading gives"
    assert not run()["source_read"]


@pytest.mark.slow  # (about 8 s: the suite, not make test-fast)
def test_a_process_that_writes_facts_removes_other_environments_old_ones_at_exit(tmp_path: pathlib.Path) -> None:
    """Every upgrade of gtcache or gt4py (another environment digest) leaves a main file and
    up to 256 shards nothing reads again: a process that writes facts removes, at its exit,
    those of other environments unused for ``_SWEEP_AFTER``, at most once a day (the main
    file says when). Its own environment's, recently written or read ones, folders and what
    a symlink points at stay; a process that wrote nothing lists nothing."""
    store = tmp_path / "store"
    folder = store / "facts"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    long_ago = time.time() - _facts._SWEEP_AFTER - 3600
    recently = time.time() - _facts._SWEEP_AFTER + 3600

    def planted(name: str, when: float, kind: str = "file", read: float | None = None) -> pathlib.Path:
        path = folder / name
        if kind == "file":
            path.write_text("{}")
        elif kind == "link":
            path.symlink_to(outside)
        else:
            path.mkdir()
        os.utime(path, (read or when, when), follow_symlinks=False)
        return path

    def swept_at(main: pathlib.Path, when: float | None = None) -> float:
        data = json.loads(main.read_text())
        if when is not None:
            main.write_text(json.dumps({**data, "swept_at": when}))
        return data["swept_at"]  # type: ignore[no-any-return]

    other, recent, used = "a" * 32, "b" * 32, "c" * 32
    old = [planted(f"{other}.json", long_ago), planted(f"{other}-3f.json", long_ago),
           planted(f".{other}.json.tmp-x1", long_ago), planted(f"{other}-00.json", long_ago, "link")]
    kept = [planted(f"{recent}.json", recently), planted(f"{other}-folder", long_ago, "folder"),
            planted(f"{used}.json", long_ago, read=recently)]
    child(store)  # learns the backends' fingerprints: writes its main file
    [mine] = [path for path in facts_files(store) if path.stem not in (other, recent, used)]
    assert not [path for path in old if os.path.lexists(path)], sorted(os.listdir(folder))
    assert all(path.exists() for path in kept) and outside.exists()
    assert time.time() - 60 < swept_at(mine) <= time.time()
    # Once a day: a process that writes the next hour does not list again; nor does one that
    # writes nothing. Its own environment's files stay however old.
    own_shard = planted(f"{mine.stem}-7f.json", long_ago)
    again = planted(f"{other}.json", long_ago)
    child(store)
    child(store, GT4PY_CMAKE_BUILD_TYPE="debug")  # new fingerprints: writes
    assert again.exists() and own_shard.exists()
    swept_at(mine, time.time() - _facts._SWEEP_EVERY - 60)
    child(store, GT4PY_CMAKE_BUILD_TYPE="min_size_rel")  # writes, and the last sweep is a day old
    assert not again.exists() and own_shard.exists() and mine.exists()


@pytest.mark.slow  # (about 8 s: the suite, not make test-fast)
def test_a_facts_file_too_large_or_nested_too_deep_is_ignored(tmp_path: pathlib.Path) -> None:
    """``read_facts`` checks size and owner before it reads, and a JSON nested past Python's
    recursion limit is a damaged file like any other (ignored and rewritten), not a crash."""
    from gtcache.store import _layout

    store = tmp_path / "store"
    child(store)
    [facts] = facts_files(store)
    good = facts.read_text()
    facts.write_text("[" * 100_000 + "]" * 100_000)
    again = child(store)
    assert all(b["used"] == b["computed"] for b in again["backends"].values())
    assert json.loads(facts.read_text())["backend_config"] == json.loads(good)["backend_config"]
    # Larger than the cap: not read (a planted fingerprint in it is not used).
    data = json.loads(good)
    data["backend_config"] = {key: "planted" for key in data["backend_config"]}
    data["padding"] = "x" * _layout.FACTS_MAX_BYTES
    facts.write_text(json.dumps(data))
    big = child(store)
    assert all(b["used"] == b["computed"] != "planted" for b in big["backends"].values()), big
    assert facts.stat().st_size < _layout.FACTS_MAX_BYTES  # rewritten from what was computed


@pytest.mark.parametrize("damaged", [
    "text", {"functions": {"1:f": {"digest": "1" * 32}}}, {"identity": "key", "functions": "text"},
    {"identity": "key", "functions": {"1:f": "text"}}, {"identity": "key", "functions": {"1:f": {"chains": {}}}},
])
def test_a_source_entry_of_any_damaged_shape_is_ignored_and_replaced(tmp_path: pathlib.Path, damaged: object) -> None:
    """A file's entry in a shard is used only if it is an object with the file's identity and
    its functions, each an object with a digest; any other shape is replaced, never raised on."""
    from gtcache import open_store

    store, shard, value = open_store(tmp_path / "store"), "ab" * 16, {"digest": "2" * 32}
    header = {"format": _facts._FORMAT, "version": _facts._VERSION}
    store.write_facts(f"{_facts._environment()}-ab",
                      {**header, "definitions": {}, "sources": {_facts.shard_of("/src/ops.py"): damaged}})
    _facts.use(store)
    try:
        facts = _facts.active()
        assert facts is not None and facts.source(shard, "/src/ops.py", "key", "1:f") is None
        facts.remember_source(shard, "/src/ops.py", "key", "1:f", value)
        assert facts.source(shard, "/src/ops.py", "key", "1:f") == value
        _facts.flush()
    finally:
        _facts.use(None)
    [(_, (_, entry))] = stored(tmp_path / "store", "sources").items()
    assert entry == {"identity": "key", "functions": {"1:f": value}}


@pytest.mark.parametrize("verify", [False, True])
def test_a_damaged_fact_beside_its_digest_is_replaced_and_reported_only_when_verifying(
    tmp_path: pathlib.Path, verify: bool
) -> None:
    """A function's stored global names of the wrong type (the digest right) are computed
    again and replaced; only self-check says so (a damaged hint is not the user's concern)."""
    import warnings

    from gtcache import open_store

    store, shard, computed = open_store(tmp_path / "store"), "ab" * 16, {"digest": "2" * 32, "globals": ["x"]}
    header = {"format": _facts._FORMAT, "version": _facts._VERSION}
    damaged = {"identity": "key", "functions": {"1:f": {"digest": "2" * 32, "globals": 5}}}
    store.write_facts(f"{_facts._environment()}-ab",
                      {**header, "definitions": {}, "sources": {_facts.shard_of("/src/ops.py"): damaged}})
    _facts.use(store, verify=verify)
    try:
        facts = _facts.active()
        assert facts is not None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            facts.remember_source(shard, "/src/ops.py", "key", "1:f", computed)
        assert [str(w.message) for w in caught if "stored global names" in str(w.message)] == (
            [str(caught[0].message)] if verify else []
        ), [str(w.message) for w in caught]
        _facts.flush()
    finally:
        _facts.use(None)
    [(_, (_, entry))] = stored(tmp_path / "store", "sources").items()
    assert entry == {"identity": "key", "functions": {"1:f": computed}}


def test_facts_of_one_function_kept_in_turn_are_all_kept(tmp_path: pathlib.Path) -> None:
    """A function's facts are learnt one by one (its digest, then the global names, then the
    attribute chains, maybe by another thread): each keeps those of the same text kept before,
    a fact of no known name is dropped, and another text's facts go."""
    from gtcache import open_store

    store, shard, digest, other = open_store(tmp_path / "store"), "ab" * 16, "2" * 32, "3" * 32
    _facts.use(store)
    try:
        facts = _facts.active()
        assert facts is not None
        remember = functools.partial(facts.remember_source, shard, "/src/ops.py", "key", "1:f")
        remember({"digest": digest, "globals": ["x"], "junk": 1})
        remember({"digest": digest, "chains": {"m": [["a"]]}})
        assert facts.source(shard, "/src/ops.py", "key", "1:f") == {"digest": digest, "globals": ["x"], "chains": {"m": [["a"]]}}
        remember({"digest": other})
        assert facts.source(shard, "/src/ops.py", "key", "1:f") == {"digest": other}
    finally:
        _facts.use(None)


def test_an_edited_file_is_the_newest_in_its_shard_and_the_oldest_file_goes_first(tmp_path: pathlib.Path) -> None:
    """At the cap of source files per shard the file kept longest unchanged goes first: an
    edited file's entry is new, not where its first version was."""
    from gtcache import open_store

    store, shard, value = open_store(tmp_path / "store"), "ab" * 16, {"digest": "2" * 32}
    _facts.use(store)
    try:
        facts = _facts.active()
        assert facts is not None
        for i in range(_facts._MAX_SOURCE_FILES_PER_SHARD):
            facts.remember_source(shard, f"/src/{i}.py", f"key {i}", "1:f", value)
        facts.remember_source(shard, "/src/0.py", "key 0, edited", "1:f", value)
        facts.remember_source(shard, "/src/new.py", "key new", "1:f", value)
        assert facts.source(shard, "/src/0.py", "key 0, edited", "1:f") == value
        assert facts.source(shard, "/src/new.py", "key new", "1:f") == value
        assert facts.source(shard, "/src/1.py", "key 1", "1:f") is None, "the oldest unchanged file went"
        assert facts.source(shard, "/src/2.py", "key 2", "1:f") == value
    finally:
        _facts.use(None)


@pytest.mark.parametrize("module", ["gtcache.gt4py.definition", "gtcache.toolchain", "gtcache.keys", "gtcache.gt4py._compat"])
def test_an_edited_module_that_computes_facts_names_another_facts_file(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout's editable install keeps its version while its code changes: each module
    that computes or reads facts is in the facts file's name (by its file's identity)."""
    import importlib

    path = importlib.import_module(module).__file__
    before = _facts._environment()
    identity = _facts._identity
    monkeypatch.setattr(_facts, "_identity", lambda p: [0, 0, 0, 0, 0] if p == path else identity(p))
    assert _facts._environment() != before


def test_the_facts_file_is_named_by_the_code_as_imported(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The identities in the facts file's name are taken when the modules are imported: a file
    of them edited later holds code this process does not run, and must not name the facts its
    code computes (a process then wrote them where the edited code's processes read)."""
    import gtcache

    store = gtcache.open_store(tmp_path / "store")
    before = _facts.Facts(store).environment
    monkeypatch.setattr(_facts, "_identity", lambda path: [0, 0, 0, 0, 0])  # every file edited since
    assert _facts._environment() != before, "the files as they are now name another environment"
    assert _facts.Facts(store).environment == before


def test_a_whole_second_time_counts_from_the_start_s_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that keeps whole seconds (Lustre, GPFS, ext4 with 128-byte inodes) stamps a
    file written after the moment the process could first have read it (``_SINCE_NS``) with
    that second, truncated, so earlier than the moment: such a time counts from its second on
    (an edit there was missed: a helper reproduced it on ext4 -I 128 in 2 of 3 tries); a
    finer time from the moment itself."""
    start = 1_700_000_000_400_000_000  # 0.4 s into a second
    monkeypatch.setattr(_facts, "_SINCE_NS", start)
    assert _facts.changed_since_start_at(1_700_000_000_000_000_000), "written in the start's second"
    assert _facts.changed_since_start_at(1_700_000_001_000_000_000)
    assert not _facts.changed_since_start_at(1_699_999_999_000_000_000), "the second before"
    assert not _facts.changed_since_start_at(start - 1), "a finer time just before"
    assert _facts.changed_since_start_at(start)


def test_at_the_cap_of_definitions_per_shard_the_oldest_goes_and_the_file_stays_bounded(tmp_path: pathlib.Path) -> None:
    """A shard keeps at most ``_MAX_DEFINITIONS_PER_SHARD`` definition fingerprints (a model whose
    programs are edited again and again must not grow the file its first hit reads): one more
    pushes the oldest out, in memory and in the file written. Catches the mutation audit's F17
    (``Facts._put`` without its cap: backend fingerprints and definitions unbounded)."""
    from gtcache import open_store

    store, shard = open_store(tmp_path / "store"), "cd" * 16
    cap = _facts._MAX_DEFINITIONS_PER_SHARD
    _facts.use(store)
    try:
        facts = _facts.active()
        assert facts is not None
        for i in range(cap + 1):
            facts.remember_definition(shard, f"{i:032x}", f"{i:016x}")
        assert facts.definition(shard, f"{0:032x}") is None, "the oldest went"
        assert facts.definition(shard, f"{1:032x}") == f"{1:016x}"
        assert facts.definition(shard, f"{cap:032x}") == f"{cap:016x}"
        facts.flush()
    finally:
        _facts.use(None)
    [written] = shard_files(store.root)
    assert len(json.loads(written.read_text())["definitions"]) == cap



#: An enum of the user's (``proj/flavours.py``) and a backend using it (``proj/backends.py``):
#: gt4py's roundtrip executor with an option of that enum, whose name it writes into the program
#: it generates (the build depends on the name).
FLAVOURS = """
import enum


class Flavour(enum.Enum):
    {member} = 1

CHOSEN = Flavour.{member}
"""
FLAVOURED_BACKEND = """
import dataclasses

import gt4py.next as gtx
from gt4py.next.program_processors.runners import roundtrip

from proj.flavours import CHOSEN, Flavour


@dataclasses.dataclass(frozen=True)
class FlavouredRoundtrip(roundtrip.Roundtrip):
    flavour: Flavour = CHOSEN

    def __call__(self, inp):
        artifact = super().__call__(inp)
        return dataclasses.replace(artifact, source_code=artifact.source_code + f"\\n# flavour: {self.flavour.name}\\n")


BACKEND = dataclasses.replace(
    gtx.itir_python, executor=FlavouredRoundtrip(transforms=gtx.itir_python.executor.transforms, flavour=CHOSEN)
)
"""


@pytest.mark.slow
def test_a_backend_fingerprint_is_stored_with_the_identity_of_the_modules_it_reads(tmp_path: pathlib.Path) -> None:
    """The stored backend fingerprint is keyed by a serialization of what gt4py's fingerprinting
    reads and by the identity of the modules defining the data classes and enums in it: gt4py
    reads an enum member's name and its class's members, which the serialization (a member as
    its class and value) does not hold. The user's module of the enum (not the backend's) renames
    the member the backend uses (the value kept; the executor writes the name into the program):
    the next process keys the new configuration, compiles it and stores a build with the new name.
    Catches: ``content_key`` without the module identities, or without the enum's module
    (``_named_enum``): then the stored fingerprint of the old configuration was read back, a
    direct hit served the build with the old name."""
    import gtcache
    from tests.helpers import expected, run_project, statuses, write_project

    store = tmp_path / "store"
    project = write_project(tmp_path / "p", backend="__import__('proj.backends', fromlist=['BACKEND']).BACKEND")
    (project / "proj" / "backends.py").write_text(FLAVOURED_BACKEND)
    flavours = project / "proj" / "flavours.py"
    flavours.write_text(FLAVOURS.format(member="PLAIN"))
    time.sleep(_facts._TOO_RECENT + 0.1)  # (a backend's own code changed just before a start: no key)
    first = run_project(project, store)
    assert first["out"] == expected(2.0, 1.0) and statuses(first) == [("compiled", None)], first
    assert statuses(run_project(project, store)) == [("hit", "direct")], "its fingerprint read back from the facts"

    flavours.write_text(FLAVOURS.format(member="FAST"))
    time.sleep(_facts._TOO_RECENT + 0.1)
    renamed = run_project(project, store)
    assert renamed["out"] == expected(2.0, 1.0) and statuses(renamed) == [("compiled", None)], renamed
    [old], [new] = first["outcomes"], renamed["outcomes"]
    assert new["key"] != old["key"]
    opened = gtcache.open_store(store)
    assert "# flavour: FAST" in (opened.get(new["key"]).path / "program.py").read_text()
    assert "# flavour: PLAIN" in (opened.get(old["key"]).path / "program.py").read_text()


@pytest.mark.slow
def test_a_backend_holding_the_user_s_code_is_keyed_by_its_module_s_file(tmp_path: pathlib.Path) -> None:
    """gt4py fingerprints a class or function by its name: the body of a step of the user's in a
    backend (here the executor's ``__call__``, which writes a line into the program it generates)
    was in no key, and an edit of it was served the build of the old code (direct hit, and by
    the build key too). The module's file is keyed now: an edit misses and compiles the new
    code; a file changed just before the process started (it may not be what was imported)
    gives no key at all: one warning, and gt4py compiles."""
    import gtcache
    from tests.gt4py.test_hook_promises import run
    from tests.helpers import expected, run_project, statuses, write_project

    store = tmp_path / "store"
    project = write_project(tmp_path / "p", backend="__import__('proj.backends', fromlist=['BACKEND']).BACKEND")
    (project / "proj" / "flavours.py").write_text(FLAVOURS.format(member="PLAIN"))
    backends = project / "proj" / "backends.py"
    backends.write_text(FLAVOURED_BACKEND)
    too_recent, warned, _ = run(project, store)
    assert too_recent["out"] == expected(2.0, 1.0) and statuses(too_recent) == [("bypassed", None)], too_recent
    assert len(warned) == 1 and "lookup failed" in warned[0] and "proj/backends.py" in warned[0], warned
    time.sleep(_facts._TOO_RECENT + 0.1)
    first = run_project(project, store)
    assert statuses(first) == [("compiled", None)], first
    assert statuses(run_project(project, store)) == [("hit", "direct")]

    backends.write_text(FLAVOURED_BACKEND.replace("# flavour: ", "# taste: "))
    time.sleep(_facts._TOO_RECENT + 0.1)
    edited = run_project(project, store)
    assert edited["out"] == expected(2.0, 1.0) and statuses(edited) == [("compiled", None)], edited
    [old], [new] = first["outcomes"], edited["outcomes"]
    assert new["key"] != old["key"]
    assert "# taste: PLAIN" in (gtcache.open_store(store).get(new["key"]).path / "program.py").read_text()
