"""The document picker (`docdrive pick`, issue 65), its real GTK window driven under Xvfb.

One drive (module scope) with the apps Notes (public) and Secret (private), the folder store
"Work" and a folder store "Away" whose remote is taken away by the offline test. Work/pick holds
report.txt, agenda.txt, image.png, plan.odt (a document with a red picture, evicted: a placeholder)
and "LICENSE" (no name ending, evicted). Each test starts `docdrive pick` in a display of its own
(Xvfb, started here, stopped by pid), types with xdotool as a user does (Ctrl+L and a path, Return;
Escape; Ctrl+A in the list), and reads what the picker logged (DOCDRIVE_PICKER_LOG: the folder
shown, each row drawn with its sync state, the preview, the messages, the commands run). Checked:
* each mode's result as the command tests check it (test_references.py): open writes a reference
  marked external that follows its target; import copies into the app's Inbox (a placeholder's
  content, downloaded for it); move-to leaves a reference with the document's id where the
  document was; export-to copies and leaves the original; the printed paths (and --json) are the
  commands' own;
* Escape changes nothing, in every mode (the backing folders, the grants) and exits 1;
* a type filter (a name pattern, a MIME type) hides the other files, and --multiple with Ctrl+A
  takes every file shown;
* each file's sync state is in its row and follows a change; a placeholder's picture is shown
  from the drive's attribute, and browsing downloads nothing (not even "LICENSE", whose type GTK
  would read from its first bytes);
* a placeholder's picture is its icon in the list (the screenshot's pixels, not only the log);
* the Recent place (Alt+R) offers what the app picked lately, in any store or app, through
  links that the modes follow to the documents, and leaves out a document that was deleted or
  whose path now holds another item; another app's Recent does not show them;
* a wrong app id, an offline store and a placeholder that cannot be downloaded: one sentence each,
  in the window and on stderr.
* on a session bus of the test's own, with the activation file `docdrive desktop install` wrote,
  a call of org.docdrive.Picker1.Open starts the service, which shows the window and answers
  with the reference's path; a cancelled Import is the error ...Error.Cancelled.
The screenshot in docs/user/picker.png is taken by picker_screenshot.py, over a drive of its own.
In CI (CI=true) a missing Xvfb, xdotool or dbus-daemon fails the test; elsewhere it is skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddtest import NOTES_ID, SECRET_ID, Drive, children_of, need, pid_alive, run, wait_until
from test_placeholders import odt_with_picture, tiny_png

pytestmark = pytest.mark.timeout(120)
PICTURE = tiny_png(b"\x20\x80\xe0")
RED = b"\xe0\x30\x20"  # plan.odt's picture: a colour GTK's theme does not draw (its selection is blue)


def xattr(path, name):
    try:
        return os.getxattr(path, name).decode(errors="replace")
    except OSError:
        return None


def downloads(d: Drive) -> list[str]:
    """The files the daemon downloaded on demand (its log says each)."""
    text = d.log_path.read_text(errors="replace")
    return [line.split("downloaded ", 1)[1].split(" (", 1)[0] for line in text.splitlines() if "on demand" in line and "downloaded " in line]


def tree(*roots: Path) -> dict[str, bytes]:
    """Every entry under the roots (backing folders): its path and content, to compare before and after."""
    out = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            for n in dirs:
                out[os.path.join(dirpath, n) + "/"] = b""
            for n in files:
                p = os.path.join(dirpath, n)
                out[p] = b"" if os.path.islink(p) else Path(p).read_bytes()
    return out


# --------------------------------------------------------------------------- the drive and the display

class Desk:
    def __init__(self, d: Drive, runtime: Path):
        self.d = d
        self.runtime = runtime
        self.pick = d.mnt / "Work" / "pick"
        self.away_remote = d.base / "away-remote"
        self.plan = odt_with_picture(tiny_png(RED), "the plan")  # (its zip entries carry the time they were made)
        self.display = None
        self.xvfb = None

    def status(self) -> dict:
        return json.loads(self.d.cli("status", "--json").stdout)

    def backing(self) -> list[Path]:
        return [self.d.home / "containers", self.d.home / "stores" / "work" / "cache", self.d.home / "stores" / "away" / "cache"]

    def grants(self) -> list:
        return json.loads(self.d.cli("grants", "list", "--json").stdout)["grants"]


@pytest.fixture(scope="module")
def desk(base_dir):
    need("Xvfb"), need("xdotool")
    d = Drive(base_dir / f"picker-{os.getpid()}").create()
    runtime = d.base / "xdg-run"
    runtime.mkdir(mode=0o700)
    d.extra_env["XDG_RUNTIME_DIR"] = str(runtime)
    k = Desk(d, runtime)
    try:
        d.cli("store", "add", "away", "--name", "Away", "--folder", str(k.away_remote), "--poll", "1")
        d.mount()
        k.pick.mkdir()
        for n, body in {"report.txt": b"Q3 report\n", "agenda.txt": b"notes\n", "image.png": PICTURE,
                        "plan.odt": k.plan, "LICENSE": b"read me first\n"}.items():
            (k.pick / n).write_bytes(body)
        (d.mnt / "Away" / "far.txt").write_bytes(b"far away\n")
        assert wait_until(lambda: xattr(k.pick / "plan.odt", "user.docdrive.thumbnail") is not None, 20), "no picture of plan.odt"
        d.cli("sync", "--timeout", "60", timeout=90)
        for p in (k.pick / "plan.odt", k.pick / "LICENSE", d.mnt / "Away" / "far.txt"):
            d.cli("evict", str(p))
            assert xattr(p, "user.docdrive.status") == "placeholder", p
        start_display(k)
        yield k
    finally:
        left = stop_display(k)
        problems = d.teardown()
        assert not problems, problems
        assert not left, f"left running: {left}"


def start_display(k: Desk):
    r, w = os.pipe()
    log = open(k.d.base / "xvfb.log", "w")
    k.xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1000x600x24", "-nolisten", "tcp"],
                              pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    os.close(w)
    with os.fdopen(r) as f:
        display = f.readline().strip()
    assert display.isdigit(), f"Xvfb did not start: {(k.d.base / 'xvfb.log').read_text()}"
    k.display = ":" + display


def stop_display(k: Desk) -> list[str]:
    if k.xvfb is None:
        return []
    if k.xvfb.poll() is None:
        k.xvfb.terminate()
        try:
            k.xvfb.wait(timeout=5)
        except subprocess.TimeoutExpired:
            k.xvfb.kill()
            k.xvfb.wait(timeout=5)
    return ["Xvfb"] if k.xvfb.poll() is None else []


# --------------------------------------------------------------------------- one picker

class Picker:
    """`docdrive pick ARGS` in the test display, started here and stopped by its pid."""

    def __init__(self, k: Desk, tmp: Path, *args: str, home: Path | None = None):
        self.k = k
        self.log_path = tmp / "picker.log"
        tmp.mkdir()
        home = home or tmp / "user"
        self.env = k.d.env(DISPLAY=k.display, DOCDRIVE_PICKER_LOG=str(self.log_path), HOME=str(home),
                           XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"),
                           XDG_CACHE_HOME=str(home / "cache"), GSETTINGS_BACKEND="memory", NO_AT_BRIDGE="1",
                           GTK_A11Y="none", GIO_USE_VFS="local", LANG="C.UTF-8")
        # The picker is Debian's python3 (python3-gi): nothing of a python the tests run under.
        for key in [key for key in self.env if key.startswith(("PYENV", "PYTHON"))]:
            del self.env[key]
        self.env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        self.p = subprocess.Popen([k.d.bin, "pick", *args], env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out = self.err = None

    def log(self) -> list[list[str]]:
        try:
            return [line.split("\t") for line in self.log_path.read_text().splitlines()]
        except FileNotFoundError:
            return []

    def logged(self, kind: str) -> list[list[str]]:
        return [f[1:] for f in self.log() if f[0] == kind]

    def wait_for(self, pred, what: str, timeout=20):
        ok = wait_until(lambda: pred() or self.p.poll() is not None, timeout, 0.1)
        assert ok and self.p.poll() is None and pred(), f"the picker did not show {what}: exit {self.p.poll()}\nlog: {self.log()[-30:]}\n" \
                                                        f"stderr: {self.stderr_now()}"

    def stderr_now(self) -> str:
        return "" if self.p.poll() is None else self.p.stderr.read()

    def shown(self, folder: Path | None = None):
        """Waits until the window shows `folder` (the mount's root) with its rows drawn."""
        folder = folder or self.k.d.mnt
        self.wait_for(lambda: ["shown", str(self.k.d.mnt)] in self.log()
                      and any(r[0].startswith(str(folder) + "/") for r in self.logged("row")), f"{folder} with its rows")
        return self

    def xdotool(self, *args):
        run(["xdotool", *args], env=self.env, timeout=30)

    def point(self):
        """The pointer into the picker's window (the newest shown): with no window manager the
        keyboard goes to the window under the pointer."""
        p = run(["xdotool", "search", "--onlyvisible", "--pid", str(self.p.pid)], env=self.env, timeout=30, check=False)
        windows = p.stdout.split()
        assert windows, f"the picker shows no window; log: {self.log()[-10:]}"
        self.xdotool("mousemove", "--window", windows[-1], "40", "40")

    def type_path(self, text: str):
        """Ctrl+L, then the path, relative to the folder shown, a folder at a time (GTK loads a
        folder's names after its "/" to complete the next name). GTK completes as it is typed:
        a single name that fits is added selected (the next key replaces it), but the part that
        several names share is added unselected ("r" of readme and report.txt gives "re", and
        "re" typed gives "ree"), hence names that begin differently in the drive's folders."""
        self.point()
        self.xdotool("key", "ctrl+l")
        time.sleep(0.4)
        parts = text.split("/")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part or not last:
                self.xdotool("type", "--delay", "80", part + ("" if last else "/"))
            time.sleep(0.6 if not last else 0.4)

    def key(self, *keys):
        if self.p.poll() is None:
            self.point()
        self.xdotool("key", *keys)

    def go_to(self, rel: str):
        """Shows the folder `rel` of the mount (typed with Ctrl+L, Return; in open and import mode:
        in move-to and export-to, Return chooses the folder)."""
        folder = self.k.d.mnt / rel
        self.type_path(rel + "/")
        self.key("Delete")  # the name GTK added after the "/" when the folder has one file only
        self.key("Return")
        self.wait_for(lambda: ["folder", str(folder)] in self.log(), f"the folder {folder}")
        return folder

    def escape(self):
        """Escape until the window is gone (the first may only close the completion's list)."""
        for _ in range(3):
            if self.p.poll() is not None:
                return
            self.key("Escape")
            if wait_until(lambda: self.p.poll() is not None, 2, 0.1):
                return
        raise AssertionError(f"Escape did not close the picker; log: {self.log()[-10:]}")

    def rows(self, folder: Path) -> dict[str, str]:
        """The rows drawn in `folder`: name -> the last state shown."""
        return {Path(r[0]).name: r[1] for r in self.logged("row") if Path(r[0]).parent == folder}

    def finish(self, timeout=30) -> int:
        try:
            self.out, self.err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the picker did not end within {timeout} s; log: {self.log()[-20:]}")
        return self.p.returncode

    def stop(self):
        """Ends the picker if it still runs (its own session: only what this test started)."""
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=5)
        assert not pid_alive(self.p.pid)


