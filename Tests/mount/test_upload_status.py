"""What `docdrive status` tells about uploads, the upload settings of a store, and stores added
or removed while mounted.

Each test uses its own drive (new_drive). Covered: `status --json` shows per store the pending
count and the bytes left of files waiting for a long write-back delay; a file uploaded under a
bandwidth limit shows in `inFlight` with bytes done / total, and `status` on a pseudo-terminal
draws a progress bar line with its name and a percent (plain `status` names it without a bar);
`status --watch` ends when nothing is left; `workers:` is honoured (never more files in flight
than workers, and as many when enough are waiting); bad `workers:`/`bandwidth:` values and
`store add --workers 65` fail with exit 4 and a line-precise sentence; a store added with
`docdrive store add` while mounted shows in the mount and its files reach its remote without a
remount; a store removed while mounted stops being uploaded, `docdrive sync` does not wait for
it and the daemon lives on. Where status comes from: the daemon's answer on the control socket
(no file it writes: with a folder where run/uploads.json was, the upload in flight and the
workers still show), one sentence naming a daemon of another protocol version or one that does
not answer with the rest read from the index, and with no daemon the index read without being
changed. `status --watch --json` is pushed by the daemon (`status-watch`): a line per change of
the uploads, none while idle, ended by itself when nothing is pending; a daemon that cannot push
is said so once on stderr and then asked; with no daemon, one sentence and one drawing.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ddtest import pid_alive, run, wait_until

MARKER = ".docdrive-store"


# --------------------------------------------------------------------------- helpers (as in test_uploads.py)

def add_store(d, name, *options) -> Path:
    """`docdrive store add NAME --name NAME.title() --folder REMOTE OPTIONS...`; returns the remote."""
    remote = d.base / f"{name}-remote"
    d.cli("store", "add", name, "--name", name.title(), "--folder", str(remote), *options)
    assert (remote / MARKER).is_file(), "store add did not write the marker"
    return remote


def status(d) -> dict:
    return json.loads(d.cli("status", "--json", timeout=30).stdout)


def store_status(d, name) -> dict | None:
    return next((s for s in status(d)["stores"] if s["name"] == name), None)


def write(path: Path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def sync(d, timeout=30):
    p = d.cli("sync", "--timeout", str(timeout), timeout=timeout + 30, check=False)
    assert p.returncode == 0, f"sync exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}\nlog:\n{d.log_tail()}"


def on_terminal(d, *args, timeout=30) -> str:
    """Runs `docdrive ARGS` with its stdout on a pseudo-terminal (script(1)); returns what it printed."""
    cmd = " ".join([d.bin, *args])
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], env=d.env(), timeout=timeout,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{cmd} on a terminal exited {p.returncode}: {p.stdout}{p.stderr}"
    return p.stdout


# --------------------------------------------------------------------------- counts and bytes left

@pytest.mark.timeout(90)
def test_status_shows_pending_files_and_bytes_left(new_drive):
    d = new_drive()
    add_store(d, "slow", "--writeback", "30")
    d.mount()
    sizes = {"a.bin": 1000, "sub/b.bin": 20_000, "c.txt": 300_000}
    for rel, n in sizes.items():
        write(d.mnt / "Slow" / rel, os.urandom(n))
    s = wait_until(lambda: (lambda s: s if s and s["uploads"]["pending"] == 3 else None)(store_status(d, "slow")), 10)
    assert s, f"3 pending files expected: {store_status(d, 'slow')}"
    assert s["bytesLeft"] == sum(sizes.values()), s
    assert s["uploads"]["synced"] == 0 and s["failed"] == [] and s["inFlight"] == [], s
    top = status(d)
    assert top["bytesLeft"] >= sum(sizes.values()), top
    text = d.cli("status", timeout=30).stdout
    assert re.search(r"3 pending, 0 uploading, 0 synced, 0 failed; 313\.5 KB left", text), text
    # A file deleted before its upload counts no bytes any more.
    os.unlink(d.mnt / "Slow" / "c.txt")
    assert wait_until(lambda: store_status(d, "slow")["bytesLeft"] == 21_000, 10), store_status(d, "slow")


# --------------------------------------------------------------------------- progress

@pytest.mark.timeout(120)
def test_upload_in_flight_shows_progress_and_a_bar_on_a_terminal(new_drive):
    d = new_drive()
    remote = add_store(d, "big", "--writeback", "0.2", "--bandwidth", "4M")
    d.mount()
    data = os.urandom(24 << 20)  # about 6 s at 4 MB/s
    write(d.mnt / "Big" / "movie.bin", data)

    def moving():
        s = store_status(d, "big")
        f = [u for u in s["inFlight"] if u["path"] == "movie.bin"]
        return f[0] if f and 0 < f[0]["done"] < f[0]["total"] else None

    first = wait_until(moving, 15, 0.1)
    assert first, f"no progress entry for movie.bin: {store_status(d, 'big')}\n{d.log_tail()}"
    assert first["total"] == len(data) and first["store"] == "big" and first["direction"] == "up", first
    top = status(d)
    assert any(u["path"] == "movie.bin" for u in top["inFlight"]), top
    later = wait_until(lambda: (lambda u: u if u and u["done"] > first["done"] else None)(moving()), 10, 0.1)
    assert later, "the bytes done did not grow"

    shown = on_terminal(d, "status")
    assert re.search(r"movie\.bin\s+\[[#-]+\]\s+[\d.]+ [KMG]?B / 24\.0 MB\s+\d{1,3}%", shown), shown
    plain = d.cli("status", timeout=30).stdout
    assert "uploading movie.bin:" in plain and "[#" not in plain, plain

    sync(d, 60)
    assert (remote / "movie.bin").read_bytes() == data
    assert wait_until(lambda: store_status(d, "big")["inFlight"] == [], 5), store_status(d, "big")
    # Nothing is left: --watch draws once and ends.
    watched = on_terminal(d, "status", "--watch", timeout=20)
    assert "0 pending, 0 uploading, 1 synced, 0 failed; 0 B left" in watched, watched


# --------------------------------------------------------------------------- workers

@pytest.mark.timeout(120)
def test_workers_setting_bounds_the_uploads_in_flight(new_drive):
    d = new_drive()
    remote = add_store(d, "two", "--writeback", "0.2", "--workers", "2", "--bandwidth", "1M")
    assert "workers: 2" in (d.home / "config.yaml").read_text()
    d.mount()
    files = {f"f{i}.bin": os.urandom(1 << 20) for i in range(6)}  # 6 MB at 1 MB/s shared
    for name, data in files.items():
        write(d.mnt / "Two" / name, data)
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s = store_status(d, "two")
        seen.append(len(s["inFlight"]))
        if s["uploads"]["synced"] >= 4:
            break
        time.sleep(0.1)
    assert max(seen) == 2, f"files in flight over time with 2 workers: {seen}"
    assert store_status(d, "two")["runningWorkers"] == 2
    assert "two: 2 upload workers" in d.log_path.read_text()
    sync(d, 60)
    for name, data in files.items():
        assert (remote / name).read_bytes() == data, name


@pytest.mark.timeout(60)
def test_bad_upload_settings_are_clear_errors(new_drive):
    d = new_drive()
    config = d.home / "config.yaml"
    good = config.read_text()
    lines = good.splitlines()
    i = next(n for n, l in enumerate(lines) if l.strip().startswith("workers:"))
    for bad, what in (("workers: 0", "workers"), ("workers: 65", "workers"), ("workers: many", "workers"),
                      ("bandwidth: fast", "bandwidth"), ("bandwidth: 10", "bandwidth")):
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        changed = lines[:i] + [indent + bad] + lines[i + 1:]
        config.write_text("\n".join(changed) + "\n")
        p = d.cli("store", "list", check=False)
        assert p.returncode == 4, (bad, p.returncode, p.stderr)
        assert f"line {i + 1}" in p.stderr and what in p.stderr, (bad, p.stderr)
    config.write_text(good)
    p = d.cli("store", "add", "many", "--folder", str(d.base / "many-remote"), "--workers", "65", check=False)
    assert p.returncode == 4 and "between 1 and 64" in p.stderr, (p.returncode, p.stderr)
    p = d.cli("store", "add", "fast", "--folder", str(d.base / "fast-remote"), "--bandwidth", "lots", check=False)
    assert p.returncode == 4 and "--bandwidth" in p.stderr, (p.returncode, p.stderr)
    assert config.read_text() == good, "a refused store add changed the config"


# --------------------------------------------------------------------------- stores added and removed while mounted

@pytest.mark.timeout(90)
def test_store_added_while_mounted_is_uploaded_without_remount(new_drive):
    d = new_drive()
    d.mount()
    pid = d.pid
    remote = add_store(d, "late", "--writeback", "0.2", "--workers", "3")
    assert wait_until(lambda: (d.mnt / "Late").is_dir(), 10), os.listdir(d.mnt)
    data = os.urandom(500_000)
    write(d.mnt / "Late" / "docs" / "new.bin", data)
    sync(d, 30)
    assert (remote / "docs" / "new.bin").read_bytes() == data, "the file did not reach the new store's remote"
    assert d.pid == pid and pid_alive(pid), "the daemon was restarted"
    assert wait_until(lambda: store_status(d, "late").get("runningWorkers") == 3, 5), store_status(d, "late")
    assert "late: 3 upload workers" in d.log_path.read_text()


@pytest.mark.timeout(90)
def test_store_removed_while_mounted_stops_uploading(new_drive):
    d = new_drive()
    remote = add_store(d, "gone", "--writeback", "3")
    d.mount()
    write(d.mnt / "Gone" / "early.txt", b"uploaded before the removal\n")
    sync(d, 30)
    assert (remote / "early.txt").is_file()
    write(d.mnt / "Gone" / "later.txt", b"saved right before the removal\n")
    assert wait_until(lambda: store_status(d, "gone")["uploads"]["pending"] == 1, 5), store_status(d, "gone")
    d.cli("store", "remove", "gone")
    assert wait_until(lambda: not (d.mnt / "Gone").exists(), 10), os.listdir(d.mnt)
    time.sleep(5)  # past the write-back delay: an upload would have happened by now
    assert not (remote / "later.txt").exists(), "a removed store was still uploaded"
    sync(d, 20)  # nothing waits for the removed store
    assert pid_alive(d.pid), f"the daemon died:\n{d.log_tail()}"
    s = status(d)
    assert all(st["name"] != "gone" for st in s["stores"]), s
    assert s["uploads"]["pending"] == 0, s
    # The other store still uploads.
    write(d.mnt / "Work" / "still.txt", b"work goes on\n")
    sync(d, 30)
    assert (d.remote / "still.txt").read_bytes() == b"work goes on\n"


# --------------------------------------------------------------------------- where status comes from

def fake_daemon_socket(d, answer: bytes | None):
    """Puts a socket that is not the daemon's at run/control.sock (the daemon's aside): it reads
    a request line and answers `answer`, or closes without a word (None). Returns a function
    that puts the daemon's socket back."""
    import socket
    import threading
    run_dir = d.home / "run"
    real, aside = run_dir / "control.sock", run_dir / "control.sock.daemon"
    os.rename(real, aside)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        srv.bind(f"/proc/self/fd/{folder}/control.sock")  # the drive home's path may be longer than a socket's
    finally:
        os.close(folder)
    srv.listen(8)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                c.settimeout(5)
                got = b""
                while not got.endswith(b"\n"):
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                if answer is not None:
                    c.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def restore():
        stop.set()
        srv.close()
        t.join(5)
        os.unlink(real)
        os.rename(aside, real)
    return restore


