"""The file manager status: the daemon's status socket and the Nautilus extension.

One drive (module scope) with a store "Desk" (folder remote) whose folder holds a file in each
state: synced, placeholder (evicted), conflict (the document and its copy, made by changing both
sides while unmounted), failed (a fifo, which no remote takes) and pending (saved after the
store's write-back delay was set to 600 s in config.yaml; the unmount uploads it). Checked:
* the socket, in $XDG_RUNTIME_DIR/docdrive, greets with the mount and the drive home, answers
  a batch of paths with each one's state (the same as user.docdrive.status), `conflicts` with
  the copy, a bad line with `error`, and a subscriber (of a folder of the store "Work") is
  sent a file's new state when it is saved (pending) and again when its upload is done (synced);
* `docdrive desktop install` writes the extension (with this docdrive's path), `uninstall`
  removes it;
* real Nautilus 43 under Xvfb opens the folder: the extension (it logs each emblem it gives,
  under DOCDRIVE_EMBLEM_LOG) gives each file the emblem of its state, a screenshot is taken
  (DOCDRIVE_SCREENSHOT=PATH copies it there, for the README); then `docdrive pin` of the
  placeholder downloads it, and the emblem Nautilus shows becomes "synced" through the
  subscription without the folder being reopened;
* a conflict the sync engine finds (a synced file of "Work" changed on its remote, then here)
  is told to a subscriber of its folder, for the document and for the new copy.
In CI (CI=true) a missing Xvfb or Nautilus fails the test; elsewhere it is skipped.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

import ddtest
from ddtest import Drive, children_of, need, pid_alive, run, wait_until

EMBLEMS = {"synced": "emblem-default", "pending": "emblem-synchronizing", "uploading": "emblem-synchronizing",
           "placeholder": "emblem-web", "conflict": "emblem-important", "failed": "emblem-unreadable"}


# --------------------------------------------------------------------------- the drive

class Desk:
    def __init__(self, d: Drive, runtime: Path):
        self.d = d
        self.runtime = runtime
        self.remote = d.base / "desk-remote"

    @property
    def dir(self) -> Path:
        return self.d.mnt / "Desk"

    @property
    def cache(self) -> Path:
        return self.d.home / "stores" / "desk" / "cache"

    def sync(self, timeout=30, check=0):
        p = self.d.cli("sync", "--timeout", str(timeout), timeout=timeout + 30, check=False)
        assert check is None or p.returncode == check, f"sync exited {p.returncode}: {p.stderr}\n{self.d.log_tail()}"
        return p

    def xstatus(self, name) -> str:
        return os.getxattr(self.dir / name, "user.docdrive.status").decode()

    def conflict_copies(self) -> list[str]:
        return sorted(n for n in os.listdir(self.dir) if "(conflict from " in n)


@pytest.fixture(scope="module")
def desk(base_dir):
    d = Drive(base_dir / f"desktop-{os.getpid()}").create()
    runtime = d.base / "xdg-run"
    runtime.mkdir(mode=0o700)
    d.extra_env["XDG_RUNTIME_DIR"] = str(runtime)
    # The user's freedesktop thumbnail cache, which the drive writes and Nautilus reads.
    d.extra_env["XDG_CACHE_HOME"] = str(d.base / "xdg-cache")
    k = Desk(d, runtime)
    try:
        d.cli("store", "add", "desk", "--name", "Desk", "--folder", str(k.remote))
        d.mount()
        for n in ("synced.txt", "placeholder.txt", "conflict.txt"):
            (k.dir / n).write_text(f"the first {n}\n")
        # A document with a picture (LibreOffice embeds one), saved and then a placeholder.
        src = d.base / "report.txt"
        src.write_text("Quarterly report\n\nSales went up in every region.\n")
        run(["soffice", f"-env:UserInstallation=file://{d.base / 'lo-profile'}", "--headless", "--norestore",
             "--convert-to", "odt", "--outdir", str(k.dir), str(src)], timeout=120)
        assert wait_until(lambda: xattr_or_none(k.dir / "report.odt", "user.docdrive.thumbnail"), 20), "no picture of report.odt"
        k.sync()
        for n in ("placeholder.txt", "report.odt"):
            p = d.cli("evict", str(k.dir / n), check=False)
            assert p.returncode == 0, p.stderr
        # Both sides change conflict.txt while the drive is not mounted: a conflict at the next look.
        assert d.unmount().returncode == 0
        (k.cache / "conflict.txt").write_text("this device's change, longer\n")
        (k.remote / "conflict.txt").write_text("the remote's change\n")
        d.mount()
        k.sync(check=None)
        assert wait_until(lambda: len(k.conflict_copies()) == 1, 15), (os.listdir(k.dir), d.log_tail())
        os.mkfifo(k.dir / "failed.fifo")
        assert wait_until(lambda: failed_count(k) == 1, 30), d.log_tail()
        # A save that stays pending: the store's write-back delay, changed while mounted, is 10 minutes.
        config = d.home / "config.yaml"
        text = config.read_text()
        assert text.count("writeback: 2.0") == 2, text
        i = text.index('name: "desk"')
        config.write_text(text[:i] + text[i:].replace("writeback: 2.0", "writeback: 600.0", 1))
        assert wait_until(lambda: "store desk: settings changed" in d.log_path.read_text(), 10), d.log_tail()
        (k.dir / "pending.txt").write_text("saved, not uploaded yet\n")
        assert wait_until(lambda: k.xstatus("pending.txt") == "pending", 10), k.xstatus("pending.txt")
        yield k
    finally:
        problems = d.teardown()
        assert not problems, problems


def xattr_or_none(path: Path, name: str):
    try:
        return os.getxattr(path, name)
    except OSError:
        return None


def downloads(k: Desk) -> list[str]:
    """The files the daemon downloaded on demand (its log says each)."""
    text = k.d.log_path.read_text(errors="replace")
    return [line.split("downloaded ", 1)[1].split(" (", 1)[0] for line in text.splitlines() if "on demand" in line and "downloaded " in line]


def failed_count(k: Desk) -> int:
    import json
    st = json.loads(k.d.cli("status", "--json").stdout)
    return next(s for s in st["stores"] if s["name"] == "desk")["uploads"]["failed"]


def expected_states(k: Desk) -> dict[str, str]:
    copy = k.conflict_copies()[0]
    return {"synced.txt": "synced", "placeholder.txt": "placeholder", "conflict.txt": "conflict", copy: "conflict",
            "failed.fifo": "failed", "pending.txt": "pending", "report.odt": "placeholder"}


# --------------------------------------------------------------------------- the socket

class StatusSocket:
    def __init__(self, k: Desk):
        folder = k.runtime / "docdrive"
        socks = [n for n in os.listdir(folder) if n.endswith(".sock")]
        assert len(socks) == 1, socks
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(str(folder / socks[0]))
        self.buf = b""
        self.hello = self.line()

    def line(self) -> list[str]:
        while b"\n" not in self.buf:
            data = self.s.recv(65536)
            assert data, "the daemon closed the status socket"
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().split("\t")

    def send(self, *fields):
        self.s.sendall(("\t".join(fields) + "\n").encode())

    def ask(self, *fields) -> list[list[str]]:
        self.send(*fields)
        out = []
        while (line := self.line()) != ["done"]:
            out.append(line)
            if line[0] == "error":
                break
        return out

    def close(self):
        self.s.close()


@pytest.mark.timeout(120)
def test_the_status_socket_answers_states_conflicts_and_changes(desk):
    k = desk
    s = StatusSocket(k)
    try:
        assert s.hello == ["docdrive-status", "1", str(k.d.mnt), str(k.d.home)], s.hello
        want = expected_states(k)
        # Every state in one batch, plus a missing file, an app's file and a path outside.
        (k.d.mnt / "Notes" / "desk-note.txt").write_text("an app's own\n")
        paths = [str(k.dir / n) for n in want] + [str(k.dir / "missing.txt"), str(k.d.mnt / "Notes" / "desk-note.txt"), "/etc/passwd"]
        got = s.ask("status", *paths)
        assert [line[0] for line in got] == ["status"] * len(paths), got
        states = {Path(line[1]).name: line[2] for line in got}
        assert {n: states[n] for n in want} == want, got
        assert states["missing.txt"] == "none" and states["desk-note.txt"] == "local" and states["passwd"] == "none", got
        # A reference entry in an app's Documents has its target's state, as its attribute says.
        k.d.cli("open", "--app", ddtest.NOTES_ID, str(k.dir / "conflict.txt"), "--as", "desk-ref.txt")
        ref = k.d.mnt / "Notes" / "desk-ref.txt"
        assert os.getxattr(ref, "user.docdrive.status") == b"conflict"
        assert s.ask("status", str(ref)) == [["status", str(ref), "conflict", "-"]]
        # The same as the attribute (the fifo has none: the kernel keeps user.* off fifos).
        for n in want:
            if n != "failed.fifo":
                assert k.xstatus(n) == want[n], n
        # Conflicts: the document and its copy, from either name or the folder.
        copy = k.conflict_copies()[0]
        for asked in ("conflict.txt", copy, ""):
            c = s.ask("conflicts", str(k.dir / asked) if asked else str(k.dir))
            assert [line[:3] for line in c] == [["conflict", str(k.dir / "conflict.txt"), str(k.dir / copy)]], (asked, c)
        # A bad line gets a sentence and the connection stays.
        assert s.ask("stat", str(k.dir))[0][0] == "error"
        assert s.ask("status", "relative/path")[0][0] == "error"
        # A subscriber is told a saved file's new state, and again when it is uploaded.
        work = k.d.mnt / "Work" / "desktop"
        work.mkdir()
        assert s.ask("subscribe", str(work)) == []
        (work / "new.txt").write_text("new\n")
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (seen and seen[-1] == "synced"):
            try:
                line = s.line()
            except TimeoutError:
                break
            if line[0] == "status" and line[1] == str(work / "new.txt"):
                seen.append(line[2])
        assert seen and seen[0] in ("pending", "uploading") and seen[-1] == "synced", seen
    finally:
        s.close()


def thread_switches(pid: int, name: str) -> int:
    """Voluntary context switches (wake-ups) of the daemon's thread named `name`."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    raise AssertionError(f"the daemon {pid} has no thread named {name}")


