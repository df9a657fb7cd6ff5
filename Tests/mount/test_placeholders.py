"""Placeholders: a store joined on a second device shows every file at once, content on demand.

Two devices (separate drive homes and mounts) on one remote, a folder or a SeaweedFS bucket.
Device A fills the store; device B joins it afterwards, so `store add` makes it an on-demand
store. What is checked: B lists, stats and reads the attributes of everything with nothing
downloaded (no file of B's local copy has a block, and B's log has no download); the first
open of a file downloads that file only, in place (same inode and item id in the mount);
two readers of one placeholder cause one download; an open with O_TRUNC downloads nothing;
`docdrive pin` downloads a folder and what is added to it later; `docdrive evict` frees a
file's space and refuses a pinned or open one; a placeholder deleted on the remote fails to
open with ENOENT, one whose remote cannot be reached fails with EIO and a sentence in
`docdrive status`, and one with no room for it on the device fails with ENOSPC and takes none; hundreds of placeholders opened at once come whole, a few downloads at a
time; real programs (grep -r, tar, cp -a, rsync, git clone, sqlite3, vim, sed -i, LibreOffice)
read whole files and their saves upload.
"""
from __future__ import annotations

import copy
import errno
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ddtest import wait_until
from test_many_devices import Device, SharedRemote, shared, shared_folder, weed_server, write  # noqa: F401 (fixtures)


def downloads(dev: Device) -> list[str]:
    """The files B's daemon downloaded on demand (its log says each)."""
    text = dev.d.log_path.read_text(errors="replace") if dev.d.log_path.exists() else ""
    return [line.split("downloaded ", 1)[1].split(" (", 1)[0] for line in text.splitlines() if "on demand" in line and "downloaded " in line]


