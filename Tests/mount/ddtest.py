"""Helpers shared by the mounted tests: the docdrive binary, drives, errno capture, syscalls via ctypes.

Everything that can block on the mount goes through a timeout: subprocesses get `timeout=`,
and the conftest's per-test guard SIGKILLs a hung daemon (which aborts the FUSE connection, so
a test stuck in a system call on the mount gets ENOTCONN instead of hanging forever).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

NOTES_ID = "org.example.notes"
SECRET_ID = "org.example.secret"
STORE = "work"

# The user the ownership tests act as (exists on the test machines: uid/gid 1000).
OTHER_UID = 1000
OTHER_GID = 1000
EXTRA_GID = 2000


def docdrive_bin() -> str:
    env = os.environ.get("DOCDRIVE_BIN")
    if env:
        return env
    release = REPO / ".build" / "release" / "docdrive"
    if release.exists():
        return str(release)
    return str(REPO / ".build" / "debug" / "docdrive")


# --------------------------------------------------------------------------- subprocesses

def run(cmd, *, timeout=60, check=True, cwd=None, env=None, input=None, user=None, text=True):
    """Runs a command with a hard timeout; `user=(uid, gid, groups)` runs it through setpriv."""
    if user is not None:
        uid, gid, groups = user
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}",
               f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups", "--"] + list(cmd)
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, input=input, timeout=timeout,
                       capture_output=True, text=text)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def as_user(code: str, *args, uid=OTHER_UID, gid=OTHER_GID, groups=(OTHER_GID,), timeout=60, umask=0o022):
    """Runs Python `code` as another user; `code` sees `args` (strings) and may set `result`,
    which comes back through JSON. OSErrors escape as {"errno": "ENAME"}."""
    prog = (
        "import os, sys, json, errno, stat\n"
        f"os.umask({umask})\n"
        "args = sys.argv[1:]\nresult = None\n"
        "try:\n"
        + "".join("    " + line + "\n" for line in code.strip("\n").splitlines())
        + "except OSError as e:\n"
        "    result = {'errno': errno.errorcode.get(e.errno, e.errno)}\n"
        "print(json.dumps(result))\n"
    )
    p = run([sys.executable, "-c", prog, *map(str, args)], user=(uid, gid, list(groups)), timeout=timeout, check=False)
    assert p.returncode == 0, f"child failed ({p.returncode}): {p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- errno capture

def outcome(fn, *args, **kw):
    """("ok", value) or ("err", "ENAME"): what a call did, comparable between two trees."""
    try:
        return ("ok", fn(*args, **kw))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def err(fn, *args, **kw) -> str | None:
    """The errno name a call fails with, or None if it succeeds."""
    kind, v = outcome(fn, *args, **kw)
    return v if kind == "err" else None


class Log:
    """Collects (label, outcome) pairs of a scenario, so two runs can be compared as lists."""

    def __init__(self):
        self.items = []

    def __call__(self, label, fn, *args, **kw):
        """Logs fn(*args)'s outcome, or `fn` itself when it is a plain value."""
        if not callable(fn):
            assert not args and not kw
            self.items.append((label, ("ok", fn)))
            return fn
        o = outcome(fn, *args, **kw)
        self.items.append((label, o))
        return o[1] if o[0] == "ok" else None

    def note(self, label, value):
        self.items.append((label, value))
        return value


def compare(t, scenario):
    """Runs `scenario(base: Path, log: Log)` in the mount's test folder and in the native one, and
    asserts both logged the same outcomes. Returns the mount's log items."""
    m, n = Log(), Log()
    scenario(t.mnt, m)
    scenario(t.native, n)
    assert m.items == n.items, _diff(m.items, n.items)
    assert m.items, "the scenario logged nothing"
    return m.items


def _diff(m, n):
    lines = ["mount and native differ:"]
    for i in range(max(len(m), len(n))):
        a = m[i] if i < len(m) else None
        b = n[i] if i < len(n) else None
        mark = "  " if a == b else "!!"
        lines.append(f"{mark} mount={a!r}\n{mark} native={b!r}")
    return "\n".join(lines)


STAT_FIELDS = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")


def st(st_result, fields=STAT_FIELDS):
    return {f: getattr(st_result, f) for f in fields}


def lst(path, fields=STAT_FIELDS):
    return st(os.lstat(path), fields)


