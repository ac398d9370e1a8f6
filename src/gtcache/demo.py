"""``python -m gtcache.demo --cache-dir DIR``: compile the built-in examples through a store.

Each example program is compiled for each backend through ``compile_variants``:
the first run compiles and publishes, later runs (in fresh processes) load from
the store. Every variant is run and checked against NumPy.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import gtcache
from gtcache import examples
from gtcache.gt4py import compile_variants

DEFAULT_BACKENDS = ("gtfn_cpu", "dace_cpu", "roundtrip")
SIZE = 32


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gtcache.demo", description=__doc__)
    parser.add_argument("--cache-dir", help="The store (default: GTCACHE_DIR or the user cache dir).")
    parser.add_argument("--backend", action="append", choices=DEFAULT_BACKENDS)
    args = parser.parse_args(argv)
    settings = gtcache.Settings.from_env(cache_dir=args.cache_dir)
    store = gtcache.open_store(settings.cache_dir, index_dir=settings.index_dir)
    print(f"Store: {store.root}")
    failures = 0
    for example in examples.EXAMPLES.values():
        for backend_name in args.backend or DEFAULT_BACKENDS:
            start = time.perf_counter()
            offset_provider = example.offset_provider(SIZE)
            program, outcomes = compile_variants(
                store,
                example.program,
                backend=examples.backend_by_name(backend_name),
                offset_provider=offset_provider,
                settings=settings,
            )
            seconds = time.perf_counter() - start
            call_args, out = example.make_args(SIZE, 1)
            program(*call_args, offset_provider=offset_provider)
            ok = np.allclose(out.asnumpy(), example.reference(call_args))
            failures += not ok
            for outcome in outcomes:
                verb = {"hit": "loaded", "compiled": "compiled", "bypassed": "bypassed"}[outcome.status]
                print(
                    f"  {verb:<9} {example.name:<10} {backend_name:<10} {seconds * 1000:9.1f} ms"
                    f"  key {(outcome.key or '-')[:12]}  result {'ok' if ok else 'WRONG'}"
                    + (f"  ({outcome.detail})" if outcome.detail else "")
                )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
