"""Who may have written a store: owner and permission checks, as ssh ``StrictModes`` does.

A store is code (a gtfn entry is a ``.so`` that gets loaded, a dace entry Python
source), so a store another user can write is a way for that user to run code
in the reader's processes. The rules, checked by the READER once per opening:

- Trusted users: the reader, root (uid 0) and ``GTCACHE_TRUSTED_USERS``; the
  members of ``GTCACHE_TRUSTED_GROUPS`` (listed members, or the group is their
  primary group). Trust comes from the reader's environment only, never from a
  file inside the store (``gtcache.toml`` cannot widen it).
- A path is safe when its owner is trusted and nobody untrusted can write it:
  not world-writable, and group-writable only when its group is trusted or is
  its owner's private group (same name as the owner, no other members, listed
  or with it as their primary group: the "user private group" convention, as
  Debian's ssh accepts). A POSIX access ACL whose mask lets its named users and
  groups write (the mode's group bits are then that mask) must name trusted ones
  only, by the same rules (``acl_write_entries``; NFSv4 ACLs are not read).
- Checked at opening: the store root, each of its folders that exists
  (``entries``, ``direct``, ``tmp``, ``trash``, ``quarantine``, ``ledger``,
  ``locks``, ``index``) and an index folder elsewhere; and every ancestor of the
  (resolved) root up to ``/``, where a world- or untrusted-group-writable
  folder is accepted only with the sticky bit (``/tmp``): else someone could
  rename the store away and put their own in its place.
- Not checked at opening: shard folders and entry folders. ``Store.lookup``
  checks an entry's files with the ``stat`` it already makes, and its entry and
  shard folders (an ``lstat`` each, a shard once per process): a writer of one
  could swap a checked library for another between its checksum and its load.
  Anything owned by an untrusted user or writable by one, or a folder that is a
  symlink, makes the entry broken (never loaded). ``Store.build_key_of`` checks a
  direct link and its shard folder alike. ``Store.refused_folders`` makes the same
  folder checks over a whole store (``gtcache doctor``, ``gtcache verify``).
- The root is resolved (``realpath``) before the checks, and the store is used
  at the resolved path: a symlink on the way cannot be re-pointed after them.
- ``GTCACHE_TRUSTED_USERS='*'`` trusts everyone: the check is off (file systems
  that report every file as 0777).

``StoreModes``: what new files and folders of a store get. Folders get the
root's permission bits (setgid included; never world-writable), files the same
without execute (kept for executables): a root ``2775`` (group-shared) gives
``2775`` folders and ``0664`` files whatever the umask of the writing process.
"""

from __future__ import annotations

import errno
import grp
import os
import pathlib
import pwd
import stat
import struct
from collections.abc import Iterable, Mapping

from gtcache._frozen import Frozen
from gtcache.errors import UntrustedStoreError
from gtcache.settings import trusted_from_env
from gtcache.store import _layout

__all__ = ["StoreModes", "TrustPolicy", "check_store"]

_WRITE_GROUP, _WRITE_OTHER = stat.S_IWGRP, stat.S_IWOTH


