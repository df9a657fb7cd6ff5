"""The drive's own levels: the root (public apps and stores by display name, .by-app), the
per-app views, EXDEV between top-level folders, and changes made behind the mount's back in a
backing folder showing within the 1 s attribute/entry timeout."""
import errno
import os
import shutil
import stat
import subprocess
import time
import uuid

import pytest

from ddtest import NOTES_ID, SECRET_ID, err, wait_until


def test_root_lists_public_apps_stores_and_by_app(root):
    assert sorted(os.listdir(root)) == sorted(["Notes", "Work", ".by-app"])
    st = os.stat(root)
    assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o555
    assert sorted(os.listdir(root / ".by-app")) == sorted([NOTES_ID, SECRET_ID])
    for app in (NOTES_ID, SECRET_ID):
        assert sorted(os.listdir(root / ".by-app" / app)) == ["Data", "Documents", "Inbox"]
    # readdir and lookup agree on every entry, and "." / ".." are there
    for d in (root, root / ".by-app", root / ".by-app" / NOTES_ID):
        for e in os.scandir(d):
            assert e.is_dir(), e.path
            assert os.stat(e.path).st_ino == e.inode(), e.path
    assert err(os.stat, root / "Secret") == "ENOENT"
    assert err(os.stat, root / ".by-app" / "no.such.app") == "ENOENT"
    assert err(os.stat, root / ".by-app" / NOTES_ID / "Other") == "ENOENT"


def test_top_level_folders_are_their_backing_folders(root, drive):
    pairs = [(root / "Notes", drive.notes_backing), (root / "Work", drive.work_backing)]
    for app in (NOTES_ID, SECRET_ID):
        for f in ("Documents", "Data", "Inbox"):
            pairs.append((root / ".by-app" / app / f, drive.app_folder(app, f)))
    for m, b in pairs:
        sm, sb = os.stat(m), os.stat(b)
        assert (sm.st_ino, sm.st_mode, sm.st_uid, sm.st_gid) == (sb.st_ino, sb.st_mode, sb.st_uid, sb.st_gid), m


def test_same_documents_through_both_views(t, drive):
    (t.mnt / "shared.txt").write_text("one")
    other = drive.mnt / ".by-app" / NOTES_ID / "Documents" / t.mnt.name / "shared.txt"
    assert other.read_text() == "one"
    other.write_text("two")
    assert (t.mnt / "shared.txt").read_text() == "two"
    assert os.stat(other).st_ino == os.stat(t.mnt / "shared.txt").st_ino


def test_private_data_never_appears_at_the_top(root, drive):
    marker = f"private-{uuid.uuid4().hex}"
    secret_data = root / ".by-app" / SECRET_ID / "Data"
    (secret_data / marker).write_text("private")
    notes_data = root / ".by-app" / NOTES_ID / "Data"
    (notes_data / (marker + "-notes")).write_text("private too")
    found = []
    for top in os.listdir(root):
        if top == ".by-app":
            continue
        for dirpath, dirnames, filenames in os.walk(root / top):
            found += [n for n in filenames + dirnames if n.startswith(marker)]
    assert found == []
    assert (drive.app_folder(SECRET_ID, "Data") / marker).read_text() == "private"
    # The private app's Documents stay private too (it is not public).
    (root / ".by-app" / SECRET_ID / "Documents" / marker).write_text("x")
    assert not any(marker in n for n in os.listdir(root / "Notes") + os.listdir(root / "Work"))


