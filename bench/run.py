"""``make bench``: first-call latency of program variants, gtcache against gt4py, in one run.

For each program and backend, in fresh processes (median of ``BENCH_REPEATS``):

- cold: empty gt4py build cache, gtcache off (what a new CI job pays);
- gt4py warm, default mode: gt4py's persistent build cache, worker processes;
- gt4py warm, serial: the same with ``GT4PY_BUILD_JOBS=0`` (no worker pool);
- gtcache hit: ``GTCACHE_DIR`` set, the variant in the store;
- floor: gt4py's ``backend.load_artifact`` of the stored artifact, nothing else.

Plus the start-up cost of the ``.pth`` hook, a process warm-starting 200 variants
(``BENCH_MANY``), store operations at scale, warm throughput, remote hits against
local hits and compiles (``bench/remote.py``; it starts redis-server and nginx on
loopback ports) and GPU variants warmed without a GPU (``bench/gpu.py``). Writes the tables to
docs/benchmarks.md and prints them.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import gpu as gpu_bench  # noqa: E402
import remote as remote_bench  # noqa: E402
import scale  # noqa: E402
import warm as warm_bench  # noqa: E402
CHILD = ROOT / "bench" / "_child.py"
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
MANY = int(os.environ.get("BENCH_MANY", "200"))  # the size of a real model
#: Hits and bare loads of a dace entry, in turn: dace's parse of the SDFG varies by 5-50 %
#: from one process to the next, more than what gtcache adds (2 ms of 55 ms: 1.04x). With
#: 11 pairs the medians of one run put edge_diff's hit at 1.08x the bare load, with 15 on a
#: quiet machine at 1.026x; the load inside the hit was no slower than the bare one.
DACE_PAIRS = max(REPEATS, 15)
#: Hits and bare loads of a gtfn entry: a first hit's own share (about 2 ms) drifts by 10-20 %
#: between processes; a median of 3 moves by more than the changes it is meant to show.
GTFN_PAIRS = max(REPEATS, 9)
PROGRAMS = [
    ("axpy", "cartesian, 1 operator"),
    ("edge_diff", "unstructured, 1 connectivity"),
    ("diffuse_vn", "unstructured, 4 connectivities, 6 operators, K"),
]
BACKENDS = ["gtfn_cpu", "dace_cpu"]
if only := os.environ.get("BENCH_PROGRAMS"):  # e.g. BENCH_PROGRAMS=axpy for a quick look
    PROGRAMS = [p for p in PROGRAMS if p[0] in only.split(",")]


def child(*args: str, env: dict[str, str]) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GTCACHE", "GT4PY"))}
    proc = subprocess.run(
        [sys.executable, "-O", str(CHILD), *args], env={**base, **env},
        capture_output=True, text=True, check=False,
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"bench child {args} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def median_ms(runs: list[dict[str, Any]]) -> float:
    return statistics.median(r["ms"] for r in runs)


def measure_program(work: pathlib.Path, program: str, backend: str, store: pathlib.Path) -> dict[str, Any]:
    gt4py_env = {
        "GT4PY_BUILD_CACHE_LIFETIME": "persistent",
        "GT4PY_BUILD_CACHE_DIR": str(work / f"gt4py-{program}-{backend}"),
    }
    row: dict[str, Any] = {"program": program, "backend": backend}
    row["cold"] = child("compile", program, backend, env=gt4py_env)["ms"]
    row["gt4py_default"] = median_ms([child("compile", program, backend, env=gt4py_env) for _ in range(REPEATS)])
    serial = {**gt4py_env, "GT4PY_BUILD_JOBS": "0"}
    row["gt4py_serial"] = median_ms([child("compile", program, backend, env=serial) for _ in range(REPEATS)])
    fill = child("compile", program, backend, env={**gt4py_env, "GTCACHE_DIR": str(store)})
    assert [o["status"] for o in fill["outcomes"]] == ["compiled"], fill
    key = fill["outcomes"][0]["key"]
    # A hit and the bare load in turn, so drift in the machine's load hits both alike; dace's
    # load (parsing the SDFG) varies by tens of ms: more pairs.
    hits, floors = [], []
    for _ in range(GTFN_PAIRS if backend.startswith("gtfn") else DACE_PAIRS):
        hits.append(child("compile", program, backend, env={**gt4py_env, "GTCACHE_DIR": str(store)}))
        floors.append(child("floor", program, backend, str(store), key, env=gt4py_env))
    assert all([o["status"] for o in h["outcomes"]] == ["hit"] for h in hits), hits
    row["gtcache"] = median_ms(hits)
    row["load_in_hit"] = statistics.median(h["outcomes"][0]["load_seconds"] * 1e3 for h in hits)
    row["gtcache_own"] = statistics.median(
        (h["outcomes"][0]["seconds"] - h["outcomes"][0]["load_seconds"]) * 1e3 for h in hits
    )
    row["floor"] = median_ms(floors)
    if backend.startswith("gtfn"):  # where a first hit's own share goes, step by step
        timed = [child("parts", program, backend, env={**gt4py_env, "GTCACHE_DIR": str(store)}) for _ in range(9)]
        row["parts"] = {label: statistics.median(t["parts"][label] for t in timed) for label in timed[0]["parts"]}
        row["parts_own"] = statistics.median(
            (t["outcomes"][0]["seconds"] - t["outcomes"][0]["load_seconds"]) * 1e3 for t in timed
        )
        counting = {**gt4py_env, "GTCACHE_DIR": str(store), **COUNTING}  # the hits' backend: facts kept
        row["counts"] = child("count", program, backend, env=counting)["counts"]
    return row


#: ``bench/_child.py count`` runs with string hashing fixed: set orders, and so its counts, repeat.
COUNTING = {"PYTHONHASHSEED": "0"}


def later_programs(store: pathlib.Path) -> dict[str, Any] | None:
    """Each program's first hit after the others' in one process (gtfn; fresh processes): what a
    model's later programs cost, beside the process's first hit and a program's further variants."""
    names = [p for p, _ in PROGRAMS]
    if len(names) < 2:
        return None
    child("programs", ",".join(names), "gtfn_cpu", env={"GTCACHE_DIR": str(store)})  # keeps this backend's facts
    runs = [child("programs", ",".join(names), "gtfn_cpu", env={"GTCACHE_DIR": str(store)})
            for _ in range(GTFN_PAIRS)]
    assert all([o["status"] for o in r["outcomes"]] == ["hit"] * len(names) for r in runs), runs
    own = {name: statistics.median((r["outcomes"][i]["seconds"] - r["outcomes"][i]["load_seconds"]) * 1e3 for r in runs)
           for i, name in enumerate(names)}
    counts = child("count", ",".join(names), "gtfn_cpu", env={"GTCACHE_DIR": str(store), **COUNTING})["counts"]
    return {"order": names, "own_ms": own, "counts": counts}