@pytest.mark.timeout(120)
def test_status_asks_the_daemon_not_a_file_it_wrote(new_drive):
    """With the daemon mounted, `docdrive status` shows what the daemon holds in memory (the
    upload in flight with its progress, the store's running workers) from its answer on the
    control socket. Before, these came from run/uploads.json, which the daemon rewrote: with a
    folder in that file's place (so that it cannot be written) status showed no upload in flight
    and no workers. The daemon writes no such file any more."""
    d = new_drive()
    remote = add_store(d, "big", "--writeback", "0.2", "--bandwidth", "2M", "--workers", "3")
    run_dir = d.home / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "uploads.json").mkdir()  # where the daemon used to publish its uploads: not writable as a file
    d.mount()
    data = os.urandom(12 << 20)  # about 6 s at 2 MB/s
    write(d.mnt / "Big" / "movie.bin", data)

    def moving():
        s = store_status(d, "big")
        f = [u for u in s["inFlight"] if u["path"] == "movie.bin"]
        return (s, f[0]) if f and 0 < f[0]["done"] < f[0]["total"] else None

    got = wait_until(moving, 20, 0.1)
    assert got, f"no progress entry for movie.bin: {store_status(d, 'big')}\n{d.log_tail()}"
    s, up = got
    assert up["total"] == len(data) and up["direction"] == "up", up
    assert s["runningWorkers"] == 3, s
    assert s["uploads"]["uploading"] + s["uploads"]["pending"] >= 1 and s["bytesLeft"] > 0, s
    top = status(d)
    assert top["mounted"] is True and "daemonProblem" not in top, top
    assert any(u["path"] == "movie.bin" for u in top["inFlight"]), top
    text = d.cli("status", timeout=30).stdout
    assert "uploading movie.bin:" in text and "could not be asked" not in text, text
    sync(d, 60)
    assert (remote / "movie.bin").read_bytes() == data
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("uploads")) == ["uploads.json"], os.listdir(run_dir)
    assert (run_dir / "uploads.json").is_dir() and not any((run_dir / "uploads.json").iterdir())
    assert d.unmount().returncode == 0


