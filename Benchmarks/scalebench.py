#!/usr/bin/env python3
"""Scale benchmark: what an idle device costs, and how soon another device's save arrives, on S3
stores of N objects, for one or more builds measured in the same run.

Per store size (`--objects 1000,10000`; the objects are put once, as another device's uploads
would be: joinbench.fill) and per build (`--bin LABEL=PATH`, e.g. a build from before the change
mark as `before=...` beside this tree's as `after=...`), two devices join the store in fresh drive
homes: A through a counting proxy (requests by kind, and the bytes of the answers), B directly.
Both poll every `--poll` seconds (default 10, DocDrive's default). Measured:
  * idle: after `docdrive sync` on both, a window of `--window` seconds (default 60) with
    nothing saved: A's requests and answer bytes per poll, and its daemon's CPU per poll
    (utime + stime, /proc/PID/stat);
  * propagation: `--saves` times (default 5), B writes a new small file, and the time until A
    can `stat` it (median and maximum), started at B's close; and A's requests and answer bytes
    over the saves, per save (what finding another device's change costs: a whole listing, or
    the journal and a look at the path);
  * the AWS list-price cost of one idle device a month at the measured requests and bytes per
    poll, with a poll every `--poll` seconds: LIST $0.005 per 1,000, GET and HEAD $0.0004 per
    1,000, egress $0.09 per GB (a device outside AWS).
Timings are noisy on a shared machine: the builds are measured in the same run, one after the
other per size, and the report gives each build's figures beside the others'.

Weed: one is started for the run (Tests/s3/weed.py) and stopped after. Run as root (the mount):

    nice -n 10 python3 Benchmarks/scalebench.py --objects 1000,10000 --bin before=OLD/docdrive --bin after=.build/release/docdrive
"""
from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import shutil
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "s3"))
sys.path.insert(0, str(REPO / "Benchmarks"))
from weed import Weed  # noqa: E402
from joinbench import drive, fill  # noqa: E402
from s3bench import is_mounted  # noqa: E402

STORE, SHOWN = "bench", "Bench"
PRICE = {"LIST": 0.005 / 1000, "GET": 0.0004 / 1000, "HEAD": 0.0004 / 1000, "PUT": 0.005 / 1000,
         "POST": 0.005 / 1000, "DELETE": 0.0}
EGRESS_PER_BYTE = 0.09 / 1e9
SECONDS_PER_MONTH = 30 * 86400


class CountingProxy:
    """An HTTP front on 127.0.0.1 for the S3 server on `port`: forwards every request as it is
    and counts requests by kind (LIST is a GET of the bucket with `list-type`) and answer bytes."""

    def __init__(self, port: int):
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.bytes = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                c.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    c.putheader(k, v)
                c.endheaders(body)
                r = c.getresponse()
                data = r.read()
                c.close()
                kind = "LIST" if self.command == "GET" and "list-type=" in self.path else self.command
                hop = {"content-length", "transfer-encoding", "connection", "keep-alive"}
                headers = [(k, v) for k, v in r.getheaders() if k.lower() not in hop]
                self.send_response(r.status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", r.getheader("Content-Length") if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                size = len(data) + sum(len(k) + len(v) + 4 for k, v in headers) + 20
                with proxy.lock:
                    proxy.counts[kind] = proxy.counts.get(kind, 0) + 1
                    proxy.bytes += size

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self) -> tuple[dict[str, int], int]:
        with self.lock:
            out = (dict(self.counts), self.bytes)
            self.counts.clear()
            self.bytes = 0
            return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Device:
    def __init__(self, bin: str, base: Path, endpoint: str, bucket: str, prefix: str, poll: float):
        self.bin, self.home, self.mnt = bin, base / "home", base / "mnt"
        self.mnt.mkdir(parents=True)
        self.env, self.cli = drive(bin, self.home, 900)
        self.cli("init")
        self.cli("store", "add", STORE, "--name", SHOWN, "--s3", endpoint, "--bucket", bucket, "--prefix", prefix,
                 "--path-style", "--poll", str(poll), "--writeback", "0.1")
        self.cli("mount", str(self.mnt))
        self.pid = json.loads((self.home / "run" / "mount.json").read_text())["pid"]
        self.root = self.mnt / SHOWN

    def stop(self) -> None:
        if is_mounted(self.mnt):
            subprocess.run([self.bin, "unmount", str(self.mnt)], env=self.env, capture_output=True, timeout=120)
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True, timeout=30)