@pytest.fixture
def picker(desk, tmp_path):
    made = []

    def start(*args):
        p = Picker(desk, tmp_path / f"p{len(made)}", *args)
        made.append(p)
        return p
    yield start
    for p in made:
        p.stop()


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# --------------------------------------------------------------------------- the four modes

def test_open_writes_a_reference_marked_external_that_follows_its_target(desk, picker):
    k = desk
    p = picker("--app", SECRET_ID, "--mode", "open").shown()
    p.type_path("Work/pick/report.txt")
    p.key("Return")
    assert p.finish() == 0, p.err
    ref = Path(one_line(p.out))
    assert ref == k.d.mnt / ".by-app" / SECRET_ID / "Documents" / "report.txt"
    assert p.err == ""
    # What `docdrive open` makes (test_references.py): the document itself, marked external.
    target = k.pick / "report.txt"
    assert ref.read_bytes() == target.read_bytes() == b"Q3 report\n"
    assert xattr(ref, "user.docdrive.external") == "1"
    assert xattr(ref, "user.docdrive.container") == "Work"
    assert xattr(ref, "user.docdrive.target") == "Work/pick/report.txt"
    assert xattr(ref, "user.docdrive.id") == xattr(target, "user.docdrive.id")
    assert any(g["app"] == SECRET_ID and g["path"] == "Work/pick/report.txt" for g in k.grants()), k.grants()
    # It follows its target.
    os.rename(target, k.pick / "report-final.txt")
    try:
        assert wait_until(lambda: xattr(ref, "user.docdrive.target") == "Work/pick/report-final.txt", 10), xattr(ref, "user.docdrive.target")
        with open(ref, "ab") as f:
            f.write(b"signed off\n")
        assert (k.pick / "report-final.txt").read_bytes() == b"Q3 report\nsigned off\n"
    finally:
        os.rename(k.pick / "report-final.txt", target)
        target.write_bytes(b"Q3 report\n")
        os.unlink(ref)