def test_renames_and_links_across_top_level_folders_are_exdev(t, root):
    (t.mnt / "f").write_text("content")
    work_dir = root / "Work" / t.mnt.name
    work_dir.mkdir()
    try:
        assert err(os.rename, t.mnt / "f", work_dir / "f") == "EXDEV"
        assert err(os.link, t.mnt / "f", work_dir / "f") == "EXDEV"
        data_dir = root / ".by-app" / NOTES_ID / "Data"
        assert err(os.rename, t.mnt / "f", data_dir / f"{t.mnt.name}-f") == "EXDEV"
        assert err(os.rename, t.mnt, work_dir / "moved-dir") == "EXDEV"
        # mv falls back to copy + unlink, for a file and for a folder tree.
        subprocess.run(["mv", str(t.mnt / "f"), str(work_dir / "f")], check=True, timeout=60)
        assert (work_dir / "f").read_text() == "content"
        assert not (t.mnt / "f").exists()
        (t.mnt / "tree" / "sub").mkdir(parents=True)
        (t.mnt / "tree" / "sub" / "leaf").write_text("leaf")
        subprocess.run(["mv", str(t.mnt / "tree"), str(work_dir / "tree")], check=True, timeout=60)
        assert (work_dir / "tree" / "sub" / "leaf").read_text() == "leaf"
        assert not (t.mnt / "tree").exists()
        # Notes/ and .by-app/ID/Documents/ are two top-level folders of the mount (one backing
        # folder, two views): EXDEV too, and mv still works.
        (t.mnt / "g").write_text("g")
        (t.mnt / "gd").mkdir()
        via_app = root / ".by-app" / NOTES_ID / "Documents" / t.mnt.name
        assert err(os.rename, t.mnt / "g", via_app / "g2") == "EXDEV"
        assert err(os.rename, t.mnt / "gd", via_app / "gd2") == "EXDEV"
        assert err(os.link, t.mnt / "g", via_app / "g3") == "EXDEV"
        subprocess.run(["mv", str(t.mnt / "g"), str(via_app / "g2")], check=True, timeout=60)
        subprocess.run(["mv", str(t.mnt / "gd"), str(via_app / "gd2")], check=True, timeout=60)
        assert (t.mnt / "g2").read_text() == "g" and (t.mnt / "gd2").is_dir()
        assert not (t.mnt / "g").exists() and not (t.mnt / "gd").exists()
    finally:
        shutil.rmtree(work_dir)


def test_store_folder_is_a_normal_tree(root, drive):
    d = root / "Work" / f"store-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    try:
        (d / "report.odt").write_bytes(b"PK\x03\x04 fake")
        os.rename(d / "report.odt", d / "report-v2.odt")
        assert (drive.work_backing / d.name / "report-v2.odt").read_bytes() == b"PK\x03\x04 fake"
        assert sorted(os.listdir(d)) == ["report-v2.odt"]
    finally:
        shutil.rmtree(d)


# --------------------------------------------------------------------------- behind the mount's back

def test_new_and_removed_backing_files_show_within_a_second(t):
    assert err(os.stat, t.mnt / "later") == "ENOENT"  # a lookup that fails first
    os.listdir(t.mnt)
    (t.backing / "later").write_text("made behind the mount")
    (t.backing / "later-dir").mkdir()
    assert wait_until(lambda: "later" in os.listdir(t.mnt) and (t.mnt / "later").exists(), 1.5)
    assert (t.mnt / "later").read_text() == "made behind the mount"
    assert (t.mnt / "later-dir").is_dir()
    os.unlink(t.backing / "later")
    assert wait_until(lambda: not (t.mnt / "later").exists(), 1.5)
    assert "later" not in os.listdir(t.mnt)
    os.rename(t.backing / "later-dir", t.backing / "renamed-dir")
    assert wait_until(lambda: (t.mnt / "renamed-dir").is_dir() and not (t.mnt / "later-dir").exists(), 1.5)


def test_content_changed_in_backing_shows_within_a_second(t):
    p, b = t.mnt / "f", t.backing / "f"
    p.write_bytes(b"A" * 100)
    assert p.read_bytes() == b"A" * 100  # now in the page cache
    os.stat(p)
    # Same size, new content.
    with open(b, "r+b") as f:
        f.write(b"B" * 100)
    assert wait_until(lambda: p.read_bytes() == b"B" * 100, 1.5), p.read_bytes()[:10]
    # Grown behind the mount's back.
    with open(b, "ab") as f:
        f.write(b"C" * 50)
    assert wait_until(lambda: os.stat(p).st_size == 150, 1.5), os.stat(p).st_size
    assert p.read_bytes() == b"B" * 100 + b"C" * 50
    # Shrunk behind the mount's back.
    os.truncate(b, 10)
    assert wait_until(lambda: os.stat(p).st_size == 10, 1.5), os.stat(p).st_size
    assert p.read_bytes() == b"B" * 10