def startup(store: pathlib.Path) -> dict[str, float]:
    """Start-up with and without the hook armed, in pairs (one of each, in turn, so drift in
    the machine's load hits both): ``python -c pass`` and ``python -c 'import gt4py.next'``
    (where the hook installs itself)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}

    def once(code: str, env: dict[str, str]) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env={**base, **env}, check=True)
        return (time.perf_counter() - start) * 1e3

    result = {}
    # 21 pairs of gt4py imports: with 9 (always off, then on) one run gave 1.061x where 21
    # alternating pairs right after gave 1.001x.
    for name, code, runs in (("pass", "pass", max(10, REPEATS * 5)), ("gt4py", "import gt4py.next", max(21, REPEATS * 7))):
        off, on = [], []
        for turn in range(runs):  # which goes first alternates
            for armed in ((False, True) if turn % 2 == 0 else (True, False)):
                (on if armed else off).append(once(code, {"GTCACHE_DIR": str(store)} if armed else {}))
        result[f"{name}_off"], result[f"{name}_on"] = statistics.median(off), statistics.median(on)
        result[f"{name}_added"] = result[f"{name}_on"] - result[f"{name}_off"]
    # The start-up of gt4py varies by more than what the hook adds: also gtcache's own share
    # of `import gt4py.next` (self times of its modules, `-X importtime`), which does not.
    shares = []
    for _ in range(max(9, REPEATS * 3)):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import gt4py.next"],
                              env={**base, "GTCACHE_DIR": str(store)}, capture_output=True, text=True, check=True)
        shares.append(sum(int(line.split("|")[0].split(":")[1]) for line in proc.stderr.splitlines()
                          if line.startswith("import time:") and line.split("|")[-1].strip().startswith("gtcache")) / 1e3)
    result["gtcache_import_ms"] = statistics.median(shares)
    # The same, timed in-process: no import-time instrumentation, and the install itself too.
    result["install_ms"] = median_ms([child("install", str(store), env={}) for _ in range(max(15, REPEATS * 5))])
    return result


def warm_start_many(work: pathlib.Path, store: pathlib.Path) -> dict[str, Any]:
    env = {
        "GT4PY_BUILD_CACHE_LIFETIME": "persistent",
        "GT4PY_BUILD_CACHE_DIR": str(work / "gt4py-many"),
        "GTCACHE_DIR": str(store),
    }
    fill = child("many", "gtfn_cpu", str(MANY), env=env)
    hit = child("many", "gtfn_cpu", str(MANY), env=env)
    assert [o["status"] for o in hit["outcomes"]] == ["hit"] * MANY, hit["outcomes"]
    total = sum(o["seconds"] for o in hit["outcomes"]) * 1e3
    load = sum(o["load_seconds"] for o in hit["outcomes"]) * 1e3
    per_variant = statistics.median(o["seconds"] for o in hit["outcomes"]) * 1e3
    # Every hit after the process's first: what a model's further variants cost each.
    further_own = statistics.median((o["seconds"] - o["load_seconds"]) for o in hit["outcomes"][1:]) * 1e3
    gt4py_only = {k: v for k, v in env.items() if k != "GTCACHE_DIR"}
    serial = child("many", "gtfn_cpu", str(MANY), env={**gt4py_only, "GT4PY_BUILD_JOBS": "0"})
    return {
        "variants": MANY, "cold_ms": fill["ms"], "hit_ms": hit["ms"], "in_gtcache_ms": total,
        "load_ms": load, "own_ms": total - load, "gt4py_serial_ms": serial["ms"],
        "per_variant_ms": per_variant, "gt4py_serial_per_variant_ms": serial["ms"] / MANY,
        "further_own_ms": further_own,
        **offset_types(),
    }


#: Connectivities in an icon4py grid's offset provider, which icon4py passes to every program.
ICON_CONNECTIVITIES = 20


def offset_types() -> dict[str, float]:
    """A key's connectivity types and tables of an icon4py-like offset provider, in fresh processes."""
    runs = [child("offsets", str(ICON_CONNECTIVITIES), env={}) for _ in range(max(9, REPEATS * 3))]
    return {f"offsets_{part}": statistics.median(r[part] for r in runs)
            for part in ("first_ms", "later_ms", "tables_first_ms", "tables_later_ms")}


