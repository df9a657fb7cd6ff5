# DocDrive's document picker (`docdrive pick`, PickCommand.swift): a GTK 3 file chooser over a
# mounted drive, for one app and one mode. open and import choose documents (several with
# --multiple), move-to and export-to a folder of a store for the app's documents. The drive's
# stores and public apps are in the sidebar, each file's sync state is a column of the list (asked
# of the status socket, followed while the window is open), a selected file's picture is shown
# beside the list and as its icon in the list, from the drive's attribute (never from its
# content), and a "Recent" place holds what the app picked lately. On Open the mode is
# carried out by the docdrive command of the same name (`docdrive open|import|move|export
# --json`), and the paths it gives are printed on stdout (or JSON); an error is one sentence in
# the window and on stderr, and the window stays for another choice; Cancel (Escape, closing the
# window) exits 1.
#
# `docdrive pick` runs this text (after the status socket's client, docdrive_status.py) as
# /usr/bin/python3 under the name "docdrive-picker", with one argument: the JSON of what to do
# (its keys are read in Picker.__init__). Under that name the drive refuses it the content of
# placeholders, as it does desktop indexers: GIO reads the start of a file whose name says nothing
# of its type, and browsing a store must download nothing.
import atexit
import fcntl
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time

try:
    import gi
    gi.require_version("Gtk", "3.0")
    gi.require_version("GdkPixbuf", "2.0")
    gi.require_version("Pango", "1.0")
    from gi.repository import GdkPixbuf, Gio, GLib, Gtk, Pango
except (ImportError, ValueError):
    Gtk = None

# The words the Sync column shows for a state of the status socket.
STATE_WORDS = {
    "synced": "Synced",
    "placeholder": "Not downloaded",
    "pending": "Waiting to upload",
    "uploading": "Uploading",
    "downloading": "Downloading",
    "conflict": "Conflict",
    "failed": "Upload failed",
    "local": "On this device",
    "offline": "Offline",
}
# What each mode runs, the button that does it, and the field of the command's JSON answer that
# is the resulting path.
MODES = {
    "open": ("open", "_Open", "reference_absolute"),
    "import": ("import", "_Import", "copy_absolute"),
    "move-to": ("move", "_Move Here", "target_absolute"),
    "export-to": ("export", "_Export Here", "copy_absolute"),
}
# How many documents (or folders, for move-to and export-to) the Recent place keeps for an app.
RECENT_MAX = 20
# Set by tests: what the picker shows and does, a line each: ("shown", folder), ("folder",
# path), ("row", path, state) the first time a row is drawn with a state, ("icon", path) the
# first time a row is drawn with the document's picture as its icon, ("preview", path, state,
# "picture"|"-"), ("told", path, state) for a change line of the status socket, ("recent",
# folder) the Recent place's folder, ("recent-entry", name, path) for each entry in it,
# ("recent-dropped", path, why) for an entry left out, ("message", kind, sentence), ("run",
# argv...), ("result", path).
LOG = os.environ.get("DOCDRIVE_PICKER_LOG")


def log(*fields):
    if LOG:
        try:
            with open(LOG, "a", encoding="utf-8", errors="surrogateescape") as f:
                f.write("\t".join(fields) + "\n")
        except OSError:
            pass


def say(sentence):
    """One sentence on stderr, as every docdrive command says an error."""
    sys.stderr.write(f"docdrive: {sentence}\n")
    sys.stderr.flush()


def gtk_ready():
    """Whether a window can be shown; if not, why is said on stderr."""
    if Gtk is None:
        say("The picker needs GTK 3 for python3: apt install python3-gi gir1.2-gtk-3.0.")
        return False
    ok = Gtk.init_check(sys.argv)
    if not (ok[0] if isinstance(ok, tuple) else ok):
        say("The picker needs a graphical session, and none can be opened here (DISPLAY or WAYLAND_DISPLAY).")
        return False
    return True


