"""A mounted S3 store against SeaweedFS, checked with a client nobody here wrote (boto3), and
through faults: the server stopped in the middle of a multipart upload and of a download, then
started again on the same port with the same data, and a front that fails requests for a while.

Each test makes its own drive (the mounted suite's `new_drive`, torn down by pid) with a store
"s3" shown as "S3" on a fresh prefix of the test bucket, write-back 0.1 s, poll 0.5 s and 5 MB
parts. The fault tests run their own SeaweedFS (stopped by pid at the end, whatever happened);
in CI a SeaweedFS that cannot start, or start again, fails the test.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "mount"))
from ddtest import pid_alive, wait_until  # noqa: E402
from weed import ACCESS_KEY, REGION, SECRET_KEY, FaultProxy, UnconditionalProxy, Weed, WeedUnavailable, weed_binary  # noqa: E402

STORE = "s3"
POLL = 0.5
# What another tool writes is seen within a second (the tests' boto3 writes); the default is an
# hour, with the change mark telling DocDrive's own writes at once.
RECONCILE = 1
WRITEBACK = 0.1
MiB = 1 << 20


# --------------------------------------------------------------------------- boto3

def _import_boto3():
    """boto3 from this python, else from the SeaweedFS venv (mount-scripts/test.sh makes it with
    the same python3, so its pure-Python packages import here)."""
    try:
        import boto3
        return boto3
    except ImportError:
        pass
    venvs = [HERE.parents[1] / ".venv-weed"]
    if weed_binary():
        venvs.append(Path(weed_binary()).resolve().parent.parent)
    for venv in venvs:
        for sp in venv.glob(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"):
            sys.path.append(str(sp))
            try:
                import boto3
                return boto3
            except ImportError:
                sys.path.remove(str(sp))
    return None


@pytest.fixture
def boto():
    """boto(endpoint) -> a boto3 S3 client; each is closed after the test (its kept-alive
    connections would hold up SeaweedFS's stop by 10 s)."""
    made = []

    def make(endpoint: str):
        made.append(s3_client(endpoint))
        return made[-1]
    yield make
    for c in made:
        c.close()


def s3_client(endpoint: str):
    boto3 = _import_boto3()
    if boto3 is None:
        msg = "boto3 is not installed (mount-scripts/test.sh puts it in .venv-weed)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY,
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"},
                                      connect_timeout=5, read_timeout=60, request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))


def bucket_objects(c, bucket: str, prefix: str) -> dict[str, dict]:
    """The user's objects under the store's prefix (not its marker, not .docdrive/ records)."""
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            rel = o["Key"][len(prefix) + 1:]
            if rel == ".docdrive-store" or rel.startswith(".docdrive/"):
                continue
            out[o["Key"]] = o
    return out


def key_to_rel(prefix: str, key: str) -> bytes:
    """The local path of a key, as README "S3 remotes" says: `~dd~` names are %XX-decoded bytes."""
    parts = []
    for comp in key[len(prefix) + 1:].split("/"):
        parts.append(urllib.parse.unquote_to_bytes(comp[4:]) if comp.startswith("~dd~") else comp.encode())
    return b"/".join(parts)


def bucket_tree(c, bucket: str, prefix: str) -> dict[bytes, bytes]:
    """Files of the store as boto3 reads them (folder markers left out)."""
    return {key_to_rel(prefix, k): c.get_object(Bucket=bucket, Key=k)["Body"].read()
            for k in bucket_objects(c, bucket, prefix) if not k.endswith("/")}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------- a device

class S3Device:
    """A drive (the mounted suite's) with the store "s3" on `endpoint`, prefix `prefix`."""

    def __init__(self, d, weed: Weed, endpoint: str, prefix: str, *store_args: str):
        self.d = d
        self.prefix = prefix
        d.extra_env.update(weed.env({}))
        d.extra_env["DOCDRIVE_LOG_LEVEL"] = os.environ.get("DOCDRIVE_LOG_LEVEL", "info")
        d.cli("store", "add", STORE, "--name", "S3", "--s3", endpoint, "--bucket", weed.bucket, "--prefix", prefix,
              "--path-style", "--writeback", str(WRITEBACK), "--poll", str(POLL), "--part-size", "5M",
              *(() if "--reconcile" in store_args else ("--reconcile", str(RECONCILE))), *store_args,
              timeout=120)

    @property
    def dir(self) -> Path:
        return self.d.mnt / "S3"

    @property
    def downloads(self) -> Path:
        return self.d.home / "stores" / STORE / "downloads"

    def path(self, rel: bytes) -> bytes:
        return os.path.join(os.fsencode(self.dir), rel)

    def device_id(self) -> str:
        return json.loads(self.d.cli("status", "--json", timeout=60).stdout)["device"]["id"]

    def mount(self) -> "S3Device":
        self.d.mount()
        assert self.dir.is_dir(), os.listdir(self.d.mnt)
        return self

    def sync(self, timeout=120, check=0):
        p = self.d.cli("sync", "--timeout", str(timeout), timeout=timeout + 60, check=False)
        if check is not None:
            assert p.returncode == check, (f"docdrive sync exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}\n"
                                           f"daemon log:\n{self.d.log_tail(60)}")
        return p

    def store_status(self) -> dict:
        st = json.loads(self.d.cli("status", "--json", timeout=60).stdout)
        return [s for s in st["stores"] if s["name"] == STORE][0]

    def in_flight(self, name: str) -> dict | None:
        """The upload of `name` as the daemon tells `docdrive status --json` (done, total), if any."""
        p = self.d.cli("status", "--json", timeout=60, check=False)
        if p.returncode != 0:
            return None
        return next((u for u in json.loads(p.stdout)["inFlight"] if u["store"] == STORE and u["path"].endswith(name)), None)

    def tree(self) -> dict[bytes, bytes]:
        out = {}
        root = os.fsencode(self.dir)
        for dirpath, _, filenames in os.walk(root):
            for n in filenames:
                p = os.path.join(dirpath, n)
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
        return out


