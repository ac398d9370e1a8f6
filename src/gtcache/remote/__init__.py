"""Remote tiers: entries on a Redis server or an HTTP/WebDAV server, as signed bundles.

No gt4py here: the hook (``gtcache.gt4py``) and the CLI's ``push`` / ``pull`` use it.
See docs/remote.md.
"""

from gtcache.remote._backends import Credentials, redact
from gtcache.remote._tier import (
    DEFAULT_MAX_SIZE,
    Remote,
    RemoteEntry,
    RemoteError,
    RemoteMode,
    RemoteSpec,
    direct_object,
    entry_object,
    info_object,
    parse_remote,
)

from gtcache.settings import Settings

__all__ = [
    "DEFAULT_MAX_SIZE",
    "Credentials",
    "Remote",
    "RemoteEntry",
    "RemoteError",
    "RemoteMode",
    "RemoteSpec",
    "direct_object",
    "entry_object",
    "info_object",
    "open_remote",
    "parse_remote",
    "redact",
]


def open_remote(url: str, settings: Settings, *, from_file: bool = False) -> Remote:
    """The remote at ``url`` with the bundle key and credentials of ``settings``; nothing is
    contacted yet. ``GtcacheError`` for a bad bundle key, ``RemoteError`` for a bad URL.

    ``from_file``: the URL comes from the store's ``gtcache.toml``, not from the reader
    (environment, ``install``, the command line). Whoever wrote the file chose the
    server, so the remote gets none of the environment's credentials, is never trusted
    (``?trusted=1`` is a ``RemoteError``) and is used only with ``GTCACHE_BUNDLE_KEY``
    (``Remote.problem`` says so without it)."""
    spec = parse_remote(url)
    if from_file:
        if spec.trusted:
            raise RemoteError(f"Remote '{spec.name}' of the store's gtcache.toml says trusted=1, which only the"
                              " reader's own GTCACHE_REMOTE or install(remote=...) may say; it is not used.")
        return Remote(spec, key=settings.bundle_trust().key, credentials=Credentials(), from_file=True)
    credentials = Credentials(settings.remote_token, settings.remote_user, settings.remote_password)
    return Remote(spec, key=settings.bundle_trust().key, credentials=credentials)