def blocks(root: Path) -> dict[str, int]:
    """st_blocks of every file under `root` (B's local copy: what is on the device)."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                out[os.path.relpath(p, root)] = os.lstat(p).st_blocks
    return out


def filled_store(new_drive, shared, env=None, readahead=True):
    a = Device(new_drive(), shared, "alpha").mount()
    files = {}
    for i in range(30):
        rel = f"Reports/r{i:02}.txt" if i % 3 else f"Photos/2026/p{i:02}.bin"
        files[rel] = (f"content of {rel} " * (40 + i * 7)).encode()
        write(a.dir / rel, files[rel])
    (a.dir / "Empty").mkdir()
    write(a.dir / "zero.txt", b"")
    files["zero.txt"] = b""
    a.sync()
    b = Device(new_drive(), shared, "beta")
    b.d.extra_env.update(env or {})
    config = (b.d.home / "config.yaml").read_text()
    assert "content: on-demand" in config, config
    if not readahead:
        (b.d.home / "config.yaml").write_text(config.replace("    content: on-demand\n", "    content: on-demand\n    readahead: off\n"))
    b.mount()
    b.sync()
    return a, b, files


@pytest.mark.timeout(240)
def test_joined_store_lists_everything_and_downloads_only_what_is_opened(new_drive, shared):
    a, b, files = filled_store(new_drive, shared)
    # Listing, stat, find and the drive's attributes show every file with its real size...
    seen = {}
    for dirpath, _, filenames in os.walk(b.dir):
        for n in filenames:
            p = os.path.join(dirpath, n)
            st = os.stat(p)
            seen[os.path.relpath(p, b.dir)] = st.st_size
            os.getxattr(p, "user.docdrive.id")
    assert seen == {k: len(v) for k, v in files.items()}
    assert {rel: os.stat(a.dir / rel).st_mtime_ns for rel in files} == {rel: os.stat(b.dir / rel).st_mtime_ns for rel in files}
    # ...and nothing came down: no file on B has a block, B's log has no download.
    assert all(v == 0 for v in blocks(b.cache).values()), blocks(b.cache)
    assert downloads(b) == []
    # Made in one pass when B first looked at the remote, not one decision each: 30 files with
    # content, 4 folders (the empty file is downloaded: there is nothing to wait for).
    shown = [int(line.split("store shared: ", 1)[1].split(" ", 1)[0]) for line in b.d.log_path.read_text().splitlines()
             if "new items of the remote shown here" in line]
    assert sum(shown) == 34, shown
    rel = "Reports/r05.txt"
    assert os.getxattr(b.dir / rel, "user.docdrive.status") == b"placeholder"
    before = os.stat(b.dir / rel)
    the_id = os.getxattr(b.dir / rel, "user.docdrive.id")
    # The first open downloads that file, and only that one, in place.
    assert (b.dir / rel).read_bytes() == files[rel]
    assert downloads(b) == [rel]
    after = os.stat(b.dir / rel)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert os.getxattr(b.dir / rel, "user.docdrive.id") == the_id
    assert os.getxattr(b.dir / rel, "user.docdrive.status") == b"synced"
    on_device = {k for k, v in blocks(b.cache).items() if v > 0}
    assert on_device == {rel}, on_device
    # A filled file is an ordinary file: B's edit reaches A.
    with open(b.dir / rel, "ab") as f:
        f.write(b" + beta")
    b.sync()
    a.sync()
    files[rel] += b" + beta"
    assert (a.dir / rel).read_bytes() == files[rel]
    # Every file reads back whole.
    for k, v in files.items():
        assert (b.dir / k).read_bytes() == v, k
    assert sorted(downloads(b)) == sorted(k for k, v in files.items() if v)


@pytest.mark.timeout(480)
def test_a_store_of_10000_files_joined_lists_whole_and_downloads_nothing(new_drive, shared, tmp_path):
    """10,000 files in 100 folders, uploaded by A; B joins: every file lists with its size and
    time (`find`, `stat`, `du --apparent-size`), no byte comes down (B's local copy holds no
    block, its log no download, and on S3 a front counts the objects' GETs: none), and `cat` of
    one file downloads exactly that one."""
    from weed import FaultProxy
    a = Device(new_drive(), shared, "alpha").mount()
    files = {}
    for i in range(10_000):
        rel = f"d{i // 100:02}/f{i:05}.txt"
        files[rel] = f"{rel} {'x' * (i % 50)}\n".encode()
        write(a.dir / rel, files[rel])
    a.sync(timeout=300)
    gets = []
    proxy = None
    joined = shared
    if shared.kind == "s3":
        proxy = FaultProxy(shared.weed.port)
        proxy.failing = False
        documents = f"/{shared.weed.bucket}/{shared.prefix}/"

        def counted(method, path):
            if method == "GET" and path.startswith(documents) and "/.docdrive" not in path:
                gets.append(path[len(documents):])
            return False
        proxy.hold = counted
        joined = copy.copy(shared)
        joined.store_args = lambda: ["--s3", proxy.endpoint, "--bucket", shared.weed.bucket, "--prefix", shared.prefix, "--path-style"]
    try:
        b = Device(new_drive(), joined, "beta").mount()
        b.sync(timeout=300)
        found = subprocess.run(["find", str(b.dir), "-type", "f", "-printf", "%P %s %T@\n"], capture_output=True, text=True, check=True).stdout
        listed = {line.split(" ")[0]: int(line.split(" ")[1]) for line in found.splitlines() if not line.startswith(".docdrive")}
        assert listed == {rel: len(v) for rel, v in files.items()}
        for rel in list(files)[::97]:
            assert os.stat(b.dir / rel).st_mtime_ns == os.stat(a.dir / rel).st_mtime_ns, rel
        # (du's apparent size counts the 101 folders' sizes too)
        apparent = subprocess.run(["du", "-s", "-b", "--apparent-size", str(b.dir)], capture_output=True, text=True, check=True).stdout
        assert int(apparent.split()[0]) >= sum(len(v) for v in files.values())
        assert all(v == 0 for v in blocks(b.cache).values()), {k: v for k, v in blocks(b.cache).items() if v}
        assert downloads(b) == []
        assert gets == []
        rel = "d42/f04217.txt"
        assert subprocess.run(["cat", str(b.dir / rel)], capture_output=True, check=True).stdout == files[rel]
        assert downloads(b) == [rel]
        assert {k for k, v in blocks(b.cache).items() if v > 0} == {rel}
        if proxy:
            assert gets == [rel], gets
    finally:
        if proxy:
            proxy.stop()


@pytest.mark.timeout(240)
def test_a_joined_bucket_shows_before_the_metadata_is_read_and_takes_it_after(new_drive, weed_server, tmp_path):
    """S3: the placeholders of a store just joined are made from the listing alone (key, size,
    time), before the item ids, times and modes (HEAD each) are read; then they take them. A
    front holds every HEAD of a document: the files show meanwhile, one opened meanwhile reads
    whole, one renamed meanwhile moves on the remote as the same item, and once the HEADs pass
    every file has A's item id, time and mode on B."""
    from weed import FaultProxy
    shared = SharedRemote("s3", tmp_path / "unused", weed_server)
    a = Device(new_drive(), shared, "alpha").mount()
    files = {}
    for i in range(12):
        rel = f"Reports/r{i:02}.txt" if i % 2 else f"Notes/n{i:02}.md"
        files[rel] = (f"{rel} " * (10 + i)).encode()
        write(a.dir / rel, files[rel])
    os.chmod(a.dir / "Notes/n04.md", 0o640)
    a.sync()
    ids = {rel: os.getxattr(a.dir / rel, "user.docdrive.id") for rel in files}
    proxy = FaultProxy(weed_server.port)
    proxy.failing = False
    documents = f"/{weed_server.bucket}/{shared.prefix}/"
    proxy.hold = lambda method, path: method == "HEAD" and path.startswith(documents) and "/.docdrive" not in path
    try:
        fronted = copy.copy(shared)
        fronted.store_args = lambda: ["--s3", proxy.endpoint, "--bucket", weed_server.bucket, "--prefix", shared.prefix, "--path-style"]
        b = Device(new_drive(), fronted, "beta").mount()
        sizes = {rel: len(v) for rel, v in files.items()}

        def listed():
            return {os.path.relpath(os.path.join(d, n), b.dir): os.stat(os.path.join(d, n)).st_size
                    for d, _, names in os.walk(b.dir) for n in names}
        assert wait_until(lambda: listed() == sizes, timeout=30), listed()
        assert proxy.held > 0 and not proxy.unhold.is_set()
        # Meanwhile: an open reads the whole file (its download brings its metadata), and a
        # rename is a rename of that item.
        assert (b.dir / "Reports/r03.txt").read_bytes() == files["Reports/r03.txt"]
        os.rename(b.dir / "Reports/r05.txt", b.dir / "Reports/renamed.txt")
        files["Reports/renamed.txt"] = files.pop("Reports/r05.txt")
        ids["Reports/renamed.txt"] = ids.pop("Reports/r05.txt")
        proxy.unhold.set()
        b.sync()
        a.sync()
        b.sync()
        for rel in files:
            assert os.getxattr(b.dir / rel, "user.docdrive.id") == ids[rel], rel
            sa, sb = os.stat(a.dir / rel), os.stat(b.dir / rel)
            assert (sb.st_mtime_ns, sb.st_mode) == (sa.st_mtime_ns, sa.st_mode), rel
        assert os.stat(b.dir / "Notes/n04.md").st_mode & 0o777 == 0o640
        # The remote holds the same items under the same ids: the rename moved the object.
        assert shared.ids() == {**{rel: ids[rel].decode() for rel in files}, **{k: v for k, v in shared.ids().items() if k in ("Reports", "Notes")}}
        assert {k: v for k, v in shared.tree().items() if not k.endswith("/")} == files
        assert os.getxattr(a.dir / "Reports/renamed.txt", "user.docdrive.id") == ids["Reports/renamed.txt"]
        assert not (a.dir / "Reports/r05.txt").exists()
        assert downloads(b) == ["Reports/r03.txt"]
    finally:
        proxy.unhold.set()
        proxy.stop()


@pytest.mark.timeout(300)
def test_a_restarted_device_looks_up_only_what_changed_and_never_waits_for_many_lookups(new_drive, weed_server, tmp_path):
    """S3 listings carry no metadata: the first listing looks each object up (a HEAD), and the
    answers are kept in the store's folder for the next start, which then looks up only what
    changed meanwhile. Without them (a file lost or damaged) every object is looked up again;
    with more such lookups than a mount waits for (500) the device mounts after the listing:
    while a front holds every HEAD the mount comes up (it would not within 60 s if it waited)
    and its files list and open; the comparison ends when the HEADs pass (`docdrive sync` waits
    for it) and brings what changed on the remote while the device was stopped."""
    from weed import FaultProxy
    shared = SharedRemote("s3", tmp_path / "unused", weed_server)
    s3 = shared._s3()
    files = {f"Bulk/f{i:04}.txt": f"file {i}\n".encode() for i in range(600)}

    def put(rel, body):
        s3.put_object(Bucket=weed_server.bucket, Key=f"{shared.prefix}/{rel}", Body=body)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: put(*kv), files.items()))
    proxy = FaultProxy(weed_server.port)
    proxy.failing = False
    documents = f"/{weed_server.bucket}/{shared.prefix}/"
    heads = []

    def counted(method, path):
        if method == "HEAD" and path.startswith(documents) and "/.docdrive" not in path:
            heads.append(path[len(documents):])
        return False
    try:
        fronted = copy.copy(shared)
        fronted.store_args = lambda: ["--s3", proxy.endpoint, "--bucket", weed_server.bucket, "--prefix", shared.prefix, "--path-style"]
        b = Device(new_drive(), fronted, "beta").mount()
        b.sync()
        assert (b.dir / "Bulk/f0001.txt").read_bytes() == files["Bulk/f0001.txt"]
        assert b.d.unmount().returncode == 0
        answers = b.d.home / "stores" / "shared" / "s3-answers"
        assert answers.is_file()
        # While it is stopped, another tool changes one object and deletes another: started
        # again, the device looks up those alone.
        put("Bulk/f0002.txt", b"changed while away\n")
        s3.delete_object(Bucket=weed_server.bucket, Key=f"{shared.prefix}/Bulk/f0003.txt")
        proxy.hold = counted
        b.mount()
        b.sync()
        # (the sync looks at a changed or deleted item again before it acts on it)
        assert "Bulk/f0002.txt" in heads and set(heads) <= {"Bulk/f0002.txt", "Bulk/f0003.txt"}, heads
        assert (b.dir / "Bulk/f0002.txt").read_bytes() == b"changed while away\n"
        assert not (b.dir / "Bulk/f0003.txt").exists()
        assert b.d.unmount().returncode == 0
        # Without the kept answers, and with every HEAD held, it still mounts.
        answers.unlink()
        put("Bulk/f0004.txt", b"changed while away, too\n")
        proxy.hold = lambda method, path: method == "HEAD" and path.startswith(documents) and "/.docdrive" not in path
        b.mount()
        assert wait_until(lambda: proxy.held > 0, timeout=30) and not proxy.unhold.is_set()
        assert len(os.listdir(b.dir / "Bulk")) == len(files) - 1
        assert (b.dir / "Bulk/f0001.txt").read_bytes() == files["Bulk/f0001.txt"]
        assert "items' metadata is read" in b.d.log_path.read_text(errors="replace")
        proxy.unhold.set()
        b.sync()
        assert (b.dir / "Bulk/f0004.txt").read_bytes() == b"changed while away, too\n"
        assert len(os.listdir(b.dir / "Bulk")) == len(files) - 1
        assert answers.is_file()
    finally:
        proxy.unhold.set()
        proxy.stop()


