"""The two wire protocols of a remote: Redis and HTTP/WebDAV objects by path.

A backend moves opaque bytes under object names (``v1/entries/<key>.tar.gz``,
``v1/direct/<key>.json``); it knows nothing of entries. Every failure is a
``RemoteFailure`` (``timeout`` says whether the server was slow rather than gone);
retries and the circuit breaker are the tier's (``_tier.py``).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Iterator
from typing import Any, Protocol

from gtcache.errors import GtcacheError

__all__ = ["Backend", "Credentials", "HttpBackend", "RedisBackend", "RemoteFailure", "redact"]


class RemoteFailure(Exception):
    """The remote did not answer as it should (unreachable, slow, refused, garbage)."""

    def __init__(self, message: str, *, timeout: bool = False, retry: bool = True):
        super().__init__(message)
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


class Backend(Protocol):
    def get(self, name: str, max_size: int) -> bytes | None: ...
    def put(self, name: str, data: bytes) -> None: ...
    def exists(self, name: str) -> bool: ...
    def list(self, prefix: str) -> Iterator[str] | None: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...


def redact(url: str) -> str:
    """``url`` without its password (and without its query): what messages show."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    if parts.username:
        netloc = f"{parts.username}:***@{netloc}" if parts.password else f"{parts.username}@{netloc}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RedisBackend:
    """Objects as Redis strings named ``<prefix><name>`` (``SET`` is atomic: no partial object)."""

    def __init__(self, url: str, *, connect_timeout: float, timeout: float, credentials: Credentials,
                 prefix: str = "gtcache/"):
        try:
            import redis
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
        # Retries are the tier's (bounded, and never after a timeout): none in the client.
        self.client = redis.Redis.from_url(
            url, socket_connect_timeout=connect_timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False, health_check_interval=0, **extra,
        )
        self.prefix = prefix

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        redis = self._redis
        try:
            return call(*args)
        except redis.exceptions.TimeoutError as error:
            raise RemoteFailure(f"{what}: timed out ({error})", timeout=True) from None
        except redis.exceptions.AuthenticationError as error:
            raise RemoteFailure(f"{what}: authentication failed ({error})", retry=False) from None
        except redis.exceptions.ResponseError as error:
            raise RemoteFailure(f"{what}: {error}", retry=False) from None
        except (redis.exceptions.RedisError, OSError) as error:
            raise RemoteFailure(f"{what}: {error}") from None

    def get(self, name: str, max_size: int) -> bytes | None:
        key = self.prefix + name
        size = self._call("STRLEN", self.client.strlen, key)
        if not size:
            return None
        if size > max_size:
            raise ObjectTooLarge(f"object '{name}' has {size} bytes, over the {max_size} limit")
        data = self._call("GET", self.client.get, key)
        if data is not None and len(data) > max_size:
            raise ObjectTooLarge(f"object '{name}' has {len(data)} bytes, over the {max_size} limit")
        return data  # type: ignore[no-any-return]

    def put(self, name: str, data: bytes) -> None:
        self._call("SET", self.client.set, self.prefix + name, data)

    def exists(self, name: str) -> bool:
        return bool(self._call("EXISTS", self.client.exists, self.prefix + name))

    def list(self, prefix: str) -> Iterator[str]:
        names = self._call("SCAN", lambda: list(self.client.scan_iter(match=self.prefix + prefix + "*", count=1000)))
        for raw in sorted(names):
            yield raw.decode(errors="replace")[len(self.prefix):]

    def ping(self) -> None:
        self._call("PING", self.client.ping)

    def close(self) -> None:
        self.client.close()


class HttpBackend:
    """Objects as files under a base URL: GET / HEAD / PUT ``<base>/<name>`` (nginx WebDAV,
    bazel-remote, ccache's HTTP servers). A server that writes an upload to a temporary file
    and renames it (nginx does) never shows a partial object."""

    def __init__(self, url: str, *, connect_timeout: float, timeout: float, credentials: Credentials):
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
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
        )

    def _url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def _request(self, method: str, name: str, **kw: Any) -> Any:
        httpx = self._httpx
        try:
            return self.client.request(method, self._url(name), **kw)
        except httpx.TimeoutException as error:
            raise RemoteFailure(f"{method} timed out ({type(error).__name__})", timeout=True) from None
        except httpx.HTTPError as error:
            raise RemoteFailure(f"{method} failed: {error or type(error).__name__}") from None

    @staticmethod
    def _check(method: str, response: Any) -> None:
        if response.status_code >= 400:
            raise RemoteFailure(f"{method} answered HTTP {response.status_code}",
                                retry=response.status_code >= 500 or response.status_code == 429)

    def get(self, name: str, max_size: int) -> bytes | None:
        httpx = self._httpx
        try:
            with self.client.stream("GET", self._url(name)) as response:
                if response.status_code == 404:
                    return None
                self._check("GET", response)
                length = response.headers.get("content-length")
                if length is not None and length.isdigit() and int(length) > max_size:
                    raise ObjectTooLarge(f"object '{name}' has {length} bytes, over the {max_size} limit")
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > max_size:
                        raise ObjectTooLarge(f"object '{name}' has over {max_size} bytes, the limit")
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.TimeoutException as error:
            raise RemoteFailure(f"GET timed out ({type(error).__name__})", timeout=True) from None
        except httpx.HTTPError as error:
            raise RemoteFailure(f"GET failed: {error or type(error).__name__}") from None

    def put(self, name: str, data: bytes) -> None:
        self._check("PUT", self._request("PUT", name, content=data))

    def exists(self, name: str) -> bool:
        response = self._request("HEAD", name)
        if response.status_code == 404:
            return False
        self._check("HEAD", response)
        return True

    def list(self, prefix: str) -> None:
        return None  # plain GET/PUT servers cannot list

    def ping(self) -> None:
        # An object name no entry has: 404 is an answer; a refused login is not.
        self.exists("v1/entries/" + "0" * 32 + ".tar.gz")

    def close(self) -> None:
        self.client.close()
