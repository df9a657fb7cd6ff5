#!/usr/bin/env python3
"""fuselat.py: what each kind of FUSE request cost while a command ran, as the kernel saw it.

    sudo python3 Benchmarks/fuselat.py -- rm -rf /mnt/drive/Bench/tree
    sudo python3 Benchmarks/fuselat.py --perf-data /tmp/x.perf   # an earlier recording

Runs the command under `perf record` of the kernel's fuse:fuse_request_send and
fuse:fuse_request_end tracepoints (every FUSE mount of the machine, so keep the others
quiet), pairs each request's send with its end by its `unique`, and prints per opcode: how
many, the mean and median time from send to end (the daemon's work plus the round trip), and
their sum. The command's own time is printed too: the sum of the requests is the part of it
spent waiting for FUSE, less what overlapped. Needs root and perf.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

# The opcodes of <linux/fuse.h> that a mount sends in practice.
OPCODES = {
    1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK", 6: "SYMLINK", 8: "MKNOD",
    9: "MKDIR", 10: "UNLINK", 11: "RMDIR", 12: "RENAME", 13: "LINK", 14: "OPEN", 15: "READ",
    16: "WRITE", 17: "STATFS", 18: "RELEASE", 20: "FSYNC", 21: "SETXATTR", 22: "GETXATTR",
    23: "LISTXATTR", 24: "REMOVEXATTR", 25: "FLUSH", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR",
    30: "FSYNCDIR", 31: "GETLK", 32: "SETLK", 33: "SETLKW", 34: "ACCESS", 35: "CREATE", 36: "INTERRUPT",
    37: "BMAP", 39: "IOCTL", 40: "POLL", 42: "BATCH_FORGET", 43: "FALLOCATE", 44: "READDIRPLUS",
    45: "RENAME2", 46: "LSEEK", 47: "COPY_FILE_RANGE",
}
LINE = re.compile(r"\s(\d+\.\d+):\s+fuse:fuse_request_(send|end):.*?req (\d+)")
OPCODE = re.compile(r"opcode (\d+)")


def latencies(script_lines):
    sent, took = {}, collections.defaultdict(list)
    for line in script_lines:
        m = LINE.search(line)
        if not m:
            continue
        t, kind, req = float(m.group(1)), m.group(2), int(m.group(3))
        if kind == "send":
            op = OPCODE.search(line)
            sent[req] = (t, int(op.group(1)) if op else -1)
        elif req in sent:
            t0, op = sent.pop(req)
            took[op].append(t - t0)
    return took


def report(took):
    total = 0.0
    print(f"{'request':>14} {'count':>7} {'mean µs':>9} {'median µs':>10} {'sum s':>8}")
    for op, v in sorted(took.items(), key=lambda kv: -sum(kv[1])):
        v.sort()
        total += sum(v)
        print(f"{OPCODES.get(op, str(op)):>14} {len(v):>7} {1e6 * sum(v) / len(v):>9.1f} "
              f"{1e6 * v[len(v) // 2]:>10.1f} {sum(v):>8.3f}")
    print(f"{'all':>14} {sum(len(v) for v in took.values()):>7} {'':>9} {'':>10} {total:>8.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--perf-data", help="read this perf.data instead of running a command")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if bool(a.perf_data) == bool(cmd):
        ap.error("give a command after --, or --perf-data")
    data = a.perf_data
    if cmd:
        if os.geteuid() != 0:
            sys.exit("fuselat: needs root (perf on kernel tracepoints)")
        data = tempfile.mktemp(prefix="fuselat-", suffix=".perf")
        start = time.perf_counter()
        rc = subprocess.call(["perf", "record", "-q", "-a", "-o", data, "-e", "fuse:fuse_request_send",
                              "-e", "fuse:fuse_request_end", "--"] + cmd)
        print(f"command: exit {rc}, {time.perf_counter() - start:.3f} s (with perf's start and stop)")
    out = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fuselat: perf script failed: {out.stderr.strip()}")
    report(latencies(out.stdout.splitlines()))
    if cmd:
        os.unlink(data)


if __name__ == "__main__":
    main()
