"""Reference entries, the four document modes, bookmarks, grants and the per-app view (issue 4).

Each test works in its own folder of the shared drive: `Work/<name>/` in the store and
`.by-app/<SECRET>/Documents/<name>/` (or `Notes/<name>/`) in a container, so tests do not see
each other's references. Commands talk to the daemon through its control socket.
"""
from __future__ import annotations

import base64
import errno
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ddtest
from ddtest import NOTES_ID, SECRET_ID

SUFFIX = ".docdrive-ref"
pytestmark = pytest.mark.timeout(120)


class Docs:
    """One test's places: a store folder, the secret app's folder and the Notes folder."""

    def __init__(self, drive, name):
        self.drive = drive
        self.name = name
        self.store = drive.mnt / "Work" / name
        self.store_backing = drive.work_backing / name
        self.app_view = drive.mnt / ".by-app" / SECRET_ID
        self.app = self.app_view / "Documents" / name
        self.app_backing = drive.app_folder(SECRET_ID, "Documents") / name
        self.notes = drive.mnt / "Notes" / name
        self.notes_backing = drive.notes_backing / name
        for p in (self.store, self.app, self.notes):
            p.mkdir()
        # Notes/ is where the other tests compare their folder's ".." with a native twin's:
        # keep the two parents alike.
        (drive.base.parent / "native" / name).mkdir()

    def cli(self, *args, check=True):
        return self.drive.cli(*args, check=check)

    def json(self, *args):
        p = self.drive.cli(*args, "--json")
        return json.loads(p.stdout)

    def open(self, rel, app=SECRET_ID, *extra):
        """`docdrive open` of Work/<name>/rel into the app's Documents/<name>/; the reference path."""
        r = self.json("open", "--app", app, f"Work/{self.name}/{rel}", "--into", self.name, *extra)
        return Path(r["reference_absolute"])


@pytest.fixture
def docs(drive, request):
    if not drive.healthy():
        drive.teardown()
        drive.mount()
    name = "r-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    d = Docs(drive, name)
    yield d
    if not (drive.pid and ddtest.pid_alive(drive.pid)):
        pytest.fail(f"the daemon died during this test; log:\n{drive.log_tail()}")


def xattr(path, name):
    try:
        return os.getxattr(path, name).decode()
    except OSError as e:
        return errno.errorcode[e.errno]


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


# --------------------------------------------------------------------------- reference entries

def test_open_writes_a_reference_that_shows_as_the_document(docs):
    target = docs.store / "report.odt"
    target.write_bytes(b"quarterly figures\n")
    os.chmod(target, 0o640)
    ref = docs.open("report.odt")
    assert ref == docs.app / "report.odt"
    assert ref.read_bytes() == b"quarterly figures\n"
    a, b = os.stat(ref), os.stat(target)
    assert (a.st_size, a.st_mtime_ns, a.st_mode) == (b.st_size, b.st_mtime_ns, b.st_mode)
    # Kept under the reserved name in the backing folder, never listed with it in the mount.
    assert (docs.app_backing / ("report.odt" + SUFFIX)).is_file()
    assert not (docs.app_backing / "report.odt").exists()
    assert os.listdir(docs.app) == ["report.odt"]
    assert not any(n.endswith(SUFFIX) for n in os.listdir(docs.drive.mnt / ".by-app" / SECRET_ID / "Documents"))
    # What getfattr -d shows.
    assert xattr(ref, "user.docdrive.external") == "1"
    assert xattr(ref, "user.docdrive.container") == "Work"
    assert xattr(ref, "user.docdrive.target") == f"Work/{docs.name}/report.odt"
    assert xattr(ref, "user.docdrive.id") == xattr(target, "user.docdrive.id")
    names = os.listxattr(ref)
    assert {"user.docdrive.external", "user.docdrive.container", "user.docdrive.target"} <= set(names)
    assert xattr(target, "user.docdrive.external") in ("0", "ENODATA")
    dump = ddtest.run(["getfattr", "-d", str(ref)]).stdout
    assert 'user.docdrive.external="1"' in dump and 'user.docdrive.container="Work"' in dump


