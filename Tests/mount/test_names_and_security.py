"""Names (length limits, odd bytes, UTF-8), paths near and beyond PATH_MAX, and that nothing done
through the mount reaches outside the backing folder (symlinks are never followed by the drive)."""
import os
import stat

import pytest

from ddtest import compare, err

NAME_MAX = 255
PATH_MAX = 4096


def touch(path):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def test_name_length_limits_match_native(t):
    ok255 = "n" * NAME_MAX
    long256 = "n" * (NAME_MAX + 1)
    utf8_255 = "é" * 127 + "x"  # 255 bytes
    utf8_256 = "é" * 128  # 256 bytes in 128 characters

    def sc(b, log):
        touch(b / "f")
        (b / "d").mkdir()
        for label, name in (("255", ok255), ("256", long256), ("utf8-255", utf8_255), ("utf8-256", utf8_256)):
            log(f"create {label}", touch, b / name)
            log(f"stat {label}", lambda: os.stat(b / name).st_size)
            log(f"mkdir {label}", os.mkdir, b / "d" / name)
            log(f"symlink {label}", os.symlink, "target", b / "d" / (name[:-1] + "s" if label.endswith("255") else name))
            log(f"link {label}", os.link, b / "f", b / "d" / (name[:-1] + "l" if label.endswith("255") else name))
            log(f"mkfifo {label}", os.mkfifo, b / "d" / (name[:-1] + "p" if label.endswith("255") else name))
            log(f"rename to {label}", os.rename, b / "f", b / (name[:-1] + "r" if label.endswith("255") else name))
            if label.endswith("255"):
                os.rename(b / (name[:-1] + "r"), b / "f")
            log(f"unlink {label}", os.unlink, b / "d" / name)
            log(f"rmdir {label}", os.rmdir, b / "d" / name)
        log("listing", sorted(os.listdir(b)))
        log("listing d", sorted(os.listdir(b / "d")))
    compare(t, sc)


def test_odd_names_match_native(t):
    names = [b"with space", b" leading", b"trailing ", b"-dash", b"new\nline", b"tab\tname", b"back\\slash",
             b"quote\"'", b"star*?[]", b"\x01control", b"\xff\xfe-not-utf8", "日本語-ファイル".encode(),
             "emoji-\U0001F600".encode(), b"...", b".hidden", b"a:b", b"%s%n", b"~tilde", b"CaseName", b"casename"]

    def sc(b, log):
        bb = os.fsencode(str(b))
        for n in names:
            log(n, touch, bb + b"/" + n)
            log(b"dir-" + n, os.mkdir, bb + b"/dir-" + n)
        log("listing", sorted(os.listdir(bb)))
        for n in names:
            log(b"rename " + n, os.rename, bb + b"/" + n, bb + b"/r-" + n)
        log("listing 2", sorted(os.listdir(bb)))
    compare(t, sc)