@pytest.mark.timeout(240)
def test_two_readers_cause_one_download_and_truncate_downloads_nothing(new_drive, shared):
    a = Device(new_drive(), shared, "alpha").mount()
    big = os.urandom(24 << 20)
    write(a.dir / "big.bin", big)
    write(a.dir / "replace.txt", b"old content that is never downloaded")
    write(a.dir / "cut.txt", b"kept part, and the part cut off")
    a.sync()
    b = Device(new_drive(), shared, "beta").mount()
    b.sync()
    got = [None] * 4
    errors = []

    def reader(i):
        try:
            got[i] = (b.dir / "big.bin").read_bytes()
        except OSError as e:
            errors.append(e)
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and all(g == big for g in got), errors
    assert downloads(b) == ["big.bin"]
    # O_TRUNC: the placeholder becomes an empty file of the user's, nothing downloaded.
    fd = os.open(b.dir / "replace.txt", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"new")
    os.close(fd)
    assert downloads(b) == ["big.bin"]
    b.sync()
    a.sync()
    assert (a.dir / "replace.txt").read_bytes() == b"new"
    # truncate(2) by path to another size: the content first (downloaded), then cut.
    assert os.getxattr(b.dir / "cut.txt", "user.docdrive.status") == b"placeholder"
    os.truncate(b.dir / "cut.txt", 9)
    assert (b.dir / "cut.txt").read_bytes() == b"kept part"
    assert downloads(b) == ["big.bin", "cut.txt"]
    b.sync()
    a.sync()
    assert (a.dir / "cut.txt").read_bytes() == b"kept part"


@pytest.mark.timeout(240)
def test_pin_downloads_a_folder_and_later_additions_evict_frees_space(new_drive, shared):
    a, b, files = filled_store(new_drive, shared)
    p = b.d.cli("pin", "--json", str(b.dir / "Photos"))
    report = json.loads(p.stdout)
    photos = sorted(k for k in files if k.startswith("Photos/"))
    assert report[0]["downloaded"] == len(photos), report
    assert sorted(downloads(b)) == photos
    assert {k for k, v in blocks(b.cache).items() if v > 0} == set(photos)
    # A file added to the pinned folder on A comes down with its content.
    write(a.dir / "Photos" / "2026" / "new.bin", b"added later")
    a.sync()
    b.sync()
    assert wait_until(lambda: "Photos/2026/new.bin" in downloads(b) or blocks(b.cache).get("Photos/2026/new.bin", 0) > 0, 20, 0.2)
    assert os.getxattr(b.dir / "Photos/2026/new.bin", "user.docdrive.status") == b"synced"
    # Evict refuses a pinned file, and after unpin frees it: a placeholder again, read again on open.
    one = photos[0]
    p = b.d.cli("evict", "--json", str(b.dir / one), check=False)
    assert p.returncode != 0 and "pinned" in p.stderr + p.stdout, (p.returncode, p.stdout, p.stderr)
    b.d.cli("unpin", str(b.dir / "Photos"))
    # An open file stays.
    with open(b.dir / one, "rb") as held:
        p = b.d.cli("evict", str(b.dir / one), check=False)
        assert p.returncode != 0 and "open" in p.stderr, (p.returncode, p.stdout, p.stderr)
        assert held.read() == files[one]
    p = b.d.cli("evict", "--json", str(b.dir / one))
    assert json.loads(p.stdout)[0]["evicted"] == 1
    assert blocks(b.cache)[one] == 0
    assert os.getxattr(b.dir / one, "user.docdrive.status") == b"placeholder"
    assert os.stat(b.dir / one).st_size == len(files[one])
    # Evicted is not changed: nothing goes up, A still has the file.
    b.sync()
    a.sync()
    assert (a.dir / one).read_bytes() == files[one]
    assert (b.dir / one).read_bytes() == files[one]
    assert downloads(b).count(one) == 2


@pytest.mark.timeout(240)
def test_a_placeholder_gone_or_unreachable_fails_its_open(new_drive, shared_folder):
    a, b, files = filled_store(new_drive, shared_folder)
    # Deleted on the remote (by A) before B opens it: ENOENT, and it goes from B.
    gone = "Reports/r01.txt"
    os.unlink(a.dir / gone)
    a.sync()
    with pytest.raises(FileNotFoundError):
        (b.dir / gone).read_bytes()
    b.sync()
    assert not (b.dir / gone).exists()
    # The remote unreachable: EIO, a sentence in `docdrive status`, and the file stays a placeholder.
    moved = shared_folder.folder.with_name("remote-away")
    shutil.move(shared_folder.folder, moved)
    try:
        with pytest.raises(OSError) as e:
            (b.dir / "Reports/r02.txt").read_bytes()
        assert e.value.errno == 5, e.value
        def problem():
            store = next(s for s in b.status()["stores"] if s["name"] == "shared")
            return store["sync"].get("downloadProblem", "")
        assert wait_until(lambda: "Reports/r02.txt" in problem(), 5, 0.1), problem()
        assert os.getxattr(b.dir / "Reports/r02.txt", "user.docdrive.status") == b"placeholder"
    finally:
        shutil.move(moved, shared_folder.folder)
    assert (b.dir / "Reports/r02.txt").read_bytes() == files["Reports/r02.txt"]


