"""Ownership and permissions with a root-run daemon mounted -o allow_other: what another user
creates is theirs, the kernel's permission checks hold, setuid/setgid are cleared like on a
native filesystem. Each scenario runs as uid 1000 (setpriv) in the mount and in a native folder."""
import errno
import os
import struct

import pytest

from ddtest import EXTRA_GID, OTHER_GID, OTHER_UID, Drive, as_user, mount_options

@pytest.fixture(scope="module")
def drive(base_dir):
    """This module's own drive, shared with other users (-o allow_other, so the kernel checks
    permissions from the attributes: default_permissions), for the fixtures `t` and `root`."""
    d = Drive(base_dir / "shared-with-others").create()
    try:
        d.mount(options="allow_other")
    except AssertionError as e:
        pytest.fail(str(e))
    yield d
    problems = d.teardown()
    assert not problems, f"teardown of the shared mount: {problems}"


def test_a_shared_mount_has_the_kernel_check_permissions(drive):
    assert {"allow_other", "default_permissions"} <= mount_options(drive.mnt)


def test_the_drive_drops_setuid_and_setgid_itself(drive):
    """On Linux 5.11+ the drive asks for FUSE_HANDLE_KILLPRIV_V2: the kernel then stops asking
    for security.capability before every write(2), and the drive drops setuid/setgid where a
    native filesystem would (the tests below check that it does, as natively)."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    line = next((l for l in drive.log_path.read_text().splitlines() if "kernel connection ready" in l), "")
    assert line, "the daemon logged no INIT"
    want = "the drive" if (major, minor) >= (5, 11) else "the kernel"
    assert f"setuid/setgid dropped by {want}" in line, line


# The child's helpers: rec(key, fn) stores fn()'s result or its errno name in `result`.
PRELUDE = """
b = args[0]
result = {}
def rec(k, f):
    try:
        result[k] = f()
    except OSError as e:
        result[k] = errno.errorcode.get(e.errno, e.errno)
def st(p):
    s = os.lstat(p)
    return [s.st_uid, s.st_gid, oct(s.st_mode)]
def mk(p, mode=0o644, flags=os.O_CREAT | os.O_WRONLY):
    os.close(os.open(p, flags, mode))
    return "ok"
"""


def both(t, code, prepare=None, **kw):
    """Prepares both folders as root, runs `code` as the other user in each, compares results."""
    res = {}
    for where in ("mnt", "native"):
        base = getattr(t, where)
        os.chmod(base, 0o777)
        if prepare:
            prepare(base)
        res[where] = as_user(PRELUDE + code, str(base), **kw)
    assert res["mnt"] == res["native"], f"\nmount:  {res['mnt']}\nnative: {res['native']}"
    assert res["mnt"], "the scenario recorded nothing"
    return res["mnt"]


def test_items_created_by_another_user_belong_to_them(t):
    r = both(t, """
rec("file", lambda: mk(b + "/f"))
rec("dir", lambda: os.mkdir(b + "/d"))
rec("symlink", lambda: os.symlink("f", b + "/s"))
rec("fifo", lambda: os.mkfifo(b + "/p"))
rec("mknod", lambda: os.mknod(b + "/n", stat.S_IFREG | 0o600))
rec("hard link", lambda: os.link(b + "/f", b + "/h"))
rec("nested", lambda: mk(b + "/d/inner"))
for n in ("f", "d", "s", "p", "n", "h", "d/inner"):
    rec("stat " + n, lambda: st(b + "/" + n))
""")
    assert r["stat f"][:2] == [OTHER_UID, OTHER_GID]
    assert r["stat s"][:2] == [OTHER_UID, OTHER_GID]
    for n in ("f", "d", "s", "p", "n", "d/inner"):
        b = os.lstat(t.backing / n)
        assert (b.st_uid, b.st_gid) == (OTHER_UID, OTHER_GID), n


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_creation_modes_follow_the_callers_umask(t, umask):
    r = both(t, """
rec("file 666", lambda: mk(b + "/f666", 0o666))
rec("file 777", lambda: mk(b + "/f777", 0o777))
rec("dir 777", lambda: os.mkdir(b + "/d777", 0o777))
rec("dir 1777", lambda: os.mkdir(b + "/d1777", 0o1777))
rec("fifo 666", lambda: os.mkfifo(b + "/p666", 0o666))
rec("file 4755", lambda: mk(b + "/f4755", 0o4755))
rec("file 2755", lambda: mk(b + "/f2755", 0o2755))
for n in ("f666", "f777", "d777", "d1777", "p666", "f4755", "f2755"):
    rec(n, lambda: st(b + "/" + n))
