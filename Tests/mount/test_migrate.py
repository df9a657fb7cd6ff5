"""`docdrive migrate` (issue 18): adopt an existing folder of documents as an app's Documents or
into a store, every item with an id, nothing half-done: rerunning finishes an interrupted run."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from ddtest import NOTES_ID, run, wait_until

pytestmark = pytest.mark.timeout(180)


def make_tree(root: Path, n_files=6) -> dict[str, bytes]:
    """A folder of documents: nested folders, files of several sizes, an empty folder, a link."""
    want = {}
    for i in range(n_files):
        rel = ["report.odt", "notes/todo.md", "notes/old/2019 plan.txt", "photos/été.jpg", "a/b/c/deep.bin", "empty.txt"][i % 6]
        if i >= 6:
            rel = f"many/{i:05d}.txt"
        data = os.urandom([3000, 10, 70_000, 1, 5000, 0][i % 6]) if i < 6 else f"file {i}\n".encode()
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
        want[rel] = data
    (root / "emptydir").mkdir()
    os.symlink("report.odt", root / "link-to-report")
    return want


def tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dp, dn, fn in os.walk(root):
        for n in fn:
            p = Path(dp) / n
            if not p.is_symlink():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_copy_into_an_app_while_unmounted_gives_every_item_an_id(new_drive, tmp_path):
    d = new_drive()
    src = tmp_path / "old-documents"
    want = make_tree(src)
    p = d.cli("migrate", str(src), "--app", NOTES_ID, "--copy", "--json")
    r = json.loads(p.stdout)
    assert r["files"] == len(want) and r["links"] == 1 and r["clashes"] == [] and r["notAdopted"] == []
    dest = d.notes_backing
    assert tree(dest) == want and tree(src) == want, "copy: the source stays, the destination has everything"
    assert os.readlink(dest / "link-to-report") == "report.odt" and (dest / "emptydir").is_dir()
    assert os.stat(dest / "report.odt").st_mtime == os.stat(src / "report.odt").st_mtime
    # Ids were given now (unmounted: in the index), and the mount shows those same ids.
    db = sqlite3.connect(d.home / "index.sqlite")
    ids = dict(db.execute("SELECT ino, id FROM item WHERE root = ?", (f"app:{NOTES_ID}:Documents",)).fetchall())
    db.close()
    assert len(ids) >= len(want) + 2  # files, folders
    d.mount()
    for rel in want:
        ino = os.stat(dest / rel).st_ino
        assert os.getxattr(d.mnt / "Notes" / rel, "user.docdrive.id").decode() == ids[ino], rel
    # Rerun: nothing to do, nothing duplicated.
    again = json.loads(d.cli("migrate", str(src), "--app", NOTES_ID, "--copy", "--json").stdout)
    assert again["files"] == 0 and again["alreadyThere"] == len(want) + 1  # and the link


def test_move_into_a_store_through_the_mount_uploads_it(new_drive, tmp_path):
    d = new_drive()
    d.mount()
    src = tmp_path / "projects"
    want = make_tree(src)
    d.cli("migrate", str(src), "--store", "work", "--into", "Imported")
    dest = d.mnt / "Work" / "Imported"
    assert tree(dest) == want
    assert not any(p.is_file() for p in src.rglob("*")), f"move left files behind: {list(src.rglob('*'))}"
    for rel in want:
        assert len(os.getxattr(dest / rel, "user.docdrive.id")) == 36
    assert d.cli("sync", "--timeout", "60", check=False).returncode == 0
    assert tree(d.remote / "Imported") == want


def test_an_interrupted_run_is_finished_by_the_next(new_drive, tmp_path):
    d = new_drive()
    src = tmp_path / "big"
    want = make_tree(src, n_files=3000)
    for attempt in range(3):
        proc = subprocess.Popen([d.bin, "migrate", str(src), "--app", NOTES_ID, "--copy"], env=d.env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.15 * (attempt + 1))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    p = d.cli("migrate", str(src), "--app", NOTES_ID, "--copy", "--json")
    r = json.loads(p.stdout)
    assert tree(d.notes_backing) == want, "after a rerun the destination must hold every file, whole, once"
    leftovers = [p for p in d.notes_backing.rglob("*") if p.name.endswith(".docdrive-migrating")]
    assert not leftovers, leftovers
    print(f"the last run copied {r['files']} files, {r['alreadyThere']} were there from the killed runs")


def test_a_clash_is_reported_and_nothing_is_overwritten(new_drive, tmp_path):
    d = new_drive()
    src = tmp_path / "src"
    (src).mkdir()
    (src / "same.txt").write_text("mine\n")
    (src / "ok.txt").write_text("fine\n")
    d.notes_backing.mkdir(parents=True, exist_ok=True)
    (d.notes_backing / "same.txt").write_text("theirs\n")
    p = d.cli("migrate", str(src), "--app", NOTES_ID, check=False)
    assert p.returncode != 0
    assert "same.txt was left where it is" in p.stderr
    assert (d.notes_backing / "same.txt").read_text() == "theirs\n" and (src / "same.txt").read_text() == "mine\n"
    assert (d.notes_backing / "ok.txt").read_text() == "fine\n" and not (src / "ok.txt").exists()
    bad = d.cli("migrate", str(d.home / "containers"), "--app", NOTES_ID, check=False)
    assert bad.returncode == 4 and "inside the drive" in bad.stderr