@pytest.mark.timeout(120)
def test_a_daemon_that_cannot_be_asked_is_named_and_the_rest_read_from_the_index(new_drive):
    """A daemon of another control protocol version, or one that does not answer: `docdrive
    status` says so in one sentence and shows the rest from the index (read-only)."""
    d = new_drive()
    d.mount()
    write(d.mnt / "Work" / "a.txt", b"a\n")
    sync(d, 30)
    restore = fake_daemon_socket(d, b'{"version":2,"ok":true,"result":{"references":[]}}\n')
    try:
        s = status(d)
        text = d.cli("status", timeout=30).stdout
    finally:
        restore()
    mismatch = "This docdrive speaks control protocol 3 but the mounted daemon speaks 2; remount the drive after upgrading."
    assert s["daemonProblem"] == mismatch and s["mounted"] is True, s
    assert s["items"] >= 1 and s["uploads"]["synced"] >= 1, s
    work = next(st for st in s["stores"] if st["name"] == "work")
    assert "runningWorkers" not in work and "sync" not in work and work["uploads"]["synced"] >= 1, work
    assert text.count(mismatch) == 1 and "References:" not in text, text
    restore = fake_daemon_socket(d, None)
    try:
        s = status(d)
    finally:
        restore()
    assert s["daemonProblem"].startswith("The daemon could not be asked (") and s["daemonProblem"].endswith(
        "); what follows is read from the index."), s
    assert s["uploads"]["synced"] >= 1, s
    # The daemon's own socket answers again.
    s = status(d)
    assert "daemonProblem" not in s and next(st for st in s["stores"] if st["name"] == "work")["runningWorkers"] >= 1, s
    assert d.unmount().returncode == 0


