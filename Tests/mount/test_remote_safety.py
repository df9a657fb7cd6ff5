"""What reaches a folder remote, and what never leaves it (issue 13 parts 2 and 3, issue 20's atime).

Each test uses its own drive with the store "up" (test_uploads.Up). Covered: names that are not
UTF-8 reach the remote byte for byte; paths longer than PATH_MAX upload; a failed upload of a
file deleted since is dropped at the next mount; symlinks and empty folders reach the remote as
what they are, fifos are reported failed; the remote's own names are refused through the mount;
a symlink planted on the remote is never followed by an upload or a removal; uploads and the
comparison at mount leave a file's atime alone.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ddtest import wait_until
from test_uploads import MARKER, is_failed_value, tree, up_drive, write, xstatus


def remount(u):
    p = u.d.unmount()
    assert p.returncode == 0, f"unmount exited {p.returncode}: {p.stderr}"
    u.mount()


# --------------------------------------------------------------------------- names as bytes

@pytest.mark.timeout(90)
def test_a_name_that_is_not_utf8_reaches_the_remote_byte_for_byte(new_drive):
    u = up_drive(new_drive)
    top = os.fsencode(u.dir)
    names = [b"caf\xe9.txt", b"dir\xff/inner \xc3\x28.bin"]
    for n in names:
        full = top + b"/" + n
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(b"bytes of " + n)
    u.sync(30, check=0)
    remote = os.fsencode(u.remote)
    for n in names:
        r = remote + b"/" + n
        assert os.path.isfile(r), (f"{n!r} is not on the remote byte for byte; the remote holds "
                                   f"{sorted(os.fsencode(p) for p in tree(u.remote))}")
        with open(r, "rb") as f:
            assert f.read() == b"bytes of " + n, n
        assert xstatus(top + b"/" + n) == "synced", n
    assert u.uploads()["failed"] == 0, u.uploads()
    # a rename and a delete of such names reach the remote too
    os.rename(top + b"/caf\xe9.txt", top + b"/caf\xe8.txt")
    os.unlink(top + b"/dir\xff/inner \xc3\x28.bin")
    u.sync(30, check=0)
    assert sorted(tree(u.remote)) == sorted(tree(u.cache)), (sorted(tree(u.remote)), sorted(tree(u.cache)))
    assert os.path.isfile(remote + b"/caf\xe8.txt") and not os.path.exists(remote + b"/caf\xe9.txt")


# --------------------------------------------------------------------------- long paths

def make_deep(top: str, names: list[str], data: bytes):
    """Makes top/names[0]/.../names[-2] and writes names[-1] there, one name at a time (the
    whole path is longer than the kernel takes in one call)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for n in names[:-1]:
            os.mkdir(n, dir_fd=fd)
            nfd = os.open(n, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        f = os.open(names[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
        os.write(f, data)
        os.close(f)
    finally:
        os.close(fd)


def read_deep(top: str, names: list[str]) -> bytes | None:
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        for n in names[:-1]:
            nfd = os.open(n, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        f = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
        data = os.read(f, 1 << 20)
        os.close(f)
        return data
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


@pytest.mark.timeout(120)
def test_paths_longer_than_path_max_reach_the_remote(new_drive):
    u = up_drive(new_drive)
    names = [f"level{i:02d}-" + "x" * 190 for i in range(24)] + ["deep.txt"]
    assert sum(len(n) + 1 for n in names) > 4096
    make_deep(str(u.dir), names, b"far down\n")
    p = u.sync(60)
    assert p.returncode == 0, f"docdrive sync exited {p.returncode}: {p.stderr.strip()}\nlog:\n{u.d.log_tail()}"
    assert read_deep(str(u.remote), names) == b"far down\n", "the file at a path longer than PATH_MAX is not on the remote"


@pytest.mark.timeout(90)
def test_a_queued_path_whose_folder_became_a_symlink_is_not_read_through_it(new_drive):
    u = up_drive(new_drive, writeback=1.0)
    outside = u.d.base / "outside"
    outside.mkdir()
    (outside / "x.txt").write_bytes(b"secret outside the store\n")
    write(u.dir / "dir" / "x.txt", b"mine\n")  # queued as dir/x.txt, due in 1 s
    os.rename(u.dir / "dir", u.dir / "dir2")
    os.symlink(outside, u.dir / "dir")
    u.sync(30, check=0)
    if not os.path.islink(u.remote / "dir"):
        assert not (u.remote / "dir" / "x.txt").exists(), \
            f"the upload read through a local symlink: {(u.remote / 'dir' / 'x.txt').read_bytes()!r}"
    assert os.path.islink(u.remote / "dir") and os.readlink(u.remote / "dir") == str(outside)
    assert (u.remote / "dir2" / "x.txt").read_bytes() == b"mine\n"


# --------------------------------------------------------------------------- failed, then gone

@pytest.mark.timeout(120)
def test_a_failed_upload_of_a_file_deleted_since_is_dropped(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    marker = (u.remote / MARKER).read_bytes()
    (u.remote / MARKER).unlink()  # the share is away: every upload fails
    write(u.dir / "sub" / "a.txt", b"A")
    assert wait_until(lambda: is_failed_value(xstatus(u.dir / "sub" / "a.txt")), 30), xstatus(u.dir / "sub" / "a.txt")
    assert u.sync(5).returncode == 1
    p = u.d.unmount()
    assert p.returncode == 0, p.stderr
    # deleted behind the drive's back (or by a crash) while the share was away; then it is back
    (u.cache / "sub" / "a.txt").unlink()
    (u.remote / MARKER).write_bytes(marker)
    u.mount()
    p = u.sync(20)
    assert p.returncode == 0, (f"docdrive sync after the failed file was deleted exited {p.returncode}: "
                               f"{p.stderr.strip()}; uploads {u.uploads()}")
    assert u.uploads()["failed"] == 0, u.uploads()
    assert not (u.remote / "sub" / "a.txt").exists()


@pytest.mark.timeout(120)
def test_docdrive_sync_tries_a_failed_file_again_before_it_reports_it(new_drive):
    # A remote that refuses one file but answers its reachability check (as an S3 server failing
    # some requests does) is never seen down, so no "remote is back" retry comes: a file that
    # used up its tries waits for its doubling delay. `docdrive sync` must not report it failed
    # without a try of its own: the remote may have recovered during the delay.
    u = up_drive(new_drive, writeback=0.2)
    (u.remote / "sub").mkdir()
    # The remote folder refuses new files (immutable: root too), its marker stays readable.
    subprocess.run(["chattr", "+i", str(u.remote / "sub")], check=True)
    try:
        write(u.dir / "sub" / "a.txt", b"saved while the remote refused it\n")
        # failed after its third try (delays 1 s, 2 s), then once more (4 s): the next try is 8 s away
        tries = lambda: u.d.log_tail(400).count("sync of sub/a.txt with up failed")
        assert wait_until(lambda: tries() >= 4, 40), (tries(), u.uploads(), u.d.log_tail())
        assert u.uploads()["failed"] == 1, u.uploads()
    finally:
        subprocess.run(["chattr", "-i", str(u.remote / "sub")], check=True)
    # when the remote takes it again, `docdrive sync` uploads it rather than reporting the failure
    t0 = time.monotonic()
    p = u.sync(5, check=0)
    print(f"docdrive sync took {time.monotonic() - t0:.1f} s after {tries()} failed tries")
    assert (u.remote / "sub" / "a.txt").read_bytes() == b"saved while the remote refused it\n"
    assert u.uploads()["failed"] == 0, u.uploads()
    assert xstatus(u.dir / "sub" / "a.txt") == "synced"
    # a file that still fails is reported, after that one try
    os.mkfifo(u.dir / "pipe")
    assert wait_until(lambda: u.uploads()["failed"] == 1, 30), u.uploads()
    p = u.sync(8)
    assert p.returncode == 1 and "named pipe" in p.stderr, (p.returncode, p.stderr)
    assert "1 failed file retried now" in u.d.log_tail(100), u.d.log_tail()


# --------------------------------------------------------------------------- symlinks, folders, fifos

@pytest.mark.timeout(90)
def test_symlinks_and_empty_folders_reach_the_remote_as_what_they_are(new_drive):
    u = up_drive(new_drive)
    os.symlink("target/elsewhere.txt", u.dir / "link")
    (u.dir / "sub").mkdir()
    os.symlink("../link", u.dir / "sub" / "up-link")
    (u.dir / "empty").mkdir()
    (u.dir / "a" / "b" / "c").mkdir(parents=True)
    u.sync(30, check=0)
    assert os.path.islink(u.remote / "link") and os.readlink(u.remote / "link") == "target/elsewhere.txt"
    assert os.path.islink(u.remote / "sub" / "up-link") and os.readlink(u.remote / "sub" / "up-link") == "../link"
    for d in ("empty", "a/b/c"):
        assert (u.remote / d).is_dir() and not (u.remote / d).is_symlink(), f"the empty folder {d} is not on the remote"
    assert xstatus(u.dir / "empty") == "synced"
    # removed locally: removed there
    os.unlink(u.dir / "link")
    (u.dir / "empty").rmdir()
    u.sync(30, check=0)
    assert not os.path.lexists(u.remote / "link") and not (u.remote / "empty").exists()


@pytest.mark.timeout(90)
def test_a_fifo_is_reported_failed_not_synced(new_drive):
    u = up_drive(new_drive)
    os.mkfifo(u.dir / "pipe")
    # (the kernel keeps user.* xattrs off fifos: the status shows in `docdrive status` and sync)
    assert wait_until(lambda: u.uploads()["failed"] == 1, 30), u.uploads()
    p = u.sync(5)
    assert p.returncode == 1 and "named pipe" in p.stderr, p.stderr
    assert not os.path.lexists(u.remote / "pipe")
    # a --timeout shorter than the settling of failed files (1.5 s) and their one retry: when
    # nothing waits, the answer is the failure, not "0 files are still waiting"
    p = u.sync(1)
    assert p.returncode == 1 and "named pipe" in p.stderr, (p.returncode, p.stderr)


# --------------------------------------------------------------------------- reserved names

@pytest.mark.timeout(90)
def test_the_remotes_own_names_are_refused_and_the_marker_stays(new_drive):
    u = up_drive(new_drive)
    marker = (u.remote / MARKER).read_bytes()
    (u.dir / "sub").mkdir()
    write(u.dir / "plain.txt", b"p")
    for rel in (MARKER, "sub/" + MARKER, ".docdrive-upload-x", "sub/.docdrive-upload-abc-123"):
        with pytest.raises(OSError) as e:
            with open(u.dir / rel, "wb") as f:
                f.write(b"user data\n")
        assert e.value.errno == errno.EINVAL, (rel, e.value)
        with pytest.raises(OSError) as e:
            os.mkdir(u.dir / rel)
        assert e.value.errno == errno.EINVAL, (rel, e.value)
        with pytest.raises(OSError) as e:
            os.rename(u.dir / "plain.txt", u.dir / rel)
        assert e.value.errno == errno.EINVAL, (rel, e.value)
    with pytest.raises(OSError) as e:
        os.unlink(u.dir / MARKER)
    assert e.value.errno == errno.ENOENT, e.value
    # one planted in the local copy behind the drive's back is neither listed nor uploaded
    (u.cache / MARKER).write_bytes(b"planted\n")
    assert MARKER not in os.listdir(u.dir)
    remount(u)
    u.sync(30, check=0)
    assert (u.remote / MARKER).read_bytes() == marker, "the remote's marker was overwritten"
    assert not [n for n in os.listdir(u.remote / "sub")], os.listdir(u.remote / "sub")


# --------------------------------------------------------------------------- symlinks planted on the remote

@pytest.mark.timeout(120)
def test_a_symlink_on_the_remote_is_never_followed(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    outside = u.d.base / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"not the store's\n")
    # an upload into a folder that is a symlink on the remote
    os.symlink(outside, u.remote / "trap")
    (u.dir / "trap").mkdir()
    write(u.dir / "trap" / "evil.txt", b"evil")
    assert wait_until(lambda: is_failed_value(xstatus(u.dir / "trap" / "evil.txt")), 30), xstatus(u.dir / "trap" / "evil.txt")
    assert not (outside / "evil.txt").exists(), "the upload followed a symlink on the remote out of it"
    p = u.sync(5)
    assert p.returncode == 1 and "symbolic link" in p.stderr, p.stderr
    # a removal through a folder that became a symlink on the remote
    (u.dir / "work").mkdir()
    write(u.dir / "work" / "victim.txt", b"mine\n")
    u.sync(30)
    assert (u.remote / "work" / "victim.txt").read_bytes() == b"mine\n"
    (u.remote / "work" / "victim.txt").unlink()
    (u.remote / "work").rmdir()
    os.symlink(outside, u.remote / "work")
    os.unlink(u.dir / "work" / "victim.txt")
    os.rmdir(u.dir / "work")
    u.sync(30)
    assert (outside / "victim.txt").read_bytes() == b"not the store's\n", "a removal followed a symlink on the remote"
    assert sorted(os.listdir(outside)) == ["victim.txt"], os.listdir(outside)


# --------------------------------------------------------------------------- atime

@pytest.mark.timeout(90)
def test_uploads_and_the_comparison_at_mount_leave_atime_alone(new_drive):
    u = up_drive(new_drive)
    write(u.dir / "a.txt", b"content " * 1000)
    u.sync(30, check=0)
    p = u.d.unmount()
    assert p.returncode == 0, p.stderr
    # changed while not mounted, so the comparison at mount reads the file to upload it again
    local = u.cache / "a.txt"
    local.write_bytes(b"changed " * 1000)
    st = os.stat(local)
    past = 1_000_000_000 * 10**9  # 2001
    os.utime(local, ns=(past, st.st_mtime_ns))
    u.mount()
    u.sync(30, check=0)
    assert (u.remote / "a.txt").read_bytes() == b"changed " * 1000, "not uploaded again at mount"
    got = os.stat(local).st_atime_ns
    assert got == past, f"the upload changed the file's atime from {past} to {got}"


# --------------------------------------------------------------------------- where a remote may be

def store_add(d, name, folder, check=False):
    return d.cli("store", "add", name, "--name", name.capitalize(), "--folder", str(folder), check=check)


@pytest.mark.timeout(90)
def test_a_remote_given_as_a_symlink_is_resolved_at_store_add_and_refused_in_config(new_drive):
    d = new_drive()
    real = d.base / "nas-real"
    real.mkdir()
    link = d.base / "nas-link"
    os.symlink(real, link)
    p = store_add(d, "linked", link)
    assert p.returncode == 0, p.stderr
    listed = {s["name"]: s for s in json.loads(d.cli("store", "list", "--json").stdout)}
    assert listed["linked"]["remotePath"] == str(real), listed["linked"]
    d.mount()
    write(d.mnt / "Linked" / "x.txt", b"through the link")
    p = d.cli("sync", "--timeout", "20", check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (real / "x.txt").read_bytes() == b"through the link"
    assert d.unmount().returncode == 0
    # written into config.yaml by hand: refused in one sentence (uploads would never start)
    cfg = d.home / "config.yaml"
    cfg.write_text(cfg.read_text().replace(str(real), str(link)))
    p = d.cli("status", check=False)
    assert p.returncode != 0 and "symbolic link" in p.stderr and str(link) in p.stderr, (p.returncode, p.stderr)


@pytest.mark.timeout(60)
def test_misplaced_remotes_are_refused_by_store_add_and_in_config(new_drive):
    d = new_drive()
    cases = {
        "the same folder as another store": (d.remote, "also the remote of store"),
        "inside another store's remote": (d.remote / "inner", "inside the remote of store"),
        "inside a store's local copy": (d.home / "stores" / "work" / "cache" / "x", "inside the local copy of store"),
        "inside the drive home, not a cache": (d.home / "mine", "inside the drive home"),
        "holding the drive home": (d.base, "holds the drive home"),
        "relative": ("relative/folder", "absolute"),
    }
    before = (d.home / "config.yaml").read_text()
    for what, (folder, words) in cases.items():
        p = store_add(d, "extra", folder)
        assert p.returncode != 0, f"store add with a remote {what} was accepted: {p.stdout}"
        assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1, (what, p.stderr)
        assert (d.home / "config.yaml").read_text() == before, what
    assert not (d.home / "mine").exists() and not (d.remote / "inner").exists(), "a refused store add created its folder"
    # the same in config.yaml written by hand
    cfg = d.home / "config.yaml"
    cfg.write_text(before + f"  - name: twin\n    remote:\n      type: folder\n      path: {d.remote}\n")
    p = d.cli("status", check=False)
    assert p.returncode != 0 and "also the remote of store" in p.stderr, (p.returncode, p.stderr)


# --------------------------------------------------------------------------- mount and unmount

@pytest.mark.timeout(90)
def test_unmount_refuses_another_drives_mount(new_drive):
    a = new_drive()
    b = new_drive()
    a.mount()
    p = b.cli("unmount", str(a.mnt), check=False)
    assert p.returncode != 0, "docdrive unmount took down another drive's mount"
    assert "another drive" in p.stderr, p.stderr
    assert a.healthy(), "the other drive's mount went away"


@pytest.mark.timeout(90)
def test_mount_refuses_a_folder_that_is_not_empty_unless_nonempty(new_drive):
    d = new_drive()
    d.mnt.mkdir()
    (d.mnt / "mine.txt").write_bytes(b"hidden by a mount")
    p = d.cli("mount", str(d.mnt), check=False, timeout=60)
    assert p.returncode != 0 and "not empty" in p.stderr, (p.returncode, p.stderr)
    assert not (d.mnt / "Notes").exists()
    d.mount(options="nonempty")
    assert (d.mnt / "Notes").is_dir()
    assert d.unmount().returncode == 0
    assert (d.mnt / "mine.txt").read_bytes() == b"hidden by a mount"


# --------------------------------------------------------------------------- a full disk under the drive home

@pytest.mark.timeout(120)
def test_status_says_the_drive_homes_disk_is_full_and_the_index_error_clears(base_dir, request):
    from ddtest import Drive, run
    from test_uploads import Up
    d = Drive(base_dir / f"full-disk-{os.getpid()}")
    d.home.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(d.home)])
    try:
        d.create()
        u = Up(d, 0.2).mount()
        write(u.dir / "a.txt", b"first")
        u.sync(30, check=0)
        # fill the disk through the mount: the writer gets ENOSPC
        with pytest.raises(OSError) as e:
            with open(u.dir / "fill.bin", "wb") as f:
                chunk = b"\0" * (1 << 20)
                for _ in range(64):
                    f.write(chunk)
                    f.flush()
                    os.fsync(f.fileno())
        assert e.value.errno == errno.ENOSPC, e.value
        # more saves that the index must record while there is no room
        for i in range(20):
            try:
                write(u.dir / f"more{i}.txt", b"x")
            except OSError:
                pass

        def full_report():
            s = json.loads(d.cli("status", "--json").stdout)
            return s if s.get("homeDiskFull") and s.get("indexWriteError") else None
        s = wait_until(full_report, 20)
        assert s, json.loads(d.cli("status", "--json").stdout)
        text = d.cli("status").stdout
        assert "drive home's disk is full" in text, text
        assert "the last write to the index failed" in text, text
        assert "waiting for a pause" not in text, text
        # room again: the report and the index error go by themselves
        os.unlink(u.dir / "fill.bin")
        write(u.dir / "after.txt", b"room again")

        def cleared():
            s = json.loads(d.cli("status", "--json").stdout)
            return s if not s.get("homeDiskFull") and "indexWriteError" not in s else None
        assert wait_until(cleared, 20), json.loads(d.cli("status", "--json").stdout)
        u.sync(30, check=0)
        assert (u.remote / "after.txt").read_bytes() == b"room again"
    finally:
        problems = d.teardown()
        run(["umount", "-l", str(d.home)], check=False)
        assert not problems, problems
