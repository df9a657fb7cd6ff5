"""`docdrive query` (issue 17): scopes and predicates over a tree made for each test, the private
Data scope kept out of the default results, stitching (changes through the mount within 100 ms,
behind its back within 5 s) and `--watch` output.

Each test works in folders named after itself (`Notes/<n>/`, `Work/<n>/`, the secret app's
`Documents/<n>/` and `Data/<n>/`) and scopes its queries to them or to a word only its files
carry, so other tests' files never match.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import ddtest
from ddtest import NOTES_ID, SECRET_ID

pytestmark = pytest.mark.timeout(120)


class Tree:
    def __init__(self, drive):
        self.drive = drive
        self.n = "q" + uuid.uuid4().hex[:10]
        self.notes = drive.mnt / "Notes" / self.n
        self.work = drive.mnt / "Work" / self.n
        self.secret_docs = drive.mnt / ".by-app" / SECRET_ID / "Documents" / self.n
        self.secret_data = drive.mnt / ".by-app" / SECRET_ID / "Data" / self.n
        for p in (self.notes, self.work, self.secret_docs, self.secret_data):
            p.mkdir()

    def query(self, *args, check=True):
        p = self.drive.cli("query", *args, check=check)
        return p

    def paths(self, *args) -> set[str]:
        """The results as paths relative to the mount root (NUL-separated: the shared drive's
        other tests leave names with newlines in them)."""
        out = [p for p in self.query("-0", *args).stdout.split("\0") if p]
        root = str(self.drive.mnt) + "/"
        assert all(line.startswith(root) for line in out), out
        return {line[len(root):] for line in out}

    def here(self, *args) -> set[str]:
        """Results among this test's folders, as paths relative to them ("Notes/x")."""
        scopes = ["--in", f"Notes/{self.n}", "--in", f"Work/{self.n}",
                  "--in", f".by-app/{SECRET_ID}/Documents/{self.n}", "--in", f".by-app/{SECRET_ID}/Data/{self.n}"]
        return {p.replace(f"/{self.n}/", "/").replace(f".by-app/{SECRET_ID}/", "") for p in self.paths(*scopes, *args)}


