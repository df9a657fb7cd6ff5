"""A private mount (no -o allow_other, the default): the kernel lets only the daemon's own user
in, so it leaves permission checks to the backing files, which make them for that user exactly as
they would natively (no default_permissions, so no folder GETATTR after each create or remove).
Checked as uid 1000 with a daemon of its own, and as root on the session's drive."""
import contextlib
import os
import stat
import struct
import subprocess

import pytest

from ddtest import OTHER_GID, OTHER_UID, Drive, as_user, err, mount_options

PRELUDE = """
import subprocess, struct
b = args[0]
result = {}
def rec(k, f):
    try:
        result[k] = f()
    except OSError as e:
        result[k] = errno.errorcode.get(e.errno, e.errno)
def mk(p):
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
    return "ok"
"""


def acl_blob(entries):
    """A system.posix_acl_access value: version 2, then (tag, perm) entries without ids."""
    tags = {"user_obj": 0x01, "group_obj": 0x04, "other": 0x20}
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tags[t], p, 0xFFFFFFFF) for t, p in entries)


@contextlib.contextmanager
def fuse_device_open_to_users():
    """libfuse opens /dev/fuse itself before it would fall back to fusermount3, so a user needs
    it readable and writable (udev makes it 0666 on a desktop; a bare VM may leave it 0600)."""
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    os.chmod("/dev/fuse", 0o666)
    try:
        yield
    finally:
        os.chmod("/dev/fuse", mode)


def chown_tree(top, uid, gid):
    os.lchown(top, uid, gid)
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), uid, gid)


@pytest.fixture(scope="module")
def user_drive(base_dir):
    """A drive of uid 1000, mounted privately by that user's own daemon; and a native folder."""
    d = Drive(base_dir / "private-user").create()
    native = base_dir / "private-user-native"
    native.mkdir()
    d.mnt.mkdir()
    chown_tree(d.base, OTHER_UID, OTHER_GID)
    chown_tree(native, OTHER_UID, OTHER_GID)
    d.mount_prefix = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_GID}", f"--groups={OTHER_GID}", "--"]
    with fuse_device_open_to_users():
        try:
            d.mount()
        except AssertionError as e:
            pytest.fail(str(e))
    yield d, native
    problems = d.teardown()
    assert not problems, f"teardown of the user's mount: {problems}"


def prepare(base, uid, gid):
    """The same tree in a backing folder and a native one, made as root (never through the
    mount, so the kernel has looked up none of it yet)."""
    base.mkdir()
    def f(name, mode, owner=(uid, gid), content=b"data\n"):
        p = base / name
        p.write_bytes(content)
        os.chown(p, *owner)
        os.chmod(p, mode)
    def d(name, mode, owner=(uid, gid)):
        p = base / name
        p.mkdir()
        os.chown(p, *owner)
        os.chmod(p, mode)
    f("ro.txt", 0o444)
    f("mine.txt", 0o644)
    f("script", 0o644, content=b"#!/bin/sh\necho ran\n")
    f("runnable", 0o755, content=b"#!/bin/sh\necho ran\n")
    f("roots.txt", 0o644, owner=(0, 0))
    d("rodir", 0o555)
    d("locked", 0o755)
    f("locked/f", 0o644)
    os.chmod(base / "locked", 0)
    d("sticky", 0o1777, owner=(0, 0))
    f("sticky/roots", 0o644, owner=(0, 0))
    os.chown(base, uid, gid)


USER_SCENARIO = """
R, W, X = os.R_OK, os.W_OK, os.X_OK
rec("write 0444", lambda: open(b + "/ro.txt", "w").close() or "ok")
rec("access 0444", lambda: [os.access(b + "/ro.txt", m) for m in (R, W, X)])
rec("unlink 0444", lambda: os.unlink(b + "/ro.txt") or "ok")
rec("create in 0555", lambda: mk(b + "/rodir/new"))
rec("access 0555", lambda: [os.access(b + "/rodir", m) for m in (R, W, X)])
rec("rename into 0555", lambda: os.rename(b + "/mine.txt", b + "/rodir/mine.txt") or "ok")
rec("stat in 000", lambda: os.stat(b + "/locked/f").st_size)
rec("list 000", lambda: os.listdir(b + "/locked"))
rec("chdir 000", lambda: os.chdir(b + "/locked") or "ok")
rec("access 000", lambda: [os.access(b + "/locked", m) for m in (R, W, X)])
rec("exec 0644", lambda: subprocess.run([b + "/script"], capture_output=True).returncode)
rec("exec 0755", lambda: subprocess.run([b + "/runnable"], capture_output=True, text=True).stdout)
def exec_after_acl():
    os.stat(b + "/runnable")  # the kernel has the mode with x bits
    os.setxattr(b + "/runnable", "system.posix_acl_access", bytes.fromhex(args[2]))
    return subprocess.run([b + "/runnable"], capture_output=True).returncode
rec("exec right after an ACL took x away", exec_after_acl)
rec("chmod root's", lambda: os.chmod(b + "/roots.txt", 0o666) or "ok")
rec("write root's", lambda: open(b + "/roots.txt", "a").close() or "ok")
rec("touch root's", lambda: os.utime(b + "/roots.txt") or "ok")
rec("unlink root's in sticky", lambda: os.unlink(b + "/sticky/roots") or "ok")
def acl():
    os.setxattr(b + "/mine.txt", "system.posix_acl_access", bytes.fromhex(args[1]))
    return oct(os.stat(b + "/mine.txt").st_mode)
rec("mode right after an ACL", acl)
rec("read after the ACL", lambda: open(b + "/mine.txt").read())
"""