def test_import_copies_a_placeholder_into_the_inbox_and_prints_json(desk, picker):
    k = desk
    p = picker("--app", SECRET_ID, "--mode", "import", "--json").shown()
    p.type_path("Work/pick/plan.odt")
    p.key("Return")
    assert p.finish() == 0, p.err
    out = json.loads(p.out)
    copy = Path(out["paths"][0])
    assert out["mode"] == "import" and out["app"] == SECRET_ID and len(out["paths"]) == 1, out
    assert out["results"][0]["copy_absolute"] == str(copy) and out["results"][0]["source"] == "Work/pick/plan.odt", out
    try:
        assert copy.parent == k.d.mnt / ".by-app" / SECRET_ID / "Inbox"
        # The document's content, downloaded for the copy (not the empty placeholder's).
        assert copy.read_bytes() == k.plan
        assert xattr(k.pick / "plan.odt", "user.docdrive.status") == "synced"
        assert xattr(copy, "user.docdrive.external") in (None, "0")
    finally:
        k.d.cli("app", "close", SECRET_ID)
        k.d.cli("evict", str(k.pick / "plan.odt"), check=False)
    assert not copy.exists()


def test_move_to_a_store_folder_leaves_a_reference_where_the_document_was(desk, picker):
    k = desk
    doc = k.d.mnt / "Notes" / "draft.txt"
    doc.write_bytes(b"draft 1\n")
    doc_id = xattr(doc, "user.docdrive.id")
    (k.d.mnt / "Work" / "moved").mkdir()
    p = picker("--app", NOTES_ID, "--mode", "move-to", str(doc)).shown()
    p.type_path("Work/moved/")
    p.key("Return")
    assert p.finish() == 0, p.err
    target = Path(one_line(p.out))
    assert target == k.d.mnt / "Work" / "moved" / "draft.txt"
    assert target.read_bytes() == b"draft 1\n"
    # The app keeps its path: a reference, with the document's id, that writes go through.
    assert xattr(doc, "user.docdrive.external") == "1"
    assert xattr(doc, "user.docdrive.id") == doc_id == xattr(target, "user.docdrive.id")
    assert (k.d.notes_backing / "draft.txt.docdrive-ref").is_file()
    with open(doc, "a") as f:
        f.write("draft 2\n")
    assert target.read_bytes() == b"draft 1\ndraft 2\n"


