"""What ``Store.scan`` returns: frozen data the CLI renders as tables or JSON."""

from __future__ import annotations

import collections
import dataclasses
import functools
import pathlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from gtcache.store._layout import ENTRY_FILE
from gtcache.store._record import EntryRecord

__all__ = ["EntryInfo", "StoreScan", "StoreStats", "format_size"]


def format_size(size: int) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class EntryInfo:
    """One entry folder as a scan saw it; ``record`` is ``None`` when the entry is broken."""

    key: str
    path: pathlib.Path
    program: str
    qualified_program: str
    backend: str
    #: The gt4py version that built it ("?" when unreadable).
    gt4py: str
    #: Bytes of its payload files, as its record lists them.
    size: int
    #: Files on disk for this entry (payload files and ``entry.json``), for inode quotas.
    files: int
    created: str
    last_used: str
    hits: int
    compile_seconds: float
    problem: str | None
    #: What the scan read of ``entry.json`` (a summary, when it came from the index).
    raw: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False, compare=False)
    #: Bytes on disk: its files, ``entry.json`` included (what the size caps count,
    #: ``Store.usage``, and what removing it frees); ``size`` where the scan did not say.
    disk_size: int = -1
    #: ``entry.json``'s (inode, size, modification and change times) as the scan's stat found
    #: them (None: no such file): a record rewritten or published anew since has another.
    identity: tuple[int, int, int, int] | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.disk_size < 0:
            object.__setattr__(self, "disk_size", self.size)

    @functools.cached_property
    def record(self) -> EntryRecord | None:
        """The full record of a sound entry, read from ``entry.json`` on first use
        (listings do not need it); ``None`` if the entry is broken or gone."""
        if self.problem is not None:
            return None
        try:
            return EntryRecord.loads((self.path / ENTRY_FILE).read_bytes())
        except (OSError, ValueError):
            return None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def stamp(self) -> tuple[str, str, int]:
        """(created, last used, hits) as the scan read them: ``usage_stamp`` of its record."""
        return (self.created, self.last_used, self.hits)

    @property
    def as_seen(self) -> Seen:
        """What a decision on this entry was made from (``Store.remove(seen=...)``)."""
        return Seen(self.stamp, self.identity)

    @property
    def status(self) -> str:
        return "ok" if self.problem is None else "broken"

    @property
    def size_str(self) -> str:
        return format_size(self.size)

    @classmethod
    def make(
        cls,
        *,
        key: str,
        path: pathlib.Path,
        raw: Mapping[str, Any] | None,
        problem: str | None,
        record_size: int = 0,
        disk_size: int = -1,
        identity: tuple[int, int, int, int] | None = None,
    ) -> EntryInfo:
        """Build from a checked record (``problem`` None), or from what could be read of a broken one.
        ``record_size``: the bytes of its ``entry.json``; ``disk_size``: of the whole folder, when
        measured (a broken entry's files are not as its record says).

        Runs once per entry per listing: plain dict access, no validation (a sound
        record was validated when it was read; a broken one is read defensively).
        """
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        program = data.get("program")
        program = program if isinstance(program, Mapping) else {}
        files = data.get("files")
        files = files if isinstance(files, list) else []
        created, last_used, hits = usage_stamp(data)
        name = str(program.get("name", "?"))
        module = program.get("module")
        size = sum(f["size"] for f in files if isinstance(f, dict) and isinstance(f.get("size"), int))
        return cls(
            key=key,
            path=path,
            program=name,
            qualified_program=f"{module}.{name}" if module else name,
            backend=str(_mapping(data.get("backend")).get("name", "?")),
            gt4py=str(_mapping(data.get("toolchain")).get("gt4py", "?")),
            size=size,
            files=1 + len(files),
            created=created,
            last_used=last_used,
            hits=hits,
            compile_seconds=_number(data.get("compile_seconds")),
            problem=problem,
            raw=raw if isinstance(raw, Mapping) else None,
            disk_size=disk_size if disk_size >= 0 else size + record_size,
            identity=identity,
        )

    def to_json(self) -> dict[str, Any]:
        """The row ``ls --json`` prints: the table's columns plus the path and the problem."""
        return {
            "key": self.key,
            "program": self.qualified_program,
            "backend": self.backend,
            "gt4py": self.gt4py,
            "size": self.size,
            "disk_size": self.disk_size,
            "created": self.created,
            "last_used": self.last_used,
            "hits": self.hits,
            "compile_seconds": self.compile_seconds,
            "status": self.status,
            "problem": self.problem,
            "path": str(self.path),
        }


@dataclasses.dataclass(frozen=True)
class StoreStats:
    entries: int
    broken: int
    size: int
    hits: int
    #: Compile seconds the recorded hits did not spend (hits x compile seconds).
    compile_seconds_saved: float
    by_backend: Mapping[str, tuple[int, int]]
    by_gt4py: Mapping[str, tuple[int, int]]

    @property
    def size_str(self) -> str:
        return format_size(self.size)

    def to_json(self) -> dict[str, Any]:
        def groups(table: Mapping[str, tuple[int, int]]) -> dict[str, dict[str, int]]:
            return {k: {"entries": n, "size": s} for k, (n, s) in sorted(table.items())}

        return {
            "entries": self.entries,
            "broken": self.broken,
            "size": self.size,
            "hits": self.hits,
            "compile_seconds_saved": round(self.compile_seconds_saved, 3),
            "by_backend": groups(self.by_backend),
            "by_gt4py": groups(self.by_gt4py),
        }


@dataclasses.dataclass(frozen=True)
class StoreScan:
    root: pathlib.Path
    entries: tuple[EntryInfo, ...]
    #: How the index served this scan: "ok", "rebuilt", "unavailable" or "unused" (records read
    #: from the folders).
    index: str

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def broken(self) -> tuple[EntryInfo, ...]:
        return tuple(e for e in self.entries if not e.ok)

    def stats(self) -> StoreStats:
        by_backend: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        by_gt4py: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for entry in self.entries:
            for table, name in ((by_backend, entry.backend), (by_gt4py, entry.gt4py)):
                table[name][0] += 1
                table[name][1] += entry.size
        return StoreStats(
            entries=len(self.entries),
            broken=len(self.broken),
            size=self.size,
            hits=sum(e.hits for e in self.entries),
            compile_seconds_saved=sum(e.hits * e.compile_seconds for e in self.entries),
            by_backend={k: (n, s) for k, (n, s) in by_backend.items()},
            by_gt4py={k: (n, s) for k, (n, s) in by_gt4py.items()},
        )


class Seen(NamedTuple):
    """An entry as a scan saw it: its record's usage stamp and ``entry.json``'s identity. A
    touch changes both (a new file renamed over the old); a republish, even of the very same
    record (an import repairing a broken entry), changes the identity."""

    stamp: tuple[str, str, int]
    identity: tuple[int, int, int, int] | None


def usage_stamp(data: Mapping[str, Any]) -> tuple[str, str, int]:
    """(created, last used, hits) of a record as read (defaults where a field is missing or
    damaged): a publish changes the first, each recorded use the last two (``Store.touch``)."""
    hits = data.get("hits")
    return (str(data.get("created", "")), str(data.get("last_used", "")),
            hits if isinstance(hits, int) and not isinstance(hits, bool) else 0)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
