"""Many processes at once on the mount (the daemon serves requests on many threads), the
kernel forgetting nodes, and a daemon with a tiny descriptor budget (nodes closed and reopened
from file handles while in use, renamed, linked, unlinked)."""
import os
import subprocess
import sys
import time

import pytest

from ddtest import err, run, wait_until

WORKER = r"""
import os, sys, errno
base, k, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(f"{base}/w{k}", exist_ok=True)
for i in range(n):
    d = f"{base}/w{k}"
    p = f"{d}/f{i}"
    with open(p, "wb") as f:
        f.write(f"{k}-{i}".encode() * 100)
    os.rename(p, f"{d}/g{i}")
    os.link(f"{d}/g{i}", f"{d}/h{i}")
    if i % 3 == 0:
        os.unlink(f"{d}/g{i}")
    if i % 5 == 0:
        os.mkdir(f"{d}/dir{i}")
        os.rename(f"{d}/h{i}", f"{d}/dir{i}/moved")
    with open(f"{d}/h{i}" if i % 5 else f"{d}/dir{i}/moved", "rb") as f:
        assert f.read() == f"{k}-{i}".encode() * 100
    # a shared file: every worker writes its own slot
    fd = os.open(f"{base}/shared", os.O_RDWR)
    os.pwrite(fd, bytes([65 + k]) * 512, (k * n + i) * 512)
    os.close(fd)
"""


def expected_names(n):
    names = set()
    for i in range(n):
        if i % 3:
            names.add(f"g{i}")
        if i % 5:
            names.add(f"h{i}")
        else:
            names.add(f"dir{i}")
    return names


@pytest.mark.timeout(180)
def test_parallel_workers(t):
    workers, n = 6, 150
    with open(t.mnt / "shared", "wb") as f:
        f.truncate(workers * n * 512)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(t.mnt), str(k), str(n)],
                              stderr=subprocess.PIPE, text=True) for k in range(workers)]
    finish(procs, 150)
    for k in range(workers):
        assert set(os.listdir(t.mnt / f"w{k}")) == expected_names(n)
        assert set(os.listdir(t.backing / f"w{k}")) == expected_names(n)
        for i in range(0, n, 5):
            assert os.stat(t.mnt / f"w{k}" / f"dir{i}" / "moved").st_nlink == (1 if i % 3 == 0 else 2)
    data = (t.mnt / "shared").read_bytes()
    for k in range(workers):
        assert data[k * n * 512:(k + 1) * n * 512] == bytes([65 + k]) * (n * 512)


LISTER = r"""
import os, sys
base, rounds = sys.argv[1], int(sys.argv[2])
stable = {f"stable-{i:04d}" for i in range(2000)}
for r in range(rounds):
    names = os.listdir(base)
    got = [x for x in names if x.startswith("stable-")]
    if len(got) != len(stable) or set(got) != stable:
        missing = sorted(stable - set(got))[:5]
        dups = len(got) - len(set(got))
        sys.exit(f"round {r}: {len(got)} stable entries, missing {missing}, duplicates {dups}")
"""

CHURN = r"""
import os, sys
base, rounds, me = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for r in range(rounds):
    for i in range(200):
        open(f"{base}/churn-{me}-{i}", "w").close()
    for i in range(0, 200, 2):
        os.rename(f"{base}/churn-{me}-{i}", f"{base}/churn-{me}-{i}-renamed")
    for i in range(200):
        os.unlink(f"{base}/churn-{me}-{i}" + ("-renamed" if i % 2 == 0 else ""))
"""


def finish(procs, timeout):
    """Waits for every process; kills the rest if one fails (a straggler keeps the mount busy)."""
    try:
        for p in procs:
            _, errs = p.communicate(timeout=timeout)
            assert p.returncode == 0, errs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


