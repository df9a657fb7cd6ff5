"""Uploads from a store's local copy to its folder remote, through a live mount.

Each test uses its own drive (new_drive) with an extra store "up" (shown as "Up") created with
`docdrive store add up --name Up --folder REMOTE --writeback SECONDS`, so that the write-back
delay is short and the remote can be made unreachable without disturbing other tests.

What is covered: a saved file reaches the remote (atomically, no `.docdrive-upload-` temp left),
not before it is closed or fsynced, not before the write-back delay (repeated saves coalesce);
truncation, renames and deletes are carried over; app containers are never uploaded; a file
changed during its upload goes again and the remote only ever holds whole versions;
`docdrive sync` (0, 1 naming the failed files, non-zero with the count left on timeout);
`docdrive status` (`uploads` in --json, an `Uploads:` line); the `user.docdrive.status` xattr;
an unreachable remote (marker removed, folder moved away): back-off, `failed` after 3 attempts,
nothing written into the wrong folder, resumes by itself; SIGKILL before the upload, a file
never closed before a crash, a delete/rename right before a crash, the comparison at mount
(also when the remote is away at mount and comes back later), upload temps of a crash removed;
hard-linked names; unmount uploads first and keeps what it could not upload queued for the
next mount (`docdrive mount --upload-grace S`).

The crash test (test_crash_rounds) runs CRASH_ROUNDS = 24 rounds of: random operations (rewrite
in place, partial write/truncate in place, editor-style temp + rename, unlink, rename over
another file; stray temps of an interrupted editor save are deleted at the next round), SIGKILL
of the daemon at a random moment (during the writes, right when an upload temp shows on the
remote, or after the uploads), remount, `docdrive sync --timeout 60`, then checks (a) the remote
equals the local copy byte for byte (same file set, no torn file, no `.docdrive-upload-`
leftover) and (b) every operation that returned before the kill has its effect (content, or
absence). Each round prints what it did and checked. The seed is printed; set
DOCDRIVE_CRASH_SEED to replay a run.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from ddtest import pid_alive, run, wait_until

MARKER = ".docdrive-store"
TEMP_PREFIX = ".docdrive-upload-"
CRASH_ROUNDS = 24


# --------------------------------------------------------------------------- helpers

class Up:
    """A drive with the store "up" (display "Up") and its folder remote."""

    def __init__(self, d, writeback):
        self.d = d
        self.writeback = writeback
        self.remote = d.base / "up-remote"
        d.cli("store", "add", "up", "--name", "Up", "--folder", str(self.remote), "--writeback", str(writeback))
        assert (self.remote / MARKER).is_file(), "store add did not write the marker"

    @property
    def dir(self) -> Path:
        return self.d.mnt / "Up"

    @property
    def cache(self) -> Path:
        return self.d.home / "stores" / "up" / "cache"

    def mount(self, *extra_args):
        self.d.mount(extra_args=extra_args)
        assert self.dir.is_dir(), os.listdir(self.d.mnt)
        return self

    def sync(self, timeout=30, check=None):
        p = self.d.cli("sync", "--timeout", str(timeout), timeout=timeout + 30, check=False)
        if check is not None:
            assert p.returncode == check, (
                f"docdrive sync --timeout {timeout} exited {p.returncode} (expected {check})\n"
                f"stdout: {p.stdout}\nstderr: {p.stderr}\nuploads: {self.uploads()}\nlog:\n{self.d.log_tail()}")
        return p

    def status(self):
        return json.loads(self.d.cli("status", "--json").stdout)

    def uploads(self):
        return self.status().get("uploads")

    def kill(self):
        pid = self.d.pid
        assert pid and pid_alive(pid)
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not pid_alive(pid), 10), "the daemon did not die on SIGKILL"


def up_drive(new_drive, writeback=0.2, mount=True) -> Up:
    u = Up(new_drive(), writeback)
    return u.mount() if mount else u


def tree(root: Path, skip_marker=True) -> dict[str, bytes]:
    """Every non-directory below `root`: relative path -> content (symlinks: their target)."""
    out = {}
    root = Path(root)
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            if skip_marker and rel == MARKER:
                continue
            if os.path.islink(p):
                out[rel] = b"->" + os.fsencode(os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


def dirs(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(dp, d), root) for dp, dn, _ in os.walk(root) for d in dn}


def leftovers(root: Path) -> list[str]:
    return [os.path.join(dp, n) for dp, dn, fn in os.walk(root) for n in fn + dn if n.startswith(TEMP_PREFIX)]


def short(data: bytes) -> str:
    return f"{len(data)} bytes sha256:{hashlib.sha256(data).hexdigest()[:12]}"


def diff_trees(local: dict, remote: dict) -> str:
    lines = []
    for k in sorted(set(local) | set(remote)):
        a, b = local.get(k), remote.get(k)
        if a == b:
            continue
        lines.append(f"  {k}: local={'missing' if a is None else short(a)} remote={'missing' if b is None else short(b)}")
    return "\n".join(lines)


def assert_remote_matches(u: Up, what=""):
    local, remote = tree(u.cache), tree(u.remote)
    left = leftovers(u.remote)
    assert not left, f"{what}: upload temp files left on the remote: {left}"
    assert local == remote, f"{what}: remote differs from the local copy:\n{diff_trees(local, remote)}"
    return local


def xstatus(path) -> str:
    return os.getxattr(path, "user.docdrive.status").decode()


def is_failed_value(v: str) -> bool:
    # "failed", optionally followed by its error
    return v == "failed" or re.match(r"failed\b", v) is not None


def write(path: Path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------- basics

@pytest.mark.timeout(60)
def test_saved_files_reach_the_remote(new_drive):
    u = up_drive(new_drive)
    write(u.dir / "a.txt", b"hello remote\n")
    write(u.dir / "sub" / "deep" / "b.bin", os.urandom(300_000))
    write(u.dir / "empty", b"")
    u.sync(30, check=0)
    local = tree(u.cache)
    remote = tree(u.remote)
    for rel in ("a.txt", "sub/deep/b.bin", "empty"):
        assert remote.get(rel) == local[rel], f"{rel}: remote {remote.get(rel) and short(remote[rel])} local {short(local[rel])}"
    assert remote["a.txt"] == b"hello remote\n"
    assert not leftovers(u.remote), leftovers(u.remote)
    for rel in ("a.txt", "sub/deep/b.bin", "empty"):
        assert xstatus(u.dir / rel) == "synced", rel
    up = u.uploads()
    assert up["pending"] == 0 and up["uploading"] == 0 and up["failed"] == 0, up
    assert up["synced"] >= 3, up
    assert (u.remote / MARKER).is_file(), "the marker disappeared from the remote"


@pytest.mark.timeout(90)
def test_many_files_in_many_folders(new_drive):
    u = up_drive(new_drive, writeback=0.1)
    expect = {}
    for i in range(300):
        rel = f"d{i % 10}/s{i % 3}/f{i}.dat"
        data = os.urandom(i * 37 % 5000)
        write(u.dir / rel, data)
        expect[rel] = data
    u.sync(60, check=0)
    remote = tree(u.remote)
    assert remote == expect, diff_trees(expect, remote)
    up = u.uploads()
    assert up == {"pending": 0, "uploading": 0, "synced": 300, "failed": 0}, up


@pytest.mark.timeout(60)
def test_nothing_uploads_before_close_then_fsync_queues(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    p = u.dir / "open.txt"
    f = open(p, "wb")
    try:
        f.write(b"first part\n")
        f.flush()
        time.sleep(1.5)  # far beyond the write-back delay
        assert not (u.remote / "open.txt").exists(), "a file still open (never closed or fsynced) was uploaded"
        os.fsync(f.fileno())
        assert wait_until(lambda: (u.remote / "open.txt").exists(), 10), \
            f"fsync did not queue the file: not on the remote after 10 s ({u.uploads()})"
        assert (u.remote / "open.txt").read_bytes() == b"first part\n"
        f.write(b"second part\n")
        f.flush()
    finally:
        f.close()
    u.sync(30, check=0)
    assert (u.remote / "open.txt").read_bytes() == b"first part\nsecond part\n"
    assert xstatus(p) == "synced"


@pytest.mark.timeout(60)
def test_writeback_delay_and_coalescing(new_drive):
    u = up_drive(new_drive, writeback=1.0)
    p = u.dir / "doc.txt"
    write(p, b"v0")
    t_close = time.monotonic()
    v = xstatus(p)
    assert v == "pending", f"right after close the status is {v!r}, expected pending"
    # the daemon commits the queue in batches (every 50 ms): give the count a moment
    assert wait_until(lambda: u.uploads()["pending"] == 1, 0.5), u.uploads()
    time.sleep(max(0.0, 0.5 - (time.monotonic() - t_close)))
    assert not (u.remote / "doc.txt").exists(), "uploaded before the write-back delay (1 s) was over"
    assert wait_until(lambda: (u.remote / "doc.txt").exists(), 10), f"never uploaded: {u.uploads()}"
    assert time.monotonic() - t_close >= 0.9
    u.sync(30, check=0)
    assert (u.remote / "doc.txt").read_bytes() == b"v0"
    # saves 0.35 s apart, closer than the delay: none uploads until they stop
    seen = set()
    stop = time.monotonic()
    for i in range(1, 7):
        write(p, f"v{i}".encode())
        stop = time.monotonic()
        time.sleep(0.35)
        seen.add((u.remote / "doc.txt").read_bytes())
    assert seen == {b"v0"}, f"repeated saves within the write-back delay were uploaded: {seen}"
    u.sync(30, check=0)
    assert time.monotonic() - stop >= 0.9
    assert (u.remote / "doc.txt").read_bytes() == b"v6"


@pytest.mark.timeout(60)
def test_a_burst_of_changes_is_uploaded_once_it_ends(new_drive):
    # Saves and deletes 0.15 s apart in one store, for about 3 s: a burst (tar x, cp -r, a build).
    u = up_drive(new_drive, writeback=2.0)
    write(u.dir / "first.txt", b"saved at the start")
    seen_during = set()
    got = {}

    def ask_status():  # beside the burst, which must not pause for it
        got["held"] = [st for st in u.status()["stores"] if st["name"] == "up"][0]
        got["text"] = u.d.cli("status").stdout
    asking = threading.Thread(target=ask_status)
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < 3.0:
        write(u.dir / f"scratch{i}.tmp", b"x" * 100)
        if i >= 2:
            os.unlink(u.dir / f"scratch{i - 2}.tmp")
        last_change = time.monotonic()
        seen_during |= set(os.listdir(u.remote))
        if i == 15:
            asking.start()  # status says why nothing moves
        time.sleep(0.15)
        i += 1
    seen_during |= set(os.listdir(u.remote))
    asking.join()
    # Nothing went up while the store kept changing, though first.txt was due after 2 s
    assert seen_during <= {MARKER}, f"uploaded during the burst: {sorted(seen_during)}"
    held, text = got["held"], got["text"]
    assert held["held"] is True and held["uploads"]["pending"] >= 1, held
    assert "waiting for a pause: files keep changing; uploads start 2 s after the last change" in text, text
    # Once it ends and nothing is asked of the drive for a quarter of the delay, what is due
    # goes (first.txt), without waiting out the whole delay after the last change,
    assert wait_until(lambda: (u.remote / "first.txt").exists(), 10, 0.02), f"never uploaded: {u.uploads()}"
    quiet = time.monotonic() - last_change
    assert quiet >= 0.45, f"uploaded {quiet:.2f} s after the last change, before the drive was idle for 0.5 s"
    assert quiet < 1.9, f"uploaded {quiet:.2f} s after the last change: the burst's end waited for the whole delay (2 s)"
    # while the last file saved still waits its own write-back delay after its save.
    last = f"scratch{i - 1}.tmp"
    assert last not in os.listdir(u.remote), f"{last} uploaded {time.monotonic() - last_change:.2f} s after its save"
    assert wait_until(lambda: (u.remote / last).exists(), 10, 0.02), f"never uploaded: {u.uploads()}"
    assert time.monotonic() - last_change >= 1.9
    u.sync(30, check=0)
    # The scratch files deleted during the burst never reached the remote
    assert sorted(os.listdir(u.remote)) == sorted([MARKER, "first.txt", f"scratch{i - 2}.tmp", f"scratch{i - 1}.tmp"])
    assert_remote_matches(u, "after a burst")


@pytest.mark.timeout(60)
def test_a_store_that_never_stops_changing_still_uploads(new_drive):
    # A burst holds an upload back at most ten write-back delays (here 10 x 0.2 s) past its time.
    u = up_drive(new_drive, writeback=0.2)
    write(u.dir / "early.txt", b"saved before the churn")
    saved = time.monotonic()
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            write(u.dir / "log.txt", f"line {n}\n".encode())
            n += 1
            time.sleep(0.05)

    t = threading.Thread(target=churn)
    t.start()
    try:
        assert wait_until(lambda: (u.remote / "early.txt").exists(), 15), f"held back for good: {u.uploads()}"
        held = time.monotonic() - saved
        assert t.is_alive() and not stop.is_set(), "the churn ended early"
    finally:
        stop.set()
        t.join()
    assert held <= 8.0, f"early.txt reached the remote {held:.1f} s after its save (expected at most about 2.2 s)"
    u.sync(30, check=0)
    assert_remote_matches(u, "after the churn")


@pytest.mark.timeout(60)
def test_truncations_are_uploaded(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    for n in ("a", "b", "c", "d"):
        write(u.dir / n, b"0123456789" * 1000)
    u.sync(30, check=0)
    with open(u.dir / "a", "r+b") as f:  # ftruncate on an open file
        f.truncate(5)
    with open(u.dir / "b", "wb") as f:  # O_TRUNC then a shorter write
        f.write(b"short")
    open(u.dir / "c", "wb").close()  # O_TRUNC to empty
    u.sync(30, check=0)
    assert (u.remote / "a").read_bytes() == b"01234"
    assert (u.remote / "b").read_bytes() == b"short"
    assert (u.remote / "c").read_bytes() == b""
    os.truncate(u.dir / "d", 3)  # by path: no open, no close
    u.sync(30, check=0)
    assert (u.remote / "d").read_bytes() == b"012", \
        f"a truncate by path (truncate(2)) was not uploaded: remote has {(u.remote / 'd').stat().st_size} bytes"
    assert_remote_matches(u, "after truncations")


@pytest.mark.timeout(60)
def test_renames_and_deletes_are_carried_over(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    files = {
        "keep.txt": b"keep",
        "old-name.txt": b"to rename",
        "gone.txt": b"to delete",
        "folder/one.txt": b"1",
        "folder/inner/two.txt": b"2",
        "a/moved.txt": b"between folders",
        "tree/x/y.txt": b"rm -rf",
        "doc.txt": b"editor v1",
    }
    for rel, data in files.items():
        write(u.dir / rel, data)
    (u.dir / "b").mkdir()
    u.sync(30, check=0)
    assert_remote_matches(u, "before the renames")
    os.rename(u.dir / "old-name.txt", u.dir / "new-name.txt")
    os.unlink(u.dir / "gone.txt")
    os.rename(u.dir / "folder", u.dir / "renamed-folder")
    os.rename(u.dir / "a" / "moved.txt", u.dir / "b" / "moved.txt")
    shutil.rmtree(u.dir / "tree")
    write(u.dir / ".doc.txt.swp", b"editor v2")  # editor-style save over a synced file
    os.rename(u.dir / ".doc.txt.swp", u.dir / "doc.txt")
    u.sync(30, check=0)
    remote = tree(u.remote)
    assert remote.get("new-name.txt") == b"to rename" and "old-name.txt" not in remote, sorted(remote)
    assert "gone.txt" not in remote, "a deleted file is still on the remote"
    assert remote.get("renamed-folder/one.txt") == b"1" and remote.get("renamed-folder/inner/two.txt") == b"2", sorted(remote)
    assert not (u.remote / "folder").exists(), \
        f"the renamed folder still exists under its old name on the remote: {sorted(tree(u.remote / 'folder'))}"
    assert remote.get("b/moved.txt") == b"between folders" and "a/moved.txt" not in remote, sorted(remote)
    assert not any(k.startswith("tree/") for k in remote), "files of a deleted folder are still on the remote"
    assert remote.get("doc.txt") == b"editor v2" and ".doc.txt.swp" not in remote, sorted(remote)
    assert_remote_matches(u, "after the renames")


@pytest.mark.timeout(60)
def test_deletes_right_after_a_folder_rename_reach_the_right_remote_path(new_drive):
    """A removal's note reuses its folder's path for a moment (rm -rf removes thousands of
    files per folder). Removals just before and after a folder rename, and a new folder under
    the old name, must leave the remote exactly like the local copy."""
    u = up_drive(new_drive, writeback=0.2)
    for i in range(6):
        write(u.dir / "f1" / f"n{i}.txt", f"{i}".encode())
    u.sync(30, check=0)
    os.unlink(u.dir / "f1" / "n0.txt")            # the path of f1 is now known
    os.rename(u.dir / "f1", u.dir / "f2")
    os.unlink(u.dir / "f2" / "n1.txt")            # must be noted as f2/n1.txt
    os.mkdir(u.dir / "f1")                         # a new folder under the old name
    write(u.dir / "f1" / "n1.txt", b"new file, old name")
    os.unlink(u.dir / "f2" / "n2.txt")
    u.sync(30, check=0)
    remote = tree(u.remote)
    assert remote == {"f1/n1.txt": b"new file, old name", "f2/n3.txt": b"3", "f2/n4.txt": b"4", "f2/n5.txt": b"5"}, \
        f"remote after deletes around a folder rename: {sorted(remote)}\n{u.d.log_tail(80)}"
    assert_remote_matches(u, "after the deletes")


@pytest.mark.timeout(60)
def test_rename_and_delete_before_the_upload(new_drive):
    u = up_drive(new_drive, writeback=1.0)
    write(u.dir / "draft.txt", b"draft")
    os.rename(u.dir / "draft.txt", u.dir / "final.txt")
    write(u.dir / "scratch.txt", b"scratch")
    os.unlink(u.dir / "scratch.txt")
    write(u.dir / "dir" / "f.txt", b"in a folder")
    os.rename(u.dir / "dir", u.dir / "dir2")
    write(u.dir / "t.tmp", b"saved")
    os.rename(u.dir / "t.tmp", u.dir / "target.txt")
    u.sync(30, check=0)
    remote = tree(u.remote)
    assert remote == {"final.txt": b"draft", "dir2/f.txt": b"in a folder", "target.txt": b"saved"}, \
        f"remote after renames/deletes made before the upload: {sorted(remote)}"
    assert not leftovers(u.remote)


@pytest.mark.timeout(60)
def test_app_containers_are_not_uploaded(new_drive):
    u = up_drive(new_drive, writeback=0.1)
    notes = u.d.mnt / "Notes"
    write(notes / "note.txt", b"not a store")
    write(notes / "sub" / "n2.txt", b"not a store either")
    u.sync(30, check=0)
    time.sleep(0.5)
    assert tree(u.remote) == {}, f"app files reached a store remote: {sorted(tree(u.remote))}"
    assert tree(u.d.remote) == {}, f"app files reached the Work remote: {sorted(tree(u.d.remote))}"
    up = u.uploads()
    assert up == {"pending": 0, "uploading": 0, "synced": 0, "failed": 0}, f"app files were queued: {up}"


@pytest.mark.timeout(90)
def test_file_changed_during_upload_goes_again_and_remote_holds_whole_versions(new_drive):
    u = up_drive(new_drive, writeback=0.1)
    p = u.dir / "big.bin"
    size = 48 << 20
    versions = {}
    seen = set()
    stop = threading.Event()

    def poll():
        target = u.remote / "big.bin"
        while not stop.is_set():
            try:
                with open(target, "rb") as f:
                    seen.add(hashlib.sha256(f.read()).hexdigest())
            except FileNotFoundError:
                time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        for i in range(4):
            data = bytes([65 + i]) * 1024 + os.urandom(size - 1024)
            versions[hashlib.sha256(data).hexdigest()] = i
            write(p, data)
            time.sleep(u.writeback + random.uniform(0.0, 0.15))  # land in the middle of the upload
        u.sync(60, check=0)
    finally:
        stop.set()
        poller.join(30)
    assert (u.remote / "big.bin").read_bytes() == data, "the remote does not hold the last version"
    torn = seen - set(versions)
    assert not torn, f"the remote held {len(torn)} version(s) that never existed locally (torn uploads)"
    print(f"remote versions observed: {sorted(versions[h] for h in seen)}")
    assert not leftovers(u.remote)


# --------------------------------------------------------------------------- sync, status, xattr

@pytest.mark.timeout(60)
def test_sync_status_and_xattr_when_all_is_well(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    p = u.sync(5, check=0)  # nothing queued: at once
    up = u.uploads()
    assert set(up) == {"pending", "uploading", "synced", "failed"} and all(isinstance(v, int) for v in up.values()), up
    write(u.dir / "x.txt", b"x")
    assert xstatus(u.dir / "x.txt") in ("pending", "uploading"), xstatus(u.dir / "x.txt")
    u.sync(30, check=0)
    out = run(["getfattr", "--only-values", "-n", "user.docdrive.status", str(u.dir / "x.txt")], timeout=30).stdout
    assert out == "synced", repr(out)
    plain = u.d.cli("status").stdout
    lines = [ln for ln in plain.splitlines() if ln.startswith("Uploads:")]
    assert lines, f"no line starting with 'Uploads:' in docdrive status:\n{plain}"
    assert "1" in lines[0], lines[0]
    # reading a synced file does not queue it again
    remote_ino = (u.remote / "x.txt").stat().st_ino
    assert (u.dir / "x.txt").read_bytes() == b"x"
    assert xstatus(u.dir / "x.txt") == "synced"
    time.sleep(0.6)
    assert (u.remote / "x.txt").stat().st_ino == remote_ino, "reading a file uploaded it again"


@pytest.mark.timeout(60)
def test_sync_timeout_counts_what_is_left(new_drive):
    u = up_drive(new_drive, writeback=20)
    for i in range(3):
        write(u.dir / f"p{i}.txt", b"p")
    for i in range(3):
        assert xstatus(u.dir / f"p{i}.txt") == "pending"
    assert wait_until(lambda: u.uploads()["pending"] == 3, 1), u.uploads()
    t0 = time.monotonic()
    p = u.sync(1)
    took = time.monotonic() - t0
    assert p.returncode != 0, f"sync --timeout 1 with 3 pending exited 0: {p.stdout} {p.stderr}"
    assert took < 10, f"sync --timeout 1 took {took:.1f} s"
    assert re.search(r"\b3\b", p.stderr), f"the timeout message does not say 3 are left: {p.stderr!r}"
    assert p.stderr.startswith("docdrive: "), p.stderr


@pytest.mark.timeout(60)
def test_file_never_queued_is_synced_and_not_reuploaded(new_drive):
    u = up_drive(new_drive, writeback=0.2, mount=False)
    data = os.urandom(5000)
    (u.cache / "same").mkdir()
    (u.cache / "same" / "old.bin").write_bytes(data)
    (u.remote / "same").mkdir()
    shutil.copy2(u.cache / "same" / "old.bin", u.remote / "same" / "old.bin")
    ino = (u.remote / "same" / "old.bin").stat().st_ino
    u.mount()
    u.sync(30, check=0)
    assert xstatus(u.dir / "same" / "old.bin") == "synced"
    assert (u.remote / "same" / "old.bin").stat().st_ino == ino, \
        "an identical file (same content and times) was uploaded again at mount"


# --------------------------------------------------------------------------- unreachable remote

@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["marker", "folder"])
def test_unreachable_remote_fails_with_backoff_then_resumes(new_drive, how):
    u = up_drive(new_drive, writeback=0.2)
    write(u.dir / "before.txt", b"before")
    u.sync(30, check=0)
    away = u.remote.with_name("up-remote-away")
    marker = (u.remote / MARKER).read_bytes()
    if how == "marker":
        (u.remote / MARKER).unlink()
    else:
        os.rename(u.remote, away)
    write(u.dir / "a.txt", b"A")
    write(u.dir / "sub" / "b.txt", b"B")
    t_close = time.monotonic()
    time.sleep(0.9)  # the first attempt (at 0.2 s) failed; the next is 1 s later
    for rel in ("a.txt", "sub/b.txt"):
        v = xstatus(u.dir / rel)
        assert v in ("pending", "uploading"), f"{rel} after one failed attempt: {v!r} (expected pending: failed only after 3)"
    assert wait_until(lambda: is_failed_value(xstatus(u.dir / "a.txt")) and is_failed_value(xstatus(u.dir / "sub/b.txt")), 20), \
        f"not failed 20 s after the remote went away: {xstatus(u.dir / 'a.txt')!r} {u.uploads()}"
    took = time.monotonic() - t_close
    print(f"failed after {took:.2f} s (expected ~3.2 s: 0.2 + 1 + 2)")
    assert took >= 2.5, f"failed after {took:.2f} s: 3 attempts with 1 s and 2 s back-off take >= 3 s"
    up = u.uploads()
    assert up["failed"] == 2, up
    p = u.sync(3)
    assert p.returncode == 1, f"sync with failed uploads exited {p.returncode}: {p.stderr!r}"
    assert "a.txt" in p.stderr and "b.txt" in p.stderr, f"sync does not name the failed files: {p.stderr!r}"
    assert any(s in p.stderr for s in ("reachable", MARKER, str(u.remote))), \
        f"sync does not give the error of the failed files: {p.stderr!r}"
    # nothing was written into a folder that is not the store's
    if how == "marker":
        assert tree(u.remote) == {"before.txt": b"before"}, sorted(tree(u.remote))
        assert dirs(u.remote) == set(), f"folders created in a remote without its marker: {dirs(u.remote)}"
        assert not (u.remote / MARKER).exists(), "the product recreated the marker by itself"
    else:
        assert not u.remote.exists(), "the product recreated the missing remote folder"
        assert tree(away) == {"before.txt": b"before"}, sorted(tree(away))
    time.sleep(max(0.0, 8 - (time.monotonic() - t_close)))  # a few more back-offs go by
    if how == "marker":
        (u.remote / MARKER).write_bytes(marker)
    else:
        os.rename(away, u.remote)
    t_back = time.monotonic()
    # the user puts the share back and runs `docdrive sync --timeout 30` (which only watches the
    # index): the uploads must resume by themselves and the sync end with 0
    p = u.sync(30)
    took = time.monotonic() - t_back
    assert p.returncode == 0, (f"docdrive sync --timeout 30 run right after the remote came back exited {p.returncode} "
                               f"after {took:.1f} s: {p.stderr.strip()!r}; uploads {u.uploads()}")
    print(f"synced {took:.2f} s after the remote came back")
    assert_remote_matches(u, "after the remote came back")
    assert xstatus(u.dir / "a.txt") == "synced"
    assert u.uploads()["failed"] == 0, u.uploads()


# --------------------------------------------------------------------------- restarts

@pytest.mark.timeout(60)
def test_sigkill_before_upload_then_remount_uploads(new_drive):
    u = up_drive(new_drive, writeback=2.0)
    expect = {f"k{i}.txt": os.urandom(1000) for i in range(5)}
    for rel, data in expect.items():
        write(u.dir / rel, data)
    time.sleep(0.3)  # the kernel sends RELEASE after close() returns
    u.kill()
    assert tree(u.remote) == {}, "uploaded before the write-back delay"
    q = u.uploads()
    assert q["pending"] == 5, f"the queue (read from the index with the daemon dead) does not hold the 5 saves: {q}"
    u.mount()
    u.sync(30, check=0)
    assert tree(u.remote) == expect, diff_trees(expect, tree(u.remote))


@pytest.mark.timeout(60)
def test_file_written_but_never_closed_before_a_crash_is_uploaded(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    write(u.dir / "base.txt", b"base")
    u.sync(30, check=0)
    fd = os.open(u.dir / "unclosed.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, os.urandom(200_000))
    fd2 = os.open(u.dir / "base.txt", os.O_WRONLY)
    os.pwrite(fd2, b"BA", 0)
    time.sleep(0.5)
    u.kill()
    for f in (fd, fd2):
        try:
            os.close(f)
        except OSError:
            pass
    u.mount()
    u.sync(30, check=0)
    local = assert_remote_matches(u, "after the crash with open files")
    assert len(local["unclosed.bin"]) == 200_000 and local["base.txt"] == b"BAse"


@pytest.mark.timeout(60)
def test_mount_uploads_what_differs_from_the_remote(new_drive):
    u = up_drive(new_drive, writeback=0.2)
    write(u.dir / "changed.txt", b"old")
    write(u.dir / "same.txt", b"same")
    u.sync(30, check=0)
    assert u.d.unmount().returncode == 0
    (u.cache / "changed.txt").write_bytes(b"changed while unmounted")
    (u.cache / "new" ).mkdir()
    (u.cache / "new" / "added.txt").write_bytes(b"added while unmounted")
    u.mount()
    u.sync(30, check=0)
    assert_remote_matches(u, "after mount")


@pytest.mark.timeout(60)
def test_delete_and_rename_right_before_a_crash_reach_the_remote(new_drive):
    """A delete or rename through the mount is durable at once, like a save: a SIGKILL right
    after it must not leave the old names on the remote for ever."""
    u = up_drive(new_drive, writeback=0.2)
    for rel in ("gone.txt", "old.txt", "dir/x.txt", "keep.txt"):
        write(u.dir / rel, rel.encode())
    u.sync(30, check=0)
    os.unlink(u.dir / "gone.txt")
    os.rename(u.dir / "old.txt", u.dir / "new.txt")
    os.rename(u.dir / "dir", u.dir / "dir2")
    u.kill()
    u.mount()
    u.sync(30, check=0)
    assert tree(u.cache) == {"new.txt": b"old.txt", "dir2/x.txt": b"dir/x.txt", "keep.txt": b"keep.txt"}
    assert_remote_matches(u, "after a delete and renames made just before a SIGKILL")


@pytest.mark.timeout(90)
def test_unclosed_file_of_a_crash_is_uploaded_when_the_remote_comes_back_later(new_drive):
    """A file written but never closed before a crash, then a mount while the remote is away:
    once the remote is back, `docdrive sync` must get the file there."""
    u = up_drive(new_drive, writeback=0.2)
    write(u.dir / "a.txt", b"a")
    u.sync(30, check=0)
    fd = os.open(u.dir / "unclosed.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, os.urandom(100_000))
    time.sleep(0.3)
    u.kill()
    try:
        os.close(fd)
    except OSError:
        pass
    marker = (u.remote / MARKER).read_bytes()
    (u.remote / MARKER).unlink()
    u.mount()
    time.sleep(1.0)
    (u.remote / MARKER).write_bytes(marker)
    p = u.sync(30)
    assert p.returncode == 0, p.stderr
    assert (u.remote / "unclosed.bin").exists(), \
        "a file written but never closed before a crash was never uploaded (the remote was away at mount, then came back)"
    assert_remote_matches(u, "after the remote came back")


@pytest.mark.timeout(90)
def test_upload_temps_of_a_crash_are_removed_when_the_remote_comes_back_later(new_drive):
    """An upload interrupted by SIGKILL leaves a temp file; the next mount happens while the
    remote is away. Once it is back, a sync must not leave the temp behind."""
    u = up_drive(new_drive, writeback=0.05)
    write(u.dir / "big.bin", os.urandom(96 << 20))
    assert wait_until(lambda: leftovers(u.remote), 10, 0.001), "could not catch the upload in progress"
    u.kill()
    left = leftovers(u.remote)
    assert left, "the upload finished before the kill: no temp to test with"
    marker = (u.remote / MARKER).read_bytes()
    (u.remote / MARKER).unlink()
    u.mount()
    time.sleep(1.0)
    (u.remote / MARKER).write_bytes(marker)
    u.sync(30, check=0)
    assert_remote_matches(u, f"after the remote came back (temps at the kill: {[os.path.basename(x) for x in left]})")


@pytest.mark.timeout(60)
def test_hard_linked_names_stay_equal_on_the_remote(new_drive):
    """Two names of one file: a save through one changes both locally; the remote must follow."""
    u = up_drive(new_drive, writeback=0.2)
    write(u.dir / "a.txt", b"one")
    os.link(u.dir / "a.txt", u.dir / "b.txt")
    u.sync(30, check=0)
    assert tree(u.remote) == {"a.txt": b"one", "b.txt": b"one"}, tree(u.remote)
    with open(u.dir / "a.txt", "r+b") as f:
        f.write(b"two")
    assert (u.dir / "b.txt").read_bytes() == b"two"
    u.sync(30, check=0)
    assert_remote_matches(u, "after saving through one of two hard-linked names")


# --------------------------------------------------------------------------- unmount

@pytest.mark.timeout(90)
def test_unmount_uploads_pending_files_first(new_drive):
    u = up_drive(new_drive, writeback=20)
    expect = {f"u{i}.txt": os.urandom(2000) for i in range(3)}
    for rel, data in expect.items():
        write(u.dir / rel, data)
    assert wait_until(lambda: u.uploads()["pending"] == 3, 1), u.uploads()
    t0 = time.monotonic()
    p = u.d.unmount(timeout=80)
    print(f"unmount took {time.monotonic() - t0:.2f} s")
    assert p.returncode == 0, p.stderr
    assert tree(u.remote) == expect, f"unmount did not upload the pending files: {sorted(tree(u.remote))}"
    assert u.uploads()["pending"] == 0, u.uploads()


FUSECTL = Path("/sys/fs/fuse/connections")


def stop_daemon(pid):
    """SIGSTOP, and wait until every thread has stopped (the signal reaches them a moment later,
    and a worker still running would take a request the test means to leave in the kernel)."""
    def stopped():
        for t in Path(f"/proc/{pid}/task").iterdir():
            try:
                s = (t / "stat").read_text()
            except FileNotFoundError:
                continue
            if s[s.rindex(")") + 2] not in "Tt":
                return False
        return True
    os.kill(pid, signal.SIGSTOP)
    assert wait_until(stopped, 10), f"daemon {pid} did not stop"


def classic_up_drive(new_drive) -> Up:
    """A drive whose requests come through /dev/fuse, not the rings (DOCDRIVE_FUSE_URING=0).
    With the rings, the kernel hands a request to a ring entry at once, and the daemon's ring
    thread copies it in when it runs again: a stopped daemon then gets the RELEASE when it goes
    on (the kernel drops none), and an unmount waits for the stopped ring thread. What these
    tests stop the daemon for, a RELEASE the kernel drops, happens only on /dev/fuse."""
    u = up_drive(new_drive, writeback=0.2, mount=False)
    u.d.extra_env["DOCDRIVE_FUSE_URING"] = "0"
    return u.mount()


def close_with_the_daemon_stopped(u, name, data, end_connection):
    """Creates `name` holding `data`, stops the daemon (every thread), closes the file, which
    sends nothing for a created file, and runs `end_connection`; then lets the daemon go on and
    waits until it has ended (after its grace time's uploads)."""
    fd = os.open(u.dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    pid = u.d.pid
    stop_daemon(pid)
    try:
        os.close(fd)
        end_connection()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: not pid_alive(pid), 60), "the daemon did not end after its connection did"


def assert_dropped_release_uploaded(u, name, data):
    assert tree(u.remote) == {name: data}, \
        f"the file closed before the connection ended is not on the remote: {sorted(tree(u.remote))}\n{u.d.log_tail()}"
    assert "whose release the kernel dropped" in u.d.log_tail(80), u.d.log_tail(80)


@pytest.mark.timeout(120)
def test_a_file_closed_in_the_instant_before_an_unmount_is_uploaded(new_drive):
    """A created file's close sends no FLUSH: its save is noted at its RELEASE, which the kernel
    queues after close has returned. Here the daemon is stopped while the file is closed and the
    mount unmounted, and the kernel drops that RELEASE with the connection: the daemon releases
    the file itself once its session ends, so the save is uploaded in the unmount's grace time."""
    u = classic_up_drive(new_drive)
    data = b"closed in the instant before the unmount\n"

    def unmount():
        p = run(["fusermount3", "-u", str(u.d.mnt)], check=False, timeout=30)
        assert p.returncode == 0, f"fusermount3 -u with the daemon stopped: {p.stderr}"
    close_with_the_daemon_stopped(u, "last.txt", data, unmount)
    assert_dropped_release_uploaded(u, "last.txt", data)


@pytest.mark.timeout(120)
def test_a_created_file_whose_release_an_abort_dropped_is_still_uploaded(new_drive):
    """An aborted connection drops the requests the kernel still holds, a created file's RELEASE
    among them (its close sent no FLUSH). The daemon keeps such files' handles and releases them
    itself when its session ends, so the save is noted and uploaded in the grace time."""
    if not any(FUSECTL.iterdir()) and os.geteuid() == 0:
        run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], check=False)
    u = classic_up_drive(new_drive)
    abort = FUSECTL / str(os.stat(u.d.mnt).st_dev) / "abort"
    assert abort.exists(), f"{abort} is missing: the fuse control filesystem is not mounted (and cannot be)"
    data = b"closed, then the connection was aborted\n"
    close_with_the_daemon_stopped(u, "aborted.txt", data, lambda: abort.write_text("1"))
    # libfuse leaves an aborted connection's mount in place ("Transport endpoint is not connected").
    run(["fusermount3", "-uz", str(u.d.mnt)], check=False, timeout=30)
    assert_dropped_release_uploaded(u, "aborted.txt", data)