def test_writes_through_a_reference_go_to_the_target_and_are_uploaded(docs):
    target = docs.store / "notes.txt"
    target.write_bytes(b"v1\n")
    ref = docs.open("notes.txt")
    with open(ref, "ab") as f:
        f.write(b"v2 from the app\n")
    assert target.read_bytes() == b"v1\nv2 from the app\n"
    ddtest.run(["truncate", "-s", "3", str(ref)])
    assert target.read_bytes() == b"v1\n"
    docs.cli("sync", "--timeout", "60")
    remote = docs.drive.remote / docs.name / "notes.txt"
    assert remote.read_bytes() == b"v1\n"


def test_the_reference_follows_its_target(docs):
    target = docs.store / "a.txt"
    target.write_bytes(b"one\n")
    ref = docs.open("a.txt")
    # renamed through the mount, into a subfolder
    (docs.store / "sub").mkdir()
    os.rename(target, docs.store / "sub" / "b.txt")
    assert ref.read_bytes() == b"one\n"
    assert xattr(ref, "user.docdrive.target") == f"Work/{docs.name}/sub/b.txt"
    # renamed behind the mount's back, in the backing folder
    os.rename(docs.store_backing / "sub" / "b.txt", docs.store_backing / "c.txt")
    assert wait_for(lambda: xattr(ref, "user.docdrive.target") == f"Work/{docs.name}/c.txt")
    assert ref.read_bytes() == b"one\n"
    # an editor's save-by-rename replaces the file: still the same document
    tmp = docs.store / ".c.txt.swp"
    tmp.write_bytes(b"two\n")
    os.rename(tmp, docs.store / "c.txt")
    assert wait_for(lambda: ref.read_bytes() == b"two\n", timeout=3)
    assert xattr(ref, "user.docdrive.status") in ("pending", "uploading", "synced")


def test_rm_and_mv_of_a_reference_leave_the_target(docs):
    target = docs.store / "keep.txt"
    target.write_bytes(b"keep me\n")
    ref = docs.open("keep.txt")
    moved = docs.app / "renamed.txt"
    os.rename(ref, moved)
    assert not ref.exists() and moved.read_bytes() == b"keep me\n"
    assert (docs.app_backing / ("renamed.txt" + SUFFIX)).is_file()
    assert target.read_bytes() == b"keep me\n" and sorted(os.listdir(docs.store)) == ["keep.txt"]
    os.unlink(moved)
    assert not moved.exists() and os.listdir(docs.app_backing) == []
    assert target.read_bytes() == b"keep me\n"


def test_a_reference_whose_target_is_gone_stays_and_reports_missing(docs):
    target = docs.store / "gone.txt"
    target.write_bytes(b"soon gone\n")
    ref = docs.open("gone.txt")
    os.unlink(target)
    assert wait_for(lambda: ddtest.err(ref.read_bytes) == "ENOENT", timeout=3)
    assert "gone.txt" in os.listdir(docs.app)
    assert xattr(ref, "user.docdrive.status") == "missing"
    status = docs.json("status")
    mine = [r for r in status["references"] if r["path"].endswith(f"{docs.name}/gone.txt")]
    assert mine and mine[0]["status"] == "missing", status["references"]
    text = docs.cli("status").stdout
    assert f"{docs.name}/gone.txt" in text and "missing" in text


def test_reserved_names_cannot_be_created_or_seen(docs):
    for folder in (docs.store, docs.notes):
        bad = folder / ("x" + SUFFIX)
        assert ddtest.err(bad.write_bytes, b"") == "EINVAL"
        assert ddtest.err(os.mkdir, bad) == "EINVAL"
        assert ddtest.err(os.symlink, "t", bad) == "EINVAL"
        ok = folder / "ok.txt"
        ok.write_bytes(b"")
        assert ddtest.err(os.rename, ok, bad) == "EINVAL"
        assert ddtest.err(os.link, ok, bad) == "EINVAL"
    # made behind the mount's back: not listed, not reachable by that name
    (docs.store_backing / ("hidden" + SUFFIX)).write_bytes(b"x")
    assert not any(n.endswith(SUFFIX) for n in os.listdir(docs.store))
    assert ddtest.err(os.stat, docs.store / ("hidden" + SUFFIX)) == "ENOENT"