@pytest.mark.timeout(240)
def test_a_placeholder_with_no_room_here_fails_its_open_with_enospc_and_takes_no_room(new_drive, shared, base_dir):
    """B's drive home is a tmpfs of 24 MiB, A's file 30 MiB: B's open of its placeholder fails
    with ENOSPC (not EIO), the room the download had taken is free again (it was kept full, and
    with it the index and B's own saves), and the file is still a placeholder of its size and
    time, with no block; a file that fits comes down, and B's saves go up."""
    from ddtest import Drive, run
    a = Device(new_drive(), shared, "alpha").mount()
    big, small = os.urandom(30 << 20), b"fits here\n" * 1000
    write(a.dir / "big.bin", big)
    write(a.dir / "small.txt", small)
    a.sync()
    d = Drive(base_dir / f"small-home-{shared.kind}-{os.getpid()}")
    d.home.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(d.home)])
    try:
        d.create()
        b = Device(d, shared, "beta").mount()
        b.sync()

        def room():
            v = os.statvfs(d.home)
            return v.f_bavail * v.f_frsize
        before = room()
        assert before < len(big), before
        with pytest.raises(OSError) as e:
            (b.dir / "big.bin").read_bytes()
        assert e.value.errno == errno.ENOSPC, e.value
        assert room() >= before - (1 << 20), f"{before - room()} bytes stay taken after the failed download"
        local = os.stat(b.cache / "big.bin")
        assert (local.st_size, local.st_blocks, local.st_mtime_ns) == (len(big), 0, os.stat(a.dir / "big.bin").st_mtime_ns), local
        assert os.getxattr(b.dir / "big.bin", "user.docdrive.status") == b"placeholder"

        def problem():
            store = next(s for s in b.status()["stores"] if s["name"] == "shared")
            return store["sync"].get("downloadProblem", "")
        assert wait_until(lambda: "No space left on device" in problem(), 5, 0.1), problem()
        assert (b.dir / "small.txt").read_bytes() == small
        write(b.dir / "mine.txt", b"from beta")
        b.sync()
        a.sync()
        assert (a.dir / "mine.txt").read_bytes() == b"from beta"
    finally:
        problems = d.teardown()
        run(["umount", "-l", str(d.home)], check=False)
        assert not problems, problems


@pytest.mark.timeout(240)
def test_the_cache_limit_holds_while_reading_more_than_it(new_drive, shared_folder):
    a = Device(new_drive(), shared_folder, "alpha").mount()
    files = {f"f{i:02}.bin": os.urandom(200 << 10) for i in range(24)}  # 4.7 MiB, the limit 1 MiB
    for name, data in files.items():
        write(a.dir / name, data)
    a.sync()
    b = Device(new_drive(), shared_folder, "beta")
    config = b.d.home / "config.yaml"
    text = config.read_text()
    assert "    content: on-demand\n" in text, text
    config.write_text(text.replace("    content: on-demand\n", "    content: on-demand\n    cache-limit: 1M\n"))
    b.mount()
    b.sync()
    kept_max = 0
    for round_ in range(3):  # 3 x 4.7 MiB read through a 1 MiB cache
        for name, data in files.items():
            assert (b.dir / name).read_bytes() == data, (round_, name)
            kept = sum(blocks(b.cache).values()) * 512
            kept_max = max(kept_max, kept)
    print(f"most content kept on B while reading {3 * len(files)} files: {kept_max} bytes (limit {1 << 20})")
    assert kept_max <= 1 << 20, kept_max
    assert len(downloads(b)) >= 2 * len(files), len(downloads(b))  # at most 5 files fit: most come again
    def store():
        return next(s for s in b.status()["stores"] if s["name"] == "shared")
    # The status is published every 250 ms: the last one may still show the count from the
    # moment the last download was counted and before its eviction pass (a file more).
    assert wait_until(lambda: 0 < store()["sync"].get("cacheBytes", 0) <= 1 << 20, 5, 0.1), store()
    assert store()["cacheLimit"] == 1 << 20, store()
    # Nothing evicted went up again: A's files are as they were.
    b.sync()
    a.sync()
    assert {n: (a.dir / n).read_bytes() for n in files} == files


@pytest.mark.timeout(240)
def test_desktop_indexers_are_refused_placeholders_unless_allowed(new_drive, shared_folder, tmp_path):
    a, b, files = filled_store(new_drive, shared_folder)
    # An indexer is known by its program name: `cat` under the name of GNOME's extractor.
    indexer = tmp_path / "tracker-extract-3"
    shutil.copy("/bin/cat", indexer)
    rel = "Reports/r04.txt"
    p = subprocess.run([str(indexer), str(b.dir / rel)], capture_output=True)
    assert p.returncode != 0 and b"Permission denied" in p.stderr, p
    assert os.getxattr(b.dir / rel, "user.docdrive.status") == b"placeholder"
    assert downloads(b) == []
    # Its listing and stat cost nothing and go on as usual.
    p = subprocess.run([str(indexer), "/dev/null"], capture_output=True)
    assert p.returncode == 0, p
    assert os.stat(b.dir / rel).st_size == len(files[rel])
    # A file already here is an ordinary file to it; any other program downloads as before.
    assert subprocess.run(["cat", str(b.dir / rel)], capture_output=True).stdout == files[rel]
    assert subprocess.run([str(indexer), str(b.dir / rel)], capture_output=True).stdout == files[rel]
    # `indexers: download` lets it: the mount picks the change up without a remount.
    config = b.d.home / "config.yaml"
    text = config.read_text()
    # (Readahead off: this test counts the opened files' downloads only.)
    config.write_text(text.replace("    content: on-demand\n", "    content: on-demand\n    indexers: download\n    readahead: off\n"))
    other = "Reports/r05.txt"

    def read_by_indexer():
        return subprocess.run([str(indexer), str(b.dir / other)], capture_output=True).stdout == files[other]
    assert wait_until(read_by_indexer, 10, 0.2), b.d.log_tail(20)
    assert downloads(b) == [rel, other]


