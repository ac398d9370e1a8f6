"""Settings resolved once, at the entry point, from arguments and the environment.

This is the one module that reads gtcache's environment variables (``_env`` parses a
switch; the start-up hook uses it before anything else is imported). The rest of
gtcache is handed a ``Settings`` (or its fields) by the entry point that made it: the
CLI's ``main``, ``install()``, the start-up hook, a warm worker, the demo.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Callable, Mapping

from gtcache._frozen import Frozen, field
from gtcache import _env
from gtcache.errors import GtcacheError

__all__ = [
    "BundleTrust", "Settings", "bundle_mtime", "bundle_trust", "declared_gpu_arch", "split_remotes", "switch", "trusted_from_env",
]

#: Environment variables gtcache reads (documented in docs/configuration.md).
ENV_CACHE_DIR = _env.ENV_CACHE_DIR
ENV_INDEX_DIR = "GTCACHE_INDEX_DIR"
ENV_ENABLE = _env.ENV_ENABLE
ENV_SELF_CHECK = "GTCACHE_SELF_CHECK"
ENV_EXPLAIN = "GTCACHE_EXPLAIN"
ENV_READONLY_DIRS = "GTCACHE_READONLY_DIRS"
ENV_PROMOTE = "GTCACHE_PROMOTE"
ENV_LOCKING = "GTCACHE_LOCKING"
ENV_WAIT = "GTCACHE_WAIT"
ENV_BUNDLE_KEY = "GTCACHE_BUNDLE_KEY"
ENV_BUNDLE_REQUIRE_SIGNED = "GTCACHE_BUNDLE_REQUIRE_SIGNED"
ENV_SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
ENV_TRUSTED_USERS = "GTCACHE_TRUSTED_USERS"
ENV_TRUSTED_GROUPS = "GTCACHE_TRUSTED_GROUPS"
ENV_LOG = "GTCACHE_LOG"
ENV_REPORT = "GTCACHE_REPORT"
ENV_MAX_SIZE = "GTCACHE_MAX_SIZE"
ENV_MAX_FILES = "GTCACHE_MAX_FILES"
#: The GPU architecture a process declares it runs on when cupy cannot say (docs/keys.md):
#: ``GTCACHE_CUDA_ARCH`` (``90``, ``80``...) and ``GTCACHE_HIP_ARCH`` (``gfx90a``...).
ENV_CUDA_ARCH = "GTCACHE_CUDA_ARCH"
ENV_HIP_ARCH = "GTCACHE_HIP_ARCH"
ENV_REMOTE = "GTCACHE_REMOTE"
ENV_REMOTE_TOKEN = "GTCACHE_REMOTE_TOKEN"
ENV_REMOTE_USER = "GTCACHE_REMOTE_USER"
ENV_REMOTE_PASSWORD = "GTCACHE_REMOTE_PASSWORD"
LOCKING_METHODS = ("auto", "flock", "files")
#: ``GTCACHE_LOG`` values: the level of the stderr handler put on the ``gtcache`` logger.
LOG_LEVELS = ("debug", "info", "warning")


class Settings(Frozen):
    """Where the store and its index live, and how the gt4py hook behaves."""

    cache_dir: pathlib.Path
    #: ``None``: the index lives inside the store (``<cache_dir>/index``).
    index_dir: pathlib.Path | None = None
    #: Whether the start-up hook installs itself (``GTCACHE_DIR`` set, or ``GTCACHE=1``).
    enabled: bool = False
    #: Compute both keys on every direct hit and report disagreements (``GTCACHE_SELF_CHECK=1``).
    self_check: bool = False
    #: Log, on every miss, which key ingredients differ from the nearest entry (``GTCACHE_EXPLAIN=1``).
    explain: bool = False
    #: Read-only stores consulted after ``cache_dir``, in order (``GTCACHE_READONLY_DIRS``,
    #: separated by ``os.pathsep``): e.g. a shared store CI filled. Never written.
    readonly_dirs: tuple[pathlib.Path, ...] = ()
    #: Copy entries found in a read-only store into ``cache_dir`` (``GTCACHE_PROMOTE=1``).
    promote: bool = False
    #: How processes lock a store (``GTCACHE_LOCKING``): "auto" (``flock``, lock files where
    #: the file system has no ``flock``), "flock" or "files" (see ``gtcache.store._lock``).
    locking: str = "auto"
    #: Seconds a process waits for another one compiling the same variant before compiling
    #: it too (``GTCACHE_WAIT``); 0: never wait.
    wait: float = 600.0
    #: Users (uids) besides oneself and root whose stores and entries are used
    #: (``GTCACHE_TRUSTED_USERS``, names or ids); ``-1`` stands for ``*``: everyone.
    trusted_users: tuple[int, ...] = ()
    #: Groups (gids) whose members are trusted and which may write a store
    #: (``GTCACHE_TRUSTED_GROUPS``, names or ids). See ``gtcache.store._trust``.
    trusted_groups: tuple[int, ...] = ()
    #: ``GTCACHE_LOG``: "debug", "info" (a line per variant: hit, compiled, ...) or "warning";
    #: a stderr handler at that level goes on the ``gtcache`` logger. None: logging untouched.
    log_level: str | None = None
    #: Print one summary line on stderr at process exit (``GTCACHE_REPORT=1``).
    report: bool = False
    #: ``GTCACHE_MAX_SIZE`` / ``GTCACHE_MAX_FILES`` as given (None: unset); they win over the
    #: store's ``gtcache.toml``. ``gtcache.policies.Limits.for_store`` reads them (a bad one
    #: costs the size cap, with a warning, not the cache).
    max_size: str | None = None
    max_files: str | None = None
    #: ``GTCACHE_BUNDLE_KEY``, ``GTCACHE_BUNDLE_REQUIRE_SIGNED`` and ``SOURCE_DATE_EPOCH`` as
    #: given: checked only by the bundle commands (``bundle_trust()``, ``bundle_mtime()``), so
    #: that a bad one stops ``gtcache export``, not every command.
    bundle_key: str | None = field(default=None, repr=False)
    bundle_require_signed: str = ""
    source_date_epoch: str = ""
    #: ``GTCACHE_CUDA_ARCH`` / ``GTCACHE_HIP_ARCH`` as given (None: unset); ``declared_gpu_arch``.
    cuda_arch: str | None = None
    hip_arch: str | None = None
    #: ``GTCACHE_REMOTE``: remote tier URLs, tried in order after the stores (separated by
    #: spaces or commas; parsed by ``gtcache.remote.parse_remote``). Hidden: they may hold passwords.
    remotes: tuple[str, ...] = field(default=(), repr=False)
    #: Whether ``remotes`` were given (``GTCACHE_REMOTE`` set, even empty, or
    #: ``install(remote=...)``): then they win over ``[remote]`` in the store's ``gtcache.toml``
    #: (``gtcache.policies.remote_urls`` decides).
    remotes_given: bool = False
    #: ``GTCACHE_REMOTE_TOKEN`` (HTTP bearer token) and ``GTCACHE_REMOTE_USER`` /
    #: ``GTCACHE_REMOTE_PASSWORD`` (HTTP basic auth, or the Redis login): never shown.
    remote_token: str | None = field(default=None, repr=False)
    remote_user: str | None = field(default=None, repr=False)
    remote_password: str | None = field(default=None, repr=False)

    def bundle_trust(self) -> BundleTrust:
        """The bundle key and signature demand (``GtcacheError`` for a bad one, see ``BundleTrust``)."""
        return _bundle_trust(self.bundle_key, self.bundle_require_signed)

    def bundle_mtime(self) -> int:
        """The modification time bundle members get: ``SOURCE_DATE_EPOCH`` if set, else 0."""
        return _bundle_mtime(self.source_date_epoch)

    @classmethod
    def from_env(
        cls,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Settings:
        """Arguments win over ``GTCACHE_DIR`` / ``GTCACHE_INDEX_DIR``, which win over defaults.

        A bad value of ``GTCACHE_LOCKING`` or ``GTCACHE_WAIT`` raises ``GtcacheError``.
        """
        env = os.environ if env is None else env
        locking = env.get(ENV_LOCKING, "").strip().lower() or "auto"
        if locking not in LOCKING_METHODS:
            raise GtcacheError(f"{ENV_LOCKING}={locking!r} is not one of {', '.join(LOCKING_METHODS)}.")
        wait_text = env.get(ENV_WAIT, "").strip()
        try:
            wait = float(wait_text) if wait_text else 600.0
        except ValueError:
            wait = -1.0
        if not 0 <= wait < float("inf"):
            raise GtcacheError(f"{ENV_WAIT}={wait_text!r} is not a number of seconds >= 0.")
        log_level = env.get(ENV_LOG, "").strip().lower() or None
        if log_level is not None and log_level not in LOG_LEVELS:
            raise GtcacheError(f"{ENV_LOG}={log_level!r} is not one of {', '.join(LOG_LEVELS)}.")
        chosen = cache_dir or env.get(ENV_CACHE_DIR) or _default_cache_dir()
        chosen_index = index_dir or env.get(ENV_INDEX_DIR) or None
        trusted_users, trusted_groups = trusted_from_env(env)
        return cls(
            cache_dir=pathlib.Path(chosen).expanduser().absolute(),
            index_dir=pathlib.Path(chosen_index).expanduser().absolute() if chosen_index else None,
            enabled=_env.hook_enabled(env),
            self_check=_env.is_true(env.get(ENV_SELF_CHECK)),
            explain=_env.is_true(env.get(ENV_EXPLAIN)),
            readonly_dirs=tuple(
                pathlib.Path(p).expanduser().absolute()
                for p in env.get(ENV_READONLY_DIRS, "").split(os.pathsep) if p.strip()
            ),
            promote=_env.is_true(env.get(ENV_PROMOTE)),
            locking=locking,
            wait=wait,
            trusted_users=trusted_users,
            trusted_groups=trusted_groups,
            log_level=log_level,
            report=_env.is_true(env.get(ENV_REPORT)),
            max_size=env.get(ENV_MAX_SIZE),
            max_files=env.get(ENV_MAX_FILES),
            bundle_key=env.get(ENV_BUNDLE_KEY),
            bundle_require_signed=env.get(ENV_BUNDLE_REQUIRE_SIGNED, ""),
            source_date_epoch=env.get(ENV_SOURCE_DATE_EPOCH, ""),
            cuda_arch=declared_gpu_arch("CUDA", env),
            hip_arch=declared_gpu_arch("ROCM", env),
            remotes=split_remotes(env.get(ENV_REMOTE, "")),
            remotes_given=ENV_REMOTE in env,
            remote_token=env.get(ENV_REMOTE_TOKEN) or None,
            remote_user=env.get(ENV_REMOTE_USER) or None,
            remote_password=env.get(ENV_REMOTE_PASSWORD) or None,
        )


def split_remotes(text: str) -> tuple[str, ...]:
    """The URLs of a ``GTCACHE_REMOTE`` value (separated by spaces or commas)."""
    return tuple(u for u in re.split(r"[\s,]+", text) if u)


def switch(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether the switch ``name`` is on in ``env`` (default: this process's), in the words
    every gtcache switch takes (``1``, ``true``, ``yes``, ``on``). For a switch read where no
    ``Settings`` may exist, as the CLI's ``GTCACHE_DEBUG`` when ``Settings`` failed."""
    env = os.environ if env is None else env
    return _env.is_true(env.get(name))


