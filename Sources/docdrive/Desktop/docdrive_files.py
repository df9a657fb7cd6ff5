# DocDrive's file manager extension (Nautilus 43+ through nautilus-python; Nemo through
# nemo-python): an emblem per file of a mounted drive (synced, pending/uploading, conflict,
# placeholder, failed) and the menu items "Keep on this device", "Free up space" and "Show
# conflicts". It asks the drive's daemon over its status socket ($XDG_RUNTIME_DIR/docdrive/,
# the line protocol of README.md "File manager status"): a batch of paths per folder, and one
# subscription per folder shown, whose change lines (read on the main loop) update the emblems.
# Installed by `docdrive desktop install`, which writes the docdrive command's path below, after
# the status socket's client (escape, socket_folder, Connection, Drive: docdrive_status.py).
import os
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
