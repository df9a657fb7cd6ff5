"""Several devices (separate drive homes and mounts on this machine) on one shared folder remote.

Each device has the store "shared" (shown as "Shared") on the same remote folder, with a short
write-back delay and poll interval. What is covered: joining a store that has content downloads
it; create, change, rename, move and delete travel both ways, and a rename keeps the item's id
(`user.docdrive.id`) on every device; concurrent edits keep both versions (a conflict copy named
after the other device, `user.docdrive.status` = conflict, listed by `docdrive sync`/`status`);
an edit against a delete keeps the edit; a folder deleted on one device with a new file in it
on another comes back; a file open for writing is never replaced under its writer; a reference on
B follows a rename made on A; the remote unreachable for a while (offline in status, nothing
deleted locally, everything resumes); a device never removes another device's upload temps.

The randomized test (test_random_operations_on_three_devices) runs random operations on three
devices with random pauses, records every version any device closed, then syncs and checks
that the three trees and the remote (read directly: the folder, or the bucket with boto3) are
identical (names, content), that every item has on every device the id the remote holds for it
(every file has one there; a folder where the server keeps a folder marker's metadata, which
SeaweedFS does not) and no device has two items with one id, that every version a device closed
is the final content of a file or a conflict copy unless a device replaced or deleted it after
seeing it, and that no conflict copy duplicates a winner.
The seed is printed; DOCDRIVE_SYNC_SEED replays it, DOCDRIVE_SYNC_OPS sets the operation count,
DOCDRIVE_TEST_LOGS=DIR keeps the daemons' logs there (with DOCDRIVE_LOG_LEVEL=debug, every
path's decision).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
import uuid
import threading
import time
from pathlib import Path

import pytest

from ddtest import NOTES_ID, RENAME_NOREPLACE, is_docdrive_mount, pid_alive, renameat2, run, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
from weed import Weed, WeedUnavailable  # noqa: E402

POLL = 0.5
WRITEBACK = 0.1


class SharedRemote:
    """Where the devices meet: a folder, or a prefix of the test bucket of a SeaweedFS."""

    def __init__(self, kind: str, folder: Path, weed: Weed | None = None):
        self.kind = kind
        self.folder = folder
        self.weed = weed
        self.prefix = f"many-{uuid.uuid4().hex[:10]}"
        self._client = None

    def store_args(self) -> list[str]:
        if self.kind == "folder":
            return ["--folder", str(self.folder)]
        return ["--s3", self.weed.endpoint, "--bucket", self.weed.bucket, "--prefix", self.prefix, "--path-style"]

    def env(self) -> dict:
        return self.weed.env({}) if self.weed else {}

    def tree(self) -> dict[str, bytes]:
        """What the remote holds (files and folders, as `tree` gives them), read directly: the
        folder, or the bucket with boto3 (a folder is a `path/` marker or implied by its keys)."""
        if self.kind == "folder":
            return {k: v for k, v in tree(self.folder).items() if not k.startswith(".docdrive-")}
        out = {}
        for key in self._keys():
            rel = key[len(self.prefix) + 1:]
            parts = rel.rstrip("/").split("/")
            for i in range(1, len(parts)):
                out["/".join(parts[:i]) + "/"] = b""
            if rel.endswith("/"):
                out[rel] = b""
            else:
                o = self._s3().get_object(Bucket=self.weed.bucket, Key=key)
                out[rel] = (b"->" + o["Body"].read()) if o["Metadata"].get("docdrive-link") == "1" else o["Body"].read()
        return out

    def ids(self) -> dict[str, str]:
        """The item id the remote holds for each item that has one (as `ids` gives them)."""
        out = {}
        if self.kind == "folder":
            for dirpath, dirnames, filenames in os.walk(self.folder):
                for n in filenames + dirnames:
                    p = os.path.join(dirpath, n)
                    rel = os.path.relpath(p, self.folder)
                    if rel.startswith(".docdrive-"):
                        continue
                    try:
                        meta = json.loads(os.getxattr(p, "user.docdrive.meta", follow_symlinks=False))
                    except OSError:
                        continue
                    if meta.get("itemID"):
                        out[rel] = meta["itemID"]
            return out
        for key in self._keys():
            the_id = self._s3().head_object(Bucket=self.weed.bucket, Key=key)["Metadata"].get("docdrive-id")
            if the_id:
                out[key[len(self.prefix) + 1:].rstrip("/")] = the_id
        return out

    def _keys(self) -> list[str]:
        """The store's keys (names in these tests need no ~dd~ escape), without its own objects."""
        keys = []
        for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=self.weed.bucket, Prefix=self.prefix + "/"):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return [k for k in keys if not k[len(self.prefix) + 1:].startswith(".docdrive")]

    def _s3(self):
        if self._client is None:
            from test_s3_mount import s3_client  # boto3 as the S3 tests find it (or fail in CI)
            self._client = s3_client(self.weed.endpoint)
        return self._client

    def close(self):
        if self._client is not None:
            self._client.close()  # its kept-alive connections would hold up SeaweedFS's stop


class Device:
    def __init__(self, d, remote: SharedRemote, name: str, poll: float = POLL, store_args=()):
        self.d = d
        self.name = name
        self.remote = remote
        d.extra_env.update(remote.env())
        d.cli("device", "--name", name)
        d.cli("store", "add", "shared", "--name", "Shared", *remote.store_args(),
              "--writeback", str(WRITEBACK), "--poll", str(poll), *store_args)

    @property
    def dir(self) -> Path:
        return self.d.mnt / "Shared"

    @property
    def cache(self) -> Path:
        return self.d.home / "stores" / "shared" / "cache"

    def mount(self):
        self.d.mount()
        assert self.dir.is_dir(), os.listdir(self.d.mnt)
        return self

    def sync(self, timeout=60, check=0):
        p = self.d.cli("sync", "--timeout", str(timeout), timeout=timeout + 60, check=False)
        if check is not None:
            assert p.returncode == check, (
                f"{self.name}: docdrive sync exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}\n"
                f"log:\n{self.d.log_tail(60)}")
        return p

    def status(self):
        return json.loads(self.d.cli("status", "--json").stdout)


def devices(new_drive, tmp_remote: SharedRemote, n: int, names=("alpha", "beta", "gamma"), log_level="info") -> list[Device]:
    out = []
    for i in range(n):
        dev = Device(new_drive(), tmp_remote, names[i])
        dev.d.extra_env["DOCDRIVE_LOG_LEVEL"] = os.environ.get("DOCDRIVE_LOG_LEVEL", log_level)
        out.append(dev.mount())
    return out


def sync_all(devs, rounds=2):
    for _ in range(rounds):
        for d in devs:
            d.sync()


def _raise(e: OSError):
    raise e  # os.walk would skip a folder it cannot list: a tree read must not hide that


def tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise):
        for n in filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            if rel == ".docdrive-store":
                continue
            if os.path.islink(p):
                out[rel] = b"->" + os.fsencode(os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
        for n in dirnames:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            out[rel + "/"] = b""
    return out


def ids(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise):
        for n in filenames + dirnames:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = os.getxattr(p, "user.docdrive.id").decode()
    return out


def write(p: Path, data: bytes):
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def original_of_conflict_copy(path: str) -> str:
    """The document a conflict copy was made from (its last "(conflict from DEVICE DATE)" out)."""
    marks = list(re.finditer(r" \(conflict from .+? \d{4}-\d{2}-\d{2} \d{2}\.\d{2}\.\d{2}\)", path))
    return path if not marks else path[:marks[-1].start()] + path[marks[-1].end():]


def conflict_copies(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(dp, n), root) for dp, _, fn in os.walk(root) for n in fn if "(conflict from " in n)