@pytest.mark.timeout(240)
def test_a_folder_read_file_after_file_downloads_its_next_small_files_ahead(new_drive, shared_folder):
    """One open downloads one file; from the second open of a folder's placeholders in a row,
    the folder's next small placeholders (in its listing's order) download ahead, never more
    not opened than were opened (at least 4), never a large one; every file comes down once;
    `readahead: off` turns it off."""
    a = Device(new_drive(), shared_folder, "alpha").mount()
    notes = {f"Notes/n{i:02}.txt": os.urandom(1000 + i) for i in range(40)}
    notes["Notes/large.bin"] = os.urandom((1 << 20) + 1)  # over the readahead's 1 MiB
    more = {f"More/m{i}.txt": os.urandom(500) for i in range(8)}
    for rel, data in {**notes, **more}.items():
        write(a.dir / rel, data)
    a.sync()
    b = Device(new_drive(), shared_folder, "beta").mount()
    b.sync()
    listing = ["Notes/" + n for n in os.listdir(b.dir / "Notes")]  # the order `find` or `grep -r` read in
    assert sorted(listing) == sorted(notes)
    small = [rel for rel in listing if rel != "Notes/large.bin"]

    def ahead():
        return [line.split("downloaded ", 1)[1].split(" (", 1)[0] for line in b.d.log_path.read_text().splitlines()
                if "read ahead" in line]
    # One open: that file only, however long one waits.
    assert (b.dir / small[0]).read_bytes() == notes[small[0]]
    time.sleep(0.5)
    assert ahead() == [] and downloads(b) == small[:1]
    # The second open, right after: the files after it in the listing come ahead, 4 of them
    # (nothing else was opened yet), while the program reads nothing more.
    assert (b.dir / small[1]).read_bytes() == notes[small[1]]
    assert wait_until(lambda: len(ahead()) >= 4, 10, 0.05), b.d.log_tail(20)
    time.sleep(1)
    got = ahead()
    assert sorted(got) == sorted(small[2:6]), (got, small[:8])
    assert [d for d in downloads(b) if d not in got] == small[:2]  # (log lines of downloads going on at once come in any order)
    # Reading on in the listing's order: each next file is here when it is opened (mostly),
    # and every file comes down exactly once, the large one only when opened.
    for rel in listing:
        assert (b.dir / rel).read_bytes() == notes[rel], rel
    done = downloads(b)
    assert sorted(done) == sorted(notes), [d for d in done if done.count(d) > 1]
    assert "Notes/large.bin" not in ahead()
    print(f"{len(ahead())} of {len(small)} small files came ahead")
    assert len(ahead()) >= len(small) // 2, ahead()
    # `readahead: off` (the running mount picks it up): opens download what they open only.
    config = b.d.home / "config.yaml"
    text = config.read_text()
    config.write_text(text.replace("    content: on-demand\n", "    content: on-demand\n    readahead: off\n"))
    m = sorted(more)
    time.sleep(2)  # the mount rereads its config (a second) and the sequence ends
    for rel in m[:4]:
        assert (b.dir / rel).read_bytes() == more[rel]
    time.sleep(1)
    assert [d for d in downloads(b) if d.startswith("More/")] == m[:4]



@pytest.mark.timeout(240)
def test_files_opened_in_name_order_are_read_ahead_in_name_order(new_drive, shared_folder):
    """A program that opens a folder's files by name (a shell glob, rsync, a file manager
    sorted by name) gets the files after the second one by name downloaded ahead, not those
    after it in the folder's listing."""
    a = Device(new_drive(), shared_folder, "alpha").mount()
    notes = {f"Notes/n{i:02}.txt": os.urandom(700 + i) for i in range(30)}
    for rel, data in notes.items():
        write(a.dir / rel, data)
    a.sync()
    b = Device(new_drive(), shared_folder, "beta").mount()
    b.sync()
    listing = ["Notes/" + n for n in os.listdir(b.dir / "Notes")]
    by_name = sorted(listing)
    # (ext4 lists by hash: this test tells the two orders apart only when they differ.)
    assert listing != by_name and listing[listing.index(by_name[1]) + 1:][:4] != by_name[2:6], listing

    def ahead():
        return [line.split("downloaded ", 1)[1].split(" (", 1)[0] for line in b.d.log_path.read_text().splitlines()
                if "read ahead" in line]
    assert (b.dir / by_name[0]).read_bytes() == notes[by_name[0]]
    assert (b.dir / by_name[1]).read_bytes() == notes[by_name[1]]
    assert wait_until(lambda: len(ahead()) >= 4, 10, 0.05), b.d.log_tail(20)
    time.sleep(1)
    assert sorted(ahead()) == by_name[2:6], (ahead(), by_name[:8], listing[:8])
    # Reading on by name: every file once, most of them ahead.
    for rel in by_name:
        assert (b.dir / rel).read_bytes() == notes[rel], rel
    assert sorted(downloads(b)) == by_name
    assert len(ahead()) >= len(by_name) // 2, ahead()

# Samples the daemon's threads (see `sample_download_threads`) until its stdin has a line or
# closes, then prints the peaks. A process of its own: a thread of the test shared the interpreter's lock with the 64
# reading threads and could go without a turn for the whole read (a CI run saw no download at
# all, and no more threads than before the reads began).
SAMPLER = r"""
import os, select, sys
pid = sys.argv[1]
def names():
    out = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                out[task] = f.read().strip()
        except OSError:
            pass  # ended meanwhile
    return out
peak_d = peak_t = passes = 0
print("sampling", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    first, second = names(), names()
    d = sum(1 for t, c in first.items() if c.startswith("dd-download-") and second.get(t, "").startswith("dd-download-"))
    peak_d, peak_t, passes = max(peak_d, d), max(peak_t, len(second)), passes + 1
print(peak_d, peak_t, passes, flush=True)
"""


