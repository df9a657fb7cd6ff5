"""File I/O in both of its modes: passed through to the backing files by the kernel (FUSE
passthrough, the default when the daemon runs as root on Linux 6.9+) and through the daemon
(`docdrive mount --no-passthrough`, and every mount a kernel or user cannot pass through).

Every test runs once per mode, on its own drive with a store whose write-back delay is 0.2 s.
Covered: `status --json` reports the mode; writes, appends from two descriptors, writes in the
middle, truncations and a large file read back the same through the mount and in the backing
folder, and reach the remote; a same-size overwrite right after the open is a save (in
passthrough the drive sees no write, only the file's version); mmap writes are saves; a file
opened for writing but only read is not a save; two open descriptors of one file see each
other's writes, and a flock taken through one is gone once it closes while the other stays open;
a change made in the backing folder shows through the mount.
"""
from __future__ import annotations

import mmap
import os
import subprocess
import time

import pytest

from ddtest import wait_until
from test_uploads import assert_remote_matches, up_drive, xstatus

MODES = {"passthrough": (), "daemon": ("--no-passthrough",)}


def kernel_can_pass_through() -> bool:
    """Linux 6.9+ built with CONFIG_FUSE_PASSTHROUGH (its functions are in the symbol table)."""
    try:
        with open("/proc/kallsyms") as f:
            return any(line.rstrip().endswith(" fuse_passthrough_open") for line in f)
    except OSError:
        return False


@pytest.fixture(params=sorted(MODES))
def io(new_drive, request):
    u = up_drive(new_drive, writeback=0.2, mount=False)
    u.mount(*MODES[request.param])
    want = request.param
    if want == "passthrough" and not (os.geteuid() == 0 and kernel_can_pass_through()):
        # Never a silent fallback to the daemon's I/O: CI runs as root on a kernel with
        # passthrough, where this must pass through; elsewhere the case says why it cannot run.
        why = "passthrough needs a root daemon and Linux 6.9+ built with CONFIG_FUSE_PASSTHROUGH"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}, and CI must test it (euid {os.geteuid()}, kernel {os.uname().release})")
        pytest.skip(why)
    got = u.status()["mount"]["fileIO"]
    assert got == want, f"mounted with {MODES[request.param]}: file I/O is {got!r}, expected {want!r}"
    u.mode = request.param
    return u


def synced(u, what):
    u.sync(check=0)
    return assert_remote_matches(u, what)


@pytest.mark.timeout(90)
def test_writes_appends_truncations_and_a_large_file(io):
    u = io
    p = u.dir / "doc.bin"
    expect = bytearray(b"0123456789" * 1000)
    with open(p, "wb") as f:
        f.write(expect)
    # Two descriptors appending in turn.
    a = os.open(p, os.O_WRONLY | os.O_APPEND)
    b = os.open(p, os.O_WRONLY | os.O_APPEND)
    for i in range(20):
        chunk = f"<{i}>".encode()
        os.write(a if i % 2 else b, chunk)
        expect += chunk
    os.close(a)
    os.close(b)
    # A write in the middle, then shrinking and growing.
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"MIDDLE", 4000)
    expect[4000:4006] = b"MIDDLE"
    os.ftruncate(fd, 9000)
    del expect[9000:]
    os.ftruncate(fd, 12000)
    expect += bytes(3000)
    os.close(fd)
    assert p.read_bytes() == bytes(expect)
    assert (u.cache / "doc.bin").read_bytes() == bytes(expect), "the backing file differs from what was written"
    os.truncate(p, 100)
    assert p.read_bytes() == bytes(expect[:100])

    big = os.urandom(8 << 20)
    with open(u.dir / "big.bin", "wb") as f:
        for off in range(0, len(big), 1 << 20):
            f.write(big[off:off + (1 << 20)])
        f.flush()
        os.fsync(f.fileno())
    assert (u.dir / "big.bin").read_bytes() == big
    local = synced(u, "after the writes")
    assert local["doc.bin"] == bytes(expect[:100]) and local["big.bin"] == big