def test_a_hand_edited_or_copied_reference_is_refused(docs):
    target = docs.store / "secret.txt"
    target.write_bytes(b"private\n")
    ref = docs.open("secret.txt")
    backing = docs.app_backing / ("secret.txt" + SUFFIX)
    token = backing.read_text().strip()
    body, mac = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    # Point it at another item by hand: the MAC no longer matches.
    payload["hint"] = "other.txt"
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=") + "." + mac
    (docs.app_backing / ("forged.txt" + SUFFIX)).write_text(forged + "\n")
    # A valid reference copied into another app's container is not that app's.
    shutil.copy(backing, docs.notes_backing / ("copied.txt" + SUFFIX))
    for p in (docs.app / "forged.txt", docs.notes / "copied.txt"):
        assert ddtest.err(p.read_bytes) == "EACCES", p
        assert xattr(p, "user.docdrive.status") == "invalid"
    assert ref.read_bytes() == b"private\n"
    refs = docs.json("status")["references"]
    bad = {r["path"].rsplit("/", 1)[-1]: r["status"] for r in refs if docs.name in r["path"]}
    assert bad.get("forged.txt") == "invalid" and bad.get("copied.txt") == "invalid", refs


# --------------------------------------------------------------------------- modes

def test_import_copies_into_the_inbox_until_the_app_closes(docs):
    src = docs.store / "imp.txt"
    src.write_bytes(b"import me\n")
    r = docs.json("import", "--app", SECRET_ID, f"Work/{docs.name}/imp.txt")
    copy = Path(r["copy_absolute"])
    assert copy.parent == docs.app_view / "Inbox"
    assert copy.read_bytes() == b"import me\n"
    copy.write_bytes(b"edited copy\n")
    assert src.read_bytes() == b"import me\n", "the original must stay untouched"
    r2 = docs.json("import", "--app", SECRET_ID, f"Work/{docs.name}/imp.txt")
    assert Path(r2["copy_absolute"]) != copy, "a second import must not overwrite the first"
    out = docs.json("app", "close", SECRET_ID)
    assert out["removed"] >= 2
    assert not copy.exists() and not Path(r2["copy_absolute"]).exists()
    assert src.read_bytes() == b"import me\n"


def test_import_of_a_placeholder_downloads_it_first_and_says_when_it_cannot(docs):
    """The copy is of the document, not of the empty sparse file that stands for it; with the
    remote away, one sentence and no copy."""
    src = docs.store / "far.txt"
    src.write_bytes(b"kept on the remote\n")
    docs.cli("sync", "--timeout", "60")
    docs.cli("evict", str(src))
    assert xattr(src, "user.docdrive.status") == "placeholder"
    inbox = docs.drive.app_folder(SECRET_ID, "Inbox")
    before = sorted(os.listdir(inbox))
    remote, away = docs.drive.remote, docs.drive.remote.with_name("remote-away")
    os.rename(remote, away)
    try:
        p = docs.cli("import", "--app", SECRET_ID, f"Work/{docs.name}/far.txt", check=False)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(lines) == 1, p.stderr
        assert lines[0].startswith(f"docdrive: Work/{docs.name}/far.txt is only on the remote and cannot be downloaded now ("), lines
        assert sorted(os.listdir(inbox)) == before
        assert xattr(src, "user.docdrive.status") == "placeholder"
    finally:
        os.rename(away, remote)
    r = docs.json("import", "--app", SECRET_ID, f"Work/{docs.name}/far.txt")
    assert Path(r["copy_absolute"]).read_bytes() == b"kept on the remote\n"
    assert xattr(src, "user.docdrive.status") == "synced"
    docs.json("app", "close", SECRET_ID)


