"""Real tools on the mount: coreutils, tar, cp -a, diff -r, git, rsync, vim, python3 (sqlite,
zipfile, shutil), and advisory locks. Everything is checked against a native source or copy."""
import fcntl
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile

import pytest

from ddtest import run


def tree_listing(root):
    """Path, type+mode, size, mtime (s), symlink target of every entry: what cp -a / tar keep."""
    p = run(["find", ".", "-printf", r"%P|%M|%s|%T@|%l|%U|%G\n"], cwd=root, timeout=120)
    out = []
    for line in p.stdout.splitlines():
        path, mode, size, mtime, link, uid, gid = line.split("|")
        if mode.startswith("d"):
            size = "-"  # folder sizes are filesystem layout, not content
        out.append((path, mode, size, mtime.split(".")[0], link, uid, gid))
    return sorted(out)


@pytest.fixture(scope="module")
def include_tar(base_dir):
    """A tarball of /usr/include (thousands of files, symlinks, a deep tree), made natively."""
    tar = base_dir / "usr-include.tar"
    if not tar.exists():
        run(["tar", "-C", "/usr", "--format=posix", "-cf", str(tar), "include"], timeout=240)
    return tar


@pytest.mark.timeout(300)
def test_tar_extract_compare_cp_a_and_diff(t, include_tar):
    run(["tar", "-C", str(t.mnt), "-xf", str(include_tar)], timeout=240)
    p = run(["tar", "-C", str(t.mnt), "--compare", "-f", str(include_tar)], timeout=240, check=False)
    assert p.returncode == 0, (p.stdout + p.stderr)[:3000]
    run(["diff", "-r", "--no-dereference", "/usr/include", str(t.mnt / "include")], timeout=240)
    assert tree_listing(t.mnt / "include") == tree_listing("/usr/include")
    # and out again with cp -a
    run(["cp", "-a", str(t.mnt / "include"), str(t.native / "include")], timeout=240)
    run(["diff", "-r", "--no-dereference", str(t.mnt / "include"), str(t.native / "include")], timeout=240)
    assert tree_listing(t.native / "include") == tree_listing(t.mnt / "include")
    # a tarball made from the mount equals one made from the native copy (content and metadata)
    run(["tar", "-C", str(t.mnt), "--format=posix", "--pax-option=delete=atime,delete=ctime", "--sort=name",
         "-cf", str(t.native / "from-mount.tar"), "include"], timeout=240)
    run(["tar", "-C", str(t.native), "--format=posix", "--pax-option=delete=atime,delete=ctime", "--sort=name",
         "-cf", str(t.native / "from-native.tar"), "include"], timeout=240)
    assert sha(t.native / "from-mount.tar") == sha(t.native / "from-native.tar")
    shutil.rmtree(t.mnt / "include")
    assert not (t.backing / "include").exists()


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.timeout(120)
def test_coreutils(t):
    m, n = t.mnt, t.native
    script = r"""
set -e
cd "$1"
printf 'line %s\n' $(seq 1 2000) > lines
sort -r -o lines lines
head -3 lines > head3
split -l 500 lines part.
cat part.* | sort -r | cmp - lines
cp lines copy && cp -p lines copy-p && cp -a lines copy-a
mv copy moved
ln -s moved sym && ln moved hard
touch -d '2001-02-03 04:05:06.123456789' moved
truncate -s 100000 grown
dd if=/dev/zero of=dd.bin bs=4096 count=8 status=none
printf 'XYZ' | dd of=dd.bin bs=1 seek=5000 conv=notrunc status=none
mkdir -p a/b/c && touch a/b/c/f && chmod -R go-rwx a
install -m 750 lines installed
rm part.aa
rmdir a/b/c 2>/dev/null || true
wc -c lines dd.bin grown | tail -1
stat -c '%n %s %a %h %F' moved hard sym copy-p dd.bin grown installed a a/b a/b/c/f | sort
date -r moved +%s.%N
readlink sym
find . -newer head3 -type f | sort
du -s --apparent-size --block-size=1 . | cut -f1
ls -lA --time-style=+ | awk '{print $1, $2, $5, $NF}' | sort
"""
    outs = [run(["bash", "-c", script, "bash", str(base)], timeout=120, check=False) for base in (m, n)]
    assert outs[0].returncode == 0, outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    assert outs[0].stderr == outs[1].stderr == ""
    assert (m / "dd.bin").read_bytes() == (n / "dd.bin").read_bytes()