def test_export_to_a_store_folder_copies_and_leaves_the_original(desk, picker):
    k = desk
    doc = k.d.mnt / ".by-app" / SECRET_ID / "Documents" / "out.txt"
    doc.write_bytes(b"export me\n")
    (k.d.mnt / "Work" / "exported").mkdir()
    p = picker("--app", SECRET_ID, "--mode", "export-to", str(doc)).shown()
    p.type_path("Work/exported/")
    p.key("Return")
    assert p.finish() == 0, p.err
    copy = Path(one_line(p.out))
    assert copy == k.d.mnt / "Work" / "exported" / "out.txt" and copy.read_bytes() == b"export me\n"
    assert doc.read_bytes() == b"export me\n" and xattr(doc, "user.docdrive.external") in (None, "0")
    assert xattr(copy, "user.docdrive.status") in ("pending", "uploading", "synced")
    k.d.cli("sync", "--timeout", "60", timeout=90)
    assert (k.d.remote / "exported" / "out.txt").read_bytes() == b"export me\n"


@pytest.mark.parametrize("mode", ["open", "import", "move-to", "export-to"])
def test_escape_changes_nothing_and_exits_1(desk, picker, mode):
    k = desk
    doc = k.d.mnt / "Notes" / f"stay-{mode}.txt"
    doc.write_bytes(b"stays\n")
    before, grants = tree(*k.backing()), k.grants()
    docs = [str(doc)] if mode in ("move-to", "export-to") else []
    p = picker("--app", NOTES_ID, "--mode", mode, *docs).shown()
    # A choice typed (a document, or a folder for move-to and export-to), then Escape.
    p.type_path("Work/pick/" + ("report.txt" if not docs else ""))
    p.escape()
    assert p.finish() == 1, p.err
    assert p.out == "" and p.err == ""
    assert tree(*k.backing()) == before and k.grants() == grants
    assert xattr(doc, "user.docdrive.external") in (None, "0")
    assert p.logged("run") == []


# --------------------------------------------------------------------------- what the window shows