class TrustPolicy:
    """Which users and groups a reader trusts (besides itself and root); caches name look-ups."""

    def __init__(
        self, users: Iterable[int] = (), groups: Iterable[int] = (), *, anyone: bool = False, any_group: bool = False
    ):
        self.uid = os.geteuid()
        self.users = frozenset(users)
        self.groups = frozenset(groups)
        #: ``GTCACHE_TRUSTED_USERS='*'``: no check at all.
        self.anyone = anyone
        #: ``GTCACHE_TRUSTED_GROUPS='*'``: group-writable is fine, whatever the group.
        self.any_group = any_group
        #: Uids known to be trusted: the fast path of ``file_problem``.
        self._trusted: set[int] = {self.uid, 0, *self.users}
        self._untrusted: set[int] = set()
        #: ``_private_group`` verdicts by (group, owner): name service look-ups, once each.
        self._private: dict[tuple[int, int], bool] = {}
        #: User and group names by id, looked up once each to word problems: a store whose
        #: folders were all made under umask 002 words one per folder (``Store.refused_folders``).
        self._users: dict[int, str] = {}
        self._groups: dict[int, str] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TrustPolicy:
        """From ``GTCACHE_TRUSTED_USERS`` / ``GTCACHE_TRUSTED_GROUPS`` of ``env`` (default: this
        process's environment, read by ``gtcache.settings``); ``GtcacheError`` if bad."""
        return cls.from_ids(*trusted_from_env(env))

    @classmethod
    def from_ids(cls, users: Iterable[int], groups: Iterable[int]) -> TrustPolicy:
        """From ``Settings.trusted_users`` / ``trusted_groups`` (``-1`` stands for ``*``)."""
        users, groups = tuple(users), tuple(groups)
        return cls(
            users=(u for u in users if u >= 0), groups=(g for g in groups if g >= 0),
            anyone=-1 in users, any_group=-1 in groups,
        )

    def __repr__(self) -> str:
        return f"TrustPolicy(users={sorted(self.users)}, groups={sorted(self.groups)}, anyone={self.anyone})"

    # -- users and groups ----------------------------------------------------------------

    def trusts_user(self, uid: int) -> bool:
        if self.anyone or uid in self._trusted:
            return True
        if uid in self._untrusted:
            return False
        member = bool(self.groups) and _member_of_any(uid, self.groups)
        (self._trusted if member else self._untrusted).add(uid)
        return member

    def trusts_group_write(self, gid: int, owner: int) -> bool:
        """Whether members of group ``gid`` may write a path owned by ``owner``."""
        if self.anyone or self.any_group or gid in self.groups:
            return True
        if (verdict := self._private.get((gid, owner))) is None:
            verdict = self._private[gid, owner] = _private_group(gid, owner)
        return verdict

    def _user_name(self, uid: int) -> str:
        if (name := self._users.get(uid)) is None:
            name = self._users[uid] = _user_name(uid)
        return name

    def _group_name(self, gid: int) -> str:
        if (name := self._groups.get(gid)) is None:
            name = self._groups[gid] = _group_name(gid)
        return name

    # -- paths ---------------------------------------------------------------------------

    def problem(
        self, path: str | os.PathLike[str], st: os.stat_result, *, sticky_ok: bool = False,
        at: str | int | None = None,
    ) -> str | None:
        """Why ``path`` (stat ``st``) may have been written by someone untrusted, or None.

        ``sticky_ok``: an ancestor folder; writable by others is fine with the sticky bit.
        ``at``: where its ACL is read (a path or an open descriptor; default ``path``).
        """
        if self.anyone:
            return None
        owner, mode = st.st_uid, st.st_mode
        if owner in self._trusted and (
            not mode & (_WRITE_GROUP | _WRITE_OTHER) or (sticky_ok and mode & stat.S_ISVTX and stat.S_ISDIR(mode))
        ):
            return None  # the fast path (a store under /tmp too): no name look-ups (they may go to LDAP)
        if not self.trusts_user(owner):
            return (
                f"'{path}' belongs to user '{self._user_name(owner)}' (mode {stat.filemode(mode)}); set"
                f" GTCACHE_TRUSTED_USERS={self._user_name(owner)} if that user may write it"
            )
        if sticky_ok and mode & stat.S_ISVTX and stat.S_ISDIR(mode):
            return None

        def found() -> str:  # names looked up only to word a problem: a shared store's folders come here
            user, group = self._user_name(owner), self._group_name(st.st_gid)
            return f"owner '{user}', group '{group}', mode {stat.filemode(mode)}"

        if mode & _WRITE_OTHER:
            return f"'{path}' is writable by everyone ({found()}); run 'chmod o-w {path}'"
        if mode & _WRITE_GROUP and not self.trusts_group_write(st.st_gid, owner):
            name = self._group_name(st.st_gid)
            return (
                f"'{path}' is writable by group '{name}' ({found()}); run 'chmod g-w {path}',"
                f" or set GTCACHE_TRUSTED_GROUPS={name} if group '{name}' may write it"
            )
        if mode & _WRITE_GROUP and (writer := self._acl_writer(os.fspath(path) if at is None else at, owner)):
            # With an ACL the group bits are its mask: the named users and groups it lets write.
            return (
                f"'{path}' is writable by {writer} through its access ACL ({found()}); run 'setfacl -b {path}',"
                " or trust them (GTCACHE_TRUSTED_USERS / GTCACHE_TRUSTED_GROUPS)"
            )
        return None

    def _acl_writer(self, at: str | int, owner: int) -> str | None:
        """Who untrusted the POSIX access ACL of ``at`` lets write (``user 'x'``, ``group 'y'``),
        or None (no ACL, or every writer it names is trusted)."""
        try:
            entries = acl_write_entries(at)
        except OSError as error:
            return f"whomever its ACL names (it cannot be read: {error.strerror or error})"
        except ValueError as error:
            return f"whomever its ACL names ({error})"
        for is_user, number in entries:
            if is_user and not self.trusts_user(number):
                return f"user '{self._user_name(number)}'"
            if not is_user and not self.trusts_group_write(number, owner):
                return f"group '{self._group_name(number)}'"
        return None

    def file_problem(
        self, name: str, st: os.stat_result, *, folder: str | os.PathLike[str] | None = None, fd: int | None = None,
    ) -> str | None:
        """Why a store file ``name`` (stat ``st``; in ``folder``, or open as ``fd``, where its
        ACL is read) cannot be trusted, as a ``CorruptEntryError`` reason."""
        if st.st_uid in self._trusted and not st.st_mode & (_WRITE_GROUP | _WRITE_OTHER):
            return None  # the fast path: one set look-up, one mask
        problem = self.problem(name, st, at=fd if fd is not None else name if folder is None else f"{folder}/{name}")
        return None if problem is None else f"file {problem.partition(';')[0]}, so it is not loaded."


