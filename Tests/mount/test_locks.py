"""Advisory locks through a live mount: flock(2), POSIX fcntl locks (lockf, F_GETLK with the
holder's pid), OFD locks, blocking waits that end on release or on a signal, locks held on the
backing file (seen by programs using the backing folder, and the other way round), release on
close and on SIGKILL, two SQLite writers on one database (rollback journal and WAL), and uploads
that wait while a process holds a write lock.

Every lock holder is a separate process (POSIX locks of one process never conflict with each
other); each is started by `Holder`, which waits for it to report "locked" and always ends it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtest import pid_alive, run, wait_until

F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
FLOCK_FMT = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid
BUSY = (errno.EAGAIN, errno.EACCES)

# A lock holder: takes LOCK (lockf / flock / ofd, exclusive, on argv[1] opened read-write),
# optionally writes argv[3] through argv[4] (another path, e.g. the mount's twin of a backing
# file) and fsyncs it, says "locked PID", then holds until its stdin closes.
HOLDER = r"""
import fcntl, os, struct, sys
path, kind = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if kind == "lockf":
    fcntl.lockf(fd, fcntl.LOCK_EX, int(os.environ.get("LEN", "0")), int(os.environ.get("START", "0")))
elif kind == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
elif kind == "ofd":
    fcntl.fcntl(fd, 38, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
if len(sys.argv) > 3:
    wfd = fd if len(sys.argv) < 5 else os.open(sys.argv[4], os.O_RDWR)
    os.ftruncate(wfd, 0)
    os.pwrite(wfd, sys.argv[3].encode(), 0)
    os.fsync(wfd)
print("locked", os.getpid(), flush=True)
sys.stdin.readline()
"""


class Holder:
    """A process holding a lock until `release()` (or the end of the `with`)."""

    def __init__(self, path, kind="lockf", content=None, write_path=None, env=None):
        args = [sys.executable, "-c", HOLDER, str(path), kind]
        if content is not None:
            args.append(content)
            if write_path is not None:
                args.append(str(write_path))
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env={**os.environ, **(env or {})})
        ready, _, _ = select.select([self.p.stdout], [], [], 20)
        line = self.p.stdout.readline() if ready else ""
        if not line.startswith("locked"):
            self.kill()
            raise AssertionError(f"the holder did not lock {path} ({kind}): {line!r} {self.p.stderr.read()}")
        self.pid = int(line.split()[1])

    def release(self, timeout=20):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=timeout)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=20)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.release()
        finally:
            self.kill()


def new_file(path: Path, data=b"0123456789" * 10) -> Path:
    path.write_bytes(data)
    return path


def lockf_nb(path, length=0, start=0, kind=fcntl.LOCK_EX):
    """Tries a POSIX lock from this process: None if granted (then released), else the errno."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, kind | fcntl.LOCK_NB, length, start)
        return None
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def flock_nb(path) -> int:
    """flock(1) -n from another process: its exit code (0 granted, 1 busy)."""
    return run(["flock", "-n", "-x", str(path), "true"], check=False, timeout=20).returncode


def getlk(fd, cmd=fcntl.F_GETLK, type_=fcntl.F_WRLCK, start=0, length=0):
    out = fcntl.fcntl(fd, cmd, struct.pack(FLOCK_FMT, type_, os.SEEK_SET, start, length, 0))
    l_type, _, l_start, l_len, l_pid = struct.unpack(FLOCK_FMT, out)
    return l_type, l_start, l_len, l_pid


def ofd(fd, type_, cmd=F_OFD_SETLK):
    fcntl.fcntl(fd, cmd, struct.pack(FLOCK_FMT, type_, os.SEEK_SET, 0, 0, 0))


# --------------------------------------------------------------------------- flock

@pytest.mark.timeout(60)
def test_flock_exclusive_conflicts_and_a_blocking_flock_waits_for_the_release(t):
    f = new_file(t.mnt / "f")
    holder = subprocess.Popen(["flock", "-x", str(f), "-c", "echo locked; read line"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert flock_nb(f) == 1, "flock -n got an exclusive lock that another process holds"
        assert run(["flock", "-n", "-s", str(f), "true"], check=False, timeout=20).returncode == 1, \
            "flock -n -s got a shared lock beside an exclusive one"
        waiter = subprocess.Popen(["flock", "-x", str(f), "-c", "echo got"], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        assert waiter.poll() is None, "a blocking flock did not wait for the holder"
        holder.stdin.close()
        holder.wait(timeout=20)
        out, _ = waiter.communicate(timeout=20)
        assert waiter.returncode == 0 and out.strip() == "got", (waiter.returncode, out)
        assert flock_nb(f) == 0, "the lock is still held after both processes ended"
    finally:
        for p in (holder, waiter):
            if p and p.poll() is None:
                p.kill()
                p.wait(timeout=20)


@pytest.mark.timeout(60)
def test_shared_flocks_coexist(t):
    f = new_file(t.mnt / "f")
    with Holder(f, "flock"):
        pass
    a = subprocess.Popen(["flock", "-s", str(f), "-c", "echo locked; read line"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout.readline().strip() == "locked"
        assert run(["flock", "-n", "-s", str(f), "true"], check=False, timeout=20).returncode == 0, \
            "a second shared flock was refused"
        assert flock_nb(f) == 1, "an exclusive flock was granted beside a shared one"
    finally:
        a.stdin.close()
        a.wait(timeout=20)
    assert flock_nb(f) == 0


# --------------------------------------------------------------------------- POSIX and OFD

@pytest.mark.timeout(60)
def test_posix_locks_conflict_between_processes_and_getlk_names_the_holder(t):
    f = new_file(t.mnt / "f")
    with Holder(f, "lockf", env={"START": "10", "LEN": "10"}) as h:  # bytes 10..19
        assert lockf_nb(f, 10, 30) is None, "a lock on bytes 30..39 conflicted with one on 10..19"
        assert lockf_nb(f, 10, 15) in BUSY, "an overlapping write lock was granted"
        assert lockf_nb(f, 1, 19, fcntl.LOCK_SH) in BUSY, "a read lock overlapping a write lock was granted"
        fd = os.open(f, os.O_RDWR)
        try:
            assert getlk(fd) == (fcntl.F_WRLCK, 10, 10, h.pid), "F_GETLK does not describe the holder's lock"
            assert getlk(fd, start=30, length=10)[0] == fcntl.F_UNLCK, "F_GETLK found a lock on a free range"
            assert getlk(fd, type_=fcntl.F_RDLCK, start=0, length=10)[0] == fcntl.F_UNLCK
        finally:
            os.close(fd)
    assert lockf_nb(f) is None, "the lock outlived its holder"


@pytest.mark.timeout(60)
def test_unlocking_part_of_a_range_keeps_the_rest(t):
    f = new_file(t.mnt / "f")
    script = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)      # 0..99
fcntl.lockf(fd, fcntl.LOCK_UN, 50, 0)       # keep 50..99
print("locked", os.getpid(), flush=True)
sys.stdin.readline()
"""
    p = subprocess.Popen([sys.executable, "-c", script, str(f)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("locked")
        assert lockf_nb(f, 50, 0) is None, "the unlocked half is still locked"
        assert lockf_nb(f, 10, 60) in BUSY, "the kept half was unlocked too"
    finally:
        p.stdin.close()
        p.wait(timeout=20)
    assert lockf_nb(f, 10, 60) is None


@pytest.mark.timeout(60)
def test_ofd_locks_conflict_between_open_file_descriptions(t):
    f = new_file(t.mnt / "f")
    a, b = os.open(f, os.O_RDWR), os.open(f, os.O_RDWR)
    try:
        ofd(a, fcntl.F_WRLCK)
        with pytest.raises(OSError) as e:
            ofd(b, fcntl.F_WRLCK)
        assert e.value.errno in BUSY
        l_type, _, _, l_pid = getlk(b, F_OFD_GETLK)
        assert (l_type, l_pid) == (fcntl.F_WRLCK, -1), "F_OFD_GETLK does not report the OFD write lock"
        ofd(a, fcntl.F_UNLCK)
        ofd(b, fcntl.F_RDLCK)
        ofd(a, fcntl.F_RDLCK)  # two read locks share
        with pytest.raises(OSError):
            ofd(a, fcntl.F_WRLCK)
        ofd(b, fcntl.F_UNLCK)
        ofd(a, fcntl.F_WRLCK)
        # The last close of an open file drops its OFD locks.
        os.close(a)
        a = -1
        assert wait_until(lambda: lockf_nb(f) is None, 5), "closing the open file kept its OFD lock"
        ofd(b, fcntl.F_WRLCK, F_OFD_SETLKW)
    finally:
        for fd in (a, b):
            if fd >= 0:
                os.close(fd)


WAITER = r"""
import fcntl, os, signal, struct, sys, time
class Alarm(Exception):
    pass
def on_alarm(*_):
    raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
fd = os.open(sys.argv[1], os.O_RDWR)
signal.setitimer(signal.ITIMER_REAL, 1.0)
t0 = time.monotonic()
try:
    if sys.argv[2] == "lockf":
        fcntl.lockf(fd, fcntl.LOCK_EX)
    elif sys.argv[2] == "ofd":
        fcntl.fcntl(fd, 38, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
    else:
        fcntl.flock(fd, fcntl.LOCK_EX)
    print("acquired", time.monotonic() - t0, flush=True)
except Alarm:
    print("interrupted", time.monotonic() - t0, flush=True)
except InterruptedError:
    print("interrupted", time.monotonic() - t0, flush=True)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lockf", "ofd", "flock"])
def test_a_blocked_waiter_is_interrupted_by_a_signal(t, kind):
    f = new_file(t.mnt / "f")
    with Holder(f, kind) as h:
        p = run([sys.executable, "-c", WAITER, str(f), kind], timeout=30, check=False)
        assert p.returncode == 0, p.stderr
        what, took = p.stdout.split()
        assert what == "interrupted", f"the waiter was not interrupted: {p.stdout}"
        assert float(took) < 5, f"the signal ended the wait only after {took} s"
        assert h.p.poll() is None, "the holder is gone"
        assert (lockf_nb(f) if kind != "flock" else flock_nb(f)) not in (None, 0), \
            "the lock was lost while the holder still runs"
    # The interrupted waiter left nothing behind, and the mount still works.
    assert lockf_nb(f) is None and flock_nb(f) == 0
    assert f.read_bytes() == b"0123456789" * 10
    assert run(["stat", str(t.mnt)], timeout=20).returncode == 0


# --------------------------------------------------------------------------- the backing file

@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lockf", "ofd", "flock"])
def test_locks_through_the_mount_are_held_on_the_backing_file(t, kind):
    f = new_file(t.mnt / "f")
    b = t.backing / "f"
    with Holder(f, kind):
        if kind == "flock":
            assert flock_nb(b) == 1, "a flock through the mount is not held on the backing file"
        else:
            assert lockf_nb(b) in BUSY, "a record lock through the mount is not held on the backing file"
    assert lockf_nb(b) is None and flock_nb(b) == 0, "the backing file is still locked after the release"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lockf", "ofd", "flock"])
def test_locks_on_the_backing_file_are_seen_through_the_mount(t, kind):
    f = new_file(t.mnt / "f")
    b = t.backing / "f"
    with Holder(b, kind) as h:
        if kind == "flock":
            assert flock_nb(f) == 1, "a flock on the backing file is not seen through the mount"
        else:
            assert lockf_nb(f) in BUSY, "a lock on the backing file is not seen through the mount"
            fd = os.open(f, os.O_RDONLY)
            try:
                l_type, _, _, l_pid = getlk(fd)
            finally:
                os.close(fd)
            assert l_type == fcntl.F_WRLCK, "F_GETLK through the mount misses the backing file's lock"
            if kind == "lockf":
                assert l_pid == h.pid, f"F_GETLK names pid {l_pid}, the holder is {h.pid}"
    assert lockf_nb(f) is None and flock_nb(f) == 0


# --------------------------------------------------------------------------- release

@pytest.mark.timeout(60)
def test_closing_any_descriptor_releases_the_process_posix_locks(t):
    f = new_file(t.mnt / "f")
    script = r"""
import fcntl, os, sys
a = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(a, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
b = os.open(sys.argv[1], os.O_RDONLY)
os.close(b)          # POSIX: any close of the file drops the process's locks on it
print("closed", flush=True)
sys.stdin.readline()
"""
    p = subprocess.Popen([sys.executable, "-c", script, str(f)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        assert lockf_nb(f) in BUSY
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "closed"
        assert lockf_nb(f) is None, "closing another descriptor of the file did not release the lock"
        assert lockf_nb(t.backing / "f") is None, "the backing file is still locked after the close"
    finally:
        p.stdin.close()
        p.wait(timeout=20)


@pytest.mark.timeout(90)
def test_a_lock_taken_through_the_creating_descriptor_goes_at_its_close(t):
    """A descriptor that created its file gets no FLUSH at close (one request fewer per new
    file): the release, which the kernel sends after close has returned, drops the locks taken
    through it, and a lock request that meets them first waits for that release. So the lock is
    free, through the mount and on the backing file, as soon as close returns."""
    script = r"""
import fcntl, os, sys
for i in range(int(sys.argv[2])):
    a = os.open(f"{sys.argv[1]}.{i}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(a, b"new")
    fcntl.lockf(a, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
    os.close(a)
    print("closed", flush=True)
    sys.stdin.readline()
"""
    rounds = 20
    p = subprocess.Popen([sys.executable, "-c", script, str(t.mnt / "created"), str(rounds)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for i in range(rounds):
            f = t.mnt / f"created.{i}"
            assert p.stdout.readline().strip() == "locked"
            assert lockf_nb(f) in BUSY, f"round {i}: the creator's lock does not hold"
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "closed"
            if i % 2:
                fd = os.open(f, os.O_RDONLY)
                try:
                    held = getlk(fd)
                finally:
                    os.close(fd)
                assert held[0] == fcntl.F_UNLCK, f"round {i}: F_GETLK right after the creator's close reports {held}"
            assert lockf_nb(f) is None, f"round {i}: the lock taken through the creating descriptor outlived its close"
            assert lockf_nb(t.backing / f.name) is None, f"round {i}: the backing file is still locked after the close"
            assert f.read_bytes() == b"new"
            p.stdin.write("\n")
            p.stdin.flush()
    finally:
        p.stdin.close()
        p.wait(timeout=20)
    assert p.returncode == 0


@pytest.mark.timeout(90)
def test_a_lock_on_a_created_file_goes_at_its_holders_close_while_a_child_still_has_it(t):
    """A process creates a file, locks it and forks: the child inherits the descriptor. The
    parent's close drops its lock (POSIX: any close of the file by the process), though the
    child still holds the descriptor, so the kernel sends neither FLUSH (none for a created
    file) nor RELEASE: the drive finds in /proc that the holder has no descriptor of the file
    left. Until that close, the lock holds: a waiter in a third process gets it only after."""
    script = r"""
import fcntl, os, sys, time
a = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
fcntl.lockf(a, fcntl.LOCK_EX)
# The child waits on a pipe of its own: were it to read stdin too, it might take the line
# meant for the parent (whichever process waited first gets it), and exit with the parent
# still holding its lock.
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.close(w)
    os.read(r, 1)  # keeps the inherited descriptor open until the parent lets it go
    os._exit(0)
os.close(r)
print("locked", flush=True)
sys.stdin.readline()
os.close(a)
print("closed", flush=True)
sys.stdin.readline()
os.close(w)  # the child goes
os.waitpid(child, 0)
"""
    f = t.mnt / "created-and-shared"
    p = subprocess.Popen([sys.executable, "-c", script, str(f)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert p.stdout.readline().strip() == "locked"
        assert lockf_nb(f) in BUSY, "the creator's lock does not hold"
        waiter = subprocess.Popen([sys.executable, "-c",
                                   "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
                                   "fcntl.lockf(fd, fcntl.LOCK_EX); print('got', flush=True)", str(f)],
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        assert waiter.poll() is None, "a waiter got the lock while its holder still had the file open"
        p.stdin.write("\n")  # the parent closes; the child keeps the descriptor
        p.stdin.flush()
        assert p.stdout.readline().strip() == "closed"
        assert waiter.wait(timeout=20) == 0 and waiter.stdout.read().strip() == "got", \
            "the lock taken through the created file outlived its holder's close"
        assert lockf_nb(f) is None
    finally:
        if waiter and waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        p.stdin.write("\n")
        p.stdin.close()
        p.wait(timeout=20)
    assert p.returncode == 0


@pytest.mark.timeout(60)
def test_sigkill_of_a_holder_releases_its_locks(t):
    files = {k: new_file(t.mnt / k) for k in ("lockf", "ofd", "flock")}
    holders = [Holder(p, k) for k, p in files.items()]
    try:
        assert lockf_nb(files["lockf"]) in BUSY and lockf_nb(files["ofd"]) in BUSY and flock_nb(files["flock"]) == 1
        for h in holders:
            os.kill(h.pid, signal.SIGKILL)
            h.p.wait(timeout=20)
        for k, p in files.items():
            free = (lambda: flock_nb(p) == 0) if k == "flock" else (lambda: lockf_nb(p) is None)
            assert wait_until(free, 5), f"the {k} lock of a killed process was kept"
            assert wait_until(lambda: lockf_nb(t.backing / k) is None and flock_nb(t.backing / k) == 0, 5), \
                f"the backing file of {k} is still locked"
    finally:
        for h in holders:
            h.kill()


# --------------------------------------------------------------------------- SQLite

SQLITE_WRITER = r"""
import sqlite3, sys
db, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(db, timeout=60, isolation_level=None)
for i in range(n):
    c.execute("BEGIN IMMEDIATE")
    c.execute("INSERT INTO t(tag, i, pad) VALUES (?, ?, ?)", (tag, i, "x" * (i % 300)))
    c.execute("COMMIT")
c.close()
print("done")
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["delete", "wal"])
def test_two_sqlite_writers_on_one_database(t, mode):
    import sqlite3
    db = t.mnt / "app.db"
    c = sqlite3.connect(db, isolation_level=None)
    assert c.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, tag TEXT, i INTEGER, pad TEXT)")
    c.close()
    n = 250
    procs = [subprocess.Popen([sys.executable, "-c", SQLITE_WRITER, str(db), tag, str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    try:
        for p in procs:
            out, errs = p.communicate(timeout=150)
            assert p.returncode == 0 and out.strip() == "done", f"writer failed: {errs}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=20)
    c = sqlite3.connect(db, isolation_level=None)
    try:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("SELECT tag, COUNT(*), COUNT(DISTINCT i) FROM t GROUP BY tag ORDER BY tag").fetchall() == \
            [("a", n, n), ("b", n, n)]
    finally:
        c.close()
    out = run(["sqlite3", str(db), "PRAGMA integrity_check; SELECT COUNT(*) FROM t;"], timeout=60).stdout.split()
    assert out == ["ok", str(2 * n)], out


# --------------------------------------------------------------------------- uploads

@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["lockf", "flock", "backing-lockf"])
def test_an_upload_waits_while_a_process_holds_a_write_lock(new_drive, kind):
    d = new_drive()
    remote = d.base / "up-remote"
    d.cli("store", "add", "up", "--name", "Up", "--folder", str(remote), "--writeback", "0.2")
    d.mount()
    local = d.mnt / "Up" / "doc.txt"
    cache = d.home / "stores" / "up" / "cache" / "doc.txt"
    local.write_bytes(b"version 1\n")

    def sync(timeout):
        return d.cli("sync", "--timeout", str(timeout), timeout=timeout + 30, check=False)

    p = sync(30)
    assert p.returncode == 0, p.stderr
    assert (remote / "doc.txt").read_bytes() == b"version 1\n"
    # The holder locks (through the mount, or the backing file as another program would),
    # rewrites the file through the mount and fsyncs it (which queues the upload), and holds on.
    lock_path, write_path = (cache, local) if kind == "backing-lockf" else (local, None)
    with Holder(lock_path, kind.replace("backing-", ""), content="version 2, half", write_path=write_path):
        p = sync(3)
        assert p.returncode != 0, "docdrive sync finished while a writer held its lock"
        assert (remote / "doc.txt").read_bytes() == b"version 1\n", "uploaded while a process held a write lock"
        time.sleep(1)
        assert (remote / "doc.txt").read_bytes() == b"version 1\n", "uploaded while a process held a write lock"
        with open(local, "r+b") as f:  # the writer finishes its save (still under its lock)
            f.seek(0, os.SEEK_END)
            f.write(b" and the rest\n")
    p = sync(30)
    assert p.returncode == 0, f"sync after the release: {p.returncode} {p.stderr}\n{d.log_tail()}"
    assert (remote / "doc.txt").read_bytes() == local.read_bytes() == b"version 2, half and the rest\n"
    import json
    up = json.loads(d.cli("status", "--json").stdout)["uploads"]
    assert up["failed"] == 0, f"waiting for the lock used up upload attempts: {up}"