@pytest.mark.timeout(120)
def test_the_status_socket_pushes_and_sleeps_while_nothing_changes(desk):
    # Given a subscriber of a store folder whose files are all synced
    k = desk
    s = StatusSocket(k)
    try:
        work = k.d.mnt / "Work" / "quiet"
        work.mkdir()
        (work / "a.txt").write_text("a\n")
        deadline = time.monotonic() + 30
        while s.ask("status", str(work / "a.txt"))[0][2] != "synced":
            assert time.monotonic() < deadline, "a.txt was not uploaded within 30 s"
            time.sleep(0.2)
        assert s.ask("subscribe", str(work)) == []
        pid = k.d.pid
        time.sleep(1)
        # When nothing changes for 3 seconds
        before = thread_switches(pid, "status-look")
        time.sleep(3)
        after = thread_switches(pid, "status-look")
        # Then the socket's thread slept through them (it looked every 0.4 s: 7 wake-ups)
        assert after - before <= 1, f"the status thread woke {after - before} times in 3 s of nothing"
        # And a change is still pushed to the subscriber
        (work / "b.txt").write_text("b\n")
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (seen and seen[-1] == "synced"):
            line = s.line()
            if line[0] == "status" and line[1] == str(work / "b.txt"):
                seen.append(line[2])
        assert seen and seen[0] in ("pending", "uploading") and seen[-1] == "synced", seen
    finally:
        s.close()


