"""``python -m gtcache.warm.worker SPEC_JSON STORE [PARENT_PID]``: compile one variant into a store.

Runs in a process of its own (one per variant), so that a crash, a timeout or
the memory of one compilation never touches another. Prints one ``RESULT``
line: status ("compiled", "cached", "bypassed", "failed"), key, seconds,
peak memory and, on failure, the error.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
import time
import traceback
from typing import Any

from gtcache.warm._session import signal_session


def follow_parent(parent: int) -> None:
    """End this worker and its compilers when the process that started it ends, also when
    that one is killed outright (SIGKILL: a CI job's hard cancel), where nobody would stop
    them: a thread watches the parent (a signal, ``PR_SET_PDEATHSIG``, would be handled
    only when the main thread runs Python, and by whatever handler the program's modules
    installed), and a worker that leads its session (``run_spec`` starts it so) kills the
    session, itself last: the compile is given up, its folder is ``tmp/``'s to clean."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        if os.getsid(0) == os.getpid():
            signal_session(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="gtcache-follow-parent", daemon=True).start()


def run(spec_json: str, store_path: str) -> dict[str, Any]:
    start = time.perf_counter()
    result: dict[str, Any]
    try:
        from gtcache.gt4py import compile_variants
        from gtcache.gt4py.targets import load_object, resolve_backend, resolve_grid
        from gtcache.settings import Settings
        from gtcache.store import open_store
        from gtcache.warm.spec import VariantSpec

        settings = Settings.from_env()  # this process's environment, once (the parent's)
        spec = VariantSpec.from_json(json.loads(spec_json))
        program = load_object(spec.program, what="program")
        store = open_store(store_path)
        _, outcomes = compile_variants(
            store, program, backend=resolve_backend(spec.backend),
            offset_provider=resolve_grid(spec.grid),
            static_args={name: [value] for name, value in spec.static_args}, settings=settings,
        )
        statuses = {o.status for o in outcomes}
        status = "cached" if statuses == {"hit"} else "compiled" if "compiled" in statuses else "bypassed"
        result = {"status": status, "key": outcomes[0].key if outcomes else None,
                  "detail": next((o.detail for o in outcomes if o.detail), None)}
    except BaseException as error:  # noqa: BLE001 - the worker reports everything, raises nothing
        result = {"status": "failed", "key": None,
                  "detail": "".join(traceback.format_exception_only(error)).strip()}
    result["seconds"] = time.perf_counter() - start
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    result["peak_memory"] = peak_kib * 1024
    return result


if __name__ == "__main__":
    if len(sys.argv) > 3:  # the process that started this worker (run_spec)
        follow_parent(int(sys.argv[3]))
    print("RESULT " + json.dumps(run(sys.argv[1], sys.argv[2])), flush=True)