def sample_download_threads(pid: int) -> subprocess.Popen:
    """Starts sampling the daemon's threads named for a download (`dd-download-STORE`, cut to
    15 characters by the kernel) all at one instant, and all of its threads; `peaks` ends it.
    /proc is read one thread at a time, so one pass could count a thread that gave its slot up
    (renamed `dd-ended`) and the one that took it: only the threads named for a download in two
    passes one after the other are counted. A thread takes that name once and gives it up once,
    so all of those had it at once, between the passes."""
    p = subprocess.Popen([sys.executable, "-c", SAMPLER, str(pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "sampling"
    return p


def peaks(p: subprocess.Popen) -> dict[str, int]:
    out, _ = p.communicate("stop\n", timeout=30)
    d, t, n = (int(x) for x in out.split())
    return {"downloading": d, "threads": t, "passes": n}


@pytest.mark.timeout(240)
def test_hundreds_of_placeholders_opened_at_once_come_whole_a_few_at_a_time(new_drive, shared):
    """300 placeholders opened by 64 threads at once (as `xargs -P 64 cat` or a thumbnailer
    does): every read is whole and right, each file comes down once, and the daemon never
    downloads more than its store's slots at once (twice its 4 upload workers), instead of one
    thread and one request per file."""
    a = Device(new_drive(), shared, "alpha").mount()
    files = {f"Many/d{i % 3}/f{i:03}.bin": os.urandom(1000 + 97 * i) for i in range(300)}
    for rel, data in files.items():
        write(a.dir / rel, data)
    a.sync()
    b = Device(new_drive(), shared, "beta").mount()
    b.sync()
    assert all(v == 0 for v in blocks(b.cache).values())
    sampler = sample_download_threads(b.d.pid)
    try:
        with ThreadPoolExecutor(64) as pool:
            got = dict(zip(files, pool.map(lambda rel: (b.dir / rel).read_bytes(), files)))
    finally:
        peak = peaks(sampler)
    bad = [rel for rel in files if got[rel] != files[rel]]
    assert not bad, bad[:5]
    done = downloads(b)
    assert sorted(done) == sorted(files), [d for d in done if done.count(d) > 1][:5]
    print(f"300 placeholders opened by 64 threads: at most {peak['downloading']} downloads at once, "
          f"{peak['threads']} daemon threads ({peak['passes']} samples)")
    assert 0 < peak["downloading"] <= 8, peak


def tool(*args, cwd=None) -> subprocess.CompletedProcess:
    """A real program run as a user runs it (no terminal); fails the test when it fails."""
    p = subprocess.run(list(args), cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert p.returncode == 0, (args, p.returncode, p.stdout[-500:], p.stderr[-2000:])
    return p


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(dp, n), root): Path(dp, n).read_bytes()
            for dp, _, names in os.walk(root) for n in names}


@pytest.mark.timeout(240)
def test_real_programs_on_placeholders_read_whole_files_and_saves_upload(new_drive, shared, tmp_path):
    """On a joined store whose files are all placeholders: grep -r, tar c, cp -a, rsync -a, a
    git clone of a bare repository kept in the store and sqlite3 read whole, right files; vim
    (default settings: a swap file, `:wq`), sed -i and sqlite3 save, and the saves reach the
    other device. Then `docdrive evict` of the whole store makes them placeholders again and
    `tar c` of the store reads every file right."""
    a = Device(new_drive(), shared, "alpha").mount()
    for tree in ("grep", "tar", "cp", "rsync"):
        for i in range(12):
            write(a.dir / tree / f"d{i % 2}" / f"f{i}.txt", b"".join(b"%s line %d of %d\n" % (tree.encode(), n, i) for n in range(50 * i + 1)))
    write(a.dir / "docs" / "vim.txt", b"first line\nsecond line\n")
    write(a.dir / "docs" / "sed.txt", b"alpha\nbeta\ngamma\n")
    tool("sqlite3", str(a.dir / "docs" / "db.sqlite"), "create table t(n, name); insert into t values (1, 'one'), (2, 'two');")
    repo = tmp_path / "repo"
    tool("git", "init", "-q", str(repo))
    for n in range(3):
        (repo / f"file{n}.txt").write_text(f"version {n}\n")
        tool("git", "-C", str(repo), "add", ".")
        tool("git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", f"commit {n}")
    tool("git", "clone", "-q", "--bare", str(repo), str(a.dir / "repo.git"))
    a.sync()
    files = tree_bytes(a.dir)
    b = Device(new_drive(), shared, "beta").mount()
    b.sync()
    assert all(v == 0 for v in blocks(b.cache).values()), "every file of B starts as a placeholder"

    expected = sum(v.count(b"line 7 ") for k, v in files.items() if k.startswith("grep/"))
    got = tool("grep", "-r", "-c", "line 7 ", str(b.dir / "grep")).stdout.decode()
    assert sum(int(line.rsplit(":", 1)[1]) for line in got.splitlines()) == expected > 0
    out = tmp_path / "from-tar"
    out.mkdir()
    archive = tool("tar", "c", "-C", str(b.dir), "tar").stdout
    subprocess.run(["tar", "x", "-C", str(out)], input=archive, check=True, timeout=60)
    tool("cp", "-a", str(b.dir / "cp"), str(tmp_path / "from-cp"))
    tool("rsync", "-a", str(b.dir / "rsync") + "/", str(tmp_path / "from-rsync"))
    for tree, copy in (("tar", out / "tar"), ("cp", tmp_path / "from-cp"), ("rsync", tmp_path / "from-rsync")):
        assert tree_bytes(copy) == {k[len(tree) + 1:]: v for k, v in files.items() if k.startswith(tree + "/")}, tree
    tool("git", "clone", "-q", str(b.dir / "repo.git"), str(tmp_path / "clone"))
    assert tool("git", "-C", str(tmp_path / "clone"), "rev-list", "--count", "HEAD").stdout.strip() == b"3"
    assert (tmp_path / "clone" / "file2.txt").read_text() == "version 2\n"

    for rel in ("docs/vim.txt", "docs/sed.txt", "docs/db.sqlite"):
        assert os.getxattr(b.dir / rel, "user.docdrive.status") == b"placeholder", rel
    tool("vim", "-c", "normal Goadded by vim", "-c", "wq", str(b.dir / "docs" / "vim.txt"), cwd=tmp_path)
    tool("sed", "-i", "s/beta/BETA/", str(b.dir / "docs" / "sed.txt"))
    assert tool("sqlite3", str(b.dir / "docs" / "db.sqlite"), "select count(*) from t; insert into t values (3, 'three');").stdout == b"2\n"
    assert (b.dir / "docs" / "vim.txt").read_bytes() == b"first line\nsecond line\nadded by vim\n"
    assert (b.dir / "docs" / "sed.txt").read_bytes() == b"alpha\nBETA\ngamma\n"
    b.sync()
    a.sync()
    assert (a.dir / "docs" / "vim.txt").read_bytes() == b"first line\nsecond line\nadded by vim\n"
    assert (a.dir / "docs" / "sed.txt").read_bytes() == b"alpha\nBETA\ngamma\n"
    assert tool("sqlite3", str(a.dir / "docs" / "db.sqlite"), "select group_concat(name) from t;").stdout == b"one,two,three\n"

    # The whole store evicted (its top folder named), then read through tar again.
    b.sync()
    b.d.cli("evict", str(b.dir))
    assert os.getxattr(b.dir / "docs" / "sed.txt", "user.docdrive.status") == b"placeholder"
    whole = tmp_path / "whole"
    whole.mkdir()
    archive = tool("tar", "c", "-C", str(b.dir), ".").stdout
    subprocess.run(["tar", "x", "-C", str(whole)], input=archive, check=True, timeout=60)
    assert tree_bytes(whole) == tree_bytes(a.dir)


@pytest.mark.timeout(240)
def test_libreoffice_converts_a_placeholder_document(new_drive, shared_folder, tmp_path):
    """`soffice --headless --convert-to pdf` of a document that is a placeholder reads all of it
    (a zip: a partial file would not open)."""
    if shutil.which("soffice") is None:
        pytest.fail("LibreOffice is not installed; mount-scripts/test.sh installs libreoffice-writer-nogui")
    profile = tmp_path / "lo-profile"
    src = tmp_path / "report.txt"
    src.write_text("Quarterly report\nplaceholder content\n")
    a = Device(new_drive(), shared_folder, "alpha").mount()
    (a.dir / "docs").mkdir()
    subprocess.run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--norestore",
                    "--convert-to", "odt", "--outdir", str(a.dir / "docs"), str(src)], check=True, capture_output=True, timeout=90)
    a.sync()
    b = Device(new_drive(), shared_folder, "beta").mount()
    b.sync()
    doc = b.dir / "docs" / "report.odt"
    assert os.getxattr(doc, "user.docdrive.status") == b"placeholder"
    subprocess.run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--norestore",
                    "--convert-to", "pdf", "--outdir", str(tmp_path), str(doc)], check=True, capture_output=True, timeout=90)
    text = tool("pdftotext", str(tmp_path / "report.pdf"), "-").stdout.decode()
    assert "placeholder content" in text, text
    assert doc.read_bytes() == (a.dir / "docs" / "report.odt").read_bytes()


