"""Remotes that lie, trickle or answer garbage (the review's a1_timeouts.py, a1b.py, a2_redis.py,
a4_ctrl.py as tests): each costs at most its deadline, never more than ``max_size`` of memory,
and ends as one ``RemoteError`` (the remote is then skipped: ``broken``)."""

from __future__ import annotations

import json
import pathlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import gtcache
from gtcache.remote import Remote, RemoteError, parse_remote
from tests.helpers import run_in_mount_namespace
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


@pytest.fixture(params=["body", "headers"])
def trickle_http(request: pytest.FixtureRequest) -> Iterator[fakes.FakeServer]:
    """A server trickling its answers' bodies, or their headers (httpx's timeouts are per
    read: a header trickle ran past every deadline, a run stalled for good: a helper's attack)."""
    server = fakes.http_trickle(interval=0.2, headers=request.param == "headers")
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
    took, result = _fetch_within(remote, _store(tmp_path), 60)
    assert isinstance(result, RemoteError) and ("deadline" in str(result) or "timed out" in str(result)), result
    assert took < 30, took  # the trickle would take 200 s; a busy machine may stall the test a while
    assert remote.broken is not None  # the breaker tripped: the next call costs nothing
    with pytest.raises(RemoteError, match="is skipped"):
        remote.fetch(_store(tmp_path), KEY)


def test_an_http_header_trickle_cannot_stall_a_ping() -> None:
    """``gtcache doctor`` and a push's first question (HEAD, no body): the same deadline."""
    server = fakes.http_trickle(interval=0.2, headers=True)
    remote = Remote(parse_remote(f"http://127.0.0.1:{server.port}/base?trusted=1&timeout=1&deadline=1.5"), key=None)
    start = time.monotonic()
    try:
        with pytest.raises(RemoteError, match="timed out|deadline"):
            remote.ping()
        assert time.monotonic() - start < 30
    finally:
        server.close()


def test_a_redis_trickle_is_cut_off_at_the_deadline(trickle_redis: fakes.FakeServer, tmp_path: pathlib.Path) -> None:
    remote = Remote(parse_remote(f"redis://127.0.0.1:{trickle_redis.port}/0?trusted=1&timeout=1&deadline=1.5"),
                    key=None)
    took, result = _fetch_within(remote, _store(tmp_path), 60)
    assert isinstance(result, RemoteError) and "timed out" in str(result), result
    assert took < 30, took  # the trickle would take 200 s
    assert remote.broken is not None


def _huge_resp(server: fakes.FakeServer, conn: socket.socket, command: list[bytes]) -> None:
    """Says an object has 5 bytes, then answers its read with 200 MB."""
    name = command[0].upper()
    if name == b"HELLO":
        conn.sendall(fakes.HELLO_REPLY)
    elif name == b"STRLEN":
        conn.sendall(b":5\r\n")
    elif name in (b"GET", b"GETRANGE", b"MGET"):
        conn.sendall(b"$%d\r\n" % (200 << 20))
        chunk = b"A" * (1 << 20)
        for _ in range(200):
            conn.sendall(chunk)
        conn.sendall(b"\r\n")
    else:
        conn.sendall(b"+OK\r\n")


def test_a_redis_server_that_sends_more_than_asked_is_cut_off(tmp_path: pathlib.Path) -> None:
    import tracemalloc

    server = fakes.resp_server(_huge_resp)
    try:
        remote = Remote(parse_remote(f"redis://127.0.0.1:{server.port}/0?trusted=1&timeout=2&max_size=1000"),
                        key=None)
        tracemalloc.start()
        try:
            with pytest.raises(RemoteError, match="more than was asked"):
                remote.fetch(_store(tmp_path), KEY)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < (16 << 20), f"{peak >> 20} MB buffered for a 1000-byte limit"
        assert remote.broken is not None
    finally:
        server.close()