def test_import_copies_vanish_at_unmount(new_drive):
    d = new_drive().mount()
    (d.mnt / "Work" / "doc.txt").write_bytes(b"x\n")
    out = json.loads(d.cli("import", "--app", NOTES_ID, "Work/doc.txt", "--json").stdout)
    inbox = d.app_folder(NOTES_ID, "Inbox")
    assert (inbox / "doc.txt").read_bytes() == b"x\n", out
    assert d.unmount().returncode == 0
    assert list(inbox.iterdir()) == []
    assert (d.work_backing / "doc.txt").read_bytes() == b"x\n"


def test_move_leaves_a_working_reference_in_the_old_place(docs):
    doc = docs.notes / "draft.txt"
    doc.write_bytes(b"draft 1\n")
    doc_id = xattr(doc, "user.docdrive.id")
    (docs.store / "draft.txt").write_bytes(b"someone else's\n")  # a clash in the store
    r = docs.json("move", "--app", NOTES_ID, str(doc), "--to", f"Work/{docs.name}")
    target = Path(r["target_absolute"])
    assert target == docs.store / "draft 2.txt", r
    assert target.read_bytes() == b"draft 1\n"
    assert (docs.store / "draft.txt").read_bytes() == b"someone else's\n"
    # the app keeps its path
    assert doc.read_bytes() == b"draft 1\n"
    assert xattr(doc, "user.docdrive.external") == "1"
    assert xattr(doc, "user.docdrive.id") == doc_id == xattr(target, "user.docdrive.id")
    assert (docs.notes_backing / ("draft.txt" + SUFFIX)).is_file()
    with open(doc, "a") as f:
        f.write("draft 2\n")
    assert target.read_bytes() == b"draft 1\ndraft 2\n"
    docs.cli("sync", "--timeout", "60")
    assert (docs.drive.remote / docs.name / "draft 2.txt").read_bytes() == b"draft 1\ndraft 2\n"


def test_move_with_no_rename_refuses_a_clash_and_changes_nothing(docs):
    doc = docs.notes / "same.txt"
    doc.write_bytes(b"mine\n")
    (docs.store / "same.txt").write_bytes(b"theirs\n")
    p = docs.cli("move", "--app", NOTES_ID, f"Notes/{docs.name}/same.txt", "--to", f"Work/{docs.name}", "--no-rename", check=False)
    assert p.returncode != 0 and "already exists" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert doc.read_bytes() == b"mine\n" and xattr(doc, "user.docdrive.external") in ("0", "ENODATA")
    assert (docs.store / "same.txt").read_bytes() == b"theirs\n"
    assert sorted(os.listdir(docs.notes_backing)) == ["same.txt"]


def test_export_copies_and_leaves_the_original(docs):
    doc = docs.app / "out.txt"
    doc.write_bytes(b"export me\n")
    r = docs.json("export", "--app", SECRET_ID, str(doc), "--to", f"Work/{docs.name}")
    copy = Path(r["copy_absolute"])
    assert copy == docs.store / "out.txt" and copy.read_bytes() == b"export me\n"
    r2 = docs.json("export", "--app", SECRET_ID, str(doc), "--to", f"Work/{docs.name}")
    assert Path(r2["copy_absolute"]) == docs.store / "out 2.txt"
    assert doc.read_bytes() == b"export me\n" and xattr(doc, "user.docdrive.external") in ("0", "ENODATA")
    assert sorted(os.listdir(docs.app_backing)) == ["out.txt"]
    # the copies are the store's like any saved file: noted for upload when made (not found
    # later by the safety net that looks again at a file with no record), and they reach its remote
    assert xattr(copy, "user.docdrive.status") == "pending"
    docs.cli("sync", "--timeout", "60")
    assert f"{docs.name}/out.txt had nothing waiting" not in docs.drive.log_tail(n=100_000), docs.drive.log_tail()
    assert (docs.drive.remote / docs.name / "out.txt").read_bytes() == b"export me\n"
    assert (docs.drive.remote / docs.name / "out 2.txt").read_bytes() == b"export me\n"


