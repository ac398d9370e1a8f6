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


def open_remote(url: str, settings: Settings) -> Remote:
    """The remote at ``url`` with the bundle key and credentials of ``settings``; nothing is
    contacted yet. ``GtcacheError`` for a bad bundle key, ``RemoteError`` for a bad URL."""
    credentials = Credentials(settings.remote_token, settings.remote_user, settings.remote_password)
    return Remote(parse_remote(url), key=settings.bundle_trust().key, credentials=credentials)
