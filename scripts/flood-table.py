#!/usr/bin/env python3
"""Min / median / max of `hirt lab --flood --json` reports, grouped by file name without the
run number (NAME-RUN.json). Usage: scripts/flood-table.py DIR"""
import json, pathlib, statistics, sys
from collections import defaultdict

groups = defaultdict(list)
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        continue
    name = f.stem.rsplit("-", 1)[0] if f.stem[-1].isdigit() and f.stem.count("-") >= 3 else f.stem
    groups[name].append(r)

def mmm(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    return " / ".join(fmt.format(v) for v in (min(vals), statistics.median(vals), max(vals)))

cols = [
    ("runs", lambda rs: str(len(rs))),
    ("flood arrived, kpps", lambda rs: mmm([r["flood"]["flood_arrived_pps"] / 1e3 for r in rs], "{:.1f}")),
    ("junk read by hirt, kpps", lambda rs: mmm([r["flood"]["junk_seen_pps"] / 1e3 for r in rs], "{:.1f}")),
    ("rcvbuf drops", lambda rs: mmm([r["flood"]["udp_rcvbuf_errors"] for r in rs], "{:.0f}")),
    ("paced ratio", lambda rs: mmm([r["paced"]["ratio"] for r in rs], "{:.3f}")),
    ("TCP Mbit/s no flood", lambda rs: mmm([r["tcp"]["baseline_mbps"] if r["tcp"] else None for r in rs], "{:.0f}")),
    ("TCP ratio", lambda rs: mmm([r["tcp"]["ratio"] if r["tcp"] else None for r in rs], "{:.3f}")),
    ("server CPU no flood / flood, s/s", lambda rs: mmm([r["baseline"]["server_cpu"] for r in rs], "{:.3f}") + " ; " + mmm([r["flood"]["server_cpu"] for r in rs], "{:.3f}")),
    ("CPU per junk, µs", lambda rs: mmm([r["cpu_per_junk_us"] for r in rs], "{:.2f}")),
    ("RSS growth in flood, kB", lambda rs: mmm([r["rss_after_kb"] - r["rss_before_kb"] for r in rs], "{:.0f}")),
]
print("| run | " + " | ".join(c for c, _ in cols) + " |")
print("|---|" + "---|" * len(cols))
for name, rs in groups.items():
    print(f"| {name} | " + " | ".join(f(rs) for _, f in cols) + " |")