def save(path: bytes, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def read(path: bytes) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def new_prefix() -> str:
    return f"mount-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def own_weed(tmp_path):
    """A SeaweedFS of this test alone (it is stopped and started again); stopped by pid at the end."""
    w = Weed(tmp_path / "weed")
    try:
        w.start()
    except WeedUnavailable as e:
        w.stop()
        if os.environ.get("CI") == "true":
            pytest.fail(f"SeaweedFS could not start: {e}")
        pytest.skip(f"SeaweedFS could not start: {e}")
    yield w
    w.halt(signal.SIGKILL)  # its data goes with tmp_path (SIGTERM can take SeaweedFS 10 s)
    w.stop()
    assert w.proc is None


def restart(w: Weed):
    try:
        w.restart()
    except WeedUnavailable as e:
        pytest.fail(f"SeaweedFS did not start again on port {w.port} with its data: {e}")


def wait_offline(dev: S3Device, timeout=40) -> dict:
    """Waits until status --json says the store is offline; returns its sync state."""
    got = wait_until(lambda: (lambda s: s if s.get("offline") else None)(dev.store_status()["sync"]), timeout, 0.3)
    assert got, f"status never said offline within {timeout} s: {dev.store_status()['sync']}\n{dev.d.log_tail()}"
    assert got.get("offlineSince") and got.get("offlineReason"), got
    return got


# --------------------------------------------------------------------------- 1. interoperability

@pytest.mark.timeout(240)
def test_boto3_reads_what_the_mount_saved_and_the_mount_sees_what_boto3_wrote(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    dev = S3Device(new_drive(), weed, weed.endpoint, prefix).mount()
    # Given files saved through the mount: plain, accented (with a space and a %), a name that
    # is not UTF-8, one in a folder, and one larger than the 5 MB part size,
    files = {
        b"plain.txt": b"plain\n",
        "Été final 100%.txt".encode(): b"accents\n",
        b"caf\xe9.txt": b"latin-1 name\n",
        b"Reports/q3.odt": os.urandom(70_000),
        b"big.bin": os.urandom(12 * MiB),
    }
    for rel, data in files.items():
        save(dev.path(rel), data)
    dev.sync()
    # then boto3 finds exactly those objects, at the keys README "S3 remotes" gives, byte for
    # byte, each with the file's item id and this device's id (mtime and mode: the next test),
    keys = {b"plain.txt": "plain.txt", "Été final 100%.txt".encode(): "Été final 100%.txt",
            b"caf\xe9.txt": "~dd~caf%E9.txt", b"Reports/q3.odt": "Reports/q3.odt", b"big.bin": "big.bin"}
    objects = bucket_objects(c, weed.bucket, prefix)
    assert {k for k in objects if not k.endswith("/")} == {f"{prefix}/{k}" for k in keys.values()}, sorted(objects)
    assert {k for k in objects if k.endswith("/")} <= {f"{prefix}/Reports/"}, sorted(objects)
    for rel, key in keys.items():
        o = c.get_object(Bucket=weed.bucket, Key=f"{prefix}/{key}")
        body, meta = o["Body"].read(), o["Metadata"]
        assert len(body) == len(files[rel]) and sha(body) == sha(files[rel]), key
        assert meta.get("docdrive-id") == os.getxattr(dev.path(rel), "user.docdrive.id").decode(), (key, meta)
        assert meta.get("docdrive-device") == dev.device_id(), (key, meta)
    # (the large one went up in parts: a multipart ETag is "md5-of-part-md5s-PARTS")
    etag = objects[f"{prefix}/big.bin"]["ETag"].strip('"')
    assert etag.endswith("-3"), f"big.bin (12 MiB, 5 MB parts) has the ETag {etag}: not a 3-part upload"

    # When boto3 writes a new object (rclone's mtime, in a new folder), one with an encoded
    # non-UTF-8 name, overwrites one and deletes another,
    t0 = time.monotonic()
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/Inbox/from boto3.txt", Body=b"written by boto3\n",
                 Metadata={"mtime": "1700000000.25"})
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/~dd~na%EFve.txt", Body=b"latin-1 from boto3\n")
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/plain.txt", Body=b"overwritten by boto3\n")
    c.delete_object(Bucket=weed.bucket, Key=f"{prefix}/Reports/q3.odt")
    # then the mount shows each change within a few poll intervals, without `docdrive sync`,
    want = {b"Inbox/from boto3.txt": b"written by boto3\n", b"na\xefve.txt": b"latin-1 from boto3\n",
            b"plain.txt": b"overwritten by boto3\n", b"Reports/q3.odt": None}
    arrived = wait_until(lambda: all(read(dev.path(r)) == v for r, v in want.items()), 20, 0.1)
    took = time.monotonic() - t0
    assert arrived, {r: (read(dev.path(r)) or b"")[:40] for r in want} | {"log": dev.d.log_tail()}
    print(f"boto3's create, overwrite and delete seen in the mount after {took:.2f} s (poll {POLL} s)")
    assert os.stat(dev.path(b"Inbox/from boto3.txt")).st_mtime_ns == 1_700_000_000_250_000_000
    # (boto3's objects carry no mode: they show 0644, as rclone shows them)
    assert stat.S_IMODE(os.stat(dev.path(b"Inbox/from boto3.txt")).st_mode) == 0o644
    assert sorted(os.listdir(dev.downloads) if dev.downloads.exists() else []) == []
    # and `docdrive sync` finds both sides agreeing: the mount and the bucket hold the same files.
    dev.sync()
    assert dev.tree() == bucket_tree(c, weed.bucket, prefix)
    assert dev.store_status()["conflicts"] == []
    # A file another tool wrote with a content type and metadata of its own, renamed through the
    # mount, keeps both at its new key (a move copies the object with what it carries).
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/page.html", Body=b"<p>hi</p>\n", ContentType="text/html",
                 Metadata={"owner": "web team"})
    assert wait_until(lambda: read(dev.path(b"page.html")) == b"<p>hi</p>\n", 20, 0.1), dev.d.log_tail()
    os.rename(dev.path(b"page.html"), dev.path(b"index.html"))
    dev.sync()
    h = c.head_object(Bucket=weed.bucket, Key=f"{prefix}/index.html")
    assert h["ContentType"] == "text/html" and h["Metadata"].get("owner") == "web team", h
    assert "page.html" not in {k.rsplit("/", 1)[-1] for k in bucket_objects(c, weed.bucket, prefix)}