# --------------------------------------------------------------------------- desktop install

def desktop_env(k: Desk, data: Path) -> dict:
    return k.d.env(XDG_DATA_HOME=str(data), HOME=str(data.parent))


@pytest.mark.timeout(60)
def test_desktop_install_writes_the_extension_and_uninstall_removes_it(desk, tmp_path):
    data = tmp_path / "share"
    p = desk.d.cli("desktop", "install", env=desktop_env(desk, data))
    files = [data / "nautilus-python" / "extensions" / "docdrive_files.py", data / "nemo-python" / "extensions" / "docdrive_files.py"]
    for f in files:
        text = f.read_text()
        assert f'DOCDRIVE = "{os.path.realpath(desk.d.bin)}"' in text, text[:2000]
        assert str(f) in p.stdout
    run(["/usr/bin/python3", "-m", "py_compile", str(files[0])])
    # Its menu items, asked outside Nautilus with stand-ins for Nautilus's files.
    code = MENU_CHECK.format(ext=str(files[0]), placeholder=str(desk.dir / "placeholder.txt"),
                             conflict=str(desk.dir / "conflict.txt"), synced=str(desk.dir / "synced.txt"))
    out = run(["/usr/bin/python3", "-c", code], env=desktop_env(desk, data), timeout=30).stdout.splitlines()
    assert out == ["Keep on this device", "Keep on this device|Free up space|Show conflicts",
                   "Keep on this device|Free up space", ""], out
    p = desk.d.cli("desktop", "uninstall", env=desktop_env(desk, data))
    assert not any(f.exists() for f in files) and "Removed" in p.stdout, p.stdout


