"""Every way editors save keeps the document (issue 13, part 1; DESIGN.md section 3).

Each save pattern runs with a real program where Debian has one (sed, python, mv, GIO's
`gio save`, vim, Emacs, LibreOffice) in three places:

* `ref`: through a reference entry: `Notes/<t>/doc` is a reference to `Work/<t>/doc`;
* `store`: directly in a store (`Work/<t>/doc`);
* `container`: directly in an app container (`Notes/<t>/doc`).

After the save: the document (the store copy, or the container's file) has the new content
and keeps its item id; through a reference, the container entry is still the reference
(`user.docdrive.external=1`, its `.docdrive-ref` file and no private copy beside it); in a
store, the new version is on the remote after `docdrive sync`, and none of the editor's
temporary names (`doc~`, `.goutputstream-*`, `.~lock.*#`, swap files) is left on it.
The drive has its own store with a 0.2 s write-back delay, so that `sync` is quick.
"""
from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import ddtest
from ddtest import NOTES_ID, Drive, run

pytestmark = pytest.mark.timeout(120)
SUFFIX = ".docdrive-ref"


@pytest.fixture(scope="module")
def ed(base_dir):
    """A drive whose store uploads 0.2 s after a change (the shared drive waits 2 s)."""
    d = Drive(base_dir / "editor-saves")
    d.base.mkdir(parents=True, exist_ok=True)
    os.chmod(d.base, 0o755)
    d.cli("init")
    d.cli("app", "add", NOTES_ID, "--name", "Notes", "--public")
    d.cli("store", "add", "work", "--name", "Work", "--folder", str(d.remote), "--writeback", "0.2")
    d.mount()
    yield d
    problems = d.teardown()
    assert not problems, problems


class Place:
    """Where one test's document lives and where the editor saves it."""

    def __init__(self, d: Drive, where: str, name: str, doc: str):
        self.d, self.where, self.doc = d, where, doc
        self.store_dir = d.mnt / "Work" / name
        self.notes_dir = d.mnt / "Notes" / name
        self.remote_dir = d.remote / name
        self.notes_backing = d.notes_backing / name
        self.store_backing = d.work_backing / name
        self.store_dir.mkdir()
        self.notes_dir.mkdir()
        self.name = name

    @property
    def target(self) -> Path:
        """The document itself: the store copy, or the container's own file."""
        return (self.notes_dir if self.where == "container" else self.store_dir) / self.doc

    @property
    def edited(self) -> Path:
        """The path the editor is given."""
        return (self.store_dir if self.where == "store" else self.notes_dir) / self.doc

    def create(self, content: bytes):
        self.target.write_bytes(content)
        if self.where == "ref":
            p = self.d.cli("open", "--app", NOTES_ID, f"Work/{self.name}/{self.doc}", "--into", self.name, "--json")
            ref = Path(json.loads(p.stdout)["reference_absolute"])
            assert ref == self.edited, (ref, self.edited)
            assert xattr(self.edited, "user.docdrive.external") == "1"

    def check(self, want: bytes | None, item: str, extra_names=(), content=None):
        """The document has `want` (or passes `content`), its id is `item`, the reference is
        intact, and the remote holds the new version and no editor temporary."""
        got = self.target.read_bytes()
        if content:
            content(got)
        else:
            assert got == want, f"the document has {got[:80]!r}, expected {want[:80]!r}"
        assert xattr(self.target, "user.docdrive.id") == item, "the document lost its item id"
        if self.where == "ref":
            assert xattr(self.edited, "user.docdrive.external") == "1", "the reference was replaced by a private file"
            assert (self.notes_backing / (self.doc + SUFFIX)).is_file()
            assert not (self.notes_backing / self.doc).exists(), "a private copy was left in the app's container"
            assert self.edited.read_bytes() == got
            assert xattr(self.edited, "user.docdrive.id") == item
        if self.where in ("ref", "store"):
            p = self.d.cli("sync", "--timeout", "30", check=False)
            assert p.returncode == 0, f"docdrive sync: {p.stderr}"
            assert (self.remote_dir / self.doc).read_bytes() == got, "the remote does not have the saved version"
            want_remote = {self.doc} | (set(extra_names) if self.where == "store" else set())
            assert set(os.listdir(self.remote_dir)) == want_remote, \
                f"the remote has {sorted(os.listdir(self.remote_dir))}, expected {sorted(want_remote)}"
            assert xattr(self.target, "user.docdrive.status") == "synced"
        shown = self.notes_dir if self.where != "store" else self.store_dir
        want_shown = {self.doc} | set(extra_names)
        assert set(os.listdir(shown)) == want_shown, f"{shown} lists {sorted(os.listdir(shown))}"


def xattr(path, name):
    try:
        return os.getxattr(path, name).decode()
    except OSError as e:
        return errno.errorcode[e.errno]


@pytest.fixture(params=["ref", "store", "container"])
def place(ed, request):
    if not ed.healthy():
        ed.teardown()
        ed.mount()
    name = "s-" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:70]
    yield Place(ed, request.param, name, "doc.txt")
    assert ed.pid and ddtest.pid_alive(ed.pid), f"the daemon died during this test; log:\n{ed.log_tail()}"