def test_redis_reads_stay_within_max_size(redis_server: str, tmp_path: pathlib.Path) -> None:
    """On a real server: objects are read in GETRANGE chunks, info objects at most 4 KiB each."""
    import tracemalloc

    import redis

    from gtcache.remote import entry_object, info_object

    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    big = b"y" * (8 << 20)
    for i in range(6):
        key = f"{i:032x}"
        client.set("gtcache/" + entry_object(key), b"x")
        client.set("gtcache/" + info_object(key), big if i else b'{"key": "%s", "program": "p.q"}' % key.encode())
    remote = Remote(parse_remote(redis_server), key=b"k" * 32)
    tracemalloc.start()
    try:
        entries = remote.listing()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert entries is not None and [e.program for e in entries] == ["p.q", None, None, None, None, None]
    assert peak < (4 << 20), f"{peak >> 20} MB read to list 6 entries"
    # An object over max_size is refused from its STRLEN; one under it is read whole, in chunks.
    client.set("gtcache/" + entry_object(KEY), b"z" * 9_000_001)
    small = Remote(parse_remote(f"{redis_server}?max_size=9000000"), key=b"k" * 32)
    with pytest.raises(RemoteError, match="over the 9000000 limit"):
        small.fetch(_store(tmp_path), KEY)
    assert small.broken is None  # that object, not the remote: it was marked broken (a helper's finding)
    assert small.fetch(_store(tmp_path), "cd" * 16) is False  # (and is still asked)
    backend = Remote(parse_remote(redis_server), key=b"k" * 32)._open()
    assert backend.get(entry_object(KEY), 10_000_000) == b"z" * 9_000_001


def _ok_to_everything(server: fakes.FakeServer, conn: socket.socket, command: list[bytes]) -> None:
    conn.sendall(b"+OK\r\n")  # not Redis: redis-py's HELLO handling chokes on it (AttributeError)


def test_a_server_that_is_not_redis_is_one_error(tmp_path: pathlib.Path) -> None:
    from tests.remote.helpers import gtcache_cli

    server = fakes.resp_server(_ok_to_everything)
    try:
        url = f"redis://127.0.0.1:{server.port}/0?trusted=1&timeout=2"
        remote = Remote(parse_remote(url), key=None)
        with pytest.raises(RemoteError, match="not understood"):
            remote.fetch(_store(tmp_path), KEY)
        assert remote.broken is not None and server.requests
        asked = len(server.requests)
        with pytest.raises(RemoteError, match="is skipped"):
            remote.fetch(_store(tmp_path), KEY)
        assert len(server.requests) == asked  # no retry, no second try
        code, out = gtcache_cli("--cache-dir", str(tmp_path / "cli"), "pull", "--remote", url, KEY)
        assert code == 1 and out.startswith("Error: ") and len(out.splitlines()) == 1 and "Traceback" not in out, out
    finally:
        server.close()


CONTROL = b"-ERR \x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mfake\x1b[0m\r\n"


def _control_errors(server: fakes.FakeServer, conn: socket.socket, command: list[bytes]) -> None:
    """A Redis server whose every error message is terminal escapes."""
    conn.sendall(fakes.HELLO_REPLY if command[0].upper() == b"HELLO" else CONTROL)


@pytest.mark.slow
def test_server_text_is_escaped_before_the_terminal(tmp_path: pathlib.Path) -> None:
    from tests.remote.helpers import gtcache_cli, model_run

    server = fakes.resp_server(_control_errors)
    try:
        url = f"redis://127.0.0.1:{server.port}/0?trusted=1&timeout=2"
        code, out = gtcache_cli("--cache-dir", str(tmp_path / "cli"), "doctor", env={"GTCACHE_REMOTE": url})
        lines = [line for line in out.splitlines() if line.startswith("Remote:")]
        assert len(lines) == 1 and "\\x1b]0;PWNED-TITLE\\x07" in lines[0], lines
        assert "\x1b" not in out and "\x07" not in out
        code, out = gtcache_cli("--cache-dir", str(tmp_path / "cli"), "pull", "--remote", url, KEY)
        assert code == 1 and "\x1b" not in out and "\\x1b[2J" in out, out
        run = model_run(tmp_path / "store", url, tmp_path)
        assert run["correct"] == [True]
        said = [w for w in run["warnings"] if "PWNED" in w]
        assert said and not [w for w in said if "\x1b" in w or "\x07" in w], said
    finally:
        server.close()


def test_one_escape_for_library_and_cli() -> None:
    from gtcache.errors import escape
    from gtcache_cli import _text

    assert _text.escape is escape
    assert escape("a\x1b[2Jb\u202e") == "a\\x1b[2Jb\\u202e" and escape(escape("\x07")) == "\\x07"