@pytest.mark.timeout(120)
def test_unmount_keeps_what_it_cannot_upload_and_next_mount_resumes(new_drive):
    u = up_drive(new_drive, writeback=0.2, mount=False).mount("--upload-grace", "3")
    marker = (u.remote / MARKER).read_bytes()
    (u.remote / MARKER).unlink()
    expect = {"q1.txt": b"q1", "q/q2.txt": b"q2"}
    for rel, data in expect.items():
        write(u.dir / rel, data)
    t0 = time.monotonic()
    p = u.d.unmount(timeout=100)
    took = time.monotonic() - t0
    print(f"unmount with an unreachable remote and --upload-grace 3 took {took:.2f} s: {p.stdout.strip()}")
    assert p.returncode == 0, p.stderr
    assert took < 15, f"unmount took {took:.1f} s though the daemon was mounted with --upload-grace 3"
    assert tree(u.remote) == {}
    q = u.uploads()
    assert q["pending"] + q["failed"] == 2 and q["synced"] == 0, f"the queue after unmount: {q}"
    (u.remote / MARKER).write_bytes(marker)
    u.mount()
    u.sync(30, check=0)
    assert tree(u.remote) == expect, sorted(tree(u.remote))


# --------------------------------------------------------------------------- crash rounds

class Writer(threading.Thread):
    """Runs the round's operations on the mount and records which ones returned."""

    def __init__(self, base: Path, ops, rng):
        super().__init__(daemon=True)
        self.base, self.ops, self.rng = base, ops, rng
        self.done = []  # indexes of the ops that returned, in order
        self.inflight = None  # the op index running when the writer stopped
        self.error = None

    def run(self):
        for i, op in enumerate(self.ops):
            self.inflight = i
            try:
                kind, rel = op["kind"], op["rel"]
                p = self.base / rel
                if kind == "rewrite":
                    with open(p, "wb") as f:
                        f.write(op["data"])
                elif kind == "patch":
                    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
                    try:
                        os.pwrite(fd, op["data"], op["offset"])
                        if op.get("truncate") is not None:
                            os.ftruncate(fd, op["truncate"])
                    finally:
                        os.close(fd)
                elif kind == "editor":
                    tmp = p.with_name(p.name + op["tmp"])
                    with open(tmp, "wb") as f:
                        f.write(op["data"])
                        if op.get("fsync"):
                            os.fsync(f.fileno())
                    os.rename(tmp, p)
                elif kind == "unlink":
                    os.unlink(p)
                elif kind == "move":
                    os.rename(p, self.base / op["to"])
            except OSError as e:
                self.error = e
                return
            self.done.append(i)
            self.inflight = None
            time.sleep(self.rng.uniform(0, op.get("pause", 0.02)))


