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
from tests.helpers import expected, run_project, write_project

pytestmark = pytest.mark.slow

#: The build time every file of every image carries (a reproducible build's).
BUILT = 1_700_000_000


def build_image(source: pathlib.Path, image: pathlib.Path) -> None:
    subprocess.run(
        ["mksquashfs", str(source), str(image), "-noappend", "-quiet", "-all-root",
         "-all-time", str(BUILT), "-mkfs-time", str(BUILT)],
        check=True, capture_output=True,
    )


@pytest.fixture
def mount_point(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A folder to mount images at (one at a time), unmounted at the end."""
    if shutil.which("mksquashfs") is None:
        pytest.skip("mksquashfs is not installed (scripts/test-servers installs squashfs-tools as root)")
    mount = tmp_path / "image"
    mount.mkdir()
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def mount(image: pathlib.Path, at: pathlib.Path) -> None:
    subprocess.run(["umount", str(at)], capture_output=True, check=False)
    done = subprocess.run(["mount", "-t", "squashfs", "-o", "ro,loop", str(image), str(at)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a squashfs image here ({done.stderr.decode().strip()})")


def test_two_builds_of_an_image_are_told_apart(tmp_path: pathlib.Path, mount_point: pathlib.Path) -> None:
    """An operator edited between two builds of an image (``3.0 * a`` -> ``4.0 * a``: the same
    size, so the same inode and identity): the second image's program is the edited one. The
    source facts stored under the first image were once used for the second (the old
    program served: a stale hit); an image's file is now known by its bytes too."""
    for version, body in (("v1", "3.0 * a"), ("v2", "4.0 * a")):
        write_project(tmp_path / version, scale_body=body)
        (tmp_path / version / "site" / f"nanobind-9.9.{version[1]}.dist-info").mkdir(parents=True)
        build_image(tmp_path / version, tmp_path / f"{version}.sqfs")
    store = tmp_path / "store"

    mount(tmp_path / "v1.sqfs", mount_point)
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

    mount(tmp_path / "v2.sqfs", mount_point)
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
    """Everywhere else (the kernel keeps the change time) a file's identity is its stat alone:
    no read (the facts exist to avoid reading sources)."""
    source = tmp_path / "ops.py"
    source.write_text("x = 1\n")
    os.utime(source, ns=(BUILT * 10**9, BUILT * 10**9))  # whole seconds, but the change time is now
    assert toolchain.stat_shows_changes(source.stat())
    assert len(_facts._identity(str(source)) or []) == 5
    assert len(toolchain.folder_identity(str(tmp_path))[1] or []) == 5