@pytest.mark.parametrize("types,shown,hidden", [
    (["*.txt"], {"report.txt", "agenda.txt"}, {"image.png", "plan.odt", "LICENSE"}),
    (["image/png", "*.odt"], {"image.png", "plan.odt"}, {"report.txt", "agenda.txt", "LICENSE"}),
])
def test_a_type_filter_hides_the_other_files_and_ctrl_a_takes_what_it_shows(desk, picker, types, shown, hidden):
    k = desk
    args = [a for t in types for a in ("--type", t)]
    p = picker("--app", SECRET_ID, "--mode", "import", "--multiple", *args).shown()
    p.go_to("Work/pick")
    p.wait_for(lambda: shown <= set(p.rows(k.pick)), f"the rows {shown}")
    time.sleep(0.5)  # every row is drawn by now
    assert not hidden & set(p.rows(k.pick)), p.rows(k.pick)
    # Ctrl+A in the list chooses every file it shows, and only those are imported.
    p.key("ctrl+a")
    time.sleep(0.3)
    p.key("Return")
    assert p.finish(timeout=60) == 0, p.err
    try:
        copies = sorted(Path(line).name for line in p.out.splitlines())
        assert copies == sorted(shown), p.out
    finally:
        k.d.cli("app", "close", SECRET_ID)
        k.d.cli("evict", str(k.pick / "plan.odt"), check=False)


def test_rows_show_each_files_sync_state_and_browsing_downloads_nothing(desk, picker):
    k = desk
    before = downloads(k.d)
    p = picker("--app", SECRET_ID, "--mode", "open").shown()
    # The drive's top level: its public app and its stores (the private app is not there).
    p.wait_for(lambda: set(p.rows(k.d.mnt)) == {"Notes", "Work", "Away"}, "the top level")
    assert p.rows(k.d.mnt)["Notes"] == "local", p.rows(k.d.mnt)
    p.go_to("Work/pick")
    want = {"report.txt": "synced", "agenda.txt": "synced", "image.png": "synced", "plan.odt": "placeholder", "LICENSE": "placeholder"}
    p.wait_for(lambda: all(p.rows(k.pick).get(n) == s for n, s in want.items()), f"the states {want}")
    # A file saved while the window is open: the daemon tells each new state (the status
    # socket's change lines), and its row is drawn with it (the row may skip a state told
    # between two drawings).
    (k.pick / "new.txt").write_bytes(b"new\n")
    try:
        p.wait_for(lambda: p.rows(k.pick).get("new.txt") == "synced", "new.txt synced", timeout=30)
        told = [r[1] for r in p.logged("told") if r[0] == str(k.pick / "new.txt")]
        drawn = [r[1] for r in p.logged("row") if r[0] == str(k.pick / "new.txt")]
        assert told and told[0] in ("pending", "uploading") and told[-1] == "synced", told
        assert drawn[0] in ("pending", "uploading"), drawn
    finally:
        os.unlink(k.pick / "new.txt")
    # The placeholder's picture, from the drive's attribute, when it is selected (Down in the list).
    for _ in range(8):
        if [str(k.pick / "plan.odt"), "placeholder", "picture"] in p.logged("preview"):
            break
        p.key("Down")
        time.sleep(0.3)
    p.wait_for(lambda: [str(k.pick / "plan.odt"), "placeholder", "picture"] in p.logged("preview"), "plan.odt's picture")
    time.sleep(1)
    shot = p.log_path.parent / "picker.png"
    run(["import", "-display", k.display, "-window", "root", "-crop", "860x540+0+0", "+repage", str(shot)], env=p.env, timeout=30)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    p.escape()
    assert p.finish() == 1
    # Nothing was downloaded: not the placeholders shown, not "LICENSE", whose type GTK reads
    # from a file's first bytes when its name does not say it.
    assert downloads(k.d) == before
    assert xattr(k.pick / "LICENSE", "user.docdrive.status") == "placeholder"
    assert xattr(k.pick / "plan.odt", "user.docdrive.status") == "placeholder"


def screenshot_rgb(p: Picker) -> bytes:
    """The picker's window (the display's top left, 860 x 540: no window manager places it) as RGB bytes."""
    raw = p.log_path.parent / "shot.rgb"
    run(["import", "-display", p.k.display, "-window", "root", "-crop", "860x540+0+0", "+repage", "-depth", "8", f"rgb:{raw}"],
        env=p.env, timeout=30)
    data = raw.read_bytes()
    assert len(data) == 860 * 540 * 3, len(data)
    return data