ORIG = b"the orig text\nsecond line\n"
NEW = b"the new text\nsecond line\n"


def start(place) -> str:
    place.create(ORIG)
    return xattr(place.target, "user.docdrive.id")


# --------------------------------------------------------------------------- write-temp-then-rename

def test_sed_in_place(place):
    item = start(place)
    run(["sed", "-i", "s/orig/new/", str(place.edited)])
    place.check(NEW, item)


def test_python_os_replace(place):
    item = start(place)
    tmp = place.edited.with_name(".doc.txt.tmp-python")
    with open(tmp, "wb") as f:
        f.write(NEW)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, place.edited)
    place.check(NEW, item)


def test_mv_of_a_new_file_onto_the_name(place):
    item = start(place)
    run(["sh", "-c", 'printf "%s" "$1" > "$2.new" && mv -f "$2.new" "$2"', "sh", NEW.decode(), str(place.edited)])
    place.check(NEW, item)


def test_gio_save(place):
    """GIO's g_file_replace (GNOME's editors, Nautilus): a `.goutputstream-XXXXXX` renamed over."""
    if shutil.which("gio") is None:
        pytest.fail("gio (libglib2.0-bin) is not installed; mount-scripts/test.sh installs it")
    item = start(place)
    run(["gio", "save", str(place.edited)], input=NEW.decode())
    place.check(NEW, item)


def test_qsavefile_pattern(place):
    """Qt's QSaveFile (Kate, KWrite): `NAME.XXXXXX` written, synced, renamed over (done here
    with the same system calls; Debian's Qt would need a display stack to test)."""
    item = start(place)
    tmp = place.edited.with_name(place.doc + "." + "".join(random.choice("abcdefXYZ123") for _ in range(6)))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, NEW)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, place.edited)
    place.check(NEW, item)


# --------------------------------------------------------------------------- rename-away-then-write

def vim(path, backupcopy):
    run(["vim", "-u", "NONE", "-i", "NONE", "-N", "-es",
         "-c", f"set backupcopy={backupcopy} backupskip= writebackup nobackup backupdir=.",
         "-c", "%s/orig/new/", "-c", "wq", str(path)], timeout=30)


@pytest.mark.parametrize("backupcopy", ["no", "auto"])
def test_vim_rename_away_save(place, backupcopy):
    item = start(place)
    vim(place.edited, backupcopy)
    place.check(NEW, item)


def test_emacs_backup_by_rename(place):
    """Emacs renames `doc.txt` to `doc.txt~` (its backup, which stays) and writes a new file."""
    if shutil.which("emacs") is None:
        pytest.fail("emacs is not installed; mount-scripts/test.sh installs emacs-nox")
    item = start(place)
    run(["emacs", "--batch", "-Q", str(place.edited), "--eval",
         '(progn (setq make-backup-files t backup-by-copying nil backup-inhibited nil)'
         ' (goto-char (point-min)) (while (search-forward "orig" nil t) (replace-match "new"))'
         ' (save-buffer))'], timeout=60)
    backup = place.edited.with_name(place.doc + "~")
    assert backup.exists(), "emacs made no backup by renaming: the test did not test the pattern"
    place.check(NEW, item, extra_names=[place.doc + "~"])


# --------------------------------------------------------------------------- in place (already worked)

def test_append_truncate_and_vim_backupcopy_yes(place):
    item = start(place)
    with open(place.edited, "ab") as f:
        f.write(b"appended\n")
    place.check(ORIG + b"appended\n", item)
    os.truncate(place.edited, 8)
    place.check(ORIG[:8], item)
    place.edited.write_bytes(ORIG)
    vim(place.edited, "yes")
    place.check(NEW, item)


# --------------------------------------------------------------------------- LibreOffice

def soffice_convert(src: Path, outdir: Path, profile: Path):
    run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--norestore",
         "--convert-to", "odt", "--outdir", str(outdir), str(src)], timeout=90)


@pytest.mark.timeout(240)
def test_libreoffice_saves_over_the_document(ed, tmp_path):
    if shutil.which("soffice") is None:
        pytest.fail("LibreOffice is not installed; mount-scripts/test.sh installs libreoffice-writer-nogui")
    profile = tmp_path / "lo-profile"
    src = tmp_path / "report.txt"
    src.write_text("first version\n")
    soffice_convert(src, tmp_path, profile)
    first = (tmp_path / "report.odt").read_bytes()
    for where in ("ref", "store", "container"):
        p = Place(ed, where, f"lo-{where}", "report.odt")
        p.create(first)
        item = xattr(p.target, "user.docdrive.id")
        src.write_text("second version\n")
        soffice_convert(src, p.edited.parent, profile)

        def has_second(data: bytes):
            import io
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                text = z.read("content.xml").decode()
            assert "second version" in text, f"{where}: the document does not have LibreOffice's new version"

        p.check(None, item, content=has_second)