@pytest.mark.timeout(120)
def test_cp_sparse_and_large_file_checksums(t):
    big = t.native / "random.bin"
    big.write_bytes(os.urandom(48 * 1024 * 1024))
    run(["cp", str(big), str(t.mnt / "random.bin")], timeout=120)
    assert sha(t.mnt / "random.bin") == sha(big)
    assert sha(t.backing / "random.bin") == sha(big)
    run(["cp", "--reflink=auto", str(t.mnt / "random.bin"), str(t.mnt / "random2.bin")], timeout=120)
    assert sha(t.mnt / "random2.bin") == sha(big)
    # sparse: 2 GiB with a little data, copied in and out keeps holes and content
    sparse = t.native / "sparse.img"
    with open(sparse, "wb") as f:
        f.write(b"head")
        f.seek(1 << 30)
        f.write(b"middle")
        f.truncate(2 << 30)
    run(["cp", "--sparse=always", str(sparse), str(t.mnt / "sparse.img")], timeout=120)
    st = os.stat(t.mnt / "sparse.img")
    assert st.st_size == 2 << 30 and st.st_blocks * 512 < 64 << 20
    run(["cp", "--sparse=always", str(t.mnt / "sparse.img"), str(t.native / "back.img")], timeout=120)
    run(["cmp", str(sparse), str(t.native / "back.img")], timeout=120)
    assert os.stat(t.native / "back.img").st_blocks * 512 < 64 << 20


@pytest.mark.timeout(180)
def test_git_init_commit_status_checkout_and_clone(t, base_dir):
    env = dict(os.environ, HOME=str(t.native), GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="T", GIT_AUTHOR_EMAIL="t@e",
               GIT_COMMITTER_NAME="T", GIT_COMMITTER_EMAIL="t@e", GIT_TERMINAL_PROMPT="0")

    def git(*args, cwd, check=True):
        return run(["git", *args], cwd=cwd, env=env, timeout=120, check=check)

    repo = t.mnt / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    for i in range(50):
        (repo / f"file{i}.txt").write_text(f"content {i}\n" * (i + 1))
    (repo / "sub").mkdir()
    (repo / "sub" / "script.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(repo / "sub" / "script.sh", 0o755)
    os.symlink("file1.txt", repo / "link")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "first", cwd=repo)
    assert git("status", "--porcelain", cwd=repo).stdout == ""
    (repo / "file3.txt").write_text("changed\n")
    os.unlink(repo / "file4.txt")
    assert sorted(git("status", "--porcelain", cwd=repo).stdout.splitlines()) == [" D file4.txt", " M file3.txt"]
    git("checkout", "-q", "-b", "feature", cwd=repo)
    git("commit", "-q", "-am", "second", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)
    assert (repo / "file3.txt").read_text() == "content 3\n" * 4
    assert (repo / "file4.txt").exists()
    git("merge", "-q", "feature", cwd=repo)
    assert not (repo / "file4.txt").exists()
    assert git("status", "--porcelain", cwd=repo).stdout == ""
    git("gc", "-q", cwd=repo)
    git("fsck", "--full", "--strict", cwd=repo)
    assert git("rev-list", "--count", "HEAD", cwd=repo).stdout.strip() == "2"
    # clone a native repository into the mount, and the mount's repository out
    src = t.native / "src"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    for i in range(20):
        (src / f"n{i}").write_text(str(i) * 1000)
        git("add", f"n{i}", cwd=src)
        git("commit", "-q", "-m", f"c{i}", cwd=src)
    git("clone", "-q", str(src), str(t.mnt / "clone"), cwd=t.mnt)
    assert git("status", "--porcelain", cwd=t.mnt / "clone").stdout == ""
    git("fsck", "--full", cwd=t.mnt / "clone")
    assert git("log", "--format=%s", cwd=t.mnt / "clone").stdout.split() == [f"c{i}" for i in reversed(range(20))]
    git("clone", "-q", "--no-hardlinks", str(repo), str(t.native / "out"), cwd=t.native)
    run(["diff", "-r", "--exclude=.git", str(repo), str(t.native / "out")], timeout=60)