def check_store(
    root: pathlib.Path, index_dir: pathlib.Path | None, policy: TrustPolicy, *, resolved: bool = False,
) -> None:
    """Raise ``UntrustedStoreError`` unless the store at ``root`` (and its index) is safe to use
    (``resolved``: both paths are already ``os.path.realpath``'s, as ``open_store`` makes them)."""
    if policy.anyone:
        return
    real = os.fspath(root) if resolved else os.path.realpath(root)
    ancestors = _ancestors(real)
    checks: list[tuple[str, bool]] = [(parent, True) for parent in ancestors]
    checks.append((real, False))
    checks += [(f"{real}/{name}", False) for name in _FIXED_FOLDERS]
    if index_dir is not None:
        real_index = os.fspath(index_dir) if resolved else os.path.realpath(index_dir)
        checks += [(parent, True) for parent in _ancestors(real_index) if parent not in ancestors]
        checks.append((real_index, False))
    for path, is_ancestor in checks:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise UntrustedStoreError(root, f"cannot check '{path}' ({error.strerror or error})") from None
        problem = policy.problem(path, st, sticky_ok=is_ancestor)
        if problem is not None:
            raise UntrustedStoreError(root, problem)


#: The store's own folders, checked at opening (those that exist).
_FIXED_FOLDERS = (
    _layout.ENTRIES_DIR, _layout.DIRECT_DIR, _layout.TMP_DIR, _layout.TRASH_DIR, _layout.QUARANTINE_DIR,
    _layout.LEDGER_DIR, _layout.LOCKS_DIR, _layout.INDEX_DIR, _layout.FACTS_DIR,
)


def _ancestors(real: str) -> list[str]:
    """The folders above the resolved path ``real``, from ``/`` down."""
    parts = real.split("/")[1:-1]
    return ["/", *("/" + "/".join(parts[: depth + 1]) for depth in range(len(parts)))]