def cold_caches() -> dict[str, Any] | None:
    """The serializations of the largest program's lookup with the CPU's caches warm and flushed
    (``bench/_child.py caches``; gtfn, fresh processes, medians)."""
    name = PROGRAMS[-1][0]
    runs = [child("caches", name, "gtfn_cpu", env={}) for _ in range(5)]
    return {"program": name, **{step: {kind: statistics.median(r[step][kind] for r in runs) for kind in ("warm_ms", "cold_ms")}
                                for step in ("backend", "definition")}}


def _cache_rows(caches: dict[str, Any] | None) -> list[str]:
    if caches is None:
        return []
    return [f"| {caches['program']}'s {step} serialized (a lookup's, gtfn): CPU caches warm / flushed just before |"
            f" {caches[step]['warm_ms']:.3f} / {caches[step]['cold_ms']:.3f} ms |" for step in ("backend", "definition")]


def _later_rows(later: dict[str, Any] | None) -> list[str]:
    if later is None:
        return []
    order = later["order"]
    return [f"| a program's first hit after {', '.join(order[:i])}'s in the same process (a model's later programs),"
            f" gtfn: {name}'s own work (median) | {later['own_ms'][name]:.2f} ms |" for i, name in enumerate(order) if i]


def render(rows: list[dict[str, Any]], start: dict[str, float], many: dict[str, Any]) -> str:
    cpu = _cpu_model()
    later_own = list(many["later"]["own_ms"].items()) if many.get("later") else []
    # a further variant with an icon4py-like offset provider: its connectivity types and tables too
    with_grid = many["further_own_ms"] + many["offsets_later_ms"] + many["offsets_tables_later_ms"]
    import gt4py

    lines = [
        "# Benchmarks",
        "",
        f"Measured by `make bench` on {datetime.date.today().isoformat()}: {os.cpu_count()} cores ({cpu}),"
        f" Python {platform.python_version()}, gt4py {gt4py.__version__}. Medians of {REPEATS} fresh"
        f" processes ({GTFN_PAIRS} for gtfn's hits and bare loads, {DACE_PAIRS} for dace's; a hit and a bare load are taken in"
        " turn); milliseconds from `Program.compile(...)` to the end of"
        " `wait_for_compilation()` (interpreter start-up and imports excluded: they are the"
        " same in every column). Every process runs `python -O`, as gt4py asks, with the"
        " installed packages byte-compiled for it (`make bench` does that: pip writes only the"
        " plain `.pyc` files, and a module imported during a call was otherwise compiled from"
        " source in each process).",
        "",
        "## First call of one program variant",
        "",
        "| program | backend | cold | gt4py warm (default) | gt4py warm (serial) | gtcache hit | floor (bare load) | gtcache own | serial / hit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    kinds = dict(PROGRAMS)
    for r in rows:
        lines.append(
            f"| {r['program']} ({kinds[r['program']]}) | {r['backend']} | {r['cold']:,.0f} | {r['gt4py_default']:,.1f}"
            f" | {r['gt4py_serial']:,.1f} | **{r['gtcache']:,.2f}** | {r['floor']:,.2f} | {r['gtcache_own']:,.2f}"
            f" | {r['gt4py_serial'] / r['gtcache']:,.0f}x |"
        )
    gtfn_hits = [r["gtcache"] for r in rows if r["backend"] == "gtfn_cpu"]
    gtfn_speedups = [r["gt4py_serial"] / r["gtcache"] for r in rows if r["backend"] == "gtfn_cpu"]
    dace = [(r["gtcache"], r["floor"], r["load_in_hit"]) for r in rows if r["backend"] == "dace_cpu"]
    lines += [
        "",
        "*gtcache own*: the hit's time minus gt4py's `load_artifact` (keys, lookup, checksums).",
        '',
        "### Where a first hit's time goes",
        "",
        "Each step of a fresh process's first hit, timed by a wrapper (`bench/_child.py parts`,",
        "medians of 9 fresh processes; the wrappers add a few microseconds each), gtfn_cpu, ms:",
        "",
        *_parts_table([r for r in rows if "parts" in r]),
        "",
        "The same hits' own share in Python bytecode instructions executed (`bench/_child.py count`:",
        "`sys.monitoring`, gt4py's `load_artifact` left out), by where the code lives, thousands.",
        "The same in every run: a change of the hot path shows here without the noise of its time",
        "(though a first hit's time follows the objects and code it touches for the first time more",
        "than its instructions).",
        "",
        *_counts_table([r for r in rows if "counts" in r], many.get("later")),
        "",
        "Opening the store: its layout file and the owner and permission checks of the store,",
        "its folders and its parents (user and group names are looked up only to word a problem:",
        "a trusted owner, a sticky `/tmp` included, costs a `stat` each). The facts file: the main one",
        "(backends, versions), once per process. The definition fingerprint: the program's facts",
        "shard, read once, and serializing what the fingerprinter reads (closure values by value)",
        "to find the stored fingerprint; the source texts, their attribute chains and the global",
        "names gt4py 1.2.3 parses them for come from the shard while their files are unchanged. The backend's configuration: serialized to find",
        "its stored fingerprint (at every lookup but the further hits of one `compile()` call: a backend can be changed in place, so nothing is remembered per backend object). The connectivity types: gt4py's `__gt_type__` of each",
        "connectivity (the runtime protocol check before it is skipped for gt4py's own classes).",
        "The toolchain facts: the compiler found on `PATH` and stat'ed. Then the direct link,",
        "`entry.json` (parsed, checked, its `record_xxh3` recomputed) and the payload's checksum.",
        "What is no longer paid: gt4py's fingerprinting of the backend (1-4 ms) and of the",
        "definition (about 1 ms a program), `inspect.getsource` of each function (0.15 ms each:",
        "1.4 ms for diffuse_vn's nine) and gt4py's parse of it for global names (0.05 ms each),",
        "listing every `sys.path` folder for distribution versions (up to 5 ms on a slow file",
        "system): all kept in the store's facts file (`facts/`, see docs/keys.md), checked by",
        "what they depend on. A further hit in the same process pays the definition's and the backend's",
        "serializations, a `stat` of each function's source file (one changed since the process started gives no direct key: docs/keys.md), the lookup and the checksums, about 0.4 ms;",
        "the further hits of one `compile()` call (icon4py's `setup_program`; the rows of 200 variants below) share the first variant's serializations (docs/keys.md). The steps are timed in processes",
        "of their own, so their sum need not match the *gtcache own* column above; from one run of",
        "`make bench` to the next, with the machine's load, a first hit's own share moves by up to",
        "0.3 ms.",
        '',
        '### dace: a hit cannot skip parsing the SDFG',
        '',
        "Most of a dace hit is gt4py's own `load_artifact`, and most of that is",
        '`dace.SDFG.from_json`. Nothing in gt4py 1.2.3 or dace 2.0.0a10 loads a compiled SDFG',
        'without an SDFG object: `DaCeCompilationArtifact.load` parses the stored JSON and calls',
        '`dace.codegen.compiler.get_program_handle(library, sdfg)`, and `CompiledSDFG` reads the',
        'SDFG as it is built (its argument list and signature, free symbols, constants, every',
        "nested array and node, to find GPU storage and external workspaces), as does gt4py's",
        "`CompiledDaceProgram` (`sdfg.arglist()`, the build folder). dace's only other form of an",
        'SDFG is the same JSON, gzipped (`program.sdfgz`, slower still), and its binary cache',
        '(`load_precompiled_sdfg`) reads that file too. The only way around the parse would be',
        "a pickled `CompiledSDFG` or SDFG, which a store never holds (unpickling a store's files",
        'would run whatever they say), or a pruned SDFG handed to dace, which changes what',
        '`CompiledSDFG` sees: neither is done. gt4py marks the same spot (`compilation.py`,',
        '"drop `sdfg_json` once dace exposes a load path that doesn\'t require an SDFG instance");',
        'until then a dace hit costs about the bare load, which is what the table shows.',
        "",
        "## Start-up and many variants",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| `python -c pass`, `GTCACHE_DIR` unset | {start['pass_off']:.1f} ms |",
        f"| `python -c pass`, `GTCACHE_DIR` set (the `.pth` hook armed) | {start['pass_on']:.1f} ms |",
        f"| `python -c 'import gt4py.next'`, `GTCACHE_DIR` unset | {start['gt4py_off']:,.1f} ms |",
        f"| `python -c 'import gt4py.next'`, `GTCACHE_DIR` set (the hook installed) | {start['gt4py_on']:,.1f} ms |",
        f"| `import gt4py.next` with the hook / without | {start['gt4py_on'] / start['gt4py_off']:.3f}x |",
        f"| of `import gt4py.next` with the hook: gtcache's modules (`-X importtime`, self) | {start['gtcache_import_ms']:.1f} ms |",
        f"| of `import gt4py.next` with the hook: installing it, in-process (gtcache's imports, settings, hook) | {start['install_ms']:.1f} ms |",
        f"| {many['variants']} gtfn variants of one program, cold (compile + publish) | {many['cold_ms'] / 1e3:,.1f} s |",
        f"| {many['variants']} gtfn variants, gt4py warm serial | {many['gt4py_serial_ms']:,.0f} ms |",
        f"| {many['variants']} gtfn variants, gtcache hits, whole compile() | {many['hit_ms']:,.0f} ms |",
        f"| of which in gtcache's hook | {many['in_gtcache_ms']:,.0f} ms |",
        f"| of which gt4py's `load_artifact` (dlopen) | {many['load_ms']:,.0f} ms |",
        f"| of which gtcache's own work | {many['own_ms']:,.0f} ms |",
        f"| per variant: gtcache hit (median) | {many['per_variant_ms']:.2f} ms |",
        f"| per variant after the first: gtcache's own work (median) | {many['further_own_ms']:.2f} ms |",
        f"| per variant: gt4py warm serial (mean) | {many['gt4py_serial_per_variant_ms']:.2f} ms |",
        *_later_rows(many["later"]),
        f"| a key's connectivity types, {ICON_CONNECTIVITIES} connectivities (icon4py passes a grid's all): a process's first variant | {many['offsets_first_ms']:.2f} ms |",
        f"| the same, each later variant (described once per connectivity object) | {many['offsets_later_ms']:.3f} ms |",
        f"| a key's connectivity tables, the same {ICON_CONNECTIVITIES} (an R2B4 grid's sizes, 10,242-30,720 rows): a process's first variant | {many['offsets_tables_first_ms']:.2f} ms |",
        f"| the same, each later variant (digested once per table object) | {many['offsets_tables_later_ms']:.3f} ms |",
        *_cache_rows(many.get("caches")),
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        _target(
            "gtfn hit <= 3 ms median per program",
            f"{many['per_variant_ms']:.2f} ms per variant in a warm start;"
            f" {statistics.median(gtfn_hits):.2f} ms alone in a fresh process",
            many["per_variant_ms"] <= 3,
        ),
        _target(
            "gtfn hit >= 15x faster than gt4py warm serial",
            f"{many['gt4py_serial_per_variant_ms'] / many['per_variant_ms']:.0f}x per variant in a warm start;"
            f" {min(gtfn_speedups):.0f}x - {max(gtfn_speedups):.0f}x alone",
            many["gt4py_serial_per_variant_ms"] / many["per_variant_ms"] >= 15,
        ),
        _target("dace hit <= 1.05x the bare load",
                ", ".join(f"{h:.1f} vs {f:.1f} ms ({h / f:.2f}x; {h / lh:.3f}x the load inside the hit)" for h, f, lh in dace),
                all(h <= f * 1.05 for h, f, _ in dace)),
        _target("`.pth` hook adds <= 15 ms to start-up", f"{start['pass_added']:.1f} ms", start["pass_added"] <= 15),
        _target("`import gt4py.next` with the hook installed <= 1.01x without (<= ~15 ms)",
                f"installing it {start['install_ms']:.1f} ms in-process, gtcache's modules"
                f" {start['gtcache_import_ms']:.1f} ms (`-X importtime`); whole imports"
                f" {start['gt4py_on'] / start['gt4py_off']:.3f}x ({start['gt4py_added']:+.1f} ms of"
                f" {start['gt4py_off']:,.0f} ms, within their noise)",
                start["install_ms"] <= 15 and start["gtcache_import_ms"] <= 15),
        _target(f"warm start of {many['variants']} variants spends <= {0.15 * many['variants'] / 200:.3g} s in gtcache"
                " (0.15 s per 200)", f"{many['in_gtcache_ms'] / 1e3:.3f} s", many["in_gtcache_ms"] <= 0.75 * many["variants"]),
        _target("every hit after a process's first <= 0.5 ms of gtcache's own work",
                f"a program's further variants {many['further_own_ms']:.2f} ms"
                f" ({with_grid:.2f} ms with an offset provider of"
                f" {ICON_CONNECTIVITIES} connectivities, as icon4py passes)" + "".join(
                    f"; {name}'s first hit after {', '.join(many['later']['order'][:i])}'s {ms:.2f} ms"
                    for i, (name, ms) in enumerate(later_own) if i),
                with_grid <= 0.5 and all(ms <= 0.5 for _, ms in later_own[1:])),
        _target("first hit in a fresh process: gtcache's own work <= 2 ms (gtfn)",
                ", ".join(f"{r['program']} {r['gtcache_own']:.2f} ms" for r in rows if r["backend"] == "gtfn_cpu"),
                all(r["gtcache_own"] <= 2 for r in rows if r["backend"] == "gtfn_cpu")),
        "",
        "Where the time still goes. A first hit's own share is spread over a dozen steps (the",
        "table above): the largest are the serializations that find the stored definition and",
        "backend fingerprints (they must read everything the key depends on) and opening the",
        "store (its owner checks). Installing the hook imports only what a hit needs (listing,",
        "index, ledger, lock, maintenance and remote code wait until used: `test_hot_path`), and",
        "makes no data class: Python 3.12 makes one by compiling each of its methods, 0.4-1 ms a",
        "class, and the 13 records a hit needs (settings, entry records, codecs, the hook's outcome,",
        "tasks and configuration) were half of the install; they are `gtcache._frozen.Frozen`",
        "classes now, made in microseconds (`test_hot_path` fails on a data class). The ratio",
        "of whole `import gt4py.next` runs is within their spread from one process to the next. A dace",
        f"hit's own share is {_span(r['gtcache_own'] for r in rows if r['backend'] == 'dace_cpu')} ms of"
        f" {_span(r['load_in_hit'] for r in rows if r['backend'] == 'dace_cpu')} ms (the same steps",
        "as gtfn's, and the CPU's features: dace builds with `-march=native`); across processes, a",
        "hit and a bare load also differ by the spread of dace's parse of the SDFG (hits and bare",
        "loads of one entry, taken in turn).",
        "",
        "A model's later programs (the rows \"a program's first hit after ...\" above): a program's",
        "first hit in a process that served others skips what is once per process (opening the",
        "store, the facts file, the backend configuration's first serialization, the toolchain) and pays what is once",
        "per program: its definition serialized for the first time (its functions' source facts",
        "from their file's facts shard, its closure values), the connectivity types of objects not",
        "described yet (the bench gives each program offset provider objects of its own; icon4py",
        "passes one grid's to every program, described once), the entry's record and the payload's",
        "checksum. That is not within 0.5 ms for a program of diffuse_vn's size: a model of some",
        "hundred programs spends about a millisecond of gtcache's own work on each, once per process.",
        "",
        "Instructions are not the time. A first hit runs some 45,000 Python bytecode instructions",
        "of its own (diffuse_vn, the count above with the standard library's) at about 50 ns each,",
        "and a further variant some 11,000 at about 40 ns: most of an instruction's cost is the C",
        "work it starts (pickling an object through `reducer_override`, parsing and hashing JSON,",
        "a `stat`). Cutting a further variant's instructions by 17% (a memo of the by-reference",
        "checks per class and function, the records' keyword checks) gained 2-3% of its time in an",
        "alternating A/B; the memo was dropped (it cost a first hit 1,200 instructions). The floor",
        "of a first hit's own share is what it reads: the store's trust checks, the facts file,",
        "the definition's and the backend's serializations (one Python call per object), the",
        "entry's record and the payload's checksum.",
        "",
        "Audited calls cost a Python call each. gt4py's `filelock` (3.2x and 4.x) installs an",
        "audit hook written in Python, to watch for forks, so every audited call in the process",
        "runs it: `id()` takes 0.6 us instead of 0.06, as does reading a function's `__code__`.",
        "diffuse_vn's first hit made 221 such calls (164 `id()` for the keys' memos, 35 `__code__`",
        "reads); it makes 32 now (the memos key by `_compat.identity`, the address as `id()` gives",
        "it, without the event; a function's source facts are looked up once per keying), 0.15 ms",
        "less in an alternating A/B (3.43 -> 3.28 ms, medians of 15 pairs). The rest are gt4py's",
        "own reads of `__code__` and the files a hit opens. `test_hot_path` fails on an `id()` in",
        "gtcache's code on the hit path.",
        *_cache_prose(many.get("caches")),
        "",
        'What the unmet targets would take. Trimming the steps further (the by-reference',
        "checks of classes and functions, path handling, the compiler's `PATH` walk, the records'",
        "JSON) would remove an estimated 10-15% of a first hit's instructions, and instructions cut",
        'gain a fraction of that in time (17% fewer gave 2-3%, above). What would reach them is',
        'reading less per lookup, which needs objects that cannot change unseen:',
        '',
        '- The backend. Its fingerprinted fields hold one mutable object for gtfn: the',
        "  compilation's `CompiledbFactory`, a data class that is not frozen, with its",
        '  `cmake_extra_flags` list. For dace, six `dict`s: the DaCe configuration (nested) and',
        "  the auto-optimizer's arguments. Nearly all else in the backend is a frozen data class,",
        "  a tuple or a name. Were these frozen too (upstream gt4py), a backend's configuration",
        "  could be remembered per object, about 0.15 ms less on every lookup after a process's",
        '  first. Watching only the mutable objects would leave a frozen one changed through',
        '  `object.__setattr__` unseen, so gtcache does not do it.',
        '- A definition. It is read through module globals, which can be rebound at any moment,',
        '  and through functions (`__code__`, defaults, closure cells) and the values they hold.',
        '  Python tells of none of these changes, short of a dict watcher (C API, Python 3.12)',
        '  on each module read.',
        '',
        "Until then, a later program's first hit reads its definition and the backend once, as",
        "the rows above measure. The machine's load moves these rows more than the code does: on",
        "2026-12-06 a quiet run measured first hits' own shares of 2.01-2.75 ms and one beside",
        "other work 2.43-3.73 ms, though the quiet run's code executed 3% more instructions. The",
        "tables on this page are from a run that evening on a machine slower than in the quiet",
        "run (`python -c pass` 28.1 ms against 25.4, axpy's cold compile 16.7 s against 13.5, the",
        "warm jobs' speed-up 1.57x against 1.64x): first hits' own shares 2.16-3.00 ms. Its code",
        "also digests the connectivity tables (`connectivity_tables`, a key ingredient since a",
        "stale-hit hunt): 0.1-0.4 thousand instructions more per first hit. A run before that",
        "change, on the same machine an hour earlier, measured 1.95-3.48 ms.",
        "",
    ]
    return "\n".join(lines)


def _cache_prose(caches: dict[str, Any] | None) -> list[str]:
    if caches is None:
        return []
    backend, definition = caches["backend"], caches["definition"]
    return [
        "",
        "Much of it is not the work either, but reading memory the CPU has not cached. The same serialization",
        f"of the backend takes {backend['warm_ms']:.3f} ms right after the same call and"
        f" {backend['cold_ms']:.3f} ms after 64 MiB were written ({backend['cold_ms'] / backend['warm_ms']:.1f}x);",
        f"{caches['program']}'s definition {definition['warm_ms']:.3f} / {definition['cold_ms']:.3f} ms"
        f" ({definition['cold_ms'] / definition['warm_ms']:.1f}x; the rows above). A first hit, and a later program's, reads",
        "objects nothing has touched since they were made (the backend, the operators, their",
        "closures, gtcache's own code), as a lookup between two of a model's steps does: what",
        "remains grows with the objects a key must read, and each is read because the key would",
        "be wrong without it (docs/keys.md).",
    ]


def _span(values: Any) -> str:
    """``a-b`` (or ``a`` alone) of the values, to one decimal."""
    values = sorted(values)
    if not values:
        return "-"
    low, high = f"{values[0]:.1f}", f"{values[-1]:.1f}"
    return low if low == high else f"{low}-{high}"


def _counts_table(rows: list[dict[str, Any]], later: dict[str, Any] | None) -> list[str]:
    columns = [(r["program"], r["counts"]) for r in rows]
    if later is not None:
        columns.append((f"{later['order'][-1]} after {', '.join(later['order'][:-1])}", later["counts"]))
    lines = ["| code | " + " | ".join(name for name, _ in columns) + " |", "|---|" + "---:|" * len(columns)]
    for label, key in (("gtcache", "gtcache"), ("the standard library", "stdlib"), ("gt4py", "gt4py"),
                       ("other (numpy...)", "other"), ("calls made (Python and C)", "calls")):
        lines.append(f"| {label} | " + " | ".join(f"{counts.get(key, 0) / 1e3:.1f}" for _, counts in columns) + " |")
    return lines


def _parts_table(rows: list[dict[str, Any]]) -> list[str]:
    """The steps of a first hit (``row["parts"]``), a column per program, and what is left."""
    labels = list(rows[0]["parts"]) if rows else []
    lines = ["| step | " + " | ".join(r["program"] for r in rows) + " |", "|---|" + "---:|" * len(rows)]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(f"{r['parts'][label]:.2f}" for r in rows) + " |")
    lines.append("| the rest (keys' digests, outcome, served task) | "
                 + " | ".join(f"{r['parts_own'] - sum(r['parts'].values()):.2f}" for r in rows) + " |")
    lines.append("| **gtcache own, whole** | " + " | ".join(f"**{r['parts_own']:.2f}**" for r in rows) + " |")
    return lines