class Picker:
    def __init__(self, job):
        self.job = job
        self.docdrive = job["docdrive"]
        self.home = job["home"]
        self.mnt = job["mountpoint"].rstrip("/") or "/"
        self.app = job["app"]
        self.mode = job["mode"]
        self.stores = job["stores"]        # [{name, display, folder, offline}]
        self.apps = job["apps"]            # [{id, name, public, folder}]
        self.documents = job["documents"]  # move-to, export-to: the app's documents, mount-relative
        self.verb, accept, self.answer_key = MODES[self.mode]
        self.results = []                  # the commands' JSON answers, in order
        self.exit_code = 1
        self.states = {}                   # path -> state, from the status socket
        self.logged_rows = set()
        self.pictures = {}                 # mount path -> its picture for the list (a pixbuf), or None
        self.logged_icons = set()
        self.icon_size = 16
        self.picked = []                   # what was chosen and carried out (mount paths), for Recent
        self.drive = None
        self.running = False
        self.view = None
        self.said = set()                  # the warnings said on stderr (each once)
        folder_mode = self.mode in ("move-to", "export-to")
        self.recent = Recent(self.home, self.app, self.mnt, folder_mode)
        # GTK's own Recent place lists the user's recent files of every program, most of them
        # outside the drive; the picker's Recent place (the first shortcut) takes its place, also
        # for its key, Alt+R.
        Gtk.Settings.get_default().set_property("gtk-recent-files-enabled", False)
        # GTK puts the working folder in the sidebar when it is not the home folder: not wherever
        # the command was started (the drive is there already: its stores and apps, and the mount
        # itself when it is under the home folder).
        try:
            os.chdir(os.path.expanduser("~"))
        except OSError:
            pass
        action = Gtk.FileChooserAction.SELECT_FOLDER if folder_mode else Gtk.FileChooserAction.OPEN
        d = Gtk.FileChooserDialog(title=job.get("title") or self.default_title(), action=action)
        d.add_buttons("_Cancel", Gtk.ResponseType.CANCEL, accept, Gtk.ResponseType.ACCEPT)
        d.set_default_response(Gtk.ResponseType.ACCEPT)
        d.set_local_only(True)
        d.set_select_multiple(bool(job.get("multiple")) and not folder_mode)
        for place in [self.recent.folder] + [s["folder"] for s in self.stores] + [a["folder"] for a in self.apps if a["public"]]:
            try:
                d.add_shortcut_folder(place)
            except Exception:  # a folder the mount does not show (yet): no shortcut
                pass
        self.add_filter(d, job.get("types") or [])
        self.bar, self.bar_label = self.make_bar()
        d.get_content_area().pack_start(self.bar, False, False, 0)
        d.get_content_area().reorder_child(self.bar, 0)
        self.preview_image, self.preview_label = self.make_preview(d)
        d.connect("current-folder-changed", self.folder_changed)
        d.connect("update-preview", self.update_preview)
        d.connect("response", self.responded)
        d.connect("map-event", self.shown)
        self.dialog = d
        self.connect_status()
        self.add_sync_column()
        self.add_pictures()
        widget = self.find(d, Gtk.FileChooserWidget)
        if widget is not None:
            widget.connect("recent-shortcut", self.recent_key)
        d.set_current_folder(self.mnt)

    def recent_key(self, widget):
        """Alt+R (GtkFileChooserWidget's "recent-shortcut"): the picker's Recent place."""
        widget.stop_emission_by_name("recent-shortcut")
        self.dialog.set_current_folder(self.recent.folder)
        return True

    def shown(self, d, event):
        # GtkFileChooserDialog sizes itself from GSettings and its widget's wish (1124 x 822 and
        # more) as it is mapped: a window that fits a laptop's screen.
        d.resize(860, 540)
        log("shown", d.get_current_folder() or "")
        return False

    def default_title(self):
        name = next((a["name"] for a in self.apps if a["id"] == self.app), self.app)
        return {"open": f"Open a document in {name}", "import": f"Import a document into {name}",
                "move-to": f"Move {name}'s documents to a store", "export-to": f"Export {name}'s documents to a store"}[self.mode]

    # ---- the window's parts

    def add_filter(self, d, types):
        if not types:
            return
        f = Gtk.FileFilter()
        f.set_name(", ".join(types))
        for t in types:
            if "/" in t:
                f.add_mime_type(t)
            else:
                f.add_pattern(t)
        d.add_filter(f)
        d.set_filter(f)

    def make_bar(self):
        bar = Gtk.InfoBar()
        label = Gtk.Label(xalign=0)
        label.set_line_wrap(True)
        label.set_selectable(True)
        bar.get_content_area().add(label)
        bar.set_no_show_all(True)
        label.show()
        return bar, label

    def make_preview(self, d):
        box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=6)
        box.set_size_request(170, -1)
        image = Gtk.Image()
        label = Gtk.Label()
        label.set_line_wrap(True)
        label.set_line_wrap_mode(Pango.WrapMode.WORD_CHAR)
        label.set_max_width_chars(20)
        box.pack_start(image, False, False, 0)
        box.pack_start(label, False, False, 0)
        box.show_all()
        d.set_preview_widget(box)
        d.set_use_preview_label(False)
        return image, label

    def show_message(self, kind, sentence):
        """A sentence at the top of the window (kind: "error", "warning", "info"), or none."""
        if not sentence:
            self.bar.hide()
            return
        self.bar.set_message_type({"error": Gtk.MessageType.ERROR, "warning": Gtk.MessageType.WARNING}.get(kind, Gtk.MessageType.INFO))
        self.bar_label.set_text(sentence)
        self.bar.show()
        log("message", kind, sentence)

    # ---- sync states

    def connect_status(self):
        path = self.job.get("statusSocket")
        if not path:
            return
        try:
            self.drive = Drive(path, self.told)
        except OSError:
            self.drive = None

    def told(self, path, state, pinned):
        """A change line of the status socket: the row is drawn again."""
        log("told", path, state)
        self.pictures.pop(path, None)  # a picture the drive made since, or a new one
        if self.states.get(path) != state:
            self.states[path] = state
            if self.view is not None:
                self.view.queue_draw()

    def state_of(self, path):
        store = self.store_at(path)
        if store is not None and store["folder"] == path and store.get("offline"):
            return "offline"
        s = self.states.get(path)
        if s is None and self.drive is not None and self.drive.alive and self.inside(path):
            try:
                s = self.drive.status([path]).get(path, ("none", False))[0]
            except OSError:
                s = None
            self.states[path] = s or "none"
        return s or "none"

    def ask_folder(self, folder):
        """The states of a folder's files in one request, and a subscription to their changes."""
        if self.drive is None or not self.drive.alive:
            return
        if folder == self.recent.folder:
            paths = list(self.recent.links.values())
        elif self.inside(folder):
            try:
                paths = [os.path.join(folder, n) for n in sorted(os.listdir(folder))[:5000]]
            except OSError:
                return
        else:
            return
        try:
            got = self.drive.status(paths)
            for parent in sorted({os.path.dirname(p) for p in paths} if folder == self.recent.folder else {folder}):
                self.drive.subscribe(parent)
        except OSError:
            self.drive.alive = False
            return
        for p, (state, _) in got.items():
            self.states[p] = state

    def add_sync_column(self):
        """A "Sync" column in the chooser's list. GtkFileChooser has no place for one: it is added
        to the list's tree view, found among the widget's children, whose model has a GFile per
        row. Without that view (another GTK) the state is only in the preview."""
        self.view = self.find(self.dialog, Gtk.TreeView)
        if self.view is None:
            return
        renderer = Gtk.CellRendererText()
        column = Gtk.TreeViewColumn("Sync", renderer)
        column.set_cell_data_func(renderer, self.draw_state)
        column.set_resizable(True)
        self.view.insert_column(column, 1)

    def find(self, widget, kind):
        if isinstance(widget, kind):
            return widget
        if isinstance(widget, Gtk.Container):
            for child in widget.get_children():
                found = self.find(child, kind)
                if found is not None:
                    return found
        return None

    @staticmethod
    def file_column(model):
        for i in range(model.get_n_columns()):
            if model.get_column_type(i) == Gio.File.__gtype__:
                return i
        return None

    def draw_state(self, column, cell, model, it, data=None):
        i = self.file_column(model)
        f = model.get_value(it, i) if i is not None else None
        shown = f.get_path() if f is not None else None
        path = self.real(shown) if shown else None
        state = self.state_of(path) if path else "none"
        cell.set_property("text", STATE_WORDS.get(state, ""))
        if path and LOG and self.inside(path) and (shown, state) not in self.logged_rows:
            self.logged_rows.add((shown, state))
            log("row", shown, state)

    def add_pictures(self):
        """A document's picture (the drive's attribute user.docdrive.thumbnail, a placeholder's
        too) as its icon in the list, as a file manager shows thumbnails: drawn over the icon GTK
        puts in the name column's picture cell, at the same size."""
        if self.view is None:
            return
        for column in self.view.get_columns():
            for cell in column.get_cells():
                if isinstance(cell, Gtk.CellRendererPixbuf):
                    _, height = cell.get_fixed_size()
                    if height > 0:
                        self.icon_size = max(16, height - 2 * cell.get_property("ypad"))
                    column.set_cell_data_func(cell, self.draw_icon)
                    return

    def draw_icon(self, column, cell, model, it, data=None):
        i = self.file_column(model)
        f = model.get_value(it, i) if i is not None else None
        shown = f.get_path() if f is not None else None
        path = self.real(shown) if shown else None
        if not path or not self.inside(path):
            return
        picture = self.picture(path)
        if picture is None:
            return
        cell.set_property("pixbuf", picture)
        if LOG and shown not in self.logged_icons:
            self.logged_icons.add(shown)
            log("icon", shown)

    def picture(self, path):
        """The list's picture of a document, from the drive's attribute (never its content), or None."""
        if path in self.pictures:
            return self.pictures[path]
        # A pixbuf, not a cairo surface at the screen's scale as GTK draws its icons: that would
        # need python3-gi-cairo too. No picture (or not one GdkPixbuf reads): GTK's icon stays.
        picture = stored_picture(path, self.icon_size, self.icon_size)
        self.pictures[path] = picture
        return picture

    # ---- places

    def inside(self, path):
        return path == self.mnt or path.startswith(self.mnt + "/")

    def real(self, path):
        """The mount path of what `path` shows: itself, or for an entry of the Recent place (or
        something below one) the document or folder it links to."""
        return self.recent.target(path) or path

    def store_at(self, path):
        for s in self.stores:
            if path == s["folder"] or path.startswith(s["folder"] + "/"):
                return s
        return None

    def folder_changed(self, d):
        folder = d.get_current_folder()
        if not folder:
            return
        real = self.real(folder)
        if real != folder:
            # A folder of the Recent place opened: it is shown where it is, in its store.
            d.set_current_folder(real)
            return
        log("folder", folder)
        self.ask_folder(folder)
        store = self.store_at(folder)
        if store is not None:
            self.refresh_offline(store)
        elif not self.running:
            self.show_message(None, None)

    def refresh_offline(self, store):
        """Asks `docdrive status --json` again (in the background) whether the store is offline,
        and says so at the top of the window."""
        self.show_offline(store)
        argv = [self.docdrive, "status", "--home", self.home, "--json"]
        try:
            p = Gio.Subprocess.new(argv, Gio.SubprocessFlags.STDOUT_PIPE | Gio.SubprocessFlags.STDERR_SILENCE)
        except Exception:
            return

        def done(p, res):
            try:
                _, out, _ = p.communicate_utf8_finish(res)
                st = json.loads(out)
            except Exception:
                return
            for s in st.get("stores", []):
                if s.get("name") == store["name"]:
                    sync = s.get("sync") or {}
                    store["offline"] = (sync.get("offlineReason") or "its remote does not answer") if sync.get("offline") else None
            if self.store_at(self.dialog.get_current_folder() or "") is store and not self.running:
                self.show_offline(store)
        p.communicate_utf8_async(None, None, done)

    def show_offline(self, store):
        why = store.get("offline")
        if why:
            why = why.rstrip(".")
            sentence = (f"The store {store['display']} is offline ({why}): a document that is not downloaded "
                        "cannot be imported until it answers.")
            if sentence not in self.said:
                self.said.add(sentence)
                say(sentence)
            self.show_message("warning", sentence)
        elif not self.running:
            self.show_message(None, None)

    def update_preview(self, d):
        path = d.get_preview_filename()
        path = self.real(path) if path else None
        if not path or not self.inside(path) or os.path.isdir(path):
            d.set_preview_widget_active(False)
            return
        state = self.state_of(path)
        picture = stored_picture(path, 128, 1 << 16)  # 128 wide (the drive's pictures are 256 px)
        if picture is not None:
            self.preview_image.set_from_pixbuf(picture)
        else:
            self.preview_image.set_from_icon_name("text-x-generic", Gtk.IconSize.DIALOG)
        self.preview_label.set_text(f"{os.path.basename(path)}\n{STATE_WORDS.get(state, '')}")
        d.set_preview_widget_active(True)
        log("preview", path, state, "picture" if picture is not None else "-")

    # ---- Open and Cancel

    def responded(self, d, response):
        if response != Gtk.ResponseType.ACCEPT:
            self.finish()
            return
        if self.running:
            return
        jobs = self.jobs()
        if jobs:
            self.running = True
            d.set_sensitive(False)
            self.run_next(jobs)

    def jobs(self):
        """The commands the choice asks for, or None (a sentence shown) when it cannot be done."""
        if self.mode in ("open", "import"):
            paths = [self.real(p) for p in self.dialog.get_filenames()]
            if not paths:
                return None
            return [(p, p, [self.docdrive, self.verb, "--home", self.home, "--app", self.app, p, "--json"]) for p in paths]
        folder = self.dialog.get_filename() or self.dialog.get_current_folder()
        folder = self.real(folder) if folder else folder
        store = self.store_at(folder or "")
        if store is None:
            names = ", ".join(s["display"] for s in self.stores) or "none"
            self.fail(f"Choose a folder in a store ({names}) to {self.verb} the documents to.")
            return None
        to = folder[len(self.mnt) + 1:]
        return [(folder, doc, [self.docdrive, self.verb, "--home", self.home, "--app", self.app, doc, "--to", to, "--json"])
                for doc in self.documents]

    def run_next(self, jobs):
        if not jobs:
            self.exit_code = 0
            self.finish()
            return
        (chosen, what, argv), rest = jobs[0], jobs[1:]
        log("run", *argv[1:])
        self.show_message("info", f"{self.verb.capitalize()}: {what} ...")
        p = Gio.Subprocess.new(argv, Gio.SubprocessFlags.STDOUT_PIPE | Gio.SubprocessFlags.STDERR_PIPE)

        def done(p, res):
            _, out, err = p.communicate_utf8_finish(res)
            if p.get_exit_status() != 0:
                sentence = (err or "").strip().splitlines()
                sentence = sentence[-1] if sentence else f"docdrive {self.verb} failed (exit {p.get_exit_status()})."
                self.fail(sentence[len("docdrive: "):] if sentence.startswith("docdrive: ") else sentence)
                return
            try:
                self.results.append(json.loads(out))
            except ValueError:
                self.fail(f"docdrive {self.verb} gave an answer that is not JSON.")
                return
            if chosen not in self.picked:
                self.picked.append(chosen)
            self.run_next(rest)
        p.communicate_utf8_async(None, None, done)

    def fail(self, sentence):
        """An error: one sentence in the window and on stderr; the window stays for another choice."""
        say(sentence)
        self.running = False
        self.dialog.set_sensitive(True)
        self.show_message("error", sentence)

    def finish(self):
        paths = [r.get(self.answer_key, "") for r in self.results]
        for p in paths:
            log("result", p)
        if self.job.get("json"):
            print(json.dumps({"app": self.app, "mode": self.mode, "paths": paths, "results": self.results,
                              "cancelled": self.exit_code != 0}, indent=2, sort_keys=True))
        else:
            for p in paths:
                print(p)
        sys.stdout.flush()
        if self.picked:
            self.recent.remember(self.picked)
        Gtk.main_quit()