def test_a_signed_object_replayed_under_another_key_is_refused_unpublished(
        redis_server: str, tmp_path: pathlib.Path) -> None:
    import io

    import redis

    from gtcache import bundle
    from gtcache.remote import entry_object
    from tests.helpers import publish

    signing = b"k" * 32
    source = gtcache.open_store(tmp_path / "source", create=True)
    a = publish(source, "progA", payload=b"print('A')\n")
    out = io.BytesIO()
    bundle.write_bundle(out, source, [source.get(a.key)], key=signing)
    other = "cd" * 16
    redis.Redis.from_url(redis_server).set("gtcache/" + entry_object(other), out.getvalue())
    target = gtcache.open_store(tmp_path / "target", create=True)
    remote = Remote(parse_remote(redis_server), key=signing)
    with pytest.raises(RemoteError, match="replayed under another name"):
        remote.fetch(target, other)
    assert target.lookup(a.key) is None and target.lookup(other) is None  # nothing was published
    assert remote.broken is None  # a refused object is not a broken remote
    assert list((target.root / "tmp").iterdir()) == []


def test_a_signed_object_of_more_entries_under_one_entrys_name_is_refused_unpublished(
        redis_server: str, tmp_path: pathlib.Path) -> None:
    """A signed bundle of two entries (A and B) put under A's name holds A, and B besides: it
    is refused as the replayed one is, before anything is staged; neither A nor B published
    (a check after the import would come too late: B would be in the store already)."""
    import io

    import redis

    from gtcache import bundle
    from gtcache.remote import entry_object
    from tests.helpers import publish

    signing = b"k" * 32
    source = gtcache.open_store(tmp_path / "source", create=True)
    a = publish(source, "progA", payload=b"print('A')\n")
    b = publish(source, "progB", payload=b"print('B')\n")
    out = io.BytesIO()
    bundle.write_bundle(out, source, [source.get(a.key), source.get(b.key)], key=signing)
    redis.Redis.from_url(redis_server).set("gtcache/" + entry_object(a.key), out.getvalue())
    target = gtcache.open_store(tmp_path / "target", create=True)
    remote = Remote(parse_remote(redis_server), key=signing)
    with pytest.raises(RemoteError, match="replayed under another name"):
        remote.fetch(target, a.key)
    assert target.lookup(a.key) is None and target.lookup(b.key) is None  # nothing was published
    assert remote.broken is None
    assert list((target.root / "tmp").iterdir()) == []


def test_a_signed_direct_link_replayed_under_another_direct_key_is_refused(
        redis_server: str, tmp_path: pathlib.Path) -> None:
    """A direct link serves a program without lowering it: its signature covers the direct key
    as well as the build key, so a link signed for A (A -> X), copied to B's place with its
    "direct" field rewritten to B (a consistent object, a signature made with the key), names
    no build for B: else B's program would be served X's build, a silently wrong result."""
    import redis

    from gtcache.remote import direct_object

    signing = b"k" * 32
    remote = Remote(parse_remote(f"{redis_server}?mode=read-write"), key=signing)
    a, b, build = "ab" * 16, "cd" * 16, "ef" * 16
    remote.push_direct(a, build)
    assert remote.build_key_of(a) == build
    client = redis.Redis.from_url(redis_server)
    link = json.loads(client.get("gtcache/" + direct_object(a)))
    assert link["direct"] == a and link["build"] == build and link["signature"]
    client.set("gtcache/" + direct_object(b), json.dumps({**link, "direct": b}, sort_keys=True).encode())
    with pytest.raises(RemoteError, match="has a wrong or no signature"):
        remote.build_key_of(b)
    assert remote.broken is None  # a refused object is not a broken remote
    assert remote.build_key_of(a) == build, "the link signed for A still serves A"


def test_a_signed_direct_link_re_pointed_at_another_build_is_refused(
        redis_server: str, tmp_path: pathlib.Path) -> None:
    """The link's signature covers its build key: A's link (A -> X), its "build" field
    rewritten to Y and its signature kept, would serve A's program Y's build (a program
    compiled by the key's holder, but another one). Refused; the true link still serves."""
    import redis

    from gtcache.remote import direct_object

    signing = b"k" * 32
    remote = Remote(parse_remote(f"{redis_server}?mode=read-write"), key=signing)
    a, build, other = "ab" * 16, "ef" * 16, "12" * 16
    remote.push_direct(a, build)
    client = redis.Redis.from_url(redis_server)
    true_link = client.get("gtcache/" + direct_object(a))
    link = json.loads(true_link)
    client.set("gtcache/" + direct_object(a), json.dumps({**link, "build": other}, sort_keys=True).encode())
    with pytest.raises(RemoteError, match="has a wrong or no signature"):
        remote.build_key_of(a)
    assert remote.broken is None
    client.set("gtcache/" + direct_object(a), true_link)
    assert remote.build_key_of(a) == build


