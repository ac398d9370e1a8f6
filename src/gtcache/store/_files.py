"""Small file-system helpers: checksums, durable and atomic writes, removal."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import stat
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    from gtcache.store._trust import TrustPolicy

__all__ = [
    "NotARegularFileError",
    "atomic_write_text",
    "copy_durably",
    "file_xxh3",
    "fsync_dir",
    "make_real_folders",
    "read_regular",
    "remove_tree",
    "replace_text_at",
    "size_problem",
    "unique_name",
    "write_durably",
]

_CHUNK = 1 << 20
#: ``file_xxh3``'s read size: small enough to stay in a CPU's L2 cache.
_HASH_CHUNK = 1 << 16


#: Opening never follows a symlink (ELOOP) and never blocks on a FIFO or a device.
_OPEN_REGULAR = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotARegularFileError(OSError):
    """A path that should be a regular file is a symlink, FIFO, device, socket or folder."""


def open_regular(path: str | os.PathLike[str], dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``path`` (no symlink, FIFO or device), and its ``fstat``."""
    try:
        fd = os.open(path, _OPEN_REGULAR, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise NotARegularFileError(errno.ELOOP, "it is a symbolic link", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFileError(errno.EINVAL, "it is not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def file_xxh3(path: str | os.PathLike[str]) -> str:
    """xxh3-128 of a regular file's bytes as 32 hex digits (``NotARegularFileError`` otherwise).

    ``os.open`` + ``os.fstat`` + ``os.readv``: no more system calls than ``open()``, which
    fstats too, and a FIFO planted as a payload file can never block the reader. Read
    into one small buffer, which stays in the CPU's cache: a new 1 MiB buffer per read
    can cost page faults (up to 0.1 ms for a 300 kB library in a fresh process). (``mmap``
    would be as fast, but a file truncated or a network file system failing under it
    kills the process with SIGBUS; a read fails with an error.)
    """
    digest = xxhash.xxh3_128()
    fd, _ = open_regular(path)
    try:
        buffer = bytearray(_HASH_CHUNK)
        view = memoryview(buffer)
        while count := os.readv(fd, [buffer]):
            digest.update(view[:count])
    finally:
        os.close(fd)
    return digest.hexdigest()


def read_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``; ``NotARegularFileError`` for anything else;
    ``ValueError`` for one of more than ``limit`` bytes (then no more than that is read)."""
    fd, info = open_regular(path, dir_fd)
    size = info.st_size
    try:
        if limit is not None and size > limit:
            raise ValueError(f"'{path}' has {size} bytes, more than {limit}")
        chunks, total = [], 0
        while chunk := os.read(fd, size + 1):  # one read, then EOF (more if it grew)
            chunks.append(chunk)
            total += len(chunk)
            if limit is not None and total > limit:
                raise ValueError(f"'{path}' grew past {limit} bytes")
    finally:
        os.close(fd)
    return b"".join(chunks)


def unique_name(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:12]}"


def pid_of(name: str) -> int | None:
    """The process id a ``unique_name`` carries (of the process that made it, on its own
    host: on a store shared by several hosts, maybe not this one's), or None."""
    head, _, tail = name.rpartition("-")
    pid = head.rpartition("-")[2]
    if len(tail) != 12 or not all(c in "0123456789abcdef" for c in tail) or not (pid.isascii() and pid.isdigit()):
        return None
    number = int(pid)
    return number if 0 < number < _MAX_PID else None  # (a name anyone wrote: no number the kernel refuses)


#: Linux's pids stay below 2**22 (``pid_max``'s limit).
_MAX_PID = 1 << 22


def fsync_dir(path: pathlib.Path) -> None:
    """Make a rename or a new file in ``path`` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def copy_durably(source: pathlib.Path, target: pathlib.Path, *, mode: int | None = None) -> tuple[int, str]:
    """Copy ``source`` to the new file ``target``, flushed to disk; return its size and xxh3.

    ``mode``: the target's permission bits (execute added where readable if ``source`` is
    executable), whatever the umask; default: ``source``'s."""
    digest = xxhash.xxh3_128()
    size = 0
    with open(source, "rb") as src, open(target, "xb") as dst:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
        if mode is not None:
            executable = os.fstat(src.fileno()).st_mode & 0o111
            os.fchmod(dst.fileno(), mode | ((mode & 0o444) >> 2) if executable else mode)
        dst.flush()
        os.fsync(dst.fileno())
    if mode is None:
        shutil.copymode(source, target)
    return size, digest.hexdigest()


def write_durably(target: pathlib.Path, data: bytes, *, mode: int | None = None) -> tuple[int, str]:
    """Write ``data`` to the new file ``target``, flushed to disk; return its size and xxh3."""
    with open(target, "xb") as dst:
        if mode is not None:
            os.fchmod(dst.fileno(), mode)
        dst.write(data)
        dst.flush()
        os.fsync(dst.fileno())
    return len(data), xxhash.xxh3_128_hexdigest(data)


def atomic_write_text(path: pathlib.Path, text: str, *, durable: bool = True, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never a part.

    ``mode``: the new file's permission bits whatever the umask (set before it is visible)."""
    tmp = path.with_name(unique_name(f".{path.name}.tmp-"))
    try:
        with open(tmp, "x", encoding="utf-8") as stream:
            if mode is not None:
                os.fchmod(stream.fileno(), mode)
            stream.write(text)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def replace_text_at(dir_fd: int, name: str, text: str, *, mode: int = 0o644) -> None:
    """Like ``atomic_write_text(durable=False)`` for the file ``name`` of the open folder ``dir_fd``.

    The temp file and the rename both go through ``dir_fd``, so the new file lands in
    that very folder even if the folder was renamed (or another put at its path) meanwhile.
    """
    tmp = unique_name(f".{name}.tmp-")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def remove_tree(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:
    """Remove ``path`` without following a symlink, ignoring what is already gone.

    A folder is removed with everything in it (``shutil.rmtree`` walks by file
    descriptors and never descends into a symlink); a symlink, file or anything else
    is unlinked itself, never what it points to. ``dir_fd``: ``path`` is relative to it.
    """
    try:
        info = os.lstat(path, dir_fd=dir_fd)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        try:
            shutil.rmtree(path, ignore_errors=True, dir_fd=dir_fd)
        except RecursionError:  # deeper than Python's recursion (Python 3.12's rmtree recurses)
            _remove_deep_tree(path, dir_fd)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path, dir_fd=dir_fd)


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _remove_deep_tree(path: str | os.PathLike[str], dir_fd: int | None) -> None:
    """``remove_tree`` of a folder nested deeper than ``shutil.rmtree`` can recurse (a tree
    thousands of folders deep, which someone who may write a folder of the store can plant:
    ``prune``, ``clear`` and ``verify --repair`` ended in a RecursionError and left it for good,
    a reviewer's attack). Iterative: the folders two levels down are moved up to the top, a
    level a pass, until none is left; through descriptors, never following a symlink."""
    try:
        top = os.open(path, _FOLDER_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        moved = True
        while moved:
            moved = False
            for name in _names(top):
                try:
                    is_folder = stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode)
                    if not is_folder:
                        os.unlink(name, dir_fd=top)
                        continue
                    child = os.open(name, _FOLDER_FLAGS, dir_fd=top)
                except OSError:
                    continue
                try:
                    for inner in _names(child):
                        with contextlib.suppress(OSError):
                            if stat.S_ISDIR(os.stat(inner, dir_fd=child, follow_symlinks=False).st_mode):
                                os.rename(inner, unique_name(".deep-"), src_dir_fd=child, dst_dir_fd=top)
                                moved = True
                            else:
                                os.unlink(inner, dir_fd=child)
                finally:
                    os.close(child)
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path, dir_fd=dir_fd)


def _names(folder: int) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def size_problem(
    path: str | pathlib.Path, files: Iterable[tuple[str, int]], trust: TrustPolicy | None = None
) -> str | None:
    """Why the payload files ``(name, size)`` in ``path`` are not as recorded (or, with
    ``trust``, may have been written by someone untrusted), or None.

    Runs per entry on every scan and lookup: f-strings and one ``os.lstat`` per file, no
    pathlib objects. Only regular files count: a symlink, FIFO or device is a problem.
    """
    for name, expected in files:
        try:
            info = os.lstat(f"{path}/{name}")
        except OSError:
            return f"file '{name}' is missing."
        if not stat.S_ISREG(info.st_mode):
            return f"file '{name}' is not a regular file."
        size = info.st_size
        if trust is not None and (problem := trust.file_problem(name, info, folder=path)):
            return problem
        if size != expected:
            return f"file '{name}' has {size} bytes, not {expected}."
    return None


def make_real_folders(real: str) -> None:
    """``mkdir -p`` of ``real`` (an ``os.path.realpath``: no symlink on it when resolved) that
    follows no symlink: a folder of it made a symlink since, as anyone may in a sticky ``/tmp``
    (a helper's race), would have a store or an index made wherever it points. Component by
    component through descriptors (``O_PATH``: no read permission needed); a symlink met is
    ``OSError`` (ELOOP)."""
    fd = os.open("/", _FOLDER)
    try:
        for name in real.split("/")[1:]:
            if not name:
                continue
            made: OSError | None = None
            try:
                os.mkdir(name, dir_fd=fd)
            except OSError as error:  # (EEXIST; as ``pathlib``'s ``mkdir -p``, any error of a folder that exists)
                made = error
            try:
                inner = os.open(name, _FOLDER | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(errno.ELOOP, f"'{name}' became a symbolic link or a file as it was made") from None
                raise made or error from None
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


_FOLDER = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