""", umask=umask)
    assert r["f666"][2] == oct(0o100666 & ~umask)


def test_setgid_folder_gives_its_group(t):
    def prepare(base):
        os.mkdir(base / "sg", 0o777)
        os.chown(base / "sg", 0, EXTRA_GID)
        os.chmod(base / "sg", 0o2777)

    both(t, """
rec("file", lambda: mk(b + "/sg/f", 0o2755))
rec("dir", lambda: os.mkdir(b + "/sg/d"))
rec("file stat", lambda: st(b + "/sg/f"))
rec("dir stat", lambda: st(b + "/sg/d"))
rec("fifo", lambda: os.mkfifo(b + "/sg/p"))
rec("fifo stat", lambda: st(b + "/sg/p"))
rec("symlink", lambda: os.symlink("x", b + "/sg/s"))
rec("symlink stat", lambda: st(b + "/sg/s"))
""", prepare=prepare, groups=(OTHER_GID, EXTRA_GID))
    # Not a member of the folder's group: a requested setgid bit is dropped on the new file.
    t2 = type(t)(mnt=t.mnt / "x", native=t.native / "x", backing=t.backing / "x", root=t.root, drive=t.drive)
    t2.mnt.mkdir()
    t2.native.mkdir()
    both(t2, """
rec("file", lambda: mk(b + "/sg/f", 0o2755))
rec("file stat", lambda: st(b + "/sg/f"))
""", prepare=prepare, groups=(OTHER_GID,))


def test_write_by_non_owner_clears_setuid_and_setgid(t):
    def prepare(base):
        for n in ("w", "t", "a", "g", "o"):
            p = base / n
            p.write_bytes(b"original content")
            os.chmod(p, 0o6777)
        # Setgid with group exec, no setuid. (Setgid *without* group exec is left alone by the
        # kernel's FUSE code, unlike native: a kernel limitation without handle_killpriv.)
        os.chmod(base / "g", 0o2775)
        os.chmod(base / "g", 0o2777)

    both(t, """
