"""A remote tier: one URL, its mode and limits, signed single-entry bundles, a circuit breaker.

What travels is one entry as a bundle of format 2 (``gtcache.bundle``): SHA-256 of every
member under an HMAC-SHA256 signature with ``GTCACHE_BUNDLE_KEY``. A remote is used only
when that key is set (every object it serves must then carry a good signature, every
object pushed is signed) or when its URL declares it trusted (``?trusted=1``: objects are
then taken unsigned, checksums still checked). Objects:

- ``v1/entries/<build key>.tar.gz``: the bundle of one entry;
- ``v1/direct/<direct key>.json``: ``{"format": 1, "direct", "build", "signature"}``, the
  direct link, signed over both keys (a link is what a program is served by without
  lowering: a forged one would serve another program's code);
- ``v1/info/<build key>.json``: what ``gtcache ls --remote`` shows of an entry (program,
  backend, created, pushed), written after the entry; only shown, never trusted.

Failures: short connect / read timeouts, bounded retries with backoff for errors that
are not timeouts, and then the remote is *broken* for the rest of the process
(``broken`` says why): callers skip it, and warn once.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import io
import json
import os
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from gtcache import bundle
from gtcache.errors import CorruptEntryError, GtcacheError, escape
from gtcache.remote._backends import (
    Backend, Credentials, HttpBackend, ObjectTooLarge, RedisBackend, RemoteFailure, redact,
)
from gtcache.store import Store, is_key

__all__ = [
    "DEFAULT_MAX_SIZE", "Remote", "RemoteEntry", "RemoteError", "RemoteMode", "RemoteSpec", "direct_object",
    "entry_object", "info_object", "parse_remote",
]

RemoteMode = Literal["read", "read-write"]
SCHEMES = ("redis", "rediss", "http", "https")
#: Per object; a bigger one is neither downloaded nor pushed (``?max_size=BYTES``).
DEFAULT_MAX_SIZE = 256 << 20
DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_TIMEOUT = 10.0
#: Seconds one object may take in all (``?deadline=S``): a server that trickles a byte per
#: read timeout is cut off here, not after hours.
DEFAULT_DEADLINE = 120.0
#: Tries after the first one, for failures that are not timeouts; then the remote is broken.
DEFAULT_RETRIES = 2
_BACKOFF = (0.05, 0.25)
_DIRECT_FORMAT = 1
_MAX_DIRECT_SIZE = 4096
_OPTIONS = {"mode", "trusted", "max_size", "connect_timeout", "timeout", "deadline", "retries"}

T = TypeVar("T")


class RemoteError(GtcacheError):
    """A remote that cannot be used: a bad URL, a failure talking to it, a refused object.
    Its message is escaped (``gtcache.errors.escape``): it may quote what a server sent."""

    def __init__(self, message: str):
        super().__init__(escape(message))


def entry_object(key: str) -> str:
    return f"v1/entries/{key}.tar.gz"


def direct_object(direct_key: str) -> str:
    return f"v1/direct/{direct_key}.json"


def info_object(key: str) -> str:
    return f"v1/info/{key}.json"


_MAX_INFO_SIZE = 4096


@dataclasses.dataclass(frozen=True)
class RemoteEntry:
    """One entry a remote holds, as far as its listing and info object say (None: unknown)."""

    key: str
    #: Bytes of the object (the signed bundle), as the listing says.
    size: int | None
    program: str | None = None
    backend: str | None = None
    #: ISO times: when the entry was compiled, and when its object was last written.
    created: str | None = None
    modified: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RemoteSpec:
    """One ``GTCACHE_REMOTE`` URL, parsed: where (``url``, query removed), how, how much."""

    url: str = dataclasses.field(repr=False)
    mode: RemoteMode = "read"
    trusted: bool = False
    max_size: int = DEFAULT_MAX_SIZE
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    timeout: float = DEFAULT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    retries: int = DEFAULT_RETRIES

    @property
    def name(self) -> str:
        """The URL without password or options: what messages show."""
        return redact(self.url)

    @property
    def writable(self) -> bool:
        return self.mode == "read-write"


def parse_remote(text: str) -> RemoteSpec:
    """``redis://[user:password@]host:port/db`` / ``rediss://`` / ``http(s)://host/base``, with
    options ``?mode=read|read-write&trusted=1&max_size=BYTES&connect_timeout=S&timeout=S&deadline=S&retries=N``."""
    shown = redact(text.strip())
    try:
        parts = urllib.parse.urlsplit(text.strip())
        parts.port  # noqa: B018 - a port that is not a number in 0-65535 raises here
    except ValueError as error:
        raise RemoteError(f"Remote '{shown}' is not a valid URL ({error}).") from None
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise RemoteError(f"Remote '{shown}' is not a redis://, rediss://, http:// or https:// URL with a host.")
    try:
        options = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)))
    except ValueError:
        raise RemoteError(f"Remote '{shown}' has a malformed query.") from None
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise RemoteError(f"Remote '{shown}' has unknown option '{unknown[0]}' (known: {', '.join(sorted(_OPTIONS))}).")
    mode = options.get("mode", "read")
    if mode not in ("read", "read-write"):
        raise RemoteError(f"Remote '{shown}' has mode={mode!r}; it is 'read' or 'read-write'.")
    trusted = options.get("trusted", "0").lower()
    if trusted not in ("1", "0", "yes", "no", "true", "false"):
        raise RemoteError(f"Remote '{shown}' has trusted={trusted!r}; it is 1 or 0.")

    def number(name: str, default: float, kind: Callable[[str], float]) -> Any:
        if name not in options:
            return default
        try:
            value = kind(options[name])
        except ValueError:
            value = -1
        if not 0 < value < float("inf") and not (name == "retries" and value == 0):
            raise RemoteError(f"Remote '{shown}' has {name}={options[name]!r}, not a number > 0.")
        return value

    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return RemoteSpec(
        url=url, mode=mode,  # type: ignore[arg-type]
        trusted=trusted in ("1", "yes", "true"),
        max_size=int(number("max_size", DEFAULT_MAX_SIZE, int)),
        connect_timeout=number("connect_timeout", DEFAULT_CONNECT_TIMEOUT, float),
        timeout=number("timeout", DEFAULT_TIMEOUT, float),
        deadline=number("deadline", DEFAULT_DEADLINE, float),
        retries=int(number("retries", DEFAULT_RETRIES, int)),
    )


def _read_info(data: bytes | None, key: str) -> dict[str, str]:
    """The text fields of an info object (shown, never trusted); {} for a missing or bad one."""
    try:
        info = json.loads(data.decode()) if data is not None else {}
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    if not isinstance(info, dict) or info.get("key") != key:
        return {}
    return {k: v for k, v in info.items() if isinstance(v, str) and k in ("program", "backend", "created", "pushed")}


class Remote:
    """One remote tier. Methods raise ``RemoteError``; after a failure to talk to the
    remote it is ``broken`` and every later call raises at once (no second timeout)."""

    def __init__(self, spec: RemoteSpec, *, key: bytes | None, credentials: Credentials | None = None,
                 from_file: bool = False):
        self.spec = dataclasses.replace(spec, trusted=False) if from_file else spec
        self.key = key or None
        #: Named by a store's ``gtcache.toml``: never trusted, never given credentials.
        self.from_file = from_file
        self.credentials = Credentials() if from_file else credentials or Credentials()
        #: Why this remote is skipped for the rest of the process (None: it is not).
        self.broken: str | None = None
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        _live.add(self)

    def _after_fork_in_child(self) -> None:
        """A forked child opens its own connection: the parent's socket is the parent's (two
        processes reading one socket would read each other's answers)."""
        self._lock = threading.Lock()
        if self._backend is not None:
            _forked_away.append(self._backend)  # never closed here, never collected: its socket is the parent's
            self._backend = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def writable(self) -> bool:
        return self.spec.writable

    def __repr__(self) -> str:
        return f"Remote({self.name!r}, mode={self.spec.mode!r})"

    def problem(self) -> str | None:
        """Why this remote must not be used at all (no way to verify what it serves)."""
        if self.key is None and self.from_file:
            return ("no GTCACHE_BUNDLE_KEY to verify its objects with (a remote named by the store's"
                    " gtcache.toml is used only with the key)")
        if self.key is None and not self.spec.trusted:
            return ("no GTCACHE_BUNDLE_KEY to verify its objects with"
                    " (set the key, or declare the remote trusted with ?trusted=1)")
        return None

    def _open(self) -> Backend:
        with self._lock:
            if self._backend is None:
                spec = self.spec
                kw: dict[str, Any] = dict(connect_timeout=spec.connect_timeout, timeout=spec.timeout,
                                          credentials=self.credentials, total=spec.deadline)
                scheme = urllib.parse.urlsplit(spec.url).scheme
                self._backend = RedisBackend(spec.url, **kw) if scheme.startswith("redis") else HttpBackend(spec.url, **kw)
            return self._backend

    def _call(self, what: str, call: Callable[[Backend], T]) -> T:
        """``call`` with bounded retries (none after a timeout); the breaker trips on failure."""
        if self.broken is not None:
            raise RemoteError(f"Remote '{self.name}' is skipped: {self.broken}.")
        if (problem := self.problem()) is not None:
            raise RemoteError(f"Remote '{self.name}' is not used: {problem}.")
        try:
            backend = self._open()
        except Exception as error:  # no client package, a URL the client refuses
            self.broken = f"cannot connect: {error}"
            raise RemoteError(f"Remote '{self.name}': {self.broken}") from None
        attempt = 0
        while True:
            try:
                return call(backend)
            except ObjectTooLarge as failure:  # that object, not the remote: the others still come
                raise RemoteError(f"Remote '{self.name}': {failure}.") from None
            except RemoteFailure as failure:
                if failure.retry and attempt < self.spec.retries:
                    time.sleep(_BACKOFF[min(attempt, len(_BACKOFF) - 1)])
                    attempt += 1
                    continue
                self.broken = f"{what} failed: {failure}"
                raise RemoteError(f"Remote '{self.name}': {self.broken}.") from None
            except Exception as error:  # a backend's bug or a client's: the remote is skipped all the same
                self.broken = f"{what} failed: {type(error).__name__}: {error}"
                raise RemoteError(f"Remote '{self.name}': {self.broken}.") from None

    # -- what the tier does ----------------------------------------------------------------

    def ping(self) -> None:
        self._call("ping", lambda b: b.ping())

    def has(self, key: str) -> bool:
        return self._call("exists", lambda b: b.exists(entry_object(key)))

    def keys(self) -> list[str] | None:
        """The build keys the remote holds, or None when its protocol cannot list."""
        listed = self._listed()
        return None if listed is None else sorted(listed)

    def _listed(self) -> dict[str, tuple[int | None, float | None]] | None:
        """Build key -> (size, modified) of the entry objects the remote lists (None: cannot list)."""
        names = self._call("list", lambda b: b.list("v1/entries/"))
        if names is None:
            return None
        found = {}
        for name, size, modified in names:
            key = name.removeprefix("v1/entries/").removesuffix(".tar.gz")
            if is_key(key) and name == entry_object(key):
                found[key] = (size, modified)
        return found

    def listing(self) -> list[RemoteEntry] | None:
        """Every entry the remote holds, with what its info object says; None when the
        protocol cannot list (plain HTTP). Entries pushed without info show only key and size."""
        listed = self._listed()
        if listed is None:
            return None
        infos = self._call("get", lambda b: b.get_many([info_object(k) for k in listed], _MAX_INFO_SIZE))
        entries = []
        for key, (size, modified) in sorted(listed.items()):
            info = _read_info(infos.get(info_object(key)), key)
            entries.append(RemoteEntry(
                key=key, size=size, program=info.get("program"), backend=info.get("backend"),
                created=info.get("created"),
                modified=(datetime.datetime.fromtimestamp(modified, datetime.timezone.utc).isoformat(timespec="seconds")
                          if modified is not None else info.get("pushed")),
            ))
        return entries

    def fetch(self, store: Store, key: str, *, facts: Mapping[str, Any] | None = None) -> bool:
        """Copy entry ``key`` from the remote into ``store`` (verified, published atomically).

        False when the remote does not have it (or has it for another toolchain); a
        refused object (bad signature, damaged, another entry) raises ``RemoteError``
        without breaking the remote.
        """
        report = self.fetch_report(store, key, facts=facts)
        return report is not None and (key in report.imported or key in report.existing)

    def fetch_report(
        self, store: Store, key: str, *, facts: Mapping[str, Any] | None = None, force: bool = False,
    ) -> bundle.ImportReport | None:
        """``fetch``, saying what happened (None: the remote does not have ``key``)."""
        data = self._call("get", lambda b: b.get(entry_object(key), self.spec.max_size))
        if data is None:
            return None
        name = f"{self.name}/{entry_object(key)}"
        try:
            report = bundle.read_bundle(
                io.BytesIO(data), store, key=self.key, require_signature=self.key is not None,
                facts=facts, force=force, name=name, expect=(key,),
            )
        except bundle.BundleError as error:
            raise RemoteError(f"Remote object refused: {error}") from None
        if {*report.imported, *report.existing, *report.skipped} != {key}:
            raise RemoteError(f"Remote object refused: '{name}' holds other entries than '{key}'.")
        return report

    def push(self, store: Store, key: str, *, force: bool = False) -> bool:
        """Upload entry ``key`` of ``store``, signed; False if the remote has it already."""
        self._writable()
        if not force and self.has(key):
            return False
        try:
            entry = store.get(key)
            out = io.BytesIO()
            report = bundle.write_bundle(out, store, [entry], key=self.key)
        except CorruptEntryError as error:  # its folder or a file's size is wrong (the lookup's checks)
            raise RemoteError(f"Entry '{key}' is broken and was not pushed: {error.reason}") from None
        except bundle.BundleError as error:  # a file changed while it was read
            raise RemoteError(f"Entry '{key}' was not pushed: {error}") from None
        if report.left_out:
            raise RemoteError(f"Entry '{key}' is broken and was not pushed: {report.left_out[key]}")
        data = out.getvalue()
        if len(data) > self.spec.max_size:
            raise RemoteError(f"Entry '{key}' makes an object of {len(data)} bytes, over the"
                              f" {self.spec.max_size}-byte limit of '{self.name}'; not pushed.")
        self._call("put", lambda b: b.put(entry_object(key), data))
        record = entry.record
        module, name = record.program.get("module"), record.program.get("name", "?")
        info = {"format": 1, "key": key, "program": f"{module}.{name}" if module else name,
                "backend": record.backend.get("name", "?"), "created": record.created,
                "pushed": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        self._call("put", lambda b: b.put(info_object(key), json.dumps(info, sort_keys=True).encode()))
        return True

    def build_key_of(self, direct_key: str) -> str | None:
        """The build key the remote's direct link names, if it has one that verifies."""
        data = self._call("get", lambda b: b.get(direct_object(direct_key), _MAX_DIRECT_SIZE))
        if data is None:
            return None
        try:
            link = json.loads(data.decode())
            ok = (isinstance(link, dict) and link.get("format") == _DIRECT_FORMAT
                  and link.get("direct") == direct_key and is_key(str(link.get("build", ""))))
        except (UnicodeDecodeError, ValueError, RecursionError):
            ok = False
        if not ok:
            raise RemoteError(f"Remote object refused: '{self.name}/{direct_object(direct_key)}' is not a direct link.")
        build = str(link["build"])
        if self.key is not None:
            signature = link.get("signature")
            if not isinstance(signature, str) or not hmac.compare_digest(signature, self._sign_link(direct_key, build)):
                raise RemoteError(f"Remote object refused: '{self.name}/{direct_object(direct_key)}' has a wrong"
                                  " or no signature.")
        return build

    def push_direct(self, direct_key: str, build_key: str) -> None:
        self._writable()
        link: dict[str, Any] = {"format": _DIRECT_FORMAT, "direct": direct_key, "build": build_key}
        if self.key is not None:
            link["signature"] = self._sign_link(direct_key, build_key)
        data = json.dumps(link, sort_keys=True).encode()
        self._call("put", lambda b: b.put(direct_object(direct_key), data))

    def close(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, None
        if backend is not None:
            try:
                backend.close()
            except Exception:  # noqa: S110 - closing a connection is never worth an error
                pass

    def _writable(self) -> None:
        if not self.writable:
            raise RemoteError(f"Remote '{self.name}' is read-only; add ?mode=read-write to its URL to push to it.")

    def _sign_link(self, direct_key: str, build_key: str) -> str:
        assert self.key is not None
        message = f"gtcache direct link {_DIRECT_FORMAT}\0{direct_key}\0{build_key}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()


_live: weakref.WeakSet[Remote] = weakref.WeakSet()
#: Backends a forked child inherited: kept, unused, so that nothing closes the parent's connection.
_forked_away: list[Backend] = []


def _after_fork_in_child() -> None:
    for remote in list(_live):
        remote._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
