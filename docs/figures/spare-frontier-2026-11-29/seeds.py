#!/usr/bin/env python3
"""Per loss point of the 2 RTT design point over the seed offsets in seeds/ (each file the
output of `scripts/deadline-grid.py 10000 25ms --seed-offset K --out seeds/soK.json`): runs that
meet both targets, runs >= 99.9 % in time, runs within the overhead limit, in time min /
median, overhead as a ratio to the limit min / median / max."""
import glob, json, os, statistics as st
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))
files = sorted(glob.glob(os.path.join(here, "seeds", "so*.json")))
by, order = defaultdict(list), []
for f in files:
    for r in json.load(open(f)):
        if r[0] not in by:
            order.append(r[0])
        by[r[0]].append(r)
print("| loss point | meet both | >= 99.9 % in time | overhead <= limit | in time %, min / median | overhead / limit, min / median / max |")
print("|---|---|---|---|---|---|")
tot = [0, 0, 0, 0]
for k in order:
    x = by[k]
    both = sum(r[5] for r in x)
    it = sum(r[2] >= 0.999 for r in x)
    ov = sum(r[3] <= r[4] for r in x)
    its = sorted(100 * r[2] for r in x)
    rat = sorted(r[3] / r[4] for r in x)
    tot = [tot[0] + both, tot[1] + it, tot[2] + ov, tot[3] + len(x)]
    print(f"| {k} | {both} / {len(x)} | {it} | {ov} | {its[0]:.2f} / {st.median(its):.2f} | "
          f"{rat[0]:.2f} / {st.median(rat):.2f} / {rat[-1]:.2f} |")
print(f"| all | {tot[0]} / {tot[3]} | {tot[1]} | {tot[2]} | | |")
