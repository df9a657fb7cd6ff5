#!/usr/bin/env python3
"""`docdrive query` on a drive of 100,000 items (issue 17), in one run:

* a name query and a `kind: size>` query, timed end to end (the `docdrive query` process, the
  control socket, the daemon's SQLite search), against Debian's `plocate` over the same tree
  (its database freshly built by `updatedb` over the store's backing folder) and
  `docdrive --version` (the process alone), the four taking turns;
* how long `--watch` takes to print a file created through the mount;
* what the query index costs the mount's metadata work: create and unlink 10,000 files and
  `tar x` of /usr/include, with the index on and off (`DOCDRIVE_QUERY_INDEX=off`), alternated,
  with the CPU time of the index's own thread (`docdrive-query`) during each;
* what it costs in memory: the daemon's RSS after a fresh mount (query.sqlite deleted, so the
  walk inserts every row) and a listing of the tree through the mount, on and off.

Usage: sudo Benchmarks/querybench.py [--items N] [--rounds R] [--meta-rounds M] [--parts LIST] [--docdrive PATH] [--dir TMP]
Root (it mounts, drops caches); installs plocate with apt-get when it is missing; needs tar.
--parts: some of query,watch,meta,memory (default all). --meta-rounds M: M mounts with the index
on and M with it off, in the order on off off on on off ... (default 6 each). --parts pairs (alone):
the same workloads on two drives mounted at once, index on and off, in back-to-back pairs
(--pairs N, default 8): on this shared machine the mount-to-mount spread is wider than 5 %.
Prints a Markdown table; exits non-zero if a target is missed.
"""
import argparse
import os
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

EXTS = ["odt", "pdf", "txt", "md", "png", "jpg", "mp3", "mkv", "ods", "c", "h", "json", "zip", "svg", "docx"]
WORDS = ["report", "invoice", "photo", "holiday", "budget", "draft", "notes", "plan", "scan", "letter",
         "summary", "minutes", "design", "review", "backup", "track", "clip", "sheet", "memo", "thesis"]


def sh(*cmd, env=None, check=True, timeout=600):
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def make_tree(root: Path, n: int, rng: random.Random):
    """n items: folders of 100 entries, two levels deep, files with a few sizes (sparse)."""
    made = 0
    d = 0
    while made < n:
        folder = root / f"dir{d // 100:03d}" / f"sub{d % 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        made += 1
        for i in range(99):
            if made >= n:
                break
            name = f"{rng.choice(WORDS)} {rng.choice(WORDS)}-{d:04d}-{i:02d}.{rng.choice(EXTS)}"
            p = folder / name
            with open(p, "wb") as f:
                size = rng.choice([0, 100, 5000, 2_000_000]) if rng.random() < 0.2 else 0
                if size:
                    f.truncate(size)
            made += 1
        d += 1
    return made


def interleaved_ms(fns, rounds):
    """Median and fastest milliseconds of each function, the functions taking turns."""
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            samples[i].append((time.perf_counter() - t) * 1000)
    return [statistics.median(x) for x in samples], [min(x) for x in samples]


class Drive:
    def __init__(self, base: Path, bin: str):
        self.base = base
        self.home = base / "home"
        self.mnt = base / "mnt"
        self.bin = bin
        self.env = dict(os.environ, DOCDRIVE_HOME=str(self.home))

    def cli(self, *args, env=None, check=True, timeout=600):
        return sh(self.bin, *args, env=env or self.env, check=check, timeout=timeout)

    def create(self):
        self.cli("init")
        self.cli("app", "add", "org.bench.notes", "--name", "Notes", "--public")
        self.cli("store", "add", "work", "--name", "Work", "--folder", str(self.base / "remote"))
        self.mnt.mkdir(exist_ok=True)

    def mount(self, query_index=True):
        env = dict(self.env)
        if not query_index:
            env["DOCDRIVE_QUERY_INDEX"] = "off"
        self.cli("mount", str(self.mnt), env=env)

    def unmount(self):
        self.cli("unmount", str(self.mnt), check=False)

    @property
    def cache(self):
        return self.home / "stores" / "work" / "cache"


def drop_caches():
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3")
    except OSError:
        pass