@pytest.mark.timeout(120)
def test_an_object_another_tool_named_with_a_tab_is_left_unshown_and_untouched(weed, new_drive, boto):
    # DocDrive writes a name with a control character escaped (~dd~tab%09name.txt). Shown as it
    # is, another tool's "tab\tname.txt" would open, save and delete that other key: it is not
    # shown, never touched, and the log says so.
    c = boto(weed.endpoint)
    prefix = new_prefix()
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/tab\tname.txt", Body=b"the other tool's\n")
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/sub\nfolder/inside.txt", Body=b"inside\n")
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/ok.txt", Body=b"ok\n")
    dev = S3Device(new_drive(), weed, weed.endpoint, prefix).mount()
    dev.sync()
    assert read(dev.path(b"ok.txt")) == b"ok\n"
    assert sorted(os.listdir(dev.dir)) == ["ok.txt"], os.listdir(dev.dir)
    log = dev.d.log_tail(200)
    assert "2 objects" in log and "not shown here and left on the remote untouched" in log, log
    # A file of that name made here goes to the escaped key, and its delete takes only that one.
    save(dev.path(b"tab\tname.txt"), b"mine\n")
    dev.sync()
    objects = bucket_objects(c, weed.bucket, prefix)
    assert c.get_object(Bucket=weed.bucket, Key=f"{prefix}/~dd~tab%09name.txt")["Body"].read() == b"mine\n", sorted(objects)
    os.unlink(dev.path(b"tab\tname.txt"))
    dev.sync()
    objects = bucket_objects(c, weed.bucket, prefix)
    assert f"{prefix}/~dd~tab%09name.txt" not in objects, sorted(objects)
    assert c.get_object(Bucket=weed.bucket, Key=f"{prefix}/tab\tname.txt")["Body"].read() == b"the other tool's\n"
    assert c.get_object(Bucket=weed.bucket, Key=f"{prefix}/sub\nfolder/inside.txt")["Body"].read() == b"inside\n"
    assert sorted(os.listdir(dev.dir)) == ["ok.txt"], os.listdir(dev.dir)