@pytest.fixture(scope="module")
def weed_server(tmp_path_factory):
    w = Weed(tmp_path_factory.mktemp("weed"))
    try:
        w.start()
    except WeedUnavailable as e:
        w.stop()
        pytest.fail(f"SeaweedFS could not start: {e}")
    yield w
    w.stop()


@pytest.fixture(params=["folder", "s3"])
def shared(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared-remote") / "remote"
    remote = SharedRemote(request.param, folder, request.getfixturevalue("weed_server") if request.param == "s3" else None)
    yield remote
    remote.close()


@pytest.fixture
def shared_folder(tmp_path_factory):
    """Tests that change the remote folder itself (move it away, plant files in it)."""
    return SharedRemote("folder", tmp_path_factory.mktemp("shared-remote") / "remote")


# --------------------------------------------------------------------------- basics

@pytest.mark.timeout(120)
def test_a_sync_with_nothing_to_do_looks_at_the_remote_once(new_drive, shared_folder):
    # `docdrive sync` looks at the remote again after a round that did something (a download, an
    # upload), and not after one that did nothing: on a folder store of 100,000 items each look
    # takes seconds. The stores poll once an hour here, so only the syncs poll.
    def polls(dev):
        # The status is published every 250 ms: read it until two reads 0.5 s apart agree.
        last, deadline = None, time.monotonic() + 10
        while True:
            n = dev.status()["stores"][0]["sync"].get("polls", 0)
            if n == last:
                return n
            assert time.monotonic() < deadline, f"{dev.name}: the status's count of polls did not settle"
            last = n
            time.sleep(0.5)

    a, b = (Device(new_drive(), shared_folder, name, poll=3600).mount() for name in ("alpha", "beta"))
    a.sync()
    before = polls(a)
    a.sync()
    assert polls(a) == before + 1, "a sync with nothing to do looked at the remote more than once"
    # Work in the first round (another device's new file, which its look finds and downloads):
    # the sync looks again, and what it brought is here when it returns. (An upload here may
    # end before the sync begins, so it says nothing about the rounds.)
    write(b.dir / "theirs.txt", b"beta")
    b.sync()
    before = polls(a)
    a.sync()
    assert (a.dir / "theirs.txt").read_bytes() == b"beta"
    assert polls(a) >= before + 2, "a sync that downloaded did not look at the remote again"
    before = polls(a)
    a.sync()
    assert polls(a) == before + 1, "a sync with nothing to do after one that downloaded looked more than once"


@pytest.mark.timeout(120)
def test_joining_a_store_downloads_what_it_holds(new_drive, shared):
    a = Device(new_drive(), shared, "alpha").mount()
    write(a.dir / "Reports" / "q3.txt", b"third quarter")
    write(a.dir / "notes.md", b"# notes\n")
    os.symlink("notes.md", a.dir / "link")
    (a.dir / "Empty").mkdir()
    a.sync()
    b = Device(new_drive(), shared, "beta").mount()
    b.sync()
    assert tree(b.dir) == tree(a.dir)
    assert (b.dir / "Reports" / "q3.txt").read_bytes() == b"third quarter"
    assert os.readlink(b.dir / "link") == "notes.md"
    # The item ids travel: the same document has the same id on both devices. SeaweedFS keeps
    # no user metadata on `path/` folder markers (HEAD returns none; checked with boto3), so
    # there a folder's id does not travel: files only.
    files_only = shared.kind == "s3"
    ia = {k: v for k, v in ids(a.dir).items() if not (files_only and (a.dir / k).is_dir())}
    ib = {k: v for k, v in ids(b.dir).items() if not (files_only and (b.dir / k).is_dir())}
    assert ib == ia and len(ia) >= 3, (ia, ib)
    st = b.status()
    assert "alpha" in json.dumps(st), st


@pytest.mark.timeout(150)
def test_changes_travel_both_ways_and_renames_keep_the_id(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "doc.txt", b"v1")
    a.sync(); b.sync()
    assert (b.dir / "doc.txt").read_bytes() == b"v1"
    doc_id = os.getxattr(a.dir / "doc.txt", "user.docdrive.id")
    assert os.getxattr(b.dir / "doc.txt", "user.docdrive.id") == doc_id
    # Changed on B, seen on A.
    write(b.dir / "doc.txt", b"v2 from beta")
    b.sync(); a.sync()
    assert (a.dir / "doc.txt").read_bytes() == b"v2 from beta"
    # Renamed and moved on A: a rename on B, same id.
    (a.dir / "Archive").mkdir()
    os.rename(a.dir / "doc.txt", a.dir / "Archive" / "renamed.txt")
    a.sync(); b.sync()
    assert not (b.dir / "doc.txt").exists()
    assert (b.dir / "Archive" / "renamed.txt").read_bytes() == b"v2 from beta"
    assert os.getxattr(b.dir / "Archive" / "renamed.txt", "user.docdrive.id") == doc_id
    if shared.kind == "folder":
        # The remote made Archive on the way to the moved file; it then took A's id, so that
        # its rename below arrives as a rename (S3 folder markers hold no id on SeaweedFS).
        assert os.getxattr(b.dir / "Archive", "user.docdrive.id") == os.getxattr(a.dir / "Archive", "user.docdrive.id")
    # A folder renamed on B, seen on A with what is in it.
    os.rename(b.dir / "Archive", b.dir / "Old")
    b.sync(); a.sync()
    assert not (a.dir / "Archive").exists()
    assert (a.dir / "Old" / "renamed.txt").read_bytes() == b"v2 from beta"
    # Deleted on A, gone on B.
    os.unlink(a.dir / "Old" / "renamed.txt")
    a.sync(); b.sync()
    assert not (b.dir / "Old" / "renamed.txt").exists()
    assert tree(a.dir) == tree(b.dir)
    assert conflict_copies(a.dir) == [] and conflict_copies(b.dir) == []


@pytest.mark.timeout(180)
def test_a_file_renamed_away_then_made_again_under_its_name_keeps_one_id_everywhere(new_drive, shared):
    # Given a document on two devices
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "doc.txt", b"v1")
    a.sync(); b.sync()
    doc_id = os.getxattr(a.dir / "doc.txt", "user.docdrive.id")
    # When one device renames it and, once the rename is on the remote and within the few
    # seconds an editor's rename-away save takes, makes a new file under the old name (the
    # mount gives the new file the document's id, as for vim's save, and the renamed file a
    # fresh one, until the sync sees that the remote knows the renamed file by the old id)
    renamed = time.monotonic()
    os.rename(a.dir / "doc.txt", a.dir / "moved.txt")
    a.sync()
    write(a.dir / "doc.txt", b"a new file under the old name")
    assert time.monotonic() - renamed < 5, "the new file came too late to count as a save"
    assert os.getxattr(a.dir / "doc.txt", "user.docdrive.id") == doc_id
    for _ in range(3):
        a.sync(); b.sync()
    # Then both devices know both files, each by the same id as the other device
    assert tree(a.dir) == tree(b.dir)
    ia, ib = ids(a.dir), ids(b.dir)
    assert ia == ib, f"ids differ: {ia} against {ib}"
    assert len(set(ia.values())) == len(ia), ia