@pytest.mark.parametrize("damage", ["another direct key", "a build that is no key"])
def test_a_direct_link_from_a_trusted_remote_is_still_checked(damage: str, redis_server: str) -> None:
    """Without a key (``?trusted=1``) nothing signs a link, but it is still checked: it must
    name the direct key it is stored under, and a build key (which names the object fetched
    next and the entry folder published)."""
    import redis

    from gtcache.remote import direct_object

    remote = Remote(parse_remote(f"{redis_server}?trusted=1"), key=None)
    a, b, build = "ab" * 16, "cd" * 16, "ef" * 16
    link = {"format": 1, "direct": a, "build": build}
    if damage == "another direct key":
        link["direct"] = b
    else:
        link["build"] = "../../" + build
    redis.Redis.from_url(redis_server).set("gtcache/" + direct_object(a), json.dumps(link).encode())
    with pytest.raises(RemoteError, match="is not a direct link"):
        remote.build_key_of(a)
    assert remote.broken is None


def test_a_direct_link_is_read_only_up_to_its_own_limit(redis_server: str) -> None:
    """A direct link is a few hundred bytes: one over 4 KiB is refused from its size, never
    read (not the entry's ``max_size``); the remote stays in use."""
    import redis

    from gtcache.remote import direct_object

    client = redis.Redis.from_url(redis_server)
    a, b = "ab" * 16, "cd" * 16
    client.set("gtcache/" + direct_object(a), b" " * 4097)
    remote = Remote(parse_remote(redis_server), key=b"k" * 32)
    with pytest.raises(RemoteError, match="has 4097 bytes, over the 4096 limit"):
        remote.build_key_of(a)
    assert remote.broken is None
    assert remote.build_key_of(b) is None


BAD_URLS = ["redis://cache:99999/0", "redis://cache:port/0", "http://[::1/base", "http://[not-v6]/base",
            "https://alice:pw-secret@cache:70000/base"]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_url_is_one_error_line(url: str, tmp_path: pathlib.Path) -> None:
    from gtcache.errors import GtcacheError
    from gtcache.remote import redact
    from tests.remote.helpers import gtcache_cli

    shown = redact(url)  # never raises, never shows the password
    assert "pw-secret" not in shown and "?" not in shown
    with pytest.raises(RemoteError, match="is not a valid URL") as caught:
        parse_remote(url)
    assert "\n" not in str(caught.value) and "pw-secret" not in str(caught.value)
    with pytest.raises(GtcacheError, match="is not a valid URL"):
        gtcache.install(remote=url)
    code, out = gtcache_cli("--cache-dir", str(tmp_path / "cli"), "pull", "--remote", url, KEY)
    assert code == 1 and out.startswith("Error: ") and len(out.splitlines()) == 1 and "pw-secret" not in out, out
    code, out = gtcache_cli("--cache-dir", str(tmp_path / "cli"), "doctor", env={"GTCACHE_REMOTE": url})
    lines = [line for line in out.splitlines() if line.startswith("Remote:")]
    assert len(lines) == 1 and "is not a valid URL" in lines[0] and "pw-secret" not in out, out


# -- name servers that do not answer ---------------------------------------------------------------

_LOOKUP_CHILD = """
import json, os, sys, time
import gtcache
from gtcache.remote import Remote, RemoteError, parse_remote

store = gtcache.open_store(sys.argv[1], create=True)


def fetch(url):
    remote = Remote(parse_remote(url), key=None)
    start = time.monotonic()
    try:
        remote.fetch(store, "ab" * 16)
        said = None
    except RemoteError as error:
        said = str(error)
    return {"took": time.monotonic() - start, "said": said, "broken": remote.broken}


report = {"first": fetch(sys.argv[2])}
if len(sys.argv) > 3:  # then in a forked child, another remote (gtcache's forked workers)
    read, write = os.pipe()
    if os.fork() == 0:
        os.write(write, json.dumps(fetch(sys.argv[3])).encode())
        os._exit(0)
    os.close(write)
    report["in_child"] = json.loads(os.read(read, 65536))
print(json.dumps(report))
"""


