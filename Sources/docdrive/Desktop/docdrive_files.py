# DocDrive's file manager extension (Nautilus 43+ through nautilus-python; Nemo through
# nemo-python): an emblem per file of a mounted drive (synced, pending/uploading, conflict,
# placeholder, failed) and the menu items "Keep on this device", "Free up space" and "Show
# conflicts". It asks the drive's daemon over its status socket ($XDG_RUNTIME_DIR/docdrive/,
# the line protocol of README.md "File manager status"): a batch of paths per folder, and one
# subscription per folder shown, whose change lines (read on the main loop) update the emblems.
# Installed by `docdrive desktop install`, which writes the docdrive command's path below.
import os
import socket
import subprocess
import threading
import time

import gi

try:
    gi.require_version("Nautilus", "4.0")
    from gi.repository import Nautilus as FileManager
except (ValueError, ImportError):
    gi.require_version("Nemo", "3.0")
    from gi.repository import Nemo as FileManager
from gi.repository import Gio, GLib, GObject

DOCDRIVE = "@DOCDRIVE@"
EMBLEMS = {
    "synced": "emblem-default",
    "pending": "emblem-synchronizing",
    "uploading": "emblem-synchronizing",
    "downloading": "emblem-synchronizing",
    "placeholder": "emblem-web",
    "conflict": "emblem-important",
    "failed": "emblem-unreadable",
}
# Set by tests: what the extension does is written there, a line each: ("emblem", path, state,
# emblem name), ("told", path, state) for a change line, ("menu", paths, labels), ("run", ...).
LOG = os.environ.get("DOCDRIVE_EMBLEM_LOG")


