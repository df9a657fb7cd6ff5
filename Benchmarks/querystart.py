#!/usr/bin/env python3
"""Where a plain `docdrive query NAME` spends its time, against plocate, timed by a C harness
(spawntime.c: posix_spawn and wait, output to /dev/null) instead of Python's subprocess:

* `docdrive query zebra` (3 hits) and `plocate -i zebra` over the same 100,000 items (a tree in
  an app's Documents: local, so no uploads run; plocate's database freshly built by updatedb),
  in interleaved blocks;
* the `docdrive` front alone: the same command against a socket that answers at once
  (`spawntime serve`), beside `plocate --version` (plocate's start alone).

Usage: sudo Benchmarks/querystart.py [--items N] [--runs N] [--blocks B] [--docdrive PATH]
Root (it mounts); installs plocate with apt-get when it is missing; needs gcc.
Prints a Markdown table of medians (fastest, 90th percentile) per block.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import querybench as qb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--docdrive", default=str(HERE.parent / ".build" / "release" / "docdrive"))
    a = ap.parse_args()
    if not shutil.which("plocate"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-q", "plocate"], env=env, capture_output=True)
    for tool in ("plocate", "updatedb", "gcc"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (apt-get install plocate gcc)")
    base = Path(tempfile.mkdtemp(prefix="querystart-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    timer = base / "spawntime"
    subprocess.run(["gcc", "-O2", "-o", str(timer), str(HERE / "spawntime.c")], check=True)
    server = None
    d = qb.Drive(base / "drive", a.docdrive)
    rows = []
    try:
        d.home.parent.mkdir()
        d.create()
        docs = d.home / "containers" / "org.bench.notes" / "Documents"
        qb.make_tree(docs, a.items, random.Random(17))
        for i in range(3):
            (docs / "dir000" / "sub00" / f"Zebra quarterly-{i}.odt").write_text("z")
        d.mount()
        d.cli("query", "--in", "org.bench.notes", "--count")  # waits for the walk
        db = base / "plocate.db"
        subprocess.run(["updatedb", "-l", "0", "-U", str(docs), "-o", str(db)], check=True)
        fake = base / "fake-home"
        (fake / "run").mkdir(parents=True)
        server = subprocess.Popen([str(timer), "serve", str(fake / "run" / "control.sock")])

        def time_it(cmd, home):
            out = subprocess.run([str(timer), str(a.runs), *cmd], env=dict(os.environ, DOCDRIVE_HOME=str(home)),
                                 capture_output=True, text=True, check=True).stdout.split()
            return "{} ({}, {})".format(*out)

        cases = [("`docdrive query zebra`, mounted drive", [a.docdrive, "query", "zebra"], d.home),
                 ("`plocate -i zebra`, same tree", ["/usr/bin/plocate", "-d", str(db), "-i", "zebra"], d.home),
                 ("`docdrive query zebra`, a socket that answers at once (the front alone)", [a.docdrive, "query", "zebra"], fake),
                 ("`plocate --version` (its start alone)", ["/usr/bin/plocate", "--version"], d.home)]
        results = {name: [] for name, _, _ in cases}
        for _ in range(a.blocks):
            for name, cmd, home in cases:
                results[name].append(time_it(cmd, home))
        rows = [(name, *results[name]) for name, _, _ in cases]
    finally:
        if server:
            server.terminate()
            server.wait(timeout=10)
        d.unmount()
        shutil.rmtree(base, ignore_errors=True)
    print(f"| command ({a.runs} runs a block; ms: median (fastest, 90th percentile)) | " + " | ".join(f"block {i + 1}" for i in range(a.blocks)) + " |")
    print("|---|" + "---:|" * a.blocks)
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
