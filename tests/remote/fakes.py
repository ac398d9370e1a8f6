"""Small hostile servers on loopback ports (from the security review's attack scripts):
an HTTP server that records every request and answers 404, one that trickles a body one
byte at a time, and a RESP (Redis protocol) server that lies, trickles or answers garbage.

Each serves every connection on its own daemon thread until ``close``.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class FakeServer:
    def __init__(self, handler: Callable[[socket.socket], None]):
        self.handler = handler
        #: What clients sent: HTTP request heads (text) or RESP commands (lists of bytes).
        self.requests: list[Any] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self._conns: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.handler(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


def _http_head(conn: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


def http_404() -> FakeServer:
    """Records each request head (``requests``: text) and answers 404 Not Found."""
    server: FakeServer

    def handler(conn: socket.socket) -> None:
        while (head := _http_head(conn)) is not None:
            server.requests.append(head.decode(errors="replace"))
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    server = FakeServer(handler)
    return server


def http_trickle(interval: float = 0.2, *, headers: bool = False) -> FakeServer:
    """Answers every request with 200 and a huge Content-Length, then one byte of the body per
    ``interval`` (a slowloris server: each read returns well within any per-read timeout);
    ``headers``: one byte of an endless header per ``interval`` instead (a HEAD too)."""
    server: FakeServer

    def handler(conn: socket.socket) -> None:
        head = _http_head(conn)
        if head is None:
            return
        server.requests.append(head.decode(errors="replace"))
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: " if headers else b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        while not server.closed:
            conn.sendall(b"a" if headers else b"\x1f")
            time.sleep(interval)

    server = FakeServer(handler)
    return server


def resp_commands(conn: socket.socket) -> Iterator[list[bytes]]:
    """The RESP commands a client sends on ``conn``."""
    stream = conn.makefile("rb")
    while True:
        line = stream.readline()
        if not line:
            return
        if line.startswith(b"*"):
            args = []
            for _ in range(int(line[1:])):
                size = int(stream.readline()[1:])
                args.append(stream.read(size + 2)[:-2])
            yield args


def resp_server(answer: Callable[[FakeServer, socket.socket, list[bytes]], None]) -> FakeServer:
    """A RESP server: ``answer(server, conn, command)`` writes the reply to each command."""
    server: FakeServer

    def handler(conn: socket.socket) -> None:
        for command in resp_commands(conn):
            server.requests.append(command)
            answer(server, conn, command)

    server = FakeServer(handler)
    return server


HELLO_REPLY = b"%1\r\n$5\r\nproto\r\n:3\r\n"


class NameServer:
    """A name server on 127.0.0.2:53 (UDP; root binds port 53): answers a question (an A
    record, ``127.0.0.1``; no data for other types) when ``answer(name, asked_before)`` says
    so, else reads it and stays silent, as a name server that is down. ``questions``: the
    names asked, in order. Named by a ``resolv.conf`` (``resolv_conf``) bind-mounted in a
    mount namespace (``tests.helpers.run_in_mount_namespace``)."""

    def __init__(self, answer: Callable[[str, int], bool]):
        self.answer = answer
        self.questions: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.2", 53))
        self.sock.settimeout(0.2)
        self.closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def resolv_conf(self, folder: Any) -> Any:
        """A ``resolv.conf`` naming this server, with glibc's defaults spelled out (5 s a try, 3 tries)."""
        path = folder / "resolv.conf"
        path.write_text("nameserver 127.0.0.2\noptions timeout:5 attempts:3\n")
        return path

    def _serve(self) -> None:
        while not self.closed:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                continue
            with contextlib.suppress(IndexError, struct.error):
                at, labels = 12, []
                while data[at]:
                    labels.append(data[at + 1:at + 1 + data[at]].decode(errors="replace"))
                    at += 1 + data[at]
                qtype = struct.unpack(">H", data[at + 1:at + 3])[0]
                name = ".".join(labels)
                asked_before = self.questions.count(name)
                self.questions.append(name)
                if not self.answer(name, asked_before):
                    continue
                question = data[12:at + 5]
                record = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton("127.0.0.1")
                count = 1 if qtype == 1 else 0
                self.sock.sendto(data[:2] + struct.pack(">HHHHH", 0x8180, 1, count, 0, 0) + question
                                 + (record if count else b""), peer)

    def close(self) -> None:
        self.closed = True
        self._thread.join()
        self.sock.close()
