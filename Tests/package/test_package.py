"""The Debian package (mount-scripts/package.sh) on a Debian 12 without Swift.

A `debootstrap --variant=minbase bookworm` root is made once and kept in CACHE (a stamp marks it
complete); each run copies it, binds /proc, /sys, /dev and /dev/pts into the copy, and there:
`apt install ./docdrive_*.deb` (apt fetches the dependencies from Debian's mirror), `docdrive
--version`, `docdrive init --default`, a mount with the packaged systemd unit's command line and
`docdrive unmount`, a mount through mount(8) (`-t fuse.docdrive`, fuse3's helper) and `umount`,
then `apt remove docdrive`, after which none of the package's files may be left.

The package is $DOCDRIVE_DEB (test.sh makes it once), or package.sh makes one in the test's
temp folder. Teardown unmounts everything under the copy (the FUSE mounts with `fusermount3 -uz`
if still there, the binds with `umount -l`), stops only the daemons the test's mounts started
(their pids from the drive's mount record), and removes the copy only when nothing is mounted
under it. Needs root, /dev/fuse and Debian's mirror; in CI (CI=true) it fails rather than skips.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "mount"))
from ddtest import mounts, pid_alive  # noqa: E402

CACHE = Path(os.environ.get("DOCDRIVE_TEST_CACHE", "/var/cache/docdrive-test"))
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
BASE = CACHE / f"{SUITE}-minbase"       # the cached root, complete when STAMP exists
STAMP = CACHE / f"{SUITE}-minbase.stamp"
BINDS = ["proc", "sys", "dev", "dev/pts"]
HOME, DRIVE = "/root", "/root/drive"    # inside the root
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": HOME, "LANG": "C.UTF-8",
       "DEBIAN_FRONTEND": "noninteractive", "DOCDRIVE_HOME": DRIVE}

pytestmark = pytest.mark.timeout(840)


def cannot(why: str):
    """In CI a test that cannot do its work fails; elsewhere it is skipped."""
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def sh(cmd, timeout=120, check=True, env=None):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def under(root: Path):
    """The mounts under root, deepest first, as (mountpoint, fstype)."""
    r = str(root)
    return sorted(((mp, fs) for mp, fs in mounts() if mp.startswith(r + "/")), key=lambda m: -len(m[0]))


def make_base():
    """The cached minbase root: made once (debootstrap from lib.sh's apt_install if missing),
    under a lock, in a temp folder renamed into place, so a half-made root is never used."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.exists() and BASE.is_dir():
            return
        if shutil.which("debootstrap") is None:
            sh(["bash", "-c", f"source {REPO}/mount-scripts/lib.sh && apt_install debootstrap"], timeout=600)
        part = Path(tempfile.mkdtemp(dir=CACHE, prefix="making-"))
        try:
            sh(["debootstrap", "--variant=minbase", SUITE, part, MIRROR], timeout=900)
            shutil.rmtree(BASE, ignore_errors=True)
            part.rename(BASE)
        finally:
            if part.exists() and not under(part):
                shutil.rmtree(part, ignore_errors=True)
        STAMP.write_text(f"debootstrap --variant=minbase {SUITE} {MIRROR}\n{time.ctime()}\n")


@pytest.fixture
def deb(tmp_path):
    if os.environ.get("DOCDRIVE_DEB"):
        return Path(os.environ["DOCDRIVE_DEB"])
    out = sh([REPO / "mount-scripts" / "package.sh", tmp_path], timeout=1800)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def root():
    """A copy of the cached root with /proc, /sys, /dev, /dev/pts bound; everything undone after."""
    if os.geteuid() != 0:
        cannot("installing a package into a chroot needs root")
    if not os.path.exists("/dev/fuse"):
        cannot("no /dev/fuse")
    make_base()
    r = Path(tempfile.mkdtemp(dir=CACHE, prefix="run-"))
    daemons: list[int] = []
    problems: list[str] = []
    try:
        sh(["cp", "-a", f"{BASE}/.", r], timeout=300)
        shutil.copy("/etc/resolv.conf", r / "etc" / "resolv.conf")
        for b in BINDS:
            sh(["mount", "--bind", f"/{b}", r / b])
            sh(["mount", "--make-rslave", r / b])
        yield r, daemons
    finally:
        for mp, fs in under(r):
            if fs.startswith("fuse"):
                problems.append(f"{mp} was still mounted")
                sh(["fusermount3", "-uz", mp], check=False)
        for pid in daemons:
            if pid_alive(pid):
                problems.append(f"the daemon {pid} was still running")
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    if not pid_alive(pid):
                        break
                    time.sleep(0.1)
                else:
                    os.kill(pid, signal.SIGKILL)
        for mp, fs in under(r):
            sh(["umount", "-l", mp], check=False)
        left = under(r)
        if left:
            problems.append(f"still mounted, so {r} is kept: {left}")
        else:
            shutil.rmtree(r, ignore_errors=True)
    assert not problems, problems


def chroot(r: Path, *cmd, timeout=120, check=True):
    return sh(["chroot", r, *cmd], timeout=timeout, check=check, env=ENV)


def wait_gone(pid, seconds=60):
    end = time.time() + seconds
    while pid_alive(pid) and time.time() < end:
        time.sleep(0.2)
    return not pid_alive(pid)


def test_package_installs_mounts_and_removes_cleanly(deb, root):
    r, daemons = root
    assert deb.is_file(), deb
    version = sh(["dpkg-deb", "-f", deb, "Version"]).stdout.strip()
    files = [line.split()[-1].lstrip(".") for line in sh(["dpkg-deb", "-c", deb]).stdout.splitlines()
             if not line.startswith("d")]
    assert "/usr/bin/docdrive" in files and "/usr/bin/docdrive-full" in files, files

    # A Debian 12 without Swift: no runtime before; after, only the package's, which alone is loaded.
    def swift_runtime():
        return sorted(str(p.relative_to(r)) for d in ("usr", "opt") for p in (r / d).rglob("libswiftCore*"))
    assert not swift_runtime() and not (r / "usr" / "bin" / "swift").exists()
    shutil.copy(deb, r / "tmp" / deb.name)
    os.chmod(r / "tmp" / deb.name, 0o644)
    chroot(r, "apt-get", "update", "-q", timeout=300)
    p = chroot(r, "apt", "install", "-y", "-q", f"./tmp/{deb.name}", timeout=600, check=False)
    assert p.returncode == 0, f"apt install exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert swift_runtime() == ["usr/lib/docdrive/libswiftCore.so"], swift_runtime()
    ldd = chroot(r, "ldd", "/usr/bin/docdrive-full").stdout
    assert "not found" not in ldd and "/opt/" not in ldd, ldd
    assert chroot(r, "docdrive", "--version").stdout.strip() == version

    # A drive, mounted with the command line of the packaged systemd user unit.
    chroot(r, "docdrive", "init", "--default")
    unit = (r / "usr/lib/systemd/user/docdrive.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    args = [a.replace("%h", HOME) for a in exec_start.split("=", 1)[1].split() if a != "--foreground"]
    assert args[:2] == ["/usr/bin/docdrive", "mount"], args
    mnt = r / "root" / "Drive"
    chroot(r, *args, timeout=90)
    daemons.append(json.loads((r / DRIVE.lstrip("/") / "run" / "mount.json").read_text())["pid"])
    assert (str(mnt), "fuse.docdrive") in mounts()
    chroot(r, "sh", "-c", "echo hello > /root/Drive/Notes/hello.txt && cat /root/Drive/Notes/hello.txt")
    assert {"Archive", "Notes"} <= set(os.listdir(mnt)), os.listdir(mnt)
    chroot(r, "docdrive", "unmount", "/root/Drive", timeout=90)
    assert (str(mnt), "fuse.docdrive") not in mounts() and wait_gone(daemons[-1])

    # mount(8) and fstab: the type fuse.docdrive through fuse3's mount.fuse3, no helper of ours.
    chroot(r, "mkdir", "-p", "/mnt/drive")
    chroot(r, "mount", "-t", "fuse.docdrive", DRIVE, "/mnt/drive", "-o", "_netdev,noatime", timeout=90)
    daemons.append(json.loads((r / DRIVE.lstrip("/") / "run" / "mount.json").read_text())["pid"])
    assert (str(r / "mnt" / "drive"), "fuse.docdrive") in mounts()
    assert (r / "mnt" / "drive" / "Notes" / "hello.txt").read_text() == "hello\n"
    chroot(r, "umount", "/mnt/drive", timeout=90)
    assert (str(r / "mnt" / "drive"), "fuse.docdrive") not in mounts() and wait_gone(daemons[-1])

    # apt remove: the package's files are gone, dpkg knows it no more.
    chroot(r, "apt", "remove", "-y", "-q", "docdrive", timeout=300)
    left = [f for f in files if os.path.lexists(r / f.lstrip("/"))]
    assert not left and not (r / "usr/lib/docdrive").exists(), f"left behind by apt remove: {left}"
    status = chroot(r, "dpkg-query", "-W", "-f=${db:Status-Abbrev}", "docdrive", check=False).stdout
    assert not status.startswith(("ii", "rc")), status
