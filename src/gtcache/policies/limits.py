"""The automatic size cap: limits from the store's config file or the environment,
enforced after publishes (never on the lookup path), cheaply, by one process at a time.

``<store>/gtcache.toml``::

    [limits]
    max_size = "20G"     # bytes of entries
    max_files = 200000   # files of entries (inode quotas on parallel file systems)

``GTCACHE_MAX_SIZE`` / ``GTCACHE_MAX_FILES`` override the file. When a limit is
exceeded, least recently used entries go until the store fits again.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

from gtcache.errors import GtcacheError
from gtcache.policies.config import check_value, file_limits
from gtcache.policies.prune import PrunePlan, PrunePolicy, plan_prune
from gtcache.settings import Settings
from gtcache.store import Store, TrustPolicy

__all__ = ["Limits", "enforce_limits"]


@dataclasses.dataclass(frozen=True)
class Limits:
    max_size: int | None = None
    max_files: int | None = None

    @property
    def active(self) -> bool:
        return self.max_size is not None or self.max_files is not None

    @classmethod
    def for_store(
        cls, root: pathlib.Path, settings: Settings | None = None, trust: TrustPolicy | None = None,
    ) -> Limits:
        """The store's ``gtcache.toml`` ``[limits]``, overridden by ``GTCACHE_MAX_SIZE``/``_FILES``
        as ``settings`` hold them (None: the file alone). ``GtcacheError`` for a bad value, or a
        file that cannot be read or (with ``trust``: the store's) someone untrusted may have
        written: its caps remove entries."""
        from_env = settings is not None and (settings.max_size or settings.max_files)
        if settings is not None and settings.max_size and settings.max_files:
            table: Mapping[str, object] = {}  # the environment sets both: the file is not needed
        else:
            try:
                table = file_limits(root, trust)
            except GtcacheError:
                if not from_env:
                    raise
                table = {}  # the caps the environment sets still apply (verify names the file)
        size = (settings and settings.max_size) or table.get("max_size")
        files = (settings and settings.max_files) or table.get("max_files")
        try:
            return cls(
                max_size=check_value("max-size", size) if size not in (None, "") else None,
                max_files=check_value("max-files", files) if files not in (None, "") else None,
            )
        except ValueError as error:
            raise GtcacheError(f"Bad store limit: {error}") from None


def enforce_limits(store: Store, limits: Limits, *, locking: str = "auto") -> PrunePlan | None:
    """Prune least recently used entries until ``store`` fits ``limits``.

    Cheap when the store fits (a walk of the entry folders, no record parsed, no
    index opened). Only one process enforces at a time; others skip (the lock
    is tried, never waited for). Under the lock the store is scanned, then measured again
    (``usage_by_key``): another process that held the lock before may have brought it under
    the caps already, and an entry removed meanwhile takes no room. Entries go in the plan's
    order; one that cannot be removed (``OSError``: another user's, ...) or that was used
    since the plan is kept and the plan made again without it, so that the next least
    recently used go instead. Returns the last plan, or None when nothing was to be done;
    ``GtcacheError``, once all else is done, naming the entries that could not be removed.
    """
    if not limits.active or store.read_only:
        return None
    _, size, files = store.usage()
    if not _over(size, files, limits):
        return None
    try:
        lock = store.lock("limits", locking)
        if not lock.acquire(timeout=0):  # another process enforces right now
            return None
    except OSError:  # no locking here: the next publish tries again
        return None
    with lock:
        scan = store.scan(use_index=False)
        usage = store.usage_by_key()  # after the scan: what it saw, less what went since
        if not _over(sum(s for s, _ in usage.values()), sum(f for _, f in usage.values()), limits):
            return None  # another process brought the store under its caps meanwhile
        policy = PrunePolicy(max_size=limits.max_size, max_files=limits.max_files)
        failed: dict[str, str] = {}
        left: set[str] = set()
        broken = {e.key for e in scan.entries if not e.ok}
        while True:
            plan = plan_prune(scan, policy, usage=usage, keep=failed.keys() | left)
            before = len(failed) + len(left)
            seen = {r.entry.key: r.entry.as_seen for r in plan.removals}
            store.remove((r.entry.key for r in plan.removals if r.entry.key not in failed and r.entry.key not in left),
                         failed=failed, seen=seen, left=left)
            if len(failed) + len(left) == before:
                break
            # A broken entry that could not be removed, or was replaced meanwhile (someone who
            # may write its folder can do both, again and again), takes no sound entry's place.
            usage = {key: room for key, room in usage.items() if key not in broken or key not in failed.keys() | left}
        if failed:
            key, why = sorted(failed.items())[0]
            more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
            raise GtcacheError(f"The size cap could not remove entry '{key}' ({why}){more}; the others went.")
        return plan


def _over(size: int, files: int, limits: Limits) -> bool:
    return (limits.max_size is not None and size > limits.max_size) or (
        limits.max_files is not None and files > limits.max_files
    )
