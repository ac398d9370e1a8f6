"""Keys: named ingredients -> canonical JSON bytes -> xxh3-128 as 32 hex digits.

Every ingredient is named and kept in the entry record, so that a miss can be
explained by comparing ingredients, not only hashes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import xxhash

__all__ = ["canonical_bytes", "digest", "make_key"]


def canonical_bytes(value: Any) -> bytes:
    """JSON with sorted keys, fixed separators and no NaN: equal values give equal bytes."""
    return _CANONICAL.encode(value).encode("ascii")


#: ``canonical_bytes``' encoder, made once (``json.dumps`` with options makes one a call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def digest(data: bytes | str) -> str:
    return xxhash.xxh3_128_hexdigest(data.encode() if isinstance(data, str) else data)


def make_key(kind: str, ingredients: Mapping[str, Any]) -> str:
    """The key of ``ingredients``; ``kind`` separates key families that share ingredients."""
    return digest(canonical_bytes({"kind": kind, "ingredients": dict(ingredients)}))