def plan_round(rng, known: dict, names: list[str]):
    """The operations of one round; each has `effects`: {path: content after it, None = gone}."""
    ops = []
    state = dict(known)
    for k in range(rng.randint(5, 14)):
        rel = rng.choice(names)
        size = rng.choice([0, 1, 100, 4096, 70_000, 300_000, rng.randint(1, 2_500_000)])
        kind = rng.choices(["rewrite", "patch", "editor", "unlink", "move"], [4, 2, 4, 1, 1])[0]
        if kind in ("patch", "unlink", "move") and rel not in state:
            kind = "rewrite"
        op = {"kind": kind, "rel": rel, "pause": rng.choice([0.0, 0.01, 0.05, 0.15])}
        if kind == "patch":
            old = state[rel]
            off = rng.randint(0, len(old))
            data = rng.randbytes(rng.randint(1, 200_000))
            new = bytearray(old.ljust(off, b"\0"))
            new[off:off + len(data)] = data
            if rng.random() < 0.3:
                cut = rng.randint(0, len(new))
                op["truncate"] = cut
                new = new[:cut]
            op.update(offset=off, data=data)
            op["effects"] = {rel: bytes(new)}
        elif kind == "unlink":
            op["effects"] = {rel: None}
        elif kind == "move":
            to = rng.choice([n for n in names if n != rel])
            op["to"] = to
            op["effects"] = {rel: None, to: state[rel]}
        else:
            op["data"] = rng.randbytes(size)
            op["effects"] = {rel: op["data"]}
            if kind == "editor":
                op["tmp"] = f".tmp{rng.randint(0, 10**6)}"
                op["fsync"] = rng.random() < 0.3
        for r, c in op["effects"].items():
            if c is None:
                state.pop(r, None)
            else:
                state[r] = c
        ops.append(op)
    return ops


