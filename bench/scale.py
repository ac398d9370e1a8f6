"""Store operations at scale, on synthetic entries (``make bench`` runs it after run.py).

Entries are written straight in layout v1 (a record and one small payload each,
no fsync) so that 100,000 of them take seconds to make; everything measured
then goes through the library as ``gtcache ls``/``stats``/``prune`` do.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

import gtcache  # noqa: E402
from gtcache.keys import make_key  # noqa: E402
from gtcache.policies import PrunePolicy, plan_prune  # noqa: E402
from gtcache.store import _files  # noqa: E402
from gtcache.store._index import SETTLE_NS  # noqa: E402
from gtcache.store._record import record_digest  # noqa: E402

SIZES = [int(n) for n in os.environ.get("BENCH_SCALE", "10000,100000").split(",")]


def fill(root: pathlib.Path, count: int) -> None:
    gtcache.open_store(root)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    payload = b"x" * 2048
    digest = _files.xxhash.xxh3_128_hexdigest(payload)
    for i in range(count):
        key = make_key("scale", {"i": i})
        folder = root / "entries" / key[:2] / key
        folder.mkdir(parents=True)
        (folder / "program.py").write_bytes(payload)
        when = (start + datetime.timedelta(seconds=i)).isoformat()
        record = {
            "schema_version": 2, "key": key,
            "ingredients": {"program_ir": str(i), "backend": "run_gtfn_cpu", "backend_config": "x"},
            "program": {"name": f"stencil_{i % 500}", "module": "bench.synthetic"},
            "backend": {"name": "run_gtfn_cpu", "options": {}},
            "device": {"type": "CPU", "arch": None},
            "toolchain": {"gt4py": "1.2.3", "python_abi": ".cpython-312-x86_64-linux-gnu.so"},
            "artifact": {"kind": "roundtrip", "fields": {"source": "program.py", "entry_point_name": "p", "column_axis": None, "debug": False}},
            "files": [{"path": "program.py", "size": len(payload), "xxh3": digest}],
            "created": when, "last_used": when, "hits": i % 7, "compile_seconds": 1.0 + i % 30,
            "gtcache_version": gtcache.__version__,
        }
        record["record_xxh3"] = record_digest(record)
        (folder / "entry.json").write_text(json.dumps(record))


def timed(func: Callable[[], Any], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(count: int) -> str:
    work = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-scale-"))
    try:
        root = work / "store"
        fill(root, count)
        # As in a store filled over days: entry.json settled (a row read within SETTLE_NS of
        # its file's last change is read again by the next scan: _index.settled_at).
        time.sleep(SETTLE_NS / 1e9 + 0.5)
        store = gtcache.open_store(root)
        start = time.perf_counter()
        scan = store.scan()
        first = time.perf_counter() - start
        indexed = timed(lambda: store.scan().stats())
        policy = PrunePolicy(max_size=count * 1024, unused_for=200 * 86400.0)
        plan_only = timed(lambda: plan_prune(scan, policy))
        with_scan = timed(lambda: plan_prune(store.scan(), policy))
        return f"| {count:,} | {first:.2f} s | {indexed:.2f} s | {plan_only:.2f} s | {with_scan:.2f} s |"
    finally:
        shutil.rmtree(work, ignore_errors=True)


HEADER = [
    "| entries | first scan (no index yet) | `ls`/`stats` scan (index) | prune plan (given a scan) | prune plan incl. scan |",
    "|---:|---:|---:|---:|---:|",
]


def main() -> list[str]:
    rows = list(HEADER)
    for count in SIZES:
        rows.append(measure(count))
        print(rows[-1], flush=True)
    return rows


#: Facts as a model of each size would grow them: (functions, the source files of its
#: programs, program variants). The largest is about 2 to 4 times icon4py's.
FACTS_SIZES = [(200, 20, 200), (2_000, 150, 1_000), (8_000, 400, 4_096)]
#: Helper functions every program calls, in one more source file (math, common operators).
FACTS_HELPERS = 20

FACTS_HEADER = [
    "| functions (in files) | program variants | facts in all | all in one file (format 2), read |"
    " main file + the program's shard, read |",
    "|---:|---:|---:|---:|---:|",
]


def facts_row(functions: int, files: int, variants: int) -> str:
    """What a fresh process pays to read the store's facts before its first hit
    (``Store.read_facts``: an open, a read and a JSON parse per file), for facts shaped like
    the hook's: since format 3 the main file and the shard of the program's source file
    (its definitions, its functions' and the helpers' source facts); before, one file with all."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-facts-"))
    try:
        store = gtcache.open_store(work / "store")
        key = lambda *parts: make_key("facts-bench", {"parts": list(parts)})  # noqa: E731
        function = {
            "digest": key("d"), "globals": ["gtx", "Field", "dims", "wpfloat", "neighbor_sum", "E2C", "C2E"],
            "chains": {"dims": [["EdgeDim"], ["CellDim"], ["KDim"]]},
        }
        helpers = (key("helpers"), {"identity": key("helpers identity"),
                                    "functions": {f"{10 * i + 1}:helper_{i}": function for i in range(FACTS_HELPERS)}})
        header = {"format": "gtcache-facts", "version": 5, "gtcache": gtcache.__version__}
        versions = {"gt4py": "1.2.3", "nanobind": "2.4.0", "gridtools_cpp": "2.3.9", "dace": "2.0.0"}
        main = {**header, "backend_config": {key("b", i): key("bf", i) for i in range(4)},
                "folders": {f"/a/python/environment/folder_{i}": {
                    "identity": [2049, 1000 + i, 4096, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000],
                    "versions": {} if i else versions} for i in range(12)}}
        shards: dict[str, dict[str, Any]] = {}
        one_file: dict[str, Any] = {**main, "definitions": {}, "sources": dict([helpers])}
        for f in range(files):  # a program's source file and its shard
            shard = shards.setdefault(key("shard", f)[:2], {**header, "definitions": {}, "sources": dict([helpers])})
            own = {f"{10 * i + 1}:stencil_{f}_{i}": function for i in range(functions // files)}
            variants_here = {key("v", f, i): key("vf", f, i) for i in range(f, variants, files)}
            for facts in (shard, one_file):
                facts["sources"][key("f", f)] = {"identity": key("identity", f), "functions": own}
                facts["definitions"].update(variants_here)
        environment = key("environment")
        store.write_facts(key("one file"), one_file)
        store.write_facts(environment, main)
        for digits, value in shards.items():
            store.write_facts(f"{environment}-{digits}", value)
        first_shard = f"{environment}-{key('shard', 0)[:2]}"
        all_in_one = timed(lambda: store.read_facts(key("one file")), repeats=5)
        first_hit = timed(lambda: [store.read_facts(name) for name in (environment, first_shard)], repeats=5)
        size = sum(path.stat().st_size for path in (work / "store" / "facts").glob(f"{environment}*.json"))
        return (f"| {functions:,} ({files:,}) | {variants:,} | {size / 1e3:,.0f} kB in {1 + len(shards)} files"
                f" | {all_in_one * 1e3:.2f} ms | {first_hit * 1e3:.2f} ms |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def facts_main() -> list[str]:
    rows = list(FACTS_HEADER)
    for sizes in FACTS_SIZES:
        rows.append(facts_row(*sizes))
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    for line in main() + facts_main():
        print(line)
