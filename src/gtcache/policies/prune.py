"""Prune plans: which entries a policy removes and why, computed before anything is deleted.

A policy has *filters* (``program``, ``backend``: only matching entries may be
removed), *criteria* that remove every candidate they match (``broken``,
``older_than``, ``unused_for``, ``stale``, ``keep_gt4py``) and *caps* over the
whole store (``max_size``, ``max_files``) that remove candidates, least recently
used first (or least compile time saved per byte, ``by_value``), until the
store fits. ``plan_prune`` returns a ``PrunePlan``; only ``PrunePlan.execute``
deletes, each entry by the store's atomic removal.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import gc
from collections.abc import Callable, Iterable, Mapping, Set as AbstractSet
from typing import Any

from gtcache.store import EntryInfo, Seen, Store, StoreScan, format_size

__all__ = [
    "PruneOutcome", "PrunePlan", "PrunePolicy", "Removal", "backend_glob", "matches", "plan_prune", "plan_removal",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrunePolicy:
    max_size: int | None = None
    max_files: int | None = None
    #: Seconds since creation beyond which an entry goes.
    older_than: float | None = None
    #: Seconds since last use beyond which an entry goes.
    unused_for: float | None = None
    #: Toolchain facts an entry must match to stay (e.g. ``{"gt4py": "1.2.3"}``).
    stale: Mapping[str, Any] | None = None
    #: gt4py versions whose entries stay; others go.
    keep_gt4py: frozenset[str] | None = None
    broken: bool = False
    program: str | None = None
    backend: str | None = None
    by_value: bool = False

    def __post_init__(self) -> None:
        for name in ("max_size", "max_files", "older_than", "unused_for"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"'{name}' must not be negative.")

    @property
    def selects_anything(self) -> bool:
        """False when only filters are given: nothing would ever be removed."""
        limits = (self.max_size, self.max_files, self.older_than, self.unused_for, self.stale, self.keep_gt4py)
        return self.broken or any(value is not None for value in limits)


@dataclasses.dataclass(frozen=True)
class Removal:
    entry: EntryInfo
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {**self.entry.to_json(), "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class PrunePlan:
    root: Any
    removals: tuple[Removal, ...]
    #: What the store holds after the plan is executed (entries, bytes on disk).
    remaining_entries: int
    remaining_size: int
    #: Whether an entry used or published since the plan is left (``plan_prune``'s plans).
    recheck: bool = False

    @property
    def freed(self) -> int:
        """Bytes on disk the removals free (records included)."""
        return sum(r.entry.disk_size for r in self.removals)

    @property
    def freed_str(self) -> str:
        return format_size(self.freed)

    def to_json(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.root),
            "entries": len(self.removals),
            "freed": self.freed,
            "remaining_entries": self.remaining_entries,
            "remaining_size": self.remaining_size,
            "removals": [r.to_json() for r in self.removals],
        }

    def execute(self, store: Store) -> int:
        """Remove the planned entries (those already gone are skipped); return bytes freed.

        The first entry that cannot be removed raises (``OSError``); ``apply`` goes on.
        """
        return store.remove((r.entry.key for r in self.removals), seen=self._seen())

    def apply(self, store: Store) -> PruneOutcome:
        """Remove the planned entries, going on past those that cannot be removed."""
        failed: dict[str, str] = {}
        left: set[str] = set()
        removed: list[str] = []  # by this process: not those another removed meanwhile
        freed = store.remove((r.entry.key for r in self.removals), failed=failed, seen=self._seen(), left=left,
                             removed=removed)
        done = {*removed, *failed, *left}
        gone = tuple(r.entry.key for r in self.removals if r.entry.key not in done)
        return PruneOutcome(removed=tuple(removed), freed=freed, failed=failed, left=tuple(sorted(left)), gone=gone)

    def _seen(self) -> dict[str, Seen] | None:
        """What each removal was decided on (``prune``'s plans): an entry used or published
        since the plan is left. ``rm`` removes what was asked for, as it is found."""
        return {r.entry.key: r.entry.as_seen for r in self.removals} if self.recheck else None


@dataclasses.dataclass(frozen=True)
class PruneOutcome:
    """What executing a plan did: the keys removed, the bytes freed, the keys it could not
    remove and why (``Permission denied: '...'``)."""

    removed: tuple[str, ...]
    freed: int
    failed: Mapping[str, str]
    #: Keys left because the entry was used or published again since the plan.
    left: tuple[str, ...] = ()
    #: Keys already gone when their turn came (another prune or rm removed them): not counted.
    gone: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {"removed": len(self.removed), "freed": self.freed, "left": list(self.left), "gone": list(self.gone),
                "failed": [{"key": key, "reason": reason} for key, reason in sorted(self.failed.items())]}


def plan_prune(
    scan: StoreScan, policy: PrunePolicy, *, now: datetime.datetime | None = None,
    usage: Mapping[str, tuple[int, int]] | None = None, keep: AbstractSet[str] = frozenset(),
) -> PrunePlan:
    """The entries ``policy`` removes from what ``scan`` saw, each with its reason: those its
    criteria match (in scan order), then those its caps remove, in the caps' order (least
    recently used first): the order ``execute`` and ``apply`` remove them in.

    ``usage``: (bytes, files) of each entry folder as ``Store.usage_by_key`` measured them
    after the scan, which the caps are checked against: what the scan does not account to an
    entry (a temp file a killed process left in an entry folder, until ``verify --repair``;
    an entry published since the scan) then counts too, and an entry gone since the scan
    counts no more (nor is it planned for removal), so that the plan brings the store under
    its caps as measured. ``keep``: keys the caps must not remove (they count, as kept)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # many small objects, none freed: see Store.scan
    try:
        return _plan(scan, policy, now or datetime.datetime.now(datetime.UTC), usage, keep)
    finally:
        if gc_was_enabled:
            gc.enable()