def describe(op):
    return f"{op['kind']} {op['rel']}" + (f" -> {op['to']}" if op["kind"] == "move" else "")


@pytest.mark.timeout(200)
def test_crash_rounds(new_drive):
    seed = int(os.environ.get("DOCDRIVE_CRASH_SEED", time.time_ns() % 10**9))
    rng = random.Random(seed)
    # Everything a round does (operations, contents, modes, the moments it waits for) comes
    # from the seed; only the daemon's own timing varies. Replay: DOCDRIVE_CRASH_SEED=<seed>.
    print(f"crash rounds: {CRASH_ROUNDS}, seed {seed} (replay with DOCDRIVE_CRASH_SEED={seed})")
    u = up_drive(new_drive, writeback=rng.choice([0.05, 0.1, 0.2]))
    print(f"writeback {u.writeback} s")
    names = [f"f{i}.bin" for i in range(5)] + [f"sub/g{i}.txt" for i in range(3)] + ["sub/deep/h.dat", "doc.odt", "big.bin"]
    for rel in names:
        (u.dir / rel).parent.mkdir(parents=True, exist_ok=True)
    known: dict[str, bytes] = {}  # what the local copy holds, as verified after the last round
    started = time.monotonic()
    for rnd in range(CRASH_ROUNDS):
        # stray editor temps of an interrupted save: delete them through the mount (carried over)
        strays = [rel for rel in known if rel not in names]
        for rel in strays:
            os.unlink(u.dir / rel)
            del known[rel]
        ops = plan_round(rng, known, names)
        mode = rng.choice(["during writes", "during writes", "during uploads", "during uploads", "after uploads"])
        if mode == "during uploads":
            # a big save widens the window in which an upload is under way
            big = rng.randbytes(rng.randint(8, 24) << 20)
            ops.append({"kind": rng.choice(["rewrite", "editor"]), "rel": "big.bin", "data": big,
                        "effects": {"big.bin": big}, "tmp": ".tmp-big", "pause": 0.0})
        w = Writer(u.dir, ops, random.Random(rng.random()))
        t0 = time.monotonic()
        w.start()
        if mode == "during writes":
            time.sleep(rng.uniform(0, 0.25))
        else:
            w.join(60)
            assert not w.is_alive(), "the writer hung with the daemon alive"
            if mode == "during uploads":
                # kill once an upload temp file shows on the remote
                assert wait_until(lambda: leftovers(u.remote), u.writeback + 10, 0.001), (
                    f"round {rnd} (seed {seed}): no upload started within {u.writeback + 10:.1f} s of the writes; "
                    f"queue {u.uploads()}\nlog:\n{u.d.log_tail()}")
                time.sleep(rng.uniform(0, 0.03))
            else:
                time.sleep(u.writeback + rng.uniform(0.1, 0.4))
        u.kill()
        w.join(30)
        assert not w.is_alive(), "the writer hung after the daemon was killed"
        temps_at_kill = leftovers(u.remote)
        q_at_kill = u.uploads()
        interrupted = ops[w.inflight] if w.inflight is not None else None
        print(f"round {rnd:2d} {mode:14s}: {len(w.done)}/{len(ops)} ops returned "
              f"({', '.join(describe(ops[i]) for i in w.done)}), interrupted: {describe(interrupted) if interrupted else '-'}; "
              f"queue at kill {q_at_kill}; upload temps on remote at kill {len(temps_at_kill)}", flush=True)
        u.mount()
        p = u.sync(60)
        assert p.returncode == 0, (f"round {rnd}: docdrive sync --timeout 60 exited {p.returncode}: {p.stderr}\n"
                                   f"uploads: {u.uploads()}\nlog:\n{u.d.log_tail()}")
        local, remote = tree(u.cache), tree(u.remote)
        left = leftovers(u.remote)
        # (a) the remote is the local copy, byte for byte
        assert not left, f"round {rnd}: upload temp files left after sync: {left}"
        assert local == remote, f"round {rnd} (seed {seed}, {mode}): remote differs from the local copy:\n{diff_trees(local, remote)}"
        # (b) every op that returned before the kill has its effect (unless the interrupted op touched the file)
        after = dict(known)  # what the returned ops leave
        for i in w.done:
            after.update(ops[i]["effects"])
        touched = set(interrupted["effects"]) if interrupted else set()
        checked, loose = 0, 0
        for rel in set(after) | set(known):
            if rel in touched:
                continue
            want = after.get(rel)
            assert local.get(rel) == want, (
                f"round {rnd} (seed {seed}): {rel} should be {'gone' if want is None else short(want)}, "
                f"local has {'nothing' if local.get(rel) is None else short(local[rel])}")
            checked += 1
        if interrupted is not None:
            if interrupted["kind"] in ("editor", "unlink", "move"):
                # atomic operations: the state before or after, never a mix
                for rel, new in interrupted["effects"].items():
                    assert local.get(rel) in (after.get(rel), new), \
                        f"round {rnd} (seed {seed}): {rel} after an interrupted {describe(interrupted)}: {local.get(rel) and short(local[rel])}"
                    checked += 1
            else:
                loose += 1
        up = u.uploads()
        assert up["pending"] == 0 and up["uploading"] == 0 and up["failed"] == 0, f"round {rnd}: {up}"
        print(f"         checked: remote == local for {len(local)} files (no temp left), expected content or "
              f"absence of {checked} paths, {loose} torn write allowed; {time.monotonic() - t0:.2f} s")
        known = local
    print(f"{CRASH_ROUNDS} rounds in {time.monotonic() - started:.1f} s")


def test_upload_temps_carry_the_device_id_and_another_devices_are_left_alone(new_drive):
    """A crash's upload temps are removed at the next mount, but only this device's: their names
    carry its device id, so two devices on one remote (even with drive homes at the same path on
    two machines) never remove each other's uploads in flight."""
    u = up_drive(new_drive, mount=False)
    tag = json.loads(u.d.cli("status", "--json").stdout)["device"]["id"][:12]
    mine = u.remote / f"{TEMP_PREFIX}{tag}-0f00"
    other = u.remote / f"{TEMP_PREFIX}0123456789ab-0f00"
    for p in (mine, other):
        p.write_bytes(b"half an upload")
    u.mount()
    assert wait_until(lambda: not mine.exists(), 10), "this device's leftover upload temp was not removed at mount"
    assert other.exists(), "another device's upload in flight was removed"
