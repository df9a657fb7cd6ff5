"""POSIX corners a filesystem test suite finds (issue 20), each compared with a native folder on
the same disk: times after writes through a shared mapping (both file I/O modes), setgid
cleared for a non-member by chmod, an ACL and fallocate, file handles that outlive the kernel's
cache, a mount source that tells drives apart, and the backing filesystem's xattr space."""
from __future__ import annotations

import ctypes
import errno
import itertools
import json
import mmap
import os
import subprocess
import time
from pathlib import Path

import pytest

import conftest
from ddtest import is_docdrive_mount
from ddtest import (EXTRA_GID, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, OTHER_GID,
                    OTHER_UID, Drive, compare, libc, mount_options, wait_until)
from test_file_io import kernel_can_pass_through
from test_ownership import acl_blob, both

_seq = itertools.count()


def twin(d: Drive, base_dir: Path, name: str) -> conftest.TestDirs:
    """A fresh folder in `d`'s Notes/ and its native twin."""
    name = f"{conftest._slug(name)}-{next(_seq)}"
    native = base_dir / "native-corners" / name
    native.mkdir(parents=True)
    mnt = d.mnt / "Notes" / name
    mnt.mkdir()
    return conftest.TestDirs(mnt=mnt, native=native, backing=d.notes_backing / name, root=d.mnt, drive=d)


# --------------------------------------------------------------------------- 1. shared mmap times

MODES = {"passthrough": (), "daemon": ("--no-passthrough",)}


@pytest.fixture(params=sorted(MODES))
def io(new_drive, base_dir, request):
    """A private drive in one file I/O mode (see test_file_io.py), and a folder with its twin."""
    d = new_drive()
    d.mount(extra_args=MODES[request.param])
    want = "passthrough" if request.param == "passthrough" and os.geteuid() == 0 and kernel_can_pass_through() else "daemon"
    got = json.loads(d.cli("status", "--json").stdout)["mount"]["fileIO"]
    assert got == want, f"mounted with {MODES[request.param]}: file I/O is {got!r}, expected {want!r}"
    return twin(d, base_dir, request.node.name)


