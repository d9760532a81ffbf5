#!/usr/bin/env python3
# summ.py MODE...: per run, no-FEC and FEC p50 / p99 of the 1 MB x 16 runs json/MODE-rR-sS.json,
# and the request times of each mode pooled over its runs (ms/MODE-rR-sS-{no-fec,fec}.txt.gz)
import glob, gzip, json, sys

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]

for mode in sys.argv[1:]:
    for path in sorted(glob.glob(f'json/{mode}-r?-s?.json')):
        d = json.load(open(path))['summary']['details']
        b, f, fs = d['baseline'], d['fec'], d['fec_stats']
        r, s = path.rsplit('/', 1)[1][len(mode) + 1:].split('.')[0].split('-')
        print(f"| {mode} | {r} {s} | {b['p50_ms']:.0f} / {b['p99_ms']:.0f} | {f['p50_ms']:.0f} / {f['p99_ms']:.0f} "
              f"| {100*(f['p50_ms']/b['p50_ms']-1):+.1f} / {100*(f['p99_ms']/b['p99_ms']-1):+.1f} % "
              f"| {b['goodput_mbps']:.1f} / {f['goodput_mbps']:.1f} | {d['baseline_link']['queue_drops']} / {d['fec_link']['queue_drops']} "
              f"| {fs['aqm_drops']} / {fs.get('aqm_marks', 0)} | {d['baseline_link']['host']['tcp_timeouts']} / {d['fec_link']['host']['tcp_timeouts']} "
              f"| {fs['unrecoverable']} | {100*fs['overhead']:.1f} % |")
    for kind in ('no-fec', 'fec'):
        v = []
        for path in sorted(glob.glob(f'ms/{mode}-r?-s?-{kind}.txt.gz')):
            v.extend(float(x) for x in gzip.open(path, 'rt').read().split())
        if v:
            print(f'{mode} {kind}: {len(v)} requests, p50 {q(v, .5):.0f}, p90 {q(v, .9):.0f}, p99 {q(v, .99):.0f} ms')