def write(p: Path, data: bytes | str = b"x"):
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def wait_until(fn, timeout):
    """Polls fn() until it is true; returns the seconds it took, or None when it never was."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if fn():
            return time.monotonic() - start
        time.sleep(0.01)
    return None


@pytest.fixture
def tree(drive):
    return Tree(drive)


def make_files(t: Tree):
    write(t.notes / "Quarterly Réport.odt", "odt")
    write(t.notes / "notes.txt", "plain text\n")
    write(t.notes / "scan", b"%PDF-1.7\n" + b"\0" * 100)  # a PDF without an extension: its content says so
    write(t.notes / "sub" / "deep.md", "# deep\n")
    write(t.work / "photo.png", b"\x89PNG" + b"\0" * (2 * 1024 * 1024))  # 2 MiB
    write(t.work / "song.mp3", b"ID3" + b"\0" * 1000)
    write(t.work / "clip.mkv", b"\x1a\x45\xdf\xa3" + b"\0" * 1000)
    write(t.work / "budget.ods", "ods")
    write(t.work / "old report.pdf", "%PDF-1.4")
    os.utime(t.work / "old report.pdf", (1577836800, 1577836800))  # 2020-01-01
    write(t.secret_docs / "letter.odt", "letter")
    write(t.secret_data / "cache-report.db", b"\0private")
    tagged = t.notes / "tagged.txt"
    write(tagged, "t")
    os.setxattr(tagged, "user.xdg.tags", b"Urgent,Work")


def test_predicates_over_a_tree(tree):
    t = tree
    make_files(t)
    assert wait_until(lambda: "Notes/tagged.txt" in t.here(), 5) is not None
    everything = t.here()
    # The folders' own contents, the Data folder included because it is named as a scope.
    assert everything == {"Notes/Quarterly Réport.odt", "Notes/notes.txt", "Notes/scan", "Notes/sub", "Notes/sub/deep.md",
                          "Notes/tagged.txt", "Work/photo.png", "Work/song.mp3", "Work/clip.mkv", "Work/budget.ods",
                          "Work/old report.pdf", "Documents/letter.odt", "Data/cache-report.db"}
    # Bare words: case- and accent-insensitive, implicit AND.
    assert t.here("report") == {"Notes/Quarterly Réport.odt", "Work/old report.pdf", "Data/cache-report.db"}
    assert t.here("REPORT", "quarterly") == {"Notes/Quarterly Réport.odt"}
    assert t.here("réport") == t.here("report")
    # name: globs over the whole name.
    assert t.here("name:*.odt") == {"Notes/Quarterly Réport.odt", "Documents/letter.odt"}
    assert t.here("name:s*") == {"Notes/scan", "Notes/sub", "Work/song.mp3"}
    # kind: by extension, and by content when the name has none.
    assert t.here("kind:pdf") == {"Notes/scan", "Work/old report.pdf"}
    assert t.here("kind:image") == {"Work/photo.png"}
    assert t.here("kind:audio|video") == {"Work/song.mp3", "Work/clip.mkv"}
    assert t.here("kind:spreadsheet") == {"Work/budget.ods"}
    assert t.here("kind:folder") == {"Notes/sub"}
    assert t.here("kind:text") == {"Notes/notes.txt", "Notes/sub/deep.md", "Notes/tagged.txt"}
    assert t.here("kind:document", "-kind:text") == {"Notes/Quarterly Réport.odt", "Notes/scan", "Work/budget.ods",
                                                      "Work/old report.pdf", "Documents/letter.odt"}
    # size and kind together, units 1024-based.
    assert t.here("size>1M") == {"Work/photo.png"}
    assert t.here("kind:image", "size<1M") == set()
    assert t.here("size<=3", "-kind:folder") == {"Notes/Quarterly Réport.odt", "Work/budget.ods", "Notes/tagged.txt"}
    # dates: today, a day, an age.
    assert t.here("modified<2021-01-01") == {"Work/old report.pdf"}
    assert "Work/old report.pdf" not in t.here("modified:today")
    assert "Notes/notes.txt" in t.here("modified:today")
    assert "Work/old report.pdf" not in t.here("modified<7d") and "Notes/notes.txt" in t.here("modified<7d")
    assert t.here("modified>7d") == {"Work/old report.pdf"}
    # tags (user.xdg.tags), app and store, OR and parentheses.
    assert t.here("tag:urgent") == {"Notes/tagged.txt"}
    assert t.here("tag:work") == {"Notes/tagged.txt"}
    assert t.here("store:work", "kind:audio") == {"Work/song.mp3"}
    assert t.here(f"app:{SECRET_ID}") == {"Documents/letter.odt", "Data/cache-report.db"}
    assert t.here(f"app:{NOTES_ID}", "(kind:pdf OR tag:urgent)") == {"Notes/scan", "Notes/tagged.txt"}
    assert t.here("NOT", "(kind:text OR kind:folder)", "store:work", "-kind:image", "-kind:audio", "-kind:video") == \
        {"Work/budget.ods", "Work/old report.pdf"}
    # Options: --count, -0, --json, --sort, --limit.
    assert t.query("--in", f"Work/{t.n}", "--count").stdout.strip() == "5"
    out = t.query("--in", f"Work/{t.n}", "-0", "kind:audio").stdout
    assert out == f"{t.drive.mnt}/Work/{t.n}/song.mp3\0"
    items = json.loads(t.query("--in", f"Work/{t.n}", "--json", "kind:image").stdout)
    assert [(i["path"], i["size"], i["kind"], i["store"]) for i in items] == \
        [(f"{t.drive.mnt}/Work/{t.n}/photo.png", 4 + 2 * 1024 * 1024, "image", "work")]
    by_size = t.query("--in", f"Work/{t.n}", "--sort", "size", "--limit", "2").stdout.splitlines()
    assert [Path(p).name for p in by_size] == ["photo.png", "clip.mkv"]
    by_name = t.query("--in", f"Work/{t.n}", "--sort", "name").stdout.splitlines()
    assert [Path(p).name for p in by_name] == ["budget.ods", "clip.mkv", "old report.pdf", "photo.png", "song.mp3"]


def test_scopes(tree, drive):
    t = tree
    make_files(t)
    assert wait_until(lambda: "Notes/tagged.txt" in t.here(), 5) is not None
    word = t.n  # only this test's folders carry it: search the folder names' contents by scope instead
    # Default (documents): every app's Documents and every store, never the private Data.
    default = {p for p in t.paths("report") if t.n in p}
    assert default == {f"Notes/{t.n}/Quarterly Réport.odt", f"Work/{t.n}/old report.pdf"}
    assert not any("/Data/" in p for p in t.paths())
    assert f".by-app/{SECRET_ID}/Documents/{t.n}/letter.odt" in t.paths("letter")
    # data: only the apps' Data.
    data = t.paths("--in", "data", "report")
    assert f".by-app/{SECRET_ID}/Data/{t.n}/cache-report.db" in data
    assert all(p.startswith(".by-app/") and "/Data/" in p for p in data), data
    # A store by name, an app by id, a folder by mount path (absolute, or relative to the root).
    assert {p for p in t.paths("--in", "work", "kind:audio") if word in p} == {f"Work/{t.n}/song.mp3"}
    assert all(p.startswith("Work/") for p in t.paths("--in", "work"))
    secret = t.paths("--in", SECRET_ID)
    assert f".by-app/{SECRET_ID}/Data/{t.n}/cache-report.db" in secret
    assert f".by-app/{SECRET_ID}/Documents/{t.n}/letter.odt" in secret
    assert all(p.startswith(f".by-app/{SECRET_ID}/") for p in secret)
    assert t.paths("--in", str(t.notes / "sub")) == {f"Notes/{t.n}/sub/deep.md"}
    assert t.paths("--in", f"Notes/{t.n}/sub") == {f"Notes/{t.n}/sub/deep.md"}
    assert {p for p in t.paths("--in", "Notes", "deep") if t.n in p} == {f"Notes/{t.n}/sub/deep.md"}
    assert not {p for p in t.paths("--in", "Notes") if t.n in p and not p.startswith("Notes/")}
    # external: references and what they point at.
    drive.cli("open", "--app", SECRET_ID, f"Work/{t.n}/budget.ods", "--into", t.n)
    assert wait_until(lambda: f".by-app/{SECRET_ID}/Documents/{t.n}/budget.ods" in t.paths("external"), 5) is not None
    ext = {p for p in t.paths("--in", "external") if t.n in p}
    assert ext == {f".by-app/{SECRET_ID}/Documents/{t.n}/budget.ods", f"Work/{t.n}/budget.ods"}
    assert {p for p in t.paths("external") if t.n in p} == {f".by-app/{SECRET_ID}/Documents/{t.n}/budget.ods"}
    # A scope that is none of these is one sentence, exit 4.
    p = t.query("--in", "nowhere-at-all", check=False)
    assert p.returncode == 4 and p.stderr.count("\n") == 1 and "nowhere-at-all" in p.stderr, p.stderr


def test_status(tree, drive):
    t = tree
    write(t.work / "fresh.txt", "new")
    write(t.notes / "mine (conflict from laptop 2026-11-22).txt", "c")
    # Just saved in a store: pending until the write-back delay (2 s) has passed.
    assert wait_until(lambda: t.here("status:pending") == {"Work/fresh.txt"}, 1) is not None
    assert "Work/fresh.txt" not in t.here("status:synced")
    assert t.here("status:conflict") == {"Notes/mine (conflict from laptop 2026-11-22).txt"}
    drive.cli("sync", "--timeout", "30")
    assert t.here("status:synced") == {"Work/fresh.txt"}
    assert t.here("status:pending|failed") == set()


def test_the_plain_forms_print_what_the_full_command_finds(tree, drive):
    # Plain, -0 and --count queries are answered before the argument parser starts
    # (QueryFastPath); --json always goes the full way. Both must find the same items, with the
    # options in either spelling and the drive given by --home instead of the environment.
    t = tree
    make_files(t)
    assert wait_until(lambda: "Notes/tagged.txt" in t.here(), 5) is not None
    env = {k: v for k, v in drive.env().items() if k != "DOCDRIVE_HOME"}
    home = ["--home", drive.env()["DOCDRIVE_HOME"]]
    for expr in (["report"], ["kind:image", "OR", "kind:audio"], ["name:*.od?"], []):
        for scopes in ([f"--in=Work/{t.n}"], ["--in", f"Notes/{t.n}", "--in", f"Work/{t.n}"]):
            full = {i["path"] for i in json.loads(t.query(*scopes, "--json", *expr).stdout)}
            plain = subprocess.run([drive.bin, "query", *home, *scopes, *expr], env=env, capture_output=True, text=True)
            assert plain.returncode == 0 and set(plain.stdout.splitlines()) == full, (expr, scopes, plain.stderr)
            nul = t.query(*scopes, "-0", "--", *expr).stdout.split("\0")
            assert nul[-1] == "" and set(nul[:-1]) == full, (expr, scopes)
            assert t.query(*scopes, "--count", *expr).stdout == f"{len(full)}\n"
    by_size = t.query(f"--in=Work/{t.n}", "--sort=size", "--reverse", "--limit=2").stdout.splitlines()
    assert [Path(p).name for p in by_size] == ["budget.ods", "old report.pdf"]
    # An error from the daemon is reported by the full command: one sentence, its exit code.
    p = t.query("--in", "nowhere-at-all", "report", check=False)
    assert p.returncode == 4 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p


def test_the_front_answers_plain_forms_alone_and_hands_the_rest_over(tree, drive, tmp_path):
    # `docdrive` (DocDriveFront) answers the plain forms itself and execs docdrive-full, from its own
    # folder, for everything else. A copy of it alone in a folder (no docdrive-full beside it)
    # still answers plain queries, and says in one sentence what is missing for the rest.
    t = tree
    make_files(t)
    assert wait_until(lambda: "Notes/tagged.txt" in t.here(), 5) is not None
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(os.path.realpath(drive.bin), alone / "docdrive")
    env = drive.env()
    scopes = ["--in", f"Notes/{t.n}", "--in", f"Work/{t.n}"]
    full = {i["path"] for i in json.loads(t.query(*scopes, "--json", "report").stdout)}
    assert full
    p = subprocess.run([alone / "docdrive", "query", *scopes, "report"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and set(p.stdout.splitlines()) == full, p
    p = subprocess.run([alone / "docdrive", "query", *scopes, "--count", "report"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == f"{len(full)}\n", p
    for args in (["query", "--json", "report"], ["--version"], ["status"]):
        p = subprocess.run([alone / "docdrive", *args], env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 1 and p.stdout == "", (args, p)
        assert p.stderr == f"docdrive: cannot run {alone}/docdrive-full: No such file or directory (install docdrive-full beside docdrive)\n", p.stderr
    # Beside it, docdrive-full gets the same arguments, argv[0] included, and its exit codes: the
    # usage error of an unknown command is 64, the usage line names `docdrive`.
    shutil.copy2(Path(os.path.realpath(drive.bin)).parent / "docdrive-full", alone / "docdrive-full")
    p = subprocess.run([alone / "docdrive", "no-such-command"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 64 and "docdrive" in p.stderr, p
    p = subprocess.run(["bash", "-c", '(exec -a my-docdrive "$0" query --json report >/dev/null); echo "$?"', alone / "docdrive"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert p.stdout == "0\n", p


def test_malformed_expressions_exit_4_with_one_sentence(drive):
    for expr in (["colour:red"], ["(report"], ["size>huge"], ["report", "OR"], ["--", "-"], ["modified>someday"]):
        p = drive.cli("query", *expr, check=False)
        assert p.returncode == 4, (expr, p.returncode, p.stderr)
        assert p.stdout == ""
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("docdrive: The query expression is not valid: "), p.stderr
        assert lines[0].endswith("."), lines


def test_stitching_through_the_mount_within_100ms(tree):
    t = tree
    name = f"stitch-{t.n}"
    for step in range(3):
        f = t.notes / f"{name}-{step}.txt"
        write(f, "a")
        time.sleep(0.1)
        assert t.paths(name + f"-{step}") == {f"Notes/{t.n}/{f.name}"}, f"created {f.name}, not found 100 ms later"
    # A rename inside a folder, a write that changes the size, a delete.
    a, b = t.notes / f"{name}-a.txt", t.notes / f"{name}-b.txt"
    write(a, "x")
    time.sleep(0.1)
    os.rename(a, b)
    time.sleep(0.1)
    assert t.paths(f"{name}-a") == set() and t.paths(f"{name}-b") == {f"Notes/{t.n}/{b.name}"}
    with open(b, "ab") as fh:
        fh.write(b"y" * 5000)
    time.sleep(0.1)
    assert t.paths(f"{name}-b", "size>4K") == {f"Notes/{t.n}/{b.name}"}
    os.unlink(b)
    time.sleep(0.1)
    assert t.paths(f"{name}-b") == set()


def test_a_change_behind_the_mounts_back_is_found_within_5s(tree, drive):
    t = tree
    backing = drive.notes_backing / t.n
    name = f"behind-{t.n}"
    write(backing / f"{name}.txt", "written by another program")
    took = wait_until(lambda: t.paths(name) == {f"Notes/{t.n}/{name}.txt"}, 5)
    assert took is not None, "a file written into the backing folder never showed"
    os.makedirs(backing / f"{name}-dir" / "inner")
    write(backing / f"{name}-dir" / "inner" / "leaf.txt", "leaf")
    assert wait_until(lambda: f"Notes/{t.n}/{name}-dir/inner/leaf.txt" in t.paths("leaf"), 5) is not None
    os.rename(backing / f"{name}-dir", backing / f"{name}-moved")
    assert wait_until(lambda: {p for p in t.paths("leaf") if t.n in p} == {f"Notes/{t.n}/{name}-moved/inner/leaf.txt"}, 5) is not None
    # A folder whose name starts as the moved one's does, watched; then the moved one removed with
    # its subfolder: what is written in the first after that is still found, and a folder made
    # again under the removed name is watched again.
    os.makedirs(backing / f"{name}-moved2" / "inner")
    write(backing / f"{name}-moved2" / "inner" / "early.txt", "early")
    assert wait_until(lambda: f"Notes/{t.n}/{name}-moved2/inner/early.txt" in t.paths("early"), 5) is not None
    shutil.rmtree(backing / f"{name}-moved")
    assert wait_until(lambda: not any(t.n in p for p in t.paths("leaf")), 5) is not None, "a removed tree stayed found"
    write(backing / f"{name}-moved2" / "inner" / "late.txt", "late")
    assert wait_until(lambda: f"Notes/{t.n}/{name}-moved2/inner/late.txt" in t.paths("late"), 5) is not None, \
        "a file written in a folder next to a removed one (its name starting the same) was not found"
    os.makedirs(backing / f"{name}-moved" / "inner")
    write(backing / f"{name}-moved" / "inner" / "again.txt", "again")
    assert wait_until(lambda: f"Notes/{t.n}/{name}-moved/inner/again.txt" in t.paths("again"), 5) is not None
    write(backing / f"{name}-moved" / "inner" / "again2.txt", "again")
    assert wait_until(lambda: f"Notes/{t.n}/{name}-moved/inner/again2.txt" in t.paths("again2"), 5) is not None, \
        "a file written later in a folder made again under a removed one's name was not found"
    assert t.paths(f"{name}.txt") == {f"Notes/{t.n}/{name}.txt"}  # still there before the delete
    os.unlink(backing / f"{name}.txt")
    assert wait_until(lambda: t.paths(f"{name}.txt") == set(), 5) is not None


class Watch:
    """`docdrive query --watch` in the background; lines() returns what it printed so far."""

    def __init__(self, drive, *args):
        self.p = subprocess.Popen([drive.bin, "query", "--watch", *args], env=drive.env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.buf = b""

    def read_line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def close(self):
        self.p.terminate()  # what an interrupt does to it
        self.p.wait(timeout=10)


def test_watch_prints_create_rename_and_delete(tree, drive):
    t = tree
    word = f"watch{t.n}"
    write(t.notes / f"{word}-first.txt", "there before")
    time.sleep(0.2)
    w = Watch(drive, word)
    try:
        assert w.read_line(10) == f"{drive.mnt}/Notes/{t.n}/{word}-first.txt"  # the current results first
        time.sleep(0.3)
        start = time.monotonic()
        write(t.notes / f"{word}-a.txt", "new")
        line = w.read_line(5)
        took = time.monotonic() - start
        assert line == f"+ {drive.mnt}/Notes/{t.n}/{word}-a.txt"
        assert took < 0.1, f"--watch reported a create after {took * 1000:.0f} ms"
        os.rename(t.notes / f"{word}-a.txt", t.notes / f"{word}-b.txt")
        assert {w.read_line(5), w.read_line(5)} == {f"- {drive.mnt}/Notes/{t.n}/{word}-a.txt",
                                                   f"+ {drive.mnt}/Notes/{t.n}/{word}-b.txt"}
        with open(t.notes / f"{word}-b.txt", "ab") as fh:
            fh.write(b"more")
        assert w.read_line(5) == f"~ {drive.mnt}/Notes/{t.n}/{word}-b.txt"
        os.unlink(t.notes / f"{word}-b.txt")
        line = w.read_line(5)
        while line == f"~ {drive.mnt}/Notes/{t.n}/{word}-b.txt":  # the close after the write, seen apart
            line = w.read_line(5)
        assert line == f"- {drive.mnt}/Notes/{t.n}/{word}-b.txt"
        # A file that does not match prints nothing.
        write(t.notes / "unrelated.txt", "x")
        assert w.read_line(0.5) is None
    finally:
        w.close()


def test_watch_json_lines(tree, drive):
    t = tree
    word = f"wjson{t.n}"
    w = Watch(drive, "--json", word)
    try:
        time.sleep(0.5)
        write(t.work / f"{word}.pdf", "%PDF")
        ev = json.loads(w.read_line(5))
        assert ev["event"] == "+" and ev["path"] == f"{drive.mnt}/Work/{t.n}/{word}.pdf" and ev["kind"] == "pdf"
        os.unlink(t.work / f"{word}.pdf")
        ev = json.loads(w.read_line(5))
        assert ev == {"event": "-", "path": f"{drive.mnt}/Work/{t.n}/{word}.pdf"}
    finally:
        w.close()