def mapped_store_moves_times(base: Path, end: str, pause: float):
    """Maps a file MAP_SHARED, stats it, stores into the mapping, and after msync (`end`
    "msync") or munmap and close ("close") asks: did mtime and ctime move? The stat after the
    mmap makes the old times cached (a stat before it does not: mapping drops them); `pause`
    is past the clock tick (within the attribute timeout, 1 s), or past both."""
    p = base / f"mapped-{end}"
    p.write_bytes(bytes(3 * 4096))
    fd = os.open(p, os.O_RDWR)
    try:
        m = mmap.mmap(fd, 3 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        before = os.stat(p)
        time.sleep(pause)
        m[5000:5005] = b"store"
        if end == "msync":
            m.flush()
            after = os.stat(p)
        m.close()
    finally:
        os.close(fd)
    if end == "close":
        after = os.stat(p)
    return {"mtime moved": after.st_mtime_ns > before.st_mtime_ns,
            "ctime moved": after.st_ctime_ns > before.st_ctime_ns,
            "content": p.read_bytes()[5000:5005].decode()}


def grown_while_mapped_moves_times(base: Path, pause: float):
    """Maps a file, grows it with ftruncate (whose reply caches the attributes), stores into
    the mapping, msyncs: did mtime and ctime move?"""
    p = base / "grown"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 3 * 4096)
        m = mmap.mmap(fd, 3 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.ftruncate(fd, 4 * 4096)
        before = os.fstat(fd)
        time.sleep(pause)
        m[5000:5005] = b"store"
        m.flush()
        after = os.stat(p)
        m.close()
    finally:
        os.close(fd)
    return {"mtime moved": after.st_mtime_ns > before.st_mtime_ns,
            "ctime moved": after.st_ctime_ns > before.st_ctime_ns}


@pytest.mark.timeout(90)
def test_stores_after_growing_a_mapped_file_update_mtime_and_ctime(io):
    compare(io, lambda b, log: log.note("grown", grown_while_mapped_moves_times(b, 0.3)))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pause", [0.3, 1.5])
@pytest.mark.parametrize("end", ["msync", "close"])
def test_stores_through_a_shared_mapping_update_mtime_and_ctime(io, end, pause):
    compare(io, lambda b, log: log.note(end, mapped_store_moves_times(b, end, pause)))


# --------------------------------------------------------------------------- 2. setgid for non-members

@pytest.fixture(scope="module")
def shared_drive(base_dir):
    """A drive shared with other users (-o allow_other, default_permissions), as in test_ownership.py."""
    d = Drive(base_dir / "corners-shared").create()
    try:
        d.mount(options="allow_other")
    except AssertionError as e:
        pytest.fail(str(e))
    yield d
    problems = d.teardown()
    assert not problems, f"teardown of the shared mount: {problems}"


@pytest.fixture
def shared(shared_drive, base_dir, request):
    assert {"allow_other", "default_permissions"} <= mount_options(shared_drive.mnt)
    return twin(shared_drive, base_dir, request.node.name)


def owned_by_user_in_foreign_group(base, mode=0o2755):
    """A file and a folder of the other user whose group (EXTRA_GID) the user is not in."""
    p = base / "f"
    p.write_bytes(b"0123456789" * 100)
    os.makedirs(base / "d", exist_ok=True)
    for q in (p, base / "d"):
        os.chown(q, OTHER_UID, EXTRA_GID)
        os.chmod(q, mode)


def test_chmod_by_an_owner_outside_the_group_drops_setgid(shared):
    r = both(shared, """
rec("chmod 2755", lambda: os.chmod(b + "/f", 0o2755))
rec("after chmod", lambda: st(b + "/f"))
rec("chmod 6775", lambda: os.chmod(b + "/f", 0o6775))
rec("after chmod 2", lambda: st(b + "/f"))
def fchmod(mode):
    fd = os.open(b + "/f", os.O_RDONLY)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
rec("fchmod 2755", lambda: fchmod(0o2755))
rec("after fchmod", lambda: st(b + "/f"))
rec("folder chmod 2775", lambda: os.chmod(b + "/d", 0o2775))
rec("after folder chmod", lambda: st(b + "/d"))
""", prepare=owned_by_user_in_foreign_group, groups=(OTHER_GID,))
    assert r["after chmod"][2] == oct(0o100755), r
    # A member of the group keeps it.
    both(shared, """
rec("chmod 2755", lambda: os.chmod(b + "/f", 0o2755))
rec("after chmod", lambda: st(b + "/f"))
""", prepare=owned_by_user_in_foreign_group, groups=(OTHER_GID, EXTRA_GID))


def test_an_acl_set_by_an_owner_outside_the_group_drops_setgid(shared):
    acl = acl_blob([("user_obj", 7, None), ("user", 6, 0), ("group_obj", 5, None), ("mask", 7, None),
                    ("other", 5, None)]).hex()
    r = both(shared, f"""
rec("set acl", lambda: os.setxattr(b + "/f", "system.posix_acl_access", bytes.fromhex("{acl}")))
rec("after", lambda: st(b + "/f"))
""", prepare=owned_by_user_in_foreign_group, groups=(OTHER_GID,))
    assert r["after"][2] == oct(0o100775), r


def test_fallocate_by_a_non_member_drops_setgid(shared):
    def prepare(base):
        for n, mode in (("alloc", 0o2666), ("punch", 0o2666), ("zero", 0o2666), ("keep", 0o2666), ("gx", 0o6777),
                        ("suid-alloc", 0o6666), ("suid-zero", 0o6666), ("suid-gx-zero", 0o6676), ("suid-punch", 0o6666)):
            p = base / n
            p.write_bytes(b"x" * 65536)
            os.chmod(p, mode)

    r = both(shared, f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
def falloc(n, mode, off, length):
    fd = os.open(b + "/" + n, os.O_WRONLY)
    try:
        if libc.fallocate(fd, mode, off, length) != 0:
            raise OSError(ctypes.get_errno(), "fallocate")
    finally:
        os.close(fd)
    return "ok"
rec("allocate", lambda: falloc("alloc", 0, 0, 200000))
rec("punch hole", lambda: falloc("punch", {FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE}, 4096, 8192))
rec("zero range", lambda: falloc("zero", {FALLOC_FL_ZERO_RANGE}, 4096, 8192))
rec("keep size", lambda: falloc("keep", {FALLOC_FL_KEEP_SIZE}, 0, 200000))
rec("with group exec", lambda: falloc("gx", 0, 0, 200000))
# Setuid goes whatever the group, as on ext4 (xfstests generic/683-687).
rec("setuid allocate", lambda: falloc("suid-alloc", 0, 0, 200000))
rec("setuid zero range", lambda: falloc("suid-zero", {FALLOC_FL_ZERO_RANGE}, 4096, 8192))
rec("setuid group-exec zero range", lambda: falloc("suid-gx-zero", {FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE}, 0, 100000))
rec("setuid punch hole", lambda: falloc("suid-punch", {FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE}, 4096, 8192))
rec("modes", lambda: [st(b + "/" + n) for n in ("alloc", "punch", "zero", "keep", "gx", "suid-alloc", "suid-zero",
                                                 "suid-gx-zero", "suid-punch")])
""", prepare=prepare, groups=(OTHER_GID,))
    assert r["modes"][0][2] == oct(0o100666), r


# --------------------------------------------------------------------------- 3. file handles

class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]


libc.name_to_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(FileHandle),
                                   ctypes.POINTER(ctypes.c_int), ctypes.c_int]
libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.POINTER(FileHandle), ctypes.c_int]


def name_to_handle(path) -> FileHandle:
    h = FileHandle(handle_bytes=128)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, os.fsencode(str(path)), ctypes.byref(h), ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(path))
    return h


def open_by_handle(mount_path, h: FileHandle, flags=os.O_RDONLY) -> int:
    mfd = os.open(mount_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.open_by_handle_at(mfd, ctypes.byref(h), flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mfd)


def read_by_handle(mount_path, h):
    fd = open_by_handle(mount_path, h)
    try:
        return os.pread(fd, 100, 0).decode()
    finally:
        os.close(fd)


def list_by_handle(mount_path, h):
    fd = open_by_handle(mount_path, h, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def drop_kernel_caches():
    """Makes the kernel forget unused inodes and dentries (a FUSE inode forgotten is a FORGET)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


@pytest.mark.timeout(90)
def test_file_handles_stay_valid_after_the_kernel_forgets(t):
    if os.geteuid() != 0:
        pytest.fail("open_by_handle_at and drop_caches need root")

    def sc(b, log):
        (b / "dir").mkdir()
        (b / "dir" / "inner").write_text("inner")
        (b / "f").write_text("content of f")
        (b / "moved").write_text("will move")
        (b / "gone").write_text("will go")
        handles = {n: name_to_handle(b / n) for n in ("f", "dir", "moved", "gone")}
        os.link(b / "f", b / "dir" / "f-link")
        os.unlink(b / "f")
        os.rename(b / "moved", b / "dir" / "moved-here")
        os.unlink(b / "gone")
        drop_kernel_caches()
        log("linked elsewhere, first name removed", read_by_handle, b, handles["f"])
        log("renamed into a folder", read_by_handle, b, handles["moved"])
        log("folder", list_by_handle, b, handles["dir"])
        log("removed", read_by_handle, b, handles["gone"])
        drop_kernel_caches()
        log("again after a second drop", read_by_handle, b, handles["f"])
        # Looked up but never opened (the drive then knows it only by name), forgotten, then
        # renamed through the mount: the handle follows.
        (b / "lazy").write_text("lazy one")
        drop_kernel_caches()
        handles["lazy"] = name_to_handle(b / "lazy")
        drop_kernel_caches()
        os.rename(b / "lazy", b / "dir" / "lazy-renamed")
        drop_kernel_caches()
        log("forgotten, then renamed", read_by_handle, b, handles["lazy"])
        # Saved by rename (an editor's way): the old file's handle is stale, the new one's works.
        (b / "doc").write_text("version 1")
        handles["doc 1"] = name_to_handle(b / "doc")
        drop_kernel_caches()
        (b / "doc.tmp").write_text("version 2")
        os.rename(b / "doc.tmp", b / "doc")
        handles["doc 2"] = name_to_handle(b / "doc")
        drop_kernel_caches()
        log("replaced by a rename", read_by_handle, b, handles["doc 1"])
        log("the replacement", read_by_handle, b, handles["doc 2"])
        fd = open_by_handle(b, handles["f"])
        try:
            log("fstat links", os.fstat(fd).st_nlink)
        finally:
            os.close(fd)
        # The folder's parent is found again too (the kernel looks up ".." to connect it).
        dfd = open_by_handle(b, handles["dir"], os.O_RDONLY | os.O_DIRECTORY)
        try:
            log("parent of the folder", "dir" in os.listdir(f"/proc/self/fd/{dfd}/.."))
        finally:
            os.close(dfd)

    compare(t, sc)


@pytest.mark.timeout(90)
def test_remembering_forgotten_nodes_can_be_limited(new_drive):
    """DOCDRIVE_REMEMBERED_NODES bounds the memory kept for handles; 0 keeps none, so a
    handle lasts only while the kernel holds its node (as before export support)."""
    d = new_drive()
    d.extra_env = {"DOCDRIVE_REMEMBERED_NODES": "0"}
    d.mount()
    b = d.mnt / "Notes"
    (b / "kept-while-cached").write_text("x")
    h = name_to_handle(b / "kept-while-cached")
    assert read_by_handle(b, h) == "x"

    # The kernel's FORGET reaches the daemon after drop_caches returns, on another of its
    # threads: a use of the handle before the daemon took it brings the node back (and the next
    # drop forgets it again), so the drop is repeated until the daemon has forgotten it.
    def stale():
        drop_kernel_caches()
        time.sleep(0.05)
        try:
            read_by_handle(b, h)
        except OSError as e:
            assert e.errno == errno.ESTALE, e
            return True
        return False
    assert wait_until(stale, timeout=10), "the handle still opened the file 10 s after the kernel forgot its node"


# --------------------------------------------------------------------------- 4. mount source

def mountinfo(path) -> dict:
    """source, fstype and the per-mount options of the mount at `path`."""
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f.read().decode("utf-8", "surrogateescape").splitlines():
            parts = line.split(" ")
            dash = parts.index("-")
            if parts[4].encode().decode("unicode_escape") == str(path):
                return {"source": parts[dash + 2].encode().decode("unicode_escape"), "fstype": parts[dash + 1],
                        "options": set(parts[5].split(","))}
    raise AssertionError(f"{path} is not mounted")


def test_each_drive_mounts_under_its_own_source(drive, new_drive, base_dir):
    other = new_drive()
    other.mount()
    a, b = mountinfo(drive.mnt), mountinfo(other.mnt)
    assert a["fstype"] == b["fstype"] == "fuse.docdrive"
    # Like two disks: what findmnt and df show tells the two mounts apart, by the drive home.
    assert (a["source"], b["source"]) == (str(drive.home), str(other.home))
    for d in (drive, other):
        out = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(d.mnt)], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        assert out == str(d.home)
        df = subprocess.run(["df", "--output=source", str(d.mnt)], capture_output=True, text=True, timeout=30).stdout
        assert df.split("\n")[1].strip() == str(d.home)
    native = subprocess.run(["df", "--output=source", str(base_dir)], capture_output=True, text=True, timeout=30).stdout
    assert native.split("\n")[1].strip() not in (str(drive.home), str(other.home))


def test_fsname_and_dev_suid_options(new_drive):
    d = new_drive()
    d.mount(options="fsname=my drive,dev,suid")
    m = mountinfo(d.mnt)
    assert (m["source"], m["fstype"]) == ("my drive", "fuse.docdrive")
    if os.geteuid() == 0:
        assert not {"nodev", "nosuid"} & m["options"], m["options"]
    d.teardown()
    d.mount()
    assert {"nodev", "nosuid"} <= mountinfo(d.mnt)["options"]


# --------------------------------------------------------------------------- 5. xattr space

def test_xattr_space_is_the_backing_filesystems(t):
    """The backing filesystem's limit (ext4: one block of names and values) holds in the mount."""
    def sc(b, log):
        p = b / "many"
        p.write_bytes(b"x")
        n = 0
        try:
            while n < 2000:
                os.setxattr(p, f"user.attribute{n:04d}", b"value")
                n += 1
            log.note("stopped", None)
        except OSError as e:
            log.note("stopped", os.strerror(e.errno))
        log.note("count", n)
    items = dict(compare(t, sc))
    # On ext4 both stop early with ENOSPC (about a hundred of these); the README says so.
    assert items["count"] == 2000 or items["stopped"] == os.strerror(28), items


# --------------------------------------------------------------------------- access times

OLD = 1_577_836_800  # 2020-01-01: older than any mtime the test makes


def atime_moves(path: Path, read) -> bool:
    """Sets `path`'s atime to 2020 (its mtime stays newer), does `read`, says whether it moved."""
    st = os.stat(path)
    os.utime(path, (OLD, st.st_mtime))
    read()
    return os.stat(path).st_atime != OLD


@pytest.mark.timeout(90)
@pytest.mark.parametrize("option,table,files_move,folders_move", [
    ("relatime", "relatime", True, True),
    ("noatime", "noatime", False, False),
    ("nodiratime", "nodiratime", True, False),
])
def test_the_access_time_options_are_honoured(new_drive, option, table, files_move, folders_move):
    """-o noatime, relatime and nodiratime mount (relatime and nodiratime were refused by
    libfuse), show in the mount table, and do what they say to reads and listings through the
    mount (noatime moved atime as relatime did): the drive shows its backing files' atimes, and
    reads them with O_NOATIME where asked."""
    d = new_drive()
    d.mount(options=option)
    opts = mount_options(d.mnt)
    assert table in opts, opts
    f, folder = d.mnt / "Notes" / "f.txt", d.mnt / "Notes" / "folder"
    f.write_text("some text")
    folder.mkdir()
    (folder / "inside").write_text("x")
    assert atime_moves(f, lambda: f.read_text()) == files_move
    assert atime_moves(folder, lambda: os.listdir(folder)) == folders_move
    assert d.unmount().returncode == 0


@pytest.mark.timeout(90)
def test_what_the_drive_reads_for_itself_moves_no_access_time(new_drive):
    """Under relatime the first read after a change moves atime: the drive's own reads (the
    query index sniffing a file's kind, listing a folder a file was made in) must not, or a mail
    reader that tells new mail by atime < mtime sees it read, and a folder's atime moves when a
    file is made in it. Only the user's reads move them."""
    d = new_drive()
    d.mount()
    folder = d.mnt / "Notes" / "mail"
    folder.mkdir()
    box = folder / "inbox"  # no extension: its kind is read from its content
    box.write_bytes(b"From someone\n\nfirst mail\n")
    time.sleep(2)
    st = os.stat(box)
    os.utime(box, (OLD, st.st_mtime))
    os.utime(folder, (OLD, os.stat(folder).st_mtime))
    with open(box, "ab") as out:  # new mail: mtime moves, atime stays
        out.write(b"From another\n\nsecond mail\n")
    (folder / "new-file").write_text("made in the folder")
    assert wait_until(lambda: d.cli("query", "inbox").stdout.strip() != "", 10), "the query index did not see the mailbox"
    time.sleep(2)  # the index's reads are done
    assert os.stat(box).st_atime == OLD, "the drive's own read of the mailbox moved its atime"
    assert os.stat(folder).st_atime == OLD, "the drive's own listing of the folder moved its atime"
    assert d.unmount().returncode == 0


def test_strictatime_is_refused_with_its_reason_where_the_drive_home_cannot_honour_it(new_drive):
    d = new_drive()
    flags = os.statvfs(d.home).f_flag
    if flags & (os.ST_RELATIME | os.ST_NOATIME):
        d.mnt.mkdir(exist_ok=True)
        p = d.cli("mount", str(d.mnt), "-o", "strictatime", check=False)
        assert p.returncode == 4, p
        assert "strictatime needs the drive home on a file system mounted with strictatime" in p.stderr, p.stderr
        assert not is_docdrive_mount(d.mnt)
    else:  # a drive home on a strictatime file system: honoured by it
        d.mount(options="strictatime")
        assert "strictatime" in mount_options(d.mnt)
        assert d.unmount().returncode == 0
