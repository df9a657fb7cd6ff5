#!/usr/bin/env python3
"""Join benchmark (issue 16): how long a device that joins an S3 store of N objects on demand
waits until the mount lists all of them, and the daemon's memory meanwhile.

The objects are put into the bucket once per size (prefix `j20k/` for 20,000), as another device's
uploads would be: flat, 4 KiB each, with DocDrive's metadata (item id, device, mtime, mode).
Then each round joins the prefix in a fresh drive home (`store add` on a bucket with content:
an on-demand store) and measures, from the start of `docdrive mount`:
  * listed: until `find ROOT -type f | wc -l` counts every object (find is run again and again;
    the time is the end of the first complete one);
  * settled: until `docdrive sync` returns (every item's metadata read and applied, the queue
    empty);
  * then two more polls (`docdrive sync` twice: every key listed and compared with its base
    again, as every poll of the mount does), and the daemon's peak RSS (VmHWM) after them, with
    its RSS sampled every 0.25 s from the mount on (the highest sample and the last one).
Nothing is downloaded: every file must show its size with no blocks.
With `--restarts`, each join's device is then mounted again twice (`restart`): once as it left
itself, once without the S3 answers it kept (every object looked up again).

Weed: by default one is started for the run (Tests/s3/weed.py) and stopped after. With
`--endpoint URL --bucket B` an already running server is used and the objects stay there, so a
second run (another build, `--bin`) skips the upload of 100,000 objects. Run as root (the mount):

    nice -n 10 python3 Benchmarks/joinbench.py --objects 20000,100000 [--rounds 1] [--bin PATH ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "s3"))
sys.path.insert(0, str(REPO / "Benchmarks"))
from weed import Weed, ACCESS_KEY, SECRET_KEY, REGION  # noqa: E402
from s3bench import is_mounted, proc_kb  # noqa: E402

STORE, SHOWN = "bench", "Bench"


def s3_client(endpoint: str):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                        region_name=REGION, config=Config(max_pool_connections=32, s3={"addressing_style": "path"}))


def fill(endpoint: str, bucket: str, prefix: str, n: int) -> None:
    """Puts n objects under prefix/ unless they are there already (counted by a listing)."""
    s3 = s3_client(endpoint)
    have = sum(1 for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
               for o in p.get("Contents", []) if "/.docdrive" not in o["Key"])  # (the store's own objects)
    if have == n:
        return
    if have:
        raise SystemExit(f"{prefix}/ holds {have} objects, not {n}: use another server or bucket")
    body = os.urandom(4096)
    start = time.monotonic()

    def put(i: int) -> None:
        s3.put_object(Bucket=bucket, Key=f"{prefix}/f{i:06d}.txt", Body=body[:-8] + i.to_bytes(8, "little"),
                      Metadata={"docdrive-id": str(uuid.uuid4()), "docdrive-device": "bench-device",
                                "docdrive-device-name": "bench", "docdrive-mtime": str(1_764_000_000_000_000_000 + i),
                                "docdrive-mode": "644"})
    with ThreadPoolExecutor(24) as ex:
        list(ex.map(put, range(n)))
    print(f"put {n} objects under {prefix}/ in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)


def drive(bin: str, home: Path, timeout: float):
    """The environment of the drive home `home`, and a function running `docdrive ARGS` in it
    (its output; a failure ends the run with it)."""
    env = dict(os.environ, DOCDRIVE_HOME=str(home), AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_DEFAULT_REGION=REGION)

    def cli(*args):
        p = subprocess.run([bin, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"docdrive {' '.join(args)} failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
        return p.stdout
    return env, cli


def join(bin: str, base: Path, endpoint: str, bucket: str, prefix: str, n: int, timeout: float = 900,
         keep_home: bool = False) -> dict:
    """One join in a fresh drive home under `base`; the home is removed after it (unless it
    failed, or `keep_home`: the caller removes it later)."""
    home, mnt = base / "home", base / "mnt"
    base.mkdir(parents=True)
    mnt.mkdir()
    env, cli = drive(bin, home, timeout)
    pid = 0
    keep = False
    try:
        cli("init")
        cli("store", "add", STORE, "--name", SHOWN, "--s3", endpoint, "--bucket", bucket, "--prefix", prefix, "--path-style")
        if "content: on-demand" not in (home / "config.yaml").read_text():
            raise SystemExit("store add did not make the joined bucket an on-demand store")
        t0 = time.monotonic()
        cli("mount", str(mnt))
        pid = json.loads((home / "run" / "mount.json").read_text())["pid"]
        root = mnt / SHOWN
        samples: list[int] = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                kb = proc_kb(pid, "VmRSS")
                if kb:
                    samples.append(kb)
                sampling.wait(0.25)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = time.monotonic() + timeout
        peak_listing = 0
        while True:
            out = subprocess.run(["find", str(root), "-type", "f"], capture_output=True, text=True).stdout
            peak_listing = max(peak_listing, proc_kb(pid, "VmRSS"))
            if out.count("\n") >= n:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the joined store never listed every file")
            time.sleep(0.1)
        listed = time.monotonic() - t0
        cli("sync", "--timeout", str(int(timeout)))
        settled = time.monotonic() - t0
        settled_hwm = proc_kb(pid, "VmHWM")
        for _ in range(2):
            cli("sync", "--timeout", str(int(timeout)))
        sampling.set()
        sampler.join()
        if not proc_kb(pid, "VmRSS"):
            raise SystemExit(f"the daemon (pid {pid}) is gone after the polls; its log: {home / 'run' / 'daemon.log'}")
        for i in (0, n // 2, n - 1):  # listed with their real sizes and times, nothing downloaded
            st = (root / f"f{i:06d}.txt").stat()
            if st.st_size != 4096 or st.st_blocks != 0:
                raise SystemExit(f"f{i:06d}.txt: {st.st_size} bytes, {st.st_blocks} blocks before any open")
            if st.st_mtime_ns != 1_764_000_000_000_000_000 + i or st.st_mode & 0o777 != 0o644:
                raise SystemExit(f"f{i:06d}.txt: mtime {st.st_mtime_ns}, mode {oct(st.st_mode)}: not the remote's")
        ids = {subprocess.run(["getfattr", "--only-values", "-n", "user.docdrive.id", str(root / f"f{i:06d}.txt")],
                              capture_output=True, text=True).stdout for i in (0, 1)}
        if len(ids) != 2 or "" in ids:
            raise SystemExit(f"item ids after the join: {ids}")
        return {"listed": listed, "settled": settled, "rss": proc_kb(pid, "VmHWM") << 10, "rss_listed": peak_listing << 10,
                "hwm_settled": settled_hwm << 10, "rss_sampled": max(samples, default=0) << 10,
                "rss_last": (samples[-1] if samples else 0) << 10}
    except BaseException:
        keep = True
        raise
    finally:
        if pid and is_mounted(mnt):
            subprocess.run([bin, "unmount", str(mnt)], env=env, capture_output=True, timeout=120)
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=30)
        if not is_mounted(mnt) and not keep and not keep_home:
            shutil.rmtree(base, ignore_errors=True)


def restart(bin: str, base: Path, n: int, forget_answers: bool, timeout: float = 900) -> dict:
    """Mounts again the drive home a join left under `base` (unmounted, its store settled): how
    long `docdrive mount` takes to return, until `find` counts every object, and until
    `docdrive sync` returns. With `forget_answers`, the S3 answers the last run kept
    (`stores/bench/s3-answers`) are removed first, as a daemon killed before writing them (or a
    build that kept none) would leave it: every object is looked up again (a HEAD each)."""
    home, mnt = base / "home", base / "mnt"
    env, cli = drive(bin, home, timeout)
    answers = home / "stores" / STORE / "s3-answers"
    kept = answers.exists()
    if forget_answers and kept:
        answers.unlink()
    try:
        t0 = time.monotonic()
        cli("mount", str(mnt))
        mounted = time.monotonic() - t0
        pid = json.loads((home / "run" / "mount.json").read_text())["pid"]
        while subprocess.run(["find", str(mnt / SHOWN), "-type", "f"], capture_output=True, text=True).stdout.count("\n") < n:
            if time.monotonic() - t0 > timeout:
                raise SystemExit("the restarted store never listed every file")
            time.sleep(0.1)
        listed = time.monotonic() - t0
        cli("sync", "--timeout", str(int(timeout)))
        settled = time.monotonic() - t0
        return {"mounted": mounted, "listed": listed, "settled": settled, "rss": proc_kb(pid, "VmHWM") << 10,
                "answers": kept and not forget_answers}
    finally:
        if is_mounted(mnt):
            subprocess.run([bin, "unmount", str(mnt)], env=env, capture_output=True, timeout=120)
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=30)


def prefix(n: int) -> str:
    return f"j{n // 1000}k" if n % 1000 == 0 else f"j{n}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", default="20000,100000", help="comma-separated sizes")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--bin", action="append", help="docdrive binaries to compare (default: this tree's release build)")
    ap.add_argument("--endpoint", help="an S3 server already running (the objects stay there)")
    ap.add_argument("--bucket", default="docdrive-test")
    ap.add_argument("--pause", type=float, default=65, help="seconds before each join (see below)")
    ap.add_argument("--restarts", action="store_true",
                    help="after each join, mount the device again twice: with the S3 answers it kept, and without")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the mount needs root (passthrough, as the users' mounts)")
    bins = args.bin or [str(REPO / ".build" / "release" / "docdrive")]
    sizes = [int(s) for s in args.objects.split(",")]
    base = Path(tempfile.mkdtemp(prefix="docdrive-joinbench-"))
    w = None
    failed = True
    try:
        endpoint, bucket = args.endpoint, args.bucket
        if not endpoint:
            w = Weed(base / "weed").start()
            endpoint, bucket = w.endpoint, w.bucket
        for n in sizes:
            fill(endpoint, bucket, prefix(n), n)
        subprocess.run(["sync"])
        k = 0
        for r in range(args.rounds):
            for n in sizes:
                for b in bins:
                    k += 1
                    # ext4 without a journal (this machine's disk) skips, at each new inode, the
                    # inodes deleted in the last 60 s (360 s while their inode table block is
                    # not written back), one block lookup each (fs/ext4/ialloc.c,
                    # recently_deleted): 100,000 files deleted just before would cost the join
                    # seconds. So the drive homes stay until the run ends, and each join waits
                    # until what was deleted before the run (after a `sync`) is older than that.
                    time.sleep(args.pause)
                    m = join(b, base / f"drive-{k}", endpoint, bucket, prefix(n), n, keep_home=True)
                    print(f"round {r + 1} {n:7} objects {b}: listed {m['listed']:6.2f} s (RSS {m['rss_listed'] >> 20} MiB), "
                          f"settled {m['settled']:6.2f} s (peak RSS {m['hwm_settled'] >> 20} MiB), "
                          f"after 2 more polls: peak RSS {m['rss'] >> 20} MiB (highest sample {m['rss_sampled'] >> 20} MiB, "
                          f"last {m['rss_last'] >> 20} MiB)", flush=True)
                    if args.restarts:
                        for forget in (False, True):
                            m = restart(b, base / f"drive-{k}", n, forget)
                            print(f"  restarted ({'answers kept' if m['answers'] else 'no answers kept'}): mount returned after "
                                  f"{m['mounted']:6.2f} s, listed {m['listed']:6.2f} s, settled {m['settled']:6.2f} s "
                                  f"(peak RSS {m['rss'] >> 20} MiB)", flush=True)
                    subprocess.run(["sync"])
        failed = False
    finally:
        if w:
            w.stop()
        if failed:
            print(f"kept {base} (the drive homes and their daemons' logs)", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
