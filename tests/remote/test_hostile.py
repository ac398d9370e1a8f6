"""Remotes that lie, trickle or answer garbage (the review's a1_timeouts.py, a1b.py, a2_redis.py,
a4_ctrl.py as tests): each costs at most its deadline, never more than ``max_size`` of memory,
and ends as one ``RemoteError`` (the remote is then skipped: ``broken``)."""

from __future__ import annotations

import pathlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import gtcache
from gtcache.remote import Remote, RemoteError, parse_remote
from tests.remote import fakes

KEY = "ab" * 16


def _store(tmp_path: pathlib.Path) -> gtcache.Store:
    return gtcache.open_store(tmp_path / "store", create=True)


def _fetch_within(remote: Remote, store: gtcache.Store, seconds: float) -> tuple[float, object]:
    """(seconds taken, result or exception) of ``remote.fetch``; fails if it runs past ``seconds``."""
    result: dict[str, object] = {}

    def go() -> None:
        try:
            result["r"] = remote.fetch(store, KEY)
        except Exception as error:  # noqa: BLE001 - the test looks at what it was
            result["r"] = error

    start = time.monotonic()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"fetch still running after {seconds} s"
    return time.monotonic() - start, result["r"]


@pytest.fixture
def trickle_http() -> Iterator[fakes.FakeServer]:
    server = fakes.http_trickle(interval=0.2)
    yield server
    server.close()


def _trickle_resp(server: fakes.FakeServer, conn: socket.socket, command: list[bytes]) -> None:
    name = command[0].upper()
    if name == b"HELLO":
        conn.sendall(fakes.HELLO_REPLY)
    elif name == b"STRLEN":
        conn.sendall(b":1000\r\n")
    elif name in (b"GET", b"GETRANGE"):
        conn.sendall(b"$1000\r\n")
        while not server.closed:
            conn.sendall(b"A")
            time.sleep(0.2)
    else:
        conn.sendall(b"+OK\r\n")


@pytest.fixture
def trickle_redis() -> Iterator[fakes.FakeServer]:
    server = fakes.resp_server(_trickle_resp)
    yield server
    server.close()


def test_an_http_trickle_is_cut_off_at_the_deadline(trickle_http: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    remote = Remote(parse_remote(f"http://127.0.0.1:{trickle_http.port}/base?trusted=1&timeout=1&deadline=1.5"),
                    key=None)
    took, result = _fetch_within(remote, _store(tmp_path), 10)
    assert isinstance(result, RemoteError) and "deadline" in str(result), result
    assert took < 4, took
    assert remote.broken is not None  # the breaker tripped: the next call costs nothing
    with pytest.raises(RemoteError, match="is skipped"):
        remote.fetch(_store(tmp_path), KEY)


def test_a_redis_trickle_is_cut_off_at_the_deadline(trickle_redis: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    remote = Remote(parse_remote(f"redis://127.0.0.1:{trickle_redis.port}/0?trusted=1&timeout=1&deadline=1.5"),
                    key=None)
    took, result = _fetch_within(remote, _store(tmp_path), 10)
    assert isinstance(result, RemoteError) and "timed out" in str(result), result
    assert took < 4, took
    assert remote.broken is not None