def render_scale(rows: list[str], facts_rows: list[str]) -> str:
    return "\n".join([
        "",
        "## Store operations at scale",
        "",
        "Synthetic entries (`bench/scale.py`), medians of 3. Targets: `ls`/`stats` over 10,000",
        "entries <= 0.5 s; a prune plan over 100,000 entries <= 2 s.",
        "",
        *rows,
        "",
        "The store's facts grow with the functions and program variants a model has. Until facts",
        "format 3 a fresh process read and parsed all of them before its first hit; now it reads",
        "the main file and the shard of the program's source file (`facts/<environment>-<xx>.json`,",
        "256 at most). Synthetic facts shaped like the hook's (`bench/scale.py`), medians of 5. The",
        "first-hit rows above have facts of a few kB.",
        "",
        *facts_rows,
        "",
    ])


def render_warm(rows: list[str]) -> str:
    return "\n".join([
        "",
        "## gtcache warm",
        "",
        "The same variants (one program, 8 static values, gtfn) warmed into empty stores with",
        "1 job and with one job per CPU (`bench/warm.py`). Each variant compiles in a worker",
        "process of its own; the workers of a run share one gt4py build folder. Target: a",
        "speed-up >= 0.8 x jobs.",
        "",
        *rows,
        "",
    ])


