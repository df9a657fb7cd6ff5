#!/usr/bin/env python3
"""writers_ab_report.py AB.tsv: medians (ranges) per build and writer count of writers_ab.sh's output."""
import sys, statistics, collections
d=collections.defaultdict(list); cs=collections.defaultdict(list); cpu=collections.defaultdict(list); loads=[]
for line in open(sys.argv[1]):
    if line.startswith('#') or not line.strip(): continue
    f=line.rstrip('\n').split('\t')
    l,r,k,rate,load=f[:5]
    loads.append(float(load))
    try: d[(l,int(k))].append(float(rate))
    except: pass
    if len(f)>6: cs[(l,int(k))].append(int(f[5])); cpu[(l,int(k))].append(float(f[6]))
labels=sorted({l for l,_ in d})
for l in labels:
    print(l, "  ".join(f"w{k}: {statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f}, n={len(v)})" for (ll,k),v in sorted(d.items()) if ll==l))
    if cs: print("   daemon context switches per 1000 files:", "  ".join(f"w{k}: {statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" for (ll,k),v in sorted(cs.items()) if ll==l))
    if cpu: print("   daemon CPU µs per file:", "  ".join(f"w{k}: {statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" for (ll,k),v in sorted(cpu.items()) if ll==l))
print(f"load average (1 min) during the steps: median {statistics.median(loads):.1f}, {min(loads):.1f}-{max(loads):.1f}")
