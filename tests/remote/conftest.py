"""Real servers on loopback ports for the remote-tier tests: redis-server, nginx with WebDAV,
a server that accepts connections and never answers, and a port nothing listens on.

The servers come from the Debian packages (``scripts/test-servers`` installs them for
``make test``); without them, the tests that need them are skipped, saying why.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
REDIS = shutil.which("redis-server")
DAV_EXT = pathlib.Path("/usr/lib/nginx/modules/ngx_http_dav_ext_module.so")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, log: pathlib.Path | None = None) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            detail = log.read_text() if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode}: {detail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def redis_server(redis_session: str) -> str:
    """``redis://127.0.0.1:PORT`` of this session's redis-server, its db emptied for each test
    (the tests share one server, and entries of the same name have the same key)."""
    import redis

    redis.Redis.from_url(redis_session).flushdb()
    return redis_session


@pytest.fixture
def tls_redis(tmp_path: pathlib.Path) -> Iterator[tuple[int, pathlib.Path]]:
    """(port, certificate) of a redis-server speaking TLS only, with a certificate made for it
    that names ``gtcache-tls.example`` and the address 127.0.0.1 (its own authority: clients
    trust it through ``SSL_CERT_FILE``)."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/test-servers installs it)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gtcache-tls.example",
         "-addext", "subjectAltName=DNS:gtcache-tls.example,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        [REDIS, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--tls-cert-file", str(cert),
         "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path), "--logfile", str(tmp_path / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc, "redis-server (TLS)", tmp_path / "redis.log")
        yield port, cert
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def redis_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of a redis-server of this session (no persistence)."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/test-servers installs it)")
    folder = tmp_path_factory.mktemp("redis")
    port = free_port()
    proc = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder), "--logfile", str(folder / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc, "redis-server", folder / "redis.log")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def nginx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pathlib.Path]]:
    """(``http://127.0.0.1:PORT/cache``, the folder nginx serves) of an nginx with WebDAV PUT and,
    with the dav-ext module, PROPFIND; its access log is ``<folder>/../../access.log``.
    ``/plain/`` on the same port answers GET/HEAD/PUT only (no listing), ``/private/`` wants
    the bearer token ``s3cret-token``."""
    if NGINX is None:
        pytest.skip("nginx is not installed (scripts/test-servers installs it)")
    folder = tmp_path_factory.mktemp("nginx")
    root = folder / "root"
    (root / "cache").mkdir(parents=True)
    port = free_port()
    user = "user root;" if os.getuid() == 0 else ""
    conf = folder / "nginx.conf"
    load = f"load_module {DAV_EXT};" if DAV_EXT.exists() else ""
    propfind = "dav_ext_methods PROPFIND OPTIONS;" if DAV_EXT.exists() else ""
    (root / "plain").mkdir()
    conf.write_text(f"""
{load}
{user}
daemon off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log {folder}/access.log;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    client_max_body_size 1g;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location /cache/ {{
            dav_methods PUT DELETE MKCOL;
            {propfind}
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }}
        location /plain/ {{
            dav_methods PUT;
            create_full_put_path on;
        }}
        location /private/ {{
            if ($http_authorization != "Bearer s3cret-token") {{ return 401; }}
            dav_methods PUT DELETE MKCOL;
            create_full_put_path on;
        }}
    }}
}}
""")
    proc = subprocess.Popen([NGINX, "-p", str(folder), "-c", str(conf), "-e", str(folder / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc, "nginx", folder / "error.log")
        yield f"http://127.0.0.1:{port}/cache", root / "cache"
    finally:
        _stop(proc)


@pytest.fixture(params=["redis", "http"])
def remote_url(request: pytest.FixtureRequest) -> str:
    """The base URL of an empty remote of each kind (a Redis db flushed, a WebDAV folder emptied)."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_server")  # (emptied)
        return url
    base, folder = request.getfixturevalue("nginx_server")
    for child in folder.iterdir():
        shutil.rmtree(child)
    return str(base)


class SilentServer:
    """Accepts connections on a loopback port and never answers (counts them)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


class SlowProxy:
    """A loopback TCP proxy to ``upstream`` that forwards what clients send slowly (``rate``
    bytes per second; answers go back at once) and counts it: a slow link to a remote."""

    def __init__(self, upstream: tuple[str, int], rate: int = 256 << 10):
        self.upstream = upstream
        self.rate = rate
        self.uploaded = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._connections += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, slow: bool) -> None:
        chunk = max(1, self.rate // 20) if slow else 65536
        try:
            while data := source.recv(chunk):
                target.sendall(data)
                if slow:
                    with self._lock:
                        self.uploaded += len(data)
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:  # one side gone (a killed client): the other connection goes too, unfinished
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.close()

    def cut(self) -> None:
        """Break every connection now, both ends, what is in flight with it (the link lost)."""
        with self._lock:
            connections, self._connections = self._connections, []
        for end in connections:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)  # (wakes the pipe threads; they close it)

    def close(self) -> None:
        self.sock.close()