def _lookups(server: fakes.NameServer, folder: pathlib.Path, *urls: str) -> dict[str, Any]:
    """``_LOOKUP_CHILD``'s report: its fetches, in a mount namespace whose ``/etc/resolv.conf``
    names ``server``."""
    out = run_in_mount_namespace(f"mount --bind {server.resolv_conf(folder)} /etc/resolv.conf", _LOOKUP_CHILD,
                                 str(folder / "store"), *urls, folder=folder)
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("scheme", ["http", "redis"])
def test_a_name_server_that_does_not_answer_costs_the_connect_timeout(tmp_path: pathlib.Path, scheme: str) -> None:
    """A remote's host name whose lookup gets no answer (a cluster's name server down): the
    lookup took glibc's 5 s a try, 3 tries (15 s, more with more servers) however short
    ``connect_timeout``, in every process of a model run. Now the connect timeout bounds it,
    the warning says so, and the remote is skipped for the rest of the process."""
    server = fakes.NameServer(lambda name, asked_before: False)
    try:
        url = f"{scheme}://gtcache-no-answer.example:8080/0?trusted=1&connect_timeout=1"
        first = _lookups(server, tmp_path, url)["first"]
    finally:
        server.close()
    assert "gtcache-no-answer.example" in server.questions, "the lookup asked the silent name server"
    assert first["said"] is not None and "looking up 'gtcache-no-answer.example' timed out" in first["said"], first
    assert first["took"] < 12, first  # 15 s without the bound (the margin: a loaded machine)
    assert first["broken"] is not None, first


def test_a_name_server_that_answers_once_is_asked_once(remote_url: str, tmp_path: pathlib.Path) -> None:
    """The clients connect to the addresses the bounded lookup found: a name server that
    answered it and then stopped (or lost a packet) held the clients' own lookup that followed
    for 15 s (a reviewer's finding)."""
    server = fakes.NameServer(lambda name, asked_before: asked_before < 2)  # A and AAAA, once
    try:
        url = remote_url.replace("127.0.0.1", "gtcache-once.example") + "?trusted=1&connect_timeout=1"
        first = _lookups(server, tmp_path, url)["first"]
    finally:
        server.close()
    assert first["said"] is None and first["broken"] is None, first  # a miss, the remote fine
    assert first["took"] < 12, first  # 15 s: the clients' own lookup held
    assert server.questions == ["gtcache-once.example"] * 2, server.questions


def test_a_lookup_given_up_leaves_a_forked_childs_lookups_alone(remote_url: str, tmp_path: pathlib.Path) -> None:
    """A lookup given up on is a child process killed, not a thread left waiting: such a
    thread kept glibc's resolver socket, which a forked child's lookups then shared, and the
    waiting thread read and dropped their answers (a healthy remote was skipped in the child:
    a reviewer's finding)."""
    server = fakes.NameServer(lambda name, asked_before: not name.startswith("gtcache-silent"))
    try:
        silent = remote_url.replace("127.0.0.1", "gtcache-silent.example") + "?trusted=1&connect_timeout=1"
        healthy = remote_url.replace("127.0.0.1", "gtcache-ok.example") + "?trusted=1&connect_timeout=1"
        report = _lookups(server, tmp_path, silent, healthy)
    finally:
        server.close()
    assert report["first"]["said"] is not None and "timed out" in report["first"]["said"], report
    child = report["in_child"]
    assert child["said"] is None and child["broken"] is None and child["took"] < 12, child


def test_tls_checks_the_servers_certificate_against_the_name_not_the_address(
    tls_redis: tuple[int, pathlib.Path], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clients connect to the addresses the bounded lookup found, and a TLS connection
    still checks the certificate against the URL's host name: a certificate that names the
    address but not the host is refused (it would pass if the address were checked)."""
    port, cert = tls_redis
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = fakes.NameServer(lambda name, asked_before: True)  # every name: 127.0.0.1
    try:
        named = _lookups(server, tmp_path, f"rediss://gtcache-tls.example:{port}/0?trusted=1&connect_timeout=2")
        other = _lookups(server, tmp_path, f"rediss://gtcache-other.example:{port}/0?trusted=1&connect_timeout=2")
    finally:
        server.close()
    assert named["first"]["said"] is None, named  # a miss: connected, certificate accepted
    assert other["first"]["said"] is not None and "Hostname mismatch" in other["first"]["said"], other