@pytest.mark.timeout(120)
def test_changes_arrive_without_sync_within_the_poll_interval(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "live.txt", b"hello")
    t0 = time.monotonic()
    assert wait_until(lambda: (b.dir / "live.txt").exists() and (b.dir / "live.txt").read_bytes() == b"hello", 15), \
        f"not on B after 15 s\n{b.d.log_tail()}"
    took = time.monotonic() - t0
    print(f"create on A seen on B after {took:.2f} s (poll {POLL} s, write-back {WRITEBACK} s)")


@pytest.mark.timeout(150)
def test_concurrent_edits_keep_both_versions(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "plan.odt", b"base")
    a.sync(); b.sync()
    # Both change it before either hears of the other.
    a.d.cli("unmount", str(a.d.mnt))
    write(b.dir / "plan.odt", b"beta's change")
    b.sync()
    write(a.cache / "plan.odt", b"alpha's change")  # alpha edits while its drive is not mounted
    a.mount()
    a.sync(); b.sync(); a.sync()
    for dev in (a, b):
        copies = conflict_copies(dev.dir)
        assert len(copies) == 1, (dev.name, copies, tree(dev.dir))
        assert copies[0].startswith("plan (conflict from ") and copies[0].endswith(").odt"), copies
        versions = {(dev.dir / "plan.odt").read_bytes(), (dev.dir / copies[0]).read_bytes()}
        assert versions == {b"alpha's change", b"beta's change"}, versions
        assert os.getxattr(dev.dir / copies[0], "user.docdrive.status") == b"conflict"
    assert tree(a.dir) == tree(b.dir)
    # The one whose version lost is named in the copy; sync lists the conflict.
    p = a.sync()
    assert "conflict" in p.stderr + p.stdout, p.stderr
    # Every device says whose version the copy holds: the one its name gives (beta, whose
    # version reached the remote first), also on the device that only received the copy.
    copy = conflict_copies(a.dir)[0]
    assert copy.startswith("plan (conflict from beta "), copy
    assert (a.dir / copy).read_bytes() == b"beta's change"
    for dev in (a, b):
        listed = [c for st in dev.status()["stores"] for c in st["conflicts"]]
        assert [(c["copy"], c["device"]) for c in listed] == [(copy, "beta")], (dev.name, listed)


@pytest.mark.timeout(150)
def test_an_edit_wins_over_a_delete(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "keep.txt", b"original")
    a.sync(); b.sync()
    a.d.cli("unmount", str(a.d.mnt))
    os.unlink(b.dir / "keep.txt")
    b.sync()
    write(a.cache / "keep.txt", b"edited while the other deleted it")
    a.mount()
    sync_all([a, b])
    assert (a.dir / "keep.txt").read_bytes() == b"edited while the other deleted it"
    assert (b.dir / "keep.txt").read_bytes() == b"edited while the other deleted it"


@pytest.mark.timeout(150)
def test_a_file_deleted_elsewhere_is_kept_a_while_in_the_stores_deleted_folder(new_drive, shared):
    """What a delete from another device, or one made on the remote itself, takes from a
    device's copy is kept under the store's deleted/DAY/PATH (the same path deleted again that
    day gets " 2"); an empty file goes for good, and so does what a user deletes through the
    mount; none of it shows in the mount. On a folder remote emptied by `rm -rf *` (which
    leaves the hidden marker), every device keeps what it had."""
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "Reports" / "q1.txt", b"first quarter")
    write(a.dir / "empty.txt", b"")
    a.sync(); b.sync()
    assert (b.dir / "Reports" / "q1.txt").read_bytes() == b"first quarter"
    os.unlink(a.dir / "Reports" / "q1.txt")
    os.unlink(a.dir / "empty.txt")
    a.sync(); b.sync()
    assert not (b.dir / "Reports" / "q1.txt").exists() and not (b.dir / "empty.txt").exists(), tree(b.dir)
    write(a.dir / "Reports" / "q1.txt", b"second version")
    a.sync(); b.sync()
    os.unlink(a.dir / "Reports" / "q1.txt")
    a.sync(); b.sync()

    def kept(dev):
        """(path under its day folder, content) of every file the device keeps, sorted."""
        top = dev.d.home / "stores" / "shared" / "deleted"
        return sorted(("/".join(p.relative_to(top).parts[1:]), p.read_bytes()) for p in top.rglob("*") if p.is_file())
    got = kept(b)
    # (Across midnight the two are in two day folders, each under its own name.)
    assert got in ([("Reports/q1.txt", b"first quarter"), ("Reports/q1.txt 2", b"second version")],
                   [("Reports/q1.txt", b"first quarter"), ("Reports/q1.txt", b"second version")]), got
    assert "q1.txt" not in os.listdir(b.dir / "Reports")
    assert kept(a) == [], kept(a)
    # `docdrive status` says how many and where (they take room on the device).
    store = next(s for s in b.status()["stores"] if s["name"] == "shared")
    assert store["keptDeleted"]["files"] == 2 and store["keptDeleted"]["bytes"] > 0, store.get("keptDeleted")
    text = b.d.cli("status").stdout
    assert f"deleted elsewhere, kept here: 2 files" in text and "stores/shared/deleted" in text, text
    assert "keptDeleted" not in next(s for s in a.status()["stores"] if s["name"] == "shared")
    if shared.kind == "folder":
        write(a.dir / "Photos" / "p.bin", b"a photo")
        a.sync(); b.sync()
        for name in os.listdir(shared.folder):
            if not name.startswith("."):
                p = shared.folder / name
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        a.sync(); b.sync()
        for dev in (a, b):
            assert not (dev.dir / "Photos" / "p.bin").exists(), (dev.name, tree(dev.dir))
            assert ("Photos/p.bin", b"a photo") in kept(dev), (dev.name, kept(dev))


@pytest.mark.timeout(150)
def test_a_download_with_no_room_here_fails_with_its_reason_and_is_not_made_at_every_poll(new_drive, shared, base_dir):
    """B (all local, its drive home a tmpfs of 24 MiB) cannot download A's 30 MiB file: the entry
    ends failed with the reason ("No space left on device"), `docdrive sync` names it and exits 1,
    the room is free again, and the download is tried again at its doubling delay, not at every
    poll (each try reads the whole file from the remote). Before, every poll queued it afresh:
    it stayed pending with no reason, tried once a poll."""
    from ddtest import Drive, run
    a = Device(new_drive(), shared, "alpha").mount()
    d = Drive(base_dir / f"small-all-local-{shared.kind}-{os.getpid()}")
    d.home.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(d.home)])
    try:
        d.create()
        b = Device(d, shared, "beta")  # the store is empty: all local
        assert "content: on-demand" not in (d.home / "config.yaml").read_text()
        b.mount()
        write(a.dir / "big.bin", os.urandom(30 << 20))
        write(a.dir / "small.txt", b"fits here")
        a.sync()
        p = b.sync(timeout=60, check=1)
        assert "big.bin" in p.stderr and "No space left on device" in p.stderr, p.stderr
        assert (b.dir / "small.txt").read_bytes() == b"fits here"
        store = next(s for s in b.status()["stores"] if s["name"] == "shared")
        assert [f["path"] for f in store["failed"]] == ["big.bin"] and "No space left" in store["failed"][0]["error"], store
        v = os.statvfs(d.home)
        assert v.f_bavail * v.f_frsize > 20 << 20, "the failed download's room stays taken"
        tries = lambda: b.d.log_path.read_text().count("sync of big.bin with shared failed")
        before = tries()
        time.sleep(6)  # 12 polls
        assert tries() - before <= 2, f"{tries() - before} downloads tried in 6 s"
    finally:
        problems = d.teardown()
        run(["umount", "-l", str(d.home)], check=False)
        assert not problems, problems


