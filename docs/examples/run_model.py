"""A stand-in for a model run: calls one gt4py program and says how long its first call took.

The docs run it with and without GTCACHE_DIR (scripts/record-docs). Nothing here knows
about gtcache: the start-up hook serves the compilation when GTCACHE_DIR is set.
"""

import sys
import time

from gtcache import examples


def main() -> None:
    backend = examples.backend_by_name(sys.argv[1] if len(sys.argv) > 1 else "gtfn_cpu")
    program = examples.edge_diff.with_backend(backend)
    offset_provider = examples.ring_offset_provider(1000)
    args, out = examples.EXAMPLES["edge_diff"].make_args(1000, 0)

    start = time.perf_counter()
    program(*args, offset_provider=offset_provider)  # the first call compiles (or loads)
    print(f"first call of edge_diff ({backend.name}): {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":  # gt4py compiles in spawned worker processes, which import this file
    main()