def process_cpu(pid):
    """CPU seconds of the whole process (threads that ended included)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid, name="docdrive-query"):
    """CPU seconds of the daemon's threads called `name` (the query index's)."""
    total = 0.0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            if Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() == name:
                f = Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except FileNotFoundError:
            pass
    return total


def metadata_round(mnt: Path, tag: str, pid=None, top="Work"):
    """Seconds for: create 10,000 files, unlink them, tar x of /usr/include (then rm -rf); with
    `pid`, also the index thread's CPU seconds during each (its last batch included)."""
    d = mnt / top / f"meta-{tag}"
    d.mkdir()
    names = [str(d / f"f{i:06d}") for i in range(10000)]
    cpu, daemon_cpu = {}, {}

    def timed(key, fn):
        drop_caches()
        c = thread_cpu(pid) if pid else 0
        a = process_cpu(pid) if pid else 0
        t = time.perf_counter()
        fn()
        took = time.perf_counter() - t
        if pid:
            time.sleep(0.3)  # the index's batch after the last change (at most 80 ms)
            cpu[key] = thread_cpu(pid) - c
            daemon_cpu[key] = process_cpu(pid) - a
        return took

    create = timed("create", lambda: [os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)) for p in names])
    unlink = timed("unlink", lambda: [os.unlink(p) for p in names])
    tar = timed("tar", lambda: sh("tar", "xf", str(TARBALL), "-C", str(d)))
    shutil.rmtree(d)
    return {"create": 10000 / create, "unlink": 10000 / unlink, "tar": tar, "cpu": cpu, "daemon_cpu": daemon_cpu}


def daemon_pid(drive):
    import json
    return json.loads((drive.home / "run" / "mount.json").read_text())["pid"]


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def watch_latency(drive: Drive, rounds: int):
    word = f"watchbench{os.getpid()}"
    p = subprocess.Popen([drive.bin, "query", "--watch", word], env=drive.env, stdout=subprocess.PIPE)
    try:
        time.sleep(0.5)
        samples = []
        for i in range(rounds):
            path = drive.mnt / "Notes" / f"{word}-{i}.txt"
            t = time.perf_counter()
            with open(path, "w") as f:
                f.write("x")
            r, _, _ = select.select([p.stdout], [], [], 5)
            line = os.read(p.stdout.fileno(), 65536).decode() if r else ""
            samples.append((time.perf_counter() - t) * 1000 if line.startswith("+ ") else float("inf"))
            path.unlink()
            time.sleep(0.2)
            if select.select([p.stdout], [], [], 0.3)[0]:
                os.read(p.stdout.fileno(), 65536)  # the "- " line
        return statistics.median(samples), samples
    finally:
        p.terminate()
        p.wait(timeout=10)


def paired_meta(base: Path, bin: str, items: int, pairs: int, rows: list):
    """The index's cost measured in pairs: two drives with the same tree of `items` in an app's
    Documents (local: no uploads run meanwhile), one mounted with the index on and one with it
    off, both at once; each pair runs the metadata workloads on one and then the other (the order
    alternating), so both members of a pair see the machine in the same minute. Returns whether
    the median of the pairs' ratios is within 5 % for each workload."""
    drives = {}
    for mode in ("on", "off"):
        d = Drive(base / f"pair-{mode}", bin)
        d.home.parent.mkdir(exist_ok=True)
        d.create()
        make_tree(Path(d.home / "containers" / "org.bench.notes" / "Documents"), items, random.Random(17))
        d.mount(query_index=(mode == "on"))
        drives[mode] = d
    ok = True
    try:
        drives["on"].cli("query", "--in", "org.bench.notes", "--count")  # the walk is over
        res = {"on": [], "off": []}
        for r in range(pairs):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                d = drives[mode]
                m = metadata_round(d.mnt, f"p{r}", daemon_pid(d), top="Notes")
                res[mode].append(m)
                print(f"pair {r} {mode}: create {m['create']:,.0f}/s unlink {m['unlink']:,.0f}/s tar {m['tar']:.2f} s", file=sys.stderr)
        for k, unit in (("create", "files/s"), ("unlink", "files/s"), ("tar", "s")):
            on_all = [x[k] for x in res["on"]]
            off_all = [x[k] for x in res["off"]]
            ratios = [(a / b if k != "tar" else b / a) for a, b in zip(on_all, off_all)]
            ratio = statistics.median(ratios)
            ok &= ratio >= 0.95
            cpu = statistics.median(x["cpu"][k] for x in res["on"])
            # The whole daemon's CPU (every thread: FUSE requests, the index's): less noisy than
            # the wall clock on a shared machine.
            dcpu = {m: statistics.median(x["daemon_cpu"][k] for x in res[m]) for m in ("on", "off")}
            fmt = (lambda v: f"{v:,.0f}") if k != "tar" else (lambda v: f"{v:.2f}")
            rows.append((f"{k}, in pairs (an app's Documents, {items:,} items; {pairs} pairs; index thread's CPU {cpu:.2f} s; "
                         f"the daemon's CPU on {dcpu['on']:.2f} s / off {dcpu['off']:.2f} s)",
                         f"on {fmt(statistics.median(on_all))} / off {fmt(statistics.median(off_all))} {unit}",
                         f"pair ratios: median {ratio:.2f}×, {min(ratios):.2f}–{max(ratios):.2f}×", "≥ 0.95×"))
    finally:
        for d in drives.values():
            d.unmount()
    return ok


