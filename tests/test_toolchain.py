"""The compiler's path, a key ingredient (``toolchain.cxx``): found as ``shutil.which`` and
``os.path.realpath`` find it, by a faster route (``toolchain.program_path``)."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from gtcache import toolchain
from tests.helpers import run_in_mount_namespace


def _executable(path: pathlib.Path) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def folders(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """PATH: a folder named like the program, a file that may not be run, a dangling link,
    a chain of links to the program, a relative folder and a repeated one."""
    (tmp_path / "a" / "cc").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "cc").write_text("not a program")  # mode 644: not run, not even by root
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cc").symlink_to(tmp_path / "nowhere")
    real = _executable(tmp_path / "toolkit" / "bin" / "x86_64-cc-12")
    (tmp_path / "alternatives").mkdir()
    (tmp_path / "alternatives" / "cc").symlink_to(real)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "cc").symlink_to("../alternatives/cc")  # relative, through another link
    _executable(tmp_path / "work" / "rel" / "only-here")
    monkeypatch.chdir(tmp_path / "work")
    path = [tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "a", "rel", tmp_path / "d", "", "/usr/bin"]
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, path)))
    return tmp_path


def _expected(name: str) -> str | None:
    found = shutil.which(name)
    return os.path.realpath(found) if found else None


@pytest.mark.parametrize("name", ["cc", "only-here", "no-such-program", "rel/only-here", "sh"])
def test_a_program_is_found_where_which_and_realpath_find_it(folders: pathlib.Path, name: str) -> None:
    assert toolchain.program_path(name) == _expected(name)
    if name == "cc":
        assert toolchain.program_path(name) == str(folders / "toolkit" / "bin" / "x86_64-cc-12")
    found = toolchain.program_file(name)
    if found is not None:  # with the status of the file found: the identity's size and time
        expected = os.stat(found[0])
        assert found[1] is not None and (found[1].st_ino, found[1].st_size) == (expected.st_ino, expected.st_size)


def test_a_program_moved_behind_its_link_is_another_path(folders: pathlib.Path) -> None:
    """An upgrade that re-points the link (``update-alternatives``) names the new compiler."""
    older = toolchain.program_file("cc")
    newer = _executable(folders / "toolkit" / "bin" / "x86_64-cc-13")
    newer.write_text("#!/bin/sh\n# thirteen\n")
    (folders / "alternatives" / "cc").unlink()
    (folders / "alternatives" / "cc").symlink_to(newer)
    assert toolchain.program_path("cc") == str(newer) == _expected("cc")
    identities = {toolchain._identity(older), toolchain._identity(toolchain.program_file("cc"))}
    assert identities == {f"{folders}/toolkit/bin/x86_64-cc-12@10:{int(os.stat(older[0]).st_mtime)}",
                          f"{newer}@21:{int(newer.stat().st_mtime)}"}


def test_without_path_the_standard_library_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATH")
    assert toolchain.program_path("sh") == _expected("sh")
    monkeypatch.setenv("PATH", "")
    assert toolchain.program_path("sh") is None and _expected("sh") is None


_CHROOT_CHILD = """
import os, shutil, sys
from gtcache import toolchain

jail, outside = sys.argv[1], sys.argv[2]
os.chdir(outside)  # left outside the jail: getcwd() fails in it
os.chroot(jail)
os.environ["PATH"] = ".:/bin"


def outcome(find):
    try:
        return repr(find("cc"))
    except OSError as error:
        return type(error).__name__


print(outcome(toolchain.program_path))
print(outcome(lambda name: os.path.realpath(shutil.which(name))))
"""


def test_in_a_chroot_left_from_outside_the_kernels_name_is_not_taken(tmp_path: pathlib.Path) -> None:
    """``/proc`` in a chroot names a file opened through a working folder left outside the jail
    by its path outside, a name that means nothing inside (a reviewer's case): the name is
    taken only when it leads to the file opened, else ``os.path.realpath`` decides, as before.
    In a mount namespace of its own (as root)."""
    jail, outside = tmp_path / "jail", tmp_path / "outside"
    _executable(jail / "bin" / "cc")
    _executable(outside / "cc")
    (jail / "proc").mkdir()
    out = run_in_mount_namespace(f"mount -t proc proc {jail}/proc", _CHROOT_CHILD, str(jail), str(outside),
                                 folder=tmp_path)
    ours, standard = out.split()
    assert ours == standard, (ours, standard)