@pytest.mark.timeout(180)
def test_readdir_during_churn_lists_stable_entries_exactly_once(t):
    for i in range(2000):
        (t.backing / f"stable-{i:04d}").write_bytes(b"")
    churn = [subprocess.Popen([sys.executable, "-c", CHURN, str(t.mnt), "15", str(k)], stderr=subprocess.PIPE,
                              text=True) for k in range(2)]
    listers = [subprocess.Popen([sys.executable, "-c", LISTER, str(t.mnt), "30"], stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    finish(churn + listers, 150)


@pytest.mark.timeout(120)
def test_kernel_forgetting_nodes(t):
    """Drop the kernel's dentry and inode caches (FORGET for everything unused) while a file is
    open and a folder is the working directory of a process; all keeps working."""
    (t.mnt / "a" / "b").mkdir(parents=True)
    for i in range(500):
        (t.mnt / "a" / "b" / f"f{i}").write_text(str(i))
    held = open(t.mnt / "a" / "b" / "f7", "r+")
    sleeper = subprocess.Popen(["sleep", "30"], cwd=t.mnt / "a")
    try:
        ids = {i: os.getxattr(t.mnt / "a" / "b" / f"f{i}", "user.docdrive.id") for i in (1, 2, 3)}
        for _ in range(3):
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2\n")
            assert sorted(os.listdir(t.mnt / "a" / "b")) == sorted(f"f{i}" for i in range(500))
            held.seek(0)
            assert held.read() == "7"
            assert os.readlink(f"/proc/{sleeper.pid}/cwd") == str(t.mnt / "a")
            assert run(["ls", "b/f9"], cwd=t.mnt / "a", timeout=30).stdout.strip() == "b/f9"
        for i, ident in ids.items():
            assert os.getxattr(t.mnt / "a" / "b" / f"f{i}", "user.docdrive.id") == ident
        held.seek(0)
        held.write("seven")
        held.flush()
        assert (t.backing / "a" / "b" / "f7").read_text() == "seven"
    finally:
        held.close()
        sleeper.kill()
        sleeper.wait(timeout=10)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("handles", ["with file handles", "without CAP_DAC_READ_SEARCH"])
def test_tiny_descriptor_budget(new_drive, handles):
    """With room for only a few open node descriptors, nodes are closed while idle and reopened
    from their file handles: renames, links, unlinks, held files and folders still behave. A
    daemon that cannot open file handles keeps its descriptors instead (and still works)."""
    d = new_drive()
    d.extra_env = {"DOCDRIVE_NODE_FD_BUDGET": "16"}
    if handles != "with file handles":
        d.mount_prefix = ["setpriv", "--bounding-set=-dac_read_search"]
    d.mount()
    with open(f"/proc/{d.pid}/status") as f:
        caps = int(next(l for l in f if l.startswith("CapEff:")).split()[1], 16)
    assert bool(caps & (1 << 2)) == (handles == "with file handles")
    notes = d.mnt / "Notes"
    for i in range(300):
        (notes / f"d{i % 10}").mkdir(exist_ok=True)
        (notes / f"d{i % 10}" / f"f{i}").write_text(str(i))
    held_dir = os.open(notes / "d3", os.O_RDONLY | os.O_DIRECTORY)
    held = open(notes / "d4" / "f4", "r+")
    try:
        ids = {i: os.getxattr(notes / f"d{i % 10}" / f"f{i}", "user.docdrive.id") for i in range(0, 300, 7)}
        # rename folders and files while their nodes are (likely) evicted
        for k in range(10):
            os.rename(notes / f"d{k}", notes / f"e{k}")
        for i in range(0, 300, 7):
            p = notes / f"e{i % 10}" / f"f{i}"
            assert p.read_text() == str(i)
            assert os.getxattr(p, "user.docdrive.id") == ids[i]
            os.link(p, notes / f"e{i % 10}" / f"l{i}")
            assert os.stat(p).st_nlink == 2
        for i in range(300):
            os.stat(notes / f"e{i % 10}" / f"f{i}")
        # the held folder followed its rename; creating through it lands in e3
        with open(os.open("via-held-fd", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=held_dir), "w") as f:
            f.write("x")
        assert (d.notes_backing / "e3" / "via-held-fd").exists()
        # an open, then unlinked file keeps working through its descriptor
        os.unlink(notes / "e4" / "f4")
        for i in range(300):
            os.stat(notes / f"e{i % 10}" / f"f{i}") if i != 4 else None
        held.seek(0)
        assert held.read() == "4"
        held.write("more")
        held.flush()
        os.fsync(held.fileno())
        assert os.fstat(held.fileno()).st_nlink == 0
        result = run(["find", str(notes), "-type", "f"], timeout=60).stdout.split()
        assert len(result) == 300 - 1 + 1 + len(range(0, 300, 7))
        node_fds = sum(1 for fd in os.listdir(f"/proc/{d.pid}/fd")
                       if os.readlink(f"/proc/{d.pid}/fd/{fd}").startswith(str(d.notes_backing)))
        if handles == "with file handles":
            assert node_fds < 150, f"{node_fds} descriptors open: idle nodes were not closed"
    finally:
        held.close()
        os.close(held_dir)
    assert d.unmount().returncode == 0