@pytest.mark.timeout(180)
def test_rsync_in_and_out(t):
    src = t.native / "src"
    (src / "d" / "e").mkdir(parents=True)
    for i in range(200):
        (src / "d" / f"f{i}").write_bytes(os.urandom(i * 37))
    (src / "d" / "e" / "big").write_bytes(os.urandom(3 << 20))
    os.symlink("d/f1", src / "sym")
    os.link(src / "d" / "f2", src / "hard")
    os.mkfifo(src / "fifo")
    os.chmod(src / "d" / "f3", 0o4711)
    os.setxattr(src / "d" / "f5", "user.tag", b"tagged")
    os.utime(src / "d" / "f6", ns=(1_000_000_000, 1_234_567_891))
    os.chown(src / "d" / "f7", 1000, 2000)
    run(["rsync", "-aHX", f"{src}/", f"{t.mnt / 'dst'}/"], timeout=120)
    p = run(["rsync", "-aHX", "-n", "-i", "--checksum", f"{src}/", f"{t.mnt / 'dst'}/"], timeout=120)
    assert p.stdout.strip() == "", p.stdout
    dst = t.mnt / "dst"
    assert os.stat(dst / "hard").st_ino == os.stat(dst / "d" / "f2").st_ino
    assert os.getxattr(dst / "d" / "f5", "user.tag") == b"tagged"
    assert os.stat(dst / "d" / "f6").st_mtime_ns == 1_234_567_891
    assert oct(os.stat(dst / "d" / "f3").st_mode) == oct(os.stat(src / "d" / "f3").st_mode)
    assert (os.stat(dst / "d" / "f7").st_uid, os.stat(dst / "d" / "f7").st_gid) == (1000, 2000)
    # change some files, sync again (delta transfer, temp files renamed into place)
    with open(src / "d" / "e" / "big", "r+b") as f:
        f.seek(1 << 20)
        f.write(b"patched" * 100)
    os.utime(src / "d" / "e" / "big", (2_000_000_000, 2_000_000_000))  # rsync compares whole seconds
    os.unlink(src / "d" / "f9")
    run(["rsync", "-aHX", "--delete", f"{src}/", f"{dst}/"], timeout=120)
    assert sha(dst / "d" / "e" / "big") == sha(src / "d" / "e" / "big")
    assert not (dst / "d" / "f9").exists()
    run(["rsync", "-aHX", f"{dst}/", f"{t.native / 'back'}/"], timeout=120)
    run(["diff", "-r", "--no-dereference", "--exclude=fifo", str(src), str(t.native / "back")], timeout=60)
    assert tree_listing(src) == tree_listing(t.native / "back")


