"""How gtcache reads a switch of the environment: one list of true and false words.

Imports nothing, so that the start-up hook (``gtcache._autoload``, run by a ``.pth`` file
in every interpreter where ``GTCACHE_DIR`` or ``GTCACHE`` is set) can use it for free;
``gtcache.settings`` reads every other variable with it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping

ENV_CACHE_DIR = "GTCACHE_DIR"
ENV_ENABLE = "GTCACHE"
#: The words a switch (``GTCACHE_REPORT=yes``, ...) is on or off with, in any case.
TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


def word(text: str | None) -> str:
    return (text or "").strip().lower()


def is_true(text: str | None) -> bool:
    """Whether a switch's value says on (unset, empty or anything else: off)."""
    return word(text) in TRUE


def hook_enabled(env: Mapping[str, str]) -> bool:
    """Whether the start-up hook installs: ``GTCACHE`` on, or ``GTCACHE_DIR`` set and
    ``GTCACHE`` not explicitly off."""
    enable = word(env.get(ENV_ENABLE))
    return enable in TRUE or (bool(env.get(ENV_CACHE_DIR)) and enable not in FALSE[1:])