def _build_deep(base_fd, component, depth):
    """mkdir component/component/... `depth` times using dir_fd steps only; returns the deepest fd."""
    fd = os.dup(base_fd)
    for _ in range(depth):
        os.mkdir(component, dir_fd=fd)
        nfd = os.open(component, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


@pytest.mark.timeout(120)
def test_paths_near_and_beyond_path_max(t):
    comp = "c" * 200

    def sc(b, log):
        base = os.open(b, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # 20 levels of 201 bytes: a relative path of 4020 bytes, then the name to reach 4095.
            fd = _build_deep(base, comp, 20)
            try:
                rel = "/".join([comp] * 20)
                last = "z" * (PATH_MAX - 1 - len(rel) - 1)
                log("create at bottom", lambda: os.close(os.open(last, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)))
                log("relpath len", len(rel + "/" + last))
                log("stat 4095-byte relative path", lambda: os.stat(rel + "/" + last, dir_fd=base).st_size)
                log("stat 4096-byte relative path", lambda: os.stat(rel + "/" + last + "z", dir_fd=base).st_size)
                # Deeper still: far beyond PATH_MAX from the top, fine step by step.
                deeper = _build_deep(fd, comp, 30)
                try:
                    with os.fdopen(os.open("deep-file", os.O_CREAT | os.O_RDWR, 0o644, dir_fd=deeper), "r+b") as f:
                        f.write(b"deep content")
                        f.seek(0)
                        log("read deep", f.read())
                    log("stat deep", lambda: os.stat("deep-file", dir_fd=deeper).st_size)
                    log("rename deep", os.rename, "deep-file", "deep-renamed", src_dir_fd=deeper, dst_dir_fd=deeper)
                    log("symlink deep", os.symlink, "deep-renamed", "deep-link", dir_fd=deeper)
                    log("readlink deep", os.readlink, "deep-link", dir_fd=deeper)
                    log("xattr deep", os.setxattr, f"/proc/self/fd/{deeper}/deep-renamed", "user.k", b"v")
                    log("listing deep", sorted(os.listdir(deeper)))
                finally:
                    os.close(deeper)
            finally:
                os.close(fd)
        finally:
            os.close(base)
    compare(t, sc)
    # The drive's own attribute works at that depth too.
    fd = os.open(t.mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(50):
            nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        assert len(os.getxattr(f"/proc/self/fd/{fd}/deep-renamed", "user.docdrive.id")) >= 16
    finally:
        os.close(fd)


def test_absolute_path_over_path_max_is_enametoolong(t):
    long_path = str(t.mnt) + "/" + "/".join(["d" * 250] * 20)
    assert err(os.stat, long_path) == "ENAMETOOLONG"
    assert err(os.mkdir, long_path) == "ENAMETOOLONG"


# --------------------------------------------------------------------------- staying inside

def test_operations_on_a_planted_symlink_never_touch_its_target(t):
    """A symlink put in the backing folder that points outside: lchown, utime, xattrs, link,
    rename and unlink through the mount act on the link, never on what it points to."""
    outside = t.native / "outside-secret"
    outside.write_bytes(b"secret")
    os.chmod(outside, 0o600)
    before = os.stat(outside)
    os.symlink(str(outside), t.backing / "evil")
    m = t.mnt / "evil"
    assert os.readlink(m) == str(outside)
    os.lchown(m, 1000, 1000)
    os.utime(m, ns=(1, 2), follow_symlinks=False)
    assert err(os.setxattr, m, "user.x", b"1", follow_symlinks=False) == "EPERM"
    assert err(os.getxattr, m, "user.x", follow_symlinks=False) == "ENODATA"
    os.link(m, t.mnt / "evil-hard", follow_symlinks=False)
    assert os.path.islink(t.mnt / "evil-hard")
    os.rename(m, t.mnt / "evil2")
    os.unlink(t.mnt / "evil2")
    os.unlink(t.mnt / "evil-hard")
    after = os.stat(outside)
    assert (after.st_uid, after.st_gid, after.st_mode, after.st_mtime_ns, after.st_nlink) == \
        (before.st_uid, before.st_gid, before.st_mode, before.st_mtime_ns, before.st_nlink)
    assert outside.read_bytes() == b"secret"
    assert os.listxattr(outside) == [] or "user.x" not in os.listxattr(outside)


def test_folder_swapped_for_symlink_behind_the_drive(t):
    """A folder the kernel knows, replaced in the backing by a symlink to somewhere else: the
    mount shows the symlink (as native would), and creating through the stale folder node does
    not land in the symlink's target."""
    outside = t.native / "elsewhere"
    outside.mkdir()
    (t.mnt / "d").mkdir()
    (t.mnt / "d" / "inner").write_bytes(b"in")
    os.stat(t.mnt / "d" / "inner")
    os.rename(t.backing / "d", t.backing / "d.moved")
    os.symlink(str(outside), t.backing / "d")
    # Through an fd held on the old folder, creation goes to the old folder, not the target.
    fd = os.open(t.mnt / "d.moved", os.O_RDONLY | os.O_DIRECTORY)
    try:
        touch(f"/proc/self/fd/{fd}/made-inside")
    finally:
        os.close(fd)
    assert (t.backing / "d.moved" / "made-inside").exists()
    assert os.listdir(outside) == []
    import time
    time.sleep(1.2)
    assert stat.S_ISLNK(os.lstat(t.mnt / "d").st_mode)
    assert os.readlink(t.mnt / "d") == str(outside)


def test_no_writes_in_the_read_only_top_levels(root):
    for folder in (root, root / ".by-app", root / ".by-app" / "org.example.notes"):
        assert err(touch, folder / "new-file") == "EACCES", folder
        assert err(os.mkdir, folder / "new-dir") == "EACCES", folder
        assert err(os.symlink, "x", folder / "new-link") == "EACCES", folder
        assert err(os.mkfifo, folder / "new-fifo") == "EACCES", folder
    assert err(os.rmdir, root / "Notes") in ("EACCES", "EPERM", "EBUSY")
    assert err(os.rename, root / "Notes", root / "Renamed") in ("EACCES", "EPERM", "EBUSY")
    assert err(os.rename, root / ".by-app", root / "x") in ("EACCES", "EPERM", "EBUSY")
    assert err(os.chmod, root, 0o777) in ("EACCES", "EPERM")
    assert err(os.chown, root / ".by-app", 1000, 1000) in ("EACCES", "EPERM")
    assert err(os.setxattr, root, "user.x", b"1") in ("EACCES", "EPERM", "ENOTSUP")
