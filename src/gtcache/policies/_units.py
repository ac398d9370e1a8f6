"""Human units for sizes and durations, read as ccache reads sizes.

Sizes: a number (``20``, ``1.5``, ``1e9``) and an optional unit: ``k``, ``M``, ``G``,
``T``, ``P`` are powers of 1000, ``Ki``, ``Mi``, ``Gi``, ``Ti``, ``Pi`` powers of 1024;
a trailing ``B`` is allowed (``20GB``, ``1.5GiB``); without a unit the number is bytes
(ccache would take gigabytes there; gtcache's ``--max-size 0`` and byte counts in
``gtcache.toml`` have always been bytes). Letters may be either case.

Durations: a number of seconds (``90``), or numbers each with a unit, ``s``, ``m``
(minutes), ``h``, ``d``, ``w``: ``30m``, ``1h30m``, ``2w``, ``1.5d``, ``1d 12h``.

None of gtcache's dependencies parses sizes or durations; this small grammar (one
regular expression each, tested in tests/policies/test_units.py) is the documented one.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_duration", "parse_size"]

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SIZE = re.compile(rf"^\s*({_NUMBER})\s*(?:([kmgtp])(i?))?b?\s*$", re.IGNORECASE)
_DURATION_PART = re.compile(rf"\s*({_NUMBER})\s*([smhdw])", re.IGNORECASE)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: Sizes and durations beyond these are typos, not settings (and would overflow later).
_MAX_SIZE = 2**63 - 1
_MAX_SECONDS = 1000 * 365 * 86400.0

SIZE_HELP = "a number of bytes, or with a unit: k, M, G, T (x1000) or Ki, Mi, Gi, Ti (x1024), e.g. 500M, 20G, 1.5GiB, 1e9"
DURATION_HELP = "seconds, or with units s, m, h, d, w, e.g. 90, 30m, 1h30m, 7d, 2w"


def parse_size(text: str) -> int:
    """``'20G'`` -> 20_000_000_000, ``'1.5GiB'`` -> 1610612736, ``'1e9'``, ``'500'`` (bytes).

    Raises ``ValueError`` (one sentence naming the value and the grammar) for anything else,
    a negative or non-finite number, or more than 2**63 - 1 bytes.
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a size; give {SIZE_HELP}.")
    number = float(match[1])
    prefix, binary = (match[2] or "").lower(), bool(match[3])
    multiple = (1024 if binary else 1000) ** (" kmgtp".index(prefix) if prefix else 0)
    size = number * multiple
    if not math.isfinite(size) or size > _MAX_SIZE:
        raise ValueError(f"'{text}' is too large a size.")
    return int(size)


def parse_duration(text: str) -> float:
    """``'90'`` -> 90.0, ``'1h30m'`` -> 5400.0, ``'2w'``, ``'1.5d'``, ``'1d 12h'`` -> seconds.

    Raises ``ValueError`` for anything else (also a unit given twice, ``1h1h``).
    """
    stripped = text.strip()
    try:
        seconds = float(stripped) if re.fullmatch(_NUMBER, stripped) else None
    except ValueError:
        seconds = None
    if seconds is None:
        parts = _parse_parts(stripped)
        if parts is None:
            raise ValueError(f"'{text}' is not a duration; give {DURATION_HELP}.")
        seconds = sum(float(number) * _DURATION_UNITS[unit.lower()] for number, unit in parts)
    if not math.isfinite(seconds) or seconds > _MAX_SECONDS:
        raise ValueError(f"'{text}' is too long a duration.")
    return seconds


def _parse_parts(text: str) -> list[tuple[str, str]] | None:
    parts, position = [], 0
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            return None
        parts.append((match[1], match[2]))
        position = match.end()
    units = [unit.lower() for _, unit in parts]
    return parts if parts and len(set(units)) == len(units) else None