@pytest.mark.timeout(150)
def test_times_at_both_ends_of_what_ext4_holds_travel_and_the_daemon_lives(new_drive, shared):
    """Files on A (through the mount, and one behind it) with times from 1901 to 2446 (ext4's
    ends) and 1969: both daemons live, the
    files reach B with their times, those past 2262-04-11 (the last nanosecond since 1970 an
    Int64 holds, as the drive keeps times) as that date, A's own times untouched; A mounts
    again and has nothing left to upload. Before, a time past 2262 killed A's daemon in its
    sync ("arithmetic overflow") and every later mount of that drive died at start."""
    a, b = devices(new_drive, shared, 2)
    last_ns = 2**63 - 1
    ends = {"future.txt": 9_300_000_000, "last.txt": 15_032_385_535, "first.txt": -2_147_483_648,
            "before-1970.txt": -1, "now.txt": 1_700_000_000}
    for name, t in ends.items():
        write(a.dir / name, name.encode())
        os.utime(a.dir / name, ns=(t * 10**9, t * 10**9))
    # And one behind the mount's back, in A's local copy.
    ends["behind.txt"] = 9_400_000_000
    write(a.cache / "behind.txt", b"behind.txt")
    os.utime(a.cache / "behind.txt", (9_400_000_000, 9_400_000_000))
    sync_all([a, b])
    for dev in (a, b):
        assert dev.d.healthy(), f"{dev.name}'s daemon died: {dev.d.log_tail()}"
    for name, t in ends.items():
        assert os.stat(a.dir / name).st_mtime_ns == t * 10**9, name
        assert (b.dir / name).read_bytes() == name.encode()
        assert os.stat(b.dir / name).st_mtime_ns == min(t * 10**9, last_ns), name
    a.d.unmount()
    a.mount()
    a.sync()
    store = next(s for s in a.status()["stores"] if s["name"] == "shared")
    assert store["uploads"]["pending"] == 0 and store["uploads"]["uploading"] == 0, store