def declared_gpu_arch(device_type: str, env: Mapping[str, str] | None = None) -> str | None:
    """The arch ``GTCACHE_CUDA_ARCH`` (device type ``CUDA...``) or ``GTCACHE_HIP_ARCH``
    (``ROCM``) declares, stripped; None when unset or empty, or for another device type.

    Read here, on each call, for ``gtcache.toolchain.device_arch`` (a key ingredient
    computed where no ``Settings`` is handed down); ``env``: default this process's.
    """
    env = os.environ if env is None else env
    name = ENV_CUDA_ARCH if device_type.startswith("CUDA") else ENV_HIP_ARCH if device_type.startswith("ROCM") else None
    value = env.get(name, "").strip() if name else ""
    return value or None


class BundleTrust(Frozen):
    """What ``gtcache export`` / ``import`` sign bundles with and demand of them."""

    #: ``GTCACHE_BUNDLE_KEY`` as bytes; ``None`` when unset. Never shown (``repr`` hides it).
    key: bytes | None = field(default=None, repr=False)
    #: Refuse unsigned bundles (``GTCACHE_BUNDLE_REQUIRE_SIGNED=1``; a set key implies it).
    require_signed: bool = False


def bundle_trust(env: Mapping[str, str] | None = None) -> BundleTrust:
    """``Settings.bundle_trust`` of an environment alone (default: this process's).

    A key that is set but empty (``GTCACHE_BUNDLE_KEY=``) would sign nothing and check
    nothing, and a value of ``GTCACHE_BUNDLE_REQUIRE_SIGNED`` that is neither yes nor no
    may be a typo of yes: both raise ``GtcacheError`` rather than trust unsigned bundles.
    """
    env = os.environ if env is None else env
    return _bundle_trust(env.get(ENV_BUNDLE_KEY), env.get(ENV_BUNDLE_REQUIRE_SIGNED, ""))


