"""Running warm jobs: one worker process per variant, a bounded number at a time, locally
or on a dask.distributed cluster.

Every variant compiles in a fresh ``python -m gtcache.warm.worker`` process and
publishes atomically into the store, so a crash, a kill or a timeout fails that
variant alone and leaves no partial entry. How many run at once is the smaller of
``jobs`` and what the memory budget allows (compilers are memory hungry: icon4py
CI had to cap gt4py's build jobs at 8).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from gtcache.warm._session import exit_status, signal_session
from gtcache.warm.spec import VariantSpec

__all__ = [
    "DEFAULT_MEMORY_PER_JOB", "WarmResult", "Workers", "effective_jobs", "gpu_build_env", "run_local", "run_on_dask",
    "stop_run",
    "run_spec",
]

#: What one compilation is assumed to need at most (a large gtfn stencil's C++ build).
DEFAULT_MEMORY_PER_JOB = 2 * 1024**3


#: What ``gtcache warm`` did with a variant ("unplannable": see ``gtcache.warm.plan``).
WarmStatus = Literal["compiled", "cached", "bypassed", "failed", "timeout", "unplannable"]


@dataclasses.dataclass(frozen=True)
class WarmResult:
    spec: VariantSpec
    status: WarmStatus
    key: str | None
    seconds: float
    peak_memory: int = 0
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), "status": self.status, "key": self.key,
                "seconds": round(self.seconds, 3), "peak_memory": self.peak_memory, "detail": self.detail}


def available_memory() -> int:
    """MemAvailable (Linux), else total physical memory."""
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def effective_jobs(jobs: int | None, *, max_memory: int | None, memory_per_job: int) -> int:
    """Parallel jobs: ``jobs`` (default: the CPUs this process may use), capped by memory."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    wanted = jobs or cpus
    budget = max_memory if max_memory is not None else int(available_memory() * 0.8)
    return max(1, min(wanted, budget // max(memory_per_job, 1)))


def gpu_build_env(device: str, arch: str) -> dict[str, str]:
    """What a worker building for ``arch`` without a GPU sets: the variable gt4py and CMake
    build for (``CUDAARCHS``; ``HIPARCHS``), dace's own (``DACE_compiler_cuda_cuda_arch``,
    as gt4py would set it from a device), gtcache's declaration (the key's ``device.arch``),
    and no visible device (a local GPU of another arch must not decide the key)."""
    if device == "rocm":
        return {"HIPARCHS": arch, "DACE_compiler_cuda_hip_arch": arch, "GTCACHE_HIP_ARCH": arch,
                "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}
    return {"CUDAARCHS": arch, "DACE_compiler_cuda_cuda_arch": arch, "GTCACHE_CUDA_ARCH": arch,
            "CUDA_VISIBLE_DEVICES": ""}


def run_spec(
    spec: VariantSpec, store: str, *, timeout: float | None, build_dir: str | None = None,
    workers: Workers | None = None, run: str | None = None,
) -> WarmResult:
    """Compile one variant in a worker process (runs here, or on a dask worker).

    ``build_dir``: a gt4py build cache the workers of one warm run share, so that
    gt4py's per-folder CMake set-up is paid once, not once per variant. ``workers``: the
    run's, which stops the worker when the run is interrupted; on a dask worker, ``run``
    names the run instead (``stop_run`` stops its workers there).
    """
    if workers is None and run is not None:
        workers = _workers_of(run)
    start = time.perf_counter()
    env = {**os.environ, "GT4PY_BUILD_JOBS": "0", "PYTHONOPTIMIZE": os.environ.get("PYTHONOPTIMIZE", "1")}
    if spec.arch:
        env.update(gpu_build_env(spec.device or "cuda", spec.arch))
        # gt4py's build folders do not depend on the arch: one build cache per arch.
        build_dir = os.path.join(build_dir, f"{spec.device}-{spec.arch}") if build_dir else None
    if build_dir:
        env.update(GT4PY_BUILD_CACHE_LIFETIME="persistent", GT4PY_BUILD_CACHE_DIR=build_dir)
    env.pop("GTCACHE_DIR", None)  # the worker publishes through compile_variants, not the start-up hook
    try:
        code, stdout, stderr = _run_worker(
            [sys.executable, *_safe_path(), "-m", "gtcache.warm.worker", json.dumps(spec.to_json()), store,
             str(os.getpid())],  # (the worker ends with this process, even SIGKILLed: follow_parent)
            env, timeout, workers,
        )
    except subprocess.TimeoutExpired:
        return WarmResult(spec, "timeout", None, time.perf_counter() - start, detail=f"killed after {timeout:g} s")
    line = next((l for l in stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        tail = (stderr.strip().splitlines() or [f"exit code {code}"])[-1]
        return WarmResult(spec, "failed", None, time.perf_counter() - start, detail=f"worker died: {tail}")
    data = json.loads(line.removeprefix("RESULT "))
    return WarmResult(spec, data["status"], data.get("key"), data["seconds"], data.get("peak_memory", 0), data.get("detail"))


def _safe_path() -> list[str]:
    """``-P`` (``python -m`` puts the working folder first on ``sys.path``: run from ``/tmp`` or a
    shared folder, whoever may write there had the worker import their ``gtcache``, as the user
    running warm, and publish what they chose into the store: a reviewer's attack). Not when this
    process has that folder first on its own path (started as ``python -m gtcache_cli`` there: it
    imported from it already, and its workers find the same modules)."""
    try:
        here = os.getcwd()
    except OSError:  # (removed meanwhile)
        return ["-P"]
    first = sys.path[0] if sys.path else None
    return [] if first is not None and (first == "" or first == here) else ["-P"]


def _run_worker(
    args: list[str], env: dict[str, str], timeout: float | None, workers: Workers | None,
) -> tuple[int, str, str]:
    """Run a worker (exit code, stdout, stderr) in a session of its own, which its compilers
    stay in: a timeout or an interrupted run ends them all, not only the worker, and what a
    worker that did not end well (killed, out of memory) left running is ended after it
    (``TimeoutExpired`` when it timed out). Every signal to the session is sent before the
    worker is reaped (``_Worker``; leaving the ``with`` reaps it): never to a session that
    another process, given the worker's pid since, started."""
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as proc:
        worker = _Worker(proc)
        status: int | None = None
        try:
            if workers is not None and not workers.started(proc):
                signal_session(proc.pid, signal.SIGTERM)  # the run was interrupted as this one started
            try:
                status = worker.wait(timeout)
            except subprocess.TimeoutExpired:
                signal_session(proc.pid, signal.SIGTERM)
                try:
                    status = worker.wait(_TERM_GRACE)
                except subprocess.TimeoutExpired:
                    signal_session(proc.pid, signal.SIGKILL)
                    status = worker.wait(None)
                raise
        finally:
            if workers is not None:
                workers.ended(proc)  # (from here on the run's ``stop`` leaves it alone)
            if status != 0:
                signal_session(proc.pid, signal.SIGKILL)  # what it left: its session's id is still theirs
    return proc.returncode, worker.output[0], worker.output[1]


class _Worker:
    """A worker's stdout and stderr, read to their end by two threads, and its end, awaited
    without reaping it (``exit_status``), unlike ``Popen.communicate``: until the ``Popen``'s
    ``with`` ends, the worker's pid is its own (a zombie's), and so is its session's id."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self.output = ["", ""]
        self._readers = [
            threading.Thread(target=self._read, args=(i, stream), daemon=True, name="gtcache-warm-output")
            for i, stream in enumerate((proc.stdout, proc.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, i: int, stream: Any) -> None:
        with contextlib.suppress(OSError, ValueError):  # (closed by the ``with``'s end when interrupted)
            self.output[i] = stream.read()

    def wait(self, timeout: float | None) -> int:
        """The worker's exit status once its output ended and it exited (not reaped);
        ``TimeoutExpired`` after ``timeout`` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for reader in self._readers:
            reader.join(left())
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self._proc.args, timeout or 0.0)
        delay = 0.0005
        while (status := exit_status(self._proc.pid)) is None:
            remaining = left()
            if remaining == 0.0:
                raise subprocess.TimeoutExpired(self._proc.args, timeout or 0.0)
            time.sleep(delay if remaining is None else min(delay, remaining))
            delay = min(delay * 2, 0.05)
        return status


_TERM_GRACE = 5.0  # seconds a timed-out worker's processes have after SIGTERM, before SIGKILL


_SIGNAL_POLL = 0.2  # seconds: how late an interruption may be seen while workers run


class Workers:
    """The worker processes a local warm run has running. A worker leads a session of
    its own (the terminal's Ctrl-C reaches the run, not its workers): when the run is
    interrupted (Ctrl-C, SIGTERM), ``stop`` ends them, compilers included, and any worker
    started after that at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()
        self._stopped = False

    def started(self, proc: subprocess.Popen[str]) -> bool:
        """Note a worker that started; False once the run is stopped (it must end too)."""
        with self._lock:
            if not self._stopped:
                self._running.add(proc)
            return not self._stopped

    def ended(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.discard(proc)

    def stop(self) -> None:
        with self._lock:  # (signalled under the lock: a worker is reaped only after its ``ended``)
            self._stopped = True
            for proc in self._running:
                signal_session(proc.pid, signal.SIGTERM)


_RUNS: dict[str, Workers] = {}  # a dask worker's: the workers of each run it took part in
_RUNS_KEPT = 256  # the latest runs' (a dask worker serves many runs; an old one has ended)
_RUNS_LOCK = threading.Lock()


def _workers_of(run: str) -> Workers:
    with _RUNS_LOCK:
        if run not in _RUNS and len(_RUNS) >= _RUNS_KEPT:
            del _RUNS[next(iter(_RUNS))]
        return _RUNS.setdefault(run, Workers())


def stop_run(run: str) -> None:
    """Stop the run ``run``'s workers in this process, and any it starts later (an
    interrupted ``run_on_dask`` has every dask worker run this)."""
    _workers_of(run).stop()


def run_local(
    specs: Sequence[VariantSpec], store: str, *, jobs: int, timeout: float | None,
    build_dir: str | None = None, on_done: Callable[[WarmResult], None] = lambda _: None,
) -> list[WarmResult]:
    """The variants' worker processes, ``jobs`` at a time. Interrupted (Ctrl-C, SIGTERM: the
    CLI unwinds for both), it starts no more and ends those running before it returns."""
    results: dict[VariantSpec, WarmResult] = {}
    workers = Workers()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    finished: queue.SimpleQueue[concurrent.futures.Future[WarmResult]] = queue.SimpleQueue()
    try:
        futures = {}
        for spec in specs:
            future = pool.submit(run_spec, spec, store, timeout=timeout, build_dir=build_dir, workers=workers)
            futures[future] = spec
            future.add_done_callback(finished.put)
        for _ in range(len(futures)):
            done = None
            while done is None:
                # Waits of a bounded time: Python handles a Ctrl-C or SIGTERM in the main
                # thread, and one that comes just as it enters an untimed wait is handled
                # only when that wait ends, here when a worker ends (seen under load: 33 s
                # late, the interrupted variant compiled and published).
                with contextlib.suppress(queue.Empty):
                    done = finished.get(timeout=_SIGNAL_POLL)
            result = done.result()
            results[futures[done]] = result
            on_done(result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        workers.stop()
        raise
    finally:
        pool.shutdown(wait=True)  # (interrupted: their threads return as their workers end)
    return [results[spec] for spec in specs]


def _stop_on_dask(client: Any, futures: list[Any], run: str) -> None:
    """Cancel a run's ``futures`` and stop its workers on every dask worker, best effort and
    within ``_DASK_STOP_WAIT``: an unresponsive worker must not hold up the interrupted run."""

    def stop() -> None:
        with contextlib.suppress(Exception):
            client.cancel(futures)
        with contextlib.suppress(Exception):
            client.run(stop_run, run, on_error="ignore")

    stopping = threading.Thread(target=stop, name="gtcache-warm-stop", daemon=True)
    stopping.start()
    stopping.join(_DASK_STOP_WAIT)


_DASK_STOP_WAIT = 10.0  # seconds


def run_on_dask(
    specs: Sequence[VariantSpec], store: str, *, scheduler: str, timeout: float | None,
    build_dir: str | None = None, on_done: Callable[[WarmResult], None] = lambda _: None,
) -> list[WarmResult]:
    """The same jobs on an existing dask.distributed cluster; workers must see ``store``."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise RuntimeError("--scheduler needs dask.distributed: pip install 'gtcache[dask]'.") from None
    results: dict[VariantSpec, WarmResult] = {}
    run = uuid.uuid4().hex
    with Client(scheduler) as client:
        futures = {}
        try:
            for i, spec in enumerate(specs):
                futures[client.submit(run_spec, spec, store, timeout=timeout, build_dir=build_dir, run=run,
                                      pure=False, key=f"warm-{run}-{i}")] = spec
            for future in as_completed(futures):
                try:
                    result = future.result()
                except Exception as error:  # a dask worker lost: that variant fails alone
                    result = WarmResult(futures[future], "failed", None, 0.0, detail=f"dask: {error!r}")
                results[futures[future]] = result
                on_done(result)
        except BaseException:  # interrupted: no variant starts, the running ones end
            _stop_on_dask(client, list(futures), run)
            raise
    return [results[spec] for spec in specs]