def write(n, data=b"X"):
    fd = os.open(b + "/" + n, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return "ok"
rec("write", lambda: write("w"))
rec("after write", lambda: st(b + "/w"))
rec("truncate", lambda: os.truncate(b + "/t", 3))
rec("after truncate", lambda: st(b + "/t"))
def append(n):
    with open(b + "/" + n, "ab") as f:
        f.write(b"appended")
    return "ok"
rec("append", lambda: append("a"))
rec("after append", lambda: st(b + "/a"))
def trunc_open(n):
    os.close(os.open(b + "/" + n, os.O_WRONLY | os.O_TRUNC))
    return "ok"
rec("open O_TRUNC", lambda: trunc_open("o"))
rec("after O_TRUNC", lambda: st(b + "/o"))
rec("write g", lambda: write("g"))
rec("after write g", lambda: st(b + "/g"))
rec("content", lambda: open(b + "/w", "rb").read().decode())
""", prepare=prepare)
    m = os.stat(t.mnt / "w")
    assert m.st_mode & 0o6000 == 0, oct(m.st_mode)
    assert os.stat(t.backing / "w").st_mode & 0o6000 == 0


def test_another_users_write_while_root_has_the_file_open(t):
    """Root holds the files open through the mount (passed through to the backing files), and
    another user appends to them: the kernel takes only passed-through opens of a file beside
    one, so the drive passes that writer through too, and drops setuid/setgid at its open (a
    native filesystem drops them at its write: compared after it)."""
    held = []

    def prepare(base):
        for n, mode in (("plain", 0o666), ("setid", 0o6777)):
            (base / n).write_bytes(b"original\n")
            os.chmod(base / n, mode)
            held.append(os.open(base / n, os.O_RDONLY))

    try:
        both(t, """
def append(n):
    with open(b + "/" + n, "ab") as f:
        f.write(b"appended by another user\\n")
    return "ok"
rec("append plain", lambda: append("plain"))
rec("append setid", lambda: append("setid"))
rec("after", lambda: [st(b + "/plain"), st(b + "/setid")])
rec("content", lambda: [open(b + "/" + n, "rb").read().decode() for n in ("plain", "setid")])
""", prepare=prepare)
    finally:
        for fd in held:
            os.close(fd)
    assert os.stat(t.backing / "setid").st_mode & 0o6000 == 0


def test_a_write_removes_a_file_capability_as_natively(t):
    """A write removes the file's capability (security.capability), root's too: the kernel asks
    the drive whether the file has one before the first write. A file the drive has just created
    is known to have none until one is set on it; one set through the mount is then seen."""
    cap = struct.pack("<5I", 0x02000001, 1 << 10, 0, 0, 0)  # revision 2, effective, cap_net_bind_service
    for base in (t.mnt, t.native):
        p = base / "capped"
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o755)
        try:
            os.write(fd, b"made")
            os.setxattr(p, "security.capability", cap)
            assert os.getxattr(p, "security.capability") == cap, base
            os.write(fd, b" and written again")
        finally:
            os.close(fd)
        with pytest.raises(OSError) as e:
            os.getxattr(p, "security.capability")
        assert e.value.errno == errno.ENODATA, base
        os.setxattr(p, "security.capability", cap)
        with open(p, "ab") as f:
            f.write(b", appended")
        with pytest.raises(OSError) as e:
            os.getxattr(p, "security.capability")
        assert e.value.errno == errno.ENODATA, base
    with pytest.raises(OSError) as e:
        os.getxattr(t.backing / "capped", "security.capability")
    assert e.value.errno == errno.ENODATA
    assert (t.mnt / "capped").read_bytes() == (t.native / "capped").read_bytes() == b"made and written again, appended"


def test_owner_write_keeps_setuid_bits_root_write_too(t):
    """Only a write by someone else (without CAP_FSETID) drops the bits."""
    def prepare(base):
        p = base / "mine"
        p.write_bytes(b"x")
        os.chown(p, OTHER_UID, OTHER_GID)
        os.chmod(p, 0o6755)

    both(t, """
with open(b + "/mine", "ab") as f:
    f.write(b"more")
rec("owner wrote", lambda: st(b + "/mine"))
""", prepare=prepare)
    for base in (t.mnt, t.native):
        with open(base / "mine", "ab") as f:
            f.write(b"root")
    assert oct(os.stat(t.mnt / "mine").st_mode) == oct(os.stat(t.native / "mine").st_mode)


def test_chown_to_supplementary_group_and_refusals(t):
    def prepare(base):
        (base / "root-file").write_bytes(b"r")
        os.chmod(base / "root-file", 0o666)

    r = both(t, """
rec("create", lambda: mk(b + "/f"))
rec("chgrp to supplementary", lambda: os.chown(b + "/f", -1, 2000))
rec("after", lambda: st(b + "/f"))
rec("chown uid+gid to self", lambda: os.chown(b + "/f", 1000, 1000))
rec("chgrp to foreign group", lambda: os.chown(b + "/f", -1, 3000))
rec("give away", lambda: os.chown(b + "/f", 0, -1))
rec("chgrp someone else's file", lambda: os.chown(b + "/root-file", -1, 1000))
rec("chmod someone else's file", lambda: os.chmod(b + "/root-file", 0o777))
rec("utime explicit on someone else's", lambda: os.utime(b + "/root-file", (1, 1)))
rec("utime now with write access", lambda: os.utime(b + "/root-file"))
rec("setxattr with write access", lambda: os.setxattr(b + "/root-file", "user.k", b"v"))
rec("final", lambda: [st(b + "/f"), st(b + "/root-file")])
""", prepare=prepare, groups=(OTHER_GID, EXTRA_GID))
    assert os.stat(t.mnt / "f").st_gid == OTHER_GID
    assert r["chgrp to supplementary"] is None and r["after"][1] == EXTRA_GID


def test_permission_checks_for_another_user(t):
    def prepare(base):
        (base / "secret").write_bytes(b"s")
        os.chmod(base / "secret", 0o600)
        (base / "readonly").write_bytes(b"r")
        os.chmod(base / "readonly", 0o644)
        (base / "locked").mkdir(0o755)
        (base / "locked" / "x").write_bytes(b"x")
        (base / "noexec").mkdir(0o700)
        (base / "noexec" / "x").write_bytes(b"x")
        (base / "sticky").mkdir()
        os.chmod(base / "sticky", 0o1777)
        (base / "sticky" / "roots").write_bytes(b"r")
        os.chmod(base / "sticky" / "roots", 0o666)
        (base / "mine-other-group").write_bytes(b"m")
        os.chown(base / "mine-other-group", OTHER_UID, EXTRA_GID)

    both(t, """
rec("read secret", lambda: open(b + "/secret", "rb").read())
rec("write readonly", lambda: mk(b + "/readonly", flags=os.O_WRONLY))
rec("create in locked", lambda: mk(b + "/locked/new"))
rec("unlink in locked", lambda: os.unlink(b + "/locked/x"))
rec("rename out of locked", lambda: os.rename(b + "/locked/x", b + "/x"))
rec("traverse noexec", lambda: os.stat(b + "/noexec/x").st_size)
rec("list noexec", lambda: os.listdir(b + "/noexec"))
rec("unlink root's file in sticky", lambda: os.unlink(b + "/sticky/roots"))
rec("rename root's file in sticky", lambda: os.rename(b + "/sticky/roots", b + "/sticky/mine"))
rec("write root's file in sticky", lambda: mk(b + "/sticky/roots", flags=os.O_WRONLY))
rec("own file in sticky", lambda: mk(b + "/sticky/own"))
rec("unlink own in sticky", lambda: os.unlink(b + "/sticky/own"))
rec("truncate readonly", lambda: os.truncate(b + "/readonly", 0))
rec("rmdir locked", lambda: os.rmdir(b + "/locked"))
rec("chmod g+s, not in the group", lambda: os.chmod(b + "/mine-other-group", 0o2755))
rec("mode after", lambda: st(b + "/mine-other-group"))
rec("chmod u+s", lambda: os.chmod(b + "/mine-other-group", 0o4755))
rec("mode after u+s", lambda: st(b + "/mine-other-group"))
rec("chown to my own group", lambda: os.chown(b + "/mine-other-group", -1, 1000))
rec("mode after chown", lambda: st(b + "/mine-other-group"))
""", prepare=prepare)


def acl_blob(entries):
    """A system.posix_acl_* value: version 2, then (tag, perm, id) entries."""
    import struct
    tags = {"user_obj": 0x01, "user": 0x02, "group_obj": 0x04, "group": 0x08, "mask": 0x10, "other": 0x20}
    out = struct.pack("<I", 2)
    for tag, perm, ident in entries:
        out += struct.pack("<HHI", tags[tag], perm, 0xFFFFFFFF if ident is None else ident)
    return out


def test_posix_acls_are_enforced_and_keep_the_mode(t):
    """An ACL that denies one user what "other" allows is enforced as natively; setting an ACL
    (as cp -p does) shows its mode at once."""
    deny = acl_blob([("user_obj", 6, None), ("user", 0, OTHER_UID), ("group_obj", 4, None), ("mask", 4, None),
                     ("other", 4, None)])
    grant = acl_blob([("user_obj", 6, None), ("user", 6, OTHER_UID), ("group_obj", 4, None), ("mask", 6, None),
                      ("other", 0, None)])

    def prepare(base):
        for n, blob in (("denied", deny), ("granted", grant)):
            p = base / n
            p.write_bytes(b"acl")
            os.chmod(p, 0o644)
            os.setxattr(p, "system.posix_acl_access", blob)

    r = both(t, """
rec("read denied", lambda: open(b + "/denied", "rb").read().decode())
rec("write granted", lambda: mk(b + "/granted", flags=os.O_WRONLY))
rec("read granted", lambda: open(b + "/granted", "rb").read().decode())
rec("modes", lambda: [st(b + "/denied"), st(b + "/granted")])
""", prepare=prepare)
    assert r["read denied"] == "EACCES" and r["write granted"] == "ok"
    # cp -p style: create 0600, then set a minimal ACL that means 0644: the mode shows at once.
    for base in (t.mnt, t.native):
        p = base / "cp-p"
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
        os.setxattr(p, "system.posix_acl_access",
                    acl_blob([("user_obj", 6, None), ("group_obj", 4, None), ("other", 4, None)]))
    assert oct(os.stat(t.mnt / "cp-p").st_mode) == oct(os.stat(t.native / "cp-p").st_mode) == oct(0o100644)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_default_acl_inheritance(t, umask):
    """A folder's default ACL, not the umask, decides the mode of what is created in it."""
    default = acl_blob([("user_obj", 7, None), ("user", 7, OTHER_UID), ("group_obj", 5, None), ("mask", 7, None),
                        ("other", 5, None)])

    def prepare(base):
        (base / "inherit").mkdir(0o777)
        os.chmod(base / "inherit", 0o777)
        os.setxattr(base / "inherit", "system.posix_acl_default", default)

    both(t, """
rec("file", lambda: mk(b + "/inherit/f", 0o666))
rec("dir", lambda: os.mkdir(b + "/inherit/d", 0o777))
rec("fifo", lambda: os.mkfifo(b + "/inherit/p", 0o666))
rec("modes", lambda: [st(b + "/inherit/" + n) for n in ("f", "d", "p")])
rec("acl", lambda: os.getxattr(b + "/inherit/f", "system.posix_acl_access").hex())
rec("dir default acl", lambda: os.getxattr(b + "/inherit/d", "system.posix_acl_default").hex())
""", prepare=prepare, umask=umask)