@pytest.mark.timeout(90)
def test_a_same_size_overwrite_right_after_the_open_is_a_save(io):
    """In passthrough the drive never sees the write: only the file's version tells it."""
    u = io
    p = u.dir / "same.txt"
    p.write_bytes(b"AAAA")
    synced(u, "first version")
    for letter in b"BCDEFGHIJK":
        fd = os.open(p, os.O_RDWR)
        os.pwrite(fd, bytes([letter]) * 4, 0)
        os.close(fd)
        status = xstatus(p)
        assert status in ("pending", "uploading"), f"right after the close of a written file: {status!r}"
        local = synced(u, f"overwrite with {chr(letter)}")
        assert local["same.txt"] == bytes([letter]) * 4


@pytest.mark.timeout(60)
def test_mmap_writes_are_saves(io):
    u = io
    p = u.dir / "mapped.bin"
    p.write_bytes(bytes(8192))
    synced(u, "zeros")
    fd = os.open(p, os.O_RDWR)
    with mmap.mmap(fd, 8192) as m:
        m[100:105] = b"mmapd"
        m.flush()
    os.close(fd)
    local = synced(u, "after the mmap write")
    assert local["mapped.bin"][100:105] == b"mmapd"
    assert p.read_bytes()[100:105] == b"mmapd"


@pytest.mark.timeout(60)
def test_a_file_opened_for_writing_but_only_read_is_not_a_save(io):
    u = io
    p = u.dir / "read-only-use.txt"
    p.write_bytes(b"content")
    synced(u, "written")
    assert xstatus(p) == "synced"
    for _ in range(3):
        fd = os.open(p, os.O_RDWR)
        assert os.read(fd, 100) == b"content"
        os.close(fd)
        assert xstatus(p) == "synced", "a close without a write was taken for a save"


@pytest.mark.timeout(60)
def test_two_descriptors_share_writes_and_a_flock_goes_with_its_descriptor(io):
    u = io
    p = u.dir / "shared.txt"
    p.write_bytes(b"")
    w = os.open(p, os.O_RDWR)
    r = os.open(p, os.O_RDONLY)
    try:
        os.write(w, b"seen at once")
        assert os.pread(r, 100, 0) == b"seen at once"
        import fcntl
        fcntl.flock(w, fcntl.LOCK_EX)
        probe = ["flock", "-n", "-x", str(p), "true"]
        assert subprocess.run(probe, timeout=20).returncode == 1, "another process got the lock that is held"
        os.close(w)
        w = -1
        # The other descriptor stays open: the lock must still go with the one that closed.
        assert wait_until(lambda: subprocess.run(probe, timeout=20).returncode == 0, 10), \
            "the flock outlived the close of its descriptor"
        assert os.pread(r, 100, 0) == b"seen at once"
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)
    assert synced(u, "shared")["shared.txt"] == b"seen at once"


@pytest.mark.timeout(60)
def test_a_change_in_the_backing_folder_shows_through_the_mount(io):
    u = io
    p = u.dir / "outside.txt"
    p.write_bytes(b"version one")
    assert p.read_bytes() == b"version one"
    time.sleep(0.05)
    (u.cache / "outside.txt").write_bytes(b"version two, longer")
    assert wait_until(lambda: p.read_bytes() == b"version two, longer", 5), p.read_bytes()


@pytest.mark.timeout(90)
def test_the_space_a_removal_frees_counts_as_free_at_once(io):
    """The daemon frees a removed file's blocks after answering the unlink (DeferredFrees);
    statfs waits for that, so `df` right after `rm` (or a rename onto a file) shows the space."""
    u = io
    size = 64 << 20
    for name in ("gone.bin", "replaced.bin"):
        with open(u.dir / name, "wb") as f:
            f.write(os.urandom(size))
            os.fsync(f.fileno())
    (u.dir / "new.txt").write_bytes(b"the new version")
    u.sync(check=0)  # the uploads are done: nothing else writes to this disk meanwhile

    def free() -> int:
        sv = os.statvfs(u.dir)
        return sv.f_bfree * sv.f_frsize

    before = free()
    os.unlink(u.dir / "gone.bin")
    after = free()
    assert after - before >= size * 0.9, f"{(after - before) >> 20} MiB free after removing a 64 MiB file"
    os.rename(u.dir / "new.txt", u.dir / "replaced.bin")
    again = free()
    assert again - after >= size * 0.9, f"{(again - after) >> 20} MiB free after replacing a 64 MiB file"
    assert (u.dir / "replaced.bin").read_bytes() == b"the new version"
    assert not (u.cache / "gone.bin").exists()