def log(*fields):
    if LOG:
        with open(LOG, "a", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\t".join(fields) + "\n")


def escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def unescape(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def socket_folder():
    run = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    return os.path.join(run, "docdrive")


class Connection:
    """One connection to a daemon's status socket; its first line names the mount."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        hello = self.read_line()
        if len(hello) < 4 or hello[0] != "docdrive-status":
            raise OSError(f"not a DocDrive status socket: {path}")
        self.mountpoint, self.home = hello[2], hello[3]

    def read_line(self):
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise OSError("the daemon closed the status socket")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return [unescape(f) for f in line.decode("utf-8", "surrogateescape").split("\t")]

    def send(self, *fields):
        self.sock.sendall(("\t".join(escape(f) for f in fields) + "\n").encode("utf-8", "surrogateescape"))

    def ask(self, *fields):
        """Sends a request; returns its answer's lines (those before "done")."""
        self.send(*fields)
        lines = []
        while True:
            line = self.read_line()
            if line[0] == "done":
                return lines
            if line[0] == "error":
                raise OSError(line[1] if len(line) > 1 else "error")
            lines.append(line)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Drive:
    """A mounted drive: a connection for questions, one that listens for changes."""

    def __init__(self, path, on_status):
        self.path = path
        self.lock = threading.Lock()
        self.ask_conn = Connection(path)
        self.mountpoint, self.home = self.ask_conn.mountpoint, self.ask_conn.home
        self.watch_conn = Connection(path)
        self.watch_conn.sock.setblocking(False)
        self.subscribed = set()
        self.alive = True
        self.on_status = on_status
        # Change lines are read on the file manager's main loop (its Python may run no thread
        # of ours while it waits for events).
        GLib.io_add_watch(self.watch_conn.sock.fileno(), GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP | GLib.IO_ERR, self.readable)

    def contains(self, path):
        return path == self.mountpoint or path.startswith(self.mountpoint.rstrip("/") + "/")

    def status(self, paths):
        out = {}
        with self.lock:
            for i in range(0, len(paths), 500):
                for line in self.ask_conn.ask("status", *paths[i:i + 500]):
                    if line[0] == "status" and len(line) >= 4:
                        out[line[1]] = (line[2], line[3] == "pinned")
        return out

    def conflicts(self, paths):
        with self.lock:
            return [(l[1], l[2]) for l in self.ask_conn.ask("conflicts", *paths) if l[0] == "conflict" and len(l) >= 3]

    def subscribe(self, folder):
        if folder not in self.subscribed:
            self.subscribed.add(folder)
            self.watch_conn.sock.setblocking(True)
            try:
                self.watch_conn.send("subscribe", folder)
            finally:
                self.watch_conn.sock.setblocking(False)

    def readable(self, fd, condition):
        """The listening connection has bytes: each whole status line is a change."""
        c = self.watch_conn
        try:
            data = c.sock.recv(1 << 20)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self.alive = False
            return False
        c.buf += data
        while b"\n" in c.buf:
            raw, c.buf = c.buf.split(b"\n", 1)
            line = [unescape(f) for f in raw.decode("utf-8", "surrogateescape").split("\t")]
            if line[0] == "status" and len(line) >= 4:
                self.on_status(line[1], line[2], line[3] == "pinned")
        return True


class DocDriveExtension(GObject.GObject, FileManager.InfoProvider, FileManager.MenuProvider):
    def __init__(self):
        super().__init__()
        self.drives = {}
        self.scanned = 0.0
        self.lock = threading.Lock()
        self.states = {}   # path -> (state, pinned)
        self.files = {}    # path -> the file manager's FileInfo, to invalidate on a change
        self.batched = set()

    # ---- drives

    def drive_of(self, path):
        for d in list(self.drives.values()):
            if d.alive and d.contains(path):
                return d
        if time.monotonic() - self.scanned < 3:
            return None
        self.scanned = time.monotonic()
        folder = socket_folder()
        try:
            names = [n for n in os.listdir(folder) if n.startswith("status-") and n.endswith(".sock")]
        except OSError:
            return None
        for n in names:
            p = os.path.join(folder, n)
            d = self.drives.get(p)
            if d is None or not d.alive:
                try:
                    self.drives[p] = Drive(p, self.changed)
                except OSError:
                    self.drives.pop(p, None)
        for d in list(self.drives.values()):
            if d.alive and d.contains(path):
                return d
        return None

    def changed(self, path, state, pinned):
        """A change line: the file manager asks the file again."""
        log("told", path, state)
        with self.lock:
            if self.states.get(path) == (state, pinned):
                return
            self.states[path] = (state, pinned)
            f = self.files.get(path)
        if f is not None:
            f.invalidate_extension_info()

    def state_of(self, drive, path):
        with self.lock:
            s = self.states.get(path)
        if s is not None:
            return s
        folder = os.path.dirname(path)
        paths = [path]
        if folder not in self.batched:
            # The first file of a folder: its whole folder in one request, and a subscription.
            self.batched.add(folder)
            try:
                paths += [os.path.join(folder, n) for n in sorted(os.listdir(folder))[:5000]]
            except OSError:
                pass
            drive.subscribe(folder)
        try:
            got = drive.status(paths)
        except OSError:
            drive.alive = False
            return ("none", False)
        with self.lock:
            self.states.update(got)
        return got.get(path, ("none", False))

    @staticmethod
    def local_path(f):
        if f.get_uri_scheme() != "file":
            return None
        loc = f.get_location()
        return loc.get_path() if loc is not None else None

    # ---- emblems

    def update_file_info(self, f):
        path = self.local_path(f)
        drive = self.drive_of(path) if path else None
        if drive is None:
            return
        with self.lock:
            self.files[path] = f
        state, _ = self.state_of(drive, path)
        emblem = EMBLEMS.get(state)
        if emblem:
            f.add_emblem(emblem)
            log("emblem", path, state, emblem)

    # ---- menu

    def get_file_items(self, *args):
        files = args[-1]
        paths = [p for p in (self.local_path(f) for f in files) if p]
        if not paths:
            return []
        drive = self.drive_of(paths[0])
        if drive is None or not all(drive.contains(p) for p in paths):
            return []
        states = [self.state_of(drive, p) for p in paths]
        items = []
        if not all(pinned for _, pinned in states):
            items.append(self.item("Keep", "Keep on this device", "Download and keep these files here",
                                   lambda *_: self.run(drive, ["pin"], paths)))
        if any(state != "placeholder" for state, _ in states):
            items.append(self.item("FreeUp", "Free up space", "Keep these files in the cloud only",
                                   lambda *_: self.run(drive, ["unpin"], paths, then=["evict"])))
        if any(state == "conflict" for state, _ in states):
            items.append(self.item("Conflicts", "Show conflicts", "Show the conflict copies beside each document",
                                   lambda *_: self.show_conflicts(drive, paths)))
        log("menu", ",".join(paths), ",".join(i.props.label for i in items))
        return items

    def get_background_items(self, *args):
        return []

    @staticmethod
    def item(name, label, tip, action):
        i = FileManager.MenuItem(name="DocDrive::" + name, label=label, tip=tip)
        i.connect("activate", action)
        return i

    def run(self, drive, command, paths, then=None):
        """Runs `docdrive COMMAND --home HOME PATHS...` (then `THEN ...`), reaped on the main loop."""
        p = subprocess.Popen([DOCDRIVE, *command, "--home", drive.home, *paths], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log("run", " ".join(command), ",".join(paths))

        def done(pid, status):
            p.returncode = status
            if then:
                self.run(drive, then, paths)
        GLib.child_watch_add(GLib.PRIORITY_DEFAULT, p.pid, done)

    def show_conflicts(self, drive, paths):
        found = drive.conflicts(paths)
        uris = sorted({Gio.File.new_for_path(p).get_uri() for pair in found for p in pair})
        log("conflicts", ",".join(paths), ",".join(uris))
        if not uris:
            return
        bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
        bus.call("org.freedesktop.FileManager1", "/org/freedesktop/FileManager1", "org.freedesktop.FileManager1",
                 "ShowItems", GLib.Variant("(ass)", (uris, "")), None, Gio.DBusCallFlags.NONE, -1, None, None, None)