@pytest.mark.timeout(120)
def test_files_saved_through_the_mount_carry_their_mtime_and_mode(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    dev = S3Device(new_drive(), weed, weed.endpoint, prefix).mount()
    files = {b"small.txt": b"small\n", b"caf\xe9.txt": b"latin-1 name\n", b"big.bin": os.urandom(6 * MiB)}
    for rel, data in files.items():
        save(dev.path(rel), data)
    os.chmod(dev.path(b"small.txt"), 0o600)
    os.utime(dev.path(b"caf\xe9.txt"), ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    dev.sync()
    wrong = []
    for rel, key in {b"small.txt": "small.txt", b"caf\xe9.txt": "~dd~caf%E9.txt", b"big.bin": "big.bin"}.items():
        meta = c.head_object(Bucket=weed.bucket, Key=f"{prefix}/{key}")["Metadata"]
        st = os.stat(dev.path(rel))
        ns = st.st_mtime_ns
        want = {"docdrive-mtime": str(ns), "mtime": f"{ns // 10**9}.{ns % 10**9:09d}",  # rclone's form
                "docdrive-mode": format(st.st_mode & 0o7777, "o")}
        if {k: meta.get(k) for k in want} != want:
            wrong.append((key, want, meta))
    assert wrong == [], "objects without the file's mtime and mode (want, got):\n" + "\n".join(map(repr, wrong))


@pytest.mark.timeout(120)
def test_a_new_file_never_replaces_an_object_written_since_the_last_listing(weed, new_drive, boto):
    # A file made through the mount that the bucket's last listing did not have goes up
    # create-only without a look at the bucket first (one request per new file): an object
    # another tool wrote at that key since must be refused the write, seen, and kept.
    c = boto(weed.endpoint)
    prefix = new_prefix()
    dev = S3Device(new_drive(), weed, weed.endpoint, prefix, "--poll", "3600").mount()  # no poll but the mount's
    # Given an object written after the mount listed the bucket,
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/plan.txt", Body=b"written by boto3\n")
    # when a file of that name is saved through the mount,
    save(dev.path(b"plan.txt"), b"saved through the mount\n")
    # then its upload finds the object there (no `docdrive sync`, which would list first): it is
    # kept here as a conflict copy, and the saved file goes over it only now that it was seen.
    copy = wait_until(lambda: next((n for n in os.listdir(dev.dir) if "(conflict from " in n), None), 20, 0.1)
    assert copy, f"no conflict copy: {sorted(os.listdir(dev.dir))}\n{dev.d.log_tail()}"
    dev.sync()
    assert read(dev.path(os.fsencode(copy))) == b"written by boto3\n"
    assert bucket_tree(c, weed.bucket, prefix) == {b"plan.txt": b"saved through the mount\n",
                                                    os.fsencode(copy): b"written by boto3\n"}


# --------------------------------------------------------------------------- 2a. stopped during an upload

@pytest.mark.timeout(300)
def test_server_stopped_during_a_multipart_upload_loses_nothing(own_weed, new_drive, boto):
    w = own_weed
    c = boto(w.endpoint)
    prefix = new_prefix()
    # 12 MB/s: the 60 MB file takes about 5 s in 12 parts, 4 at once.
    dev = S3Device(new_drive(), w, w.endpoint, prefix, "--bandwidth", "12M").mount()
    data = os.urandom(60 * MiB)
    key = f"{prefix}/big.bin"
    save(dev.path(b"big.bin"), data)
    # When SeaweedFS is stopped (SIGTERM, by pid) once a third of the file is up,
    up = wait_until(lambda: (lambda u: u if u and u["done"] >= 20 * MiB else None)(dev.in_flight("big.bin")), 60, 0.05)
    assert up, f"the upload never reached 20 MiB\n{dev.d.log_tail()}"
    in_progress = [u["Key"] for u in c.list_multipart_uploads(Bucket=w.bucket, Prefix=prefix + "/").get("Uploads", [])]
    assert key in in_progress, (in_progress, up)
    t_stop = time.monotonic()
    w.halt(signal.SIGTERM)
    stopped_at = dev.in_flight("big.bin")
    print(f"SeaweedFS stopped in {time.monotonic() - t_stop:.1f} s with {up['done']} of {up['total']} bytes sent "
          f"(then {stopped_at})")
    assert up["done"] < up["total"]
    try:
        # then the store is offline in `docdrive status`, the file stays whole in the mount,
        # and `docdrive sync` says offline and fails,
        t_stop = time.monotonic()
        state = wait_offline(dev)
        print(f"offline after {time.monotonic() - t_stop:.1f} s: {state['offlineReason']}")
        assert sha(read(dev.path(b"big.bin"))) == sha(data)
        # (--timeout 30: the look at the remote that `sync` asks for first takes the S3 client's
        # retries, about 7 s, before the store is known offline.)
        p = dev.sync(timeout=30, check=None)
        assert p.returncode != 0 and "offline" in (p.stdout + p.stderr).lower(), (p.returncode, p.stdout, p.stderr)
    finally:
        # and when it runs again on the same port with the same data,
        restart(w)
    # the upload goes again and boto3 reads the whole file,
    dev.sync(timeout=180)
    assert dev.store_status()["sync"]["offline"] is False
    o = c.get_object(Bucket=w.bucket, Key=key)
    body = o["Body"].read()
    assert len(body) == len(data) and sha(body) == sha(data), f"{len(body)} bytes of {len(data)}"
    assert o["Metadata"].get("docdrive-id") == os.getxattr(dev.path(b"big.bin"), "user.docdrive.id").decode()
    assert sorted(bucket_objects(c, w.bucket, prefix)) == [key]
    # and the multipart upload the stop broke is aborted at the next mount (README: the
    # device's records under PREFIX/.docdrive/uploads/; removeStaleUploads at start).
    dev.d.unmount()
    dev.mount()

    def leftovers():
        mp = c.list_multipart_uploads(Bucket=w.bucket, Prefix=prefix + "/").get("Uploads", [])
        records = c.list_objects_v2(Bucket=w.bucket, Prefix=f"{prefix}/.docdrive/uploads/").get("Contents", [])
        return [u["Key"] for u in mp] + [r["Key"] for r in records]
    assert wait_until(lambda: not leftovers(), 20, 0.3), (leftovers(), dev.d.log_tail())
    assert sha(read(dev.path(b"big.bin"))) == sha(data)


# --------------------------------------------------------------------------- 2b. stopped during a download

class SlowRelay:
    """A TCP relay on loopback to `target_port` that passes the server's bytes at `rate` bytes/s
    per connection (requests at full speed), so that a 60 MB download lasts long enough for the
    server to be stopped in its middle. When the server's side closes or breaks, the client's
    connection is closed; when the server refuses, the client's connection is closed at once."""

    def __init__(self, target_port: int, rate: int):
        self.target = target_port
        self.rate = rate
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self.stopped.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket):
        try:
            up = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            client.close()
            return
        up.settimeout(None)
        with self.lock:
            self.conns += [client, up]

        def close_both():
            for s in (client, up):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

        def pump(src, dst, rate):
            start, sent = time.monotonic(), 0
            try:
                while True:
                    chunk = src.recv(64 * 1024)
                    if not chunk:
                        break
                    dst.sendall(chunk)
                    if rate:
                        sent += len(chunk)
                        ahead = sent / rate - (time.monotonic() - start)
                        if ahead > 0:
                            time.sleep(ahead)
            except OSError:
                pass
            close_both()

        threading.Thread(target=pump, args=(client, up, 0), daemon=True).start()
        pump(up, client, self.rate)

    def stop(self):
        self.stopped.set()
        self.sock.close()
        with self.lock:
            for s in self.conns:
                try:
                    s.close()
                except OSError:
                    pass


class Watcher(threading.Thread):
    """Looks at a path in the mount every 20 ms: every size seen, and whether any was partial."""

    def __init__(self, path: bytes, data: bytes):
        super().__init__(daemon=True)
        self.path, self.size, self.digest = path, len(data), sha(data)
        self.done = threading.Event()
        self.partial: list[str] = []
        self.looks = 0
        self.first_whole: float | None = None

    def run(self):
        while not self.done.is_set():
            self.looks += 1
            try:
                size = os.stat(self.path).st_size
            except FileNotFoundError:
                size = None
            except OSError as e:
                self.partial.append(f"stat: {e!r}")
                size = None
            if size is not None and size != self.size:
                self.partial.append(f"{size} bytes of {self.size}")
            elif size is not None and self.first_whole is None:
                self.first_whole = time.monotonic()
                got = read(self.path)
                if got is None or sha(got) != self.digest:
                    self.partial.append(f"first read: {len(got or b'')} bytes, not the object's content")
            self.done.wait(0.02)


@pytest.mark.timeout(300)
def test_server_stopped_during_a_download_never_shows_a_partial_file(own_weed, new_drive, boto):
    w = own_weed
    c = boto(w.endpoint)
    prefix = new_prefix()
    relay = SlowRelay(w.port, rate=8 * MiB)  # a 60 MB download lasts about 8 s
    watcher = None
    try:
        dev = S3Device(new_drive(), w, relay.endpoint, prefix).mount()
        data = os.urandom(60 * MiB)
        watcher = Watcher(dev.path(b"movie.bin"), data)
        watcher.start()
        # When another client puts a 60 MB object and the daemon starts downloading it,
        c.put_object(Bucket=w.bucket, Key=f"{prefix}/movie.bin", Body=data, Metadata={"mtime": "1700000000.5"})

        def downloading():
            try:
                sizes = [e.stat().st_size for e in os.scandir(dev.downloads)]
            except FileNotFoundError:
                return None
            return max(sizes) if sizes and max(sizes) >= 10 * MiB else None
        got = wait_until(downloading, 60, 0.02)
        assert got, f"no download of 10 MiB seen\n{dev.d.log_tail()}"
        # and SeaweedFS is killed (SIGKILL, by pid) in its middle,
        w.halt(signal.SIGKILL)
        print(f"SeaweedFS killed with {got} of {len(data)} bytes downloaded")
        assert got < len(data)
        try:
            # then the store goes offline, and the file is not in the mount (not half of it),
            state = wait_offline(dev)
            print(f"offline: {state['offlineReason']}")
            sizes = [e.stat().st_size for e in os.scandir(dev.downloads)] if dev.downloads.exists() else []
            assert not os.path.exists(dev.path(b"movie.bin")), f"movie.bin is in the mount while the server is down; downloads: {sizes}"
            assert all(s < len(data) for s in sizes), sizes
        finally:
            # and when SeaweedFS runs again on the same port with the same data,
            restart(w)
        # the file arrives whole (never partial at any look), with the object's mtime,
        dev.sync(timeout=180)
        assert sha(read(dev.path(b"movie.bin"))) == sha(data)
        watcher.done.set()
        watcher.join(5)
        assert watcher.partial == [], watcher.partial[:10]
        assert watcher.first_whole is not None and watcher.looks > 50, (watcher.looks, watcher.first_whole)
        assert os.stat(dev.path(b"movie.bin")).st_mtime_ns == 1_700_000_000_500_000_000
        assert dev.store_status()["sync"]["offline"] is False
        # and no download file is left behind.
        assert (os.listdir(dev.downloads) if dev.downloads.exists() else []) == []
    finally:
        if watcher:
            watcher.done.set()
        relay.stop()


# --------------------------------------------------------------------------- 2c. a failing front

@pytest.mark.timeout(300)
def test_requests_failing_for_a_while_are_retried_and_nothing_is_lost(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    proxy = FaultProxy(weed.port)  # fails 3 requests in 4 (503, 500 after the write, cut downloads)
    try:
        proxy.failing = False  # `store add` checks the server through it; the faults start after
        dev = S3Device(new_drive(), weed, proxy.endpoint, prefix).mount()
        save(dev.path(b"Old/moved.txt"), b"moved while failing\n")
        save(dev.path(b"gone.txt"), b"deleted while failing\n")
        dev.sync()
        proxy.failing = True
        # Given objects another client puts (three over 1 MiB, which the front may cut short),
        # saves through the mount (small files, one in parts), a move and a delete, all while 3
        # requests in 4 fail,
        put = {b"Inbox/note.txt": b"from boto3\n", **{f"Inbox/scan-{i}.pdf".encode(): os.urandom(2 * MiB + i) for i in range(3)}}
        for rel, data in put.items():
            c.put_object(Bucket=weed.bucket, Key=f"{prefix}/{rel.decode()}", Body=data)
        saved = {f"Letters/letter-{i:02d}.txt".encode(): f"letter {i}\n".encode() * (i + 1) for i in range(8)}
        saved[b"album.bin"] = os.urandom(12 * MiB)
        saved["Été.txt".encode()] = b"accents\n"
        for rel, data in saved.items():
            save(dev.path(rel), data)
        os.makedirs(dev.path(b"New"))
        os.rename(dev.path(b"Old/moved.txt"), dev.path(b"New/moved.txt"))
        os.unlink(dev.path(b"gone.txt"))
        saved[b"New/moved.txt"] = b"moved while failing\n"
        # when it keeps failing for 15 s (up to 40 s, until boto3's objects have arrived),
        t0 = time.monotonic()
        p = dev.sync(timeout=15, check=None)
        wait_until(lambda: time.monotonic() - t0 > 15 and all(read(dev.path(r)) == d for r, d in put.items()),
                   max(1.0, 40 - (time.monotonic() - t0)), 0.2)
        faults, cuts = proxy.faults, proxy.cuts
        arrived = sum(read(dev.path(r)) == d for r, d in put.items())
        partial = [r for r, d in put.items() if read(dev.path(r)) not in (None, d)]
        print(f"during {time.monotonic() - t0:.0f} s of faults: docdrive sync --timeout 15 exited {p.returncode}; "
              f"{faults} of {proxy.count} requests failed, {cuts} downloads cut, {arrived} of {len(put)} objects arrived")
        assert faults >= 20, faults
        assert partial == [], partial
        # and then answers again,
        proxy.failing = False
        dev.sync(timeout=180)
        # then every save is in the bucket byte for byte and every object in the mount, with
        # no conflict copy and no failed file.
        want = {**saved, **put}
        remote = bucket_tree(c, weed.bucket, prefix)
        local = dev.tree()
        assert sorted(remote) == sorted(want), (f"bucket - want: {sorted(set(remote) - set(want))}, "
                                                f"want - bucket: {sorted(set(want) - set(remote))}, "
                                                f"mount - want: {sorted(set(local) - set(want))}\n{dev.d.log_tail(80)}")
        bad = [r for r in want if sha(remote[r]) != sha(want[r])]
        assert bad == [], bad
        assert sorted(local) == sorted(want), (sorted(set(local) ^ set(want)), dev.d.log_tail(80))
        assert [r for r in want if sha(local[r]) != sha(want[r])] == []
        st = dev.store_status()
        assert st["conflicts"] == [] and st["failed"] == [] and st["uploads"]["failed"] == 0, st
    finally:
        proxy.stop()


@pytest.mark.timeout(300)
def test_an_idle_store_sends_no_request_and_a_remote_back_is_retried_at_once(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    proxy = FaultProxy(weed.port)
    try:
        proxy.failing = False
        dev = S3Device(new_drive(), weed, proxy.endpoint, prefix, "--poll", "3600").mount()
        save(dev.path(b"first.txt"), b"one\n")
        dev.sync()
        # Given a store with nothing to upload and no poll due for an hour,
        time.sleep(1)  # the window starts after the last answers of the sync
        before = proxy.count
        # when five seconds pass,
        time.sleep(5)
        idle = proxy.count - before
        # then the device asked the server nothing (the store's marker is checked after a
        # failure only: it was a HEAD four times a second, 20 in this window).
        print(f"{idle} requests in 5 s of an idle store")
        assert idle == 0, f"{idle} requests in 5 s of an idle store\n{dev.d.log_tail(20)}"
        # Given a server that refuses every request, and a save meanwhile, whose upload fails,
        proxy.failing = lambda method, path: True
        save(dev.path(b"second.txt"), b"two\n")
        assert wait_until(lambda: f"sync of second.txt with {STORE} failed" in dev.d.log_tail(200), 120, 0.2), dev.d.log_tail(40)
        # when it answers again,
        proxy.failing = False
        # then the device finds it back by itself (no poll is due), and the save goes up.
        assert wait_until(lambda: f"store {STORE}: remote reachable again; retrying now" in dev.d.log_tail(200), 30, 0.2), dev.d.log_tail(40)
        assert wait_until(lambda: f"{prefix}/second.txt" in bucket_objects(c, weed.bucket, prefix), 60, 0.2), dev.d.log_tail(40)
    finally:
        proxy.stop()


@pytest.mark.timeout(240)
def test_an_idle_poll_is_one_head_of_the_change_mark_and_another_devices_save_comes_at_once(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    for i in range(40):
        c.put_object(Bucket=weed.bucket, Key=f"{prefix}/Old/f{i:02}.txt", Body=f"file {i}\n".encode())
    proxy = FaultProxy(weed.port)
    seen = []
    proxy.failing = lambda method, path: seen.append((method, path)) and False
    try:
        # Given two devices on a store of 40 objects, with the default reconcile (an hour),
        # A's requests counted,
        a = S3Device(new_drive(), weed, proxy.endpoint, prefix, "--reconcile", "1h").mount()
        b = S3Device(new_drive(), weed, weed.endpoint, prefix, "--reconcile", "1h").mount()
        a.sync()
        b.sync()
        time.sleep(1)
        # when five seconds pass with nothing saved anywhere (ten polls),
        seen.clear()
        time.sleep(5)
        idle = list(seen)
        # then each poll of A was one HEAD of the store's change mark: no listing.
        mark = f"/{weed.bucket}/{prefix}/.docdrive/changes"
        print(f"{len(idle)} requests in 5 s of an idle device (poll {POLL} s)")
        assert 5 <= len(idle) <= 12 and all(r == ("HEAD", mark) for r in idle), idle
        # (`docdrive status` says when A last listed the bucket whole, before its last look, and
        # so by when another tool's writes show: an hour after it)
        sync = a.store_status()["sync"]
        assert sync["lastListing"] < sync["lastPoll"] - 4, sync
        assert "listed whole at" in a.d.cli("status", timeout=60).stdout and "(reconcile 1 h)" in a.d.cli("status", timeout=60).stdout
        # When B saves a file, A shows it within a few polls (B's batch rewrote the mark),
        save(b.path(b"from-b.txt"), b"saved on B\n")
        start = time.monotonic()
        assert wait_until(lambda: os.path.exists(a.path(b"from-b.txt")), 30, 0.05), a.d.log_tail(30)
        print(f"B's save shown on A after {time.monotonic() - start:.2f} s (writeback {WRITEBACK} s, poll {POLL} s)")
        assert open(a.path(b"from-b.txt"), "rb").read() == b"saved on B\n"
        # and what another tool writes, which leaves the mark as it is, comes with `docdrive
        # sync` (a whole listing), as it would at the reconcile.
        c.put_object(Bucket=weed.bucket, Key=f"{prefix}/foreign.txt", Body=b"from boto3\n")
        a.sync()
        assert open(a.path(b"foreign.txt"), "rb").read() == b"from boto3\n"
    finally:
        proxy.stop()


@pytest.mark.timeout(240)
def test_another_devices_saves_renames_and_deletes_come_through_the_journal_without_a_listing(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    for i in range(40):
        c.put_object(Bucket=weed.bucket, Key=f"{prefix}/Old/f{i:02}.txt", Body=f"file {i}\n".encode())
    proxy = FaultProxy(weed.port)
    seen = []
    proxy.failing = lambda method, path: seen.append((method, path)) and False
    try:
        # Given two devices on a store of 40 objects, with the default reconcile (an hour), A's
        # requests counted,
        a = S3Device(new_drive(), weed, proxy.endpoint, prefix, "--reconcile", "1h").mount()
        b = S3Device(new_drive(), weed, weed.endpoint, prefix, "--reconcile", "1h").mount()
        save(b.path(b"Old/mine.txt"), b"made on B before\n")  # (an item id of DocDrive's own)
        b.sync()
        a.sync()
        b.sync()
        time.sleep(1)
        seen.clear()
        # when B saves a new file in a new folder, edits one, renames one and deletes one,
        save(b.path(b"New/deep/made.txt"), b"made on B\n")
        save(b.path(b"Old/f01.txt"), b"edited on B\n")
        os.rename(b.path(b"Old/mine.txt"), b.path(b"Old/renamed.txt"))
        os.unlink(b.path(b"Old/f03.txt"))
        b.sync()

        def arrived():
            try:
                return (open(a.path(b"New/deep/made.txt"), "rb").read() == b"made on B\n"
                        and open(a.path(b"Old/f01.txt"), "rb").read() == b"edited on B\n"
                        and os.path.exists(a.path(b"Old/renamed.txt")) and not os.path.exists(a.path(b"Old/mine.txt"))
                        and not os.path.exists(a.path(b"Old/f03.txt")))
            except FileNotFoundError:
                return False
        # then A shows all four by itself,
        assert wait_until(arrived, 30, 0.1), a.d.log_tail(40)
        # having listed the store's journal, never the store (its 40 objects; a look whether a
        # changed path is a folder lists at most one key under it),
        listings = [p for m, p in seen if m == "GET" and "list-type=2" in p]
        print(f"A's requests until it showed B's changes: {len(seen)}, listings: {listings}")
        assert any(f"prefix={prefix}%2F.docdrive%2Fjournal%2F&" in p for p in listings), listings
        whole = [p for p in listings if f"prefix={prefix}%2F&" in p or "max-keys=1&" not in p + "&" and "journal" not in p]
        assert not whole, whole
        # `docdrive status` says when A last read the journal (after its last whole listing),
        sync = a.store_status()["sync"]
        assert sync["lastListing"] < sync["lastJournal"] <= sync["lastPoll"], sync
        assert "journal read at" in a.d.cli("status", timeout=60).stdout
        # and the rename kept the item's id (a move, not a delete and a new file).
        assert os.getxattr(a.path(b"Old/renamed.txt"), "user.docdrive.id") == os.getxattr(b.path(b"Old/renamed.txt"), "user.docdrive.id"), a.d.log_tail(60) + "\n---- B\n" + b.d.log_tail(60)
    finally:
        proxy.stop()


@pytest.mark.timeout(240)
def test_a_garbled_journal_object_is_named_once_and_the_store_is_listed_instead(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    # Given two devices on one store, with the default reconcile (an hour),
    a = S3Device(new_drive(), weed, weed.endpoint, prefix, "--reconcile", "1h").mount()
    b = S3Device(new_drive(), weed, weed.endpoint, prefix, "--reconcile", "1h").mount()
    a.sync()
    b.sync()
    time.sleep(1)
    # when another tool puts a journal object that is not one (a name of now, a body of junk)
    # and B then saves a file,
    name = f"{int(time.time() * 1000):013d}-0123456789abcdef0123456789abcdef-0000000001"
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/.docdrive/journal/{name}", Body=b"\x00garbage{")
    save(b.path(b"after-junk.txt"), b"saved on B\n")
    # then A still shows B's file by itself (it lists the store instead),
    assert wait_until(lambda: os.path.exists(a.path(b"after-junk.txt")), 30, 0.1), a.d.log_tail(40)
    assert open(a.path(b"after-junk.txt"), "rb").read() == b"saved on B\n"
    # and says once which object it could not use, and why.
    lines = [l for l in a.d.log_tail(400).splitlines() if name in l]
    assert len(lines) == 1 and "cannot be used: it is not a journal object" in lines[0] and "listed whole instead" in lines[0], lines
    # Its next change comes through the journal again (the bad object is passed).
    save(b.path(b"later.txt"), b"later\n")
    assert wait_until(lambda: os.path.exists(a.path(b"later.txt")), 30, 0.1), a.d.log_tail(40)
    assert len([l for l in a.d.log_tail(400).splitlines() if name in l]) == 1, a.d.log_tail(60)


@pytest.mark.timeout(240)
def test_an_item_id_the_journal_shows_at_a_second_path_is_healed_by_a_listing(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    # Given a device on a store with a file of DocDrive's (the default reconcile: an hour),
    a = S3Device(new_drive(), weed, weed.endpoint, prefix, "--reconcile", "1h").mount()
    save(a.path(b"dup/a.txt"), b"one item\n")
    a.sync()
    the_id = c.head_object(Bucket=weed.bucket, Key=f"{prefix}/dup/a.txt")["Metadata"]["docdrive-id"]
    time.sleep(1)
    # when another device's changes cross so that its item id is at a second path too (here:
    # a copy with its metadata, named in a journal object as that device would),
    c.copy_object(Bucket=weed.bucket, Key=f"{prefix}/dup/b.txt", CopySource={"Bucket": weed.bucket, "Key": f"{prefix}/dup/a.txt"})
    other = "fedcba9876543210fedcba9876543210"
    entry = {"format": "docdrive-journal 1", "device": other, "changes": [{"op": "put", "path": "dup/b.txt", "id": the_id}]}
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/.docdrive/journal/{int(time.time() * 1000):013d}-{other}-0000000001",
                 Body=json.dumps(entry).encode())
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/.docdrive/changes", Body=b"DocDrive change mark 2\nby the test\n")

    def remote_ids():
        return [c.head_object(Bucket=weed.bucket, Key=f"{prefix}/dup/{n}")["Metadata"].get("docdrive-id") for n in ("a.txt", "b.txt")]

    # then A shows the second path, and heals the id by itself: the two paths are two items on
    # the remote and here, each with the same id on both sides.
    assert wait_until(lambda: os.path.exists(a.path(b"dup/b.txt")), 30, 0.1), a.d.log_tail(40)
    assert wait_until(lambda: len(set(remote_ids())) == 2, 30, 0.2), f"{remote_ids()}\n{a.d.log_tail(40)}"
    ids = remote_ids()
    assert the_id in ids, ids
    assert wait_until(lambda: [os.getxattr(a.path(b"dup/" + n), "user.docdrive.id").decode() for n in (b"a.txt", b"b.txt")] == ids, 30, 0.2), \
        (ids, a.d.log_tail(40))


@pytest.mark.timeout(180)
def test_a_move_whose_delete_failed_leaves_no_copy_behind(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    proxy = FaultProxy(weed.port)
    try:
        proxy.failing = False
        dev = S3Device(new_drive(), weed, proxy.endpoint, prefix).mount()
        save(dev.path(b"Old/moved.txt"), b"moved\n")
        dev.sync()
        # Given a rename through the mount whose move on S3 (a copy, then a conditional delete
        # of the source) copies but cannot delete (every DELETE answered 503 for a while),
        proxy.failing = lambda method, path: method == "DELETE"
        os.makedirs(dev.path(b"New"))
        os.rename(dev.path(b"Old/moved.txt"), dev.path(b"New/moved.txt"))
        assert wait_until(lambda: "sync of New/moved.txt with s3 failed" in dev.d.log_tail(200), 60, 0.2), dev.d.log_tail()
        # when DELETE works again and `docdrive sync` says both sides agree,
        proxy.failing = False
        dev.sync()
        # then the old name is gone from the bucket as from the mount (the copy is not a second item).
        keys = sorted(k[len(prefix) + 1:] for k in bucket_objects(c, weed.bucket, prefix) if not k.endswith("/"))
        assert keys == ["New/moved.txt"], f"{keys}\n{dev.d.log_tail(40)}"
        assert sorted(dev.tree()) == [b"New/moved.txt"]
    finally:
        proxy.stop()


@pytest.mark.timeout(300)
def test_a_server_ignoring_conditional_writes_is_refused_unless_the_weaker_mode_is_accepted(weed, new_drive, boto):
    c = boto(weed.endpoint)
    prefix = new_prefix()
    proxy = UnconditionalProxy(weed.port)  # drops If-Match / If-None-Match, signs again
    try:
        # Given a server that ignores conditional writes, `store add` refuses it with a sentence
        # that names the way out, and adds nothing;
        d = new_drive()
        d.extra_env.update(weed.env({}))
        p = d.cli("store", "add", STORE, "--name", "S3", "--s3", proxy.endpoint, "--bucket", weed.bucket,
                  "--prefix", prefix, "--path-style", timeout=120, check=False)
        assert p.returncode != 0, p.stdout
        assert "ignores If-None-Match" in p.stderr and "--accept-unconditional-writes" in p.stderr, p.stderr
        assert proxy.stripped > 0
        assert f'name: "{STORE}"' not in (d.home / "config.yaml").read_text(), (d.home / "config.yaml").read_text()
        # with --accept-unconditional-writes two devices use it (`conditional-writes: checked`),
        a = S3Device(d, weed, proxy.endpoint, prefix, "--accept-unconditional-writes").mount()
        assert "conditional-writes: checked" in (d.home / "config.yaml").read_text()
        # (B looks at the bucket only when asked: it must not hear of A's edit before its own.)
        b = S3Device(new_drive(), weed, proxy.endpoint, prefix, "--accept-unconditional-writes", "--poll", "3600").mount()
        save(a.path(b"doc.txt"), b"version 1\n")
        a.sync()
        b.sync()
        assert read(b.path(b"doc.txt")) == b"version 1\n"
        stripped = proxy.stripped
        # and when B edits the file after A's edit of it reached the server (the weaker mode's
        # HEAD sees it; two writes within one round trip is the race it leaves, see README),
        save(a.path(b"doc.txt"), b"version A\n")
        a.sync()
        save(b.path(b"doc.txt"), b"version B\n")
        for dev in (b, a, b):
            dev.sync()
        # both versions are kept on both devices and in the bucket: no lost update, even though
        # the server let every write through unconditionally.
        assert proxy.stripped > stripped
        for dev in (a, b):
            contents = sorted(dev.tree().values())
            assert contents == [b"version A\n", b"version B\n"], (dev.tree(), dev.d.log_tail(60))
        assert sorted(bucket_tree(c, weed.bucket, prefix).values()) == [b"version A\n", b"version B\n"]
        assert a.tree() == b.tree()
    finally:
        proxy.stop()


# --------------------------------------------------------------------------- placeholders

@pytest.mark.timeout(240)
def test_a_kill_during_a_download_on_demand_leaves_a_placeholder(weed, new_drive, boto):
    """A bucket with content is joined on demand; the daemon is killed (SIGKILL) while the
    first open of a file downloads it, halfway; after a remount the file is still a
    placeholder (never a partial file), and its next open downloads it whole."""
    c = boto(weed.endpoint)
    prefix = new_prefix()
    data = os.urandom(6 * MiB)
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/big.bin", Body=data)  # another tool's object
    proxy = FaultProxy(weed.port)
    proxy.failing = False
    try:
        dev = S3Device(new_drive(), weed, proxy.endpoint, prefix)
        assert "content: on-demand" in (dev.d.home / "config.yaml").read_text()
        dev.mount()
        dev.sync()
        backing = dev.d.home / "stores" / STORE / "cache" / "big.bin"
        assert os.stat(dev.path(b"big.bin")).st_size == len(data)
        assert os.getxattr(dev.path(b"big.bin"), "user.docdrive.status") == b"placeholder"
        assert stat.S_IMODE(os.stat(dev.path(b"big.bin")).st_mode) == 0o644  # (an object without a mode)
        proxy.stall = "big.bin"
        failed = []

        def reader():
            try:
                with open(dev.path(b"big.bin"), "rb") as f:
                    failed.append(("read", len(f.read())))
            except OSError as e:
                failed.append(e.errno)
        t = threading.Thread(target=reader)
        t.start()
        assert wait_until(lambda: proxy.stalled > 0, 30, 0.05), dev.d.log_tail()
        time.sleep(0.3)  # half the body is in the local file now
        assert os.lstat(backing).st_blocks > 0
        # `docdrive status` shows the download going on, with its bytes.
        def downloading():
            return [u for u in dev.store_status()["inFlight"] if u["path"] == "big.bin" and u["direction"] == "down"]
        assert wait_until(downloading, 10, 0.1), dev.store_status()
        assert 0 < downloading()[0]["done"] < len(data) == downloading()[0]["total"], downloading()
        assert "downloading big.bin:" in dev.d.cli("status").stdout
        assert os.getxattr(dev.path(b"big.bin"), "user.docdrive.status") == b"downloading"
        pid = dev.d.pid
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not pid_alive(pid), 10)
        t.join(30)
        assert failed and failed[0] != ("read", len(data)), failed
        # The local file is still a placeholder (its mark is removed last), of the full size.
        assert os.getxattr(backing, "user.docdrive.placeholder")
        assert os.lstat(backing).st_size == len(data)
        proxy.stall = None
        proxy.release.set()
        dev.d.mount()
        assert os.getxattr(dev.path(b"big.bin"), "user.docdrive.status") == b"placeholder"
        assert sha(read(dev.path(b"big.bin"))) == sha(data)
        assert os.getxattr(dev.path(b"big.bin"), "user.docdrive.status") == b"synced"
        assert stat.S_IMODE(os.stat(dev.path(b"big.bin")).st_mode) == 0o644
        # Nothing went up: the object is the one boto3 put.
        dev.sync()
        assert sha(c.get_object(Bucket=weed.bucket, Key=f"{prefix}/big.bin")["Body"].read()) == sha(data)
    finally:
        proxy.release.set()
        proxy.stop()


@pytest.mark.timeout(240)
def test_a_save_over_a_placeholder_being_downloaded_waits_for_the_download(weed, new_drive, boto):
    """While a placeholder downloads (a reader opened it, or it came ahead), an open with
    O_TRUNC of it waits for that download and then truncates: the download never writes over
    what the program saves, and the save reaches the bucket."""
    c = boto(weed.endpoint)
    prefix = new_prefix()
    data = os.urandom(6 * MiB)
    c.put_object(Bucket=weed.bucket, Key=f"{prefix}/doc.bin", Body=data)
    proxy = FaultProxy(weed.port)
    proxy.failing = False
    try:
        dev = S3Device(new_drive(), weed, proxy.endpoint, prefix)
        dev.mount()
        dev.sync()
        assert os.getxattr(dev.path(b"doc.bin"), "user.docdrive.status") == b"placeholder"
        proxy.stall = "doc.bin"
        read = []
        reader = threading.Thread(target=lambda: read.append(len(open(dev.path(b"doc.bin"), "rb").read())))
        reader.start()
        assert wait_until(lambda: proxy.stalled > 0, 30, 0.05), dev.d.log_tail()
        saved = []

        def save():
            with open(dev.path(b"doc.bin"), "wb") as f:  # O_WRONLY | O_CREAT | O_TRUNC
                f.write(b"mine")
            saved.append(True)
        writer = threading.Thread(target=save)
        writer.start()
        time.sleep(0.5)
        assert not saved, "the save's open did not wait for the download"
        proxy.stall = None
        proxy.release.set()  # the stalled GET ends; the download is tried again and completes
        writer.join(60)
        reader.join(60)
        assert saved == [True], dev.d.log_tail()
        assert open(dev.path(b"doc.bin"), "rb").read() == b"mine"
        dev.sync()
        assert c.get_object(Bucket=weed.bucket, Key=f"{prefix}/doc.bin")["Body"].read() == b"mine"
    finally:
        proxy.stop()