class StoreModes(Frozen):
    """Permission bits for what a store creates, from its root's mode (see the module docstring)."""

    folder: int = 0o755
    file: int = 0o644

    @classmethod
    def of_root(cls, root_mode: int) -> StoreModes:
        folder = (stat.S_IMODE(root_mode) & 0o2775) | 0o700
        return cls(folder=folder, file=(folder & 0o666) | 0o600)

    @property
    def shared(self) -> bool:
        return bool(self.folder & _WRITE_GROUP)

    def executable(self, source_mode: int) -> int:
        """The mode of a copied file: ``file``, with execute where it can be read if the source had any."""
        return self.file | ((self.file & 0o444) >> 2) if source_mode & 0o111 else self.file

    def make_folder(self, path: pathlib.Path) -> None:
        """``mkdir`` with this mode whatever the umask (nothing if it exists); parents too."""
        try:
            os.mkdir(path, self.folder)
        except FileExistsError:
            return
        except FileNotFoundError:
            self.make_folder(path.parent)
            try:
                os.mkdir(path, self.folder)
            except FileExistsError:
                return
        os.chmod(path, self.folder)


# -- name service look-ups (cached by the policy, not here: they may go to LDAP) ----------------


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def acl_write_entries(at: str | int) -> list[tuple[bool, int]]:
    """The named users (``True``, uid) and groups (``False``, gid) the POSIX access ACL of
    ``at`` (a path, followed, or an open descriptor) lets write: their entry and the mask
    allow it. None named: no ACL, or a file system without them. ``ValueError``: not an ACL
    this code can read (Linux's ``system.posix_acl_access``, version 2)."""
    try:
        raw = os.getxattr(at, _ACL_ACCESS)
    except OSError as error:
        if error.errno in _NO_ACL:
            return []
        raise
    if len(raw) < 4 or (len(raw) - 4) % 8 or struct.unpack_from("<I", raw)[0] != 2:
        raise ValueError("an ACL of an unknown format")
    entries = list(struct.iter_unpack("<HHI", raw[4:]))
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
    return [(tag == _ACL_USER, number) for tag, perm, number in entries
            if tag in (_ACL_USER, _ACL_GROUP) and perm & mask & 0o2]


_ACL_ACCESS = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP, _ACL_MASK = 0x02, 0x08, 0x10  # tags of <linux/posix_acl_xattr.h>
_NO_ACL = frozenset({errno.ENODATA, errno.EOPNOTSUPP, errno.ENOTSUP})


def _member_of_any(uid: int, gids: frozenset[int]) -> bool:
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False  # no name: only its primary group could tell, and that is unknown
    if user.pw_gid in gids:
        return True
    for gid in gids:
        try:
            if user.pw_name in grp.getgrgid(gid).gr_mem:
                return True
        except KeyError:
            continue
    return False


def _private_group(gid: int, owner: int) -> bool:
    """Whether ``gid`` is ``owner``'s user private group: its name, its primary group, no other
    member listed (in any entry of that gid), and no other user the system lists with it as
    primary group (``useradd -g alice mallory`` makes mallory a member that ``gr_mem`` does
    not show: a helper's attack wrote a private-group store's library in place). A directory
    that does not enumerate its users (LDAP without enumeration) shows only the local ones:
    docs/security.md."""
    try:
        user, group = pwd.getpwuid(owner), grp.getgrgid(gid)
    except KeyError:
        return False
    if user.pw_gid != gid or group.gr_name != user.pw_name or not set(group.gr_mem) <= {user.pw_name}:
        return False
    # Another entry of the same gid (``groupadd -o``, an LDAP group after ``files``) gives its
    # members the group too, though ``getgrgid`` shows the first entry only.
    if any(other.gr_gid == gid and (other.gr_name != user.pw_name or not set(other.gr_mem) <= {user.pw_name})
           for other in grp.getgrall()):
        return False
    return not any(other.pw_gid == gid and other.pw_uid != owner for other in pwd.getpwall())