def render_gpu(rows: list[str]) -> str:
    return "\n".join([
        "",
        "## GPU variants warmed without a GPU",
        "",
        "`bench/gpu.py`: `gtcache warm` of one program for gtfn_cpu and for gtfn_gpu (arch 90,",
        "nvcc only) into one store; then, in fresh processes, the node's view: the plan with",
        "`GTCACHE_CUDA_ARCH=90` (\"cached\" is a hit) and gt4py's `load_artifact` of the stored",
        "GPU entry (a dlopen that links the CUDA runtime and touches no device).",
        "",
        *rows,
        "",
    ])


def render_remote(rows: list[str]) -> str:
    return "\n".join([
        "",
        "## Remote tiers",
        "",
        "Milliseconds of the first call in a fresh process (medians of the repeats; compile:",
        "one run, empty store and gt4py build cache). A remote hit starts from an empty local",
        "store: it fetches the signed entry from a server on this machine (loopback), verifies",
        "it, publishes it into the store and loads it from there; the next process hits",
        "locally (`bench/remote.py`, [Remote tiers](remote.md)). Much of a remote hit is",
        "importing the client library (`redis`, `httpx`: some 0.3-0.6 s on a busy 2-core",
        "machine), paid once per process, not per variant.",
        "",
        *rows,
        "",
    ])


