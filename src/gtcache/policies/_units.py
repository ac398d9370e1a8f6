"""Human units for sizes and durations: ``10G``, ``500MiB``, ``7d``, ``12h``."""

from __future__ import annotations

import re

__all__ = ["parse_duration", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """``'10G'``, ``'1.5GiB'``, ``'500M'``, ``'1024'`` -> bytes (binary multiples)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a size (examples: 500M, 10G, 1.5GiB).")
    number, unit = float(match[1]), match[2].lower()
    return int(number * 1024 ** " kmgt".index(unit or " "))


def parse_duration(text: str) -> float:
    """``'7d'``, ``'12h'``, ``'30m'``, ``'2w'``, ``'90'`` (seconds) -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a duration (examples: 12h, 7d, 2w).")
    return float(match[1]) * _DURATION_UNITS[match[2].lower()]
