"""Remote hits against local hits and compiles, per backend and remote kind (``make bench``).

Starts a ``redis-server`` and an nginx with WebDAV on loopback ports, as the tests do
(``tests/remote/conftest.py``; ``scripts/test-servers`` installs them); a kind whose server
is not installed is left out, with a note. Per program and backend, in fresh processes:

- compile: an empty store and an empty gt4py build cache (the entry is then pushed to
  every remote at exit, off the measured path);
- local hit: the same store again;
- remote hit: an empty store each time, the remote holding the entry (fetched, verified,
  published into the store, loaded from there).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
KEY = "bench-remote-key"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
REDIS = shutil.which("redis-server")

Child = Callable[..., dict[str, Any]]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


@contextlib.contextmanager
def _servers(work: pathlib.Path) -> Iterator[tuple[dict[str, str], list[str]]]:
    """({kind: URL}, notes) of the servers that could be started."""
    urls, notes, procs = {}, [], []
    try:
        if REDIS is None:
            notes.append("Redis rows left out: redis-server is not installed (`sh scripts/test-servers`).")
        else:
            port = _port()
            procs.append(subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "no", "--dir", str(work)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            _wait(port, procs[-1])
            urls["Redis"] = f"redis://127.0.0.1:{port}/0"
        if NGINX is None:
            notes.append("WebDAV rows left out: nginx is not installed (`sh scripts/test-servers`).")
        else:
            port = _port()
            folder = work / "nginx"
            (folder / "root" / "cache").mkdir(parents=True)
            user = "user root;" if os.getuid() == 0 else ""
            (folder / "nginx.conf").write_text(f"""{user}
daemon off; worker_processes 1; pid {folder}/nginx.pid; error_log {folder}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off; client_body_temp_path {folder}/body; client_max_body_size 1g;
    proxy_temp_path {folder}/p; fastcgi_temp_path {folder}/f; uwsgi_temp_path {folder}/u; scgi_temp_path {folder}/s;
    server {{ listen 127.0.0.1:{port}; root {folder}/root;
        location /cache/ {{ dav_methods PUT; create_full_put_path on; }} }}
}}
""")
            procs.append(subprocess.Popen([NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf"),
                                           "-e", str(folder / "error.log")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            _wait(port, procs[-1])
            urls["WebDAV (nginx)"] = f"http://127.0.0.1:{port}/cache"
        yield urls, notes
    finally:
        for proc in procs:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


def measure(child: Child, work: pathlib.Path, program: str, backend: str, urls: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of one program and backend: one per remote kind."""
    tag = f"{program}-{backend}"
    gt4py = {"GT4PY_BUILD_CACHE_LIFETIME": "persistent", "GT4PY_BUILD_CACHE_DIR": str(work / f"gt4py-{tag}")}
    store = work / f"store-{tag}"
    remote_env = {"GTCACHE_BUNDLE_KEY": KEY}
    fill = child("compile", program, backend, env={
        **gt4py, **remote_env, "GTCACHE_DIR": str(store),
        "GTCACHE_REMOTE": " ".join(f"{u}?mode=read-write" for u in urls.values())})
    assert [o["status"] for o in fill["outcomes"]] == ["compiled"], fill
    local = [child("compile", program, backend, env={**gt4py, "GTCACHE_DIR": str(store)}) for _ in range(REPEATS)]
    assert all([o["status"] for o in h["outcomes"]] == ["hit"] for h in local), local
    rows = []
    for kind, url in urls.items():
        remote = []
        for i in range(REPEATS):
            hit = child("compile", program, backend, env={
                **remote_env, "GTCACHE_DIR": str(work / f"node-{tag}-{len(rows)}-{i}"), "GTCACHE_REMOTE": url,
                "GT4PY_BUILD_CACHE_LIFETIME": "persistent", "GT4PY_BUILD_CACHE_DIR": str(work / f"gt4py-node-{tag}-{i}")})
            outcome = hit["outcomes"][0]
            assert outcome["status"] == "hit" and "from remote" in (outcome["detail"] or ""), hit
            remote.append(hit)
        rows.append({"program": program, "backend": backend, "remote": kind, "compile": fill["ms"],
                     "local": statistics.median(h["ms"] for h in local),
                     "remote_hit": statistics.median(h["ms"] for h in remote)})
    return rows


def main(child: Child, programs: list[str], backends: list[str]) -> list[str]:
    """Markdown lines: the table, and a note for each remote kind left out."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="gtcache-remote-bench-"))
    try:
        with _servers(work) as (urls, notes):
            rows = [row for program in programs for backend in backends
                    for row in (measure(child, work, program, backend, urls) if urls else [])]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        "| program | backend | remote | compile | local hit | remote hit | remote / local | compile / remote |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['program']} | {r['backend']} | {r['remote']} | {r['compile']:,.0f} | {r['local']:,.2f}"
        f" | **{r['remote_hit']:,.1f}** | {r['remote_hit'] / r['local']:,.1f}x | {r['compile'] / r['remote_hit']:,.0f}x |"
        for r in rows
    ]
    return (lines if rows else []) + [""] * bool(notes) + notes
