#!/usr/bin/env python3
"""Helper for fsbench.sh: the timed metadata loops, fio result parsing, the
remote-upload wait, and the final report. Every timed subcommand prints one line
of `key=value` pairs on stdout; the shell script records them.

Used only by Benchmarks/fsbench.sh (same tool for every target)."""
import json
import os
import statistics
import subprocess
import sys
import time


def out(**kv):
    print(" ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def names(n, prefix="f"):
    return [f"{prefix}{i:06d}" for i in range(n)]


# --------------------------------------------------------------------- timed loops

def timed_loop(d, n, op):
    """Runs op(path) on n files of d and prints the seconds and the files per second."""
    n = int(n)
    paths = [os.path.join(d, x) for x in names(n)]
    t = time.perf_counter()
    for p in paths:
        op(p)
    el = time.perf_counter() - t
    out(seconds=f"{el:.6f}", rate=f"{n / el:.1f}")


def cmd_create(d, n):
    """Create n empty files in d with os.open/os.close."""
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL | os.O_CLOEXEC
    timed_loop(d, n, lambda p: os.close(os.open(p, flags, 0o644)))


def cmd_stat(d, n):
    timed_loop(d, n, os.lstat)


def cmd_unlink(d, n):
    timed_loop(d, n, os.unlink)


def cmd_smallfiles(d, n, size):
    """Write n files of `size` bytes (open, write, close each)."""
    n, size = int(n), int(size)
    buf = os.urandom(size)
    paths = [os.path.join(d, x) for x in names(n, "sf")]
    flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
    t = time.perf_counter()
    for p in paths:
        fd = os.open(p, flags, 0o644)
        os.write(fd, buf)
        os.close(fd)
    el = time.perf_counter() - t
    out(seconds=f"{el:.6f}", rate=f"{n / el:.1f}", lastclose=f"{time.time():.6f}")


def cmd_parallel(d, writers, n, size):
    """`writers` processes, each writing n files of `size` bytes (open, write, close each) in
    its own folder d/wK (made before the clock starts). They start together; the time is from
    the start to the last one's end. Prints the aggregate files per second."""
    writers, n, size = int(writers), int(n), int(size)
    buf = os.urandom(size)
    flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
    folders = [os.path.join(d, f"w{k}") for k in range(writers)]
    for f in folders:
        os.mkdir(f)
    go_r, go_w = os.pipe()
    pids = []
    for f in folders:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(go_w)
                paths = [os.path.join(f, x) for x in names(n, "pf")]
                os.read(go_r, 1)  # the start: the parent closes its end
                for p in paths:
                    fd = os.open(p, flags, 0o644)
                    os.write(fd, buf)
                    os.close(fd)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(go_r)
    time.sleep(0.2)  # every writer is waiting
    t = time.perf_counter()
    os.close(go_w)
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    el = time.perf_counter() - t
    if failed:
        print(f"{failed} of {writers} writers failed", file=sys.stderr)
        sys.exit(1)
    out(seconds=f"{el:.6f}", rate=f"{writers * n / el:.1f}", lastclose=f"{time.time():.6f}")


def cmd_time(*argv):
    """Time a command (argv; `sh -c` for pipelines). Prints seconds and its stdout's last line."""
    t = time.perf_counter()
    p = subprocess.run(list(argv), stdout=subprocess.PIPE)
    el = time.perf_counter() - t
    last = p.stdout.decode(errors="replace").strip().splitlines()
    last = last[-1].split()[0] if last and last[-1].split() else ""
    out(seconds=f"{el:.6f}", rc=p.returncode, result=last or "-")
    sys.exit(p.returncode)


def cmd_mktree(d, n, per_dir="1000"):
    """A tree of n empty files, per_dir files per sub-folder (untimed setup, but reported)."""
    n, per_dir = int(n), int(per_dir)
    flags = os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC
    t = time.perf_counter()
    os.makedirs(d, exist_ok=True)
    made = 0
    k = 0
    while made < n:
        sub = os.path.join(d, f"d{k:04d}")
        os.mkdir(sub)
        for i in range(min(per_dir, n - made)):
            os.close(os.open(os.path.join(sub, f"f{i:05d}"), flags, 0o644))
        made += min(per_dir, n - made)
        k += 1
    el = time.perf_counter() - t
    out(seconds=f"{el:.6f}", rate=f"{n / el:.1f}")


def cmd_walk(d):
    """List a tree the way `ls -lR` does without the xattr calls: readdir + lstat of every entry."""
    t = time.perf_counter()
    count = 0
    stack = [d]
    try:
        while stack:
            cur = stack.pop()
            with os.scandir(cur) as it:
                for e in it:
                    st = os.lstat(e.path)
                    count += 1
                    if (st.st_mode & 0o170000) == 0o040000:
                        stack.append(e.path)
    except OSError as e:
        el = time.perf_counter() - t
        out(status="failed", seconds=f"{el:.6f}", count=count, error=(e.strerror or str(e)).replace(" ", "_"))
        return
    el = time.perf_counter() - t
    out(status="ok", seconds=f"{el:.6f}", count=count)


# --------------------------------------------------------------------- fio / remote / memory

def cmd_fio(path, ddir, metric):
    """Read fio's JSON output; metric: mbps (10^6 bytes/s) or iops."""
    text = open(path, encoding="utf-8", errors="replace").read()
    j = json.loads(text[text.index("{"):])
    job = j["jobs"][0]
    if job.get("error"):
        print(f"fio job error {job['error']}", file=sys.stderr)
        sys.exit(1)
    s = job[ddir]
    if metric == "mbps":
        print(f"{s['bw_bytes'] / 1e6:.1f}")
    else:
        print(f"{s['iops']:.1f}")


def cmd_waitremote(remote, n, size, lastclose, idle, cap):
    """Wait until n files named sfNNNNNN of `size` bytes are anywhere under `remote`.
    Gives up after `idle` seconds without progress or `cap` seconds in all."""
    n, size, lastclose, idle, cap = int(n), int(size), float(lastclose), float(idle), float(cap)
    want = set(names(n, "sf"))
    start = time.time()
    last_progress = start
    best = 0
    while True:
        seen = set()
        for root, _dirs, files in os.walk(remote):
            for f in files:
                if f in want:
                    try:
                        if os.path.getsize(os.path.join(root, f)) == size:
                            seen.add(f)
                    except OSError:
                        pass
        now = time.time()
        if len(seen) >= n:
            out(status="ok", seconds=f"{now - lastclose:.3f}", count=len(seen))
            return
        if len(seen) > best:
            best, last_progress = len(seen), now
        if now - last_progress > idle or now - start > cap:
            out(status="none" if best == 0 else "incomplete", seconds=f"{now - lastclose:.3f}", count=best)
            return
        time.sleep(0.1)


def cmd_mem(pid):
    """VmHWM and VmRSS of a process, in MB (10^6 bytes)."""
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                vals[k] = int(v.split()[0]) * 1024 / 1e6
    out(hwm=f"{vals.get('VmHWM', 0):.1f}", rss=f"{vals.get('VmRSS', 0):.1f}")


def cmd_mountpid(path):
    print(json.load(open(path))["pid"])


# --------------------------------------------------------------------- report

# workload key -> (label, unit, direction); direction "up" = higher is better.
ROWS = [
    ("seq_write", "sequential write {seq} (bs 1 MiB, fsync at end)", "MB/s", "up"),
    ("seq_read", "sequential read {seq}, cold", "MB/s", "up"),
    ("seq_write_4k", "sequential write {rand} in 4 KiB writes (fsync at end)", "MB/s", "up"),
    ("rand_cold", "4 KiB random read, {rand} file, cold", "IOPS", "up"),
    ("rand_warm", "4 KiB random read, {rand} file, warm", "IOPS", "up"),
    ("meta_create", "create {meta} empty files", "files/s", "up"),
    ("meta_create_cpu", "daemon CPU per created file (utime+stime over the create step)", "µs", "down"),
    ("meta_stat", "stat {meta} files (dentries+inodes dropped)", "files/s", "up"),
    ("meta_stat_warm", "stat {meta} files again, 2 s later (warm)", "files/s", "up"),
    ("meta_readdir", "readdir {meta} files (ls -f \\| wc -l)", "files/s", "up"),
    ("meta_readdir_warm", "readdir {meta} files, warm (ls -f \\| wc -l, 10 in a row)", "files/s", "up"),
    ("meta_unlink", "unlink {meta} files", "files/s", "up"),
    ("tree_tarx", "tar x {tree}", "s", "down"),
    ("tree_du", "du -s of the tree (dentries+inodes dropped)", "s", "down"),
    ("tree_rm", "rm -rf of the tree", "s", "down"),
    ("small_write", "write+close {small} files of 4 KiB", "files/s", "up"),
    ("par_w1", "{small} × 4 KiB write+close, 1 writer", "files/s", "up"),
    ("par_w2", "2 writers in parallel, {small} × 4 KiB each, own folders (aggregate)", "files/s", "up"),
    ("par_w4", "4 writers in parallel, {small} × 4 KiB each (aggregate)", "files/s", "up"),
    ("par_w8", "8 writers in parallel, {small} × 4 KiB each (aggregate)", "files/s", "up"),
    ("small_upload", "last close -> all {small} on the remote", "s", "down"),
    ("list_walk", "list a {list}-file tree (readdir+lstat, fresh mount, 1 sample)", "s", "down"),
    ("mem_hwm", "daemon peak RSS during the run (VmHWM)", "MB", "down"),
    ("mem_list", "daemon RSS after listing {list} files (VmRSS)", "MB", "down"),
]

TARGETS = ["native", "mergerfs", "docdrive"]

# Targets from the issue: (workload, against, min speed ratio), or a memory cap.
GOALS = [
    ("seq_write", "native", 0.95), ("seq_read", "native", 0.95), ("rand_warm", "native", 0.9),
    ("meta_create", "mergerfs", 1.0), ("meta_stat", "mergerfs", 1.0), ("meta_readdir", "mergerfs", 1.0),
    ("meta_readdir_warm", "mergerfs", 2.5),  # issue 19
    ("meta_unlink", "mergerfs", 1.0), ("tree_tarx", "mergerfs", 1.0), ("tree_rm", "mergerfs", 1.0),
    ("small_write", "mergerfs", 1.0),
]


def fmt(v):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def speed_ratio(dd, other, direction):
    if not isinstance(dd, (int, float)) or not isinstance(other, (int, float)) or dd <= 0 or other <= 0:
        return None
    return dd / other if direction == "up" else other / dd


def cmd_report(raw_path, meta_path, md_path, json_path):
    meta = json.load(open(meta_path))
    raw = {}  # (workload, target) -> [values]; values may be strings (n/a)
    notes = {}
    for line in open(raw_path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 4:
            continue
        w, t, r, v = parts[:4]
        try:
            val = float(v)
        except ValueError:
            val = v
        raw.setdefault((w, t), []).append((int(r), val))
    sizes = meta["sizes"]
    table = []
    for key, label, unit, direction in ROWS:
        label = label.format(**sizes)
        row = {"workload": key, "label": label, "unit": unit, "better": "higher" if direction == "up" else "lower"}
        med = {}
        for t in TARGETS:
            vals = [v for _, v in raw.get((key, t), [])]
            nums = [v for v in vals if isinstance(v, float)]
            if nums and len(nums) == len(vals):
                med[t] = statistics.median(nums)
            elif vals:
                med[t] = vals[-1]  # a text result (n/a ...)
            else:
                med[t] = None
            row[t] = med[t]
            row[f"{t}_raw"] = vals
        if key.startswith("mem_"):
            row["docdrive/native"] = None
            m = med.get("mergerfs")
            d = med.get("docdrive")
            row["docdrive/mergerfs"] = d / m if isinstance(d, float) and isinstance(m, float) and m > 0 else None
        else:
            row["docdrive/native"] = speed_ratio(med["docdrive"], med["native"], direction)
            row["docdrive/mergerfs"] = speed_ratio(med["docdrive"], med["mergerfs"], direction)
        if all(med[t] is None for t in TARGETS):
            continue
        table.append(row)

    def ratio_s(x):
        return "—" if x is None else f"{x:.2f}×"

    lines = []
    lines.append(f"# fsbench — {meta['mode']} run, {meta['rounds']} rounds, {meta['date']}")
    lines.append("")
    lines.append(f"Host: {meta['host']}; kernel {meta['kernel']}; {meta['cpus']} CPUs; disk of {meta['dir']}: {meta['disk']}.")
    lines.append(f"DocDrive: {meta['docdrive']}, its requests through {meta.get('transport', '/dev/fuse')}; mergerfs: {meta['mergerfs']}; fio: {meta['fio']}.")
    lines.append(f"Runtime of the benchmark (without the build): {meta.get('runtime', '?')} s."
                 + ("" if meta.get("drop_caches_ok", True) else " **WARNING: dropping caches failed; the cold numbers are not cold.**"))
    lines.append("")
    lines.append("| workload | unit | native | mergerfs | docdrive | docdrive/native | docdrive/mergerfs |")
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    for row in table:
        lines.append(f"| {row['label']} | {row['unit']} | {fmt(row['native'])} | {fmt(row['mergerfs'])} | "
                     f"{fmt(row['docdrive'])} | {ratio_s(row['docdrive/native'])} | {ratio_s(row['docdrive/mergerfs'])} |")
    lines.append("")
    lines.append("Values are medians over the rounds. Ratios compare speed, so above 1 means DocDrive is faster: "
                 "for MB/s, IOPS and files/s they are docdrive/other; for rows in seconds they are other/docdrive. "
                 "Memory rows are plain docdrive/mergerfs (lower is better).")
    lines.append("")
    lines.append("## Targets")
    lines.append("")
    byk = {r["workload"]: r for r in table}
    for key, against, goal in GOALS:
        r = byk.get(key)
        if not r:
            continue
        x = r[f"docdrive/{against}"]
        ok = x is not None and x >= goal
        lines.append(f"- {'PASS' if ok else 'FAIL'}: {r['label']}: {ratio_s(x)} {against} (target ≥ {goal}×)")
    par = [byk.get(f"par_w{k}", {}).get("docdrive") for k in (1, 2, 4, 8)]
    if all(isinstance(v, float) for v in par):
        ok = all(b >= a for a, b in zip(par, par[1:]))
        lines.append(f"- {'PASS' if ok else 'FAIL'}: parallel writers, aggregate files/s never falls from 1 to 2, 4, 8 "
                     f"writers ({', '.join(fmt(v) for v in par)})")
        ok = par[3] >= 2 * par[0]
        lines.append(f"- {'PASS' if ok else 'FAIL'}: 8 writers at least 2× one writer ({par[3] / par[0]:.2f}×)")
    r = byk.get("mem_list")
    if r:
        d = r["docdrive"]
        ok = isinstance(d, float) and d < 150
        lines.append(f"- {'PASS' if ok else 'FAIL'}: {r['label']}: {fmt(d)} MB (target < 150 MB)")
    lines.append("")
    lines.append("## Raw numbers (per round, in run order)")
    lines.append("")
    lines.append("| workload | unit | native | mergerfs | docdrive |")
    lines.append("|---|---|---|---|---|")
    for row in table:
        cells = [", ".join(fmt(v) for v in row[f"{t}_raw"]) or "—" for t in TARGETS]
        lines.append(f"| {row['workload']} | {row['unit']} | {cells[0]} | {cells[1]} | {cells[2]} |")
    if meta.get("notes"):
        lines.append("")
        lines.append("## Notes")
        lines.append("")
        for n in meta["notes"]:
            lines.append(f"- {n}")
    md = "\n".join(lines) + "\n"
    with open(md_path, "w") as f:
        f.write(md)
    with open(json_path, "w") as f:
        json.dump({"meta": meta, "rows": table}, f, indent=2, default=str)
    print(md)


COMMANDS = {
    "create": cmd_create, "stat": cmd_stat, "unlink": cmd_unlink, "smallfiles": cmd_smallfiles,
    "time": cmd_time, "parallel": cmd_parallel, "mktree": cmd_mktree, "walk": cmd_walk, "fio": cmd_fio,
    "waitremote": cmd_waitremote, "mem": cmd_mem, "mountpid": cmd_mountpid, "report": cmd_report,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: fsbench.py {{{'|'.join(COMMANDS)}}} ARGS...", file=sys.stderr)
        sys.exit(64)
    args = sys.argv[2:]
    if sys.argv[1] == "time" and args and args[0] == "--":
        args = args[1:]
    COMMANDS[sys.argv[1]](*args)