def test_a_private_mount_leaves_permissions_to_the_backing_files(user_drive):
    d, native = user_drive
    assert "default_permissions" not in mount_options(d.mnt)
    assert "allow_other" not in mount_options(d.mnt)
    # The owner has no rights of its own: only the group and others may read.
    acl = acl_blob([("user_obj", 0), ("group_obj", 4), ("other", 4)]).hex()
    no_x = acl_blob([("user_obj", 6), ("group_obj", 4), ("other", 4)]).hex()
    res = {}
    for where, prep, use in (("mount", d.notes_backing / "perm", d.mnt / "Notes" / "perm"),
                             ("native", native / "perm", native / "perm")):
        prepare(prep, OTHER_UID, OTHER_GID)
        res[where] = as_user(PRELUDE + USER_SCENARIO, str(use), acl, no_x)
    assert res["mount"] == res["native"], f"\nmount:  {res['mount']}\nnative: {res['native']}"
    r = res["mount"]
    # What the native answers are, so that the comparison cannot pass with both sides wrong.
    assert r["write 0444"] == "EACCES" and r["access 0444"] == [True, False, False] and r["unlink 0444"] == "ok"
    assert r["create in 0555"] == "EACCES" and r["access 0555"] == [True, False, True]
    assert r["rename into 0555"] == "EACCES"
    assert r["stat in 000"] == r["list 000"] == r["chdir 000"] == "EACCES" and r["access 000"] == [False, False, False]
    assert r["exec 0644"] == "EACCES" and r["exec 0755"] == "ran\n" and r["exec right after an ACL took x away"] == "EACCES"
    assert r["chmod root's"] == "EPERM" and r["write root's"] == "EACCES" and r["touch root's"] == "EACCES"
    assert r["unlink root's in sticky"] == "EPERM"
    assert r["mode right after an ACL"] == oct(0o100044) and r["read after the ACL"] == "EACCES"


def test_the_session_drive_is_private(drive):
    assert "default_permissions" not in mount_options(drive.mnt)


def test_access_exec_and_acls_as_root(t):
    """Root on its own private mount gets what root gets natively: everything but running a
    file without an x bit; the drive's own levels stay read-only."""
    res = {}
    for base in (t.mnt, t.native):
        for name, mode in (("plain", 0o644), ("ro", 0o444), ("exe", 0o755)):
            (base / name).write_text("#!/bin/sh\necho ran\n")
            os.chmod(base / name, mode)
        (base / "closed").mkdir()
        os.chmod(base / "closed", 0)
        r = {n: [os.access(base / n, m) for m in (os.R_OK, os.W_OK, os.X_OK)] for n in ("plain", "ro", "exe", "closed")}
        r["exec plain"] = err(subprocess.run, [str(base / "plain")], capture_output=True, timeout=30)
        r["chdir closed"] = err(os.chdir, base / "closed")
        os.chdir("/")
        # cp -p style: create 0600, then a minimal ACL that means 0644 shows at once.
        p = base / "cp-p"
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
        os.stat(p)
        os.setxattr(p, "system.posix_acl_access", acl_blob([("user_obj", 6), ("group_obj", 4), ("other", 4)]))
        r["mode after the ACL"] = oct(os.stat(p).st_mode)
        res[base] = r
    assert res[t.mnt] == res[t.native]
    r = res[t.mnt]
    assert r["plain"] == [True, True, False] and r["ro"] == [True, True, False] and r["closed"] == [True, True, True]
    assert r["exec plain"] == "EACCES" and r["chdir closed"] is None and r["mode after the ACL"] == oct(0o100644)
    assert os.access(t.root, os.R_OK | os.X_OK) and not os.access(t.root, os.W_OK)
    assert err(os.mkdir, t.root / "new-top-level") == "EACCES"