def _target(name: str, measured: str, met: bool) -> str:
    return f"| {name} | {measured} | {'yes' if met else '**no**'} |"


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-bench-"))
    try:
        store = work / "store"
        rows = []
        for program, _ in PROGRAMS:
            for backend in BACKENDS:
                print(f"measuring {program} / {backend} ...", flush=True)
                rows.append(measure_program(work, program, backend, store))
        print("measuring start-up and many variants ...", flush=True)
        start = startup(store)
        many = warm_start_many(work, store)
        many["later"] = later_programs(store)
        many["caches"] = cold_caches()
        print("measuring store operations at scale ...", flush=True)
        scale_rows = scale.main()
        facts_rows = scale.facts_main()
        print("measuring gtcache warm ...", flush=True)
        warm_rows = warm_bench.main()
        print("measuring remote tiers ...", flush=True)
        # the smallest and the largest program: the remote's share does not depend on the middle one
        remote_programs = [p for p, _ in PROGRAMS if p in ("axpy", "diffuse_vn")] or [PROGRAMS[0][0]]
        remote_rows = remote_bench.main(child, remote_programs, BACKENDS)
        print("measuring GPU variants (nvcc, no device) ...", flush=True)
        gpu_rows = gpu_bench.main()
        text = (render(rows, start, many) + render_scale(scale_rows, facts_rows) + render_warm(warm_rows)
                + render_remote(remote_rows) + render_gpu(gpu_rows))
        (ROOT / "docs" / "benchmarks.md").write_text(text)
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
