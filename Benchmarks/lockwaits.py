#!/usr/bin/env python3
"""lockwaits.py OUTDIR...: for each writers_prof.sh output, the contended Mutex waits
(FUTEX_LOCK_PI calls) by lock address, named by their callers, as a Markdown table.
Needs perf and `swift demangle`."""
import sys, re, subprocess, collections
def name(callers):
    c = " ".join(callers)
    if "Passthrough" in c: return "Passthrough.nodes"
    if "LockTable" in c: return "LockTable.state"
    if "OpenFiles" in c: return "OpenFiles.state"
    if "RunningStores" in c or "UploadScheduler" in c or "SyncService" in c: return "SyncService (stores/noted)"
    if "ItemIndex" in c or "IndexRecorder" in c: return "ItemIndex"
    if any(x in c for x in ("lookup", "create", "getxattr", "insertOrFind", "InodeTable", "getattr", "release", "flush")): return "InodeTable"
    return "other: " + c[:60]
rows = {}
for d in sys.argv[1:]:
    txt = subprocess.run(f"perf script -i {d}/futex.data -F comm,tid,event,trace,ip,sym 2>/dev/null | swift demangle --simplified", shell=True, capture_output=True, text=True).stdout
    by = collections.defaultdict(collections.Counter)
    for block in txt.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines or "sys_enter_futex" not in lines[0]: continue
        op = int(re.search(r"op: 0x([0-9a-f]+)", lines[0]).group(1), 16) & 0x7f
        if op != 6: continue
        addr = re.search(r"uaddr: (0x[0-9a-f]+)", lines[0]).group(1)
        frames = [l.strip().split(None,1)[1] for l in lines[1:] if len(l.strip().split(None,1))>1]
        by[addr][frames[1] if len(frames) > 1 else "?"] += 1
    per = collections.Counter(); locks = collections.Counter()
    for addr, c in by.items():
        n = name(list(c)); per[n] += sum(c.values()); locks[n] += 1
    info = open(f"{d}/info").read()
    rate = re.findall(r"rate=([0-9.]+)", info)
    rows[d] = (per, locks, rate[0] if rate else "?", info.strip().splitlines()[-1])
names = sorted({n for per, _, _, _ in rows.values() for n in per}, key=lambda n: -sum(r[0][n] for r in rows.values()))
print("| lock | " + " | ".join(d.split("/")[-1] for d in rows) + " |")
for n in names:
    print(f"| {n} | " + " | ".join(f"{r[0][n]}" + (f" ({r[1][n]} locks)" if r[1][n] > 1 else "") for r in rows.values()) + " |")
print("| total | " + " | ".join(str(sum(r[0].values())) for r in rows.values()) + " |")
print("| files/s during the profile | " + " | ".join(r[2] for r in rows.values()) + " |")
print("| load | " + " | ".join(r[3] for r in rows.values()) + " |")
