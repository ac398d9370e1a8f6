"""The two wire protocols of a remote: Redis and HTTP/WebDAV objects by path.

A backend moves opaque bytes under object names (``v1/entries/<key>.tar.gz``,
``v1/direct/<key>.json``); it knows nothing of entries. Every failure is a
``RemoteFailure`` (``timeout`` says whether the server was slow rather than gone);
retries and the circuit breaker are the tier's (``_tier.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import ipaddress
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gtcache.errors import GtcacheError, escape

__all__ = ["Backend", "Credentials", "HttpBackend", "RedisBackend", "RemoteFailure", "redact"]


class RemoteFailure(Exception):
    """The remote did not answer as it should (unreachable, slow, refused, garbage)."""

    def __init__(self, message: str, *, timeout: bool = False, retry: bool = True):
        super().__init__(escape(message))  # what a server says is data, never terminal commands
        self.timeout = timeout
        #: Whether trying again could help (a refused login or a 4xx will not).
        self.retry = retry and not timeout


class ObjectTooLarge(RemoteFailure):
    """An object over the size limit (refused without reading it)."""

    def __init__(self, message: str):
        super().__init__(message, retry=False)


@dataclasses.dataclass(frozen=True)
class Credentials:
    """Secrets from the environment (``GTCACHE_REMOTE_TOKEN``, ``..._USER`` / ``..._PASSWORD``);
    never shown (``repr`` hides them)."""

    token: str | None = dataclasses.field(default=None, repr=False)
    user: str | None = dataclasses.field(default=None, repr=False)
    password: str | None = dataclasses.field(default=None, repr=False)


#: What a listing says of one object: (name, size in bytes, last modified as POSIX time);
#: None where the protocol does not say.
Listed = tuple[str, "int | None", "float | None"]
#: The most a WebDAV listing (PROPFIND answer), or any one Redis answer but an object's, may take.
_MAX_LISTING = 64 << 20
#: Bytes of an object per Redis ``GETRANGE``.
_CHUNK = 4 << 20


#: The deadline (``time.monotonic()``) of what this thread asks a backend, if any: every read
#: from a Redis socket, and every chunk of an HTTP body, checks it.
_deadline = threading.local()


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """All a backend does inside must finish within ``seconds`` (an outer deadline wins):
    a server trickling one byte per read timeout is cut off (``RemoteFailure``, timeout)."""
    outer = getattr(_deadline, "at", None)
    at = time.monotonic() + seconds
    _deadline.at = at if outer is None else min(at, outer)
    try:
        yield
    finally:
        _deadline.at = outer


def _time_left(what: str) -> float | None:
    """Seconds left before this thread's deadline (None: none); ``RemoteFailure`` when past it."""
    at: float | None = getattr(_deadline, "at", None)
    if at is None:
        return None
    left = at - time.monotonic()
    if left <= 0:
        raise RemoteFailure(f"{what}: over the deadline for one object (a server too slow, or trickling)",
                            timeout=True)
    return left


class Backend(Protocol):
    def get(self, name: str, max_size: int) -> bytes | None: ...
    def get_many(self, names: list[str], max_size: int) -> dict[str, bytes]: ...
    def put(self, name: str, data: bytes) -> None: ...
    def exists(self, name: str) -> bool: ...
    def list(self, prefix: str) -> list[Listed] | None: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...