def pixels_of(colour: bytes, data: bytes, width=860, tolerance=12) -> list[tuple[int, int]]:
    """Where the screenshot has that colour: (x, y) of each pixel."""
    r, g, b = colour
    out = []
    for i in range(0, len(data), 3):
        if abs(data[i] - r) <= tolerance and abs(data[i + 1] - g) <= tolerance and abs(data[i + 2] - b) <= tolerance:
            out.append(((i // 3) % width, (i // 3) // width))
    return out


def test_a_placeholders_picture_is_its_icon_in_the_list(desk, picker):
    k = desk
    before = downloads(k.d)
    plan = str(k.pick / "plan.odt")
    p = picker("--app", SECRET_ID, "--mode", "import", "--type", "*.odt").shown()
    p.go_to("Work/pick")
    p.wait_for(lambda: [plan] in p.logged("icon") and p.rows(k.pick).get("plan.odt") == "placeholder",
               "plan.odt's row drawn with its picture")
    # On the screen: the picture's red, at the size of a list icon, in the list (the preview pane,
    # right of the list, shows it 128 px wide when the row is selected).
    in_list = []

    def red_icon():
        in_list[:] = [(x, y) for x, y in pixels_of(RED, screenshot_rgb(p)) if x < 400]
        return len(in_list) >= 100
    assert wait_until(red_icon, 10, 0.5), f"no picture in the list: {len(in_list)} red pixels left of the preview"
    xs, ys = [x for x, _ in in_list], [y for _, y in in_list]
    assert max(xs) - min(xs) < 24 and max(ys) - min(ys) < 24, (min(xs), min(ys), max(xs), max(ys))
    p.escape()
    assert p.finish() == 1
    assert downloads(k.d) == before
    assert xattr(k.pick / "plan.odt", "user.docdrive.status") == "placeholder"


def recent_list(k: Desk, app: str) -> list[str]:
    """The documents in an app's recent list (the drive home's picker/recent/APP.json), newest first."""
    try:
        entries = json.loads((k.d.home / "picker" / "recent" / f"{app}.json").read_text())["entries"]
    except FileNotFoundError:
        return []
    return [e["path"] for e in entries if e["kind"] == "document"]


@pytest.mark.timeout(180)
def test_recent_offers_what_the_app_picked_and_leaves_out_what_is_gone(desk, picker):
    k = desk
    (k.d.home / "picker" / "recent" / f"{SECRET_ID}.json").unlink(missing_ok=True)
    folder = k.d.mnt / "Work" / "recent"
    folder.mkdir()
    for n in ("keep.txt", "gone.txt", "replaced.txt"):
        (folder / n).write_bytes(n.encode() + b"\n")
    note = k.d.mnt / "Notes" / "recent-note.txt"
    note.write_bytes(b"a note\n")
    try:
        # Imported: the three of Work/recent (Ctrl+A), then a document of the app Notes.
        p = picker("--app", SECRET_ID, "--mode", "import", "--multiple").shown()
        p.go_to("Work/recent")
        p.wait_for(lambda: {"keep.txt", "gone.txt", "replaced.txt"} <= set(p.rows(folder)), "Work/recent's rows")
        p.key("ctrl+a")  # (the display hands the keys to the window in order: Return comes after it)
        p.key("Return")
        assert p.finish(timeout=60) == 0, p.err
        assert len(p.out.splitlines()) == 3, p.out
        p = picker("--app", SECRET_ID, "--mode", "import").shown()
        p.type_path("Notes/recent-note.txt")
        p.key("Return")
        assert p.finish(timeout=60) == 0, p.err
        assert recent_list(k, SECRET_ID)[0] == "Notes/recent-note.txt", recent_list(k, SECRET_ID)
        assert set(recent_list(k, SECRET_ID)) == {"Notes/recent-note.txt", "Work/recent/keep.txt", "Work/recent/gone.txt",
                                                  "Work/recent/replaced.txt"}
        # One deleted; another item put where one was (another id: deleted, then a new document
        # made under its name; renaming it away first would be an editor's save, the same item).
        os.unlink(folder / "gone.txt")
        old_id = xattr(folder / "replaced.txt", "user.docdrive.id")
        os.unlink(folder / "replaced.txt")
        (folder / "replaced.txt").write_bytes(b"another document\n")
        assert xattr(folder / "replaced.txt", "user.docdrive.id") not in (None, old_id)
        # Alt+R: the Recent place, with the two that are still there, each with its sync state.
        p = picker("--app", SECRET_ID, "--mode", "open").shown()
        p.key("alt+r")
        recent = Path(p.logged("recent")[0][0])
        p.wait_for(lambda: ["folder", str(recent)] in p.log(), "the Recent place")
        p.wait_for(lambda: {"keep.txt", "recent-note.txt"} <= set(p.rows(recent)), "the Recent place's rows")
        assert p.logged("recent-entry") == [["recent-note.txt", str(note)], ["keep.txt", str(folder / "keep.txt")]], p.logged("recent-entry")
        dropped = {Path(path).name: why for path, why in p.logged("recent-dropped")}
        assert dropped == {"gone.txt": "gone", "replaced.txt": "another item is there now"}, dropped
        assert p.rows(recent)["recent-note.txt"] == "local", p.rows(recent)
        assert p.rows(recent)["keep.txt"] in ("pending", "uploading", "synced"), p.rows(recent)
        # Chosen there (typed, relative to the place shown), it is the document in its store that is opened.
        p.type_path("keep.txt")
        p.key("Return")
        assert p.finish(timeout=60) == 0, p.err
        ref = Path(one_line(p.out))
        assert ref == k.d.mnt / ".by-app" / SECRET_ID / "Documents" / "keep.txt"
        assert xattr(ref, "user.docdrive.target") == "Work/recent/keep.txt" and xattr(ref, "user.docdrive.external") == "1"
        assert recent_list(k, SECRET_ID) == ["Work/recent/keep.txt", "Notes/recent-note.txt"]
        assert not recent.exists(), "the Recent place's folder is left"
        # Another app's Recent place has none of them.
        p = picker("--app", NOTES_ID, "--mode", "open").shown()
        p.key("alt+r")
        other = Path(p.logged("recent")[0][0])
        p.wait_for(lambda: ["folder", str(other)] in p.log(), "the Recent place of Notes")
        assert not {"keep.txt", "recent-note.txt"} & {e[0] for e in p.logged("recent-entry")}, p.logged("recent-entry")
        # Ended from outside (SIGTERM): its Recent folder goes too.
        p.stop()
        assert p.p.returncode == -signal.SIGTERM and not other.exists(), (p.p.returncode, other)
        os.unlink(ref)
    finally:
        k.d.cli("app", "close", SECRET_ID)
        shutil.rmtree(folder, ignore_errors=True)
        note.unlink(missing_ok=True)


# --------------------------------------------------------------------------- errors

def test_a_wrong_app_id_is_one_sentence_in_a_window_and_on_stderr(desk, picker):
    p = picker("--app", "no.such.app", "--mode", "open")
    sentence = 'There is no app "no.such.app" (see `docdrive app list`).'
    p.wait_for(lambda: ["error", sentence] in p.logged("message"), "the sentence")
    p.key("Return")
    assert p.finish() == 1
    assert p.err == f"docdrive: {sentence}\n" and p.out == ""


def test_an_offline_store_and_a_placeholder_that_cannot_be_downloaded_are_one_sentence_each(desk, picker):
    k = desk
    inbox = k.d.app_folder(SECRET_ID, "Inbox")
    before = sorted(os.listdir(inbox))
    away = k.away_remote.with_name("away-remote-gone")
    os.rename(k.away_remote, away)
    try:
        def offline():
            store = next(s for s in k.status()["stores"] if s["name"] == "away")
            return store.get("sync", {}).get("offline")
        assert wait_until(offline, 15, 0.2), k.status()
        p = picker("--app", SECRET_ID, "--mode", "import").shown()
        p.go_to("Away")
        p.wait_for(lambda: any(m[0] == "warning" and m[1].startswith("The store Away is offline (") for m in p.logged("message")),
                   "the offline sentence")
        warning = next(m[1] for m in p.logged("message") if m[0] == "warning")
        p.type_path("far.txt")
        p.key("Return")
        far = "Away/far.txt"
        p.wait_for(lambda: any(m[0] == "error" for m in p.logged("message")), "the error")
        error = next(m[1] for m in p.logged("message") if m[0] == "error")
        assert error.startswith(f"{far} is only on the remote and cannot be downloaded now (") and error.endswith(")."), error
        # The window stays for another choice; Escape ends it.
        time.sleep(0.5)
        assert p.p.poll() is None
        p.escape()
        assert p.finish() == 1
        assert p.err.splitlines() == [f"docdrive: {warning}", f"docdrive: {error}"], p.err
        assert sorted(os.listdir(inbox)) == before and p.out == ""
        assert xattr(k.d.mnt / "Away" / "far.txt", "user.docdrive.status") == "placeholder"
    finally:
        os.rename(away, k.away_remote)


# --------------------------------------------------------------------------- the session bus

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{services}</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""
BUS_NAME = "org.docdrive.Picker1"


class BusPicker(Picker):
    """A picker that the D-Bus service started for a call (`gdbus call`, started here): its
    window is found by its title."""

    def __init__(self, k: Desk, tmp: Path, env: dict, method: str, *args: str, title: str):
        self.k, self.env, self.title = k, env, title
        self.log_path = Path(env["DOCDRIVE_PICKER_LOG"])
        self.p = subprocess.Popen(["gdbus", "call", "--session", "--dest", BUS_NAME, "--object-path", "/org/docdrive/Picker1",
                                   "--method", f"{BUS_NAME}.{method}", "--timeout", "90", *args, title],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.out = self.err = None

    def point(self):
        p = run(["xdotool", "search", "--onlyvisible", "--name", self.title], env=self.env, timeout=30, check=False)
        windows = p.stdout.split()
        assert windows, f"no window titled {self.title}; log: {self.log()[-10:]}"
        self.xdotool("mousemove", "--window", windows[-1], "40", "40")


@pytest.mark.timeout(150)
def test_the_picker_on_the_session_bus_is_started_on_demand_and_answers_with_the_paths(desk, tmp_path):
    k = desk
    need("dbus-daemon"), need("gdbus")
    data = tmp_path / "share"
    # `desktop install` writes the activation file; `uninstall` removes it.
    k.d.cli("desktop", "install", env=k.d.env(XDG_DATA_HOME=str(data), HOME=str(tmp_path)))
    service = data / "dbus-1" / "services" / f"{BUS_NAME}.service"
    assert service.read_text() == f"[D-BUS Service]\nName={BUS_NAME}\nExec={os.path.realpath(k.d.bin)} desktop picker-service\n"
    # A session bus of the test's own that activates from that folder; the service and the
    # pickers it runs get the bus's environment (the display, the drive).
    (tmp_path / "user").mkdir()
    env = k.d.env(DISPLAY=k.display, DOCDRIVE_PICKER_LOG=str(tmp_path / "picker.log"), HOME=str(tmp_path / "user"),
                  XDG_DATA_HOME=str(data), XDG_CONFIG_HOME=str(tmp_path / "user" / "config"),
                  XDG_CACHE_HOME=str(tmp_path / "user" / "cache"), GSETTINGS_BACKEND="memory", NO_AT_BRIDGE="1",
                  GTK_A11Y="none", GIO_USE_VFS="local", LANG="C.UTF-8")
    for key in [key for key in env if key.startswith(("PYENV", "PYTHON"))]:
        del env[key]
    conf = tmp_path / "bus.conf"
    conf.write_text(BUS_CONFIG.format(services=service.parent))
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1"], env=env,
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    left = []
    try:
        env["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().strip()
        assert env["DBUS_SESSION_BUS_ADDRESS"], "dbus-daemon gave no address"
        # Open: the paths come back as the method's answer.
        p = BusPicker(k, tmp_path, env, "Open", SECRET_ID, "['*.txt']", "false", title="Open for the bus test")
        p.wait_for(lambda: any(r[0].startswith(str(k.d.mnt) + "/") for r in p.logged("row")), "its window")
        p.type_path("Work/pick/agenda.txt")
        p.key("Return")
        assert p.finish(timeout=60) == 0, p.err
        ref = k.d.mnt / ".by-app" / SECRET_ID / "Documents" / "agenda.txt"
        assert p.out.strip() == f"(['{ref}'],)", p.out
        assert xattr(ref, "user.docdrive.external") == "1" and ref.read_bytes() == b"notes\n"
        os.unlink(ref)
        # Cancel: the error Cancelled, nothing changed.
        before = tree(*k.backing())
        (tmp_path / "picker.log").unlink()
        p = BusPicker(k, tmp_path, env, "Import", SECRET_ID, "[]", "false", title="Import for the bus test")
        p.wait_for(lambda: any(r[0].startswith(str(k.d.mnt) + "/") for r in p.logged("row")), "its window")
        p.type_path("Work/pick/report.txt")
        p.escape()
        assert p.finish(timeout=30) != 0 and f"{BUS_NAME}.Error.Cancelled" in p.err, p.err
        assert tree(*k.backing()) == before
    finally:
        extra = children_of(bus.pid)  # the service D-Bus started
        for pid in extra:
            os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not any(pid_alive(pid) for pid in extra), 5)
        left += [f"pid {pid}" for pid in extra if pid_alive(pid)]
        bus.terminate()
        bus.wait(timeout=10)
        k.d.cli("desktop", "uninstall", env=k.d.env(XDG_DATA_HOME=str(data), HOME=str(tmp_path)))
    assert not service.exists()
    assert not left, f"left running: {left}"