@pytest.mark.parametrize("args,needle", [
    (["open", "--app", "no.such.app", "Work/x"], "no app"),
    (["open", "--app", SECRET_ID, "Work/does-not-exist.txt"], "There is no"),
    (["open", "--app", SECRET_ID, "Nowhere/x.txt"], "There is no"),
    (["open", "--app", SECRET_ID, "Work/../Notes/x"], "not valid"),
    (["move", "--app", NOTES_ID, "Notes/none.txt", "--to", "NoStore"], "There is no"),
    (["export", "--app", SECRET_ID, "Notes/x.txt", "--to", "Work"], "not in the container"),
    (["bookmark", "resolve", "--app", SECRET_ID, "not-a-token"], "not valid"),
])
def test_errors_are_one_sentence_and_change_nothing(docs, args, needle):
    before = sorted(os.listdir(docs.drive.work_backing))
    p = docs.cli(*args, check=False)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docdrive: ") and needle in lines[0], p.stderr
    assert sorted(os.listdir(docs.drive.work_backing)) == before


def test_commands_need_a_mounted_drive(new_drive):
    d = new_drive()
    p = d.cli("open", "--app", SECRET_ID, "Work/x", check=False)
    assert p.returncode == 6 and "not mounted" in p.stderr


# --------------------------------------------------------------------------- bookmarks and grants

def test_bookmarks_find_the_document_after_renames(docs):
    target = docs.store / "bm.txt"
    target.write_bytes(b"bookmarked\n")
    ref = docs.open("bm.txt")
    token = docs.cli("bookmark", "create", "--app", SECRET_ID, str(ref)).stdout.strip()
    assert token and all(c.isalnum() or c in "-_." for c in token)
    r = docs.json("bookmark", "resolve", "--app", SECRET_ID, token)
    assert r["path"] == f"Work/{docs.name}/bm.txt" and r["stale"] is False
    os.rename(target, docs.store / "moved.txt")
    r = docs.json("bookmark", "resolve", "--app", SECRET_ID, token)
    assert r["path"] == f"Work/{docs.name}/moved.txt" and r["stale"] is True
    text = docs.cli("bookmark", "resolve", "--app", SECRET_ID, token).stdout
    assert "stale: true" in text
    # a container document of the app itself
    own = docs.app / "own.txt"
    own.write_bytes(b"own\n")
    t2 = docs.cli("bookmark", "create", "--app", SECRET_ID, str(own)).stdout.strip()
    os.rename(own, docs.app / "own2.txt")
    r = docs.json("bookmark", "resolve", "--app", SECRET_ID, t2)
    assert r["path"] == f".by-app/{SECRET_ID}/Documents/{docs.name}/own2.txt" and r["stale"] is True


