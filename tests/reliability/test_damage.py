"""Damage every file of a stored variant, byte by byte, and never load a wrong program.

For each backend (gtfn .so, dace SDFG + libraries + binding source in the
record, roundtrip Python source), in a child process (a crash would show as
one): every single-bit flip of ``entry.json``, and flips at random places plus
truncations of every payload file. After each damage the entry is looked up
and, if the store hands it out, loaded and run: the result must be right.
Then the user's view in fresh processes: a damaged entry is a miss, one
warning, the program recompiles and gives the right result, and the entry is
rebuilt in place.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import gtcache
from tests.conftest import SIZE, CompiledStore
from tests.helpers import load_in_fresh_process, run_python

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

TRIALS = """
import json, os, random, re, sys
import numpy as np
import gtcache
from gtcache import examples
from gtcache.errors import GtcacheError
from gtcache.gt4py._loading import artifact_of

root, key, example_name, backend_name = sys.argv[1:5]
store = gtcache.open_store(root, read_only=True)
example = examples.EXAMPLES[example_name]
backend = examples.backend_by_name(backend_name)
offset_provider = example.offset_provider(int(sys.argv[5]))
rng = random.Random(7)
# "refused": gtcache refused before gt4py's load_artifact saw anything; "gt4py_failed": gt4py
# was handed a damaged file and failed on it (must be 0); "loaded": gt4py loaded it (only
# harmless damage, to the usage counters or the final newline, may get there), "wrong": it
# computed a wrong result (0).
counts = {"trials": 0, "refused": 0, "gt4py_failed": 0, "loaded": 0, "loaded_counter_damage": 0, "wrong": 0}
folder = store.entry_path(key)

def replace(path, data):
    # A new file under the old name, never a rewrite in place: this process has the
    # entry's libraries mapped, and changing mapped code would crash it (as it would
    # any program; gtcache itself never rewrites a payload file).
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)

def attempt(counter_damage=False):
    counts["trials"] += 1
    try:
        entry = store.lookup(key)
        if entry is None:
            counts["refused"] += 1
            return
        artifact = artifact_of(entry, store=store)
    except GtcacheError:
        counts["refused"] += 1
        return
    try:
        program = backend.load_artifact(artifact)
    except Exception:
        counts["gt4py_failed"] += 1
        return
    counts["loaded"] += 1
    counts["loaded_counter_damage"] += counter_damage
    args, out = example.make_args(int(sys.argv[5]), 3)
    program(*args, offset_provider=offset_provider)
    if not np.allclose(out.asnumpy(), example.reference(args)):
        counts["wrong"] += 1

def counter_spans(text):
    # Byte ranges of the values of the usage counters, which record_xxh3 does not cover.
    return [m.span(2) for m in re.finditer(rb'"(last_used|hits)": ("[^"]*"|[0-9]+)', text)]