class Recent:
    """What an app picked lately, across the stores and apps: the documents it opened or imported
    (the folders it moved or exported to, in move-to and export-to), newest first. The list is
    kept in the drive home, picker/recent/APP.json (mount-relative paths and item ids, at most
    RECENT_MAX of each kind), and shown as the place "Recent": a folder of the picker's own (in
    XDG_RUNTIME_DIR, removed when it ends) with a link to each entry. An entry whose document is
    gone, is a reference whose target is gone, or whose path now holds another item (another id)
    is left out, and dropped from the list."""

    def __init__(self, home, app, mnt, folders):
        self.mnt = mnt
        self.kind = "folder" if folders else "document"
        self.file = os.path.join(home, "picker", "recent", app + ".json") if "/" not in app and not app.startswith(".") else None
        self.links = {}                    # a link's path in the Recent folder -> the mount path
        run = os.environ.get("XDG_RUNTIME_DIR")
        try:
            self.base = tempfile.mkdtemp(prefix="docdrive-picker-", dir=run if run and os.path.isdir(run) else None)
        except OSError:
            self.base = tempfile.mkdtemp(prefix="docdrive-picker-")
        atexit.register(self.close)
        self.folder = os.path.join(self.base, "Recent")
        os.mkdir(self.folder, 0o700)
        log("recent", self.folder)
        try:
            self.fill()
        except Exception as e:  # an unreadable list: an empty Recent place, never a picker that fails
            log("recent-dropped", self.file or "", f"the list: {e}")

    def target(self, path):
        """The mount path a path in the Recent folder stands for, or None."""
        if not path.startswith(self.folder + "/"):
            return None
        rest = path[len(self.folder) + 1:].split("/", 1)
        target = self.links.get(os.path.join(self.folder, rest[0]))
        if target is None:
            return None
        return target if len(rest) == 1 else os.path.join(target, rest[1])

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)

    def locked(self):
        os.makedirs(os.path.dirname(self.file), mode=0o700, exist_ok=True)
        f = open(self.file + ".lock", "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        return f

    def read(self):
        try:
            with open(self.file, encoding="utf-8") as f:
                entries = json.load(f).get("entries", [])
        except (OSError, ValueError, AttributeError):
            return []
        return [e for e in entries if isinstance(e, dict) and isinstance(e.get("path"), str) and e.get("kind") in ("document", "folder")]

    def write(self, entries):
        tmp = f"{self.file}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"entries": entries}, f, indent=1)
        os.replace(tmp, self.file)

    def why_gone(self, entry, path):
        """Why an entry is not shown (None: it is shown)."""
        rel = entry["path"]
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            return "not a path in the drive"
        try:
            st = os.lstat(path)
        except OSError:
            return "gone"
        if stat.S_ISDIR(st.st_mode) != (self.kind == "folder"):
            return "gone"
        if xattr(path, "user.docdrive.status") == "missing":
            return "its target is gone"
        if entry.get("id") and xattr(path, "user.docdrive.id") not in (None, entry["id"]):
            return "another item is there now"
        return None

    def fill(self):
        if self.file is None:
            return
        with self.locked():
            entries = self.read()
            kept = []
            for e in entries:
                if e["kind"] != self.kind:
                    kept.append(e)
                    continue
                path = os.path.join(self.mnt, e["path"])
                why = self.why_gone(e, path)
                if why is not None:
                    log("recent-dropped", path, why)
                    continue
                kept.append(e)
                if len(self.links) < RECENT_MAX:
                    self.add_link(path)
            if kept != entries:
                self.write(kept)

    def add_link(self, path):
        """A link in the Recent folder, under the document's name (two of one name: the second
        with its top folder, the store's or the app's name, after it)."""
        name = os.path.basename(path)
        stem, ext = os.path.splitext(name)
        top = os.path.relpath(path, self.mnt).split("/", 1)[0]
        for n in [name, f"{stem} ({top}){ext}"] + [f"{stem} ({top} {i}){ext}" for i in range(2, 100)]:
            link = os.path.join(self.folder, n)
            if link not in self.links:
                os.symlink(path, link)
                self.links[link] = path
                log("recent-entry", n, path)
                return

    def remember(self, paths):
        """What was just picked, at the top of the list."""
        if self.file is None:
            return
        try:
            with self.locked():
                entries = self.read()
                for path in reversed(paths):
                    if not path.startswith(self.mnt + "/"):
                        continue
                    rel = path[len(self.mnt) + 1:]
                    entries = [e for e in entries if not (e["kind"] == self.kind and e["path"] == rel)]
                    entries.insert(0, {"path": rel, "id": xattr(path, "user.docdrive.id"), "kind": self.kind, "picked": int(time.time())})
                mine = [e for e in entries if e["kind"] == self.kind][:RECENT_MAX]
                self.write(mine + [e for e in entries if e["kind"] != self.kind])
        except OSError as e:
            say(f"The list of recent documents ({self.file}) could not be written: {e.strerror or e}.")


def stored_picture(path, width, height):
    """The document's picture as the drive keeps it (`user.docdrive.thumbnail`, never its
    content), scaled to fit `width` x `height` pixels; None when there is none GdkPixbuf reads."""
    try:
        data = os.getxattr(path, "user.docdrive.thumbnail")  # first: a loader must be closed once made
        loader = GdkPixbuf.PixbufLoader()
        loader.write(data)
        loader.close()
        pixbuf = loader.get_pixbuf()
        w, h = pixbuf.get_width(), pixbuf.get_height()
        k = min(width / w, height / h)
        return pixbuf.scale_simple(max(1, round(w * k)), max(1, round(h * k)), GdkPixbuf.InterpType.BILINEAR)
    except Exception:
        return None


def xattr(path, name):
    try:
        return os.getxattr(path, name).decode("utf-8", "replace")
    except OSError:
        return None


def show_error(sentence):
    """A sentence in a window of its own, for an error found before the picker could open."""
    d = Gtk.MessageDialog(message_type=Gtk.MessageType.ERROR, buttons=Gtk.ButtonsType.CLOSE, text="DocDrive picker")
    d.format_secondary_text(sentence)
    d.set_title("DocDrive picker")
    d.show_all()
    log("message", "error", sentence)
    d.run()
    d.destroy()


def main():
    job = json.loads(sys.argv[1])
    error = job.get("error")
    if error:
        say(error["message"])
    if not gtk_ready():
        return error["exit"] if error else 1
    if error:
        show_error(error["message"])
        return error["exit"]
    picker = Picker(job)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        # Ended from outside: the Recent place's folder goes too, then the signal ends the picker.
        GLib.unix_signal_add(GLib.PRIORITY_HIGH, sig, ended, (sig, picker))
    picker.dialog.show_all()
    Gtk.main()
    return picker.exit_code


def ended(what):
    sig, picker = what
    picker.recent.close()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    return False


if __name__ == "__main__":
    sys.exit(main())