@pytest.mark.timeout(90)
def test_status_without_a_daemon_leaves_the_index_as_it_is(new_drive):
    """With no daemon, `docdrive status` reads the index opened read-only: index.sqlite keeps
    its bytes and its time (nothing migrated, nothing written), and what it shows is there."""
    d = new_drive()
    slow_remote = add_store(d, "slow", "--writeback", "60")
    d.mount()
    write(d.mnt / "Work" / "a.txt", b"a\n")
    sync(d, 30)
    (slow_remote / MARKER).unlink()  # the store's remote cannot be reached: its file stays queued
    write(d.mnt / "Slow" / "later.bin", os.urandom(5000))
    assert wait_until(lambda: store_status(d, "slow")["uploads"]["pending"] == 1, 10), store_status(d, "slow")
    assert d.unmount().returncode == 0
    index = d.home / "index.sqlite"
    before = (index.stat().st_mtime_ns, index.read_bytes())
    s = status(d)
    text = d.cli("status", timeout=30).stdout
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before, "docdrive status changed index.sqlite"
    assert s["mounted"] is False and "daemonProblem" not in s and s["items"] >= 2, s
    slow = next(st for st in s["stores"] if st["name"] == "slow")
    assert slow["uploads"]["pending"] + slow["uploads"]["failed"] == 1 and "runningWorkers" not in slow, slow
    assert s["uploads"]["synced"] >= 1 and s["references"] == [] and s["inFlight"] == [], s
    assert "Mounted: no" in text and "References:" not in text, text


