"""Small file-system helpers: checksums, durable and atomic writes, removal."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import uuid

import xxhash

__all__ = [
    "atomic_write_text",
    "copy_durably",
    "file_xxh3",
    "fsync_dir",
    "remove_tree",
    "unique_name",
    "write_durably",
]

_CHUNK = 1 << 20


def file_xxh3(path: pathlib.Path) -> str:
    """xxh3-128 of a file's bytes as 32 hex digits."""
    digest = xxhash.xxh3_128()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def unique_name(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:12]}"


def fsync_dir(path: pathlib.Path) -> None:
    """Make a rename or a new file in ``path`` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def copy_durably(source: pathlib.Path, target: pathlib.Path) -> tuple[int, str]:
    """Copy ``source`` to the new file ``target``, flushed to disk; return its size and xxh3."""
    digest = xxhash.xxh3_128()
    size = 0
    with open(source, "rb") as src, open(target, "xb") as dst:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    shutil.copymode(source, target)
    return size, digest.hexdigest()


def write_durably(target: pathlib.Path, data: bytes) -> tuple[int, str]:
    """Write ``data`` to the new file ``target``, flushed to disk; return its size and xxh3."""
    with open(target, "xb") as dst:
        dst.write(data)
        dst.flush()
        os.fsync(dst.fileno())
    return len(data), xxhash.xxh3_128_hexdigest(data)


def atomic_write_text(path: pathlib.Path, text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never a part."""
    tmp = path.with_name(unique_name(f".{path.name}.tmp-"))
    try:
        with open(tmp, "x", encoding="utf-8") as stream:
            stream.write(text)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def remove_tree(path: pathlib.Path) -> None:
    """Remove a folder tree, ignoring what is already gone."""
    shutil.rmtree(path, ignore_errors=True)