MENU_CHECK = """
import importlib.util
spec = importlib.util.spec_from_file_location("docdrive_files", {ext!r})
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
from gi.repository import Gio
class F:
    def __init__(self, p): self.p = p
    def get_uri_scheme(self): return "file"
    def get_location(self): return Gio.File.new_for_path(self.p)
ext = m.DocDriveExtension()
for paths in ([{placeholder!r}], [{conflict!r}], [{synced!r}], ["/etc/passwd"]):
    print("|".join(i.props.label for i in ext.get_file_items([F(p) for p in paths])))
"""


# --------------------------------------------------------------------------- Nautilus

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


class Session:
    """Xvfb, a D-Bus session bus and Nautilus, started here and stopped by pid."""

    def __init__(self, env: dict, log_dir: Path):
        self.env = env
        self.procs: list[subprocess.Popen] = []
        self.log_dir = log_dir

    def start(self, folder: Path):
        r, w = os.pipe()
        x = subprocess.Popen([need("Xvfb"), "-displayfd", str(w), "-screen", "0", "900x560x24", "-nolisten", "tcp"],
                             pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=open(self.log_dir / "xvfb.log", "w"),
                             start_new_session=True)
        self.procs.append(x)
        os.close(w)
        with os.fdopen(r) as f:
            display = f.readline().strip()
        assert display.isdigit(), f"Xvfb did not start: {(self.log_dir / 'xvfb.log').read_text()}"
        self.env["DISPLAY"] = ":" + display
        # A session bus that starts nothing itself: no gvfs, no tracker indexing the mount.
        conf = self.log_dir / "bus.conf"
        conf.write_text(BUS_CONFIG)
        bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1"], env=self.env,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(bus)
        self.env["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().strip()
        assert self.env["DBUS_SESSION_BUS_ADDRESS"], "dbus-daemon gave no address"
        self.bus = bus
        n = subprocess.Popen([need("nautilus"), "--new-window", str(folder)], env=self.env, stdin=subprocess.DEVNULL,
                             stdout=open(self.log_dir / "nautilus.log", "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(n)

    def screenshot(self, out: Path):
        run([need("import"), "-display", self.env["DISPLAY"], "-window", "root", str(out)], env=self.env, timeout=30)

    def stop(self) -> list[str]:
        """Stops what it started, last first (and what the bus started for Nautilus); returns what outlived it."""
        extra = [c for p in self.procs[1:2] for c in children_of(p.pid)]
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        for pid in extra:
            if pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not any(pid_alive(pid) for pid in extra), 5)
        return [f"pid {pid}" for pid in extra if pid_alive(pid)] + [str(p.args[0]) for p in self.procs if p.poll() is None]


def emblems_logged(log: Path) -> dict[str, tuple[str, str]]:
    """The last emblem the extension gave each file: name -> (state, emblem)."""
    out = {}
    if log.exists():
        for line in log.read_text().splitlines():
            f = line.split("\t")
            if f[0] == "emblem" and len(f) == 4:
                out[Path(f[1]).name] = (f[2], f[3])
    return out


@pytest.mark.timeout(150)
def test_nautilus_shows_each_files_emblem_and_follows_a_change(desk, tmp_path):
    k = desk
    need("Xvfb"), need("nautilus"), need("import")
    data = tmp_path / "share"
    home = tmp_path
    log = tmp_path / "emblems.log"
    env = desktop_env(k, data)
    k.d.cli("desktop", "install", env=env)
    # Nautilus reads the thumbnail cache the drive writes (the same user's $XDG_CACHE_HOME).
    env.update({"DOCDRIVE_EMBLEM_LOG": str(log), "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": k.d.extra_env["XDG_CACHE_HOME"],
                "GSK_RENDERER": "cairo", "NO_AT_BRIDGE": "1", "GTK_A11Y": "none", "LANG": "C.UTF-8"})
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    # Nautilus's embedded Python finds its prefix through PATH: the system's python3 (with
    # python3-gi), not a pyenv's that runs the tests.
    for key in [k for k in env if k.startswith(("PYENV", "PYTHON"))]:
        del env[key]
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    env["GIO_USE_VFS"] = "local"
    want = {n: (s, EMBLEMS[s]) for n, s in expected_states(k).items()}
    s = Session(env, tmp_path)
    try:
        s.start(k.dir)
        ok = wait_until(lambda: all(emblems_logged(log).get(n) == w for n, w in want.items()), 45, 0.2)
        got = emblems_logged(log)
        assert ok, f"emblems given: {got}\nwanted: {want}\nnautilus log:\n{(tmp_path / 'nautilus.log').read_text()[-3000:]}"
        time.sleep(1.5)  # the emblems are drawn a moment after they are given
        shot = tmp_path / "nautilus.png"
        s.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        if os.environ.get("DOCDRIVE_SCREENSHOT"):
            shutil.copy(shot, os.environ["DOCDRIVE_SCREENSHOT"])
        # The placeholder document's thumbnail came from the cache the drive wrote: Nautilus
        # (and any thumbnailer it ran) downloaded nothing of it.
        assert not [f for f in downloads(k) if f.endswith("report.odt")], downloads(k)
        # It was the drive's picture: in the cache under the file's URI, and no thumbnailer
        # failed on the file (one would have been run, and refused, without it).
        uri = "file://" + urllib.parse.quote(str(k.dir / "report.odt"))
        thumbs = Path(k.d.extra_env["XDG_CACHE_HOME"]) / "thumbnails"
        md5 = hashlib.md5(uri.encode()).hexdigest() + ".png"
        assert (thumbs / "large" / md5).exists(), sorted(str(p.relative_to(thumbs)) for p in thumbs.rglob("*.png"))
        assert not list(thumbs.glob(f"fail/*/{md5}")), "a thumbnailer failed on the placeholder document"
        assert k.xstatus("report.odt") == "placeholder"
        # A change the daemon tells: the placeholder, pinned, is downloaded; Nautilus asks again.
        p = k.d.cli("pin", str(k.dir / "placeholder.txt"), check=False)
        assert p.returncode == 0, p.stderr
        assert wait_until(lambda: emblems_logged(log).get("placeholder.txt") == ("synced", "emblem-default"), 20, 0.2), \
            f"after the pin: {emblems_logged(log).get('placeholder.txt')}"
    finally:
        left = s.stop()
        k.d.cli("desktop", "uninstall", env=desktop_env(k, data), check=False)
    assert not left, f"left running: {left}"


@pytest.mark.timeout(90)
def test_a_subscriber_is_told_of_a_conflict_the_sync_engine_finds(desk):
    """A synced file of the store "Work" (write-back 2 s) is changed on its remote and then here:
    its upload finds the other version and keeps it as a conflict copy, and a subscriber of the
    folder is told both names' state without asking."""
    k = desk
    folder = k.d.mnt / "Work" / "desktop-conflict"
    folder.mkdir()
    (folder / "x.txt").write_text("first\n")
    assert wait_until(lambda: os.getxattr(folder / "x.txt", "user.docdrive.status") == b"synced"
                      and (k.d.remote / "desktop-conflict" / "x.txt").exists(), 20)
    s = StatusSocket(k)
    try:
        assert s.ask("subscribe", str(folder)) == []
        assert s.ask("status", str(folder / "x.txt"))[0][2] == "synced"
        (k.d.remote / "desktop-conflict" / "x.txt").write_text("another device's version, longer\n")
        (folder / "x.txt").write_text("this device's version\n")
        told = {}
        deadline = time.monotonic() + 40

        def both():
            return told.get("x.txt") == "conflict" and any("x (conflict from" in n and v == "conflict" for n, v in told.items())
        while time.monotonic() < deadline and not both():
            try:
                line = s.line()
            except TimeoutError:
                continue
            if line[0] == "status":
                told[Path(line[1]).name] = line[2]
        assert both(), f"{told}\n{os.listdir(folder)}\n{k.d.log_tail(15)}"
    finally:
        s.close()
