"""Why did this recompile? Compare a variant's key ingredients with the stored entries
of the same program and name the ingredients that differ, with old and new values.

Works on ingredient dictionaries (what every ``entry.json`` keeps), so it needs
no gt4py: the hook calls it on a miss (``GTCACHE_EXPLAIN=1``) and ``gtcache
explain`` after computing the ingredients of a variant it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gtcache.store import EntryInfo, StoreScan

__all__ = ["Difference", "Explanation", "explain", "ingredient_differences"]

#: How many stored entries an explanation names.
NEAREST = 3


@dataclasses.dataclass(frozen=True)
class Difference:
    ingredient: str
    stored: Any
    current: Any

    def to_json(self) -> dict[str, Any]:
        return {"ingredient": self.ingredient, "stored": self.stored, "current": self.current}

    def __str__(self) -> str:
        stored, current = self.stored, self.current
        if (self.ingredient == "device" and isinstance(stored, dict) and isinstance(current, dict)
                and stored.get("type") == current.get("type")):
            return (f"device arch: {_short(stored.get('arch'))} -> {_short(current.get('arch'))}"
                    f" (the entry is for another {stored.get('type')} arch)")
        return f"{self.ingredient}: {_short(stored)} -> {_short(current)}"


@dataclasses.dataclass(frozen=True)
class Explanation:
    program: str
    backend: str
    key: str
    #: True when the store holds this very key.
    stored: bool
    #: The closest entries of the same program (fewest differences first) and how they differ.
    nearest: tuple[tuple[EntryInfo, tuple[Difference, ...]], ...]
    #: Why no key could be computed without compiling (then ``key`` is empty), if so.
    unplannable: str | None = None

    @classmethod
    def cannot_plan(cls, *, program: str, backend: str, reason: str) -> Explanation:
        return cls(program, backend, "", False, (), reason)

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "backend": self.backend,
            "key": self.key,
            "stored": self.stored,
            "unplannable": self.unplannable,
            "nearest": [
                {"key": entry.key, "backend": entry.backend, "differences": [d.to_json() for d in diffs]}
                for entry, diffs in self.nearest
            ],
        }

    def summary(self) -> str:
        """One line, for a log."""
        if self.unplannable is not None:
            return f"'{self.program}' ({self.backend}): cannot plan: {self.unplannable}."
        head = f"'{self.program}' ({self.backend}), key {self.key[:12]}"
        if self.stored:
            return f"{head}: stored."
        if not self.nearest:
            return f"{head}: no stored variant of this program."
        entry, diffs = self.nearest[0]
        return f"{head}: nearest entry {entry.key[:12]} differs in " + "; ".join(str(d) for d in diffs)


def ingredient_differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[Difference, ...]:
    return tuple(
        Difference(name, stored.get(name), current.get(name))
        for name in sorted(set(stored) | set(current))
        if stored.get(name) != current.get(name)
    )


def explain(
    scan: StoreScan, *, program: str, backend: str, key: str, ingredients: Mapping[str, Any]
) -> Explanation:
    """Explain the variant ``key`` of ``program`` (name or qualified name) against ``scan``."""
    candidates = []
    for entry in scan.entries:
        if entry.key == key and entry.ok:
            return Explanation(program, backend, key, True, ())
        if entry.ok and program in (entry.program, entry.qualified_program) and entry.record is not None:
            diffs = ingredient_differences(entry.record.ingredients, ingredients)
            candidates.append((len(diffs), entry.backend != backend, entry.key, entry, diffs))
    candidates.sort(key=lambda c: c[:3])
    nearest = tuple((entry, diffs) for *_, entry, diffs in candidates[:NEAREST])
    return Explanation(program, backend, key, False, nearest)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