def test_backing_change_seen_through_a_descriptor_held_open(t):
    p, b = t.mnt / "f", t.backing / "f"
    p.write_bytes(b"1" * 4096)
    with open(p, "rb") as f:
        assert f.read() == b"1" * 4096
        with open(b, "r+b") as g:
            g.write(b"2" * 4096)
        time.sleep(1.2)
        f.seek(0)
        assert f.read() == b"2" * 4096


def test_mode_and_owner_changed_in_backing_show(t):
    p, b = t.mnt / "f", t.backing / "f"
    p.write_bytes(b"x")
    os.stat(p)
    os.chmod(b, 0o600)
    os.chown(b, 1000, 1000)
    os.utime(b, ns=(5_000_000_000, 6_000_000_000))
    assert wait_until(lambda: os.stat(p).st_mode & 0o777 == 0o600 and os.stat(p).st_uid == 1000, 1.5)
    assert wait_until(lambda: os.stat(p).st_mtime_ns == 6_000_000_000, 1.5), os.stat(p).st_mtime_ns


def test_app_added_and_removed_while_mounted(root, drive):
    app = "org.example.latecomer"
    drive.cli("app", "add", app, "--name", "Latecomer", "--public")
    try:
        assert wait_until(lambda: "Latecomer" in os.listdir(root), 2.0), os.listdir(root)
        assert app in os.listdir(root / ".by-app")
        (root / "Latecomer" / "hello.txt").write_text("hi")
        assert (drive.app_folder(app, "Documents") / "hello.txt").read_text() == "hi"
    finally:
        drive.cli("app", "remove", app)
    assert wait_until(lambda: "Latecomer" not in os.listdir(root), 2.0), os.listdir(root)
    assert app not in os.listdir(root / ".by-app")
    # The config is re-read at most every 0.5 s, and a looked-up name lives for the 1 s entry timeout.
    assert wait_until(lambda: err(os.stat, root / "Latecomer") == "ENOENT", 2.5)


def test_statfs_at_the_top(root, drive):
    s = os.statvfs(root)
    h = os.statvfs(drive.home)
    assert s.f_bsize == h.f_bsize and s.f_blocks == h.f_blocks and s.f_namemax == 255
    assert os.statvfs(root / ".by-app").f_blocks == h.f_blocks


def test_find_walks_the_whole_tree_from_the_root(root):
    """Tools that trust a folder's link count (find's leaf optimisation) still see everything."""
    p = subprocess.run(["find", str(root), "-maxdepth", "3", "-type", "d"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    found = {os.fsdecode(line) for line in p.stdout.split(b"\n")}
    for want in (root / "Notes", root / "Work", root / ".by-app" / NOTES_ID / "Data", root / ".by-app" / SECRET_ID / "Inbox"):
        assert str(want) in found, want
    for d in (root, root / ".by-app", root / ".by-app" / NOTES_ID):
        subdirs = sum(1 for e in os.scandir(d) if e.is_dir(follow_symlinks=False))
        assert os.stat(d).st_nlink == 2 + subdirs, d


def test_long_names_at_the_top_are_enametoolong(root):
    for d in (root, root / ".by-app", root / ".by-app" / NOTES_ID):
        assert err(os.stat, d / ("x" * 256)) == "ENAMETOOLONG", d
        assert err(os.mkdir, d / ("x" * 256)) == "ENAMETOOLONG", d
        assert err(os.stat, d / ("x" * 255)) == "ENOENT", d