VIM = shutil.which("vim")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backupcopy", ["yes", "no", "auto"])
def test_vim_edits_a_file(t, backupcopy):
    assert VIM, "vim is not installed (apt-get install vim)"
    p = t.mnt / "notes.txt"
    p.write_text("alpha\nbeta\ngamma\n")
    os.chmod(p, 0o640)
    os.setxattr(p, "user.keep", b"me")
    ino = os.stat(p).st_ino
    r = run([VIM, "-Es", "-N", "-u", "NONE", "-i", "NONE", "-c", f"set backupcopy={backupcopy} backup writebackup",
             "-c", "%s/beta/BETA/", "-c", "$put ='delta'", "-c", "wq", str(p)],
            timeout=30, check=False, env=dict(os.environ, HOME=str(t.native)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert p.read_text() == "alpha\nBETA\ngamma\ndelta\n"
    assert oct(os.stat(p).st_mode & 0o777) == oct(0o640)
    names = sorted(os.listdir(t.mnt))
    assert [n for n in names if n.endswith((".swp", "~"))] == [], names
    if backupcopy == "yes":
        assert os.stat(p).st_ino == ino
        assert os.getxattr(p, "user.keep") == b"me"


@pytest.mark.timeout(120)
def test_python_sqlite_zip_shutil(t):
    for mode in ("wal", "delete"):
        db = t.mnt / f"{mode}.sqlite"
        con = sqlite3.connect(db)
        con.execute(f"PRAGMA journal_mode={mode}")
        con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        with con:
            con.executemany("INSERT INTO t (v) VALUES (?)", [(f"value {i}" * 10,) for i in range(5000)])
        other = sqlite3.connect(db)
        assert other.execute("SELECT COUNT(*), SUM(LENGTH(v)) FROM t").fetchone()[0] == 5000
        with con:
            con.execute("DELETE FROM t WHERE k % 2 = 0")
        assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 2500
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        other.close()
        con.close()
    with zipfile.ZipFile(t.mnt / "a.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(100):
            z.writestr(f"dir/f{i}.txt", f"zip content {i}\n" * 100)
    with zipfile.ZipFile(t.mnt / "a.zip") as z:
        assert z.testzip() is None
        z.extractall(t.mnt / "unzipped")
    assert (t.mnt / "unzipped" / "dir" / "f42.txt").read_text() == "zip content 42\n" * 100
    shutil.copytree(t.mnt / "unzipped", t.mnt / "copied", symlinks=True)
    shutil.copytree(t.mnt / "copied", t.native / "copied")
    run(["diff", "-r", str(t.mnt / "unzipped"), str(t.native / "copied")], timeout=60)
    shutil.rmtree(t.mnt / "copied")
    assert not (t.backing / "copied").exists()
    import tempfile
    with tempfile.NamedTemporaryFile(dir=t.mnt) as f:
        f.write(b"temp")
        f.flush()
        assert open(f.name, "rb").read() == b"temp"
    with tempfile.TemporaryDirectory(dir=t.mnt) as d:
        open(os.path.join(d, "x"), "w").close()
    assert sorted(os.listdir(t.mnt)) == sorted(["wal.sqlite", "delete.sqlite", "a.zip", "unzipped"])


LOCKER = r"""
import fcntl, os, sys, time
path, kind = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if kind == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
else:
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
print("locked", flush=True)
sys.stdin.readline()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["flock", "fcntl"])
def test_advisory_locks_between_processes(t, kind):
    results = []
    for base in (t.mnt, t.native):
        p = base / "locked"
        p.write_bytes(b"x" * 100)
        child = subprocess.Popen([sys.executable, "-c", LOCKER, str(p), kind], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "locked"
            fd = os.open(p, os.O_RDWR)
            try:
                got = []
                try:
                    if kind == "flock":
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    else:
                        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
                    got.append("acquired while held")
                except OSError as e:
                    got.append(e.errno)
                if kind == "fcntl":
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 50)  # a range nobody holds
                    got.append("other range ok")
                child.stdin.write("\n")
                child.stdin.flush()
                child.wait(timeout=10)
                if kind == "flock":
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
                got.append("acquired after release")
                results.append(got)
            finally:
                os.close(fd)
        finally:
            child.kill()
            child.wait(timeout=10)
    assert results[0] == results[1]
    assert results[0][-1] == "acquired after release" and results[0][0] != "acquired while held"