def measure(bin: str, base: Path, weed: Weed, prefix: str, poll: float, window: float, saves: int) -> dict:
    proxy = CountingProxy(weed.port)
    a = b = None
    try:
        a = Device(bin, base / "a", proxy.endpoint, weed.bucket, prefix, poll)
        b = Device(bin, base / "b", weed.endpoint, weed.bucket, prefix, poll)
        a.cli("sync", "--timeout", "900")
        b.cli("sync", "--timeout", "900")
        time.sleep(poll)
        proxy.take()
        cpu0 = cpu_seconds(a.pid)
        time.sleep(window)
        counts, nbytes = proxy.take()
        cpu = cpu_seconds(a.pid) - cpu0
        polls = window / poll
        proxy.take()
        waits = []
        for k in range(saves):
            name = f"from-b-{uuid.uuid4().hex[:12]}-{k}.txt"  # new in every measure (the store is shared)
            with open(b.root / name, "wb") as f:
                f.write(b"saved on B\n")
            t0 = time.monotonic()
            while not (a.root / name).exists():
                if time.monotonic() - t0 > 600:
                    raise SystemExit(f"{name} saved on B never showed on A")
                time.sleep(0.02)
            waits.append(time.monotonic() - t0)
            time.sleep(poll / 3)
        save_counts, save_bytes = proxy.take()
        per_poll = {k: v / polls for k, v in counts.items()}
        month = SECONDS_PER_MONTH / poll
        requests = sum(per_poll.get(k, 0) * PRICE.get(k, 0.0004 / 1000) for k in per_poll) * month
        egress = nbytes / polls * month * EGRESS_PER_BYTE
        return {"per_poll": per_poll, "bytes_per_poll": nbytes / polls, "cpu_ms_per_poll": cpu / polls * 1000,
                "median": statistics.median(waits), "max": max(waits), "usd_requests": requests, "usd_with_egress": requests + egress,
                "per_save": {k: v / saves for k, v in save_counts.items()}, "bytes_per_save": save_bytes / saves}
    finally:
        for d in (a, b):
            if d:
                d.stop()
        proxy.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", default="1000,10000", help="comma-separated store sizes")
    ap.add_argument("--bin", action="append", help="LABEL=PATH of a docdrive build (default: this tree's, as 'this')")
    ap.add_argument("--poll", type=float, default=10.0)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--saves", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the mount needs root")
    bins = [tuple(b.split("=", 1)) for b in (args.bin or [f"this={REPO / '.build' / 'release' / 'docdrive'}"])]
    base = Path(tempfile.mkdtemp(prefix="docdrive-scalebench-"))
    failed = True
    try:
        with Weed(base / "weed") as w:
            print("objects\tbuild\trequests per idle poll\tbytes per idle poll\tCPU ms per idle poll\t"
                  "B's save on A, median / max (s)\tA's requests per save seen\tA's bytes per save seen\t"
                  "USD per idle device a month (requests / with egress)")
            for n in (int(s) for s in args.objects.split(",")):
                prefix = f"scale{n}"
                fill(w.endpoint, w.bucket, prefix, n)
                for k, (label, bin) in enumerate(bins):
                    r = measure(bin, base / f"{n}-{k}", w, prefix, args.poll, args.window, args.saves)
                    kinds = ", ".join(f"{v:.2f} {k}" for k, v in sorted(r["per_poll"].items())) or "0"
                    save_kinds = ", ".join(f"{v:.1f} {k}" for k, v in sorted(r["per_save"].items())) or "0"
                    print(f"{n}\t{label}\t{kinds}\t{r['bytes_per_poll']:,.0f}\t{r['cpu_ms_per_poll']:.1f}\t"
                          f"{r['median']:.2f} / {r['max']:.2f}\t{save_kinds}\t{r['bytes_per_save']:,.0f}\t"
                          f"{r['usd_requests']:.2f} / {r['usd_with_egress']:.2f}", flush=True)
        failed = False
    finally:
        if not failed:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"(kept {base} for a look)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