def test_tampered_foreign_and_ungranted_bookmarks_are_refused(docs, new_drive):
    target = docs.store / "t.txt"
    target.write_bytes(b"t\n")
    docs.open("t.txt")
    token = docs.cli("bookmark", "create", "--app", SECRET_ID, f"Work/{docs.name}/t.txt").stdout.strip()
    rng = random.Random(4)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    mutated = {token[:-1], token[:len(token) // 2], token + "A", token.replace(".", ""), "." + token}
    while len(mutated) < 25:
        i = rng.randrange(len(token))
        c = rng.choice(alphabet)
        if c != token[i]:
            mutated.add(token[:i] + c + token[i + 1:])
    for bad in mutated:
        p = docs.cli("bookmark", "resolve", "--app", SECRET_ID, bad, check=False)
        assert p.returncode != 0, f"a mutated token resolved: {bad}\n{p.stdout}"
        assert "not valid" in p.stderr or "no grant" in p.stderr or "gone" in p.stderr or "no longer" in p.stderr, p.stderr
    # the Notes app holds no grant for it
    p = docs.cli("bookmark", "resolve", "--app", NOTES_ID, token, check=False)
    assert p.returncode != 0 and "no grant" in p.stderr
    # an app without a grant cannot even create one for a store item
    p = docs.cli("bookmark", "create", "--app", NOTES_ID, f"Work/{docs.name}/t.txt", check=False)
    assert p.returncode != 0 and "no grant" in p.stderr
    # made by another drive (another key)
    other = new_drive().mount()
    (other.mnt / "Work" / "t.txt").write_bytes(b"other\n")
    other.cli("open", "--app", SECRET_ID, "Work/t.txt")
    foreign = other.cli("bookmark", "create", "--app", SECRET_ID, "Work/t.txt").stdout.strip()
    p = docs.cli("bookmark", "resolve", "--app", SECRET_ID, foreign, check=False)
    assert p.returncode != 0 and "not valid for this drive" in p.stderr


def test_revoking_a_grant_closes_the_apps_view_at_once(docs):
    target = docs.store / "g.txt"
    target.write_bytes(b"granted\n")
    ref = docs.open("g.txt")
    assert ref.read_bytes() == b"granted\n"
    grants = docs.json("grants", "list", "--app", SECRET_ID)["grants"]
    assert any(g["path"] == f"Work/{docs.name}/g.txt" and g["status"] == "ok" for g in grants), grants
    docs.cli("grants", "revoke", "--app", SECRET_ID, str(ref))
    assert ddtest.err(ref.read_bytes) == "EACCES"
    assert xattr(ref, "user.docdrive.status") == "revoked"
    assert not any(g["path"] == f"Work/{docs.name}/g.txt" for g in docs.json("grants", "list", "--app", SECRET_ID)["grants"])
    assert target.read_bytes() == b"granted\n"
    p = docs.cli("grants", "revoke", "--app", SECRET_ID, str(ref), check=False)
    assert p.returncode != 0 and "no grant" in p.stderr
    docs.open("g.txt", SECRET_ID, "--as", "g again.txt")
    assert (docs.app / "g again.txt").read_bytes() == b"granted\n"
    assert ref.read_bytes() == b"granted\n", "a new grant opens the older reference again"


# --------------------------------------------------------------------------- the confined view

BWRAP = shutil.which("bwrap")


def bwrap(docs, script):
    assert BWRAP, "bubblewrap is missing (mount-scripts/test.sh installs it)"
    cmd = [BWRAP, "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
           "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
           "--bind", str(docs.app_view), "/app", "--unshare-all", "--die-with-parent", "--chdir", "/app",
           "/usr/bin/python3", "-c", script]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"sandbox failed: {p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_sandbox_given_only_its_view_reaches_nothing_else(docs):
    (docs.store / "shared.txt").write_bytes(b"for the app\n")
    (docs.store / "other.txt").write_bytes(b"not for the app\n")
    docs.notes.joinpath("notes-only.txt").write_bytes(b"another app's\n")
    docs.open("shared.txt")
    (docs.app / "own.txt").write_bytes(b"own doc\n")
    # symlinks the app could try to escape through (made outside the sandbox)
    os.symlink(str(docs.drive.mnt / "Work" / docs.name / "other.txt"), docs.app / "abs-link")
    os.symlink("../../../../Work/" + docs.name + "/other.txt", docs.app / "rel-link")
    n = docs.name
    script = f"""
import os, json, errno
r = {{}}
def attempt(label, fn):
    try:
        v = fn()
        r[label] = v.decode() if isinstance(v, bytes) else v
    except OSError as e:
        r[label] = errno.errorcode[e.errno]
def read(p):
    with open(p, 'rb') as f:
        return f.read()
attempt('own', lambda: read('/app/Documents/{n}/own.txt'))
attempt('ref', lambda: read('/app/Documents/{n}/shared.txt'))
def write_ref():
    with open('/app/Documents/{n}/shared.txt', 'a') as f:
        f.write('edited in the sandbox\\n')
    return 'ok'
attempt('write_ref', write_ref)
attempt('abs_link', lambda: read('/app/Documents/{n}/abs-link'))
attempt('rel_link', lambda: read('/app/Documents/{n}/rel-link'))
attempt('dotdot', lambda: read('/app/../Work/{n}/other.txt'))
attempt('dotdot_notes', lambda: read('/app/../../Notes/{n}/notes-only.txt'))
attempt('top', lambda: sorted(os.listdir('/app')))
attempt('parent', lambda: sorted(os.listdir('/app/..')))
attempt('by_app_notes', lambda: os.listdir('/app/../{NOTES_ID}'))
print(json.dumps(r))
"""
    r = bwrap(docs, script)
    assert r["own"] == "own doc\n"
    assert r["ref"] == "for the app\n"
    assert r["write_ref"] == "ok"
    assert (docs.store / "shared.txt").read_bytes() == b"for the app\nedited in the sandbox\n"
    for k in ("abs_link", "rel_link", "dotdot", "dotdot_notes", "by_app_notes"):
        assert r[k] in ("ENOENT", "EACCES", "ELOOP"), (k, r[k])
    assert r["top"] == ["Data", "Documents", "Inbox"]
    assert "Work" not in r["parent"] and "Notes" not in r["parent"]
    # after a revoke the sandboxed app cannot open the store document any more
    docs.cli("grants", "revoke", "--app", SECRET_ID, f"Work/{n}/shared.txt")
    r = bwrap(docs, script)
    assert r["ref"] == "EACCES" and r["own"] == "own doc\n"


def test_locks_through_a_reference_are_on_its_target(docs):
    target = docs.store / "locked.txt"
    target.write_bytes(b"x\n")
    ref = docs.open("locked.txt")
    holder = subprocess.Popen(["flock", "-x", str(ref), "sleep", "30"], start_new_session=True)
    try:
        assert wait_for(lambda: subprocess.run(["flock", "-n", "-x", str(target), "true"], timeout=10).returncode != 0, timeout=5)
        p = subprocess.run([sys.executable, "-c", "import fcntl,sys\nf=open(sys.argv[1],'r+')\nfcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB)",
                            str(docs.store_backing / "locked.txt")], capture_output=True, timeout=10)
        assert p.returncode == 0, "a flock must not block a POSIX lock (they are separate on Linux)"
    finally:
        os.killpg(holder.pid, 9)  # flock and the sleep that inherited its locked descriptor
        holder.wait(timeout=10)
    assert wait_for(lambda: subprocess.run(["flock", "-n", "-x", str(target), "true"], timeout=10).returncode == 0)
    # POSIX locks too: a lock taken through the reference is seen on the backing target.
    code = "import fcntl,sys,time\nf=open(sys.argv[1],'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(30)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(ref)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        probe = "import fcntl,sys\nf=open(sys.argv[1],'r+')\ntry:\n    fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB)\n    print('free')\nexcept OSError:\n    print('held')"
        out = subprocess.run([sys.executable, "-c", probe, str(docs.store_backing / "locked.txt")], capture_output=True, text=True, timeout=10)
        assert out.stdout.strip() == "held"
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_move_waits_for_an_apps_lock_on_the_document(docs):
    doc = docs.notes / "locked-doc.txt"
    doc.write_bytes(b"being edited\n")
    code = ("import fcntl,sys,time\nf=open(sys.argv[1],'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\n"
            "time.sleep(1.5)\nf.write('saved\\n')\nf.flush()\nopen(sys.argv[2],'w').write(repr(time.time()))\nf.close()")
    marker = docs.drive.base.parent / f"{docs.name}.released"
    holder = subprocess.Popen([sys.executable, "-c", code, str(doc), str(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = docs.json("move", "--app", NOTES_ID, f"Notes/{docs.name}/locked-doc.txt", "--to", f"Work/{docs.name}")
        done = time.time()
    finally:
        holder.wait(timeout=30)
    assert float(marker.read_text()) <= done, "the move ran while the app held its write lock"
    target = Path(r["target_absolute"])
    assert target.read_bytes() == b"saved\nedited\n", "the app's last save before it let go must be what moved"
    assert doc.read_bytes() == target.read_bytes()
