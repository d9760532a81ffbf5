#!/usr/bin/env python3
"""Summary of the SRv6 goal checks in dataplane/ (`hirt bench dataplane --goal-only-pps 60000
--deadline auto --json`, two tries per file; each variant alternated with main, whose runs
are main-a, main-b, main-c in the same order)."""
import glob, json, os, statistics as st
here = os.path.dirname(os.path.abspath(__file__))
for tag in ["main-a", "pps-samples", "main-b", "source-rate", "main-c", "source-gap"]:
    tries = []
    for f in sorted(glob.glob(os.path.join(here, "dataplane", f"{tag}-*.json"))):
        tries += json.load(open(f))
    it = sorted(100 * t["recovered_in_time_ratio"] for t in tries)
    ov = sorted(100 * t["overhead"] for t in tries)
    full = sum(1 for t in tries if t["recovered_in_time_ratio"] >= 1.0)
    print(f"| {tag} | {len(tries)} | {full} | {it[0]:.2f} / {st.median(it):.2f} / {it[-1]:.2f} | "
          f"{ov[0]:.2f} / {st.median(ov):.2f} / {ov[-1]:.2f} |")
