#!/usr/bin/env python3
"""measure.sh output -> markdown table (median of runs; throughput min/med/max)."""
import sys, statistics as st
rows, idle, order = {}, {}, []
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("# idle"):
        idle[f[2]] = (f[3].split("=")[1], f[4].split("=")[1], f[5]); continue
    if line.startswith("#") or len(f) < 14: continue
    k = (f[0], int(f[1]))
    if k not in rows: rows[k] = []; order.append(k)
    rows[k].append(f)
med = lambda xs: st.median(float(x) for x in xs)
print("| setting | flows | Gbit/s min/med/max | batch (wire frames per super-packet) | single-segment share | >=60 KB share | busy CPU s/GB | softirq s/GB | retrans (med) | ping under load ms | idle ping ms | idle TCP RR µs med/p99 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for k in order:
    r = rows[k]; g = sorted(float(x[3]) for x in r)
    col = lambda i: [x[i] for x in r]
    ip, rr1, rr2 = idle.get(k[0], ("?", "?", "?"))
    print(f"| {k[0]} | {k[1]} | {g[0]:.2f} / {st.median(g):.2f} / {g[-1]:.2f} | {med(col(7)):.1f} | {med(col(8)):.3f} | {med(col(9)):.3f} | {med(col(10)):.2f} | {med(col(11)):.2f} | {med(col(4)):.0f} | {med(col(13)):.3f} | {ip} | {rr1} / {rr2} |")