def _plan(
    scan: StoreScan, policy: PrunePolicy, now: datetime.datetime, usage: Mapping[str, tuple[int, int]] | None,
    keep: AbstractSet[str],
) -> PrunePlan:
    # An entry gone since the scan (another prune, rm) takes no room and is not removed again.
    entries = scan.entries if usage is None else [e for e in scan.entries if e.key in usage]
    candidates = [e for e in entries if _passes_filters(e, policy)]
    removals: dict[str, Removal] = {}
    for entry in candidates:
        if (reason := _criterion(entry, policy, now)) is not None:
            removals[entry.key] = Removal(entry, reason)

    def room(entry: EntryInfo) -> tuple[int, int]:
        """What an entry's folder takes (bytes on disk, records included, as the caps count),
        as measured when ``usage`` is given: with what the scan does not account for in it (a
        temp file a killed process left), which goes with the folder."""
        measured = usage.get(entry.key) if usage is not None else None
        if measured is None:
            return entry.disk_size, entry.files
        return max(measured[0], entry.disk_size), max(measured[1], entry.files)

    kept = [e for e in entries if e.key not in removals]
    size = sum(room(e)[0] for e in kept)
    files = sum(room(e)[1] for e in kept)
    if usage is not None:  # an entry published since the scan takes room too (never removed here)
        scanned = {e.key for e in entries}
        size += sum(key_size for key, (key_size, _) in usage.items() if key not in scanned)
        files += sum(key_files for key, (_, key_files) in usage.items() if key not in scanned)
    if _over(size, files, policy):
        order: Callable[[EntryInfo], Any] = _value_per_byte if policy.by_value else _last_used
        for entry in sorted((e for e in candidates if e.key not in removals and e.key not in keep), key=order):
            if not _over(size, files, policy):
                break
            removals[entry.key] = Removal(entry, _cap_reason(policy))
            entry_size, entry_files = room(entry)
            size -= entry_size
            files -= entry_files
    return PrunePlan(
        root=scan.root,
        removals=tuple(removals.values()),
        remaining_entries=len(entries) - len(removals),
        remaining_size=size,
        recheck=True,
    )


def plan_removal(scan: StoreScan, keys: Iterable[str], *, reason: str = "asked for") -> PrunePlan:
    """A plan removing the entries of ``scan`` with these keys (``gtcache rm``), in scan order."""
    chosen = set(keys)
    removals = tuple(Removal(e, reason) for e in scan.entries if e.key in chosen)
    return PrunePlan(
        root=scan.root,
        removals=removals,
        remaining_entries=len(scan.entries) - len(removals),
        remaining_size=sum(e.disk_size for e in scan.entries) - sum(r.entry.disk_size for r in removals),
    )