attempt()
assert counts["loaded"] == 1 and counts["trials"] == 1, counts
files = sorted(p.name for p in folder.iterdir())
for name in files:
    path = folder / name
    original = path.read_bytes()
    if name == "entry.json":
        spans = counter_spans(original)
        damages = [
            (original[:i] + bytes([original[i] ^ 0x01]) + original[i + 1:], any(a <= i < b for a, b in spans))
            for i in range(len(original))
        ]
    else:
        spots = [rng.randrange(len(original)) for _ in range(24)]
        damages = [(original[:i] + bytes([original[i] ^ rng.randrange(1, 256)]) + original[i + 1:], False) for i in spots]
    # Cutting the last byte of entry.json only drops its final newline: harmless, it loads.
    damages += [(original[: len(original) // 2], False), (original[:-1], original[-1:].isspace()), (b"", False)]
    for damaged, counter_damage in damages:
        replace(path, damaged)
        attempt(counter_damage)
    replace(path, original)
print("COUNTS " + json.dumps({"files": files, **counts}))
"""


@pytest.mark.parametrize("backend", ["gtfn_cpu", "dace_cpu", "roundtrip"])
def test_no_damage_ever_loads_a_wrong_program(
    compiled_store: CompiledStore, store_copy: pathlib.Path, backend: str, figures
) -> None:
    key = compiled_store.variant("edge_diff", backend).key
    out = run_python(TRIALS, str(store_copy), key, "edge_diff", backend, str(SIZE))
    counts = json.loads(next(l for l in out.splitlines() if l.startswith("COUNTS ")).removeprefix("COUNTS "))
    damaged = counts["trials"] - 1
    assert counts["wrong"] == 0, counts
    assert counts["gt4py_failed"] == 0, f"gt4py was handed a damaged file: {counts}"
    assert counts["loaded"] - 1 == counts["loaded_counter_damage"], f"only usage-counter damage may load: {counts}"
    assert counts["refused"] == damaged - counts["loaded_counter_damage"], counts
    store = gtcache.open_store(store_copy)
    store.verify_payload(store.get(key))  # every damage was undone: the checks were not vacuous

    section = f"damaged files ({backend}: {', '.join(counts['files'])})"
    figures.add(section, "single-bit flips of entry.json, flips and truncations of payloads", damaged)
    figures.add(section, "refused by gtcache before gt4py's load", counts["refused"])
    figures.add(section, "handed to gt4py damaged", counts["gt4py_failed"])
    figures.add(section, "loaded and right (damage to the usage counters or the final newline only)", counts["loaded_counter_damage"])
    figures.add(section, "wrong results / crashes", f"{counts['wrong']} / 0")


@pytest.mark.parametrize("backend", ["dace_cpu", "roundtrip"])
@pytest.mark.parametrize("victim", ["payload", "entry.json"])
def test_damaged_entry_recompiles_and_is_rebuilt(
    compiled_store: CompiledStore, store_copy: pathlib.Path, tmp_path: pathlib.Path,
    backend: str, victim: str, gt4py_alone_output,
) -> None:
    """(gtfn's .so: tests/gt4py/test_compiled_store.py.)"""
    key = compiled_store.variant("edge_diff", backend).key
    folder = store_copy / "entries" / key[:2] / key
    record = json.loads((folder / "entry.json").read_text())
    name = "entry.json" if victim == "entry.json" else max(record["files"], key=lambda f: f["size"])["path"]
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 0x04
    (folder / name).write_bytes(bytes(data))

    out_file = tmp_path / "out.npy"
    warned: list[str] = []
    outcomes = load_in_fresh_process(
        store_copy, "edge_diff", backend, seed=5, size=SIZE, out_file=out_file, warnings=warned
    )
    assert [o["status"] for o in outcomes] == ["compiled"], "a miss, not a load"
    assert len(warned) == 1 and key in warned[0], warned
    np.testing.assert_array_equal(np.load(out_file), gt4py_alone_output("edge_diff", backend, 5))
    store = gtcache.open_store(store_copy)
    store.verify_payload(store.get(key))  # rebuilt in place
    again = load_in_fresh_process(store_copy, "edge_diff", backend, seed=5, size=SIZE, out_file=out_file)
    assert [o["status"] for o in again] == ["hit"]


def test_deleted_or_garbage_index_changes_nothing_a_user_sees(store_copy: pathlib.Path, tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from gtcache_cli.main import cli

    def listing() -> list[str]:
        result = CliRunner().invoke(cli, ["--cache-dir", str(store_copy), "ls", "--json"])
        assert result.exit_code == 0, result.output
        return sorted(row["key"] for row in json.loads(result.output))

    before = listing()
    shutil.rmtree(store_copy / "index")
    assert listing() == before
    for item in (store_copy / "index").iterdir():
        if item.is_file():
            item.write_bytes(b"\x00garbage" * 100)
    assert listing() == before
    out_file = tmp_path / "out.npy"
    outcomes = load_in_fresh_process(store_copy, "axpy", "gtfn_cpu", seed=1, size=SIZE, out_file=out_file)
    assert [o["status"] for o in outcomes] == ["hit"], "model runs never need the index"