def fill(folder: Path) -> Path:
    """Writes a file in `folder` until its filesystem has no room left; returns the file."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as e:
            assert e.errno == 28, e  # ENOSPC
    for size in (65536, 4096, 1):  # the last blocks, down to the last byte
        try:
            with open(filler, "ab") as f:
                while True:
                    f.write(b"\0" * size)
                    f.flush()
        except OSError as e:
            assert e.errno == 28, e
    return filler


@pytest.mark.timeout(240)
def test_a_device_whose_home_was_full_for_a_while_catches_up_and_loses_no_save(new_drive, shared, base_dir):
    """B's drive home (index, queue, local copy) is a tmpfs of 48 MiB, its log on another disk,
    its uploads limited to 1 MiB/s. Three times, while B uploads a file of 2 MiB, its home is
    filled to the last byte for three seconds while A writes new files and B appends lines to a
    file (each `open, write, close` that succeeded is recorded) and saves a document as editors
    do (a temp file renamed over it). Afterwards `docdrive sync` exits 0 on
    both, the trees are equal, every append and the last save that succeeded are there, and no
    entry of B's queue is left uploading with no worker on it. Before, a claimed entry whose
    ending could not be written stayed `uploading` for ever: later saves of it never went up and
    `docdrive sync` waited out its time."""
    from ddtest import Drive, run
    a = Device(new_drive(), shared, "alpha").mount()
    d = Drive(base_dir / f"full-home-{shared.kind}-{os.getpid()}")
    d.home.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(d.home)])
    logs = base_dir / f"full-home-run-{shared.kind}-{os.getpid()}"
    logs.mkdir()
    (d.home / "run").mkdir()
    run(["mount", "--bind", str(logs), str(d.home / "run")])
    try:
        d.create()
        b = Device(d, shared, "beta", store_args=("--bandwidth", "1M"))
        b.d.extra_env["DOCDRIVE_LOG_LEVEL"] = "debug"
        b.mount()
        write(b.dir / "doc.txt", b"save 0\n")
        sync_all([a, b], rounds=1)
        appended, saved, failures = [], b"save 0\n", 0
        stop = threading.Event()

        def b_writes():
            nonlocal saved, failures
            i = 0
            while not stop.is_set():
                i += 1
                line = f"line {i}\n".encode()
                try:
                    fd = os.open(b.dir / "log.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        wrote = os.write(fd, line)  # short on a disk with a few bytes left
                    finally:
                        os.close(fd)
                    if wrote == len(line):
                        appended.append(line)
                    else:
                        failures += 1
                except OSError:
                    failures += 1
                content = f"save {i}\n".encode() * 50
                tmp = b.dir / f".doc.txt.{i}.tmp"
                try:
                    with open(tmp, "wb") as f:
                        f.write(content)
                    os.rename(tmp, b.dir / "doc.txt")
                    saved = content
                except OSError:
                    failures += 1
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass
                time.sleep(0.02)

        writer = threading.Thread(target=b_writes)
        writer.start()
        try:
            for round in range(3):
                for k in range(10):
                    write(a.dir / f"from-a-{round}-{k}.bin", os.urandom(100_000))
                write(b.dir / f"big-{round}.bin", os.urandom(2 << 20))
                assert wait_until(lambda: any(u["path"] == f"big-{round}.bin" for u in b.status()["inFlight"]),
                                  timeout=10), f"B's upload of big-{round}.bin did not start"
                filler = fill(d.home)
                for k in range(10, 30):
                    write(a.dir / f"from-a-{round}-{k}.bin", os.urandom(100_000))
                    time.sleep(0.1)
                filler.unlink()
                time.sleep(1)
        finally:
            stop.set()
            writer.join(30)
        assert failures > 0, "the fills made no write on B fail: the test did not fill its home"
        for _ in range(2):
            a.sync(timeout=90)
            b.sync(timeout=90)
        ta, tb = tree(a.dir), tree(b.dir)
        assert ta == tb, (sorted(set(ta) ^ set(tb)), [k for k in ta if k in tb and ta[k] != tb[k]])
        log = tb.get("log.txt", b"")
        missing = [l for l in appended if l not in log]  # a short write's part may stand before one
        assert not missing, f"{len(missing)} of {len(appended)} appends that succeeded are gone: {missing[:5]}"
        assert tb["doc.txt"] == saved, "the last save that succeeded is not the document"
        store = next(s for s in b.status()["stores"] if s["name"] == "shared")
        assert store["uploads"]["uploading"] == 0 and store["uploads"]["pending"] == 0, store
    finally:
        problems = d.teardown()
        keep = os.environ.get("DOCDRIVE_TEST_LOGS")
        if keep:
            shutil.copy(logs / "daemon.log", Path(keep) / f"full-home-{shared.kind}-beta.log")
            shutil.copy(a.d.log_path, Path(keep) / f"full-home-{shared.kind}-alpha.log")
        run(["umount", "-l", str(d.home / "run")], check=False)
        run(["umount", "-l", str(d.home)], check=False)
        assert not problems, problems


@pytest.mark.timeout(150)
def test_a_folder_deleted_here_with_a_new_file_in_it_there_comes_back(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "Trip" / "old.txt", b"old")
    a.sync(); b.sync()
    a.d.cli("unmount", str(a.d.mnt))
    shutil.rmtree(b.dir / "Trip")
    b.sync()
    write(a.cache / "Trip" / "new.txt", b"new while deleted elsewhere")
    a.mount()
    sync_all([a, b])
    for dev in (a, b):
        assert (dev.dir / "Trip" / "new.txt").read_bytes() == b"new while deleted elsewhere", tree(dev.dir)
        assert not (dev.dir / "Trip" / "old.txt").exists()


@pytest.mark.timeout(150)
def test_a_file_open_for_writing_is_not_replaced_under_its_writer(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "open.txt", b"v1")
    a.sync(); b.sync()
    with open(b.dir / "open.txt", "r+b") as f:
        write(a.dir / "open.txt", b"v2 from alpha")
        a.sync()
        b.d.cli("sync", "--timeout", "30", check=False)
        # B's writer still holds its file; the other version is kept beside it.
        f.seek(0)
        f.write(b"B")
    b.sync(); a.sync(); b.sync()
    copies = conflict_copies(b.dir)
    assert len(copies) == 1, tree(b.dir)
    assert {(b.dir / "open.txt").read_bytes(), (b.dir / copies[0]).read_bytes()} == {b"B1", b"v2 from alpha"}
    assert tree(a.dir) == tree(b.dir)


@pytest.mark.timeout(120)
def test_downloads_into_a_folder_where_files_are_being_opened_do_not_hang_the_mount(new_drive, shared_folder):
    """A download tells the kernel to forget its file's entry, which waits for the kernel's lock
    of the folder; an open(O_RDWR|O_CREAT) in that folder holds that lock while its reply drops
    the file's cached attributes. Until 2026-11-26 one lock of the daemon was held across both
    notifications, and the mount hung (found by the randomized test)."""
    a, b = devices(new_drive, shared_folder, 2)
    for i in range(8):
        write(a.dir / "D" / f"in{i}.txt", b"v0")
    a.sync(); b.sync()
    stop = time.monotonic() + 12
    written = []

    def alpha_writes():  # files that beta keeps downloading into D
        n = 0
        while time.monotonic() < stop:
            data = f"v{n} from alpha".encode()
            write(a.dir / "D" / f"in{n % 8}.txt", data)
            written.append(data)
            n += 1
            time.sleep(0.005)

    t = threading.Thread(target=alpha_writes)
    t.start()
    opened = 0
    try:
        while time.monotonic() < stop:
            # A new name each time: the kernel holds D's lock across the whole CREATE.
            p = b.dir / "D" / f"mine{opened}.txt"
            fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
            os.close(fd)
            os.unlink(p)
            opened += 1
    finally:
        t.join()
    print(f"{opened} opens on beta while alpha wrote {len(written)} versions")
    a.sync(); b.sync(); a.sync()
    assert tree(a.dir) == tree(b.dir)
    assert (b.dir / "D" / f"in{(len(written) - 1) % 8}.txt").read_bytes() == written[-1]


@pytest.mark.timeout(150)
def test_a_reference_on_another_device_follows_a_rename(new_drive, shared):
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "Letters" / "draft.txt", b"Dear ...")
    a.sync(); b.sync()
    # Notes on B opens the document from the shared store: a reference in its container.
    b.d.cli("open", "--app", NOTES_ID, str(b.dir / "Letters" / "draft.txt"))
    ref = b.d.mnt / "Notes" / "draft.txt"
    assert ref.read_bytes() == b"Dear ..."
    os.rename(a.dir / "Letters" / "draft.txt", a.dir / "Letters" / "final.txt")
    write(a.dir / "Letters" / "final.txt", b"Dear Sir")
    a.sync(); b.sync()
    assert (b.dir / "Letters" / "final.txt").read_bytes() == b"Dear Sir"
    assert wait_until(lambda: ref.read_bytes() == b"Dear Sir", 5), ref.read_bytes()


@pytest.mark.timeout(300)
def test_a_rename_onto_a_name_another_device_makes_at_that_moment_loses_neither(new_drive, shared):
    # The race of seed 2417074523 (see test_random_operations_on_three_devices): alpha renames
    # src.txt to dst.txt while beta makes dst.txt, each at a random moment within about one poll
    # interval of the other, in 20 folders. Beta's version survives every time, at dst.txt or
    # as a conflict copy; alpha's does too unless beta wrote over it having read it.
    seed = int(os.environ.get("DOCDRIVE_RACE_SEED", random.randrange(1 << 32)))
    print(f"seed {seed}; replay with DOCDRIVE_RACE_SEED={seed}")
    rng = random.Random(seed)
    a, b = devices(new_drive, shared, 2, log_level="debug")
    rounds = 20
    for k in range(rounds):
        write(a.dir / f"r{k}" / "src.txt", f"alpha's {k}\n".encode())
    sync_all((a, b))
    seen_by_beta, renamed = {}, []
    for k in range(rounds):
        delay_a, delay_b = rng.random() * 0.6, rng.random() * 0.6

        def rename_on_alpha():
            time.sleep(delay_a)
            try:
                renameat2(a.dir / f"r{k}" / "src.txt", a.dir / f"r{k}" / "dst.txt", RENAME_NOREPLACE)
                renamed.append(k)
            except FileExistsError:
                pass  # beta's dst.txt was here first: alpha keeps its src.txt

        def make_on_beta():
            time.sleep(delay_b)
            fd = os.open(b.dir / f"r{k}" / "dst.txt", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                seen_by_beta[k] = os.read(fd, 1 << 16)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"beta's {k}\n".encode(), 0)
            finally:
                os.close(fd)
        threads = [threading.Thread(target=rename_on_alpha), threading.Thread(target=make_on_beta)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for _ in range(3):
        for d in (a, b):
            d.sync(timeout=120)
    remote = shared.tree()
    assert tree(a.dir) == tree(b.dir) == remote, f"seed {seed}: the devices and the remote differ"
    lost = []
    for k in range(rounds):
        here = {p: v for p, v in remote.items() if p.startswith(f"r{k}/") and not p.endswith("/")}
        if f"beta's {k}\n".encode() not in here.values():
            lost.append((k, "beta", here))
        if seen_by_beta[k] != f"alpha's {k}\n".encode() and f"alpha's {k}\n".encode() not in here.values():
            lost.append((k, "alpha", here))
    assert not lost, f"seed {seed}: versions lost: {lost[:5]}"
    print(f"{len(renamed)} of {rounds} renames were made (the others found beta's file there); "
          f"beta read alpha's version first in {sum(v != b'' for v in seen_by_beta.values())}")


@pytest.mark.timeout(150)
def test_an_unreachable_remote_is_offline_not_empty(new_drive, shared_folder):
    shared = shared_folder.folder
    a, b = devices(new_drive, shared_folder, 2)
    write(a.dir / "safe.txt", b"stays")
    a.sync(); b.sync()
    away = shared.with_name("remote-away")
    os.rename(shared, away)
    try:
        time.sleep(POLL * 4)
        # Nothing is deleted here; the store is offline; writes queue.
        assert (b.dir / "safe.txt").read_bytes() == b"stays"
        write(b.dir / "while-away.txt", b"queued")
        p = b.d.cli("sync", "--timeout", "5", check=False)
        assert p.returncode != 0 and "offline" in (p.stderr + p.stdout).lower(), p.stderr
        st = b.status()
        assert "offline" in json.dumps(st).lower(), st
        # The plain status says it in one sentence and what happens meanwhile.
        text = b.d.cli("status").stdout
        line = [l for l in text.splitlines() if "offline since" in l]
        assert line and line[0].endswith(". Changes wait here until it answers.") and ".;" not in line[0], text
    finally:
        os.rename(away, shared)
    sync_all([b, a])
    assert (a.dir / "while-away.txt").read_bytes() == b"queued"
    assert (a.dir / "safe.txt").read_bytes() == b"stays"


@pytest.mark.timeout(120)
def test_devices_leave_each_others_upload_temps_alone(new_drive, shared_folder):
    shared = shared_folder.folder
    a, b = devices(new_drive, shared_folder, 2)
    # A temp of another device, as if its upload were in progress.
    foreign = shared / ".docdrive-upload-0123456789ab-inprogress"
    write(foreign, b"another device's upload")
    b.d.cli("unmount", str(b.d.mnt))
    b.mount()
    b.sync()
    assert foreign.exists()
    assert not (b.dir / foreign.name).exists()


@pytest.mark.timeout(120)
def test_a_file_with_no_record_of_being_on_the_remote_is_never_shown_synced(new_drive, shared):
    # Given a file that reached the store's local copy without the mount noting it (written
    # into the backing folder behind its back: the stand-in for any path the sync missed)
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "seen.txt", b"noted")
    write(a.dir / "brief.txt", b"made and deleted")
    os.unlink(a.dir / "brief.txt")
    a.sync()
    write(a.cache / "unseen.txt", b"nobody noted me")
    # (and one at a path whose last sync found nothing there: its queue entry says synced)
    write(a.cache / "brief.txt", b"made again behind the back")
    # Then its status is not "synced" while the remote does not have it
    assert "unseen.txt" not in shared.tree() and "brief.txt" not in shared.tree()
    status = os.getxattr(a.dir / "unseen.txt", "user.docdrive.status").decode()
    assert status == "pending", status
    status = os.getxattr(a.dir / "brief.txt", "user.docdrive.status").decode()
    assert status == "pending", status
    assert os.getxattr(a.dir / "seen.txt", "user.docdrive.status") == b"synced"
    # And the look queued it: it goes up and reaches the other device
    a.sync(); b.sync()
    assert shared.tree().get("unseen.txt") == b"nobody noted me"
    assert (b.dir / "unseen.txt").read_bytes() == b"nobody noted me"
    assert os.getxattr(a.dir / "unseen.txt", "user.docdrive.status") == b"synced"
    assert shared.tree().get("brief.txt") == b"made again behind the back"
    assert "no record of being on the remote" in a.d.log_path.read_text(errors="replace")


@pytest.mark.timeout(120)
def test_docdrive_sync_sends_up_what_nothing_queued(new_drive, shared):
    # Given a file made and a file changed in the store's local copy without the mount noting
    # either (behind its back: the stand-in for any save the sync missed)
    a, b = devices(new_drive, shared, 2)
    write(a.dir / "known.txt", b"v1")
    a.sync(); b.sync()
    write(a.cache / "unnoted.txt", b"made behind the back")
    write(a.cache / "known.txt", b"v2, changed behind the back")
    # When the user runs docdrive sync (and reads no status first)
    a.sync()
    # Then both are on the remote and reach the other device, and the log says what was found
    remote = shared.tree()
    assert remote.get("unnoted.txt") == b"made behind the back", sorted(remote)
    assert remote.get("known.txt") == b"v2, changed behind the back"
    b.sync()
    assert (b.dir / "unnoted.txt").read_bytes() == b"made behind the back"
    assert (b.dir / "known.txt").read_bytes() == b"v2, changed behind the back"
    log = a.d.log_path.read_text(errors="replace")
    assert "2 paths differed from this device's record of the remote with nothing waiting" in log, a.d.log_tail(20)


# --------------------------------------------------------------------------- randomized

@pytest.mark.timeout(900)
def test_random_operations_on_three_devices(new_drive, shared, request):
    # History (see the README): on S3 this failed in about half the runs of seed 747277646
    # until 2026-11-25, and the runs since found a move left to another path's sync, one item
    # id at two paths (now healed), a hung mount, writes to a file a download had replaced,
    # a truncation that never went up, this test's own look-then-O_TRUNC race, an open for
    # writing between a download's check and its rename, and a file renamed away from under
    # an editor-style save that kept a fresh id (seed 2961438107, fixed 2026-11-26). Since that
    # fix: 47 of 47 S3 runs passed (7 on 2026-11-26 08:39-08:49 UTC, 40 on 10:26-11:03 UTC).
    # Open: one S3 failure in a CI rehearsal on 2026-11-27 (seed 2417074523: a file made on
    # beta lost where alpha's rename onto its name arrived, no conflict copy), which 25 replays
    # of its seed and 230 rounds of that race on two devices did not bring back; the daemons
    # log at debug level here since, so that the next one says what each device decided.
    # Seed 2368072074 (S3, 2026-11-27 15:00 UTC): a file moved away and back by other devices
    # was taken for the device's own upload that a stop kept from its record, and deleted
    # (the recognition of such uploads was new that day; fixed, SyncEngineTests).
    # Seed 3895976231 (S3, CI rehearsal 2026-11-27 19:04 UTC): gamma's new f1.txt was replaced by
    # an item another device moved onto that name, and gamma downloaded over its own version. A
    # SeaweedFS CopyObject with If-None-Match does not exclude a PutObject made at the same
    # moment (both succeeded in 13 of 200 tries): small files are moved by GET and conditional
    # PUT since (S3RemoteTests). Seed 2417074523's loss (above) fits the same cause.
    # Seed 3840959234 (S3, 2026-11-28 00:58 UTC): a conflict copy of a version that also won, after
    # two devices made the same move and a third saved at the new path (fixed, SyncEngineTests).
    # Seed 2233250103 (S3, 2026-11-28 01:20 UTC): a LOST version. A file moved away and back by
    # another device, which its uploader had followed as a delete meanwhile, was taken for an
    # upload a stop had kept from its record, and deleted (fixed, SyncEngineTests).
    # Seed 1157816403 (folder, 2026-12-07 15:53 UTC, two builds running beside it): a conflict
    # copy of a version that also won, at a copy of a copy of a copy of B/f0 (nothing lost); two
    # replays passed, and the loop kept no logs: loop with DOCDRIVE_TEST_LOGS set.
    # Seeds 1742778612, 3388521786, 360447157, 3877079686 (S3, 2026-12-07, the first build with
    # the change journal: 4 of 17 runs): devices holding other item ids than the remote. An id at
    # two paths of the remote (changes crossed) was healed only by listings, which the journal
    # made rare; and the two local files took the id in turns, one ending with a fresh id of
    # its own (both fixed: the journal asks for a listing, the path that lost the id is decided
    # again). 15 of 15 runs passed after (10 S3, 5 folder).
    # Strict on both remotes.
    seed = int(os.environ.get("DOCDRIVE_SYNC_SEED", random.randrange(1 << 32)))
    nops = int(os.environ.get("DOCDRIVE_SYNC_OPS", "500"))
    print(f"seed {seed} ({nops} operations); replay with DOCDRIVE_SYNC_SEED={seed}")
    rng = random.Random(seed)
    # Every decision in the log: a failure here is rare and timing-bound (it may not come back
    # with its seed), so what each device decided about each path must be there when it does.
    devs = devices(new_drive, shared, 3, log_level="debug")
    keep = os.environ.get("DOCDRIVE_TEST_LOGS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        # The daemons' logs outlive the test's folders (read with DOCDRIVE_LOG_LEVEL=debug).
        request.addfinalizer(lambda: [shutil.copy(d.d.log_path, Path(keep) / f"{shared.kind}-{seed}-{d.name}.log")
                                      for d in devs if d.d.log_path.exists()])
    folders = ["", "A", "B", "A/deep"]
    names = [f"f{i}.txt" for i in range(12)]
    closed: list[tuple[str, bytes]] = []  # (device, content) of every version a device closed
    where: dict[bytes, str] = {}  # the path each closed version was written at (for the failure message)
    superseded: set[bytes] = set()  # versions a device replaced or deleted after seeing them
    # What this test did, per operation: "NUMBER DEVICE OP PATH [-> PATH] [raced]", with what an
    # unlink or a replace read, so that a version gone can be told from one the test removed.
    done: list[str] = []

    def replace(p: Path, data: bytes, append: bool = False) -> bytes:
        """Writes `data` into p (made if missing; after its end with `append`) through the one
        descriptor that first read what p held: the version replaced is the one this device
        saw. (A look, then open(O_TRUNC), would replace unseen a version downloaded between
        the two: the test's race, not a lost update.) Returns p's new content."""
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            old = b""
            while chunk := os.read(fd, 1 << 20):
                old += chunk
            superseded.add(old)
            done[-1] += f" (read {len(old)} bytes {old[:20]!r})"
            if not append:
                os.ftruncate(fd, 0)
            at = len(old) if append else 0
            view = memoryview(data)
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
        finally:
            os.close(fd)
        return old + data if append else data

    def remove(p: Path):
        """Deletes p after reading it, unless the file there is no longer the one read."""
        fd = os.open(p, os.O_RDONLY)
        try:
            old = b""
            while chunk := os.read(fd, 1 << 20):
                old += chunk
            ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        superseded.add(old)
        done[-1] += f" (read {len(old)} bytes {old[:20]!r})"
        if os.stat(p).st_ino != ino:
            raise FileNotFoundError(p)  # replaced by a download since the read: raced
        os.unlink(p)
    counter = 0

    def content(dev):
        nonlocal counter
        counter += 1
        return f"{dev.name} #{counter} {rng.randrange(1 << 30)}\n".encode() * rng.randint(1, 40)

    def files(dev):
        out = []
        for dp, _, fn in os.walk(dev.dir):
            for n in fn:
                out.append(Path(dp) / n)
        return out

    counts = {}
    for i in range(nops):
        dev = rng.choice(devs)
        op = rng.choices(["create", "edit", "append", "rename", "move", "delete", "same"], [5, 5, 2, 2, 2, 2, 2])[0]
        existing = files(dev)

        def did(d, what, p, q=None):
            done.append(f"{i} {d.name} {what} {p.relative_to(d.dir)}" + (f" -> {q.relative_to(d.dir)}" if q else ""))
        try:
            if op == "create" or not existing:
                p = dev.dir / rng.choice(folders) / rng.choice(names)
                data = content(dev)
                did(dev, "create", p)
                replace(p, data)
                closed.append((dev.name, data))
                where[data] = f"{op} {i} at {p.relative_to(dev.dir)}"
            elif op == "edit":
                p = rng.choice(existing)
                data = content(dev)
                did(dev, op, p)
                replace(p, data)
                closed.append((dev.name, data))
                where[data] = f"{op} {i} at {p.relative_to(dev.dir)}"
            elif op == "append":
                p = rng.choice(existing)
                did(dev, op, p)
                closed.append((dev.name, replace(p, content(dev), append=True)))
                where[closed[-1][1]] = f"{op} {i} at {p.relative_to(dev.dir)}"
            elif op == "rename":
                p = rng.choice(existing)
                q = p.parent / rng.choice(names)
                did(dev, op, p, q)
                if not q.exists():
                    # Never over a file the device downloaded since the look (unseen).
                    renameat2(p, q, RENAME_NOREPLACE)
                else:
                    done[-1] += " (not: there is a file there)"
            elif op == "move":
                p = rng.choice(existing)
                q = dev.dir / rng.choice(folders) / p.name
                did(dev, op, p, q)
                q.parent.mkdir(parents=True, exist_ok=True)
                if not q.exists():
                    renameat2(p, q, RENAME_NOREPLACE)
                else:
                    done[-1] += " (not: there is a file there)"
            elif op == "delete":
                p = rng.choice(existing)
                did(dev, op, p)
                remove(p)
            elif op == "same":
                # The same file edited on two devices at once.
                rel = rng.choice(existing).relative_to(dev.dir)
                for other in devs:
                    if (other.dir / rel).exists():
                        data = content(other)
                        did(other, op, other.dir / rel)
                        replace(other.dir / rel, data)
                        closed.append((other.name, data))
                        where[data] = f"{op} {i} at {rel}"
        except (FileNotFoundError, FileExistsError):
            op += " (raced)"
            if done and done[-1].startswith(f"{i} "):
                done[-1] += " (raced)"
        counts[op] = counts.get(op, 0) + 1
        if rng.random() < 0.1:
            time.sleep(rng.choice([0.05, 0.2, POLL, 2 * POLL]))
    print("operations:", counts)
    if keep:
        (Path(keep) / f"{shared.kind}-{seed}-test.log").write_text("\n".join(done) + "\n")
    t_last = time.monotonic()
    # How long until the three devices agree by themselves (no `docdrive sync`).
    def agree():
        try:
            return tree(devs[0].dir) == tree(devs[1].dir) == tree(devs[2].dir)
        except (FileNotFoundError, NotADirectoryError):
            return False  # a file went while the tree was read: still moving
    agreed = wait_until(agree, 60, 0.2)
    took = time.monotonic() - t_last
    print(f"three devices agree {took:.1f} s after the last write (poll {POLL} s, write-back {WRITEBACK} s)"
          if agreed else "three devices did not agree by themselves within 60 s")
    # Quiet, then sync everywhere until nothing moves.
    for _ in range(3):
        for d in devs:
            d.sync(timeout=120)
    try:
        trees = [tree(d.dir) for d in devs]
    except OSError as e:
        def where(d):
            try:
                return (is_docdrive_mount(d.d.mnt), pid_alive(d.d.pid), sorted(os.listdir(d.d.mnt)))
            except OSError as e2:
                return (is_docdrive_mount(d.d.mnt), pid_alive(d.d.pid), str(e2))
        raise AssertionError(f"seed {seed}: a tree cannot be read: {e}; per device (mounted, daemon alive, mount root): "
                             + str({d.name: where(d) for d in devs})) from e

    # One id at two paths of the remote (two devices' changes crossed; S3 has no transaction
    # over two keys) is healed once listed so for 2 s (DuplicateIDs.grace): a few more rounds,
    # until the remote's ids are unique and every device holds them.
    def ids_agree() -> bool:
        r = shared.ids()
        if len(set(r.values())) != len(r):
            return False
        return all(ids(d.dir).get(k) == i for d in devs for k, i in r.items())
    for _ in range(8):
        try:
            if ids_agree():
                break
        except OSError:
            pass  # a file went while the ids were read: still moving
        time.sleep(1)
        for d in devs:
            d.sync(timeout=120)
    remote_ids = shared.ids()
    idsets = [ids(d.dir) for d in devs]

    def explain(paths):
        out = [f"items: remote {len(remote_tree)}, " + ", ".join(f"{d.name} {len(t)}" for d, t in zip(devs, trees))]
        for rel in sorted(paths)[:5]:
            name = os.path.basename(rel.rstrip("/"))
            out.append(f"--- {rel}: remote has {remote_tree.get(rel, b'nothing')[:30]!r} id {remote_ids.get(rel.rstrip('/'))}")
            for d, t, s_ in zip(devs, trees, idsets):
                out.append(f"  {d.name}: {t.get(rel, b'nothing')[:30]!r} id {s_.get(rel.rstrip('/'))}")
                for line in d.d.log_path.read_text(errors="replace").splitlines():
                    if name in line:
                        out.append(f"    {d.name} log: {line[26:]}")
        return "\n".join(out)

    remote_tree = shared.tree()
    for d, t in zip(devs, trees):
        differing = {k for k, _ in set(t.items()) ^ set(remote_tree.items())}
        assert t == remote_tree, explain(differing) + f"\nseed {seed}: {d.name} differs from the remote at {sorted(differing)[:20]}"

    # Item ids: one item, one id, the same on every device as on the remote. Every file has
    # its id on the remote; a folder has where the server keeps a folder marker's metadata.
    for d, s_ in zip(devs, idsets):
        dup = [i for i in set(s_.values()) if list(s_.values()).count(i) > 1]
        assert not dup, f"seed {seed}: {d.name} has several items with one id: {dup[:5]}"
    files = {k for k in remote_tree if not k.endswith("/")}
    missing = sorted(files - set(remote_ids))
    assert not missing, f"seed {seed}: files without an id on the remote: {missing[:10]}"
    for d, s_ in zip(devs, idsets):
        differing = {k for k, i in remote_ids.items() if s_.get(k) != i}
        assert not differing, (explain({k + "/" if k + "/" in remote_tree else k for k in differing})
                               + f"\nseed {seed}: {d.name} has other item ids than the remote at {sorted(differing)[:20]}")
    print(f"item ids: the {len(remote_ids)} the remote holds are the same on the three devices")
    final = trees[0]
    # Every version a device closed is the final content of a file, or was overwritten by a
    # later version on the same device, or is kept as a conflict copy.
    contents = set(final.values())
    copies = {k: v for k, v in final.items() if "(conflict from " in k}
    # Every version a device closed survives (as its file's content or as a conflict copy)
    # unless a device that had it replaced or deleted it knowingly.
    lost = [(dev_name, where.get(data), data[:40]) for dev_name, data in closed if data not in contents and data not in superseded]
    if lost:
        # What the devices logged about the lost versions' documents (and their conflict copies).
        stems = {os.path.splitext(os.path.basename(w.split(" at ", 1)[1]))[0] for _, w, _ in lost[:3] if w and " at " in w}
        lines = [f"{d.name}: {line[11:]}" for d in devs for line in d.d.log_path.read_text(errors="replace").splitlines()
                 if any(f" {st}.txt" in line or f" {st} (" in line or f"/{st}.txt" in line for st in stems)]
        where_now = {k: v[:40] for k, v in final.items() if any(os.path.basename(k).startswith(st) for st in stems)}
        lines += [f"test: {line}" for line in done if any(f" {st}.txt" in line or f" {st} (" in line or f"/{st}.txt" in line for st in stems)][-60:]
        # The logs first, the finding last: CI shows the end of a long message.
        raise AssertionError("\n".join(lines[-150:]) + f"\nseed {seed}: {len(lost)} closed versions are lost: "
                             f"{lost[:10]}\nfinal: {where_now}\nreplay with DOCDRIVE_SYNC_SEED={seed}")
    winners = {v: k for k, v in final.items() if "(conflict from " not in k}
    # A conflict copy never holds a version that won at its own document. On S3 a move is a
    # copy and then a conditional delete, so a version renamed on one device while another
    # device edited it at its old name can end both as the renamed file and as the other
    # device's conflict copy (a second copy of one version under another name, nothing lost):
    # shown, not counted, there.
    dup, moved = [], []
    for k, v in copies.items():
        if v not in winners:
            continue
        if shared.kind == "s3" and winners[v] != original_of_conflict_copy(k):
            moved.append((k, winners[v]))
        else:
            dup.append(k)
    assert not dup, f"seed {seed}: conflict copies of versions that won: {dup}"
    if moved:
        print(f"conflict copies of a version renamed elsewhere meanwhile (S3): {moved}")
    print(f"{len(closed)} versions closed, {len(superseded)} replaced or deleted knowingly, none lost; {len(copies)} conflict copies")


# --------------------------------------------------------------------------- crashes

@pytest.mark.timeout(600)
def test_a_device_killed_during_downloads_and_conflicts_loses_nothing(new_drive, shared_folder):
    """kill -9 of B's daemon at random moments while it downloads A's changes and makes
    conflict copies of files both changed; remount, sync: every version is there (as the file
    or a conflict copy), nothing else is duplicated, no download temp is left."""
    seed = int(os.environ.get("DOCDRIVE_CRASH_SEED", random.randrange(1 << 32)))
    print(f"seed {seed}; replay with DOCDRIVE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    a, b = devices(new_drive, shared_folder, 2)
    rounds = 6
    for r in range(rounds):
        # B changes some files (conflicts to come with A's changes of them), A changes all.
        b_versions = {}
        superseded = set()
        for i in rng.sample(range(40), 5):
            p = b.dir / f"r{r % 2}" / f"f{i}.txt"
            if p.exists():
                superseded.add(p.read_bytes())  # B saw this version and replaced it: not a loss
            data = f"round {r} file {i} from beta\n".encode()
            write(p, data)
            b_versions[f"r{r % 2}/f{i}.txt"] = data
        expected_a = {}
        for i in range(40):
            p = a.dir / f"r{r % 2}" / f"f{i}.txt"
            if p.exists():
                superseded.add(p.read_bytes())
            data = f"round {r} file {i} from alpha {rng.random()}\n".encode() * rng.randint(1, 3000)
            write(p, data)
            expected_a[f"r{r % 2}/f{i}.txt"] = data
        a.sync(check=None)
        time.sleep(rng.choice([0.0, 0.2, 0.5, 1.0, 1.5]))
        pid = b.d.pid
        os.kill(pid, 9)
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10)
        b.d.teardown()
        b.mount()
        b.sync(); a.sync(); b.sync()
        ta, tb = tree(a.dir), tree(b.dir)
        assert ta == tb, f"seed {seed} round {r}: A and B differ at {sorted({k for k, _ in set(ta.items()) ^ set(tb.items())})[:10]}"
        contents = set(ta.values())
        for rel, data in list(expected_a.items()) + list(b_versions.items()):
            assert data in contents or data in superseded, f"seed {seed} round {r}: the version of {rel} is lost"
        copies = conflict_copies(a.dir)
        assert len(copies) <= 5 * (r + 1), f"seed {seed} round {r}: too many conflict copies: {len(copies)}"
        left = os.listdir(b.d.home / "stores" / "shared" / "downloads") if (b.d.home / "stores" / "shared" / "downloads").exists() else []
        assert left == [], f"seed {seed} round {r}: download temps left: {left}"
        print(f"round {r}: killed during {len(b_versions)} local edits and A's 40 changes; {len(copies)} conflict copies so far")