def matches(entry: EntryInfo, program: str | None, backend: str | None) -> bool:
    """Whether ``entry`` passes the globs: ``program`` against its name or qualified name,
    ``backend`` against its backend (``None``: anything; see ``backend_glob``)."""
    if program and not any(
        fnmatch.fnmatchcase(name, program) for name in (entry.program, entry.qualified_program)
    ):
        return False
    return not backend or fnmatch.fnmatchcase(entry.backend, backend)


def backend_glob(glob: str | None, backends: Iterable[str]) -> str | None:
    """What ``--backend GLOB`` selects among ``backends`` (the names entries record, such as
    ``run_gtfn_cpu``): the glob as written when it matches one of them; otherwise the glob
    with ``run_`` before it, so that ``gtfn_cpu``, as ``warm`` and ``explain`` take it, selects
    ``run_gtfn_cpu``; never both (a backend named ``gtfn_cpu`` keeps the glob to itself)."""
    if glob is None or glob.startswith("run_") or any(fnmatch.fnmatchcase(name, glob) for name in set(backends)):
        return glob
    return f"run_{glob}"


def _passes_filters(entry: EntryInfo, policy: PrunePolicy) -> bool:
    return matches(entry, policy.program, policy.backend)


def _criterion(entry: EntryInfo, policy: PrunePolicy, now: datetime.datetime) -> str | None:
    if not entry.ok:
        return f"broken: {entry.problem}" if policy.broken else None
    if policy.older_than is not None and _age(entry.created, now) > policy.older_than:
        return f"created {_days(_age(entry.created, now))} ago"
    if policy.unused_for is not None and _age(entry.last_used, now) > policy.unused_for:
        return f"unused for {_days(_age(entry.last_used, now))}"
    if policy.keep_gt4py is not None and entry.gt4py not in policy.keep_gt4py:
        return f"built with gt4py {entry.gt4py}"
    if policy.stale and entry.record is not None:
        toolchain = entry.record.toolchain
        for fact, expected in sorted(policy.stale.items()):
            if fact in toolchain and toolchain[fact] != expected:
                return f"stale: {fact} is {toolchain[fact]!r}, not {expected!r}"
    return None


def _over(size: int, files: int, policy: PrunePolicy) -> bool:
    return (policy.max_size is not None and size > policy.max_size) or (
        policy.max_files is not None and files > policy.max_files
    )


def _cap_reason(policy: PrunePolicy) -> str:
    caps = []
    if policy.max_size is not None:
        caps.append(f"max size {format_size(policy.max_size)}")
    if policy.max_files is not None:
        caps.append(f"max files {policy.max_files}")
    order = "least compile time saved per byte" if policy.by_value else "least recently used"
    return f"{' and '.join(caps)}: {order}"


def _last_used(entry: EntryInfo) -> tuple[bool, float, str]:
    """Broken entries first (never served; what their records say is not to be believed: one
    planted in a folder an untrusted group may write, last used "in 9999" and a sparse terabyte
    big, had the caps remove every sound entry of the store before it, a reviewer's attack),
    then least recently used first: by the time ``last_used`` names (not its text: another
    offset or precision sorts otherwise); one that cannot be read counts as oldest, as
    ``--unused-for`` counts it (``_age``)."""
    return (entry.ok, _timestamp(entry.last_used), entry.key)


def _value_per_byte(entry: EntryInfo) -> tuple[bool, float, float, str]:
    """Broken entries first (``_last_used``), then the least compile time saved per byte."""
    value = entry.compile_seconds * (entry.hits + 1) / max(entry.size, 1)
    return (entry.ok, value, _timestamp(entry.last_used), entry.key)


def _timestamp(iso: str) -> float:
    """Seconds since the epoch of ``iso`` (UTC when it names no offset); -inf when unreadable."""
    try:
        then = datetime.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return float("-inf")
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.UTC)
    return then.timestamp()


def _age(iso: str, now: datetime.datetime) -> float:
    try:
        then = datetime.datetime.fromisoformat(iso)
    except ValueError:
        return float("inf")
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.UTC)
    return (now - then).total_seconds()


def _days(seconds: float) -> str:
    if seconds == float("inf"):
        return "an unknown time"
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    return f"{seconds / 3600:.1f} hours"