def redact(url: str) -> str:
    """``url`` without its password (and without its query): what messages show. Never
    raises: a URL that does not parse (a bad port, a bad IPv6 address) loses everything
    before its last ``@`` in the authority, and its query."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        scheme, sep, rest = url.partition("://")
        rest = rest.split("?", 1)[0].split("#", 1)[0]
        authority, slash, path = rest.partition("/")
        if "@" in authority:
            authority = "***@" + authority.rpartition("@")[2]
        return escape(f"{scheme}{sep}{authority}{slash}{path}" if sep else url.split("?", 1)[0])
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"  # an IPv6 address
    if port:
        netloc = f"{netloc}:{port}"
    if parts.username:
        netloc = f"{parts.username}:***@{netloc}" if parts.password else f"{parts.username}@{netloc}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@contextlib.contextmanager
def read_budget(nbytes: int) -> Iterator[None]:
    """What this thread reads from a Redis socket inside may be at most ``nbytes`` (an outer
    budget wins): a server that announces or sends more than it was asked for is cut off
    (``RemoteFailure``) before the client has buffered it."""
    outer = getattr(_deadline, "budget", None)
    _deadline.budget = nbytes if outer is None else min(nbytes, outer)
    try:
        yield
    finally:
        left = getattr(_deadline, "budget", None)
        _deadline.budget = None if outer is None or left is None else outer - (min(nbytes, outer) - left)


class _OverBudget(RemoteFailure):
    def __init__(self) -> None:
        super().__init__("the server sent more than was asked for (over the size limit)", retry=False)


def _spend(nbytes: int) -> None:
    budget = getattr(_deadline, "budget", None)
    if budget is not None:
        _deadline.budget = budget - nbytes
        if budget - nbytes < 0:
            raise _OverBudget()


class _DeadlineSocket:
    """A socket whose reads end at this thread's deadline (``deadline``) as well as at the
    socket's own timeout: redis-py's timeout is per read, which a trickle never reaches."""

    def __init__(self, sock: Any):
        self._sock = sock
        self._timeout: float | None = sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self._timeout = value
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def _arm(self) -> None:
        at = getattr(_deadline, "at", None)
        if at is None:
            return
        left = at - time.monotonic()
        if left <= 0:
            raise socket.timeout("over the deadline for one object")
        self._sock.settimeout(left if self._timeout is None else min(left, self._timeout))

    def recv(self, *args: Any) -> bytes:
        self._arm()
        try:
            data: bytes = self._sock.recv(*args)
        finally:
            self._sock.settimeout(self._timeout)
        _spend(len(data))
        return data

    def recv_into(self, *args: Any) -> int:
        self._arm()
        try:
            count: int = self._sock.recv_into(*args)
        finally:
            self._sock.settimeout(self._timeout)
        _spend(count)
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def resolve_within(host: str, seconds: float | None) -> list[str] | None:
    """The addresses of ``host`` (None: let the client look the name up itself), looked up
    within ``seconds``; a timeout ``RemoteFailure`` if not, a plain one if the name is not known.
    ``socket.getaddrinfo``, which both clients call to connect, has no timeout of its own: a
    name server that does not answer held a connect for glibc's 5 s a try, 3 tries by
    default, whatever ``connect_timeout`` said. So a child process looks the name up
    (``getent ahosts``, glibc's and musl's), killed at the timeout: it leaves nothing behind (a
    thread left waiting in ``getaddrinfo`` kept the resolver's socket, which a forked child's
    lookups then shared and lost their answers to: a reviewer's finding), and the clients
    connect to the addresses it found (a second lookup of theirs was unbounded again). Without
    ``getent``, or for an address, the clients' own lookup."""
    if seconds is None or _is_address(host) or (getent := _getent()) is None:
        return None
    try:
        proc = subprocess.run([getent, "ahosts", host], capture_output=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:
        raise RemoteFailure(f"looking up '{host}' timed out after {seconds:g} s", timeout=True) from None
    except OSError:
        return None
    # "<address> STREAM <name>" per address, in getaddrinfo's order (then DGRAM and RAW lines)
    found = [line.split()[0].decode("ascii", "replace") for line in proc.stdout.splitlines()
             if line.split()[1:2] == [b"STREAM"]]
    if proc.returncode != 0 or not found:  # 2: not known (or the name server gave up: its own timeouts)
        raise RemoteFailure(f"cannot look up '{host}' (getent ahosts: exit {proc.returncode})")
    return list(dict.fromkeys(found))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


@functools.cache
def _getent() -> str | None:
    return shutil.which("getent")


def _first_connected[T](addresses: list[str], connect: Callable[[str], T], failure: type[Exception]) -> T:
    """``connect(address)`` of the first address it works for (else the last one's ``failure``)."""
    for address in addresses[:-1]:
        with contextlib.suppress(failure):
            return connect(address)
    return connect(addresses[-1])


def _deadline_connections(redis: Any) -> tuple[type, type]:
    """redis-py connection classes (TCP, TLS) whose sockets are ``_DeadlineSocket`` and that
    connect to the addresses ``resolve_within`` found (a TLS connection still checks the
    server's certificate against the host's name: only the TCP connect sees an address)."""

    class Mixin:
        def _connect(self) -> Any:
            self.gtcache_addresses = resolve_within(self.host, self.socket_connect_timeout)  # type: ignore[attr-defined]
            return _DeadlineSocket(super()._connect())  # type: ignore[misc]

    class Resolved(redis.connection.Connection):  # type: ignore[misc]
        host: str

        def _connect(self) -> Any:
            addresses, name = getattr(self, "gtcache_addresses", None), self.host
            if not addresses:
                return super()._connect()

            def connect(address: str) -> Any:
                self.host = address  # (for the TCP connect only: a TLS wrap, above, sees the name)
                try:
                    return super(Resolved, self)._connect()
                finally:
                    self.host = name
            return _first_connected(addresses, connect, OSError)

    plain = type("DeadlineConnection", (Mixin, Resolved), {})
    tls = type("DeadlineSSLConnection", (Mixin, redis.connection.SSLConnection, Resolved), {})
    return plain, tls


def _deadline_transport(httpx: Any) -> Any:
    """An httpx transport whose socket reads and writes end at this thread's deadline as well
    as at their own timeout: httpx's timeouts are per read, which a server trickling its
    headers or body (a byte per timeout) never reaches."""
    import httpcore

    class Stream(httpcore.NetworkStream):
        def __init__(self, stream: Any):
            self._stream = stream

        @staticmethod
        def _timeout(timeout: float | None) -> float | None:
            at: float | None = getattr(_deadline, "at", None)
            if at is None:
                return timeout
            left = at - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("over the deadline for one object")
            return left if timeout is None else min(left, timeout)

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._stream.read(max_bytes, self._timeout(timeout))  # type: ignore[no-any-return]

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._stream.write(buffer, self._timeout(timeout))

        def close(self) -> None:
            self._stream.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
            return Stream(self._stream.start_tls(ssl_context, server_hostname, self._timeout(timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._stream.get_extra_info(info)

    class Backend(httpcore.SyncBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None, *args: Any, **kwargs: Any) -> Any:
            # (httpcore checks a TLS certificate against the URL's host, not the address)
            connect = super().connect_tcp
            return Stream(_first_connected(resolve_within(host, timeout) or [host],
                                           lambda address: connect(address, port, timeout, *args, **kwargs),
                                           httpcore.ConnectError))

        def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
            return Stream(super().connect_unix_socket(*args, **kwargs))

    transport = httpx.HTTPTransport(trust_env=False)
    # httpx passes no network backend through; its pool (httpcore's) takes one. A future
    # httpx without the pool fails here, at set-up, and the tests that trickle catch it.
    pool = transport._pool  # noqa: SLF001
    if not isinstance(pool, httpcore.ConnectionPool):
        raise TypeError(f"httpx's transport holds a {type(pool).__name__}, not httpcore's pool")
    pool._network_backend = Backend()  # noqa: SLF001
    return transport


class RedisBackend:
    """Objects as Redis strings named ``<prefix><name>`` (``SET`` is atomic: no partial object)."""

    def __init__(self, url: str, *, connect_timeout: float, timeout: float, credentials: Credentials,
                 prefix: str = "gtcache/", total: float = 120.0):
        try:
            import redis
            import redis.connection
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise GtcacheError("A redis:// remote needs the 'redis' package (pip install 'gtcache[remote]').") from None
        self._redis = redis
        extra: dict[str, Any] = {}
        if credentials.password and not urllib.parse.urlsplit(url).password:
            extra["password"] = credentials.password
            if credentials.user:
                extra["username"] = credentials.user
        plain, tls = _deadline_connections(redis)
        # Retries are the tier's (bounded, and never after a timeout): none in the client.
        self.client = redis.Redis.from_url(
            url, socket_connect_timeout=connect_timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False, health_check_interval=0,
            connection_class=tls if url.startswith("rediss:") else plain, **extra,
        )
        self.prefix = prefix
        #: Seconds one object (or one listing step) may take in all.
        self.total = total

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        redis = self._redis
        try:
            with deadline(self.total), read_budget(_MAX_LISTING):
                return call(*args)
        except redis.exceptions.TimeoutError as error:
            raise RemoteFailure(f"{what}: timed out ({error})", timeout=True) from None
        except redis.exceptions.AuthenticationError as error:
            raise RemoteFailure(f"{what}: authentication failed ({error})", retry=False) from None
        except redis.exceptions.ResponseError as error:
            raise RemoteFailure(f"{what}: {error}", retry=False) from None
        except (redis.exceptions.RedisError, OSError) as error:
            raise RemoteFailure(f"{what}: {error}") from None
        except RemoteFailure:
            raise
        except Exception as error:  # the client choking on an answer that is not Redis's
            raise _garbage(what, error) from None

    def get(self, name: str, max_size: int) -> bytes | None:
        """``STRLEN``, then ``GETRANGE`` in chunks of at most ``_CHUNK`` bytes (never a plain
        ``GET``: its answer is as long as the server says), all within one deadline; a
        server that answers a chunk with more than was asked is cut off at the socket."""
        key = self.prefix + name
        with deadline(self.total), read_budget(max_size + _CHUNK):
            size = self._call("STRLEN", self.client.strlen, key)
            if not isinstance(size, int) or size <= 0:
                return None
            if size > max_size:
                raise ObjectTooLarge(f"object '{name}' has {size} bytes, over the {max_size} limit")
            chunks, got = [], 0
            while got < size:
                part = self._call("GETRANGE", self.client.getrange, key, got, min(size, got + _CHUNK) - 1)
                if not isinstance(part, bytes) or not part:
                    break  # the object shrank (was replaced) since STRLEN: the bundle check refuses it
                got += len(part)
                if got > max_size:
                    raise ObjectTooLarge(f"object '{name}' has over {max_size} bytes, the limit")
                chunks.append(part)
        return b"".join(chunks)

    def put(self, name: str, data: bytes) -> None:
        self._call("SET", self.client.set, self.prefix + name, data)

    def exists(self, name: str) -> bool:
        return bool(self._call("EXISTS", self.client.exists, self.prefix + name))

    def get_many(self, names: list[str], max_size: int) -> dict[str, bytes]:
        """The first ``max_size`` bytes of each object of ``names`` that exists (``GETRANGE 0
        max_size-1``, pipelined, 500 per round trip; never ``MGET``, whose answer has no bound);
        an object longer than that is left out."""
        found: dict[str, bytes] = {}
        for start in range(0, len(names), 500):
            chunk = names[start:start + 500]

            def ranges(chunk: list[str] = chunk) -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                for n in chunk:
                    pipe.getrange(self.prefix + n, 0, max_size)  # one byte more: tells a longer one
                return list(pipe.execute())

            with read_budget(len(chunk) * (max_size + 64) + _CHUNK):
                values = self._call("GETRANGE", ranges)
            found.update((n, v) for n, v in zip(chunk, values, strict=True)
                         if isinstance(v, bytes) and 0 < len(v) <= max_size)
        return found

    def list(self, prefix: str) -> list[Listed]:
        """``SCAN`` over ``<prefix>*`` (never ``KEYS``: the server keeps serving), then the sizes
        (``STRLEN``, pipelined). Redis keeps no modification time."""
        raw = self._call("SCAN", lambda: sorted(self.client.scan_iter(match=self.prefix + prefix + "*", count=1000)))
        names = [r.decode(errors="replace")[len(self.prefix):] for r in raw]

        def sizes() -> list[int]:
            pipe = self.client.pipeline(transaction=False)
            for r in raw:
                pipe.strlen(r)
            return list(pipe.execute())

        lengths = self._call("STRLEN", sizes) if raw else []
        # (a key dropped since the SCAN has length 0: left out)
        return [(n, int(size), None) for n, size in zip(names, lengths, strict=True) if size]

    def ping(self) -> None:
        self._call("PING", self.client.ping)

    def close(self) -> None:
        self.client.close()


def _garbage(what: str, error: BaseException) -> RemoteFailure:
    """Any other exception from a client: the server answered something it could not parse."""
    return RemoteFailure(f"{what}: the server's answer was not understood ({type(error).__name__}: {error})",
                         retry=False)


def _multistatus(data: bytes, folder: str) -> list[Listed]:
    """The files directly in ``folder`` (a URL path ending in ``/``) a WebDAV multistatus names."""
    import email.utils
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.fromstring(data)  # noqa: S314 - expat refuses entity expansion bombs
    except ElementTree.ParseError as error:
        raise RemoteFailure(f"PROPFIND answered no XML ({error})", retry=False) from None
    dav = "{DAV:}"
    listed: list[Listed] = []
    for response in root.iter(f"{dav}response"):
        href = response.findtext(f"{dav}href") or ""
        path = urllib.parse.unquote(urllib.parse.urlsplit(href).path)
        if not path.startswith(folder) or path == folder or "/" in path[len(folder):].rstrip("/"):
            continue
        if response.find(f".//{dav}resourcetype/{dav}collection") is not None or path.endswith("/"):
            continue
        length = (response.findtext(f".//{dav}getcontentlength") or "").strip()
        modified_text = (response.findtext(f".//{dav}getlastmodified") or "").strip()
        try:
            modified: float | None = email.utils.parsedate_to_datetime(modified_text).timestamp()
        except (TypeError, ValueError, IndexError):
            modified = None
        name = path[len(folder):]
        listed.append((name, int(length) if length.isdigit() else None, modified))
    return sorted(listed)


class HttpBackend:
    """Objects as files under a base URL: GET / HEAD / PUT ``<base>/<name>`` (nginx WebDAV,
    bazel-remote, ccache's HTTP servers). A server that writes an upload to a temporary file
    and renames it (nginx does) never shows a partial object."""

    def __init__(self, url: str, *, connect_timeout: float, timeout: float, credentials: Credentials,
                 total: float = 120.0):
        try:
            import httpx
        except ImportError:
            raise GtcacheError("An http(s):// remote needs the 'httpx' package (pip install 'gtcache[remote]').") from None
        self._httpx = httpx
        parts = urllib.parse.urlsplit(url)
        auth: Any = None
        headers = {"User-Agent": "gtcache"}
        user = urllib.parse.unquote(parts.username) if parts.username else credentials.user
        password = urllib.parse.unquote(parts.password) if parts.password else credentials.password
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        elif user is not None:
            auth = httpx.BasicAuth(user, password or "")
        netloc = parts.hostname or ""
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        self.base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.client = httpx.Client(
            auth=auth, headers=headers, follow_redirects=False, trust_env=False,
            timeout=httpx.Timeout(timeout, connect=connect_timeout), transport=_deadline_transport(httpx),
        )
        #: Seconds one object (or one listing) may take in all; checked at every chunk.
        self.total = total

    def _url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def _request(self, method: str, name: str, **kw: Any) -> Any:
        with self._failures(method), deadline(self.total):
            return self.client.request(method, self._url(name), **kw)

    @contextlib.contextmanager
    def _failures(self, method: str) -> Iterator[None]:
        """Any exception of the client in the block as a ``RemoteFailure`` (timeouts as such)."""
        httpx = self._httpx
        try:
            yield
        except httpx.TimeoutException as error:
            raise RemoteFailure(f"{method} timed out ({type(error).__name__})", timeout=True) from None
        except httpx.HTTPError as error:
            raise RemoteFailure(f"{method} failed: {error or type(error).__name__}") from None
        except RemoteFailure:
            raise
        except Exception as error:
            raise _garbage(method, error) from None

    @staticmethod
    def _check(method: str, response: Any) -> None:
        if response.status_code >= 400:
            raise RemoteFailure(f"{method} answered HTTP {response.status_code}",
                                retry=response.status_code >= 500 or response.status_code == 429)

    def get(self, name: str, max_size: int) -> bytes | None:
        with self._failures("GET"), deadline(self.total), self.client.stream("GET", self._url(name)) as response:
            if response.status_code == 404:
                return None
            self._check("GET", response)
            length = response.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > max_size:
                raise ObjectTooLarge(f"object '{name}' has {length} bytes, over the {max_size} limit")
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                _time_left("GET")
                size += len(chunk)
                if size > max_size:
                    raise ObjectTooLarge(f"object '{name}' has over {max_size} bytes, the limit")
                chunks.append(chunk)
            return b"".join(chunks)

    def put(self, name: str, data: bytes) -> None:
        self._check("PUT", self._request("PUT", name, content=data))

    def exists(self, name: str) -> bool:
        response = self._request("HEAD", name)
        if response.status_code == 404:
            return False
        self._check("HEAD", response)
        return True

    def get_many(self, names: list[str], max_size: int) -> dict[str, bytes]:
        found = {}
        for name in names:
            try:
                data = self.get(name, max_size)
            except ObjectTooLarge:
                continue
            if data is not None:
                found[name] = data
        return found

    def list(self, prefix: str) -> list[Listed] | None:
        """WebDAV ``PROPFIND`` with ``Depth: 1`` of the folder ``prefix`` (nginx's dav-ext module,
        Apache mod_dav, ...); None when the server does not list (a plain GET/PUT server
        answers 405 or 501 or something that is not a multistatus)."""
        folder = self._url(prefix.rstrip("/")) + "/"
        body = (b'<?xml version="1.0" encoding="utf-8"?><propfind xmlns="DAV:"><prop>'
                b"<getcontentlength/><getlastmodified/><resourcetype/></prop></propfind>")
        with self._failures("PROPFIND"), deadline(self.total), self.client.stream(
                "PROPFIND", folder, headers={"Depth": "1", "Content-Type": "application/xml"}, content=body,
        ) as response:
            if response.status_code == 404:
                return []  # nothing was ever pushed
            if response.status_code in (400, 403, 405, 501) or (
                    response.status_code < 400 and response.status_code != 207):
                return None
            self._check("PROPFIND", response)
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                _time_left("PROPFIND")
                size += len(chunk)
                if size > _MAX_LISTING:
                    raise RemoteFailure(f"PROPFIND answered over {_MAX_LISTING} bytes", retry=False)
                chunks.append(chunk)
        base = prefix.rstrip("/") + "/"
        return [(base + name, size, modified)
                for name, size, modified in _multistatus(b"".join(chunks), urllib.parse.urlsplit(folder).path)]

    def ping(self) -> None:
        # An object name no entry has: 404 is an answer; a refused login is not.
        self.exists("v1/entries/" + "0" * 32 + ".tar.gz")

    def close(self) -> None:
        self.client.close()
