#!/usr/bin/env python3
"""S3 upload benchmark (issue 15): DocDrive against `rclone copy` and `aws s3 cp --recursive`, on
one SeaweedFS on loopback (Tests/s3/weed.py), same run, interleaved (each round starts with
another tool), each run into a fresh prefix.

DocDrive is measured two ways:
  * "docdrive mount": the real path. A fresh drive home with an S3 store (`docdrive store add
    --s3`, default write-back delay), mounted; the data is copied into the mount with `cp -r`,
    and the time is from the end of that `cp` (its last close) until the upload queue says every
    file is synced (the last PUT answered), checked afterwards on the server (every object there
    with its size). The `cp` itself is reported on its own, and so is the time less the store's
    write-back delay. Memory is the daemon's peak RSS while it uploads (VmHWM, reset at the last
    close, and VmRSS sampled every 20 ms).
  * "docdrive s3-copy": DocDrive's S3 remote alone (`docdrive internal s3-copy`, the code the
    upload workers run, without the mount, the queue or the sync decisions).
rclone and aws are timed as whole commands (wall time), memory their peak RSS (GNU time).

With `--direction down` (issue 16) it measures downloads instead: the same data is put into the
bucket once (aws s3 cp), and then, each round, "docdrive on demand" joins it in a fresh drive
home (`store add` on a bucket with content: an on-demand store, every file a placeholder) and,
once mounted and listed, and the join's metadata reads done (`docdrive sync`; `--no-settle`
reads at once), reads every file through the mount, one after another (the first open of each
downloads it, or finds it downloaded ahead), in each of `--orders` (a fresh join each: the
mount's listing, the names' byte order, the source folder's order): the time of those reads;
against `rclone copy` and `aws s3 cp --recursive` from the bucket into a fresh local folder
(whole commands). A store downloads up to twice its workers at once, so for downloads rclone
gets `--transfers 2N` and aws `max_concurrent_requests 2N`. Each DocDrive round also reports
the daemon's CPU during the reads and how its opens went: their median, and those over 2 ms
(an open waits there for a download not ended yet); the table has a CPU column (the daemon's
during the reads; a command's user + system time), because on a small machine the server, the
tool and the reader share the same CPUs.

Workloads: 2,000 files of 4 KiB, and one file of 1 GiB (sizes can be made smaller for a quick
look). Every tool gets the same parallelism: `--workers N` files at once (the store's workers,
rclone --transfers N, aws cli max_concurrent_requests N), parts of 16 MiB, 4 parts at once for
DocDrive and rclone. Run it as root (the mount), everything at one niceness:

    nice -n 10 python3 Benchmarks/s3bench.py [--rounds 3] [--small 2000] [--big-mib 1024] [--workers 4]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "s3"))
from weed import Weed  # noqa: E402

STORE = "bench"
SHOWN = "Bench"
TOOLS = ["docdrive mount", "docdrive s3-copy", "rclone", "aws s3 cp"]


def run(cmd, env) -> tuple[float, int, str, float]:
    """Wall seconds, peak RSS in bytes, output and CPU seconds (user + system) of one command
    (which must succeed)."""
    # GNU time reports the command's own peak (a forked child's rusage would count the pages
    # it shared with this Python before exec).
    start = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS-KB %M CPU-S %U %S", *cmd], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
    stats = [l.split() for l in p.stderr.splitlines() if l.startswith("MAXRSS-KB ")][-1]
    return seconds, int(stats[1]) * 1024, p.stdout, float(stats[3]) + float(stats[4])


def make_data(base: Path, small: int, big_mib: int) -> tuple[Path, Path]:
    s, b = base / "small", base / "big"
    s.mkdir()
    b.mkdir()
    for i in range(small):
        (s / f"f{i:05d}.txt").write_bytes(os.urandom(4096))
    with open(b / "big.bin", "wb") as f:
        chunk = os.urandom(16 << 20)
        for i in range(big_mib // 16):
            f.write(chunk[:-8] + i.to_bytes(8, "little"))
    return s, b


def is_mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


# An open slower than this waited for a download (an open of a file that is here takes
# 0.1-0.5 ms on the 2-core machine while downloads run beside it).
SLOW_OPEN = 0.002


def proc_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) the process has used, all its threads, ended ones too."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_kb(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def server_objects(w: Weed, env: dict, prefix: str) -> dict[str, int]:
    """Key (under the prefix) -> size of every object the server lists there."""
    p = subprocess.run(["aws", "--endpoint-url", w.endpoint, "s3api", "list-objects-v2", "--bucket", w.bucket,
                        "--prefix", prefix + "/", "--output", "json"], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"listing {prefix} failed: {p.stderr[-2000:]}")
    contents = json.loads(p.stdout or "{}").get("Contents", [])
    return {o["Key"][len(prefix) + 1:]: o["Size"] for o in contents}


class MountedDrive:
    """A fresh drive home with one S3 store on `prefix`, mounted; `close()` unmounts it (by the
    daemon's pid, fusermount3 -uz as the last resort) and removes the home, whatever happened."""

    def __init__(self, bin: str, base: Path, w: Weed, env: dict, prefix: str, workers: int):
        self.bin, self.base, self.prefix = bin, base, prefix
        self.home, self.mnt = base / "home", base / "mnt"
        self.env = dict(env, DOCDRIVE_HOME=str(self.home))
        self.pid = 0
        self.db: sqlite3.Connection | None = None
        base.mkdir()
        self.mnt.mkdir()
        self.cli("init")
        self.cli("store", "add", STORE, "--name", SHOWN, "--s3", w.endpoint, "--bucket", w.bucket, "--prefix", prefix,
                 "--path-style", "--workers", str(workers), "--part-size", "16M", "--parallel-parts", "4")
        # The store's write-back delay, as `store add` wrote it into config.yaml.
        self.writeback = [float(l.split(":")[1]) for l in (self.home / "config.yaml").read_text().splitlines()
                          if l.strip().startswith("writeback:")][0]
        self.cli("mount", str(self.mnt))
        self.pid = json.loads((self.home / "run" / "mount.json").read_text())["pid"]

    def cli(self, *args, timeout=120) -> str:
        p = subprocess.run([self.bin, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"docdrive {' '.join(args)} failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}\n"
                             f"daemon log:\n{self.log_tail()}")
        return p.stdout

    def log_tail(self, n=30) -> str:
        try:
            return "\n".join((self.home / "run" / "daemon.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no daemon log)"

    def queue(self, folder: str) -> tuple[int, int, int]:
        """(synced files under `folder`, entries waiting, entries failed) of the store, as the
        daemon's upload queue has them now (the daemon commits it every 50 ms). One read-only
        connection, kept open as `docdrive sync` keeps its own, so that looking every 20 ms
        costs a query and not a connection."""
        if self.db is None:
            self.db = sqlite3.connect(f"file:{self.home / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
        return self.db.execute(
            "SELECT COALESCE(SUM(state = 'synced' AND substr(path, 1, ?) = ?), 0),"
            " COALESCE(SUM(state IN ('pending', 'uploading')), 0), COALESCE(SUM(state = 'failed'), 0)"
            " FROM upload WHERE root = ?", (len(folder) + 1, folder + "/", "store:" + STORE)).fetchone()

    def wait_idle(self, timeout=60):
        """Until the store's comparison at mount is done and nothing waits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.queue("")[1] == 0:
                return
            time.sleep(0.1)
        raise SystemExit(f"the store did not settle after mounting:\n{self.log_tail()}")

    def close(self):
        if self.db is not None:
            self.db.close()
        if self.pid and is_mounted(self.mnt):
            subprocess.run([self.bin, "unmount", str(self.mnt)], env=self.env, capture_output=True, timeout=120)
        if self.pid and proc_kb(self.pid, "VmRSS") and Path(f"/proc/{self.pid}").exists():
            deadline = time.monotonic() + 10
            while Path(f"/proc/{self.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            if Path(f"/proc/{self.pid}").exists():
                os.kill(self.pid, 9)  # our own daemon, by its pid
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True, timeout=30)
        if not is_mounted(self.mnt):
            shutil.rmtree(self.base, ignore_errors=True)


def through_mount(bin: str, base: Path, w: Weed, env: dict, src: Path, prefix: str, workers: int,
                  timeout: float = 900) -> dict:
    """Copies `src` into a fresh mounted S3 store; seconds from the end of the copy until the
    queue has every file synced, and the daemon's peak memory meanwhile."""
    d = MountedDrive(bin, base, w, env, prefix, workers)
    try:
        d.wait_idle()
        files = {p.relative_to(src.parent).as_posix(): p.stat().st_size for p in src.rglob("*") if p.is_file()}
        baseline = proc_kb(d.pid, "VmRSS")
        t0 = time.monotonic()
        subprocess.run(["cp", "-r", str(src), str(d.mnt / SHOWN)], check=True)
        t1 = time.monotonic()
        # From the last close on: the daemon's high-water mark starts again (as root), and
        # its RSS is sampled on the side.
        try:
            Path(f"/proc/{d.pid}/clear_refs").write_text("5")
        except OSError:
            pass
        peak = [proc_kb(d.pid, "VmRSS")]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], proc_kb(d.pid, "VmRSS"))
                time.sleep(0.02)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            while True:
                synced, waiting, failed = d.queue(src.name)
                if synced >= len(files) and waiting == 0:
                    break
                if failed:
                    raise SystemExit(f"{failed} uploads failed:\n{d.log_tail()}")
                if time.monotonic() - t1 > timeout:
                    raise SystemExit(f"not uploaded after {timeout} s ({synced} of {len(files)}):\n{d.log_tail()}")
                time.sleep(0.02)
            t2 = time.monotonic()
        finally:
            done.set()
            sampler.join()
        hwm = proc_kb(d.pid, "VmHWM")
        on_server = server_objects(w, env, prefix)
        missing = {k: v for k, v in files.items() if on_server.get(k) != v}
        if missing:
            raise SystemExit(f"the queue says synced, but {len(missing)} objects are missing or of another size on the "
                             f"server (e.g. {next(iter(missing))})")
        return {"seconds": t2 - t1, "cp": t1 - t0, "writeback": d.writeback, "rss": max(peak[0], hwm) << 10,
                "baseline": baseline << 10}
    finally:
        d.close()


def on_demand(bin: str, base: Path, w: Weed, env: dict, prefix: str, files: dict[str, int], workers: int,
              order: str = "source", settle: bool = True, timeout: float = 900) -> dict:
    """Joins `prefix` (already in the bucket) on demand in a fresh drive home, mounts it, waits
    until every file is listed (and, with `settle`, until `docdrive sync` says the join's
    metadata reads are done), then reads every file through the mount one after another, in
    `order`: the seconds of those reads (each first open downloads its file) and the daemon's
    peak RSS. Orders: "listing" (each folder as the mount lists it: cp -r, tar, grep -r, find),
    "name" (paths sorted by their bytes: shell globs, rsync, file managers), "source" (the
    order of the folder the files were uploaded from: unrelated to both)."""
    home, mnt = base / "home", base / "mnt"
    base.mkdir()
    mnt.mkdir()
    denv = dict(env, DOCDRIVE_HOME=str(home))

    def cli(*args):
        p = subprocess.run([bin, *args], env=denv, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"docdrive {' '.join(args)} failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
        return p.stdout
    pid = 0
    try:
        cli("init")
        cli("store", "add", STORE, "--name", SHOWN, "--s3", w.endpoint, "--bucket", w.bucket, "--prefix", prefix,
            "--path-style", "--workers", str(workers), "--part-size", "16M", "--parallel-parts", "4")
        if "content: on-demand" not in (home / "config.yaml").read_text():
            raise SystemExit("store add did not make the joined bucket an on-demand store")
        t0 = time.monotonic()
        cli("mount", str(mnt))
        pid = json.loads((home / "run" / "mount.json").read_text())["pid"]
        root = mnt / SHOWN
        deadline = time.monotonic() + timeout
        while sum(1 for p in root.rglob("*") if p.is_file()) < len(files):
            if time.monotonic() > deadline:
                raise SystemExit("the joined store never listed every file")
            time.sleep(0.2)
        listed = time.monotonic() - t0
        if settle:
            cli("sync")
        settled = time.monotonic() - t0
        for rel, size in files.items():  # listed with their real sizes, nothing downloaded
            st = (root / rel).stat()
            if st.st_size != size or st.st_blocks != 0:
                raise SystemExit(f"{rel}: {st.st_size} bytes, {st.st_blocks} blocks before any open")
        if order == "listing":
            paths = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        elif order == "name":
            paths = sorted(files, key=lambda rel: rel.encode())
        else:
            paths = list(files)
        if sorted(paths) != sorted(files):
            raise SystemExit("the mount does not list the files that were uploaded")
        cpu0 = proc_cpu(pid)
        t1 = time.monotonic()
        read = 0
        opens = []  # seconds of each open: a file not downloaded yet (or still downloading) waits there
        for rel in paths:
            o = time.monotonic()
            f = open(root / rel, "rb")
            opens.append(time.monotonic() - o)
            with f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    read += len(b)
        t2 = time.monotonic()
        if read != sum(files.values()):
            raise SystemExit(f"read {read} bytes of {sum(files.values())}")
        opens.sort()
        waits = [x for x in opens if x > SLOW_OPEN]
        return {"seconds": t2 - t1, "rss": proc_kb(pid, "VmHWM") << 10, "listed": listed, "settled": settled,
                "open_median": opens[len(opens) // 2], "slow_opens": len(waits), "slow_open_seconds": sum(waits),
                "daemon_cpu": proc_cpu(pid) - cpu0}
    finally:
        if pid and is_mounted(mnt):
            subprocess.run([bin, "unmount", str(mnt)], env=denv, capture_output=True, timeout=120)
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=30)
        if not is_mounted(mnt):
            shutil.rmtree(base, ignore_errors=True)


DOWN_TOOLS = ["docdrive on demand", "rclone", "aws s3 cp"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bin", default=str(REPO / ".build" / "release" / "docdrive"))
    ap.add_argument("--tools", default=None, help="a comma-separated subset of: " + ", ".join(TOOLS)
                    + " (uploads), " + ", ".join(DOWN_TOOLS) + " (downloads)")
    ap.add_argument("--direction", choices=["up", "down"], default="up")
    ap.add_argument("--orders", default="listing,name,source",
                    help="downloads: the orders DocDrive's mount is read in, each a row (listing, name, source)")
    ap.add_argument("--no-settle", action="store_true",
                    help="downloads: read as soon as every file is listed, while the join still reads metadata")
    args = ap.parse_args()
    down = args.direction == "down"
    tools_wanted = [t.strip() for t in (args.tools or ",".join(DOWN_TOOLS if down else TOOLS)).split(",") if t.strip()]
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    if not orders or any(o not in ("listing", "name", "source") for o in orders):
        raise SystemExit(f"--orders: a comma-separated list of listing, name, source (not {args.orders!r})")
    if down and "docdrive on demand" in tools_wanted:
        # One row per order the mount is read in.
        i = tools_wanted.index("docdrive on demand")
        tools_wanted[i:i + 1] = [f"docdrive on demand, {o} order" for o in orders]
    if any(t.startswith("docdrive on demand") for t in tools_wanted) and os.geteuid() != 0:
        raise SystemExit("the mounted variant needs root (passthrough, as the users' mounts)")
    if "docdrive mount" in tools_wanted and os.geteuid() != 0:
        raise SystemExit("the mounted variant needs root (passthrough, as the users' mounts)")
    base = Path(tempfile.mkdtemp(prefix="docdrive-s3bench-"))
    results: dict[tuple[str, str], list[dict]] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        small, big = make_data(base, args.small, args.big_mib)
        with Weed(base / "weed") as w:
            env = w.env()
            cfg = base / "aws-config"
            cfg.write_text(f"[default]\ns3 =\n  max_concurrent_requests = {2 * args.workers if down else args.workers}\n  multipart_threshold = 16MB\n"
                           f"  multipart_chunksize = 16MB\n")
            env["AWS_CONFIG_FILE"] = str(cfg)
            # rclone reads its S3 keys from RCLONE_S3_*, and its AWS SDK refuses a CA bundle
            # variable on a plain-HTTP endpoint.
            rclone_env = {k: v for k, v in env.items() if k != "AWS_CA_BUNDLE"}
            rclone_env.update(RCLONE_S3_ACCESS_KEY_ID=env["AWS_ACCESS_KEY_ID"], RCLONE_S3_SECRET_ACCESS_KEY=env["AWS_SECRET_ACCESS_KEY"])
            n = 0

            def command(tool: str, src: Path, prefix: str):
                return {
                    "docdrive s3-copy": [args.bin, "internal", "s3-copy", "--endpoint", w.endpoint, "--bucket", w.bucket,
                                         "--prefix", prefix, "--path-style", "--workers", str(args.workers), str(src)],
                    "rclone": ["rclone", "copy", str(src), f":s3:{w.bucket}/{prefix}", "--s3-provider", "Other",
                               "--s3-endpoint", w.endpoint, "--s3-force-path-style", "--s3-region", "us-east-1",
                               "--transfers", str(args.workers), "--s3-chunk-size", "16M", "--s3-upload-cutoff", "16M",
                               "--s3-upload-concurrency", "4", "--no-check-dest", "--s3-no-check-bucket", "-q"],
                    "aws s3 cp": ["aws", "--endpoint-url", w.endpoint, "s3", "cp", str(src), f"s3://{w.bucket}/{prefix}", "--recursive",
                                  "--only-show-errors"],
                }[tool]

            def download(tool: str, prefix: str, dest: Path):
                return {
                    "rclone": ["rclone", "copy", f":s3:{w.bucket}/{prefix}", str(dest), "--s3-provider", "Other",
                               "--s3-endpoint", w.endpoint, "--s3-force-path-style", "--s3-region", "us-east-1",
                               "--transfers", str(2 * args.workers), "--multi-thread-streams", "4", "--exclude", ".docdrive*/**",
                               "--exclude", ".docdrive*", "-q"],
                    "aws s3 cp": ["aws", "--endpoint-url", w.endpoint, "s3", "cp", f"s3://{w.bucket}/{prefix}", str(dest),
                                  "--recursive", "--exclude", ".docdrive*", "--only-show-errors"],
                }[tool]

            # A first request wakes the server up (its first answers are slow) before any is measured.
            run(command("aws s3 cp", small, "warm-up"), env)
            if down:
                sources = {}
                for name, src in (("small", small), ("big", big)):
                    prefix = f"down-{name}"
                    _, _, out, _ = run(command("aws s3 cp", src, prefix), env)
                    sources[name] = (prefix, {p.relative_to(src).as_posix(): p.stat().st_size for p in src.rglob("*") if p.is_file()})
                for r in range(args.rounds):
                    for name in ("small", "big"):
                        prefix, files = sources[name]
                        k = r % len(tools_wanted)
                        for tool in tools_wanted[k:] + tools_wanted[:k]:
                            n += 1
                            if tool.startswith("docdrive on demand"):
                                order = tool.split(", ")[1].split()[0]
                                m = on_demand(args.bin, base / f"drive-{n}", w, env, prefix, files, args.workers,
                                              order=order, settle=not args.no_settle)
                            else:
                                dest = base / f"dest-{n}"
                                seconds, rss, _, cpu = run(download(tool, prefix, dest), rclone_env if tool == "rclone" else env)
                                # (DocDrive's own objects, the store's marker, are not documents.)
                                got = sum(p.stat().st_size for p in dest.rglob("*")
                                          if p.is_file() and not p.relative_to(dest).parts[0].startswith(".docdrive"))
                                if got != sum(files.values()):
                                    raise SystemExit(f"{tool} downloaded {got} bytes of {sum(files.values())}")
                                shutil.rmtree(dest, ignore_errors=True)
                                m = {"seconds": seconds, "rss": rss, "cpu": cpu}
                            results.setdefault((name, tool), []).append(m)
                            extra = (f"  (listed {m['listed']:.2f} s, settled {m['settled']:.2f} s after the mount began;"
                                     f" daemon CPU {m['daemon_cpu']:.2f} s; opens: median {m['open_median'] * 1e3:.2f} ms,"
                                     f" {m['slow_opens']} over {SLOW_OPEN * 1e3:.0f} ms, {m['slow_open_seconds']:.2f} s in those)"
                                     if "listed" in m else f"  (CPU {m['cpu']:.2f} s)")
                            print(f"round {r + 1} {name:5} {tool:34} {m['seconds']:7.2f} s  peak RSS {m['rss'] >> 20} MiB{extra}",
                                  file=sys.stderr, flush=True)
                            subprocess.run(["sync"])
                            Path("/proc/sys/vm/drop_caches").write_text("3")
            for r in range(0 if down else args.rounds):
                for name, src in (("small", small), ("big", big)):
                    k = r % len(tools_wanted)
                    for tool in tools_wanted[k:] + tools_wanted[:k]:  # each round starts with another tool
                        n += 1
                        prefix = f"bench-{n}"
                        if tool == "docdrive mount":
                            m = through_mount(args.bin, base / f"drive-{n}", w, env, src, prefix, args.workers)
                        else:
                            seconds, rss, _, _ = run(command(tool, src, prefix), rclone_env if tool == "rclone" else env)
                            m = {"seconds": seconds, "rss": rss}
                        results.setdefault((name, tool), []).append(m)
                        extra = f"  (cp into the mount {m['cp']:.2f} s)" if "cp" in m else ""
                        print(f"round {r + 1} {name:5} {tool:16} {m['seconds']:7.2f} s  peak RSS {m['rss'] >> 20} MiB{extra}",
                              file=sys.stderr, flush=True)
                        # Each measurement starts from an empty bucket (the server's volumes stay small).
                        subprocess.run(["aws", "--endpoint-url", w.endpoint, "s3", "rm", f"s3://{w.bucket}/{prefix}", "--recursive",
                                        "--only-show-errors"], env=env, capture_output=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sizes = {"small": f"{args.small} files of 4 KiB", "big": f"1 file of {args.big_mib} MiB"}
    print(f"\n{started}, {'downloads' if down else 'uploads'}, {args.rounds} rounds, {args.workers} workers, {os.cpu_count()} CPUs; medians\n")
    # Downloads: the CPU each used while it downloaded (the daemon's during the reads; a
    # command's user + system time), since on a small machine the server needs the same CPUs.
    cpu_col = " CPU s |" if down else ""
    print(f"| workload | tool | seconds | MB/s | peak RSS |{cpu_col} vs. rclone (rclone s ÷ this s) |")
    print("|---|---|---:|---:|---:|" + ("---:|" if down else "") + "---:|")
    for name in ("small", "big"):
        total = args.small * 4096 if name == "small" else args.big_mib << 20
        rclone = statistics.median(m["seconds"] for m in results[(name, "rclone")]) if (name, "rclone") in results else None
        for tool in tools_wanted:
            ms = results[(name, tool)]
            secs = statistics.median(m["seconds"] for m in ms)
            rss = max(m["rss"] for m in ms)
            label = tool + (" (last close → on server)" if tool == "docdrive mount" else
                            " (every file read through the mount, one after another)" if tool.startswith("docdrive on demand")
                            else "")
            ratio = f"{rclone / secs:.2f}×" if rclone else "-"
            cpu = ""
            if down:
                cpus = [m.get("daemon_cpu", m.get("cpu")) for m in ms]
                cpu = f" {statistics.median(cpus):.2f} |" if None not in cpus else " - |"
            print(f"| {sizes[name]} | {label} | {secs:.2f} | {total / secs / 1e6:.1f} | {rss / 1e6:.0f} MB |{cpu} {ratio} |")
            if tool == "docdrive mount":
                less = statistics.median(m["seconds"] - m["writeback"] for m in ms)
                cp = statistics.median(m["cp"] for m in ms)
                ratio = f"{rclone / less:.2f}×" if rclone else "-"
                print(f"| {sizes[name]} | … less the write-back delay ({ms[0]['writeback']:g} s) | {less:.2f} | {total / less / 1e6:.1f} "
                      f"| | {ratio} |")
                print(f"| {sizes[name]} | … `cp -r` into the mount (not in the above) | {cp:.2f} | {total / cp / 1e6:.1f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