# --------------------------------------------------------------------------- syscalls

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.mknodat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint64]


def _check(r, *names):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), *[str(n) for n in names[:1]])


def renameat2(old, new, flags):
    _check(libc.renameat2(AT_FDCWD, os.fsencode(str(old)), AT_FDCWD, os.fsencode(str(new)), flags), old)


def fallocate(fd, mode, offset, length):
    _check(libc.fallocate(fd, mode, offset, length))


def setxattr_raw(path, name, value: bytes, flags):
    os.setxattr(path, name, value, flags)


# --------------------------------------------------------------------------- mounts and processes

def mounts() -> list[tuple[str, str]]:
    """(mountpoint, fstype) of every mount, from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f.read().decode("utf-8", "surrogateescape").splitlines():
            parts = line.split(" ")
            dash = parts.index("-")
            mp = parts[4].encode().decode("unicode_escape")  # \040 etc.
            out.append((mp, parts[dash + 1]))
    return out


def mount_options(path) -> set[str]:
    """The options the kernel shows for the mount at `path` (per-mount and superblock ones)."""
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f.read().decode("utf-8", "surrogateescape").splitlines():
            parts = line.split(" ")
            dash = parts.index("-")
            if parts[4].encode().decode("unicode_escape") == str(path):
                return set(parts[5].split(",")) | set(parts[dash + 3].split(","))
    raise AssertionError(f"{path} is not mounted")


def is_docdrive_mount(path) -> bool:
    return any(mp == str(path) and fs == "fuse.docdrive" for mp, fs in mounts())


def pid_alive(pid) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except FileNotFoundError:
        return False


def pid_is_daemon_of(pid, home) -> bool:
    """True when `pid` is a docdrive process serving `home` (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return any(b"docdrive" in a for a in argv[:1]) and os.fsencode(str(home)) in argv


def wait_until(pred, timeout=5.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            return v
        time.sleep(interval)


def stop_pid(pid, home, grace=5.0) -> list[str]:
    """SIGTERM then SIGKILL the daemon `pid` (only if it is ours); returns what had to be done."""
    notes = []
    if not pid_alive(pid) or not pid_is_daemon_of(pid, home):
        return notes
    for sig in (signal.SIGTERM, signal.SIGKILL):
        notes.append(f"sent {sig.name} to daemon {pid}")
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return notes
        if wait_until(lambda: not pid_alive(pid), grace):
            return notes
    return notes


class Drive:
    """A drive home with one public app "Notes", one private app, and one folder store "Work"."""

    def __init__(self, base: Path):
        self.base = Path(base)
        self.home = self.base / "home"
        self.mnt = self.base / "mnt"
        self.remote = self.base / "remote"
        self.pid = None
        self.bin = docdrive_bin()
        self.extra_env = {}  # passed to the daemon (docdrive mount hands its environment on)
        self.mount_prefix = []  # e.g. setpriv options the daemon is started under

    # paths
    @property
    def notes_backing(self) -> Path:
        return self.home / "containers" / NOTES_ID / "Documents"

    def app_folder(self, app, folder) -> Path:
        return self.home / "containers" / app / folder

    @property
    def work_backing(self) -> Path:
        return self.home / "stores" / STORE / "cache"

    @property
    def log_path(self) -> Path:
        return self.home / "run" / "daemon.log"

    def env(self, **extra):
        e = dict(os.environ)
        e["DOCDRIVE_HOME"] = str(self.home)
        e.update(self.extra_env)
        e.update(extra)
        return e

    def cli(self, *args, timeout=60, check=True, env=None):
        prefix = self.mount_prefix if args[:1] == ("mount",) else []
        return run([*prefix, self.bin, *args], timeout=timeout, check=check, env=env or self.env())

    def create(self):
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        self.cli("init")
        self.cli("app", "add", NOTES_ID, "--name", "Notes", "--public")
        self.cli("app", "add", SECRET_ID, "--name", "Secret")
        self.cli("store", "add", STORE, "--name", "Work", "--folder", str(self.remote))
        return self

    def mount(self, options="", timeout=60, create=True, extra_args=()):
        """Mounts; raises AssertionError with the daemon's log when it does not come up.
        By default privately, as users do (the backing files check permissions); the ownership
        tests share it with -o allow_other. create=False leaves making the mount point to
        docdrive; extra_args go to `docdrive mount`."""
        if create and not is_docdrive_mount(self.mnt):
            self.mnt.mkdir(exist_ok=True)
            os.chmod(self.mnt, 0o755)
        opts = ["-o", options] if options else []
        p = self.cli("mount", str(self.mnt), *opts, *extra_args, timeout=timeout, check=False)
        record = self.record()
        if record:
            self.pid = record["pid"]
            register(self)
        if p.returncode != 0 or not is_docdrive_mount(self.mnt):
            self.teardown()
            raise AssertionError(f"docdrive mount failed (exit {p.returncode}): {p.stderr.strip()}\n"
                                 f"daemon log:\n{self.log_tail()}")
        assert record and pid_alive(self.pid), "mount.json has no live daemon pid"
        return self

    def record(self):
        try:
            return json.loads((self.home / "run" / "mount.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def log_tail(self, n=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no daemon log)"

    def healthy(self) -> bool:
        if not (self.pid and pid_alive(self.pid) and is_docdrive_mount(self.mnt)):
            return False
        try:
            run(["stat", "-c", "%i", str(self.mnt)], timeout=15)
            return True
        except (subprocess.TimeoutExpired, AssertionError):
            return False

    def unmount(self, timeout=60, lazy=False):
        args = ["unmount", str(self.mnt)] + (["--lazy"] if lazy else [])
        return self.cli(*args, timeout=timeout, check=False)

    def teardown(self) -> list[str]:
        """Always leaves nothing behind: unmount, lazy-unmount as a last resort, stop our daemon.
        Returns the problems found (empty when the clean path worked)."""
        problems = []
        if is_docdrive_mount(self.mnt):
            for attempt in range(5):
                try:
                    p = self.unmount(timeout=60)
                except subprocess.TimeoutExpired:
                    problems.append("docdrive unmount timed out")
                    break
                if p.returncode == 5 and attempt < 4:
                    time.sleep(1)  # a process of a failed test may still be finishing
                    continue
                if p.returncode != 0:
                    problems.append(f"docdrive unmount exited {p.returncode}: {p.stderr.strip()}")
                break
        if is_docdrive_mount(self.mnt):
            problems.append("still mounted after docdrive unmount: fusermount3 -uz")
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], timeout=30, capture_output=True)
        if self.pid and pid_alive(self.pid):
            if not wait_until(lambda: not pid_alive(self.pid), 10):
                problems += stop_pid(self.pid, self.home)
        if self.pid and pid_alive(self.pid) and pid_is_daemon_of(self.pid, self.home):
            problems.append(f"daemon {self.pid} is still alive")
        if is_docdrive_mount(self.mnt):
            problems.append(f"{self.mnt} is still mounted")
        unregister(self)
        self.pid = None
        return problems

    def kill_hard(self):
        """SIGKILL our daemon: aborts the FUSE connection, so hung system calls return."""
        if self.pid and pid_alive(self.pid) and pid_is_daemon_of(self.pid, self.home):
            os.kill(self.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- live drives

LIVE: dict[int, Drive] = {}
WATCHDOG_STATE: Path | None = None


def _write_state():
    if WATCHDOG_STATE is None:
        return
    data = [{"mnt": str(d.mnt), "pid": d.pid, "home": str(d.home)} for d in LIVE.values()]
    tmp = WATCHDOG_STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, WATCHDOG_STATE)


def register(d: Drive):
    LIVE[id(d)] = d
    _write_state()


def unregister(d: Drive):
    LIVE.pop(id(d), None)
    _write_state()


def cleanup_folder(path: Path):
    """Removes a test folder tree, but never while anything under it is mounted."""
    import shutil
    p = str(path)
    if any(mp == p or mp.startswith(p + "/") for mp, _ in mounts()):
        raise AssertionError(f"refusing to remove {p}: something under it is still mounted")
    shutil.rmtree(p, ignore_errors=True)


def stat_kind(mode):
    return stat.S_IFMT(mode)


def need(tool: str) -> str:
    """The path of `tool`; a test without it fails in CI (CI=true) and is skipped elsewhere."""
    path = shutil.which(tool)
    if path is None:
        msg = f"{tool} is not installed (mount-scripts/test.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def children_of(pid: int) -> list[int]:
    """The pids of the processes whose parent is `pid`."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                out.append(int(d))
    return out