# --------------------------------------------------------------------------- status --watch: pushed by the daemon

@pytest.mark.timeout(120)
def test_status_watch_json_is_pushed_on_each_change_and_silent_while_idle(new_drive):
    """`docdrive status --watch --json` asks the daemon's `status-watch`: one JSON object per line,
    a line when the uploads change (saves queued, then uploaded), none while nothing changes (2 s
    of a store waiting for its write-back delay), and it ends by itself once nothing is pending."""
    import threading
    d = new_drive()
    remote = add_store(d, "slow", "--writeback", "5")
    d.mount()
    write(d.mnt / "Slow" / "a.txt", b"a\n")
    assert wait_until(lambda: (store_status(d, "slow")["uploads"]["pending"] >= 1) or None, 10, 0.1), store_status(d, "slow")
    proc = subprocess.Popen([d.bin, "status", "--watch", "--json"], env=d.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    lines: list[tuple[float, dict]] = []
    err: list[str] = []

    def read():
        for raw in proc.stdout:
            lines.append((time.monotonic(), json.loads(raw)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    try:
        def slow(obj):
            return next(s for s in obj["stores"] if s["name"] == "slow")["uploads"]
        assert wait_until(lambda: lines or None, 10, 0.05), f"no first line; stderr: {err}"
        assert slow(lines[0][1])["pending"] == 1, lines[0]
        # Two more saves: pushed lines count them (the queue takes them within the group commit).
        write(d.mnt / "Slow" / "b.txt", b"b\n")
        write(d.mnt / "Slow" / "c.txt", b"c\n")
        assert wait_until(lambda: any(slow(o)["pending"] == 3 for _, o in lines) or None, 10, 0.05), \
            f"no pushed line with 3 pending: {[slow(o) for _, o in lines]}; stderr: {err}\n{d.log_tail()}"
        saved = time.monotonic()
        # Idle: the files wait for their write-back delay (5 s after the last save); nothing changes.
        time.sleep(1.0)
        quiet_from = len(lines)
        time.sleep(2.0)
        idle = [o for t, o in lines[quiet_from:]]
        assert not idle, f"lines pushed while nothing changed: {[slow(o) for o in idle]}"
        assert time.monotonic() - saved < 4.5, "the idle window must end before the uploads are due"
        # Then the uploads: pushed as they go, until a line with nothing pending ends the watch.
        assert proc.wait(timeout=30) == 0, f"status --watch exited {proc.returncode}; stderr: {err}"
        reader.join(5)
        assert lines[-1][1]["uploads"]["pending"] == 0 and slow(lines[-1][1])["synced"] == 3, lines[-1]
        assert all(o["mounted"] for _, o in lines) and "daemonProblem" not in lines[-1][1], lines[-1]
        assert len(lines) >= 3 and len(lines) < 40, [slow(o) for _, o in lines]
        assert not any("every half second" in e for e in err), err
        assert sorted(p.name for p in remote.iterdir() if not p.name.startswith(".")) == ["a.txt", "b.txt", "c.txt"]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, 9)
            proc.wait(5)
    assert d.unmount().returncode == 0


def watch_threads(pid) -> int:
    """The daemon's threads that serve a `status-watch` (DriveStatus.watchThreadName)."""
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            n += Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() == "dd-status-watch"
        except OSError:
            pass  # the thread ended while it was listed
    return n


@pytest.mark.timeout(90)
def test_status_watch_of_a_command_gone_ends_on_a_drive_where_nothing_changes(new_drive):
    """A `status --watch` killed while the drive is idle: the daemon's thread that served it ends
    within DriveStatus.goneCommandCheck (5 s), not at the next change (none comes here)."""
    d = new_drive()
    add_store(d, "slow", "--writeback", "60", "--poll", "3600")
    d.mount()
    # (A file waits a minute for its upload, so the command watches on: it ends when nothing waits.)
    write(d.mnt / "Slow" / "a.txt", b"a\n")
    assert wait_until(lambda: (store_status(d, "slow")["uploads"]["pending"] >= 1) or None, 10, 0.1), store_status(d, "slow")
    proc = subprocess.Popen([d.bin, "status", "--watch", "--json"], env=d.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, stdin=subprocess.DEVNULL)
    try:
        # Given a watching command (it got its first line), on a drive where nothing changes,
        first = proc.stdout.readline()
        assert json.loads(first)["uploads"]["pending"] == 1, first
        assert wait_until(lambda: watch_threads(d.pid) == 1 or None, 10, 0.1), watch_threads(d.pid)
    finally:
        # when the command is killed,
        os.kill(proc.pid, 9)
        proc.wait(5)
    # then its thread in the daemon ends within the check's 5 s (and a second of leeway).
    t0 = time.monotonic()
    assert wait_until(lambda: watch_threads(d.pid) == 0 or None, 8, 0.1), \
        f"{watch_threads(d.pid)} watching threads {time.monotonic() - t0:.1f} s after the command was killed"
    print(f"the watching thread ended {time.monotonic() - t0:.1f} s after its command was killed")
    assert d.unmount().returncode == 0


@pytest.mark.timeout(60)
def test_status_watch_without_a_daemon_says_so_once(new_drive):
    """With the drive not mounted, `--watch` says so in one sentence and shows the status once."""
    d = new_drive()
    p = d.cli("status", "--watch", timeout=30, check=False)
    assert p.returncode == 0, p
    assert "Mounted: no" in p.stdout and p.stdout.count("Drive:") == 1, p.stdout
    assert p.stderr.strip() == "docdrive: The drive is not mounted, so nothing changes to watch: this is its status as the index has it.", p.stderr


@pytest.mark.timeout(90)
def test_status_watch_of_a_daemon_that_cannot_push_says_so_once_and_asks(new_drive):
    """A daemon of protocol 3 from before `status-watch` answers it `badRequest`: `--watch` says
    in one line on stderr that it asks every half second instead, and does (here: once, as
    nothing is left to upload)."""
    d = new_drive()
    d.mount()
    write(d.mnt / "Work" / "a.txt", b"a\n")
    sync(d, 30)
    restore = fake_daemon_socket(d, b'{"version":3,"ok":false,"code":"badRequest","error":"Unknown request \\"status-watch\\"."}\n')
    try:
        p = d.cli("status", "--watch", "--json", timeout=30, check=False)
    finally:
        restore()
    assert p.returncode == 0, p
    assert p.stderr.splitlines() == [
        "docdrive: The mounted daemon cannot push its status (it is older than this docdrive); asking it every half second instead."], p.stderr
    objects = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(objects) == 1 and objects[0]["uploads"]["synced"] >= 1 and objects[0]["uploads"]["pending"] == 0, objects
    assert d.unmount().returncode == 0
