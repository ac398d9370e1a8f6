"""A project on a read-only image (squashfs, as Apptainer/Singularity images and CSCS's uenvs
are): its files carry the times the image was built with, so a file's identity (device,
inode, size, times) does not tell two builds of one image apart when a reproducible build
fixes those times (``SOURCE_DATE_EPOCH``, ``mksquashfs -all-time``).

Real images, really mounted (root, as in CI: ``scripts/test-servers`` installs
squashfs-tools); each process is fresh.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from gtcache import toolchain
from gtcache.gt4py import _facts
from tests.helpers import expected, loop_devices, run_project, write_project

pytestmark = pytest.mark.slow

#: The build time every file of every image carries (a reproducible build's).
BUILT = 1_700_000_000


def build_image(kind: str, source: pathlib.Path, image: pathlib.Path) -> None:
    """A squashfs image (``mksquashfs -all-time``), or an ext4 one whose inodes carry the times
    an image builder writes (``mkfs.ext4 -d``, then each inode's times set as ``genext2fs``
    with ``SOURCE_DATE_EPOCH`` writes them, and as a VM's root file system made from a
    container image has them)."""
    if kind == "squashfs":
        subprocess.run(
            ["mksquashfs", str(source), str(image), "-noappend", "-quiet", "-all-root",
             "-all-time", str(BUILT), "-mkfs-time", str(BUILT)],
            check=True, capture_output=True,
        )
        return
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(source), "-E", "root_owner=0:0", str(image), "4M"],
                   check=True, capture_output=True)
    paths = ["/", *sorted("/" + str(p.relative_to(source)) for p in source.rglob("*"))]
    requests = "".join(
        f"set_inode_field {path} {field} {BUILT}\n" for path in paths for field in ("mtime", "ctime", "atime", "crtime")
    ) + "".join(
        f"set_inode_field {path} {field}_extra 0\n" for path in paths for field in ("mtime", "ctime", "atime", "crtime")
    )
    subprocess.run(["debugfs", "-w", "-f", "-", str(image)], input=requests.encode(), check=True, capture_output=True)


@pytest.fixture
def mount_point(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A folder to mount images at (one at a time), unmounted at the end; no other test of
    this machine loop-mounts meanwhile (each image gets the loop device the first had)."""
    if shutil.which("mksquashfs") is None:
        pytest.skip("mksquashfs is not installed (scripts/test-servers installs squashfs-tools as root)")
    mount = tmp_path / "image"
    mount.mkdir()
    with loop_devices():
        yield mount
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def mount(kind: str, image: pathlib.Path, at: pathlib.Path) -> None:
    subprocess.run(["umount", str(at)], capture_output=True, check=False)
    done = subprocess.run(["mount", "-t", kind, "-o", "ro,loop", str(image), str(at)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {kind} image here ({done.stderr.decode().strip()})")


@pytest.mark.parametrize("kind", ["squashfs", "ext4"])
def test_two_builds_of_an_image_are_told_apart(tmp_path: pathlib.Path, mount_point: pathlib.Path, kind: str) -> None:
    """An operator edited between two builds of an image (``3.0 * a`` -> ``4.0 * a``: the same
    size, so the same inode and identity): the second image's program is the edited one. The
    source facts stored under the first image were once used for the second (the old
    program served: a stale hit); an image's file is now known by its bytes too."""
    for version, body in (("v1", "3.0 * a"), ("v2", "4.0 * a")):
        write_project(tmp_path / version, scale_body=body)
        (tmp_path / version / "site" / f"nanobind-9.9.{version[1]}.dist-info").mkdir(parents=True)
        build_image(kind, tmp_path / version, tmp_path / f"{version}.img")
    store = tmp_path / "store"

    mount(kind, tmp_path / "v1.img", mount_point)
    ops, site = mount_point / "proj" / "ops.py", str(mount_point / "site")
    first, first_site = ops.stat(), toolchain.folder_identity(site)[1]
    assert first.st_mtime_ns == first.st_ctime_ns == BUILT * 10**9, "the image keeps its build time"
    assert not toolchain.stat_shows_changes(first)
    assert len(toolchain.folder_identity(str(mount_point))[1] or []) == 6, "an image's folder is known by its names too"
    assert len(_facts._identity(str(ops)) or []) == 6, "an image's file is known by its bytes too"
    for _ in range(2):  # compiled, then served: the source facts are stored
        report = run_project(mount_point, store)
        assert report["out"] == expected(3.0, 1.0)
    assert [o["status"] for o in report["outcomes"]] == ["hit"]

    mount(kind, tmp_path / "v2.img", mount_point)
    second = ops.stat()
    assert (second.st_dev, second.st_ino, second.st_size, second.st_mtime_ns) == (
        first.st_dev, first.st_ino, first.st_size, first.st_mtime_ns
    ), "the second image gives the edited file the identity it had (else this test shows nothing)"
    # A folder's installed versions (kept in the facts with its identity) come from its names.
    second_site = toolchain.folder_identity(site)[1]
    assert first_site is not None and second_site is not None
    assert first_site[:5] == second_site[:5] and first_site != second_site, "told apart by the names in it"
    assert toolchain.folder_versions(site) == {"nanobind": "9.9.2"}
    report = run_project(mount_point, store)
    assert report["out"] == expected(4.0, 1.0), "the program the second image holds"
    assert [o["status"] for o in report["outcomes"]] == ["compiled"], report
    again = run_project(mount_point, store)
    assert again["out"] == expected(4.0, 1.0) and [o["status"] for o in again["outcomes"]] == ["hit"], again


def test_files_whose_times_show_changes_keep_the_plain_identity(tmp_path: pathlib.Path) -> None:
    """Everywhere else (the kernel set the change time) a file's identity is its stat alone:
    no read (the facts exist to avoid reading sources), and no file system looked up."""
    source = tmp_path / "ops.py"
    source.write_text("x = 1\n")
    written = source.stat()
    assert written.st_mtime_ns % 10**9 or written.st_ctime_ns != written.st_mtime_ns, "a file the kernel wrote"
    os.utime(source, ns=(BUILT * 10**9, BUILT * 10**9))  # whole seconds, but the change time is now
    toolchain._FILE_SYSTEMS.clear()
    assert toolchain.stat_shows_changes(written) and toolchain.stat_shows_changes(source.stat())
    assert len(_facts._identity(str(source)) or []) == 5
    assert len(toolchain.folder_identity(str(tmp_path))[1] or []) == 5
    assert not toolchain._FILE_SYSTEMS, "no file system was looked up"
    library = os.path.dirname(os.__file__)  # the interpreter's version names it: its stat suffices
    assert toolchain.in_standard_library(library) and toolchain.in_standard_library(os.__file__)
    assert not toolchain.in_standard_library(os.path.join(library, "site-packages", "gt4py", "__init__.py"))
    assert not toolchain.in_standard_library(library + "-other/x.py")
    assert len(toolchain.folder_identity(library)[1] or []) == 5 and len(_facts._identity(os.__file__) or []) == 5