def tiny_png(rgb: bytes) -> bytes:
    """A 2x2 PNG of one colour."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\0" + rgb * 2 for _ in range(2))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def odt_with_picture(png: bytes, text: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", f"<office:document-content><text>{text}</text></office:document-content>")
        z.writestr("Thumbnails/thumbnail.png", png)
    return out.getvalue()


def xattr(path, name):
    try:
        return os.getxattr(path, name)
    except OSError:
        return None


@pytest.mark.timeout(240)
def test_a_documents_picture_reaches_a_device_that_has_only_its_placeholder(new_drive, shared, tmp_path):
    # Given a document with a picture saved on A (its picture made there, kept on the remote),
    a = Device(new_drive(), shared, "alpha").mount()
    png = tiny_png(b"\x20\x80\xe0")
    write(a.dir / "Reports" / "plan.odt", odt_with_picture(png, "the plan"))
    assert wait_until(lambda: xattr(a.dir / "Reports" / "plan.odt", "user.docdrive.thumbnail") == png, 20), "A made no picture"
    a.sync()
    # when B joins the store (on demand: the document is a placeholder there),
    b = Device(new_drive(), shared, "beta")
    cache = tmp_path / "cache-b"
    b.d.extra_env = {**b.d.extra_env, "XDG_CACHE_HOME": str(cache)}
    b.mount()
    b.sync()
    shown = b.dir / "Reports" / "plan.odt"
    # B has A's picture, as the xattr and in its freedesktop cache (the keys matching stat),
    assert wait_until(lambda: xattr(shown, "user.docdrive.thumbnail") == png, 30), \
        f"B has no picture of the placeholder\n{b.d.log_tail()}"
    uri = "file://" + urllib.parse.quote(str(shown))
    cached = cache / "thumbnails" / "large" / (hashlib.md5(uri.encode()).hexdigest() + ".png")
    assert wait_until(cached.exists, 10), f"{cached} was not written"
    st = os.stat(shown)
    data = cached.read_bytes()
    assert f"Thumb::URI\0{uri}".encode() in data and f"Thumb::MTime\0{int(st.st_mtime)}".encode() in data
    assert f"Thumb::Size\0{st.st_size}".encode() in data
    # and nothing of the document was downloaded for it.
    assert downloads(b) == [], downloads(b)
    assert blocks(b.cache)["Reports/plan.odt"] == 0, blocks(b.cache)
    # A new picture of a new version reaches B too (downloaded or not).
    png2 = tiny_png(b"\xe0\x20\x20")
    write(a.dir / "Reports" / "memo.odt", odt_with_picture(png2, "a memo"))
    assert wait_until(lambda: xattr(a.dir / "Reports" / "memo.odt", "user.docdrive.thumbnail") == png2, 20)
    a.sync()
    b.sync()
    assert wait_until(lambda: xattr(b.dir / "Reports" / "memo.odt", "user.docdrive.thumbnail") == png2, 30), b.d.log_tail()


def safe_read(path: Path) -> bytes | OSError:
    """The file's content, or the error its open or read gives (for a wait on a download)."""
    try:
        return path.read_bytes()
    except OSError as e:
        return e


def mark(path: Path) -> bytes | None:
    """The placeholder attribute of a file of the local copy, None without one."""
    try:
        return os.getxattr(path, "user.docdrive.placeholder")
    except OSError:
        return None


def boot_token() -> bytes:
    """This boot in a "filled" mark: the first 4 bytes of the SHA-256 of its id, in hex."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return hashlib.sha256(boot.encode()).hexdigest()[:8].encode()


def other_boot_token() -> bytes:
    """Another boot's token (what a mark written before a reboot names)."""
    return hashlib.sha256(b"00000000-1111-2222-3333-444444444444").hexdigest()[:8].encode()


@pytest.mark.timeout(240)
def test_a_filled_file_keeps_a_mark_of_this_boot_until_its_content_is_on_the_disk(new_drive, shared_folder):
    """The open that fills a placeholder does not wait for the disk: the file's mark says
    "filled in this boot" until the content is written out (FillCommits.swift). In this boot
    it is a whole file; after a reboot (another boot id) it is a placeholder again, downloaded
    at its next open, so content a power cut lost is never served. A writable open or a
    truncate makes it durable first; `docdrive sync` and a stop commit what waits; a daemon
    killed meanwhile leaves whole files, which the next start writes out."""
    filled = b"\0f" + boot_token() + b" "
    # Nothing is committed by itself during the test: only what it asks for.
    # (No readahead: each file is filled by the open the test makes.)
    a, b, files = filled_store(new_drive, shared_folder, env={"DOCDRIVE_FILL_COMMIT_QUIET": "600"}, readahead=False)
    names = ["Reports/r01.txt", "Reports/r02.txt", "Reports/r04.txt", "Reports/r05.txt", "Reports/r07.txt", "Reports/r08.txt"]
    for rel in names:
        assert mark(b.cache / rel) is not None and not mark(b.cache / rel).startswith(b"\0"), rel
        assert (b.dir / rel).read_bytes() == files[rel], rel
    for rel in names:
        m = mark(b.cache / rel)
        assert m is not None and m.startswith(filled), (rel, m)
        assert os.getxattr(b.dir / rel, "user.docdrive.status") == b"synced", rel
    # The mark is short enough to stay in the inode (ext4 with 256-byte inodes, as here): a
    # file has its content's blocks while its mark waits, as many as once the mark is gone,
    # not a block more (`du` and `stat` would show the count change twice).
    waiting_blocks = {rel: os.stat(b.cache / rel).st_blocks for rel in ("Reports/r05.txt", "Reports/r07.txt", "Reports/r08.txt")}
    # A power cut: the content did not reach the disk (a hole), the mark did. After the
    # reboot (another boot id in the mark) the file is a placeholder and comes down again.
    lost = "Reports/r01.txt"
    version = mark(b.cache / lost)[len(filled):]
    size = len(files[lost])
    with open(b.cache / lost, "r+b") as f:
        f.truncate(0)
        f.truncate(size)
    os.setxattr(b.cache / lost, "user.docdrive.placeholder", b"\0f" + other_boot_token() + b" " + version)
    assert os.getxattr(b.dir / lost, "user.docdrive.status") == b"placeholder"
    assert (b.dir / lost).read_bytes() == files[lost]
    assert downloads(b).count(lost) == 2, downloads(b)
    # A writable open makes the content durable and the file the user's before it returns.
    with open(b.dir / "Reports/r02.txt", "ab") as f:
        assert mark(b.cache / "Reports/r02.txt") is None
        f.write(b" + beta")
    files["Reports/r02.txt"] += b" + beta"
    # So does a truncate by name.
    os.truncate(b.dir / "Reports/r04.txt", 5)
    assert mark(b.cache / "Reports/r04.txt") is None
    files["Reports/r04.txt"] = files["Reports/r04.txt"][:5]
    # `docdrive sync` commits every file that waits.
    assert mark(b.cache / "Reports/r05.txt").startswith(filled)
    b.sync()
    assert [rel for rel in names if mark(b.cache / rel) is not None] == [], {rel: mark(b.cache / rel) for rel in names}
    assert {rel: os.stat(b.cache / rel).st_blocks for rel in waiting_blocks} == waiting_blocks
    waiting = b.d.home / "stores" / "shared" / "fills-waiting"
    assert not waiting.exists(), "nothing waits: the marker of waiting fills is gone"
    a.sync()
    for rel in ("Reports/r02.txt", "Reports/r04.txt"):
        assert (a.dir / rel).read_bytes() == files[rel], rel
    # A daemon killed with fills waiting: those files are whole at the next mount, not
    # downloaded again, and the start finds them (the marker says some wait) and writes them out.
    left = ("Reports/r10.txt", "Reports/r11.txt")
    for rel in left:
        assert (b.dir / rel).read_bytes() == files[rel]
        assert mark(b.cache / rel).startswith(filled), rel
    assert waiting.exists()
    before = len(downloads(b))
    pid = b.d.pid
    os.kill(pid, 9)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10)
    b.d.teardown()
    b.mount()
    for rel in ("Reports/r10.txt", "Reports/r11.txt"):
        assert (b.dir / rel).read_bytes() == files[rel], rel
        assert os.getxattr(b.dir / rel, "user.docdrive.status") == b"synced", rel
    assert len(downloads(b)) == before, downloads(b)[before:]
    assert wait_until(lambda: all(mark(b.cache / rel) is None for rel in left) and not waiting.exists(), 30, 0.1), \
        ({rel: mark(b.cache / rel) for rel in left}, waiting.exists())
    assert "2 downloaded files the last run left waiting for the disk written out" in b.d.log_path.read_text()
    assert all(blocks(b.cache)[rel] > 0 for rel in left)


