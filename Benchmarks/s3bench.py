#!/usr/bin/env python3
"""S3 upload benchmark: DocDrive's S3 remote (`docdrive internal s3-copy`, the code the upload
workers run) against `rclone copy` and `aws s3 cp --recursive`, on one SeaweedFS on loopback
(Tests/s3/weed.py), same run, interleaved, each run into a fresh prefix.

Workloads: 2,000 files of 4 KiB, and one file of 1 GiB (sizes can be made smaller for a quick
look). Each tool gets the same parallelism: `--workers N` files at once (rclone --transfers N,
aws cli max_concurrent_requests N), parts of 16 MiB, 4 parts at once for DocDrive and rclone.
Time is wall time of the whole command; memory is the process's peak RSS (GNU time).

    python3 Benchmarks/s3bench.py [--rounds 2] [--small 2000] [--big-mib 1024] [--workers 4]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "s3"))
from weed import Weed  # noqa: E402


def run(cmd, env) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in bytes, and output of one command (which must succeed)."""
    # GNU time reports the command's own peak (a forked child's rusage would count the pages
    # it shared with this Python before exec).
    start = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS-KB %M", *cmd], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
    rss = [int(l.split()[1]) for l in p.stderr.splitlines() if l.startswith("MAXRSS-KB ")][-1] * 1024
    return seconds, rss, p.stdout


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bin", default=str(REPO / ".build" / "release" / "docdrive"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="docdrive-s3bench-"))
    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    try:
        small, big = make_data(base, args.small, args.big_mib)
        with Weed(base / "weed") as w:
            env = w.env()
            cfg = base / "aws-config"
            cfg.write_text(f"[default]\ns3 =\n  max_concurrent_requests = {args.workers}\n  multipart_threshold = 16MB\n"
                           f"  multipart_chunksize = 16MB\n")
            env["AWS_CONFIG_FILE"] = str(cfg)
            # rclone reads its S3 keys from RCLONE_S3_*, and its AWS SDK refuses a CA bundle
            # variable on a plain-HTTP endpoint.
            rclone_env = {k: v for k, v in env.items() if k != "AWS_CA_BUNDLE"}
            rclone_env.update(RCLONE_S3_ACCESS_KEY_ID=env["AWS_ACCESS_KEY_ID"], RCLONE_S3_SECRET_ACCESS_KEY=env["AWS_SECRET_ACCESS_KEY"])
            n = 0

            def tools(src: Path, prefix: str):
                return {
                    "docdrive": [args.bin, "internal", "s3-copy", "--endpoint", w.endpoint, "--bucket", w.bucket, "--prefix", prefix,
                                 "--path-style", "--workers", str(args.workers), str(src)],
                    "rclone": ["rclone", "copy", str(src), f":s3:{w.bucket}/{prefix}", "--s3-provider", "Other",
                               "--s3-endpoint", w.endpoint, "--s3-force-path-style", "--s3-region", "us-east-1",
                               "--transfers", str(args.workers), "--s3-chunk-size", "16M", "--s3-upload-cutoff", "16M",
                               "--s3-upload-concurrency", "4", "--no-check-dest", "--s3-no-check-bucket", "-q"],
                    "aws s3 cp": ["aws", "--endpoint-url", w.endpoint, "s3", "cp", str(src), f"s3://{w.bucket}/{prefix}", "--recursive",
                                  "--only-show-errors"],
                }

            # A first request wakes the server up (its first answers are slow) before any is measured.
            run(tools(small, "warm-up")["aws s3 cp"], env)
            order = ["docdrive", "rclone", "aws s3 cp"]
            for r in range(args.rounds):
                for name, src in (("small", small), ("big", big)):
                    for tool in order[r % 3:] + order[:r % 3]:  # each round starts with another tool
                        n += 1
                        seconds, rss, _ = run(tools(src, f"bench-{n}")[tool], rclone_env if tool == "rclone" else env)
                        results.setdefault((name, tool), []).append((seconds, rss))
                        print(f"round {r + 1} {name:5} {tool:10} {seconds:7.2f} s  peak RSS {rss >> 20} MiB", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sizes = {"small": f"{args.small} files of 4 KiB", "big": f"1 file of {args.big_mib} MiB"}
    print(f"\n| workload | tool | seconds (median of {args.rounds}) | MB/s | peak RSS | DocDrive vs. this |")
    print("|---|---|---|---|---|---|")
    for name in ("small", "big"):
        total = args.small * 4096 if name == "small" else args.big_mib << 20
        dd = statistics.median(s for s, _ in results[(name, "docdrive")])
        for tool in ("docdrive", "rclone", "aws s3 cp"):
            secs = statistics.median(s for s, _ in results[(name, tool)])
            rss = max(m for _, m in results[(name, tool)])
            print(f"| {sizes[name]} | {tool} | {secs:.2f} | {total / secs / 1e6:.1f} | {rss >> 20} MiB | {secs / dd:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