TARBALL = None


def main():
    global TARBALL
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--meta-rounds", type=int, default=6)
    ap.add_argument("--parts", default="query,watch,meta,memory")
    ap.add_argument("--pairs", type=int, default=8, help="pairs of the `pairs` part (not in the default parts)")
    ap.add_argument("--docdrive", default=str(REPO / ".build" / "release" / "docdrive"))
    ap.add_argument("--dir", default=None, help="a folder on the disk to measure (default: a temp folder in /var/tmp)")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if not shutil.which("plocate"):
        print("installing plocate with apt-get", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        if subprocess.run(["apt-get", "install", "-y", "-q", "plocate"], env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "-q", "plocate"], env=env, capture_output=True)
    for tool in ("plocate", "updatedb", "tar"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (apt-get install plocate tar)")
    base = Path(tempfile.mkdtemp(prefix="querybench-", dir=a.dir or "/var/tmp"))
    os.chmod(base, 0o755)
    TARBALL = base / "include.tar"
    sh("tar", "cf", str(TARBALL), "-C", "/usr", "include")
    drive = Drive(base, a.docdrive)
    rows = []
    ok = True
    if parts == {"pairs"}:
        try:
            ok = paired_meta(base, a.docdrive, a.items, a.pairs, rows)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print("| measure | docdrive | reference | target |")
        print("|---|---:|---:|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        sys.exit(0 if ok else 1)
    try:
        drive.create()
        rng = random.Random(17)
        t = time.perf_counter()
        n = make_tree(drive.cache, a.items, rng)
        print(f"tree of {n} items made in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        # A needle that exists a few times: one name made unique.
        needle_dir = drive.cache / "dir000" / "sub00"
        for i in range(3):
            (needle_dir / f"Zebra quarterly-{i}.odt").write_text("z")
        t = time.perf_counter()
        drive.mount()
        # Ready when the first walk is done: the count answers after it.
        count = int(drive.cli("query", "--in", "work", "--count").stdout)
        print(f"mounted and indexed {count} items in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        # The store uploads the files made in its backing folder: not while anything is measured.
        t = time.perf_counter()
        drive.cli("sync", "--timeout", "1800", timeout=1900)
        print(f"uploads done in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        if "query" in parts:
            db = base / "plocate.db"
            t = time.perf_counter()
            sh("updatedb", "-l", "0", "-U", str(drive.cache), "-o", str(db))
            print(f"updatedb over the same tree: {time.perf_counter() - t:.1f} s", file=sys.stderr)

            def dd_name():
                out = drive.cli("query", "zebra").stdout.splitlines()
                assert len(out) == 3, out

            def pl_name():
                out = sh("plocate", "-d", str(db), "-i", "zebra").stdout.splitlines()
                assert len(out) == 3, out

            def dd_kind_size():
                drive.cli("query", "kind:image", "size>1M")

            def dd_version():
                drive.cli("--version")

            for f in (dd_name, pl_name, dd_kind_size, dd_version):
                f()  # warm
            # Interleaved, one sample of each per round: the machine's load (other builds) then
            # weighs on every command alike.
            (dd_n, pl_n, dd_k, dd_v), spread = interleaved_ms((dd_name, pl_name, dd_kind_size, dd_version), a.rounds)
            hits = len(drive.cli("query", "kind:image", "size>1M").stdout.splitlines())
            ok &= dd_n <= 50 and dd_k <= 50 and dd_n <= pl_n
            rows.append((f"name query `zebra` (3 hits), whole command (median of {a.rounds}; fastest {spread[0]:.1f} ms)", f"{dd_n:.1f} ms",
                         f"plocate -i: {pl_n:.1f} ms (fastest {spread[1]:.1f})", "≤ 50 ms and ≤ plocate"))
            rows.append((f"`kind:image size>1M` ({hits} hits), whole command", f"{dd_k:.1f} ms", "—", "≤ 50 ms"))
            rows.append(("`docdrive --version` (the front, then the full program)", f"{dd_v:.1f} ms", "—", "—"))
        if "watch" in parts:
            w, samples = watch_latency(drive, 10)
            ok &= w <= 100
            rows.append(("`--watch`: create through the mount → `+` line", f"{w:.1f} ms", f"max {max(samples):.1f} ms", "≤ 100 ms"))
        drive.unmount()
        if "meta" in parts:
            # Metadata with the index on and off, alternated (on off, off on, ...: each mode goes
            # first equally often); the 100,000-item tree stays: realistic.
            res = {"on": [], "off": []}
            for r in range(a.meta_rounds):
                for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                    drive.mount(query_index=(mode == "on"))
                    if mode == "on":
                        # Steady state: the walk at mount (100,000 items, 2-3 s) is over (a query waits for it).
                        drive.cli("query", "--in", "work", "--count")
                    m = metadata_round(drive.mnt, f"{mode}{r}", daemon_pid(drive) if mode == "on" else None)
                    res[mode].append(m)
                    print(f"meta round {r} {mode}: create {m['create']:,.0f}/s unlink {m['unlink']:,.0f}/s tar {m['tar']:.2f} s",
                          file=sys.stderr)
                    drive.unmount()
            for k, unit in (("create", "files/s"), ("unlink", "files/s"), ("tar", "s")):
                on_all = [x[k] for x in res["on"]]
                off_all = [x[k] for x in res["off"]]
                on, off = statistics.median(on_all), statistics.median(off_all)
                ratio = on / off if k != "tar" else off / on
                ok &= ratio >= 0.95
                cpu = statistics.median(x["cpu"][k] for x in res["on"])
                fmt = (lambda v: f"{v:,.0f}") if k != "tar" else (lambda v: f"{v:.2f}")
                rows.append((f"{k}, index on / off (medians of {a.meta_rounds} mounts each; the index thread's CPU {cpu:.2f} s)",
                             f"{fmt(on)} ({fmt(min(on_all))}–{fmt(max(on_all))}) {unit}",
                             f"off: {fmt(off)} ({fmt(min(off_all))}–{fmt(max(off_all))}) {unit}: {ratio:.2f}×", "≥ 0.95×"))
        if "memory" in parts:
            # Memory, as fsbench measures it: a fresh mount, the tree listed through it at once (the
            # walk runs meanwhile), RSS once the walk is over.
            mem = {}
            for mode in ("on", "off"):
                for f in drive.home.glob("run/query.sqlite*"):
                    f.unlink()
                drop_caches()
                drive.mount(query_index=(mode == "on"))
                listed = sum(len(files) for _, _, files in os.walk(drive.mnt / "Work"))
                if mode == "on":
                    drive.cli("query", "zebra")  # waits for the walk
                time.sleep(1)
                mem[mode] = rss_mb(daemon_pid(drive))
                drive.unmount()
            ok &= mem["on"] - mem["off"] < 10
            rows.append((f"daemon RSS after a fresh mount and a listing of {listed:,} files", f"{mem['on']:.1f} MB", f"index off: {mem['off']:.1f} MB", "< 10 MB more"))
    finally:
        drive.unmount()
        shutil.rmtree(base, ignore_errors=True)
    print("| measure | docdrive | reference | target |")
    print("|---|---:|---:|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