@pytest.mark.timeout(300)
def test_a_file_filled_before_a_crash_opens_offline_when_its_content_survived(new_drive, weed_server, tmp_path):
    """S3: files read shortly before the machine crashed still carry a "filled" mark of the
    boot before. One whose content reached the disk anyway (its MD5 is the object's ETag) opens
    at once, offline too, with no download; one whose content was lost (a hole) is a
    placeholder: offline its open fails with EIO, and online it downloads again."""
    from weed import FaultProxy
    shared = SharedRemote("s3", tmp_path / "unused", weed_server)
    a = Device(new_drive(), shared, "alpha").mount()
    files = {f"Reports/r{i}.txt": (f"report {i} " * (300 + i)).encode() for i in range(3)}
    for rel, data in files.items():
        write(a.dir / rel, data)
    a.sync()
    proxy = FaultProxy(weed_server.port)
    proxy.failing = False
    try:
        fronted = copy.copy(shared)
        fronted.store_args = lambda: ["--s3", proxy.endpoint, "--bucket", weed_server.bucket, "--prefix", shared.prefix, "--path-style"]
        b = Device(new_drive(), fronted, "beta")
        # Nothing is written out by itself during the test, and each file is filled by its own open.
        b.d.extra_env["DOCDRIVE_FILL_COMMIT_QUIET"] = "600"
        config = (b.d.home / "config.yaml").read_text()
        (b.d.home / "config.yaml").write_text(config.replace("    content: on-demand\n", "    content: on-demand\n    readahead: off\n"))
        b.mount()
        b.sync()
        kept, lost = "Reports/r0.txt", "Reports/r1.txt"
        for rel in (kept, lost):
            assert (b.dir / rel).read_bytes() == files[rel]
            assert mark(b.cache / rel).startswith(b"\0f" + boot_token() + b" "), mark(b.cache / rel)
        # The machine crashes: the daemon is gone with both fills waiting, and after the reboot
        # their marks name another boot; the content of one did not reach the disk (a hole).
        pid = b.d.pid
        os.kill(pid, 9)
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10)
        b.d.teardown()
        for rel in (kept, lost):
            version = mark(b.cache / rel).split(b" ", 1)[1]
            os.setxattr(b.cache / rel, "user.docdrive.placeholder", b"\0f" + other_boot_token() + b" " + version)
        st = os.stat(b.cache / lost)
        with open(b.cache / lost, "r+b") as f:
            f.truncate(0)
            f.truncate(len(files[lost]))
        os.utime(b.cache / lost, ns=(st.st_atime_ns, st.st_mtime_ns))
        # Offline: the remote answers nothing.
        proxy.failing = lambda method, path: True
        before = len(downloads(b))
        b.mount()
        assert os.getxattr(b.dir / kept, "user.docdrive.status") == b"placeholder"
        assert (b.dir / kept).read_bytes() == files[kept]
        assert mark(b.cache / kept) is None
        assert os.getxattr(b.dir / kept, "user.docdrive.status") == b"synced"
        assert f"store shared: {kept} was downloaded before a restart and is whole: kept, not downloaded again" in b.d.log_path.read_text()
        with pytest.raises(OSError) as e:
            (b.dir / lost).read_bytes()
        assert e.value.errno == errno.EIO, e.value
        # Online again: the lost one downloads, with the right bytes.
        proxy.failing = False
        assert wait_until(lambda: safe_read(b.dir / lost) == files[lost], 60, 0.5), safe_read(b.dir / lost)
        assert downloads(b)[before:] == [lost], downloads(b)[before:]
        b.sync()
        assert mark(b.cache / lost) is None
    finally:
        proxy.stop()


@pytest.mark.timeout(120)
def test_what_a_crash_left_in_the_downloads_folder_is_removed_at_the_next_mount(new_drive, shared_folder):
    """A download and placeholders being made (the join makes them beforehand, in folders of
    their own in the downloads folder) that a killed daemon left are removed when the store
    starts, and nothing of them shows."""
    a, b, files = filled_store(new_drive, shared_folder)
    b.d.unmount()
    dl = b.d.home / "stores" / "shared" / "downloads"
    leftovers = [dl / "0b1e2d3c-download", dl / "placing-0" / "a-placeholder", dl / "placing-1" / "another"]
    for p in leftovers:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half")
    b.mount()
    b.sync()
    assert not any(p.exists() for p in leftovers), [str(p) for p in leftovers if p.exists()]
    assert not (dl / "placing-0").exists() and not (dl / "placing-1").exists()
    assert "removed 3 unfinished downloads left by a crash" in b.d.log_path.read_text()
    assert sorted(str(p.relative_to(b.dir)) for p in b.dir.rglob("*") if p.is_file()) == sorted(files)