def bundle_mtime(env: Mapping[str, str] | None = None) -> int:
    """``Settings.bundle_mtime`` of an environment alone (default: this process's)."""
    env = os.environ if env is None else env
    return _bundle_mtime(env.get(ENV_SOURCE_DATE_EPOCH, ""))


def _bundle_trust(raw_key: str | None, require_signed: str) -> BundleTrust:
    if raw_key is not None and not raw_key.strip():
        raise GtcacheError(f"{ENV_BUNDLE_KEY} is set but empty; set it to the shared secret or unset it.")
    required = _env.word(require_signed)
    if required not in _env.TRUE + _env.FALSE:
        raise GtcacheError(f"{ENV_BUNDLE_REQUIRE_SIGNED}={required!r} is neither 1 nor 0.")
    key = os.fsencode(raw_key) if raw_key is not None else None
    return BundleTrust(key=key, require_signed=required in _env.TRUE or key is not None)


def _bundle_mtime(text: str) -> int:
    text = text.strip()
    if not text:
        return 0
    if not text.isdigit() or int(text) >= 8**11:
        raise GtcacheError(f"{ENV_SOURCE_DATE_EPOCH}={text!r} is not a number of seconds since 1970.")
    return int(text)


def trusted_from_env(env: Mapping[str, str] | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(uids, gids) of ``GTCACHE_TRUSTED_USERS`` / ``GTCACHE_TRUSTED_GROUPS``; ``-1``: ``*``.

    ``env``: default this process's. Names are looked up here, once; a name this machine
    does not know raises ``GtcacheError``.
    """
    env = os.environ if env is None else env
    import grp
    import pwd

    def ids(variable: str, lookup: Callable[[str], int], kind: str) -> tuple[int, ...]:
        found = []
        for item in env.get(variable, "").split(","):
            item = item.strip()
            if not item:
                continue
            if item == "*":
                found.append(-1)
            elif item.isdigit():
                found.append(int(item))
            else:
                try:
                    found.append(lookup(item))
                except KeyError:
                    raise GtcacheError(f"{variable} names '{item}', which is not a {kind} on this machine.") from None
        return tuple(found)

    return (
        ids(ENV_TRUSTED_USERS, lambda name: pwd.getpwnam(name).pw_uid, "user"),
        ids(ENV_TRUSTED_GROUPS, lambda name: grp.getgrnam(name).gr_gid, "group"),
    )


def _default_cache_dir() -> str:
    """The platform's user cache folder (platformdirs is imported only when it is needed)."""
    import platformdirs

    return platformdirs.user_cache_dir("gtcache")
