"""Files that were looked up but not opened yet.

A regular file with one link that a lookup or a listing finds is only stat'ed; the drive opens
it on first use, and checks then that its name still leads to the same file. These tests change
the name between the lookup and the first use, through the mount and behind its back in the
backing folder (files made there, so that the mount first meets them by a lookup), and check
that what is used is always the file that is at the path now (with a native errno when nothing
is there), never "Stale file handle".
"""
import errno
import os

import pytest

from ddtest import RENAME_EXCHANGE, renameat2


def read(path):
    with open(path, "rb") as f:
        return f.read()


def looked_up(path):
    """A lookup without an open (stat), as `ls -l` or a shell's completion does."""
    return os.stat(path).st_size


@pytest.mark.timeout(60)
def test_renamed_through_the_mount_after_a_lookup(t):
    (t.mnt / "a").write_bytes(b"content of a")
    (t.mnt / "sub").mkdir()
    os.listdir(t.mnt)  # readdirplus: the names are known but not opened
    looked_up(t.mnt / "a")
    os.rename(t.mnt / "a", t.mnt / "sub" / "b")
    assert read(t.mnt / "sub" / "b") == b"content of a"
    assert os.stat(t.mnt / "sub" / "b").st_size == 12
    with pytest.raises(FileNotFoundError):
        read(t.mnt / "a")


@pytest.mark.timeout(60)
def test_exchanged_through_the_mount_after_a_lookup(t):
    (t.mnt / "x").write_bytes(b"X")
    (t.mnt / "y").write_bytes(b"YY")
    looked_up(t.mnt / "x")
    looked_up(t.mnt / "y")
    renameat2(t.mnt / "x", t.mnt / "y", RENAME_EXCHANGE)
    assert read(t.mnt / "x") == b"YY"
    assert read(t.mnt / "y") == b"X"


@pytest.mark.timeout(60)
def test_renamed_behind_the_mount_after_a_lookup(t):
    (t.backing / "old").write_bytes(b"moved behind the mount")
    looked_up(t.mnt / "old")
    os.rename(t.backing / "old", t.backing / "new")
    # Open uses the looked-up node: its name is gone, so the kernel looks the path up again.
    with pytest.raises(OSError) as e:
        read(t.mnt / "old")
    assert e.value.errno == errno.ENOENT, f"expected ENOENT, got {errno.errorcode.get(e.value.errno)}"
    assert read(t.mnt / "new") == b"moved behind the mount"


@pytest.mark.timeout(60)
def test_replaced_behind_the_mount_after_a_lookup(t):
    (t.backing / "doc").write_bytes(b"first version")
    looked_up(t.mnt / "doc")
    tmp = t.backing / ".doc.tmp"
    tmp.write_bytes(b"second version, written elsewhere")
    os.rename(tmp, t.backing / "doc")
    assert read(t.mnt / "doc") == b"second version, written elsewhere"
    assert os.stat(t.mnt / "doc").st_size == len(b"second version, written elsewhere")


@pytest.mark.timeout(60)
def test_many_files_listed_then_used(t):
    """A listing makes nodes for every file; using a few of them later, after others were
    renamed or deleted behind the mount, opens the right ones."""
    for i in range(200):
        (t.backing / f"f{i:03d}").write_bytes(f"file {i}".encode())
    assert sorted(os.listdir(t.mnt)) == [f"f{i:03d}" for i in range(200)]
    sizes = {n: os.stat(t.mnt / n).st_size for n in os.listdir(t.mnt)}
    assert len(sizes) == 200
    for i in range(0, 200, 2):
        os.unlink(t.backing / f"f{i:03d}")
    for i in range(1, 200, 2):
        assert read(t.mnt / f"f{i:03d}") == f"file {i}".encode()
    with pytest.raises(FileNotFoundError):
        read(t.mnt / "f000")
