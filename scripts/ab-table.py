#!/usr/bin/env python3
"""Table of an A/B dataplane benchmark (scripts/ab-bench.sh): min / median / max of every
capacity and latency figure for binary A and binary B, and the ratio of the medians B/A."""
import glob
import json
import statistics
import sys


def figures(path):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):  # a run still in progress, or one that failed
        return {}
    f = {}
    if "runs" in d and "latency" in d:  # hirt bench dataplane
        for r in d["runs"]:
            f[f"capacity {r['name']} (Mpps)"] = r["mpps"]
            if r.get("hirt_cpu_us_per_packet"):
                f[f"hirt CPU {r['name']} (us/packet)"] = r["hirt_cpu_us_per_packet"]
        for r in d["latency"]:
            f[f"latency p50 {r['name']} @{r['pps'] // 1000}k (us)"] = r["p50_us"]
            f[f"latency p99 {r['name']} @{r['pps'] // 1000}k (us)"] = r["p99_us"]
        s = d["summary"]
        f["goal 3% recovered ratio"] = s.get("goal_3pct_recovered_ratio")
    else:  # hirt bench udp
        s = d["summary"]
        for k in ("gbps_no_tunnel", "gbps", "gbps_no_offload", "gbps_per_hirt_core",
                  "gbps_per_hirt_core_no_offload"):
            f[f"udp {k}"] = s[k]
    return {k: v for k, v in f.items() if v is not None}


def main(out):
    rows = {}
    for side in ("a", "b"):
        for path in sorted(glob.glob(f"{out}/*-{side}-*.json")):
            for k, v in figures(path).items():
                rows.setdefault(k, {"a": [], "b": []})[side].append(v)
    print("| figure | A min / median / max | B min / median / max | B/A (medians) |")
    print("|---|---|---|---|")
    for k, v in rows.items():
        if not v["a"] or not v["b"]:
            continue
        fmt = lambda xs: " / ".join(f"{x:.4g}" for x in (min(xs), statistics.median(xs), max(xs)))
        ma, mb = statistics.median(v["a"]), statistics.median(v["b"])
        ratio = f"{mb / ma:.3f}" if ma else "-"
        print(f"| {k} | {fmt(v['a'])} | {fmt(v['b'])} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/ab-bench")
