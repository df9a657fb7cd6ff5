"""The drive as a service (issue 18, its server bullets): mount(8) and /etc/fstab through fuse3's
mount.fuse3 helper, `umount`, the systemd unit that `docdrive service install` writes, and the
sd_notify protocol the daemon speaks to a Type=notify unit.

This machine has no systemd as PID 1, so the notify protocol is tested against a datagram socket
the test listens on (as systemd's would), and the unit is checked with `systemd-analyze verify`.
mount(8) runs its helpers with a standard PATH: the test links /usr/local/bin/docdrive to the
binary under test for its duration (`mount-scripts/mount.sh` installs the same link).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import ddtest
from ddtest import Drive, pid_alive, run, wait_until

pytestmark = pytest.mark.timeout(120)
LINK = Path("/usr/local/bin/docdrive")


@pytest.fixture
def linked():
    """/usr/local/bin/docdrive -> the binary under test, put back as it was afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mount(8) of a FUSE type with a helper is for root here (as /etc/fstab lines are)")
    before = os.readlink(LINK) if LINK.is_symlink() else None
    if LINK.exists() and before is None:
        pytest.fail(f"{LINK} is a file, not a link this test may replace")
    if LINK.is_symlink():
        LINK.unlink()
    LINK.symlink_to(ddtest.docdrive_bin())
    yield LINK
    LINK.unlink()
    if before:
        LINK.symlink_to(before)


def daemon_of(d: Drive):
    r = d.record()
    return r and r.get("pid")


def test_mount_8_fstab_and_umount(new_drive, linked, tmp_path):
    d = new_drive()
    d.mnt.mkdir()
    p = run(["mount", "-t", "fuse.docdrive", str(d.home), str(d.mnt), "-o", "_netdev,noatime"], check=False, timeout=60)
    assert p.returncode == 0, f"mount -t fuse.docdrive: {p.stderr}"
    d.pid = daemon_of(d)
    ddtest.register(d)
    assert ddtest.is_docdrive_mount(d.mnt)
    assert "noatime" in ddtest.mount_options(d.mnt)
    (d.mnt / "Work" / "from-mount8.txt").write_text("saved\n")
    pid = d.pid
    p = run(["umount", str(d.mnt)], check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    assert wait_until(lambda: not pid_alive(pid), 40), "the daemon did not exit after umount"
    ddtest.unregister(d)
    assert (d.remote / "from-mount8.txt").read_text() == "saved\n", "umount did not let the daemon upload first"
    # The same through an fstab line (mount -T reads another fstab than /etc/fstab).
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{d.home} {d.mnt} fuse.docdrive defaults,_netdev 0 0\n")
    p = run(["mount", "-T", str(fstab), str(d.mnt)], check=False, timeout=60)
    assert p.returncode == 0, f"mount from an fstab line: {p.stderr}"
    d.pid = daemon_of(d)
    ddtest.register(d)
    assert ddtest.is_docdrive_mount(d.mnt) and (d.mnt / "Work" / "from-mount8.txt").read_text() == "saved\n"
    pid = d.pid
    assert run(["umount", str(d.mnt)], check=False, timeout=60).returncode == 0
    assert wait_until(lambda: not pid_alive(pid), 40)
    ddtest.unregister(d)
    # A wrong option is refused with a sentence, nothing mounted.
    p = run(["mount", "-t", "fuse.docdrive", str(d.home), str(d.mnt), "-o", "bogus"], check=False, timeout=60)
    assert p.returncode != 0 and "Unknown mount option \"bogus\"" in p.stderr and not ddtest.is_docdrive_mount(d.mnt)


def test_service_install_writes_a_notify_unit_and_uninstall_removes_it(new_drive, tmp_path):
    d = new_drive()
    units = tmp_path / "units"
    env = d.env(DOCDRIVE_SYSTEMD_DIR=str(units))
    p = d.cli("service", "install", str(d.mnt), "--upload-grace", "12", "--json", env=env)
    out = json.loads(p.stdout)
    unit = Path(out["unit"])
    assert unit.parent == units and unit.name.startswith("docdrive-") and out["started"] is False
    text = unit.read_text()
    assert "Type=notify" in text and "TimeoutStopSec=42" in text
    exec_line = next(l for l in text.splitlines() if l.startswith("ExecStart="))
    assert f'mount --home "{d.home}" --upload-grace 12 --foreground "{d.mnt}"' in exec_line, exec_line
    # The unit runs the `docdrive` command (which execs docdrive-full beside it), by its real path.
    assert exec_line.startswith(f'ExecStart="{os.path.realpath(d.bin)}" mount '), exec_line
    assert ("multi-user.target" if os.geteuid() == 0 else "default.target") in text
    if shutil.which("systemd-analyze"):
        v = run(["systemd-analyze", "verify", str(unit)], check=False)
        assert v.returncode == 0, f"systemd-analyze verify: {v.stderr}"
    # Two drives get two units.
    other = new_drive()
    p2 = json.loads(other.cli("service", "install", str(other.mnt), "--json", env=other.env(DOCDRIVE_SYSTEMD_DIR=str(units))).stdout)
    assert p2["unit"] != out["unit"]
    d.cli("service", "uninstall", env=env)
    assert not unit.exists() and Path(p2["unit"]).exists()
    again = d.cli("service", "uninstall", env=env, check=False)
    assert again.returncode != 0 and "no unit" in again.stderr


def test_the_daemon_speaks_sd_notify(new_drive, tmp_path):
    """READY=1 once the mount serves, STATUS= with the uploads, STOPPING=1 when it drains."""
    d = new_drive()
    d.mnt.mkdir()
    sock_path = tmp_path / "notify.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(sock_path))
    s.settimeout(30)
    proc = subprocess.Popen([d.bin, "mount", "--foreground", str(d.mnt)], env=d.env(NOTIFY_SOCKET=str(sock_path)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    d.pid = proc.pid
    ddtest.register(d)
    got = []
    try:
        msg = s.recv(4096).decode()
        got.append(msg)
        assert "READY=1" in msg.split("\n"), msg
        # Ready means serving: the mount answers at once.
        assert ddtest.is_docdrive_mount(d.mnt) and {"Notes", "Work"} <= set(os.listdir(d.mnt))
        (d.mnt / "Work" / "n.txt").write_text("notified\n")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any("to upload" in m for m in got):
            try:
                got.append(s.recv(4096).decode())
            except socket.timeout:
                break
        assert any(m.startswith("STATUS=") and "1 file to upload" in m for m in got), got
        proc.send_signal(signal.SIGTERM)
        stopping = None
        while stopping is None:
            m = s.recv(4096).decode()
            got.append(m)
            if "STOPPING=1" in m.split("\n"):
                stopping = m
        assert proc.wait(60) == 0
        assert (d.remote / "n.txt").read_text() == "notified\n"
    finally:
        s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        ddtest.unregister(d)
        if ddtest.is_docdrive_mount(d.mnt):
            run(["fusermount3", "-uz", str(d.mnt)], check=False)
