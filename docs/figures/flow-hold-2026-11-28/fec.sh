#!/bin/bash
# usage: fec.sh TAG SEED WORKLOAD-ARGS... -- TUNNEL-ARGS
tag=$1; seed=$2; shift 2
wl=(); while [ "$1" != "--" ] && [ -n "$1" ]; do wl+=("$1"); shift; done; shift
/work/main/target/release/hirt lab --profile starlink "${wl[@]}" --seed $seed --fec on --json --tunnel-args "$*" > /work/exp/q/$tag-s$seed.json 2>/dev/null
d=$(ls -td hirt-results/*/ | head -1)
python3 - /work/exp/q/$tag-s$seed.json "$d" <<'PY'
import json,sys,glob
d=json.load(open(sys.argv[1]))['summary']; f=d['details']['fec']; fs=d['details']['fec_stats']
line=f"{sys.argv[1].split('/')[-1]:24s} fec p50 {f['p50_ms']:.1f} p90 {f['p90_ms']:.1f} p99 {f['p99_ms']:.1f} p999 {f['p999_ms']:.1f} req {f['requests']} ovh {100*fs['overhead']:.1f}% rec {fs['recovered']} unrec {fs['unrecoverable']} skip {fs['order_skipped']}"
for g in glob.glob(sys.argv[2]+'/*-hirt-status.json'):
  for e in json.load(open(g)):
    s=e['status']['status']['streams'][0]
    line+=f" | {e['control'][-8:-5]} src {s['enc_packets_in']} rep {s['repairs_sent']} los {s['losses']} rd50 {s['recovery_delay_p50_us']/1e3:.1f} rd99 {s['recovery_delay_p99_us']/1e3:.1f} max {s['recovery_delay_max_us']/1e3:.1f}"
print(line)
PY
cp $d/*-fec-ms.txt /work/exp/q/$tag-s$seed-ms.txt 2>/dev/null
